//! The tree-ORAM core shared by Path and Ring ORAM: geometry and eviction
//! planning ([`Geometry`], [`plan_eviction`]), the write-back pipeline, the intent
//! record, the fsck skeleton, `format`, and [`TreeEngine`], a generic engine over
//! the small [`TreeScheme`] trait.
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
//! 3. **plans** (the scheme, with logged random draws), and commits the **intent
//!    record** (its blocks and draws) before any read goes out;
//! 4. **fetches** everything in one round trip (one `get_many` of whole buckets,
//!    ranged reads concurrently), taking buckets still in flight from memory (the
//!    GETs are sent anyway, so the trace does not depend on write-back timing);
//! 5. **opens and checks** (the scheme): any failure returns an error before any
//!    state changes, and the round stays to be finished (step 2);
//! 6. **applies** (the scheme): answers, positions, eviction; the engine gives
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

mod check;
mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
mod geometry;
mod intent;
mod scheme;
mod serve;
mod writeback;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey, SizeBound, StoreError};
use oram_engine::{
    validate_op, CheckReport, EngineStats, Formatted, Op, Oram, OramError, Quiesced, Result,
    StagedAccess, Stat, StatKind,
};
use oram_seal::Sealer;
use oram_state::{NodeVersion, SlotPolicy, TrustedState};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use tokio::sync::OwnedMutexGuard;

pub use config::TreeConfig;
pub use geometry::{plan_eviction, Geometry};
pub use intent::{Draws, Intent};
pub use scheme::{Applied, ApplyCx, OpenCx, PlanCx, Requests, Sealing, TreeParams, TreeScheme};
pub use serve::{check_stored, draw_leaves, evict_stash, serve_ops, LeafDraws};
use writeback::{BucketIo, BucketWrite, WriteBack};

/// Buckets [`Oram::format`] writes per journaled batch.
const FORMAT_BATCH: u64 = 256;

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

struct Inner<S: TreeScheme> {
    scheme: Arc<S>,
    params: TreeParams,
    sealing: Sealing,
    store: Arc<dyn BlockStore>,
    wb: Arc<WriteBack>,
    /// The round lock: the trusted state and everything drawn from it. Held by one
    /// round from its plan until its commit is durable (a tokio mutex: held across
    /// the backend reads, the backend writes and the commit).
    round: Arc<tokio::sync::Mutex<RoundState>>,
    /// Guards the generic counters (updated once per round, never across I/O).
    stats: Mutex<EngineStats>,
    repeated: AtomicU64,
    stash_bound: AtomicUsize,
}

struct RoundState {
    state: Box<dyn TrustedState>,
    rng: ChaCha20Rng,
    /// A round whose reads went out but that did not complete: finished, as the
    /// same access, before anything new is drawn.
    sticky: Option<Intent>,
}

/// Names, seals and stores buckets for the write-back pipeline.
struct Io<S> {
    scheme: Arc<S>,
    sealing: Sealing,
    store: Arc<dyn BlockStore>,
}

