//! Replay claims: a verified authorization is honoured once.
//!
//! A signed x402 authorization stays valid until the facilitator settles it,
//! so the same `PAYMENT-SIGNATURE` (or `X-PAYMENT`) header sent twice would
//! pass `/verify` twice and run the handler twice for one payment. The
//! [`ReplayGuard`] hook stops that: after a valid verdict it *claims* the
//! authorization's [`ClaimKey`] in a [`ClaimStore`], atomically, and refuses
//! a second copy with `402 payment_replayed`, on this instance or on any other
//! that shares the store.
//!
//! | Situation | Outcome |
//! |---|---|
//! | first copy of an authorization | claimed; the handler runs |
//! | a copy of a claimed authorization | 402 `payment_replayed` |
//! | a payment on a network whose replay primitive this crate does not read | claimed by the [digest of its payload](#every-network) |
//! | a payment nothing names (its payload is no non-empty object; or the [digest fallback](ReplayGuard::digest_fallback) is off and it would need it) | 402 `claim_unsupported`, unless [allowed](ReplayGuard::allow_unclaimable) |
//! | a payload that cannot be read (the facilitator accepted it; this crate cannot) | 402 `invalid_payload` |
//! | an authorization valid for more than 366 days | 402 `authorization_lifetime_too_long` |
//! | the store errors, or misses the [deadline](ReplayGuard::deadline) | 503 `claim_unavailable` with `Retry-After` |
//! | the handler fails (≥ 400), is aborted, or a later hook refuses | the claim is released |
//! | a settlement was attempted | the claim is kept until it expires |
//!
//! Keys and lifetimes are described on [`claim_key_at`]. Two stores ship with
//! the crate: [`MemoryClaimStore`] (one process; the default) and
//! `RedisClaimStore` (feature `redis`; shared by every instance).
//!
//! # Every network
//!
//! EVM (EIP-3009 and Permit2), Solana and NEAR payments are keyed by what
//! their chain spends once: the authorization's nonce, the transaction's
//! message, the delegate action's access key nonce. Every other payment
//! that the facilitator accepted (Aptos, Stellar, Sui, TON, an EVM
//! transfer method this crate does not read, ...) is keyed by a **digest
//! of its payload**: `x402:{network}:digest:{sha256}` over the scheme and
//! the payload's canonical JSON (keys sorted, no whitespace), kept for
//! `maxTimeoutSeconds` + 60 s and at least 900 s.
//!
//! The limit, stated: only copies are caught, byte for byte after
//! canonicalisation. A payer who signs the same replay primitive (nonce,
//! sequence number) into two different payloads makes two keys; the chain
//! settles one of them, so the second handler's response is withheld (a
//! route that settles after its handler) or the handler does not run (one
//! that settles first), but on an after-handler route its handler has run.
//! A payload that stays valid longer than the claim (a Sui transaction
//! lives until its epoch ends, an Algorand one up to 1000 rounds) can be
//! presented again once the claim has expired; by then it has settled, and
//! the facilitator's verify refuses what the chain has spent. Routes that
//! sell on such networks should set `maxTimeoutSeconds` to the payload's
//! real lifetime.
//!
//! `claim_unsupported` is left for payments nothing names: a scheme payload
//! that is not a non-empty JSON object, and, when the guard's
//! [`digest_fallback`](ReplayGuard::digest_fallback) is turned off, every
//! payment that would need the digest.
//!
//! # Writing a store
//!
//! A store needs two atomic operations: *claim* a key until a time unless it
//! is already claimed, and *release* it. Here is one over a `BTreeMap`, and
//! the guard that uses it:
//!
//! ```
//! use std::{collections::BTreeMap, sync::Mutex, time::{Duration, SystemTime}};
//!
//! use async_trait::async_trait;
//! use x402_core::claim::{ClaimStore, ClaimStoreError, Claimed, ReplayGuard};
//!
//! /// Claims in an ordered map; a stand-in for a real database.
//! #[derive(Debug, Default)]
//! struct MapStore(Mutex<BTreeMap<String, SystemTime>>);
//!
//! #[async_trait]
//! impl ClaimStore for MapStore {
//!     async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
//!         // A poisoned lock means another thread panicked mid-update: report
//!         // it as a backend failure and let the guard fail closed.
//!         let mut map = self.0.lock().map_err(|e| ClaimStoreError::backend(e.to_string()))?;
//!         let now = SystemTime::now();
//!         match map.get(key) {
//!             Some(until) if *until > now => Ok(Claimed::AlreadyClaimed),
//!             _ => {
//!                 map.insert(key.to_owned(), expires_at);
//!                 Ok(Claimed::Claimed)
//!             }
//!         }
//!     }
//!
//!     async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
//!         let mut map = self.0.lock().map_err(|e| ClaimStoreError::backend(e.to_string()))?;
//!         map.remove(key);
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ClaimStoreError> {
//! let store = MapStore::default();
//! let until = SystemTime::now() + Duration::from_secs(900);
//! assert_eq!(store.claim("x402:eip155:8453:k", until).await?, Claimed::Claimed);
//! assert_eq!(store.claim("x402:eip155:8453:k", until).await?, Claimed::AlreadyClaimed);
//! store.release("x402:eip155:8453:k").await?;
//! assert_eq!(store.claim("x402:eip155:8453:k", until).await?, Claimed::Claimed);
//!
//! // Register the guard with the engine: `EngineBuilder::hooks(guard)`.
//! let guard = ReplayGuard::new(store).deadline(Duration::from_millis(100));
//! # let _ = guard;
//! # Ok(())
//! # }
//! ```
//!
//! A store must make `claim` atomic across every instance that shares it
//! (Redis `SET NX`, an SQL `INSERT ... ON CONFLICT DO NOTHING`, ...), must
//! not report [`Claimed::Claimed`] for a key that is still claimed, and may
//! forget a claim once `expires_at` has passed.

use std::{
    error::Error as StdError,
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;

mod digest;
mod guard;
mod key;
mod memory;
mod near;
#[cfg(feature = "redis")]
mod redis;
mod table;
#[cfg(test)]
mod tests;

#[cfg(feature = "redis")]
pub use self::redis::{RedisClaimStore, DEFAULT_REPLICA_WAIT};
pub use guard::ReplayGuard;
pub use key::{
    claim_key, claim_key_at, ClaimKey, ClaimKeyError, CLAIM_GRACE, MAX_AUTHORIZATION_LIFETIME,
    MIN_CLAIM_LIFETIME,
};
pub use memory::MemoryClaimStore;
pub use near::NearPayloadError;

/// The outcome of [`ClaimStore::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claimed {
    /// The key was free and is now claimed by this caller.
    Claimed,
    /// The key is claimed already (by this caller or another) and has not
    /// expired: the payment is a replay.
    AlreadyClaimed,
}

/// Where replay claims are kept. See the [module docs](self) for a worked
/// implementation.
///
/// Implementations must be safe to call concurrently from many tasks and
/// instances: [`claim`](Self::claim) is an atomic "set if absent". The
/// [`ReplayGuard`] bounds every call with its deadline and drops nothing it
/// started: a claim that answers late is still awaited, and released.
#[async_trait]
pub trait ClaimStore: Send + Sync + 'static {
    /// Claims `key` until `expires_at`, unless it is claimed already and has
    /// not expired.
    ///
    /// A store may keep the claim a little longer than `expires_at` (Redis
    /// rounds up to the second) but never shorter.
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError>;

    /// Releases `key`, so that it can be claimed again. Releasing a key that
    /// is not claimed is not an error.
    async fn release(&self, key: &str) -> Result<(), ClaimStoreError>;

    /// [`claim`](Self::claim), for a store that can answer without waiting
    /// (an in-process one): `Some` answer, or `None` to be awaited as usual.
    /// The default is `None`. A store that answers here spares the replay
    /// guard its deadline timer and the claim's future.
    fn claim_now(
        &self,
        key: &str,
        expires_at: SystemTime,
    ) -> Option<Result<Claimed, ClaimStoreError>> {
        let _ = (key, expires_at);
        None
    }
}

