//! The front's side: a partition served by a node ([`RemotePartition`]), and
//! the [`Placement`] that puts every partition on the node that owns it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use oram_engine::{
    CheckReport, EngineStats, Formatted, LocalSub, Op, Oram, OramError, Placement, Quiesced,
    Result, RoundId, Shape, StagedAccess,
};
use oram_state::Staged;
use tokio::net::TcpStream;

use crate::error::unavailable;
use crate::tls::ClusterTls;
use crate::wire::{read_frame, write_frame, Envelope, Reply, Request, Response};

type Conn = tokio_rustls::client::TlsStream<TcpStream>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long a front waits for a node: to connect, and for each answer. A node
/// that does not answer in time is treated as down for that request (the round
/// is repeated).
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Connecting and the TLS handshake.
    pub connect: Duration,
    /// One request's answer (a stage reads, a land writes and commits).
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(60),
        }
    }
}

/// A front's connections to one node: idle ones are reused, one request per
/// connection at a time.
pub struct NodeLink {
    addr: String,
    tls: ClusterTls,
    block_size: usize,
    timeouts: Timeouts,
    /// Connections not in use.
    idle: Mutex<Vec<Conn>>,
}

impl std::fmt::Debug for NodeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLink")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl NodeLink {
    /// Connections to the node at `addr` (`host:port`), whose partitions take
    /// blocks of `block_size` bytes.
    pub fn new(addr: String, tls: ClusterTls, block_size: usize, timeouts: Timeouts) -> Arc<Self> {
        Arc::new(Self {
            addr,
            tls,
            block_size,
            timeouts,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The node's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn dial(&self) -> Result<Conn> {
        let fail = |e: String| unavailable(format!("node {}: {e}", self.addr));
        let connect = async {
            let tcp = TcpStream::connect(&self.addr)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let _ = tcp.set_nodelay(true);
            self.tls
                .connector
                .connect(ClusterTls::server_name(), tcp)
                .await
                .map_err(|e| fail(format!("TLS: {e}")))
        };
        tokio::time::timeout(self.timeouts.connect, connect)
            .await
            .map_err(|_| fail("no connection within the timeout".into()))?
    }

    /// Sends `env` and waits for the answer on `conn`.
    async fn exchange(&self, conn: &mut Conn, env: &Envelope) -> Result<Reply> {
        let fail = |e: String| unavailable(format!("node {}: {e}", self.addr));
        let body = env.encode(self.block_size);
        let io = async {
            write_frame(conn, &body)
                .await
                .map_err(|e| fail(e.to_string()))?;
            read_frame(conn)
                .await
                .map_err(|e| fail(e.to_string()))?
                .ok_or_else(|| fail("connection closed".into()))
        };
        let frame = tokio::time::timeout(self.timeouts.request, io)
            .await
            .map_err(|_| fail("no answer within the timeout".into()))??;
        Reply::decode(frame, self.block_size).map_err(|e| fail(e.to_string()))
    }

    /// One request and its answer, on an idle connection or a new one. A
    /// connection that failed is dropped.
    pub async fn call(&self, env: &Envelope) -> Result<Reply> {
        let reuse = lock(&self.idle).pop();
        let mut conn = match reuse {
            Some(c) => c,
            None => self.dial().await?,
        };
        let reply = self.exchange(&mut conn, env).await?;
        lock(&self.idle).push(conn);
        Ok(reply)
    }

    /// As [`NodeLink::call`], keeping the connection (a quiesce holds while it
    /// is open).
    async fn call_holding(&self, env: &Envelope) -> Result<(Reply, Conn)> {
        let mut conn = self.dial().await?;
        let reply = self.exchange(&mut conn, env).await?;
        Ok((reply, conn))
    }
}

/// A partition served by a node: an [`Oram`] whose staged accesses are made
/// there ([`Oram::access_staged_round`]). The partition framework on the front
/// uses it as it uses a local sub-engine.
///
/// **What the storage server observes:** the node's requests for the
/// partition, as the local sub-engine would make them. **What the network
/// observes** (encrypted): per staged access of `n` ops, one request of `n`
/// records of one block each and one answer of `n` blocks, then a land and an
/// answer of fixed size, at the round's timing.
pub struct RemotePartition {
    partition: u32,
    link: Arc<NodeLink>,
    token: u64,
    block_size: usize,
    capacity: u64,
    id_limit: u64,
    /// The counters the node sent with its last answer.
    stats: Arc<Mutex<EngineStats>>,
}

impl std::fmt::Debug for RemotePartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemotePartition")
            .field("partition", &self.partition)
            .field("node", &self.link.addr)
            .field("token", &self.token)
            .finish()
    }
}

