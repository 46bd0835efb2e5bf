//! A cluster in one test process: nodes serving partitions over mutual TLS on
//! 127.0.0.1, each on its own thread and runtime, and the front's engine with
//! its partitions placed on them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use oram_engine::{
    Admit, CheckReport, EngineStats, Formatted, Op, Oram, Parts, Quiesced, Result, RoundId,
    StagedAccess,
};
use oram_node::{ClusterTls, NodeHost, NodeLink, RemotePlacement, Served, Timeouts};
use oram_partition::{Blueprint, PartitionedConfig};
use oram_state::Space;

/// One TLS identity for every member of the test cluster.
pub fn tls() -> ClusterTls {
    static PEM: std::sync::OnceLock<(String, String, String)> = std::sync::OnceLock::new();
    let (ca, chain, key) = PEM.get_or_init(|| {
        let ca = oram_node::mint_ca("conformance").expect("a CA");
        let (chain, key) = oram_node::mint_member(&ca, "member").expect("a member");
        (ca.cert_pem.clone(), chain, key.to_string())
    });
    ClusterTls::from_pem(ca.as_bytes(), chain.as_bytes(), key.as_bytes()).expect("TLS")
}

/// A node on its own thread and runtime, serving until dropped.
pub struct NodeThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// CPU time of the node's threads that ended, in clock ticks of 1/100 s.
    cpu: Arc<AtomicU64>,
    /// The thread ids of the node's live threads (the lock guards only the
    /// list).
    tids: Arc<std::sync::Mutex<Vec<u32>>>,
}

/// The calling thread's id (Linux: `/proc/thread-self` links to
/// `<pid>/task/<tid>`; 0 where it cannot be read).
fn thread_id() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time the calling thread has used, in clock ticks of 1/100 s (Linux's
/// `/proc/thread-self/stat`: user and system time; 0 where it cannot be read).
pub fn thread_cpu_ticks() -> u64 {
    cpu_ticks("/proc/thread-self/stat")
}

/// CPU time the whole process has used, in clock ticks of 1/100 s.
pub fn process_cpu_ticks() -> u64 {
    cpu_ticks("/proc/self/stat")
}

fn cpu_ticks(path: &str) -> u64 {
    let Ok(text) = std::fs::read_to_string(path) else {
        return 0;
    };
    // Fields after the command name in parentheses: state is field 3, utime
    // and stime are fields 14 and 15.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15)
}

impl NodeThread {
    /// Starts `host` on a free 127.0.0.1 port; returns it and its address.
    pub fn start(host: NodeHost) -> (Self, String) {
        Self::start_at(host, "127.0.0.1:0".into())
    }

    /// Starts `host` listening on `addr` (a node restarted where it was).
    pub fn start_at(host: NodeHost, addr: String) -> (Self, String) {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let cpu = Arc::new(AtomicU64::new(0));
        let tids = Arc::new(std::sync::Mutex::new(Vec::new()));
        let counted = cpu.clone();
        let listed = tids.clone();
        let thread = std::thread::spawn(move || {
            let list = |tids: &std::sync::Mutex<Vec<u32>>, add: bool| {
                let tid = thread_id();
                let mut l = tids.lock().unwrap_or_else(|e| e.into_inner());
                if add {
                    l.push(tid);
                } else {
                    l.retain(|&t| t != tid);
                }
            };
            list(&listed, true);
            let (on_start, on_stop, on_stop_list) =
                (listed.clone(), counted.clone(), listed.clone());
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .on_thread_start(move || list(&on_start, true))
                .on_thread_stop(move || {
                    list(&on_stop_list, false);
                    on_stop.fetch_add(thread_cpu_ticks(), Ordering::Relaxed);
                })
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind(&addr)
                    .await
                    .expect("bind 127.0.0.1");
                addr_tx
                    .send(listener.local_addr().expect("an address").to_string())
                    .expect("the test waits");
                host.serve(listener, tls(), async {
                    let _ = stopped.await;
                })
                .await;
            });
            drop(rt);
            list(&listed, false);
            counted.fetch_add(thread_cpu_ticks(), Ordering::Relaxed);
        });
        let addr = addr_rx.recv().expect("the node's address");
        (
            Self {
                stop: Some(stop),
                thread: Some(thread),
                cpu,
                tids,
            },
            addr,
        )
    }

    /// The CPU time the node's threads have used so far, in clock ticks of
    /// 1/100 s.
    pub fn cpu_ticks(&self) -> u64 {
        let live: Vec<u32> = self.tids.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.cpu.load(Ordering::Relaxed)
            + live
                .iter()
                .map(|t| cpu_ticks(&format!("/proc/self/task/{t}/stat")))
                .sum::<u64>()
    }

    /// Stops the node; returns the CPU time its threads used, in clock ticks
    /// of 1/100 s.
    pub fn stop(mut self) -> u64 {
        self.halt();
        self.cpu.load(Ordering::Relaxed)
    }

    fn halt(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NodeThread {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The front's engine with the nodes it talks to: dropping it stops them (a
/// crash of the whole cluster, for the suite's restarts).
pub struct Clustered {
    front: Arc<dyn Oram>,
    _nodes: Vec<NodeThread>,
}

#[async_trait]
impl Oram for Clustered {
    fn name(&self) -> &'static str {
        self.front.name()
    }
    fn block_size(&self) -> usize {
        self.front.block_size()
    }
    fn capacity(&self) -> u64 {
        self.front.capacity()
    }
    fn id_limit(&self) -> u64 {
        self.front.id_limit()
    }
    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        self.front.access(ops).await
    }
    async fn access_admitting(&self, ops: Vec<Op>, admitted: Admit) -> Result<Vec<Bytes>> {
        self.front.access_admitting(ops, admitted).await
    }
    async fn access_staged(&self, ops: Vec<Op>) -> Result<StagedAccess> {
        self.front.access_staged(ops).await
    }
    async fn access_staged_round(&self, round: RoundId, ops: Vec<Op>) -> Result<StagedAccess> {
        self.front.access_staged_round(round, ops).await
    }
    async fn flush(&self) -> Result<()> {
        self.front.flush().await
    }
    fn stats(&self) -> EngineStats {
        self.front.stats()
    }
    async fn quiesce(&self) -> Result<Quiesced> {
        self.front.quiesce().await
    }
    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        self.front.check(progress).await
    }
    async fn sweep(&self) -> Result<u64> {
        self.front.sweep().await
    }
    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        self.front.format(progress).await
    }
}

