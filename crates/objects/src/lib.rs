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
//!   switches to them in one step; the old blocks are freed only once no reader of
//!   the old version is left. A failed or aborted upload frees the blocks it took and
//!   leaves the old object as it was.
//! - **Ownership**: every bucket belongs to the account that created it; any other
//!   account gets [`ObjectError::AccessDenied`].
//! - **Capacity**: when the ORAM has too few free blocks a write fails with
//!   [`ObjectError::Full`] before anything changes.

pub mod alloc;
mod fsck;
mod listing;
pub mod records;

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin as StdPin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use oram_engine::{Op, Oram, OramError};
use oram_state::{KvState, StateError};
use rand::RngCore;

use alloc::{extend_runs, nth_block, Allocator, Run};
pub use fsck::{CheckPhase, LayerCheck};
pub use listing::{ListParams, ListResult, UploadInfo};
use records::*;
pub use records::{
    AccountRecord, BucketRecord, ObjectMeta, ObjectRecord, PartRecord, Segment, UploadRecord,
};

/// Largest object a single PUT may store (S3's limit).
pub const MAX_PUT_SIZE: u64 = 5 << 30;
/// Largest multipart object: 10 000 parts of 5 GiB.
pub const MAX_PARTS: u32 = 10_000;
/// Smallest size of every part of a multipart upload except the last (S3's limit).
pub const MIN_PART_SIZE: u64 = 5 << 20;

/// Errors of the object layer.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// No such bucket.
    #[error("no such bucket {0}")]
    NoSuchBucket(String),
    /// No such object.
    #[error("no such key {0}")]
    NoSuchKey(String),
    /// No such multipart upload.
    #[error("no such upload {0}")]
    NoSuchUpload(String),
    /// The bucket exists and belongs to another account.
    #[error("bucket {0} already exists")]
    BucketAlreadyExists(String),
    /// The caller already owns this bucket.
    #[error("bucket {0} already owned by you")]
    BucketAlreadyOwnedByYou(String),
    /// The bucket still holds objects.
    #[error("bucket {0} not empty")]
    BucketNotEmpty(String),
    /// The bucket belongs to another account.
    #[error("access denied")]
    AccessDenied,
    /// Not a valid bucket name.
    #[error("invalid bucket name {0:?}")]
    InvalidBucketName(String),
    /// Not a valid object key.
    #[error("invalid object key: {0}")]
    InvalidKey(String),
    /// The object would be larger than allowed.
    #[error("object larger than {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// A part of a multipart upload, other than the last, is below the minimum size.
    #[error("part {part} is {size} bytes, below the minimum of {min}")]
    PartTooSmall {
        /// Part number.
        part: u32,
        /// Its size.
        size: u64,
        /// The minimum.
        min: u64,
    },
    /// A part listed for completion is missing or has another ETag.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// Parts listed for completion are not in ascending order.
    #[error("parts not in ascending order")]
    InvalidPartOrder,
    /// A part number outside 1..=10000.
    #[error("invalid part number {0}")]
    InvalidPartNumber(u32),
    /// The ORAM has too few free blocks for this write; nothing was changed.
    #[error("storage full: {needed} blocks needed, {free} free")]
    Full {
        /// Blocks the write needed beyond what it had.
        needed: u64,
        /// Blocks free.
        free: u64,
    },
    /// The client's body stream failed (connection lost, bad signature chunk).
    #[error("request body: {0}")]
    Body(String),
    /// A byte range that is empty or reaches past the end of the object.
    #[error("range not satisfiable for an object of {size} bytes")]
    InvalidRange {
        /// The object's size.
        size: u64,
    },
    /// A create-only write found the object already there; nothing was changed.
    #[error("object {0} already exists")]
    AlreadyExists(String),
    /// The object changed between the check of a condition and the operation.
    #[error("object {0} changed during the operation")]
    Conflict(String),
    /// The body does not match the Content-MD5 the client sent.
    #[error("body does not match its Content-MD5")]
    BadDigest,
    /// The body was not as long as announced.
    #[error("body of {got} bytes, {expected} announced")]
    IncompleteBody {
        /// Bytes received.
        got: u64,
        /// Bytes announced.
        expected: u64,
    },
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] OramError),
    /// The trusted state failed or holds something unreadable.
    #[error(transparent)]
    State(#[from] StateError),
}

/// Result type of the object layer.
pub type Result<T, E = ObjectError> = std::result::Result<T, E>;

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

/// The object layer. Cheap to clone.
#[derive(Clone)]
pub struct ObjectLayer {
    shared: Arc<Shared>,
}

struct Shared {
    oram: Arc<dyn Oram>,
    cfg: LayerConfig,
    meta: Mutex<Meta>,
}

