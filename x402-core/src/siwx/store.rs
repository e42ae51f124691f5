//! Where sign-in-with-x keeps what it must remember: who paid for which
//! route (until when), and which nonces were used.

use std::{collections::HashMap, error::Error as StdError, sync::Mutex};

use async_trait::async_trait;

/// Who paid for which route, and which sign-in nonces were used.
///
/// [`use_nonce`](Self::use_nonce) must be atomic: of concurrent calls with
/// one nonce, from any number of processes sharing the store, exactly one
/// gets `true`.
#[async_trait]
pub trait SignInStore: Send + Sync + 'static {
    /// Records that `address` (lowercased for EVM) paid for `route` (its
    /// pattern); the record lasts until `expires_at` (Unix seconds). A later
    /// record for the same pair replaces it.
    async fn record_access(
        &self,
        route: &str,
        address: &str,
        expires_at: u64,
    ) -> Result<(), SignInStoreError>;

    /// Whether `address` holds an unexpired record for `route` at `now`.
    async fn has_access(
        &self,
        route: &str,
        address: &str,
        now: u64,
    ) -> Result<bool, SignInStoreError>;

    /// Marks `nonce` used until `expires_at`; `true` if it had not been.
    async fn use_nonce(&self, nonce: &str, expires_at: u64) -> Result<bool, SignInStoreError>;
}

/// A sign-in store could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignInStoreError {
    /// The backend failed.
    #[error("sign-in store backend failed")]
    Backend(#[source] Box<dyn StdError + Send + Sync>),
}

/// The in-memory [`SignInStore`] (the default): one process. Expired
/// entries are swept as new ones come in.
#[derive(Debug, Default)]
pub struct MemorySignInStore {
    inner: Mutex<Maps>,
}

#[derive(Debug, Default)]
struct Maps {
    access: HashMap<(String, String), u64>,
    nonces: HashMap<String, u64>,
    /// Inserts since the last sweep.
    inserts: usize,
}

impl Maps {
    /// Drops expired entries once per so many inserts (amortised O(1)).
    fn sweep(&mut self, now: u64) {
        self.inserts += 1;
        let size = self.access.len() + self.nonces.len();
        if self.inserts < 1024 || self.inserts < size / 2 {
            return;
        }
        self.inserts = 0;
        self.access.retain(|_, exp| *exp >= now);
        self.nonces.retain(|_, exp| *exp >= now);
    }
}

impl MemorySignInStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        // A poisoned lock only means a panic elsewhere between whole-entry
        // updates; the maps are still sound.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl SignInStore for MemorySignInStore {
    async fn record_access(
        &self,
        route: &str,
        address: &str,
        expires_at: u64,
    ) -> Result<(), SignInStoreError> {
        let mut maps = self.lock();
        maps.sweep(crate::unix::now());
        maps.access
            .insert((route.to_owned(), address.to_owned()), expires_at);
        Ok(())
    }

    async fn has_access(
        &self,
        route: &str,
        address: &str,
        now: u64,
    ) -> Result<bool, SignInStoreError> {
        let maps = self.lock();
        let key = (route.to_owned(), address.to_owned());
        Ok(maps.access.get(&key).is_some_and(|exp| *exp >= now))
    }

    async fn use_nonce(&self, nonce: &str, expires_at: u64) -> Result<bool, SignInStoreError> {
        let now = crate::unix::now();
        let mut maps = self.lock();
        maps.sweep(now);
        match maps.nonces.get(nonce) {
            Some(exp) if *exp >= now => Ok(false),
            _ => {
                maps.nonces.insert(nonce.to_owned(), expires_at);
                Ok(true)
            }
        }
    }
}
