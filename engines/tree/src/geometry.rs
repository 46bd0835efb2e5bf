//! Tree geometry and eviction planning: pure, synchronous, tested directly.
//!
//! Nodes are numbered level by level from the root, 1: level `l` holds nodes
//! `first(l) .. first(l) + k^l` where `k` is the arity and
//! `first(l) = 1 + (k^l − 1)/(k − 1)`. For a binary tree this is the heap numbering
//! (children of `n` are `2n` and `2n + 1`, leaf `x` is node `leaves + x`), which is
//! how Path and Ring ORAM name their backend objects.

use std::collections::{BTreeMap, BTreeSet};

/// The shape of a tree ORAM: arity, height, bucket size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Children per inner node (2 for Path and Ring ORAM).
    pub arity: u64,
    /// Level of the leaves (`L`); the root is level 0, a path has `L + 1` buckets.
    pub leaf_level: u32,
    /// Number of leaves, `arity^L`.
    pub leaves: u64,
    /// Real blocks per bucket (Z).
    pub z: usize,
    /// Bytes per block.
    pub block_size: usize,
}

impl Geometry {
    /// The binary tree for `capacity` blocks: `leaves` leaves if given (rounded up
    /// to a power of two), else the smallest power of two ≥ ⌈capacity / 2⌉.
    pub fn new(capacity: u64, z: usize, block_size: usize, leaves: Option<u64>) -> Self {
        let wanted = leaves.unwrap_or(capacity.div_ceil(2)).max(1);
        Self::with_arity(2, wanted, z, block_size)
    }

    /// The tree of arity `arity` for `capacity` blocks: for 2, [`Geometry::new`];
    /// for more, the shallowest tree whose two lowest levels hold the capacity
    /// (`z·(k^L + k^(L−1)) ≥ capacity`, the sizing of the k-ary tree sub-ORAM of
    /// CURIOUS, "Practicing Oblivious Access on Cloud Storage", CCS 2015, and of
    /// the master's thesis "Oblivious RAM in practice", NTNU 2019). `leaves`
    /// overrides the number of leaves.
    pub fn for_capacity(
        arity: u64,
        capacity: u64,
        z: usize,
        block_size: usize,
        leaves: Option<u64>,
    ) -> Self {
        if arity == 2 {
            return Self::new(capacity, z, block_size, leaves);
        }
        let wanted = leaves.unwrap_or_else(|| {
            let z = (z as u64).max(1);
            let mut n = 1u64;
            // Leaves k^L with z·(k^L + k^(L−1)) ≥ capacity (the root alone: z).
            let holds = |n: u64| {
                let upper = if n == 1 { 0 } else { n / arity };
                z.saturating_mul(n.saturating_add(upper))
            };
            while holds(n) < capacity {
                n = n.saturating_mul(arity);
            }
            n
        });
        Self::with_arity(arity, wanted, z, block_size)
    }

    /// The tree of the given arity (≥ 2) with at least `leaves` leaves (rounded up
    /// to a power of the arity).
    pub fn with_arity(arity: u64, leaves: u64, z: usize, block_size: usize) -> Self {
        assert!(arity >= 2, "a tree has arity 2 or more");
        let mut n = 1u64;
        let mut level = 0;
        while n < leaves.max(1) {
            n = n.checked_mul(arity).expect("tree too large");
            level += 1;
        }
        Self {
            arity,
            leaf_level: level,
            leaves: n,
            z,
            block_size,
        }
    }

    /// The same tree with `levels` more levels below its leaves: every leaf `x`
    /// has the leaves `x·k^levels ..< (x + 1)·k^levels` below it, whose paths run
    /// through the whole path to `x` (the nodes are numbered level by level, so
    /// every existing node keeps its number and the new ones follow). `None`
    /// if the number of leaves would not fit in a `u64`.
    pub fn deeper(&self, levels: u32) -> Option<Self> {
        let factor = self.arity.checked_pow(levels)?;
        Some(Self {
            leaf_level: self.leaf_level.checked_add(levels)?,
            leaves: self.leaves.checked_mul(factor)?,
            ..*self
        })
    }

    /// The first node of `level`.
    pub fn first_of_level(&self, level: u32) -> u64 {
        if self.arity == 2 {
            1 << level
        } else {
            1 + (self.arity.pow(level) - 1) / (self.arity - 1)
        }
    }

