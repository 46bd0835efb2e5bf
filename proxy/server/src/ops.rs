//! Operator commands besides the server: `oram-proxy stats`, `oram-proxy
//! compact` and `oram-proxy format`.
//!
//! `stats` asks a running proxy's operator endpoint (`/metrics`) and summarises
//! it; with no proxy running it reads what the data directory itself knows
//! (volume parameters, checkpoint, stash, journal, file sizes). `compact` shrinks
//! `state.redb` while the proxy is stopped. `format` writes every backend object
//! the engine may read that was never written ([`oram_engine::Oram::format`])
//! while the proxy is stopped.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;
use crate::datadir::{self, VolumeParams};
use crate::{tls, ProxyError};

/// `oram-proxy compact`: takes the data directory's lock (so no proxy runs) and
/// compacts `state.redb` ([`oram_statedb::compact`]).
pub fn compact(
    cfg: &Config,
    progress: impl FnMut(u32),
) -> Result<oram_statedb::Compacted, ProxyError> {
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(ProxyError::Params(format!(
            "{} holds no volume",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    Ok(oram_statedb::compact(&datadir::state_path(dir), progress)?)
}

/// What `oram-proxy format` did.
#[derive(Debug, Clone)]
pub struct FormatDone {
    /// The volume's engine (`path`, `ring`, `direct`).
    pub engine: String,
    /// The engine's positions and how many were written now.
    pub formatted: oram_engine::Formatted,
    /// The checkpoint taken afterwards (none when nothing was written).
    pub checkpoint: Option<crate::volume::CheckpointInfo>,
    /// How long the format itself took (opening the volume excluded).
    pub elapsed: Duration,
}

/// `oram-proxy format`: takes the data directory's lock (so no proxy runs),
/// opens the volume as `fsck` does (the backend lease, recovery from an unclean
/// stop, an interrupted checkpoint completed), and has the engine write every
/// position it may read that was never written ([`oram_engine::Oram::format`]),
/// calling `progress(done, total)` as it goes. Positions already written are left
/// alone, so it is safe on a volume holding data and a second run writes nothing.
/// When anything was written, everything is flushed and a checkpoint taken, so
/// that `recover` knows the new objects too.
///
/// Observed by the storage server: the lease and header traffic of any open, one
/// PUT per never-written position in position order, and the checkpoint PUT.
pub async fn format(
    cfg: &Config,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<FormatDone, ProxyError> {
    cfg.validate().map_err(ProxyError::Config)?;
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(ProxyError::Params(format!(
            "{} holds no volume (create it with `oram-proxy init`)",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    let vol = crate::volume::Volume::open(cfg).await?;
    vol.repair_checkpoint().await?;
    let start = std::time::Instant::now();
    let formatted = vol.engine.format(progress).await?;
    vol.engine.flush().await?;
    let elapsed = start.elapsed();
    let checkpoint = match formatted.written {
        0 => None,
        _ => Some(vol.checkpoint().await?),
    };
    Ok(FormatDone {
        engine: vol.params.engine.clone(),
        formatted,
        checkpoint,
        elapsed,
    })
}

/// Why `/metrics` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Nothing listens there (the proxy is not running).
    #[error("nothing listens at {0}")]
    Refused(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Where and how to reach a running proxy's `/metrics`.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port` or `https://host:port`.
    pub url: String,
    /// The bearer token, if one is needed.
    pub token_file: Option<PathBuf>,
    /// CA certificates to verify an HTTPS endpoint with.
    pub ca_file: Option<PathBuf>,
}

/// The endpoint the configuration describes (`None` when `metrics.listen` is
/// empty): `127.0.0.1` for a wildcard address; HTTPS when the endpoint is off
/// loopback and TLS is configured; the token and CA files of the data directory
/// when present.
pub fn target(cfg: &Config) -> Result<Option<Target>, ProxyError> {
    if cfg.metrics.listen.is_empty() {
        return Ok(None);
    }
    let mut addr: std::net::SocketAddr = cfg
        .metrics
        .listen
        .parse()
        .map_err(|_| ProxyError::Config("metrics.listen is not HOST:PORT".into()))?;
    let https = !tls::is_loopback(&addr) && tls::files(cfg)?.is_some();
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let generated = cfg.data_dir.join("metrics.token");
    let ca = tls::default_dir(&cfg.data_dir).join("ca.pem");
    Ok(Some(Target {
        url: format!("{}://{addr}", if https { "https" } else { "http" }),
        token_file: cfg
            .metrics
            .token_file
            .clone()
            .or_else(|| generated.exists().then_some(generated)),
        ca_file: ca.exists().then_some(ca),
    }))
}

/// GETs `<url>/metrics` (blocking; bounded by timeouts).
pub fn fetch_metrics(t: &Target) -> Result<String, FetchError> {
    let other = |e: String| FetchError::Other(e);
    let (https, rest) = if let Some(r) = t.url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = t.url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(other(format!("{}: expected http:// or https://", t.url)));
    };
    let hostport = rest.trim_end_matches('/');
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse::<u16>()
                .map_err(|_| other(format!("{}: bad port", t.url)))?,
        ),
        None => (hostport, if https { 443 } else { 80 }),
    };
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| other(format!("{host}: {e}")))?
        .collect();
    let mut last = None;
    let mut sock = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(5)) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let sock = match sock {
        Some(s) => s,
        None => {
            return Err(match last {
                Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    FetchError::Refused(t.url.clone())
                }
                Some(e) => other(format!("{}: {e}", t.url)),
                None => other(format!("{host}: no address")),
            })
        }
    };
    let _ = sock.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(30)));
    let token = match &t.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| other(format!("{}: {e}", p.display())))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let mut req = format!(
        "GET /metrics HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nUser-Agent: oram-proxy-stats\r\n"
    );
    if let Some(tok) = &token {
        req.push_str(&format!("Authorization: Bearer {tok}\r\n"));
    }
    req.push_str("\r\n");
    let mut raw = Vec::new();
    if https {
        let mut roots = rustls::RootCertStore::empty();
        let ca = t.ca_file.as_ref().ok_or_else(|| {
            other(format!(
                "{} speaks HTTPS: pass the CA certificate with --ca-file",
                t.url
            ))
        })?;
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .map_err(|e| other(format!("{}: {e}", ca.display())))?
        {
            roots
                .add(c.map_err(|e| other(format!("{}: {e}", ca.display())))?)
                .map_err(|e| other(format!("{}: {e}", ca.display())))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cc = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| other(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| other(format!("{host}: {e}")))?;
        let conn = rustls::ClientConnection::new(std::sync::Arc::new(cc), name)
            .map_err(|e| other(e.to_string()))?;
        let mut s = rustls::StreamOwned::new(conn, sock);
        s.write_all(req.as_bytes())
            .map_err(|e| other(format!("{}: {e}", t.url)))?;
        match s.read_to_end(&mut raw) {
            Ok(_) => {}
            // A server that closes without close_notify still sent everything.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(other(format!("{}: {e}", t.url))),
        }
    } else {
        let mut s = sock;
        s.write_all(req.as_bytes())
            .map_err(|e| other(format!("{}: {e}", t.url)))?;
        s.read_to_end(&mut raw)
            .map_err(|e| other(format!("{}: {e}", t.url)))?;
    }
    let (status, body) =
        parse_response(&raw).ok_or_else(|| other("malformed HTTP answer".into()))?;
    match status {
        200 => Ok(body),
        401 => Err(other(format!(
            "{}/metrics wants a token: pass --token-file (the generated one is <data_dir>/metrics.token)",
            t.url
        ))),
        s => Err(other(format!("{}/metrics answered {s}", t.url))),
    }
}

