//! The thesis's metrics for each run, and the report: Markdown, CSV and PNG charts.

use std::fmt::Write as _;
use std::path::Path;

use crate::exec::{ReqKind, RunLog};

/// A provider's prices (thesis table 4.5, 2019).
#[derive(Clone, Copy, Debug)]
pub struct Prices {
    /// Name.
    pub name: &'static str,
    /// $ per GB-month stored.
    pub storage_gb_month: f64,
    /// $ per GB sent to the client (egress).
    pub egress_gb: f64,
    /// $ per 1000 GET (and HEAD) requests.
    pub get_1000: f64,
    /// $ per 1000 PUT, POST, COPY and LIST requests.
    pub put_1000: f64,
}

/// The price table. Ingress and DELETE are free everywhere.
pub const PROVIDERS: [Prices; 5] = [
    Prices {
        name: "AWS S3",
        storage_gb_month: 0.023,
        egress_gb: 0.09,
        get_1000: 0.0004,
        put_1000: 0.005,
    },
    Prices {
        name: "Google Cloud Storage",
        storage_gb_month: 0.020,
        egress_gb: 0.11,
        get_1000: 0.0004,
        put_1000: 0.005,
    },
    Prices {
        name: "Rackspace Cloud Files",
        storage_gb_month: 0.10,
        egress_gb: 0.12,
        get_1000: 0.0,
        put_1000: 0.0,
    },
    Prices {
        name: "IBM Cloud Object Storage",
        storage_gb_month: 0.022,
        egress_gb: 0.09,
        get_1000: 0.0004,
        put_1000: 0.005,
    },
    // Egress free for the first 10 TB a month.
    Prices {
        name: "Oracle Object Storage",
        storage_gb_month: 0.0255,
        egress_gb: 0.0,
        get_1000: 0.00034,
        put_1000: 0.00034,
    },
];

/// The thesis's best slowdown per workload (any engine, any block size).
pub fn thesis_best_slowdown(workload: &str) -> Option<f64> {
    match workload.trim_start_matches("Workload") {
        "A" => Some(8.5),
        "B" => Some(6.0),
        "C" => Some(5.1),
        "D" => Some(4.0),
        "E" => Some(2.9),
        _ => None,
    }
}

/// Requests and bytes seen by the storage server.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Backend {
    /// GET requests (whole and ranged).
    pub get: u64,
    /// PUT requests (and bucket creation).
    pub put: u64,
    /// DELETE requests.
    pub delete: u64,
    /// LIST requests.
    pub list: u64,
    /// Bytes received from the server.
    pub bytes_down: u64,
    /// Bytes sent to the server.
    pub bytes_up: u64,
}

impl Backend {
    /// All requests.
    pub fn requests(&self) -> u64 {
        self.get + self.put + self.delete + self.list
    }

    /// All bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes_down + self.bytes_up
    }

    /// What this traffic costs at `p` (requests and egress; storage apart).
    pub fn cost(&self, p: &Prices) -> f64 {
        self.get as f64 * p.get_1000 / 1000.0
            + (self.put + self.list) as f64 * p.put_1000 / 1000.0
            + self.bytes_down as f64 / 1e9 * p.egress_gb
    }

    /// The backend traffic of the no-ORAM baseline: the client's own requests.
    pub fn of_client(log: &RunLog) -> Self {
        let mut b = Backend::default();
        for r in &log.records {
            match r.kind {
                ReqKind::Read => {
                    b.get += 1;
                    b.bytes_down += r.bytes;
                }
                ReqKind::Write => {
                    b.put += 1;
                    b.bytes_up += r.bytes;
                }
                ReqKind::CreateBucket => b.put += 1,
                ReqKind::Delete | ReqKind::DeleteBucket => b.delete += 1,
                ReqKind::List => b.list += 1,
            }
        }
        b
    }

    /// The backend traffic between two snapshots of a proxy's metrics.
    pub fn from_metrics(
        before: &std::collections::BTreeMap<String, f64>,
        after: &std::collections::BTreeMap<String, f64>,
    ) -> Self {
        let d = |k: &str| {
            (after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0)).max(0.0)
                as u64
        };
        let req = |v: &str| d(&format!("oram_backend_requests_total{{verb=\"{v}\"}}"));
        let by = |v: &str| d(&format!("oram_backend_bytes_total{{verb=\"{v}\"}}"));
        Backend {
            get: req("get") + req("get_range"),
            put: req("put"),
            delete: req("delete"),
            list: req("list"),
            bytes_down: by("get") + by("get_range"),
            bytes_up: by("put"),
        }
    }
}

