//! A cluster node's operator endpoint (`[metrics] listen` on a node,
//! [`serve_node_endpoint`]): `GET /health` (no token: `ok` while the node
//! serves) and `GET /metrics` (the token, as on a front): the requests and
//! bytes this node sent to the backend, and its partitions' engine statistics
//! summed over them (`oram_engine_*`, the step timings included), beside
//! `oram_node_info` naming its slot and each partition's accesses
//! (`oram_node_partition_accesses_total`), and each slot's shipped log
//! (`oram_log_*{slot}`). The same connection limits as the volume's endpoint;
//! plain HTTP, so only on a loopback address.
//!
//! What it reveals is what the front's endpoint reveals of the same
//! partitions: counts the storage server sees anyway, and engine internals
//! (the log's stream position is inside the sealed, padded records).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oram_blockstore::{Accounting, AccountingSnapshot, BlockStore};
use oram_engine::{EngineStats, Stat};
use oram_volume::ShipStats;
use tokio::sync::watch;

use super::endpoint::{token, Token};
use super::metrics::{backend_counts, build_info, engine_specific, log_metrics, Out};
use super::respond::respond;
use super::{bind, serve_with, unauthorized};
use crate::tasks::Shutdown;
use crate::{tls, MetricsConfig, ServeError};

/// What a node's endpoint reads from.
pub struct NodeSource {
    /// The slots this node serves now, ascending (one; a member of a cluster
    /// that rebalances, any number).
    pub slots: Box<dyn Fn() -> Vec<u32> + Send + Sync>,
    /// The engine of its partitions.
    pub engine: String,
    /// Requests and bytes this node sent to the backend since it started.
    pub backend: Box<dyn Fn() -> AccountingSnapshot + Send + Sync>,
    /// Each partition it serves now and its engine statistics, ascending.
    pub stats: Box<dyn Fn() -> Vec<(u32, EngineStats)> + Send + Sync>,
    /// Each slot it serves now and its shipped log's counters, ascending
    /// (empty without a log).
    pub logs: Box<dyn Fn() -> Vec<(u32, Arc<ShipStats>)> + Send + Sync>,
}

impl NodeSource {
    /// The source of a node serving one slot: the partitions of `host`, the
    /// requests counted by `backend`, the log shipped by `log` (if any).
    pub fn of_slot(
        slot: u32,
        engine: String,
        backend: Arc<Accounting<Arc<dyn BlockStore>>>,
        stats: Box<dyn Fn() -> Vec<(u32, EngineStats)> + Send + Sync>,
        log: Option<Arc<ShipStats>>,
    ) -> Self {
        Self {
            slots: Box::new(move || vec![slot]),
            engine,
            backend: Box::new(move || backend.snapshot()),
            stats,
            logs: Box::new(move || log.iter().map(|s| (slot, s.clone())).collect()),
        }
    }
}

/// A node's endpoint being served; stopped when dropped.
pub struct NodeEndpoint {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The file holding the token `/metrics` requires.
    pub token_file: PathBuf,
    stop: watch::Sender<bool>,
}

