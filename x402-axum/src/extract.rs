use axum::body::Bytes;
use axum_core::{
    body::Body,
    extract::{FromRequestParts, OptionalFromRequestParts},
    response::{IntoResponse, Response},
};
use http::{request::Parts, StatusCode};
use x402_core::{
    meter::Meter,
    rejection::{self, require_meter, require_payment, Rejection},
    VerifiedPayment,
};

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

/// The rejection of [`Payment`] and [`UsageMeter`]: no verified payment on
/// the request.
///
/// A 500 (a server misconfiguration, never the client's fault) whose body
/// says what to check. Status, reason (`missing_paywall`) and body are
/// [`x402_core::rejection::MissingPaywall`]'s, so `x402-actix` answers the
/// same; this type only renders them as an axum response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingPaywall;

impl MissingPaywall {
    /// The framework-neutral rejection this renders.
    pub fn rejection(self) -> rejection::MissingPaywall {
        rejection::MissingPaywall::new()
    }
}

impl From<rejection::MissingPaywall> for MissingPaywall {
    fn from(_: rejection::MissingPaywall) -> Self {
        Self
    }
}

impl std::fmt::Display for MissingPaywall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.rejection().fmt(f)
    }
}

impl std::error::Error for MissingPaywall {}

impl Rejection for MissingPaywall {
    fn status(&self) -> StatusCode {
        self.rejection().status()
    }

    fn reason(&self) -> &'static str {
        self.rejection().reason()
    }

    fn body(&self) -> Bytes {
        self.rejection().body()
    }
}

impl IntoResponse for MissingPaywall {
    fn into_response(self) -> Response {
        render(&self.rejection())
    }
}

/// A core rejection as an axum response: its status, headers and body, as
/// they are.
pub(crate) fn render(rejection: &impl Rejection) -> Response {
    rejection.response().map(Body::from)
}

impl<S: Send + Sync> FromRequestParts<S> for Payment {
    type Rejection = MissingPaywall;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        require_payment(parts.extensions.get::<VerifiedPayment>())
            .map(Payment)
            .map_err(MissingPaywall::from)
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
/// Rejects with [`MissingPaywall`] (500) when the request carries no
/// verified `upto` payment.
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
        require_meter(parts.extensions.get::<VerifiedPayment>())
            .map(UsageMeter)
            .map_err(MissingPaywall::from)
    }
}
