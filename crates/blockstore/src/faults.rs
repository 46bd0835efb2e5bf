//! A fault-injecting wrapper: a store that misbehaves the way real object stores
//! and networks do — latency spikes, 5xx answers, throttling, connection resets
//! (before or after the server applied a write), truncated and oversized bodies,
//! and PUTs that time out at the client but land on the server later.
//!
//! It exists for the fault battery (`tests/tests/faults.rs`): a real MinIO cannot
//! produce these on demand, so this wrapper stands in for the transport between
//! the proxy and the store. Each fault is reported the way the S3 back-end
//! reports it (see `oram-store-s3`): 5xx, throttling, resets and truncated bodies
//! are [`StoreError::Unavailable`]; an oversized body is refused before it is
//! buffered ([`StoreError::WrongSize`]) when the caller bounded its read.
//!
//! A late PUT lands on the inner store only if the object is still what it was
//! when the PUT was sent, as the S3 back-end's conditional writes (`If-Match`,
//! `If-None-Match`) make a real server do; [`FaultPlan::late_put_unconditional`]
//! lands it regardless, to show what happens without them.
//!
//! Like the S3 back-end, it has no in-place write: redoable writes
//! ([`PutMode::Redoable`]) meet the same faults as atomic ones and reach the
//! inner store as atomic writes. Every other option is forwarded as it came.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::{Rng, SeedableRng};

use crate::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutMode, PutOpts, Result,
    SizeBound, StoreError,
};

/// Which faults to inject, each with its probability per call (0.0 ..= 1.0). At
/// most one fault hits a call; the probabilities are tried in the order of the
/// fields and should sum to at most 1.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Seed of the fault schedule.
    pub seed: u64,
    /// A delay of up to `latency_max` before the call goes through.
    pub latency: f64,
    /// Largest injected delay.
    pub latency_max: Duration,
    /// An HTTP 500/503 answer: nothing applied.
    pub server_error: f64,
    /// A 503 SlowDown (throttling) answer: nothing applied.
    pub throttle: f64,
    /// A connection reset before the request reached the server: nothing applied.
    pub reset_before: f64,
    /// A connection reset after the server applied a write (PUT/DELETE): applied,
    /// but the caller sees an error. For reads: as `reset_before`.
    pub reset_after: f64,
    /// A GET whose body is cut short (the transport notices: an error).
    pub truncated: f64,
    /// A GET whose body is longer than the object (refused when the read is
    /// bounded; handed to the caller otherwise).
    pub oversized: f64,
    /// A PUT that times out at the caller and lands `late_delay` later.
    pub late_put: f64,
    /// How late a late PUT lands.
    pub late_delay: Duration,
    /// Land late PUTs even if the object changed meanwhile (a store without
    /// conditional writes). Off by default.
    pub late_put_unconditional: bool,
}

impl FaultPlan {
    /// Every fault kind at `each` probability (latency up to 20 ms, late PUTs
    /// landing after 50 ms).
    pub fn all(seed: u64, each: f64) -> Self {
        Self {
            seed,
            latency: each,
            latency_max: Duration::from_millis(20),
            server_error: each,
            throttle: each,
            reset_before: each,
            reset_after: each,
            truncated: each,
            oversized: each,
            late_put: each,
            late_delay: Duration::from_millis(50),
            late_put_unconditional: false,
        }
    }
}

/// Faults injected so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Calls that reached the wrapper while faults were on.
    pub calls: u64,
    /// Backend requests those calls stand for (one per key or item).
    pub requests: u64,
    /// Injected delays.
    pub latency: u64,
    /// Injected 5xx answers.
    pub server_error: u64,
    /// Injected throttling answers.
    pub throttle: u64,
    /// Resets before the server saw the request.
    pub reset_before: u64,
    /// Resets after the server applied a write.
    pub reset_after: u64,
    /// Truncated bodies.
    pub truncated: u64,
    /// Oversized bodies.
    pub oversized: u64,
    /// PUT batches that timed out and were scheduled to land late.
    pub late_put: u64,
    /// Late PUT items that landed.
    pub late_landed: u64,
    /// Late PUT items the store refused because the object had changed.
    pub late_refused: u64,
}

