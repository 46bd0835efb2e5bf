//! What the proxy measures about its clients and its own operation, for `/metrics`
//! and the dashboard: requests by API, operation and status, latency histograms,
//! client bytes, a bounded window of recent client requests, and the state of the
//! checkpoints, the TLS certificate and the backend lease.
//!
//! [`observe`] wraps a front-end's request handler: it classifies the request
//! ([`crate::classify`]), counts its body bytes in and out, and records the answer.
//! Everything here is bounded: operation names come from a fixed set, statuses are
//! HTTP codes, and the window of recent requests is a ring of [`CLIENT_WINDOW`].

mod access;
mod hist;
mod observe;

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use oram_volume::lease::Lease;

pub use access::TARGET as ACCESS_LOG_TARGET;
pub use hist::{Histogram, Ring};
pub use observe::{observe, Counted};

/// Client requests kept for the dashboard.
pub const CLIENT_WINDOW: usize = 4096;

/// Longest object name kept in the window (bytes; longer names are cut).
const MAX_NAME: usize = 200;

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
    pub fn of(lease: Option<&Lease>) -> Self {
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
    /// The S3 domain of virtual-hosted–style addressing (`[s3] domain`;
    /// empty: none), to classify such requests by their bucket.
    pub s3_domain: String,
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
            s3_domain: String::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
