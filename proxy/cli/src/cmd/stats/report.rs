//! What `stats` prints: a live proxy's metrics summarised, or what a stopped
//! proxy's data directory knows.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use oram_proxy::config::Config;
use oram_volume::{datadir, VolumeError};

/// Milliseconds since the Unix epoch now.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Samples of a Prometheus text: `name{labels}` (as written) → value.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A byte count in B, KiB, MiB, GiB or TiB.
fn mib(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b.max(0.0);
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// A duration in words, e.g. `2 h 5 min`.
pub fn human_secs(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min {} s", s / 60, s % 60),
        7200..=172_799 => format!("{} h {} min", s / 3600, s / 60 % 60),
        _ => format!("{} d {} h", s / 86_400, s / 3600 % 24),
    }
}

/// The summary lines of a live proxy's metrics.
pub fn live_report(m: &BTreeMap<String, f64>) -> Vec<(&'static str, String)> {
    let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
    let sum = |prefix: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    };
    let engine = m
        .keys()
        .find_map(|k| {
            k.strip_prefix("oram_engine_info{engine=\"")
                .and_then(|r| r.split('"').next())
        })
        .unwrap_or("?")
        .to_string();
    let total = g("oram_capacity_blocks{kind=\"total\"}");
    let used = g("oram_capacity_blocks{kind=\"used\"}");
    let bs = g("oram_block_size_bytes");
    let lease = m
        .iter()
        .find(|(k, v)| k.starts_with("oram_lease_state{") && **v == 1.0)
        .and_then(|(k, _)| k.split('"').nth(1))
        .unwrap_or("?")
        .to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let mut out = vec![
        ("uptime", human_secs(now - g("oram_start_time_seconds"))),
        (
            "engine",
            format!(
                "{engine}, {} blocks of {} bytes ({})",
                total,
                bs,
                mib(total * bs)
            ),
        ),
        (
            "capacity used",
            format!(
                "{used} blocks ({}, {:.1}%)",
                mib(used * bs),
                100.0 * used / total.max(1.0)
            ),
        ),
        (
            "capacity free",
            format!(
                "{} blocks ({})",
                g("oram_capacity_blocks{kind=\"free\"}"),
                mib(g("oram_capacity_blocks{kind=\"free\"}") * bs)
            ),
        ),
        ("growth", growth_line(&g, total * bs)),
        ("backend footprint", footprint(&g, total * bs)),
        (
            "objects",
            format!(
                "{} in {} buckets",
                g("oram_objects{kind=\"objects\"}"),
                g("oram_objects{kind=\"buckets\"}")
            ),
        ),
        (
            "stash",
            if g("oram_engine_stash_bound_blocks") > 0.0 {
                format!(
                    "{} blocks now, max {}, mean {:.1} (bound {})",
                    g("oram_engine_stash_blocks"),
                    g("oram_engine_stash_max_blocks"),
                    g("oram_engine_stash_mean_blocks"),
                    g("oram_engine_stash_bound_blocks")
                )
            } else {
                "none (no ORAM)".into()
            },
        ),
        (
            "backlog",
            format!(
                "{} write-backs pending, {} journaled buckets, {} retries",
                g("oram_engine_pending_writebacks"),
                g("oram_journal_entries"),
                g("oram_engine_writeback_retries_total")
            ),
        ),
        (
            "checkpoint",
            format!(
                "{} ago (every {}), {} failures",
                human_secs(g("oram_checkpoint_age_seconds")),
                match g("oram_checkpoint_interval_seconds") {
                    0.0 => "shutdown only".to_string(),
                    s => human_secs(s),
                },
                g("oram_checkpoint_failures_total")
            ),
        ),
        ("state.redb", mib(g("oram_state_file_bytes"))),
        (
            "backend",
            format!(
                "{} requests, {} moved, {} errors",
                sum("oram_backend_requests_total{"),
                mib(sum("oram_backend_bytes_total{")),
                sum("oram_backend_errors_total{")
            ),
        ),
        (
            "clients",
            format!(
                "{} requests, {} in and out; bandwidth overhead {:.1}x",
                sum("oram_client_requests_total{"),
                mib(sum("oram_client_bytes_total{")),
                g("oram_bandwidth_overhead_ratio")
            ),
        ),
        ("lease", lease),
    ];
    if m.contains_key("oram_key_rotation_resealed_ratio") {
        out.push((
            "key rotation",
            format!(
                "{:.1}% of {} written positions re-sealed under the current key{}",
                100.0 * g("oram_key_rotation_resealed_ratio"),
                g("oram_key_rotation_positions{state=\"written\"}"),
                if g("oram_key_rotation_complete") == 1.0 {
                    " (complete: `oram-proxy key forget-earlier` may drop the earlier keys)"
                } else {
                    ""
                }
            ),
        ));
    }
    if g("oram_tls_enabled") == 1.0 {
        let left = g("oram_tls_certificate_expiry_timestamp_seconds") - now;
        out.push((
            "tls",
            format!("certificate expires in {}", human_secs(left)),
        ));
    }
    out
}

