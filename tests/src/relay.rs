//! A TCP relay that can hold one request back until the test releases it: the
//! real way to make a backend PUT land on a real server *after* its client gave
//! up on it (a timeout), which no server does on demand.
//!
//! [`HoldRelay::arm`] makes the next connection that sends bytes a *held* one:
//! everything it sends is buffered (in order) until [`HoldRelay::release`], then
//! forwarded to the server even if the client has closed its side meanwhile, and
//! the server's answer is read (its status line kept for
//! [`HoldRelay::held_status`]). Other connections pass straight through. The
//! relay's end of a held connection is kept open towards the server until the
//! answer arrives, so the server sees a complete, live request. Every loop is
//! bounded in time.
//!
//! [`HoldRelay::arm_answer`] instead holds the *answer* of the next connection
//! that sends bytes: the server answers at once, the client gets the answer at
//! [`HoldRelay::release`] (a response delayed in transit). And every request
//! line the relay passes on is recorded ([`HoldRelay::requests`]): what the
//! server was sent, as opposed to what the client meant to send.
//! [`HoldRelay::pace_uploads`] makes it a slow uplink.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// How long any connection, held or not, is relayed at most.
const MAX_LIFETIME: Duration = Duration::from_secs(120);

struct Shared {
    armed: AtomicBool,
    /// Hold the answer of the next connection that sends bytes.
    armed_answer: AtomicBool,
    /// Whether a held answer has started to arrive from the server.
    answer_waiting: AtomicBool,
    /// Every request line passed on to the server (`GET /bucket/key HTTP/1.1`).
    requests: Mutex<Vec<String>>,
    /// Set once to release the held connection.
    release: watch::Sender<bool>,
    /// The first line of the server's answer to the held request.
    status: Mutex<Option<String>>,
    /// Whether a connection has been held.
    held: AtomicBool,
    /// Client → server bytes a second on every connection (0: unpaced): a
    /// slow uplink.
    pace: std::sync::atomic::AtomicU64,
}

/// A running relay (stopped when dropped).
pub struct HoldRelay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    _task: JoinHandle<()>,
}

impl HoldRelay {
    /// Listens on a free 127.0.0.1 port and relays to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (release, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            armed: AtomicBool::new(false),
            armed_answer: AtomicBool::new(false),
            answer_waiting: AtomicBool::new(false),
            requests: Mutex::new(Vec::new()),
            release,
            status: Mutex::new(None),
            held: AtomicBool::new(false),
            pace: std::sync::atomic::AtomicU64::new(0),
        });
        let (stop, mut stopped) = oneshot::channel();
        let s = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = listener.accept() => match r {
                        Ok((client, _)) => {
                            let s = s.clone();
                            tokio::spawn(async move {
                                let _ = tokio::time::timeout(MAX_LIFETIME, relay(client, target, s)).await;
                            });
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    },
                    _ = &mut stopped => break,
                }
            }
        });
        Self {
            addr,
            shared,
            stop: Some(stop),
            _task: task,
        }
    }

    /// The address to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds the next connection that sends anything.
    pub fn arm(&self) {
        self.shared.armed.store(true, Ordering::SeqCst);
    }

    /// Holds the answer to the next connection that sends anything until
    /// [`HoldRelay::release`]; its request goes through at once.
    pub fn arm_answer(&self) {
        self.shared.armed_answer.store(true, Ordering::SeqCst);
    }

    /// Waits (at most `limit`) until the server has started answering the
    /// connection whose answer is held; whether it has.
    pub async fn answer_held(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self.shared.answer_waiting.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The request lines passed on to the server so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Whether a connection has been held since the relay started.
    pub fn holding(&self) -> bool {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Passes what clients send on at `bytes_per_sec` from now on (0: as
    /// fast as it comes): an uplink as slow as that.
    pub fn pace_uploads(&self, bytes_per_sec: u64) {
        self.shared.pace.store(bytes_per_sec, Ordering::SeqCst);
    }

    /// Lets the held connection's bytes through to the server.
    pub fn release(&self) {
        let _ = self.shared.release.send(true);
    }

    /// Waits (at most `limit`) for the server's answer to the held request and
    /// returns its status line.
    pub async fn held_status(&self, limit: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Some(s) = self.shared.status.lock().unwrap().clone() {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for HoldRelay {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Finds the request lines in what a client sends: headers are read line by
/// line, a body of `Content-Length` bytes skipped (the S3 SDK sends no chunked
/// bodies here).
#[derive(Default)]
struct RequestLines {
    line: Vec<u8>,
    /// Inside a request's headers (after its request line).
    in_headers: bool,
    content_length: usize,
    /// Body bytes still to skip.
    skip: usize,
}

impl RequestLines {
    fn feed(&mut self, mut data: &[u8], out: &Mutex<Vec<String>>) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            let b = data[0];
            data = &data[1..];
            if b != b'\n' {
                if self.line.len() < 8192 {
                    self.line.push(b);
                }
                continue;
            }
            let text = String::from_utf8_lossy(&self.line)
                .trim_end_matches('\r')
                .to_string();
            self.line.clear();
            if !self.in_headers {
                if !text.is_empty() {
                    out.lock().unwrap().push(text);
                    self.in_headers = true;
                    self.content_length = 0;
                }
            } else if text.is_empty() {
                self.in_headers = false;
                self.skip = self.content_length;
            } else if let Some((name, value)) = text.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    self.content_length = value.trim().parse().unwrap_or(0);
                }
            }
        }
    }
}

async fn relay(client: TcpStream, target: SocketAddr, s: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let held = Arc::new(AtomicBool::new(false));
    let held_up = held.clone();
    let answer_held = Arc::new(AtomicBool::new(false));
    let answer_held_up = answer_held.clone();
    let shared = s.clone();
    // Client → server; a held connection buffers until released.
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut release = shared.release.subscribe();
        let mut requests = RequestLines::default();
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            requests.feed(&buf[..n], &shared.requests);
            if !answer_held_up.load(Ordering::SeqCst)
                && shared.armed_answer.swap(false, Ordering::SeqCst)
            {
                answer_held_up.store(true, Ordering::SeqCst);
            }
            if !held_up.load(Ordering::SeqCst) && shared.armed.swap(false, Ordering::SeqCst) {
                held_up.store(true, Ordering::SeqCst);
                shared.held.store(true, Ordering::SeqCst);
            }
            if held_up.load(Ordering::SeqCst) {
                // Bytes already read stay in order: later chunks wait behind this one.
                let _ = release.wait_for(|r| *r).await;
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
            let pace = shared.pace.load(Ordering::SeqCst);
            if pace > 0 {
                tokio::time::sleep(Duration::from_secs_f64(n as f64 / pace as f64)).await;
            }
        }
        // A held request is kept open towards the server until it has answered;
        // others pass the close on. Either way the down direction ends the
        // connection (the server closes once it sees the close).
        if !held_up.load(Ordering::SeqCst) {
            let _ = sw.shutdown().await;
        }
        std::future::pending::<()>().await;
    };
    // Server → client; a held connection's status line is recorded.
    let down = async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut release = s.release.subscribe();
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if answer_held.load(Ordering::SeqCst) {
                s.answer_waiting.store(true, Ordering::SeqCst);
                let _ = release.wait_for(|r| *r).await;
            }
            if held.load(Ordering::SeqCst) {
                let line = String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                *s.status.lock().unwrap() = Some(line);
                // The held request is answered: nothing more is needed of it.
                break;
            }
            // The client may be gone (a held request's client timed out).
            let _ = cw.write_all(&buf[..n]).await;
        }
        let _ = cw.shutdown().await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
