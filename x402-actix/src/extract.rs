//! The [`Payment`] extractor.

use std::{
    fmt,
    future::{ready, Ready},
    ops::Deref,
};

use actix_web::{
    dev::Payload, http::StatusCode, FromRequest, HttpMessage, HttpRequest, ResponseError,
};
use x402_core::{meter::Meter, VerifiedPayment};

/// Extracts the payment [`X402Middleware`](crate::X402Middleware) verified for
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
            request
                .extensions()
                .get::<VerifiedPayment>()
                .cloned()
                .map(Payment)
                .ok_or(MissingPaywall),
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
            request
                .extensions()
                .get::<VerifiedPayment>()
                .and_then(|payment| payment.meter.clone())
                .map(UsageMeter)
                .ok_or(MissingPaywall),
        )
    }
}

/// The error of the [`Payment`] and [`UsageMeter`] extractors: no verified payment on the
/// request. Answers 500, since it is a server misconfiguration, never the
/// client's fault.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct MissingPaywall;

impl fmt::Display for MissingPaywall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "no verified x402 payment on this request: is the route wrapped in \
             x402_actix::X402Middleware, and does the engine's route table list it?",
        )
    }
}

impl std::error::Error for MissingPaywall {}

impl ResponseError for MissingPaywall {
    fn status_code(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}