impl Drop for NodeEndpoint {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

struct Served {
    source: NodeSource,
    token: Token,
}

/// Serves a node's operator endpoint on `cfg.listen` (nothing if it is empty)
/// until the returned handle is dropped. The token is `cfg.token_file`'s, or
/// generated into `data_dir` (as a front's). A non-loopback address is refused:
/// the node's endpoint speaks plain HTTP.
pub async fn serve_node_endpoint(
    cfg: &MetricsConfig,
    data_dir: &Path,
    source: NodeSource,
) -> Result<Option<NodeEndpoint>, ServeError> {
    if cfg.listen.is_empty() {
        return Ok(None);
    }
    let (token, token_file) = token(cfg, data_dir)?;
    let Some((listener, addr)) = bind(&cfg.listen).await? else {
        return Ok(None);
    };
    if !tls::is_loopback(&addr) {
        return Err(ServeError::Config(format!(
            "metrics.listen {addr}: a cluster node's operator endpoint speaks plain HTTP and \
             binds loopback only (127.0.0.1 or [::1]); reach it through an SSH tunnel or a TLS \
             proxy on the node's machine"
        )));
    }
    let (stop, rx) = watch::channel(false);
    let served = Arc::new(Served { source, token });
    tokio::spawn(serve_with(listener, None, Shutdown::new(rx), move |req| {
        handle(served.clone(), req)
    }));
    Ok(Some(NodeEndpoint {
        addr,
        token_file,
        stop,
    }))
}

async fn handle(
    ep: Arc<Served>,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<s3s::Body> {
    use http::StatusCode;
    if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET and HEAD\n",
        );
    }
    match req.uri().path() {
        "/health" => respond(StatusCode::OK, "text/plain", "ok\n"),
        "/metrics" => {
            if !super::bearer_matches(&ep.token, &req) {
                return unauthorized();
            }
            respond(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                render_node(&ep.source),
            )
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: GET /metrics or /health (a cluster node)\n",
        ),
    }
}

/// The Prometheus text of a node now.
pub(super) fn render_node(src: &NodeSource) -> String {
    let slots = (src.slots)()
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut o = Out(String::new());
    build_info(&mut o);
    o.metric(
        "oram_node_info",
        "gauge",
        "The cluster slots this node serves (comma-separated), and its partitions' engine \
         (always 1).",
        &[(&format!("slot=\"{slots}\",engine=\"{}\"", src.engine), 1.0)],
    );
    let all = (src.stats)();
    o.metric(
        "oram_node_partitions",
        "gauge",
        "Partitions this node serves.",
        &[("", all.len() as f64)],
    );
    backend_counts(&mut o, &(src.backend)());
    let logs = (src.logs)();
    let labelled: Vec<(String, &ShipStats)> = logs
        .iter()
        .map(|(j, s)| (format!("slot=\"{j}\""), s.as_ref()))
        .collect();
    log_metrics(&mut o, &labelled);
    // Per partition: uniform over the partitions whatever the workload and
    // however slow a node is (the cluster's e2e checks it with a chi-square).
    o.head(
        "oram_node_partition_accesses_total",
        "counter",
        "Accesses each partition of this node served (a function of the rounds' random \
         draws only: as many for every partition, in expectation).",
    );
    for (p, s) in &all {
        o.sample(
            "oram_node_partition_accesses_total",
            &format!("partition=\"{p}\""),
            s.accesses,
        );
    }
    let e = summed(all.into_iter().map(|(_, s)| s));
    o.metric(
        "oram_engine_accesses_total",
        "counter",
        "Partition accesses this node's partitions served.",
        &[("", e.accesses as f64)],
    );
    o.metric(
        "oram_engine_rounds_total",
        "counter",
        "Rounds of this node's partitions (each partition's own).",
        &[("", e.rounds as f64)],
    );
    o.metric(
        "oram_engine_stash_blocks",
        "gauge",
        "Blocks in this node's partitions' stashes now.",
        &[("", e.stash_len as f64)],
    );
    o.metric(
        "oram_engine_pending_writebacks",
        "gauge",
        "This node's partitions' rounds writing to the backend now.",
        &[("", e.pending_writebacks as f64)],
    );
    o.metric(
        "oram_engine_writeback_retries_total",
        "counter",
        "Backend writes of this node's partitions that failed and were retried.",
        &[("", e.writeback_retries as f64)],
    );
    engine_specific(&mut o, &src.engine, &e);
    o.0
}

