//! The adapters' extractor and webhook rejections (status, reason, body),
//! defined once.
//!
//! `x402-axum` and `x402-actix` each have extractors for the verified
//! payment (`Payment`), the usage meter (`UsageMeter`) and signed webhooks
//! (`VerifiedWebhook`). When one refuses a request, the status, the
//! machine-readable reason and the body all come from here; an adapter only
//! renders the [`Rejection`] in its own response type (axum's
//! `IntoResponse`, actix-web's `ResponseError`), so both frameworks answer
//! byte for byte the same.
//!
//! | Rejection | Status | Reason | Body (`text/plain; charset=utf-8`) |
//! |---|---|---|---|
//! | [`MissingPaywall`] | 500 | `missing_paywall` | what to check, in words |
//! | `WebhookRejection::MissingVerifier` | 500 | `webhook_misconfigured` | the reason |
//! | `WebhookRejection::BodyTooLarge` (declared or read) | 413 | `body_too_large` | the reason |
//! | `WebhookRejection::BodyUnreadable` | 400 | `body_unreadable` | the reason |
//! | `WebhookRejection::Invalid` (signature, timestamp, headers, event) | 401 | `invalid_webhook` | the reason |
//!
//! Webhook bodies carry only the reason: which check failed is for the
//! receiver's logs (the rejection's `Display`), not for whoever sent the
//! request. The webhook rows need the `webhooks` feature, as does
//! [`WebhookIntake`], the framework-neutral part of a webhook extractor
//! (refuse a declared oversized `Content-Length` before reading, never keep
//! more than the verifier's limit, verify).
//!
//! ```
//! use x402_core::rejection::{require_payment, MissingPaywall, Rejection};
//!
//! // What an extractor does when the request's extensions hold no payment.
//! let refused = require_payment(None).unwrap_err();
//! assert_eq!(refused, MissingPaywall::new());
//! assert_eq!(refused.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
//! assert_eq!(refused.reason(), "missing_paywall");
//!
//! let response = refused.response();
//! assert_eq!(response.headers()["content-type"], "text/plain; charset=utf-8");
//! assert_eq!(response.body().as_ref(), refused.to_string().as_bytes());
//! ```

use std::fmt;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};

use crate::{meter::Meter, payment::VerifiedPayment};

/// The `Content-Type` of every rejection body.
pub const CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// A refusal an adapter renders as it is: a status, a stable
/// machine-readable reason and a body.
///
/// Implemented by [`MissingPaywall`] and (feature `webhooks`)
/// `WebhookRejection`. [`response`](Self::response) is the whole answer;
/// an adapter copies its status, headers and body into its own response
/// type and adds nothing.
pub trait Rejection: fmt::Display {
    /// The response status.
    fn status(&self) -> StatusCode;

    /// A short, stable `snake_case` name for the refusal, for logs, metrics
    /// and clients that branch on it.
    fn reason(&self) -> &'static str;

    /// The response body.
    fn body(&self) -> Bytes;

    /// The response: [`status`](Self::status), `Content-Type:`
    /// [`CONTENT_TYPE`] and [`body`](Self::body).
    fn response(&self) -> Response<Bytes> {
        let mut response = Response::new(self.body());
        *response.status_mut() = self.status();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        response
    }
}

/// No verified payment on the request: an extractor ran where no paywall
/// verified one.
///
/// The route is not behind the paywall (`x402_axum::PaywallLayer`,
/// `x402_tower::PaywallLayer`, `x402_actix::PaywallLayer`), or the
/// engine's route table does not list it, or (for a usage meter) the route
/// is not an `upto` route. A 500: a server misconfiguration, never the
/// client's fault. Its body says what to check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingPaywall;

impl MissingPaywall {
    /// The rejection.
    pub const fn new() -> Self {
        Self
    }
}

impl fmt::Display for MissingPaywall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "no verified x402 payment on this request: is the route behind the paywall \
             (x402_axum::PaywallLayer, x402_tower::PaywallLayer or \
             x402_actix::PaywallLayer), and does the engine's route table list it?",
        )
    }
}

