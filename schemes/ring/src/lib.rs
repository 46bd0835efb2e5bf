//! Ring ORAM (Ren et al., "Constants Count", USENIX Security 2015), built for a
//! high-latency object store, with the same round structure and durability
//! protocol as Path ORAM (`oram-path`).
//!
//! Bucket `n` is one backend object, `<prefix>/r/<n>` (or `<prefix>/r/<n>.1`, its
//! second slot, see [`NodeVersion`]): a sealed header and Z + S separately sealed,
//! fixed-size slots (see [`layout`]). The bucket's metadata — block id per slot,
//! which slots were read, the read count — lives in the trusted state
//! ([`TrustedState::pos_meta`]); the header repeats the ids (and leaves) sealed on
//! the backend. The top `cached_levels` levels live in the trusted state instead.
//!
//! One call of [`Oram::access`] with `k` ops is one **round**:
//! 1. each op draws the leaf to read and a new leaf (two draws per op whatever the
//!    op); the round's EvictPaths are the next `⌊(n+k)/A⌋ − ⌊n/A⌋` leaves in
//!    reverse-lexicographic order (`n` = accesses so far);
//! 2. every uncached bucket of the read paths and eviction paths is requested once,
//!    all concurrently (one round trip): a bucket on an eviction path, or one whose
//!    reads would reach S this round (an **early reshuffle**), with one GET of the
//!    whole object; any other bucket with one ranged GET of one slot per read path
//!    through it — the slot of the wanted block where it is, a fresh unread dummy
//!    elsewhere;
//! 3. the ops are served from the stash and **the answers returned at once**;
//! 4. the eviction paths are refilled greedily from the stash, reshuffled buckets
//!    get their blocks back in a new random permutation, and every rewritten bucket
//!    is sealed and written back by a background task, off the critical path.
//!
//! **Crash safety** is Path ORAM's: the round commits positions, stash, metadata,
//! versions and the plaintext of every bucket it is about to write (the journal)
//! before it answers and before any write-back; [`RingOram::new`] queues the journal
//! to be resent.
//!
//! **What the storage server observes per round:** ranged GETs of one slot-sized
//! range of the buckets on `k` uniformly random paths (the slot uniformly random
//! among those not read since the bucket was written, whether it holds the wanted
//! block or a dummy), whole-object GETs and PUTs of the buckets on the eviction
//! paths (a fixed schedule) and of the buckets read S times (a function of the
//! random paths), all objects of one size. Freshness: every part is sealed with the
//! bucket's version, which the trusted state remembers.

pub mod layout;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{BufMut, Bytes};
use oram_blockstore::{BlockStore, ObjKey};
use oram_engine::{
    open_error, validate_op, CheckReport, EngineStats, Op, Oram, OramError, Quiesced, Result,
};
use oram_path::tree::plan_eviction;
use oram_path::Geometry;
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::{Bucket, NodeVersion, StateError, TrustedState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

pub use layout::{
    analytic_s, paper_bandwidth, Layout, Meta, PaperBandwidth, RingParams, RingPreset, DUMMY,
};

/// Trusted-state metadata position of the engine's counters (no bucket is 0).
const COUNTERS: u64 = 0;

/// How a bucket is read to evict or reshuffle it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictRead {
    /// One GET of the whole object (Z + S slots): one request per bucket.
    #[default]
    Whole,
    /// Z ranged GETs, as in the paper: every unread real slot and unread dummies to
    /// make up Z. Fewer bytes, Z requests per bucket.
    Slots,
}

impl std::str::FromStr for EvictRead {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "whole" => Ok(EvictRead::Whole),
            "slots" => Ok(EvictRead::Slots),
            _ => Err(format!(
                "unknown eviction read {s:?} (expected \"whole\" or \"slots\")"
            )),
        }
    }
}

