//! The [`Payment`] extractor.

use std::{
    fmt,
    future::{ready, Ready},
    ops::Deref,
};

use actix_web::{
    body::BoxBody, dev::Payload, http::StatusCode, web::Bytes, FromRequest, HttpMessage,
    HttpRequest, HttpResponse, ResponseError,
};
use x402_core::{
    meter::Meter,
    rejection::{self, require_meter, require_payment, Rejection},
    VerifiedPayment,
};

/// Extracts the payment [`PaywallLayer`](crate::PaywallLayer) verified for
/// this request.
///
/// Fails with [`MissingPaywall`] (500) when no payment was verified for the
/// request: the route is not wrapped in the middleware, or the engine's route
/// table does not list it. Use `Option<Payment>` on routes that are sometimes
/// free (a dynamic price that waives the charge, say); it is `None` there.
///
/// ```
/// use actix_web::HttpResponse;
/// use x402_actix::Payment;
///
/// async fn report(Payment(payment): Payment) -> HttpResponse {
///     HttpResponse::Ok().body(format!("{} paid on {}", payment.amount, payment.network))
/// }
///
/// async fn maybe_paid(payment: Option<Payment>) -> HttpResponse {
///     match payment {
///         Some(payment) => HttpResponse::Ok().body(format!("thanks, {:?}", payment.payer)),
///         None => HttpResponse::Ok().body("free today"),
///     }
/// }
/// # let _ = (actix_web::web::to(report), actix_web::web::to(maybe_paid));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Payment(pub VerifiedPayment);

impl Payment {
    /// The verified payment.
    pub fn into_inner(self) -> VerifiedPayment {
        self.0
    }
}

impl Deref for Payment {
    type Target = VerifiedPayment;

    fn deref(&self) -> &VerifiedPayment {
        &self.0
    }
}

impl FromRequest for Payment {
    type Error = MissingPaywall;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            require_payment(request.extensions().get::<VerifiedPayment>())
                .map(Payment)
                .map_err(MissingPaywall::from),
        )
    }
}

/// Extracts the usage meter of an `upto` route, through which the handler
/// reports what the call cost (see [`x402_core::meter`]).
///
/// Fails with [`MissingPaywall`] (500) when the request carries no verified
/// `upto` payment.
///
/// ```
/// use actix_web::HttpResponse;
/// use x402_actix::UsageMeter;
///
/// async fn completion(UsageMeter(meter): UsageMeter) -> HttpResponse {
///     meter.add(740u64); // atomic units used by this call
///     HttpResponse::Ok().body("done")
/// }
/// # let _ = actix_web::web::to(completion);
/// ```
#[derive(Debug, Clone)]
pub struct UsageMeter(pub Meter);

impl FromRequest for UsageMeter {
    type Error = MissingPaywall;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            require_meter(request.extensions().get::<VerifiedPayment>())
                .map(UsageMeter)
                .map_err(MissingPaywall::from),
        )
    }
}

/// The error of the [`Payment`] and [`UsageMeter`] extractors: no verified
/// payment on the request.
///
/// A 500 (a server misconfiguration, never the client's fault) whose body
/// says what to check. Status, reason (`missing_paywall`) and body are
/// [`x402_core::rejection::MissingPaywall`]'s, so `x402-axum` answers the
/// same; this type only renders them as an actix-web response.
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

impl fmt::Display for MissingPaywall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.rejection().fmt(f)
    }
}

impl std::error::Error for MissingPaywall {}

impl Rejection for MissingPaywall {
    fn status(&self) -> http::StatusCode {
        self.rejection().status()
    }

    fn reason(&self) -> &'static str {
        self.rejection().reason()
    }

    fn body(&self) -> Bytes {
        self.rejection().body()
    }
}

impl ResponseError for MissingPaywall {
    fn status_code(&self) -> StatusCode {
        status(&self.rejection())
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        render(&self.rejection())
    }
}

/// A core rejection's status, as actix-web's.
pub(crate) fn status(rejection: &impl Rejection) -> StatusCode {
    // Both `http` versions accept exactly 100..=999 (see `convert`).
    StatusCode::from_u16(rejection.status().as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A core rejection as an actix-web response: its status, headers and body,
/// as they are.
pub(crate) fn render(rejection: &impl Rejection) -> HttpResponse<BoxBody> {
    crate::convert::response(rejection.response())
}
