//! Ring ORAM's part of the `[engine]` configuration (`kind = "ring"`). The names
//! keep their `ring_` prefix from the flat configuration of earlier versions, so
//! existing configuration files keep working.

use std::collections::BTreeMap;
use std::sync::Arc;

use oram_engine::{
    adopt_value, recorded_value, snapshot_row, EngineModel, EngineSettings, Layout as ModelLayout,
    Oram, OramError, Parts, Result, Shape, Traffic, TreeLayout,
};
use serde::{Deserialize, Serialize};

use crate::{
    paper_bandwidth, EvictRead, Layout, RingConfig, RingOram, RingParams, RingPreset, TreeConfig,
};

/// Ring ORAM's settings in `[engine]` (with `kind = "ring"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RingSettings {
    /// Parameter preset (`small` or `large`).
    pub ring_preset: String,
    /// Real slots per bucket (Z); 0 = the preset's.
    pub ring_z: usize,
    /// Dummy slots per bucket (S); 0 = the preset's.
    pub ring_s: usize,
    /// Accesses per eviction (A); 0 = the preset's.
    pub ring_a: usize,
    /// Stash bound; 0 = derived from Z, A and `max_batch`.
    pub ring_stash_bound: usize,
    /// Eviction reads: `whole` or `slots`.
    pub ring_evict_read: String,
    /// Tree levels kept in local memory (tree-top cache); `None` (the default):
    /// as many as [`RingSettings::tree_cache_mib`] holds. Fixed at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_levels: Option<u32>,
    /// The tree-top cache's budget in MiB when `cached_levels` is not set: the
    /// most whole levels whose buckets (Z real blocks each) fit. Used at creation.
    pub tree_cache_mib: u64,
    /// Accepted for configuration files of earlier versions; unused (a round's
    /// buckets are written before its commit, one round at a time).
    pub max_inflight_writebacks: usize,
    /// The tree-top cache's budget in bytes, overriding `tree_cache_mib` (a
    /// partition framework's share for one sub-ORAM). Not in `[engine]`.
    #[serde(skip)]
    pub tree_cache_bytes: Option<u64>,
    /// Attempts of a round within one access, overriding the default (3): a
    /// partition framework repeats failed rounds itself, as a whole (1). Not in
    /// `[engine]`.
    #[serde(skip)]
    pub round_attempts: Option<u32>,
    /// The tree's key shards ([`oram_tree::TreeConfig::key_shards`]):
    /// [`oram_tree::DEFAULT_KEY_SHARDS`] for a new volume, recorded; a volume
    /// recording none has none. Not in `[engine]`; a partition framework's
    /// sub-ORAMs have none.
    #[serde(skip)]
    pub key_shards: u32,
}

impl Default for RingSettings {
    fn default() -> Self {
        Self {
            ring_preset: "small".into(),
            ring_z: 0,
            ring_s: 0,
            ring_a: 0,
            ring_stash_bound: 0,
            ring_evict_read: "whole".into(),
            cached_levels: None,
            tree_cache_mib: 16,
            max_inflight_writebacks: 4,
            tree_cache_bytes: None,
            round_attempts: None,
            key_shards: oram_tree::DEFAULT_KEY_SHARDS,
        }
    }
}

impl RingSettings {
    /// The documentation of these settings in `oram-proxy example-config`, at
    /// their defaults, commented out (they apply with `kind = "ring"` only).
    pub const EXAMPLE: &'static str = r#"# Ring ORAM (kind = "ring"): parameter preset, "small" (Z = 4, S = 6, A = 3:
# small client storage) or "large" (Z = 33, S = 63, A = 48: large client
# storage, as in the thesis). Fixed when the data directory is created, like the
# three below.
# ring_preset = "small"
# Ring ORAM: real slots per bucket (Z); 0 = the preset's.
# ring_z = 0
# Ring ORAM: dummy slots per bucket (S), i.e. reads before a bucket is
# reshuffled; 0 = the preset's.
# ring_s = 0
# Ring ORAM: accesses per eviction (A); 0 = the preset's.
# ring_a = 0
# Ring ORAM: largest stash allowed after an access; 0 = derived from Z, A and
# max_batch (64 + 2A + 3Z + max_batch).
# ring_stash_bound = 0
# Ring ORAM: how a bucket is read to evict or reshuffle it: "whole" (one GET of
# all Z + S slots: fewer requests) or "slots" (Z ranged GETs, as in the paper:
# fewer bytes).
# ring_evict_read = "whole"
# Ring ORAM also takes tree_cache_mib and cached_levels, as above.
"#;

