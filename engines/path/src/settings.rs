//! Path ORAM's part of the `[engine]` configuration (`kind = "path"`).

use std::collections::BTreeMap;
use std::sync::Arc;

use oram_engine::{
    adopt_value, recorded_value, snapshot_row, EngineModel, EngineSettings, Layout, Oram, Parts,
    Result, Shape, Traffic, TreeLayout,
};
use oram_seal::Sealer;
use serde::{Deserialize, Serialize};

use crate::{bucket, Geometry, PathConfig, PathOram, TreeConfig};

/// Path ORAM's settings in `[engine]` (with `kind = "path"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PathSettings {
    /// Blocks per bucket (Z). Fixed when the volume is created.
    pub z: usize,
    /// Tree levels kept in local memory (tree-top cache); `None` (the default):
    /// as many as [`PathSettings::tree_cache_mib`] holds. Fixed when the volume is
    /// created: the cached buckets live in the trusted state, not on the backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_levels: Option<u32>,
    /// The tree-top cache's budget in MiB when `cached_levels` is not set: the
    /// most whole levels whose buckets (Z blocks each) fit. Used when the volume
    /// is created; an existing volume keeps its recorded levels.
    pub tree_cache_mib: u64,
    /// Largest stash allowed after an access.
    pub stash_bound: usize,
    /// Accepted for configuration files of earlier versions; unused (a round's
    /// buckets are written before its commit, one round at a time).
    pub max_inflight_writebacks: usize,
    /// Children per inner node (2: binary). Fixed when the volume is created. Not
    /// in `[engine]` for `kind = "path"`; a partition framework sets it for its
    /// sub-ORAMs.
    #[serde(skip)]
    pub arity: u64,
    /// The tree-top cache's budget in bytes, overriding `tree_cache_mib` (a
    /// partition framework's share for one sub-ORAM). Not in `[engine]`.
    #[serde(skip)]
    pub tree_cache_bytes: Option<u64>,
    /// Attempts of a round within one access, overriding the default (3): a
    /// partition framework repeats failed rounds itself, as a whole (1). Not in
    /// `[engine]`.
    #[serde(skip)]
    pub round_attempts: Option<u32>,
    /// A binary tree's leaves for `capacity` blocks: the smallest power of two
    /// ≥ ⌈capacity / leaf_divisor⌉, so Z·2·leaves ≈ (2Z ÷ leaf_divisor) slots per
    /// block. 4 (the default for a new volume, Z = 4: two slots per block, half
    /// the backend storage of 2) — the stash stays as small as with 2 in the
    /// simulation of `examples/stash.rs` (largest 12 blocks in a million
    /// accesses, bound 89; `benches/footprint/RESULTS.md`). Recorded in the
    /// volume when it is not 2, the sizing of earlier versions, which a volume
    /// recording none keeps. Not in `[engine]`; a partition framework's binary
    /// sub-ORAMs use 2.
    #[serde(skip)]
    pub leaf_divisor: u64,
    /// The tree's key shards ([`oram_tree::TreeConfig::key_shards`]):
    /// [`oram_tree::DEFAULT_KEY_SHARDS`] for a new volume, recorded; a volume
    /// recording none has none. Not in `[engine]`; a partition framework's
    /// sub-ORAMs have none (their partitions are prefixes of their own).
    #[serde(skip)]
    pub key_shards: u32,
}

impl Default for PathSettings {
    fn default() -> Self {
        Self {
            z: 4,
            cached_levels: None,
            tree_cache_mib: 16,
            stash_bound: 89,
            max_inflight_writebacks: 4,
            arity: 2,
            tree_cache_bytes: None,
            round_attempts: None,
            leaf_divisor: 4,
            key_shards: oram_tree::DEFAULT_KEY_SHARDS,
        }
    }
}

