//! Concurrent callers sharing an engine's rounds ([`Combined`]).
//!
//! An engine serves one call of [`Oram::access`] in rounds of its own, one
//! after the other, so `c` callers of one op each wait for `c` rounds — each
//! with its round trips to the backend, its intent record and its commit. A
//! [`Combined`] engine puts every call in a queue of **waiting requests**
//! (split into pieces of at most `max_batch` ops, each joining the queue once
//! the one before it is answered); whoever comes first of the waiting callers
//! takes the requests at the head of the queue — as many whole requests as fit
//! in `max_batch` ops — and makes them **one call** of the engine, their ops one
//! after the other in queue order (so a later request sees an earlier one's
//! writes, as if they had come one after the other). The next call waits until
//! the engine has admitted that one ([`Oram::access_admitting`]): until it
//! returns, for an engine that serves one call at a time; once its round has
//! read and the next round could begin, for the partition framework, whose
//! rounds overlap. Requests are taken when the call is made, not while it
//! waits for the one before: a call carries every request that arrived while
//! the call before it read.
//!
//! **What the storage server observes** is what the engine shows for calls of
//! the sizes it gets. What combining adds is that a call's size is how many
//! ops were waiting when it began: a matter of when requests arrived and how
//! long the calls before took — never of which blocks they name. Every
//! request of a call is answered when the call returns (once read for a call
//! of reads only, for the engines that answer those early; once durable
//! otherwise), so a read is never answered earlier or later for naming a block
//! a write of its call names.
//!
//! **Failures.** A call of one request answers it with the engine's error. A
//! call of several that fails puts them back at the head of the queue, each
//! marked to be served alone: each then gets the outcome of a call of its own,
//! so one request's refused op never fails another's, and nothing is applied
//! twice (a failed call applied nothing). A call that ends in
//! [`OramError::StashOverflow`] was applied: each of its requests gets that
//! error, as a lone caller would.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::StoreError;
use tokio::sync::oneshot;

use crate::{
    detached, validate_op, CheckReport, EngineStats, Formatted, Grown, Op, Oram, OramError,
    Quiesced, Result, RoundId, StagedAccess, Stat, StatKind,
};

/// An engine whose concurrent callers share calls (see the module
/// documentation). Every other method is the engine's own.
pub struct Combined {
    shared: Arc<Shared>,
}

struct Shared {
    engine: Arc<dyn Oram>,
    max_batch: usize,
    /// Guards the requests waiting for a call, in arrival order; held only to
    /// queue or take requests, never across an await.
    waiting: Mutex<VecDeque<Waiting>>,
    /// Held by the caller making a call of the engine for the requests it took
    /// until the engine admitted the call ([`Oram::access_admitting`]: once its
    /// round has read for an engine with rounds in flight, at the call's end
    /// otherwise), and
    /// by [`Oram::quiesce`]: calls are made one after the other, in the order
    /// they took their requests.
    driver: Arc<tokio::sync::Mutex<()>>,
    /// Counts the times a failed call put its requests back in the queue: a
    /// caller whose request is in a call under way waits for its answer or
    /// for this, then drives the queue again (nobody else may be left to).
    requeued: tokio::sync::watch::Sender<u64>,
    /// Requests answered (statistics).
    served: AtomicU64,
    /// Calls of the engine made (statistics).
    calls: AtomicU64,
}

/// Called once an engine has put a call in its order
/// ([`Oram::access_admitting`]); dropping it uncalled calls it.
pub struct Admit(Option<Box<dyn FnOnce() + Send>>);

impl Admit {
    /// Calls `f` when admitted (or dropped).
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(f)))
    }

    /// Nothing to call.
    pub fn none() -> Self {
        Self(None)
    }

    /// The call is in the engine's order.
    pub fn admit(mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl Drop for Admit {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl std::fmt::Debug for Admit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admit")
            .field("pending", &self.0.is_some())
            .finish()
    }
}

/// A caller's ops waiting for a call.
struct Waiting {
    ops: Vec<Op>,
    /// To be served in a call of its own: a call it shared failed.
    solo: bool,
    answer: oneshot::Sender<Result<Vec<Bytes>>>,
}