    /// Z, S and A: the preset's, with the non-zero `ring_z`, `ring_s`, `ring_a`
    /// taking precedence.
    pub fn params(&self) -> std::result::Result<RingParams, String> {
        let preset: RingPreset = self
            .ring_preset
            .parse()
            .map_err(|e| format!("engine.ring_preset: {e}"))?;
        let mut p = preset.params();
        if self.ring_z != 0 {
            p.z = self.ring_z;
        }
        if self.ring_s != 0 {
            p.s = self.ring_s;
        }
        if self.ring_a != 0 {
            p.a = self.ring_a;
        }
        if p.z + p.s > 4096 {
            return Err("engine.ring_z + engine.ring_s must be at most 4096".into());
        }
        Ok(p)
    }

    /// The eviction reads.
    pub fn evict_read(&self) -> std::result::Result<EvictRead, String> {
        self.ring_evict_read
            .parse()
            .map_err(|e| format!("engine.ring_evict_read: {e}"))
    }

    /// The stash bound: `ring_stash_bound`, or the default for the parameters.
    pub fn stash_bound(&self, max_batch: usize) -> std::result::Result<usize, String> {
        Ok(match self.ring_stash_bound {
            0 => RingConfig::default_stash_bound(self.params()?, max_batch),
            n => n,
        })
    }

    /// The engine configuration for a volume of `shape`.
    pub fn config(&self, shape: &Shape) -> std::result::Result<RingConfig, String> {
        let mut tree = TreeConfig::for_shape(
            shape,
            self.cached_levels(shape)?,
            self.stash_bound(shape.max_batch)?,
            self.max_inflight_writebacks,
        );
        if let Some(n) = self.round_attempts {
            tree.round_attempts = n;
        }
        tree.key_shards = self.key_shards;
        Ok(RingConfig {
            tree,
            params: self.params()?,
            evict_read: self.evict_read()?,
        })
    }

    fn layout(&self, shape: &Shape) -> std::result::Result<Layout, String> {
        let p = self.params()?;
        let leaves = RingConfig::leaves_for(shape.capacity, p.z);
        Ok(Layout {
            geo: oram_tree::Geometry::new(shape.capacity, p.z, shape.block_size, Some(leaves)),
            params: p,
            block_size: shape.block_size,
        })
    }

    /// The tree-top cache's levels for a volume of `shape`: `cached_levels`, or
    /// those `tree_cache_mib` holds; never more than the tree has.
    pub fn cached_levels(&self, shape: &Shape) -> std::result::Result<u32, String> {
        let geo = self.layout(shape)?.geo;
        Ok(self.levels_of(&geo))
    }

    /// The trusted state's bound without the stash and the tree-top cache: the
    /// position map, every bucket's version, slot map and read state, the
    /// engine's counters, and the intent record (two leaf draws per op and a
    /// dummy choice per bucket of every read path and, reading by slots, per
    /// eviction slot, ≤ 10 bytes each).
    fn state_base(&self, shape: &Shape, lay: &Layout) -> u64 {
        let geo = lay.geo;
        let slots = lay.slots() as u64;
        let buckets = geo.node_count();
        let positions = shape.capacity * snapshot_row(8, 8);
        let nodes = buckets * snapshot_row(8, 24);
        let meta = buckets * (snapshot_row(9, 8 * slots) + snapshot_row(9, 4 + slots.div_ceil(8)))
            + snapshot_row(1, 16);
        let path = u64::from(geo.leaf_level) + 1;
        let intent = snapshot_row(
            0,
            32 + shape.max_batch as u64 * (30 + 10 * path) + 10 * slots * path,
        );
        positions + nodes + meta + intent
    }

