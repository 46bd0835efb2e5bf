//! The object layer: buckets and objects on top of an ORAM engine.
//!
//! An object is split into the engine's fixed-size blocks; its index record (size,
//! ETag, metadata, the runs of blocks holding it) lives in trusted local state behind
//! [`oram_state::KvState`] and never reaches the backend in the clear. Nothing here
//! knows HTTP: the S3 and Swift front-ends translate their protocols onto this API.
//!
//! Guarantees:
//! - **Streaming**: PUT and GET move at most `batch_blocks` blocks at a time, so
//!   memory per transfer stays near `batch_blocks × block_size` whatever the size of
//!   the object. A range read touches only the blocks of the range.
//! - **Atomic replacement**: an object's new blocks are written first; the index
//!   switches to them in one step; the old blocks are freed only once that step is
//!   durable and no reader of the old version is left. A failed or aborted upload
//!   frees the blocks it took and leaves the old object as it was.
//! - **Ownership**: every bucket belongs to the account that created it; any other
//!   account gets [`ObjectError::AccessDenied`].
//! - **Capacity**: when the ORAM has too few free blocks a write fails with
//!   [`ObjectError::Full`] before anything changes.
//! - **Durability without blocking**: every change is made under the metadata lock,
//!   handed to the index store ([`oram_state::KvState::commit`]), and awaited with
//!   the lock released; the answer follows durability. If the index store fails,
//!   the layer refuses every further write ([`ObjectError::IndexFailed`]) until the
//!   process restarts.
//!
//! An object record ([`records`]) holds size, ETag, metadata, last-modified, a
//! random version id and a list of **segments**, each a byte length and the runs
//! of blocks holding it. A single PUT makes one segment; a completed multipart
//! upload makes one segment per part, so completion moves no data even when
//! parts are not block-aligned. A range read maps offsets to (segment, block,
//! offset) and fetches only those blocks. Blocks come from a first-fit
//! allocator, rebuilt from the index at every start, so a crash mid-upload
//! leaves no visible object and no leaked block.
//!
//! **The commit window.** Between a change and its durability other requests
//! already see it (a GET may read the new object, a listing may show it, another
//! writer may replace it again); the writer itself has no answer yet. If the
//! commit then fails, the layer keeps serving reads from memory and refuses
//! writes; the restart reloads the last durable index, so a change seen during
//! the failed window disappears, as if the crash had happened just before it.
//! Nothing acknowledged is lost. Blocks of a replaced or deleted version are
//! freed only after its commit resolved, so a failed commit never frees blocks
//! the durable index still uses.
//!
//! **Multipart**: a part number uploaded twice keeps the upload that finished
//! last; a completion that lists a part number twice uses its last entry;
//! completing an upload again, with the same parts, while the object it made is
//! current answers that object again, as S3 does (remembered in memory for the
//! last 1024 completions).
//!
//! Files: `error.rs` (errors and their classes), `precondition.rs` (RFC 7232),
//! `bucket.rs` (buckets, containers, accounts), `write.rs` (PUT, copy, delete),
//! `read.rs` (pins and streaming reads), `multipart.rs`, `lifecycle.rs` (bucket
//! lifecycle rules and the sweep of stale uploads), `expiration.rs` (lifecycle
//! expiration of versions and delete markers), `versions.rs` (S3
//! versioning: noncurrent versions and delete markers), `tagging.rs` (object and
//! bucket tags), `lock.rs` (S3 object lock: retention and legal hold),
//! `listing.rs`, `fsck.rs`.

pub mod alloc;
mod bucket;
mod error;
mod expiration;
mod fsck;
mod lifecycle;
mod listing;
pub mod lock;
mod multipart;
mod precondition;
mod read;
pub mod records;
mod tagging;
mod versions;
mod write;

use std::collections::{HashMap, VecDeque};
use std::pin::Pin as StdPin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::Stream;
use oram_engine::Oram;
use oram_state::{KvState, StateError};
use rand::RngCore;

