//! The backend lease: one proxy at a time writes a volume's backend prefix.
//!
//! `<prefix>/meta/lease` names the holder (a random id kept in
//! `<data_dir>/lease.id`), the start holding it (a random id per start), a
//! generation (incremented at every take-over) and a renewal counter. It is only ever written with conditional PUTs
//! ([`BlockStore::put_if`]: `If-None-Match: *` to create it, `If-Match` on the ETag
//! last seen to renew or take it over), so two proxies can never both believe
//! they wrote the last version.
//!
//! * **Acquire** (every start, `init`, `fsck`, `recover`): no lease → create it.
//!   Released → take it over at once. Another holder's → watch it for the lease
//!   duration `D`: if it changes (the holder renews), refuse to start; if it stays
//!   unchanged for `D` on our clock, take it over. Ours (this data directory's
//!   holder id) → judged with what the directory recorded of its own last write
//!   ([`run`]): a directory *behind* the record (a copy or a backup of one that
//!   ran on) is refused; the crashed process of this very directory (same start,
//!   same boot, process gone) takes it over at once; anything else (a copy beside
//!   a live original, a restart after a reboot) is watched like another
//!   holder's.
//! * **Renew** every `D/4`; the holder considers itself valid for `2D/3` after it
//!   *sent* the last successful renewal. A contender waits a full `D` after its
//!   first unchanged observation, which comes after that renewal landed, so the
//!   holder's validity ends at least `D/3` before any take-over (clocks need only
//!   run at roughly the same rate): the *safety margin* ([`safety_margin`]).
//! * **Fencing**: every PUT and DELETE of the volume goes through [`LeasedStore`],
//!   which refuses it (`StoreError::Fenced`, a 503 to clients) once the lease is
//!   lost (a renewal found another holder's version) or expired (not renewed in
//!   time); reads pass. A proxy that lost its lease stays fenced until restarted.
//!   A write runs while the lease holds: it is abandoned (dropped, with the
//!   back-end's retries) as soon as the lease is lost or lapses, at least the
//!   safety margin before a take-over, so that no request of a write the lease
//!   admitted is sent after one; a long write goes on while renewals succeed.
//!   The checkpoint is written conditionally besides (see `checkpoint.rs`).
//! * **Release** at a graceful stop, so the next holder need not wait.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey, ObjTag, PutCondition, SizeBound, StoreError};
use rand::RngCore;

use crate::config::BackendConfig;
use crate::fence::{FencedStore, WriteFence};
use crate::VolumeError;

pub mod run;

use run::{RunMark, Seen, Verdict};

type StoreResult<T> = Result<T, StoreError>;

/// The lease object's contents.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    holder: String,
    /// The start holding it (empty in records of versions without start ids,
    /// which read records with it as unreadable, and wait the lease out).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    start: String,
    generation: u64,
    renewals: u64,
    lease_secs: u64,
    #[serde(default)]
    released: bool,
}

impl Record {
    fn bytes(&self) -> Bytes {
        toml::to_string(self)
            .expect("serialises")
            .into_bytes()
            .into()
    }

    fn parse(b: &[u8]) -> Option<Self> {
        toml::from_str(std::str::from_utf8(b).ok()?).ok()
    }
}

/// The longest lease a record found on the backend is waited on for: the record is
/// the provider's to change, and a start must neither wait for years nor overflow
/// its deadline on a huge `lease_secs`.
pub const MAX_FOUND_LEASE_SECS: u64 = 86_400;

/// How long a holder of a lease of `duration` considers itself valid after it
/// sent its last successful renewal: `2D/3`.
pub fn validity(duration: Duration) -> Duration {
    duration * 2 / 3
}

/// How long before any take-over a holder's validity ends, at least: `D/3` (a
/// contender watches the record unchanged for a full `D`).
pub fn safety_margin(duration: Duration) -> Duration {
    duration.saturating_sub(validity(duration))
}

/// What a start makes of the lease record it found on the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The record is this data directory's or released: it is taken over at once.
    pub ours_or_free: bool,
    /// The holder, for messages (`unreadable` for a record that does not parse).
    pub who: String,
    /// How long to watch the record unchanged before taking it over: the longer of
    /// the record's lease (at most [`MAX_FOUND_LEASE_SECS`]) and `duration`.
    pub wait: Duration,
    /// The generation of the record that takes it over.
    pub generation: u64,
    /// What [`run::judge`] needs of it (`None`: unreadable).
    pub seen: Option<Seen>,
}

