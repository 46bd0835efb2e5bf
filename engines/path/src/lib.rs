//! Path ORAM ("Path ORAM: An Extremely Simple Oblivious RAM Protocol",
//! Stefanov et al., CCS 2013), built for a high-latency object store, as a
//! scheme of the shared tree core (`oram-tree`).
//!
//! The tree lives on a block store (`oram_blockstore::BlockStore`) as one sealed object per
//! bucket, `<prefix>/n/<node>` (or `<prefix>/n/<node>.<slot>`, see
//! [`oram_state::NodeVersion`]; `<prefix>/n/<shard>/<node>…` with key shards,
//! `oram_tree::TreeConfig::key_shards`); the position map, the stash, bucket versions and
//! the top `cached_levels` levels of the tree live in the trusted state.
//!
//! One round of `k` ops (see `oram-tree` for the round, its intent record and the
//! write-back):
//! 1. each op draws the leaf to read (its block's current leaf, or a fresh random
//!    leaf for a block not stored or a dummy) and a new leaf for its block — two
//!    draws per op whatever the op, so the random stream does not depend on it;
//! 2. the union of the `k` paths, minus the cached levels, is fetched with one
//!    `get_many`;
//! 3. every bucket opens at its expected version, every block in it is in range,
//!    on its path and stored once; every block the ops name that has a position is
//!    found (on its path or in the stash) — else an integrity error, never zeros;
//! 4. the ops are served from the stash, the stash is evicted greedily into the
//!    union of the paths, and the rewritten buckets go back to the backend.
//!
//! **What the storage server observes per round:** GETs of every uncached bucket
//! on `k` uniformly random paths, then PUTs of the same buckets, all of the same
//! size. A round the server makes fail is repeated exactly, then completed.
//! Never-written buckets read as absent (lazy initialisation) unless the tree was
//! formatted ([`oram_engine::Oram::format`]); which buckets were written depends
//! only on earlier random paths. Freshness: every bucket is sealed with its space,
//! version and generation, which the trusted state remembers.
//!
//! **Shape.** `2^L` leaves, the smallest power of two ≥ capacity / 4 for a
//! volume created now (`PathSettings::leaf_divisor`; capacity / 2, the default
//! of [`oram_tree::Geometry::new`], for earlier volumes and for sub-ORAMs), so
//! that Z = 4 leaves room for at least twice the blocks (four times with 2);
//! the stash test measures the bound at N = 2^14 and `examples/stash.rs`
//! simulates both sizings. A bucket
//! ([`bucket`], `ObjectKind::TreeBucket`) is Z fixed-size slots of an 8-byte block
//! id and the block, so every bucket has the same size. The tree-top cache is
//! given in bytes (`tree_cache_mib`, 16 MiB by default):
//! [`oram_tree::Geometry::levels_within`] turns it into the most whole levels
//! whose buckets fit, and the volume records that depth as a fixed parameter, so
//! a later change of the budget or of its default never moves buckets of an
//! existing volume. The defaults — 16 KiB blocks, 65 536 of them (1 GiB), 8 of 16
//! levels cached — follow the block-size measurements in `benches/SPEED.md`:
//! 16 KiB moved large objects 2–3× faster than 4 KiB for 70–100 MiB more memory;
//! 64 KiB needed 3× more memory again for a smaller further gain.

pub mod bucket;
mod settings;

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use oram_engine::{CheckReport, Op, OramError, Result};
use oram_seal::{ObjectKind, Sealer};
use oram_state::{NodeVersion, TrustedState};
use oram_tree::{
    check_stored, draw_leaves, evict_stash, serve_ops, Applied, ApplyCx, OpenCx, PlanCx, Requests,
    Sealing, TreeEngine, TreeParams, TreeScheme,
};
use rand::Rng;
use rand_chacha::ChaCha20Rng;

pub use oram_tree::{Geometry, TreeConfig};
pub use settings::PathSettings;

