//! The operator endpoint (`[metrics] listen`): `GET /metrics` in the Prometheus
//! text format ([`metrics`]), `GET /health` ([`respond`]), and the dashboard
//! ([`dashboard`]), served from an [`Endpoint`] behind its token.
//!
//! `/health` (200 `ok`; 200 `degraded: …` on a volume 95 % full; 503 while
//! the backend lease is lost or lapsed, or the backend refuses writes) and the dashboard's static page never need the token;
//! `/metrics`, `/buckets/invisible` ([`invisible_buckets`]), the dashboard's
//! data, `/users` (the S3 users, changed while serving: [`users`]) and `/grow`
//! (the volume's growth: [`grow`]) always do
//! (`Authorization: Bearer <token>`; see [`endpoint`] for where the token comes
//! from). On a non-loopback
//! address the endpoint speaks HTTPS when TLS is configured.
//!
//! What it reveals is what an operator needs: request and byte counts towards the
//! backend (which the storage server sees anyway), engine internals (stash size,
//! accesses) and client request counts and latencies by operation (which the
//! storage server does not see), and through the dashboard the recent backend
//! requests and the client requests (object names only as keyed digests unless
//! `metrics.dashboard_object_names`).
//!
//! The endpoint is a second hyper listener (at most `MAX_CONNECTIONS`, 16,
//! connections, `MAX_PER_CLIENT`, 4, per client address; 10 s for the request
//! headers); `/metrics` is rendered on the
//! blocking pool, since it reads table sizes from `state.redb`. Its sources:
//!
//! * **Client requests**: the telemetry around the S3 and Swift handlers names
//!   each request's operation from a fixed set, counts body bytes as they stream,
//!   and records status and time to the answer's head per (API, operation) —
//!   status counts and a latency histogram — plus a bounded window of recent
//!   requests for the dashboard. Answers of the concurrency limit (503 before the
//!   handler) are not counted.
//! * **Backend requests**: the volume's store is wrapped in the tap (recent
//!   requests with verb, position, size, duration and outcome; per-verb errors
//!   and latency histograms) and that in `oram_blockstore::Accounting` (requests
//!   and bytes per verb).
//! * **Engine**: [`oram_engine::EngineStats`] and the configured stash bound. An
//!   engine's named statistics ([`oram_engine::EngineStats::extra`]) appear as
//!   `oram_engine_<name>{engine="..."}` with the kind and help text the engine
//!   gives, so a new engine's statistics need no change here; the partition
//!   framework adds its own and its partitions' counters summed by name.
//! * **Volume and state**: index counts, capacity used, `state.redb`'s size,
//!   entries per table and the write-back journal, the checkpoints' age, the
//!   lease's state, and TLS (certificate expiry, reloads).
//!
//! The list of metrics, for operators, is in `docs/operating.md`; the alert rules
//! in `deploy/oram-proxy.rules.yml` are unit-tested with `promtool test rules`.

mod dashboard;
mod endpoint;
mod grow;
mod metrics;
mod node;
mod respond;
mod users;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use endpoint::{token, Endpoint, EngineInfo};
pub use metrics::render;
pub use node::{serve_node_endpoint, NodeEndpoint, NodeSource};
pub(crate) use users::s3_users;
pub use users::LiveUsers;

use respond::{health, respond};

use crate::limits::{GuardedIo, PerClient, SendGuard, DEFAULT_MIN_SEND_RATE, TOO_MANY_CONNECTIONS};
use crate::tasks::Shutdown;
use crate::tls::{Stream, Tls};
use crate::ServeError;

/// Connections the endpoint serves at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 16;

/// Connections one client address (IPv6: one /64) may hold at once; beyond, a
/// connection is answered 503 and closed, so one client cannot hold every slot
/// (with `/health`, which needs no token) and lock the operator out.
const MAX_PER_CLIENT: usize = 4;

/// Whether the request carries the endpoint's token.
fn authorized(ep: &Endpoint, req: &http::Request<hyper::body::Incoming>) -> bool {
    bearer_matches(&ep.token, req)
}

/// Whether the request carries `token` (`Authorization: Bearer <token>`).
fn bearer_matches(token: &endpoint::Token, req: &http::Request<hyper::body::Incoming>) -> bool {
    req.headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| token.matches(t.trim()))
}

/// The answer to a request without the token.
fn unauthorized() -> http::Response<s3s::Body> {
    let mut r = respond(
        http::StatusCode::UNAUTHORIZED,
        "text/plain",
        "401: send Authorization: Bearer <metrics token>\n",
    );
    r.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer realm=\"oram-proxy\""),
    );
    r
}

