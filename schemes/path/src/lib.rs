//! Path ORAM (Stefanov et al.), built for a high-latency object store.
//!
//! The tree lives on a [`BlockStore`] as one sealed object per bucket,
//! `<prefix>/n/<node>` (or `<prefix>/n/<node>.1` when the bucket's current version
//! is in its second slot, see [`NodeVersion`]); the position map, the stash, bucket
//! versions and the top `cached_levels` levels of the tree live in [`TrustedState`].
//!
//! One call of [`Oram::access`] with `k` ops is one **round**:
//! 1. each op draws the leaf to read (its block's current leaf, or a fresh random
//!    leaf for a block never written) and remaps its block to a new random leaf;
//! 2. the union of the `k` paths, minus the cached levels, is fetched with one
//!    concurrent `get_many` (one round trip);
//! 3. the ops are served from the stash and **the answers returned at once**;
//! 4. the stash is evicted greedily into the union of the paths, and the new
//!    buckets are sealed and written back by a background task, off the critical
//!    path. At most `max_inflight_writebacks` rounds wait for the backend at a time.
//!
//! A round that needs a bucket still being written back uses the in-memory copy
//! (it still issues the GET, so the trace does not change), and a write-back of a
//! bucket waits for earlier write-backs of the same bucket, so the backend always
//! ends with the newest version. A write-back that keeps failing stays in memory;
//! the next round first re-sends it and fails cleanly, with no state change, while
//! the backend is unavailable.
//!
//! **Crash safety:** a round commits its trusted state — new positions, stash,
//! versions, and the plaintext of every bucket it is about to write back (the
//! journal) — before it answers and before any write-back starts. After a crash the
//! journal is re-sent before anything else ([`PathOram::new`] loads it), so no block
//! that moved out of the stash into a bucket is lost, whether or not its write-back
//! had landed. A journal entry is dropped (lazily, with the next commit) once its
//! write-back landed.
//!
//! **What the storage server observes per round:** GETs of every uncached bucket on
//! `k` uniformly random paths, then PUTs of the same buckets, all of the same size.
//! Never-written buckets read as absent (lazy initialisation) unless the tree was
//! [`PathOram::format`]ted; which buckets were written depends only on earlier random
//! paths. Freshness: every bucket is sealed with its version, which the trusted state
//! remembers, so a replayed, swapped, deleted or modified bucket is an integrity error.

