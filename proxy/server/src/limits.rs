//! Connection-level limits of the S3 and Swift listeners: what an unauthenticated
//! client can hold, and for how long.
//!
//! * HTTP/1.1 only: h2c (HTTP/2 over plain TCP) is off, so every connection is
//!   subject to the HTTP/1 header timeout, which also closes idle keep-alive
//!   connections (`header_timeout_secs`).
//! * At most `max_connections` connections per listener (more wait in the listen
//!   backlog) and `max_connections_per_client` per client address (IPv6: per /64);
//!   beyond that a new connection gets `503` and is closed.
//! * A request body that stalls (no byte for `body_timeout_secs`) fails the
//!   request, and a response the client stops reading for `send_timeout_secs`
//!   closes the connection, so neither holds a request permit forever.
//! * TCP_NODELAY on every accepted connection (small responses are not delayed by
//!   Nagle's algorithm waiting for the client's ACK).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `[limits]` of the configuration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Connections served at once per listener; more wait in the backlog.
    pub max_connections: usize,
    /// Connections one client address (IPv6: one /64) may hold at once.
    pub max_connections_per_client: usize,
    /// Seconds to send a request's headers; also how long an idle keep-alive
    /// connection stays open.
    pub header_timeout_secs: u64,
    /// Seconds a request body may stall before the request fails.
    pub body_timeout_secs: u64,
    /// Seconds a response may stall (the client not reading) before the
    /// connection is closed.
    pub send_timeout_secs: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_client: 256,
            header_timeout_secs: 30,
            body_timeout_secs: 60,
            send_timeout_secs: 60,
        }
    }
}

impl LimitsConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0
            || self.max_connections_per_client == 0
            || self.header_timeout_secs == 0
            || self.body_timeout_secs == 0
            || self.send_timeout_secs == 0
        {
            return Err("every [limits] value must be positive".into());
        }
        Ok(())
    }

    /// The timeouts as durations.
    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            header: Duration::from_secs(self.header_timeout_secs),
            body: Duration::from_secs(self.body_timeout_secs),
            send: Duration::from_secs(self.send_timeout_secs),
        }
    }
}

/// The timeouts of one listener.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Request headers (and idle keep-alive).
    pub header: Duration,
    /// Request body inactivity.
    pub body: Duration,
    /// Response inactivity.
    pub send: Duration,
}

/// The address a per-client limit counts: the IP, or an IPv6 address's /64.
fn client_of(addr: &SocketAddr) -> IpAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        ip => ip,
    }
}

/// Open connections per client address.
#[derive(Clone)]
pub struct PerClient {
    max: usize,
    /// Connections per client; entries are removed at zero (bounded by the
    /// listener's connection cap).
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One client's connection slot; released on drop.
pub struct ClientSlot {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut m = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

impl PerClient {
    /// At most `max` connections per client.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            open: Arc::default(),
        }
    }

    /// A slot for a connection from `peer`, or `None` if it holds `max` already.
    pub fn admit(&self, peer: &SocketAddr) -> Option<ClientSlot> {
        let ip = client_of(peer);
        let mut m = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            ip,
            open: self.open.clone(),
        })
    }
}

/// The answer to a connection beyond its client's limit, written without
/// waiting (best effort) before the connection is closed.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 48\r\nRetry-After: 1\r\n\r\nToo many connections from your address; retry.\r\n";

/// A connection whose writes fail once they have made no progress for the send
/// timeout (the client stopped reading).
pub struct GuardedIo<T> {
    inner: T,
    send: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> GuardedIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, send: Duration) -> Self {
        Self {
            inner,
            send,
            stalled: None,
        }
    }

    /// `Pending` stays pending until the stall timer fires, then becomes an error.
    fn on_pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let send = self.send;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(send)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading the response",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.on_pending(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.on_pending(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.on_pending(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request body that fails once no data has arrived for the body timeout.
pub struct TimedBody<B> {
    inner: B,
    idle: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<B> TimedBody<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            stalled: None,
        }
    }
}

/// The error of a stalled request body.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled: no data for {0:?}")]
pub struct BodyStalled(pub Duration);

impl<B> http_body::Body for TimedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let idle = this.idle;
                let timer = this
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled(idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Ready(r) => {
                this.stalled = None;
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_slots_are_counted_and_released() {
        let pc = PerClient::new(2);
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let s1 = pc.admit(&a).unwrap();
        let _s2 = pc.admit(&a).unwrap();
        assert!(pc.admit(&a).is_none(), "third connection of one client");
        assert!(pc.admit(&b).is_some(), "another client is not affected");
        drop(s1);
        assert!(pc.admit(&a).is_some(), "a closed connection frees its slot");
        // One /64 counts as one client.
        let pc = PerClient::new(1);
        let x: SocketAddr = "[2001:db8::1]:1".parse().unwrap();
        let y: SocketAddr = "[2001:db8::2]:1".parse().unwrap();
        let _sx = pc.admit(&x).unwrap();
        assert!(pc.admit(&y).is_none());
        assert!(pc.open.lock().unwrap().len() == 1);
    }

    #[tokio::test]
    async fn a_stalled_body_fails_after_its_timeout() {
        use http_body_util::BodyExt;
        // A body that never yields anything: the client sent headers and stopped.
        struct Silent;
        impl http_body::Body for Silent {
            type Data = Bytes;
            type Error = std::io::Error;
            fn poll_frame(
                self: Pin<&mut Self>,
                _cx: &mut Context<'_>,
            ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
                Poll::Pending
            }
        }
        let timed = TimedBody::new(Silent, Duration::from_millis(50));
        let err = timed.collect().await.unwrap_err();
        assert!(err.to_string().contains("stalled"), "{err}");
    }
}
