//! The tree-ORAM core shared by Path and Ring ORAM: geometry and eviction
//! planning ([`Geometry`], [`plan_eviction`]), the write-back pipeline, the intent
//! record, the fsck skeleton, `format`, online growth, and [`TreeEngine`], a
//! generic engine over the small [`TreeScheme`] trait.
//!
//! # A round
//!
//! One call of [`Oram::access`] is split into rounds of at most `max_batch` ops.
//! Under the round lock, a round:
//!
//! 1. resends failed write-backs and drops the journal entries of landed ones;
//! 2. **finishes an interrupted round first**: if an earlier round's reads went
//!    out but it did not complete (a backend error, a tampered object, a failed
//!    commit — or a crash, found as an intent record at start), that round is
//!    planned again from its intent record — the same leaves, the same slots —
//!    and completed with its ops turned into reads, before anything new is drawn;
//! 3. **plans** (the scheme, with logged random draws), draws the round's seed
//!    (the apply step's randomness, [`RoundRandom`]), and commits the **intent
//!    record** (its blocks, draws and seed) before any read goes out;
//! 4. **fetches** everything in one round trip (one `get_many` of whole buckets,
//!    ranged reads concurrently), taking buckets still in flight from memory (the
//!    GETs are sent anyway, so the trace does not depend on write-back timing);
//! 5. **opens and checks** (the scheme): any failure returns an error before any
//!    state changes, and the round stays to be finished (step 2);
//! 6. **applies** (the scheme): answers, positions, eviction — every random
//!    choice from the round's seed, so each attempt of a round lays out its
//!    buckets alike (Ring ORAM's permutations); the engine gives
//!    each rewritten bucket a new version in a slot that neither the durable
//!    state nor the last checkpoint refers to, and clears the intent;
//! 7. **writes the rewritten buckets** to those slots (see `writeback`) and, once
//!    every one is durable on the backend, **commits**; then releases the round
//!    lock.
//!
//! No bucket plaintext is journaled: until the commit, the durable state still
//! refers to the previous objects, which nothing overwrote, and a crash or a
//! failed write leaves the intent record, from which the same round is finished
//! again — under versions of its own (the intent's attempt counter), so that an
//! object an interrupted attempt left behind never opens as current. Every
//! rewritten byte is written once, to the backend, instead of twice (journal and
//! backend).
//!
//! A round of reads only is **answered as soon as step 6 is done**, before its
//! writes and commit: its answers come from state that was durable before its
//! intent record (which was), and if the commit never lands, the intent record
//! makes the next round (or start) repeat the same access (same leaves and
//! slots) and complete it — so answering early reveals nothing and loses
//! nothing. A round with a write or a take is answered once its commit is
//! durable.
//!
//! While a round of reads writes its buckets and commits (it is *landing*,
//! without the round lock), **the next round reads ahead**: it plans on the
//! landing round's state, commits its own intent record (rounds are numbered;
//! each has its own record), sends its reads — buckets the landing round is
//! writing are taken from memory, their GETs sent anyway — and opens and applies
//! once the landing round has committed. If that round fails, both are finished
//! again in order from their records — the landing round with the same seed, so
//! the same bucket layouts the round ahead planned on, and the round ahead then
//! with the very same requests. See `round` for why only a round of reads is
//! read ahead of.
//!
//! # Costs, locks and maintenance
//!
//! Writing the buckets before the commit puts a round's writes on its own
//! critical path (the next round waits for them unless it reads ahead), and a
//! position may have three backend objects: the live one, the previous one and
//! the last checkpoint's ([`oram_state::SlotPolicy::BeforeCommit`]). The intent
//! record carries an attempt counter, committed before a round is finished
//! again, which raises the versions that attempt writes. A second intent record
//! (a round reading ahead) fits the checkpoint's allowance for everything but the
//! engine's tables.
//!
//! Locks: the round lock (a tokio mutex over the trusted state and the random
//! generator) is taken first; a caller that finds a round landing or reading
//! ahead waits for the engine's notification without it. The write-back
//! module's and the statistics' std mutexes are held for in-memory work only,
//! never across an await or I/O. No fsync runs on the engine's side: a commit
//! hands its changes to the state database's committer thread and awaits a
//! future. Every access runs its rounds on a task of its own
//! ([`oram_engine::detached`]), so a caller that goes away never leaves a round
//! half done.
//!
//! Around the rounds: [`Oram::flush`] waits for the rounds in progress (a landing
//! round and one reading ahead included) and resends a journal an earlier version
//! left; [`Oram::quiesce`] also commits and keeps the round lock for a
//! checkpoint; [`Oram::check`] (`check`) reads every uncached bucket, 256 at a
//! time, and verifies that every block is stored exactly once — on its path, in a
//! local bucket or in the stash — and every object opens at its version (the
//! scheme checks its own format); [`Oram::sweep`] deletes the objects the state
//! does not refer to, holding the round lock; [`Oram::format`] writes every
//! never-written uncached bucket.
//!
//! **Growth** ([`Oram::grow`], module `grow`): levels added below the leaves,
//! online. Phase 1 ([`TreeEngine::grow_prepare`]) records the growth as
//! pending in the trusted state and writes every bucket of the new levels,
//! empty, in node order, 256 per batch, under the round lock one batch at a
//! time (rounds run between the batches, on the old tree); phase 2
//! ([`TreeEngine::grow_switch`]) extends every position to a random leaf below
//! it and records the new shape in one commit, then swaps the scheme. A crash
//! leaves the old size (the growth pending: [`TreeEngine::growth_pending`],
//! resumed by growing again) or the new one; an engine is always opened with
//! the capacity its volume was created with, and takes the grown shape from
//! its trusted state.
//!
//! The stash bound is checked after every round: above it the round still
//! completes (nothing is lost) but the access fails with
//! [`OramError::StashOverflow`], and [`TreeEngine::set_stash_bound`] lets an
//! operator raise it. [`Oram::stats`] counts accesses, rounds, the stash (now,
//! maximum, mean), the rounds writing their buckets and the write retries; its
//! `extra` statistics are `rounds_repeated_total` (rounds finished again after a
//! failure or a crash) and the scheme's own.