#[async_trait]
impl<T: ClaimStore + ?Sized> ClaimStore for Arc<T> {
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        (**self).claim(key, expires_at).await
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        (**self).release(key).await
    }

    fn claim_now(
        &self,
        key: &str,
        expires_at: SystemTime,
    ) -> Option<Result<Claimed, ClaimStoreError>> {
        (**self).claim_now(key, expires_at)
    }
}

#[async_trait]
impl<T: ClaimStore + ?Sized> ClaimStore for Box<T> {
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        (**self).claim(key, expires_at).await
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        (**self).release(key).await
    }

    fn claim_now(
        &self,
        key: &str,
        expires_at: SystemTime,
    ) -> Option<Result<Claimed, ClaimStoreError>> {
        (**self).claim_now(key, expires_at)
    }
}

/// A [`ClaimStore`] call failed. The [`ReplayGuard`] answers every variant
/// with `503 claim_unavailable` (or lets the payment through when
/// [failing open](ReplayGuard::dangerous_fail_open)); the cause is logged,
/// never shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimStoreError {
    /// The call did not answer within the guard's deadline.
    #[error("claim store did not answer within {0:?}")]
    TimedOut(Duration),
    /// The expiry cannot be written by this store (before the Unix epoch, or
    /// beyond what it can represent).
    #[error("claim expiry is out of the store's range")]
    InvalidExpiry,
    /// The backend failed: connection refused, I/O error, protocol error...
    #[error("claim store backend failed")]
    Backend(#[source] Box<dyn StdError + Send + Sync>),
}

impl ClaimStoreError {
    /// Wraps a backend's own error.
    pub fn backend(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::Backend(error.into())
    }
}
