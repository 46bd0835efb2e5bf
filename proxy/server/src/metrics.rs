//! The operator endpoint (`[metrics] listen`): `GET /metrics` in the Prometheus
//! text format, `GET /health`, and the dashboard (`/dashboard`, see
//! [`crate::dashboard`]). Counters are of this process only (they start at zero at
//! every start).
//!
//! Access: on a loopback address no token is needed unless one is configured
//! (`metrics.token_file`, or the systemd credential `metrics-token`). On any other
//! address a token is required (generated into `<data_dir>/metrics.token` when
//! none is configured) and, when TLS is configured, the endpoint speaks HTTPS.
//! `/health` (200 `ok`, or 503 while the backend lease is lost or lapsed and
//! writes are refused) and the dashboard's static page never need the token; `/metrics` and
//! the dashboard's data do (`Authorization: Bearer <token>`).
//!
//! What it reveals is what an operator needs: request and byte counts towards the
//! backend (which the storage server sees anyway), engine internals (stash size,
//! accesses) and client request counts and latencies by operation (which the
//! storage server does not see), and through the dashboard the recent backend
//! requests and the client requests (object names only as keyed digests unless
//! `metrics.dashboard_object_names`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use zeroize::Zeroizing;

use crate::config::Config;
use crate::tap::{verb_name, VERBS};
use crate::telemetry::{unix_ms, Api, LeaseState, Telemetry};
use crate::tls::Tls;
use crate::volume::Volume;
use crate::ProxyError;

/// Connections the endpoint serves at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 16;

/// What `/metrics` states about the configuration (fixed while serving).
#[derive(Debug, Clone)]
pub struct EngineInfo {
    /// Engine name.
    pub engine: String,
    /// The stash bound (0: the engine has no stash).
    pub stash_bound: u64,
    /// Seconds between checkpoints (0: at shutdown only).
    pub checkpoint_interval_secs: u64,
}

impl EngineInfo {
    /// From the configuration.
    pub fn new(cfg: &Config) -> Self {
        let e = &cfg.engine;
        Self {
            engine: e.kind.name().to_string(),
            stash_bound: e.kind.settings().stash_bound(&e.shape(&cfg.backend.prefix)),
            checkpoint_interval_secs: cfg.state.checkpoint_interval_secs,
        }
    }
}

/// The bearer token that guards `/metrics` and the dashboard's data.
pub struct Token(Zeroizing<String>);

impl Token {
    /// Reads a token file (mode 0600; surrounding whitespace ignored).
    pub fn read(path: &Path) -> Result<Self, ProxyError> {
        crate::keys::check_private(path)
            .map_err(|e| ProxyError::Config(format!("metrics token: {e}")))?;
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(crate::keys::io(path))?);
        let t = text.trim();
        if t.len() < 16 {
            return Err(ProxyError::Config(format!(
                "metrics token {}: shorter than 16 characters",
                path.display()
            )));
        }
        Ok(Self(Zeroizing::new(t.to_string())))
    }

    /// Whether `given` is the token (compared in constant time, via digests).
    pub fn matches(&self, given: &str) -> bool {
        let a = Sha256::digest(self.0.as_bytes());
        let b = Sha256::digest(given.as_bytes());
        a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// Where the token comes from: the configured file, or (for a non-loopback
/// listener without one) `<data_dir>/metrics.token`, generated on first use.
/// Returns the token and its file, or `None` when no token is needed.
pub fn token(cfg: &Config, addr: &SocketAddr) -> Result<Option<(Token, PathBuf)>, ProxyError> {
    if let Some(p) = &cfg.metrics.token_file {
        return Ok(Some((Token::read(p)?, p.clone())));
    }
    if crate::tls::is_loopback(addr) {
        return Ok(None);
    }
    let p = cfg.data_dir.join("metrics.token");
    if !p.exists() {
        use rand::RngCore;
        let mut b = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut b);
        crate::keys::write_private(&p, &format!("{}\n", crate::keys::hex(&b)))?;
    }
    Ok(Some((Token::read(&p)?, p)))
}

