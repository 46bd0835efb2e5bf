//! `oram-proxy serve`: the proxy in the foreground, with systemd's notification
//! protocol, SIGHUP reloads, and a graceful stop on SIGTERM or SIGINT.

use std::time::Duration;

use oram_proxy::config::Config;
use oram_proxy::notify::Notifier;
use oram_proxy::Server;
use oram_volume::BackendKind;

use crate::args::ServeArgs;
use crate::error::CliError;
use crate::util::{logging, runtime, utc};

/// Seconds in-flight requests get to finish at a stop (the unit's TimeoutStopSec
/// leaves room for this, the final write-back and the checkpoint).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// `oram-proxy serve`.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    let (cfg, root) = args.configure()?;
    if cfg.cluster.role == oram_volume::cluster::Role::Node {
        return super::node::run(cfg);
    }
    logging("info");
    let notify = Notifier::from_env();
    runtime()?.block_on(async move {
        // Signal handlers first: a SIGTERM while the volume opens (recovery can take a
        // while) is kept and acted on as soon as the server runs, not fatal mid-start.
        let mut signals = Signals::install().map_err(|e| format!("signal handlers: {e}"))?;
        // The watchdog runs from the start: recovery may take a while.
        let _watchdog = notify.spawn_watchdog();
        let leadership = if cfg.cluster.role == oram_volume::cluster::Role::Front
            && cfg.cluster.coordinated()
        {
            match super::front::lead(&cfg, &mut signals, &notify).await? {
                Some(l) => Some(l),
                None => return Ok(()),
            }
        } else {
            None
        };
        notify.status("opening the volume");
        let server = match oram_proxy::start(&cfg, root).await {
            Ok(s) => s,
            Err(e) => {
                notify.status(&format!("start failed: {e}"));
                return Err(e.to_string());
            }
        };
        banner(&cfg, &server);
        notify.ready(&format!(
            "serving S3 on {}{}",
            server.s3_addr(),
            if server.tls_info().is_some() {
                " (TLS)"
            } else {
                ""
            }
        ));
        let lost = async {
            match &leadership {
                Some(l) => l.lease().lost().await,
                None => std::future::pending().await,
            }
        };
        let mut deposed = false;
        tokio::select! {
            () = serve_signals(signals, &server, &notify) => {}
            () = lost => {
                tracing::error!("this front's etcd lease was lost: another front may be active now; stopping");
                deposed = true;
            }
        }
        tracing::info!("shutting down: finishing in-flight requests");
        notify.stopping("finishing in-flight requests, writing back, checkpointing");
        server
            .shutdown(STOP_GRACE)
            .await
            .map_err(|e| format!("final write-back or checkpoint failed: {e}"))?;
        if deposed {
            return Err("stopped: this front's etcd lease was lost (another front may be \
                        active now)"
                .to_string());
        }
        if let Some(l) = leadership {
            let _ = l.resign().await;
        }
        tracing::info!("stopped");
        Ok::<(), String>(())
    })?;
    Ok(())
}

/// The signals `serve` acts on, registered before the volume opens so that none
/// delivered during start-up takes the default (fatal) action.
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

impl Signals {
    /// Waits for SIGTERM or SIGINT (SIGHUP ignored: a node has nothing to
    /// reload).
    pub(crate) async fn stop(&mut self) {
        loop {
            tokio::select! {
                _ = self.int.recv() => return,
                _ = self.term.recv() => return,
                _ = self.hup.recv() => tracing::info!("SIGHUP: nothing to reload on a node"),
            }
        }
    }
}

/// Waits for SIGTERM or SIGINT; reloads the TLS certificate on SIGHUP meanwhile.
async fn serve_signals(mut signals: Signals, server: &Server, notify: &Notifier) {
    loop {
        tokio::select! {
            _ = signals.int.recv() => return,
            _ = signals.term.recv() => return,
            _ = signals.hup.recv() => {
                notify.reloading();
                match server.reload() {
                    Ok(Some(c)) => tracing::info!(
                        cert = %c.cert_file.display(),
                        not_after = %utc(c.not_after),
                        sha256 = %c.fingerprint,
                        "SIGHUP: TLS certificate reloaded"
                    ),
                    Ok(None) => tracing::info!("SIGHUP: nothing to reload (TLS is off)"),
                    Err(e) => tracing::error!("SIGHUP: reload failed, still serving the old certificate: {e}"),
                }
                notify.ready("serving (reloaded)");
            }
        }
    }
}

