//! `GET /metrics`: everything the operator endpoint states, in the Prometheus
//! text format, section by section. Counters are of this process only (they
//! start at zero at every start).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use oram_blockstore::AccountingSnapshot;
use oram_engine::EngineStats;

use super::endpoint::Endpoint;
use crate::tap::{verb_name, VERBS};
use crate::telemetry::{unix_ms, Api, LeaseState};

/// Prometheus text being written.
pub(super) struct Out(pub(super) String);

impl Out {
    pub(super) fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    pub(super) fn sample(&mut self, name: &str, labels: &str, v: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {v}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {v}");
        }
    }

    pub(super) fn metric(&mut self, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
        self.head(name, kind, help);
        for (l, v) in samples {
            self.sample(name, l, v);
        }
    }
}

/// What every section reads from: the endpoint and the counters read once at
/// the start of a rendering.
struct Now<'a> {
    ep: &'a Endpoint,
    backend: AccountingSnapshot,
    engine: EngineStats,
}

/// The Prometheus text of everything now. Reads the state database's table sizes
/// and the file size: call it off the async workers.
pub fn render(ep: &Endpoint) -> String {
    let n = Now {
        ep,
        backend: ep.vol.backend_counters.snapshot(),
        engine: ep.vol.engine.stats(),
    };
    let mut o = Out(String::new());
    build(&mut o, &n);
    let client_bytes = clients(&mut o, &n);
    backend(&mut o, &n, client_bytes);
    engine(&mut o, &n);
    volume(&mut o, &n);
    checkpoints(&mut o, &n);
    lease_and_tls(&mut o, &n);
    o.0
}

/// The build, and when this process started.
fn build(o: &mut Out, n: &Now<'_>) {
    let tel = &n.ep.tel;
    build_info(o);
    o.metric(
        "oram_start_time_seconds",
        "gauge",
        "When this process started, seconds since the Unix epoch.",
        &[("", tel.started_unix as f64)],
    );
}
/// `oram_build_info`: the build and format versions.
pub(super) fn build_info(o: &mut Out) {
    o.metric(
        "oram_build_info",
        "gauge",
        "Build and format versions of this proxy (always 1).",
        &[(
            &format!(
                "version=\"{}\",commit=\"{}\",data_dir_format=\"{}\",state_format=\"{}\"",
                env!("CARGO_PKG_VERSION"),
                crate::build_info::COMMIT,
                oram_volume::datadir::FORMAT,
                oram_statedb::FORMAT
            ),
            1.0,
        )],
    );
}