mod check;
mod collect;
mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
mod geometry;
mod grow;
mod intent;
mod round;
mod scheme;
mod serve;
mod steps;
mod writeback;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey};
use oram_engine::{
    detached, validate_op, CheckReport, EngineStats, Formatted, Grown, Op, Oram, OramError,
    Quiesced, Result, StagedAccess, Stat, StatKind, StepClock,
};
use oram_seal::Sealer;
use oram_state::{NodeVersion, TrustedState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

pub use config::{
    check_key_shards, record_key_shards, recorded_key_shards, TreeConfig, DEFAULT_KEY_SHARDS,
};
pub use geometry::{plan_eviction, Geometry};
pub use grow::grown_room;
pub use intent::{Draws, Intent, RoundRandom};
pub use scheme::{
    Applied, ApplyCx, OpenCx, PlanCx, Requests, Sealing, TreeParams, TreeScheme, MAX_KEY_SHARDS,
};
pub use serve::{check_stored, draw_leaves, evict_stash, serve_ops, LeafDraws};
use writeback::{BucketIo, WriteBack};

/// Buckets [`Oram::format`] writes per journaled batch.
const FORMAT_BATCH: u64 = 256;

/// Permits of [`Inner::landers`]: far more than rounds that can be landing.
const LANDERS: u32 = 1 << 16;

/// A tree ORAM engine running scheme `S`. Cheap to clone (shared state).
pub struct TreeEngine<S: TreeScheme> {
    inner: Arc<Inner<S>>,
}

impl<S: TreeScheme> Clone for TreeEngine<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

/// The scheme in effect: replaced, whole, when the tree grows (see `grow`).
/// The lock guards only the pointer (held to clone it or swap it, never across
/// an await); the scheme is swapped while the round lock is held and no round
/// is landing or reading ahead, so a round sees one scheme from its plan to its
/// commit.
type SchemeCell<S> = Arc<std::sync::RwLock<Arc<S>>>;

struct Inner<S: TreeScheme> {
    scheme: SchemeCell<S>,
    /// The capacity and the id limit in effect (the configured ones, or those
    /// of the last growth).
    capacity: AtomicU64,
    id_limit: AtomicU64,
    params: TreeParams,
    sealing: Sealing,
    store: Arc<dyn BlockStore>,
    wb: Arc<WriteBack>,
    /// The round lock: the trusted state and everything drawn from it. Held by one
    /// round from its plan until its commit is durable (a tokio mutex: held across
    /// the backend reads, the backend writes and the commit) — except while a
    /// round of reads is landing and one round reads ahead of it (see `round`).
    round: Arc<tokio::sync::Mutex<RoundState>>,
    /// Wakes callers waiting for a landing round to settle or a round reading
    /// ahead to apply (`RoundState::landing`, `RoundState::ahead`).
    changed: tokio::sync::Notify,
    /// One permit held by each background task that lands a round (`round`),
    /// released only after the task has let go of everything it holds of the
    /// engine; the engine's `flush` takes them all, so once it returns no task
    /// keeps the trusted state (its database) open past the engine's drop.
    landers: Arc<tokio::sync::Semaphore>,
    /// Guards the generic counters (updated once per round, never across I/O).
    stats: Mutex<EngineStats>,
    /// Wall time per step of the rounds (`steps::ROUND_STEPS`).
    steps: Arc<StepClock>,
    repeated: AtomicU64,
    /// Superseded objects deleted (`collect`).
    collected: AtomicU64,
    /// Objects superseded since epoch `superseded_epoch` began, at most: two
    /// for each position written in it that was written before (the
    /// checkpoint's object, and one earlier version of this epoch). Counted
    /// by the rounds under the round lock; read without it.
    superseded: AtomicU64,
    /// The epoch `superseded` counts in.
    superseded_epoch: AtomicU64,
    stash_bound: AtomicUsize,
}

struct RoundState {
    state: Box<dyn TrustedState>,
    rng: ChaCha20Rng,
    /// Rounds whose reads went out but that did not complete, by sequence
    /// number: finished, in this order and as the same accesses, before anything
    /// new is drawn.
    sticky: BTreeMap<u64, Intent>,
    /// The sequence number of the next round (the key of its intent record).
    next_seq: u64,
    /// A round of reads writing its buckets and committing without the round lock:
    /// the plaintexts of those buckets, by node, for a round reading ahead. Until
    /// it settles (and clears this) nothing but one round reading ahead runs.
    landing: Option<Arc<HashMap<u64, Bytes>>>,
    /// A round has read ahead of `landing` and not applied yet: nothing else runs.
    ahead: bool,
    /// Positions whose superseded objects are still to be deleted (`collect`).
    collector: collect::Collector,
}

impl RoundState {
    /// The next round's sequence number.
    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }
}