async fn handle(
    ep: Arc<Endpoint>,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<s3s::Body> {
    use http::StatusCode;
    let path = req.uri().path().to_string();
    if path == "/users" || path.starts_with("/users/") {
        if !authorized(&ep, &req) {
            return unauthorized();
        }
        return users::route(&ep.users, &ep.vol, &path, req).await;
    }
    if path == "/grow" {
        if !authorized(&ep, &req) {
            return unauthorized();
        }
        return grow::route(&ep, req).await;
    }
    if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET and HEAD (and POST and DELETE under /users, POST /grow)\n",
        );
    }
    let needs_token = matches!(
        path.as_str(),
        "/metrics" | "/dashboard/data" | "/buckets/invisible"
    );
    if needs_token && !authorized(&ep, &req) {
        return unauthorized();
    }
    match path.as_str() {
        "/health" => {
            let (status, body) = health(
                ep.vol.lease.as_deref(),
                ep.vol.layer.usage(),
                ep.tap.failed_writes_in_a_row(),
            );
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
        "/buckets/invisible" => {
            let ep2 = ep.clone();
            match tokio::task::spawn_blocking(move || invisible_buckets(&ep2)).await {
                Ok(Ok(json)) => respond(StatusCode::OK, "application/json", json),
                Ok(Err(e)) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("{e}\n"),
                ),
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "listing failed\n",
                ),
            }
        }
        p if ep.dashboard && p.starts_with("/dashboard") => {
            dashboard::route(&ep, p, req.uri().query())
                .await
                .unwrap_or_else(|| respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"))
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: GET /metrics, /health, /buckets/invisible, /dashboard, /users or /grow
",
        ),
    }
}

/// `GET /buckets/invisible`: the Swift containers S3 cannot address (their
/// names break S3's rules, so `ListBuckets` leaves them out), as a JSON array of
/// `{"account": …, "container": …, "reason": …}` (what `oram-proxy stats`
/// prints). Reads the local index only.
pub fn invisible_buckets(ep: &Endpoint) -> Result<String, oram_objects::ObjectError> {
    let mut o = String::from("[");
    for (i, (b, why)) in ep.vol.layer.buckets_invisible_to_s3()?.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str("{\"account\":");
        dashboard::json_str(&mut o, &b.owner);
        o.push_str(",\"container\":");
        dashboard::json_str(&mut o, &b.name);
        o.push_str(",\"reason\":");
        dashboard::json_str(&mut o, why);
        o.push('}');
    }
    o.push(']');
    Ok(o)
}

/// Serves the endpoint on `listener` (over TLS when `tls` is given) until `stop`
/// fires (see [`serve_with`]).
pub async fn serve(
    listener: TcpListener,
    ep: Arc<Endpoint>,
    tls: Option<Arc<Tls>>,
    stop: Shutdown,
) {
    serve_with(listener, tls, stop, move |req| handle(ep.clone(), req)).await
}

/// Serves `handler` on `listener` (over TLS when `tls` is given) until `stop`
/// fires. HTTP/1.1 only; at most [`MAX_CONNECTIONS`] connections at once and
/// [`MAX_PER_CLIENT`] per client address, each with 10 s to send its request
/// headers (also the idle keep-alive time) and to read 10 KiB of a response
/// whenever the socket is full (1 KiB/s).
pub(crate) async fn serve_with<H, F>(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    mut stop: Shutdown,
    handler: H,
) where
    H: Fn(http::Request<hyper::body::Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = http::Response<s3s::Body>> + Send + 'static,
{
    let mut http = ConnBuilder::new(TokioExecutor::new()).http1_only();
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_client = PerClient::new(MAX_PER_CLIENT);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("semaphore open"),
            _ = stop.wait() => return,
        };
        let (socket, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("metrics accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.wait() => return,
        };
        let Some(client_slot) = per_client.admit(&peer) else {
            // Best effort, without waiting: the client is over its limit.
            let _ = socket.try_write(TOO_MANY_CONNECTIONS);
            continue;
        };
        let handler = handler.clone();
        let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let answer = handler(req);
            async move { Ok::<_, std::convert::Infallible>(answer.await) }
        });
        let send = SendGuard {
            window: Duration::from_secs(10),
            min_bytes: 10 * DEFAULT_MIN_SEND_RATE,
        };
        let io = GuardedIo::new(Stream::new(socket, tls.as_deref()), send);
        let conn = http.serve_connection(TokioIo::new(io), svc).into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
            drop(client_slot);
            drop(permit);
        });
    }
}

/// Binds the metrics address (an empty one means no endpoint).
pub async fn bind(listen: &str) -> Result<Option<(TcpListener, SocketAddr)>, ServeError> {
    if listen.is_empty() {
        return Ok(None);
    }
    let l = TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: listen.to_string(),
            source,
        })?;
    let addr = l.local_addr().map_err(|source| ServeError::Bind {
        addr: listen.to_string(),
        source,
    })?;
    Ok(Some((l, addr)))
}