/// Client requests, latencies and bytes by API; returns the client body bytes
/// moved since start.
fn clients(o: &mut Out, n: &Now<'_>) -> u64 {
    let tel = &n.ep.tel;
    o.head(
        "oram_client_requests_total",
        "counter",
        "Client requests answered, by API, operation and HTTP status.",
    );
    let mut hist = String::new();
    tel.for_each_op(|api, op, by_status, lat| {
        for (status, n) in by_status {
            o.sample(
                "oram_client_requests_total",
                &format!("api=\"{}\",op=\"{op}\",status=\"{status}\"", api.name()),
                n,
            );
        }
        lat.render(
            &mut hist,
            "oram_client_request_duration_seconds",
            &format!("api=\"{}\",op=\"{op}\"", api.name()),
        );
    });
    o.head(
        "oram_client_request_duration_seconds",
        "histogram",
        "Time from a client request's arrival to its answer's head, by API and operation.",
    );
    o.0.push_str(&hist);
    let apis = [Api::S3, Api::Swift];
    o.head(
        "oram_client_requests_in_flight",
        "gauge",
        "Client requests being served now.",
    );
    for a in apis {
        o.sample(
            "oram_client_requests_in_flight",
            &format!("api=\"{}\"", a.name()),
            tel.in_flight(a),
        );
    }
    o.head(
        "oram_client_bytes_total",
        "counter",
        "Body bytes received from (in) and sent to (out) clients.",
    );
    let mut client_bytes = 0u64;
    for a in apis {
        let (i, out) = tel.client_bytes(a);
        client_bytes += i + out;
        o.sample(
            "oram_client_bytes_total",
            &format!("api=\"{}\",direction=\"in\"", a.name()),
            i,
        );
        o.sample(
            "oram_client_bytes_total",
            &format!("api=\"{}\",direction=\"out\"", a.name()),
            out,
        );
    }
    client_bytes
}
/// Backend requests, bytes, errors and latencies, and the bandwidth overhead
/// against `client_bytes`.
fn backend(o: &mut Out, n: &Now<'_>, client_bytes: u64) {
    let b = &n.backend;
    backend_counts(o, b);
    o.head(
        "oram_backend_errors_total",
        "counter",
        "Backend requests that failed, by verb (each item of a failed batch counts).",
    );
    for v in VERBS {
        o.sample(
            "oram_backend_errors_total",
            &format!("verb=\"{}\"", verb_name(v)),
            n.ep.tap.errors(v),
        );
    }
    o.head(
        "oram_backend_request_duration_seconds",
        "histogram",
        "Duration of backend calls by verb (a batch of concurrent requests is one call).",
    );
    for v in VERBS {
        n.ep.tap.latency(v).render(
            &mut o.0,
            "oram_backend_request_duration_seconds",
            &format!("verb=\"{}\"", verb_name(v)),
        );
    }
    let overhead = if client_bytes == 0 {
        0.0
    } else {
        b.total_bytes() as f64 / client_bytes as f64
    };
    o.metric(
        "oram_bandwidth_overhead_ratio",
        "gauge",
        "Backend bytes moved per client body byte since start (0 before any client byte).",
        &[("", overhead)],
    );
}
/// Requests and bytes sent to the backend, by verb.
pub(super) fn backend_counts(o: &mut Out, b: &AccountingSnapshot) {
    o.metric(
        "oram_backend_requests_total",
        "counter",
        "Requests sent to the backend store, by verb (failed ones included; delete: as an S3 back-end sends them, one DeleteObjects per 1,000 keys).",
        &[
            ("verb=\"get\"", b.get_requests as f64),
            ("verb=\"get_range\"", b.range_requests as f64),
            ("verb=\"put\"", b.put_requests as f64),
            ("verb=\"delete\"", b.delete_requests as f64),
            ("verb=\"list\"", b.list_requests as f64),
        ],
    );
    o.metric(
        "oram_backend_deleted_keys_total",
        "counter",
        "Keys the backend store was asked to delete (superseded objects, sweeps, expired log records).",
        &[("", b.delete_keys as f64)],
    );
    o.metric(
        "oram_backend_bytes_total",
        "counter",
        "Object bytes moved to (put) and from (get, get_range) the backend store.",
        &[
            ("verb=\"get\"", b.get_bytes as f64),
            ("verb=\"get_range\"", b.range_bytes as f64),
            ("verb=\"put\"", b.put_bytes as f64),
        ],
    );
}

/// The engine: accesses, rounds, the stash, write-backs and its own statistics.
fn engine(o: &mut Out, n: &Now<'_>) {
    let (ep, e) = (n.ep, &n.engine);
    o.metric(
        "oram_engine_info",
        "gauge",
        "The engine serving the volume (always 1).",
        &[(&format!("engine=\"{}\"", ep.info.engine), 1.0)],
    );
    o.metric(
        "oram_engine_accesses_total",
        "counter",
        "Logical block accesses served by the engine.",
        &[("", e.accesses as f64)],
    );
    o.metric(
        "oram_engine_rounds_total",
        "counter",
        "Engine rounds (batches of accesses sent to the backend together).",
        &[("", e.rounds as f64)],
    );
    o.metric(
        "oram_engine_stash_blocks",
        "gauge",
        "Blocks in the stash now.",
        &[("", e.stash_len as f64)],
    );
    o.metric(
        "oram_engine_stash_max_blocks",
        "gauge",
        "Largest stash seen after a round since start.",
        &[("", e.stash_max as f64)],
    );
    o.metric(
        "oram_engine_stash_mean_blocks",
        "gauge",
        "Mean stash size after a round since start.",
        &[("", e.stash_mean())],
    );
    o.metric(
        "oram_engine_stash_bound_blocks",
        "gauge",
        "The configured stash bound (0: the engine has no stash).",
        &[("", ep.info.stash_bound as f64)],
    );
    o.metric(
        "oram_engine_pending_writebacks",
        "gauge",
        "Rounds writing their buckets to the backend now (tree engines), or write-backs waiting for it.",
        &[("", e.pending_writebacks as f64)],
    );
    o.metric(
        "oram_engine_writeback_retries_total",
        "counter",
        "Backend writes of rounds (or write-backs) that failed and were retried.",
        &[("", e.writeback_retries as f64)],
    );
    engine_specific(o, &ep.info.engine, e);
}
/// What the backend may come to hold, the operator's budget for it, and the fs
/// back-end's disk.
fn footprint(o: &mut Out, info: &crate::operator::EngineInfo) {
    o.metric(
        "oram_backend_bytes_bound",
        "gauge",
        "The most bytes the engine's objects can take on the backend (every position in all its slots; reached with use). The volume adds its header, checkpoints and shipped log.",
        &[("", info.backend_bytes_bound as f64)],
    );
    if info.backend_budget_bytes > 0 {
        o.metric(
            "oram_backend_budget_bytes",
            "gauge",
            "The operator's budget for the backend (backend.budget_gib).",
            &[("", info.backend_budget_bytes as f64)],
        );
    }
    if let Some(d) = oram_volume::disk_space(&info.backend.0, &info.backend.1) {
        o.metric(
            "oram_backend_disk_bytes",
            "gauge",
            "The fs back-end's file system: bytes free (to an unprivileged writer) and in all.",
            &[
                ("kind=\"free\"", d.free as f64),
                ("kind=\"total\"", d.total as f64),
            ],
        );
    }
}

