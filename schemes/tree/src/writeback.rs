//! The write-back pipeline: buckets a round wrote go to the backend off the
//! critical path, bounded, ordered per bucket, retried, and resent from the
//! journal after a crash.
//!
//! * At most `max` rounds may have write-backs pending (a semaphore); the next
//!   round waits for a permit, so memory is bounded by that many rounds of buckets.
//! * A round that needs a bucket still in flight uses the in-memory copy
//!   ([`WriteBack::snapshot`], taken before its GETs go out; a bucket absent from
//!   the snapshot had landed before).
//! * A write-back of bucket `n` waits for the earlier in-flight write-backs of `n`,
//!   so the backend always ends with the newest version.
//! * A write-back is retried with back-off (`attempts`); if it still fails, its
//!   buckets stay in memory marked failed and the next round (or flush) resends
//!   them first ([`WriteBack::retry_failed`]), failing cleanly while the backend
//!   refuses.
//! * A landed write-back's `(node, version)` goes to the landed list; the next
//!   commit drops those journal entries ([`WriteBack::settle`]).
//! * Bucket writes go out with [`BlockStore::put_many_redoable`]: each is in the
//!   journal and nothing reads it from the backend until it landed (rounds use the
//!   in-memory copy meanwhile), so a back-end may overwrite the object in place;
//!   a write torn by a crash is resent from the journal before any read.
//!
//! Locks: `inflight` guards the map of buckets in flight, `landed` the list of
//! landed writes. Where both are held the order is `inflight` → `landed`. Neither
//! is held across an await or any I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey};
use oram_engine::Result;
use oram_state::{NodeVersion, PendingWrite, TrustedState};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// How buckets are named and sealed: what the pipeline needs of the engine.
pub(crate) trait BucketIo: Send + Sync + 'static {
    /// The backend key of bucket `node` in `slot`.
    fn key(&self, node: u64, slot: u8) -> ObjKey;
    /// Seals the plaintext of bucket `node` at `nv`.
    fn seal(&self, node: u64, nv: &NodeVersion, plain: &Bytes) -> Result<Bytes>;
    /// The backend.
    fn store(&self) -> &dyn BlockStore;
}

/// A bucket to write: node, version, plaintext.
pub(crate) type BucketWrite = (u64, NodeVersion, Bytes);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WbStatus {
    Running,
    Done,
    Failed,
}

/// A bucket written by a round whose write-back has not finished.
#[derive(Clone)]
struct Pending {
    round: u64,
    nv: NodeVersion,
    plain: Bytes,
    done: watch::Receiver<WbStatus>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps stay consistent at every point a panic could occur.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pipeline of one engine.
pub(crate) struct WriteBack {
    io: Arc<dyn BucketIo>,
    max: usize,
    attempts: u32,
    inflight: Mutex<HashMap<u64, Pending>>,
    landed: Mutex<Vec<(u64, u64)>>,
    permits: Arc<Semaphore>,
    retries: AtomicU64,
}

impl WriteBack {
    /// A pipeline of `max` rounds; the writes `journal` holds (an earlier run's)
    /// are queued as failed, to be resent first.
    pub(crate) fn from_journal(
        io: Arc<dyn BucketIo>,
        journal: Vec<PendingWrite>,
        max: usize,
        attempts: u32,
    ) -> Self {
        let (failed_tx, failed_rx) = watch::channel(WbStatus::Failed);
        drop(failed_tx);
        let inflight = journal
            .into_iter()
            .map(|(node, nv, plain)| {
                let p = Pending {
                    round: 0,
                    nv,
                    plain,
                    done: failed_rx.clone(),
                };
                (node, p)
            })
            .collect();
        Self {
            io,
            max,
            attempts,
            inflight: Mutex::new(inflight),
            landed: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(max)),
            retries: AtomicU64::new(0),
        }
    }

    /// Waits for a write-back slot (held until the round's write-back ends).
    pub(crate) async fn permit(&self) -> OwnedSemaphorePermit {
        self.permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed")
    }

    /// Waits until no write-back is running.
    pub(crate) async fn drain(&self) {
        let all = self.max as u32;
        drop(
            self.permits
                .acquire_many(all)
                .await
                .expect("semaphore never closed"),
        );
    }

    /// Rounds whose write-back is pending now.
    pub(crate) fn pending_rounds(&self) -> u64 {
        (self.max - self.permits.available_permits()) as u64
    }

    /// Write-back attempts that failed and were retried.
    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The plaintexts of those of `nodes` still in flight. Take it before the GETs
    /// of the same buckets go out.
    pub(crate) fn snapshot(&self, nodes: impl IntoIterator<Item = u64>) -> HashMap<u64, Bytes> {
        let infl = lock(&self.inflight);
        nodes
            .into_iter()
            .filter_map(|n| infl.get(&n).map(|p| (n, p.plain.clone())))
            .collect()
    }

    /// Drops the journal entries of write-backs that landed (under the round lock;
    /// committed with the round's next commit).
    pub(crate) fn settle(&self, state: &mut dyn TrustedState) {
        let landed = std::mem::take(&mut *lock(&self.landed));
        for (node, version) in landed {
            state.pending_done(node, version);
        }
    }

    /// Resends the write-backs that failed; called under the round lock.
    pub(crate) async fn retry_failed(&self) -> Result<()> {
        let failed: Vec<(u64, Pending)> = {
            let infl = lock(&self.inflight);
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
                self.io.key(*n, p.nv.slot),
                self.io.seal(*n, &p.nv, &p.plain)?,
            ));
        }
        // Journaled and read by nobody until landed: the back-end may overwrite in place.
        self.io.store().put_many_redoable(items).await?;
        let mut infl = lock(&self.inflight);
        let mut landed = lock(&self.landed);
        for (n, p) in failed {
            landed.push((n, p.nv.version));
            if infl.get(&n).is_some_and(|q| q.round == p.round) {
                infl.remove(&n);
            }
        }
        Ok(())
    }

    /// Registers round `round`'s writes as in flight and starts their write-back
    /// in the background (holding `permit` until it ends). Call it under the round
    /// lock, once the writes are durable in the journal.
    pub(crate) fn start(
        self: &Arc<Self>,
        round: u64,
        writes: Vec<BucketWrite>,
        permit: OwnedSemaphorePermit,
    ) {
        if writes.is_empty() {
            return;
        }
        let (tx, rx) = watch::channel(WbStatus::Running);
        let mut earlier = Vec::new();
        {
            let mut infl = lock(&self.inflight);
            for (node, nv, plain) in &writes {
                let p = Pending {
                    round,
                    nv: *nv,
                    plain: plain.clone(),
                    done: rx.clone(),
                };
                if let Some(prev) = infl.insert(*node, p) {
                    earlier.push(prev.done);
                }
            }
        }
        tokio::spawn(self.clone().write_back(round, writes, earlier, tx, permit));
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
        let status = match self.put(&writes).await {
            Ok(()) => {
                let mut infl = lock(&self.inflight);
                let mut landed = lock(&self.landed);
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

    async fn put(&self, writes: &[BucketWrite]) -> Result<()> {
        let mut items = Vec::with_capacity(writes.len());
        for (node, nv, plain) in writes {
            items.push((self.io.key(*node, nv.slot), self.io.seal(*node, nv, plain)?));
        }
        oram_blockstore::put_many_redoable_retrying(self.io.store(), items, self.attempts, || {
            self.retries.fetch_add(1, Ordering::Relaxed);
        })
        .await?;
        Ok(())
    }
}
