//! A signed webhook per settlement outcome (DESIGN §7) through every
//! adapter: the engine's `Webhooks` hooks deliver to a real receiver on
//! 127.0.0.1 that checks each signature with `WebhookVerifier`.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, routing::post, Router};
use serde_json::json;
use x402_core::webhook::{EventType, WebhookEvent, WebhookSecret, WebhookVerifier, Webhooks};

use super::{
    capability_builder, sessions::session_row, CEILING, METERED, SESSION_CALLS, SESSION_OFFER,
    SESSION_PATH, SESSION_SCOPE,
};
use crate::{
    adapters::bind, client, handler::Usage, payment, standin::SettleMode, Adapter, Fixture, PAYER,
    PAY_TO, TX_HASH, USDC_BASE_SEPOLIA,
};

/// What the receiver got: verified events, and how many requests failed
/// verification.
#[derive(Debug, Default)]
struct Received {
    events: Vec<WebhookEvent>,
    rejected: usize,
}

/// A webhook receiver on 127.0.0.1, verifying every request.
#[derive(Debug, Clone)]
pub(crate) struct Receiver {
    pub(crate) url: String,
    received: Arc<Mutex<Received>>,
}

impl Receiver {
    /// A receiver, and webhooks signing for it with a fresh secret (their
    /// worker not started).
    pub(crate) async fn with_webhooks() -> (Self, Webhooks) {
        let secret = WebhookSecret::generate();
        let receiver = Self::start(WebhookVerifier::new([secret.clone()])).await;
        let webhooks = Webhooks::builder(receiver.url.clone(), [secret])
            .client(client::client())
            .poll_interval(Duration::from_millis(10))
            .build()
            .unwrap();
        (receiver, webhooks)
    }