/// Everything the endpoint serves from.
pub struct Endpoint {
    /// The volume (backend counters, engine, index, state database).
    pub vol: Arc<Volume>,
    /// Client-side measurements.
    pub tel: Arc<Telemetry>,
    /// Configuration facts.
    pub info: EngineInfo,
    /// The required token, if any.
    pub token: Option<Token>,
    /// Whether the dashboard is served.
    pub dashboard: bool,
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, v: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {v}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {v}");
        }
    }

    fn metric(&mut self, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
        self.head(name, kind, help);
        for (l, v) in samples {
            self.sample(name, l, v);
        }
    }
}

/// Renders the engine's own statistics (`EngineStats::extra`: the tree engines'
/// repeated rounds, Ring ORAM's evictions and early reshuffles, ...), each as
/// `oram_engine_<name>{engine="<engine>"}` with the engine's help text and kind
/// (counter or gauge). Engines name them in `snake_case`, counters ending in
/// `_total`; a name that is not a valid metric name is skipped.
fn engine_specific(out: &mut Out, engine: &str, stats: &oram_engine::EngineStats) {
    let label = format!("engine=\"{engine}\"");
    for st in &stats.extra {
        if st.name.is_empty()
            || !st
                .name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        {
            continue;
        }
        let kind = match st.kind {
            oram_engine::StatKind::Counter => "counter",
            oram_engine::StatKind::Gauge => "gauge",
        };
        out.metric(
            &format!("oram_engine_{}", st.name),
            kind,
            st.help,
            &[(&label, st.value as f64)],
        );
    }
}

