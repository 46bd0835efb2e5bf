//! Pure, synchronous Path ORAM mechanics: tree geometry, bucket encoding and
//! eviction planning. No I/O, so they are tested directly.
//!
//! Nodes are numbered as a binary heap: the root is 1, the children of `n` are `2n`
//! and `2n + 1`, and leaf `x` (0-based) is node `leaves + x` at level `L`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes};
use oram_state::Bucket;

/// Slot id marking an empty slot in an encoded bucket.
pub const EMPTY_SLOT: u64 = u64::MAX;

/// The shape of a Path ORAM tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Level of the leaves (`L`); the root is level 0, a path has `L + 1` buckets.
    pub leaf_level: u32,
    /// Number of leaves, `2^L`.
    pub leaves: u64,
    /// Blocks per bucket.
    pub z: usize,
    /// Bytes per block.
    pub block_size: usize,
}

impl Geometry {
    /// The tree for `capacity` blocks: `leaves` leaves if given (rounded up to a power
    /// of two), else the smallest power of two ≥ ⌈capacity / 2⌉.
    pub fn new(capacity: u64, z: usize, block_size: usize, leaves: Option<u64>) -> Self {
        let wanted = leaves.unwrap_or(capacity.div_ceil(2)).max(1);
        let leaves = wanted.next_power_of_two();
        Self {
            leaf_level: leaves.trailing_zeros(),
            leaves,
            z,
            block_size,
        }
    }

    /// Number of buckets in the tree.
    pub fn node_count(&self) -> u64 {
        2 * self.leaves - 1
    }

    /// Level of `node` (root = 0).
    pub fn level_of(node: u64) -> u32 {
        63 - node.leading_zeros()
    }

    /// The bucket at `level` on the path to `leaf`.
    pub fn node_on_path(&self, leaf: u64, level: u32) -> u64 {
        (self.leaves + leaf) >> (self.leaf_level - level)
    }

    /// The buckets of the path to `leaf`, root first.
    pub fn path(&self, leaf: u64) -> impl Iterator<Item = u64> + '_ {
        (0..=self.leaf_level).map(move |l| self.node_on_path(leaf, l))
    }

    /// Whether `node` lies on the path to `leaf`.
    pub fn on_path(&self, node: u64, leaf: u64) -> bool {
        let level = Self::level_of(node);
        level <= self.leaf_level && self.node_on_path(leaf, level) == node
    }

    /// Size of an encoded bucket: `z` slots of an 8-byte id and a block.
    pub fn bucket_bytes(&self) -> usize {
        self.z * (8 + self.block_size)
    }
}

/// Encodes a bucket as `z` fixed-size slots (empty slots are id `EMPTY_SLOT` and zeros),
/// so every bucket has the same size whatever it holds.
pub fn encode_bucket(geo: &Geometry, bucket: &[(u64, Bytes)]) -> Bytes {
    assert!(bucket.len() <= geo.z, "bucket over capacity");
    let mut out = Vec::with_capacity(geo.bucket_bytes());
    for (id, data) in bucket {
        debug_assert_eq!(data.len(), geo.block_size);
        out.put_u64_le(*id);
        out.extend_from_slice(data);
    }
    for _ in bucket.len()..geo.z {
        out.put_u64_le(EMPTY_SLOT);
        out.resize(out.len() + geo.block_size, 0);
    }
    out.into()
}

/// Decodes a bucket; `Err` describes a malformed encoding.
pub fn decode_bucket(geo: &Geometry, plain: &Bytes) -> Result<Bucket, String> {
    if plain.len() != geo.bucket_bytes() {
        return Err(format!(
            "bucket has {} bytes, expected {}",
            plain.len(),
            geo.bucket_bytes()
        ));
    }
    let slot = 8 + geo.block_size;
    let mut out = Vec::new();
    for i in 0..geo.z {
        let s = i * slot;
        let id = u64::from_le_bytes(plain[s..s + 8].try_into().expect("8 bytes"));
        if id != EMPTY_SLOT {
            out.push((id, plain.slice(s + 8..s + slot)));
        }
    }
    Ok(out)
}

/// Plans the eviction of stashed blocks into the buckets being written.
///
/// `stash` lists `(block, leaf)`; `write_nodes` is a union of root-to-leaf paths. Each
/// block goes into the deepest bucket of `write_nodes` on its own path that still has
/// room, blocks able to go deepest placed first (the greedy bottom-up filling of
/// Path ORAM, extended to a union of paths). Returns node → blocks placed there;
/// blocks not placed stay in the stash.
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
        assert_eq!(Geometry::level_of(1), 0);
        assert_eq!(Geometry::level_of(15), 3);
        // Every node of the tree is on some path.
        let all: BTreeSet<u64> = (0..g.leaves)
            .flat_map(|x| g.path(x).collect::<Vec<_>>())
            .collect();
        assert_eq!(all.len() as u64, g.node_count());
    }

    #[test]
    fn bucket_codec_round_trips_at_fixed_size() {
        let g = Geometry::new(64, 4, 16, None);
        let b: Bucket = vec![
            (3, Bytes::from(vec![1u8; 16])),
            (9, Bytes::from(vec![2u8; 16])),
        ];
        let enc = encode_bucket(&g, &b);
        assert_eq!(enc.len(), g.bucket_bytes());
        assert_eq!(encode_bucket(&g, &[]).len(), g.bucket_bytes());
        assert_eq!(decode_bucket(&g, &enc).unwrap(), b);
        assert!(decode_bucket(&g, &enc.slice(1..)).is_err());
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
