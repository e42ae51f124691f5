//! An extractor for signed x402 webhooks (Standard Webhooks format): the
//! actix-web twin of `x402_axum::VerifiedWebhook`.

use std::{
    fmt,
    future::{poll_fn, Future},
    pin::{pin, Pin},
};

use actix_web::{
    body::{BodyStream, BoxBody, MessageBody},
    dev::Payload,
    error::PayloadError,
    http::StatusCode,
    web::{self, Bytes},
    FromRequest, HttpRequest, HttpResponse, ResponseError,
};
use x402_core::{
    rejection::{self, Rejection, WebhookIntake},
    webhook::{WebhookEvent, WebhookVerifier},
};

use crate::{
    convert::headers_to_http1,
    extract::{render, status},
};

/// A webhook whose signature and timestamp checked out, parsed.
///
/// The [`WebhookVerifier`] comes from the app data: register it with
/// `App::app_data(web::Data::new(verifier))` (or as plain
/// `App::app_data(verifier)`). The body is read up to the verifier's
/// [`body_limit`](WebhookVerifier::body_limit); a request whose
/// `Content-Length` declares more is refused before any of it is read.
/// Rejects with [`WebhookRejection`]: 401 for a bad signature, timestamp or
/// missing headers, 413 for an oversized body, 500 when no verifier is
/// registered (x402-core's [`WebhookIntake`] decides, as it does for
/// `x402-axum`).
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
///
/// Which refusal it is, with its status, reason and body, is x402-core's
/// [`rejection::WebhookRejection`] ([`kind`](Self::kind)); this type only
/// renders it as an actix-web response, so `x402-axum` answers the same:
///
/// | [`kind`](Self::kind) | Status | Body |
/// |---|---|---|
/// | `MissingVerifier` | 500 | `webhook_misconfigured` |
/// | `BodyTooLarge` (declared `Content-Length` or read) | 413 | `body_too_large` |
/// | `BodyUnreadable` | 400 | `body_unreadable` |
/// | `Invalid` (signature, timestamp, headers, event) | 401 | `invalid_webhook` |
///
/// The body is only the reason; its `Display` (for logs) says which check
/// failed.
#[derive(Debug)]
pub struct WebhookRejection(rejection::WebhookRejection);

impl WebhookRejection {
    /// Which refusal this is.
    pub fn kind(&self) -> &rejection::WebhookRejection {
        &self.0
    }

    /// Which refusal this is, by value.
    pub fn into_kind(self) -> rejection::WebhookRejection {
        self.0
    }
}

impl From<rejection::WebhookRejection> for WebhookRejection {
    fn from(rejection: rejection::WebhookRejection) -> Self {
        Self(rejection)
    }
}

impl fmt::Display for WebhookRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WebhookRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl Rejection for WebhookRejection {
    fn status(&self) -> http::StatusCode {
        self.0.status()
    }

    fn reason(&self) -> &'static str {
        self.0.reason()
    }

    fn body(&self) -> Bytes {
        self.0.body()
    }
}

impl ResponseError for WebhookRejection {
    fn status_code(&self) -> StatusCode {
        status(&self.0)
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        render(&self.0)
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
        // A missing verifier or a declared oversized body is refused here,
        // before a byte of the body is read.
        let intake = WebhookIntake::start(verifier(request), headers_to_http1(request.headers()));
        let payload = payload.take();
        Box::pin(async move {
            let mut intake = intake?;
            let mut body = pin!(BodyStream::new(payload));
            while let Some(chunk) = poll_fn(|cx| body.as_mut().poll_next(cx)).await {
                let chunk = chunk.map_err(|error| match error {
                    PayloadError::Overflow => rejection::WebhookRejection::BodyTooLarge,
                    _ => rejection::WebhookRejection::BodyUnreadable,
                })?;
                // Stops reading at the first chunk past the limit.
                intake.push(&chunk)?;
            }
            Ok(Self(intake.finish()?))
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
    async fn a_declared_oversized_body_is_refused_413_before_reading() {
        let secret = WebhookSecret::generate();
        let verifier = WebhookVerifier::new([secret.clone()]).max_body_bytes(BODY.len());
        // The body itself fits: only the declared length can refuse it.
        let request = signed(&secret, BODY).insert_header(("content-length", "1000000"));
        let (status, body) = call(Some(verifier.clone()), request).await;
        assert_eq!((status, body.as_str()), (413, "body_too_large"));
        // Exactly the limit passes.
        let (status, _) = call(Some(verifier), signed(&secret, BODY)).await;
        assert_eq!(status, 200);
    }

    #[actix_web::test]
    async fn rejections_render_the_core_response() {
        use actix_web::ResponseError as _;
        use x402_core::rejection::{self, Rejection as _};

        let rejection = super::WebhookRejection::from(rejection::WebhookRejection::BodyUnreadable);
        let expected = rejection.kind().response();
        let response = rejection.error_response();
        assert_eq!(response.status().as_u16(), expected.status().as_u16());
        assert_eq!(
            response.headers().get("content-type").unwrap().as_bytes(),
            expected.headers()["content-type"].as_bytes()
        );
        let body = to_bytes(response.into_body()).await.unwrap();
        assert_eq!(&body, expected.body());
    }

    #[actix_web::test]
    async fn no_verifier_is_a_500() {
        let secret = WebhookSecret::generate();
        let (status, body) = call(None, signed(&secret, BODY)).await;
        assert_eq!((status, body.as_str()), (500, "webhook_misconfigured"));
    }
}
