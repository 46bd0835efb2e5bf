//! A map that remembers what changed since the last commit.

use std::collections::BTreeMap;
use std::ops::RangeBounds;

/// An ordered map that keeps, for every key changed since the last
/// [`Tracked::settle`], the value it had before: enough to hand the changes to
/// durable storage ([`Tracked::changed`]) or to undo them ([`Tracked::rollback`]).
#[derive(Debug, Clone)]
pub struct Tracked<K, V> {
    map: BTreeMap<K, V>,
    undo: BTreeMap<K, Option<V>>,
}

impl<K, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            undo: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, V: Clone> Tracked<K, V> {
    /// A map holding `map`, with nothing changed yet.
    pub fn from_map(map: BTreeMap<K, V>) -> Self {
        Self {
            map,
            undo: BTreeMap::new(),
        }
    }

    /// The value of `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    /// Sets `k` to `v`, remembering the old value the first time `k` changes.
    pub fn insert(&mut self, k: K, v: V) {
        let old = self.map.insert(k.clone(), v);
        self.undo.entry(k).or_insert(old);
    }

    /// Removes `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let old = self.map.remove(k);
        if old.is_some() {
            self.undo.entry(k.clone()).or_insert_with(|| old.clone());
        }
        old
    }

    /// Sets (`Some`) or removes (`None`) `k` as part of the baseline: not a
    /// change, so neither listed by [`Tracked::changed`] nor undone by
    /// [`Tracked::rollback`]. For a key nothing has changed since the last
    /// settle (checked in debug builds).
    pub fn set_settled(&mut self, k: K, v: Option<V>) {
        debug_assert!(
            !self.undo.contains_key(&k),
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

    /// Every key changed since the last settle, with its value now (`None`: removed).
    pub fn changed(&self) -> impl Iterator<Item = (&K, Option<&V>)> {
        self.undo.keys().map(|k| (k, self.map.get(k)))
    }

    /// Whether anything changed since the last settle.
    pub fn is_dirty(&self) -> bool {
        !self.undo.is_empty()
    }

    /// Forgets the old values: the changes are now the baseline.
    pub fn settle(&mut self) {
        self.undo.clear();
    }

    /// Undoes every change since the last settle.
    pub fn rollback(&mut self) {
        for (k, old) in std::mem::take(&mut self.undo) {
            match old {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
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
}
