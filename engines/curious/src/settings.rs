//! CURIOUS's part of the `[engine]` configuration (`kind = "curious"`). The
//! sub-ORAM's settings come from the binary through a [`SubFactory`]: this
//! crate imports no other engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use oram_engine::{
    adopt_value, recorded_value, snapshot_row, EngineModel, EngineSettings, Layout, Oram,
    OramError, PartitionLayout, Parts, Placement, Result, Shape,
};
use serde::{Deserialize, Serialize};

use crate::{Curious, CuriousConfig};

/// What a partition's sub-ORAM is asked to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubSpec {
    /// The engine (`path` or `ring`).
    pub kind: String,
    /// Children per inner node of a Path ORAM tree.
    pub arity: u64,
    /// Blocks per bucket of a Path ORAM tree.
    pub z: usize,
    /// Largest stash of one partition after an access (0: the engine's default).
    pub stash_bound: usize,
    /// Tree levels kept locally (`None`: as many as `cache_bytes` holds).
    pub cached_levels: Option<u32>,
    /// The partition's share of the tree-top cache budget, in bytes.
    pub cache_bytes: u64,
}

/// Makes the settings of a sub-ORAM (given by the binary, which knows the
/// engines): an error names what is wrong with the spec.
pub type SubFactory =
    Arc<dyn Fn(&SubSpec) -> std::result::Result<Box<dyn EngineSettings>, String> + Send + Sync>;

/// CURIOUS's settings in `[engine]` (with `kind = "curious"`).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CuriousSettings {
    /// Partitions; 0 (the default): ⌈√capacity⌉. Fixed at creation.
    pub curious_partitions: u32,
    /// The sub-ORAM of every partition: `path` (default) or `ring`. Fixed at
    /// creation.
    pub curious_sub: String,
    /// Children per inner node of a Path ORAM sub-ORAM (the paper's b = 3). Fixed
    /// at creation. Ring ORAM's trees are binary.
    pub curious_arity: u64,
    /// Blocks per bucket of a Path ORAM sub-ORAM (the paper's z = 5). Fixed at
    /// creation.
    pub curious_z: usize,
    /// Evictions per access, ν (1.1 to 2.0): one rides on the access, a
    /// background one (a dummy access of a random partition) follows with
    /// probability ν − 1.
    pub curious_eviction_rate: f64,
    /// The eviction cache's bound in MiB: above it an access fails with a stash
    /// overflow (applied, nothing lost). 0 (the default): 8 blocks per partition,
    /// at least 256 blocks — the cache holds about 2.6 per partition at ν = 1.25
    /// (tests/curious.rs). The bound pads every checkpoint (its trusted state
    /// may hold that much), so it is kept near what the cache needs.
    pub curious_cache_mib: u64,
    /// Largest stash of one partition after an access; 0: the sub-ORAM's default.
    pub curious_stash_bound: usize,
    /// The tree-top cache budget of all partitions together, in MiB (each gets
    /// its share). Used at creation.
    pub tree_cache_mib: u64,
    /// Tree levels every partition keeps locally; overrides `tree_cache_mib`.
    /// Fixed at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_levels: Option<u32>,
    /// The sub-ORAMs' settings, given by the binary.
    #[serde(skip)]
    pub subs: Option<SubFactory>,
}

impl Default for CuriousSettings {
    fn default() -> Self {
        Self {
            curious_partitions: 0,
            curious_sub: "path".into(),
            curious_arity: 3,
            curious_z: 5,
            curious_eviction_rate: 1.25,
            curious_cache_mib: 0,
            curious_stash_bound: 0,
            tree_cache_mib: 16,
            cached_levels: None,
            subs: None,
        }
    }
}

