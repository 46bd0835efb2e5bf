//! A round's course (the engine's module documentation says what a round is):
//! its attempts, the exact repeat of interrupted rounds, planning and the
//! intent record, the partitions' staged accesses run at once, and the one
//! commit that settles them — under way while the next round reads.
//!
//! **Two rounds in flight.** A round holds the framework (the map, the
//! random generator) while it plans, records its intent, stages its
//! partitions' accesses and applies them to the map; its changes to the map
//! then become a layer of their own ([`crate::PartitionMap::stage_layer`]),
//! and its writes and commit go on in a task of their own ([`InFlight`])
//! while the next round plans and reads. The next round:
//! * accesses a partition the round in flight also accesses only once that
//!   round committed, and never if it failed (the partition's engine is
//!   still busy with it, and a failed round is repeated first);
//! * waits for the round in flight to commit before its own commit starts
//!   and before it answers (so nothing it read from the earlier round's
//!   writes is answered unless they are durable), and fails with it: both
//!   are undone in memory and repeated, in order, before anything else.
//!
//! So a round's requests are still a function of its draws alone, and when
//! they are sent is a function of the partition sets of the round before (a
//! uniform draw the server sees anyway) and of when that round's requests
//! completed (the server's own scheduling): never of which blocks were asked
//! (SECURITY.md, "Rounds in flight").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use oram_engine::{Admit, Op, OramError, Result, RoundId, StagedAccess, StepClock};
use tokio::sync::{oneshot, watch};

use crate::counters::Counters;
use crate::engine::{lock, Framework, Inner, STEP_COMMIT, STEP_PARTITIONS, STEP_PLAN};
use crate::round::{self, stuck};

/// A round to repeat exactly, as reads, before any new one.
pub(crate) struct Sticky {
    pub(crate) seq: u64,
    pub(crate) intent: round::Intent,
    /// Planned after a round that is repeated before it (as reads, so that a
    /// block the earlier round created is stored nowhere when this one is
    /// repeated): an insert of such a block becomes an empty eviction.
    pub(crate) lenient: bool,
}

/// A round whose writes and commit are under way.
pub(crate) struct InFlight {
    seq: u64,
    intent: round::Intent,
    /// The partitions it accessed.
    partitions: BTreeSet<u32>,
    /// `Some(true)` once committed, `Some(false)` if its commit failed.
    done: watch::Receiver<Option<bool>>,
}

/// Whether the round `done` follows committed (waiting for it).
async fn committed(done: &mut watch::Receiver<Option<bool>>) -> bool {
    match done.wait_for(Option::is_some).await {
        Ok(v) => *v == Some(true),
        // The task went away without a word: its runtime is shutting down.
        Err(_) => false,
    }
}

/// The error of a round that failed because the round in flight before it did.
fn earlier_failed() -> OramError {
    OramError::unavailable("the round in flight before this one failed; both are repeated")
}

/// What one attempt of a round came to.
enum Attempt {
    /// A round of reads, answered (its commit under way).
    Answered(Vec<Bytes>),
    /// A round that writes, answered once its commit is durable.
    Landing(Vec<Bytes>, oneshot::Receiver<Result<()>>),
}

