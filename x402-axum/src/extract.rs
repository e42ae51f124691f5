use axum_core::{
    extract::{FromRequestParts, OptionalFromRequestParts},
    response::{IntoResponse, Response},
};
use http::{request::Parts, StatusCode};
use x402_core::{meter::Meter, VerifiedPayment};

/// Extracts the payment the paywall verified for this request.
///
/// Rejects with [`MissingPaywall`] (500) when no paywall layer verified a
/// payment for the request: the route is not behind [`PaywallLayer`](crate::PaywallLayer),
/// or the engine's route table does not list it. Use `Option<Payment>` on
/// routes that are sometimes free.
#[derive(Debug, Clone, PartialEq)]
pub struct Payment(pub VerifiedPayment);

/// `Option<Payment>` under another name, for handlers that prefer it.
pub type OptionalPayment = Option<Payment>;

/// The rejection of [`Payment`]: no verified payment on the request.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct MissingPaywall;

impl std::fmt::Display for MissingPaywall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no verified x402 payment on this request: is the route behind x402_axum::PaywallLayer, \
             and does the engine's route table list it?",
        )
    }
}

impl std::error::Error for MissingPaywall {}

impl IntoResponse for MissingPaywall {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Payment {
    type Rejection = MissingPaywall;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<VerifiedPayment>()
            .cloned()
            .map(Payment)
            .ok_or(MissingPaywall)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for Payment {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<VerifiedPayment>()
            .cloned()
            .map(Payment))
    }
}

/// Extracts the usage meter of an `upto` route, where the handler reports
/// what the call cost (see [`x402_core::meter`]).
///
/// Rejects with [`MissingPaywall`] when the request carries no verified
/// `upto` payment.
///
/// ```
/// use x402_axum::UsageMeter;
///
/// async fn completion(UsageMeter(meter): UsageMeter) -> &'static str {
///     meter.add(740u64); // atomic units used by this call
///     "done"
/// }
/// ```
#[derive(Debug, Clone)]
pub struct UsageMeter(pub Meter);

impl<S: Send + Sync> FromRequestParts<S> for UsageMeter {
    type Rejection = MissingPaywall;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<VerifiedPayment>()
            .and_then(|p| p.meter.clone())
            .map(UsageMeter)
            .ok_or(MissingPaywall)
    }
}
