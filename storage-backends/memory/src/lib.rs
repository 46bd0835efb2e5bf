//! An in-memory [`BlockStore`]: a sorted map behind a lock. For tests and benchmarks;
//! nothing survives the process.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::RwLock;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{clip_range, BlockStore, ObjKey, Result};

/// A block store held in process memory.
///
/// **What the storage server observes:** nothing leaves the process; wrap it in
/// `Recording` to see what a real server would.
#[derive(Default)]
pub struct MemoryStore {
    map: RwLock<BTreeMap<ObjKey, Bytes>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of objects stored.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Total bytes of all objects stored.
    pub fn total_bytes(&self) -> u64 {
        self.read().values().map(|v| v.len() as u64).sum()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<ObjKey, Bytes>> {
        // Every mutation is a single map operation, so a poisoned lock holds a consistent map.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<ObjKey, Bytes>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl BlockStore for MemoryStore {
    async fn get_many(&self, keys: &[ObjKey]) -> Result<Vec<Option<Bytes>>> {
        let map = self.read();
        Ok(keys.iter().map(|k| map.get(k).cloned()).collect())
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        let map = self.read();
        match map.get(key) {
            None => {
                clip_range(&range, 0)?;
                Ok(None)
            }
            Some(v) => Ok(Some(v.slice(clip_range(&range, v.len() as u64)?))),
        }
    }

    async fn put_many(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        let mut map = self.write();
        for (k, v) in items {
            map.insert(k, v);
        }
        Ok(())
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        let mut map = self.write();
        for k in keys {
            map.remove(k);
        }
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjKey>> {
        let map = self.read();
        Ok(map
            .keys()
            .filter(|k| k.as_str().starts_with(prefix))
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn conformance() {
        let store = MemoryStore::new();
        oram_blockstore::conformance::run_all(&store, "conf").await;
        assert!(store.total_bytes() > 0);
    }
}