/// One configuration's results for one workload.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Workload name.
    pub workload: String,
    /// `baseline`, `direct`, `path`, `ring`...
    pub config: String,
    /// Block size in bytes (0: baseline, no blocks).
    pub block_size: u64,
    /// Client reads and writes.
    pub reads: u64,
    /// Client writes.
    pub writes: u64,
    /// Client requests of every kind.
    pub client_requests: u64,
    /// Client bytes written.
    pub client_up: u64,
    /// Client bytes read.
    pub client_down: u64,
    /// Failed client requests (including reads returning other bytes).
    pub failures: u64,
    /// First failure, if any.
    pub first_failure: Option<String>,
    /// What the storage server saw.
    pub backend: Backend,
    /// Mean read response time, ms.
    pub read_ms: f64,
    /// Mean write response time, ms.
    pub write_ms: f64,
    /// Mean response time of reads and writes, ms.
    pub rw_ms: f64,
    /// Wall time of the whole workflow, s.
    pub runtime_s: f64,
    /// Wall time of the main stages, s.
    pub main_runtime_s: f64,
    /// Proxy CPU seconds during the workload (0 for the baseline).
    pub cpu_s: f64,
    /// Proxy peak RSS, bytes.
    pub peak_rss: u64,
    /// Bytes stored at the provider: for proxies the backend's objects after the
    /// run; for the baseline what the workload stored before its cleanup.
    pub remote_bytes: u64,
    /// Bytes of local state on disk after the run (proxies): the data
    /// directory's files.
    pub local_bytes: u64,
    /// The ORAM's logical capacity, bytes (capacity blocks × block size; 0:
    /// not known, the baseline).
    pub oram_bytes: u64,
    /// Live bytes of the local state after the run: keys, values and tree pages
    /// of state.redb's tables (position map, stash, tree-top cache, node
    /// versions, object index...), not the file's free pages.
    pub state_live_bytes: u64,
    /// Size of state.redb after the run, bytes (free pages included).
    pub state_file_bytes: u64,
    /// Proxy resident memory at the end of the workload, bytes.
    pub rss_end: u64,
    /// Tree-top levels the engine cached (from volume.toml).
    pub cached_levels: u32,
    /// Largest stash after a round.
    pub stash_max: u64,
    /// Per-stage wall time, s.
    pub stages: Vec<(String, f64)>,
    /// The workload's description.
    pub description: String,
}

impl Row {
    /// Fills the client-side metrics from a run log.
    pub fn from_log(workload: &str, config: &str, block_size: u64, log: &RunLog) -> Self {
        let mut r = Row {
            workload: workload.to_string(),
            config: config.to_string(),
            block_size,
            client_requests: log.records.len() as u64,
            runtime_s: log.runtime.as_secs_f64(),
            main_runtime_s: log.main_runtime.as_secs_f64(),
            remote_bytes: log.stored_bytes,
            stages: log
                .stages
                .iter()
                .enumerate()
                .map(|(i, (n, d))| {
                    let reqs = log.records.iter().filter(|r| r.stage == i).count();
                    (format!("{n} ({reqs} req)"), d.as_secs_f64())
                })
                .collect(),
            ..Row::default()
        };
        let (mut rsum, mut wsum) = (0.0, 0.0);
        for rec in &log.records {
            if !rec.ok {
                r.failures += 1;
                if r.first_failure.is_none() {
                    r.first_failure = rec.error.clone();
                }
                continue;
            }
            match rec.kind {
                ReqKind::Read => {
                    r.reads += 1;
                    r.client_down += rec.bytes;
                    rsum += rec.latency.as_secs_f64();
                }
                ReqKind::Write => {
                    r.writes += 1;
                    r.client_up += rec.bytes;
                    wsum += rec.latency.as_secs_f64();
                }
                _ => {}
            }
        }
        let mean = |s: f64, n: u64| if n == 0 { 0.0 } else { s * 1000.0 / n as f64 };
        r.read_ms = mean(rsum, r.reads);
        r.write_ms = mean(wsum, r.writes);
        r.rw_ms = mean(rsum + wsum, r.reads + r.writes);
        r
    }

