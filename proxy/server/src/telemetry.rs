//! What the proxy measures about its clients and its own operation, for `/metrics`
//! and the dashboard: requests by API, operation and status, latency histograms,
//! client bytes, a bounded window of recent client requests, and the state of the
//! checkpoints, the TLS certificate and the backend lease.
//!
//! [`observe`] wraps a front-end's request handler: it classifies the request
//! ([`crate::classify`]), counts its body bytes in and out, and records the answer.
//! Everything here is bounded: operation names come from a fixed set, statuses are
//! HTTP codes, and the window of recent requests is a ring of [`CLIENT_WINDOW`].

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Client requests kept for the dashboard.
pub const CLIENT_WINDOW: usize = 4096;

/// Longest object name kept in the window (bytes; longer names are cut).
const MAX_NAME: usize = 200;

/// A latency histogram in the Prometheus layout (cumulative when rendered).
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(
            d.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Appends `name_bucket`, `name_sum` and `name_count` samples with `labels`
    /// (`k="v",...` or empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        use std::fmt::Write as _;
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cum}");
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cum}");
    }
}

/// A bounded window of recent events, numbered from 0 in arrival order.
#[derive(Debug)]
pub struct Ring<T> {
    cap: usize,
    next: u64,
    items: VecDeque<T>,
}

impl<T: Clone> Ring<T> {
    /// An empty window of at most `cap` events.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            next: 0,
            items: VecDeque::with_capacity(cap.min(1024)),
        }
    }

    /// Adds an event, dropping the oldest beyond the capacity; returns its number.
    pub fn push(&mut self, item: T) -> u64 {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back(item);
        self.next += 1;
        self.next - 1
    }

    /// The number the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The events numbered `since` and later still in the window (at most the
    /// newest `max`), with the number of the first one returned.
    pub fn since(&self, since: u64, max: usize) -> (u64, Vec<T>) {
        let first = self.next - self.items.len() as u64;
        let from = since
            .clamp(first, self.next)
            .max(self.next.saturating_sub(max as u64));
        let skip = (from - first) as usize;
        (from, self.items.iter().skip(skip).cloned().collect())
    }
}

/// Which front-end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Api {
    /// The S3 API.
    S3,
    /// The Swift API.
    Swift,
}

impl Api {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Api::S3 => "s3",
            Api::Swift => "swift",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The backend lease's state as `/metrics` shows it
/// (`oram_lease_state{state="..."}`), read from the volume's lease when rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// No lease is used.
    None,
    /// The lease is held and current.
    Held,
    /// The lease could not be renewed: another proxy may write the backend.
    Lost,
}

impl LeaseState {
    /// The state of `lease` now (`None`: `[backend] lease_secs = 0`).
    pub fn of(lease: Option<&crate::lease::Lease>) -> Self {
        match lease {
            None => LeaseState::None,
            Some(l) if l.check().is_ok() => LeaseState::Held,
            Some(_) => LeaseState::Lost,
        }
    }

    /// Every state, in the order `/metrics` lists them.
    pub const ALL: [LeaseState; 3] = [LeaseState::None, LeaseState::Held, LeaseState::Lost];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            LeaseState::None => "none",
            LeaseState::Held => "held",
            LeaseState::Lost => "lost",
        }
    }
}

/// One client request as the dashboard shows it.
#[derive(Debug, Clone)]
pub struct ClientEvent {
    /// Milliseconds since the proxy started, when the answer began.
    pub t_ms: f64,
    /// The front-end.
    pub api: Api,
    /// The operation.
    pub op: &'static str,
    /// The object's place on the dashboard's axis (a keyed hash in [0, 1)), for
    /// object reads and writes.
    pub x: Option<f64>,
    /// The object's label: a short keyed digest, or its name when the operator
    /// asked for names (`metrics.dashboard_object_names`).
    pub label: Option<String>,
    /// Whether it read object data.
    pub read: bool,
    /// HTTP status.
    pub status: u16,
    /// Content-Length of the request (writes) or the answer (reads), if known.
    pub size: u64,
    /// Time to the answer's head, milliseconds.
    pub dur_ms: f32,
}

#[derive(Debug, Default)]
struct OpStats {
    by_status: BTreeMap<u16, u64>,
    latency: Histogram,
}

/// The last checkpoints' outcome.
#[derive(Debug, Default)]
pub struct CheckpointStatus {
    /// When the last successful checkpoint was taken (ms since the Unix epoch; 0:
    /// none known).
    pub last_ok_ms: AtomicU64,
    /// Checkpoints that failed since start.
    pub failures: AtomicU64,
    /// Whether the last attempt failed.
    pub last_failed: AtomicBool,
}

/// The TLS certificate served and its reloads.
#[derive(Debug, Default)]
pub struct TlsStatus {
    /// Whether TLS is on.
    pub enabled: AtomicBool,
    /// The certificate's notAfter (Unix seconds).
    pub not_after: AtomicU64,
    /// Reloads that succeeded.
    pub reloads_ok: AtomicU64,
    /// Reloads that failed (the old certificate stayed).
    pub reloads_failed: AtomicU64,
}

