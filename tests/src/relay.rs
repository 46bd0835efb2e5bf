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
    /// Set once to release the held connection.
    release: watch::Sender<bool>,
    /// The first line of the server's answer to the held request.
    status: Mutex<Option<String>>,
    /// Whether a connection has been held.
    held: AtomicBool,
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
            release,
            status: Mutex::new(None),
            held: AtomicBool::new(false),
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

    /// Whether a connection has been held since the relay started.
    pub fn holding(&self) -> bool {
        self.shared.held.load(Ordering::SeqCst)
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
    let shared = s.clone();
    // Client → server; a held connection buffers until released.
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut release = shared.release.subscribe();
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
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
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
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