    /// Backend bytes ÷ client bytes.
    pub fn bandwidth_overhead(&self) -> f64 {
        ratio(
            self.backend.bytes() as f64,
            (self.client_up + self.client_down) as f64,
        )
    }

    /// Remote ÷ local storage (proxies), as the thesis counts it (appendix C):
    /// the ORAM's logical capacity ÷ the live bytes of the local state. Without
    /// a known capacity (old CSVs): backend bytes stored ÷ the data directory.
    pub fn outsource_ratio(&self) -> f64 {
        if self.oram_bytes > 0 && self.state_live_bytes > 0 {
            ratio(self.oram_bytes as f64, self.state_live_bytes as f64)
        } else {
            ratio(self.remote_bytes as f64, self.local_bytes as f64)
        }
    }

    /// The ORAM's capacity ÷ (live local state + the proxy's peak RSS): the
    /// stricter ratio, counting the process's memory too.
    pub fn outsource_ratio_with_rss(&self) -> f64 {
        if self.oram_bytes == 0 {
            return f64::NAN;
        }
        ratio(
            self.oram_bytes as f64,
            (self.state_live_bytes + self.peak_rss) as f64,
        )
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

/// A row with its ratios against the baseline of the same workload.
#[derive(Clone, Debug)]
pub struct Compared<'a> {
    /// The row.
    pub row: &'a Row,
    /// The baseline of its workload.
    pub base: &'a Row,
}

impl Compared<'_> {
    /// Cost at provider `p` ÷ the baseline's.
    pub fn cost_multiplier(&self, p: &Prices) -> f64 {
        ratio(self.row.backend.cost(p), self.base.backend.cost(p))
    }
    /// Mean response time ÷ the baseline's.
    pub fn relative_response(&self) -> f64 {
        ratio(self.row.rw_ms, self.base.rw_ms)
    }
    /// Runtime ÷ the baseline's.
    pub fn slowdown(&self) -> f64 {
        ratio(self.row.runtime_s, self.base.runtime_s)
    }
    /// Runtime of the main stages ÷ the baseline's.
    pub fn main_slowdown(&self) -> f64 {
        ratio(self.row.main_runtime_s, self.base.main_runtime_s)
    }
}

/// Pairs each row with its workload's baseline (rows without one are skipped).
pub fn compare(rows: &[Row]) -> Vec<Compared<'_>> {
    rows.iter()
        .filter_map(|r| {
            let base = rows
                .iter()
                .find(|b| b.workload == r.workload && b.config == "baseline")?;
            Some(Compared { row: r, base })
        })
        .collect()
}