impl PartialEq for CuriousSettings {
    fn eq(&self, o: &Self) -> bool {
        self.curious_partitions == o.curious_partitions
            && self.curious_sub == o.curious_sub
            && self.curious_arity == o.curious_arity
            && self.curious_z == o.curious_z
            && self.curious_eviction_rate.to_bits() == o.curious_eviction_rate.to_bits()
            && self.curious_cache_mib == o.curious_cache_mib
            && self.curious_stash_bound == o.curious_stash_bound
            && self.tree_cache_mib == o.tree_cache_mib
            && self.cached_levels == o.cached_levels
    }
}

impl Eq for CuriousSettings {}

impl std::fmt::Debug for CuriousSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuriousSettings")
            .field("curious_partitions", &self.curious_partitions)
            .field("curious_sub", &self.curious_sub)
            .field("curious_arity", &self.curious_arity)
            .field("curious_z", &self.curious_z)
            .field("curious_eviction_rate", &self.curious_eviction_rate)
            .field("curious_cache_mib", &self.curious_cache_mib)
            .field("curious_stash_bound", &self.curious_stash_bound)
            .field("tree_cache_mib", &self.tree_cache_mib)
            .field("cached_levels", &self.cached_levels)
            .finish_non_exhaustive()
    }
}

/// The terms of a CURIOUS volume's state bound.
struct BoundParts {
    /// The front's: the position map, the eviction cache at its bound, the
    /// map's metadata.
    front: u64,
    /// Partitions.
    partitions: u64,
    /// Each partition's sub-ORAM state without its stash.
    sub_rest: u64,
    /// The partitions' stashes together ([`sub_stash_allowance`]).
    stashes: u64,
}

impl CuriousSettings {
    /// The documentation of these settings in `oram-proxy example-config`, at
    /// their defaults, commented out (they apply with `kind = "curious"` only).
    pub const EXAMPLE: &'static str = r#"# CURIOUS (kind = "curious"): partitions, each its own sub-ORAM; 0 = the
# square root of the capacity. Fixed when the data directory is created.
# curious_partitions = 0
# CURIOUS: the sub-ORAM, "path" (a k-ary Path ORAM tree) or "ring". Fixed.
# curious_sub = "path"
# CURIOUS with a Path ORAM sub-ORAM: the tree's arity and bucket size (the
# paper's b = 3, z = 5). Fixed.
# curious_arity = 3
# curious_z = 5
# CURIOUS: evictions per access (1.1 to 2.0): one rides on the access, a
# background one follows with probability rate - 1.
# curious_eviction_rate = 1.25
# CURIOUS: MiB the eviction cache may hold before an access fails (nothing is
# lost; the operator raises the bound or the eviction rate); 0: 8 blocks per
# partition, at least 256 blocks.
# curious_cache_mib = 0
# CURIOUS: largest stash of one partition (0: the sub-ORAM's default).
# curious_stash_bound = 0
"#;

    /// These settings, making sub-ORAM settings with `subs`.
    pub fn with_subs(mut self, subs: SubFactory) -> Self {
        self.subs = Some(subs);
        self
    }

    /// The partitions of a volume of `shape`.
    pub fn partitions(&self, shape: &Shape) -> u32 {
        oram_partition::partitions_for(self.curious_partitions, shape.capacity)
    }

    /// The engine configuration for a volume of `shape`.
    pub fn config(&self, shape: &Shape) -> CuriousConfig {
        let bs = shape.block_size.max(1) as u64;
        CuriousConfig {
            name: "curious",
            letter: 'c',
            capacity: shape.capacity,
            block_size: shape.block_size,
            partitions: self.partitions(shape),
            max_batch: shape.max_batch,
            eviction_rate: self.curious_eviction_rate,
            cache_bound: match self.curious_cache_mib {
                0 => (8 * u64::from(self.partitions(shape))).max(256) as usize,
                mib => ((mib << 20) / bs).max(1) as usize,
            },
            partition_limit: None,
            round_attempts: 3,
            rng_seed: None,
        }
    }