    /// Number of buckets in the tree.
    pub fn node_count(&self) -> u64 {
        self.first_of_level(self.leaf_level + 1) - 1
    }

    /// Number of buckets in the levels above `level` (the first `level` levels):
    /// nodes `1 ..= nodes_above(level)`.
    pub fn nodes_above(&self, level: u32) -> u64 {
        self.first_of_level(level.min(self.leaf_level + 1)) - 1
    }

    /// The most levels from the root (at most the whole tree) whose buckets' block
    /// payloads — `Z × block_size` bytes each — fit in `budget` bytes: the depth
    /// of a tree-top cache given in bytes.
    pub fn levels_within(&self, budget: u64) -> u32 {
        let bucket = (self.z as u64)
            .saturating_mul(self.block_size as u64)
            .max(1);
        let mut levels = 0;
        while levels <= self.leaf_level
            && self.nodes_above(levels + 1).saturating_mul(bucket) <= budget
        {
            levels += 1;
        }
        levels
    }

    /// The depth of a tree-top cache configured as `levels` (if set) or as a
    /// budget of `mib` MiB ([`Geometry::levels_within`]); never more than the
    /// tree has.
    pub fn cached_levels(&self, levels: Option<u32>, mib: u64) -> u32 {
        levels
            .unwrap_or_else(|| self.levels_within(mib.saturating_mul(1 << 20)))
            .min(self.leaf_level + 1)
    }

    /// Level of `node` (root = 0).
    pub fn level(&self, node: u64) -> u32 {
        if self.arity == 2 {
            return 63 - node.leading_zeros();
        }
        let mut l = 0;
        while l < 63 && self.first_of_level(l + 1) <= node {
            l += 1;
        }
        l
    }

    /// The bucket at `level` on the path to `leaf`.
    pub fn node_on_path(&self, leaf: u64, level: u32) -> u64 {
        if self.arity == 2 {
            return (self.leaves + leaf) >> (self.leaf_level - level);
        }
        self.first_of_level(level) + leaf / self.arity.pow(self.leaf_level - level)
    }

    /// The buckets of the path to `leaf`, root first.
    pub fn path(&self, leaf: u64) -> impl Iterator<Item = u64> + '_ {
        (0..=self.leaf_level).map(move |l| self.node_on_path(leaf, l))
    }

    /// Whether `node` lies on the path to `leaf`.
    pub fn on_path(&self, node: u64, leaf: u64) -> bool {
        let level = self.level(node);
        level <= self.leaf_level && self.node_on_path(leaf, level) == node
    }

    /// The leaf of the `g`-th eviction in reverse-lexicographic order: `g mod
    /// leaves` with its `L` base-`arity` digits reversed, so that consecutive
    /// evictions spread over the tree and every bucket at level `l` is evicted
    /// once every `arity^l` of them.
    pub fn reverse_lexicographic(&self, g: u64) -> u64 {
        let mut x = g % self.leaves;
        let mut out = 0;
        for _ in 0..self.leaf_level {
            out = out * self.arity + x % self.arity;
            x /= self.arity;
        }
        out
    }
}

