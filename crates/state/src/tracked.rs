//! A map that remembers what changed since the last commit.

use std::collections::{BTreeMap, VecDeque};
use std::ops::RangeBounds;

/// Undo records kept in layers, one per commit in flight: changes go to the
/// open layer; [`Layers::seal`] closes it (its changes were handed to a
/// commit) and opens a new one; [`Layers::settle_oldest`] forgets the oldest
/// sealed layer once its commit is durable; [`Layers::take_newest_first`]
/// hands every layer back to be undone when a commit fails.
#[derive(Debug, Clone, Default)]
pub struct Layers<L> {
    open: L,
    /// Sealed and not yet settled, oldest first.
    sealed: VecDeque<L>,
}

impl<L: Default> Layers<L> {
    /// The open layer.
    pub fn open(&self) -> &L {
        &self.open
    }

    /// The open layer, to record a change in.
    pub fn open_mut(&mut self) -> &mut L {
        &mut self.open
    }

    /// Every layer not settled: the sealed ones, oldest first, then the open one.
    pub fn all(&self) -> impl Iterator<Item = &L> {
        self.sealed.iter().chain(std::iter::once(&self.open))
    }

    /// Closes the open layer and opens a new one.
    pub fn seal(&mut self) {
        self.sealed.push_back(std::mem::take(&mut self.open));
    }

    /// Forgets the oldest sealed layer (without one, the open layer).
    pub fn settle_oldest(&mut self) {
        if self.sealed.pop_front().is_none() {
            self.open = L::default();
        }
    }

    /// Forgets every layer.
    pub fn settle(&mut self) {
        self.open = L::default();
        self.sealed.clear();
    }

    /// Every layer, newest (the open one) first, leaving none: to undo them
    /// in that order.
    pub fn take_newest_first(&mut self) -> impl Iterator<Item = L> {
        let open = std::mem::take(&mut self.open);
        let sealed = std::mem::take(&mut self.sealed);
        std::iter::once(open).chain(sealed.into_iter().rev())
    }
}

/// An ordered map that keeps, for every key changed since the last
/// [`Tracked::settle`], the value it had before: enough to hand the changes to
/// durable storage ([`Tracked::changed`]) or to undo them ([`Tracked::rollback`]).
///
/// The changes come in **layers**: [`Tracked::seal`] closes the open layer
/// (its changes were handed to a commit) and opens a new one, so that a
/// parent with several rounds in flight lists each round's changes apart
/// ([`Tracked::changed`] lists the open layer's), drops the oldest layer once
/// its commit is durable ([`Tracked::settle_oldest`]) and undoes every layer
/// when an earlier commit fails ([`Tracked::rollback`]).
#[derive(Debug, Clone)]
pub struct Tracked<K, V> {
    map: BTreeMap<K, V>,
    /// Each key changed in a layer, with its value before that layer.
    undo: Layers<BTreeMap<K, Option<V>>>,
}

impl<K, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            undo: Layers::default(),
        }
    }
}

impl<K: Ord + Clone, V: Clone> Tracked<K, V> {
    /// A map holding `map`, with nothing changed yet.
    pub fn from_map(map: BTreeMap<K, V>) -> Self {
        Self {
            map,
            undo: Layers::default(),
        }
    }

    /// The value of `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    /// Sets `k` to `v`, remembering the old value the first time `k` changes.
    pub fn insert(&mut self, k: K, v: V) {
        let old = self.map.insert(k.clone(), v);
        self.undo.open_mut().entry(k).or_insert(old);
    }