impl RemotePartition {
    /// Partition `partition` of `shape`, on the node behind `link`, which
    /// holds it under owner token `token`.
    pub fn new(partition: u32, shape: &Shape, link: Arc<NodeLink>, token: u64) -> Self {
        Self {
            partition,
            link,
            token,
            block_size: shape.block_size,
            capacity: shape.capacity,
            id_limit: shape.id_limit.unwrap_or(shape.capacity),
            stats: Arc::new(Mutex::new(EngineStats::default())),
        }
    }

    fn envelope(&self, request: Request) -> Envelope {
        Envelope {
            partition: self.partition,
            request,
        }
    }

    /// Calls the node and checks its owner token.
    async fn call(&self, request: Request) -> Result<Response> {
        let reply = self.link.call(&self.envelope(request)).await?;
        checked(reply, self.partition, self.token, &self.link.addr)
    }

    fn unexpected(&self, r: Response) -> OramError {
        match r {
            Response::Failed(e) => e,
            other => unavailable(format!(
                "node {}: unexpected answer for partition {}: {other:?}",
                self.link.addr, self.partition
            )),
        }
    }
}

/// A number no other staging attempt of this process has: a counter started
/// from the clock (and the process id), so that a front restarted on the same
/// machine does not reuse the numbers of the one before it.
fn next_attempt() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    NEXT.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let nanos = now.as_nanos() as u64;
        AtomicU64::new(nanos ^ u64::from(std::process::id()).rotate_left(40))
    })
    .fetch_add(1, Ordering::Relaxed)
}

/// The node's answer if it holds the partition under `token`.
fn checked(reply: Reply, p: u32, token: u64, addr: &str) -> Result<Response> {
    if reply.token != token {
        if let Response::Failed(e) = reply.response {
            return Err(e);
        }
        return Err(unavailable(format!(
            "node {addr} holds partition {p} under owner token {}, not {token}: its answer is refused",
            reply.token
        )));
    }
    Ok(reply.response)
}