/// The Prometheus text of everything now. Reads the state database's table sizes
/// and the file size: call it off the async workers.
pub fn render(ep: &Endpoint) -> String {
    let vol = &ep.vol;
    let tel = &ep.tel;
    let b = vol.backend_counters.snapshot();
    let e = vol.engine.stats();
    let (buckets, objects) = vol.layer.index_counts();
    let usage = vol.layer.usage();
    let state_bytes = std::fs::metadata(crate::datadir::state_path(&vol.data_dir))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut o = Out(String::new());
    o.metric(
        "oram_build_info",
        "gauge",
        "Build and format versions of this proxy (always 1).",
        &[(
            &format!(
                "version=\"{}\",commit=\"{}\",data_dir_format=\"{}\",state_format=\"{}\"",
                env!("CARGO_PKG_VERSION"),
                env!("ORAM_BUILD_COMMIT"),
                crate::datadir::FORMAT,
                oram_statedb::FORMAT
            ),
            1.0,
        )],
    );
    o.metric(
        "oram_start_time_seconds",
        "gauge",
        "When this process started, seconds since the Unix epoch.",
        &[("", tel.started_unix as f64)],
    );

    // ---- clients ----
    o.head(
        "oram_client_requests_total",
        "counter",
        "Client requests answered, by API, operation and HTTP status.",
    );
    let mut hist = String::new();
    tel.for_each_op(|api, op, by_status, lat| {
        for (status, n) in by_status {
            o.sample(
                "oram_client_requests_total",
                &format!("api=\"{}\",op=\"{op}\",status=\"{status}\"", api.name()),
                n,
            );
        }
        lat.render(
            &mut hist,
            "oram_client_request_duration_seconds",
            &format!("api=\"{}\",op=\"{op}\"", api.name()),
        );
    });
    o.head(
        "oram_client_request_duration_seconds",
        "histogram",
        "Time from a client request's arrival to its answer's head, by API and operation.",
    );
    o.0.push_str(&hist);
    let apis = [Api::S3, Api::Swift];
    o.head(
        "oram_client_requests_in_flight",
        "gauge",
        "Client requests being served now.",
    );
    for a in apis {
        o.sample(
            "oram_client_requests_in_flight",
            &format!("api=\"{}\"", a.name()),
            tel.in_flight(a),
        );
    }
    o.head(
        "oram_client_bytes_total",
        "counter",
        "Body bytes received from (in) and sent to (out) clients.",
    );
    let mut client_bytes = 0u64;
    for a in apis {
        let (i, out) = tel.client_bytes(a);
        client_bytes += i + out;
        o.sample(
            "oram_client_bytes_total",
            &format!("api=\"{}\",direction=\"in\"", a.name()),
            i,
        );
        o.sample(
            "oram_client_bytes_total",
            &format!("api=\"{}\",direction=\"out\"", a.name()),
            out,
        );
    }

    // ---- backend ----
    o.metric(
        "oram_backend_requests_total",
        "counter",
        "Requests sent to the backend store, by verb (failed ones included).",
        &[
            ("verb=\"get\"", b.get_requests as f64),
            ("verb=\"get_range\"", b.range_requests as f64),
            ("verb=\"put\"", b.put_requests as f64),
            ("verb=\"delete\"", b.delete_requests as f64),
            ("verb=\"list\"", b.list_requests as f64),
        ],
    );
    o.metric(
        "oram_backend_bytes_total",
        "counter",
        "Object bytes moved to (put) and from (get, get_range) the backend store.",
        &[
            ("verb=\"get\"", b.get_bytes as f64),
            ("verb=\"get_range\"", b.range_bytes as f64),
            ("verb=\"put\"", b.put_bytes as f64),
        ],
    );
    o.head(
        "oram_backend_errors_total",
        "counter",
        "Backend requests that failed, by verb (each item of a failed batch counts).",
    );
    for v in VERBS {
        o.sample(
            "oram_backend_errors_total",
            &format!("verb=\"{}\"", verb_name(v)),
            vol.tap.errors(v),
        );
    }
    o.head(
        "oram_backend_request_duration_seconds",
        "histogram",
        "Duration of backend calls by verb (a batch of concurrent requests is one call).",
    );
    for v in VERBS {
        vol.tap.latency(v).render(
            &mut o.0,
            "oram_backend_request_duration_seconds",
            &format!("verb=\"{}\"", verb_name(v)),
        );
    }
    let overhead = if client_bytes == 0 {
        0.0
    } else {
        b.total_bytes() as f64 / client_bytes as f64
    };
    o.metric(
        "oram_bandwidth_overhead_ratio",
        "gauge",
        "Backend bytes moved per client body byte since start (0 before any client byte).",
        &[("", overhead)],
    );

    // ---- engine ----
    o.metric(
        "oram_engine_info",
        "gauge",
        "The engine serving the volume (always 1).",
        &[(&format!("engine=\"{}\"", ep.info.engine), 1.0)],
    );
    o.metric(
        "oram_engine_accesses_total",
        "counter",
        "Logical block accesses served by the engine.",
        &[("", e.accesses as f64)],
    );
    o.metric(
        "oram_engine_rounds_total",
        "counter",
        "Engine rounds (batches of accesses sent to the backend together).",
        &[("", e.rounds as f64)],
    );
    o.metric(
        "oram_engine_stash_blocks",
        "gauge",
        "Blocks in the stash now.",
        &[("", e.stash_len as f64)],
    );
    o.metric(
        "oram_engine_stash_max_blocks",
        "gauge",
        "Largest stash seen after a round since start.",
        &[("", e.stash_max as f64)],
    );
    o.metric(
        "oram_engine_stash_mean_blocks",
        "gauge",
        "Mean stash size after a round since start.",
        &[("", e.stash_mean())],
    );
    o.metric(
        "oram_engine_stash_bound_blocks",
        "gauge",
        "The configured stash bound (0: the engine has no stash).",
        &[("", ep.info.stash_bound as f64)],
    );
    o.metric(
        "oram_engine_pending_writebacks",
        "gauge",
        "Rounds writing their buckets to the backend now (tree engines), or write-backs waiting for it.",
        &[("", e.pending_writebacks as f64)],
    );
    o.metric(
        "oram_engine_writeback_retries_total",
        "counter",
        "Backend writes of rounds (or write-backs) that failed and were retried.",
        &[("", e.writeback_retries as f64)],
    );
    engine_specific(&mut o, &ep.info.engine, &e);

    // ---- volume and state ----
    o.metric(
        "oram_objects",
        "gauge",
        "Buckets and objects in the index.",
        &[
            ("kind=\"buckets\"", buckets as f64),
            ("kind=\"objects\"", objects as f64),
        ],
    );
    o.metric(
        "oram_engine_oblivious",
        "gauge",
        "1 if the engine hides which blocks are accessed (path, ring, curious, oblivistore); 0 for the direct baseline.",
        &[(
            &format!("engine=\"{}\"", vol.params.engine),
            f64::from(u8::from(vol.params.engine != "direct")),
        )],
    );
    o.metric(
        "oram_capacity_blocks",
        "gauge",
        "Logical blocks of the volume: all of them, and those in use by objects.",
        &[
            ("kind=\"total\"", usage.capacity_blocks as f64),
            (
                "kind=\"used\"",
                usage.capacity_blocks.saturating_sub(usage.free_blocks) as f64,
            ),
        ],
    );
    o.metric(
        "oram_block_size_bytes",
        "gauge",
        "Bytes per logical block.",
        &[("", usage.block_size as f64)],
    );
    o.metric(
        "oram_state_file_bytes",
        "gauge",
        "Size of the local state database (state.redb).",
        &[("", state_bytes as f64)],
    );
    match vol.db.table_sizes() {
        Ok(sizes) => {
            o.head(
                "oram_state_table_entries",
                "gauge",
                "Entries per table of the local state database.",
            );
            for t in sizes {
                o.sample(
                    "oram_state_table_entries",
                    &format!("table=\"{}\"", t.name),
                    t.entries,
                );
            }
        }
        Err(e) => tracing::warn!("metrics: state table sizes: {e}"),
    }
    match vol.db.journal_size() {
        Ok((entries, bytes)) => {
            o.metric(
                "oram_journal_entries",
                "gauge",
                "Buckets in the write-back journal: written locally, not yet confirmed by the backend.",
                &[("", entries as f64)],
            );
            o.metric(
                "oram_journal_bytes",
                "gauge",
                "Bytes of the write-back journal's entries.",
                &[("", bytes as f64)],
            );
        }
        Err(e) => tracing::warn!("metrics: journal size: {e}"),
    }

    // ---- checkpoints ----
    let now_ms = unix_ms();
    let last_ok = tel
        .checkpoint
        .last_ok_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let since = if last_ok == 0 {
        tel.started_unix * 1000
    } else {
        last_ok
    };
    o.metric(
        "oram_checkpoint_last_success_timestamp_seconds",
        "gauge",
        "When the newest checkpoint on the backend was taken (0: none yet).",
        &[("", last_ok as f64 / 1e3)],
    );
    o.metric(
        "oram_checkpoint_age_seconds",
        "gauge",
        "Seconds since the newest checkpoint (since start if there is none yet): what a lost machine would lose.",
        &[("", now_ms.saturating_sub(since) as f64 / 1e3)],
    );
    o.metric(
        "oram_checkpoint_interval_seconds",
        "gauge",
        "Configured seconds between checkpoints (0: at shutdown only).",
        &[("", ep.info.checkpoint_interval_secs as f64)],
    );
    o.metric(
        "oram_checkpoint_failures_total",
        "counter",
        "Checkpoints that failed since start.",
        &[(
            "",
            tel.checkpoint
                .failures
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        )],
    );

    // ---- lease and TLS ----
    let lease = LeaseState::of(vol.lease.as_deref());
    o.head(
        "oram_lease_state",
        "gauge",
        "The backend lease's state: 1 for the current state (none: no lease is used).",
    );
    for s in LeaseState::ALL {
        o.sample(
            "oram_lease_state",
            &format!("state=\"{}\"", s.name()),
            u8::from(s == lease),
        );
    }
    let t = &tel.tls;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed) as f64;
    let tls_on = t.enabled.load(std::sync::atomic::Ordering::Relaxed);
    o.metric(
        "oram_tls_enabled",
        "gauge",
        "Whether the S3 and Swift listeners speak TLS.",
        &[("", f64::from(u8::from(tls_on)))],
    );
    if tls_on {
        o.metric(
            "oram_tls_certificate_expiry_timestamp_seconds",
            "gauge",
            "notAfter of the certificate served, seconds since the Unix epoch.",
            &[("", ld(&t.not_after))],
        );
        o.metric(
            "oram_tls_reloads_total",
            "counter",
            "Certificate reloads (SIGHUP), by result.",
            &[
                ("result=\"ok\"", ld(&t.reloads_ok)),
                ("result=\"failed\"", ld(&t.reloads_failed)),
            ],
        );
    }
    o.0
}

