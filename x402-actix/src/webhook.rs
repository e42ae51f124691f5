//! An extractor for signed x402 webhooks (Standard Webhooks format): the
//! actix-web twin of `x402_axum::VerifiedWebhook`.

use std::{fmt, future::Future, pin::Pin};

use actix_web::{
    body::{self, BodyStream},
    dev::Payload,
    http::{header, StatusCode},
    web, FromRequest, HttpRequest, HttpResponse, ResponseError,
};
use x402_core::webhook::{WebhookError, WebhookEvent, WebhookVerifier};

use crate::convert::headers_to_http1;

/// A webhook whose signature and timestamp checked out, parsed.
///
/// The [`WebhookVerifier`] comes from the app data: register it with
/// `App::app_data(web::Data::new(verifier))` (or as plain
/// `App::app_data(verifier)`). The body is read up to the verifier's
/// [`body_limit`](WebhookVerifier::body_limit). Rejects with
/// [`WebhookRejection`]: 401 for a bad signature, timestamp or missing
/// headers, 413 for an oversized body, 500 when no verifier is registered.
/// Delivery is at-least-once: deduplicate on [`WebhookEvent::id`].
///
/// ```
/// use actix_web::{web, App, HttpResponse};
/// use x402_actix::VerifiedWebhook;
/// use x402_core::webhook::{EventType, WebhookSecret, WebhookVerifier};
///
/// async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> HttpResponse {
///     if event.event_type == EventType::PaymentSettled {
///         // fulfil the order for event.data.transaction ...
///     }
///     HttpResponse::Ok().finish()
/// }
///
/// let verifier = WebhookVerifier::new([WebhookSecret::generate()]);
/// let app = App::new()
///     .app_data(web::Data::new(verifier))
///     .route("/webhooks/x402", web::post().to(receive));
/// # let _ = app;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedWebhook(pub WebhookEvent);

impl VerifiedWebhook {
    /// The verified event.
    pub fn into_inner(self) -> WebhookEvent {
        self.0
    }
}

/// Why [`VerifiedWebhook`] refused a request.
#[derive(Debug)]
#[non_exhaustive]
pub enum WebhookRejection {
    /// No [`WebhookVerifier`] in the app data (500).
    MissingVerifier,
    /// The body exceeds the verifier's limit (413).
    BodyTooLarge,
    /// The body could not be read (400).
    BodyUnreadable,
    /// The signature, timestamp or headers did not check out (401; 413 for
    /// [`WebhookError::BodyTooLarge`]).
    Invalid(WebhookError),
}

impl WebhookRejection {
    /// The short reason sent as the response body.
    fn reason(&self) -> &'static str {
        match self {
            Self::MissingVerifier => "webhook_misconfigured",
            Self::BodyTooLarge | Self::Invalid(WebhookError::BodyTooLarge) => "body_too_large",
            Self::BodyUnreadable => "body_unreadable",
            Self::Invalid(_) => "invalid_webhook",
        }
    }
}

impl fmt::Display for WebhookRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingVerifier => f.write_str(
                "no WebhookVerifier in the app data: add `App::app_data(web::Data::new(verifier))`",
            ),
            Self::BodyTooLarge => f.write_str("webhook body too large"),
            Self::BodyUnreadable => f.write_str("webhook body could not be read"),
            Self::Invalid(error) => write!(f, "webhook refused: {error}"),
        }
    }
}

impl std::error::Error for WebhookRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Invalid(error) => Some(error),
            _ => None,
        }
    }
}

impl ResponseError for WebhookRejection {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::MissingVerifier => StatusCode::INTERNAL_SERVER_ERROR,
            Self::BodyTooLarge | Self::Invalid(WebhookError::BodyTooLarge) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::BodyUnreadable => StatusCode::BAD_REQUEST,
            Self::Invalid(_) => StatusCode::UNAUTHORIZED,
        }
    }

    fn error_response(&self) -> HttpResponse {
        // Only the short reason: the details (which check failed) are for
        // the receiver's logs, not for whoever sent the request.
        HttpResponse::build(self.status_code())
            .content_type("text/plain; charset=utf-8")
            .body(self.reason())
    }
}

/// The verifier registered for `request`, as `web::Data` or plain app data.
fn verifier(request: &HttpRequest) -> Option<WebhookVerifier> {
    request
        .app_data::<web::Data<WebhookVerifier>>()
        .map(|data| data.get_ref().clone())
        .or_else(|| request.app_data::<WebhookVerifier>().cloned())
}

