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

/// An answer that takes this long is logged (debug): a slow answer during a
/// failover says which request waited.
const SLOW_ANSWER: Duration = Duration::from_millis(500);

/// A front's connections to one node: idle ones are reused, one request per
/// connection at a time.
pub struct NodeLink {
    addr: String,
    tls: ClusterTls,
    block_size: usize,
    timeouts: Timeouts,
    /// Connections not in use.
    idle: Mutex<Vec<Conn>>,
    /// Set once the node no longer owns what this link was for
    /// ([`NodeLink::retire`]): calls under way fail at once.
    retired: tokio::sync::watch::Sender<bool>,
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
            retired: tokio::sync::watch::Sender::new(false),
        })
    }

    /// The node lost what this link was for (another node took its slot over):
    /// every call under way and later fails at once as unavailable, instead of
    /// waiting for a paused or cut-off node's timeout, so the round is repeated
    /// on the new owner.
    pub fn retire(&self) {
        self.retired.send_replace(true);
        lock(&self.idle).clear();
    }

    /// Runs `work` (a request about `env`) unless the link is retired first.
    /// A request that fails, or is answered only after [`SLOW_ANSWER`], is
    /// logged at debug level with the time it took: what a failover's wait is
    /// made of (names the partition and the request's kind, never its
    /// contents).
    async fn unless_retired<T>(
        &self,
        env: &Envelope,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = std::time::Instant::now();
        let mut retired = self.retired.subscribe();
        let r = tokio::select! {
            biased;
            _ = retired.wait_for(|r| *r) => Err(unavailable(format!(
                "node {}: it no longer serves this partition (another node took its slot over)",
                self.addr
            ))),
            r = work => r,
        };
        let took = started.elapsed();
        match &r {
            Err(e) => tracing::debug!(
                node = %self.addr,
                partition = env.partition,
                request = env.request.kind(),
                ms = took.as_millis() as u64,
                "request to a node failed: {e}"
            ),
            Ok(_) if took >= SLOW_ANSWER => tracing::debug!(
                node = %self.addr,
                partition = env.partition,
                request = env.request.kind(),
                ms = took.as_millis() as u64,
                "a node answered slowly"
            ),
            Ok(_) => {}
        }
        r
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
        self.unless_retired(env, async {
            let reuse = lock(&self.idle).pop();
            let mut conn = match reuse {
                Some(c) => c,
                None => self.dial().await?,
            };
            let reply = self.exchange(&mut conn, env).await?;
            lock(&self.idle).push(conn);
            Ok(reply)
        })
        .await
    }
}

/// Where a partition is served: the node's link and the owner token it holds
/// the partition under. A coordinator moves it ([`Route::set`]) when another
/// node takes the partition over; every request reads it afresh, and an answer
/// is taken only with the token of the route it was sent on.
#[derive(Debug)]
pub struct Route {
    /// The current node and token (replaced whole; never held across I/O).
    current: Mutex<(Arc<NodeLink>, u64)>,
}

impl Route {
    /// The partition is on the node behind `link`, under `token`.
    pub fn new(link: Arc<NodeLink>, token: u64) -> Arc<Self> {
        Arc::new(Self {
            current: Mutex::new((link, token)),
        })
    }

    /// The node and token requests go to now.
    pub fn get(&self) -> (Arc<NodeLink>, u64) {
        let g = lock(&self.current);
        (g.0.clone(), g.1)
    }

    /// Moves the partition to the node behind `link`, under `token`, and
    /// retires the old link ([`NodeLink::retire`]): requests under way on it
    /// fail, and the round they belong to is repeated on the new node.
    pub fn set(&self, link: Arc<NodeLink>, token: u64) {
        let old = std::mem::replace(&mut *lock(&self.current), (link, token));
        old.0.retire();
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
    route: Arc<Route>,
    block_size: usize,
    capacity: u64,
    id_limit: u64,
    /// The counters the node sent with its last answer.
    stats: Arc<Mutex<EngineStats>>,
}

impl std::fmt::Debug for RemotePartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (link, token) = self.route.get();
        f.debug_struct("RemotePartition")
            .field("partition", &self.partition)
            .field("node", &link.addr)
            .field("token", &token)
            .finish()
    }
}

impl RemotePartition {
    /// Partition `partition` of `shape`, on the node `route` names.
    pub fn new(partition: u32, shape: &Shape, route: Arc<Route>) -> Self {
        Self {
            partition,
            route,
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

    /// Calls the node the route names now and checks its owner token.
    async fn call(&self, request: Request) -> Result<Response> {
        let (link, token) = self.route.get();
        let reply = link.call(&self.envelope(request)).await?;
        checked(reply, self.partition, token, &link.addr)
    }

    fn unexpected(&self, r: Response) -> OramError {
        match r {
            Response::Failed(e) => e,
            other => unavailable(format!(
                "node {}: unexpected answer for partition {}: {other:?}",
                self.route.get().0.addr,
                self.partition
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
        // The land and the abort go to the node that staged, under its token.
        let (link, token) = self.route.get();
        let env = self.envelope(Request::Stage {
            token,
            round,
            attempt,
            ops,
        });
        let reply = link.call(&env).await?;
        let answers = match checked(reply, self.partition, token, &link.addr)? {
            Response::Answers(a) if a.len() == n => a,
            Response::Answers(a) => {
                return Err(unavailable(format!(
                    "node {}: {} answers for {n} ops of partition {}",
                    link.addr,
                    a.len(),
                    self.partition
                )))
            }
            other => return Err(self.unexpected(other)),
        };
        let (p, stats) = (self.partition, self.stats.clone());
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

    /// Holds nothing on the node: the front's framework quiesces its rounds
    /// (and settles the one in flight) before it asks, and a land is answered
    /// only once the node committed it, so nothing of this front's is pending
    /// there. The node's own state is its own checkpoint's
    /// ([`crate::NodeHost::quiesce`]). Holding the node's partition instead
    /// cost a connection per partition, one after the other (seconds for a
    /// front's checkpoint over a slow link, every round waiting), and could
    /// only be taken in the node checkpoint's order.
    ///
    /// Observed: nothing.
    async fn quiesce(&self) -> Result<Quiesced> {
        Ok(Quiesced::new(()))
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
    owners: HashMap<u32, Arc<Route>>,
    /// [`Placement::ride_out`].
    ride_out: std::time::Duration,
}

impl RemotePlacement {
    /// No partition placed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Partition `p` is on the node behind `link`, under owner token `token`,
    /// for good (static membership).
    pub fn own(&mut self, p: u32, link: Arc<NodeLink>, token: u64) {
        self.owners.insert(p, Route::new(link, token));
    }

    /// Rounds ride out a partition unavailable for up to `d` (its slot moving
    /// between members, a node taken over): [`Placement::ride_out`].
    pub fn ride_out(&mut self, d: std::time::Duration) {
        self.ride_out = d;
    }

    /// Partition `p` is wherever `route` names (a coordinator moves it).
    pub fn route(&mut self, p: u32, route: Arc<Route>) {
        self.owners.insert(p, route);
    }
}

impl Placement for RemotePlacement {
    fn place(&self, p: u32, shape: &Shape, _local: LocalSub<'_>) -> Result<Arc<dyn Oram>> {
        let route = self.owners.get(&p).ok_or_else(|| {
            OramError::Config(format!("partition {p} has no owner among the nodes"))
        })?;
        Ok(Arc::new(RemotePartition::new(p, shape, route.clone())))
    }

    /// Every partition is on a node.
    fn remote(&self) -> bool {
        true
    }

    fn ride_out(&self) -> std::time::Duration {
        self.ride_out
    }
}
