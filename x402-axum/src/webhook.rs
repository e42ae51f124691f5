//! An extractor for signed x402 webhooks (Standard Webhooks format).

use axum::body::Bytes;
use axum_core::{
    extract::{FromRequest, Request},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use http_body_util::{BodyExt, LengthLimitError};
use x402_core::{
    rejection::{self, Rejection, WebhookIntake},
    webhook::{WebhookEvent, WebhookVerifier},
};

use crate::extract::render;

/// A webhook whose signature and timestamp checked out, parsed.
///
/// The [`WebhookVerifier`] comes from the request's extensions: add it with
/// `axum::Extension(verifier)` as a layer. The body is read up to the
/// verifier's [`body_limit`](WebhookVerifier::body_limit); a request whose
/// `Content-Length` declares more is refused before any of it is read.
/// Rejects with [`WebhookRejection`]: 401 for a bad signature, timestamp or
/// missing headers, 413 for an oversized body, 500 when no verifier is
/// registered (x402-core's [`WebhookIntake`] decides, as it does for
/// `x402-actix`). Delivery is at-least-once: deduplicate on
/// [`WebhookEvent::id`].
///
/// ```
/// use axum::{routing::post, Extension, Router};
/// use x402_axum::VerifiedWebhook;
/// use x402_core::webhook::{EventType, WebhookSecret, WebhookVerifier};
///
/// async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> &'static str {
///     if event.event_type == EventType::PaymentSettled {
///         // fulfil the order for event.data.transaction ...
///     }
///     "ok"
/// }
///
/// let verifier = WebhookVerifier::new([WebhookSecret::generate()]);
/// let app: Router = Router::new()
///     .route("/webhooks/x402", post(receive))
///     .layer(Extension(verifier));
/// # let _ = app;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedWebhook(pub WebhookEvent);

/// Why [`VerifiedWebhook`] refused a request.
///
/// Which refusal it is, with its status, reason and body, is x402-core's
/// [`rejection::WebhookRejection`] ([`kind`](Self::kind)); this type only
/// renders it as an axum response, so `x402-actix` answers the same:
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
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct WebhookRejection(#[from] rejection::WebhookRejection);

impl WebhookRejection {
    /// The response status.
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }

    /// Which refusal this is.
    pub fn kind(&self) -> &rejection::WebhookRejection {
        &self.0
    }

    /// Which refusal this is, by value.
    pub fn into_kind(self) -> rejection::WebhookRejection {
        self.0
    }
}

impl Rejection for WebhookRejection {
    fn status(&self) -> StatusCode {
        self.0.status()
    }

    fn reason(&self) -> &'static str {
        self.0.reason()
    }

    fn body(&self) -> Bytes {
        self.0.body()
    }
}

impl IntoResponse for WebhookRejection {
    fn into_response(self) -> Response {
        render(&self.0)
    }
}

impl<S: Send + Sync> FromRequest<S> for VerifiedWebhook {
    type Rejection = WebhookRejection;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let verifier = req.extensions().get::<WebhookVerifier>().cloned();
        let (parts, mut body) = req.into_parts();
        // A missing verifier or a declared oversized body is refused here,
        // before a byte of the body is read.
        let mut intake = WebhookIntake::start(verifier, parts.headers)?;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(unreadable)?;
            if let Ok(chunk) = frame.into_data() {
                // Stops reading at the first chunk past the limit.
                intake.push(&chunk)?;
            }
        }
        Ok(Self(intake.finish()?))
    }
}

/// A body error: too large when an outer body limit (tower-http's
/// `RequestBodyLimit`, say) tripped, else unreadable.
fn unreadable(error: axum_core::Error) -> WebhookRejection {
    let error = error.into_inner();
    let too_large =
        std::iter::successors(Some(&*error as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
        .any(|e| e.is::<LengthLimitError>());
    WebhookRejection(if too_large {
        rejection::WebhookRejection::BodyTooLarge
    } else {
        rejection::WebhookRejection::BodyUnreadable
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::{SystemTime, UNIX_EPOCH};

    use axum::{body::Body, http::Request, routing::post, Extension, Router};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    use x402_core::webhook::{sign, WebhookSecret, WebhookVerifier};

    use super::VerifiedWebhook;

    const BODY: &str = r#"{"type":"payment.settled","timestamp":"2026-01-01T00:00:00Z","data":{
      "network":"eip155:84532","asset":"0xa","amount":"1000","payer":"0xb","payTo":"0xc",
      "transaction":"0xd","resource":null,"route":"/paid","scheme":"exact","x402Version":2}}"#;

    async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> String {
        format!("{} {}", event.id, event.data.amount)
    }

    /// A POST of `body` signed by `secret` for `BODY`, now; `length`
    /// overrides the `Content-Length`.
    fn signed(secret: &WebhookSecret, body: &str, length: Option<u64>) -> Request<Body> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        Request::post("/hook")
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", now.to_string())
            .header(
                "webhook-signature",
                sign(std::slice::from_ref(secret), "msg_1", now, BODY.as_bytes()),
            )
            .header(
                "content-length",
                length.unwrap_or(body.len() as u64).to_string(),
            )
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    /// Status, `Content-Type` and body.
    async fn call(
        verifier: Option<WebhookVerifier>,
        request: Request<Body>,
    ) -> (u16, String, String) {
        let mut app = Router::new().route("/hook", post(receive));
        if let Some(verifier) = verifier {
            app = app.layer(Extension(verifier));
        }
        let response = app.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn each_refusal_has_its_status_and_reason() {
        let secret = WebhookSecret::generate();
        let verifier = WebhookVerifier::new([secret.clone()]).max_body_bytes(BODY.len());
        let text = |status: u16, body: &str| {
            (
                status,
                "text/plain; charset=utf-8".to_owned(),
                body.to_owned(),
            )
        };

        let (status, _, body) = call(Some(verifier.clone()), signed(&secret, BODY, None)).await;
        assert_eq!((status, body.as_str()), (200, "msg_1 1000"));

        let tampered = BODY.replace("\"1000\"", "\"9000\"");
        assert_eq!(
            call(Some(verifier.clone()), signed(&secret, &tampered, None)).await,
            text(401, "invalid_webhook")
        );
        let larger = format!("{BODY} ");
        assert_eq!(
            call(Some(verifier.clone()), signed(&secret, &larger, None)).await,
            text(413, "body_too_large")
        );
        // The body fits: only the declared length can refuse it.
        assert_eq!(
            call(Some(verifier), signed(&secret, BODY, Some(1 << 30))).await,
            text(413, "body_too_large")
        );
        assert_eq!(
            call(None, signed(&secret, BODY, None)).await,
            text(500, "webhook_misconfigured")
        );
    }
}