/// Parameters of a Ring ORAM instance.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Logical blocks stored (any number ≥ 1).
    pub capacity: u64,
    /// Bytes per block.
    pub block_size: usize,
    /// Z, S and A (see [`RingPreset`]).
    pub params: RingParams,
    /// Number of leaves; default: the power of two ≥ 2 · capacity / Z (room for
    /// about twice the blocks in real slots at the leaves alone).
    pub leaves: Option<u64>,
    /// Levels of the tree, from the root, kept in trusted local state instead of the
    /// backend (tree-top cache). Each saves one ranged GET per access.
    pub cached_levels: u32,
    /// Largest stash allowed after a round; above it an access fails with
    /// [`OramError::StashOverflow`] (nothing is lost).
    pub stash_bound: usize,
    /// Most ops served in one round; longer batches are split into several rounds.
    pub max_batch: usize,
    /// Rounds whose write-back may be pending at once (bounds memory).
    pub max_inflight_writebacks: usize,
    /// Attempts of one write-back before it is left for the next round to resend.
    pub writeback_attempts: u32,
    /// Backend key prefix of this volume (a valid key, e.g. `vol0`).
    pub prefix: String,
    /// Seed for the leaf and slot choices. `None` (the default, and the only safe
    /// choice in production) seeds from the OS; tests fix it.
    pub rng_seed: Option<[u8; 32]>,
    /// How buckets are read for EvictPath and early reshuffles.
    pub evict_read: EvictRead,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            capacity: 1 << 16,
            block_size: 4096,
            params: RingPreset::Small.params(),
            leaves: None,
            cached_levels: 0,
            stash_bound: 150,
            max_batch: 64,
            max_inflight_writebacks: 4,
            writeback_attempts: 4,
            prefix: "vol0".into(),
            rng_seed: None,
            evict_read: EvictRead::Whole,
        }
    }
}

impl RingConfig {
    /// The default stash bound for `params` and `max_batch`: a round may hold up
    /// to `max_batch` freshly read blocks on top of the steady-state stash, whose
    /// tail the stash test measures (≈ 2·A + 3·Z covers it with a wide margin).
    pub fn default_stash_bound(params: RingParams, max_batch: usize) -> usize {
        64 + 2 * params.a + 3 * params.z + max_batch
    }

    /// The default number of leaves for `capacity` blocks and `z` real slots per
    /// bucket: the power of two ≥ 2 · capacity / Z.
    pub fn leaves_for(capacity: u64, z: usize) -> u64 {
        (2 * capacity)
            .div_ceil(z.max(1) as u64)
            .max(1)
            .next_power_of_two()
    }
}

/// Counters specific to Ring ORAM (besides [`EngineStats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// EvictPath operations done.
    pub evictions: u64,
    /// Buckets reshuffled early (read S times before their eviction).
    pub early_reshuffles: u64,
    /// Online ranged reads that fetched the wanted block, by slot index.
    pub real_reads_by_slot: Vec<u64>,
    /// Online ranged reads of a dummy, by slot index.
    pub dummy_reads_by_slot: Vec<u64>,
}

/// A Ring ORAM engine. Cheap to clone (shared state).
#[derive(Clone)]
pub struct RingOram {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: RingConfig,
    lay: Layout,
    cached_levels: u32,
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    round: Arc<tokio::sync::Mutex<RoundState>>,
    inflight: Mutex<HashMap<u64, Pending>>,
    /// `(node, version)` of write-backs that landed, to drop from the journal.
    landed: Mutex<Vec<(u64, u64)>>,
    wb_permits: Arc<Semaphore>,
    stats: Mutex<EngineStats>,
    ring_stats: Mutex<RingStats>,
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

/// A bucket to write: node, version, plaintext (header and slots).
type BucketWrite = (u64, NodeVersion, Bytes);

/// One online ranged read planned for a round.
struct SlotRead {
    node: u64,
    slot: usize,
    /// The block expected in the slot ([`DUMMY`] for a dummy).
    id: u64,
    /// Part of reading a bucket to evict or reshuffle it (not an online read).
    evict: bool,
}

/// The engine's durable counters (trusted-state metadata at position 0).
#[derive(Clone, Copy, Default)]
struct Counters {
    accesses: u64,
    evictions: u64,
}

impl Counters {
    fn load(state: &dyn TrustedState) -> Result<Self> {
        match state.pos_meta(COUNTERS) {
            None => Ok(Self::default()),
            Some(b) if b.len() == 16 => Ok(Self {
                accesses: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                evictions: u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
            }),
            Some(_) => {
                Err(StateError::Corrupt("Ring ORAM counters of the wrong size".into()).into())
            }
        }
    }
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(16);
        v.put_u64_le(self.accesses);
        v.put_u64_le(self.evictions);
        v.into()
    }
}

