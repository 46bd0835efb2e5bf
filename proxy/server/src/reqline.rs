//! Percent-encodes raw non-ASCII bytes in HTTP/1 request lines before hyper
//! parses them.
//!
//! hyper refuses a request target with bytes above 0x7F (`400`) before any
//! handler runs, while OpenStack Swift answers such a path (invalid UTF-8 sent
//! raw, as Swift's own functional tests do) with `412 Invalid UTF8 or contains
//! NULL`. [`RequestLineEncoder`] wraps a connection's read side: in every request
//! line it replaces each byte ≥ 0x80 with `%XX`, so the router sees the same
//! percent-encoded path a well-behaved client sends and answers it. It follows the
//! HTTP/1.1 framing (Content-Length and chunked bodies, trailers) so that bodies
//! pass unchanged and every request line of a keep-alive connection is found;
//! anything it cannot follow (a header block over 64 KiB, a malformed length or
//! chunk size) turns it into a plain pass-through for the rest of the connection,
//! and hyper answers as it would have. Writes pass through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest header block followed; beyond it the encoder passes bytes through.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a request line (or the empty lines before one).
    Line,
    /// In the header block (collected in `head`).
    Headers,
    /// `n` more body bytes.
    Body(u64),
    /// A chunk-size line.
    ChunkSize,
    /// `n` more chunk bytes, then its CRLF.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd(u8),
    /// Trailer lines after the last chunk, until an empty line.
    Trailers,
    /// Given up: everything passes through.
    Pass,
}

/// The framing state machine, separate from the IO for testing.
#[derive(Debug)]
struct Framer {
    state: State,
    /// The current header block (or chunk-size/trailer line) so far.
    head: Vec<u8>,
}

impl Framer {
    fn new() -> Self {
        Self {
            state: State::Line,
            head: Vec::new(),
        }
    }

    /// Transforms `input`, appending the result to `out`.
    fn feed(&mut self, mut input: &[u8], out: &mut BytesMut) {
        while !input.is_empty() {
            match self.state {
                State::Pass => {
                    out.extend_from_slice(input);
                    return;
                }
                State::Body(n) | State::ChunkData(n) => {
                    let take = (input.len() as u64).min(n) as usize;
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    let left = n - take as u64;
                    self.state = match (self.state, left) {
                        (State::Body(_), 0) => State::Line,
                        (State::Body(_), l) => State::Body(l),
                        (_, 0) => State::ChunkEnd(2),
                        (_, l) => State::ChunkData(l),
                    };
                }
                State::ChunkEnd(k) => {
                    out.extend_from_slice(&input[..1]);
                    // Accept a bare LF as the end too.
                    let lf = input[0] == b'\n';
                    input = &input[1..];
                    self.state = if lf || k == 1 {
                        State::ChunkSize
                    } else {
                        State::ChunkEnd(k - 1)
                    };
                }
                State::Line => {
                    let b = input[0];
                    input = &input[1..];
                    if b >= 0x80 {
                        out.extend_from_slice(format!("%{b:02X}").as_bytes());
                    } else {
                        out.extend_from_slice(&[b]);
                    }
                    if b == b'\n' {
                        // Empty lines before a request line are allowed (RFC 9112 §2.2).
                        let blank = self.head.iter().all(|c| *c == b'\r');
                        self.head.clear();
                        if !blank {
                            self.state = State::Headers;
                        }
                    } else {
                        self.head.push(b);
                        if self.head.len() > MAX_HEAD {
                            self.state = State::Pass;
                        }
                    }
                }
                State::Headers | State::ChunkSize | State::Trailers => {
                    let (line_end, take) = match input.iter().position(|c| *c == b'\n') {
                        Some(i) => (true, i + 1),
                        None => (false, input.len()),
                    };
                    out.extend_from_slice(&input[..take]);
                    self.head.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    if self.head.len() > MAX_HEAD {
                        self.state = State::Pass;
                        continue;
                    }
                    if line_end {
                        self.line_done();
                    }
                }
            }
        }
    }

