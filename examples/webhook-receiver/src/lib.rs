//! Receives x402 settlement webhooks: verifies each with
//! [`VerifiedWebhook`] and logs it. Run `cargo run -p webhook-receiver` with
//! `WEBHOOK_SECRET=whsec_...` (several, comma-separated, while rotating).

use std::io::Write as _;

use axum::{routing::post, Extension, Router};
use x402_axum::VerifiedWebhook;
use x402_core::webhook::{EventType, WebhookVerifier};

/// The receiver: `POST /webhooks/x402`, verified with `verifier`.
///
/// Unverifiable requests get 401 before the handler runs. Delivery is
/// at-least-once, so a real receiver records `event.id` and ignores repeats.
pub fn app(verifier: WebhookVerifier) -> Router {
    Router::new()
        .route("/webhooks/x402", post(receive))
        .layer(Extension(verifier))
}

async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> &'static str {
    let d = &event.data;
    let line = match &event.event_type {
        EventType::PaymentSettled => format!(
            "{} settled: {} of {} on {} from {} (tx {}) for {}",
            event.id,
            d.amount,
            d.asset,
            d.network,
            d.payer.as_deref().unwrap_or("?"),
            d.transaction,
            d.resource.as_deref().unwrap_or(&d.route),
        ),
        other => format!(
            "{} {other}: {} on {} ({})",
            event.id,
            d.amount,
            d.network,
            d.error_reason.as_deref().unwrap_or("-"),
        ),
    };
    let _ = writeln!(std::io::stdout().lock(), "{line}");
    "ok"
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::{body::Body, http::Request};
    use tower::ServiceExt;
    use x402_core::webhook::{sign, WebhookSecret};

    use super::*;

    const BODY: &str = r#"{"type":"payment.settled","timestamp":"2025-01-01T00:00:00.000Z","data":{"network":"eip155:8453","asset":"0xa","amount":"10000","payer":"0xb","payTo":"0xc","transaction":"0xd","resource":"https://api.example/r","route":"/r","scheme":"exact","x402Version":2}}"#;

    async fn post(app: Router, secret: &WebhookSecret, body: &str) -> u16 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let request = Request::post("/webhooks/x402")
            .header("webhook-id", "msg_test")
            .header("webhook-timestamp", now.to_string())
            .header(
                "webhook-signature",
                sign(
                    std::slice::from_ref(secret),
                    "msg_test",
                    now,
                    BODY.as_bytes(),
                ),
            )
            .body(Body::from(body.to_owned()))
            .unwrap();
        app.oneshot(request).await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn accepts_signed_events_and_refuses_the_rest() {
        let secret = WebhookSecret::generate();
        let app = app(WebhookVerifier::new([secret.clone()]));
        assert_eq!(post(app.clone(), &secret, BODY).await, 200);
        let tampered = BODY.replace("10000", "99999");
        assert_eq!(post(app.clone(), &secret, &tampered).await, 401);
        assert_eq!(
            post(app.clone(), &WebhookSecret::generate(), BODY).await,
            401
        );
        let small = super::app(WebhookVerifier::new([secret.clone()]).max_body_bytes(16));
        assert_eq!(post(small, &secret, BODY).await, 413);
    }

    #[tokio::test]
    async fn missing_verifier_is_a_server_error() {
        let app = Router::new().route("/webhooks/x402", axum::routing::post(receive));
        assert_eq!(post(app, &WebhookSecret::generate(), BODY).await, 500);
    }
}