impl FaultCounts {
    /// Faults injected in all (latency included).
    pub fn injected(&self) -> u64 {
        self.latency
            + self.server_error
            + self.throttle
            + self.reset_before
            + self.reset_after
            + self.truncated
            + self.oversized
            + self.late_put
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Nothing,
    Latency,
    ServerError,
    Throttle,
    ResetBefore,
    ResetAfter,
    Truncated,
    Oversized,
    LatePut,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    requests: AtomicU64,
    latency: AtomicU64,
    server_error: AtomicU64,
    throttle: AtomicU64,
    reset_before: AtomicU64,
    reset_after: AtomicU64,
    truncated: AtomicU64,
    oversized: AtomicU64,
    late_put: AtomicU64,
    late_landed: AtomicU64,
    late_refused: AtomicU64,
}

/// Wraps a store and injects the faults of a [`FaultPlan`] while enabled.
///
/// **What the storage server observes:** the requests that get through, plus the
/// late PUTs when they land (and, for each late PUT, a read of the object's tag
/// when it is sent: the wrapper's model of a conditional write).
pub struct FaultStore<S> {
    inner: Arc<S>,
    plan: FaultPlan,
    enabled: AtomicBool,
    /// The fault schedule's random stream (guards only the generator).
    rng: Mutex<rand_chacha::ChaCha8Rng>,
    counts: Arc<Counters>,
    /// Late PUTs not yet landed (guards only the list of their tasks).
    pending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl<S: BlockStore> FaultStore<S> {
    /// Wraps `inner`; faults are on.
    pub fn new(inner: Arc<S>, plan: FaultPlan) -> Self {
        Self {
            inner,
            rng: Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(plan.seed)),
            plan,
            enabled: AtomicBool::new(true),
            counts: Arc::default(),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Turns fault injection on or off (off: every call goes straight through).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Waits until every late PUT scheduled so far has landed (or was refused).
    pub async fn settle(&self) {
        let tasks: Vec<_> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
    }

    /// The faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        let c = &self.counts;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultCounts {
            calls: l(&c.calls),
            requests: l(&c.requests),
            latency: l(&c.latency),
            server_error: l(&c.server_error),
            throttle: l(&c.throttle),
            reset_before: l(&c.reset_before),
            reset_after: l(&c.reset_after),
            truncated: l(&c.truncated),
            oversized: l(&c.oversized),
            late_put: l(&c.late_put),
            late_landed: l(&c.late_landed),
            late_refused: l(&c.late_refused),
        }
    }

    /// Draws this call's fault among those that apply to it.
    fn draw(&self, requests: usize, applicable: &[Fault]) -> (Fault, Duration) {
        if !self.enabled.load(Ordering::SeqCst) {
            return (Fault::Nothing, Duration::ZERO);
        }
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        self.counts
            .requests
            .fetch_add(requests as u64, Ordering::Relaxed);
        let p = &self.plan;
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let x: f64 = rng.gen();
        let mut acc = 0.0;
        let table = [
            (Fault::Latency, p.latency),
            (Fault::ServerError, p.server_error),
            (Fault::Throttle, p.throttle),
            (Fault::ResetBefore, p.reset_before),
            (Fault::ResetAfter, p.reset_after),
            (Fault::Truncated, p.truncated),
            (Fault::Oversized, p.oversized),
            (Fault::LatePut, p.late_put),
        ];
        let mut fault = Fault::Nothing;
        for (f, prob) in table {
            acc += prob;
            if x < acc {
                fault = f;
                break;
            }
        }
        if !applicable.contains(&fault) {
            fault = Fault::Nothing;
        }
        let delay = if fault == Fault::Latency {
            let max = p.latency_max.as_millis().max(1) as u64;
            Duration::from_millis(rng.gen_range(0..=max))
        } else {
            Duration::ZERO
        };
        let counter = match fault {
            Fault::Nothing => None,
            Fault::Latency => Some(&self.counts.latency),
            Fault::ServerError => Some(&self.counts.server_error),
            Fault::Throttle => Some(&self.counts.throttle),
            Fault::ResetBefore => Some(&self.counts.reset_before),
            Fault::ResetAfter => Some(&self.counts.reset_after),
            Fault::Truncated => Some(&self.counts.truncated),
            Fault::Oversized => Some(&self.counts.oversized),
            Fault::LatePut => Some(&self.counts.late_put),
        };
        if let Some(c) = counter {
            c.fetch_add(1, Ordering::Relaxed);
        }
        (fault, delay)
    }