/// Problems that make a report internally inconsistent.
pub fn consistency_problems(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        let id = format!("{} / {} / {}", r.workload, r.config, human(r.block_size));
        if r.failures > 0 {
            out.push(format!(
                "{id}: {} failed requests, first: {}",
                r.failures,
                r.first_failure.as_deref().unwrap_or("?")
            ));
        }
        if r.config == "baseline" {
            let b = &r.backend;
            if b.bytes_up != r.client_up
                || b.bytes_down != r.client_down
                || b.requests() != r.client_requests
            {
                out.push(format!(
                    "{id}: baseline backend traffic differs from the client's"
                ));
            }
        } else {
            if r.backend.bytes_up < r.client_up {
                out.push(format!(
                    "{id}: backend received {} bytes, less than the {} bytes the client wrote",
                    r.backend.bytes_up, r.client_up
                ));
            }
            // Without ORAM every read fetches its blocks. (An ORAM may serve a small
            // volume from its tree-top cache, and unwritten buckets come back empty.)
            if r.config == "direct" && r.reads > 0 && r.backend.bytes_down == 0 {
                out.push(format!("{id}: reads were served without backend traffic"));
            }
            if r.block_size > 0
                && r.backend.put > 0
                && r.backend.bytes_up / r.backend.put < r.block_size
            {
                out.push(format!("{id}: backend objects smaller than a block"));
            }
            if r.client_up > 0 && r.remote_bytes == 0 {
                out.push(format!("{id}: nothing stored at the backend"));
            }
        }
        if let Some(base) = rows
            .iter()
            .find(|b| b.workload == r.workload && b.config == "baseline")
        {
            // Same seed, same operations: every configuration moves the same client bytes.
            if (r.reads, r.writes, r.client_up, r.client_down)
                != (base.reads, base.writes, base.client_up, base.client_down)
            {
                out.push(format!(
                    "{id}: client operations differ from the baseline's ({} reads / {} writes / {} B up / {} B down vs {} / {} / {} / {})",
                    r.reads, r.writes, r.client_up, r.client_down, base.reads, base.writes, base.client_up, base.client_down
                ));
            }
        }
    }
    out
}

/// `64K`, `1M`...
pub fn human(bytes: u64) -> String {
    match bytes {
        0 => "-".into(),
        b if b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

fn mb(b: u64) -> String {
    format!("{:.2}", b as f64 / 1e6)
}

fn x(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else if v >= 100.0 {
        format!("{v:.0}×")
    } else {
        format!("{v:.2}×")
    }
}

/// The rows of a `results.csv` written by [`csv`], with what the charts need
/// (client and backend traffic, response times, runtimes; the rest default).
pub fn rows_from_csv(text: &str) -> Result<Vec<Row>, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or("empty results.csv")?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or(format!("results.csv has no column {name}"))
    };
    let idx: Vec<usize> = [
        "workload",
        "config",
        "block_size",
        "client_bytes_up",
        "client_bytes_down",
        "backend_get",
        "backend_put",
        "backend_delete",
        "backend_list",
        "backend_bytes_down",
        "backend_bytes_up",
        "avg_read_ms",
        "avg_write_ms",
        "avg_rw_ms",
        "runtime_s",
        "main_runtime_s",
    ]
    .into_iter()
    .map(col)
    .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let field = |k: usize| {
            f.get(idx[k])
                .copied()
                .ok_or(format!("results.csv line {}: too few fields", n + 2))
        };
        let int = |k: usize| -> Result<u64, String> { number(field(k)?, n + 2) };
        let real = |k: usize| -> Result<f64, String> { number(field(k)?, n + 2) };
        rows.push(Row {
            workload: field(0)?.to_string(),
            config: field(1)?.to_string(),
            block_size: int(2)?,
            client_up: int(3)?,
            client_down: int(4)?,
            backend: Backend {
                get: int(5)?,
                put: int(6)?,
                delete: int(7)?,
                list: int(8)?,
                bytes_down: int(9)?,
                bytes_up: int(10)?,
            },
            read_ms: real(11)?,
            write_ms: real(12)?,
            rw_ms: real(13)?,
            runtime_s: real(14)?,
            main_runtime_s: real(15)?,
            ..Row::default()
        });
    }
    Ok(rows)
}

/// A number in `results.csv` line `line`.
fn number<T: std::str::FromStr>(text: &str, line: usize) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.parse()
        .map_err(|e| format!("results.csv line {line}: {e}"))
}