    /// A line of the header block, a chunk size or a trailer is complete.
    fn line_done(&mut self) {
        match self.state {
            State::Headers => {
                // `head` holds the header block so far; its last line just ended.
                let text = &self.head;
                let last_line_start = text[..text.len() - 1]
                    .iter()
                    .rposition(|c| *c == b'\n')
                    .map_or(0, |i| i + 1);
                let line = &text[last_line_start..];
                if line == b"\r\n" || line == b"\n" {
                    let head = std::mem::take(&mut self.head);
                    self.state = body_state(&head).unwrap_or(State::Pass);
                }
            }
            State::ChunkSize => {
                let line = std::mem::take(&mut self.head);
                let size = std::str::from_utf8(&line)
                    .ok()
                    .map(|l| l.split(';').next().unwrap_or("").trim().to_string())
                    .and_then(|h| u64::from_str_radix(&h, 16).ok());
                self.state = match size {
                    Some(0) => State::Trailers,
                    Some(n) => State::ChunkData(n),
                    None => State::Pass,
                };
            }
            State::Trailers => {
                let line = std::mem::take(&mut self.head);
                if line == b"\r\n" || line == b"\n" {
                    self.state = State::Line;
                }
            }
            _ => {}
        }
    }
}

/// The body framing a request's header block announces: chunked, a length, or
/// none; `None` if it cannot be read (the encoder then passes everything through).
fn body_state(head: &[u8]) -> Option<State> {
    let text = std::str::from_utf8(head).ok()?;
    let mut len = None;
    let mut chunked = false;
    for line in text.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .split(',')
                .next_back()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            if !chunked {
                return None;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            len = Some(value.trim().parse::<u64>().ok()?);
        }
    }
    Some(match (chunked, len) {
        (true, _) => State::ChunkSize,
        (false, Some(n)) if n > 0 => State::Body(n),
        _ => State::Line,
    })
}

/// A connection whose request lines are percent-encoded on the way in (see the
/// module documentation).
pub struct RequestLineEncoder<S> {
    inner: S,
    framer: Framer,
    /// Transformed bytes not yet handed to the reader.
    pending: BytesMut,
}

impl<S> RequestLineEncoder<S> {
    /// Wraps a connection.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            framer: Framer::new(),
            pending: BytesMut::new(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RequestLineEncoder<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending.is_empty() {
            let mut raw = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut raw);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    if rb.filled().is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    this.framer.feed(rb.filled(), &mut this.pending);
                }
                other => return other,
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..n]);
        this.pending.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RequestLineEncoder<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes.
    fn run(input: &[u8], step: usize) -> Vec<u8> {
        let mut f = Framer::new();
        let mut out = BytesMut::new();
        for piece in input.chunks(step) {
            f.feed(piece, &mut out);
        }
        out.to_vec()
    }

    #[test]
    fn encodes_request_lines_only_across_keep_alive_requests() {
        let body = [0xffu8, 0xfe, b'\n', 0x80, b'G', b'E', b'T'];
        let mut input = Vec::new();
        input.extend_from_slice(b"PUT /v1/AUTH_a/c\xc3\x28/o HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n");
        input.extend_from_slice(&body);
        input.extend_from_slice(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\n\xff\xfe\xfd\r\n0\r\nX-T: 1\r\n\r\n");
        input.extend_from_slice(b"\r\nGET /\xe9 HTTP/1.1\r\n\r\n");
        let mut want = Vec::new();
        want.extend_from_slice(b"PUT /v1/AUTH_a/c%C3(/o HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n");
        want.extend_from_slice(&body);
        want.extend_from_slice(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\n\xff\xfe\xfd\r\n0\r\nX-T: 1\r\n\r\n");
        want.extend_from_slice(b"\r\nGET /%E9 HTTP/1.1\r\n\r\n");
        for step in [1, 2, 5, 64, 4096] {
            assert_eq!(run(&input, step), want, "step {step}");
        }
    }

    #[test]
    fn unreadable_framing_passes_through() {
        let input = b"PUT /a HTTP/1.1\r\nContent-Length: x\r\n\r\n\xff GET /\xe9".to_vec();
        let out = run(&input, 3);
        assert_eq!(out, input, "after a bad length nothing is changed");
        let input = b"PUT /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n\xff".to_vec();
        assert_eq!(run(&input, 1), input);
    }
}