/// Names, seals and stores buckets for the write-back pipeline.
struct Io<S> {
    scheme: SchemeCell<S>,
    sealing: Sealing,
    store: Arc<dyn BlockStore>,
}

impl<S: TreeScheme> BucketIo for Io<S> {
    fn key(&self, node: u64, slot: u8) -> ObjKey {
        self.sealing.key(node, slot)
    }
    fn seal(&self, node: u64, nv: &NodeVersion, plain: &Bytes) -> Result<Bytes> {
        let scheme = self
            .scheme
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        scheme.seal_bucket(&self.sealing, node, nv, plain)
    }
    fn store(&self) -> &dyn BlockStore {
        self.store.as_ref()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: TreeScheme> TreeEngine<S> {
    /// Creates an engine over `store`, sealing with `sealer` and keeping its trusted
    /// state in `state` (which may already hold the state of an existing tree).
    ///
    /// Write-backs journaled in `state` but maybe never landed (a crash of an
    /// earlier version, or `format`) are queued to be re-sent, and a round
    /// interrupted by a crash (its intent record) is finished first thing in the
    /// next access.
    pub fn new(
        cfg: S::Config,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Result<Self> {
        let (mut scheme, params) = S::new(&cfg)?;
        if params.capacity == 0 || params.block_size == 0 || params.id_limit < params.capacity {
            return Err(OramError::Config(
                "capacity and block size must be positive and the id limit at least the capacity"
                    .into(),
            ));
        }
        if params.max_batch == 0
            || params.max_inflight_writebacks == 0
            || params.writeback_attempts == 0
            || params.round_attempts == 0
        {
            return Err(OramError::Config(
                "max_batch, max_inflight_writebacks, writeback_attempts and round_attempts must \
                 be positive"
                    .into(),
            ));
        }
        if scheme.geometry().leaf_level > 40 {
            return Err(OramError::Config("tree deeper than 40 levels".into()));
        }
        // A grown tree: the shape of its last growth, not the configured one.
        let growth = grow::Growth::open(state.as_ref(), &params)?;
        let (capacity, id_limit) = match growth.done {
            Some((levels, capacity)) => {
                let geo = grow::deeper(scheme.geometry(), levels)?;
                let id_limit = grow::grown_id_limit(&params, capacity);
                scheme = scheme.grown(geo, id_limit)?;
                (capacity, id_limit)
            }
            None => (params.capacity, params.id_limit),
        };
        let sealing = Sealing::new(
            sealer,
            state.space(),
            S::KIND,
            &params.prefix,
            S::DIR,
            params.key_shards,
        )?;
        let mut rng = match params.rng_seed {
            Some(seed) => ChaCha20Rng::from_seed(seed),
            None => ChaCha20Rng::from_entropy(),
        };
        let sticky = state
            .intents()
            .into_iter()
            .map(|(seq, b)| Ok((seq, Intent::decode(&b, || rng.gen())?)))
            .collect::<Result<BTreeMap<u64, Intent>>>()?;
        let next_seq = sticky.keys().next_back().map_or(1, |s| s + 1);
        let scheme: SchemeCell<S> = Arc::new(std::sync::RwLock::new(Arc::new(scheme)));
        let store: Arc<dyn BlockStore> = store;
        let io = Arc::new(Io {
            scheme: scheme.clone(),
            sealing: sealing.clone(),
            store: store.clone(),
        });
        let wb = WriteBack::from_journal(io, state.pending(), params.writeback_attempts);
        Ok(Self {
            inner: Arc::new(Inner {
                scheme,
                sealing,
                store,
                wb: Arc::new(wb),
                round: Arc::new(tokio::sync::Mutex::new(RoundState {
                    state,
                    rng,
                    sticky,
                    next_seq,
                    landing: None,
                    ahead: false,
                    collector: collect::Collector::default(),
                })),
                changed: tokio::sync::Notify::new(),
                landers: Arc::new(tokio::sync::Semaphore::new(LANDERS as usize)),
                stats: Mutex::new(EngineStats::default()),
                steps: Arc::new(StepClock::new(steps::ROUND_STEPS)),
                repeated: AtomicU64::new(0),
                collected: AtomicU64::new(0),
                superseded: AtomicU64::new(0),
                superseded_epoch: AtomicU64::new(0),
                stash_bound: AtomicUsize::new(params.stash_bound),
                capacity: AtomicU64::new(capacity),
                id_limit: AtomicU64::new(id_limit),
                params,
            }),
        })
    }

    /// The scheme in effect (its own parameters and statistics); a growth
    /// replaces it.
    pub fn scheme(&self) -> Arc<S> {
        self.inner.scheme()
    }

    /// The tree's shape now.
    pub fn geometry(&self) -> Geometry {
        *self.inner.scheme().geometry()
    }

    /// Levels actually cached locally (the configured number, at most the
    /// height of the tree as created).
    pub fn cached_levels(&self) -> u32 {
        self.inner.scheme().cached_levels()
    }

    /// Changes the stash bound at run time: after a [`OramError::StashOverflow`] an
    /// operator can raise it so that accesses drain the stash again.
    pub fn set_stash_bound(&self, bound: usize) {
        self.inner.stash_bound.store(bound, Ordering::Relaxed);
    }

    /// The backend key of bucket `node` in `slot`.
    pub fn node_key(&self, node: u64, slot: u8) -> ObjKey {
        self.inner.sealing.key(node, slot)
    }
}

impl<S: TreeScheme> Inner<S> {
    /// The scheme in effect.
    fn scheme(&self) -> Arc<S> {
        self.scheme
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The rounds of [`Oram::access`] (ops validated).
    async fn access(self: &Arc<Self>, mut ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ops.len());
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(self.params.max_batch));
            let mutates = ops.iter().any(Op::mutates);
            let (answers, mut tail) = self.round_retrying(&ops, true).await?;
            let overflow = tail.overflow();
            if mutates {
                tail.complete().await?;
            } else {
                // Reads only: answered now, written and committed in the background
                // (see the crate documentation) while the next round may read
                // ahead; a failure leaves the round to be finished again.
                tail.count_served();
                tail.release();
            }
            if let Some(e) = overflow {
                return Err(e);
            }
            out.extend(answers);
            ops = rest;
        }
        Ok(out)
    }

    /// The round of [`Oram::access_staged`] (ops validated), answered once read
    /// and applied: its buckets land when the parent commits
    /// ([`StagedAccess::commit_all`] writes them before the commit that makes them
    /// current).
    async fn access_staged(self: &Arc<Self>, ops: Vec<Op>) -> Result<StagedAccess> {
        let (answers, mut tail) = self.round_retrying(&ops, false).await?;
        let land = tail.land();
        let changes = tail.guard.state.stage();
        Ok(StagedAccess::landing(
            answers,
            changes,
            land,
            move |outcome| tail.finish(outcome),
        ))
    }
}

#[async_trait]
impl<S: TreeScheme> Oram for TreeEngine<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn block_size(&self) -> usize {
        self.inner.params.block_size
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity.load(Ordering::Acquire)
    }

