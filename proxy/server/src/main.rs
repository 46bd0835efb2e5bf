//! `oram-proxy`: an S3-compatible proxy that keeps its objects in an Oblivious RAM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use oram_objects::CheckPhase;
use oram_proxy::config::{example, Config};
use oram_proxy::{datadir, UserConfig};

/// `--version`: the build and the formats it reads and writes.
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{} (commit {}, {} build, {})\ndata directory format {}, state database format {}, \
             checkpoint format {}",
            env!("CARGO_PKG_VERSION"),
            env!("ORAM_BUILD_COMMIT"),
            env!("ORAM_BUILD_PROFILE"),
            env!("ORAM_BUILD_TARGET"),
            datadir::FORMAT,
            oram_statedb::FORMAT,
            String::from_utf8_lossy(oram_proxy::meta_auth::MAGIC_V2),
        )
    })
}

#[derive(Parser)]
#[command(
    version = version_text(),
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
    /// Create the data directory and (S3 back-end) the backend bucket, then exit;
    /// with --tls-self-signed also a private CA and a server certificate.
    Init(InitArgs),
    /// Check every ORAM invariant and re-read every object against its ETag.
    /// Exit status 0 only when everything is clean (1: problems found, 2: the
    /// check could not run). Recovers from an unclean stop first, like a start.
    Fsck(ServeArgs),
    /// Rebuild an empty data directory from the backend's latest checkpoint, given
    /// the backend settings and the key (key file, ORAM_PROXY_MASTER_KEY, or the
    /// passphrase). Objects written after that checkpoint are lost.
    Recover(ServeArgs),
    /// Summarise a running proxy's state from its operator endpoint (engine,
    /// stash, backlog, checkpoint age, capacity used...); with no proxy running,
    /// what the data directory knows.
    Stats(StatsArgs),
    /// Shrink state.redb (the proxy must be stopped).
    Compact(ServeArgs),
    /// Write every backend bucket the engine may read that was never written
    /// (empty), so that no read finds one missing (the proxy must be stopped).
    /// Safe on a volume holding data; a second run writes nothing. The direct
    /// engine has nothing to format.
    Format(ServeArgs),
    /// Print the engine's model at the configuration: its layout, the backend
    /// bytes one op moves, its local state and round size (for an existing data
    /// directory, with the parameters it was created with).
    Describe(DescribeArgs),
    /// Print a documented configuration file with every default.
    ExampleConfig,
}

#[derive(clap::Args)]
struct DescribeArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Print the model as JSON (the fields of `oram_engine::EngineModel`).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct InitArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Also make a private CA and a TLS server certificate in <data_dir>/tls/
    /// (ca.pem for clients, cert.pem, key.pem), used by `serve` unless [tls] names
    /// other files.
    #[arg(long)]
    tls_self_signed: bool,
    /// A DNS name or IP address the certificate is for (repeatable; default:
    /// localhost, 127.0.0.1, ::1, the host name and the listen addresses).
    #[arg(long = "tls-name", value_name = "NAME")]
    tls_names: Vec<String>,
}

#[derive(clap::Args)]
struct StatsArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// The proxy's operator endpoint, e.g. http://127.0.0.1:9100 (default: from
    /// `metrics.listen`).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Bearer token file (default: `metrics.token_file` or <data_dir>/metrics.token).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// CA certificate(s) for an HTTPS endpoint (default: <data_dir>/tls/ca.pem).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
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
    /// Engine: path, ring, curious, oblivistore or direct (overrides `engine.kind`, with
    /// that engine's default settings unless the configuration file chose the same
    /// engine; direct needs --insecure-direct).
    #[arg(long, value_name = "NAME")]
    engine: Option<String>,
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
    /// Tree-top cache of Path and Ring ORAM in MiB (overrides
    /// `engine.tree_cache_mib`; its depth is fixed at creation).
    #[arg(long, value_name = "MIB")]
    tree_cache_mib: Option<u64>,
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
    /// TLS certificate chain, PEM (overrides `tls.cert_file`; with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key, PEM, mode 0600 (overrides `tls.key_file`).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Allow plain HTTP on a non-loopback address (sets `tls.allow_plain_http`).
    #[arg(long)]
    allow_plain_http: bool,
}

