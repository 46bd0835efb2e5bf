//! A bounded live recorder of what the cloud sees: wraps the volume's block store
//! and keeps the last [`BACKEND_WINDOW`] backend requests (verb, position, size,
//! duration, outcome) for the dashboard, plus per-verb error counters and latency
//! histograms for `/metrics`. Unlike `oram_blockstore::Recording` (tests: the
//! whole trace), it never grows: the oldest requests fall out of the window.
//!
//! It changes nothing about the requests: every call goes to the wrapped store
//! as it came.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, Result, SizeBound, Verb,
};

use crate::telemetry::{Histogram, Ring};

/// Backend requests kept for the dashboard.
pub const BACKEND_WINDOW: usize = 8192;

/// The verbs, in the order of [`verb_index`].
pub const VERBS: [Verb; 5] = [
    Verb::Get,
    Verb::GetRange,
    Verb::Put,
    Verb::Delete,
    Verb::List,
];

/// The label value of a verb (as in `oram_backend_requests_total`).
pub fn verb_name(v: Verb) -> &'static str {
    match v {
        Verb::Get => "get",
        Verb::GetRange => "get_range",
        Verb::Put => "put",
        Verb::Delete => "delete",
        Verb::List => "list",
    }
}

fn verb_index(v: Verb) -> usize {
    match v {
        Verb::Get => 0,
        Verb::GetRange => 1,
        Verb::Put => 2,
        Verb::Delete => 3,
        Verb::List => 4,
    }
}

/// Where a backend object sits, read from its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A tree node (Path ORAM `n/`, Ring ORAM `r/`), numbered from 1 at the root.
    Node(u64),
    /// A block of the `direct` engine (`b/`).
    Block(u64),
    /// Volume metadata (header, checkpoint) or anything else.
    Other,
}

/// Reads the position from an engine object key
/// `<prefix>/<n|r|b>/[<shard>/]<index>[.<slot>]` (the shard a hex number).
pub fn place_of(key: &str) -> Place {
    let mut parts = key.rsplitn(4, '/');
    let (Some(last), Some(mut kind)) = (parts.next(), parts.next()) else {
        return Place::Other;
    };
    if !matches!(kind, "n" | "r" | "b") && kind.bytes().all(|b| b.is_ascii_hexdigit()) {
        kind = parts.next().unwrap_or("");
    }
    let index = last.split_once('.').map_or(last, |(i, _)| i);
    let Ok(i) = index.parse::<u64>() else {
        return Place::Other;
    };
    match kind {
        "n" | "r" => Place::Node(i),
        "b" => Place::Block(i),
        _ => Place::Other,
    }
}

/// One backend request in the window.
#[derive(Debug, Clone)]
pub struct BackendEvent {
    /// Milliseconds since the recorder started, when the request ended.
    pub t_ms: f64,
    /// The verb.
    pub verb: Verb,
    /// The object's position.
    pub place: Place,
    /// Bytes moved (object size of a PUT or of a GET that found it).
    pub size: u64,
    /// Duration of the call it belonged to, milliseconds.
    pub dur_ms: f32,
    /// Whether the call succeeded.
    pub ok: bool,
}

/// What the recorder shares with `/metrics` and the dashboard.
pub struct TapShared {
    started: Instant,
    /// The window; held only to push or copy. Not held with any other lock.
    events: Mutex<Ring<BackendEvent>>,
    errors: [AtomicU64; 5],
    latency: [Histogram; 5],
    /// Backend write calls that failed since the last one that succeeded.
    failed_writes_in_a_row: AtomicU64,
}

