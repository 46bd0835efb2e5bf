//! A wrapper that counts requests and bytes per verb.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, Result, SizeBound,
};

/// Keys in one S3 DeleteObjects request, the most S3 allows: what the delete
/// request counter counts by.
pub const DELETE_BATCH: usize = 1000;

/// Request and byte counters of one verb.
#[derive(Debug, Default)]
pub struct VerbCounters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl VerbCounters {
    fn add(&self, requests: u64, bytes: u64) {
        self.requests.fetch_add(requests, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A point-in-time copy of an [`Accounting`] wrapper's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountingSnapshot {
    /// GET requests (whole objects), one per key.
    pub get_requests: u64,
    /// Bytes received by whole-object GETs.
    pub get_bytes: u64,
    /// Ranged GET requests.
    pub range_requests: u64,
    /// Bytes received by ranged GETs.
    pub range_bytes: u64,
    /// PUT requests, one per object.
    pub put_requests: u64,
    /// Bytes sent by PUTs.
    pub put_bytes: u64,
    /// DELETE requests as an S3 back-end sends them: one DeleteObjects per
    /// [`DELETE_BATCH`] keys of each call (the fs back-end removes each key).
    pub delete_requests: u64,
    /// Keys deleted (requested; some may have been absent).
    pub delete_keys: u64,
    /// Listing requests.
    pub list_requests: u64,
}

impl AccountingSnapshot {
    /// All requests of every verb.
    pub fn total_requests(&self) -> u64 {
        self.get_requests
            + self.range_requests
            + self.put_requests
            + self.delete_requests
            + self.list_requests
    }

    /// All bytes moved in either direction.
    pub fn total_bytes(&self) -> u64 {
        self.get_bytes + self.range_bytes + self.put_bytes
    }

    /// These counters and `other`'s added up (two stores' requests as one).
    pub fn plus(&self, other: &Self) -> Self {
        Self {
            get_requests: self.get_requests + other.get_requests,
            get_bytes: self.get_bytes + other.get_bytes,
            range_requests: self.range_requests + other.range_requests,
            range_bytes: self.range_bytes + other.range_bytes,
            put_requests: self.put_requests + other.put_requests,
            put_bytes: self.put_bytes + other.put_bytes,
            delete_requests: self.delete_requests + other.delete_requests,
            delete_keys: self.delete_keys + other.delete_keys,
            list_requests: self.list_requests + other.list_requests,
        }
    }

    /// The counters accumulated since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            get_requests: self.get_requests - earlier.get_requests,
            get_bytes: self.get_bytes - earlier.get_bytes,
            range_requests: self.range_requests - earlier.range_requests,
            range_bytes: self.range_bytes - earlier.range_bytes,
            put_requests: self.put_requests - earlier.put_requests,
            put_bytes: self.put_bytes - earlier.put_bytes,
            delete_requests: self.delete_requests - earlier.delete_requests,
            delete_keys: self.delete_keys - earlier.delete_keys,
            list_requests: self.list_requests - earlier.list_requests,
        }
    }
}

/// Wraps a store and counts requests and bytes per verb — what a provider bills.
/// Failed requests are counted too (they are billed as well).
pub struct Accounting<S> {
    inner: S,
    get: VerbCounters,
    range: VerbCounters,
    put: VerbCounters,
    delete: VerbCounters,
    list: VerbCounters,
}

impl<S> Accounting<S> {
    /// Wraps `inner` with all counters at zero.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            get: VerbCounters::default(),
            range: VerbCounters::default(),
            put: VerbCounters::default(),
            delete: VerbCounters::default(),
            list: VerbCounters::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The counters now.
    pub fn snapshot(&self) -> AccountingSnapshot {
        let (get_requests, get_bytes) = self.get.read();
        let (range_requests, range_bytes) = self.range.read();
        let (put_requests, put_bytes) = self.put.read();
        let (delete_requests, delete_keys) = self.delete.read();
        let (list_requests, _) = self.list.read();
        AccountingSnapshot {
            get_requests,
            get_bytes,
            range_requests,
            range_bytes,
            put_requests,
            put_bytes,
            delete_requests,
            delete_keys,
            list_requests,
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore> BlockStore for Accounting<S> {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let out = self.inner.get_opts(keys, opts).await;
        let bytes = out.as_ref().map_or(0, |v| {
            v.iter().flatten().map(|b| b.len() as u64).sum::<u64>()
        });
        self.get.add(keys.len() as u64, bytes);
        out
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        let out = self.inner.get_range(key, range).await;
        let bytes = out
            .as_ref()
            .map_or(0, |v| v.as_ref().map_or(0, |b| b.len() as u64));
        self.range.add(1, bytes);
        out
    }

    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()> {
        let n = items.len() as u64;
        let bytes = items.iter().map(|(_, v)| v.len() as u64).sum();
        self.put.add(n, bytes);
        self.inner.put_opts(items, opts).await
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        // (The keys counted where the other verbs count bytes.)
        self.delete
            .add(keys.len().div_ceil(DELETE_BATCH) as u64, keys.len() as u64);
        self.inner.delete_many(keys).await
    }

    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        self.list.add(1, 0);
        self.inner.list_opts(prefix, opts).await
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        let out = self.inner.get_tagged(key, bound).await;
        let bytes = match &out {
            Ok(Some((b, _))) => b.len() as u64,
            _ => 0,
        };
        self.get.add(1, bytes);
        out
    }

    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        self.put.add(1, data.len() as u64);
        self.inner.put_if(key, data, cond).await
    }
}