    fn levels_of(&self, geo: &oram_tree::Geometry) -> u32 {
        match (self.cached_levels, self.tree_cache_bytes) {
            (None, Some(bytes)) => geo.levels_within(bytes),
            _ => geo.cached_levels(self.cached_levels, self.tree_cache_mib),
        }
    }
}

impl EngineSettings for RingSettings {
    fn kind(&self) -> &'static str {
        "ring"
    }

    fn validate(&self, _: &Shape) -> std::result::Result<(), String> {
        let p = self.params()?;
        self.evict_read()?;
        if p.z == 0 || p.s == 0 || p.a == 0 || self.max_inflight_writebacks == 0 {
            return Err("Ring ORAM's Z, S, A and max_inflight_writebacks must be positive".into());
        }
        oram_tree::check_key_shards(self.key_shards)
    }

    fn fixed(&self, shape: &Shape) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        if let Ok(lay) = self.layout(shape) {
            let p = lay.params;
            m.insert("z".into(), p.z.to_string());
            m.insert("s".into(), p.s.to_string());
            m.insert("a".into(), p.a.to_string());
            m.insert("leaves".into(), lay.geo.leaves.to_string());
            let cached = self.levels_of(&lay.geo);
            m.insert("cached_levels".into(), cached.to_string());
        }
        oram_tree::record_key_shards(&mut m, self.key_shards);
        m
    }

    fn adopt(
        &mut self,
        recorded: &BTreeMap<String, String>,
        named: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<(), String> {
        // A named preset names Z, S and A.
        let zsa_named = |k: &str| named(k) || named("ring_preset");
        adopt_value(&mut self.ring_z, recorded, "z", "ring_z", &zsa_named)?;
        adopt_value(&mut self.ring_s, recorded, "s", "ring_s", &zsa_named)?;
        adopt_value(&mut self.ring_a, recorded, "a", "ring_a", &zsa_named)?;
        self.key_shards = oram_tree::recorded_key_shards(recorded)?;
        if let Some(levels) = recorded_value(recorded, "cached_levels", "cached_levels", named)? {
            self.cached_levels = Some(levels);
        }
        Ok(())
    }

    fn state_bound(&self, shape: &Shape) -> u64 {
        // Validated settings always have parameters.
        let Ok(lay) = self.layout(shape) else {
            return 0;
        };
        let bs = shape.block_size as u64;
        let geo = lay.geo;
        let bound = self.stash_bound(shape.max_batch).unwrap_or(0) as u64;
        let stash = bound * snapshot_row(8, bs);
        let cached = geo.cached_levels(self.cached_levels, self.tree_cache_mib);
        let local = geo.nodes_above(cached) * snapshot_row(8, lay.params.z as u64 * (12 + bs));
        self.state_base(shape, &lay) + stash + local
    }

    /// Grown by whole levels ([`oram_tree::grown_room`]): the tree of a volume
    /// created for the room it has.
    fn grown_state_bound(&self, created: &Shape, capacity: u64) -> u64 {
        let arity = self.layout(created).map_or(2, |l| l.geo.arity);
        let (_, room) = oram_tree::grown_room(created.capacity, capacity, arity);
        self.state_bound(&Shape {
            capacity: room,
            ..created.clone()
        })
    }

    fn stash_bound(&self, shape: &Shape) -> u64 {
        // Validated settings always have a bound.
        RingSettings::stash_bound(self, shape.max_batch).unwrap_or(0) as u64
    }

    /// One block of every uncached bucket of a path, plus an eviction's share:
    /// every A ops one path read and rewritten whole (Z + S slots per bucket).
    /// Early reshuffles come on top, rarely.
    fn round_bytes_per_op(&self, shape: &Shape) -> u64 {
        let Ok(lay) = self.layout(shape) else {
            return shape.block_size as u64;
        };
        let levels = u64::from(lay.geo.leaf_level) + 1;
        let cached = lay
            .geo
            .cached_levels(self.cached_levels, self.tree_cache_mib);
        let uncached = levels.saturating_sub(u64::from(cached));
        let (bs, slots, a) = (
            shape.block_size as u64,
            lay.slots() as u64,
            lay.params.a.max(1) as u64,
        );
        // Saturating: Z and S may come from a volume header not yet authenticated.
        uncached.saturating_mul(bs).saturating_add(
            uncached
                .saturating_mul(slots)
                .saturating_mul(bs)
                .div_ceil(a),
        )
    }

    /// Per access, over the uncached levels ([`Layout::expected_per_access`],
    /// the figure the bandwidth test measures): a ranged GET of one slot per
    /// bucket of the read path, and every A accesses an EvictPath that reads
    /// each bucket of a path (whole, or Z slots with `ring_evict_read =
    /// "slots"`) and writes it whole; early reshuffles the same.
    fn model(&self, shape: &Shape) -> EngineModel {
        let bs = shape.block_size as u64;
        let lay = match self.layout(shape) {
            Ok(lay) => lay,
            // Validated settings always have parameters.
            Err(_) => Layout {
                geo: oram_tree::Geometry::new(shape.capacity, 1, shape.block_size, None),
                params: RingParams { z: 1, s: 1, a: 1 },
                block_size: shape.block_size,
            },
        };
        let (geo, p) = (lay.geo, lay.params);
        let levels = geo.leaf_level + 1;
        let cached = self.levels_of(&geo).min(levels);
        let (ranged, whole) = lay.expected_per_access(cached);
        let (slot, bucket) = (lay.slot_sealed() as f64, lay.object_len() as f64);
        let (z, slots) = (p.z as f64, lay.slots() as f64);
        let slots_read = self.evict_read().unwrap_or(EvictRead::Whole) == EvictRead::Slots;
        let (evict_read_bytes, evict_read_blocks, evict_read_requests) = if slots_read {
            (z * slot, z, z)
        } else {
            (bucket, slots, 1.0)
        };
        let op = Traffic {
            read_bytes: ranged * slot + whole * evict_read_bytes,
            written_bytes: whole * bucket,
            blocks: ranged + whole * (evict_read_blocks + slots),
            requests: ranged + whole * (evict_read_requests + 1.0),
        };
        let paper = paper_bandwidth(p, levels - cached);
        let cache_bytes = geo.nodes_above(cached) * p.z as u64 * bs;
        EngineModel {
            kind: self.kind().into(),
            oblivious: self.oblivious(),
            capacity: shape.capacity,
            block_size: bs,
            layout: ModelLayout::Tree(TreeLayout {
                arity: geo.arity,
                levels,
                cached_levels: cached,
                leaves: geo.leaves,
                z: p.z as u64,
                s: p.s as u64,
                a: p.a as u64,
                bucket_bytes: bucket as u64,
            }),
            object_bytes: bucket as u64,
            read_op: op,
            write_op: op,
            overhead: EngineModel::overhead_of(&op, &op, bs),
            assumes: format!(
                "{} uncached levels; per level l early reshuffles E[floor(R/S)] for R ~ \
                 Bin(A*2^l - 1, 2^-l) reads between two evictions of a bucket (the paper's \
                 Poisson(A) approximation: {:.4}, {:.2} blocks per access); evictions read \
                 buckets {}",
                levels - cached,
                paper.reshuffles_per_period,
                paper.overall_blocks,
                if slots_read { "as Z slots" } else { "whole" }
            ),
            state_bound: self.state_bound(shape),
            state_base_bytes: self.state_base(shape, &lay),
            cache_bytes,
            stash_bound: EngineSettings::stash_bound(self, shape),
            round_bytes_per_op: self.round_bytes_per_op(shape),
            ops_per_round: shape.max_batch as u64,
            // Each op reads slots of its own; evictions follow a fixed order.
            round_requests_per_op: op.requests,
        }
    }

    fn build(&self, shape: &Shape, parts: Parts) -> Result<Arc<dyn Oram>> {
        let cfg = self.config(shape).map_err(OramError::Config)?;
        Ok(Arc::new(RingOram::new(
            cfg,
            parts.store,
            parts.sealer,
            parts.state,
        )?))
    }
}