impl<S: TreeScheme> BucketIo for Io<S> {
    fn key(&self, node: u64, slot: u8) -> ObjKey {
        self.sealing.key(node, slot)
    }
    fn seal(&self, node: u64, nv: &NodeVersion, plain: &Bytes) -> Result<Bytes> {
        self.scheme.seal_bucket(&self.sealing, node, nv, plain)
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
        let (scheme, params) = S::new(&cfg)?;
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
        let sealing = Sealing::new(sealer, state.space(), S::KIND, &params.prefix, S::DIR)?;
        let rng = match params.rng_seed {
            Some(seed) => ChaCha20Rng::from_seed(seed),
            None => ChaCha20Rng::from_entropy(),
        };
        let sticky = state.intent().map(|b| Intent::decode(b)).transpose()?;
        let scheme = Arc::new(scheme);
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
                round: Arc::new(tokio::sync::Mutex::new(RoundState { state, rng, sticky })),
                stats: Mutex::new(EngineStats::default()),
                repeated: AtomicU64::new(0),
                stash_bound: AtomicUsize::new(params.stash_bound),
                params,
            }),
        })
    }

    /// The scheme (its own parameters and statistics).
    pub fn scheme(&self) -> &S {
        &self.inner.scheme
    }

    /// The tree's shape.
    pub fn geometry(&self) -> Geometry {
        *self.inner.scheme.geometry()
    }

    /// Levels actually cached locally (the configured number, at most the tree height).
    pub fn cached_levels(&self) -> u32 {
        self.inner.scheme.cached_levels()
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

/// A round applied in memory and not yet durable. It holds the round lock; its
/// [`Tail::land`] writes the round's buckets and [`Tail::finish`] settles the
/// commit (or undoes the round) and releases it.
struct Tail<S: TreeScheme> {
    inner: Arc<Inner<S>>,
    guard: OwnedMutexGuard<RoundState>,
    writes: Vec<BucketWrite>,
    note: S::Note,
    intent: Intent,
    ops: u64,
    stash_len: usize,
}

impl<S: TreeScheme> Tail<S> {
    /// Counts the round's ops as served now (a round of reads, answered before
    /// its commit is durable), so that [`Oram::stats`] agrees with the answers
    /// the caller already has.
    fn count_served(&mut self) {
        lock(&self.inner.stats).accesses += std::mem::take(&mut self.ops);
    }

    /// The stash overflow this round leaves, if any (the round completes anyway).
    fn overflow(&self) -> Option<OramError> {
        let bound = self.inner.stash_bound.load(Ordering::Relaxed);
        (self.stash_len > bound).then_some(OramError::StashOverflow {
            size: self.stash_len,
            bound,
        })
    }

    /// Writes the round's buckets to the backend (before its commit); `Ok` once
    /// every one is durable there. The plaintexts are let go once written.
    fn land(&mut self) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let wb = self.inner.wb.clone();
        let writes = std::mem::take(&mut self.writes);
        async move { wb.land(&writes).await }
    }

    /// Writes the round's buckets, commits, and ends the round; an error leaves
    /// the round to be finished again (see [`Tail::finish`]).
    async fn complete(mut self) -> Result<()> {
        let land = self.land();
        if let Err(e) = land.await {
            self.finish(Err(e.to_string()));
            return Err(e);
        }
        let outcome = self.guard.state.stage().commit().await;
        self.finish(outcome.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        Ok(outcome?)
    }

    /// Ends the round once its commit is settled: durable — count it; not — undo
    /// it in memory and keep it to be finished (its reads, and maybe some of its
    /// writes, went out).
    fn finish(self, outcome: std::result::Result<(), String>) {
        let Tail {
            inner,
            mut guard,
            writes,
            note,
            intent,
            ops,
            stash_len,
        } = self;
        drop(writes);
        match outcome {
            Ok(()) => {
                guard.state.settle();
                inner.scheme.committed(note);
                let mut st = lock(&inner.stats);
                st.accesses += ops;
                st.rounds += 1;
                st.stash_len = stash_len as u64;
                st.stash_max = st.stash_max.max(stash_len as u64);
                st.stash_sum += stash_len as u64;
            }
            Err(_) => {
                guard.state.rollback();
                guard.sticky = Some(intent);
            }
        }
    }
}

impl<S: TreeScheme> Inner<S> {
    /// [`Inner::round`], tried again while the backend interrupts it with a
    /// transient error, up to `round_attempts` times in all (with a short,
    /// doubling pause). Each new attempt first finishes the interrupted round as
    /// the same access, then draws this access's round afresh: the server sees
    /// exactly what a client's retry of the request would show it.
    async fn round_retrying(self: &Arc<Self>, ops: &[Op]) -> Result<(Vec<Bytes>, Tail<S>)> {
        let mut pause = std::time::Duration::from_millis(20);
        let mut attempt = 1;
        loop {
            match self.round(ops.to_vec()).await {
                Err(OramError::Store(e))
                    if attempt < self.params.round_attempts && e.is_transient() =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Runs one round up to (not including) its backend writes and its commit;
    /// an interrupted round is finished first.
    async fn round(self: &Arc<Self>, ops: Vec<Op>) -> Result<(Vec<Bytes>, Tail<S>)> {
        loop {
            let mut g = self.round.clone().lock_owned().await;
            self.wb.retry_failed().await?;
            self.wb.settle(g.state.as_mut());
            let Some(intent) = g.sticky.take() else {
                return self.execute(g, ops, None).await;
            };
            self.finish_interrupted(g, intent).await?;
        }
    }

    /// Finishes an interrupted round as the same access, its ops as reads (its
    /// answers go nowhere), and releases the round lock.
    async fn finish_interrupted(
        self: &Arc<Self>,
        g: OwnedMutexGuard<RoundState>,
        intent: Intent,
    ) -> Result<()> {
        self.repeated.fetch_add(1, Ordering::Relaxed);
        let replay_ops = intent
            .blocks
            .iter()
            .map(|b| b.map_or(Op::Dummy, Op::Read))
            .collect();
        let (_, tail) = self.execute(g, replay_ops, Some(intent)).await?;
        tail.complete().await
    }

    /// Plans (or replans, from `replay`), fetches, opens and applies one round.
    async fn execute(
        self: &Arc<Self>,
        mut g: OwnedMutexGuard<RoundState>,
        ops: Vec<Op>,
        replay: Option<Intent>,
    ) -> Result<(Vec<Bytes>, Tail<S>)> {
        let scheme = &*self.scheme;
        let rs = &mut *g;
        // 1. Plan; a fresh plan's intent is durable before any read goes out, and
        // so is a replayed plan's new attempt number before any write does.
        let (plan, intent) = match replay {
            Some(mut intent) => {
                let mut draws = Draws::replay(intent.draws.clone());
                let planned = {
                    let mut cx = PlanCx {
                        state: rs.state.as_ref(),
                        draws: &mut draws,
                    };
                    scheme.plan(&mut cx, &intent.blocks)
                };
                let plan = match planned {
                    Ok(p) if draws.exhausted() => p,
                    other => {
                        rs.sticky = Some(intent);
                        return Err(other.err().unwrap_or_else(|| {
                            oram_state::StateError::Corrupt(
                                "the intent record does not match the trusted state".into(),
                            )
                            .into()
                        }));
                    }
                };
                // An earlier attempt may have written some of this round's buckets
                // (other contents, same keys): this one writes under new versions.
                intent.attempt += 1;
                rs.state.set_intent(Some(intent.encode()));
                if let Err(e) = rs.state.stage().commit().await {
                    rs.state.rollback();
                    intent.attempt -= 1;
                    rs.sticky = Some(intent);
                    return Err(e.into());
                }
                rs.state.settle();
                (plan, intent)
            }
            None => {
                let blocks: Vec<Option<u64>> = ops.iter().map(Op::block).collect();
                let (plan, draws) = {
                    let mut draws = Draws::fresh(&mut rs.rng);
                    let mut cx = PlanCx {
                        state: rs.state.as_ref(),
                        draws: &mut draws,
                    };
                    (scheme.plan(&mut cx, &blocks)?, draws.into_log())
                };
                let intent = Intent {
                    blocks,
                    draws,
                    attempt: 0,
                };
                rs.state.set_intent(Some(intent.encode()));
                if let Err(e) = rs.state.stage().commit().await {
                    // Nothing was read: the round simply did not happen.
                    rs.state.rollback();
                    return Err(e.into());
                }
                rs.state.settle();
                (plan, intent)
            }
        };

        // 2. Fetch everything in one round trip.
        let req = scheme.requests(&plan);
        let nodes: BTreeSet<u64> = req
            .whole
            .iter()
            .copied()
            .chain(req.parts.iter().map(|(n, _)| *n))
            .collect();
        let in_flight = self.wb.snapshot(nodes);
        let whole_keys: Vec<ObjKey> = req
            .whole
            .iter()
            .map(|&n| self.sealing.key(n, rs.state.node(n).slot))
            .collect();
        let part_reqs: Vec<(ObjKey, std::ops::Range<u64>)> = req
            .parts
            .iter()
            .map(|&(n, p)| {
                let key = self.sealing.key(n, rs.state.node(n).slot);
                (key, scheme.part_range(p))
            })
            .collect();
        let bound = SizeBound::Exact(scheme.object_len());
        let (whole, parts) = match fetch(self.store.as_ref(), &whole_keys, bound, part_reqs).await {
            Ok(got) => got,
            Err(e) => {
                rs.sticky = Some(intent);
                return Err(e);
            }
        };

        // 3. Open and check; nothing has changed yet.
        let cx = OpenCx {
            state: rs.state.as_ref(),
            sealing: &self.sealing,
            whole,
            parts,
            in_flight: &in_flight,
        };
        let opened = match scheme.open(cx, &plan) {
            Ok(o) => o,
            Err(e) => {
                rs.sticky = Some(intent);
                return Err(e);
            }
        };

        // 4. Apply, evict; a new version for every rewritten bucket, in a slot
        // nothing durable refers to, past the versions earlier attempts used.
        let n_ops = ops.len() as u64;
        let cx = ApplyCx {
            state: rs.state.as_mut(),
            rng: &mut rs.rng,
        };
        let applied = match scheme.apply(cx, plan, opened, ops) {
            Ok(a) => a,
            Err(e) => {
                rs.state.rollback();
                rs.sticky = Some(intent);
                return Err(e);
            }
        };
        let mut writes = Vec::with_capacity(applied.writes.len());
        let (epoch, generation) = (rs.state.epoch(), rs.state.generation());
        for (node, plain) in applied.writes {
            let mut nv = rs
                .state
                .node(node)
                .next(epoch, generation, SlotPolicy::BeforeCommit);
            nv.version += intent.attempt;
            rs.state.set_node(node, nv);
            writes.push((node, nv, plain));
        }
        rs.state.set_intent(None);
        let stash_len = rs.state.stash_len();
        Ok((
            applied.answers,
            Tail {
                inner: self.clone(),
                guard: g,
                writes,
                note: applied.note,
                intent,
                ops: n_ops,
                stash_len,
            },
        ))
    }

    /// Waits for the round in progress (its writes and commit), resends the
    /// journal of an earlier version, commits, and returns the round lock. An
    /// interrupted round stays to be finished (its intent record is durable).
    async fn quiesce(&self) -> Result<OwnedMutexGuard<RoundState>> {
        let mut g = self.round.clone().lock_owned().await;
        self.wb.retry_failed().await?;
        self.wb.settle(g.state.as_mut());
        g.state.commit().await?;
        Ok(g)
    }
}

/// One `get_many` of `whole` (each object exactly as large as `bound` says) and
/// the ranged reads, all concurrently: one round trip. Every request goes out even
/// if another fails, so that what the provider sees of a failed round does not
/// depend on which request failed.
async fn fetch(
    store: &dyn BlockStore,
    whole: &[ObjKey],
    bound: SizeBound,
    parts: Vec<(ObjKey, std::ops::Range<u64>)>,
) -> Result<(Vec<Option<Bytes>>, Vec<Option<Bytes>>)> {
    let ranged = parts
        .into_iter()
        .map(|(key, range)| async move { store.get_range(&key, range).await });
    let (w, p) = futures::future::join(
        async {
            if whole.is_empty() {
                Ok(Vec::new())
            } else {
                store.get_many_bounded(whole, bound).await
            }
        },
        futures::future::join_all(ranged),
    )
    .await;
    let w = w?;
    let p = p.into_iter().collect::<std::result::Result<Vec<_>, _>>()?;
    if w.len() != whole.len() {
        return Err(OramError::Store(StoreError::Unavailable(
            "backend answered a batch with the wrong number of objects".into(),
        )));
    }
    Ok((w, p))
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
        self.inner.params.capacity
    }

    fn id_limit(&self) -> u64 {
        self.inner.params.id_limit
    }

    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        for op in &ops {
            validate_op(op, self.id_limit(), self.block_size())?;
        }
        let mut out = Vec::with_capacity(ops.len());
        let mut ops = ops;
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(self.inner.params.max_batch));
            let mutates = ops.iter().any(Op::mutates);
            let (answers, mut tail) = self.inner.round_retrying(&ops).await?;
            let overflow = tail.overflow();
            if mutates {
                tail.complete().await?;
            } else {
                // Reads only: answered now, written and committed in the background
                // (see the crate documentation); the round lock stays held until
                // then, and a failure leaves the round to be finished again.
                tail.count_served();
                tokio::spawn(async move {
                    let _ = tail.complete().await;
                });
            }
            if let Some(e) = overflow {
                return Err(e);
            }
            out.extend(answers);
            ops = rest;
        }
        Ok(out)
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
        let (answers, mut tail) = self.inner.round_retrying(&ops).await?;
        // The buckets are on the backend before the parent's commit makes them
        // current.
        let land = tail.land();
        if let Err(e) = land.await {
            tail.finish(Err(e.to_string()));
            return Err(e);
        }
        let changes = tail.guard.state.stage();
        Ok(StagedAccess::new(answers, changes, move |outcome| {
            tail.finish(outcome)
        }))
    }

    async fn flush(&self) -> Result<()> {
        self.inner.quiesce().await.map(drop)
    }

    async fn quiesce(&self) -> Result<Quiesced> {
        Ok(Quiesced::new(self.inner.quiesce().await?))
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let mut g = self.inner.quiesce().await?;
        let inner = &self.inner;
        check::run(
            inner.scheme.as_ref(),
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

    /// Writes every never-written uncached bucket (empty), in node order, 256 at a
    /// time, each batch journaled and committed before its PUTs. `progress` counts
    /// the uncached buckets gone through (written or skipped).
    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        let inner = &self.inner;
        let mut g = inner.quiesce().await?;
        let rs = &mut *g;
        let geo = *inner.scheme.geometry();
        let total = geo.node_count();
        let first = geo.nodes_above(inner.scheme.cached_levels()) + 1;
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
                    let plain = inner.scheme.empty_bucket(rs.state.as_mut(), n, &mut rs.rng);
                    let nv = rs.state.advance(n);
                    rs.state.pending_put(n, nv, plain.clone());
                    let sealed = inner.scheme.seal_bucket(&inner.sealing, n, &nv, &plain)?;
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
        s.extra.extend(inner.scheme.stats());
        s
    }
}