/// The index, the capacity, and the local state database.
fn volume(o: &mut Out, n: &Now<'_>) {
    let vol = &n.ep.vol;
    let (buckets, objects) = vol.layer.index_counts();
    let state_bytes = std::fs::metadata(oram_volume::datadir::state_path(&vol.data_dir))
        .map(|m| m.len())
        .unwrap_or(0);
    o.metric(
        "oram_objects",
        "gauge",
        "Buckets and objects in the index.",
        &[
            ("kind=\"buckets\"", buckets as f64),
            ("kind=\"objects\"", objects as f64),
        ],
    );
    // Swift containers whose names S3 cannot address (GET /buckets/invisible
    // names them; `oram-proxy stats` prints them).
    let invisible = vol.layer.buckets_invisible_to_s3().map_or(0, |v| v.len());
    o.metric(
        "oram_buckets_invisible_to_s3",
        "gauge",
        "Swift containers whose names are not valid S3 bucket names: ListBuckets leaves them out.",
        &[("", invisible as f64)],
    );
    o.metric(
        "oram_engine_oblivious",
        "gauge",
        "1 if the engine hides which blocks are accessed (path, ring, curious, oblivistore); 0 for the direct baseline.",
        &[(
            &format!("engine=\"{}\"", vol.params.engine),
            f64::from(u8::from(n.ep.info.oblivious)),
        )],
    );
    capacity(o, n);
    footprint(o, &n.ep.info);
    o.metric(
        "oram_state_file_bytes",
        "gauge",
        "Size of the local state database (state.redb).",
        &[("", state_bytes as f64)],
    );
    match vol.db.table_sizes() {
        Ok(sizes) => {
            o.head(
                "oram_state_table_entries",
                "gauge",
                "Entries per table of the local state database.",
            );
            for t in sizes {
                o.sample(
                    "oram_state_table_entries",
                    &format!("table=\"{}\"", t.name),
                    t.entries,
                );
            }
        }
        Err(e) => tracing::warn!("metrics: state table sizes: {e}"),
    }
    match vol.db.journal_size() {
        Ok((entries, bytes)) => {
            o.metric(
                "oram_journal_entries",
                "gauge",
                "Buckets in the write-back journal: written locally, not yet confirmed by the backend.",
                &[("", entries as f64)],
            );
            o.metric(
                "oram_journal_bytes",
                "gauge",
                "Bytes of the write-back journal's entries.",
                &[("", bytes as f64)],
            );
        }
        Err(e) => tracing::warn!("metrics: journal size: {e}"),
    }
}
/// The capacity in effect, used and free, the automatic growth's limits, and
/// the growth under way and finished.
fn capacity(o: &mut Out, n: &Now<'_>) {
    let growth = &n.ep.growth;
    let r = growth.room();
    let kinds = |mul: u64| {
        [
            ("kind=\"total\"", (r.capacity_blocks * mul) as f64),
            ("kind=\"used\"", (r.used_blocks * mul) as f64),
            ("kind=\"free\"", (r.free_blocks * mul) as f64),
        ]
    };
    o.metric(
        "oram_capacity_blocks",
        "gauge",
        "Logical blocks of the volume: all of them (the capacity in effect, grown or not), those in use by objects, and those free.",
        &kinds(1),
    );
    o.metric(
        "oram_capacity_bytes",
        "gauge",
        "The capacity in effect, used and free, in bytes (oram_capacity_blocks times the block size).",
        &kinds(r.block_size),
    );
    o.metric(
        "oram_block_size_bytes",
        "gauge",
        "Bytes per logical block.",
        &[("", r.block_size as f64)],
    );
    o.metric(
        "oram_capacity_max_bytes",
        "gauge",
        "volume.max_size: the largest size automatic growth goes to (0: unset).",
        &[("", r.max_size_bytes as f64)],
    );
    o.metric(
        "oram_grow_at_ratio",
        "gauge",
        "volume.grow_at: the share of the capacity used at which the volume grows by itself (0: never).",
        &[("", r.grow_at)],
    );
    let (s, _, _) = growth.status();
    o.metric(
        "oram_growth_in_progress",
        "gauge",
        "1 while the volume grows (oram-proxy grow, volume.grow_at, or resumed at start), else 0.",
        &[("", f64::from(u8::from(s.running)))],
    );
    o.metric(
        "oram_growth_positions",
        "gauge",
        "The growth under way, or the last one since start: new backend positions written (done) of all it adds (total; 0 until known).",
        &[
            ("state=\"done\"", s.done as f64),
            ("state=\"total\"", s.total as f64),
        ],
    );
    o.metric(
        "oram_growths_total",
        "counter",
        "Growths since start, by result (ok: finished, the new capacity in effect; failed).",
        &[
            ("result=\"ok\"", s.finished as f64),
            ("result=\"failed\"", s.failed as f64),
        ],
    );
    let last = growth.history().last().map_or(0, |g| g.finished_unix);
    o.metric(
        "oram_growth_last_timestamp_seconds",
        "gauge",
        "When the newest growth in the volume's growth history finished, seconds since the Unix epoch (0: none).",
        &[("", last as f64)],
    );
}