impl std::error::Error for MissingPaywall {}

impl Rejection for MissingPaywall {
    fn status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn reason(&self) -> &'static str {
        "missing_paywall"
    }

    fn body(&self) -> Bytes {
        Bytes::from(self.to_string())
    }
}

/// The payment extractor's decision: the payment an adapter found in the
/// request's extensions, or [`MissingPaywall`].
///
/// ```
/// use x402_core::rejection::{require_payment, MissingPaywall};
///
/// assert_eq!(require_payment(None), Err(MissingPaywall::new()));
/// ```
pub fn require_payment(found: Option<&VerifiedPayment>) -> Result<VerifiedPayment, MissingPaywall> {
    found.cloned().ok_or(MissingPaywall)
}

/// The usage-meter extractor's decision: the meter of the payment an adapter
/// found in the request's extensions, or [`MissingPaywall`] when there is no
/// payment or it is not an `upto` payment (it has no meter).
///
/// ```
/// use x402_core::rejection::{require_meter, MissingPaywall};
///
/// assert!(matches!(require_meter(None), Err(MissingPaywall { .. })));
/// ```
pub fn require_meter(found: Option<&VerifiedPayment>) -> Result<Meter, MissingPaywall> {
    found
        .and_then(|payment| payment.meter.clone())
        .ok_or(MissingPaywall)
}

#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub use self::webhook::{WebhookIntake, WebhookRejection};

#[cfg(feature = "webhooks")]
mod webhook {
    use bytes::{Bytes, BytesMut};
    use http::{header, HeaderMap, StatusCode};

    use super::Rejection;
    use crate::webhook::{WebhookError, WebhookEvent, WebhookVerifier};

