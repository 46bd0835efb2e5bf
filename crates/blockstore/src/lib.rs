//! The block-store abstraction: what the untrusted cloud is to the rest of oram-proxy.
//!
//! A [`BlockStore`] holds opaque, already-sealed objects under opaque keys. Every
//! method is a request the storage provider observes — verb, key, byte range, size
//! and timing — so engines call it only in patterns that are independent of the data.
//!
//! The trait is batch-first: tree ORAMs move whole paths, and a back-end is expected
//! to serve the items of one batch concurrently (one round trip, not one per item).
//!
//! Besides the trait this crate holds the wrappers that observe a store without
//! changing it ([`Recording`], [`Accounting`]) and the [`conformance`] suite every
//! back-end runs in its tests.

mod accounting;
pub mod conformance;
pub mod faults;
mod key;
mod recording;
mod size;

pub use accounting::{Accounting, AccountingSnapshot, VerbCounters};
pub use key::{InvalidKey, ObjKey};
pub use recording::{Recording, TraceEvent, Verb};
pub use size::{check_bounded, ObjTag, PutCondition, SizeBound};

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use rand::Rng;

/// Errors a block store reports.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A local I/O operation failed (fs back-end).
    #[error("{op} {key}: {source}")]
    Io {
        /// What was being done (`get`, `put`, `delete`, `list`, ...).
        op: &'static str,
        /// The object key (or path) concerned.
        key: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The key is not acceptable to this back-end.
    #[error(transparent)]
    InvalidKey(#[from] InvalidKey),
    /// The back-end cannot be reached or refused the request for now; retrying
    /// later may succeed. Nothing was changed by the failed request.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The back-end refused the request for a reason retrying will not fix
    /// (access denied, no such bucket, bad request).
    #[error("{op} {key}: refused: {message}")]
    Rejected {
        /// What was being done.
        op: &'static str,
        /// The object key (or bucket) concerned.
        key: String,
        /// The back-end's answer.
        message: String,
    },
    /// The requested byte range is empty or reversed.
    #[error("invalid range {start}..{end}")]
    InvalidRange {
        /// First byte requested.
        start: u64,
        /// One past the last byte requested.
        end: u64,
    },
    /// The back-end answered with an object (or listing) of another size than the
    /// caller said it expects: truncated in transit, or not what this volume wrote.
    /// Nothing beyond the bound was buffered. Transient if the transport cut it.
    #[error("{key}: the backend answered {got}, expected {expected}")]
    WrongSize {
        /// The object key (or listing prefix).
        key: String,
        /// What arrived (or was announced), e.g. `"5000 bytes"`, `"more than 4096 bytes"`.
        got: String,
        /// What the caller expected, e.g. `"exactly 4141 bytes"`.
        expected: String,
    },
    /// A conditional write ([`BlockStore::put_if`]) found the object in another
    /// state than the condition names: someone else wrote it. Nothing was changed.
    #[error("{key}: precondition failed: the object was changed by another writer")]
    PreconditionFailed {
        /// The object key.
        key: String,
    },
    /// The back-end does not offer this operation.
    #[error("the backend does not support {0}")]
    Unsupported(&'static str),
    /// This proxy no longer holds the backend lease: another proxy took over the
    /// volume, or the lease could not be renewed in time. Writes are refused.
    #[error("fenced: {0}")]
    Fenced(String),
}

impl StoreError {
    /// Whether trying the same request again may succeed: the back-end was
    /// unreachable or refused for now, or an answer arrived cut or swollen (a
    /// transport fault; a stored object of the wrong size fails again).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::WrongSize { .. })
    }
}

/// Result type of block-store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The untrusted object store.
///
/// **What the storage server observes:** every call below, with its verb, the keys,
/// ranges and object sizes, and when it happens. It never sees plaintext: callers
/// hand in sealed bytes only.
///
/// Semantics every back-end must provide (checked by [`conformance`]):
/// - a `put` is atomic: a concurrent or later `get` sees the whole old object or the
///   whole new one, never a part;
/// - a missing object reads as `None`, never as an error;
/// - `put_many` of distinct keys may run concurrently; when it returns `Ok`, every
///   item is durable to the degree the back-end promises (fs: fsynced);
/// - `delete_many` of a missing key succeeds.
#[async_trait]
pub trait BlockStore: Send + Sync + 'static {
    /// Fetches several objects concurrently; `None` where an object does not exist.
    /// The result has one entry per key, in the order of `keys`.
    ///
    /// Observed: one GET per key, issued together.
    async fn get_many(&self, keys: &[ObjKey]) -> Result<Vec<Option<Bytes>>>;

    /// Fetches the bytes `range` of one object: `None` if the object does not exist;
    /// the range is clipped to the object's length (a start past the end gives an
    /// empty result).
    ///
    /// Observed: one ranged GET with the key and the range.
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>>;

    /// Stores several objects, replacing existing ones, concurrently. Each object is
    /// replaced atomically; when the call fails, some items may have been stored and
    /// others not, so callers must not rely on all-or-nothing batches.
    ///
    /// Observed: one PUT per item with its key and size, issued together.
    async fn put_many(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()>;

    /// Stores objects that the caller can write again after a crash (it keeps what
    /// it needs to redo them, and nothing reads them before it has) and that
    /// nothing reads while the call runs. A back-end may therefore write an object
    /// in place instead of replacing it atomically: while the call runs, or after a
    /// crash or failure during it, such an object may be torn (part old, part new)
    /// or partial until the caller writes it again. When the call returns `Ok`,
    /// every item is whole and durable as after [`BlockStore::put_many`]. The
    /// default is `put_many`; wrappers that only observe must forward it, so that
    /// the back-end's cheaper write is reached (the fs back-end: a `pwrite` and an
    /// `fdatasync` on the existing or new file instead of a temporary file, an
    /// fsync and a rename).
    ///
    /// Observed: as `put_many` — one PUT per item with its key and size.
    async fn put_many_redoable(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        self.put_many(items).await
    }

    /// Deletes several objects; missing ones are ignored.
    ///
    /// Observed: the keys deleted.
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()>;

    /// Lists the keys that start with `prefix`, sorted. For maintenance (fsck,
    /// recovery) only, never on the access path.
    ///
    /// Observed: a listing request for the prefix.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjKey>>;

    /// As [`BlockStore::get_many`], with every present object within `bound`:
    /// an answer of another size is [`StoreError::WrongSize`], and a back-end that
    /// streams its answers (S3, fs) stops reading at the bound, so a hostile
    /// provider cannot make the proxy buffer more than the caller expects.
    ///
    /// The default checks after [`BlockStore::get_many`] (fine for back-ends that
    /// hold objects in memory already); wrappers must forward it to their inner
    /// store so that the bound reaches the back-end.
    ///
    /// Observed: as `get_many`.
    async fn get_many_bounded(
        &self,
        keys: &[ObjKey],
        bound: SizeBound,
    ) -> Result<Vec<Option<Bytes>>> {
        let got = self.get_many(keys).await?;
        check_bounded(keys, &got, bound)?;
        Ok(got)
    }

    /// As [`BlockStore::list`], failing with [`StoreError::WrongSize`] instead of
    /// collecting more than `max_keys` keys.
    ///
    /// Observed: as `list`.
    async fn list_bounded(&self, prefix: &str, max_keys: usize) -> Result<Vec<ObjKey>> {
        let keys = self.list(prefix).await?;
        if keys.len() > max_keys {
            return Err(StoreError::WrongSize {
                key: prefix.to_string(),
                got: format!("{} keys", keys.len()),
                expected: format!("at most {max_keys} keys"),
            });
        }
        Ok(keys)
    }

    /// Reads one object with its version tag (S3: the ETag), within `bound`.
    /// For the lease and other compare-and-swap objects; never on the access path.
    ///
    /// Observed: one GET of the key.
    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        let _ = (key, bound);
        Err(StoreError::Unsupported("conditional reads (get_tagged)"))
    }

    /// Stores one object only if `cond` holds (S3: `If-None-Match: *` or
    /// `If-Match: <etag>`); returns the new object's tag, or
    /// [`StoreError::PreconditionFailed`] and changes nothing.
    ///
    /// Observed: one conditional PUT of the key with its size.
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        let _ = (key, data, cond);
        Err(StoreError::Unsupported("conditional writes (put_if)"))
    }
}

