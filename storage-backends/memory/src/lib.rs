//! An in-memory [`BlockStore`]: a sorted map behind a lock. For tests and benchmarks;
//! nothing survives the process.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{
    clip_range, BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, Result,
    SizeBound, StoreError,
};

/// A block store held in process memory.
///
/// **What the storage server observes:** nothing leaves the process; wrap it in
/// `Recording` to see what a real server would.
pub struct MemoryStore {
    map: RwLock<BTreeMap<ObjKey, Bytes>>,
    /// The tag of each object: the write counter of its last write. Its mutex is
    /// always taken after the `map` lock (lock order: `map`, then `tags`).
    tags: std::sync::Mutex<BTreeMap<ObjKey, u64>>,
    writes: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            map: RwLock::default(),
            tags: std::sync::Mutex::default(),
            writes: AtomicU64::new(1),
        }
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

    /// Lock order: `map` first, then `tags`.
    fn tags(&self) -> std::sync::MutexGuard<'_, BTreeMap<ObjKey, u64>> {
        self.tags.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The objects are in memory already: a bound is checked after the read, and a
/// redoable write is the atomic one (a map insert).
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BlockStore for MemoryStore {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let got: Vec<Option<Bytes>> = {
            let map = self.read();
            keys.iter().map(|k| map.get(k).cloned()).collect()
        };
        opts.check(keys, &got)?;
        Ok(got)
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

    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, _: PutOpts) -> Result<()> {
        let mut map = self.write();
        let mut tags = self.tags();
        for (k, v) in items {
            tags.insert(k.clone(), self.writes.fetch_add(1, Ordering::Relaxed));
            map.insert(k, v);
        }
        Ok(())
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        let map = self.read();
        let Some(v) = map.get(key) else {
            return Ok(None);
        };
        bound.check(key, v.len() as u64)?;
        let tag = self.tags().get(key).copied().unwrap_or(0);
        Ok(Some((v.clone(), ObjTag(format!("m{tag}")))))
    }

    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        let mut map = self.write();
        let mut tags = self.tags();
        let current = map
            .get(key)
            .map(|_| ObjTag(format!("m{}", tags.get(key).copied().unwrap_or(0))));
        let ok = match (&cond, &current) {
            (PutCondition::IfAbsent, None) => true,
            (PutCondition::IfMatch(want), Some(have)) => want == have,
            _ => false,
        };
        if !ok {
            return Err(StoreError::PreconditionFailed {
                key: key.to_string(),
            });
        }
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        tags.insert(key.clone(), n);
        map.insert(key.clone(), data);
        Ok(ObjTag(format!("m{n}")))
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        let mut map = self.write();
        let mut tags = self.tags();
        for k in keys {
            map.remove(k);
            tags.remove(k);
        }
        Ok(())
    }

    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        let keys: Vec<ObjKey> = {
            let map = self.read();
            map.keys()
                .filter(|k| k.as_str().starts_with(prefix))
                .cloned()
                .collect()
        };
        opts.check(prefix, &keys)?;
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn conformance() {
        let store = MemoryStore::new();
        oram_blockstore::conformance::run_all(&store, "conf").await;
        oram_blockstore::conformance::conditional_writes(&store, "cond").await;
        assert!(store.total_bytes() > 0);
    }
}
