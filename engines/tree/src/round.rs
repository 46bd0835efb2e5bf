//! One round of a tree engine: plan, intent record, fetch, open, apply, and the
//! tail (bucket writes and commit) — and reading ahead of a round of reads whose
//! writes are landing.
//!
//! # Reading ahead
//!
//! A round of reads only is answered once applied; its bucket writes and commit
//! then run without the round lock (the round is *landing*), and **one** next
//! round may read ahead of it: it plans on the landing round's state (applied in
//! memory; planning changes nothing), commits its own intent record on its own
//! ([`oram_state::TrustedState::stage_intent`]), sends its reads, and waits for
//! the landing round's commit before it opens and applies anything. A bucket the
//! landing round is writing is taken from that round's plaintexts; its GET is
//! sent all the same and its answer ignored (it may be the old object, the new
//! one, or a partial file on a back-end that overwrites in place), so what the
//! provider sees does not depend on which buckets the two rounds share.
//!
//! Why only behind a round of reads: if the landing round fails, it is finished
//! again from its intent record with its ops as reads, which for a round of
//! reads gives the very same positions, and — its apply step drawing only from
//! the seed in that record ([`crate::RoundRandom`]) — the very same bucket
//! layouts (Ring ORAM's permutations, which say which slot the round ahead reads
//! in a bucket the landing round rewrote); so the round that read ahead,
//! finished again after it from its own record, plans the very same reads. (A
//! round with writes finished as reads could leave a block it created without a
//! position, and the round behind it would read another path the second time.)
//!
//! What it buys: the next round's intent commit and reads overlap the landing
//! round's writes and commit — one round trip instead of two per round of reads
//! on a slow link, and reads that keep the back-end busy while the CPU seals.
//!
//! Nothing else touches the trusted state while a round is landing or reading
//! ahead (`RoundState::landing`, `RoundState::ahead`): a caller that finds either
//! waits for [`Inner::changed`] without holding the round lock.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey, SizeBound, StoreError};
use oram_engine::{Op, OramError, Result};
use oram_state::{SlotPolicy, TrustedState};
use rand::Rng;
use tokio::sync::OwnedMutexGuard;

use crate::steps::{STEP_APPLY, STEP_COMMIT, STEP_FETCH, STEP_PLAN, STEP_WRITE};
use crate::writeback::BucketWrite;
use crate::{
    lock, ApplyCx, Draws, Inner, Intent, OpenCx, PlanCx, RoundRandom, RoundState, TreeScheme,
};

/// A round applied in memory and not yet durable. It holds the round lock; its
/// [`Tail::land`] writes the round's buckets, [`Tail::finish`] settles the commit
/// (or undoes the round) and releases the lock, and [`Tail::release`] does both in
/// the background without the lock (a round of reads, see the module docs).
pub(crate) struct Tail<S: TreeScheme> {
    pub(crate) inner: Arc<Inner<S>>,
    pub(crate) guard: OwnedMutexGuard<RoundState>,
    writes: Vec<BucketWrite>,
    done: Done<S>,
}

/// What settling a round needs once its commit is known.
struct Done<S: TreeScheme> {
    note: S::Note,
    seq: u64,
    intent: Intent,
    ops: u64,
    stash_len: usize,
}

impl<S: TreeScheme> Done<S> {
    /// Durable — count the round; not — undo it in memory and keep it to be
    /// finished (its reads, and maybe some of its writes, went out).
    fn settle(
        self,
        inner: &Inner<S>,
        rs: &mut RoundState,
        outcome: std::result::Result<(), String>,
    ) {
        match outcome {
            Ok(()) => {
                rs.state.settle();
                inner.scheme().committed(self.note);
                let mut st = lock(&inner.stats);
                st.accesses += self.ops;
                st.rounds += 1;
                st.stash_len = self.stash_len as u64;
                st.stash_max = st.stash_max.max(self.stash_len as u64);
                st.stash_sum += self.stash_len as u64;
            }
            Err(_) => {
                rs.state.rollback();
                rs.sticky.insert(self.seq, self.intent);
            }
        }
    }
}