/// Reads the lease object `b` found on the backend (any bytes) for the holder
/// `holder` whose own lease is `duration`.
pub fn inspect(b: &[u8], holder: &str, duration: Duration) -> Found {
    let old = Record::parse(b);
    Found {
        ours_or_free: old
            .as_ref()
            .is_some_and(|r| r.holder == holder || r.released),
        who: old.as_ref().map_or_else(
            || "unreadable".to_string(),
            |r| format!("holder {}, generation {}", r.holder, r.generation),
        ),
        wait: old
            .as_ref()
            .map_or(duration, |r| {
                Duration::from_secs(r.lease_secs.min(MAX_FOUND_LEASE_SECS))
            })
            .max(duration),
        // TOML integers stop at i64::MAX: this does not overflow.
        generation: old.as_ref().map_or(0, |r| r.generation) + 1,
        seen: old.as_ref().map(|r| Seen {
            ours: r.holder == holder,
            released: r.released,
            start: r.start.clone(),
            position: (r.generation, r.renewals),
        }),
    }
}

struct Held {
    record: Record,
    tag: ObjTag,
    /// Until when this proxy may write without a renewal.
    valid_until: Instant,
}

/// A held lease (see the module documentation).
pub struct Lease {
    store: Arc<dyn BlockStore>,
    key: ObjKey,
    duration: Duration,
    /// The record and tag last written and the validity; guards only these.
    held: Mutex<Held>,
    lost: AtomicBool,
    /// Set by tests to stop the renewal task, as if the process had died
    /// (nothing else sets it).
    halted: AtomicBool,
    /// Serialises renewals (the task's, those a refused write starts — see
    /// [`Lease::ensure`] — and the release), so that `lease.run` is written in the
    /// order the record is; a tokio lock held across the renewal's awaits, taken
    /// before `held` (which is never held across an await). Guards nothing else.
    renewing: tokio::sync::Mutex<()>,
    /// The data directory (its `lease.run`).
    dir: PathBuf,
    /// This start's id, the machine's boot id and this process's id, as recorded
    /// in `lease.run`.
    start: String,
    boot: String,
}

/// Whether the lease record at `prefix` says its last holder released it (a
/// clean stop: `serve` releases only after its final checkpoint landed);
/// `None` without a readable record (`lease_secs = 0`, or a damaged record).
/// The record is the provider's to keep: a claim for messages, not a proof.
pub async fn released_on_backend(
    store: &dyn BlockStore,
    prefix: &str,
) -> Result<Option<bool>, VolumeError> {
    use oram_blockstore::BlockStoreExt;
    let key = lease_key(prefix);
    let found = store
        .get_many_bounded(std::slice::from_ref(&key), SizeBound::AtMost(4096))
        .await?;
    Ok(found
        .into_iter()
        .next()
        .flatten()
        .and_then(|b| Record::parse(&b))
        .map(|r| r.released))
}

fn lease_key(prefix: &str) -> ObjKey {
    ObjKey::new(format!("{prefix}/meta/lease")).expect("prefix validated")
}

/// `keys` without the lease object (which exists before anything else is written).
pub fn without_lease(keys: Vec<ObjKey>) -> Vec<ObjKey> {
    keys.into_iter()
        .filter(|k| !k.as_str().ends_with("/meta/lease"))
        .collect()
}

/// What `lease.run` records before `record` is written.
fn mark(start: &str, boot: &str, record: &Record) -> RunMark {
    RunMark {
        start: start.to_string(),
        generation: record.generation,
        renewals: record.renewals,
        boot: boot.to_string(),
        pid: std::process::id(),
    }
}

/// This data directory's holder id (`<dir>/lease.id`, created on first use).
fn holder_id(dir: &Path) -> Result<String, VolumeError> {
    let path = dir.join("lease.id");
    match std::fs::read_to_string(&path) {
        Ok(s) if s.trim().len() == 32 => Ok(s.trim().to_string()),
        Ok(_) | Err(_) if path.exists() => Err(VolumeError::Params(format!(
            "{} is unreadable or malformed",
            path.display()
        ))),
        _ => {
            let mut id = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut id);
            let id = hex::encode(id);
            crate::fsutil::write_private(&path, &format!("{id}\n"))?;
            Ok(id)
        }
    }
}