fn respond(
    status: http::StatusCode,
    ctype: &str,
    body: impl Into<bytes::Bytes>,
) -> http::Response<s3s::Body> {
    let mut r = http::Response::new(s3s::Body::from(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(ctype).expect("valid content type"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    h.insert(
        "x-content-type-options",
        http::HeaderValue::from_static("nosniff"),
    );
    r
}

/// Whether the request carries the token (when one is required).
fn authorized(ep: &Endpoint, req: &http::Request<hyper::body::Incoming>) -> bool {
    let Some(token) = &ep.token else {
        return true;
    };
    req.headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| token.matches(t.trim()))
}

async fn handle(
    ep: Arc<Endpoint>,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<s3s::Body> {
    use http::StatusCode;
    let path = req.uri().path().to_string();
    if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET and HEAD\n",
        );
    }
    let needs_token = matches!(path.as_str(), "/metrics" | "/dashboard/data");
    if needs_token && !authorized(&ep, &req) {
        let mut r = respond(
            StatusCode::UNAUTHORIZED,
            "text/plain",
            "401: send Authorization: Bearer <metrics token>\n",
        );
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer realm=\"oram-proxy\""),
        );
        return r;
    }
    match path.as_str() {
        "/health" => {
            let (status, body) = health(ep.vol.lease.as_deref());
            respond(status, "text/plain", body)
        }
        "/metrics" => {
            let ep2 = ep.clone();
            match tokio::task::spawn_blocking(move || render(&ep2)).await {
                Ok(text) => respond(StatusCode::OK, "text/plain; version=0.0.4", text),
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "rendering failed\n",
                ),
            }
        }
        p if ep.dashboard && p.starts_with("/dashboard") => {
            crate::dashboard::route(&ep, p, req.uri().query())
                .await
                .unwrap_or_else(|| respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"))
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: GET /metrics, /health or /dashboard\n",
        ),
    }
}

