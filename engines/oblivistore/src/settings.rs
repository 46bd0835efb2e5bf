//! ObliviStore's part of the `[engine]` configuration (`kind = "oblivistore"`).

use std::collections::BTreeMap;
use std::sync::Arc;

use oram_engine::{
    adopt_value, snapshot_row, EngineModel, EngineSettings, HierarchyLayout, Layout, Oram,
    PartitionLayout, Parts, Placement, Result, Shape, Traffic,
};
use serde::{Deserialize, Serialize};

use crate::{oblivistore, oblivistore_blueprint, ObliviStoreConfig, ShuffleRead};

/// ObliviStore's settings in `[engine]` (with `kind = "oblivistore"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObliviStoreSettings {
    /// Partitions; 0 (the default): ⌈√capacity⌉. Fixed at creation.
    pub oblivistore_partitions: u32,
    /// Evictions per access, ν (1.1 to 2.0): one into the partition the access
    /// read, a background one into a uniformly random partition with
    /// probability ν − 1.
    pub oblivistore_eviction_rate: f64,
    /// The eviction cache's bound in MiB: above it an access fails with a stash
    /// overflow (applied, nothing lost). 0 (the default): 8 blocks per
    /// partition, at least 256 blocks.
    pub oblivistore_cache_mib: u64,
    /// The shuffle buffer in MiB: the level objects all partitions' shuffles
    /// may hold at once (a shuffle waits for its share, which depends only on
    /// the level it builds); as much again may wait, built, for its round's
    /// commit. 0 (the default): room for two top-level shuffles. Less than one
    /// top-level shuffle is refused.
    pub oblivistore_shuffle_mib: u64,
    /// How an eviction reads the levels it empties: `"whole"` (the default),
    /// one GET of each level's object — one request a level, twice the
    /// shuffle's bytes; `"slots"`, a ranged GET per slot it takes — the
    /// fewest bytes, `2^ℓ + 1` requests a level. Not fixed: the objects are
    /// the same either way.
    pub oblivistore_shuffle_read: String,
}

impl Default for ObliviStoreSettings {
    fn default() -> Self {
        Self {
            oblivistore_partitions: 0,
            oblivistore_eviction_rate: 1.25,
            oblivistore_cache_mib: 0,
            oblivistore_shuffle_mib: 0,
            oblivistore_shuffle_read: ShuffleRead::Whole.name().into(),
        }
    }
}

impl Eq for ObliviStoreSettings {}

impl ObliviStoreSettings {
    /// The documentation of these settings in `oram-proxy example-config`, at
    /// their defaults, commented out (they apply with `kind = "oblivistore"`).
    pub const EXAMPLE: &'static str = r#"# ObliviStore (kind = "oblivistore"): partitions, each a hierarchy of levels;
# 0 = the square root of the capacity. Fixed when the data directory is created.
# oblivistore_partitions = 0
# ObliviStore: evictions per access (1.1 to 2.0): one into the partition just
# read, a background one into a random partition with probability rate - 1.
# oblivistore_eviction_rate = 1.25
# ObliviStore: MiB the eviction cache may hold before an access fails (nothing
# is lost); 0: 8 blocks per partition, at least 256 blocks.
# oblivistore_cache_mib = 0
# ObliviStore: MiB of level objects the partitions' shuffles may hold at once
# (as much again may wait for a round's commit); 0: two top-level shuffles.
# oblivistore_shuffle_mib = 0
# ObliviStore: how an eviction reads the levels it empties: "whole" (one GET of
# each level: fewest requests) or "slots" (a ranged GET per slot: fewest bytes).
# oblivistore_shuffle_read = "whole"
"#;

    /// The partitions of a volume of `shape`.
    pub fn partitions(&self, shape: &Shape) -> u32 {
        oram_partition::partitions_for(self.oblivistore_partitions, shape.capacity)
    }

    /// The trusted state's bound without the eviction cache: the position map
    /// and every partition's state.
    fn state_base(&self, shape: &Shape) -> u64 {
        let cfg = self.config(shape);
        let positions = shape.capacity * snapshot_row(8, 8);
        positions + u64::from(cfg.framework.partitions) * cfg.geometry().state_bound()
    }

    /// How an eviction reads the levels it empties.
    pub fn shuffle_read(&self) -> std::result::Result<ShuffleRead, String> {
        self.oblivistore_shuffle_read
            .parse()
            .map_err(|e| format!("engine.oblivistore_shuffle_read: {e}"))
    }

