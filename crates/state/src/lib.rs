//! Trusted local state: what an ORAM engine must remember and the cloud must never see.
//!
//! Engines keep their position map, stash, per-object versions (for freshness) and
//! locally cached buckets (tree-top cache) behind [`TrustedState`]. This crate has the
//! in-memory implementation, [`MemState`]; a durable one replaces it without touching
//! the engines. [`TrustedState::commit`] marks the points where an engine's state is
//! consistent and must be made durable.
//!
//! Metadata above the engine (the object layer's index of buckets, objects and
//! uploads) lives behind [`KvState`], an ordered byte map with the same commit
//! discipline; [`MemKv`] is its in-memory implementation.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::Bytes;

/// The contents of one tree bucket: `(block id, block data)` for every real block in it.
pub type Bucket = Vec<(u64, Bytes)>;

/// Errors of the trusted state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing the state's storage failed.
    #[error("trusted state I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The stored state is inconsistent or was written by something else.
    #[error("trusted state corrupt: {0}")]
    Corrupt(String),
}

/// The trusted state of one engine instance. Never leaves the proxy machine unsealed.
///
/// Positions are leaves for tree engines; versions count the writes of a backend
/// position (node, slot or block) so that replayed older objects are detected.
pub trait TrustedState: Send + 'static {
    /// The leaf `block` is mapped to, or `None` if the block was never written.
    fn position(&self, block: u64) -> Option<u64>;
    /// Maps `block` to `leaf`.
    fn set_position(&mut self, block: u64, leaf: u64);
    /// Number of blocks with a position.
    fn positions_len(&self) -> u64;

    /// The current version of backend position `pos`; 0 if never written.
    fn version(&self, pos: u64) -> u64;
    /// Records that backend position `pos` now holds version `version`.
    fn set_version(&mut self, pos: u64, version: u64);

    /// Puts `block` into the stash (replacing an earlier copy).
    fn stash_insert(&mut self, block: u64, data: Bytes);
    /// Takes `block` out of the stash.
    fn stash_remove(&mut self, block: u64) -> Option<Bytes>;
    /// The stashed copy of `block`.
    fn stash_get(&self, block: u64) -> Option<&Bytes>;
    /// Number of blocks in the stash.
    fn stash_len(&self) -> usize;
    /// The ids of all stashed blocks, in ascending order.
    fn stash_blocks(&self) -> Vec<u64>;

    /// A bucket kept locally instead of on the backend (tree-top cache); `None` if
    /// never set (an empty bucket).
    fn local_bucket(&self, node: u64) -> Option<&Bucket>;
    /// Replaces a locally kept bucket.
    fn set_local_bucket(&mut self, node: u64, bucket: Bucket);

    /// Marks a consistent point: everything set so far must survive a restart from
    /// here on. The in-memory state has nothing to do.
    fn commit(&mut self) -> Result<(), StateError>;
}

/// Trusted state in process memory: lost when the process ends.
#[derive(Default, Debug)]
pub struct MemState {
    positions: HashMap<u64, u64>,
    versions: HashMap<u64, u64>,
    stash: HashMap<u64, Bytes>,
    local: HashMap<u64, Bucket>,
}

impl MemState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TrustedState for MemState {
    fn position(&self, block: u64) -> Option<u64> {
        self.positions.get(&block).copied()
    }
    fn set_position(&mut self, block: u64, leaf: u64) {
        self.positions.insert(block, leaf);
    }
    fn positions_len(&self) -> u64 {
        self.positions.len() as u64
    }
    fn version(&self, pos: u64) -> u64 {
        self.versions.get(&pos).copied().unwrap_or(0)
    }
    fn set_version(&mut self, pos: u64, version: u64) {
        self.versions.insert(pos, version);
    }
    fn stash_insert(&mut self, block: u64, data: Bytes) {
        self.stash.insert(block, data);
    }
    fn stash_remove(&mut self, block: u64) -> Option<Bytes> {
        self.stash.remove(&block)
    }
    fn stash_get(&self, block: u64) -> Option<&Bytes> {
        self.stash.get(&block)
    }
    fn stash_len(&self) -> usize {
        self.stash.len()
    }
    fn stash_blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.stash.keys().copied().collect();
        v.sort_unstable();
        v
    }
    fn local_bucket(&self, node: u64) -> Option<&Bucket> {
        self.local.get(&node)
    }
    fn set_local_bucket(&mut self, node: u64, bucket: Bucket) {
        self.local.insert(node, bucket);
    }
    fn commit(&mut self) -> Result<(), StateError> {
        Ok(())
    }
}

