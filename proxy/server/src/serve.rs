//! The listeners' accept loop: connections with TLS, limits and timeouts, a
//! concurrency limit per listener, and graceful shutdown on the server's stop
//! signal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::limits::{GuardedIo, LimitsConfig, PerClient, TimedBody, TOO_MANY_CONNECTIONS};
use crate::tasks::Shutdown;
use crate::tls::{Stream, Tls};

/// The request body every handler gets: the connection's body, failing once it
/// stalls for the body timeout.
pub type ServedBody = TimedBody<hyper::body::Incoming>;

/// The client address of a request (a request extension set by the accept loop).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// A response body that keeps the request's concurrency permit until it is done.
struct LimitedBody<B> {
    inner: B,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for LimitedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// S3's answer beyond the concurrency limit: 503 SlowDown, which clients retry.
pub(crate) fn s3_overloaded() -> http::Response<s3s::Body> {
    s3s::s3_error!(SlowDown, "Too many requests in flight; slow down.")
        .to_http_response()
        .unwrap_or_else(|_| {
            let mut r = http::Response::new(s3s::Body::empty());
            *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            r
        })
}

/// The accept loop: each connection is served by `handler` until `stopped` fires
/// (the server's one stop signal);
/// then the connections are asked to finish their current requests and close.
/// Beyond `limit` requests at once, `overloaded` answers. Connections are HTTP/1.1
/// only, capped per listener and per client, with header, body and send timeouts
/// (see [`crate::limits`]), and TCP_NODELAY. With `title_case_headers` the
/// answers' header names are sent in Title-Case (`X-Object-Meta-Color`, as
/// Swift sends them; some Swift clients compare names case-sensitively),
/// otherwise in lower case.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<H, F, B, E, O>(
    listener: TcpListener,
    handler: H,
    overloaded: O,
    limit: Arc<Semaphore>,
    cfg: LimitsConfig,
    mut stopped: Shutdown,
    tls: Option<Arc<Tls>>,
    title_case_headers: bool,
) where
    H: Fn(http::Request<ServedBody>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<http::Response<B>, E>> + Send + 'static,
    B: hyper::body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    O: Fn() -> http::Response<B> + Clone + Send + Sync + 'static,
{
    let timeouts = cfg.timeouts();
    // HTTP/1.1 only: h2c would bypass the header timeout (no HTTP/2 idle timeout).
    let mut http = ConnBuilder::new(TokioExecutor::new()).http1_only();
    // Idle or slow clients must not hold connections forever; the header timeout
    // also closes idle keep-alive connections.
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .title_case_headers(title_case_headers)
        // Swift allows 90 metadata headers besides the usual ones.
        .max_headers(256);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(cfg.max_connections));
    let per_client = PerClient::new(cfg.max_connections_per_client);
    loop {
        let conn_permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("semaphore open"),
            _ = stopped.wait() => break,
        };
        let (socket, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped.wait() => break,
        };
        let _ = socket.set_nodelay(true);
        let Some(client_slot) = per_client.admit(&peer) else {
            // Best effort, without waiting: the client is over its limit.
            let _ = socket.try_write(TOO_MANY_CONNECTIONS);
            tracing::debug!(%peer, "connection refused: too many from this client");
            continue;
        };
        let handler = handler.clone();
        let overloaded = overloaded.clone();
        let limit = limit.clone();
        let body_timeout = timeouts.body;
        let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let handler = handler.clone();
            let overloaded = overloaded.clone();
            let limit = limit.clone();
            async move {
                // Over the limit: shed load with an answer that clients retry.
                let Ok(permit) = limit.try_acquire_owned() else {
                    return Ok(overloaded().map(|b| LimitedBody {
                        inner: b,
                        _permit: None,
                    }));
                };
                let mut req = req.map(|b| TimedBody::new(b, body_timeout));
                req.extensions_mut().insert(PeerAddr(peer));
                // The permit lives until the response body is sent: a download counts
                // as in flight until its last byte.
                let resp = handler(req).await?;
                Ok::<_, E>(resp.map(|b| LimitedBody {
                    inner: b,
                    _permit: Some(permit),
                }))
            }
        });
        let io = TokioIo::new(GuardedIo::new(
            Stream::new(socket, tls.as_deref()),
            timeouts.send,
        ));
        let conn = http.serve_connection_with_upgrades(io, svc);
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            let _ = conn.await;
            drop(client_slot);
            drop(conn_permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