/// The newest checkpoint on the backend, its age and the failures.
fn checkpoints(o: &mut Out, n: &Now<'_>) {
    let (ep, tel) = (n.ep, &n.ep.tel);
    let now_ms = unix_ms();
    let last_ok = tel
        .checkpoint
        .last_ok_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let since = if last_ok == 0 {
        tel.started_unix * 1000
    } else {
        last_ok
    };
    o.metric(
        "oram_checkpoint_last_success_timestamp_seconds",
        "gauge",
        "When the newest checkpoint on the backend was taken (0: none yet).",
        &[("", last_ok as f64 / 1e3)],
    );
    o.metric(
        "oram_checkpoint_age_seconds",
        "gauge",
        "Seconds since the newest checkpoint (since start if there is none yet): what a lost machine would lose.",
        &[("", now_ms.saturating_sub(since) as f64 / 1e3)],
    );
    o.metric(
        "oram_checkpoint_interval_seconds",
        "gauge",
        "Configured seconds between checkpoints (0: at shutdown only).",
        &[("", ep.info.checkpoint_interval_secs as f64)],
    );
    o.metric(
        "oram_checkpoint_failures_total",
        "counter",
        "Checkpoints that failed since start.",
        &[(
            "",
            tel.checkpoint
                .failures
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        )],
    );
    if let Some(r) = ep.vol.last_rotation_progress() {
        o.metric(
            "oram_key_rotation_resealed_ratio",
            "gauge",
            "Master-key rotation: share of the backend positions re-sealed under the current key (counted at start and after each checkpoint).",
            &[("", r.ratio())],
        );
        o.metric(
            "oram_key_rotation_positions",
            "gauge",
            "Master-key rotation: backend positions written, and of them re-sealed under the current key.",
            &[
                ("state=\"written\"", r.positions as f64),
                ("state=\"resealed\"", r.resealed as f64),
            ],
        );
        o.metric(
            "oram_key_rotation_complete",
            "gauge",
            "Master-key rotation: 1 once an uploaded checkpoint needs no earlier key (`oram-proxy key forget-earlier` may drop them).",
            &[("", if r.complete { 1.0 } else { 0.0 })],
        );
    }
    if let Some(shipper) = &ep.vol.shipper {
        if let Some(last) = shipper.stats.last_record() {
            o.metric(
                "oram_log_last_record",
                "gauge",
                "The number of the last shipped-log record landed: note it, and `recover --expect-record` refuses a log whose tail the provider dropped.",
                &[("", last as f64)],
            );
        }
        log_metrics(o, &[(String::new(), &shipper.stats)]);
    }
}