impl Lease {
    /// Acquires the lease of `prefix` for the data directory `dir` (see the module
    /// documentation); starts its renewal task.
    pub async fn acquire(
        store: Arc<dyn BlockStore>,
        prefix: &str,
        dir: &Path,
        duration: Duration,
    ) -> Result<Arc<Self>, VolumeError> {
        let holder = holder_id(dir)?;
        let local = run::read(dir)?;
        let start = run::new_start_id();
        let boot = run::boot_id();
        let key = lease_key(prefix);
        let bound = SizeBound::AtMost(4096);
        let unsupported = |e: StoreError| match e {
            StoreError::Unsupported(_) => VolumeError::Config(format!(
                "the backend does not support conditional writes, which the lease needs: \
                 set [backend] lease_secs = 0 (and conditional_writes = false) to run without \
                 one ({e})"
            )),
            e => VolumeError::Store(e),
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            if attempts > 5 {
                return Err(VolumeError::Integrity(
                    "the backend lease keeps changing under us: another proxy is starting on \
                     this prefix"
                        .into(),
                ));
            }
            let current = store.get_tagged(&key, bound).await.map_err(unsupported)?;
            let (record, cond) = match current {
                None => (
                    Record {
                        holder: holder.clone(),
                        start: start.clone(),
                        generation: 1,
                        renewals: 0,
                        lease_secs: duration.as_secs(),
                        released: false,
                    },
                    PutCondition::IfAbsent,
                ),
                Some((b, tag)) => {
                    let Found {
                        who,
                        wait,
                        generation,
                        seen,
                        ..
                    } = inspect(&b, &holder, duration);
                    let ours = seen.as_ref().is_some_and(|s| s.ours);
                    let verdict = run::judge(seen.as_ref(), local.as_ref(), &boot, run::may_run);
                    if let Verdict::Behind(why) = verdict {
                        return Err(VolumeError::Params(why));
                    }
                    if verdict == Verdict::Watch {
                        tracing::warn!(
                            "the backend lease is held by {} ({who}): waiting up to {}s for it \
                             to expire",
                            if ours {
                                "this data directory, but not provably by a crashed process of \
                                 it (a copy, or a restart after a reboot)"
                            } else {
                                "another proxy"
                            },
                            wait.as_secs()
                        );
                        let deadline = Instant::now() + wait + Duration::from_secs(1);
                        while Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            let now = store.get_tagged(&key, bound).await.map_err(unsupported)?;
                            if now.as_ref().map(|(_, t)| t) != Some(&tag) {
                                return Err(VolumeError::Params(format!(
                                    "another oram-proxy holds the backend lease of prefix \
                                     {prefix:?} ({who}) and renews it: two proxies must not \
                                     write one volume. Stop the other one first.{}",
                                    if ours {
                                        " It runs on a copy of this data directory (the same \
                                         holder id): a copy must not be started beside its \
                                         original"
                                    } else {
                                        ""
                                    }
                                )));
                            }
                        }
                    }
                    (
                        Record {
                            holder: holder.clone(),
                            start: start.clone(),
                            generation,
                            renewals: 0,
                            lease_secs: duration.as_secs(),
                            released: false,
                        },
                        PutCondition::IfMatch(tag),
                    )
                }
            };
            // Recorded here before the record is written: a start that finds the
            // record ahead of this mark knows this directory fell behind.
            run::write_async(dir, mark(&start, &boot, &record)).await?;
            let sent = Instant::now();
            match store.put_if(&key, record.bytes(), cond).await {
                Ok(tag) => {
                    tracing::info!(generation = record.generation, "backend lease acquired");
                    let lease = Arc::new(Self {
                        store: store.clone(),
                        key,
                        duration,
                        held: Mutex::new(Held {
                            record,
                            tag,
                            valid_until: sent + validity(duration),
                        }),
                        lost: AtomicBool::new(false),
                        halted: AtomicBool::new(false),
                        renewing: tokio::sync::Mutex::new(()),
                        dir: dir.to_path_buf(),
                        start: start.clone(),
                        boot: boot.clone(),
                    });
                    tokio::spawn(renew_loop(Arc::downgrade(&lease)));
                    return Ok(lease);
                }
                Err(StoreError::PreconditionFailed { .. }) => continue,
                Err(e) => return Err(unsupported(e)),
            }
        }
    }

    /// `Ok` while this proxy may write: the lease is held and was renewed in time.
    pub fn check(&self) -> StoreResult<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(StoreError::Fenced(
                "another proxy took over this volume's backend lease; this one stopped \
                 writing (restart it once the other one is stopped)"
                    .into(),
            ));
        }
        let valid_until = self.lock().valid_until;
        if Instant::now() >= valid_until {
            return Err(StoreError::Fenced(
                "the backend lease could not be renewed in time; writes are refused until \
                 it is"
                    .into(),
            ));
        }
        Ok(())
    }

    /// As [`Lease::check`], but an expired lease (not a lost one) is renewed first:
    /// writes resume as soon as the backend answers again, not at the renewal
    /// task's next tick. One renewal (two if the first found one of our own late
    /// renewals and adopted it); concurrent callers share it.
    pub async fn ensure(&self) -> StoreResult<()> {
        if self.check().is_ok() || self.lost.load(Ordering::SeqCst) {
            return self.check();
        }
        let _one = self.renewing.lock().await;
        for _ in 0..2 {
            if self.check().is_ok() || self.lost.load(Ordering::SeqCst) {
                break;
            }
            let before = self.lock().tag.clone();
            match self.renew_locked(false).await {
                Ok(()) => break,
                // Adopted our own late renewal: its tag is the one to renew on.
                Err(StoreError::Unavailable(_)) if self.lock().tag != before => continue,
                Err(_) => break,
            }
        }
        self.check()
    }

    /// Until when this proxy considers the lease valid (moves on at every
    /// renewal; in the past once it lapsed).
    pub fn valid_until(&self) -> Instant {
        self.lock().valid_until
    }

    /// The lease's duration `D`.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Stops the renewal task, as the death of the process would (tests).
    #[cfg(test)]
    pub(crate) fn halt_renewals(&self) {
        self.halted.store(true, Ordering::SeqCst);
    }

    /// The lease's generation (incremented at every take-over).
    pub fn generation(&self) -> u64 {
        self.lock().record.generation
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One renewal (or, with `release`, the release): a conditional PUT on the tag
    /// last written, after `lease.run` records it.
    async fn renew(&self, release: bool) -> StoreResult<()> {
        let _one = self.renewing.lock().await;
        self.renew_locked(release).await
    }

    /// [`Lease::renew`], `renewing` held by the caller.
    async fn renew_locked(&self, release: bool) -> StoreResult<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(StoreError::Fenced("lease lost".into()));
        }
        let (mut record, tag) = {
            let h = self.lock();
            (h.record.clone(), h.tag.clone())
        };
        record.renewals += 1;
        record.released = release;
        run::write_async(&self.dir, mark(&self.start, &self.boot, &record))
            .await
            .map_err(|e| StoreError::Unavailable(format!("lease: {e}")))?;
        let sent = Instant::now();
        match self
            .store
            .put_if(&self.key, record.bytes(), PutCondition::IfMatch(tag))
            .await
        {
            Ok(tag) => {
                let mut h = self.lock();
                h.record = record;
                h.tag = tag;
                h.valid_until = if release {
                    sent
                } else {
                    sent + validity(self.duration)
                };
                Ok(())
            }
            Err(StoreError::PreconditionFailed { key }) => {
                // An earlier renewal that failed on our side (a timeout, or the SDK's
                // own retry of this PUT) may have landed: then the object is still
                // ours, only its tag moved. Only a record with another holder or
                // generation means a take-over.
                match self.adopt_own_version(&record).await {
                    Ok(true) => Err(StoreError::Unavailable(format!(
                        "{key}: an earlier renewal landed late; retrying on its version"
                    ))),
                    Ok(false) => {
                        self.lost.store(true, Ordering::SeqCst);
                        tracing::error!(
                            "the backend lease ({key}) was taken over by another proxy: this \
                             proxy stops writing now"
                        );
                        Err(StoreError::Fenced("lease lost".into()))
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// After a refused renewal: reads the lease object and, if it still names this
    /// holder and generation (one of our own renewals landed after we stopped
    /// waiting for it), takes its tag as the one to renew on. The validity is not
    /// extended: only the next successful renewal does that. `Ok(false)`: another
    /// proxy's record (or none) is there.
    async fn adopt_own_version(&self, ours: &Record) -> StoreResult<bool> {
        let Some((b, tag)) = self
            .store
            .get_tagged(&self.key, SizeBound::AtMost(4096))
            .await?
        else {
            return Ok(false);
        };
        match Record::parse(&b) {
            Some(r)
                if r.holder == ours.holder && r.generation == ours.generation && !r.released =>
            {
                let mut h = self.lock();
                h.record = r;
                h.tag = tag;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Gives the lease up (graceful stop): the next proxy need not wait.
    pub async fn release(&self) {
        if let Err(e) = self.renew(true).await {
            tracing::warn!("could not release the backend lease: {e}");
        }
    }
}

async fn renew_loop(lease: Weak<Lease>) {
    let mut failing = false;
    loop {
        let every = match lease.upgrade() {
            // After a failed renewal (backend down), retry every second so that
            // writes resume as soon as the backend is back.
            Some(_) if failing => Duration::from_secs(1),
            Some(l) => l.duration / 4,
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(l) = lease.upgrade() else { return };
        if l.lost.load(Ordering::SeqCst) || l.lock().record.released {
            return;
        }
        let renewed = {
            // Halted is checked under the renewal lock, so that a test that halts
            // the renewals and then takes the lock sees none after it.
            let _one = l.renewing.lock().await;
            if l.halted.load(Ordering::SeqCst) {
                return;
            }
            l.renew_locked(false).await
        };
        match renewed {
            Ok(()) => failing = false,
            Err(StoreError::Fenced(_)) => return,
            Err(e) => {
                failing = true;
                tracing::warn!("backend lease renewal failed (retrying): {e}");
            }
        }
    }
}

/// A store whose writes need the lease (see [`Lease::check`]); reads pass.
pub type LeasedStore = FencedStore<Lease>;

/// A write runs while the lease holds: it starts only if the lease is valid
/// ([`Lease::ensure`]), and is abandoned — dropped, its back-end retries with
/// it — as soon as the lease is lost or lapses, which is at least the safety
/// margin (`D/3`) before another proxy may take over. A write that takes long
/// (a large checkpoint on a slow link) goes on as long as the renewals
/// succeed. The lease is looked at whenever its validity would end and at
/// least every `D/8` (a take-over is noticed at a renewal).
#[async_trait]
impl WriteFence for Lease {
    async fn admit(&self) -> StoreResult<()> {
        self.ensure().await
    }
    fn recheck_at(&self) -> Instant {
        self.valid_until().min(Instant::now() + self.duration() / 8)
    }
    fn check(&self) -> StoreResult<()> {
        Lease::check(self)
    }
}

/// Whether a proxy holding `lease` (`None`: no lease is used) may write now:
/// the error says why not (the lease was lost to another proxy, or lapsed).
/// What `/health` answers.
pub fn writable(lease: Option<&Lease>) -> StoreResult<()> {
    lease.map_or(Ok(()), Lease::check)
}

/// Acquires the lease of `backend`'s prefix for the data directory `data_dir`
/// (unless `[backend] lease_secs = 0`) and wraps `store` so that its writes are
/// fenced by it.
pub async fn guard(
    backend: &BackendConfig,
    data_dir: &Path,
    store: Arc<dyn BlockStore>,
) -> Result<(Arc<dyn BlockStore>, Option<Arc<Lease>>), VolumeError> {
    if backend.lease_secs == 0 {
        return Ok((store, None));
    }
    let lease = Lease::acquire(
        store.clone(),
        &backend.prefix,
        data_dir,
        Duration::from_secs(backend.lease_secs),
    )
    .await?;
    Ok((
        Arc::new(LeasedStore::new(store, lease.clone())),
        Some(lease),
    ))
}

#[cfg(test)]
mod tests;