fn banner(cfg: &Config, server: &Server) {
    let info = &server.info;
    let u = server.layer().usage();
    let tls = server.tls_info();
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("oram-proxy {} serving S3", oram_server::build_info::VERSION);
    println!("  endpoint:   {scheme}://{}", server.s3_addr());
    println!("  region:     {}", cfg.s3.region);
    if let Some(c) = &tls {
        println!(
            "  tls:        {} (valid until {}, SHA-256 {})",
            c.cert_file.display(),
            utc(c.not_after),
            c.fingerprint
        );
        let ca = oram_server::tls::default_dir(&cfg.data_dir).join("ca.pem");
        if ca.exists() {
            println!(
                "  clients:    verify with the CA certificate {}",
                ca.display()
            );
        }
    }
    if let Some(m) = server.metrics_addr() {
        let ms = if tls.is_some() && !m.ip().is_loopback() {
            "https"
        } else {
            "http"
        };
        println!("  metrics:    {ms}://{m}/metrics (and /health)");
        if cfg.metrics.dashboard {
            println!("  dashboard:  {ms}://{m}/dashboard");
        }
        if let Some(t) = server.metrics_token_file() {
            println!(
                "  token:      {} (Authorization: Bearer <token>; dashboard: /dashboard#token=<token>)",
                t.display()
            );
        }
    }
    if let Some(a) = server.swift_addr() {
        println!("  swift auth: {scheme}://{a}/auth/v1.0 (X-Auth-User: <access key>:<access key>, X-Auth-Key: <secret key>)");
    }
    println!(
        "  engine:     {} ({} blocks of {} bytes = {} MiB)",
        cfg.engine.kind.name(),
        u.capacity_blocks,
        u.block_size,
        (u.capacity_blocks * u.block_size as u64) >> 20
    );
    println!("  used:       {}", used_text(u));
    if !cfg.engine.kind.settings().oblivious() {
        let name = cfg.engine.kind.name();
        println!("  WARNING:    the {name} engine is NOT oblivious: the storage provider sees");
        println!("              which blocks are read and written (--insecure-direct).");
        tracing::warn!(
            "engine {name}: NOT oblivious; the storage provider sees which blocks are read and written"
        );
    }
    println!("  volume id:  {}", server.volume().params.volume_id);
    println!("  data dir:   {}", cfg.data_dir.display());
    let b = &cfg.backend;
    match b.kind {
        BackendKind::Fs => {
            println!("  backend:    file://{}", cfg.store_path().display())
        }
        BackendKind::S3 => println!(
            "  backend:    s3://{}/{} at {} ({})",
            b.bucket,
            b.key_prefix,
            b.endpoint.as_deref().unwrap_or("AWS S3"),
            b.region
        ),
    }
    let bound = cfg.engine.model(&cfg.backend.prefix).backend_bytes_bound();
    let disk = oram_volume::disk_space(&cfg.backend, &cfg.data_dir);
    let budget = b.budget_bytes();
    let (line, warning) =
        footprint_text(bound, u.capacity_blocks * u.block_size as u64, disk, budget);
    println!("  footprint:  {line}");
    if let Some(w) = warning {
        println!("  WARNING:    {w}");
        tracing::warn!("{w}");
    }
    if info.new_key {
        println!("  master key: created {}", cfg.key_file().display());
    }
    if info.created {
        println!("  volume:     created");
    } else {
        println!("  volume:     {} objects", info.objects);
    }
    if info.resent_writebacks > 0 {
        println!(
            "  recovered:  resent {} write-backs journaled before an unclean stop",
            info.resent_writebacks
        );
    }
    let first = &info.users[0];
    println!("  access key: {}", first.access_key);
    if info.generated_credentials {
        println!("  secret key: {}", first.secret_key);
        println!(
            "  (shown once; kept in {})",
            oram_volume::users::credentials_path(&cfg.data_dir).display()
        );
    } else {
        println!("  secret key: (not shown)");
    }
}

/// The banner's fullness line: MiB used of the capacity, and the share.
fn used_text(u: oram_objects::Usage) -> String {
    let used = u.capacity_blocks.saturating_sub(u.free_blocks);
    let mib = |blocks: u64| (blocks.saturating_mul(u.block_size as u64)) >> 20;
    let pct = if u.capacity_blocks == 0 {
        0.0
    } else {
        used as f64 * 100.0 / u.capacity_blocks as f64
    };
    format!(
        "{} MiB of {} MiB ({pct:.1} %; {} blocks free)",
        mib(used),
        mib(u.capacity_blocks),
        u.free_blocks
    )
}

/// The banner's `footprint:` line — what the backend may come to hold — and a
/// warning when the fs back-end's file system, or the operator's budget, is
/// smaller than that.
fn footprint_text(
    bound: u64,
    capacity_bytes: u64,
    disk: Option<oram_volume::DiskSpace>,
    budget: u64,
) -> (String, Option<String>) {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let line = format!(
        "up to {:.2} GiB on the backend ({:.1}x the capacity; `oram-proxy describe`)",
        gib(bound),
        bound as f64 / capacity_bytes.max(1) as f64
    );
    let warning = match (disk, budget) {
        (Some(d), _) if d.total < bound => Some(format!(
            "the backend's file system holds {:.2} GiB in all, less than the {:.2} GiB the              volume's objects can come to: writes (and reads, which write too) will fail              once it is full; give the backend a larger disk or use a smaller volume",
            gib(d.total),
            gib(bound)
        )),
        (_, budget) if budget > 0 && budget < bound => Some(format!(
            "backend.budget_gib is {:.2} GiB, less than the {:.2} GiB the volume's objects              can come to",
            gib(budget),
            gib(bound)
        )),
        _ => None,
    };
    (line, warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_says_how_full_the_volume_is() {
        let u = oram_objects::Usage {
            capacity_blocks: 65536,
            free_blocks: 65536 - 6554,
            block_size: 16384,
        };
        assert_eq!(
            used_text(u),
            "102 MiB of 1024 MiB (10.0 %; 58982 blocks free)"
        );
    }

    #[test]
    fn the_banner_warns_when_the_backend_cannot_hold_the_volume() {
        let gib = 1u64 << 30;
        let (line, w) = footprint_text(12 * gib, gib, None, 0);
        assert_eq!(
            line,
            "up to 12.00 GiB on the backend (12.0x the capacity; `oram-proxy describe`)"
        );
        assert!(w.is_none());
        let small = oram_volume::DiskSpace {
            free: gib,
            total: 2 * gib,
        };
        let (_, w) = footprint_text(12 * gib, gib, Some(small), 0);
        assert!(w.unwrap().contains("holds 2.00 GiB in all"));
        let (_, w) = footprint_text(12 * gib, gib, None, 10 * gib);
        assert!(w.unwrap().contains("budget_gib is 10.00 GiB"));
        let big = oram_volume::DiskSpace {
            free: 20 * gib,
            total: 20 * gib,
        };
        assert!(footprint_text(12 * gib, gib, Some(big), 20 * gib)
            .1
            .is_none());
    }
}