    /// The error a fault that stops a request surfaces as, if it does.
    fn refusal(fault: Fault) -> Option<StoreError> {
        match fault {
            Fault::ServerError => Some(StoreError::Unavailable(
                "injected: HTTP 500 InternalError".into(),
            )),
            Fault::Throttle => Some(StoreError::Unavailable(
                "injected: HTTP 503 SlowDown".into(),
            )),
            Fault::ResetBefore => Some(StoreError::Unavailable(
                "injected: connection reset by peer".into(),
            )),
            _ => None,
        }
    }

    /// A read answer damaged by `fault`, as the S3 back-end would report it.
    fn damage(
        fault: Fault,
        keys: &[ObjKey],
        got: Vec<Option<Bytes>>,
        bound: Option<SizeBound>,
    ) -> Result<Vec<Option<Bytes>>> {
        let first = got.iter().position(Option::is_some);
        match (fault, first) {
            (Fault::Truncated, Some(i)) => {
                let len = got[i].as_ref().map_or(0, Bytes::len);
                Err(StoreError::Unavailable(format!(
                    "injected: {}: body truncated at {} of {len} bytes",
                    keys[i],
                    len / 2
                )))
            }
            (Fault::Oversized, Some(i)) => {
                let mut got = got;
                let mut long = got[i].as_ref().map(|b| b.to_vec()).unwrap_or_default();
                long.extend(std::iter::repeat_n(0xa5u8, long.len().max(1)));
                match bound {
                    Some(b) => {
                        Err(b.violation(keys[i].as_str(), format!("Content-Length {}", long.len())))
                    }
                    None => {
                        got[i] = Some(long.into());
                        Ok(got)
                    }
                }
            }
            _ => Ok(got),
        }
    }

    async fn read(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        use Fault::*;
        let (fault, delay) = self.draw(
            keys.len(),
            &[
                Latency,
                ServerError,
                Throttle,
                ResetBefore,
                ResetAfter,
                Truncated,
                Oversized,
            ],
        );
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault).or_else(|| {
            (fault == ResetAfter)
                .then(|| StoreError::Unavailable("injected: connection reset by peer".into()))
        }) {
            return Err(e);
        }
        let got = self.inner.get_opts(keys, opts).await?;
        Self::damage(fault, keys, got, opts.bound)
    }