impl FromRequest for VerifiedWebhook {
    type Error = WebhookRejection;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let verifier = verifier(request);
        let headers = headers_to_http1(request.headers());
        let declared_length = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let payload = payload.take();
        Box::pin(async move {
            let verifier = verifier.ok_or(WebhookRejection::MissingVerifier)?;
            let limit = verifier.body_limit();
            // Refuse a declared oversized body before reading any of it.
            if declared_length.is_some_and(|n| n > limit as u64) {
                return Err(WebhookRejection::BodyTooLarge);
            }
            let body = body::to_bytes_limited(BodyStream::new(payload), limit)
                .await
                .map_err(|_| WebhookRejection::BodyTooLarge)?
                .map_err(|_| WebhookRejection::BodyUnreadable)?;
            verifier
                .verify(&headers, &body)
                .map(Self)
                .map_err(WebhookRejection::Invalid)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::{SystemTime, UNIX_EPOCH};

    use actix_web::{body::to_bytes, test, web, App, HttpResponse};
    use x402_core::webhook::{sign, EventType, WebhookSecret, WebhookVerifier};

    use super::VerifiedWebhook;

    const BODY: &str = r#"{"type":"payment.settled","timestamp":"2026-01-01T00:00:00Z","data":{
      "network":"eip155:84532","asset":"0xa","amount":"1000","payer":"0xb","payTo":"0xc",
      "transaction":"0xd","resource":null,"route":"/paid","scheme":"exact","x402Version":2}}"#;

    async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> HttpResponse {
        assert_eq!(event.event_type, EventType::PaymentSettled);
        HttpResponse::Ok().body(format!("{} {}", event.id, event.data.amount))
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    /// A POST of `body` signed by `secret` for `BODY`'s id and now.
    fn signed(secret: &WebhookSecret, body: &str) -> test::TestRequest {
        let now = now();
        test::TestRequest::post()
            .uri("/hook")
            .insert_header(("webhook-id", "msg_1"))
            .insert_header(("webhook-timestamp", now.to_string()))
            .insert_header((
                "webhook-signature",
                sign(std::slice::from_ref(secret), "msg_1", now, BODY.as_bytes()),
            ))
            .set_payload(body.to_owned())
    }

    async fn call(
        app_verifier: Option<WebhookVerifier>,
        request: test::TestRequest,
    ) -> (u16, String) {
        let mut app = App::new().route("/hook", web::post().to(receive));
        if let Some(verifier) = app_verifier {
            app = app.app_data(web::Data::new(verifier));
        }
        let app = test::init_service(app).await;
        let response = test::call_service(&app, request.to_request()).await;
        let status = response.status().as_u16();
        let body = to_bytes(response.into_body()).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[actix_web::test]
    async fn a_valid_event_is_accepted() {
        let secret = WebhookSecret::generate();
        let verifier = WebhookVerifier::new([secret.clone()]);
        let (status, body) = call(Some(verifier), signed(&secret, BODY)).await;
        assert_eq!((status, body.as_str()), (200, "msg_1 1000"));
    }

    #[actix_web::test]
    async fn plain_app_data_works_too() {
        let secret = WebhookSecret::generate();
        let app = test::init_service(
            App::new()
                .app_data(WebhookVerifier::new([secret.clone()]))
                .route("/hook", web::post().to(receive)),
        )
        .await;
        let response = test::call_service(&app, signed(&secret, BODY).to_request()).await;
        assert_eq!(response.status(), 200);
    }

    #[actix_web::test]
    async fn a_tampered_body_or_another_secret_is_refused_401() {
        let secret = WebhookSecret::generate();
        let verifier = WebhookVerifier::new([secret.clone()]);
        let tampered = BODY.replace("\"1000\"", "\"9000\"");
        let (status, body) = call(Some(verifier.clone()), signed(&secret, &tampered)).await;
        assert_eq!((status, body.as_str()), (401, "invalid_webhook"));

        let (status, _) = call(
            Some(verifier.clone()),
            signed(&WebhookSecret::generate(), BODY),
        )
        .await;
        assert_eq!(status, 401);

        // No signature headers at all.
        let unsigned = test::TestRequest::post()
            .uri("/hook")
            .set_payload(BODY.to_owned());
        assert_eq!(call(Some(verifier), unsigned).await.0, 401);
    }

    #[actix_web::test]
    async fn an_oversized_body_is_refused_413() {
        let secret = WebhookSecret::generate();
        let verifier = WebhookVerifier::new([secret.clone()]).max_body_bytes(64);
        let (status, body) = call(Some(verifier), signed(&secret, BODY)).await;
        assert_eq!((status, body.as_str()), (413, "body_too_large"));
    }

    #[actix_web::test]
    async fn no_verifier_is_a_500() {
        let secret = WebhookSecret::generate();
        let (status, body) = call(None, signed(&secret, BODY)).await;
        assert_eq!((status, body.as_str()), (500, "webhook_misconfigured"));
    }
}