impl TapShared {
    /// An empty window and zero counters, the clock starting now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            events: Mutex::new(Ring::new(BACKEND_WINDOW)),
            errors: Default::default(),
            latency: Default::default(),
            failed_writes_in_a_row: AtomicU64::new(0),
        }
    }

    /// Backend write (PUT) calls that failed since the last one that succeeded:
    /// a backend that refuses writes (full disk, spent quota, revoked rights)
    /// shows here while reads may still pass.
    pub fn failed_writes_in_a_row(&self) -> u64 {
        self.failed_writes_in_a_row.load(Ordering::Relaxed)
    }

    /// Failed requests of `v` (a failed batch counts each of its items).
    pub fn errors(&self, v: Verb) -> u64 {
        self.errors[verb_index(v)].load(Ordering::Relaxed)
    }

    /// The latency histogram of `v`'s calls (a batch is one call).
    pub fn latency(&self, v: Verb) -> &Histogram {
        &self.latency[verb_index(v)]
    }

    /// Backend requests numbered `since` and later (at most the newest `max`):
    /// (first number returned, next number, events).
    pub fn since(&self, since: u64, max: usize) -> (u64, u64, Vec<BackendEvent>) {
        let r = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let (first, ev) = r.since(since, max);
        (first, r.next_seq(), ev)
    }

    /// Milliseconds since the recorder started.
    pub fn now_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    fn record<'a>(
        &self,
        verb: Verb,
        started: Instant,
        ok: bool,
        items: impl Iterator<Item = (&'a str, u64)>,
    ) {
        let t_ms = self.now_ms();
        let dur = started.elapsed();
        self.latency[verb_index(verb)].observe(dur);
        let mut n = 0;
        let mut r = self.events.lock().unwrap_or_else(|e| e.into_inner());
        for (key, size) in items {
            n += 1;
            r.push(BackendEvent {
                t_ms,
                verb,
                place: place_of(key),
                size,
                dur_ms: dur.as_secs_f32() * 1e3,
                ok,
            });
        }
        drop(r);
        if !ok {
            self.errors[verb_index(verb)].fetch_add(n.max(1), Ordering::Relaxed);
        }
        if verb == Verb::Put {
            if ok {
                self.failed_writes_in_a_row.store(0, Ordering::Relaxed);
            } else {
                self.failed_writes_in_a_row.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Default for TapShared {
    fn default() -> Self {
        Self::new()
    }
}

/// The recording wrapper (see the module doc).
pub struct Tap<S> {
    inner: S,
    shared: Arc<TapShared>,
}

impl<S> Tap<S> {
    /// Wraps `inner` with an empty window.
    #[cfg(test)]
    pub fn new(inner: S) -> Self {
        Self::with_shared(inner, Arc::new(TapShared::new()))
    }

    /// Wraps `inner`, recording into `shared` (made before the store it
    /// observes).
    pub fn with_shared(inner: S, shared: Arc<TapShared>) -> Self {
        Self { inner, shared }
    }

    /// The window and counters.
    #[cfg(test)]
    pub fn shared(&self) -> Arc<TapShared> {
        self.shared.clone()
    }
}

fn len_of(b: &Option<Bytes>) -> u64 {
    b.as_ref().map_or(0, |b| b.len() as u64)
}

impl<S> Tap<S> {
    /// Records a batch of GETs started at `t` with its outcome.
    fn record_gets(&self, t: Instant, keys: &[ObjKey], out: &Result<Vec<Option<Bytes>>>) {
        match out {
            Ok(v) => self.shared.record(
                Verb::Get,
                t,
                true,
                keys.iter().zip(v).map(|(k, b)| (k.as_str(), len_of(b))),
            ),
            Err(_) => self
                .shared
                .record(Verb::Get, t, false, keys.iter().map(|k| (k.as_str(), 0))),
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore> BlockStore for Tap<S> {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let t = Instant::now();
        let out = self.inner.get_opts(keys, opts).await;
        self.record_gets(t, keys, &out);
        out
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        let t = Instant::now();
        let out = self.inner.get_range(key, range).await;
        let size = out.as_ref().map_or(0, len_of);
        self.shared.record(
            Verb::GetRange,
            t,
            out.is_ok(),
            std::iter::once((key.as_str(), size)),
        );
        out
    }

    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()> {
        let t = Instant::now();
        let seen: Vec<(ObjKey, u64)> = items
            .iter()
            .map(|(k, v)| (k.clone(), v.len() as u64))
            .collect();
        let out = self.inner.put_opts(items, opts).await;
        self.shared.record(
            Verb::Put,
            t,
            out.is_ok(),
            seen.iter().map(|(k, n)| (k.as_str(), *n)),
        );
        out
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        let t = Instant::now();
        let out = self.inner.delete_many(keys).await;
        self.shared.record(
            Verb::Delete,
            t,
            out.is_ok(),
            keys.iter().map(|k| (k.as_str(), 0)),
        );
        out
    }

    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        let t = Instant::now();
        let out = self.inner.list_opts(prefix, opts).await;
        self.shared
            .record(Verb::List, t, out.is_ok(), std::iter::once((prefix, 0)));
        out
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        let t = Instant::now();
        let out = self.inner.get_tagged(key, bound).await;
        let size = match &out {
            Ok(Some((b, _))) => b.len() as u64,
            _ => 0,
        };
        self.shared.record(
            Verb::Get,
            t,
            out.is_ok(),
            std::iter::once((key.as_str(), size)),
        );
        out
    }

    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        let t = Instant::now();
        let size = data.len() as u64;
        let out = self.inner.put_if(key, data, cond).await;
        self.shared.record(
            Verb::Put,
            t,
            out.is_ok(),
            std::iter::once((key.as_str(), size)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oram_blockstore::{BlockStoreExt, StoreError};

    #[test]
    fn places_from_engine_keys() {
        assert_eq!(place_of("vol0/n/17"), Place::Node(17));
        assert_eq!(place_of("vol0/n/17.1"), Place::Node(17));
        // A sharded tree's keys (`vol0/n/<shard>/<node>`).
        assert_eq!(place_of("vol0/n/1/17.2"), Place::Node(17));
        assert_eq!(place_of("vol0/r/a/26"), Place::Node(26));
        assert_eq!(place_of("vol0/x/a/26"), Place::Other);
        assert_eq!(place_of("a/b/vol0/r/3"), Place::Node(3));
        assert_eq!(place_of("vol0/b/42"), Place::Block(42));
        assert_eq!(place_of("vol0/b/42.1"), Place::Block(42));
        assert_eq!(place_of("vol0/meta/checkpoint"), Place::Other);
        assert_eq!(place_of("vol0/meta/volume"), Place::Other);
        assert_eq!(place_of("x"), Place::Other);
        assert_eq!(place_of("vol0/n/"), Place::Other);
    }

    /// The tap passes every call through with its options, the bounded and
    /// conditional ones too (the lease needs `get_tagged`/`put_if`).
    #[tokio::test]
    async fn the_tap_passes_the_block_store_contract() {
        let dir = tempfile::tempdir().unwrap();
        let tap = Tap::new(oram_store_fs::FsStore::open_with_sync(dir.path(), false).unwrap());
        oram_blockstore::conformance::run_all(&tap, "conf").await;
        oram_blockstore::conformance::conditional_writes(&tap, "cond").await;
        assert!(
            !tap.shared().since(0, 16).2.is_empty(),
            "the tap saw the calls"
        );
    }

    /// A store that fails every call: a backend outage on demand (the real
    /// back-ends are exercised by the e2e tests; here only the counting matters).
    struct Down;

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl BlockStore for Down {
        async fn get_opts(&self, _: &[ObjKey], _: GetOpts) -> Result<Vec<Option<Bytes>>> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn get_range(&self, _: &ObjKey, _: Range<u64>) -> Result<Option<Bytes>> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn put_opts(&self, _: Vec<(ObjKey, Bytes)>, _: PutOpts) -> Result<()> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn delete_many(&self, _: &[ObjKey]) -> Result<()> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn list_opts(&self, _: &str, _: ListOpts) -> Result<Vec<ObjKey>> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn get_tagged(&self, _: &ObjKey, _: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn put_if(&self, _: &ObjKey, _: Bytes, _: PutCondition) -> Result<ObjTag> {
            Err(StoreError::Unavailable("down".into()))
        }
    }

    #[tokio::test]
    async fn the_window_is_bounded_and_counts_every_request() {
        let dir = tempfile::tempdir().unwrap();
        let tap = Tap::new(oram_store_fs::FsStore::open_with_sync(dir.path(), false).unwrap());
        let shared = tap.shared();
        let keys: Vec<ObjKey> = (0..10)
            .map(|i| ObjKey::new(format!("vol0/n/{i}")).unwrap())
            .collect();
        let n = BACKEND_WINDOW / 10 + 5;
        for _ in 0..n {
            tap.put_many(
                keys.iter()
                    .map(|k| (k.clone(), Bytes::from_static(b"sealed")))
                    .collect(),
            )
            .await
            .unwrap();
        }
        let got = tap.get_many(&keys).await.unwrap();
        assert!(got.iter().all(|g| g.as_deref() == Some(&b"sealed"[..])));
        let (first, next, ev) = shared.since(0, usize::MAX);
        assert_eq!(next, (n as u64 + 1) * 10);
        assert_eq!(ev.len(), BACKEND_WINDOW);
        assert_eq!(first, next - BACKEND_WINDOW as u64);
        let last = ev.last().unwrap();
        assert_eq!(
            (last.verb, last.place, last.size),
            (Verb::Get, Place::Node(9), 6)
        );
        assert!(ev.iter().all(|e| e.ok));
        assert_eq!(shared.latency(Verb::Put).count(), n as u64);
        assert_eq!(shared.errors(Verb::Put), 0);

        let down = Tap::new(Down);
        assert!(down.get_many(&keys).await.is_err());
        assert!(down.list("vol0/").await.is_err());
        let s = down.shared();
        assert_eq!(s.errors(Verb::Get), 10);
        assert_eq!(s.errors(Verb::List), 1);
        let (_, _, ev) = s.since(0, 100);
        assert_eq!(ev.len(), 11);
        assert!(ev.iter().all(|e| !e.ok));
    }
}
