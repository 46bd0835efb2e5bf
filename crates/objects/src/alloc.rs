//! Free-block allocation over the ORAM's logical block space.
//!
//! Blocks are handed out as runs `(start, len)` (first fit), so block lists of large
//! objects stay short; freed runs merge with their neighbours.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A run of consecutive logical blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// First block.
    pub start: u64,
    /// Number of blocks.
    pub len: u64,
}

/// The free space of a block space (its capacity only grows: [`Allocator::grow`]).
#[derive(Debug, Clone)]
pub struct Allocator {
    free: BTreeMap<u64, u64>,
    free_total: u64,
    capacity: u64,
}

impl Allocator {
    /// All of `0..capacity` free.
    pub fn new(capacity: u64) -> Self {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        Self {
            free,
            free_total: capacity,
            capacity,
        }
    }

    /// Blocks free now.
    pub fn free_blocks(&self) -> u64 {
        self.free_total
    }

    /// Blocks in the space.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Extends the space to `capacity` blocks, the new ones free (merged with a
    /// free run that ends at the old capacity). A smaller capacity changes
    /// nothing.
    pub fn grow(&mut self, capacity: u64) {
        if capacity <= self.capacity {
            return;
        }
        let added = Run {
            start: self.capacity,
            len: capacity - self.capacity,
        };
        self.capacity = capacity;
        self.free(&[added]);
    }

    /// Takes `n` blocks, as few runs as first fit gives; `None` (and nothing taken)
    /// if fewer than `n` are free.
    pub fn alloc(&mut self, n: u64) -> Option<Vec<Run>> {
        if n > self.free_total {
            return None;
        }
        let mut out = Vec::new();
        let mut need = n;
        while need > 0 {
            let (&start, &len) = self
                .free
                .iter()
                .next()
                .expect("free_total says there is room");
            self.free.remove(&start);
            let take = len.min(need);
            if take < len {
                self.free.insert(start + take, len - take);
            }
            out.push(Run { start, len: take });
            need -= take;
        }
        self.free_total -= n;
        Some(out)
    }

    /// Returns runs to the free space.
    ///
    /// # Panics
    /// If a run overlaps free space or lies outside the space: that would be a
    /// double free, a bug that must not silently corrupt data.
    pub fn free(&mut self, runs: &[Run]) {
        for r in runs.iter().filter(|r| r.len > 0) {
            assert!(
                r.start + r.len <= self.capacity,
                "free of {r:?} outside the space"
            );
            let mut start = r.start;
            let mut len = r.len;
            if let Some((&ps, &pl)) = self.free.range(..=start).next_back() {
                assert!(ps + pl <= start, "double free of {r:?}");
                if ps + pl == start {
                    self.free.remove(&ps);
                    start = ps;
                    len += pl;
                }
            }
            if let Some((&ns, &nl)) = self.free.range(r.start..).next() {
                assert!(ns >= r.start + r.len, "double free of {r:?}");
                if ns == r.start + r.len {
                    self.free.remove(&ns);
                    len += nl;
                }
            }
            self.free.insert(start, len);
            self.free_total += r.len;
        }
    }

    /// Marks a run as used (rebuilding the allocator from an index). Returns false,
    /// changing nothing, if the run is not entirely free (claimed twice).
    pub fn reserve(&mut self, run: Run) -> bool {
        if run.len == 0 {
            return true;
        }
        let Some((&fs, &fl)) = self.free.range(..=run.start).next_back() else {
            return false;
        };
        if fs + fl < run.start + run.len {
            return false;
        }
        self.free.remove(&fs);
        if fs < run.start {
            self.free.insert(fs, run.start - fs);
        }
        if fs + fl > run.start + run.len {
            self.free
                .insert(run.start + run.len, fs + fl - run.start - run.len);
        }
        self.free_total -= run.len;
        true
    }
}

/// Appends `new` runs to `runs`, merging a run that continues the last one.
pub fn extend_runs(runs: &mut Vec<Run>, new: impl IntoIterator<Item = Run>) {
    for r in new {
        match runs.last_mut() {
            Some(last) if last.start + last.len == r.start => last.len += r.len,
            _ => runs.push(r),
        }
    }
}

/// The `n`-th block (0-based) of a run list.
pub fn nth_block(runs: &[Run], mut n: u64) -> Option<u64> {
    for r in runs {
        if n < r.len {
            return Some(r.start + n);
        }
        n -= r.len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_merge() {
        let mut a = Allocator::new(100);
        let x = a.alloc(10).unwrap();
        assert_eq!(x, vec![Run { start: 0, len: 10 }]);
        let y = a.alloc(20).unwrap();
        let z = a.alloc(5).unwrap();
        assert_eq!(a.free_blocks(), 65);
        a.free(&y);
        assert_eq!(a.free_blocks(), 85);
        // First fit: 15 from the hole of 20, then 5 more from the same hole.
        let w = a.alloc(25).unwrap();
        assert_eq!(
            w,
            vec![Run { start: 10, len: 20 }, Run { start: 35, len: 5 }]
        );
        a.free(&x);
        a.free(&z);
        a.free(&w);
        assert_eq!(a.free_blocks(), 100);
        assert_eq!(a.free.len(), 1, "all runs merged back");
        assert!(a.alloc(101).is_none());
        assert_eq!(a.free_blocks(), 100, "a failed alloc takes nothing");
    }

    #[test]
    fn growing_adds_free_blocks_after_the_old_end() {
        let mut a = Allocator::new(10);
        let x = a.alloc(8).unwrap();
        a.grow(20);
        assert_eq!((a.capacity(), a.free_blocks()), (20, 12));
        // The old tail and the new room are one run.
        assert_eq!(a.alloc(12).unwrap(), vec![Run { start: 8, len: 12 }]);
        a.grow(15);
        assert_eq!(a.capacity(), 20, "never shrinks");
        a.free(&x);
        assert_eq!(a.free_blocks(), 8);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_panics() {
        let mut a = Allocator::new(10);
        let x = a.alloc(3).unwrap();
        a.free(&x);
        a.free(&x);
    }

    #[test]
    fn reserve_and_helpers() {
        let mut a = Allocator::new(50);
        assert!(a.reserve(Run { start: 10, len: 5 }));
        assert!(!a.reserve(Run { start: 12, len: 1 }), "claimed twice");
        assert!(a.reserve(Run { start: 0, len: 2 }));
        assert_eq!(a.free_blocks(), 43);
        assert_eq!(a.alloc(8).unwrap(), vec![Run { start: 2, len: 8 }]);
        let mut runs = vec![Run { start: 0, len: 2 }];
        extend_runs(
            &mut runs,
            [Run { start: 2, len: 3 }, Run { start: 9, len: 1 }],
        );
        assert_eq!(
            runs,
            vec![Run { start: 0, len: 5 }, Run { start: 9, len: 1 }]
        );
        assert_eq!(nth_block(&runs, 4), Some(4));
        assert_eq!(nth_block(&runs, 5), Some(9));
        assert_eq!(nth_block(&runs, 6), None);
    }
}
