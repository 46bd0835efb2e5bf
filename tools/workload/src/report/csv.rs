//! `results.csv`: written for every report, read back to redraw its charts.

use std::fmt::Write as _;

use super::{compare, Backend, Row, PROVIDERS};

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