/// A Path ORAM engine. Cheap to clone (shared state).
pub type PathOram = TreeEngine<PathScheme>;

/// Parameters of a Path ORAM instance.
#[derive(Clone, Debug)]
pub struct PathConfig {
    /// What every tree engine is configured with (capacity, block size, cached
    /// levels, stash bound 89 by default — overflow probability below 2⁻⁸⁰ per
    /// access for Z = 4 —, batches, write-backs, prefix, seed). Leaves default to
    /// the power of two ≥ capacity / 2.
    pub tree: TreeConfig,
    /// Blocks per bucket (Z). Default 4.
    pub z: usize,
    /// Children per inner node. Default 2; a k-ary tree (the CURIOUS paper's
    /// sub-ORAM: k = 3, Z = 5) is sized by [`Geometry::for_capacity`].
    pub arity: u64,
}

impl Default for PathConfig {
    fn default() -> Self {
        Self {
            tree: TreeConfig::default(),
            z: 4,
            arity: 2,
        }
    }
}

/// Path ORAM's part of the tree core: the bucket format and the round's steps.
pub struct PathScheme {
    geo: Geometry,
    cached_levels: u32,
    id_limit: u64,
}

/// A planned Path ORAM round.
pub struct PathPlan {
    /// The union of the read paths.
    nodes: BTreeSet<u64>,
    /// Its uncached buckets, fetched in this order.
    remote: Vec<u64>,
    /// Each named block's new leaf.
    remap: HashMap<u64, u64>,
    /// Blocks the ops name that are stored, with their leaf: each must be found.
    stored: Vec<(u64, u64)>,
}

impl PathScheme {
    fn cached(&self, node: u64) -> bool {
        self.geo.level(node) < self.cached_levels
    }

    /// Checks that every block of a bucket is in range, on its path, and stored
    /// nowhere else (not in the stash, not in a bucket already `seen`).
    fn check_bucket(
        &self,
        s: &Sealing,
        state: &dyn TrustedState,
        node: u64,
        bucket: Vec<(u64, Bytes)>,
        seen: &mut BTreeSet<u64>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let nv = state.node(node);
        for (b, _) in &bucket {
            if !seen.insert(*b) || state.stash_get(*b).is_some() {
                return Err(s.integrity(node, &nv, format!("block {b} stored twice")));
            }
            if *b >= self.id_limit {
                return Err(s.integrity(node, &nv, format!("block {b} beyond the id limit")));
            }
            match state.position(*b) {
                Some(leaf) if self.geo.on_path(node, leaf) => {}
                _ => return Err(s.integrity(node, &nv, format!("block {b} off its path"))),
            }
        }
        Ok(bucket)
    }
}

impl TreeScheme for PathScheme {
    type Config = PathConfig;
    type Plan = PathPlan;
    type Opened = Vec<(u64, Bytes)>;
    type Note = ();
    type CheckCx = ();

    const NAME: &'static str = "path";
    const DIR: &'static str = "n";
    const KIND: ObjectKind = ObjectKind::TreeBucket;

    fn new(cfg: &PathConfig) -> Result<(Self, TreeParams)> {
        if cfg.z == 0 {
            return Err(OramError::Config("Z must be positive".into()));
        }
        if !(2..=64).contains(&cfg.arity) {
            return Err(OramError::Config("the arity must be 2 to 64".into()));
        }
        let t = &cfg.tree;
        let geo = Geometry::for_capacity(cfg.arity, t.capacity, cfg.z, t.block_size, t.leaves);
        let scheme = Self {
            geo,
            cached_levels: t.cached_levels.min(geo.leaf_level + 1),
            id_limit: t.id_limit(),
        };
        Ok((scheme, t.params()))
    }

    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn cached_levels(&self) -> u32 {
        self.cached_levels
    }

    /// A bucket is Z slots whatever the depth: only the tree changes.
    fn grown(&self, geo: Geometry, id_limit: u64) -> Result<Self> {
        Ok(Self {
            geo,
            cached_levels: self.cached_levels,
            id_limit,
        })
    }