#[async_trait]
impl<S: BlockStore + ?Sized> BlockStore for Arc<S> {
    async fn get_many(&self, keys: &[ObjKey]) -> Result<Vec<Option<Bytes>>> {
        (**self).get_many(keys).await
    }
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        (**self).get_range(key, range).await
    }
    async fn put_many(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        (**self).put_many(items).await
    }
    async fn put_many_redoable(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        (**self).put_many_redoable(items).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        (**self).delete_many(keys).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjKey>> {
        (**self).list(prefix).await
    }
    async fn get_many_bounded(
        &self,
        keys: &[ObjKey],
        bound: SizeBound,
    ) -> Result<Vec<Option<Bytes>>> {
        (**self).get_many_bounded(keys, bound).await
    }
    async fn list_bounded(&self, prefix: &str, max_keys: usize) -> Result<Vec<ObjKey>> {
        (**self).list_bounded(prefix, max_keys).await
    }
    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        (**self).get_tagged(key, bound).await
    }
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        (**self).put_if(key, data, cond).await
    }
}

/// Checks a requested range and clips it to an object of `len` bytes, as
/// [`BlockStore::get_range`] specifies. Shared by back-ends.
pub fn clip_range(range: &Range<u64>, len: u64) -> Result<Range<usize>> {
    if range.start >= range.end {
        return Err(StoreError::InvalidRange {
            start: range.start,
            end: range.end,
        });
    }
    let start = range.start.min(len) as usize;
    let end = range.end.min(len) as usize;
    Ok(start..end)
}