impl<S: TreeScheme> Tail<S> {
    /// Counts the round's ops as served now (a round of reads, answered before
    /// its commit is durable), so that [`oram_engine::Oram::stats`] agrees with
    /// the answers the caller already has.
    pub(crate) fn count_served(&mut self) {
        lock(&self.inner.stats).accesses += std::mem::take(&mut self.done.ops);
    }

    /// The stash overflow this round leaves, if any (the round completes anyway).
    pub(crate) fn overflow(&self) -> Option<OramError> {
        let bound = self.inner.stash_bound.load(Ordering::Relaxed);
        (self.done.stash_len > bound).then_some(OramError::StashOverflow {
            size: self.done.stash_len,
            bound,
        })
    }

    /// Writes the round's buckets to the backend (before its commit); `Ok` once
    /// every one is durable there. The plaintexts are let go once written.
    pub(crate) fn land(
        &mut self,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let wb = self.inner.wb.clone();
        let steps = self.inner.steps.clone();
        let writes = std::mem::take(&mut self.writes);
        async move {
            let t = std::time::Instant::now();
            let out = wb.land(&writes).await;
            steps.lap(STEP_WRITE, t);
            out
        }
    }

    /// Writes the round's buckets, commits, and ends the round; an error leaves
    /// the round to be finished again (see [`Tail::finish`]).
    pub(crate) async fn complete(mut self) -> Result<()> {
        let land = self.land();
        if let Err(e) = land.await {
            self.finish(Err(e.to_string()));
            return Err(e);
        }
        let t = std::time::Instant::now();
        let outcome = self.guard.state.stage().commit().await;
        self.inner.steps.lap(STEP_COMMIT, t);
        self.finish(outcome.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        Ok(outcome?)
    }

    /// Ends the round once its commit is settled (see `Done::settle`) and
    /// releases the round lock.
    pub(crate) fn finish(self, outcome: std::result::Result<(), String>) {
        let Tail {
            inner,
            mut guard,
            done,
            ..
        } = self;
        done.settle(&inner, &mut guard, outcome);
    }

    /// A round of reads, answered: stages its changes, hands the round lock on
    /// with the round *landing* (its buckets' plaintexts published for a round
    /// reading ahead), and writes, commits and settles in the background.
    pub(crate) fn release(self) {
        let Tail {
            inner,
            mut guard,
            writes,
            done,
        } = self;
        let staged = guard.state.stage();
        let plain: HashMap<u64, Bytes> = writes
            .iter()
            .map(|(node, _, p)| (*node, p.clone()))
            .collect();
        guard.landing = Some(Arc::new(plain));
        // Taken before the round lock is let go, so a flush that follows waits
        // for this task. It fails only while a flush holds every permit, after
        // its quiesce: this round came later and the flush does not wait for it.
        let lander = inner.landers.clone().try_acquire_owned();
        drop(guard);
        tokio::spawn(async move {
            let t = std::time::Instant::now();
            let landed = inner.wb.land(&writes).await;
            let t = inner.steps.lap(STEP_WRITE, t);
            let outcome = match landed {
                Ok(()) => {
                    let c = staged.commit().await.map_err(|e| e.to_string());
                    inner.steps.lap(STEP_COMMIT, t);
                    c
                }
                Err(e) => Err(e.to_string()),
            };
            drop(writes);
            let mut g = inner.round.clone().lock_owned().await;
            g.landing = None;
            done.settle(&inner, &mut g, outcome);
            drop(g);
            inner.changed.notify_waiters();
            // Everything of the engine first, the permit last.
            drop(inner);
            drop(lander);
        });
    }
}

/// A round's reads: whole objects and ranged parts, with their nodes.
struct Reads {
    whole: Vec<(u64, ObjKey)>,
    parts: Vec<(u64, ObjKey, Range<u64>)>,
}

impl Reads {
    fn nodes(&self) -> BTreeSet<u64> {
        let whole = self.whole.iter().map(|(n, _)| *n);
        whole.chain(self.parts.iter().map(|(n, _, _)| *n)).collect()
    }
}

impl<S: TreeScheme> Inner<S> {
    /// [`Inner::round`], tried again while the backend interrupts it with a
    /// transient error, up to `round_attempts` times in all (with a short,
    /// doubling pause). Each new attempt first finishes the interrupted rounds as
    /// the same accesses, then draws this access's round afresh: the server sees
    /// exactly what a client's retry of the request would show it. `ahead`: the
    /// round may read ahead of a landing round of reads.
    pub(crate) async fn round_retrying(
        self: &Arc<Self>,
        ops: &[Op],
        ahead: bool,
    ) -> Result<(Vec<Bytes>, Tail<S>)> {
        let mut pause = std::time::Duration::from_millis(20);
        let mut attempt = 1;
        loop {
            match self.round(ops.to_vec(), ahead).await {
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
    /// interrupted rounds are finished first, in order.
    async fn round(self: &Arc<Self>, ops: Vec<Op>, ahead: bool) -> Result<(Vec<Bytes>, Tail<S>)> {
        loop {
            let mut g = self.round.clone().lock_owned().await;
            if g.landing.is_some() && !g.ahead && ahead && g.sticky.is_empty() {
                return self.read_ahead(g, ops).await;
            }
            if g.landing.is_some() || g.ahead {
                self.wait_changed(g).await;
                continue;
            }
            self.wb.retry_failed().await?;
            self.wb.settle(g.state.as_mut());
            let Some((seq, intent)) = g.sticky.pop_first() else {
                return self.execute(g, ops, None).await;
            };
            if !ahead && g.sticky.is_empty() && intent.blocks == planned_blocks(&ops) {
                // A staged access repeated by its parent (a partition framework
                // repeats its interrupted round exactly): finished as these ops,
                // the same access. (An access of a caller is never finished as its
                // ops: whether it names the same blocks must not show.)
                self.repeated.fetch_add(1, Ordering::Relaxed);
                return self.execute(g, ops, Some((seq, intent))).await;
            }
            self.finish_interrupted(g, seq, intent).await?;
        }
    }

    /// Releases the round lock and waits until a landing round settles or a round
    /// reading ahead applies (or anything else that wakes [`Inner::changed`]).
    pub(crate) async fn wait_changed(&self, g: OwnedMutexGuard<RoundState>) {
        let notified = self.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        drop(g);
        notified.await;
    }

    /// The round lock, once no round is landing or reading ahead.
    pub(crate) async fn idle(&self) -> OwnedMutexGuard<RoundState> {
        loop {
            let g = self.round.clone().lock_owned().await;
            if g.landing.is_none() && !g.ahead {
                return g;
            }
            self.wait_changed(g).await;
        }
    }

    /// Finishes an interrupted round as the same access, its ops as reads (its
    /// answers go nowhere), and releases the round lock.
    pub(crate) async fn finish_interrupted(
        self: &Arc<Self>,
        g: OwnedMutexGuard<RoundState>,
        seq: u64,
        intent: Intent,
    ) -> Result<()> {
        self.repeated.fetch_add(1, Ordering::Relaxed);
        let replay_ops = intent
            .blocks
            .iter()
            .map(|b| b.map_or(Op::Dummy, Op::Read))
            .collect();
        let (_, tail) = self.execute(g, replay_ops, Some((seq, intent))).await?;
        tail.complete().await
    }

    /// A fresh plan of `ops` on the state as it is (which it does not change),
    /// with its intent record (not yet stored).
    fn plan_fresh(&self, rs: &mut RoundState, ops: &[Op]) -> Result<(S::Plan, Intent)> {
        let blocks = planned_blocks(ops);
        check_inserts(rs.state.as_ref(), ops, &blocks)?;
        let mut draws = Draws::fresh(&mut rs.rng);
        let mut cx = PlanCx {
            state: rs.state.as_ref(),
            draws: &mut draws,
        };
        let plan = self.scheme().plan(&mut cx, &blocks)?;
        let intent = Intent {
            blocks,
            draws: draws.into_log(),
            attempt: 0,
            seed: rs.rng.gen(),
        };
        Ok((plan, intent))
    }

    /// The keys and ranges `plan` reads, at the versions the state gives.
    fn reads(&self, state: &dyn TrustedState, plan: &S::Plan) -> Reads {
        let scheme = self.scheme();
        let req = scheme.requests(plan);
        let key = |n: u64| self.sealing.key(n, state.node(n).slot);
        Reads {
            whole: req.whole.iter().map(|&n| (n, key(n))).collect(),
            parts: req
                .parts
                .iter()
                .map(|&(n, p)| (n, key(n), scheme.part_range(p)))
                .collect(),
        }
    }

    /// Plans (or replans, from `replay`), fetches, opens and applies one round.
    async fn execute(
        self: &Arc<Self>,
        mut g: OwnedMutexGuard<RoundState>,
        ops: Vec<Op>,
        replay: Option<(u64, Intent)>,
    ) -> Result<(Vec<Bytes>, Tail<S>)> {
        let scheme = self.scheme();
        let start = std::time::Instant::now();
        let rs = &mut *g;
        // 1. Plan; a fresh plan's intent is durable before any read goes out, and
        // so is a replayed plan's new attempt number before any write does.
        let fresh = replay.is_none();
        let (plan, seq, intent) = match replay {
            Some((seq, mut intent)) => {
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
                        rs.sticky.insert(seq, intent);
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
                rs.state.set_intent(seq, Some(intent.encode()));
                if let Err(e) = rs.state.stage().commit_local().await {
                    rs.state.rollback();
                    intent.attempt -= 1;
                    rs.sticky.insert(seq, intent);
                    return Err(e.into());
                }
                rs.state.settle();
                (plan, seq, intent)
            }
            None => {
                let (plan, intent) = self.plan_fresh(rs, &ops)?;
                let seq = rs.take_seq();
                rs.state.set_intent(seq, Some(intent.encode()));
                if let Err(e) = rs.state.stage().commit_local().await {
                    // Nothing was read: the round simply did not happen.
                    rs.state.rollback();
                    return Err(e.into());
                }
                rs.state.settle();
                (plan, seq, intent)
            }
        };

        // 2. Fetch everything in one round trip; a fresh round also deletes a
        // batch of superseded objects meanwhile (see `collect`: no round is
        // landing, and the deletes are done before this round writes anything).
        let t = self.steps.lap(STEP_PLAN, start);
        let reads = self.reads(rs.state.as_ref(), &plan);
        let in_flight = self.wb.snapshot(reads.nodes());
        let (doomed, keys) = if fresh {
            rs.collector.take(
                rs.state.as_ref(),
                |n, s| self.sealing.key(n, s),
                self.params.collect_batch,
            )
        } else {
            Default::default()
        };
        let deletes = async {
            if keys.is_empty() {
                Ok(())
            } else {
                self.store.delete_many(&keys).await
            }
        };
        let (fetched, deleted) = futures::future::join(
            fetch(self.store.as_ref(), &reads, self.bound(), &in_flight),
            deletes,
        )
        .await;
        match deleted {
            Ok(()) => {
                self.collected
                    .fetch_add(keys.len() as u64, Ordering::Relaxed);
            }
            // Tried again by a later round (the error shows in the backend's
            // error counters); the round itself does not depend on it.
            Err(_) => rs.collector.requeue(doomed),
        }
        self.steps.lap(STEP_FETCH, t);
        self.apply(g, ops, plan, seq, intent, fetched, &in_flight)
    }

    /// Reads ahead of the landing round (see the module docs): plans on its
    /// state, commits the intent record on its own, sends the reads, then waits
    /// for the landing round to settle before opening and applying.
    async fn read_ahead(
        self: &Arc<Self>,
        mut g: OwnedMutexGuard<RoundState>,
        ops: Vec<Op>,
    ) -> Result<(Vec<Bytes>, Tail<S>)> {
        let start = std::time::Instant::now();
        let rs = &mut *g;
        let landing = rs.landing.clone().expect("a round is landing");
        let (plan, intent) = self.plan_fresh(rs, &ops)?;
        let seq = rs.take_seq();
        let record = rs.state.stage_intent(seq, Some(intent.encode()));
        rs.ahead = true;
        let reads = self.reads(rs.state.as_ref(), &plan);
        let in_flight: HashMap<u64, Bytes> = reads
            .nodes()
            .into_iter()
            .filter_map(|n| landing.get(&n).map(|p| (n, p.clone())))
            .collect();
        drop(landing);
        drop(g);
        if let Err(e) = record.commit_local().await {
            // Nothing was read: the round did not happen.
            let mut g = self.round.clone().lock_owned().await;
            drop(g.state.stage_intent(seq, None));
            g.ahead = false;
            drop(g);
            self.changed.notify_waiters();
            return Err(e.into());
        }
        let t = self.steps.lap(STEP_PLAN, start);
        let fetched = fetch(self.store.as_ref(), &reads, self.bound(), &in_flight).await;
        self.steps.lap(STEP_FETCH, t);
        let mut g = loop {
            let g = self.round.clone().lock_owned().await;
            if g.landing.is_none() {
                break g;
            }
            self.wait_changed(g).await;
        };
        g.ahead = false;
        self.changed.notify_waiters();
        if !g.sticky.is_empty() {
            // The landing round failed: it is finished again first, then this one.
            g.sticky.insert(seq, intent);
            return Err(OramError::Store(StoreError::Unavailable(
                "the round before this one failed; both are finished again".into(),
            )));
        }
        self.apply(g, ops, plan, seq, intent, fetched, &in_flight)
    }

    /// Every whole object is exactly this large.
    fn bound(&self) -> SizeBound {
        SizeBound::Exact(self.scheme().object_len())
    }

    /// Opens, checks and applies a fetched round (`fetched`: what [`fetch`]
    /// returned; a failed fetch leaves the round to be finished again); the
    /// result holds the round lock until the round's commit is settled.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        self: &Arc<Self>,
        mut g: OwnedMutexGuard<RoundState>,
        ops: Vec<Op>,
        plan: S::Plan,
        seq: u64,
        intent: Intent,
        fetched: Result<Fetched>,
        in_flight: &HashMap<u64, Bytes>,
    ) -> Result<(Vec<Bytes>, Tail<S>)> {
        let scheme = self.scheme();
        let start = std::time::Instant::now();
        let rs = &mut *g;
        let (whole, parts) = match fetched {
            Ok(got) => got,
            Err(e) => {
                rs.sticky.insert(seq, intent);
                return Err(e);
            }
        };
        // 3. Open and check; nothing has changed yet.
        let cx = OpenCx {
            state: rs.state.as_ref(),
            sealing: &self.sealing,
            whole,
            parts,
            in_flight,
        };
        let opened = match scheme.open(cx, &plan) {
            Ok(o) => o,
            Err(e) => {
                rs.sticky.insert(seq, intent);
                return Err(e);
            }
        };

        // 4. Apply, evict; a new version for every rewritten bucket, in a slot
        // nothing durable refers to, past the versions earlier attempts used.
        let n_ops = ops.len() as u64;
        let cx = ApplyCx {
            state: rs.state.as_mut(),
            random: RoundRandom::new(intent.seed),
        };
        let applied = match scheme.apply(cx, plan, opened, ops) {
            Ok(a) => a,
            Err(e) => {
                rs.state.rollback();
                rs.sticky.insert(seq, intent);
                return Err(e);
            }
        };
        let mut writes = Vec::with_capacity(applied.writes.len());
        let (epoch, generation) = (rs.state.epoch(), rs.state.generation());
        if self.superseded_epoch.swap(epoch, Ordering::Relaxed) != epoch {
            self.superseded.store(0, Ordering::Relaxed);
        }
        for (node, plain) in applied.writes {
            let old = rs.state.node(node);
            if old.version > 0 && old.epoch != epoch {
                self.superseded.fetch_add(2, Ordering::Relaxed);
            }
            let mut nv = old.next(epoch, generation, SlotPolicy::BeforeCommit);
            nv.version += intent.attempt;
            // Recorded once an epoch: at its first write with a slot to
            // supersede (also a second write of a new position).
            if nv.version > 1 && (old.epoch != epoch || old.version < 2) {
                rs.collector.wrote(node, epoch);
            }
            rs.state.set_node(node, nv);
            writes.push((node, nv, plain));
        }
        rs.state.set_intent(seq, None);
        let stash_len = rs.state.stash_len();
        self.steps.lap(STEP_APPLY, start);
        Ok((
            applied.answers,
            Tail {
                inner: self.clone(),
                guard: g,
                writes,
                done: Done {
                    note: applied.note,
                    seq,
                    intent,
                    ops: n_ops,
                    stash_len,
                },
            },
        ))
    }

    /// Waits for the rounds in progress (writes and commits), resends the journal
    /// of an earlier version, commits, and returns the round lock. An interrupted
    /// round stays to be finished (its intent record is durable).
    pub(crate) async fn quiesce(&self) -> Result<OwnedMutexGuard<RoundState>> {
        let mut g = self.idle().await;
        self.wb.retry_failed().await?;
        self.wb.settle(g.state.as_mut());
        g.state.commit().await?;
        Ok(g)
    }
}

/// One `get_many` of the whole objects (each exactly as large as `bound` says)
/// and the ranged reads, all concurrently: one round trip. Every request goes
/// out even if another fails, so that what the provider sees of a failed round
/// does not depend on which request failed. The requests of nodes in `shadow`
/// (buckets whose contents are already in memory) go out too — in a `get_many`
/// of their own — and their answers, or errors, are ignored (`None`).
/// What a round fetched: the whole objects and the parts, in request order
/// (`None`: absent, or a shadowed request).
type Fetched = (Vec<Option<Bytes>>, Vec<Option<Bytes>>);

async fn fetch(
    store: &dyn BlockStore,
    reads: &Reads,
    bound: SizeBound,
    shadow: &HashMap<u64, Bytes>,
) -> Result<Fetched> {
    let (shadowed, live): (Vec<_>, Vec<_>) = reads
        .whole
        .iter()
        .enumerate()
        .partition(|(_, (n, _))| shadow.contains_key(n));
    let many = |keys: Vec<ObjKey>| async move {
        if keys.is_empty() {
            Ok(Vec::new())
        } else {
            store.get_many_bounded(&keys, bound).await
        }
    };
    let live_keys = live.iter().map(|(_, (_, k))| k.clone()).collect();
    let shadow_keys = shadowed.iter().map(|(_, (_, k))| k.clone()).collect();
    let ranged = reads.parts.iter().map(|(n, key, range)| async move {
        let got = store.get_range(key, range.clone()).await;
        (shadow.contains_key(n), got)
    });
    let (w, _, p) = futures::future::join3(
        many(live_keys),
        many(shadow_keys),
        futures::future::join_all(ranged),
    )
    .await;
    let w = w?;
    if w.len() != live.len() {
        return Err(OramError::Store(StoreError::Unavailable(
            "backend answered a batch with the wrong number of objects".into(),
        )));
    }
    let mut whole = vec![None; reads.whole.len()];
    for ((i, _), obj) in live.into_iter().zip(w) {
        whole[i] = obj;
    }
    let mut parts = Vec::with_capacity(p.len());
    for (shadowed, got) in p {
        parts.push(if shadowed { None } else { got? });
    }
    Ok((whole, parts))
}

/// Refuses an [`Op::Insert`] of a block the state places somewhere unless an
/// access of the round (`planned`) names it too: no path of the round would
/// read its old copy, which would stay stored beside the new one.
fn check_inserts(state: &dyn TrustedState, ops: &[Op], planned: &[Option<u64>]) -> Result<()> {
    for op in ops {
        if let Op::Insert(b, _) = op {
            if state.position(*b).is_some() && !planned.contains(&Some(*b)) {
                return Err(OramError::Unsupported(
                    "insert of a block the engine holds (write it instead)",
                ));
            }
        }
    }
    Ok(())
}

/// The blocks of the ops a round plans an access for (inserts are no access of
/// their own: no path is read for them); `None` for a dummy.
fn planned_blocks(ops: &[Op]) -> Vec<Option<u64>> {
    ops.iter().filter(|o| o.accesses()).map(Op::block).collect()
}
