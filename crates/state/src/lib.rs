//! Trusted local state: what an ORAM engine must remember and the cloud must never see.
//!
//! Engines keep their position map, stash, per-object versions (for freshness) and
//! locally cached buckets (tree-top cache) behind [`TrustedState`]. This crate has the
//! in-memory implementation, [`MemState`]; a durable one replaces it without touching
//! the engines (the durable one is in `oram-statedb`). [`TrustedState::commit`]
//! marks the points where an engine's state is consistent and must be made durable.
//!
//! Metadata above the engine (the object layer's index of buckets, objects and
//! uploads) lives behind [`KvState`], an ordered byte map with the same commit
//! discipline; [`MemKv`] is its in-memory implementation.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;

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
    /// The database holding the state failed; the changes since the last commit
    /// were undone.
    #[error("trusted state storage: {0}")]
    Storage(String),
}

/// The version and storage slot of one backend position (a tree node, a block).
///
/// Every position has two backend objects, slots 0 and 1. Writes go to the slot
/// *not* named by the last checkpoint ([`TrustedState::epoch`] counts checkpoints):
/// the first write of a position after a checkpoint flips its slot, later writes in
/// the same epoch overwrite that slot. So the objects a checkpoint refers to stay
/// untouched until the next checkpoint is durable, and a machine rebuilt from the
/// checkpoint finds every one of them. Which slot is written depends only on which
/// positions were written since the checkpoint, which the storage server sees anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeVersion {
    /// Writes of this position so far; 0 = never written (no object).
    pub version: u64,
    /// The slot holding the current version.
    pub slot: u8,
    /// The epoch of the last write.
    pub epoch: u64,
}

impl NodeVersion {
    /// The version after one more write during `epoch`.
    pub fn next(self, epoch: u64) -> Self {
        let slot = if self.version == 0 || self.epoch == epoch {
            self.slot
        } else {
            1 - self.slot
        };
        Self {
            version: self.version + 1,
            slot,
            epoch,
        }
    }

    /// Packs slot and epoch into one integer (for storage).
    pub fn packed_epoch_slot(&self) -> u64 {
        (self.epoch << 1) | u64::from(self.slot & 1)
    }

    /// The inverse of [`NodeVersion::packed_epoch_slot`].
    pub fn from_packed(version: u64, packed: u64) -> Self {
        Self {
            version,
            slot: (packed & 1) as u8,
            epoch: packed >> 1,
        }
    }
}

/// A write of a backend position that is durable in the trusted state but maybe
/// not yet on the backend: `(position, version, plaintext)`.
pub type PendingWrite = (u64, NodeVersion, Bytes);

/// The trusted state of one engine instance. Never leaves the proxy machine unsealed.
///
/// Positions are leaves for tree engines; versions count the writes of a backend
/// position (node, slot or block) so that replayed older objects are detected.
///
/// Changes are grouped by [`TrustedState::commit`]: after a successful commit they
/// survive a crash; after a failed one the state is back where the previous commit
/// left it (all changes since are undone), so an engine can fail the operation and
/// carry on.
pub trait TrustedState: Send + 'static {
    /// The leaf `block` is mapped to, or `None` if the block was never written.
    fn position(&self, block: u64) -> Option<u64>;
    /// Maps `block` to `leaf`.
    fn set_position(&mut self, block: u64, leaf: u64);
    /// Number of blocks with a position.
    fn positions_len(&self) -> u64;
    /// Every `(block, leaf)` pair, in block order.
    fn positions(&self) -> Vec<(u64, u64)>;

    /// The current version of backend position `pos` (version 0 if never written).
    fn node(&self, pos: u64) -> NodeVersion;
    /// Records one more write of `pos` in the current epoch and returns its version.
    fn advance(&mut self, pos: u64) -> NodeVersion {
        let next = self.node(pos).next(self.epoch());
        self.set_node(pos, next);
        next
    }
    /// Sets the version of `pos`.
    fn set_node(&mut self, pos: u64, nv: NodeVersion);
    /// Every written position with its version, in position order.
    fn nodes(&self) -> Vec<(u64, NodeVersion)>;
    /// The checkpoint epoch writes happen in (0 when never checkpointed).
    fn epoch(&self) -> u64;

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

    /// Engine-specific metadata of backend position `pos`, opaque to the state
    /// (Ring ORAM: a bucket's slot map, valid bits and read count); `None` if never
    /// set.
    fn pos_meta(&self, pos: u64) -> Option<&Bytes>;
    /// Replaces the metadata of `pos`.
    fn set_pos_meta(&mut self, pos: u64, meta: Bytes);

    /// Journals a write of `pos` that the backend may not have yet. Replaces an
    /// earlier journaled write of `pos`.
    fn pending_put(&mut self, pos: u64, nv: NodeVersion, plain: Bytes);
    /// Drops the journaled write of `pos` if it is still `version` (it landed).
    fn pending_done(&mut self, pos: u64, version: u64);
    /// Every journaled write, in position order: after a crash they are sent again.
    fn pending(&self) -> Vec<PendingWrite>;

    /// Marks a consistent point: everything set so far must survive a crash from
    /// here on. On error every change since the last commit is undone.
    fn commit(&mut self) -> Result<(), StateError>;
}