/// The status and body (de-chunked) of an HTTP/1.1 answer.
fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let body = &raw[split + 4..];
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&rest[..eol]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
        out
    } else {
        body.to_vec()
    };
    Some((status, String::from_utf8(body).ok()?))
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
    if g("oram_tls_enabled") == 1.0 {
        let left = g("oram_tls_certificate_expiry_timestamp_seconds") - now;
        out.push((
            "tls",
            format!("certificate expires in {}", human_secs(left)),
        ));
    }
    out
}

/// What the data directory says with no proxy running (takes the directory's
/// lock, so it fails while a proxy serves it).
pub fn offline_report(cfg: &Config) -> Result<Vec<(&'static str, String)>, ProxyError> {
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(ProxyError::Params(format!(
            "{} holds no volume",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    let path = dir.join("volume.toml");
    let text = std::fs::read_to_string(&path).map_err(crate::keys::io(&path))?;
    let p = VolumeParams::from_toml(&text, &path.display().to_string())?;
    let state = datadir::state_path(dir);
    let file_bytes = std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0);
    let mut out = vec![(
        "engine",
        format!(
            "{}, {} blocks of {} bytes ({})",
            p.engine,
            p.capacity_blocks,
            p.block_size,
            mib((p.capacity_blocks * p.block_size as u64) as f64)
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
    out.push((
        "blocks written",
        format!(
            "{} of {} have a position (blocks ever written; `stats` on a running proxy shows the blocks in use)",
            entries("positions"),
            p.capacity_blocks
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
        match crate::volume::last_checkpoint_ms(&db) {
            Some(ms) => {
                let now = crate::telemetry::unix_ms();
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
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_parse_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse_response(plain), Some((200, "hello".into())));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Some((200, "hello".into())));
        assert_eq!(
            parse_response(b"HTTP/1.1 401 No\r\n\r\n"),
            Some((401, String::new()))
        );
        assert_eq!(parse_response(b"garbage"), None);
    }

    #[test]
    fn metrics_text_parses_and_summarises() {
        let text = "# HELP x y\n# TYPE x gauge\noram_engine_info{engine=\"ring\"} 1\n\
                    oram_capacity_blocks{kind=\"total\"} 100\noram_capacity_blocks{kind=\"used\"} 25\n\
                    oram_block_size_bytes 4096\noram_lease_state{state=\"none\"} 1\n\
                    oram_lease_state{state=\"held\"} 0\noram_engine_stash_bound_blocks 80\n\
                    oram_engine_stash_blocks 3\noram_backend_requests_total{verb=\"get\"} 7\n\
                    oram_backend_requests_total{verb=\"put\"} 5\n";
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
    }

    #[test]
    fn targets_follow_the_configuration() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            data_dir: d.path().to_path_buf(),
            ..Config::default()
        };
        assert!(target(&cfg).unwrap().is_none());
        cfg.metrics.listen = "0.0.0.0:9100".into();
        let t = target(&cfg).unwrap().unwrap();
        assert_eq!(t.url, "http://127.0.0.1:9100");
        assert!(t.token_file.is_none());
        tls::generate_self_signed(&tls::default_dir(d.path()), &["localhost".into()]).unwrap();
        std::fs::write(d.path().join("metrics.token"), "x").unwrap();
        let t = target(&cfg).unwrap().unwrap();
        assert_eq!(t.url, "https://127.0.0.1:9100");
        assert_eq!(t.token_file, Some(d.path().join("metrics.token")));
        assert_eq!(t.ca_file, Some(d.path().join("tls/ca.pem")));
        assert!(matches!(
            fetch_metrics(&Target {
                url: format!("http://127.0.0.1:{}", free_port()),
                token_file: None,
                ca_file: None
            }),
            Err(FetchError::Refused(_))
        ));
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
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