use alloc::{Allocator, Run};
pub use error::{ErrorClass, ObjectError, Result};
pub use fsck::{CheckPhase, LayerCheck};
pub use lifecycle::{abort_days, MAX_LIFECYCLE_RULES, MAX_NEWER_NONCURRENT, MAX_RULE_ID};
pub use listing::{ListParams, ListResult, UploadInfo, VersionEntry, VersionList, VersionParams};
pub use precondition::{Dialect, EntityTag, EtagList, Preconditions, Validators};
pub use read::OpenObject;
use records::*;
pub use records::{
    AccountRecord, BucketRecord, DefaultRetention, LifecycleRule, LockRequest, ObjectLockConfig,
    ObjectMeta, ObjectRecord, PartRecord, PublicAccessBlock, Retention, RetentionMode, Segment,
    UploadRecord, Versioning,
};
pub use tagging::{tag_set, Tags, MAX_BUCKET_TAGS, MAX_OBJECT_TAGS, MAX_TAG_KEY, MAX_TAG_VALUE};
pub use versions::Deleted;
pub use write::{CopyOptions, PartOptions, PutMode, PutOptions};

/// Largest object a single PUT may store (S3's limit).
pub const MAX_PUT_SIZE: u64 = 5 << 30;
/// Largest multipart object: 10 000 parts of 5 GiB.
pub const MAX_PARTS: u32 = 10_000;
/// Smallest size of every part of a multipart upload except the last (S3's limit).
pub const MIN_PART_SIZE: u64 = 5 << 20;

/// A stream of bytes with errors as `ObjectError`.
pub type ByteStream = StdPin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// Tuning of the object layer.
#[derive(Clone, Debug)]
pub struct LayerConfig {
    /// Blocks moved per engine call while streaming (bounds memory per transfer).
    pub batch_blocks: usize,
    /// Minimum size of non-final multipart parts.
    pub min_part_size: u64,
}

impl Default for LayerConfig {
    fn default() -> Self {
        Self {
            batch_blocks: 64,
            min_part_size: MIN_PART_SIZE,
        }
    }
}

/// Usage figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Logical blocks in the ORAM.
    pub capacity_blocks: u64,
    /// Blocks free.
    pub free_blocks: u64,
    /// Bytes per block.
    pub block_size: usize,
}

impl Usage {
    /// The capacity in bytes of object data.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_blocks.saturating_mul(self.block_size as u64)
    }

    /// The free space in bytes of object data (an object of this many bytes
    /// fits; a multipart upload's parts each round up to whole blocks).
    pub fn free_bytes(&self) -> u64 {
        self.free_blocks.saturating_mul(self.block_size as u64)
    }
}

/// The object layer. Cheap to clone.
#[derive(Clone)]
pub struct ObjectLayer {
    shared: Arc<Shared>,
}

struct Shared {
    oram: Arc<dyn Oram>,
    cfg: LayerConfig,
    /// The index, the allocator and the read pins: every read or change of any of
    /// them holds this lock, so an index change and the allocation it implies are
    /// one step for every other request. It is the layer's only lock (nothing to
    /// order it against) and a std mutex because every critical section is short
    /// in-memory work: it is never held across an engine call, the wait for a
    /// commit's durability, or any other `.await`.
    meta: Mutex<Meta>,
    /// Set once an index commit failed: the index store is fail-stop, so every
    /// later write is refused until the process restarts.
    failed: AtomicBool,
}