fn main() -> ExitCode {
    // Before anything else (and before any thread exists): the key and passphrase
    // leave the environment, where /proc/<pid>/environ and child processes see them.
    oram_proxy::keys::take_env_secrets();
    let cli = Cli::parse();
    match cli.command {
        Command::ExampleConfig => {
            print!("{}", example());
            ExitCode::SUCCESS
        }
        Command::Describe(args) => match describe(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy describe: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Stats(args) => match stats(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy stats: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Compact(args) => match compact(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy compact: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Format(args) => match format_volume(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("oram-proxy format: {e}");
                ExitCode::FAILURE
            }
        },
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

/// `describe`: the engine's model at the configuration, as `serve` would run it.
fn describe(args: DescribeArgs) -> Result<(), String> {
    let (cfg, _) = configure(args.serve)?;
    cfg.engine.validate()?;
    let m = cfg.engine.model(&cfg.backend.prefix);
    if args.json {
        let text = serde_json::to_string_pretty(&m).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        println!(
            "engine {} ({}), {} blocks of {} bytes\nbackend bytes per client byte: {:.2} \
             ({:.1} blocks per block accessed; {})\nobjects of {} bytes; trusted state at most \
             {} bytes, tree-top cache {} bytes; {} ops per round",
            m.kind,
            if m.oblivious {
                "oblivious"
            } else {
                "not oblivious"
            },
            m.capacity,
            m.block_size,
            m.overhead,
            m.overhead_blocks(),
            m.assumes,
            m.object_bytes,
            m.state_bound,
            m.cache_bytes,
            m.ops_per_round
        );
    }
    Ok(())
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
        cfg.engine.set_kind(&e)?;
    }
    if args.insecure_direct {
        cfg.engine.insecure_direct = true;
    }
    if let Some(b) = args.block_size {
        cfg.engine.block_size = b;
        cfg.engine.named.insert("block_size".into());
    }
    if let Some(c) = args.capacity_blocks {
        cfg.engine.capacity_blocks = c;
        cfg.engine.named.insert("capacity_blocks".into());
    }
    if let Some(m) = args.tree_cache_mib {
        cfg.engine.set_tree_cache_mib(m);
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
    if let (Some(c), Some(k)) = (args.tls_cert, args.tls_key) {
        cfg.tls.cert_file = Some(c);
        cfg.tls.key_file = Some(k);
    }
    if args.allow_plain_http {
        cfg.tls.allow_plain_http = true;
    }
    // systemd credentials fill what the file and the flags left unset.
    oram_proxy::creds::apply(&mut cfg)?;
    // An existing volume fills the [engine] parameters the file and the flags
    // left unset with those it was created with.
    oram_proxy::datadir::adopt_recorded(&mut cfg).map_err(|e| e.to_string())?;
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

fn init(args: InitArgs) -> Result<(), String> {
    let (cfg, root) = configure(args.serve)?;
    logging("warn");
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} init: {msg} ({elapsed})").expect("valid template"),
    );
    spinner.enable_steady_tick(Duration::from_millis(120));
    let progress = |step: &str| spinner.set_message(step.to_string());
    let done = runtime()?.block_on(async {
        oram_proxy::init_with_progress(&cfg, root, &progress)
            .await
            .map_err(|e| e.to_string())
    });
    spinner.finish_and_clear();
    for line in &done? {
        println!("{line}");
    }
    if args.tls_self_signed {
        let names = if args.tls_names.is_empty() {
            oram_proxy::tls::default_names(&cfg)
        } else {
            args.tls_names
        };
        let dir = oram_proxy::tls::default_dir(&cfg.data_dir);
        let made =
            oram_proxy::tls::generate_self_signed(&dir, &names).map_err(|e| e.to_string())?;
        println!(
            "created a private CA and a TLS certificate for {} (valid until {}, SHA-256 {})",
            made.names.join(", "),
            utc(made.info.not_after),
            made.info.fingerprint
        );
        println!(
            "  give clients the CA certificate: {}",
            made.ca_file.display()
        );
        println!("  server certificate: {}", made.cert_file.display());
        println!("  server key (0600):  {}", made.key_file.display());
        if cfg.tls.cert_file.is_some() {
            println!(
                "  note: [tls] names other files; point tls.cert_file and tls.key_file here to use these"
            );
        } else {
            println!("  `oram-proxy serve` with this data directory now speaks HTTPS");
        }
    }
    println!("data directory {} ready", cfg.data_dir.display());
    Ok(())
}

fn stats(args: StatsArgs) -> Result<(), String> {
    let (cfg, _) = configure(args.serve)?;
    let target = match (
        args.url,
        oram_proxy::ops::target(&cfg).map_err(|e| e.to_string())?,
    ) {
        (Some(url), t) => Some(oram_proxy::ops::Target {
            url,
            token_file: t.as_ref().and_then(|t| t.token_file.clone()),
            ca_file: t.and_then(|t| t.ca_file),
        }),
        (None, t) => t,
    }
    .map(|mut t| {
        if args.token_file.is_some() {
            t.token_file = args.token_file.clone();
        }
        if args.ca_file.is_some() {
            t.ca_file = args.ca_file.clone();
        }
        t
    });
    let print = |title: String, lines: Vec<(&str, String)>| {
        println!("{title}");
        for (k, v) in lines {
            println!("  {:<14} {v}", format!("{k}:"));
        }
    };
    if let Some(t) = &target {
        match oram_proxy::ops::fetch_metrics(t) {
            Ok(text) => {
                let m = oram_proxy::ops::parse_metrics(&text);
                print(
                    format!("oram-proxy stats (running proxy, {})", t.url),
                    oram_proxy::ops::live_report(&m),
                );
                return Ok(());
            }
            Err(oram_proxy::ops::FetchError::Refused(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let lines = oram_proxy::ops::offline_report(&cfg).map_err(|e| match &target {
        None => format!(
            "{e} (to ask a running proxy, give it an operator endpoint with --metrics-listen \
             and pass --url)"
        ),
        Some(_) => e.to_string(),
    })?;
    print(
        format!(
            "oram-proxy stats (data directory {}; no proxy running{})",
            cfg.data_dir.display(),
            target
                .as_ref()
                .map_or(String::new(), |t| format!(" at {}", t.url))
        ),
        lines,
    );
    Ok(())
}

fn compact(args: ServeArgs) -> Result<(), String> {
    let (cfg, _) = configure(args)?;
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} compacting state.redb: {msg} ({elapsed})")
            .expect("valid template"),
    );
    spinner.enable_steady_tick(Duration::from_millis(120));
    let r = oram_proxy::ops::compact(&cfg, |pass| {
        spinner.set_message(format!("pass {}", pass + 1))
    });
    spinner.finish_and_clear();
    let c = r.map_err(|e| e.to_string())?;
    println!(
        "compacted {}: {} -> {} bytes ({} passes)",
        oram_proxy::datadir::state_path(&cfg.data_dir).display(),
        c.before,
        c.after,
        c.passes
    );
    Ok(())
}

fn logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
        // s3s logs the signature it expected (and the string to sign) at debug level
        // on a mismatch: never, whatever RUST_LOG says.
        .add_directive("s3s::ops::signature=info".parse().expect("valid directive"));
    // Colour only on a terminal: not in the systemd journal or a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
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

fn format_volume(args: ServeArgs) -> Result<(), String> {
    let (cfg, _) = configure(args)?;
    logging("warn");
    let pb = bar(0, "format   [{bar:40}] {pos}/{len} buckets ({eta})");
    let progress = |done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
    };
    let r = runtime()?.block_on(async {
        oram_proxy::ops::format(&cfg, &progress)
            .await
            .map_err(|e| e.to_string())
    });
    pb.finish_and_clear();
    let r = r?;
    let f = r.formatted;
    println!("format of {} ({} engine)", cfg.data_dir.display(), r.engine);
    if f.positions == 0 {
        println!(
            "  nothing to format: the {} engine reads only blocks it wrote (a never-written \
             block causes no backend request)",
            r.engine
        );
        return Ok(());
    }
    println!(
        "  {} buckets on the backend: {} written now, {} already written",
        f.positions,
        f.written,
        f.positions - f.written
    );
    println!("  took {:.1} s", r.elapsed.as_secs_f64());
    match r.checkpoint {
        Some(c) => println!("  checkpoint epoch {} taken", c.epoch),
        None => println!("  nothing written: no checkpoint needed"),
    }
    Ok(())
}

fn recover(args: ServeArgs) -> Result<(), String> {
    let expect = args.volume_id.clone();
    let (cfg, _) = configure(args)?;
    logging("warn");
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} recover: {msg} ({elapsed})")
            .expect("valid template"),
    );
    spinner.enable_steady_tick(Duration::from_millis(120));
    let progress = |step: &str| spinner.set_message(step.to_string());
    let r = runtime()?.block_on(async {
        oram_proxy::recover_with_progress(&cfg, expect.as_deref(), &progress)
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
    if r.log_records > 0 {
        println!(
            "replayed {} commits from {} records of the shipped log after it ([state] \
             log_interval_ms): everything acknowledged up to the last record is restored",
            r.replayed, r.log_records
        );
        println!(
            "removed {} backend objects written after the last shipped commit",
            r.swept
        );
    } else {
        println!(
            "removed {} backend objects written after that checkpoint; anything acknowledged after it is lost",
            r.swept
        );
    }
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

/// Seconds in-flight requests get to finish at a stop (the unit's TimeoutStopSec
/// leaves room for this, the final write-back and the checkpoint).
const STOP_GRACE: Duration = Duration::from_secs(30);

fn serve(args: ServeArgs) -> Result<(), String> {
    let (cfg, root) = configure(args)?;
    logging("info");
    let notify = oram_proxy::notify::Notifier::from_env();
    runtime()?.block_on(async move {
        // Signal handlers first: a SIGTERM while the volume opens (recovery can take a
        // while) is kept and acted on as soon as the server runs, not fatal mid-start.
        let signals = Signals::install().map_err(|e| format!("signal handlers: {e}"))?;
        notify.status("opening the volume");
        // The watchdog runs from the start: recovery may take a while.
        let _watchdog = notify.spawn_watchdog();
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
        serve_signals(signals, &server, &notify).await;
        tracing::info!("shutting down: finishing in-flight requests");
        notify.stopping("finishing in-flight requests, writing back, checkpointing");
        server
            .shutdown(STOP_GRACE)
            .await
            .map_err(|e| format!("final write-back or checkpoint failed: {e}"))?;
        tracing::info!("stopped");
        Ok(())
    })
}

/// The signals `serve` acts on, registered before the volume opens so that none
/// delivered during start-up takes the default (fatal) action.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Waits for SIGTERM or SIGINT; reloads the TLS certificate on SIGHUP meanwhile.
async fn serve_signals(
    mut signals: Signals,
    server: &oram_proxy::Server,
    notify: &oram_proxy::notify::Notifier,
) {
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

fn banner(cfg: &Config, server: &oram_proxy::Server) {
    let info = &server.info;
    let u = server.layer().usage();
    let tls = server.tls_info();
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("oram-proxy {} serving S3", env!("CARGO_PKG_VERSION"));
    println!("  endpoint:   {scheme}://{}", server.s3_addr());
    println!("  region:     {}", cfg.s3.region);
    if let Some(c) = &tls {
        println!(
            "  tls:        {} (valid until {}, SHA-256 {})",
            c.cert_file.display(),
            utc(c.not_after),
            c.fingerprint
        );
        let ca = oram_proxy::tls::default_dir(&cfg.data_dir).join("ca.pem");
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