struct Meta {
    kv: Box<dyn KvState>,
    alloc: Allocator,
    /// Readers per object version id.
    pins: HashMap<u64, usize>,
    /// Blocks of replaced versions still being read.
    deferred: HashMap<u64, Vec<Run>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..")
        && name.parse::<std::net::Ipv4Addr>().is_err()
}

/// Whether `name` is a valid Swift container name: 1–256 bytes of UTF-8 without
/// `/` or NUL. Every valid S3 bucket name is one. Container names share the bucket
/// namespace (global, as in S3).
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
    fn bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        self.kv
            .get(&bucket_key(name))
            .map(|v| decode(&v).map_err(|e| corrupt("bucket record", e)))
            .transpose()
    }

    /// The bucket, if it exists and `owner` owns it.
    fn owned_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        match self.bucket(name)? {
            None => Err(ObjectError::NoSuchBucket(name.into())),
            Some(b) if b.owner != owner => Err(ObjectError::AccessDenied),
            Some(b) => Ok(b),
        }
    }

    fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.kv
            .get(&object_key(bucket, key))
            .map(|v| decode(&v).map_err(|e| corrupt("object record", e)))
            .transpose()
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

/// Keeps an object version's blocks from being freed while it is read.
struct ReadPin {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        let mut m = self.shared.lock();
        let n = m.pins.get_mut(&self.id).expect("pinned");
        *n -= 1;
        if *n == 0 {
            m.pins.remove(&self.id);
            if let Some(runs) = m.deferred.remove(&self.id) {
                m.alloc.free(&runs);
            }
        }
    }
}

impl Shared {
    /// Runs `f` under the metadata lock, hands the index changes it made to the
    /// durable store, releases the lock, and returns `f`'s value once the changes
    /// are durable (concurrent callers share one fsync; no fsync under the lock).
    /// If `f` fails it must not have changed the index.
    async fn update<T>(&self, f: impl FnOnce(&mut Meta) -> Result<T>) -> Result<T> {
        let (value, done) = {
            let mut m = self.lock();
            let value = f(&mut m)?;
            (value, m.kv.commit())
        };
        done.await?;
        Ok(value)
    }

    fn lock(&self) -> MutexGuard<'_, Meta> {
        // Every critical section leaves Meta consistent before it can panic.
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pin(self: &Arc<Self>, m: &mut Meta, id: u64) -> ReadPin {
        *m.pins.entry(id).or_insert(0) += 1;
        ReadPin {
            shared: self.clone(),
            id,
        }
    }
}

/// An object opened for reading: its record, with its blocks pinned.
pub struct OpenObject {
    rec: ObjectRecord,
    pin: ReadPin,
}

impl OpenObject {
    /// The record of the version opened.
    pub fn record(&self) -> &ObjectRecord {
        &self.rec
    }
}

/// Writes a stream into freshly allocated blocks. Dropped before `finish`, it frees them.
struct BlockWriter {
    shared: Arc<Shared>,
    runs: Vec<Run>,
    buf: BytesMut,
    len: u64,
    max: u64,
    md5: Md5,
    finished: bool,
}

impl BlockWriter {
    fn new(shared: Arc<Shared>, max: u64) -> Self {
        Self {
            shared,
            runs: Vec::new(),
            buf: BytesMut::new(),
            len: 0,
            max,
            md5: Md5::new(),
            finished: false,
        }
    }

    fn batch_bytes(&self) -> usize {
        self.shared.cfg.batch_blocks * self.shared.oram.block_size()
    }

    async fn write(&mut self, data: Bytes) -> Result<()> {
        self.len += data.len() as u64;
        if self.len > self.max {
            return Err(ObjectError::TooLarge { max: self.max });
        }
        self.md5.update(&data);
        self.buf.extend_from_slice(&data);
        while self.buf.len() >= self.batch_bytes() {
            let chunk = self.buf.split_to(self.batch_bytes()).freeze();
            self.store(chunk).await?;
        }
        Ok(())
    }

    async fn store(&mut self, chunk: Bytes) -> Result<()> {
        let bs = self.shared.oram.block_size();
        let n = chunk.len().div_ceil(bs) as u64;
        let runs = {
            let mut m = self.shared.lock();
            let free = m.alloc.free_blocks();
            m.alloc
                .alloc(n)
                .ok_or(ObjectError::Full { needed: n, free })?
        };
        let first = self.runs.iter().map(|r| r.len).sum::<u64>();
        extend_runs(&mut self.runs, runs);
        let mut ops = Vec::with_capacity(n as usize);
        for i in 0..n {
            let block = nth_block(&self.runs, first + i).expect("just allocated");
            let piece = chunk.slice(i as usize * bs..((i as usize + 1) * bs).min(chunk.len()));
            let data = if piece.len() == bs {
                piece
            } else {
                let mut v = piece.to_vec();
                v.resize(bs, 0);
                Bytes::from(v)
            };
            ops.push(Op::Write(block, data));
        }
        self.shared.oram.access(ops).await?;
        Ok(())
    }

