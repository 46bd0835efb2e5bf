//! What an engine's configuration implies, computed by the engine crate from its
//! own formulas ([`crate::EngineSettings::model`]): its layout, what one logical
//! operation moves to and from the backend, the local state it keeps and the
//! size of its rounds. Benchmarks and operators read it (`oram-proxy describe
//! --json`) instead of re-deriving an engine's numbers, so that a change of an
//! engine moves every figure computed from it.

use serde::{Deserialize, Serialize};

/// An engine's sizing and analytical cost at one configuration and shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineModel {
    /// The engine's name (its `kind`: `path`, `ring`, `curious`, `oblivistore`,
    /// `direct`).
    pub kind: String,
    /// Whether the engine hides which blocks are read and written
    /// ([`crate::EngineSettings::oblivious`]).
    pub oblivious: bool,
    /// Logical blocks.
    pub capacity: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// Where the data lives: levels of a tree, or partitions.
    pub layout: Layout,
    /// Bytes of the backend object (or the ranged part of one) that most of the
    /// engine's traffic is made of: a sealed bucket (Path and Ring ORAM, CURIOUS's
    /// sub-ORAM), a sealed slot (ObliviStore reads one slot per request), a sealed
    /// block (`direct`). What a raw measurement of the backend should use.
    pub object_bytes: u64,
    /// What one logical read of a block moves, expected, in steady state.
    pub read_op: Traffic,
    /// What one logical write of a whole block moves, expected, in steady state.
    pub write_op: Traffic,
    /// Backend bytes moved (read and written) per client byte, the larger of a
    /// read's and a write's: the analytical counterpart of the proxy's
    /// `oram_bandwidth_overhead_ratio`.
    pub overhead: f64,
    /// The terms the traffic figures assume, in words.
    pub assumes: String,
    /// An upper bound of the bytes the trusted state takes in a snapshot
    /// ([`crate::EngineSettings::state_bound`]).
    pub state_bound: u64,
    /// The part of [`EngineModel::state_bound`] that neither the tree-top cache
    /// nor the stash (or eviction cache) makes: the position map, the per-bucket
    /// or per-level metadata and the intent record, at their bounds.
    pub state_base_bytes: u64,
    /// Block bytes the tree-top cache keeps locally (every cached bucket's Z
    /// blocks; CURIOUS: all partitions together); 0 without a cache.
    pub cache_bytes: u64,
    /// The largest stash (or eviction cache) allowed after an access, in blocks
    /// ([`crate::EngineSettings::stash_bound`]).
    pub stash_bound: u64,
    /// The block bytes one op of a round reads from the backend, at most
    /// ([`crate::EngineSettings::round_bytes_per_op`]): what sizes rounds in bytes.
    pub round_bytes_per_op: u64,
    /// Ops per round at this shape (its `max_batch`, as the binary fitted it to
    /// its round size in bytes).
    pub ops_per_round: u64,
    /// Backend requests per op, expected, in a round of [`EngineModel::ops_per_round`]
    /// ops on uniformly random blocks (what a stream of whole-block writes or reads
    /// of one object makes): below [`Traffic::requests`] where the engine's round
    /// reads and writes a bucket several ops share once (Path ORAM:
    /// [`TreeLayout::expected_buckets`]); the same elsewhere. Leaves out the
    /// deletes of superseded objects, at most one request a round.
    #[serde(default)]
    pub round_requests_per_op: f64,
}

/// Backend traffic of one logical operation, expected, in steady state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// Bytes read from the backend (sealing and block ids included).
    pub read_bytes: f64,
    /// Bytes written to the backend (sealing and block ids included).
    pub written_bytes: f64,
    /// Blocks moved, read and written together, without ids and sealing: the
    /// unit of the papers' bandwidth figures.
    pub blocks: f64,
    /// Backend requests (GETs, ranged GETs, PUTs), the op in a round of its own:
    /// what a provider bills per request. Rounds of several ops may share some
    /// ([`EngineModel::round_requests_per_op`]).
    #[serde(default)]
    pub requests: f64,
}

impl Traffic {
    /// Bytes moved, read and written.
    pub fn bytes(&self) -> f64 {
        self.read_bytes + self.written_bytes
    }

    /// Each figure times `k` (`k` sub-ORAM accesses per op).
    pub fn scaled(&self, k: f64) -> Self {
        Self {
            read_bytes: self.read_bytes * k,
            written_bytes: self.written_bytes * k,
            blocks: self.blocks * k,
            requests: self.requests * k,
        }
    }
}

/// Where an engine keeps its blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Layout {
    /// One backend object per block, at a fixed place (`direct`).
    Blocks,
    /// A tree of buckets (Path and Ring ORAM).
    Tree(TreeLayout),
    /// One partition's hierarchy of shuffled levels (ObliviStore's partitions).
    Hierarchy(HierarchyLayout),
    /// Partitions, each a sub-ORAM of its own (CURIOUS, ObliviStore).
    Partitions(PartitionLayout),
}