    /// [`EngineSettings::state_bound`] of a volume of `shape` holding
    /// `capacity` blocks, each sub-ORAM's state (stash included) as
    /// `sub_state` says.
    fn bound(
        &self,
        shape: &Shape,
        capacity: u64,
        sub_state: &dyn Fn(&dyn EngineSettings, &Shape) -> u64,
    ) -> u64 {
        let b = self.bound_parts(shape, capacity, sub_state);
        b.front + b.partitions * b.sub_rest + b.stashes
    }

    /// The terms of [`CuriousSettings::bound`], apart: what the front keeps,
    /// and what the partitions do.
    fn bound_parts(
        &self,
        shape: &Shape,
        capacity: u64,
        sub_state: &dyn Fn(&dyn EngineSettings, &Shape) -> u64,
    ) -> BoundParts {
        let cfg = self.config(shape);
        let sub_shape = self.sub_shape(shape);
        let (sub_state, sub_stash) = self
            .sub(shape)
            .map(|s| (sub_state(s.as_ref(), &sub_shape), s.stash_bound(&sub_shape)))
            .unwrap_or((0, 0));
        let block_row = snapshot_row(8, shape.block_size as u64);
        // Every sub-ORAM's bound counts its stash as `stash_bound` block rows.
        let sub_rest = sub_state.saturating_sub(sub_stash.saturating_mul(block_row));
        let positions = capacity * snapshot_row(8, 8);
        let cache = cfg.cache_bound as u64 * block_row;
        BoundParts {
            front: positions + cache + oram_partition::MAP_META_BOUND,
            partitions: u64::from(cfg.partitions),
            sub_rest,
            stashes: sub_stash_allowance(sub_stash, cfg.partitions) * block_row,
        }
    }

    /// The shape of every partition's sub-ORAM (its prefix is the volume's; the
    /// engine appends the partition's).
    pub fn sub_shape(&self, shape: &Shape) -> Shape {
        let cfg = self.config(shape);
        Shape {
            capacity: cfg.sub_capacity(),
            block_size: shape.block_size,
            max_batch: cfg.sub_batch(),
            prefix: shape.prefix.clone(),
            id_limit: Some(shape.capacity),
        }
    }

    /// What [`EngineSettings::build`] builds, to be built whole or in part
    /// (a cluster's front places the partitions on nodes; each node builds its
    /// own).
    pub fn blueprint(&self, shape: &Shape) -> Result<oram_partition::Blueprint> {
        let sub: Arc<dyn EngineSettings> = Arc::from(self.sub(shape).map_err(OramError::Config)?);
        Ok(oram_partition::Blueprint {
            cfg: self.config(shape),
            sub_shape: self.sub_shape(shape),
            build: Arc::new(move |_, shape: &Shape, parts| sub.build(shape, parts)),
        })
    }

    /// The sub-ORAM's settings.
    pub fn sub(&self, shape: &Shape) -> std::result::Result<Box<dyn EngineSettings>, String> {
        let make = self
            .subs
            .as_ref()
            .ok_or("CURIOUS needs the binary's sub-ORAM settings")?;
        let partitions = u64::from(self.partitions(shape));
        make(&SubSpec {
            kind: self.curious_sub.clone(),
            arity: self.curious_arity,
            z: self.curious_z,
            stash_bound: self.curious_stash_bound,
            cached_levels: self.cached_levels,
            cache_bytes: (self.tree_cache_mib << 20) / partitions.max(1),
        })
    }
}