struct Meta {
    kv: Box<dyn KvState>,
    alloc: Allocator,
    /// Readers per object version id.
    pins: HashMap<u64, usize>,
    /// Blocks of replaced versions still being read.
    deferred: HashMap<u64, Vec<Run>>,
    /// Completed multipart uploads by id (in memory only; see
    /// [`ObjectLayer::complete_multipart`]), and their order of completion.
    completed: HashMap<String, multipart::Completed>,
    completed_order: VecDeque<String>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Seconds since the Unix epoch (the resolution of expiry times).
fn now_secs() -> i64 {
    now_ms() / 1000
}

fn random_id() -> u64 {
    rand::thread_rng().next_u64()
}

fn corrupt(what: &str, e: String) -> ObjectError {
    ObjectError::State(StateError::Corrupt(format!("{what}: {e}")))
}

/// Whether `name` is a valid S3 bucket name (3–63 of `a-z0-9.-`, starting and ending
/// with a letter or digit, no `..`, not an IPv4 address).
pub fn valid_bucket_name(name: &str) -> bool {
    bucket_name_problem(name).is_none()
}

/// The prefix of the bucket records' keys in the object index (what
/// [`invisible_to_s3`] reads when no layer is open).
pub const BUCKET_RECORDS: &[u8] = b"b/";

/// The bucket records among `values` (the index's values under
/// [`BUCKET_RECORDS`]) whose names S3 cannot address, with the reason
/// ([`bucket_name_problem`]).
pub fn invisible_to_s3<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<(BucketRecord, &'static str)>> {
    let mut out = Vec::new();
    for v in values {
        let b: BucketRecord = records::decode(v).map_err(|e| corrupt("bucket", e))?;
        if let Some(why) = bucket_name_problem(&b.name) {
            out.push((b, why));
        }
    }
    Ok(out)
}

/// The prefixes of the object and multipart-upload records' keys in the object
/// index (what [`blocks_in_use`] reads when no layer is open).
pub const BLOCK_RECORDS: [&[u8]; 2] = [b"o/", b"u/"];

/// Blocks the records among `values` hold (the index's values under
/// [`BLOCK_RECORDS`]: objects and the parts of unfinished uploads) — what an
/// open layer's [`ObjectLayer::usage`] counts as used, for `oram-proxy stats`
/// on a stopped proxy.
pub fn blocks_in_use<'a>(
    objects: impl IntoIterator<Item = &'a [u8]>,
    uploads: impl IntoIterator<Item = &'a [u8]>,
) -> Result<u64> {
    let runs = |segments: &[records::Segment]| -> u64 {
        segments
            .iter()
            .flat_map(|s| s.runs.iter())
            .fold(0u64, |n, r| n.saturating_add(r.len))
    };
    let mut used = 0u64;
    for v in objects {
        let rec: ObjectRecord = records::decode(v).map_err(|e| corrupt("object record", e))?;
        used = used.saturating_add(runs(&rec.segments));
    }
    for v in uploads {
        let u: records::UploadRecord =
            records::decode(v).map_err(|e| corrupt("upload record", e))?;
        let segments: Vec<_> = u.parts.into_values().map(|p| p.segment).collect();
        used = used.saturating_add(runs(&segments));
    }
    Ok(used)
}

/// Why `name` is not a valid S3 bucket name (the first rule it breaks), or
/// `None` when it is one: what S3 clients are told of a Swift container whose
/// name they cannot address (`oram-proxy stats`).
pub fn bucket_name_problem(name: &str) -> Option<&'static str> {
    let b = name.as_bytes();
    if b.len() < 3 {
        return Some("shorter than 3 bytes");
    }
    if b.len() > 63 {
        return Some("longer than 63 bytes");
    }
    if b.iter().any(u8::is_ascii_uppercase) {
        return Some("uppercase letters");
    }
    if b.contains(&b'_') {
        return Some("an underscore");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
    {
        return Some("characters other than a-z, 0-9, '.' and '-'");
    }
    if !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return Some("does not begin and end with a letter or digit");
    }
    if name.contains("..") {
        return Some("two dots in a row");
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return Some("an IPv4 address");
    }
    None
}

/// Whether `name` is a valid Swift container name: 1–256 bytes of UTF-8 without
/// `/` or NUL. Every valid S3 bucket name is one. Every account has its own
/// namespace of buckets and containers; S3's `CreateBucket` keeps bucket names
/// global by refusing a name another account uses.
pub fn valid_container_name(name: &str) -> bool {
    (1..=256).contains(&name.len()) && !name.contains(['/', '\0'])
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > 1024 {
        return Err(ObjectError::InvalidKey(
            "length must be 1..=1024 bytes".into(),
        ));
    }
    if key.contains('\0') {
        return Err(ObjectError::InvalidKey("NUL not allowed".into()));
    }
    Ok(())
}

impl Meta {
    fn bucket(&self, owner: &str, name: &str) -> Result<Option<BucketRecord>> {
        self.kv
            .get(&bucket_key(owner, name))
            .map(|v| decode(&v).map_err(|e| corrupt("bucket record", e)))
            .transpose()
    }