/// The growth line of a live proxy: the automatic policy, the growth under
/// way, and the growths since its start (a proxy of an earlier version has
/// none of these metrics: only its policy, off, shows).
fn growth_line(g: &dyn Fn(&str) -> f64, capacity_bytes: f64) -> String {
    let (grow_at, max) = (g("oram_grow_at_ratio"), g("oram_capacity_max_bytes"));
    let mut line = if grow_at > 0.0 {
        format!(
            "automatic at {:.0}% used, up to {}{}",
            100.0 * grow_at,
            mib(max),
            if capacity_bytes >= max {
                " (reached: grows no more by itself)"
            } else {
                ""
            }
        )
    } else {
        "automatic growth off".to_string()
    };
    if g("oram_growth_in_progress") == 1.0 {
        line.push_str(&format!(
            "; growing now, {} of {} new positions written",
            g("oram_growth_positions{state=\"done\"}"),
            g("oram_growth_positions{state=\"total\"}")
        ));
    }
    line.push_str(&format!(
        "; {} growths finished, {} failed since start",
        g("oram_growths_total{result=\"ok\"}"),
        g("oram_growths_total{result=\"failed\"}")
    ));
    line
}

/// The growth history, oldest first, a line each (nothing when the volume
/// never grew).
pub fn history_report(h: &[oram_volume::GrowthRecord]) -> String {
    if h.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "growth history ({} growths, oldest first; the last {} are kept):
",
        h.len(),
        oram_volume::HISTORY_KEEP
    );
    for r in h {
        let bytes = |blocks: u64| mib((blocks * r.block_size) as f64);
        text.push_str(&format!(
            "  {}: {} -> {} ({} -> {} blocks), {} of {} new positions written ({}), took {}\n",
            crate::util::utc(r.finished_unix),
            bytes(r.from_blocks),
            bytes(r.to_blocks),
            r.from_blocks,
            r.to_blocks,
            r.written,
            r.positions,
            mib(r.backend_bytes as f64),
            human_secs(r.finished_unix.saturating_sub(r.started_unix) as f64)
        ));
    }
    text
}