impl EngineSettings for CuriousSettings {
    fn kind(&self) -> &'static str {
        "curious"
    }

    fn validate(&self, shape: &Shape) -> std::result::Result<(), String> {
        oram_partition::validate_partitioning(
            "curious",
            self.curious_partitions,
            shape.capacity,
            self.curious_eviction_rate,
        )?;
        if !matches!(self.curious_sub.as_str(), "path" | "ring") {
            return Err(format!(
                "curious_sub = {:?}: expected \"path\" or \"ring\"",
                self.curious_sub
            ));
        }
        let sub_shape = self.sub_shape(shape);
        self.sub(shape)?.validate(&sub_shape)
    }

    fn fixed(&self, shape: &Shape) -> BTreeMap<String, String> {
        let mut m = BTreeMap::from([
            ("partitions".to_string(), self.partitions(shape).to_string()),
            ("sub".to_string(), self.curious_sub.clone()),
        ]);
        if self.curious_sub == "path" {
            m.insert("arity".into(), self.curious_arity.to_string());
            m.insert("z".into(), self.curious_z.to_string());
        }
        if let Ok(sub) = self.sub(shape) {
            for (k, v) in sub.fixed(&self.sub_shape(shape)) {
                m.insert(format!("sub_{k}"), v);
            }
        }
        m
    }

    fn adopt(
        &mut self,
        recorded: &BTreeMap<String, String>,
        named: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<(), String> {
        adopt_value(
            &mut self.curious_partitions,
            recorded,
            "partitions",
            "curious_partitions",
            named,
        )?;
        adopt_value(&mut self.curious_sub, recorded, "sub", "curious_sub", named)?;
        adopt_value(
            &mut self.curious_arity,
            recorded,
            "arity",
            "curious_arity",
            named,
        )?;
        adopt_value(&mut self.curious_z, recorded, "z", "curious_z", named)?;
        if let Some(levels) = recorded_value(recorded, "sub_cached_levels", "cached_levels", named)?
        {
            self.cached_levels = Some(levels);
        }
        Ok(())
    }

    /// ν sub-ORAM accesses per op.
    fn round_bytes_per_op(&self, shape: &Shape) -> u64 {
        let per = self
            .sub(shape)
            .map(|s| s.round_bytes_per_op(&self.sub_shape(shape)))
            .unwrap_or(u64::MAX);
        (per as f64 * self.curious_eviction_rate.clamp(1.0, 2.0)).ceil() as u64
    }

    /// The position map, the eviction cache at its bound, every partition's
    /// sub-ORAM state without its stash, and the partitions' stashes **together**
    /// ([`sub_stash_allowance`]): P sub-ORAMs each at its own stash bound would
    /// pad every checkpoint by P × that bound × the block size (7 GB for 5 GiB
    /// of 1 MiB blocks), for a state that never comes near it.
    fn state_bound(&self, shape: &Shape) -> u64 {
        self.bound(shape, shape.capacity, &|sub, sub_shape| {
            sub.state_bound(sub_shape)
        })
    }

    /// Each owned partition's sub-ORAM state without its stash, and the
    /// owned share of the partitions' stash allowance: the front keeps the
    /// position map and the eviction cache.
    fn node_state_bound(&self, shape: &Shape, owned: u64) -> u64 {
        let b = self.bound_parts(shape, shape.capacity, &|sub, sub_shape| {
            sub.state_bound(sub_shape)
        });
        owned.saturating_mul(b.sub_rest)
            + b.stashes
                .saturating_mul(owned)
                .div_ceil(b.partitions.max(1))
    }

    /// As created, with `capacity` blocks placed and every partition's
    /// sub-ORAM grown to the room the framework gives it at that capacity
    /// (its partitions unchanged): a tree grown by whole levels.
    fn grown_state_bound(&self, created: &Shape, capacity: u64) -> u64 {
        let room = self.config(created).sub_capacity_at(capacity);
        self.bound(created, capacity, &|sub, sub_shape| {
            sub.grown_state_bound(sub_shape, room)
        })
    }

    /// The eviction cache's bound.
    fn stash_bound(&self, shape: &Shape) -> u64 {
        self.config(shape).cache_bound as u64
    }

    /// ν sub-ORAM accesses per op (one, and a background eviction with
    /// probability ν − 1; an evicted block rides on an access as an insert and
    /// moves nothing of its own), each what the sub-ORAM's model says.
    fn model(&self, shape: &Shape) -> EngineModel {
        let cfg = self.config(shape);
        let sub_shape = self.sub_shape(shape);
        let nu = cfg.eviction_rate;
        let partitions = u64::from(cfg.partitions);
        let sub = self.sub(shape).map(|s| s.model(&sub_shape));
        let (layout, read_op, write_op, object_bytes, sub_base, sub_cache, assumes) = match sub {
            Ok(m) => (
                m.layout,
                m.read_op.scaled(nu),
                m.write_op.scaled(nu),
                m.object_bytes,
                m.state_base_bytes,
                m.cache_bytes,
                m.assumes,
            ),
            // Validated settings always have a sub-ORAM.
            Err(e) => (
                Layout::Blocks,
                Default::default(),
                Default::default(),
                0,
                0,
                0,
                e,
            ),
        };
        let bs = shape.block_size as u64;
        EngineModel {
            kind: self.kind().into(),
            oblivious: self.oblivious(),
            capacity: shape.capacity,
            block_size: bs,
            layout: Layout::Partitions(PartitionLayout {
                partitions,
                eviction_rate: nu,
                sub_capacity: sub_shape.capacity,
                sub_kind: self.curious_sub.clone(),
                sub: Box::new(layout),
            }),
            object_bytes,
            read_op,
            write_op,
            overhead: EngineModel::overhead_of(&read_op, &write_op, bs),
            assumes: format!(
                "ν = {nu} partition accesses per op, each a {} sub-ORAM's: {assumes}",
                self.curious_sub
            ),
            state_bound: self.state_bound(shape),
            state_base_bytes: shape.capacity * snapshot_row(8, 8) + partitions * sub_base,
            cache_bytes: partitions * sub_cache,
            stash_bound: EngineSettings::stash_bound(self, shape),
            round_bytes_per_op: self.round_bytes_per_op(shape),
            ops_per_round: shape.max_batch as u64,
            // Sharing within a partition's round not modelled: an upper bound.
            round_requests_per_op: read_op.requests.max(write_op.requests),
        }
    }

    fn build(&self, shape: &Shape, parts: Parts) -> Result<Arc<dyn Oram>> {
        let sub = self.sub(shape).map_err(OramError::Config)?;
        let sub_shape = self.sub_shape(shape);
        Ok(Arc::new(Curious::new(
            self.config(shape),
            parts,
            &sub_shape,
            &|_, shape, parts| sub.build(shape, parts),
        )?))
    }

    fn partitions(&self, shape: &Shape) -> Option<u32> {
        Some(self.config(shape).partitions)
    }

    fn build_placed(
        &self,
        shape: &Shape,
        parts: Parts,
        place: &dyn Placement,
    ) -> Result<Arc<dyn Oram>> {
        Ok(Arc::new(self.blueprint(shape)?.engine(parts, place)?))
    }

    fn build_partitions(
        &self,
        shape: &Shape,
        parts: Parts,
        which: &[u32],
    ) -> Result<Vec<(u32, Arc<dyn Oram>)>> {
        self.blueprint(shape)?.partitions(parts, which)
    }
}

/// Blocks per partition that the checkpoint padding allows for the partitions'
/// stashes on average, beyond one partition at its full bound.
pub const SUB_STASH_PER_PARTITION: u64 = 2;

/// The blocks all partitions' stashes hold together that a checkpoint is padded
/// for: one partition at its stash bound plus [`SUB_STASH_PER_PARTITION`] for
/// every partition. A sub-ORAM's stash is empty after most accesses (the test
/// `the_eviction_cache_stays_small_over_100k_accesses` records the largest total
/// and checks it against this). More than that is not lost: the checkpoint
/// doubles in size (a warning; the backend sees it grow).
pub fn sub_stash_allowance(sub_stash_bound: u64, partitions: u32) -> u64 {
    sub_stash_bound + SUB_STASH_PER_PARTITION * u64::from(partitions)
}