    fn id_limit(&self) -> u64 {
        self.inner.id_limit.load(Ordering::Acquire)
    }

    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        for op in &ops {
            validate_op(op, self.id_limit(), self.block_size())?;
        }
        let inner = self.inner.clone();
        detached(async move { inner.access(ops).await }).await
    }

    async fn access_staged(&self, ops: Vec<Op>) -> Result<StagedAccess> {
        if ops.len() > self.inner.params.max_batch {
            return Err(OramError::Config(format!(
                "a staged access of {} ops is more than one round ({})",
                ops.len(),
                self.inner.params.max_batch
            )));
        }
        for op in &ops {
            validate_op(op, self.id_limit(), self.block_size())?;
        }
        let inner = self.inner.clone();
        detached(async move { inner.access_staged(ops).await }).await
    }

    async fn flush(&self) -> Result<()> {
        self.inner.quiesce().await.map(drop)?;
        // The landed round's task may still be letting go of the engine.
        let all = self.inner.landers.acquire_many(LANDERS).await;
        drop(all);
        Ok(())
    }

    async fn quiesce(&self) -> Result<Quiesced> {
        Ok(Quiesced::new(self.inner.quiesce().await?))
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let mut g = self.inner.quiesce().await?;
        let inner = &self.inner;
        check::run(
            inner.scheme().as_ref(),
            &inner.sealing,
            inner.store.as_ref(),
            g.state.as_mut(),
            progress,
        )
        .await
    }

    async fn sweep(&self) -> Result<u64> {
        let inner = &self.inner;
        let g = inner.quiesce().await?;
        let live: BTreeSet<ObjKey> = g
            .state
            .nodes()
            .into_iter()
            .filter(|(_, nv)| nv.version > 0)
            .map(|(n, nv)| inner.sealing.key(n, nv.slot))
            .collect();
        // The round lock stays held: no access may write while objects are deleted.
        let n =
            oram_blockstore::delete_unreferenced(inner.store.as_ref(), inner.sealing.base(), &live)
                .await?;
        drop(g);
        Ok(n)
    }

    /// Deletes every superseded object still queued (see the module `collect`),
    /// holding accesses off meanwhile: for a clean stop, after its checkpoint.
    async fn collect(&self) -> Result<u64> {
        let inner = &self.inner;
        let mut g = inner.quiesce().await?;
        let rs = &mut *g;
        let mut total = 0;
        loop {
            let (_, keys) = rs.collector.take(
                rs.state.as_ref(),
                |n, s| inner.sealing.key(n, s),
                inner.params.collect_batch,
            );
            if keys.is_empty() {
                break;
            }
            inner.store.delete_many(&keys).await?;
            total += keys.len() as u64;
            inner
                .collected
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
        }
        Ok(total)
    }

    /// Two per position written since the last checkpoint began that had been
    /// written before it, against the uncached positions.
    fn superseded(&self) -> Option<oram_engine::Superseded> {
        let scheme = self.inner.scheme();
        let geo = scheme.geometry();
        let positions = geo.node_count() - geo.nodes_above(scheme.cached_levels());
        Some(oram_engine::Superseded {
            objects: self.inner.superseded.load(Ordering::Relaxed),
            positions,
            epoch: self.inner.superseded_epoch.load(Ordering::Relaxed),
            object_bytes: scheme.object_len(),
        })
    }

    /// Prepares the growth ([`TreeEngine::grow_prepare`]), then switches to it
    /// ([`TreeEngine::grow_switch`]); see the module `grow`.
    async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        let out = TreeEngine::grow_prepare(self, capacity, progress).await?;
        self.grow_switch().await?;
        Ok(out)
    }

    fn grows(&self) -> bool {
        true
    }

    /// [`TreeEngine::grow_prepare`].
    async fn grow_prepare(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        TreeEngine::grow_prepare(self, capacity, progress).await
    }

    /// Writes every never-written uncached bucket (empty), in node order, 256 at a
    /// time, each batch journaled and committed before its PUTs. `progress` counts
    /// the uncached buckets gone through (written or skipped).
    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        let inner = &self.inner;
        let mut g = inner.quiesce().await?;
        let rs = &mut *g;
        let scheme = inner.scheme();
        let geo = *scheme.geometry();
        let total = geo.node_count();
        let first = geo.nodes_above(scheme.cached_levels()) + 1;
        let mut done = Formatted {
            positions: (total + 1).saturating_sub(first),
            written: 0,
        };
        progress(0, done.positions);
        let mut node = first;
        while node <= total {
            let end = (node + FORMAT_BATCH).min(total + 1);
            let todo: Vec<u64> = (node..end)
                .filter(|n| rs.state.node(*n).version == 0)
                .collect();
            if !todo.is_empty() {
                let mut items = Vec::with_capacity(todo.len());
                let mut written = Vec::with_capacity(todo.len());
                for n in todo {
                    let plain = scheme.empty_bucket(rs.state.as_mut(), n, &mut rs.rng);
                    let nv = rs.state.advance(n);
                    rs.state.pending_put(n, nv, plain.clone());
                    let sealed = scheme.seal_bucket(&inner.sealing, n, &nv, &plain)?;
                    items.push((inner.sealing.key(n, nv.slot), sealed));
                    written.push((n, nv.version));
                }
                // Journaled first: a crash before the PUTs land is repaired by resending.
                rs.state.commit().await?;
                inner.store.put_many_redoable(items).await?;
                done.written += written.len() as u64;
                for (n, v) in written {
                    rs.state.pending_done(n, v);
                }
            }
            node = end;
            progress(node - first, done.positions);
        }
        rs.state.commit().await?;
        Ok(done)
    }

    fn stats(&self) -> EngineStats {
        let inner = &self.inner;
        let mut s = lock(&inner.stats).clone();
        s.pending_writebacks = inner.wb.pending_rounds();
        s.writeback_retries = inner.wb.retries();
        s.extra.push(Stat {
            name: "rounds_repeated_total",
            help: "Rounds repeated as the same access after a failure or crash interrupted them.",
            kind: StatKind::Counter,
            value: inner.repeated.load(Ordering::Relaxed),
        });
        s.extra.push(Stat {
            name: "superseded_deleted_total",
            help: "Superseded bucket objects deleted once a checkpoint no longer needed them \
                   (keys sent in DELETEs, some maybe already absent).",
            kind: StatKind::Counter,
            value: inner.collected.load(Ordering::Relaxed),
        });
        s.extra.extend(inner.scheme().stats());
        s.extra.extend(inner.steps.stats());
        s
    }
}