/// What the data directory says with no proxy running (takes the directory's
/// lock, so it fails while a proxy serves it).
pub fn offline_report(cfg: &Config) -> Result<Vec<(&'static str, String)>, VolumeError> {
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(VolumeError::Params(format!(
            "{} holds no volume",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    let p = datadir::read_volume(dir)?;
    // The capacity in effect (a grown volume's; volume.toml follows the engine).
    let cap = p.capacity_in_effect();
    let state = datadir::state_path(dir);
    let file_bytes = std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0);
    let mut out = vec![(
        "engine",
        format!(
            "{}, {} blocks of {} bytes ({}){}",
            p.engine,
            cap,
            p.block_size,
            mib((cap * p.block_size as u64) as f64),
            match (p.grown_blocks, p.growing_to) {
                (_, Some(to)) if to > cap => format!(
                    "; started at {} blocks, a growth to {to} blocks is pending",
                    p.capacity_blocks
                ),
                (Some(_), _) => format!("; grown from {} blocks", p.capacity_blocks),
                _ => String::new(),
            }
        ),
    )];
    if !state.exists() {
        out.push((
            "state.redb",
            "absent (the volume never stored anything)".into(),
        ));
        return Ok(out);
    }
    let db = oram_statedb::Db::open(&state, p.volume_id()?.0)?;
    let sizes = db.table_sizes()?;
    let entries = |n: &str| sizes.iter().find(|t| t.name == n).map_or(0, |t| t.entries);
    let (journal, journal_bytes) = db.journal_size()?;
    let objects = db.kv_prefix(oram_objects::BLOCK_RECORDS[0])?;
    let uploads = db.kv_prefix(oram_objects::BLOCK_RECORDS[1])?;
    let used = oram_objects::blocks_in_use(
        objects.iter().map(|(_, v)| v.as_slice()),
        uploads.iter().map(|(_, v)| v.as_slice()),
    )?;
    out.push((
        "capacity used",
        format!(
            "{used} blocks ({}, {:.1}%) by {} objects and {} unfinished uploads",
            mib((used * p.block_size as u64) as f64),
            100.0 * used as f64 / cap.max(1) as f64,
            objects.len(),
            uploads.len()
        ),
    ));
    out.push((
        "blocks written",
        format!(
            "{} of {} have a position (blocks ever written)",
            entries("positions"),
            cap
        ),
    ));
    out.push(("stash", format!("{} blocks", entries("stash"))));
    out.push((
        "backlog",
        format!("{journal} journaled buckets ({journal_bytes} bytes), resent at the next start"),
    ));
    let epoch = db.epoch();
    out.push((
        "checkpoint",
        match oram_volume::last_checkpoint_ms(&db) {
            Some(ms) => {
                let now = unix_ms();
                format!(
                    "epoch {}, taken {} ago",
                    epoch.saturating_sub(1),
                    human_secs(now.saturating_sub(ms) as f64 / 1e3)
                )
            }
            None if epoch == 0 => "none yet".into(),
            None => {
                format!("epoch {epoch}: the last one did not complete (the next start takes one)")
            }
        },
    ));
    // The bytes the state really holds (what an outsource ratio counts), beside
    // the file, whose free pages are reused but not returned until `compact`.
    let live = db.live_bytes()?;
    let live_total: u64 = live.iter().map(|t| t.stored + t.metadata).sum();
    let parts: Vec<String> = live
        .iter()
        .filter(|t| t.stored + t.metadata > 0)
        .map(|t| format!("{} {}", t.name, t.stored + t.metadata))
        .collect();
    out.push((
        "live state",
        format!(
            "{live_total} bytes in the tables ({}; keys, values and tree pages)",
            parts.join(", ")
        ),
    ));
    out.push(("state.redb", mib(file_bytes as f64)));
    // Swift containers S3's ListBuckets leaves out, from the index's bucket
    // records (the same list a running proxy gives).
    let values = db.kv_prefix(oram_objects::BUCKET_RECORDS)?;
    let invisible = oram_objects::invisible_to_s3(values.iter().map(|(_, v)| v.as_slice()))?;
    for (b, why) in &invisible {
        out.push(("invisible", invisible_line(&b.owner, &b.name, why)));
    }
    Ok(out)
}

/// What the backend may come to hold (the engine's bound, against the
/// capacity), and the fs back-end's disk or the operator's budget beside it.
fn footprint(g: &dyn Fn(&str) -> f64, capacity_bytes: f64) -> String {
    let bound = g("oram_backend_bytes_bound");
    let mut text = format!(
        "up to {} ({:.1}x the capacity)",
        mib(bound),
        bound / capacity_bytes.max(1.0)
    );
    let total = g("oram_backend_disk_bytes{kind=\"total\"}");
    if total > 0.0 {
        let free = g("oram_backend_disk_bytes{kind=\"free\"}");
        text.push_str(&format!("; disk {} free of {}", mib(free), mib(total)));
        if total < bound {
            text.push_str(" (SMALLER than the bound)");
        }
    }
    let budget = g("oram_backend_budget_bytes");
    if budget > 0.0 {
        text.push_str(&format!("; budget {}", mib(budget)));
        if budget < bound {
            text.push_str(" (SMALLER than the bound)");
        }
    }
    text
}

/// How `stats` names a Swift container S3 cannot address.
pub fn invisible_line(account: &str, container: &str, reason: &str) -> String {
    format!("{container:?} (account AUTH_{account}): not a valid S3 bucket name: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_parses_and_summarises() {
        let text = "# HELP x y\n# TYPE x gauge\noram_engine_info{engine=\"ring\"} 1\n\
                    oram_capacity_blocks{kind=\"total\"} 100\noram_capacity_blocks{kind=\"used\"} 25\n\
                    oram_block_size_bytes 4096\noram_lease_state{state=\"none\"} 1\n\
                    oram_lease_state{state=\"held\"} 0\noram_engine_stash_bound_blocks 80\n\
                    oram_engine_stash_blocks 3\noram_backend_requests_total{verb=\"get\"} 7\n\
                    oram_backend_requests_total{verb=\"put\"} 5\n\
                    oram_backend_bytes_bound 1228800\noram_backend_disk_bytes{kind=\"total\"} 1048576\n\
                    oram_backend_disk_bytes{kind=\"free\"} 524288\n\
                    oram_key_rotation_resealed_ratio 0.25\n\
                    oram_key_rotation_positions{state=\"written\"} 40\n";
        let m = parse_metrics(text);
        assert_eq!(m["oram_capacity_blocks{kind=\"used\"}"], 25.0);
        let r: BTreeMap<_, _> = live_report(&m).into_iter().collect();
        assert!(
            r["engine"].starts_with("ring, 100 blocks of 4096 bytes"),
            "{}",
            r["engine"]
        );
        assert!(
            r["capacity used"].contains("25.0%"),
            "{}",
            r["capacity used"]
        );
        assert!(
            r["capacity used"].contains("(100.0 KiB, "),
            "{}",
            r["capacity used"]
        );
        assert!(r["stash"].starts_with("3 blocks now"), "{}", r["stash"]);
        assert!(r["backend"].starts_with("12 requests"), "{}", r["backend"]);
        assert_eq!(r["lease"], "none");
        assert_eq!(
            r["key rotation"],
            "25.0% of 40 written positions re-sealed under the current key"
        );
        assert_eq!(
            r["backend footprint"],
            "up to 1.2 MiB (3.0x the capacity); disk 512.0 KiB free of 1.0 MiB (SMALLER than \
             the bound)"
        );
    }

    /// The growth line names the policy, a growth under way and the counts;
    /// the history a line per growth, oldest first.
    #[test]
    fn growths_are_summarised() {
        let m = parse_metrics(
            "oram_grow_at_ratio 0.8\noram_capacity_max_bytes 4194304\n\
             oram_growth_in_progress 1\noram_growth_positions{state=\"done\"} 5\n\
             oram_growth_positions{state=\"total\"} 9\noram_growths_total{result=\"ok\"} 2\n\
             oram_growths_total{result=\"failed\"} 1\n",
        );
        let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
        assert_eq!(
            growth_line(&g, 1048576.0),
            "automatic at 80% used, up to 4.0 MiB; growing now, 5 of 9 new positions written; \
             2 growths finished, 1 failed since start"
        );
        assert!(growth_line(&g, 4194304.0).contains("(reached: grows no more by itself)"));
        let off = |_: &str| 0.0;
        assert_eq!(
            growth_line(&off, 1.0),
            "automatic growth off; 0 growths finished, 0 failed since start"
        );
        assert_eq!(history_report(&[]), "");
        let rec = |from: u64, to: u64, t: u64| oram_volume::GrowthRecord {
            from_blocks: from,
            to_blocks: to,
            block_size: 16384,
            started_unix: t,
            finished_unix: t + 130,
            positions: 765,
            written: 700,
            backend_bytes: 700 * 65613,
        };
        let text = history_report(&[rec(256, 1024, 0), rec(1024, 4096, 86_400)]);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("growth history (2 growths"), "{text}");
        assert_eq!(
            lines[1],
            "  1970-01-01 00:02:10 UTC: 4.0 MiB -> 16.0 MiB (256 -> 1024 blocks), 700 of 765 new \
             positions written (43.8 MiB), took 2 min 10 s"
        );
        assert!(lines[2].contains("16.0 MiB -> 64.0 MiB"), "{text}");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(mib(0.0), "0 B");
        assert_eq!(mib(1023.0), "1023 B");
        assert_eq!(mib(1536.0), "1.5 KiB");
        assert_eq!(mib((5u64 << 30) as f64), "5.0 GiB");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_secs(5.0), "5 s");
        assert_eq!(human_secs(600.0), "10 min 0 s");
        assert_eq!(human_secs(7300.0), "2 h 1 min");
        assert_eq!(human_secs(200_000.0), "2 d 7 h");
    }
}