    /// Sends a late PUT: reads each object's tag now, and lands the item later
    /// only if the tag is unchanged (or regardless, if the plan says so).
    async fn schedule_late(&self, items: Vec<(ObjKey, Bytes)>) {
        let mut conds = Vec::with_capacity(items.len());
        for (k, _) in &items {
            let tag = self
                .inner
                .get_tagged(k, SizeBound::AtMost(u64::MAX))
                .await
                .ok()
                .flatten()
                .map(|(_, t)| t);
            conds.push(match tag {
                Some(t) => PutCondition::IfMatch(t),
                None => PutCondition::IfAbsent,
            });
        }
        let inner = self.inner.clone();
        let counts = self.counts.clone();
        let delay = self.plan.late_delay;
        let unconditional = self.plan.late_put_unconditional;
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            for ((k, v), cond) in items.into_iter().zip(conds) {
                let landed = if unconditional {
                    inner
                        .put_opts(vec![(k, v)], PutOpts::default())
                        .await
                        .is_ok()
                } else {
                    inner.put_if(&k, v, cond).await.is_ok()
                };
                let c = if landed {
                    &counts.late_landed
                } else {
                    &counts.late_refused
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore> BlockStore for FaultStore<S> {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        self.read(keys, opts).await
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        use Fault::*;
        let (fault, delay) = self.draw(
            1,
            &[
                Latency,
                ServerError,
                Throttle,
                ResetBefore,
                ResetAfter,
                Truncated,
                Oversized,
            ],
        );
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault) {
            return Err(e);
        }
        if fault == ResetAfter {
            return Err(StoreError::Unavailable(
                "injected: connection reset by peer".into(),
            ));
        }
        let len = range.end.saturating_sub(range.start);
        let got = self.inner.get_range(key, range).await?;
        match (fault, &got) {
            (Truncated, Some(b)) if !b.is_empty() => Err(StoreError::Unavailable(format!(
                "injected: {key}: body truncated at {} of {} bytes",
                b.len() / 2,
                b.len()
            ))),
            // A back-end never hands out more than the range asked for.
            (Oversized, Some(b)) => Err(SizeBound::AtMost(len)
                .violation(key.as_str(), format!("Content-Length {}", 2 * b.len() + 1))),
            _ => Ok(got),
        }
    }

    // Redoable writes (`PutMode::Redoable`) meet the same faults as atomic ones
    // and reach the inner store as atomic writes. Deliberate: this wrapper stands
    // in for the transport to an S3 store, which has no in-place write (the S3
    // back-end stores a redoable write as an ordinary PUT), so the inner store
    // (the fault battery's fs store) does what the S3 back-end would; a late PUT
    // lands through `put_if`, atomic in any case. The fs back-end's in-place path
    // is exercised by its own tests and by the engine conformance suite.
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, mut opts: PutOpts) -> Result<()> {
        use Fault::*;
        opts.mode = PutMode::Atomic;
        let (fault, delay) = self.draw(
            items.len(),
            &[
                Latency,
                ServerError,
                Throttle,
                ResetBefore,
                ResetAfter,
                LatePut,
            ],
        );
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault) {
            return Err(e);
        }
        match fault {
            ResetAfter => {
                self.inner.put_opts(items, opts).await?;
                Err(StoreError::Unavailable(
                    "injected: connection reset after the PUT was applied".into(),
                ))
            }
            LatePut => {
                self.schedule_late(items).await;
                Err(StoreError::Unavailable(
                    "injected: PUT timed out (it lands later)".into(),
                ))
            }
            _ => self.inner.put_opts(items, opts).await,
        }
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        use Fault::*;
        let (fault, delay) = self.draw(
            keys.len(),
            &[Latency, ServerError, Throttle, ResetBefore, ResetAfter],
        );
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault) {
            return Err(e);
        }
        self.inner.delete_many(keys).await?;
        if fault == ResetAfter {
            return Err(StoreError::Unavailable(
                "injected: connection reset after the DELETE was applied".into(),
            ));
        }
        Ok(())
    }

    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        use Fault::*;
        let (fault, delay) = self.draw(1, &[Latency, ServerError, Throttle, ResetBefore]);
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault) {
            return Err(e);
        }
        self.inner.list_opts(prefix, opts).await
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        use Fault::*;
        let (fault, delay) = self.draw(1, &[Latency, ServerError, Throttle, ResetBefore]);
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault) {
            return Err(e);
        }
        self.inner.get_tagged(key, bound).await
    }

    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        use Fault::*;
        let (fault, delay) = self.draw(1, &[Latency, ServerError, Throttle, ResetBefore]);
        tokio::time::sleep(delay).await;
        if let Some(e) = Self::refusal(fault) {
            return Err(e);
        }
        self.inner.put_if(key, data, cond).await
    }
}