impl PathSettings {
    /// The documentation of these settings in `oram-proxy example-config`, at
    /// their defaults.
    pub const EXAMPLE: &'static str = r#"# Path ORAM (kind = "path"): blocks per bucket (Z). Fixed when the data
# directory is created.
z = 4
# Path and Ring ORAM: MiB of local memory for the tree-top cache: the top levels
# of the tree that fit (whole levels of Z-block buckets) are kept in the local
# state instead of the backend; each level saves a backend GET and PUT per
# access. Used when the data directory is created.
tree_cache_mib = 16
# Path and Ring ORAM: the tree-top cache in levels instead (each costs as much
# memory as all those above it); overrides tree_cache_mib. Fixed when the data
# directory is created (those buckets live in the local state).
# cached_levels = 8
# Path ORAM: largest stash allowed after an access.
stash_bound = 89
"#;

    /// The engine configuration for a volume of `shape`.
    pub fn config(&self, shape: &Shape) -> PathConfig {
        let mut tree = TreeConfig::for_shape(
            shape,
            self.cached_levels(shape),
            self.stash_bound,
            self.max_inflight_writebacks,
        );
        if let Some(n) = self.round_attempts {
            tree.round_attempts = n;
        }
        tree.leaves = self.leaves(shape);
        tree.key_shards = self.key_shards;
        PathConfig {
            tree,
            z: self.z,
            arity: self.arity,
        }
    }

    /// The trusted state's bound without the stash and the tree-top cache: the
    /// position map, a version per bucket and the intent record (a varint, ≤ 10
    /// bytes, per block and per draw, two draws per op).
    fn state_base(&self, shape: &Shape) -> u64 {
        let positions = shape.capacity * snapshot_row(8, 8);
        let nodes = self.geometry(shape).node_count() * snapshot_row(8, 24);
        let intent = snapshot_row(0, 32 + 30 * shape.max_batch as u64);
        positions + nodes + intent
    }

    fn geometry(&self, shape: &Shape) -> Geometry {
        Geometry::for_capacity(
            self.arity,
            shape.capacity,
            self.z,
            shape.block_size,
            self.leaves(shape),
        )
    }

    /// The leaves asked of a binary tree ([`PathSettings::leaf_divisor`]); a
    /// k-ary tree is sized by [`Geometry::for_capacity`].
    fn leaves(&self, shape: &Shape) -> Option<u64> {
        (self.arity == 2).then(|| shape.capacity.div_ceil(self.leaf_divisor.max(1)))
    }

    /// The tree-top cache's levels for a volume of `shape`: `cached_levels`, or
    /// those `tree_cache_mib` holds; never more than the tree has.
    pub fn cached_levels(&self, shape: &Shape) -> u32 {
        let geo = self.geometry(shape);
        match (self.cached_levels, self.tree_cache_bytes) {
            (None, Some(bytes)) => geo.levels_within(bytes),
            _ => geo.cached_levels(self.cached_levels, self.tree_cache_mib),
        }
    }
}

