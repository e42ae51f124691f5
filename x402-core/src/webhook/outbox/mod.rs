//! Where events wait for delivery: [`MemoryOutbox`] (the default, one
//! process) and `RedisOutbox` (durable, feature `redis`).
//!
//! A message is *pending* (due at some time), *processing* (claimed by a
//! worker under a lease), or *dead*. A worker that dies mid-delivery leaves
//! its message processing; once the lease expires the next claim moves it
//! back to pending, so it is retried rather than lost.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use self::memory::MemoryOutbox;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisOutbox;

/// A signed-to-be message: the id and the exact body sent on every attempt.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OutboxMessage {
    /// The `webhook-id`, the same on every attempt.
    pub id: String,
    /// The event type (`payment.settled`), for logs and dead-letter listings.
    pub event_type: String,
    /// The JSON body, byte for byte as signed.
    pub body: String,
    /// Attempts started so far (set by [`Outbox::claim`], which counts the
    /// attempt it hands out).
    #[serde(default)]
    pub attempts: u32,
}

impl fmt::Debug for OutboxMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboxMessage")
            .field("id", &self.id)
            .field("event_type", &self.event_type)
            .field("body_bytes", &self.body.len())
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl OutboxMessage {
    /// A message not yet attempted.
    pub fn new(
        id: impl Into<String>,
        event_type: impl Into<String>,
        body: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            event_type: event_type.into(),
            body: body.into(),
            attempts: 0,
        }
    }
}

/// A message that exhausted its attempts, kept with its id and body intact so
/// it can be inspected and replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DeadLetter {
    /// The message, with its final attempt count.
    pub message: OutboxMessage,
    /// Why the last attempt failed (`status 503`, `timeout`, ...).
    pub last_error: String,
    /// When it was given up on, RFC 3339.
    pub failed_at: String,
}

/// An outbox backend failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The in-memory outbox holds its maximum number of messages.
    #[error("webhook outbox is full")]
    Full,
    /// The backend did not answer within the enqueue deadline.
    #[error("webhook outbox timed out")]
    Timeout,
    /// A stored record could not be read.
    #[error("webhook outbox record is corrupt: {0}")]
    Corrupt(#[source] serde_json::Error),
    /// The backend (Redis) failed.
    #[error("webhook outbox backend failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Storage for messages awaiting delivery. Implement it to use another
/// database; see the [module docs](self) for the states.
#[async_trait]
pub trait Outbox: fmt::Debug + Send + Sync + 'static {
    /// Adds a message, due now. Pushing an id already present is a no-op.
    async fn push(&self, message: OutboxMessage) -> Result<(), OutboxError>;

    /// Takes the earliest due message, marks it processing until `lease`
    /// from now, and counts the attempt. Messages whose lease expired are
    /// first made due again.
    async fn claim(&self, lease: Duration) -> Result<Option<OutboxMessage>, OutboxError>;

    /// The message was delivered: forget it.
    async fn ack(&self, id: &str) -> Result<(), OutboxError>;

    /// The attempt failed: make the message due again after `delay`.
    async fn retry(&self, id: &str, delay: Duration) -> Result<(), OutboxError>;

    /// The message will not be retried: keep it as a dead letter.
    async fn bury(&self, letter: DeadLetter) -> Result<(), OutboxError>;

    /// The dead letters, oldest first where the backend knows the order.
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, OutboxError>;

    /// Moves a dead letter back to pending with its attempts reset; `false`
    /// if there is no dead letter with that id.
    async fn redeliver(&self, id: &str) -> Result<bool, OutboxError>;

    /// Messages pending or processing.
    async fn backlog(&self) -> Result<usize, OutboxError>;

    /// Waits until a message may be due, at most `max`. The default sleeps
    /// `max`; in-process backends wake early on a push.
    async fn wait(&self, max: Duration) {
        tokio::time::sleep(max).await;
    }
}