/// Everything measured about clients and operations (see the module doc).
pub struct Telemetry {
    started: Instant,
    /// Seconds since the Unix epoch at start.
    pub started_unix: u64,
    /// Per (API, operation): answers by status and latency. Bounded (fixed
    /// operation names, HTTP statuses). Not held with any other lock.
    ops: Mutex<BTreeMap<(Api, &'static str), OpStats>>,
    bytes_in: [AtomicU64; 2],
    bytes_out: [AtomicU64; 2],
    in_flight: [AtomicI64; 2],
    /// Recent client requests for the dashboard. Not held with any other lock.
    clients: Mutex<Ring<ClientEvent>>,
    /// Keys the dashboard's object digests (per process, random).
    object_hash: std::collections::hash_map::RandomState,
    show_names: bool,
    /// Checkpoint outcomes.
    pub checkpoint: CheckpointStatus,
    /// TLS certificate and reloads.
    pub tls: TlsStatus,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere mid-update leaves counters that are still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Milliseconds since the Unix epoch now.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

impl Telemetry {
    /// Fresh counters; `show_names` puts object names (not digests) in the window.
    pub fn new(show_names: bool) -> Self {
        Self {
            started: Instant::now(),
            started_unix: unix_ms() / 1000,
            ops: Mutex::new(BTreeMap::new()),
            bytes_in: Default::default(),
            bytes_out: Default::default(),
            in_flight: Default::default(),
            clients: Mutex::new(Ring::new(CLIENT_WINDOW)),
            object_hash: Default::default(),
            show_names,
            checkpoint: CheckpointStatus::default(),
            tls: TlsStatus::default(),
        }
    }

    /// Time since start.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Milliseconds since start at `t`.
    pub fn ms_since_start(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.started).as_secs_f64() * 1e3
    }

    /// Records a checkpoint's outcome (`Some(taken at, ms since the Unix epoch)`
    /// when it succeeded).
    pub fn checkpoint_done(&self, ok_at_ms: Option<u64>) {
        match ok_at_ms {
            Some(ms) => {
                self.checkpoint.last_ok_ms.store(ms, Ordering::Relaxed);
                self.checkpoint.last_failed.store(false, Ordering::Relaxed);
            }
            None => {
                self.checkpoint.failures.fetch_add(1, Ordering::Relaxed);
                self.checkpoint.last_failed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Client body bytes received and sent by `api`.
    pub fn client_bytes(&self, api: Api) -> (u64, u64) {
        (
            self.bytes_in[api.index()].load(Ordering::Relaxed),
            self.bytes_out[api.index()].load(Ordering::Relaxed),
        )
    }

    /// Requests of `api` being served now.
    pub fn in_flight(&self, api: Api) -> i64 {
        self.in_flight[api.index()].load(Ordering::Relaxed)
    }

    /// Per (API, operation, status): answers; and per (API, operation) the
    /// latency histogram rendered under `name` — calls `f` for each.
    pub fn for_each_op(
        &self,
        mut f: impl FnMut(Api, &'static str, &BTreeMap<u16, u64>, &Histogram),
    ) {
        for ((api, op), s) in lock(&self.ops).iter() {
            f(*api, op, &s.by_status, &s.latency);
        }
    }

    /// All client requests answered so far.
    pub fn requests_total(&self) -> u64 {
        lock(&self.ops)
            .values()
            .map(|s| s.by_status.values().sum::<u64>())
            .sum()
    }

    /// Recent client requests numbered `since` and later (at most `max`).
    pub fn clients_since(&self, since: u64, max: usize) -> (u64, u64, Vec<ClientEvent>) {
        let r = lock(&self.clients);
        let (first, ev) = r.since(since, max);
        (first, r.next_seq(), ev)
    }

    fn object_place(&self, name: &str) -> (f64, String) {
        let h = self.object_hash.hash_one(name);
        let x = (h >> 11) as f64 / (1u64 << 53) as f64;
        let label = if self.show_names {
            let mut end = name.len().min(MAX_NAME);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            name[..end].to_string()
        } else {
            format!("object {:06x}", h >> 40)
        };
        (x, label)
    }

    fn record(
        &self,
        api: Api,
        c: &crate::classify::Classified,
        status: u16,
        size: u64,
        started: Instant,
    ) {
        let dur = started.elapsed();
        {
            let mut ops = lock(&self.ops);
            let s = ops.entry((api, c.op)).or_default();
            *s.by_status.entry(status).or_default() += 1;
            s.latency.observe(dur);
        }
        let (x, label) = match &c.object {
            Some(o) => {
                let (x, l) = self.object_place(o);
                (Some(x), Some(l))
            }
            None => (None, None),
        };
        let ev = ClientEvent {
            t_ms: self.ms_since_start(Instant::now()),
            api,
            op: c.op,
            x,
            label,
            read: c.read,
            status,
            size,
            dur_ms: dur.as_secs_f32() * 1e3,
        };
        lock(&self.clients).push(ev);
    }
}

/// Which way a counted body goes.
#[derive(Debug, Clone, Copy)]
enum Dir {
    In,
    Out,
}

/// A body whose data bytes are added to the client byte counters as they pass.
pub struct Counted<B> {
    inner: B,
    /// `None`: not counted (answers made outside [`observe`], e.g. overload 503s).
    tel: Option<Arc<Telemetry>>,
    api: Api,
    dir: Dir,
}

impl<B> Counted<B> {
    /// A body that is not counted (for answers made outside [`observe`]).
    pub fn uncounted(inner: B) -> Self {
        Self {
            inner,
            tel: None,
            api: Api::S3,
            dir: Dir::Out,
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(f))), Some(tel)) = (&r, &self.tel) {
            if let Some(d) = f.data_ref() {
                let c = match self.dir {
                    Dir::In => &tel.bytes_in,
                    Dir::Out => &tel.bytes_out,
                };
                c[self.api.index()].fetch_add(d.len() as u64, Ordering::Relaxed);
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Decrements the in-flight gauge when the request ends, however it ends.
struct InFlight(Arc<Telemetry>, Api);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight[self.1.index()].fetch_sub(1, Ordering::Relaxed);
    }
}

fn content_length(h: &http::HeaderMap) -> u64 {
    h.get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The future of an observed request.
pub type Observed<B, E> =
    Pin<Box<dyn Future<Output = Result<http::Response<Counted<B>>, E>> + Send>>;

/// Wraps a front-end's handler: classifies each request, counts its body bytes,
/// and records its status and time to the answer's head (an error of the handler
/// itself counts as status 500).
pub fn observe<H, F, B, E, I>(
    tel: Arc<Telemetry>,
    api: Api,
    handler: H,
) -> impl Fn(http::Request<I>) -> Observed<B, E> + Clone + Send + Sync + 'static
where
    I: Send + 'static,
    H: Fn(http::Request<Counted<I>>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<http::Response<B>, E>> + Send + 'static,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    E: Send + 'static,
{
    move |req: http::Request<I>| {
        let tel = tel.clone();
        let handler = handler.clone();
        Box::pin(async move {
            let started = Instant::now();
            let uri = req.uri();
            let c = match api {
                Api::S3 => {
                    crate::classify::s3(req.method(), uri.path(), uri.query(), req.headers())
                }
                Api::Swift => {
                    crate::classify::swift(req.method(), uri.path(), uri.query(), req.headers())
                }
            };
            let req_len = content_length(req.headers());
            tel.in_flight[api.index()].fetch_add(1, Ordering::Relaxed);
            let _guard = InFlight(tel.clone(), api);
            let req = req.map(|b| Counted {
                inner: b,
                tel: Some(tel.clone()),
                api,
                dir: Dir::In,
            });
            match handler(req).await {
                Ok(resp) => {
                    let size = if c.read {
                        content_length(resp.headers())
                    } else {
                        req_len
                    };
                    tel.record(api, &c, resp.status().as_u16(), size, started);
                    let tel2 = tel.clone();
                    Ok(resp.map(|b| Counted {
                        inner: b,
                        tel: Some(tel2),
                        api,
                        dir: Dir::Out,
                    }))
                }
                Err(e) => {
                    tel.record(api, &c, 500, req_len, started);
                    Err(e)
                }
            }
        }) as Observed<B, E>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_and_numbers_them() {
        let mut r = Ring::new(3);
        for i in 0..5u32 {
            assert_eq!(r.push(i), i as u64);
        }
        assert_eq!(r.since(0, 10), (2, vec![2, 3, 4]));
        assert_eq!(r.since(3, 10), (3, vec![3, 4]));
        assert_eq!(r.since(5, 10), (5, vec![]));
        assert_eq!(r.since(99, 10), (5, vec![]));
        assert_eq!(r.since(0, 1), (4, vec![4]));
        assert_eq!(r.next_seq(), 5);
    }

    #[test]
    fn histogram_is_cumulative_in_prometheus_form() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_secs(1000));
        assert_eq!(h.count(), 3);
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "op=\"a\"");
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"0.001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"0.05\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"120\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{op=\"a\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_sum{op=\"a\"} 1000.0305\n"), "{out}");
    }

    #[test]
    fn object_digests_hide_names_unless_asked() {
        let t = Telemetry::new(false);
        let (x1, l1) = t.object_place("bucket/secret-name");
        let (x2, l2) = t.object_place("bucket/secret-name");
        assert_eq!((x1, &l1), (x2, &l2));
        assert!((0.0..1.0).contains(&x1));
        assert!(!l1.contains("secret"), "{l1}");
        let t = Telemetry::new(true);
        let long = "é".repeat(300);
        let (_, l) = t.object_place(&long);
        assert!(l.len() <= MAX_NAME && l.starts_with('é'));
    }
}