/// Trusted state in process memory: lost when the process ends.
#[derive(Default, Debug)]
pub struct MemState {
    positions: HashMap<u64, u64>,
    versions: HashMap<u64, NodeVersion>,
    stash: HashMap<u64, Bytes>,
    local: HashMap<u64, Bucket>,
    meta: HashMap<u64, Bytes>,
    pending: BTreeMap<u64, (NodeVersion, Bytes)>,
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
    fn positions(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.positions.iter().map(|(a, b)| (*a, *b)).collect();
        v.sort_unstable();
        v
    }
    fn node(&self, pos: u64) -> NodeVersion {
        self.versions.get(&pos).copied().unwrap_or_default()
    }
    fn set_node(&mut self, pos: u64, nv: NodeVersion) {
        self.versions.insert(pos, nv);
    }
    fn nodes(&self) -> Vec<(u64, NodeVersion)> {
        let mut v: Vec<(u64, NodeVersion)> = self.versions.iter().map(|(a, b)| (*a, *b)).collect();
        v.sort_unstable_by_key(|x| x.0);
        v
    }
    fn epoch(&self) -> u64 {
        0
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
    fn pos_meta(&self, pos: u64) -> Option<&Bytes> {
        self.meta.get(&pos)
    }
    fn set_pos_meta(&mut self, pos: u64, meta: Bytes) {
        self.meta.insert(pos, meta);
    }
    fn pending_put(&mut self, pos: u64, nv: NodeVersion, plain: Bytes) {
        self.pending.insert(pos, (nv, plain));
    }
    fn pending_done(&mut self, pos: u64, version: u64) {
        if self
            .pending
            .get(&pos)
            .is_some_and(|(nv, _)| nv.version == version)
        {
            self.pending.remove(&pos);
        }
    }
    fn pending(&self) -> Vec<PendingWrite> {
        self.pending
            .iter()
            .map(|(p, (nv, b))| (*p, *nv, b.clone()))
            .collect()
    }
    fn commit(&mut self) -> Result<(), StateError> {
        Ok(())
    }
}

/// What [`KvState::commit`] returns: resolves once the changes it covers are
/// durable.
pub type CommitFuture = Pin<Box<dyn Future<Output = Result<(), StateError>> + Send + 'static>>;

/// An ordered map from byte keys to byte values: trusted metadata such as the
/// object index. Never leaves the proxy machine unsealed.
///
/// Changes are visible to readers of the map at once; [`KvState::commit`] makes
/// them durable. A failed commit fails the store for good (the database is
/// fail-stop after an I/O error): that commit and every later one fail, and the
/// process must restart, which reloads the last durable state.
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
    /// Hands every change since the last call to the durable store and returns a
    /// future that resolves when they are durable (concurrent callers may share
    /// one fsync). The in-memory view already shows the changes. Call it under
    /// whatever lock guards the map, then drop the lock and await the future: no
    /// fsync happens under the caller's lock or on the caller's thread.
    ///
    /// On error the store has failed for good (see the trait's documentation).
    fn commit(&mut self) -> CommitFuture;
}

/// A commit that is already durable (or already failed).
pub fn ready_commit(r: Result<(), StateError>) -> CommitFuture {
    Box::pin(std::future::ready(r))
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
        btree_range(&self.map, start, inclusive, end, limit)
    }
    fn commit(&mut self) -> CommitFuture {
        ready_commit(Ok(()))
    }
}

/// [`KvState::range`] over an ordered map (shared by the implementations).
pub fn btree_range(
    map: &BTreeMap<Vec<u8>, Vec<u8>>,
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
    map.range::<[u8], _>((lo, hi))
        .take(limit)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The result of a commit that must already be resolved.
    fn now(mut f: CommitFuture) -> Result<(), StateError> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => panic!("an in-memory commit must be ready"),
        }
    }

    #[test]
    fn mem_state_behaves_like_maps() {
        let mut s = MemState::new();
        assert_eq!(s.position(3), None);
        s.set_position(3, 9);
        assert_eq!(s.position(3), Some(9));
        assert_eq!(s.positions_len(), 1);
        assert_eq!(s.node(7).version, 0);
        assert_eq!(s.advance(7).version, 1);
        assert_eq!(s.advance(7).version, 2);
        assert_eq!(s.node(7).slot, 0, "one epoch: the slot never flips");
        s.pending_put(7, s.node(7), Bytes::from_static(b"p"));
        s.pending_done(7, 1);
        assert_eq!(s.pending().len(), 1, "an older version does not clear it");
        s.pending_done(7, 2);
        assert!(s.pending().is_empty());
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
        assert!(s.pos_meta(9).is_none());
        s.set_pos_meta(9, Bytes::from_static(b"m1"));
        s.set_pos_meta(9, Bytes::from_static(b"m2"));
        assert_eq!(s.pos_meta(9).unwrap().as_ref(), b"m2");
        s.commit().unwrap();
    }

    #[test]
    fn slots_flip_once_per_epoch() {
        let v0 = NodeVersion::default();
        let a = v0.next(0);
        assert_eq!((a.version, a.slot), (1, 0));
        let b = a.next(0);
        assert_eq!((b.version, b.slot), (2, 0));
        let c = b.next(1);
        assert_eq!((c.version, c.slot, c.epoch), (3, 1, 1));
        let d = c.next(1);
        assert_eq!((d.version, d.slot), (4, 1));
        let e = d.next(3);
        assert_eq!((e.version, e.slot), (5, 0));
        // First write in a later epoch goes to slot 0 (nothing to protect).
        assert_eq!(v0.next(7).slot, 0);
        assert_eq!(NodeVersion::from_packed(5, e.packed_epoch_slot()), e);
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
        now(kv.commit()).unwrap();
    }
}
