//! [`KvState`]: the object layer's ordered byte map, and [`KvMap`], its one
//! implementation (in memory, or bound to the durable store).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::{ChangeSet, CommitFuture, Durable, Staged, Table, Tracked};

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
    /// Hands every change since the last call to the durable store (now, at the
    /// call) and returns a future that resolves when they are durable; concurrent
    /// callers share one fsync. The in-memory view already shows the changes. On
    /// error the durable store is failed: this and every later commit fail until
    /// the process restarts and reloads the last durable state. In memory the
    /// future is ready at once.
    fn commit(&mut self) -> CommitFuture;
}

/// [`KvState`] over an in-memory map, bound to a durable store or not.
#[derive(Default)]
pub struct KvMap {
    map: Tracked<Vec<u8>, Vec<u8>>,
    sink: Option<Arc<dyn Durable>>,
}

/// [`KvState`] in process memory: lost when the process ends.
pub type MemKv = KvMap;

impl std::fmt::Debug for KvMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvMap")
            .field("keys", &self.map.len())
            .field("durable", &self.sink.is_some())
            .finish()
    }
}

impl KvMap {
    /// An empty in-memory map.
    pub fn new() -> Self {
        Self::default()
    }

    /// A map holding `map`, committing to `sink`.
    pub fn with_sink(map: BTreeMap<Vec<u8>, Vec<u8>>, sink: Option<Arc<dyn Durable>>) -> Self {
        Self {
            map: Tracked::from_map(map),
            sink,
        }
    }
}

impl KvState for KvMap {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map.map().get(key).cloned()
    }
    fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.map.insert(key.to_vec(), value);
    }
    fn delete(&mut self, key: &[u8]) -> bool {
        self.map.remove(&key.to_vec()).is_some()
    }
    fn range(
        &self,
        start: &[u8],
        inclusive: bool,
        end: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        btree_range(self.map.map(), start, inclusive, end, limit)
    }
    fn commit(&mut self) -> CommitFuture {
        let mut cs = ChangeSet::default();
        if self.sink.is_some() {
            for (k, v) in self.map.changed() {
                cs.push(Table::Kv, k.clone(), v.cloned());
            }
        }
        self.map.settle();
        Staged::new(cs, self.sink.clone()).commit()
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
        let done = kv.commit();
        // In memory a commit is ready at once.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut done = done;
        assert!(matches!(
            done.as_mut().poll(&mut cx),
            std::task::Poll::Ready(Ok(()))
        ));
    }
}