impl RingOram {
    /// Creates an engine over `store`, sealing with `sealer` and keeping its trusted
    /// state in `state` (which may already hold the state of an existing tree).
    ///
    /// Write-backs journaled in `state` but maybe never landed (a crash) are queued
    /// to be re-sent: by [`Oram::flush`], or first thing in the next access.
    pub fn new(
        cfg: RingConfig,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Result<Self> {
        let p = cfg.params;
        if cfg.capacity == 0 || cfg.block_size == 0 || p.z == 0 || p.s == 0 || p.a == 0 {
            return Err(OramError::Config(
                "capacity, block size, Z, S and A must be positive".into(),
            ));
        }
        if p.z + p.s > 4096 {
            return Err(OramError::Config("Z + S above 4096 slots".into()));
        }
        if cfg.max_batch == 0 || cfg.max_inflight_writebacks == 0 || cfg.writeback_attempts == 0 {
            return Err(OramError::Config(
                "max_batch, max_inflight_writebacks and writeback_attempts must be positive".into(),
            ));
        }
        ObjKey::new(format!("{}/r/1", cfg.prefix))
            .map_err(|e| OramError::Config(format!("prefix: {e}")))?;
        let leaves = cfg
            .leaves
            .unwrap_or_else(|| RingConfig::leaves_for(cfg.capacity, p.z));
        let geo = Geometry::new(cfg.capacity, p.z, cfg.block_size, Some(leaves));
        if geo.leaf_level > 40 {
            return Err(OramError::Config("tree deeper than 40 levels".into()));
        }
        let lay = Layout {
            geo,
            params: p,
            block_size: cfg.block_size,
        };
        let rng = match cfg.rng_seed {
            Some(seed) => ChaCha20Rng::from_seed(seed),
            None => ChaCha20Rng::from_entropy(),
        };
        let cached_levels = cfg.cached_levels.min(geo.leaf_level + 1);
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
        let slots = lay.slots();
        Ok(Self {
            inner: Arc::new(Inner {
                wb_permits: Arc::new(Semaphore::new(cfg.max_inflight_writebacks)),
                stash_bound: AtomicUsize::new(cfg.stash_bound),
                cfg,
                lay,
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
                ring_stats: Mutex::new(RingStats {
                    real_reads_by_slot: vec![0; slots],
                    dummy_reads_by_slot: vec![0; slots],
                    ..RingStats::default()
                }),
                retries: AtomicU64::new(0),
            }),
        })
    }

    /// The tree's shape.
    pub fn geometry(&self) -> Geometry {
        self.inner.lay.geo
    }

    /// The bucket layout (sizes, ranges).
    pub fn layout(&self) -> Layout {
        self.inner.lay
    }

    /// Levels actually cached locally (the configured number, at most the tree height).
    pub fn cached_levels(&self) -> u32 {
        self.inner.cached_levels
    }

    /// Ring-specific counters.
    pub fn ring_stats(&self) -> RingStats {
        self.inner
            .ring_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes the stash bound at run time.
    pub fn set_stash_bound(&self, bound: usize) {
        self.inner.stash_bound.store(bound, Ordering::Relaxed);
    }

    /// The backend key of bucket `node` in `slot` (0 or 1).
    pub fn node_key(&self, node: u64, slot: u8) -> ObjKey {
        self.inner.node_key(node, slot)
    }

    /// Writes every never-written uncached bucket as a bucket of dummies, so that
    /// every GET finds a full-size object (no lazy-initialisation pattern).
    /// Observed: one PUT per such bucket, in node order.
    pub async fn format(&self) -> Result<()> {
        let inner = &self.inner;
        let mut g = inner.round.lock().await;
        let rs = &mut *g;
        let first = 1u64 << inner.cached_levels;
        let total = inner.lay.geo.node_count();
        let mut node = first;
        while node <= total {
            let end = (node + 256).min(total + 1);
            let todo: Vec<u64> = (node..end)
                .filter(|n| rs.state.node(*n).version == 0)
                .collect();
            let mut items = Vec::with_capacity(todo.len());
            let mut written = Vec::with_capacity(todo.len());
            for n in &todo {
                let (meta, plain) = layout::shuffle_bucket(&inner.lay, &[], &mut rs.rng);
                let nv = rs.state.advance(*n);
                rs.state.set_pos_meta(*n, meta.encode());
                rs.state.pending_put(*n, nv, plain.clone());
                items.push((
                    inner.node_key(*n, nv.slot),
                    inner.seal_bucket(*n, nv.version, &plain)?,
                ));
                written.push((*n, nv.version));
            }
            rs.state.commit()?;
            inner.store.put_many(items).await?;
            for (n, v) in written {
                rs.state.pending_done(n, v);
            }
            node = end;
        }
        rs.state.commit()?;
        Ok(())
    }
}

impl Inner {
    fn node_key(&self, node: u64, slot: u8) -> ObjKey {
        let key = if slot == 0 {
            format!("{}/r/{node}", self.cfg.prefix)
        } else {
            format!("{}/r/{node}.{slot}", self.cfg.prefix)
        };
        ObjKey::new(key).expect("prefix validated")
    }

    fn identity(&self, node: u64, part: usize, version: u64) -> ObjectIdentity {
        ObjectIdentity {
            kind: ObjectKind::RingSlot,
            position: self.lay.seal_position(node, part),
            version,
        }
    }

    /// Seals a bucket's plaintext part by part into its backend object.
    fn seal_bucket(&self, node: u64, version: u64, plain: &Bytes) -> Result<Bytes> {
        let lay = &self.lay;
        let mut out = Vec::with_capacity(lay.object_len());
        let h = self
            .sealer
            .seal(&self.identity(node, 0, version), &lay.header_of(plain))
            .map_err(OramError::Seal)?;
        out.extend_from_slice(&h);
        for i in 0..lay.slots() {
            let s = self
                .sealer
                .seal(&self.identity(node, 1 + i, version), &lay.slot_of(plain, i))
                .map_err(OramError::Seal)?;
            out.extend_from_slice(&s);
        }
        debug_assert_eq!(out.len(), lay.object_len());
        Ok(out.into())
    }

    fn integrity(&self, node: u64, slot: u8, reason: impl Into<String>) -> OramError {
        OramError::Integrity {
            key: self.node_key(node, slot).to_string(),
            reason: reason.into(),
        }
    }

    fn load_meta(&self, state: &dyn TrustedState, node: u64) -> Result<Meta> {
        match state.pos_meta(node) {
            None => Ok(Meta::fresh(self.lay.slots())),
            Some(b) => Meta::decode(b, self.lay.slots())
                .map_err(|e| StateError::Corrupt(format!("bucket {node}: {e}")).into()),
        }
    }

    /// Opens a whole bucket object fetched for `node` at `nv`: its plaintext, or
    /// that of an empty bucket if never written.
    fn open_bucket(&self, node: u64, nv: NodeVersion, obj: Option<Bytes>) -> Result<Bytes> {
        let lay = &self.lay;
        match (nv.version, obj) {
            (0, None) => Ok(layout::shuffle_bucket(lay, &[], &mut rand::thread_rng()).1),
            (0, Some(_)) => {
                Err(self.integrity(node, nv.slot, "object present at a never-written bucket"))
            }
            (v, None) => Err(self.integrity(node, nv.slot, format!("bucket version {v} missing"))),
            (v, Some(sealed)) => {
                if sealed.len() != lay.object_len() {
                    return Err(self.integrity(
                        node,
                        nv.slot,
                        format!(
                            "object has {} bytes, expected {}",
                            sealed.len(),
                            lay.object_len()
                        ),
                    ));
                }
                let key = self.node_key(node, nv.slot);
                let mut plain = Vec::with_capacity(lay.bucket_plain());
                let h = &sealed[..lay.header_sealed()];
                plain.extend_from_slice(
                    &self
                        .sealer
                        .open(&self.identity(node, 0, v), h)
                        .map_err(|e| open_error(key.as_str(), e))?,
                );
                for i in 0..lay.slots() {
                    let r = lay.slot_range(i);
                    let part = &sealed[r.start as usize..r.end as usize];
                    plain.extend_from_slice(
                        &self
                            .sealer
                            .open(&self.identity(node, 1 + i, v), part)
                            .map_err(|e| open_error(key.as_str(), e))?,
                    );
                }
                if plain.len() != lay.bucket_plain() {
                    return Err(self.integrity(node, nv.slot, "malformed bucket"));
                }
                Ok(plain.into())
            }
        }
    }

    /// Checks that a bucket's plaintext agrees with the trusted metadata: the
    /// header and every slot name the block the metadata expects there.
    fn verify_bucket(&self, node: u64, nv: NodeVersion, meta: &Meta, plain: &Bytes) -> Result<()> {
        let lay = &self.lay;
        let header = layout::decode_header(lay, &lay.header_of(plain))
            .map_err(|e| self.integrity(node, nv.slot, e))?;
        for (i, ((hid, _), want)) in header.iter().zip(&meta.ids).enumerate() {
            let (sid, _) = layout::decode_slot(lay, &lay.slot_of(plain, i))
                .map_err(|e| self.integrity(node, nv.slot, e))?;
            if hid != want || sid != *want {
                return Err(self.integrity(
                    node,
                    nv.slot,
                    format!("slot {i} does not hold the block the metadata names"),
                ));
            }
        }
        Ok(())
    }

    /// Drops the journal entries of write-backs that landed.
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
                self.seal_bucket(*n, p.nv.version, &p.plain)?,
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

    /// One round: plan, fetch, answer, evict and reshuffle, start the write-back.
    async fn round(self: &Arc<Self>, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let lay = self.lay;
        let geo = lay.geo;
        let p = lay.params;
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
        let cached = |n: u64| Geometry::level_of(n) < self.cached_levels;

        // 1. Leaves to read, new positions, and this round's eviction paths.
        let mut read_leaves = Vec::with_capacity(ops.len());
        let mut remap: HashMap<u64, u64> = HashMap::new();
        for op in &ops {
            let block = op.block();
            let fresh = rs.rng.gen_range(0..geo.leaves);
            let new_leaf = rs.rng.gen_range(0..geo.leaves);
            let current = remap
                .get(&block)
                .copied()
                .or_else(|| rs.state.position(block));
            read_leaves.push(current.unwrap_or(fresh));
            remap.insert(block, new_leaf);
        }
        let mut counters = Counters::load(rs.state.as_ref())?;
        let a = p.a as u64;
        let k = ops.len() as u64;
        let n_evict = (counters.accesses + k) / a - counters.accesses / a;
        let evict_leaves: Vec<u64> = (0..n_evict)
            .map(|j| lay.evict_leaf(counters.evictions + j))
            .collect();
        let evict_nodes: BTreeSet<u64> = evict_leaves.iter().flat_map(|&l| geo.path(l)).collect();

        // 2. Which buckets are fetched whole, which slots are read.
        let mut reads_through: BTreeMap<u64, usize> = BTreeMap::new();
        for &leaf in &read_leaves {
            for n in geo.path(leaf).filter(|&n| !cached(n)) {
                *reads_through.entry(n).or_default() += 1;
            }
        }
        let mut metas: HashMap<u64, Meta> = HashMap::new();
        for &n in reads_through.keys().chain(evict_nodes.iter()) {
            if !cached(n) && !metas.contains_key(&n) {
                metas.insert(n, self.load_meta(rs.state.as_ref(), n)?);
            }
        }
        let mut whole: BTreeSet<u64> = evict_nodes
            .iter()
            .copied()
            .filter(|&n| !cached(n))
            .collect();
        let mut reshuffled: BTreeSet<u64> = BTreeSet::new();
        for (&n, &r) in &reads_through {
            if !whole.contains(&n) && metas[&n].count as usize + r >= p.s {
                whole.insert(n);
                reshuffled.insert(n);
            }
        }
        let mut slot_reads: Vec<SlotRead> = Vec::new();
        for (op, &leaf) in ops.iter().zip(&read_leaves) {
            let block = op.block();
            for n in geo.path(leaf).filter(|n| !cached(*n) && !whole.contains(n)) {
                let meta = metas.get_mut(&n).expect("loaded");
                let (slot, id) = match meta.find(block) {
                    Some(i) => (i, block),
                    None => (
                        meta.pick_dummy(&mut rs.rng).ok_or_else(|| {
                            StateError::Corrupt(format!("bucket {n} has no unread dummy left"))
                        })?,
                        DUMMY,
                    ),
                };
                meta.mark_read(slot);
                slot_reads.push(SlotRead {
                    node: n,
                    slot,
                    id,
                    evict: false,
                });
            }
        }
        // Buckets to rewrite: one whole GET each, or (as in the paper) Z slots:
        // every unread real block and unread dummies to make up Z. At least Z + 1
        // slots are unread (fewer than S reads so far), so the dummies suffice.
        let fetch_whole: BTreeSet<u64> = match self.cfg.evict_read {
            EvictRead::Whole => whole.clone(),
            EvictRead::Slots => {
                for &n in &whole {
                    let meta = metas.get_mut(&n).expect("loaded");
                    let real = meta.valid_real();
                    for _ in real.len()..p.z {
                        let d = meta.pick_dummy(&mut rs.rng).ok_or_else(|| {
                            StateError::Corrupt(format!("bucket {n} has no unread dummy left"))
                        })?;
                        meta.mark_read(d);
                        slot_reads.push(SlotRead {
                            node: n,
                            slot: d,
                            id: DUMMY,
                            evict: true,
                        });
                    }
                    for (i, b) in real {
                        meta.mark_read(i);
                        slot_reads.push(SlotRead {
                            node: n,
                            slot: i,
                            id: b,
                            evict: true,
                        });
                    }
                }
                // Requests in slot order per bucket, not real blocks last.
                slot_reads.sort_by_key(|r| (r.evict, r.node, r.slot));
                BTreeSet::new()
            }
        };

        // 3. Fetch everything in one round trip. Buckets still being written back
        // are taken from memory (snapshot taken before the GETs go out); the GETs
        // are sent anyway so that the trace does not depend on write-back timing.
        let fetched_nodes: BTreeSet<u64> = fetch_whole
            .iter()
            .copied()
            .chain(slot_reads.iter().map(|r| r.node))
            .collect();
        let mem: HashMap<u64, Pending> = {
            let infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            fetched_nodes
                .iter()
                .filter_map(|n| infl.get(n).map(|pd| (*n, pd.clone())))
                .collect()
        };
        let whole_list: Vec<u64> = fetch_whole.iter().copied().collect();
        let whole_keys: Vec<ObjKey> = whole_list
            .iter()
            .map(|&n| self.node_key(n, rs.state.node(n).slot))
            .collect();
        let range_reqs: Vec<(ObjKey, std::ops::Range<u64>)> = slot_reads
            .iter()
            .map(|r| {
                (
                    self.node_key(r.node, rs.state.node(r.node).slot),
                    lay.slot_range(r.slot),
                )
            })
            .collect();
        let range_futs = range_reqs
            .into_iter()
            .map(|(key, range)| async move { self.store.get_range(&key, range).await });
        let (whole_objs, slot_objs) = futures::future::try_join(
            async {
                if whole_keys.is_empty() {
                    Ok(Vec::new())
                } else {
                    self.store
                        .get_many_bounded(
                            &whole_keys,
                            oram_blockstore::SizeBound::Exact(self.lay.object_len() as u64),
                        )
                        .await
                }
            },
            futures::future::try_join_all(range_futs),
        )
        .await?;

        // 4. Open and check everything before changing any state.
        let mut whole_plain: BTreeMap<u64, Bytes> = BTreeMap::new();
        for (&n, obj) in whole_list.iter().zip(whole_objs) {
            let nv = rs.state.node(n);
            let plain = match mem.get(&n) {
                Some(pd) => pd.plain.clone(),
                None => self.open_bucket(n, nv, obj)?,
            };
            if nv.version > 0 {
                self.verify_bucket(n, nv, &self.load_meta(rs.state.as_ref(), n)?, &plain)?;
            }
            whole_plain.insert(n, plain);
        }
        let mut found: Vec<(u64, Bytes)> = Vec::new();
        let mut evict_found: Vec<(u64, u8, u64, Bytes)> = Vec::new();
        for (r, obj) in slot_reads.iter().zip(slot_objs) {
            let nv = rs.state.node(r.node);
            let slot_plain = match (mem.get(&r.node), nv.version, obj) {
                (Some(pd), _, _) => lay.slot_of(&pd.plain, r.slot),
                (None, 0, None) => continue,
                (None, 0, Some(_)) => {
                    return Err(self.integrity(
                        r.node,
                        nv.slot,
                        "object present at a never-written bucket",
                    ))
                }
                (None, v, None) => {
                    return Err(self.integrity(
                        r.node,
                        nv.slot,
                        format!("bucket version {v} missing"),
                    ))
                }
                (None, v, Some(sealed)) => Bytes::from(
                    self.sealer
                        .open(&self.identity(r.node, 1 + r.slot, v), &sealed)
                        .map_err(|e| open_error(self.node_key(r.node, nv.slot).as_str(), e))?,
                ),
            };
            let (id, data) = layout::decode_slot(&lay, &slot_plain)
                .map_err(|e| self.integrity(r.node, nv.slot, e))?;
            if id != r.id {
                return Err(self.integrity(
                    r.node,
                    nv.slot,
                    format!("slot {} does not hold the block the metadata names", r.slot),
                ));
            }
            if id != DUMMY {
                if r.evict {
                    evict_found.push((r.node, nv.slot, id, data));
                } else {
                    found.push((id, data));
                }
            }
        }
        // Whole buckets: every unread real block; blocks of a reshuffled bucket stay
        // there unless an op of this round wants them.
        let wanted: HashSet<u64> = ops.iter().map(Op::block).collect();
        let mut seen: BTreeSet<u64> = found.iter().map(|(b, _)| *b).collect();
        let mut keep: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
        for (n, slot, b, data) in evict_found {
            self.check_block(rs.state.as_ref(), n, slot, b, &mut seen)?;
            if reshuffled.contains(&n) && !wanted.contains(&b) {
                keep.entry(n).or_default().push((b, data));
            } else {
                found.push((b, data));
            }
        }
        for (&n, plain) in &whole_plain {
            let nv = rs.state.node(n);
            let meta = self.load_meta(rs.state.as_ref(), n)?;
            for (i, b) in meta.valid_real() {
                let (_, data) = layout::decode_slot(&lay, &lay.slot_of(plain, i))
                    .map_err(|e| self.integrity(n, nv.slot, e))?;
                self.check_block(rs.state.as_ref(), n, nv.slot, b, &mut seen)?;
                if reshuffled.contains(&n) && !wanted.contains(&b) {
                    keep.entry(n).or_default().push((b, data));
                } else {
                    found.push((b, data));
                }
            }
        }
        // Cached buckets: wanted blocks on the read paths, everything on eviction paths.
        let mut local_changed: BTreeMap<u64, Bucket> = BTreeMap::new();
        let cached_touched: BTreeSet<u64> = read_leaves
            .iter()
            .flat_map(|&l| geo.path(l))
            .chain(evict_nodes.iter().copied())
            .filter(|&n| cached(n))
            .collect();
        for &n in &cached_touched {
            let bucket = rs.state.local_bucket(n).cloned().unwrap_or_default();
            let (take, stay): (Bucket, Bucket) = bucket
                .into_iter()
                .partition(|(b, _)| evict_nodes.contains(&n) || wanted.contains(b));
            if !take.is_empty() {
                found.extend(take);
                local_changed.insert(n, stay);
            }
        }

        // 5. Apply: stash, positions, metadata, then the ops in order.
        for (n, b) in local_changed {
            rs.state.set_local_bucket(n, b);
        }
        for (b, d) in found {
            rs.state.stash_insert(b, d);
        }
        let zeros = Bytes::from(vec![0u8; lay.block_size]);
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

        // Remapped blocks: every one that exists is in the stash now. A block only
        // ever read and never written gets no position (it still reads as zeros).
        for (&b, &leaf) in &remap {
            if rs.state.stash_get(b).is_some() {
                rs.state.set_position(b, leaf);
            }
        }

        // 6. EvictPath into the eviction paths, reshuffle the buckets read S times.
        let mut stash_list = Vec::with_capacity(rs.state.stash_len());
        for b in rs.state.stash_blocks() {
            let leaf = rs
                .state
                .position(b)
                .ok_or_else(|| StateError::Corrupt(format!("stashed block {b} has no position")))?;
            stash_list.push((b, leaf));
        }
        let mut plan = plan_eviction(&geo, &stash_list, &evict_nodes);
        let mut writes: Vec<BucketWrite> = Vec::with_capacity(whole.len());
        let mut rewrite = |rs: &mut RoundState, n: u64, blocks: Vec<(u64, Bytes)>| {
            let with_leaves: Vec<(u64, u64, Bytes)> = blocks
                .into_iter()
                .map(|(b, d)| (b, rs.state.position(b).unwrap_or(0), d))
                .collect();
            let (meta, plain) = layout::shuffle_bucket(&lay, &with_leaves, &mut rs.rng);
            let nv = rs.state.advance(n);
            rs.state.set_pos_meta(n, meta.encode());
            rs.state.pending_put(n, nv, plain.clone());
            writes.push((n, nv, plain));
        };
        for &n in &evict_nodes {
            let bucket: Vec<(u64, Bytes)> = plan
                .remove(&n)
                .unwrap_or_default()
                .into_iter()
                .map(|b| (b, rs.state.stash_remove(b).expect("planned from the stash")))
                .collect();
            if cached(n) {
                rs.state.set_local_bucket(n, bucket);
            } else {
                rewrite(rs, n, bucket);
            }
        }
        for &n in &reshuffled {
            rewrite(rs, n, keep.remove(&n).unwrap_or_default());
        }
        for (n, meta) in &metas {
            if !whole.contains(n) && reads_through.contains_key(n) {
                rs.state.set_pos_meta(*n, meta.encode());
            }
        }
        counters.accesses += k;
        counters.evictions += n_evict;
        rs.state.set_pos_meta(COUNTERS, counters.encode());
        // Durable before anything is answered or written back.
        rs.state.commit()?;
        let stash_len = rs.state.stash_len();

        // 7. Register the write-back and run it off the critical path.
        let round = rs.next_round;
        rs.next_round += 1;
        let (tx, rx) = watch::channel(WbStatus::Running);
        let mut earlier = Vec::new();
        {
            let mut infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            for (node, nv, plain) in &writes {
                let pd = Pending {
                    round,
                    nv: *nv,
                    plain: plain.clone(),
                    done: rx.clone(),
                };
                if let Some(prev) = infl.insert(*node, pd) {
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
            let mut rst = self.ring_stats.lock().unwrap_or_else(|e| e.into_inner());
            rst.evictions += n_evict;
            rst.early_reshuffles += reshuffled.len() as u64;
            for r in slot_reads.iter().filter(|r| !r.evict) {
                if r.id == DUMMY {
                    rst.dummy_reads_by_slot[r.slot] += 1;
                } else {
                    rst.real_reads_by_slot[r.slot] += 1;
                }
            }
        }
        drop(g);
        if !writes.is_empty() {
            tokio::spawn(self.clone().write_back(round, writes, earlier, tx, permit));
        }

        let bound = self.stash_bound.load(Ordering::Relaxed);
        if stash_len > bound {
            return Err(OramError::StashOverflow {
                size: stash_len,
                bound,
            });
        }
        Ok(results)
    }

    /// Checks that a block found in bucket `node` is in range, on its path and
    /// stored nowhere else seen so far (nor in the stash).
    fn check_block(
        &self,
        state: &dyn TrustedState,
        node: u64,
        slot: u8,
        b: u64,
        seen: &mut BTreeSet<u64>,
    ) -> Result<()> {
        if !seen.insert(b) || state.stash_get(b).is_some() {
            return Err(self.integrity(node, slot, format!("block {b} stored twice")));
        }
        if b >= self.cfg.capacity {
            return Err(self.integrity(node, slot, format!("block {b} beyond capacity")));
        }
        match state.position(b) {
            Some(leaf) if self.lay.geo.on_path(node, leaf) => Ok(()),
            _ => Err(self.integrity(node, slot, format!("block {b} off its path"))),
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
        let lay = self.lay;
        let geo = lay.geo;
        let positions: HashMap<u64, u64> = state.positions().into_iter().collect();
        let nodes: HashMap<u64, NodeVersion> = state.nodes().into_iter().collect();
        let stash: Vec<(u64, Bytes)> = state
            .stash_blocks()
            .into_iter()
            .filter_map(|b| state.stash_get(b).map(|d| (b, d.clone())))
            .collect();
        let first_remote = 1u64 << self.cached_levels;
        let total = geo.node_count();
        let local: Vec<(u64, Bucket)> = (1..first_remote.min(total + 1))
            .filter_map(|n| state.local_bucket(n).map(|b| (n, b.clone())))
            .collect();
        let mut metas: HashMap<u64, std::result::Result<Meta, String>> = HashMap::new();
        for n in first_remote..=total {
            if let Some(b) = state.pos_meta(n) {
                metas.insert(n, Meta::decode(b, lay.slots()));
            }
        }
        let journaled = state.pending().len();
        let mut rep = CheckReport::default();
        let mut found: HashMap<u64, u64> = HashMap::new();
        let mut note = |rep: &mut CheckReport, node: u64, bucket: &[(u64, Bytes)]| {
            for (b, data) in bucket {
                let at = if node == 0 {
                    "the stash".to_string()
                } else {
                    format!("bucket {node}")
                };
                if data.len() != lay.block_size {
                    rep.problem(format!("block {b} in {at} has {} bytes", data.len()));
                }
                if let Some(prev) = found.insert(*b, node) {
                    rep.problem(format!(
                        "block {b} stored twice: in {at} and in {}",
                        if prev == 0 {
                            "the stash".to_string()
                        } else {
                            format!("bucket {prev}")
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
        note(&mut rep, 0, &stash);
        for (node, b) in &local {
            note(&mut rep, *node, b);
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
                    oram_blockstore::SizeBound::Exact(self.lay.object_len() as u64),
                )
                .await?;
            for ((n, nv), obj) in batch.into_iter().zip(got) {
                let meta = match metas.remove(&n) {
                    None => Meta::fresh(lay.slots()),
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        rep.problem(format!("bucket {n}: metadata: {e}"));
                        continue;
                    }
                };
                if meta.count as usize != meta.read.iter().filter(|r| **r).count()
                    || meta.count as usize >= lay.params.s
                {
                    rep.problem(format!(
                        "bucket {n}: read count {} inconsistent (S = {})",
                        meta.count, lay.params.s
                    ));
                }
                if nv.version == 0 && obj.is_none() {
                    if !meta.valid_real().is_empty() {
                        rep.problem(format!("never-written bucket {n} has real blocks"));
                    }
                    continue;
                }
                rep.objects_read += 1;
                let opened = self
                    .open_bucket(n, nv, obj)
                    .and_then(|plain| self.verify_bucket(n, nv, &meta, &plain).map(|()| plain));
                match opened {
                    Ok(plain) => {
                        let mut blocks = Vec::new();
                        for (i, b) in meta.valid_real() {
                            if let Ok((_, d)) = layout::decode_slot(&lay, &lay.slot_of(&plain, i)) {
                                blocks.push((b, d));
                            }
                        }
                        note(&mut rep, n, &blocks);
                    }
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
        for mut rx in earlier {
            let _ = rx.wait_for(|s| *s != WbStatus::Running).await;
        }
        let status = match self.put_buckets(&writes).await {
            Ok(()) => {
                let mut infl = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
                let mut landed = self.landed.lock().unwrap_or_else(|e| e.into_inner());
                for (node, nv, _) in &writes {
                    landed.push((*node, nv.version));
                    if infl.get(node).is_some_and(|pd| pd.round == round) {
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
                self.seal_bucket(*node, nv.version, plain)?,
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
impl Oram for RingOram {
    fn name(&self) -> &'static str {
        "ring"
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
        self.inner.quiesce().await.map(drop)
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
        let prefix = format!("{}/r/", inner.cfg.prefix);
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
