//! Path ORAM (Stefanov et al.), built for a high-latency object store, as a
//! scheme of the shared tree core (`oram-tree`).
//!
//! The tree lives on a [`oram_blockstore::BlockStore`] as one sealed object per
//! bucket, `<prefix>/n/<node>` (or `<prefix>/n/<node>.<slot>`, see
//! [`oram_state::NodeVersion`]); the position map, the stash, bucket versions and
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

pub mod bucket;
mod settings;

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use oram_engine::{CheckReport, Op, OramError, Result};
use oram_seal::ObjectKind;
use oram_state::{NodeVersion, StateError, TrustedState};
use oram_tree::{
    plan_eviction, Applied, ApplyCx, OpenCx, PlanCx, Requests, Sealing, TreeEngine, TreeParams,
    TreeScheme,
};
use rand_chacha::ChaCha20Rng;

pub use oram_tree::Geometry;
pub use settings::PathSettings;

/// A Path ORAM engine. Cheap to clone (shared state).
pub type PathOram = TreeEngine<PathScheme>;

/// Parameters of a Path ORAM instance.
#[derive(Clone, Debug)]
pub struct PathConfig {
    /// Logical blocks stored (any number ≥ 1, not only powers of two).
    pub capacity: u64,
    /// Block ids are `0..id_limit`; default: the capacity. A partition of a larger
    /// id space holds at most `capacity` blocks with ids up to the limit.
    pub id_limit: Option<u64>,
    /// Bytes per block.
    pub block_size: usize,
    /// Blocks per bucket (Z). Default 4.
    pub z: usize,
    /// Number of leaves; default: the power of two ≥ capacity / 2.
    pub leaves: Option<u64>,
    /// Levels of the tree, from the root, kept in trusted local state instead of the
    /// backend (tree-top cache). Each saves one GET and one PUT per access.
    pub cached_levels: u32,
    /// Largest stash allowed after a round; above it an access fails with
    /// [`OramError::StashOverflow`]. Default 89 (overflow probability below 2⁻⁸⁰ per
    /// access for Z = 4).
    pub stash_bound: usize,
    /// Most ops served in one round; longer batches are split into several rounds.
    pub max_batch: usize,
    /// Rounds whose write-back may be pending at once (bounds memory).
    pub max_inflight_writebacks: usize,
    /// Attempts of one write-back before it is left for the next round to resend.
    pub writeback_attempts: u32,
    /// Backend key prefix of this volume (a valid key, e.g. `vol0`).
    pub prefix: String,
    /// Seed for the leaf choices. `None` (the default, and the only safe choice in
    /// production) seeds from the OS; tests fix it for reproducible traces.
    pub rng_seed: Option<[u8; 32]>,
}