impl EngineSettings for PathSettings {
    fn kind(&self) -> &'static str {
        "path"
    }

    fn validate(&self, _: &Shape) -> std::result::Result<(), String> {
        if self.z == 0 || self.max_inflight_writebacks == 0 {
            return Err("engine.z and engine.max_inflight_writebacks must be positive".into());
        }
        if !(2..=64).contains(&self.arity) {
            return Err("the tree's arity must be 2 to 64".into());
        }
        // Fewer leaves than a quarter of the blocks fills the tree: the stash
        // grows without bound (`examples/stash.rs`).
        if !(1..=4).contains(&self.leaf_divisor) {
            return Err(format!(
                "the tree's leaf divisor must be 1 to 4, not {}",
                self.leaf_divisor
            ));
        }
        oram_tree::check_key_shards(self.key_shards)
    }

    fn fixed(&self, shape: &Shape) -> BTreeMap<String, String> {
        let geo = self.geometry(shape);
        let mut fixed = BTreeMap::from([
            ("z".to_string(), self.z.to_string()),
            ("leaves".to_string(), geo.leaves.to_string()),
            (
                "cached_levels".to_string(),
                self.cached_levels(shape).to_string(),
            ),
        ]);
        // Recorded only when not binary: volumes of earlier versions have none.
        if self.arity != 2 {
            fixed.insert("arity".to_string(), self.arity.to_string());
        }
        // Recorded only when not 2: volumes of earlier versions have none.
        if self.arity == 2 && self.leaf_divisor != 2 {
            fixed.insert("leaf_divisor".to_string(), self.leaf_divisor.to_string());
        }
        oram_tree::record_key_shards(&mut fixed, self.key_shards);
        fixed
    }

    fn adopt(
        &mut self,
        recorded: &BTreeMap<String, String>,
        named: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<(), String> {
        adopt_value(&mut self.z, recorded, "z", "z", named)?;
        // Never named in `[engine]`: a volume that records none was sized by 2.
        self.leaf_divisor = match recorded.get("leaf_divisor") {
            Some(v) => v
                .parse()
                .map_err(|_| format!("the volume's recorded leaf_divisor {v:?} is not a number"))?,
            None => 2,
        };
        self.key_shards = oram_tree::recorded_key_shards(recorded)?;
        if let Some(levels) = recorded_value(recorded, "cached_levels", "cached_levels", named)? {
            self.cached_levels = Some(levels);
        }
        Ok(())
    }

    fn state_bound(&self, shape: &Shape) -> u64 {
        let geo = self.geometry(shape);
        let (bs, z) = (shape.block_size as u64, self.z as u64);
        let stash = self.stash_bound as u64 * snapshot_row(8, bs);
        let local = geo.nodes_above(self.cached_levels(shape)) * snapshot_row(8, z * (12 + bs));
        self.state_base(shape) + stash + local
    }

    /// Grown by whole levels ([`oram_tree::grown_room`]): the tree of a volume
    /// created for the room it has.
    fn grown_state_bound(&self, created: &Shape, capacity: u64) -> u64 {
        let (_, room) = oram_tree::grown_room(created.capacity, capacity, self.arity);
        self.state_bound(&Shape {
            capacity: room,
            ..created.clone()
        })
    }

    fn stash_bound(&self, _: &Shape) -> u64 {
        self.stash_bound as u64
    }

    /// Z blocks of every uncached bucket of a path.
    fn round_bytes_per_op(&self, shape: &Shape) -> u64 {
        let levels = u64::from(self.geometry(shape).leaf_level) + 1;
        let uncached = levels.saturating_sub(u64::from(self.cached_levels(shape)));
        // Saturating: `z` may come from a volume header not yet authenticated.
        uncached
            .saturating_mul(self.z as u64)
            .saturating_mul(shape.block_size as u64)
    }

    /// Every access, read or write, reads the bucket of each uncached level of
    /// one path and writes them all back.
    fn model(&self, shape: &Shape) -> EngineModel {
        let geo = self.geometry(shape);
        let levels = geo.leaf_level + 1;
        let cached = self.cached_levels(shape).min(levels);
        let uncached = f64::from(levels - cached);
        let bucket_bytes = Sealer::sealed_len(bucket::bucket_bytes(&geo)) as u64;
        let z = self.z as u64;
        let op = Traffic {
            read_bytes: uncached * bucket_bytes as f64,
            written_bytes: uncached * bucket_bytes as f64,
            blocks: 2.0 * z as f64 * uncached,
            requests: 2.0 * uncached,
        };
        let bs = shape.block_size as u64;
        let tree = TreeLayout {
            arity: geo.arity,
            levels,
            cached_levels: cached,
            leaves: geo.leaves,
            z,
            s: 0,
            a: 0,
            bucket_bytes,
        };
        // A round reads the union of its ops' paths once and writes it back.
        let ops = shape.max_batch.max(1) as u64;
        let round_requests_per_op = 2.0 * tree.expected_buckets(ops) / ops as f64;
        EngineModel {
            kind: self.kind().into(),
            oblivious: self.oblivious(),
            capacity: shape.capacity,
            block_size: bs,
            layout: Layout::Tree(tree),
            object_bytes: bucket_bytes,
            read_op: op,
            write_op: op,
            overhead: EngineModel::overhead_of(&op, &op, bs),
            assumes: format!(
                "every access reads and rewrites the {} uncached buckets (Z = {z}) of one \
                 path; a round's paths that share buckets move less",
                levels - cached
            ),
            state_bound: self.state_bound(shape),
            state_base_bytes: self.state_base(shape),
            cache_bytes: geo.nodes_above(cached) * z * bs,
            stash_bound: self.stash_bound as u64,
            round_bytes_per_op: self.round_bytes_per_op(shape),
            ops_per_round: shape.max_batch as u64,
            round_requests_per_op,
        }
    }

    fn build(&self, shape: &Shape, parts: Parts) -> Result<Arc<dyn Oram>> {
        Ok(Arc::new(PathOram::new(
            self.config(shape),
            parts.store,
            parts.sealer,
            parts.state,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_bytes_saturate_on_a_huge_z() {
        // Found by fuzzing the volume header: `recover` adopts `z` from the backend's
        // header before authenticating it, and the round size overflowed (a panic
        // with overflow checks).
        let s = PathSettings {
            z: 20_202_020_202_020_204,
            ..PathSettings::default()
        };
        let shape = Shape {
            capacity: 65_536,
            block_size: 16_384,
            max_batch: 64,
            prefix: "vol0".into(),
            id_limit: None,
        };
        assert_eq!(s.round_bytes_per_op(&shape), u64::MAX);
        // An ordinary Z: a multiple of Z blocks, far from saturating.
        let normal = PathSettings::default().round_bytes_per_op(&shape);
        assert!(normal > 0 && normal < 1 << 30 && normal % (4 * 16_384) == 0);
    }

    fn shape(capacity: u64, block_size: usize) -> Shape {
        Shape {
            capacity,
            block_size,
            max_batch: 64,
            prefix: "vol0".into(),
            id_limit: None,
        }
    }

    #[test]
    fn the_model_is_two_z_blocks_per_uncached_level() {
        // 262 144 blocks of 4 KiB, 10 cached levels, sized as earlier volumes
        // were: 2^17 leaves, 18 levels, 8 on the backend; 2·Z·U = 64 blocks; a
        // bucket is Z slots of id and block, sealed (the objects the engine
        // writes: `object_bound`).
        let s = PathSettings {
            cached_levels: Some(10),
            leaf_divisor: 2,
            ..PathSettings::default()
        };
        let m = s.model(&shape(262_144, 4096));
        let t = m.tree().unwrap();
        assert_eq!((t.leaves, t.levels, t.cached_levels), (131_072, 18, 10));
        assert_eq!(t.uncached_levels(), 8);
        assert_eq!(m.object_bytes, 4 * (8 + 4096) + oram_seal::OVERHEAD as u64);
        assert_eq!(m.overhead_blocks(), 64.0);
        assert_eq!(m.read_op, m.write_op);
        let want = 2.0 * 8.0 * m.object_bytes as f64 / 4096.0;
        assert!((m.overhead - want).abs() < 1e-9);
        assert_eq!(m.round_bytes_per_op, 8 * 4 * 4096);
        assert_eq!(m.state_bound, s.state_bound(&shape(262_144, 4096)));
        assert_eq!(m.cache_bytes, 1023 * 4 * 4096);
        // The leaves are `Geometry::new`'s: a power of two ≥ ⌈capacity / 2⌉.
        for (cap, leaves) in [(2048, 1024), (2049, 2048), (1, 1)] {
            assert_eq!(s.model(&shape(cap, 4096)).tree().unwrap().leaves, leaves);
        }
        // A new volume's: ≥ ⌈capacity / 4⌉, one level fewer, two slots a block.
        let new = PathSettings::default();
        for (cap, leaves) in [(2048, 512), (2049, 1024), (1, 1), (262_144, 65_536)] {
            assert_eq!(new.model(&shape(cap, 4096)).tree().unwrap().leaves, leaves);
        }
        let t = new.model(&shape(262_144, 4096));
        let slots = t.tree().unwrap().leaves * 2 * 4;
        assert_eq!(slots, 2 * 262_144);
        // Everything cached: nothing on the backend.
        let all = PathSettings {
            cached_levels: Some(30),
            ..PathSettings::default()
        };
        let m = all.model(&shape(2048, 4096));
        // (512 leaves: 10 levels.)
        assert_eq!((m.overhead, m.tree().unwrap().cached_levels), (0.0, 10));
    }
}
