//! A TCP relay that shapes a loopback connection like a wide-area link.
//!
//! Every byte from the client to the target, and back, is delayed by half the
//! round-trip time and paced to the bandwidth cap. The cap is per direction and
//! shared by all connections through the relay, as on a real link whose capacity
//! parallel connections divide among themselves. A new connection costs one round
//! trip before the first byte moves, like a TCP handshake.
//!
//! The same relay serves the ORAM proxy's backend traffic (proxy → relay → MinIO)
//! and the no-ORAM baseline (client → relay → MinIO), so both see the same link.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The link to emulate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    /// Round-trip time added (half in each direction).
    pub rtt: Duration,
    /// Bandwidth cap per direction in bits per second; `None`: unlimited.
    pub bits_per_second: Option<u64>,
}

impl LinkSpec {
    /// The link measured in the master's thesis "Oblivious RAM in practice"
    /// (Thoresen, NTNU 2019): 23.6 ms round trip, 510 Mbit/s.
    pub const THESIS: LinkSpec = LinkSpec {
        rtt: Duration::from_micros(23_600),
        bits_per_second: Some(510_000_000),
    };
}

/// A running relay; dropped or [`Relay::stop`]ped, it stops accepting.
pub struct Relay {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Relay {
    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting new connections (open ones run until they close).
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Listens on `listen` and relays every connection to `target` through `spec`.
pub async fn start(
    listen: SocketAddr,
    target: SocketAddr,
    spec: LinkSpec,
) -> std::io::Result<Relay> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let (stop, mut stopped) = oneshot::channel();
    // When each direction of the link is free again, shared by all connections.
    let up = Arc::new(Mutex::new(Instant::now()));
    let down = Arc::new(Mutex::new(Instant::now()));
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((client, _)) => {
                        tokio::spawn(relay_connection(client, target, spec, up.clone(), down.clone()));
                    }
                    // Out of descriptors or similar: back off instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                _ = &mut stopped => break,
            }
        }
    });
    Ok(Relay {
        addr,
        stop: Some(stop),
        task,
    })
}

type LinkClock = Arc<Mutex<Instant>>;

async fn relay_connection(
    client: TcpStream,
    target: SocketAddr,
    spec: LinkSpec,
    up: LinkClock,
    down: LinkClock,
) {
    // The handshake of a real link costs a round trip.
    tokio::time::sleep(spec.rtt).await;
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::join!(pipe(cr, sw, spec, up), pipe(sr, cw, spec, down));
}

/// Moves bytes from `r` to `w`: each chunk leaves once the link has transmitted it
/// (bandwidth) plus the one-way delay.
async fn pipe(mut r: OwnedReadHalf, mut w: OwnedWriteHalf, spec: LinkSpec, link: LinkClock) {
    let one_way = spec.rtt / 2;
    // A short queue (1 MiB) so that senders feel the slow link's backpressure.
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(16);
    let reader = async move {
        loop {
            let mut buf = vec![0u8; 64 * 1024];
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.send((Instant::now(), buf)).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((arrived, chunk)) = rx.recv().await {
            let transmit = spec.bits_per_second.map_or(Duration::ZERO, |bps| {
                Duration::from_nanos(
                    (chunk.len() as u128 * 8 * 1_000_000_000 / bps.max(1) as u128) as u64,
                )
            });
            // Reserve the link for this chunk after everything queued before it.
            let done = {
                let mut free = link.lock().unwrap_or_else(|e| e.into_inner());
                *free = (*free).max(arrived) + transmit;
                *free
            };
            tokio::time::sleep_until(done + one_way).await;
            if w.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant as StdInstant;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn adds_latency_and_caps_bandwidth_without_changing_bytes() {
        let echo = echo_server().await;
        let spec = LinkSpec {
            rtt: Duration::from_millis(40),
            bits_per_second: Some(8_000_000), // 1 MB/s per direction
        };
        let relay = start("127.0.0.1:0".parse().unwrap(), echo, spec)
            .await
            .unwrap();
        let mut c = TcpStream::connect(relay.addr()).await.unwrap();
        // A ping-pong costs at least one round trip. (The relay's own connection to
        // the echo server may or may not still be opening: no more is certain.)
        let t = StdInstant::now();
        c.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        let t = StdInstant::now();
        c.write_all(b"pong").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        // 500 kB each way at 1 MB/s: at least half a second, and byte-exact.
        let data: Vec<u8> = (0..500_000u32).map(|i| (i % 251) as u8).collect();
        let t = StdInstant::now();
        let (mut r, mut w) = c.into_split();
        let send = {
            let data = data.clone();
            tokio::spawn(async move { w.write_all(&data).await.unwrap() })
        };
        let mut got = vec![0u8; data.len()];
        r.read_exact(&mut got).await.unwrap();
        send.await.unwrap();
        assert!(got == data, "relay changed the bytes");
        assert!(
            t.elapsed() >= Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        relay.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_connections_share_the_bandwidth() {
        let echo = echo_server().await;
        let spec = LinkSpec {
            rtt: Duration::from_millis(2),
            bits_per_second: Some(8_000_000),
        };
        let relay = start("127.0.0.1:0".parse().unwrap(), echo, spec)
            .await
            .unwrap();
        // Four connections echo 200 kB each: 800 kB per direction at 1 MB/s.
        let t = StdInstant::now();
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let addr = relay.addr();
                tokio::spawn(async move {
                    let c = TcpStream::connect(addr).await.unwrap();
                    let (mut r, mut w) = c.into_split();
                    let data = vec![7u8; 200_000];
                    let send = tokio::spawn(async move { w.write_all(&data).await.unwrap() });
                    let mut got = vec![0u8; 200_000];
                    r.read_exact(&mut got).await.unwrap();
                    send.await.unwrap();
                    assert!(got.iter().all(|&b| b == 7));
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            t.elapsed() >= Duration::from_millis(800),
            "{:?}",
            t.elapsed()
        );
        relay.stop().await;
    }
}