/// `GET /health`: 200 `ok` while this proxy may write; 503 with the reason
/// once its backend lease is lost (another proxy took the volume over) or
/// lapsed (renewals failed): writes are then refused and only reads pass, so a
/// load balancer or monitor must not count it as serving.
pub(crate) fn health(lease: Option<&crate::lease::Lease>) -> (http::StatusCode, String) {
    match lease.map(|l| l.check()) {
        None | Some(Ok(())) => (http::StatusCode::OK, "ok\n".into()),
        Some(Err(e)) => (http::StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

/// A response for the dashboard's routes (shared with [`crate::dashboard`]).
pub(crate) fn dashboard_response(
    ctype: &str,
    body: impl Into<bytes::Bytes>,
) -> http::Response<s3s::Body> {
    let mut r = respond(http::StatusCode::OK, ctype, body);
    let h = r.headers_mut();
    h.insert(
        "content-security-policy",
        http::HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    h.insert("x-frame-options", http::HeaderValue::from_static("DENY"));
    h.insert(
        "referrer-policy",
        http::HeaderValue::from_static("no-referrer"),
    );
    r
}

/// Serves the endpoint on `listener` (over TLS when `tls` is given) until `stop`
/// fires. HTTP/1.1 only; at most [`MAX_CONNECTIONS`] connections at once, each
/// with 10 s to send its request headers (also the idle keep-alive time) and 10 s
/// for a stalled response.
pub async fn serve(
    listener: TcpListener,
    ep: Arc<Endpoint>,
    tls: Option<Arc<Tls>>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut http = ConnBuilder::new(TokioExecutor::new()).http1_only();
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("semaphore open"),
            _ = &mut stop => return,
        };
        let socket = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("metrics accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => return,
        };
        let ep = ep.clone();
        let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let ep = ep.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(ep, req).await) }
        });
        let io = crate::limits::GuardedIo::new(
            crate::tls::Stream::new(socket, tls.as_deref()),
            Duration::from_secs(10),
        );
        let conn = http.serve_connection(TokioIo::new(io), svc).into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
}