/// Deletes every object under `prefix` that is not in `keep`; returns how many.
/// The listing is bounded by `keep.len()` plus [`UNREFERENCED_SLACK`] keys (a
/// provider cannot make the proxy collect an unbounded listing).
/// Observed: a LIST of `prefix`, then batched DELETEs of the objects not kept.
pub async fn delete_unreferenced(
    store: &dyn BlockStore,
    prefix: &str,
    keep: &std::collections::BTreeSet<ObjKey>,
) -> Result<u64> {
    let dead: Vec<ObjKey> = store
        .list_bounded(prefix, keep.len().saturating_mul(2) + UNREFERENCED_SLACK)
        .await?
        .into_iter()
        .filter(|k| !keep.contains(k))
        .collect();
    for chunk in dead.chunks(1000) {
        store.delete_many(chunk).await?;
    }
    Ok(dead.len() as u64)
}

/// Keys beyond the referenced ones a sweep accepts in its listing.
pub const UNREFERENCED_SLACK: usize = 1 << 20;

/// PUTs `items`, trying up to `attempts` times in all with exponential back-off
/// (20 ms doubling up to 2 s, plus up to half as much random jitter); `on_retry`
/// runs before each retry. Returns the last error if every attempt failed.
/// Observed: the same PUTs, repeated after each failure.
pub async fn put_many_retrying(
    store: &dyn BlockStore,
    items: Vec<(ObjKey, Bytes)>,
    attempts: u32,
    on_retry: impl Fn(),
) -> Result<()> {
    retrying(store, items, false, attempts, on_retry).await
}

/// As [`put_many_retrying`] with [`BlockStore::put_many_redoable`]: for writes the
/// caller journals and nothing reads until they landed.
/// Observed: the same PUTs, repeated after each failure.
pub async fn put_many_redoable_retrying(
    store: &dyn BlockStore,
    items: Vec<(ObjKey, Bytes)>,
    attempts: u32,
    on_retry: impl Fn(),
) -> Result<()> {
    retrying(store, items, true, attempts, on_retry).await
}

async fn retrying(
    store: &dyn BlockStore,
    items: Vec<(ObjKey, Bytes)>,
    redoable: bool,
    attempts: u32,
    on_retry: impl Fn(),
) -> Result<()> {
    let mut delay = std::time::Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        let out = if redoable {
            store.put_many_redoable(items.clone()).await
        } else {
            store.put_many(items.clone()).await
        };
        match out {
            Ok(()) => return Ok(()),
            Err(e) if attempt >= attempts => return Err(e),
            Err(_) => {
                on_retry();
                let jitter = rand::thread_rng().gen_range(0..=delay.as_millis() as u64 / 2);
                tokio::time::sleep(delay + std::time::Duration::from_millis(jitter)).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
                attempt += 1;
            }
        }
    }
}