    pub(crate) async fn start(verifier: WebhookVerifier) -> Self {
        let received = Arc::new(Mutex::new(Received::default()));
        let state = (verifier, received.clone());
        let app = Router::new()
            .route("/webhooks", post(receive))
            .with_state(state);
        let (listener, base) = bind().await;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url: format!("{base}/webhooks"),
            received,
        }
    }

    /// Waits (up to 3 s) until `n` events arrived in total; returns the
    /// ones after the first `seen`.
    pub(crate) async fn wait_for(&self, seen: usize, n: usize) -> Vec<WebhookEvent> {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            {
                let received = self.received.lock().unwrap();
                assert_eq!(received.rejected, 0, "a webhook failed verification");
                if received.events.len() >= seen + n || Instant::now() > deadline {
                    assert_eq!(
                        received.events.len(),
                        seen + n,
                        "webhooks received: {:?}",
                        received.events
                    );
                    return received.events[seen..].to_vec();
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

type ReceiverState = (WebhookVerifier, Arc<Mutex<Received>>);

async fn receive(
    State((verifier, received)): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> http::StatusCode {
    let mut received = received.lock().unwrap();
    match verifier.verify(&headers, &body) {
        Ok(event) => {
            received.events.push(event);
            http::StatusCode::NO_CONTENT
        }
        Err(_) => {
            received.rejected += 1;
            http::StatusCode::BAD_REQUEST
        }
    }
}

/// Asserts the data every payment event carries for a v2 payment of
/// `route` on Base Sepolia USDC.
#[track_caller]
fn assert_data(f: &Fixture, event: &WebhookEvent, route: &str, scheme: &str, amount: &str) {
    let data = &event.data;
    assert_eq!(data.network, "eip155:84532", "{event:?}");
    assert_eq!(data.asset, USDC_BASE_SEPOLIA, "{event:?}");
    assert_eq!(data.amount, amount, "{event:?}");
    assert_eq!(data.pay_to, PAY_TO, "{event:?}");
    assert_eq!(data.route, route, "{event:?}");
    assert_eq!(
        data.resource.as_deref(),
        Some(f.url(route).as_str()),
        "{event:?}"
    );
    assert_eq!(data.scheme, scheme, "{event:?}");
    assert_eq!(data.x402_version, 2, "{event:?}");
    assert!(event.id.starts_with("msg_"), "{event:?}");
}

/// Pays `path` for `row`, the payment naming the challenge's resource.
async fn pay(f: &Fixture, path: &str, row: &serde_json::Value) -> crate::Reply {
    let resource = json!({"url": f.url(path)});
    let sent = payment::v2_payment(row, Some(&resource));
    f.get(path, &[("PAYMENT-SIGNATURE", &payment::encode(&sent))])
        .await
}

/// Scenario 27. One signed event per outcome: `payment.settled` (exact and
/// upto, with the charge), `payment.settlement_failed`,
/// `payment.settlement_unknown`, `session.opened`; each verified by the
/// receiver and its data compared.
pub async fn s27_webhook_event_per_outcome<A: Adapter>() {
    let (receiver, webhooks) = Receiver::with_webhooks().await;
    let worker = webhooks.start();
    let hooks = webhooks.hooks();
    let f =
        Fixture::with_engine::<A>(|standin| capability_builder(standin.facilitator()).hooks(hooks))
            .await;
    let row = f.first_row("/paid").await;

    // Settled.
    pay(&f, "/paid", &row).await.assert_status(200);
    let [settled] = <[WebhookEvent; 1]>::try_from(receiver.wait_for(0, 1).await).unwrap();
    assert_eq!(settled.event_type, EventType::PaymentSettled);
    assert_data(&f, &settled, "/paid", "exact", "10000");
    assert_eq!(settled.data.payer.as_deref(), Some(PAYER));
    assert_eq!(settled.data.transaction, TX_HASH);
    assert_eq!(settled.data.error_reason, None);

    // Settled on an upto route: the charge, not the ceiling.
    let metered = f.first_row(METERED).await;
    f.handler.set_usage(Usage::Meter(740));
    pay(&f, METERED, &metered).await.assert_status(200);
    f.handler.set_usage(Usage::Nothing);
    let [charged] = <[WebhookEvent; 1]>::try_from(receiver.wait_for(1, 1).await).unwrap();
    assert_eq!(charged.event_type, EventType::PaymentSettled);
    assert_data(&f, &charged, METERED, "upto", "740");
    assert_ne!(CEILING, "740");
    assert_eq!(charged.data.transaction, TX_HASH);

    // Refused.
    f.standin
        .set_settle(SettleMode::Refuse("insufficient_funds".into()));
    pay(&f, "/paid", &row).await.assert_status(402);
    let [failed] = <[WebhookEvent; 1]>::try_from(receiver.wait_for(2, 1).await).unwrap();
    assert_eq!(failed.event_type, EventType::PaymentSettlementFailed);
    assert_data(&f, &failed, "/paid", "exact", "10000");
    assert_eq!(failed.data.payer.as_deref(), Some(PAYER));
    assert_eq!(failed.data.transaction, "");
    assert_eq!(
        failed.data.error_reason.as_deref(),
        Some("insufficient_funds")
    );

    // Unknown: /settle gave no answer.
    f.standin.set_settle(SettleMode::Error500);
    pay(&f, "/paid", &row).await.assert_status(502);
    let [unknown] = <[WebhookEvent; 1]>::try_from(receiver.wait_for(3, 1).await).unwrap();
    assert_eq!(unknown.event_type, EventType::PaymentSettlementUnknown);
    assert_data(&f, &unknown, "/paid", "exact", "10000");
    assert!(
        matches!(unknown.data.payer.as_deref(), None | Some(PAYER)),
        "{unknown:?}"
    );
    assert_eq!(unknown.data.transaction, "");
    assert_eq!(
        unknown.data.error_reason.as_deref(),
        Some("facilitator_unavailable")
    );

    // A session bought: the payment settled, and the session opened.
    f.standin.set_settle(SettleMode::Success);
    let session = session_row(&f).await;
    pay(&f, SESSION_PATH, &session).await.assert_status(200);
    let mut both = receiver.wait_for(4, 2).await;
    both.sort_by_key(|e| e.event_type == EventType::SessionOpened);
    let [paid, opened] = <[WebhookEvent; 2]>::try_from(both).unwrap();
    assert_eq!(paid.event_type, EventType::PaymentSettled);
    assert_data(&f, &paid, SESSION_PATH, "exact", "50000");
    assert_eq!(opened.event_type, EventType::SessionOpened);
    assert_data(&f, &opened, SESSION_PATH, "exact", "50000");
    assert_eq!(opened.data.payer.as_deref(), Some(PAYER));
    assert_eq!(opened.data.transaction, TX_HASH);
    let extra = &opened.data.extra;
    assert_eq!(extra["sessionOffer"], SESSION_OFFER);
    assert_eq!(extra["calls"], SESSION_CALLS);
    assert_eq!(extra["remaining"], SESSION_CALLS - 1);
    assert_eq!(extra["scope"], SESSION_SCOPE);

    // Every event its own id; nothing left undelivered.
    let all = receiver.wait_for(0, 6).await;
    let mut ids: Vec<&str> = all.iter().map(|e| e.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 6, "webhook ids: {ids:?}");
    worker.shutdown(Duration::from_millis(500)).await;
    assert!(webhooks.dead_letters().await.unwrap().is_empty());
    f.handler.assert_calls(5);
    f.standin.assert_calls(5, 5);
}