impl Combined {
    /// `engine`, its callers sharing calls of at most `max_batch` ops (the
    /// engine's own round size: a larger call would be split into rounds).
    pub fn new(engine: Arc<dyn Oram>, max_batch: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine,
                max_batch: max_batch.max(1),
                waiting: Mutex::new(VecDeque::new()),
                driver: Arc::new(tokio::sync::Mutex::new(())),
                requeued: tokio::sync::watch::Sender::new(0),
                served: AtomicU64::new(0),
                calls: AtomicU64::new(0),
            }),
        }
    }

    /// The engine served.
    pub fn engine(&self) -> &Arc<dyn Oram> {
        &self.shared.engine
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Serves `ops` in pieces of at most `max_batch`, each in a call it may
    /// share with other callers'.
    async fn access(self: Arc<Self>, mut ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ops.len());
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(self.max_batch));
            out.extend(self.request(ops).await?);
            ops = rest;
        }
        Ok(out)
    }

    /// Queues `ops` and waits for their answer, making calls for the queue
    /// whenever the driver's lock comes free before it.
    async fn request(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let (answer, mut rx) = oneshot::channel();
        lock(&self.waiting).push_back(Waiting {
            ops,
            solo: false,
            answer,
        });
        loop {
            tokio::select! {
                biased;
                got = &mut rx => return got.unwrap_or_else(|_| Err(abandoned())),
                held = self.driver.clone().lock_owned() => {
                    // A call that served this request ended before the lock
                    // came free.
                    if let Ok(got) = rx.try_recv() {
                        return got;
                    }
                    // Before looking at the queue: a failed call's requests
                    // put back after this are seen below.
                    let mut requeued = self.requeued.subscribe();
                    if !self.serve_waiting(held).await {
                        // Neither waiting nor answered: in a call still under
                        // way (admitted, so the lock came free), or in one
                        // that ended without answering it (a panic). If that
                        // call fails, its requests are put back for whoever
                        // is waiting to drive them.
                        tokio::select! {
                            got = &mut rx => return got.unwrap_or_else(|_| Err(abandoned())),
                            _ = requeued.changed() => {}
                        }
                    }
                }
            }
        }
    }

    /// Serves the requests at the head of the queue in one call, letting the
    /// driver's lock (`held`) go once the engine admitted the call
    /// ([`Oram::access_admitting`]: the next call may then overlap it); false
    /// if none waits.
    async fn serve_waiting(&self, held: tokio::sync::OwnedMutexGuard<()>) -> bool {
        let batch = self.take_waiting();
        if batch.is_empty() {
            return false;
        }
        let mut ops = Vec::with_capacity(batch.iter().map(|w| w.ops.len()).sum());
        let mut ends = Vec::with_capacity(batch.len());
        for w in &batch {
            ops.extend(w.ops.iter().cloned());
            ends.push(ops.len());
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let admit = Admit::new(move || drop(held));
        match self.engine.access_admitting(ops, admit).await {
            Ok(out) => {
                let mut start = 0;
                for (w, &end) in batch.into_iter().zip(&ends) {
                    let _ = w.answer.send(Ok(out[start..end].to_vec()));
                    start = end;
                }
                self.served.fetch_add(ends.len() as u64, Ordering::Relaxed);
            }
            Err(OramError::StashOverflow { size, bound }) => {
                // Applied: every request of the call had its effect.
                for w in batch {
                    let _ = w.answer.send(Err(OramError::StashOverflow { size, bound }));
                }
                self.served.fetch_add(ends.len() as u64, Ordering::Relaxed);
            }
            Err(e) if batch.len() == 1 => {
                if let Some(w) = batch.into_iter().next() {
                    let _ = w.answer.send(Err(e));
                }
                self.served.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // Each is served alone next, in order, ahead of every request
                // still waiting (a call admitted after this one may have
                // served later requests already: they were concurrent).
                {
                    let mut q = lock(&self.waiting);
                    for mut w in batch.into_iter().rev() {
                        w.solo = true;
                        q.push_front(w);
                    }
                }
                self.requeued.send_modify(|n| *n += 1);
            }
        }
        true
    }

    /// The requests at the head of the queue that one call serves: whole
    /// requests in order while their ops fit in `max_batch`, or one marked to
    /// be served alone.
    fn take_waiting(&self) -> Vec<Waiting> {
        let mut q = lock(&self.waiting);
        let mut batch: Vec<Waiting> = Vec::new();
        let mut ops = 0;
        while let Some(next) = q.front() {
            if !batch.is_empty() && (next.solo || ops + next.ops.len() > self.max_batch) {
                break;
            }
            let Some(w) = q.pop_front() else { break };
            ops += w.ops.len();
            let solo = w.solo;
            batch.push(w);
            if solo {
                break;
            }
        }
        batch
    }
}