/// A tree ORAM's layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeLayout {
    /// Children per inner node.
    pub arity: u64,
    /// Levels of the tree (`L + 1`: a path has this many buckets).
    pub levels: u32,
    /// The top levels kept in the local tree-top cache.
    pub cached_levels: u32,
    /// Leaves, `arity^L`.
    pub leaves: u64,
    /// Real blocks per bucket (Z).
    pub z: u64,
    /// Dummy slots per bucket (Ring ORAM's S; 0 otherwise).
    pub s: u64,
    /// Accesses per eviction (Ring ORAM's A; 0 when every access evicts).
    pub a: u64,
    /// Bytes of one bucket object on the backend.
    pub bucket_bytes: u64,
}

impl TreeLayout {
    /// Levels kept on the backend (not cached).
    pub fn uncached_levels(&self) -> u32 {
        self.levels.saturating_sub(self.cached_levels)
    }

    /// The backend buckets (uncached levels) that `paths` root-to-leaf paths to
    /// independent uniformly random leaves cross, expected: at a level of `w`
    /// buckets, `w (1 − (1 − 1/w)^paths)`. One path crosses one bucket a level;
    /// many paths share the levels narrower than their number.
    pub fn expected_buckets(&self, paths: u64) -> f64 {
        let k = paths as f64;
        let mut width = (self.arity as f64).powi(self.cached_levels as i32);
        let mut sum = 0.0;
        for _ in self.cached_levels..self.levels {
            // (1 − 1/w)^k as exp(k ln(1 − 1/w)), exact enough for w up to 2^60.
            sum += width * -(k * (-1.0 / width).ln_1p()).exp_m1();
            width *= self.arity as f64;
        }
        sum
    }
}

/// One partition's hierarchy of levels (ObliviStore).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HierarchyLayout {
    /// The top level: levels `0..=top_level`, level `l` one object of
    /// `2^(l+1)` slots.
    pub top_level: u32,
    /// Bytes of one sealed slot.
    pub slot_bytes: u64,
}

/// A partitioned engine's layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionLayout {
    /// Partitions.
    pub partitions: u64,
    /// Partition accesses per op, ν (one, and a background eviction with
    /// probability ν − 1).
    pub eviction_rate: f64,
    /// Blocks one partition is sized for.
    pub sub_capacity: u64,
    /// What every partition is: a sub-ORAM's name (`path`, `ring`) or
    /// `levels` (a hierarchy).
    pub sub_kind: String,
    /// Every partition's layout.
    pub sub: Box<Layout>,
}

/// Backend objects one position of a tree or a hierarchy level may have at once:
/// the live one, the previous one and the one the last checkpoint refers to
/// (`oram_state::SlotPolicy::BeforeCommit`).
pub const SLOTS_PER_POSITION: u64 = 3;

/// Backend objects one block of the `direct` baseline may have at once (its two
/// fixed keys, `<prefix>/b/<b>` and `<prefix>/b/<b>.1`).
pub const SLOTS_PER_DIRECT_BLOCK: u64 = 2;

impl Layout {
    /// The most bytes this layout's objects can take on the backend at rest, for
    /// `capacity` blocks and objects of `object_bytes` (a tree's buckets, a
    /// level's slots): every backend position in all of its slots. The tree-top
    /// cache's levels are not on the backend. What the storage server stores, and
    /// bills, once every position has been rewritten across a checkpoint; the
    /// volume adds its header, checkpoints and shipped log.
    pub fn backend_bytes_bound(&self, capacity: u64, object_bytes: u64) -> u64 {
        match self {
            Layout::Blocks => capacity
                .saturating_mul(SLOTS_PER_DIRECT_BLOCK)
                .saturating_mul(object_bytes),
            Layout::Tree(t) => {
                let mut positions = 0u64;
                let mut width = t.arity.saturating_pow(t.cached_levels);
                for _ in t.cached_levels..t.levels {
                    positions = positions.saturating_add(width);
                    width = width.saturating_mul(t.arity);
                }
                positions
                    .saturating_mul(SLOTS_PER_POSITION)
                    .saturating_mul(t.bucket_bytes)
            }
            // Level l is one object of 2^(l+1) slots: 2^(top+2) - 2 slots in all.
            Layout::Hierarchy(h) => 1u64
                .checked_shl(h.top_level + 2)
                .unwrap_or(u64::MAX)
                .saturating_sub(2)
                .saturating_mul(h.slot_bytes)
                .saturating_mul(SLOTS_PER_POSITION),
            Layout::Partitions(p) => p
                .sub
                .backend_bytes_bound(p.sub_capacity, object_bytes)
                .saturating_mul(p.partitions),
        }
    }
}

impl EngineModel {
    /// The tree of the engine, or of each of its partitions; `None` without one.
    pub fn tree(&self) -> Option<&TreeLayout> {
        match &self.layout {
            Layout::Tree(t) => Some(t),
            Layout::Partitions(p) => match p.sub.as_ref() {
                Layout::Tree(t) => Some(t),
                _ => None,
            },
            _ => None,
        }
    }

