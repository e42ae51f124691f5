//! Payment ids in this process's memory.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::SystemTime,
};

use async_trait::async_trait;

use super::{PayloadDigest, PaymentIdStore, PaymentIdStoreError, Reservation, StoredResponse};
use crate::swept::SweptMap;

/// Payment ids and their settled responses in this process's memory (the
/// default): right for one instance; several instances share a
/// `RedisPaymentIdStore` instead. Entries are dropped once expired
/// (swept as the map grows).
#[derive(Debug, Clone, Default)]
pub struct MemoryPaymentIdStore {
    map: Arc<Mutex<SweptMap<String, Entry>>>,
}

#[derive(Debug)]
struct Entry {
    digest: PayloadDigest,
    /// `None` while in flight.
    response: Option<Arc<StoredResponse>>,
    /// Unix seconds, rounded up.
    expires_at: u64,
}

impl MemoryPaymentIdStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries it holds (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, SweptMap<String, Entry>> {
        // The map is consistent after any panic (each update is one call).
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn secs(t: SystemTime) -> Result<u64, PaymentIdStoreError> {
    crate::unix::secs_ceil(t).ok_or(PaymentIdStoreError::InvalidExpiry)
}

#[async_trait]
impl PaymentIdStore for MemoryPaymentIdStore {
    async fn reserve(
        &self,
        key: &str,
        digest: &PayloadDigest,
        pending_until: SystemTime,
    ) -> Result<Reservation, PaymentIdStoreError> {
        let until = secs(pending_until)?;
        let now = crate::unix::now();
        let mut map = self.lock();
        if let Some(entry) = map.get(key).filter(|e| e.expires_at > now) {
            return Ok(match (&entry.response, entry.digest == *digest) {
                (_, false) => Reservation::Conflict,
                (None, true) => Reservation::InFlight,
                (Some(response), true) => Reservation::Stored((**response).clone()),
            });
        }
        map.make_room(now, |e| e.expires_at > now);
        map.insert(
            key.to_owned(),
            Entry {
                digest: *digest,
                response: None,
                expires_at: until,
            },
        );
        Ok(Reservation::Reserved)
    }

    async fn complete(
        &self,
        key: &str,
        digest: &PayloadDigest,
        response: &StoredResponse,
        expires_at: SystemTime,
    ) -> Result<(), PaymentIdStoreError> {
        let until = secs(expires_at)?;
        let now = crate::unix::now();
        let mut map = self.lock();
        let ours = match map.get(key) {
            Some(e) if e.expires_at > now => e.digest == *digest && e.response.is_none(),
            _ => true,
        };
        if ours {
            map.insert(
                key.to_owned(),
                Entry {
                    digest: *digest,
                    response: Some(Arc::new(response.clone())),
                    expires_at: until,
                },
            );
        }
        Ok(())
    }

    async fn release(&self, key: &str, digest: &PayloadDigest) -> Result<(), PaymentIdStoreError> {
        let mut map = self.lock();
        if map
            .get(key)
            .is_some_and(|e| e.digest == *digest && e.response.is_none())
        {
            map.remove(key);
        }
        Ok(())
    }
}