/// The shipped log's load: for each log (labelled `slot="j"` on a cluster
/// member, unlabelled on a volume), the records landed, the failed PUTs and
/// where the stream stands; and the stream bytes a record carries. How full
/// the records are (the stream's rate over the records' rate times a record's
/// capacity) tells whether `log_record_kib` caps the state's changes (near 1)
/// or only adds to the bill (far below 1). Nothing when `logs` is empty.
pub(super) fn log_metrics(o: &mut Out, logs: &[(String, &oram_volume::ShipStats)]) {
    let Some((_, first)) = logs.first() else {
        return;
    };
    let each = |f: &dyn Fn(&oram_volume::ShipStats) -> u64| -> Vec<(&str, f64)> {
        logs.iter()
            .map(|(l, s)| (l.as_str(), f(s) as f64))
            .collect()
    };
    o.metric(
        "oram_log_records_total",
        "counter",
        "Shipped-log records this process landed: one every `log_interval_ms`, each `log_record_kib`, whatever the load.",
        &each(&|s| s.records.load(Ordering::Relaxed)),
    );
    o.metric(
        "oram_log_failures_total",
        "counter",
        "PUTs of a shipped-log record that failed (each is sent again at the next tick).",
        &each(&|s| s.failures.load(Ordering::Relaxed)),
    );
    o.metric(
        "oram_log_stream_bytes",
        "gauge",
        "Where the shipped log's landed stream ends: the state changes shipped in this generation, bytes. Its rate over oram_log_records_total's, divided by oram_log_record_capacity_bytes, is how full the records are.",
        &each(&|s| s.bytes.load(Ordering::Relaxed)),
    );
    o.metric(
        "oram_log_record_capacity_bytes",
        "gauge",
        "Stream bytes one shipped-log record carries (log_record_kib less the record's header).",
        &[("", first.record_capacity as f64)],
    );
}

/// The backend lease and the TLS certificate.
fn lease_and_tls(o: &mut Out, n: &Now<'_>) {
    let (vol, tel) = (&n.ep.vol, &n.ep.tel);
    let lease = LeaseState::of(vol.lease.as_deref());
    o.head(
        "oram_lease_state",
        "gauge",
        "The backend lease's state: 1 for the current state (none: no lease is used).",
    );
    for s in LeaseState::ALL {
        o.sample(
            "oram_lease_state",
            &format!("state=\"{}\"", s.name()),
            u8::from(s == lease),
        );
    }
    let t = &tel.tls;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed) as f64;
    let tls_on = t.enabled.load(std::sync::atomic::Ordering::Relaxed);
    o.metric(
        "oram_tls_enabled",
        "gauge",
        "Whether the S3 and Swift listeners speak TLS.",
        &[("", f64::from(u8::from(tls_on)))],
    );
    if tls_on {
        o.metric(
            "oram_tls_certificate_expiry_timestamp_seconds",
            "gauge",
            "notAfter of the certificate served, seconds since the Unix epoch.",
            &[("", ld(&t.not_after))],
        );
        o.metric(
            "oram_tls_reloads_total",
            "counter",
            "Certificate reloads (SIGHUP), by result.",
            &[
                ("result=\"ok\"", ld(&t.reloads_ok)),
                ("result=\"failed\"", ld(&t.reloads_failed)),
            ],
        );
    }
}

/// Renders the engine's own statistics (`EngineStats::extra`: the tree engines'
/// repeated rounds, Ring ORAM's evictions and early reshuffles, ...), each as
/// `oram_engine_<name>{engine="<engine>"}` with the engine's help text and kind
/// (counter or gauge). Engines name them in `snake_case`, counters ending in
/// `_total`; a name that is not a valid metric name is skipped.
pub(super) fn engine_specific(out: &mut Out, engine: &str, stats: &oram_engine::EngineStats) {
    let label = format!("engine=\"{engine}\"");
    for st in &stats.extra {
        if st.name.is_empty()
            || !st
                .name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        {
            continue;
        }
        let kind = match st.kind {
            oram_engine::StatKind::Counter => "counter",
            oram_engine::StatKind::Gauge => "gauge",
        };
        out.metric(
            &format!("oram_engine_{}", st.name),
            kind,
            st.help,
            &[(&label, st.value as f64)],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_statistics_are_rendered_with_their_kind_and_engine() {
        let stat = |name, kind, value| oram_engine::Stat {
            name,
            help: "what it counts",
            kind,
            value,
        };
        let stats = oram_engine::EngineStats {
            extra: vec![
                stat("ring_evictions_total", oram_engine::StatKind::Counter, 7),
                stat("shuffle_backlog", oram_engine::StatKind::Gauge, 3),
                stat("Bad-Name", oram_engine::StatKind::Gauge, 1),
            ],
            ..Default::default()
        };
        let mut o = Out(String::new());
        engine_specific(&mut o, "ring", &stats);
        assert_eq!(
            o.0,
            "# HELP oram_engine_ring_evictions_total what it counts\n\
             # TYPE oram_engine_ring_evictions_total counter\n\
             oram_engine_ring_evictions_total{engine=\"ring\"} 7\n\
             # HELP oram_engine_shuffle_backlog what it counts\n\
             # TYPE oram_engine_shuffle_backlog gauge\n\
             oram_engine_shuffle_backlog{engine=\"ring\"} 3\n"
        );
    }
}