/// The parts a node builds its partitions from: the same store and sealer as
/// `parts`, and a handle of `parts`' state space in the same database (its
/// partitions' spaces are siblings of it; the node writes only those and their
/// ledgers).
pub fn node_parts(parts: &Parts) -> Parts {
    Parts {
        store: parts.store.clone(),
        sealer: parts.sealer.clone(),
        state: parts
            .state
            .sibling(parts.state.space())
            .expect("the engine's space"),
    }
}

/// The partitions node `n` of `count` serves: those with `p % count == n`.
pub fn node_partitions(blueprint: &Blueprint, n: u32, count: u32) -> Vec<u32> {
    (0..blueprint.cfg.partitions)
        .filter(|p| p % count == n)
        .collect()
}

/// Node `n` of `count`: its partitions built from `parts` (the engine's space
/// `base`), each with its ledger, under owner token `100 + n`.
pub fn node_host(blueprint: &Blueprint, base: Space, parts: Parts, n: u32, count: u32) -> NodeHost {
    let which = node_partitions(blueprint, n, count);
    let ledgers: Vec<_> = which
        .iter()
        .map(|&p| {
            parts
                .state
                .sibling(PartitionedConfig::ledger_space(base, p))
                .expect("a ledger space")
        })
        .collect();
    let subs = blueprint
        .partitions(parts, &which)
        .expect("the node's partitions");
    let served = subs
        .into_iter()
        .zip(ledgers)
        .map(|((p, sub), ledger)| Served {
            partition: p,
            sub,
            ledger,
            token: 100 + u64::from(n),
        })
        .collect();
    NodeHost::new(blueprint.cfg.block_size, served)
}

/// Starts a node per entry of `nodes` (see [`node_host`]) and the front's
/// engine over them with its map in `front`; the front names owner token
/// `100 + n + token_skew` for node `n`'s partitions. Returns the front's
/// engine, the nodes and their addresses.
pub fn start_cluster(
    blueprint: &Blueprint,
    front: Parts,
    nodes: Vec<Parts>,
    token_skew: u64,
) -> (Arc<dyn Oram>, Vec<NodeThread>, Vec<String>) {
    let (engine, threads, addrs, _) = start_cluster_hosts(blueprint, front, nodes, token_skew);
    (engine, threads, addrs)
}

/// As [`start_cluster`], also returning each node's [`NodeHost`] (a handle
/// on what the node serves: its checkpoint's quiesce, for one).
pub fn start_cluster_hosts(
    blueprint: &Blueprint,
    front: Parts,
    nodes: Vec<Parts>,
    token_skew: u64,
) -> (Arc<dyn Oram>, Vec<NodeThread>, Vec<String>, Vec<NodeHost>) {
    let count = nodes.len() as u32;
    let base = front.state.space();
    let mut threads = Vec::new();
    let mut addrs = Vec::new();
    let mut hosts = Vec::new();
    let mut placement = RemotePlacement::new();
    for (n, parts) in (0..count).zip(nodes) {
        let host = node_host(blueprint, base, parts, n, count);
        hosts.push(host.clone());
        let (thread, addr) = NodeThread::start(host);
        let link = NodeLink::new(
            addr.clone(),
            tls(),
            blueprint.cfg.block_size,
            Timeouts::default(),
        );
        for p in node_partitions(blueprint, n, count) {
            placement.own(p, link.clone(), 100 + u64::from(n) + token_skew);
        }
        threads.push(thread);
        addrs.push(addr);
    }
    let engine = blueprint
        .engine(front, &placement)
        .expect("the front's engine");
    (Arc::new(engine), threads, addrs, hosts)
}

/// Builds `blueprint` with the front's map in `front` and partition `p` served
/// by node `p % nodes.len()` from `nodes[i]` (see [`node_parts`]) under owner
/// token `100 + i`; the front names token `100 + i + token_skew` (0: the
/// node's; anything else: a front whose view of the owners is stale).
pub fn clustered(
    blueprint: &Blueprint,
    front: Parts,
    nodes: Vec<Parts>,
    token_skew: u64,
) -> Arc<dyn Oram> {
    let (front, nodes, _) = start_cluster(blueprint, front, nodes, token_skew);
    Arc::new(Clustered {
        front,
        _nodes: nodes,
    })
}
