//! The operator endpoint: `GET /metrics` in the Prometheus text format and
//! `GET /health`. It serves counters of this process only (they start at zero at
//! every start) and needs no credentials: bind it to a private address.
//!
//! What it reveals is what an operator needs and the storage server sees anyway
//! (request and byte counts towards the backend), plus engine internals (stash
//! size, accesses) that the storage server does not see.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::volume::Volume;

/// The Prometheus text of the volume's counters now.
pub fn render(vol: &Volume) -> String {
    let b = vol.backend_counters.snapshot();
    let e = vol.layer.engine().stats();
    let (buckets, objects) = vol.layer.index_counts();
    let state_bytes = std::fs::metadata(crate::datadir::state_path(&vol.data_dir))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
    };
    metric(
        "oram_backend_requests_total",
        "counter",
        "Requests sent to the backend store, by verb.",
        &[
            ("verb=\"get\"", b.get_requests),
            ("verb=\"get_range\"", b.range_requests),
            ("verb=\"put\"", b.put_requests),
            ("verb=\"delete\"", b.delete_requests),
            ("verb=\"list\"", b.list_requests),
        ],
    );
    metric(
        "oram_backend_bytes_total",
        "counter",
        "Object bytes moved to (put) and from (get, get_range) the backend store.",
        &[
            ("verb=\"get\"", b.get_bytes),
            ("verb=\"get_range\"", b.range_bytes),
            ("verb=\"put\"", b.put_bytes),
        ],
    );
    metric(
        "oram_engine_accesses_total",
        "counter",
        "Logical block accesses served by the engine.",
        &[("", e.accesses)],
    );
    metric(
        "oram_engine_rounds_total",
        "counter",
        "Engine rounds (batches of accesses sent to the backend together).",
        &[("", e.rounds)],
    );
    metric(
        "oram_engine_stash_blocks",
        "gauge",
        "Blocks in the stash now.",
        &[("", e.stash_len)],
    );
    metric(
        "oram_engine_stash_max_blocks",
        "gauge",
        "Largest stash seen after a round since start.",
        &[("", e.stash_max)],
    );
    metric(
        "oram_engine_pending_writebacks",
        "gauge",
        "Write-backs waiting for the backend.",
        &[("", e.pending_writebacks)],
    );
    metric(
        "oram_engine_writeback_retries_total",
        "counter",
        "Write-back attempts that failed and were retried.",
        &[("", e.writeback_retries)],
    );
    metric(
        "oram_objects",
        "gauge",
        "Buckets and objects in the index.",
        &[("kind=\"buckets\"", buckets), ("kind=\"objects\"", objects)],
    );
    metric(
        "oram_engine_oblivious",
        "gauge",
        "1 if the engine hides which blocks are accessed (path, ring); 0 for the direct baseline.",
        &[(
            match vol.params.engine.as_str() {
                "path" => "engine=\"path\"",
                "ring" => "engine=\"ring\"",
                _ => "engine=\"direct\"",
            },
            u64::from(vol.params.engine != "direct"),
        )],
    );
    metric(
        "oram_state_file_bytes",
        "gauge",
        "Size of the local state database (state.redb).",
        &[("", state_bytes)],
    );
    out
}

/// Connections the operator endpoint serves at once; more wait in the backlog.
const MAX_CONNECTIONS: usize = 16;

/// Serves `/metrics` and `/health` on `listener` until `stop` fires: HTTP/1.1
/// only, at most [`MAX_CONNECTIONS`] connections, 10 s to send the headers (and
/// idle keep-alive), 10 s for a stalled response.
pub async fn serve(listener: TcpListener, vol: Arc<Volume>, mut stop: oneshot::Receiver<()>) {
    let mut http = ConnBuilder::new(TokioExecutor::new()).http1_only();
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("semaphore open"),
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
        let vol = vol.clone();
        let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let vol = vol.clone();
            async move {
                let (status, ctype, body) = match (req.method(), req.uri().path()) {
                    (&http::Method::GET, "/metrics") => (
                        http::StatusCode::OK,
                        "text/plain; version=0.0.4",
                        render(&vol),
                    ),
                    (&http::Method::GET, "/health") => {
                        (http::StatusCode::OK, "text/plain", "ok\n".to_string())
                    }
                    _ => (
                        http::StatusCode::NOT_FOUND,
                        "text/plain",
                        "not found: GET /metrics or /health\n".to_string(),
                    ),
                };
                http::Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, ctype)
                    .body(s3s::Body::from(body))
            }
        });
        let io = crate::limits::GuardedIo::new(socket, Duration::from_secs(10));
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