impl Default for PathConfig {
    fn default() -> Self {
        Self {
            capacity: 1 << 16,
            id_limit: None,
            block_size: 4096,
            z: 4,
            leaves: None,
            cached_levels: 0,
            stash_bound: 89,
            max_batch: 64,
            max_inflight_writebacks: 4,
            writeback_attempts: 4,
            prefix: "vol0".into(),
            rng_seed: None,
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

    /// The plaintext of bucket `node` fetched as `obj` (or still in flight).
    fn bucket_plain(
        &self,
        s: &Sealing,
        node: u64,
        nv: &NodeVersion,
        obj: Option<Bytes>,
    ) -> Result<Bytes> {
        match s.expect_object(node, nv, obj)? {
            None => Ok(bucket::encode_bucket(&self.geo, &[])),
            Some(sealed) => s.open(node, node, nv, &sealed),
        }
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
        let geo = Geometry::new(cfg.capacity, cfg.z, cfg.block_size, cfg.leaves);
        let id_limit = cfg.id_limit.unwrap_or(cfg.capacity);
        let scheme = Self {
            geo,
            cached_levels: cfg.cached_levels.min(geo.leaf_level + 1),
            id_limit,
        };
        let params = TreeParams {
            capacity: cfg.capacity,
            id_limit,
            block_size: cfg.block_size,
            max_batch: cfg.max_batch,
            max_inflight_writebacks: cfg.max_inflight_writebacks,
            writeback_attempts: cfg.writeback_attempts,
            stash_bound: cfg.stash_bound,
            prefix: cfg.prefix.clone(),
            rng_seed: cfg.rng_seed,
        };
        Ok((scheme, params))
    }

    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn cached_levels(&self) -> u32 {
        self.cached_levels
    }

    fn seal_bucket(
        &self,
        s: &Sealing,
        node: u64,
        nv: &NodeVersion,
        plain: &Bytes,
    ) -> Result<Bytes> {
        s.seal(node, nv, plain)
    }

    fn empty_bucket(&self, _: &mut dyn TrustedState, _: u64, _: &mut ChaCha20Rng) -> Bytes {
        bucket::encode_bucket(&self.geo, &[])
    }

    fn plan(&self, cx: &mut PlanCx<'_, '_>, blocks: &[Option<u64>]) -> Result<PathPlan> {
        let leaves = self.geo.leaves;
        let mut read_leaves = Vec::with_capacity(blocks.len());
        let mut remap: HashMap<u64, u64> = HashMap::new();
        let mut stored = Vec::new();
        for block in blocks {
            // Two draws per op whatever the op, so the random stream does not depend on it.
            let fresh = cx.draws.below(leaves)?;
            let new_leaf = cx.draws.below(leaves)?;
            let Some(b) = *block else {
                read_leaves.push(fresh);
                continue;
            };
            let current = match remap.get(&b) {
                Some(&l) => Some(l),
                None => {
                    let p = cx.state.position(b);
                    if let Some(leaf) = p {
                        stored.push((b, leaf));
                    }
                    p
                }
            };
            read_leaves.push(current.unwrap_or(fresh));
            remap.insert(b, new_leaf);
        }
        let nodes: BTreeSet<u64> = read_leaves.iter().flat_map(|&x| self.geo.path(x)).collect();
        let remote = nodes.iter().copied().filter(|&n| !self.cached(n)).collect();
        Ok(PathPlan {
            nodes,
            remote,
            remap,
            stored,
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
                None => self.bucket_plain(s, node, &nv, obj)?,
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
        for &(b, leaf) in &plan.stored {
            if !seen.contains(&b) && state.stash_get(b).is_none() {
                let node = self.geo.node_on_path(leaf, self.geo.leaf_level);
                return Err(s.integrity(
                    node,
                    &state.node(node),
                    format!("block {b} is neither on the path to its leaf {leaf} nor in the stash"),
                ));
            }
        }
        Ok(found)
    }

    fn apply(
        &self,
        cx: ApplyCx<'_>,
        plan: PathPlan,
        found: Vec<(u64, Bytes)>,
        ops: Vec<Op>,
    ) -> Result<Applied<()>> {
        let state = cx.state;
        for (b, d) in found {
            state.stash_insert(b, d);
        }
        let zeros = Bytes::from(vec![0u8; self.geo.block_size]);
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            answers.push(match op {
                Op::Read(b) => state.stash_get(b).cloned().unwrap_or_else(|| zeros.clone()),
                Op::Write(b, d) => {
                    state.stash_insert(b, d);
                    Bytes::new()
                }
                Op::Take(b) => {
                    state.remove_position(b);
                    state.stash_remove(b).unwrap_or_else(|| zeros.clone())
                }
                Op::Dummy => Bytes::new(),
            });
        }
        // Every named block still stored moves to its new leaf.
        for (&b, &leaf) in &plan.remap {
            if state.stash_get(b).is_some() {
                state.set_position(b, leaf);
            }
        }
        // Evict into the union of the paths.
        let mut stash_list = Vec::with_capacity(state.stash_len());
        for b in state.stash_blocks() {
            let leaf = state
                .position(b)
                .ok_or_else(|| StateError::Corrupt(format!("stashed block {b} has no position")))?;
            stash_list.push((b, leaf));
        }
        let mut placed = plan_eviction(&self.geo, &stash_list, &plan.nodes);
        let mut writes = Vec::with_capacity(plan.remote.len());
        for &node in &plan.nodes {
            let bucket: Vec<(u64, Bytes)> = placed
                .remove(&node)
                .unwrap_or_default()
                .into_iter()
                .map(|b| (b, state.stash_remove(b).expect("planned from the stash")))
                .collect();
            if self.cached(node) {
                state.set_local_bucket(node, bucket);
            } else {
                writes.push((node, bucket::encode_bucket(&self.geo, &bucket)));
            }
        }
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