pub mod tree;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey};
use oram_engine::{
    open_error, validate_op, CheckReport, EngineStats, Op, Oram, OramError, Quiesced, Result,
};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::{Bucket, NodeVersion, StateError, TrustedState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

pub use tree::Geometry;

/// Parameters of a Path ORAM instance.
#[derive(Clone, Debug)]
pub struct PathConfig {
    /// Logical blocks stored (any number ≥ 1, not only powers of two).
    pub capacity: u64,
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

/// A Path ORAM engine. Cheap to clone (shared state).
#[derive(Clone)]
pub struct PathOram {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: PathConfig,
    geo: Geometry,
    cached_levels: u32,
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    round: Arc<tokio::sync::Mutex<RoundState>>,
    inflight: Mutex<HashMap<u64, Pending>>,
    /// `(node, version)` of write-backs that landed, to drop from the journal.
    landed: Mutex<Vec<(u64, u64)>>,
    wb_permits: Arc<Semaphore>,
    stats: Mutex<EngineStats>,
    retries: AtomicU64,
    stash_bound: AtomicUsize,
}

struct RoundState {
    state: Box<dyn TrustedState>,
    rng: ChaCha20Rng,
    next_round: u64,
}

/// A bucket written by a round whose write-back has not finished.
#[derive(Clone)]
struct Pending {
    round: u64,
    nv: NodeVersion,
    plain: Bytes,
    done: watch::Receiver<WbStatus>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WbStatus {
    Running,
    Done,
    Failed,
}

/// A bucket to write: node, version, encoded plaintext.
type BucketWrite = (u64, NodeVersion, Bytes);

impl PathOram {
    /// Creates an engine over `store`, sealing with `sealer` and keeping its trusted
    /// state in `state` (which may already hold the state of an existing tree).
    ///
    /// Write-backs journaled in `state` but maybe never landed (a crash) are queued
    /// to be re-sent: by [`Oram::flush`], or first thing in the next access.
    pub fn new(
        cfg: PathConfig,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Result<Self> {
        if cfg.capacity == 0 || cfg.block_size == 0 || cfg.z == 0 {
            return Err(OramError::Config(
                "capacity, block size and Z must be positive".into(),
            ));
        }
        if cfg.max_batch == 0 || cfg.max_inflight_writebacks == 0 || cfg.writeback_attempts == 0 {
            return Err(OramError::Config(
                "max_batch, max_inflight_writebacks and writeback_attempts must be positive".into(),
            ));
        }
        ObjKey::new(format!("{}/n/1", cfg.prefix))
            .map_err(|e| OramError::Config(format!("prefix: {e}")))?;
        let geo = Geometry::new(cfg.capacity, cfg.z, cfg.block_size, cfg.leaves);
        if geo.leaf_level > 40 {
            return Err(OramError::Config("tree deeper than 40 levels".into()));
        }
        let rng = match cfg.rng_seed {
            Some(seed) => ChaCha20Rng::from_seed(seed),
            None => ChaCha20Rng::from_entropy(),
        };
        let cached_levels = cfg.cached_levels.min(geo.leaf_level + 1);
        let cfg_stash_bound = cfg.stash_bound;
        // Journaled write-backs of an earlier run: resent like failed ones.
        let (failed_tx, failed_rx) = watch::channel(WbStatus::Failed);
        drop(failed_tx);
        let inflight: HashMap<u64, Pending> = state
            .pending()
            .into_iter()
            .map(|(node, nv, plain)| {
                (
                    node,
                    Pending {
                        round: 0,
                        nv,
                        plain,
                        done: failed_rx.clone(),
                    },
                )
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                wb_permits: Arc::new(Semaphore::new(cfg.max_inflight_writebacks)),
                cfg,
                geo,
                cached_levels,
                store,
                sealer,
                round: Arc::new(tokio::sync::Mutex::new(RoundState {
                    state,
                    rng,
                    next_round: 1,
                })),
                inflight: Mutex::new(inflight),
                landed: Mutex::new(Vec::new()),
                stats: Mutex::new(EngineStats::default()),
                retries: AtomicU64::new(0),
                stash_bound: AtomicUsize::new(cfg_stash_bound),
            }),
        })
    }

    /// The tree's shape.
    pub fn geometry(&self) -> Geometry {
        self.inner.geo
    }

    /// Levels actually cached locally (the configured number, at most the tree height).
    pub fn cached_levels(&self) -> u32 {
        self.inner.cached_levels
    }

    /// Changes the stash bound at run time: after a [`OramError::StashOverflow`] an
    /// operator can raise it so that accesses drain the stash again.
    pub fn set_stash_bound(&self, bound: usize) {
        self.inner.stash_bound.store(bound, Ordering::Relaxed);
    }

    /// The backend key of bucket `node` in `slot` (0 or 1).
    pub fn node_key(&self, node: u64, slot: u8) -> ObjKey {
        self.inner.node_key(node, slot)
    }

    /// Writes every never-written uncached bucket as an empty bucket, so that from
    /// then on every GET finds an object of full size (no lazy-initialisation
    /// pattern at all). Observed: one PUT per such bucket, in node order.
    pub async fn format(&self) -> Result<()> {
        let inner = &self.inner;
        let mut g = inner.round.lock().await;
        let empty = tree::encode_bucket(&inner.geo, &[]);
        let first = 1u64 << inner.cached_levels;
        let mut node = first;
        while node <= inner.geo.node_count() {
            let end = (node + 256).min(inner.geo.node_count() + 1);
            let todo: Vec<u64> = (node..end)
                .filter(|n| g.state.node(*n).version == 0)
                .collect();
            let mut items = Vec::with_capacity(todo.len());
            let mut written = Vec::with_capacity(todo.len());
            for n in &todo {
                let nv = g.state.advance(*n);
                g.state.pending_put(*n, nv, empty.clone());
                items.push((
                    inner.node_key(*n, nv.slot),
                    inner.seal(*n, nv.version, &empty)?,
                ));
                written.push((*n, nv.version));
            }
            // Journaled first: a crash before the PUTs land is repaired by resending.
            g.state.commit()?;
            inner.store.put_many(items).await?;
            for (n, v) in written {
                g.state.pending_done(n, v);
            }
            node = end;
        }
        g.state.commit()?;
        Ok(())
    }
}

impl Inner {
    fn node_key(&self, node: u64, slot: u8) -> ObjKey {
        let key = if slot == 0 {
            format!("{}/n/{node}", self.cfg.prefix)
        } else {
            format!("{}/n/{node}.{slot}", self.cfg.prefix)
        };
        ObjKey::new(key).expect("prefix validated")
    }

    fn identity(node: u64, version: u64) -> ObjectIdentity {
        ObjectIdentity {
            kind: ObjectKind::TreeBucket,
            position: node,
            version,
        }
    }

    fn seal(&self, node: u64, version: u64, plain: &[u8]) -> Result<Bytes> {
        self.sealer
            .seal(&Self::identity(node, version), plain)
            .map_err(OramError::Seal)
    }

    fn integrity(&self, node: u64, slot: u8, reason: impl Into<String>) -> OramError {
        OramError::Integrity {
            key: self.node_key(node, slot).to_string(),
            reason: reason.into(),
        }
    }

    /// Drops the journal entries of write-backs that landed (under the round lock;
    /// committed with the round's next commit).
    fn settle_landed(&self, state: &mut dyn TrustedState) {
        let landed = std::mem::take(&mut *self.landed.lock().unwrap_or_else(|e| e.into_inner()));
        for (node, version) in landed {
            state.pending_done(node, version);
        }
    }

    /// Resends write-backs that failed; called under the round lock.
    async fn retry_failed(&self) -> Result<()> {
        let failed: Vec<(u64, Pending)> = {
            let infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            infl.iter()
                .filter(|(_, p)| *p.done.borrow() == WbStatus::Failed)
                .map(|(n, p)| (*n, p.clone()))
                .collect()
        };
        if failed.is_empty() {
            return Ok(());
        }
        let mut items = Vec::with_capacity(failed.len());
        for (n, p) in &failed {
            items.push((
                self.node_key(*n, p.nv.slot),
                self.seal(*n, p.nv.version, &p.plain)?,
            ));
        }
        self.store.put_many(items).await?;
        let mut infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        let mut landed = self.landed.lock().unwrap_or_else(|e| e.into_inner());
        for (n, p) in failed {
            landed.push((n, p.nv.version));
            if infl.get(&n).is_some_and(|q| q.round == p.round) {
                infl.remove(&n);
            }
        }
        Ok(())
    }

    /// One round: fetch the paths, answer, plan eviction, start the write-back.
    async fn round(self: &Arc<Self>, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let geo = self.geo;
        let mut g = self.round.lock().await;
        let permit = self
            .wb_permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed");
        self.retry_failed().await?;
        let rs = &mut *g;
        self.settle_landed(rs.state.as_mut());

        // 1. Leaves to read and new positions (applied only once the fetch succeeded).
        let mut read_leaves = Vec::with_capacity(ops.len());
        let mut remap: HashMap<u64, u64> = HashMap::new();
        for op in &ops {
            let block = op.block();
            // Two draws per op whatever the op, so the random stream does not depend on it.
            let fresh = rs.rng.gen_range(0..geo.leaves);
            let new_leaf = rs.rng.gen_range(0..geo.leaves);
            let current = remap
                .get(&block)
                .copied()
                .or_else(|| rs.state.position(block));
            read_leaves.push(current.unwrap_or(fresh));
            if current.is_some() || matches!(op, Op::Write(..)) {
                remap.insert(block, new_leaf);
            }
        }

        // 2. Fetch the union of the paths (uncached levels) in one concurrent batch.
        let nodes: BTreeSet<u64> = read_leaves.iter().flat_map(|&x| geo.path(x)).collect();
        let remote: Vec<u64> = nodes
            .iter()
            .copied()
            .filter(|&n| Geometry::level_of(n) >= self.cached_levels)
            .collect();
        let keys: Vec<ObjKey> = remote
            .iter()
            .map(|&n| self.node_key(n, rs.state.node(n).slot))
            .collect();
        // Buckets still being written back are taken from memory. The snapshot is
        // taken before the GETs: a bucket absent from it was on the backend before
        // they were sent (write-backs of later rounds cannot start before this one ends).
        let pending: HashMap<u64, Pending> = {
            let infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            remote
                .iter()
                .filter_map(|n| infl.get(n).map(|p| (*n, p.clone())))
                .collect()
        };
        let fetched = self
            .store
            .get_many_bounded(
                &keys,
                oram_blockstore::SizeBound::Exact(
                    Sealer::sealed_len(self.geo.bucket_bytes()) as u64
                ),
            )
            .await?;
        if fetched.len() != keys.len() {
            return Err(OramError::Store(oram_blockstore::StoreError::Unavailable(
                "backend answered a batch with the wrong number of objects".into(),
            )));
        }

        // 3. Open and decode every bucket; any failure leaves the state untouched.
        let mut found: Vec<(u64, Bytes)> = Vec::new();
        let mut seen = BTreeSet::new();
        for (&node, obj) in remote.iter().zip(fetched) {
            let plain = if let Some(p) = pending.get(&node) {
                p.plain.clone()
            } else {
                self.open_bucket(node, rs.state.node(node), obj)?
            };
            let slot = rs.state.node(node).slot;
            let bucket =
                tree::decode_bucket(&geo, &plain).map_err(|e| self.integrity(node, slot, e))?;
            found.extend(self.check_bucket(rs.state.as_ref(), node, bucket, &mut seen)?);
        }
        for &node in nodes
            .iter()
            .filter(|&&n| Geometry::level_of(n) < self.cached_levels)
        {
            if let Some(b) = rs.state.local_bucket(node) {
                found.extend(self.check_bucket(rs.state.as_ref(), node, b.clone(), &mut seen)?);
            }
        }

        // 4. Apply: stash, positions, then the ops in order; answers are ready here.
        for (b, d) in found {
            rs.state.stash_insert(b, d);
        }
        for (&b, &leaf) in &remap {
            rs.state.set_position(b, leaf);
        }
        let zeros = Bytes::from(vec![0u8; geo.block_size]);
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Read(b) => results.push(
                    rs.state
                        .stash_get(b)
                        .cloned()
                        .unwrap_or_else(|| zeros.clone()),
                ),
                Op::Write(b, d) => {
                    rs.state.stash_insert(b, d);
                    results.push(Bytes::new());
                }
            }
        }

        // 5. Evict into the union of the paths and build the new buckets.
        let mut stash_list = Vec::with_capacity(rs.state.stash_len());
        for b in rs.state.stash_blocks() {
            let leaf = rs
                .state
                .position(b)
                .ok_or_else(|| StateError::Corrupt(format!("stashed block {b} has no position")))?;
            stash_list.push((b, leaf));
        }
        let mut plan = tree::plan_eviction(&geo, &stash_list, &nodes);
        let mut writes: Vec<BucketWrite> = Vec::with_capacity(remote.len());
        for &node in &nodes {
            let bucket: Vec<(u64, Bytes)> = plan
                .remove(&node)
                .unwrap_or_default()
                .into_iter()
                .map(|b| (b, rs.state.stash_remove(b).expect("planned from the stash")))
                .collect();
            if Geometry::level_of(node) < self.cached_levels {
                rs.state.set_local_bucket(node, bucket);
            } else {
                let nv = rs.state.advance(node);
                let plain = tree::encode_bucket(&geo, &bucket);
                rs.state.pending_put(node, nv, plain.clone());
                writes.push((node, nv, plain));
            }
        }
        // Durable before anything is answered or written back: on error the state
        // is back where the round found it, as if the round never happened.
        rs.state.commit()?;
        let stash_len = rs.state.stash_len();

        // 6. Register the write-back and run it off the critical path.
        let round = rs.next_round;
        rs.next_round += 1;
        let (tx, rx) = watch::channel(WbStatus::Running);
        let mut earlier = Vec::new();
        {
            let mut infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            for (node, version, plain) in &writes {
                let p = Pending {
                    round,
                    nv: *version,
                    plain: plain.clone(),
                    done: rx.clone(),
                };
                if let Some(prev) = infl.insert(*node, p) {
                    earlier.push(prev.done);
                }
            }
        }
        {
            let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            st.accesses += results.len() as u64;
            st.rounds += 1;
            st.stash_len = stash_len as u64;
            st.stash_max = st.stash_max.max(stash_len as u64);
            st.stash_sum += stash_len as u64;
        }
        drop(g);
        tokio::spawn(self.clone().write_back(round, writes, earlier, tx, permit));

        let bound = self.stash_bound.load(Ordering::Relaxed);
        if stash_len > bound {
            return Err(OramError::StashOverflow {
                size: stash_len,
                bound,
            });
        }
        Ok(results)
    }

    /// Checks that every block of a bucket is in range, on its path, and stored
    /// nowhere else (not in the stash, not in a bucket already `seen`).
    fn check_bucket(
        &self,
        state: &dyn TrustedState,
        node: u64,
        bucket: Vec<(u64, Bytes)>,
        seen: &mut BTreeSet<u64>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let slot = state.node(node).slot;
        for (b, _) in &bucket {
            if !seen.insert(*b) || state.stash_get(*b).is_some() {
                return Err(self.integrity(node, slot, format!("block {b} stored twice")));
            }
            if *b >= self.cfg.capacity {
                return Err(self.integrity(node, slot, format!("block {b} beyond capacity")));
            }
            match state.position(*b) {
                Some(leaf) if self.geo.on_path(node, leaf) => {}
                _ => return Err(self.integrity(node, slot, format!("block {b} off its path"))),
            }
        }
        Ok(bucket)
    }

    /// Opens the object fetched for bucket `node` at version `nv`; `None` is an
    /// empty bucket only if the bucket was never written.
    fn open_bucket(&self, node: u64, nv: NodeVersion, obj: Option<Bytes>) -> Result<Bytes> {
        match (nv.version, obj) {
            (0, None) => Ok(tree::encode_bucket(&self.geo, &[])),
            (0, Some(_)) => {
                Err(self.integrity(node, nv.slot, "object present at a never-written bucket"))
            }
            (v, None) => Err(self.integrity(node, nv.slot, format!("bucket version {v} missing"))),
            (v, Some(sealed)) => Ok(Bytes::from(
                self.sealer
                    .open(&Self::identity(node, v), &sealed)
                    .map_err(|e| open_error(self.node_key(node, nv.slot).as_str(), e))?,
            )),
        }
    }

    /// Waits for every write-back, commits, and returns the round lock.
    async fn quiesce(&self) -> Result<tokio::sync::OwnedMutexGuard<RoundState>> {
        let mut g = self.round.clone().lock_owned().await;
        let all = self.cfg.max_inflight_writebacks as u32;
        let permits = self
            .wb_permits
            .acquire_many(all)
            .await
            .expect("semaphore never closed");
        drop(permits);
        self.retry_failed().await?;
        self.settle_landed(g.state.as_mut());
        g.state.commit()?;
        Ok(g)
    }

    /// [`Oram::check`] with the engine quiesced.
    async fn check(
        &self,
        state: &mut dyn TrustedState,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<CheckReport> {
        // Copied out first: the state is not `Sync`, so no reference to it may live
        // across an await of this (`Send`) future.
        let positions: HashMap<u64, u64> = state.positions().into_iter().collect();
        let nodes: HashMap<u64, NodeVersion> = state.nodes().into_iter().collect();
        let stash: Vec<(u64, Bytes)> = state
            .stash_blocks()
            .into_iter()
            .filter_map(|b| state.stash_get(b).map(|d| (b, d.clone())))
            .collect();
        let first_remote = 1u64 << self.cached_levels;
        let local: Vec<(u64, Bucket)> = (1..first_remote.min(self.geo.node_count() + 1))
            .filter_map(|n| state.local_bucket(n).map(|b| (n, b.clone())))
            .collect();
        let journaled = state.pending().len();
        let geo = self.geo;
        let mut rep = CheckReport::default();
        // Where each block was found: (node or 0 for the stash).
        let mut found: HashMap<u64, u64> = HashMap::new();
        let mut note = |rep: &mut CheckReport, node: u64, slot: u8, bucket: &[(u64, Bytes)]| {
            for (b, data) in bucket {
                let at = if node == 0 {
                    "the stash".to_string()
                } else {
                    format!("bucket {}", self.node_key(node, slot))
                };
                if data.len() != geo.block_size {
                    rep.problem(format!("block {b} in {at} has {} bytes", data.len()));
                }
                if let Some(prev) = found.insert(*b, node) {
                    rep.problem(format!(
                        "block {b} stored twice: in {at} and in {}",
                        if prev == 0 {
                            "the stash".to_string()
                        } else {
                            format!("node {prev}")
                        }
                    ));
                }
                match positions.get(b).copied() {
                    None => rep.problem(format!("block {b} in {at} has no position")),
                    Some(leaf) if node != 0 && !geo.on_path(node, leaf) => rep.problem(format!(
                        "block {b} in {at} is not on the path to its leaf {leaf}"
                    )),
                    _ => {}
                }
            }
        };
        rep.stash_len = stash.len() as u64;
        note(&mut rep, 0, 0, &stash);
        let total = geo.node_count();
        for (node, b) in &local {
            note(&mut rep, *node, 0, b);
        }
        progress(first_remote.min(total + 1) - 1, total);
        let mut node = first_remote;
        while node <= total {
            let end = (node + 256).min(total + 1);
            let batch: Vec<(u64, NodeVersion)> = (node..end)
                .map(|n| (n, nodes.get(&n).copied().unwrap_or_default()))
                .collect();
            let keys: Vec<ObjKey> = batch
                .iter()
                .map(|(n, nv)| self.node_key(*n, nv.slot))
                .collect();
            let got = self
                .store
                .get_many_bounded(
                    &keys,
                    oram_blockstore::SizeBound::Exact(
                        Sealer::sealed_len(self.geo.bucket_bytes()) as u64
                    ),
                )
                .await?;
            for ((n, nv), obj) in batch.into_iter().zip(got) {
                if nv.version == 0 && obj.is_none() {
                    continue;
                }
                rep.objects_read += 1;
                let bucket = self.open_bucket(n, nv, obj).and_then(|plain| {
                    tree::decode_bucket(&geo, &plain).map_err(|e| self.integrity(n, nv.slot, e))
                });
                match bucket {
                    Ok(b) => note(&mut rep, n, nv.slot, &b),
                    Err(e) => {
                        rep.objects_bad += 1;
                        rep.problem(e.to_string());
                    }
                }
            }
            progress(end - 1, total);
            node = end;
        }
        rep.finish(positions.keys(), found, journaled);
        Ok(rep)
    }

    async fn write_back(
        self: Arc<Self>,
        round: u64,
        writes: Vec<BucketWrite>,
        earlier: Vec<watch::Receiver<WbStatus>>,
        tx: watch::Sender<WbStatus>,
        _permit: OwnedSemaphorePermit,
    ) {
        // Older versions of the same buckets must land first.
        for mut rx in earlier {
            let _ = rx.wait_for(|s| *s != WbStatus::Running).await;
        }
        let status = match self.put_buckets(&writes).await {
            Ok(()) => {
                let mut infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
                let mut landed = self.landed.lock().unwrap_or_else(|e| e.into_inner());
                for (node, nv, _) in &writes {
                    landed.push((*node, nv.version));
                    if infl.get(node).is_some_and(|p| p.round == round) {
                        infl.remove(node);
                    }
                }
                WbStatus::Done
            }
            Err(_) => WbStatus::Failed,
        };
        tx.send_replace(status);
    }

    async fn put_buckets(&self, writes: &[BucketWrite]) -> Result<()> {
        let mut items = Vec::with_capacity(writes.len());
        for (node, nv, plain) in writes {
            items.push((
                self.node_key(*node, nv.slot),
                self.seal(*node, nv.version, plain)?,
            ));
        }
        oram_blockstore::put_many_retrying(
            self.store.as_ref(),
            items,
            self.cfg.writeback_attempts,
            || {
                self.retries.fetch_add(1, Ordering::Relaxed);
            },
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl Oram for PathOram {
    fn name(&self) -> &'static str {
        "path"
    }

    fn block_size(&self) -> usize {
        self.inner.cfg.block_size
    }

    fn capacity(&self) -> u64 {
        self.inner.cfg.capacity
    }

    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        for op in &ops {
            validate_op(op, self.capacity(), self.block_size())?;
        }
        let mut out = Vec::with_capacity(ops.len());
        let mut ops = ops;
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(self.inner.cfg.max_batch));
            out.extend(self.inner.round(ops).await?);
            ops = rest;
        }
        Ok(out)
    }

    async fn flush(&self) -> Result<()> {
        self.quiesce().await.map(drop)
    }

    async fn quiesce(&self) -> Result<Quiesced> {
        Ok(Quiesced::new(self.inner.quiesce().await?))
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let mut g = self.inner.quiesce().await?;
        self.inner.check(g.state.as_mut(), progress).await
    }

    async fn sweep(&self) -> Result<u64> {
        let inner = &self.inner;
        let g = inner.quiesce().await?;
        let live: BTreeSet<ObjKey> = g
            .state
            .nodes()
            .into_iter()
            .filter(|(_, nv)| nv.version > 0)
            .map(|(n, nv)| inner.node_key(n, nv.slot))
            .collect();
        // The round lock stays held: no access may write while objects are deleted.
        let prefix = format!("{}/n/", inner.cfg.prefix);
        let n = oram_blockstore::delete_unreferenced(inner.store.as_ref(), &prefix, &live).await?;
        drop(g);
        Ok(n)
    }

    fn stats(&self) -> EngineStats {
        let mut s = *self.inner.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.pending_writebacks = (self.inner.cfg.max_inflight_writebacks
            - self.inner.wb_permits.available_permits()) as u64;
        s.writeback_retries = self.inner.retries.load(Ordering::Relaxed);
        s
    }
}
