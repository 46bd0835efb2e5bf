//! `oram-proxy`: an S3-compatible proxy that keeps its objects in an Oblivious RAM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
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
    /// Serve the S3 API (creates the data directory on first start).
    Serve(ServeArgs),
    /// Create the data directory and (S3 back-end) the backend bucket, then exit.
    Init(ServeArgs),
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
    /// Engine: path or direct (overrides `engine.kind`).
    #[arg(long, value_name = "NAME")]
    engine: Option<EngineKind>,
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
}

fn main() -> ExitCode {
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
    if let Some(e) = args.engine {
        cfg.engine.kind = e;
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
    let root = match (
        std::env::var("ORAM_PROXY_ROOT_USER").ok(),
        std::env::var("ORAM_PROXY_ROOT_PASSWORD").ok(),
    ) {
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

fn serve(args: ServeArgs) -> Result<(), String> {
    let (cfg, root) = configure(args)?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
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
            .map_err(|e| format!("final write-back failed: {e}"))?;
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
    println!(
        "  engine:     {} ({} blocks of {} bytes = {} MiB)",
        cfg.engine.kind,
        u.capacity_blocks,
        u.block_size,
        (u.capacity_blocks * u.block_size as u64) >> 20
    );
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
        println!(
            "  master key: created {}",
            cfg.data_dir.join("master.key").display()
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
    println!("  WARNING: trusted state is kept in memory only: objects do not survive a restart");
    if info.discarded_objects > 0 {
        println!(
            "  discarded {} backend objects of an earlier run",
            info.discarded_objects
        );
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
