//! Where channel state lives: [`MemoryChannelStore`] (one process, the
//! default) or [`RedisChannelStore`] (feature `redis`; shared by every
//! instance, and kept across restarts).
//!
//! A store only loads, lists and swaps whole records. Every change the
//! engine and the claimer make is one compare-and-swap loop: read the record,
//! compute the new one, and swap it in only if nobody wrote in between (the
//! record's `revision`), else read again. That makes each change atomic
//! without locks, across instances too. Requests on one channel are
//! serialised on top of it by the record's [`pending`](super::ChannelRecord::pending)
//! hold.
//!
//! A custom store implements the three methods with the same
//! compare-and-swap meaning:
//!
//! ```
//! use std::{collections::HashMap, sync::Mutex};
//! use alloy_primitives::B256;
//! use x402_core::batch::{ChannelRecord, ChannelStore, ChannelStoreError};
//!
//! #[derive(Debug, Default)]
//! struct MyStore(Mutex<HashMap<B256, ChannelRecord>>);
//!
//! #[async_trait::async_trait]
//! impl ChannelStore for MyStore {
//!     async fn load(&self, id: &B256) -> Result<Option<ChannelRecord>, ChannelStoreError> {
//!         Ok(self.0.lock().unwrap().get(id).cloned())
//!     }
//!     async fn swap(
//!         &self,
//!         id: &B256,
//!         expected: Option<u64>,
//!         new: Option<&ChannelRecord>,
//!     ) -> Result<bool, ChannelStoreError> {
//!         let mut map = self.0.lock().unwrap();
//!         if map.get(id).map(|r| r.revision) != expected {
//!             return Ok(false);
//!         }
//!         match new {
//!             Some(r) => map.insert(*id, r.clone()),
//!             None => map.remove(id),
//!         };
//!         Ok(true)
//!     }
//!     async fn list(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
//!         Ok(self.0.lock().unwrap().values().cloned().collect())
//!     }
//! }
//! ```

use alloy_primitives::B256;

use super::ChannelRecord;

mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use self::memory::MemoryChannelStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisChannelStore;

/// Why a channel store could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelStoreError {
    /// The backend failed.
    #[error("channel store backend: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A stored record could not be read.
    #[error("a stored channel record is unreadable: {0}")]
    Corrupt(#[source] serde_json::Error),
    /// Writers kept racing: the record changed under every attempt.
    #[error("the channel record kept changing; gave up")]
    Contended,
}

/// Per-channel state storage with compare-and-swap writes (see the
/// [module docs](self)).
#[async_trait::async_trait]
pub trait ChannelStore: Send + Sync + 'static {
    /// The record of channel `id`, if any.
    async fn load(&self, id: &B256) -> Result<Option<ChannelRecord>, ChannelStoreError>;

    /// Replaces channel `id`'s record with `new` (deletes it for `None`) if
    /// its current revision is `expected` (`None`: no record), and answers
    /// whether it did. The caller has bumped `new.revision` already.
    async fn swap(
        &self,
        id: &B256,
        expected: Option<u64>,
        new: Option<&ChannelRecord>,
    ) -> Result<bool, ChannelStoreError>;

    /// Every record (for the claimer).
    async fn list(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError>;
}

/// What [`update`]'s function decided.
// Short-lived, returned once per attempt: boxing the record would cost an
// allocation per write for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Change<T> {
    /// Write this record (its revision is bumped by [`update`]).
    Write(ChannelRecord, T),
    /// Delete the record.
    Delete(T),
    /// Leave it as it is.
    Keep(T),
}

/// How many times [`update`] reads again after losing a race.
const ATTEMPTS: usize = 64;

/// Applies `f` to channel `id`'s record atomically: read, decide, swap at
/// the revision read; again if another writer came first.
pub(crate) async fn update<T>(
    store: &dyn ChannelStore,
    id: &B256,
    mut f: impl FnMut(Option<&ChannelRecord>) -> Change<T> + Send,
) -> Result<T, ChannelStoreError> {
    for _ in 0..ATTEMPTS {
        let current = store.load(id).await?;
        let expected = current.as_ref().map(|r| r.revision);
        let (new, out) = match f(current.as_ref()) {
            Change::Keep(out) => return Ok(out),
            Change::Delete(out) => {
                if current.is_none() {
                    return Ok(out);
                }
                (None, out)
            }
            Change::Write(mut record, out) => {
                record.revision = expected.unwrap_or(0).wrapping_add(1);
                (Some(record), out)
            }
        };
        if store.swap(id, expected, new.as_ref()).await? {
            return Ok(out);
        }
        tokio::task::yield_now().await;
    }
    Err(ChannelStoreError::Contended)
}