    fn object_len(&self) -> u64 {
        Sealer::sealed_len(bucket::bucket_bytes(&self.geo)) as u64
    }

    fn empty_bucket(&self, _: &mut dyn TrustedState, _: u64, _: &mut ChaCha20Rng) -> Bytes {
        bucket::encode_bucket(&self.geo, &[])
    }

    fn plan(&self, cx: &mut PlanCx<'_, '_>, blocks: &[Option<u64>]) -> Result<PathPlan> {
        let d = draw_leaves(cx, blocks, self.geo.leaves)?;
        let nodes: BTreeSet<u64> = d
            .read_leaves
            .iter()
            .flat_map(|&x| self.geo.path(x))
            .collect();
        let remote = nodes.iter().copied().filter(|&n| !self.cached(n)).collect();
        Ok(PathPlan {
            nodes,
            remote,
            remap: d.remap,
            stored: d.stored,
        })
    }

    fn requests(&self, plan: &PathPlan) -> Requests {
        Requests {
            whole: plan.remote.clone(),
            parts: Vec::new(),
        }
    }

    fn open(&self, cx: OpenCx<'_>, plan: &PathPlan) -> Result<Vec<(u64, Bytes)>> {
        let (s, state) = (cx.sealing, cx.state);
        let mut found = Vec::new();
        let mut seen = BTreeSet::new();
        for (&node, obj) in plan.remote.iter().zip(cx.whole) {
            let nv = state.node(node);
            let plain = match cx.in_flight.get(&node) {
                Some(p) => p.clone(),
                None => match s.expect_object(node, &nv, obj)? {
                    None => bucket::encode_bucket(&self.geo, &[]),
                    Some(sealed) => s.open(node, node, &nv, &sealed)?,
                },
            };
            let bucket =
                bucket::decode_bucket(&self.geo, &plain).map_err(|e| s.integrity(node, &nv, e))?;
            found.extend(self.check_bucket(s, state, node, bucket, &mut seen)?);
        }
        for &node in plan.nodes.iter().filter(|&&n| self.cached(n)) {
            if let Some(b) = state.local_bucket(node) {
                found.extend(self.check_bucket(s, state, node, b.clone(), &mut seen)?);
            }
        }
        // A stored block must be where the state says: never read as zeros.
        check_stored(s, &self.geo, state, &plan.stored, &seen)?;
        Ok(found)
    }

    fn apply(
        &self,
        cx: ApplyCx<'_>,
        plan: PathPlan,
        found: Vec<(u64, Bytes)>,
        ops: Vec<Op>,
    ) -> Result<Applied<()>> {
        let ApplyCx { state, random } = cx;
        let mut rng = random.rest();
        let leaves = self.geo.leaves;
        let answers = serve_ops(
            state,
            found,
            ops,
            &plan.remap,
            self.geo.block_size,
            &mut || rng.gen_range(0..leaves),
        );
        // Evict into the union of the paths.
        let writes = evict_stash(&self.geo, state, &plan.nodes, |n| self.cached(n))?
            .into_iter()
            .map(|(node, bucket)| (node, bucket::encode_bucket(&self.geo, &bucket)))
            .collect();
        Ok(Applied {
            answers,
            writes,
            note: (),
        })
    }

    fn check_prepare(&self, _: &dyn TrustedState) {}

    fn check_bucket(
        &self,
        s: &Sealing,
        _: &(),
        node: u64,
        nv: &NodeVersion,
        obj: Option<Bytes>,
        _: &mut CheckReport,
    ) -> Result<Vec<(u64, Bytes)>> {
        match s.expect_object(node, nv, obj)? {
            None => Ok(Vec::new()),
            Some(sealed) => {
                let plain = s.open(node, node, nv, &sealed)?;
                bucket::decode_bucket(&self.geo, &plain).map_err(|e| s.integrity(node, nv, e))
            }
        }
    }
}