/// An ordered map from byte keys to byte values: trusted metadata such as the
/// object index. Never leaves the proxy machine unsealed.
pub trait KvState: Send + 'static {
    /// The value stored under `key`.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// Stores `value` under `key`, replacing any earlier value.
    fn put(&mut self, key: &[u8], value: Vec<u8>);
    /// Removes `key`; returns whether it existed.
    fn delete(&mut self, key: &[u8]) -> bool;
    /// Up to `limit` entries with `start <= key` (or `start < key` when
    /// `inclusive` is false) and `key < end` (when `end` is given), in key order.
    fn range(
        &self,
        start: &[u8],
        inclusive: bool,
        end: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)>;
    /// Marks a consistent point that must survive a restart (no-op in memory).
    fn commit(&mut self) -> Result<(), StateError>;
}

/// [`KvState`] in process memory: lost when the process ends.
#[derive(Default, Debug)]
pub struct MemKv {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl MemKv {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl KvState for MemKv {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map.get(key).cloned()
    }
    fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.map.insert(key.to_vec(), value);
    }
    fn delete(&mut self, key: &[u8]) -> bool {
        self.map.remove(key).is_some()
    }
    fn range(
        &self,
        start: &[u8],
        inclusive: bool,
        end: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let lo = if inclusive {
            Bound::Included(start)
        } else {
            Bound::Excluded(start)
        };
        if end.is_some_and(|e| e < start || (e == start && !inclusive)) {
            return Vec::new();
        }
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        self.map
            .range::<[u8], _>((lo, hi))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
    fn commit(&mut self) -> Result<(), StateError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_state_behaves_like_maps() {
        let mut s = MemState::new();
        assert_eq!(s.position(3), None);
        s.set_position(3, 9);
        assert_eq!(s.position(3), Some(9));
        assert_eq!(s.positions_len(), 1);
        assert_eq!(s.version(7), 0);
        s.set_version(7, 2);
        assert_eq!(s.version(7), 2);
        s.stash_insert(5, Bytes::from_static(b"a"));
        s.stash_insert(1, Bytes::from_static(b"b"));
        s.stash_insert(5, Bytes::from_static(b"c"));
        assert_eq!(s.stash_len(), 2);
        assert_eq!(s.stash_blocks(), vec![1, 5]);
        assert_eq!(s.stash_get(5).unwrap().as_ref(), b"c");
        assert_eq!(s.stash_remove(5).unwrap().as_ref(), b"c");
        assert_eq!(s.stash_remove(5), None);
        assert!(s.local_bucket(1).is_none());
        s.set_local_bucket(1, vec![(4, Bytes::from_static(b"x"))]);
        assert_eq!(s.local_bucket(1).unwrap().len(), 1);
        s.commit().unwrap();
    }

    #[test]
    fn mem_kv_ranges() {
        let mut kv = MemKv::new();
        for k in ["a", "b", "b/1", "b/2", "c"] {
            kv.put(k.as_bytes(), k.as_bytes().to_vec());
        }
        let keys = |v: Vec<(Vec<u8>, Vec<u8>)>| {
            v.into_iter()
                .map(|(k, _)| String::from_utf8(k).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(kv.range(b"b", true, Some(b"c"), 10)),
            ["b", "b/1", "b/2"]
        );
        assert_eq!(keys(kv.range(b"b", false, None, 2)), ["b/1", "b/2"]);
        assert_eq!(keys(kv.range(b"", true, None, 100)).len(), 5);
        // Empty or inverted bounds give nothing (no panic).
        assert!(kv.range(b"c", false, Some(b"c"), 10).is_empty());
        assert!(kv.range(b"d", true, Some(b"c"), 10).is_empty());
        assert!(kv.delete(b"b"));
        assert!(!kv.delete(b"b"));
        assert_eq!(kv.get(b"b/1"), Some(b"b/1".to_vec()));
        assert_eq!(kv.get(b"b"), None);
        kv.commit().unwrap();
    }
}