impl Inner {
    /// Serves `ops` in rounds of at most `max_batch`; `admitted` once the
    /// last round has its place in the order and has let the framework go
    /// (the next round may begin).
    pub(crate) async fn access(
        self: Arc<Self>,
        mut ops: Vec<Op>,
        mut admitted: Admit,
    ) -> Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ops.len());
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(self.cfg.max_batch));
            let admit = match rest.is_empty() {
                true => std::mem::replace(&mut admitted, Admit::none()),
                false => Admit::none(),
            };
            out.extend(self.round(ops, admit).await?);
            ops = rest;
        }
        Ok(out)
    }

    /// One round of `ops`: interrupted rounds first (repeated exactly, as
    /// reads), then this one; a transient backend failure repeats them, up to
    /// `round_attempts` times in all, and a partition unavailable (moving
    /// between members) for up to [`Inner::ride_out`] since the first
    /// attempt. A round of reads is answered once read
    /// and once the round before it committed; a round that writes once its
    /// own commit is durable.
    async fn round(self: &Arc<Self>, ops: Vec<Op>, admit: Admit) -> Result<Vec<Bytes>> {
        let mut admit = Some(admit);
        let mut pause = std::time::Duration::from_millis(20);
        let mut attempt = 1;
        let ride_until = std::time::Instant::now() + self.ride_out;
        loop {
            let failed = {
                let mut g = self.round.clone().lock_owned().await;
                let attempted = self.attempt(&mut g, &ops).await;
                // Admitted once the framework is free for the next round: a
                // caller sharing calls gathers that round's requests now,
                // with those that arrived while this one read.
                drop(g);
                if let Some(a) = admit.take() {
                    a.admit();
                }
                match attempted {
                    Ok(Attempt::Answered(out)) => return Ok(out),
                    Ok(Attempt::Landing(out, answered)) => match answered.await {
                        Ok(Ok(())) => return Ok(out),
                        Ok(Err(e)) => e,
                        Err(_) => OramError::unavailable("the engine's runtime is shutting down"),
                    },
                    Err(e) => e,
                }
            };
            match failed {
                OramError::Store(e) if attempt < self.cfg.round_attempts && e.is_transient() => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                    attempt += 1;
                }
                e if e.is_unavailable() && std::time::Instant::now() < ride_until => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(500));
                }
                e => return Err(e),
            }
        }
    }

    /// One attempt: the interrupted rounds repeated, then `ops` planned,
    /// staged and launched.
    async fn attempt(&self, fw: &mut Framework, ops: &[Op]) -> Result<Attempt> {
        let reads_only = !ops.iter().any(Op::mutates);
        // A round in flight already known to have failed is repeated now;
        // one still under way is not waited for.
        if fw
            .landing
            .as_ref()
            .is_some_and(|l| *l.done.borrow() == Some(false))
        {
            self.reap(fw).await?;
        }
        if !fw.sticky.is_empty() {
            self.repeat_all(fw).await?;
        }
        let (out, landing) = self.execute(fw, ops.to_vec()).await?;
        let answered = self.launch(fw, landing).await?;
        Ok(match reads_only {
            true => Attempt::Answered(out),
            false => Attempt::Landing(out, answered),
        })
    }

    /// The round in flight settled, then every interrupted round repeated and
    /// committed, in order (as the next round does first).
    pub(crate) async fn repeat_all(&self, fw: &mut Framework) -> Result<()> {
        self.reap(fw).await?;
        while let Some(s) = fw.sticky.pop_front() {
            self.repeat_and_settle(fw, s).await?;
        }
        Ok(())
    }

    /// Waits for the round in flight, if any, and makes its outcome the map's:
    /// its layer of changes settled if it committed; if not, every change
    /// undone (the next round's too) and the round kept to be repeated first.
    /// Whether it committed (`true` without one).
    pub(crate) async fn reap(&self, fw: &mut Framework) -> Result<bool> {
        let Some(mut l) = fw.landing.take() else {
            return Ok(true);
        };
        if committed(&mut l.done).await {
            fw.map.settle_oldest();
            return Ok(true);
        }
        fw.map.rollback()?;
        fw.sticky.push_back(Sticky {
            seq: l.seq,
            intent: l.intent,
            lenient: false,
        });
        Ok(false)
    }

    /// A round that failed after its intent record: its partitions' accesses
    /// already dropped; the round in flight before it settled, the map's
    /// changes undone and the round kept to be repeated after any before it.
    async fn undo(&self, fw: &mut Framework, seq: u64, intent: round::Intent) -> Result<()> {
        self.reap(fw).await?;
        fw.map.rollback()?;
        let lenient = !fw.sticky.is_empty();
        fw.sticky.push_back(Sticky {
            seq,
            intent,
            lenient,
        });
        Ok(())
    }

    /// Repeats the interrupted round `s` exactly (as reads) and commits it
    /// (no round in flight); an error says the round is stuck when it stays
    /// to be repeated.
    async fn repeat_and_settle(&self, fw: &mut Framework, s: Sticky) -> Result<()> {
        lock(&self.stats).repeated += 1;
        let seq = s.seq;
        let plan = match s
            .intent
            .replan(&mut fw.map, self.partition_limit(), s.lenient)
        {
            Ok(plan) => plan,
            Err(e) => {
                fw.map.rollback()?;
                fw.sticky.push_front(s);
                return Err(stuck(seq, e));
            }
        };
        let reads = plan.reads();
        let round = RoundId { seq, repeat: true };
        let landing = match self.run(fw, round, s.intent.clone(), plan, reads).await {
            Ok((_, landing)) => landing,
            Err(e) => {
                fw.map.rollback()?;
                fw.sticky.push_front(s);
                return Err(stuck(seq, e));
            }
        };
        let (changes, cache) = self.seal(fw, landing.seq);
        let Landing { parts, counts, .. } = landing;
        let (committed, result) = land(self.tally(), parts, changes, counts, cache).await;
        if committed {
            fw.map.settle_oldest();
        } else {
            fw.map.rollback()?;
            fw.sticky.push_front(s);
        }
        match result {
            Err(e) if !committed => Err(stuck(seq, e)),
            r => r,
        }
    }

    /// Plans a fresh round of `ops`, records its intent, stages it.
    async fn execute(&self, fw: &mut Framework, ops: Vec<Op>) -> Result<(Vec<Bytes>, Landing)> {
        let start = std::time::Instant::now();
        let overlapped = fw
            .landing
            .as_ref()
            .is_some_and(|l| l.done.borrow().is_none());
        let background = self.cfg.eviction_rate - 1.0;
        let plan = match round::plan(
            &mut fw.map,
            &mut fw.rng,
            &ops,
            background,
            self.partition_limit(),
        ) {
            Ok(plan) => plan,
            Err(e) => {
                // Nothing went out: the round fails alone, and the next is
                // planned from the map as it was.
                self.reap(fw).await?;
                fw.map.rollback()?;
                return Err(e);
            }
        };
        let intent = plan.intent();
        let seq = fw.seq;
        fw.seq += 1;
        // Durable before any access goes out: a crash repeats the round (and
        // the one in flight before it, whose record is still there unless its
        // commit landed). Here is enough in one process; partitions on other
        // machines may commit the round before this process is lost, so then
        // the record is also shipped (`Placement::remote`).
        let record = fw.map.stage_intent(seq, Some(intent.encode()));
        let recorded = if self.ship_intents {
            record.commit().await
        } else {
            record.commit_local().await
        };
        self.steps.lap(STEP_PLAN, start);
        if let Err(e) = recorded {
            self.reap(fw).await?;
            fw.map.rollback()?;
            return Err(e.into());
        }
        let round = RoundId { seq, repeat: false };
        match self.run(fw, round, intent.clone(), plan, ops).await {
            Ok((out, mut landing)) => {
                landing.counts.overlapped = u64::from(overlapped);
                Ok((out, landing))
            }
            Err(e) => {
                self.undo(fw, seq, intent).await?;
                Err(e)
            }
        }
    }

    /// The partitions' staged accesses of `plan`, at once, and the answers (the
    /// map changed in memory, nothing committed). A partition the round in
    /// flight accesses too is accessed once that round committed (never if it
    /// failed). On failure every partition's access is dropped (its writes
    /// started early done first); the caller undoes the map.
    async fn run(
        &self,
        fw: &mut Framework,
        round: RoundId,
        intent: round::Intent,
        plan: round::Plan,
        ops: Vec<Op>,
    ) -> Result<(Vec<Bytes>, Landing)> {
        let seq = round.seq;
        let start = std::time::Instant::now();
        // In one process, each partition's writes start as soon as its access
        // is staged, beside the other partitions' reads
        // (`StagedAccess::start_landing`). A partition on another machine
        // commits when it lands (decisions/011): landing it before every
        // partition of the round is staged would let a failure elsewhere
        // find it committed, and the repeat would show the server less.
        let early = !self.ship_intents;
        let before = fw.landing.as_ref().map(|l| (&l.partitions, &l.done));
        let staged = futures::future::join_all(plan.subs.iter().map(|(&p, sub_ops)| {
            let wait = before
                .filter(|(parts, _)| parts.contains(&p))
                .map(|(_, done)| done.clone());
            async move {
                if let Some(mut done) = wait {
                    if !committed(&mut done).await {
                        return Err(earlier_failed());
                    }
                }
                let access = self.subs[p as usize].access_staged_round(round, sub_ops.clone());
                let mut staged = access.await?;
                if early {
                    staged.start_landing();
                }
                Ok::<_, OramError>(staged)
            }
        }))
        .await;
        self.steps.lap(STEP_PARTITIONS, start);
        let mut parts = Vec::with_capacity(staged.len());
        let mut failed = None;
        for s in staged {
            match s {
                Ok(s) => parts.push(s),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            // Every partition's access is undone (and kept by its engine to be
            // finished) once the writes started early are done, so that none
            // is still under way when the round is repeated.
            for s in &mut parts {
                s.stop_landing().await;
            }
            return Err(e);
        }
        let answers: BTreeMap<u32, Vec<Bytes>> = plan
            .subs
            .keys()
            .zip(&parts)
            .map(|(&p, s)| (p, s.answers().to_vec()))
            .collect();
        let counts = Counters {
            accesses: ops.len() as u64,
            rounds: 1,
            sub_accesses: plan.accesses(),
            background: plan.background,
            evicted: plan.evicted,
            empty_evictions: plan.empty_evictions,
            deferred: plan.deferred,
            ..Counters::default()
        };
        let out = round::finish(&mut fw.map, &plan, ops, &answers, self.cfg.block_size);
        fw.map.clear_intent(seq);
        Ok((
            out,
            Landing {
                parts,
                seq,
                intent,
                partitions: plan.subs.keys().copied().collect(),
                counts,
            },
        ))
    }

    /// Round `seq`'s changes to the map, staged as a layer of their own, and
    /// the eviction cache's size after it.
    fn seal(&self, fw: &mut Framework, seq: u64) -> (oram_state::Staged, usize) {
        // Round numbers only grow, restarts included: a partition served on
        // another machine tells a repeat it committed from a new round by them.
        fw.map.set_next_round(fw.seq.max(seq + 1));
        let cache = fw.map.cache_len();
        (fw.map.stage_layer(), cache)
    }

    /// Seals a staged round, waits for the round in flight before it (whose
    /// commit must come first, and without which this round's answers are not
    /// valid), then starts its writes and commit on their own task: the round
    /// in flight. The receiver gets the commit's outcome. If the round before
    /// failed, this one fails too and is kept to be repeated after it.
    async fn launch(
        &self,
        fw: &mut Framework,
        landing: Landing,
    ) -> Result<oneshot::Receiver<Result<()>>> {
        let Landing {
            mut parts,
            seq,
            intent,
            partitions,
            counts,
        } = landing;
        let (changes, cache) = self.seal(fw, seq);
        if !self.reap(fw).await? {
            // The reap undid every layer of the map, this round's too.
            for s in &mut parts {
                s.stop_landing().await;
            }
            drop(parts);
            drop(changes);
            fw.sticky.push_back(Sticky {
                seq,
                intent,
                lenient: true,
            });
            return Err(earlier_failed());
        }
        let (done_tx, done) = watch::channel(None);
        let (answer, answered) = oneshot::channel();
        let tally = self.tally();
        tokio::spawn(async move {
            let (committed, result) = land(tally, parts, changes, counts, cache).await;
            let _ = done_tx.send(Some(committed));
            let _ = answer.send(result);
        });
        fw.landing = Some(InFlight {
            seq,
            intent,
            partitions,
            done,
        });
        Ok(answered)
    }

    /// What a round's commit counts into.
    fn tally(&self) -> Tally {
        Tally {
            stats: self.stats.clone(),
            steps: self.steps.clone(),
            cache_bound: self.cfg.cache_bound,
        }
    }
}