    /// Removes `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let old = self.map.remove(k);
        if old.is_some() {
            self.undo
                .open_mut()
                .entry(k.clone())
                .or_insert_with(|| old.clone());
        }
        old
    }

    /// Sets (`Some`) or removes (`None`) `k` as part of the baseline: not a
    /// change, so neither listed by [`Tracked::changed`] nor undone by
    /// [`Tracked::rollback`]. For a key nothing has changed since the last
    /// settle (checked in debug builds).
    pub fn set_settled(&mut self, k: K, v: Option<V>) {
        debug_assert!(
            !self.undo.all().any(|l| l.contains_key(&k)),
            "a settled write of a changed key"
        );
        match v {
            Some(v) => self.map.insert(k, v),
            None => self.map.remove(&k),
        };
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The entries in `range`, in key order.
    pub fn range<R: RangeBounds<K>>(&self, range: R) -> impl Iterator<Item = (&K, &V)> {
        self.map.range(range)
    }

    /// The underlying map.
    pub fn map(&self) -> &BTreeMap<K, V> {
        &self.map
    }

    /// Every key changed in the open layer (since the last settle or seal),
    /// with its value now (`None`: removed).
    pub fn changed(&self) -> impl Iterator<Item = (&K, Option<&V>)> {
        self.undo.open().keys().map(|k| (k, self.map.get(k)))
    }

    /// Whether anything changed since the last settle, in any layer.
    pub fn is_dirty(&self) -> bool {
        self.undo.all().any(|l| !l.is_empty())
    }

    /// Closes the open layer (its changes were listed for a commit) and opens
    /// a new one: later changes are listed apart, and undone with it.
    pub fn seal(&mut self) {
        self.undo.seal();
    }

    /// Forgets the old values of the oldest sealed layer: its changes are now
    /// the baseline (its commit is durable). Without a sealed layer, the open
    /// layer's ([`Tracked::settle`]).
    pub fn settle_oldest(&mut self) {
        self.undo.settle_oldest();
    }

    /// Forgets every old value: all the changes are now the baseline.
    pub fn settle(&mut self) {
        self.undo.settle();
    }

    /// Undoes every change since the last settle: the open layer's, then the
    /// sealed layers', newest first.
    pub fn rollback(&mut self) {
        for layer in self.undo.take_newest_first() {
            for (k, old) in layer {
                match old {
                    Some(v) => self.map.insert(k, v),
                    None => self.map.remove(&k),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_can_be_listed_settled_and_undone() {
        let mut t: Tracked<u64, &str> = Tracked::default();
        t.insert(1, "a");
        t.insert(2, "b");
        t.settle();
        t.insert(1, "A");
        t.insert(1, "AA");
        t.remove(&2);
        t.insert(3, "c");
        let changed: Vec<(u64, Option<&str>)> =
            t.changed().map(|(k, v)| (*k, v.copied())).collect();
        assert_eq!(changed, vec![(1, Some("AA")), (2, None), (3, Some("c"))]);
        t.rollback();
        assert_eq!(t.map().clone(), BTreeMap::from([(1, "a"), (2, "b")]));
        assert!(!t.is_dirty());
        assert_eq!(t.remove(&9), None);
        assert!(!t.is_dirty(), "removing an absent key changes nothing");
    }

    #[test]
    fn layers_are_listed_apart_settled_oldest_first_and_undone_together() {
        let mut t: Tracked<u64, &str> = Tracked::default();
        t.insert(1, "a");
        t.insert(2, "b");
        t.settle();
        // Round k.
        t.insert(1, "k");
        t.seal();
        // Round k+1 changes the same key and another.
        t.insert(1, "k1");
        t.remove(&2);
        let changed: Vec<(u64, Option<&str>)> =
            t.changed().map(|(k, v)| (*k, v.copied())).collect();
        assert_eq!(
            changed,
            vec![(1, Some("k1")), (2, None)],
            "the open layer only"
        );
        // k's commit failed: both rounds are undone, to before k.
        let mut failed = t.clone();
        failed.rollback();
        assert_eq!(failed.map().clone(), BTreeMap::from([(1, "a"), (2, "b")]));
        assert!(!failed.is_dirty());
        // k committed, then k+1 failed: back to k's values.
        t.settle_oldest();
        assert!(t.is_dirty());
        t.rollback();
        assert_eq!(t.map().clone(), BTreeMap::from([(1, "k"), (2, "b")]));
        assert!(!t.is_dirty());
        // Without a sealed layer, settling the oldest settles the open one.
        t.insert(3, "c");
        t.settle_oldest();
        t.rollback();
        assert_eq!(t.get(&3), Some(&"c"));
    }
}