    /// The bucket `name` of account `owner` (every account has its own namespace).
    fn owned_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        self.bucket(owner, name)?
            .ok_or_else(|| ObjectError::NoSuchBucket(name.into()))
    }

    /// Whether any account has a bucket called `name`.
    fn name_taken(&self, name: &str) -> bool {
        let base = name_base(name);
        !self
            .kv
            .range(&base, true, prefix_end(&base).as_deref(), 1)
            .is_empty()
    }

    /// The stored record of `bucket/key`, expired or not.
    fn stored_object(&self, owner: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.kv
            .get(&object_key(owner, bucket, key))
            .map(|v| decode(&v).map_err(|e| corrupt("object record", e)))
            .transpose()
    }

    /// The object `bucket/key` unless it has expired.
    fn object(&self, owner: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let now = now_secs();
        Ok(self
            .stored_object(owner, bucket, key)?
            .filter(|r| !r.expired(now)))
    }

    /// Stores `rec` as `bucket/key` (with its expiry entry), replacing `old` (and
    /// its expiry entry).
    fn put_object_record(
        &mut self,
        (owner, bucket, key): (&str, &str, &str),
        rec: &ObjectRecord,
        old: Option<&ObjectRecord>,
    ) {
        if let Some(old) = old.filter(|o| o.delete_at > 0) {
            self.kv
                .delete(&expiry_key(old.delete_at, owner, bucket, key));
        }
        self.kv.put(&object_key(owner, bucket, key), encode(rec));
        if rec.delete_at > 0 {
            self.kv
                .put(&expiry_key(rec.delete_at, owner, bucket, key), Vec::new());
        }
    }

    /// Removes `bucket/key` (stored as `old`) and its expiry entry.
    fn delete_object_record(
        &mut self,
        (owner, bucket, key): (&str, &str, &str),
        old: &ObjectRecord,
    ) {
        if old.delete_at > 0 {
            self.kv
                .delete(&expiry_key(old.delete_at, owner, bucket, key));
        }
        self.kv.delete(&object_key(owner, bucket, key));
    }

    fn upload(&self, owner: &str, upload_id: &str) -> Result<UploadRecord> {
        let rec: UploadRecord = self
            .kv
            .get(&upload_key(upload_id))
            .map(|v| decode(&v).map_err(|e| corrupt("upload record", e)))
            .transpose()?
            .ok_or_else(|| ObjectError::NoSuchUpload(upload_id.into()))?;
        if rec.owner != owner {
            return Err(ObjectError::AccessDenied);
        }
        Ok(rec)
    }

    /// Frees the blocks of a replaced or deleted version, or defers it while read.
    /// Call only once the index change that dropped the version is durable.
    fn release(&mut self, id: u64, segments: &[Segment]) {
        let runs: Vec<Run> = segments
            .iter()
            .flat_map(|s| s.runs.iter().copied())
            .collect();
        if self.pins.contains_key(&id) {
            self.deferred.entry(id).or_default().extend(runs);
        } else {
            self.alloc.free(&runs);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Meta> {
        // Every critical section leaves Meta consistent before it can panic.
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses writes once the index store has failed.
    fn writable(&self) -> Result<()> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(ObjectError::IndexFailed(
                "an earlier index commit failed; restart the proxy".into(),
            ));
        }
        Ok(())
    }

    /// Changes the index durably: runs `change` under the lock, hands the index's
    /// changes to the store, releases the lock and waits until they are durable.
    ///
    /// `change` must check everything before it changes the index (there is no
    /// undo): when it returns an error it has changed nothing in the index (it may
    /// free blocks it owns). Between the change and its durability other requests
    /// already see it; if the commit fails the layer refuses every later write and
    /// the process must restart (see the crate docs, "The commit window").
    async fn commit<T>(&self, change: impl FnOnce(&mut Meta) -> Result<T>) -> Result<T> {
        let (out, durable) = {
            let mut m = self.lock();
            self.writable()?;
            let out = change(&mut m)?;
            (out, m.kv.commit())
        };
        match durable.await {
            Ok(()) => Ok(out),
            Err(e) => {
                self.failed.store(true, Ordering::SeqCst);
                tracing::error!("index commit failed; refusing writes until restart: {e}");
                Err(ObjectError::IndexFailed(e.to_string()))
            }
        }
    }
}

