//! A round's course (the engine's module documentation says what a round is):
//! its attempts, the exact repeat of an interrupted round, planning and the
//! intent record, the partitions' staged accesses run at once, and the one
//! commit that settles them.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use oram_engine::{Op, OramError, Result, RoundId, StagedAccess};

use crate::engine::{lock, Counters, Framework, Inner, STEP_COMMIT, STEP_PARTITIONS, STEP_PLAN};
use crate::round::{self, stuck};

impl Inner {
    /// Serves `ops` in rounds of at most `max_batch`.
    pub(crate) async fn access(self: Arc<Self>, mut ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ops.len());
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(self.cfg.max_batch));
            out.extend(self.round(ops).await?);
            ops = rest;
        }
        Ok(out)
    }

    /// One round of `ops`: an interrupted round first (repeated exactly, as
    /// reads), then this one; a transient backend failure repeats both, up to
    /// `round_attempts` times in all. A round of reads is answered once read: its
    /// partitions' writes and its commit go on behind, holding the round lock
    /// (the next round waits for them; if they fail, the round is repeated first
    /// thing by the next one). A round that writes is answered once durable.
    async fn round(self: &Arc<Self>, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let mut g = self.round.clone().lock_owned().await;
        let mut pause = std::time::Duration::from_millis(20);
        let mut attempt = 1;
        let reads_only = !ops.iter().any(Op::mutates);
        loop {
            let result = match g.sticky.take() {
                Some((seq, intent)) => self
                    .repeat_and_settle(&mut g, seq, intent)
                    .await
                    .map(|()| None),
                None => match self.execute(&mut g, ops.clone()).await {
                    Ok((out, landing)) if reads_only => {
                        let inner = self.clone();
                        tokio::spawn(async move {
                            let mut g = g;
                            // A failure leaves the round to be repeated by the next.
                            let _ = inner.settle(&mut g, landing).await;
                            // The engine is let go of before the round lock:
                            // whoever takes the lock next (a flush before the
                            // volume closes) finds no task still holding it.
                            drop(inner);
                            drop(g);
                        });
                        return Ok(out);
                    }
                    Ok((out, landing)) => self.settle(&mut g, landing).await.map(|()| Some(out)),
                    Err(e) => Err(e),
                },
            };
            match result {
                Ok(Some(out)) => return Ok(out),
                Ok(None) => {}
                Err(OramError::Store(e))
                    if attempt < self.cfg.round_attempts && e.is_transient() =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Repeats the interrupted round `seq` exactly (as reads) and commits it;
    /// an error says the round is stuck when it stays to be repeated.
    pub(crate) async fn repeat_and_settle(
        &self,
        fw: &mut Framework,
        seq: u64,
        intent: round::Intent,
    ) -> Result<()> {
        match self.repeat(fw, seq, intent).await {
            Ok(landing) => match self.settle(fw, landing).await {
                Ok(()) => Ok(()),
                Err(e) if fw.sticky.is_some() => Err(stuck(seq, e)),
                Err(e) => Err(e),
            },
            Err(e) => Err(stuck(seq, e)),
        }
    }

    /// Stages an interrupted round's accesses again, exactly, its ops as reads
    /// (their answers go nowhere).
    async fn repeat(&self, fw: &mut Framework, seq: u64, intent: round::Intent) -> Result<Landing> {
        lock(&self.stats).repeated += 1;
        let plan = match intent.replan(&mut fw.map, self.partition_limit()) {
            Ok(plan) => plan,
            Err(e) => {
                fw.map.rollback()?;
                fw.sticky = Some((seq, intent));
                return Err(e);
            }
        };
        let reads = plan.reads();
        let round = RoundId { seq, repeat: true };
        self.run(fw, round, intent, plan, reads)
            .await
            .map(|(_, l)| l)
    }

    /// Plans a fresh round of `ops`, records its intent, stages it.
    async fn execute(&self, fw: &mut Framework, ops: Vec<Op>) -> Result<(Vec<Bytes>, Landing)> {
        let start = std::time::Instant::now();
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
                fw.map.rollback()?;
                return Err(e);
            }
        };
        let intent = plan.intent();
        let seq = fw.seq;
        fw.seq += 1;
        // Durable before any access goes out: a crash repeats the round. Here
        // is enough in one process; partitions on other machines may commit
        // the round before this process is lost, so then the record is also
        // shipped (`Placement::remote`).
        let record = fw.map.stage_intent(seq, Some(intent.encode()));
        let recorded = if self.ship_intents {
            record.commit().await
        } else {
            record.commit_local().await
        };
        self.steps.lap(STEP_PLAN, start);
        if let Err(e) = recorded {
            fw.map.rollback()?;
            return Err(e.into());
        }
        let round = RoundId { seq, repeat: false };
        self.run(fw, round, intent, plan, ops).await
    }

    /// The partitions' staged accesses of `plan`, at once, and the answers (the
    /// map changed in memory, nothing committed). A failure undoes the round in
    /// memory and keeps it to be repeated.
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
        let staged = futures::future::join_all(plan.subs.iter().map(|(&p, sub_ops)| {
            let access = self.subs[p as usize].access_staged_round(round, sub_ops.clone());
            async move {
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
            // finished), and so are the map's evictions — once the writes
            // started early are done, so that none is still under way when
            // the round is repeated.
            for s in &mut parts {
                s.stop_landing().await;
            }
            drop(parts);
            fw.map.rollback()?;
            fw.sticky = Some((seq, intent));
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
                counts,
            },
        ))
    }

    /// Lands every partition's writes and commits the round (dropping its intent
    /// record); a failure undoes it in memory and keeps it to be repeated. Then
    /// the counters, and the eviction cache's bound.
    async fn settle(&self, fw: &mut Framework, landing: Landing) -> Result<()> {
        let Landing {
            parts,
            seq,
            intent,
            counts,
        } = landing;
        // Round numbers only grow, restarts included: a partition served on
        // another machine tells a repeat it committed from a new round by them.
        fw.map.set_next_round(fw.seq.max(seq + 1));
        let start = std::time::Instant::now();
        let committed = StagedAccess::commit_all(parts, fw.map.stage()).await;
        self.steps.lap(STEP_COMMIT, start);
        if let Err(e) = committed {
            fw.map.rollback()?;
            fw.sticky = Some((seq, intent));
            return Err(e);
        }
        fw.map.settle();
        let cache = fw.map.cache_len();
        {
            let mut c = lock(&self.stats);
            c.accesses += counts.accesses;
            c.rounds += counts.rounds;
            c.sub_accesses += counts.sub_accesses;
            c.background += counts.background;
            c.evicted += counts.evicted;
            c.empty_evictions += counts.empty_evictions;
            c.deferred += counts.deferred;
            c.cache_len = cache as u64;
            c.cache_max = c.cache_max.max(cache as u64);
            c.cache_sum += cache as u64;
        }
        if cache > self.cfg.cache_bound {
            return Err(OramError::StashOverflow {
                size: cache,
                bound: self.cfg.cache_bound,
            });
        }
        Ok(())
    }
}

/// A round read and answered whose partitions' writes and commit are still to
/// come ([`Inner::settle`]).
struct Landing {
    parts: Vec<StagedAccess>,
    seq: u64,
    intent: round::Intent,
    counts: Counters,
}
