//! The thesis's metrics for each run, and the report: Markdown, CSV and PNG charts.

use std::fmt::Write as _;

use crate::exec::{ReqKind, RunLog};

mod chart;
mod csv;
/// Number formats of both reports.
pub mod fmt;

pub use chart::{draw_charts, load_font, replot};
pub use csv::{csv, rows_from_csv};
pub use fmt::human;
use fmt::{mb, x};

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