impl ObjectLayer {
    /// An object layer storing data in `oram` and its index in `kv`.
    ///
    /// The allocator is rebuilt from the index, so `kv` may hold an existing index.
    ///
    /// An index of the layout before per-account namespaces is rewritten in
    /// memory ([`records::migrate`]); the rewrite becomes durable with the first
    /// commit, atomically with it.
    pub fn new(oram: Arc<dyn Oram>, mut kv: Box<dyn KvState>, cfg: LayerConfig) -> Result<Self> {
        let moved = records::migrate(kv.as_mut())?;
        if moved > 0 {
            tracing::info!(
                buckets = moved,
                "index moved to per-account bucket namespaces"
            );
        }
        let capacity = oram.capacity();
        let mut alloc = Allocator::new(capacity);
        let mut reserve = |segments: &[Segment]| -> Result<()> {
            for run in segments.iter().flat_map(|s| s.runs.iter()) {
                if run
                    .start
                    .checked_add(run.len)
                    .is_none_or(|end| end > capacity)
                {
                    return Err(corrupt("index", format!("run {run:?} beyond the capacity")));
                }
                if !alloc.reserve(*run) {
                    return Err(corrupt("index", format!("blocks {run:?} claimed twice")));
                }
            }
            Ok(())
        };
        scan_prefix(kv.as_ref(), BLOCK_RECORDS[0], |_, v| {
            let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
            reserve(&rec.segments)
        })?;
        scan_prefix(kv.as_ref(), BLOCK_RECORDS[1], |_, v| {
            let u: UploadRecord = decode(v).map_err(|e| corrupt("upload record", e))?;
            let segments: Vec<Segment> = u.parts.into_values().map(|p| p.segment).collect();
            reserve(&segments)
        })?;
        Ok(Self {
            shared: Arc::new(Shared {
                oram,
                cfg,
                meta: Mutex::new(Meta {
                    kv,
                    alloc,
                    pins: HashMap::new(),
                    deferred: HashMap::new(),
                    completed: HashMap::new(),
                    completed_order: VecDeque::new(),
                }),
                failed: AtomicBool::new(false),
            }),
        })
    }

    /// Buckets and objects in the index (every version and delete marker of a
    /// versioned bucket counts as an object).
    pub fn index_counts(&self) -> (u64, u64) {
        let m = self.shared.lock();
        let count = |prefix: &[u8]| {
            let mut n = 0u64;
            // Counting cannot fail: the closure never errs.
            let _ = scan_prefix(m.kv.as_ref(), prefix, |_, _| {
                n += 1;
                Ok(())
            });
            n
        };
        (count(b"b/"), count(b"o/"))
    }

    /// Capacity and free space.
    pub fn usage(&self) -> Usage {
        let m = self.shared.lock();
        Usage {
            capacity_blocks: m.alloc.capacity(),
            free_blocks: m.alloc.free_blocks(),
            block_size: self.shared.oram.block_size(),
        }
    }

    /// Extends the free space to `capacity` blocks after the engine grew
    /// ([`oram_engine::Oram::grow`]): writes may take the new blocks at once.
    /// Nothing is written: the free space is rebuilt from the index and the
    /// engine's capacity at every open, so the engine's own durable record of
    /// its growth is the layer's too. Refused if the engine is smaller; a
    /// capacity at most the current one changes nothing.
    pub fn grow_to(&self, capacity: u64) -> Result<()> {
        let engine = self.shared.oram.capacity();
        if capacity > engine {
            return Err(ObjectError::State(StateError::Corrupt(format!(
                "the object layer cannot take {capacity} blocks: the engine has {engine}"
            ))));
        }
        self.shared.lock().alloc.grow(capacity);
        Ok(())
    }

    /// Whether any account has a bucket called `name` (S3 answers `AccessDenied`
    /// for a bucket name another account uses, as bucket names are global there).
    pub fn bucket_name_in_use(&self, name: &str) -> bool {
        self.shared.lock().name_taken(name)
    }

    /// Whether the layer still accepts writes (false once an index commit failed).
    pub fn is_writable(&self) -> bool {
        self.shared.writable().is_ok()
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Arc<dyn Oram> {
        &self.shared.oram
    }
}

#[cfg(test)]
mod grow_tests;
#[cfg(test)]
mod tests;