/// Where a round's commit counts, apart from the engine (a round in flight's
/// task holds no reference to it).
struct Tally {
    stats: Arc<Mutex<Counters>>,
    steps: Arc<StepClock>,
    cache_bound: usize,
}

/// Lands every partition's writes and commits the round's changes (the
/// partitions' and the map's layer `changes`); then the counters, and the
/// eviction cache's bound (`cache`: its size after the round). Whether it
/// committed, and the outcome for its caller (a cache over its bound is an
/// error of a committed round).
async fn land(
    tally: Tally,
    parts: Vec<StagedAccess>,
    changes: oram_state::Staged,
    counts: Counters,
    cache: usize,
) -> (bool, Result<()>) {
    let start = std::time::Instant::now();
    let committed = StagedAccess::commit_all(parts, changes).await;
    tally.steps.lap(STEP_COMMIT, start);
    if let Err(e) = committed {
        return (false, Err(e));
    }
    {
        let mut c = lock(&tally.stats);
        c.accesses += counts.accesses;
        c.rounds += counts.rounds;
        c.sub_accesses += counts.sub_accesses;
        c.background += counts.background;
        c.evicted += counts.evicted;
        c.empty_evictions += counts.empty_evictions;
        c.deferred += counts.deferred;
        c.overlapped += counts.overlapped;
        c.cache_len = cache as u64;
        c.cache_max = c.cache_max.max(cache as u64);
        c.cache_sum += cache as u64;
    }
    if cache > tally.cache_bound {
        return (
            true,
            Err(OramError::StashOverflow {
                size: cache,
                bound: tally.cache_bound,
            }),
        );
    }
    (true, Ok(()))
}

/// A round read and answered whose partitions' writes and commit are still to
/// come.
pub(crate) struct Landing {
    parts: Vec<StagedAccess>,
    seq: u64,
    intent: round::Intent,
    partitions: BTreeSet<u32>,
    counts: Counters,
}