/// The statistics of several partitions as one: counts and gauges summed
/// (the largest stash seen: the largest), each engine statistic summed by name
/// in first-seen order.
fn summed(all: impl Iterator<Item = EngineStats>) -> EngineStats {
    let mut out = EngineStats::default();
    let mut extra: Vec<Stat> = Vec::new();
    for s in all {
        out.accesses += s.accesses;
        out.rounds += s.rounds;
        out.stash_len += s.stash_len;
        out.stash_max = out.stash_max.max(s.stash_max);
        out.stash_sum += s.stash_sum;
        out.pending_writebacks += s.pending_writebacks;
        out.writeback_retries += s.writeback_retries;
        for x in s.extra {
            oram_engine::add_stat_by_name(&mut extra, x);
        }
    }
    out.extra = extra;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oram_engine::StatKind;
    use oram_store_memory::MemoryStore;

    #[test]
    fn a_node_renders_its_backend_counts_and_its_partitions_summed() {
        let stat = |name, kind, value| Stat {
            name,
            help: "what it counts",
            kind,
            value,
        };
        let part = move |accesses, evictions| EngineStats {
            accesses,
            rounds: 2,
            stash_max: accesses,
            extra: vec![
                stat("ring_evictions_total", StatKind::Counter, evictions),
                stat("step_fetch_microseconds_total", StatKind::Counter, 10),
            ],
            ..EngineStats::default()
        };
        let store: Arc<dyn BlockStore> = Arc::new(MemoryStore::new());
        let log = |records, bytes| {
            let s = ShipStats {
                record_capacity: 16_336,
                ..ShipStats::default()
            };
            s.records
                .store(records, std::sync::atomic::Ordering::Relaxed);
            s.bytes.store(bytes, std::sync::atomic::Ordering::Relaxed);
            Arc::new(s)
        };
        let src = NodeSource::of_slot(
            2,
            "oblivistore".into(),
            Arc::new(Accounting::new(store)),
            Box::new(move || vec![(4, part(3, 1)), (5, part(5, 4))]),
            Some(log(7, 900)),
        );
        let text = render_node(&src);
        for line in [
            "oram_node_info{slot=\"2\",engine=\"oblivistore\"} 1",
            "oram_node_partitions 2",
            "oram_backend_requests_total{verb=\"put\"} 0",
            "oram_engine_accesses_total 8",
            "oram_node_partition_accesses_total{partition=\"4\"} 3",
            "oram_node_partition_accesses_total{partition=\"5\"} 5",
            "oram_engine_rounds_total 4",
            "oram_engine_ring_evictions_total{engine=\"oblivistore\"} 5",
            "oram_engine_step_fetch_microseconds_total{engine=\"oblivistore\"} 20",
            "oram_log_records_total{slot=\"2\"} 7",
            "oram_log_stream_bytes{slot=\"2\"} 900",
            "oram_log_failures_total{slot=\"2\"} 0",
            "oram_log_record_capacity_bytes 16336",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        // A member serving several slots names them all.
        let src = NodeSource {
            slots: Box::new(|| vec![1, 3]),
            engine: "curious".into(),
            backend: Box::new(AccountingSnapshot::default),
            stats: Box::new(Vec::new),
            logs: Box::new(move || vec![(1, log(3, 10)), (3, log(4, 20))]),
        };
        let text = render_node(&src);
        assert!(
            text.contains("oram_node_info{slot=\"1,3\",engine=\"curious\"} 1"),
            "{text}"
        );
        assert!(text.contains("oram_node_partitions 0"), "{text}");
        for line in [
            "oram_log_records_total{slot=\"1\"} 3",
            "oram_log_records_total{slot=\"3\"} 4",
            "oram_log_stream_bytes{slot=\"3\"} 20",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        // Without a log, no log metrics.
        let src = NodeSource {
            slots: Box::new(|| vec![0]),
            engine: "curious".into(),
            backend: Box::new(AccountingSnapshot::default),
            stats: Box::new(Vec::new),
            logs: Box::new(Vec::new),
        };
        assert!(!render_node(&src).contains("oram_log_"));
    }
}
