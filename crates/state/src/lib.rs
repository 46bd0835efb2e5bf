//! Trusted local state: what an ORAM engine must remember and the cloud must never see.
//!
//! Engines keep their position map, stash, per-object versions (for freshness) and
//! locally cached buckets (tree-top cache) behind [`TrustedState`]. This crate has the
//! in-memory implementation, [`MemState`]; a durable one replaces it without touching
//! the engines. [`TrustedState::commit`] marks the points where an engine's state is
//! consistent and must be made durable.

use std::collections::HashMap;

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
}