    async fn write_stream(&mut self, mut body: ByteStream) -> Result<()> {
        while let Some(chunk) = body.next().await {
            self.write(chunk?).await?;
        }
        Ok(())
    }

    /// Stores the tail; returns the segment and the MD5 of everything written.
    async fn finish(mut self) -> Result<(Segment, [u8; 16])> {
        if !self.buf.is_empty() {
            let tail = std::mem::take(&mut self.buf).freeze();
            self.store(tail).await?;
        }
        self.finished = true;
        let md5 = std::mem::take(&mut self.md5).finalize().into();
        Ok((
            Segment {
                runs: std::mem::take(&mut self.runs),
                len: self.len,
            },
            md5,
        ))
    }
}

impl Drop for BlockWriter {
    fn drop(&mut self) {
        if !self.finished && !self.runs.is_empty() {
            self.shared.lock().alloc.free(&self.runs);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sets each `(name, value)` of `updates` in `meta`; an empty value removes it.
fn merge_meta(meta: &mut BTreeMap<String, String>, updates: BTreeMap<String, String>) {
    for (k, v) in updates {
        if v.is_empty() {
            meta.remove(&k);
        } else {
            meta.insert(k, v);
        }
    }
}

fn bucket_usage(kv: &dyn KvState, bucket: &str) -> Result<(u64, u64)> {
    let (mut n, mut bytes) = (0u64, 0u64);
    scan_prefix(kv, &objects_base(bucket), |_, v| {
        let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
        n += 1;
        bytes += rec.size;
        Ok(())
    })?;
    Ok((n, bytes))
}

/// Where byte `offset` of an object is: segment index and offset within it.
fn locate(segments: &[Segment], mut offset: u64) -> Option<(usize, u64)> {
    for (i, s) in segments.iter().enumerate() {
        if offset < s.len {
            return Some((i, offset));
        }
        offset -= s.len;
    }
    None
}

impl ObjectLayer {
    /// An object layer storing data in `oram` and its index in `kv`.
    ///
    /// The allocator is rebuilt from the index, so `kv` may hold an existing index.
    pub fn new(oram: Arc<dyn Oram>, kv: Box<dyn KvState>, cfg: LayerConfig) -> Result<Self> {
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
        scan_prefix(kv.as_ref(), b"o/", |_, v| {
            let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
            reserve(&rec.segments)
        })?;
        scan_prefix(kv.as_ref(), b"u/", |_, v| {
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
                }),
            }),
        })
    }

    /// Buckets and objects in the index.
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

    /// The engine underneath.
    pub fn engine(&self) -> &Arc<dyn Oram> {
        &self.shared.oram
    }

    // ---- buckets ----

    /// Creates bucket `name` owned by `owner`.
    pub async fn create_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        if !valid_bucket_name(name) {
            return Err(ObjectError::InvalidBucketName(name.into()));
        }
        self.shared
            .update(|m| match m.bucket(name)? {
                Some(b) if b.owner == owner => {
                    Err(ObjectError::BucketAlreadyOwnedByYou(name.into()))
                }
                Some(_) => Err(ObjectError::BucketAlreadyExists(name.into())),
                None => {
                    let rec = BucketRecord {
                        name: name.into(),
                        owner: owner.into(),
                        created_ms: now_ms(),
                        meta: BTreeMap::new(),
                        meta_modified_ms: 0,
                    };
                    m.kv.put(&bucket_key(name), encode(&rec));
                    Ok(rec)
                }
            })
            .await
    }

    /// The bucket, if `owner` owns it.
    pub fn head_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        self.shared.lock().owned_bucket(owner, name)
    }

    /// The buckets `owner` owns, by name.
    pub fn list_buckets(&self, owner: &str) -> Result<Vec<BucketRecord>> {
        let m = self.shared.lock();
        let mut out = Vec::new();
        scan_prefix(m.kv.as_ref(), b"b/", |_, v| {
            let b: BucketRecord = decode(v).map_err(|e| corrupt("bucket", e))?;
            if b.owner == owner {
                out.push(b);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Deletes an empty bucket; its unfinished multipart uploads are aborted.
    pub async fn delete_bucket(&self, owner: &str, name: &str) -> Result<()> {
        let runs = self
            .shared
            .update(|m| {
                m.owned_bucket(owner, name)?;
                let base = objects_base(name);
                if !m
                    .kv
                    .range(&base, true, prefix_end(&base).as_deref(), 1)
                    .is_empty()
                {
                    return Err(ObjectError::BucketNotEmpty(name.into()));
                }
                let uploads = listing::all_uploads(m.kv.as_ref())?;
                let mut runs: Vec<Run> = Vec::new();
                for (id, u) in uploads.into_iter().filter(|(_, u)| u.bucket == name) {
                    m.kv.delete(&upload_key(&id));
                    runs.extend(u.parts.values().flat_map(|p| p.segment.runs.clone()));
                }
                m.kv.delete(&bucket_key(name));
                Ok(runs)
            })
            .await?;
        // Blocks are freed only once the index no longer refers to them durably.
        self.shared.lock().alloc.free(&runs);
        Ok(())
    }

    /// Creates container `name` (Swift naming rules, see [`valid_container_name`])
    /// owned by `owner` with metadata `meta`; if `owner` already has it, merges
    /// `meta` into its metadata instead (an empty value removes a name). Returns
    /// whether it was created.
    pub async fn create_container(
        &self,
        owner: &str,
        name: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<bool> {
        if !valid_container_name(name) {
            return Err(ObjectError::InvalidBucketName(name.into()));
        }
        self.shared
            .update(|m| match m.bucket(name)? {
                Some(b) if b.owner != owner => Err(ObjectError::BucketAlreadyExists(name.into())),
                Some(mut b) => {
                    merge_meta(&mut b.meta, meta);
                    b.meta_modified_ms = now_ms();
                    m.kv.put(&bucket_key(name), encode(&b));
                    Ok(false)
                }
                None => {
                    let mut rec = BucketRecord {
                        name: name.into(),
                        owner: owner.into(),
                        created_ms: now_ms(),
                        meta: BTreeMap::new(),
                        meta_modified_ms: 0,
                    };
                    merge_meta(&mut rec.meta, meta);
                    m.kv.put(&bucket_key(name), encode(&rec));
                    Ok(true)
                }
            })
            .await
    }

    /// Merges `meta` into the metadata of bucket `name` (an empty value removes a
    /// name); returns the updated record.
    pub async fn update_bucket_meta(
        &self,
        owner: &str,
        name: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<BucketRecord> {
        self.shared
            .update(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                merge_meta(&mut b.meta, meta);
                b.meta_modified_ms = now_ms();
                m.kv.put(&bucket_key(name), encode(&b));
                Ok(b)
            })
            .await
    }

    /// Objects in bucket `name` and their total size in bytes (a scan of the
    /// bucket's index entries).
    pub fn bucket_usage(&self, owner: &str, name: &str) -> Result<(u64, u64)> {
        let m = self.shared.lock();
        m.owned_bucket(owner, name)?;
        bucket_usage(m.kv.as_ref(), name)
    }

    /// The metadata of account `owner` (empty if none was ever set).
    pub fn account_meta(&self, owner: &str) -> Result<BTreeMap<String, String>> {
        let m = self.shared.lock();
        let rec: Option<AccountRecord> =
            m.kv.get(&account_key(owner))
                .map(|v| decode(&v).map_err(|e| corrupt("account record", e)))
                .transpose()?;
        Ok(rec.unwrap_or_default().meta)
    }

    /// Merges `meta` into the metadata of account `owner` (an empty value removes
    /// a name).
    pub async fn update_account_meta(
        &self,
        owner: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<()> {
        self.shared
            .update(|m| {
                let mut rec: AccountRecord =
                    m.kv.get(&account_key(owner))
                        .map(|v| decode(&v).map_err(|e| corrupt("account record", e)))
                        .transpose()?
                        .unwrap_or_default();
                merge_meta(&mut rec.meta, meta);
                if rec.meta.is_empty() {
                    m.kv.delete(&account_key(owner));
                } else {
                    m.kv.put(&account_key(owner), encode(&rec));
                }
                Ok(())
            })
            .await
    }

    /// Replaces the metadata of `bucket/key` without touching its data (a new
    /// last-modified time, same ETag and blocks).
    pub async fn set_object_meta(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
    ) -> Result<ObjectRecord> {
        self.shared
            .update(|m| {
                m.owned_bucket(owner, bucket)?;
                let mut rec = m
                    .object(bucket, key)?
                    .ok_or_else(|| ObjectError::NoSuchKey(key.into()))?;
                rec.meta = meta;
                rec.modified_ms = now_ms();
                m.kv.put(&object_key(bucket, key), encode(&rec));
                Ok(rec)
            })
            .await
    }

    // ---- objects ----

    /// Stores `body` as `bucket/key`, replacing any earlier object atomically. With
    /// `expected_len`, a body of another length is refused (and nothing changes).
    pub async fn put_object(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
        expected_len: Option<u64>,
    ) -> Result<ObjectRecord> {
        self.put_inner(owner, (bucket, key), meta, body, expected_len, false)
            .await
    }

    /// As [`ObjectLayer::put_object`], but only if `bucket/key` does not exist when
    /// the upload commits ([`ObjectError::AlreadyExists`] otherwise; the uploaded
    /// blocks are freed). Of two racing creates, exactly one succeeds.
    pub async fn put_object_if_absent(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
        expected_len: Option<u64>,
    ) -> Result<ObjectRecord> {
        self.put_inner(owner, (bucket, key), meta, body, expected_len, true)
            .await
    }

    async fn put_inner(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        meta: ObjectMeta,
        body: ByteStream,
        expected_len: Option<u64>,
        create_only: bool,
    ) -> Result<ObjectRecord> {
        check_key(key)?;
        {
            let m = self.shared.lock();
            m.owned_bucket(owner, bucket)?;
            if create_only && m.object(bucket, key)?.is_some() {
                return Err(ObjectError::AlreadyExists(key.into()));
            }
        }
        let (segment, md5) = self.write_body(body, expected_len).await?;
        let rec = ObjectRecord {
            id: random_id(),
            size: segment.len,
            etag: hex(&md5),
            modified_ms: now_ms(),
            meta,
            segments: vec![segment],
        };
        self.commit_object(owner, bucket, key, rec, create_only)
            .await
    }

    /// Writes a client body into fresh blocks: refused up front if `expected_len`
    /// is too large or cannot fit, and refused (blocks freed) if the body's length
    /// differs from it. Returns the segment and the body's MD5.
    async fn write_body(
        &self,
        body: ByteStream,
        expected_len: Option<u64>,
    ) -> Result<(Segment, [u8; 16])> {
        if let Some(n) = expected_len {
            if n > MAX_PUT_SIZE {
                return Err(ObjectError::TooLarge { max: MAX_PUT_SIZE });
            }
            self.check_room(n)?;
        }
        let mut w = BlockWriter::new(self.shared.clone(), MAX_PUT_SIZE);
        w.write_stream(body).await?;
        if let Some(n) = expected_len {
            if w.len != n {
                return Err(ObjectError::IncompleteBody {
                    got: w.len,
                    expected: n,
                });
            }
        }
        w.finish().await
    }

    /// Writes `body` as segments of the given lengths (the body must have exactly
    /// their sum). On error every block written is freed.
    async fn write_segments(&self, mut body: ByteStream, lens: &[u64]) -> Result<Vec<Segment>> {
        let mut done: Vec<Segment> = Vec::with_capacity(lens.len());
        let result: Result<()> = async {
            let mut carry = Bytes::new();
            for &len in lens {
                let mut w = BlockWriter::new(self.shared.clone(), len);
                while w.len < len {
                    if carry.is_empty() {
                        carry = match body.next().await {
                            Some(chunk) => chunk?,
                            None => {
                                return Err(ObjectError::IncompleteBody {
                                    got: w.len,
                                    expected: len,
                                })
                            }
                        };
                    }
                    let take = carry.len().min((len - w.len) as usize);
                    w.write(carry.split_to(take)).await?;
                }
                done.push(w.finish().await?.0);
            }
            if !carry.is_empty() || body.next().await.is_some() {
                return Err(corrupt("copy source", "longer than its record".into()));
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => Ok(done),
            Err(e) => {
                let runs: Vec<Run> = done.iter().flat_map(|s| s.runs.clone()).collect();
                self.shared.lock().alloc.free(&runs);
                Err(e)
            }
        }
    }

    /// Refuses early a write of `bytes` that cannot fit.
    fn check_room(&self, bytes: u64) -> Result<()> {
        let needed = bytes.div_ceil(self.shared.oram.block_size() as u64);
        let free = self.shared.lock().alloc.free_blocks();
        if needed > free {
            return Err(ObjectError::Full { needed, free });
        }
        Ok(())
    }

    /// Makes `rec` the object `bucket/key` in one step and releases the old version.
    /// If the bucket vanished meanwhile, frees `rec`'s blocks instead.
    async fn commit_object(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        rec: ObjectRecord,
        create_only: bool,
    ) -> Result<ObjectRecord> {
        let (old, done) = {
            let mut m = self.shared.lock();
            if let Err(e) = m.owned_bucket(owner, bucket) {
                m.release(rec.id, &rec.segments);
                return Err(e);
            }
            let old = match m.object(bucket, key) {
                Ok(Some(_)) if create_only => {
                    m.release(rec.id, &rec.segments);
                    return Err(ObjectError::AlreadyExists(key.into()));
                }
                Ok(old) => old,
                Err(e) => {
                    m.release(rec.id, &rec.segments);
                    return Err(e);
                }
            };
            m.kv.put(&object_key(bucket, key), encode(&rec));
            (old, m.kv.commit())
        };
        // The old version's blocks are freed only once the new record is durable.
        // (A failed commit fails the state store: nothing is committed any more,
        // so the new blocks are not freed either.)
        done.await?;
        if let Some(old) = old {
            self.shared.lock().release(old.id, &old.segments);
        }
        Ok(rec)
    }

    /// The record of `bucket/key`.
    pub fn head_object(&self, owner: &str, bucket: &str, key: &str) -> Result<ObjectRecord> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        m.object(bucket, key)?
            .ok_or_else(|| ObjectError::NoSuchKey(key.into()))
    }

    /// Opens `bucket/key`: its record, pinned so that its blocks stay intact until
    /// the returned handle (or the stream made from it) is dropped, even if the
    /// object is replaced meanwhile. Check conditions against
    /// [`OpenObject::record`], then read with [`ObjectLayer::read`]: the bytes are
    /// those of the record checked.
    pub fn open_object(&self, owner: &str, bucket: &str, key: &str) -> Result<OpenObject> {
        let mut m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        let rec = m
            .object(bucket, key)?
            .ok_or_else(|| ObjectError::NoSuchKey(key.into()))?;
        let pin = self.shared.pin(&mut m, rec.id);
        Ok(OpenObject { rec, pin })
    }

    /// Streams `range` (the whole object if `None`) of an opened object. The stream
    /// reads only the blocks of the range, `batch_blocks` at a time.
    ///
    /// # Errors
    /// [`ObjectError::InvalidRange`] if the range is empty or reaches past the end.
    pub fn read(&self, obj: OpenObject, range: Option<std::ops::Range<u64>>) -> Result<ByteStream> {
        let size = obj.rec.size;
        let range = range.unwrap_or(0..size);
        if range.end > size || (range.start >= range.end && size > 0) {
            return Err(ObjectError::InvalidRange { size });
        }
        Ok(self.read_stream(obj.rec.segments, range, obj.pin))
    }

    /// [`ObjectLayer::open_object`] and [`ObjectLayer::read`] in one.
    pub fn get_object(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<(ObjectRecord, ByteStream)> {
        let obj = self.open_object(owner, bucket, key)?;
        let rec = obj.rec.clone();
        Ok((rec, self.read(obj, range)?))
    }

    fn read_stream(
        &self,
        segments: Vec<Segment>,
        range: std::ops::Range<u64>,
        pin: ReadPin,
    ) -> ByteStream {
        struct St {
            shared: Arc<Shared>,
            segments: Vec<Segment>,
            pos: u64,
            end: u64,
            _pin: ReadPin,
        }
        let st = St {
            shared: self.shared.clone(),
            segments,
            pos: range.start,
            end: range.end,
            _pin: pin,
        };
        Box::pin(futures::stream::try_unfold(st, |mut st| async move {
            if st.pos >= st.end {
                return Ok(None);
            }
            let bs = st.shared.oram.block_size() as u64;
            // Up to batch_blocks blocks from pos: (block, from, to) within the block.
            let mut pieces = Vec::new();
            let mut pos = st.pos;
            while pos < st.end && pieces.len() < st.shared.cfg.batch_blocks {
                let (si, off) = locate(&st.segments, pos)
                    .ok_or_else(|| corrupt("object", "range beyond segments".into()))?;
                let seg = &st.segments[si];
                let block = nth_block(&seg.runs, off / bs)
                    .ok_or_else(|| corrupt("object", "segment shorter than its length".into()))?;
                let from = off % bs;
                let to = (bs.min(seg.len - (off - from))).min(from + (st.end - pos));
                pieces.push((block, from as usize, to as usize));
                pos += to - from;
            }
            let data = st
                .shared
                .oram
                .access(pieces.iter().map(|p| Op::Read(p.0)).collect())
                .await?;
            let mut out = BytesMut::with_capacity((pos - st.pos) as usize);
            for ((_, from, to), d) in pieces.iter().zip(data) {
                out.extend_from_slice(&d[*from..*to]);
            }
            st.pos = pos;
            Ok(Some((out.freeze(), st)))
        }))
    }

    /// Deletes `bucket/key`; a missing key is not an error (as in S3). Returns
    /// whether an object was deleted.
    pub async fn delete_object(&self, owner: &str, bucket: &str, key: &str) -> Result<bool> {
        let (old, done) = {
            let mut m = self.shared.lock();
            m.owned_bucket(owner, bucket)?;
            let Some(old) = m.object(bucket, key)? else {
                return Ok(false);
            };
            m.kv.delete(&object_key(bucket, key));
            (old, m.kv.commit())
        };
        done.await?;
        self.shared.lock().release(old.id, &old.segments);
        Ok(true)
    }

    /// Copies the opened object `src` (found at `src_name`) to `dst`; `meta` replaces
    /// the metadata (`None` keeps the source's). Copying an object onto itself with
    /// new metadata changes only the metadata; if the object was replaced since it
    /// was opened, that fails with [`ObjectError::Conflict`].
    pub async fn copy_object(
        &self,
        owner: &str,
        src: OpenObject,
        src_name: (&str, &str),
        dst: (&str, &str),
        meta: Option<ObjectMeta>,
    ) -> Result<ObjectRecord> {
        check_key(dst.1)?;
        if src_name == dst {
            let (rec, done) = {
                let mut m = self.shared.lock();
                m.owned_bucket(owner, dst.0)?;
                let mut rec = m
                    .object(dst.0, dst.1)?
                    .ok_or_else(|| ObjectError::NoSuchKey(dst.1.into()))?;
                if rec.id != src.rec.id {
                    return Err(ObjectError::Conflict(dst.1.into()));
                }
                if let Some(meta) = meta {
                    rec.meta = meta;
                }
                rec.modified_ms = now_ms();
                m.kv.put(&object_key(dst.0, dst.1), encode(&rec));
                (rec, m.kv.commit())
            };
            done.await?;
            return Ok(rec);
        }
        self.shared.lock().owned_bucket(owner, dst.0)?;
        let (etag, src_meta) = (src.rec.etag.clone(), src.rec.meta.clone());
        // Segment by segment, so the copy has the source's part layout and its
        // multipart ETag can still be verified (fsck).
        let lens: Vec<u64> = src.rec.segments.iter().map(|s| s.len).collect();
        self.check_room(src.rec.size)?;
        let body = self.read(src, None)?;
        let segments = self.write_segments(body, &lens).await?;
        let rec = ObjectRecord {
            id: random_id(),
            size: segments.iter().map(|s| s.len).sum(),
            etag,
            modified_ms: now_ms(),
            meta: meta.unwrap_or(src_meta),
            segments,
        };
        self.commit_object(owner, dst.0, dst.1, rec, false).await
    }

    /// Lists the objects of a bucket (see [`ListParams`]).
    pub fn list_objects(
        &self,
        owner: &str,
        bucket: &str,
        params: &ListParams,
    ) -> Result<ListResult> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        listing::list(m.kv.as_ref(), bucket, params)
    }

    // ---- multipart ----

    /// Starts a multipart upload; returns its id.
    pub async fn create_multipart(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
    ) -> Result<String> {
        check_key(key)?;
        let (id, done) = {
            let mut m = self.shared.lock();
            m.owned_bucket(owner, bucket)?;
            let mut id = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut id);
            let id = hex(&id);
            let rec = UploadRecord {
                bucket: bucket.into(),
                key: key.into(),
                owner: owner.into(),
                initiated_ms: now_ms(),
                meta,
                parts: BTreeMap::new(),
            };
            m.kv.put(&upload_key(&id), encode(&rec));
            (id, m.kv.commit())
        };
        done.await?;
        Ok(id)
    }

    /// The upload `upload_id`, checked to belong to `bucket/key` and `owner`.
    pub fn get_upload(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadRecord> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        let u = m.upload(owner, upload_id)?;
        if u.bucket != bucket || u.key != key {
            return Err(ObjectError::NoSuchUpload(upload_id.into()));
        }
        Ok(u)
    }

    /// Stores part `number` of an upload (replacing an earlier part of that number).
    pub async fn upload_part(
        &self,
        owner: &str,
        target: (&str, &str, &str),
        number: u32,
        body: ByteStream,
        expected_len: Option<u64>,
    ) -> Result<PartRecord> {
        let (bucket, key, upload_id) = target;
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(ObjectError::InvalidPartNumber(number));
        }
        self.get_upload(owner, bucket, key, upload_id)?;
        let (segment, md5) = self.write_body(body, expected_len).await?;
        let part = PartRecord {
            etag: hex(&md5),
            size: segment.len,
            modified_ms: now_ms(),
            segment,
        };
        let (old, done) = {
            let mut m = self.shared.lock();
            let mut u = match m.upload(owner, upload_id) {
                Ok(u) => u,
                Err(e) => {
                    m.alloc.free(&part.segment.runs);
                    return Err(e);
                }
            };
            let old = u.parts.insert(number, part.clone());
            m.kv.put(&upload_key(upload_id), encode(&u));
            (old, m.kv.commit())
        };
        done.await?;
        if let Some(old) = old {
            self.shared.lock().alloc.free(&old.segment.runs);
        }
        Ok(part)
    }

    /// Stores part `number` as a copy of `range` of an opened object.
    pub async fn upload_part_copy(
        &self,
        owner: &str,
        target: (&str, &str, &str),
        number: u32,
        src: OpenObject,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<PartRecord> {
        let len = range.as_ref().map_or(src.rec.size, |r| r.end - r.start);
        let body = self.read(src, range)?;
        self.upload_part(owner, target, number, body, Some(len))
            .await
    }

    /// Completes an upload from the listed `(part number, ETag)` pairs; the object
    /// replaces any earlier one atomically. Parts not listed are freed.
    pub async fn complete_multipart(
        &self,
        owner: &str,
        target: (&str, &str, &str),
        parts: &[(u32, String)],
    ) -> Result<ObjectRecord> {
        let (bucket, key, upload_id) = target;
        let (u, rec, old, done) = {
            let mut m = self.shared.lock();
            m.owned_bucket(owner, bucket)?;
            let mut u = m.upload(owner, upload_id)?;
            if u.bucket != bucket || u.key != key {
                return Err(ObjectError::NoSuchUpload(upload_id.into()));
            }
            if parts.is_empty() {
                return Err(ObjectError::InvalidPart("no parts listed".into()));
            }
            if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(ObjectError::InvalidPartOrder);
            }
            let mut segments = Vec::with_capacity(parts.len());
            let mut md5s = Vec::with_capacity(parts.len() * 16);
            for (i, (n, etag)) in parts.iter().enumerate() {
                let p = u
                    .parts
                    .get(n)
                    .ok_or_else(|| ObjectError::InvalidPart(format!("part {n} not uploaded")))?;
                if etag.trim_matches('"') != p.etag {
                    return Err(ObjectError::InvalidPart(format!(
                        "part {n}: ETag does not match"
                    )));
                }
                if i + 1 < parts.len() && p.size < self.shared.cfg.min_part_size {
                    return Err(ObjectError::PartTooSmall {
                        part: *n,
                        size: p.size,
                        min: self.shared.cfg.min_part_size,
                    });
                }
                let raw: Vec<u8> = (0..16)
                    .map(|j| u8::from_str_radix(&p.etag[2 * j..2 * j + 2], 16).unwrap_or(0))
                    .collect();
                md5s.extend_from_slice(&raw);
                segments.push(p.segment.clone());
            }
            for (n, _) in parts {
                u.parts.remove(n);
            }
            let rec = ObjectRecord {
                id: random_id(),
                size: segments.iter().map(|s| s.len).sum(),
                etag: format!("{}-{}", hex(&Md5::digest(&md5s)), parts.len()),
                modified_ms: now_ms(),
                meta: u.meta.clone(),
                segments,
            };
            let old = m.object(bucket, key)?;
            m.kv.put(&object_key(bucket, key), encode(&rec));
            m.kv.delete(&upload_key(upload_id));
            (u, rec, old, m.kv.commit())
        };
        done.await?;
        let mut m = self.shared.lock();
        let unused: Vec<Run> = u
            .parts
            .values()
            .flat_map(|p| p.segment.runs.clone())
            .collect();
        m.alloc.free(&unused);
        if let Some(old) = old {
            m.release(old.id, &old.segments);
        }
        Ok(rec)
    }

    /// Aborts an upload and frees its parts (all under one lock, so a part upload
    /// racing the abort either lands before and is freed here, or finds the upload
    /// gone and frees its own blocks).
    pub async fn abort_multipart(&self, owner: &str, target: (&str, &str, &str)) -> Result<()> {
        let (bucket, key, upload_id) = target;
        let (u, done) = {
            let mut m = self.shared.lock();
            m.owned_bucket(owner, bucket)?;
            let u = m.upload(owner, upload_id)?;
            if u.bucket != bucket || u.key != key {
                return Err(ObjectError::NoSuchUpload(upload_id.into()));
            }
            m.kv.delete(&upload_key(upload_id));
            (u, m.kv.commit())
        };
        done.await?;
        let runs: Vec<Run> = u
            .parts
            .values()
            .flat_map(|p| p.segment.runs.clone())
            .collect();
        self.shared.lock().alloc.free(&runs);
        Ok(())
    }

    /// Unfinished uploads in `bucket` whose key starts with `prefix`, by key then id.
    pub fn list_uploads(&self, owner: &str, bucket: &str, prefix: &str) -> Result<Vec<UploadInfo>> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        let mut out: Vec<UploadInfo> = listing::all_uploads(m.kv.as_ref())?
            .into_iter()
            .filter(|(_, u)| u.bucket == bucket && u.key.starts_with(prefix))
            .map(|(id, u)| UploadInfo {
                upload_id: id,
                key: u.key,
                initiated_ms: u.initiated_ms,
                owner: u.owner,
            })
            .collect();
        out.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