/// Plans the eviction of stashed blocks into the buckets being written.
///
/// `stash` lists `(block, leaf)`; `write_nodes` is a union of root-to-leaf paths. Each
/// block goes into the deepest bucket of `write_nodes` on its own path that still has
/// room (`z` blocks), blocks able to go deepest placed first (the greedy bottom-up
/// filling of Path ORAM, extended to a union of paths). Returns node → blocks placed
/// there; blocks not placed stay in the stash.
pub fn plan_eviction(
    geo: &Geometry,
    stash: &[(u64, u64)],
    write_nodes: &BTreeSet<u64>,
) -> BTreeMap<u64, Vec<u64>> {
    // Deepest level at which the block's path still runs inside the written subtree.
    let mut order: Vec<(u32, u64, u64)> = stash
        .iter()
        .filter_map(|&(block, leaf)| {
            (0..=geo.leaf_level)
                .rev()
                .find(|&l| write_nodes.contains(&geo.node_on_path(leaf, l)))
                .map(|d| (d, block, leaf))
        })
        .collect();
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut plan: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (deepest, block, leaf) in order {
        for l in (0..=deepest).rev() {
            let node = geo.node_on_path(leaf, l);
            let slot = plan.entry(node).or_default();
            if slot.len() < geo.z {
                slot.push(block);
                break;
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(capacity: u64, z: usize) -> Geometry {
        Geometry::new(capacity, z, 4, None)
    }

    #[test]
    fn geometry_for_any_capacity() {
        for (cap, leaves) in [
            (1u64, 1u64),
            (2, 1),
            (3, 2),
            (1000, 512),
            (1025, 1024),
            (1 << 14, 1 << 13),
        ] {
            let g = geo(cap, 4);
            assert_eq!(g.leaves, leaves, "capacity {cap}");
            assert!(g.leaves.is_power_of_two());
            assert!(
                g.node_count() as usize * g.z >= cap as usize * 2,
                "room for twice the blocks"
            );
        }
        assert_eq!(Geometry::new(100, 4, 4, Some(100)).leaves, 128);
    }

    #[test]
    fn paths_run_from_root_to_leaf() {
        let g = geo(16, 4); // 8 leaves, L = 3
        assert_eq!(g.leaf_level, 3);
        assert_eq!(g.path(0).collect::<Vec<_>>(), vec![1, 2, 4, 8]);
        assert_eq!(g.path(7).collect::<Vec<_>>(), vec![1, 3, 7, 15]);
        assert_eq!(g.path(5).collect::<Vec<_>>(), vec![1, 3, 6, 13]);
        assert!(g.on_path(6, 5) && g.on_path(6, 4) && !g.on_path(6, 3));
        assert_eq!(g.level(1), 0);
        assert_eq!(g.level(15), 3);
        assert_eq!(g.nodes_above(2), 3);
        // Every node of the tree is on some path.
        let all: BTreeSet<u64> = (0..g.leaves)
            .flat_map(|x| g.path(x).collect::<Vec<_>>())
            .collect();
        assert_eq!(all.len() as u64, g.node_count());
    }

    #[test]
    fn a_cache_budget_in_bytes_gives_whole_levels() {
        // 1 GiB of 16 KiB blocks, Z = 4: 2^15 leaves, 16 levels of 64 KiB buckets.
        let g = Geometry::new(65_536, 4, 16_384, None);
        assert_eq!(g.leaf_level, 15);
        // 16 MiB holds the 255 buckets of 8 levels (255 × 64 KiB), not 511.
        assert_eq!(g.levels_within(16 << 20), 8);
        assert_eq!(g.levels_within((255 << 16) - 1), 7);
        assert_eq!(g.levels_within(0), 0);
        assert_eq!(g.levels_within(u64::MAX), 16, "never more than the tree");
        // Configured as a depth or as MiB; an explicit depth wins, capped too.
        assert_eq!(g.cached_levels(None, 16), 8);
        assert_eq!(g.cached_levels(Some(3), 1 << 20), 3);
        assert_eq!(g.cached_levels(Some(40), 0), 16);
        // The same budget with 4 KiB blocks: 1023 buckets of 16 KiB, 10 levels.
        assert_eq!(
            Geometry::new(262_144, 4, 4096, None).levels_within(16 << 20),
            10
        );
    }

    #[test]
    fn a_k_ary_tree_holds_its_capacity_in_its_two_lowest_levels() {
        // z = 5, k = 3: 5·(3^L + 3^(L−1)) = 20·3^(L−1) ≥ capacity.
        let g = Geometry::for_capacity(3, 1000, 5, 16, None);
        assert_eq!((g.arity, g.leaf_level, g.leaves), (3, 5, 243));
        // The two lowest levels hold 5·(243 + 81) = 1620 ≥ 1000; one level less
        // would hold 5·(81 + 27) = 540 < 1000.
        let smaller = Geometry::for_capacity(3, 540, 5, 16, None);
        assert_eq!(smaller.leaves, 81);
        assert_eq!(Geometry::for_capacity(3, 1, 5, 16, None).leaves, 1);
        assert_eq!(
            Geometry::for_capacity(2, 1000, 4, 16, None),
            Geometry::new(1000, 4, 16, None)
        );
    }

    #[test]
    fn k_ary_trees_number_levels_in_order() {
        let g = Geometry::with_arity(4, 10, 2, 8); // 16 leaves, L = 2
        assert_eq!((g.leaves, g.leaf_level, g.node_count()), (16, 2, 21));
        assert_eq!(g.first_of_level(1), 2);
        assert_eq!(g.first_of_level(2), 6);
        assert_eq!(g.path(0).collect::<Vec<_>>(), vec![1, 2, 6]);
        assert_eq!(g.path(15).collect::<Vec<_>>(), vec![1, 5, 21]);
        assert_eq!(g.path(6).collect::<Vec<_>>(), vec![1, 3, 12]);
        for n in 1..=g.node_count() {
            let l = g.level(n);
            assert!(g.first_of_level(l) <= n && n < g.first_of_level(l + 1));
        }
        let all: BTreeSet<u64> = (0..g.leaves).flat_map(|x| g.path(x)).collect();
        assert_eq!(all.len() as u64, g.node_count());
        // Digit reversal visits every leaf once per round of evictions.
        let order: BTreeSet<u64> = (0..16).map(|i| g.reverse_lexicographic(i)).collect();
        assert_eq!(order.len(), 16);
        assert_eq!(g.reverse_lexicographic(1), 4);
    }

    #[test]
    fn a_deeper_tree_extends_every_path() {
        for g in [geo(16, 4), Geometry::with_arity(3, 9, 5, 8)] {
            let d = g.deeper(2).unwrap();
            let k2 = g.arity * g.arity;
            assert_eq!((d.leaf_level, d.leaves), (g.leaf_level + 2, g.leaves * k2));
            // Every node keeps its number; the old path of `x` is a prefix of
            // the paths of the leaves below it, and of no other leaf's.
            for x in 0..g.leaves {
                let old: Vec<u64> = g.path(x).collect();
                for y in 0..d.leaves {
                    let new: Vec<u64> = d.path(y).collect();
                    assert_eq!(new[..old.len()] == old[..], y / k2 == x, "{x} {y}");
                }
            }
            assert_eq!(d.first_of_level(g.leaf_level + 1), g.node_count() + 1);
        }
        assert_eq!(geo(16, 4).deeper(70), None);
    }

    #[test]
    fn reverse_lexicographic_order_of_a_binary_tree() {
        let g = Geometry::new(32, 4, 4, Some(16));
        let first: Vec<u64> = (0..4).map(|i| g.reverse_lexicographic(i)).collect();
        assert_eq!(first, vec![0, 8, 4, 12]);
        assert_eq!(g.reverse_lexicographic(16), 0);
        assert_eq!(Geometry::new(1, 4, 4, Some(1)).reverse_lexicographic(5), 0);
    }

    #[test]
    fn eviction_respects_paths_and_capacity() {
        let g = geo(16, 2); // 8 leaves, Z = 2
        let write: BTreeSet<u64> = g.path(0).collect();
        // Six blocks all mapped to leaf 0, two to leaf 7 (only the root is shared).
        let mut stash: Vec<(u64, u64)> = (0..6).map(|b| (b, 0)).collect();
        stash.push((10, 7));
        stash.push((11, 7));
        let plan = plan_eviction(&g, &stash, &write);
        let placed: usize = plan.values().map(Vec::len).sum();
        // Path of 4 buckets × Z=2 = 8 slots; the leaf-0 blocks fill the deep ones first.
        assert_eq!(plan[&8].len(), 2);
        assert_eq!(plan[&4].len(), 2);
        assert_eq!(plan[&2].len(), 2);
        // The root takes the two leaf-7 blocks only if the deeper leaf-0 blocks left room.
        assert_eq!(plan[&1].len(), 2);
        assert_eq!(placed, 8);
        for (node, blocks) in &plan {
            assert!(write.contains(node));
            for b in blocks {
                let leaf = stash.iter().find(|s| s.0 == *b).unwrap().1;
                assert!(g.on_path(*node, leaf), "block {b} placed off its path");
            }
        }
    }

    #[test]
    fn eviction_over_a_union_of_paths_places_in_both_subtrees() {
        let g = geo(16, 1);
        let write: BTreeSet<u64> = g.path(0).chain(g.path(7)).collect();
        let stash = vec![(1, 0), (2, 7), (3, 3)];
        let plan = plan_eviction(&g, &stash, &write);
        assert_eq!(plan[&8], vec![1]);
        assert_eq!(plan[&15], vec![2]);
        // Leaf 3's path leaves the union below node 2: the deepest shared bucket is 2.
        assert_eq!(plan[&2], vec![3]);
    }
}