/// Binds the metrics address (an empty one means no endpoint).
pub async fn bind(listen: &str) -> Result<Option<(TcpListener, SocketAddr)>, crate::ProxyError> {
    if listen.is_empty() {
        return Ok(None);
    }
    let l = TcpListener::bind(listen)
        .await
        .map_err(|source| crate::ProxyError::Bind {
            addr: listen.to_string(),
            source,
        })?;
    let addr = l.local_addr().map_err(|source| crate::ProxyError::Bind {
        addr: listen.to_string(),
        source,
    })?;
    Ok(Some((l, addr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_statistics_are_rendered_with_their_kind_and_engine() {
        let stat = |name, kind, value| oram_engine::Stat {
            name,
            help: "what it counts",
            kind,
            value,
        };
        let stats = oram_engine::EngineStats {
            extra: vec![
                stat("ring_evictions_total", oram_engine::StatKind::Counter, 7),
                stat("shuffle_backlog", oram_engine::StatKind::Gauge, 3),
                stat("Bad-Name", oram_engine::StatKind::Gauge, 1),
            ],
            ..Default::default()
        };
        let mut o = Out(String::new());
        engine_specific(&mut o, "ring", &stats);
        assert_eq!(
            o.0,
            "# HELP oram_engine_ring_evictions_total what it counts\n\
             # TYPE oram_engine_ring_evictions_total counter\n\
             oram_engine_ring_evictions_total{engine=\"ring\"} 7\n\
             # HELP oram_engine_shuffle_backlog what it counts\n\
             # TYPE oram_engine_shuffle_backlog gauge\n\
             oram_engine_shuffle_backlog{engine=\"ring\"} 3\n"
        );
    }

    #[test]
    fn tokens_match_exactly() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        crate::keys::write_private(&p, "  0123456789abcdef0123\n").unwrap();
        let t = Token::read(&p).unwrap();
        assert!(t.matches("0123456789abcdef0123"));
        assert!(!t.matches("0123456789abcdef012"));
        assert!(!t.matches(""));
        let short = d.path().join("s");
        crate::keys::write_private(&short, "abc").unwrap();
        assert!(Token::read(&short).is_err());
    }

    #[test]
    fn a_token_is_generated_only_beyond_loopback() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            data_dir: d.path().to_path_buf(),
            ..Config::default()
        };
        let lo: SocketAddr = "127.0.0.1:9100".parse().unwrap();
        assert!(token(&cfg, &lo).unwrap().is_none());
        let any: SocketAddr = "0.0.0.0:9100".parse().unwrap();
        let (t1, p) = token(&cfg, &any).unwrap().unwrap();
        assert_eq!(p, d.path().join("metrics.token"));
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(t1.matches(text.trim()));
        // Kept across starts.
        let (t2, _) = token(&cfg, &any).unwrap().unwrap();
        assert!(t2.matches(text.trim()));
        // A configured token applies on loopback too.
        cfg.metrics.token_file = Some(p.clone());
        assert!(token(&cfg, &lo).unwrap().is_some());
    }
}
