//! Signed settlement webhooks in the [Standard Webhooks] format.
//!
//! **Sending.** [`Webhooks`] turns settlement outcomes into events
//! (`payment.settled`, `payment.settlement_failed`,
//! `payment.settlement_unknown`; `session.opened` for prepaid sessions),
//! writes them to an [outbox] and delivers them from a background
//! worker: the paid request never waits for, nor fails because of, the
//! receiver. Delivery is at-least-once with exponential backoff and jitter
//! ([`RetryPolicy`]); messages that exhaust their attempts are kept as
//! [dead letters](Webhooks::dead_letters). The in-memory outbox is the
//! default; `RedisOutbox` (features `webhooks` + `redis`) survives restarts,
//! including deliveries in flight when a process dies.
//!
//! **Receiving.** Each request carries `webhook-id` (the same on every
//! retry: deduplicate on it), `webhook-timestamp` (unix seconds of the
//! attempt) and `webhook-signature` (`v1,<base64 HMAC-SHA256>` of
//! `"{id}.{timestamp}.{body}"`, one entry per signing secret).
//! [`WebhookVerifier`] checks them and parses the [`WebhookEvent`]. Body:
//!
//! ```json
//! {"type": "payment.settled", "timestamp": "2025-01-31T12:00:00.000Z",
//!  "data": {"network": "eip155:8453", "asset": "0x8335…", "amount": "10000",
//!           "payer": "0x…", "payTo": "0x…", "transaction": "0x…",
//!           "resource": "https://api.example/report", "route": "/report",
//!           "scheme": "exact", "x402Version": 2}}
//! ```
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/

mod event;
pub mod outbox;
mod sender;
mod signature;
mod time;

pub use self::event::{EventData, EventType, WebhookEvent};
pub use self::sender::{
    RetryPolicy, WebhookConfigError, WebhookHooks, WebhookWorker, Webhooks, WebhooksBuilder,
};
pub use self::signature::{
    sign, SecretError, WebhookError, WebhookSecret, WebhookVerifier, WEBHOOK_ID, WEBHOOK_SIGNATURE,
    WEBHOOK_TIMESTAMP,
};
pub use self::time::rfc3339_seconds;
