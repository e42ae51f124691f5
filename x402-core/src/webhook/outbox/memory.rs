use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{DeadLetter, Outbox, OutboxError, OutboxMessage};

/// The in-process outbox: fast, bounded, and lost when the process exits. Use
/// `RedisOutbox` (feature `redis`) for events that must survive restarts.
///
/// ```
/// use x402_core::webhook::outbox::{MemoryOutbox, Outbox, OutboxMessage};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let outbox = MemoryOutbox::new();
/// outbox.push(OutboxMessage::new("msg_1", "payment.settled", "{}")).await?;
/// let claimed = outbox.claim(std::time::Duration::from_secs(30)).await?.unwrap();
/// assert_eq!((claimed.id.as_str(), claimed.attempts), ("msg_1", 1));
/// outbox.ack("msg_1").await?;
/// assert_eq!(outbox.backlog().await?, 0);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemoryOutbox {
    state: Mutex<State>,
    notify: Notify,
    capacity: usize,
}

#[derive(Debug, Default)]
struct State {
    pending: Vec<(Instant, OutboxMessage)>,
    processing: HashMap<String, (Instant, OutboxMessage)>,
    dead: Vec<DeadLetter>,
}

impl Default for MemoryOutbox {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryOutbox {
    /// The default capacity: 10 000 messages pending or processing.
    pub const DEFAULT_CAPACITY: usize = 10_000;

    /// An empty outbox holding up to [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY).
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// An empty outbox holding up to `capacity` messages; pushes beyond it
    /// fail with [`OutboxError::Full`] (and are logged by the sender).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            capacity,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Outbox for MemoryOutbox {
    async fn push(&self, message: OutboxMessage) -> Result<(), OutboxError> {
        {
            let mut state = self.state();
            if state.pending.len() + state.processing.len() >= self.capacity {
                return Err(OutboxError::Full);
            }
            let known = state.processing.contains_key(&message.id)
                || state.pending.iter().any(|(_, m)| m.id == message.id);
            if !known {
                state.pending.push((Instant::now(), message));
            }
        }
        self.notify.notify_one();
        Ok(())
    }

    async fn claim(&self, lease: Duration) -> Result<Option<OutboxMessage>, OutboxError> {
        let now = Instant::now();
        let mut state = self.state();
        let expired: Vec<String> = state
            .processing
            .iter()
            .filter(|(_, (until, _))| *until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some((_, message)) = state.processing.remove(&id) {
                state.pending.push((now, message));
            }
        }
        let next = state
            .pending
            .iter()
            .enumerate()
            .filter(|(_, (due, _))| *due <= now)
            .min_by_key(|(_, (due, _))| *due)
            .map(|(i, _)| i);
        let Some(i) = next else { return Ok(None) };
        let (_, mut message) = state.pending.swap_remove(i);
        message.attempts = message.attempts.saturating_add(1);
        state
            .processing
            .insert(message.id.clone(), (now + lease, message.clone()));
        Ok(Some(message))
    }

    async fn ack(&self, id: &str) -> Result<(), OutboxError> {
        self.state().processing.remove(id);
        Ok(())
    }

    async fn retry(&self, id: &str, delay: Duration) -> Result<(), OutboxError> {
        {
            let mut state = self.state();
            if let Some((_, message)) = state.processing.remove(id) {
                state.pending.push((Instant::now() + delay, message));
            }
        }
        self.notify.notify_one();
        Ok(())
    }

    async fn bury(&self, letter: DeadLetter) -> Result<(), OutboxError> {
        let mut state = self.state();
        state.processing.remove(&letter.message.id);
        state.pending.retain(|(_, m)| m.id != letter.message.id);
        state.dead.push(letter);
        Ok(())
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, OutboxError> {
        Ok(self.state().dead.clone())
    }

    async fn redeliver(&self, id: &str) -> Result<bool, OutboxError> {
        let found = {
            let mut state = self.state();
            match state.dead.iter().position(|d| d.message.id == id) {
                Some(i) => {
                    let mut message = state.dead.remove(i).message;
                    message.attempts = 0;
                    state.pending.push((Instant::now(), message));
                    true
                }
                None => false,
            }
        };
        if found {
            self.notify.notify_one();
        }
        Ok(found)
    }

    async fn backlog(&self) -> Result<usize, OutboxError> {
        let state = self.state();
        Ok(state.pending.len() + state.processing.len())
    }

    async fn wait(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.notify.notified()).await;
    }
}