/// The error of a request whose call ended without answering it.
fn abandoned() -> OramError {
    OramError::Store(StoreError::Unavailable(
        "the call serving this request ended without an answer (see the log)".into(),
    ))
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Oram for Combined {
    fn name(&self) -> &'static str {
        self.shared.engine.name()
    }

    fn block_size(&self) -> usize {
        self.shared.engine.block_size()
    }

    fn capacity(&self) -> u64 {
        self.shared.engine.capacity()
    }

    fn id_limit(&self) -> u64 {
        self.shared.engine.id_limit()
    }

    /// Observed: the engine's calls, each of the ops waiting when it began
    /// (see the module documentation). Bad ops are refused before they wait.
    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        for op in &ops {
            validate_op(op, self.id_limit(), self.block_size())?;
        }
        // Detached: a caller that goes away mid-call still answers the
        // requests it took.
        detached(self.shared.clone().access(ops)).await
    }

    /// As [`Oram::access`] (the call shares the engine's calls with others;
    /// it is admitted when its request is answered).
    async fn access_admitting(&self, ops: Vec<Op>, admitted: Admit) -> Result<Vec<Bytes>> {
        let out = self.access(ops).await;
        admitted.admit();
        out
    }

    /// The engine's own (a staged access is one round of a parent's, never
    /// shared).
    async fn access_staged(&self, ops: Vec<Op>) -> Result<StagedAccess> {
        self.shared.engine.access_staged(ops).await
    }

    async fn access_staged_round(&self, round: RoundId, ops: Vec<Op>) -> Result<StagedAccess> {
        self.shared.engine.access_staged_round(round, ops).await
    }

    async fn flush(&self) -> Result<()> {
        self.shared.engine.flush().await
    }

    /// The engine's statistics, and the requests served, the calls made and
    /// the requests waiting now.
    fn stats(&self) -> EngineStats {
        let mut s = self.shared.engine.stats();
        let waiting = lock(&self.shared.waiting).len() as u64;
        s.extra.extend([
            Stat {
                name: "shared_requests_total",
                help: "Requests served (a caller's ops, at most a round's worth); callers \
                       waiting at once share the engine's calls.",
                kind: StatKind::Counter,
                value: self.shared.served.load(Ordering::Relaxed),
            },
            Stat {
                name: "shared_calls_total",
                help: "Calls of the engine, each serving the requests waiting when it began.",
                kind: StatKind::Counter,
                value: self.shared.calls.load(Ordering::Relaxed),
            },
            Stat {
                name: "shared_waiting_requests",
                help: "Requests waiting for a call of the engine now.",
                kind: StatKind::Gauge,
                value: waiting,
            },
        ]);
        s
    }

    /// Holds off the calls (requests keep waiting), then the engine.
    async fn quiesce(&self) -> Result<Quiesced> {
        let driver = self.shared.driver.clone().lock_owned().await;
        let engine = self.shared.engine.quiesce().await?;
        Ok(Quiesced::new((engine, driver)))
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        self.shared.engine.check(progress).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.shared.engine.sweep().await
    }

    async fn collect(&self) -> Result<u64> {
        self.shared.engine.collect().await
    }

    async fn collect_while_serving(&self) -> Result<u64> {
        self.shared.engine.collect_while_serving().await
    }

    fn superseded(&self) -> Option<crate::Superseded> {
        self.shared.engine.superseded()
    }

    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        self.shared.engine.format(progress).await
    }

    async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        self.shared.engine.grow(capacity, progress).await
    }

    fn grows(&self) -> bool {
        self.shared.engine.grows()
    }

    async fn grow_prepare(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        self.shared.engine.grow_prepare(capacity, progress).await
    }
}

impl std::fmt::Debug for Combined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combined")
            .field("engine", &self.shared.engine.name())
            .field("max_batch", &self.shared.max_batch)
            .finish_non_exhaustive()
    }
}