/// The CSV of every row (one line per workload × configuration × block size).
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "workload,config,block_size,reads,writes,client_requests,client_bytes_up,client_bytes_down,failures,\
         backend_get,backend_put,backend_delete,backend_list,backend_bytes_down,backend_bytes_up,\
         bandwidth_overhead,avg_read_ms,avg_write_ms,avg_rw_ms,relative_response_time,runtime_s,slowdown,\
         main_runtime_s,main_slowdown,\
         proxy_cpu_s,proxy_peak_rss_bytes,remote_bytes,local_bytes,outsource_ratio,stash_max,\
         oram_bytes,state_live_bytes,state_file_bytes,proxy_rss_end_bytes,cached_levels,outsource_ratio_with_rss",
    );
    for p in PROVIDERS {
        let k = p.name.to_ascii_lowercase().replace(' ', "_");
        let _ = write!(s, ",cost_usd_{k},cost_multiplier_{k},storage_usd_month_{k}");
    }
    s.push('\n');
    for c in compare(rows) {
        let r = c.row;
        let b = &r.backend;
        let _ = write!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4},{:.3},{:.3},{:.3},{:.4},{:.3},{:.4},{:.3},{:.4},{:.3},{},{},{},{:.4},{},{},{},{},{},{},{:.4}",
            r.workload, r.config, r.block_size, r.reads, r.writes, r.client_requests, r.client_up, r.client_down,
            r.failures, b.get, b.put, b.delete, b.list, b.bytes_down, b.bytes_up, r.bandwidth_overhead(),
            r.read_ms, r.write_ms, r.rw_ms, c.relative_response(), r.runtime_s, c.slowdown(),
            r.main_runtime_s, c.main_slowdown(), r.cpu_s,
            r.peak_rss, r.remote_bytes, r.local_bytes, r.outsource_ratio(), r.stash_max,
            r.oram_bytes, r.state_live_bytes, r.state_file_bytes, r.rss_end, r.cached_levels,
            r.outsource_ratio_with_rss()
        );
        for p in PROVIDERS {
            let _ = write!(
                s,
                ",{:.8},{:.4},{:.8}",
                b.cost(&p),
                c.cost_multiplier(&p),
                r.remote_bytes as f64 / 1e9 * p.storage_gb_month
            );
        }
        s.push('\n');
    }
    s
}

