//! The block-store abstraction: what the untrusted cloud is to the rest of oram-proxy.
//!
//! A [`BlockStore`] holds opaque, already-sealed objects under opaque keys. Every
//! method is a request the storage provider observes — verb, key, byte range, size
//! and timing — so engines call it only in patterns that are independent of the data.
//!
//! The trait is batch-first: tree ORAMs move whole paths, and a back-end is expected
//! to serve the items of one batch concurrently (one round trip, not one per item).
//! It is a small required core whose calls take option structs ([`GetOpts`],
//! [`PutOpts`], [`ListOpts`]); the named conveniences callers mostly use
//! (`get_many`, `put_many`, `list`, and their bounded and redoable variants) are in
//! [`BlockStoreExt`], which every store has.
//!
//! Besides the trait this crate holds the wrappers that observe a store without
//! changing it ([`Recording`], [`Accounting`]) and the [`conformance`] suite every
//! back-end runs in its tests.

mod accounting;
pub mod conformance;
mod ext;
pub mod faults;
mod key;
mod opts;
mod recording;
mod size;

pub use accounting::{Accounting, AccountingSnapshot, VerbCounters, DELETE_BATCH};
pub use ext::BlockStoreExt;
pub use key::{InvalidKey, ObjKey};
pub use opts::{GetOpts, ListOpts, PutMode, PutOpts};
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
/// - a put is atomic ([`PutMode::Atomic`], the default): a concurrent or later
///   read sees the whole old object or the whole new one, never a part; a
///   [`PutMode::Redoable`] put may leave an object torn until it is written again;
/// - a missing object reads as `None`, never as an error;
/// - the items of one [`BlockStore::put_opts`] of distinct keys may be stored
///   concurrently; when it returns `Ok`, every item is durable to the degree the
///   back-end promises (fs: fsynced);
/// - a bounded read ([`GetOpts::bound`]) or listing ([`ListOpts::max_keys`])
///   never collects more than its bound;
/// - [`BlockStore::delete_many`] of a missing key succeeds.
///
/// # Shape: a small core with option structs, conveniences in an extension
///
/// The trait is the *required core* only, and none of its methods has a
/// default; the variants of a call are fields of its option struct
/// ([`GetOpts`], [`PutOpts`], [`ListOpts`]), as in `object_store`'s
/// `ObjectStore`. The named conveniences (`get_many`, `get_many_bounded`,
/// `put_many`, `put_many_redoable`, `list`, `list_bounded`) live in
/// [`BlockStoreExt`], implemented once for every `BlockStore` (`dyn BlockStore`
/// and `Arc<dyn BlockStore>` included) and not overridable. Why:
/// - A variant as a defaulted method is a trap for wrappers: one that does not
///   override it silently gets the default instead of its inner store's
///   version (an unbounded read checked afterwards instead of the back-end's
///   bounded one, an atomic write instead of the in-place one, a refusal of
///   conditional calls). Without defaults, a wrapper that misses a method does
///   not compile, and one that forwards the option struct whole forwards every
///   option, including those added later.
/// - Each core method is one kind of request the provider sees; the options
///   change how the back-end serves it (how much it buffers, how it replaces a
///   file), never which requests it sends: the traces of a call and of its
///   conveniences are the same.
/// - The conditional pair ([`BlockStore::get_tagged`], [`BlockStore::put_if`])
///   stays two methods: they act on one object and answer with its tag, and
///   `put_if` fails as a whole with [`StoreError::PreconditionFailed`]; as options
///   of the batched calls they would make every batched answer carry tags, or
///   its type depend on the options. [`BlockStore::get_range`] takes no options.
///
/// **Wrappers** (stores that forward to an inner store) put
/// `#[deny(clippy::missing_trait_methods)]` on their `impl BlockStore` (the
/// recipe `object_store` gives), so that a method given a default later still
/// cannot be missed, and forward each option struct as it came unless changing
/// it is the wrapper's purpose (then a comment says so).
#[async_trait]
pub trait BlockStore: Send + Sync + 'static {
    /// Fetches several objects concurrently; `None` where an object does not exist.
    /// The result has one entry per key, in the order of `keys`. With
    /// [`GetOpts::bound`], every present object must be within the bound: an
    /// answer of another size is [`StoreError::WrongSize`], and a back-end that
    /// streams its answers (S3, fs) stops reading at the bound.
    ///
    /// Observed: one GET per key, issued together (the same with or without a
    /// bound), every one of them even when another fails (the first error is
    /// reported once all are done).
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>>;

    /// Fetches the bytes `range` of one object: `None` if the object does not exist;
    /// the range is clipped to the object's length (a start past the end gives an
    /// empty result). An empty or reversed range is [`StoreError::InvalidRange`].
    ///
    /// Observed: one ranged GET with the key and the range.
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>>;

    /// Stores several objects, replacing existing ones, concurrently. When the
    /// call fails, some items may have been stored and others not, so callers
    /// must not rely on all-or-nothing batches. [`PutOpts::mode`] says how each
    /// object is replaced: atomically ([`PutMode::Atomic`]), or possibly in place
    /// for writes the caller redoes after a crash ([`PutMode::Redoable`]: torn or
    /// partial until written again if the call fails; whole and durable when it
    /// returns `Ok`).
    ///
    /// Observed: one PUT per item with its key and size, issued together (the
    /// same in either mode), every one of them even when another fails (fs,
    /// atomic mode: every object is written to its temporary file first, and
    /// none is renamed into place if one of those writes fails).
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()>;

    /// Deletes several objects; missing ones are ignored.
    ///
    /// Observed: the keys deleted.
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()>;

    /// Lists the keys that start with `prefix`, sorted. For maintenance (fsck,
    /// recovery, sweeps) only, never on the access path. With
    /// [`ListOpts::max_keys`], a listing of more keys is
    /// [`StoreError::WrongSize`] instead of collected.
    ///
    /// Observed: a listing request for the prefix (the same with or without a
    /// bound; a back-end that pages sends page requests until done or over the
    /// bound).
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>>;

    /// Reads one object with its version tag (S3: the ETag), within `bound`.
    /// For the lease and other compare-and-swap objects; never on the access path.
    /// `None` if the object does not exist. A back-end without conditional
    /// requests answers [`StoreError::Unsupported`].
    ///
    /// Observed: one GET of the key.
    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>>;

    /// Stores one object only if `cond` holds (S3: `If-None-Match: *` or
    /// `If-Match: <etag>`), atomically; returns the new object's tag, or
    /// [`StoreError::PreconditionFailed`] and changes nothing. A back-end without
    /// conditional requests answers [`StoreError::Unsupported`].
    ///
    /// Observed: one conditional PUT of the key with its size.
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag>;
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore + ?Sized> BlockStore for Arc<S> {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        (**self).get_opts(keys, opts).await
    }
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        (**self).get_range(key, range).await
    }
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()> {
        (**self).put_opts(items, opts).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        (**self).delete_many(keys).await
    }
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        (**self).list_opts(prefix, opts).await
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
    let max_keys = keep.len().saturating_mul(2) + UNREFERENCED_SLACK;
    let dead: Vec<ObjKey> = store
        .list_opts(prefix, ListOpts::at_most(max_keys))
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
    retrying(store, items, PutOpts::default(), attempts, on_retry).await
}

/// As [`put_many_retrying`] with [`PutMode::Redoable`]
/// ([`BlockStoreExt::put_many_redoable`]): for writes the caller journals and
/// nothing reads until they landed.
/// Observed: the same PUTs, repeated after each failure.
pub async fn put_many_redoable_retrying(
    store: &dyn BlockStore,
    items: Vec<(ObjKey, Bytes)>,
    attempts: u32,
    on_retry: impl Fn(),
) -> Result<()> {
    retrying(store, items, PutOpts::redoable(), attempts, on_retry).await
}

async fn retrying(
    store: &dyn BlockStore,
    items: Vec<(ObjKey, Bytes)>,
    opts: PutOpts,
    attempts: u32,
    on_retry: impl Fn(),
) -> Result<()> {
    let mut delay = std::time::Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        match store.put_opts(items.clone(), opts).await {
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
