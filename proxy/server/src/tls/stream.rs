//! A listener's connection: plain TCP, or TLS with the handshake inside the
//! connection's own task, bounded by [`super::HANDSHAKE_TIMEOUT`].

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::Tls;

/// A connection: plain TCP, or TLS (handshaking, then established). The
/// handshake runs inside the connection's own task, on its first read or write,
/// so a slow client never holds up the accept loop.
pub enum Stream {
    /// Plain HTTP.
    Plain(TcpStream),
    /// TLS handshake in progress.
    Handshaking(Box<Handshake>),
    /// TLS established.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// The handshake failed; every call fails.
    Failed,
}

/// A TLS handshake with its deadline.
pub struct Handshake {
    pub(super) accept: tokio_rustls::Accept<TcpStream>,
    pub(super) deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Stream {
    /// Plain TCP, or TLS when `tls` is given.
    pub fn new(socket: TcpStream, tls: Option<&Tls>) -> Self {
        match tls {
            Some(t) => t.stream(socket),
            None => Stream::Plain(socket),
        }
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Stream::Handshaking(h) = self else {
            return Poll::Ready(match self {
                Stream::Failed => Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "TLS handshake failed",
                )),
                _ => Ok(()),
            });
        };
        if h.deadline.as_mut().poll(cx).is_ready() {
            *self = Stream::Failed;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )));
        }
        match Pin::new(&mut h.accept).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(s)) => {
                *self = Stream::Tls(Box::new(s));
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                *self = Stream::Failed;
                Poll::Ready(Err(e))
            }
        }
    }
}

macro_rules! ready {
    ($e:expr) => {
        match $e {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_handshake(cx));
        match me {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match me.poll_handshake(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match me {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match me.poll_handshake(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match me {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            _ => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match me {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match me {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}
