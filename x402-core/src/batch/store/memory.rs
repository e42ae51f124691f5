//! Channel state in this process's memory.

use std::{collections::HashMap, sync::Mutex};

use alloy_primitives::B256;

use super::{ChannelRecord, ChannelStore, ChannelStoreError};

/// Channel state in memory: one process, lost on restart (a restarted
/// seller falls back to the chain's `totalClaimed`, forfeiting what it had
/// not claimed). Use [`RedisChannelStore`](super::RedisChannelStore) to
/// share state between instances and keep it across restarts.
#[derive(Debug, Default)]
pub struct MemoryChannelStore {
    records: Mutex<HashMap<B256, ChannelRecord>>,
}

impl MemoryChannelStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<B256, ChannelRecord>> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl ChannelStore for MemoryChannelStore {
    async fn load(&self, id: &B256) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        Ok(self.map().get(id).cloned())
    }

    async fn swap(
        &self,
        id: &B256,
        expected: Option<u64>,
        new: Option<&ChannelRecord>,
    ) -> Result<bool, ChannelStoreError> {
        let mut map = self.map();
        if map.get(id).map(|r| r.revision) != expected {
            return Ok(false);
        }
        match new {
            Some(record) => {
                map.insert(*id, record.clone());
            }
            None => {
                map.remove(id);
            }
        }
        Ok(true)
    }

    async fn list(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
        Ok(self.map().values().cloned().collect())
    }
}