    /// The engine configuration for a volume of `shape` (a shuffle read not
    /// recognised is `whole`: [`EngineSettings::validate`] refuses it first).
    pub fn config(&self, shape: &Shape) -> ObliviStoreConfig {
        let bs = shape.block_size.max(1) as u64;
        let partitions = self.partitions(shape);
        let mut cfg = ObliviStoreConfig::new(
            shape.capacity,
            shape.block_size,
            partitions,
            shape.max_batch,
        );
        cfg.framework.eviction_rate = self.oblivistore_eviction_rate;
        cfg.framework.cache_bound = match self.oblivistore_cache_mib {
            0 => (8 * u64::from(partitions)).max(256) as usize,
            mib => ((mib << 20) / bs).max(1) as usize,
        };
        if self.oblivistore_shuffle_mib > 0 {
            cfg.shuffle_bytes = self.oblivistore_shuffle_mib << 20;
        }
        cfg.shuffle_read = self.shuffle_read().unwrap_or_default();
        cfg
    }
}

impl EngineSettings for ObliviStoreSettings {
    fn kind(&self) -> &'static str {
        "oblivistore"
    }

    fn validate(&self, shape: &Shape) -> std::result::Result<(), String> {
        oram_partition::validate_partitioning(
            "oblivistore",
            self.oblivistore_partitions,
            shape.capacity,
            self.oblivistore_eviction_rate,
        )?;
        self.shuffle_read()?;
        let cfg = self.config(shape);
        let top = cfg.geometry().level_bytes(cfg.geometry().top);
        if cfg.shuffle_bytes < top {
            return Err(format!(
                "oblivistore_shuffle_mib must hold one top-level shuffle ({} MiB)",
                top.div_ceil(1 << 20)
            ));
        }
        Ok(())
    }

    fn fixed(&self, shape: &Shape) -> BTreeMap<String, String> {
        let cfg = self.config(shape);
        BTreeMap::from([
            ("partitions".to_string(), self.partitions(shape).to_string()),
            ("top_level".to_string(), cfg.geometry().top.to_string()),
        ])
    }

    fn adopt(
        &mut self,
        recorded: &BTreeMap<String, String>,
        named: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<(), String> {
        adopt_value(
            &mut self.oblivistore_partitions,
            recorded,
            "partitions",
            "oblivistore_partitions",
            named,
        )
    }

    /// ν × the bytes one partition access reads **on average** (its filled
    /// levels, and the shuffles its eviction causes, amortised over the
    /// partition's eviction counter): a top-level shuffle reads far more at once;
    /// its memory is bounded by the shuffle buffer instead.
    fn round_bytes_per_op(&self, shape: &Shape) -> u64 {
        let cfg = self.config(shape);
        let g = cfg.geometry();
        let per = g.expected_per_access(cfg.shuffle_read);
        (per.read_slots * g.slot_len() as f64 * cfg.framework.eviction_rate).ceil() as u64
    }

    fn state_bound(&self, shape: &Shape) -> u64 {
        let cfg = self.config(shape);
        let cache = cfg.framework.cache_bound as u64 * snapshot_row(8, shape.block_size as u64);
        self.state_base(shape) + cache + oram_partition::MAP_META_BOUND
    }

    /// Each owned partition's hierarchy (its levels and its blocks'
    /// places): the front keeps the position map and the eviction cache,
    /// which for 16,384 blocks of 4 KiB on 128 partitions are 4.7 of the
    /// state bound's 7.3 MB.
    fn node_state_bound(&self, shape: &Shape, owned: u64) -> u64 {
        owned.saturating_mul(self.config(shape).geometry().state_bound())
    }

    /// ν partition accesses per op, each reading a slot of every filled level
    /// and its eviction's shuffle reads and writing the level it builds
    /// ([`crate::Geometry::expected_per_access`]: the steady state, once a
    /// partition's top level is filled — a young volume moves less). A level
    /// the eviction empties is read whole, every other one slot (a ranged
    /// GET); writes are whole levels.
    fn model(&self, shape: &Shape) -> EngineModel {
        let cfg = self.config(shape);
        let g = cfg.geometry();
        let per = g.expected_per_access(cfg.shuffle_read);
        let nu = cfg.framework.eviction_rate;
        let slot = g.slot_len() as u64;
        let op = Traffic {
            read_bytes: nu * per.read_slots * slot as f64,
            written_bytes: nu * per.written_slots * slot as f64,
            blocks: nu * (per.read_slots + per.written_slots),
            requests: nu * (per.gets + per.puts),
        };
        let bs = shape.block_size as u64;
        EngineModel {
            kind: self.kind().into(),
            oblivious: self.oblivious(),
            capacity: shape.capacity,
            block_size: bs,
            layout: Layout::Partitions(PartitionLayout {
                partitions: u64::from(cfg.framework.partitions),
                eviction_rate: nu,
                sub_capacity: cfg.framework.sub_capacity(),
                sub_kind: "levels".into(),
                sub: Box::new(Layout::Hierarchy(HierarchyLayout {
                    top_level: g.top,
                    slot_bytes: slot,
                })),
            }),
            object_bytes: slot,
            read_op: op,
            write_op: op,
            overhead: EngineModel::overhead_of(&op, &op, bs),
            assumes: format!(
                "ν = {nu} partition accesses per op, each {:.2} slots read and {:.2} written on \
                 average over a cycle of the eviction counter once the top level (level {}) \
                 is filled",
                per.read_slots, per.written_slots, g.top
            ),
            state_bound: self.state_bound(shape),
            state_base_bytes: self.state_base(shape),
            cache_bytes: 0,
            stash_bound: EngineSettings::stash_bound(self, shape),
            round_bytes_per_op: self.round_bytes_per_op(shape),
            ops_per_round: shape.max_batch as u64,
            // Each partition access reads slots of its own.
            round_requests_per_op: op.requests,
        }
    }

    /// The eviction cache's bound.
    fn stash_bound(&self, shape: &Shape) -> u64 {
        self.config(shape).framework.cache_bound as u64
    }

    fn build(&self, shape: &Shape, parts: Parts) -> Result<Arc<dyn Oram>> {
        Ok(Arc::new(oblivistore(
            self.config(shape),
            parts,
            &shape.prefix,
        )?))
    }

    fn partitions(&self, shape: &Shape) -> Option<u32> {
        Some(self.config(shape).framework.partitions)
    }

    fn build_placed(
        &self,
        shape: &Shape,
        parts: Parts,
        place: &dyn Placement,
    ) -> Result<Arc<dyn Oram>> {
        let blueprint = oblivistore_blueprint(self.config(shape), &shape.prefix)?;
        Ok(Arc::new(blueprint.engine(parts, place)?))
    }

    fn build_partitions(
        &self,
        shape: &Shape,
        parts: Parts,
        which: &[u32],
    ) -> Result<Vec<(u32, Arc<dyn Oram>)>> {
        oblivistore_blueprint(self.config(shape), &shape.prefix)?.partitions(parts, which)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_the_hierarchys_expected_access() {
        // 4096 blocks: 64 partitions of 64 + 80 + 4 blocks, levels 0..=8.
        let shape = Shape {
            capacity: 4096,
            block_size: 4096,
            max_batch: 64,
            prefix: "vol0".into(),
            id_limit: None,
        };
        let s = ObliviStoreSettings::default();
        let m = s.model(&shape);
        let p = m.partitions().unwrap();
        assert_eq!((p.partitions, p.sub_capacity), (64, 148));
        assert_eq!(m.hierarchy().unwrap().top_level, 8);
        // The figure the bandwidth test measures (tests/oblivistore.rs):
        // ν × (slots read + written) × the sealed slot.
        let g = s.config(&shape).geometry();
        let per = g.expected_per_access(ShuffleRead::Whole);
        let slot = (8 + 4096 + oram_seal::OVERHEAD) as f64;
        assert_eq!(m.object_bytes as f64, slot);
        let want = 1.25 * (per.read_slots + per.written_slots) * slot;
        assert!((m.read_op.bytes() - want).abs() < 1e-6);
        assert_eq!(
            m.overhead_blocks(),
            1.25 * (per.read_slots + per.written_slots)
        );
        // Levels 0 and 1 from {1} filled: 3.5 slots read (the top rebuild
        // reads both levels whole) and 3 written per access.
        let small = crate::Geometry {
            top: 1,
            block_size: 4096,
        }
        .expected_per_access(ShuffleRead::Whole);
        assert_eq!((small.read_slots, small.written_slots), (3.5, 3.0));
        assert_eq!(m.state_bound, s.state_bound(&shape));
        assert_eq!(m.round_bytes_per_op, s.round_bytes_per_op(&shape));
        // Slot by slot: fewer bytes, more requests.
        let slots = ObliviStoreSettings {
            oblivistore_shuffle_read: "slots".into(),
            ..ObliviStoreSettings::default()
        };
        slots.validate(&shape).unwrap();
        let n = slots.model(&shape);
        assert!(n.read_op.bytes() < m.read_op.bytes());
        assert!(n.read_op.requests > m.read_op.requests);
        let per = g.expected_per_access(ShuffleRead::Slots);
        assert!((n.read_op.requests - 1.25 * (per.gets + per.puts)).abs() < 1e-9);
        let bad = ObliviStoreSettings {
            oblivistore_shuffle_read: "ranged".into(),
            ..ObliviStoreSettings::default()
        };
        let e = bad.validate(&shape).unwrap_err();
        assert!(e.contains("oblivistore_shuffle_read"), "{e}");
    }
}