#[async_trait]
impl Oram for RemotePartition {
    fn name(&self) -> &'static str {
        "remote"
    }

    fn block_size(&self) -> usize {
        self.block_size
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn id_limit(&self) -> u64 {
        self.id_limit
    }

    /// A partition on a node is accessed only within its front's rounds.
    async fn access(&self, _ops: Vec<Op>) -> Result<Vec<Bytes>> {
        Err(OramError::Unsupported(
            "an access of a partition on a node outside a round",
        ))
    }

    async fn access_staged(&self, _ops: Vec<Op>) -> Result<StagedAccess> {
        Err(OramError::Unsupported(
            "a staged access of a partition on a node without its round",
        ))
    }

    /// Stages the access on the node; the returned access lands there (the
    /// node commits it with its ledger) when the front commits its round, and
    /// is aborted there if the round fails.
    async fn access_staged_round(&self, round: RoundId, ops: Vec<Op>) -> Result<StagedAccess> {
        let n = ops.len();
        let attempt = next_attempt();
        let answers = match self
            .call(Request::Stage {
                token: self.token,
                round,
                attempt,
                ops,
            })
            .await?
        {
            Response::Answers(a) if a.len() == n => a,
            Response::Answers(a) => {
                return Err(unavailable(format!(
                    "node {}: {} answers for {n} ops of partition {}",
                    self.link.addr,
                    a.len(),
                    self.partition
                )))
            }
            other => return Err(self.unexpected(other)),
        };
        let (p, token, link, stats) = (
            self.partition,
            self.token,
            self.link.clone(),
            self.stats.clone(),
        );
        let land_link = link.clone();
        let land = async move {
            let env = Envelope {
                partition: p,
                request: Request::Land {
                    token,
                    seq: round.seq,
                    attempt,
                },
            };
            let reply = land_link.call(&env).await?;
            match checked(reply, p, token, &land_link.addr)? {
                Response::Done(s) => {
                    *lock(&stats) = s;
                    Ok(())
                }
                Response::Failed(e) => Err(e),
                other => Err(unavailable(format!(
                    "node {}: unexpected answer to a land: {other:?}",
                    land_link.addr
                ))),
            }
        };
        let finish = move |outcome: std::result::Result<(), String>| {
            if outcome.is_ok() {
                return;
            }
            // The round failed: the node drops what it staged (a no-op if it
            // committed it; the front's repeat then finds it in the ledger).
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let env = Envelope {
                        partition: p,
                        request: Request::Abort {
                            token,
                            seq: round.seq,
                            attempt,
                        },
                    };
                    let _ = link.call(&env).await;
                });
            }
        };
        Ok(StagedAccess::landing(
            answers,
            Staged::default(),
            land,
            finish,
        ))
    }

    async fn flush(&self) -> Result<()> {
        match self.call(Request::Flush).await? {
            Response::Done(s) => {
                *lock(&self.stats) = s;
                Ok(())
            }
            other => Err(self.unexpected(other)),
        }
    }

    /// The counters the node sent with its last answer (no request).
    fn stats(&self) -> EngineStats {
        lock(&self.stats).clone()
    }

    /// Quiesces the partition on the node, which holds it so until the
    /// returned guard is dropped (its connection closes).
    async fn quiesce(&self) -> Result<Quiesced> {
        let (reply, conn) = self
            .link
            .call_holding(&self.envelope(Request::Quiesce))
            .await?;
        match checked(reply, self.partition, self.token, &self.link.addr)? {
            Response::Done(_) => Ok(Quiesced::new(conn)),
            other => Err(self.unexpected(other)),
        }
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        progress(0, 1);
        match self.call(Request::Check).await? {
            Response::Checked(r) => {
                progress(1, 1);
                Ok(r)
            }
            other => Err(self.unexpected(other)),
        }
    }

    async fn sweep(&self) -> Result<u64> {
        match self.call(Request::Sweep).await? {
            Response::Swept(n) => Ok(n),
            other => Err(self.unexpected(other)),
        }
    }

    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        match self.call(Request::Format).await? {
            Response::Formatted(f) => {
                progress(f.positions, f.positions);
                Ok(f)
            }
            other => Err(self.unexpected(other)),
        }
    }
}

/// Puts every partition on the node that owns it (a cluster's front).
#[derive(Debug, Default)]
pub struct RemotePlacement {
    owners: HashMap<u32, (Arc<NodeLink>, u64)>,
}

impl RemotePlacement {
    /// No partition placed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Partition `p` is on the node behind `link`, under owner token `token`.
    pub fn own(&mut self, p: u32, link: Arc<NodeLink>, token: u64) {
        self.owners.insert(p, (link, token));
    }
}

impl Placement for RemotePlacement {
    fn place(&self, p: u32, shape: &Shape, _local: LocalSub<'_>) -> Result<Arc<dyn Oram>> {
        let (link, token) = self.owners.get(&p).ok_or_else(|| {
            OramError::Config(format!("partition {p} has no owner among the nodes"))
        })?;
        Ok(Arc::new(RemotePartition::new(
            p,
            shape,
            link.clone(),
            *token,
        )))
    }

    /// Every partition is on a node.
    fn remote(&self) -> bool {
        true
    }
}
