//! Writing a round's buckets to the backend, and resending the journal of an
//! earlier version.
//!
//! * A round's rewritten buckets go to slots that neither the durable state nor
//!   the last checkpoint refers to ([`oram_state::SlotPolicy::BeforeCommit`]) and
//!   are written **before** the commit that makes them current
//!   ([`WriteBack::land`]): no plaintext is journaled, and a crash before that
//!   commit leaves only objects nothing refers to (the round is finished again
//!   from its intent record, under versions of its own). Nothing reads such an
//!   object while it is written, so the back-end may overwrite it in place
//!   ([`BlockStoreExt::put_many_redoable`]); a write is retried with back-off
//!   (`attempts`).
//! * Volumes written by earlier versions may still hold journaled write-backs
//!   (buckets committed before they landed): they are queued as failed at start
//!   and resent first, before any round reads ([`WriteBack::retry_failed`]); a
//!   resent write's journal entry is dropped with the next commit
//!   ([`WriteBack::settle`]). `format` uses the same journal.
//!
//! Locks: `inflight` guards the map of journaled buckets not yet resent,
//! `landed` the list of resent ones. Where both are held the order is
//! `inflight` → `landed`. Neither is held across an await or any I/O.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey};
use oram_engine::Result;
use oram_state::{NodeVersion, PendingWrite, TrustedState};

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

/// A journaled bucket (an earlier version's write-back) not yet resent.
#[derive(Clone)]
struct Pending {
    nv: NodeVersion,
    plain: Bytes,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps stay consistent at every point a panic could occur.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The backend writes of one engine.
pub(crate) struct WriteBack {
    io: Arc<dyn BucketIo>,
    attempts: u32,
    inflight: Mutex<HashMap<u64, Pending>>,
    landed: Mutex<Vec<(u64, u64)>>,
    landing: AtomicU64,
    retries: AtomicU64,
}

impl WriteBack {
    /// The writes of an engine; the writes `journal` holds (an earlier run's, or
    /// an earlier version's) are queued to be resent first.
    pub(crate) fn from_journal(
        io: Arc<dyn BucketIo>,
        journal: Vec<PendingWrite>,
        attempts: u32,
    ) -> Self {
        let inflight = journal
            .into_iter()
            .map(|(node, nv, plain)| (node, Pending { nv, plain }))
            .collect();
        Self {
            io,
            attempts,
            inflight: Mutex::new(inflight),
            landed: Mutex::new(Vec::new()),
            landing: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }

    /// Rounds writing their buckets now.
    pub(crate) fn pending_rounds(&self) -> u64 {
        self.landing.load(Ordering::Relaxed)
    }

    /// Write attempts that failed and were retried.
    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The plaintexts of those of `nodes` journaled and not resent yet. Take it
    /// before the GETs of the same buckets go out.
    pub(crate) fn snapshot(&self, nodes: impl IntoIterator<Item = u64>) -> HashMap<u64, Bytes> {
        let infl = lock(&self.inflight);
        if infl.is_empty() {
            return HashMap::new();
        }
        nodes
            .into_iter()
            .filter_map(|n| infl.get(&n).map(|p| (n, p.plain.clone())))
            .collect()
    }

    /// Drops the journal entries of resent writes (under the round lock;
    /// committed with the round's next commit).
    pub(crate) fn settle(&self, state: &mut dyn TrustedState) {
        let landed = std::mem::take(&mut *lock(&self.landed));
        for (node, version) in landed {
            state.pending_done(node, version);
        }
    }

    /// Records journaled writes that landed outside the pipeline (a growth's
    /// new buckets): their entries are dropped by the next [`WriteBack::settle`].
    pub(crate) fn landed(&self, writes: impl IntoIterator<Item = (u64, u64)>) {
        lock(&self.landed).extend(writes);
    }

    /// Queues journaled writes whose PUTs failed (a growth's new buckets), to
    /// be resent first, like an earlier run's journal.
    pub(crate) fn requeue(&self, writes: Vec<BucketWrite>) {
        let mut infl = lock(&self.inflight);
        for (node, nv, plain) in writes {
            infl.insert(node, Pending { nv, plain });
        }
    }

    /// Resends the journaled writes; called under the round lock.
    pub(crate) async fn retry_failed(&self) -> Result<()> {
        let failed: Vec<(u64, Pending)> = {
            let infl = lock(&self.inflight);
            infl.iter().map(|(n, p)| (*n, p.clone())).collect()
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
        // Journaled and read by nobody until resent: the back-end may overwrite in place.
        self.io.store().put_many_redoable(items).await?;
        let mut infl = lock(&self.inflight);
        let mut landed = lock(&self.landed);
        for (n, p) in failed {
            landed.push((n, p.nv.version));
            infl.remove(&n);
        }
        Ok(())
    }

    /// Seals and writes a round's buckets, each to a slot nothing durable refers
    /// to, retrying transient failures; `Ok` once every one is durable on the
    /// backend. Called under the round lock, before the round's commit.
    pub(crate) async fn land(&self, writes: &[BucketWrite]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        self.landing.fetch_add(1, Ordering::Relaxed);
        let out = self.put(writes).await;
        self.landing.fetch_sub(1, Ordering::Relaxed);
        out
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
