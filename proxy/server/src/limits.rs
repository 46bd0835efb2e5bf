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
//!   request, and a response the client reads slower than `min_send_rate` bytes a
//!   second — it accepts less than `min_send_rate × send_timeout_secs` bytes in a
//!   window of `send_timeout_secs` during which the socket is full — closes the
//!   connection, so neither holds a request permit for long: a client trickling
//!   a byte at a time can no longer keep a download (and its permit) alive.
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
    /// connection is closed; also the window over which `min_send_rate` is
    /// measured.
    pub send_timeout_secs: u64,
    /// Bytes a second a client must read a response at, averaged over a window of
    /// `send_timeout_secs` that starts when the socket is full (0: only a full
    /// stall closes the connection).
    pub min_send_rate: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_client: 256,
            header_timeout_secs: 30,
            body_timeout_secs: 60,
            send_timeout_secs: 60,
            min_send_rate: DEFAULT_MIN_SEND_RATE,
        }
    }
}

/// The default `min_send_rate`: 1 KiB/s, far below any working link, and enough
/// that holding a permit costs a slow reader 60 KiB a minute per request.
pub const DEFAULT_MIN_SEND_RATE: u64 = 1024;

impl LimitsConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0
            || self.max_connections_per_client == 0
            || self.header_timeout_secs == 0
            || self.body_timeout_secs == 0
            || self.send_timeout_secs == 0
        {
            return Err("every [limits] value but min_send_rate must be positive".into());
        }
        Ok(())
    }

    /// The timeouts as durations.
    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            header: Duration::from_secs(self.header_timeout_secs),
            body: Duration::from_secs(self.body_timeout_secs),
            send: SendGuard {
                window: Duration::from_secs(self.send_timeout_secs),
                min_bytes: self.min_send_rate.saturating_mul(self.send_timeout_secs),
            },
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
    /// How fast a response must be read.
    pub send: SendGuard,
}

/// How fast a client must read a response: at least `min_bytes` (and at least
/// one byte) before writes have waited on the socket for `window` in total.
#[derive(Clone, Copy, Debug)]
pub struct SendGuard {
    /// Waiting time allowed per window; a window opens at the first write the
    /// socket cannot take.
    pub window: Duration,
    /// Bytes the client must accept within the window.
    pub min_bytes: u64,
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

/// A connection whose writes fail once the client reads too slowly: from the
/// first write the socket cannot take, the client must accept the guard's
/// `min_bytes` before writes have waited on it for the guard's `window` in total.
/// Only time spent waiting on the socket counts, so a connection idle between
/// responses is never held against the client; once the minimum is reached, the
/// next full socket opens a new window.
pub struct GuardedIo<T> {
    inner: T,
    send: SendGuard,
    window: Option<Window>,
}

/// The open window of a [`GuardedIo`].
struct Window {
    /// Fires when the waiting in this window reaches the guard's window.
    timer: Pin<Box<Sleep>>,
    /// Since when the current write has been waiting, if it is.
    waiting_since: Option<tokio::time::Instant>,
    /// Time writes have waited in this window, not counting the current wait.
    waited: Duration,
    /// Bytes the client accepted in this window.
    accepted: u64,
}

impl<T> GuardedIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, send: SendGuard) -> Self {
        Self {
            inner,
            send,
            window: None,
        }
    }

    /// A write the socket cannot take: opens a window (if none is open), starts
    /// counting the wait, and stays pending until the window's waiting time is
    /// used up, then becomes an error.
    fn on_pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let limit = self.send.window;
        let now = tokio::time::Instant::now();
        let w = self.window.get_or_insert_with(|| Window {
            timer: Box::pin(tokio::time::sleep(limit)),
            waiting_since: None,
            waited: Duration::ZERO,
            accepted: 0,
        });
        if w.waiting_since.is_none() {
            w.waiting_since = Some(now);
            let left = limit.saturating_sub(w.waited);
            w.timer.as_mut().reset(now + left);
        }
        match w.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read the response too slowly",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The socket took `n` bytes (0 for a flush): the wait ends, and the window
    /// closes once the client has accepted the minimum.
    fn on_ready(&mut self, n: usize) {
        let min = self.send.min_bytes.max(1);
        if let Some(w) = &mut self.window {
            if let Some(t) = w.waiting_since.take() {
                w.waited += t.elapsed();
            }
            w.accepted = w.accepted.saturating_add(n as u64);
            if w.accepted >= min {
                self.window = None;
            }
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
            Poll::Ready(Ok(n)) => {
                self.on_ready(n);
                Poll::Ready(Ok(n))
            }
            r => r,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.on_pending(cx),
            Poll::Ready(Ok(())) => {
                self.on_ready(0);
                Poll::Ready(Ok(()))
            }
            r => r,
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
            Poll::Ready(Ok(n)) => {
                self.on_ready(n);
                Poll::Ready(Ok(n))
            }
            r => r,
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

    /// Writes `total` bytes through a guarded pipe whose reader takes `chunk`
    /// bytes every `every`; the writer's result.
    async fn send_to_reader(
        guard: SendGuard,
        total: usize,
        chunk: usize,
        every: Duration,
    ) -> io::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(256);
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; chunk];
            loop {
                match b.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => tokio::time::sleep(every).await,
                }
            }
        });
        let mut w = GuardedIo::new(a, guard);
        let data = vec![7u8; total];
        let r = tokio::time::timeout(Duration::from_secs(60), async {
            w.write_all(&data).await?;
            w.flush().await
        })
        .await
        .expect("the write neither finished nor failed within a minute");
        drop(w);
        reader.await.unwrap();
        r
    }

    #[tokio::test]
    async fn a_client_trickling_a_response_is_cut_off() {
        // The client reads a byte every 5 ms (200 B/s) of a 64 KiB response;
        // the guard wants 10 000 B within 300 ms of waiting. Before the minimum
        // rate, every byte read restarted the stall timer and this ran for ~5 min.
        let guard = SendGuard {
            window: Duration::from_millis(300),
            min_bytes: 10_000,
        };
        let err = send_to_reader(guard, 64 << 10, 1, Duration::from_millis(5))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("too slowly"), "{err}");
    }

    #[tokio::test]
    async fn a_client_reading_at_the_minimum_rate_gets_the_whole_response() {
        // 256 B every 2 ms is ~128 KB/s, far over 10 000 B per 300 ms of waiting;
        // and a pause with nothing to send is not held against the client.
        let guard = SendGuard {
            window: Duration::from_millis(300),
            min_bytes: 10_000,
        };
        send_to_reader(guard, 64 << 10, 256, Duration::from_millis(2))
            .await
            .unwrap();
        // Only waiting on the socket counts: an idle connection whose window is
        // open (a response ended before the minimum) survives a long pause.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(16);
        let mut w = GuardedIo::new(a, guard);
        let writer = tokio::spawn(async move {
            w.write_all(&[1u8; 64]).await?; // fills the pipe: a window opens
            tokio::time::sleep(Duration::from_millis(600)).await; // idle, nothing to send
            w.write_all(&[2u8; 64]).await?;
            w.flush().await
        });
        let mut got = vec![0u8; 128];
        b.read_exact(&mut got).await.unwrap();
        writer.await.unwrap().unwrap();
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