    /// The partitions, if the engine has any.
    pub fn partitions(&self) -> Option<&PartitionLayout> {
        match &self.layout {
            Layout::Partitions(p) => Some(p),
            _ => None,
        }
    }

    /// The hierarchy of each partition, if the engine has one.
    pub fn hierarchy(&self) -> Option<&HierarchyLayout> {
        match &self.layout {
            Layout::Hierarchy(h) => Some(h),
            Layout::Partitions(p) => match p.sub.as_ref() {
                Layout::Hierarchy(h) => Some(h),
                _ => None,
            },
            _ => None,
        }
    }

    /// The most bytes the engine's objects can take on the backend at rest
    /// ([`Layout::backend_bytes_bound`]; measured against it in
    /// `benches/footprint/RESULTS.md`).
    pub fn backend_bytes_bound(&self) -> u64 {
        self.layout
            .backend_bytes_bound(self.capacity, self.object_bytes)
    }

    /// Logical bytes of the volume (capacity × block size).
    pub fn oram_bytes(&self) -> u64 {
        self.capacity.saturating_mul(self.block_size)
    }

    /// Blocks moved per block accessed (the papers' unit), the larger of a
    /// read's and a write's.
    pub fn overhead_blocks(&self) -> f64 {
        self.read_op.blocks.max(self.write_op.blocks)
    }

    /// The larger of a read's and a write's bytes moved per client byte
    /// ([`EngineModel::overhead`] computed from the traffic figures).
    pub fn overhead_of(read_op: &Traffic, write_op: &Traffic, block_size: u64) -> f64 {
        read_op.bytes().max(write_op.bytes()) / block_size.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_of_blocks_and_hierarchies() {
        assert_eq!(Layout::Blocks.backend_bytes_bound(100, 10), 2 * 100 * 10);
        let h = Layout::Hierarchy(HierarchyLayout {
            top_level: 2,
            slot_bytes: 10,
        });
        // Levels of 2, 4 and 8 slots, each in 3 slots of its own.
        assert_eq!(h.backend_bytes_bound(0, 0), 14 * 10 * 3);
    }

    #[test]
    fn paths_share_the_narrow_levels() {
        let tree = |cached_levels| TreeLayout {
            arity: 2,
            levels: 3,
            cached_levels,
            leaves: 4,
            z: 4,
            s: 0,
            a: 0,
            bucket_bytes: 1,
        };
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // One path: a bucket a level.
        assert!(near(tree(0).expected_buckets(1), 3.0));
        assert!(near(tree(1).expected_buckets(1), 2.0));
        // Two: the root once, 2 (1 − 1/4) and 4 (1 − 9/16) below it.
        assert!(near(tree(0).expected_buckets(2), 1.0 + 1.5 + 1.75));
        // Many: every bucket of the uncached levels.
        assert!(near(tree(1).expected_buckets(10_000), 6.0));
        // A wide level: as many buckets as paths, less their collisions.
        let wide = TreeLayout {
            levels: 41,
            cached_levels: 40,
            ..tree(0)
        };
        let w = 2f64.powi(40);
        assert!((wide.expected_buckets(64) - w * (1.0 - (1.0 - 1.0 / w).powi(64))).abs() < 1e-6);
        assert!(wide.expected_buckets(64) < 64.0 && wide.expected_buckets(64) > 63.99);
    }

    #[test]
    fn partitions_show_their_sub_layout() {
        let tree = TreeLayout {
            arity: 3,
            levels: 5,
            cached_levels: 1,
            leaves: 81,
            z: 5,
            s: 0,
            a: 0,
            bucket_bytes: 1000,
        };
        let t = Traffic {
            read_bytes: 4000.0,
            written_bytes: 4000.0,
            blocks: 40.0,
            requests: 8.0,
        };
        let m = EngineModel {
            kind: "curious".into(),
            oblivious: true,
            capacity: 100,
            block_size: 100,
            layout: Layout::Partitions(PartitionLayout {
                partitions: 10,
                eviction_rate: 1.25,
                sub_capacity: 45,
                sub_kind: "path".into(),
                sub: Box::new(Layout::Tree(tree.clone())),
            }),
            object_bytes: 1000,
            read_op: t.scaled(1.25),
            write_op: t.scaled(1.25),
            overhead: EngineModel::overhead_of(&t.scaled(1.25), &t.scaled(1.25), 100),
            assumes: String::new(),
            state_bound: 1,
            state_base_bytes: 1,
            cache_bytes: 0,
            stash_bound: 0,
            round_bytes_per_op: 1,
            ops_per_round: 1,
            round_requests_per_op: 10.0,
        };
        assert_eq!(m.tree(), Some(&tree));
        assert_eq!(tree.uncached_levels(), 4);
        assert!(m.hierarchy().is_none());
        assert_eq!(m.overhead, 100.0);
        assert_eq!(m.overhead_blocks(), 50.0);
        assert_eq!(m.oram_bytes(), 10_000);
        // 3 + 9 + 27 + 81 uncached buckets in 3 slots, in each of 10 partitions.
        assert_eq!(m.backend_bytes_bound(), 10 * 120 * 3 * 1000);
    }
}