/// The Markdown report.
pub fn markdown(
    rows: &[Row],
    header: &str,
    problems: &[String],
    charts: &[(String, String)],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Workload runner report\n\n{header}\n");
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    let cmp = compare(rows);
    for w in workloads {
        let desc = rows
            .iter()
            .find(|r| r.workload == w)
            .map_or("", |r| r.description.as_str());
        let _ = writeln!(
            s,
            "## {w}{}{desc}\n",
            if desc.is_empty() { "" } else { " — " }
        );
        if let Some(t) = thesis_best_slowdown(w) {
            let _ = writeln!(s, "Thesis's best slowdown for this workload: {t}×.\n");
        }
        let _ = writeln!(
            s,
            "| config | block | reads / writes | client MB up / down | backend requests (GET / PUT / DEL / LIST) | backend MB down / up | bandwidth overhead | cost multiplier (AWS S3) | avg read ms | avg write ms | relative response time | runtime s | slowdown | main-stage s | main-stage slowdown | proxy CPU s | peak RSS MB | ORAM size / cached levels | state MB live / file | outsource ratio (live state / + peak RSS) | max stash |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for c in cmp.iter().filter(|c| c.row.workload == w) {
            let r = c.row;
            let b = &r.backend;
            let proxy = r.config != "baseline";
            let _ = writeln!(
                s,
                "| {} | {} | {} / {} | {} / {} | {} ({} / {} / {} / {}) | {} / {} | {} | {} | {:.1} | {:.1} | {} | {:.2} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} |",
                r.config,
                human(r.block_size),
                r.reads,
                r.writes,
                mb(r.client_up),
                mb(r.client_down),
                b.requests(),
                b.get,
                b.put,
                b.delete,
                b.list,
                mb(b.bytes_down),
                mb(b.bytes_up),
                x(r.bandwidth_overhead()),
                x(c.cost_multiplier(&PROVIDERS[0])),
                r.read_ms,
                r.write_ms,
                x(c.relative_response()),
                r.runtime_s,
                x(c.slowdown()),
                r.main_runtime_s,
                x(c.main_slowdown()),
                if proxy { format!("{:.1}", r.cpu_s) } else { "—".into() },
                if proxy { format!("{:.0}", r.peak_rss as f64 / 1e6) } else { "—".into() },
                if proxy && r.oram_bytes > 0 {
                    format!("{} / {}", human(r.oram_bytes), r.cached_levels)
                } else {
                    "—".into()
                },
                if proxy {
                    format!("{} / {}", mb(r.state_live_bytes), mb(r.state_file_bytes))
                } else {
                    "—".into()
                },
                if proxy {
                    format!("{} / {}", x(r.outsource_ratio()), x(r.outsource_ratio_with_rss()))
                } else {
                    "—".into()
                },
                if proxy && !r.config.starts_with("direct") { r.stash_max.to_string() } else { "—".into() },
            );
        }
        for c in cmp.iter().filter(|c| c.row.workload == w) {
            let st: Vec<String> = c
                .row
                .stages
                .iter()
                .map(|(n, t)| format!("{n} {t:.2}"))
                .collect();
            let _ = writeln!(
                s,
                "- stage times (s), {} {}: {}",
                c.row.config,
                human(c.row.block_size),
                st.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "\nCost in USD of the run's requests and egress, its multiplier against the baseline, and \
             the monthly storage cost of what stays at the provider:\n"
        );
        let _ = write!(s, "| config | block |");
        for p in PROVIDERS {
            let _ = write!(s, " {} |", p.name);
        }
        let _ = write!(s, "\n|---|---|");
        for _ in PROVIDERS {
            let _ = write!(s, "---|");
        }
        s.push('\n');
        for c in cmp.iter().filter(|c| c.row.workload == w) {
            let _ = write!(s, "| {} | {} |", c.row.config, human(c.row.block_size));
            for p in PROVIDERS {
                let _ = write!(
                    s,
                    " ${:.6} ({}), ${:.6}/month |",
                    c.row.backend.cost(&p),
                    x(c.cost_multiplier(&p)),
                    c.row.remote_bytes as f64 / 1e9 * p.storage_gb_month
                );
            }
            s.push('\n');
        }
        for (cw, file) in charts {
            if cw == w {
                let _ = writeln!(s, "\n![relative metrics for {w}]({file})");
            }
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Consistency\n");
    if problems.is_empty() {
        let _ = writeln!(
            s,
            "Every request succeeded and every read returned the bytes written; every configuration \
             performed the same client operations as the baseline (same reads, writes and bytes); the \
             baseline's backend traffic equals its client traffic; every proxy sent at least the client's \
             bytes to the backend."
        );
    } else {
        for p in problems {
            let _ = writeln!(s, "- {p}");
        }
    }
    s
}

/// Draws the relative metrics of one workload (bandwidth overhead, cost
/// multiplier at AWS S3, relative response time, slowdown) per block size and
/// configuration, log scale, with the thesis's best slowdown as a dashed line.
/// Without a font, the chart has no text.
pub fn chart(rows: &[Row], workload: &str, path: &Path, with_text: bool) -> Result<(), String> {
    use plotters::prelude::*;
    let cmp: Vec<Compared<'_>> = compare(rows)
        .into_iter()
        .filter(|c| c.row.workload == workload && c.row.config != "baseline")
        .collect();
    if cmp.is_empty() {
        return Err(format!("{workload}: nothing to chart"));
    }
    let metrics: [(&str, RGBColor); 5] = [
        ("bandwidth overhead", RGBColor(31, 119, 180)),
        ("cost multiplier (AWS S3)", RGBColor(255, 127, 14)),
        ("relative response time", RGBColor(44, 160, 44)),
        ("slowdown (workflow)", RGBColor(214, 39, 40)),
        ("slowdown (main stages)", RGBColor(148, 103, 189)),
    ];
    let values: Vec<[f64; 5]> = cmp
        .iter()
        .map(|c| {
            [
                c.row.bandwidth_overhead(),
                c.cost_multiplier(&PROVIDERS[0]),
                c.relative_response(),
                c.slowdown(),
                c.main_slowdown(),
            ]
        })
        .collect();
    let finite = values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0);
    let ymax = finite
        .clone()
        .fold(1.0f64, f64::max)
        .max(thesis_best_slowdown(workload).unwrap_or(1.0))
        * 2.0;
    let ymin = finite.fold(1.0f64, f64::min).min(1.0) / 2.0;
    let n = cmp.len() as f64;
    let err = |e: &dyn std::fmt::Display| format!("chart {}: {e}", path.display());
    // About 128 pixels per configuration, so that the labels do not overlap.
    let width = (cmp.len() as u32 * 128 + 140).max(1280);
    let root = BitMapBackend::new(path, (width, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20)
        .x_label_area_size(70)
        .y_label_area_size(if with_text { 70 } else { 10 });
    if with_text {
        b.caption(
            format!("{workload}: overheads relative to no ORAM (log scale, lower is better)"),
            ("sans-serif", 24),
        );
    }
    let mut chart = b
        .build_cartesian_2d(0f64..n, (ymin..ymax).log_scale())
        .map_err(|e| err(&e))?;
    if with_text {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc("× baseline")
            .y_label_formatter(&|v| format!("{v}"))
            .draw()
            .map_err(|e| err(&e))?;
    }
    for (i, vals) in values.iter().enumerate() {
        for (k, v) in vals.iter().enumerate() {
            if !v.is_finite() || *v <= 0.0 {
                continue;
            }
            let x0 = i as f64 + 0.075 + 0.17 * k as f64;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, ymin), (x0 + 0.15, *v)],
                    metrics[k].1.filled(),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    if let Some(t) = thesis_best_slowdown(workload) {
        let s = chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, t), (n, t)],
                8,
                6,
                BLACK.stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
        if with_text {
            s.label(format!("thesis's best slowdown ({t}×)"))
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2))
                });
        }
    }
    if with_text {
        for (name, color) in metrics {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
        // Two lines under each group, centred: the engine, then the model and block.
        for (i, c) in cmp.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(i as f64 + 0.5, ymin));
            let (engine, model) = c.row.config.split_once('@').unwrap_or((&c.row.config, ""));
            let second = if model.is_empty() {
                human(c.row.block_size)
            } else {
                format!("{model} {}", human(c.row.block_size))
            };
            for (line, text) in [engine.to_string(), second].into_iter().enumerate() {
                let half = (text.chars().count() * 4) as i32;
                root.draw(&Text::new(
                    text,
                    (px - half, py + 8 + 18 * line as i32),
                    ("sans-serif", 15).into_font(),
                ))
                .map_err(|e| err(&e))?;
            }
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Registers a font for the charts: `$ORAM_WORKLOAD_FONT` or a common system
/// font. Returns whether one was found.
pub fn load_font() -> bool {
    let candidates = std::env::var("ORAM_WORKLOAD_FONT").into_iter().chain(
        [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
        ]
        .map(String::from),
    );
    for c in candidates {
        if let Ok(bytes) = std::fs::read(&c) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(
                "sans-serif",
                plotters::style::FontStyle::Normal,
                bytes,
            )
            .is_ok()
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(config: &str, up: u64, backend: Backend) -> Row {
        Row {
            workload: "T".into(),
            config: config.into(),
            block_size: if config == "baseline" { 0 } else { 4096 },
            reads: 1,
            writes: 1,
            client_requests: 2,
            client_up: up,
            client_down: 100,
            backend,
            runtime_s: 2.0,
            main_runtime_s: 1.0,
            rw_ms: 10.0,
            remote_bytes: 8192,
            local_bytes: 1024,
            ..Row::default()
        }
    }

    #[test]
    fn ratios_costs_and_consistency() {
        let base_b = Backend {
            get: 1,
            put: 1,
            bytes_down: 100,
            bytes_up: 50,
            ..Backend::default()
        };
        let base = row("baseline", 50, base_b);
        let mut path = row(
            "path",
            50,
            Backend {
                get: 10,
                put: 10,
                bytes_down: 40960,
                bytes_up: 40960,
                ..Backend::default()
            },
        );
        path.runtime_s = 6.0;
        let rows = vec![base.clone(), path.clone()];
        assert!(
            consistency_problems(&rows).is_empty(),
            "{:?}",
            consistency_problems(&rows)
        );
        let c = compare(&rows);
        assert_eq!(c.len(), 2);
        assert!((c[1].slowdown() - 3.0).abs() < 1e-9);
        assert!((path.bandwidth_overhead() - 81920.0 / 150.0).abs() < 1e-9);
        // AWS: 10 GET × 0.0004/1000 + 10 PUT × 0.005/1000 + 40960 B egress × 0.09/GB.
        let want = 10.0 * 0.0004 / 1000.0 + 10.0 * 0.005 / 1000.0 + 40960.0 / 1e9 * 0.09;
        assert!((path.backend.cost(&PROVIDERS[0]) - want).abs() < 1e-12);
        assert!((path.outsource_ratio() - 8.0).abs() < 1e-9);
        // With the ORAM's capacity and the live state known, the thesis's ratio.
        let mut sized = path.clone();
        sized.oram_bytes = 5 << 30;
        sized.state_live_bytes = 64 << 20;
        sized.peak_rss = 64 << 20;
        assert!((sized.outsource_ratio() - 80.0).abs() < 1e-9);
        assert!((sized.outsource_ratio_with_rss() - 40.0).abs() < 1e-9);
        // A proxy that moved other client bytes than the baseline, or sent less
        // than the client wrote, or failed a request, is reported.
        let mut bad = path.clone();
        bad.client_up = 49;
        bad.backend.bytes_up = 10;
        bad.failures = 1;
        let p = consistency_problems(&[base, bad]);
        assert_eq!(p.len(), 4, "{p:?}");
        let csv = csv(&rows);
        assert_eq!(csv.lines().count(), 3);
        assert_eq!(
            csv.lines().next().unwrap().split(',').count(),
            csv.lines().nth(1).unwrap().split(',').count()
        );
    }

    /// `--replot` reads back what `csv` wrote: the chart's inputs survive, and a
    /// file without a needed column is refused.
    #[test]
    fn results_csv_reads_back() {
        let base = row(
            "baseline",
            100,
            Backend {
                get: 1,
                put: 1,
                bytes_down: 100,
                bytes_up: 100,
                ..Backend::default()
            },
        );
        let mut p = row(
            "path",
            100,
            Backend {
                get: 7,
                put: 5,
                delete: 0,
                list: 1,
                bytes_down: 9_000,
                bytes_up: 12_000,
            },
        );
        p.runtime_s = 6.5;
        p.main_runtime_s = 4.25;
        p.rw_ms = 31.5;
        let rows = rows_from_csv(&csv(&[base.clone(), p.clone()])).unwrap();
        assert_eq!(rows.len(), 2);
        let q = &rows[1];
        assert_eq!(
            (q.workload.as_str(), q.config.as_str(), q.block_size),
            ("T", "path", 4096)
        );
        assert_eq!(q.backend, p.backend);
        assert_eq!((q.client_up, q.client_down), (p.client_up, p.client_down));
        assert_eq!((q.runtime_s, q.main_runtime_s, q.rw_ms), (6.5, 4.25, 31.5));
        let c = &compare(&rows)[1];
        assert_eq!(c.main_slowdown(), 4.25);
        assert!(rows_from_csv("workload,config\nT,path\n").is_err());
    }
}
