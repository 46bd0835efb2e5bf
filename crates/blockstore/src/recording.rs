//! A wrapper that records what the cloud sees.

use std::ops::Range;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, Result, SizeBound,
};

/// The kind of a backend request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// A whole-object GET.
    Get,
    /// A ranged GET.
    GetRange,
    /// A PUT.
    Put,
    /// A DELETE.
    Delete,
    /// A listing.
    List,
}

/// One backend request as the storage provider sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Position of the request in the trace (0, 1, 2, ...).
    pub seq: u64,
    /// Which call of the wrapped store the request belongs to; requests of one
    /// `get_opts`/`put_opts` (`get_many`/`put_many`) share it and are issued
    /// together.
    pub call: u64,
    /// The verb.
    pub verb: Verb,
    /// The key (for a listing: the prefix, if it forms a valid key, else empty).
    pub key: String,
    /// The byte range of a ranged GET.
    pub range: Option<Range<u64>>,
    /// Bytes transferred: the object size for a PUT and for a GET that found the
    /// object, 0 for a GET of a missing object, a DELETE or a listing.
    pub size: u64,
}

/// Wraps a store and records every request: verb, key, range, size and order.
///
/// This is exactly the information the threat model gives the storage provider
/// (minus timing), so obliviousness tests compare recorded traces.
pub struct Recording<S> {
    inner: S,
    state: Mutex<RecState>,
}

#[derive(Default)]
struct RecState {
    next_call: u64,
    events: Vec<TraceEvent>,
}

impl<S> Recording<S> {
    /// Wraps `inner` with an empty trace.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            state: Mutex::new(RecState::default()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// A copy of the trace recorded so far.
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.lock().events.clone()
    }

    /// Returns the trace recorded so far and starts a new, empty one.
    pub fn take_trace(&self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.lock().events)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecState> {
        // A poisoned lock only means a panic elsewhere mid-push; the trace is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, items: impl IntoIterator<Item = (Verb, String, Option<Range<u64>>, u64)>) {
        let mut st = self.lock();
        let call = st.next_call;
        st.next_call += 1;
        for (verb, key, range, size) in items {
            let seq = st.events.len() as u64;
            st.events.push(TraceEvent {
                seq,
                call,
                verb,
                key,
                range,
                size,
            });
        }
    }
}

impl<S> Recording<S> {
    fn record_gets(&self, keys: &[ObjKey], out: &Result<Vec<Option<Bytes>>>) {
        match out {
            Ok(vals) => self.record(
                keys.iter()
                    .zip(vals)
                    .map(|(k, v)| (Verb::Get, k.to_string(), None, len_of(v))),
            ),
            Err(_) => self.record(keys.iter().map(|k| (Verb::Get, k.to_string(), None, 0))),
        }
    }
}

fn len_of(b: &Option<Bytes>) -> u64 {
    b.as_ref().map_or(0, |b| b.len() as u64)
}

/// What a recording keeps of PUTs: verb, key, no range, size.
fn puts_seen(items: &[(ObjKey, Bytes)]) -> Vec<(Verb, String, Option<Range<u64>>, u64)> {
    items
        .iter()
        .map(|(k, v)| (Verb::Put, k.to_string(), None, v.len() as u64))
        .collect()
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore> BlockStore for Recording<S> {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let out = self.inner.get_opts(keys, opts).await;
        self.record_gets(keys, &out);
        out
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        let out = self.inner.get_range(key, range.clone()).await;
        let size = out.as_ref().map_or(0, len_of);
        self.record([(Verb::GetRange, key.to_string(), Some(range), size)]);
        out
    }

    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()> {
        let seen = puts_seen(&items);
        let out = self.inner.put_opts(items, opts).await;
        self.record(seen);
        out
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        let out = self.inner.delete_many(keys).await;
        self.record(keys.iter().map(|k| (Verb::Delete, k.to_string(), None, 0)));
        out
    }

    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        let out = self.inner.list_opts(prefix, opts).await;
        self.record([(Verb::List, prefix.to_string(), None, 0)]);
        out
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        let out = self.inner.get_tagged(key, bound).await;
        let size = match &out {
            Ok(Some((b, _))) => b.len() as u64,
            _ => 0,
        };
        self.record([(Verb::Get, key.to_string(), None, size)]);
        out
    }

    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        let size = data.len() as u64;
        let out = self.inner.put_if(key, data, cond).await;
        self.record([(Verb::Put, key.to_string(), None, size)]);
        out
    }
}