    /// Why a webhook extractor refused a request.
    ///
    /// See the [module docs](super) for each variant's status, reason and
    /// body.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum WebhookRejection {
        /// No [`WebhookVerifier`] was registered for the request (500).
        #[error(
            "no WebhookVerifier registered for this request: add `Extension(verifier)` (axum) \
             or `App::app_data(web::Data::new(verifier))` (actix-web)"
        )]
        MissingVerifier,
        /// The body is larger than the verifier's
        /// [`body_limit`](WebhookVerifier::body_limit), as declared by
        /// `Content-Length` or as read (413).
        #[error("webhook body too large")]
        BodyTooLarge,
        /// The body could not be read: the client went away, a chunk was
        /// malformed (400).
        #[error("webhook body could not be read")]
        BodyUnreadable,
        /// The signature, timestamp or headers did not check out, or the body
        /// is not an event (401; 413 for [`WebhookError::BodyTooLarge`]).
        #[error("webhook refused: {0}")]
        Invalid(#[source] WebhookError),
    }

    impl From<WebhookError> for WebhookRejection {
        fn from(error: WebhookError) -> Self {
            match error {
                WebhookError::BodyTooLarge => Self::BodyTooLarge,
                other => Self::Invalid(other),
            }
        }
    }

    impl Rejection for WebhookRejection {
        fn status(&self) -> StatusCode {
            match self {
                Self::MissingVerifier => StatusCode::INTERNAL_SERVER_ERROR,
                Self::BodyTooLarge | Self::Invalid(WebhookError::BodyTooLarge) => {
                    StatusCode::PAYLOAD_TOO_LARGE
                }
                Self::BodyUnreadable => StatusCode::BAD_REQUEST,
                Self::Invalid(_) => StatusCode::UNAUTHORIZED,
            }
        }

        fn reason(&self) -> &'static str {
            match self {
                Self::MissingVerifier => "webhook_misconfigured",
                Self::BodyTooLarge | Self::Invalid(WebhookError::BodyTooLarge) => "body_too_large",
                Self::BodyUnreadable => "body_unreadable",
                Self::Invalid(_) => "invalid_webhook",
            }
        }

        /// Only the reason: the details are for the receiver's logs.
        fn body(&self) -> Bytes {
            Bytes::from_static(self.reason().as_bytes())
        }
    }

    /// One webhook request on its way through an extractor: everything but
    /// reading the framework's body stream.
    ///
    /// 1. [`start`](Self::start) with the verifier the adapter found (if
    ///    any) and the request's headers: refuses a missing verifier, then a
    ///    declared `Content-Length` above the verifier's
    ///    [`body_limit`](WebhookVerifier::body_limit), before a byte of the
    ///    body is read;
    /// 2. [`push`](Self::push) each chunk as it arrives: the first byte past
    ///    the limit refuses, and the adapter stops reading (so at most the
    ///    limit is kept, and nothing is read beyond the chunk that crossed
    ///    it);
    /// 3. [`finish`](Self::finish): verify the signature and parse the event.
    ///
    /// ```
    /// use x402_core::{
    ///     rejection::{Rejection, WebhookIntake, WebhookRejection},
    ///     webhook::{WebhookSecret, WebhookVerifier},
    /// };
    ///
    /// let verifier = WebhookVerifier::new([WebhookSecret::generate()]).max_body_bytes(64);
    ///
    /// // Declared too large: refused before reading.
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("content-length", "1000000".parse()?);
    /// let refused = WebhookIntake::start(Some(verifier.clone()), headers).unwrap_err();
    /// assert_eq!((refused.status().as_u16(), refused.reason()), (413, "body_too_large"));
    ///
    /// // Undeclared, and too large once read.
    /// let mut intake = WebhookIntake::start(Some(verifier), http::HeaderMap::new())?;
    /// intake.push(&[b'x'; 64])?;
    /// assert!(matches!(intake.push(b"x"), Err(WebhookRejection::BodyTooLarge)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Debug)]
    pub struct WebhookIntake {
        verifier: WebhookVerifier,
        headers: HeaderMap,
        body: BytesMut,
    }

    impl WebhookIntake {
        /// Starts a request with these headers, checked against `verifier`
        /// (`None`: the adapter found none registered).
        pub fn start(
            verifier: Option<WebhookVerifier>,
            headers: HeaderMap,
        ) -> Result<Self, WebhookRejection> {
            let verifier = verifier.ok_or(WebhookRejection::MissingVerifier)?;
            let limit = verifier.body_limit();
            if declared_length(&headers).is_some_and(|length| length > limit as u64) {
                return Err(WebhookRejection::BodyTooLarge);
            }
            Ok(Self {
                verifier,
                headers,
                body: BytesMut::new(),
            })
        }

        /// The most body bytes that will be kept: the verifier's limit.
        pub fn limit(&self) -> usize {
            self.verifier.body_limit()
        }

        /// Adds the next chunk of the body. Refuses with
        /// [`BodyTooLarge`](WebhookRejection::BodyTooLarge), without keeping
        /// the chunk, once the body would pass the limit: stop reading then.
        pub fn push(&mut self, chunk: &[u8]) -> Result<(), WebhookRejection> {
            let fits = self
                .body
                .len()
                .checked_add(chunk.len())
                .is_some_and(|total| total <= self.limit());
            if !fits {
                return Err(WebhookRejection::BodyTooLarge);
            }
            self.body.extend_from_slice(chunk);
            Ok(())
        }

        /// Verifies the body read so far (the whole body, once the stream
        /// ended) against the headers, now.
        pub fn finish(self) -> Result<WebhookEvent, WebhookRejection> {
            self.verifier
                .verify(&self.headers, &self.body)
                .map_err(WebhookRejection::from)
        }
    }

    /// The request's `Content-Length`, when it is one well-formed number.
    /// Anything else is left to the server (which refuses malformed framing
    /// before an extractor runs) and to the bound on what is read.
    fn declared_length(headers: &HeaderMap) -> Option<u64> {
        let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        value.to_str().ok()?.trim().parse().ok()
    }

    #[cfg(test)]
    mod tests {
        #![allow(clippy::unwrap_used)]

        use http::HeaderMap;

        use super::*;
        use crate::webhook::{sign, WebhookSecret};

        const BODY: &[u8] = br#"{"type":"payment.settled","timestamp":"2026-01-01T00:00:00Z","data":{"network":"eip155:84532","asset":"0xa","amount":"1000","payer":"0xb","payTo":"0xc","transaction":"0xd","resource":null,"route":"/paid","scheme":"exact","x402Version":2}}"#;

        fn signed(secret: &WebhookSecret) -> HeaderMap {
            let now = crate::unix::now();
            let mut headers = HeaderMap::new();
            headers.insert("webhook-id", "msg_1".parse().unwrap());
            headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
            headers.insert(
                "webhook-signature",
                sign(std::slice::from_ref(secret), "msg_1", now, BODY)
                    .parse()
                    .unwrap(),
            );
            headers
        }

        fn table(rejection: &WebhookRejection) -> (u16, &'static str, Bytes) {
            (
                rejection.status().as_u16(),
                rejection.reason(),
                rejection.body(),
            )
        }

        #[test]
        fn every_rejection_has_its_status_reason_and_body() {
            let cases = [
                (
                    WebhookRejection::MissingVerifier,
                    500,
                    "webhook_misconfigured",
                ),
                (WebhookRejection::BodyTooLarge, 413, "body_too_large"),
                (
                    WebhookRejection::Invalid(WebhookError::BodyTooLarge),
                    413,
                    "body_too_large",
                ),
                (WebhookRejection::BodyUnreadable, 400, "body_unreadable"),
                (
                    WebhookRejection::Invalid(WebhookError::InvalidSignature),
                    401,
                    "invalid_webhook",
                ),
                (
                    WebhookRejection::Invalid(WebhookError::TimestampOutOfTolerance),
                    401,
                    "invalid_webhook",
                ),
                (
                    WebhookRejection::Invalid(WebhookError::MissingHeader("webhook-id")),
                    401,
                    "invalid_webhook",
                ),
            ];
            for (rejection, status, reason) in cases {
                assert_eq!(
                    table(&rejection),
                    (status, reason, Bytes::from_static(reason.as_bytes()))
                );
                let response = rejection.response();
                assert_eq!(response.status().as_u16(), status);
                assert_eq!(
                    response.headers()[header::CONTENT_TYPE],
                    super::super::CONTENT_TYPE
                );
                assert_eq!(response.body().as_ref(), reason.as_bytes());
            }
        }

        #[test]
        fn a_declared_length_over_the_limit_is_refused_before_reading() {
            let verifier = WebhookVerifier::new([WebhookSecret::generate()]).max_body_bytes(10);
            let with_length = |value: &str| {
                let mut headers = HeaderMap::new();
                headers.insert(header::CONTENT_LENGTH, value.parse().unwrap());
                WebhookIntake::start(Some(verifier.clone()), headers)
            };
            assert!(matches!(
                with_length("11"),
                Err(WebhookRejection::BodyTooLarge)
            ));
            // Not a u64: left to the server and to the bound on reading.
            assert!(with_length("99999999999999999999999").is_ok());
            assert!(with_length("10").is_ok());
            assert!(with_length("nonsense").is_ok());
            assert!(matches!(
                WebhookIntake::start(None, HeaderMap::new()),
                Err(WebhookRejection::MissingVerifier)
            ));
        }

        #[test]
        fn at_most_the_limit_is_kept_and_a_valid_event_passes() {
            let secret = WebhookSecret::generate();
            let verifier = WebhookVerifier::new([secret.clone()]).max_body_bytes(BODY.len());
            let mut intake = WebhookIntake::start(Some(verifier.clone()), signed(&secret)).unwrap();
            let (head, tail) = BODY.split_at(10);
            intake.push(head).unwrap();
            intake.push(tail).unwrap();
            assert!(matches!(
                intake.push(b" "),
                Err(WebhookRejection::BodyTooLarge)
            ));
            assert_eq!(intake.body.len(), BODY.len());
            assert_eq!(intake.finish().unwrap().id, "msg_1");

            let mut intake = WebhookIntake::start(Some(verifier), signed(&secret)).unwrap();
            intake.push(&BODY[1..]).unwrap();
            assert!(matches!(
                intake.finish(),
                Err(WebhookRejection::Invalid(WebhookError::InvalidSignature))
            ));
        }
    }
}
