//! `oram-proxy`: an S3-compatible proxy that keeps its objects in an Oblivious RAM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use oram_objects::CheckPhase;
use oram_proxy::config::{Config, EngineKind, EXAMPLE};
use oram_proxy::{datadir, UserConfig};

#[derive(Parser)]
#[command(
    version,
    about = "S3-compatible proxy storing objects in an Oblivious RAM"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the S3 API, and the Swift API with --swift-listen (creates the data
    /// directory on first start).
    Serve(ServeArgs),
    /// Create the data directory and (S3 back-end) the backend bucket, then exit.
    Init(ServeArgs),
    /// Check every ORAM invariant and re-read every object against its ETag.
    /// Exit status 0 only when everything is clean (1: problems found, 2: the
    /// check could not run). Recovers from an unclean stop first, like a start.
    Fsck(ServeArgs),
    /// Rebuild an empty data directory from the backend's latest checkpoint, given
    /// the backend settings and the key (key file, ORAM_PROXY_MASTER_KEY, or the
    /// passphrase). Objects written after that checkpoint are lost.
    Recover(ServeArgs),
    /// Print a documented configuration file with every default.
    ExampleConfig,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file (see `oram-proxy example-config`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory (overrides `data_dir`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// S3 listen address (overrides `s3.listen`).
    #[arg(long, value_name = "HOST:PORT")]
    s3_listen: Option<String>,
    /// Metrics and health endpoint address (overrides `metrics.listen`).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Swift API listen address (overrides `swift.listen`; off unless set).
    #[arg(long, value_name = "HOST:PORT")]
    swift_listen: Option<String>,
    /// Engine: path, ring or direct (overrides `engine.kind`; direct needs
    /// --insecure-direct).
    #[arg(long, value_name = "NAME")]
    engine: Option<EngineKind>,
    /// Allow the non-oblivious `direct` engine (sets `engine.insecure_direct`): the
    /// storage provider then sees which blocks are read and written.
    #[arg(long)]
    insecure_direct: bool,
    /// Block size in bytes (overrides `engine.block_size`; fixed at creation).
    #[arg(long, value_name = "BYTES")]
    block_size: Option<usize>,
    /// Capacity in blocks (overrides `engine.capacity_blocks`; fixed at creation).
    #[arg(long, value_name = "BLOCKS")]
    capacity_blocks: Option<u64>,
    /// Do not fsync backend writes (throw-away benchmarks only).
    #[arg(long)]
    no_fsync: bool,
    /// Back-end: file:///path or s3://bucket/prefix (overrides `[backend]`).
    #[arg(long, value_name = "URL")]
    backend: Option<String>,
    /// S3 back-end endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS).
    #[arg(long, value_name = "URL")]
    backend_endpoint: Option<String>,
    /// S3 back-end region.
    #[arg(long, value_name = "NAME")]
    backend_region: Option<String>,
    /// Master key file (overrides `key.key_file`; default <data_dir>/master.key).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// File holding the passphrase the master key is derived from (Argon2id).
    #[arg(long, value_name = "FILE")]
    passphrase_file: Option<PathBuf>,
    /// Seconds between checkpoints to the backend; 0: at shutdown only.
    #[arg(long, value_name = "SECS")]
    checkpoint_interval: Option<u64>,
    /// recover: the volume expected at the backend prefix (printed by `init` and in
    /// the banner); another one is refused.
    #[arg(long, value_name = "HEX")]
    volume_id: Option<String>,
}

fn main() -> ExitCode {
    // Before anything else (and before any thread exists): the key and passphrase
    // leave the environment, where /proc/<pid>/environ and child processes see them.
    oram_proxy::keys::take_env_secrets();
    let cli = Cli::parse();
    match cli.command {
        Command::ExampleConfig => {
            print!("{EXAMPLE}");
            ExitCode::SUCCESS
        }
        Command::Init(args) => match init(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Serve(args) => match serve(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Fsck(args) => match fsck(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("oram-proxy fsck: {e}");
                ExitCode::from(2)
            }
        },
        Command::Recover(args) => match recover(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy recover: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// The configuration from the file (or defaults), the flags and the environment.
fn configure(args: ServeArgs) -> Result<(Config, Option<UserConfig>), String> {
    let mut cfg = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    if let Some(l) = args.s3_listen {
        cfg.s3.listen = l;
    }
    if let Some(l) = args.metrics_listen {
        cfg.metrics.listen = l;
    }
    if let Some(l) = args.swift_listen {
        cfg.swift.listen = l;
    }
    if let Some(e) = args.engine {
        cfg.engine.kind = e;
    }
    if args.insecure_direct {
        cfg.engine.insecure_direct = true;
    }
    if let Some(b) = args.block_size {
        cfg.engine.block_size = b;
    }
    if let Some(c) = args.capacity_blocks {
        cfg.engine.capacity_blocks = c;
    }
    if args.no_fsync {
        cfg.backend.fsync = false;
    }
    if let Some(url) = &args.backend {
        cfg.backend.set_url(url)?;
    }
    if let Some(ep) = args.backend_endpoint {
        cfg.backend.endpoint = Some(ep);
    }
    if let Some(r) = args.backend_region {
        cfg.backend.region = r;
    }
    if let Some(k) = args.key_file {
        cfg.key.key_file = Some(k);
    }
    if let Some(p) = args.passphrase_file {
        cfg.key.passphrase_file = Some(p);
    }
    if let Some(c) = args.checkpoint_interval {
        cfg.state.checkpoint_interval_secs = c;
    }
    let root_password = std::env::var("ORAM_PROXY_ROOT_PASSWORD").ok();
    // The root user's secret key leaves the environment too (still single-threaded).
    std::env::remove_var("ORAM_PROXY_ROOT_PASSWORD");
    let root = match (std::env::var("ORAM_PROXY_ROOT_USER").ok(), root_password) {
        (Some(access_key), Some(secret_key)) => Some(UserConfig {
            access_key,
            secret_key,
        }),
        (None, None) => None,
        _ => {
            return Err(
                "set both ORAM_PROXY_ROOT_USER and ORAM_PROXY_ROOT_PASSWORD, or neither".into(),
            )
        }
    };
    Ok((cfg, root))
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn init(args: ServeArgs) -> Result<(), String> {
    let (cfg, root) = configure(args)?;
    runtime()?.block_on(async move {
        let done = oram_proxy::init(&cfg, root)
            .await
            .map_err(|e| e.to_string())?;
        for line in &done {
            println!("{line}");
        }
        println!("data directory {} ready", cfg.data_dir.display());
        Ok(())
    })
}

fn logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
        // s3s logs the signature it expected (and the string to sign) at debug level
        // on a mismatch: never, whatever RUST_LOG says.
        .add_directive("s3s::ops::signature=info".parse().expect("valid directive"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn bar(len: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb
}

fn fsck(args: ServeArgs) -> Result<bool, String> {
    let (cfg, _) = configure(args)?;
    logging("warn");
    let engine_bar = bar(0, "engine   [{bar:40}] {pos}/{len} nodes ({eta})");
    let object_bar = bar(0, "objects  [{bar:40}] {bytes}/{total_bytes} ({eta})");
    let progress = |phase: CheckPhase, done: u64, total: u64| {
        let pb = match phase {
            CheckPhase::Engine => &engine_bar,
            CheckPhase::Objects => {
                engine_bar.finish();
                &object_bar
            }
        };
        pb.set_length(total);
        pb.set_position(done);
    };
    let rep = runtime()?.block_on(async {
        oram_proxy::fsck(&cfg, &progress)
            .await
            .map_err(|e| e.to_string())
    })?;
    engine_bar.finish();
    object_bar.finish();
    let e = &rep.engine;
    println!("fsck of {}", cfg.data_dir.display());
    println!(
        "  engine:  {} backend objects opened ({} bad), {} blocks stored, {} in the stash",
        e.objects_read, e.objects_bad, e.blocks_found, e.stash_len
    );
    println!(
        "  index:   {} buckets, {} objects, {} unfinished uploads, {} blocks in use",
        rep.buckets, rep.objects, rep.uploads, rep.blocks_used
    );
    println!(
        "  data:    {} bytes re-read and checked against their ETags",
        rep.bytes_verified
    );
    let problems = e.problems_total + rep.problems_total;
    if problems == 0 {
        println!("clean");
        return Ok(true);
    }
    println!("{problems} problems:");
    for p in e.problems.iter().chain(rep.problems.iter()) {
        println!("  - {p}");
    }
    let shown = (e.problems.len() + rep.problems.len()) as u64;
    if shown < problems {
        println!("  ... and {} more", problems - shown);
    }
    Ok(false)
}

fn recover(args: ServeArgs) -> Result<(), String> {
    let expect = args.volume_id.clone();
    let (cfg, _) = configure(args)?;
    logging("warn");
    let spinner = ProgressBar::new_spinner();
    spinner.set_message("downloading and restoring the latest checkpoint");
    spinner.enable_steady_tick(Duration::from_millis(120));
    let r = runtime()?.block_on(async {
        oram_proxy::recover_volume(&cfg, expect.as_deref())
            .await
            .map_err(|e| e.to_string())
    });
    spinner.finish_and_clear();
    let r = r?;
    println!(
        "recovered {} from checkpoint epoch {} taken {} ({} buckets, {} objects)",
        cfg.data_dir.display(),
        r.epoch,
        utc(r.taken_ms / 1000),
        r.buckets,
        r.objects
    );
    println!(
        "removed {} backend objects written after that checkpoint; anything acknowledged after it is lost",
        r.swept
    );
    println!(
        "volume id {} (pass --volume-id to insist on it)",
        r.volume_id
    );
    println!("run `oram-proxy fsck` to verify, then `oram-proxy serve`");
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the Unix epoch.
fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let (cfg, root) = configure(args)?;
    logging("info");
    runtime()?.block_on(async move {
        let server = oram_proxy::start(&cfg, root)
            .await
            .map_err(|e| e.to_string())?;
        banner(&cfg, &server);
        wait_for_signal().await;
        tracing::info!("shutting down: finishing in-flight requests");
        server
            .shutdown(Duration::from_secs(30))
            .await
            .map_err(|e| format!("final write-back or checkpoint failed: {e}"))?;
        tracing::info!("stopped");
        Ok(())
    })
}

fn banner(cfg: &Config, server: &oram_proxy::Server) {
    let info = &server.info;
    let u = server.layer().usage();
    println!("oram-proxy {} serving S3", env!("CARGO_PKG_VERSION"));
    println!("  endpoint:   http://{}", server.s3_addr());
    println!("  region:     {}", cfg.s3.region);
    if let Some(m) = server.metrics_addr() {
        println!("  metrics:    http://{m}/metrics (and /health)");
    }
    if let Some(a) = server.swift_addr() {
        println!("  swift auth: http://{a}/auth/v1.0 (X-Auth-User: <access key>:<access key>, X-Auth-Key: <secret key>)");
    }
    println!(
        "  engine:     {} ({} blocks of {} bytes = {} MiB)",
        cfg.engine.kind,
        u.capacity_blocks,
        u.block_size,
        (u.capacity_blocks * u.block_size as u64) >> 20
    );
    if cfg.engine.kind == EngineKind::Direct {
        println!("  WARNING:    the direct engine is NOT oblivious: the storage provider sees");
        println!("              which blocks are read and written (--insecure-direct).");
        tracing::warn!(
            "engine direct: NOT oblivious; the storage provider sees which blocks are read and written"
        );
    }
    println!("  volume id:  {}", server.volume().params.volume_id);
    println!("  data dir:   {}", cfg.data_dir.display());
    let b = &cfg.backend;
    match b.kind {
        oram_proxy::BackendKind::Fs => {
            println!("  backend:    file://{}", cfg.store_path().display())
        }
        oram_proxy::BackendKind::S3 => println!(
            "  backend:    s3://{}/{} at {} ({})",
            b.bucket,
            b.key_prefix,
            b.endpoint.as_deref().unwrap_or("AWS S3"),
            b.region
        ),
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
            datadir::credentials_path(&cfg.data_dir).display()
        );
    } else {
        println!("  secret key: (not shown)");
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
