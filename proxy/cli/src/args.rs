//! The command line: the subcommands, their flags, and the configuration a
//! command runs with (file, flags, systemd credentials, environment, and an
//! existing volume's recorded parameters).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use oram_proxy::config::Config;
use oram_proxy::creds;
use oram_server::build_info;
use oram_volume::{datadir, UserConfig};

/// `--version`: the build and the formats it reads and writes.
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{} (commit {}, {} build, {})\ndata directory format {}, state database format {}, \
             checkpoint format {}",
            build_info::VERSION,
            build_info::COMMIT,
            build_info::PROFILE,
            build_info::TARGET,
            oram_volume::datadir::FORMAT,
            oram_statedb::FORMAT,
            String::from_utf8_lossy(oram_volume::header::MAGIC_V2),
        )
    })
}

/// `--engine`'s help: the engines of the registry.
fn engine_help() -> String {
    let kinds: Vec<&str> = oram_volume::engines::kinds().collect();
    let (last, rest) = kinds.split_last().expect("the registry is not empty");
    format!(
        "Engine: {} or {last} (overrides `engine.kind`, with that engine's default settings \
         unless the configuration file chose the same engine; direct needs --insecure-direct)",
        rest.join(", ")
    )
}

#[derive(Parser)]
#[command(
    version = version_text(),
    about = "S3-compatible proxy storing objects in an Oblivious RAM"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// The master key and passphrase: change the passphrase, rotate the master
    /// key, show the rotation's progress, drop the keys rotated out (the proxy
    /// must be stopped).
    Key(KeyArgs),
}

#[derive(clap::Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub command: KeyCommand,
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Wrap the master key under a new passphrase (nothing is re-sealed). The
    /// current key as for `serve` (passphrase, key file or ORAM_PROXY_MASTER_KEY);
    /// the new passphrase from --new-passphrase-file or ORAM_PROXY_NEW_PASSPHRASE.
    Passphrase(KeyPassphraseArgs),
    /// Seal under a new master key from now on; earlier keys still open what
    /// they sealed until every object is rewritten (see `key status`).
    Rotate(KeyRotateArgs),
    /// The key's source and the rotation's progress (objects re-sealed under the
    /// current key).
    Status(KeyStatusArgs),
    /// Drop the keys rotated out, once `key status` says the rotation is complete.
    ForgetEarlier(KeyForgetArgs),
}

#[derive(clap::Args)]
pub struct KeyPassphraseArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// File holding the new passphrase (mode 0600; default: ORAM_PROXY_NEW_PASSPHRASE).
    #[arg(long, value_name = "FILE")]
    pub new_passphrase_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct KeyRotateArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Take the new key (64 hex digits) from ORAM_PROXY_NEW_MASTER_KEY instead of
    /// generating one (required when the key comes from ORAM_PROXY_MASTER_KEY).
    #[arg(long)]
    pub new_key_from_env: bool,
}

#[derive(clap::Args)]
pub struct KeyStatusArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(clap::Args)]
pub struct KeyForgetArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(clap::Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Print the model as JSON (the fields of `oram_engine::EngineModel`).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Also make a private CA and a TLS server certificate in <data_dir>/tls/
    /// (ca.pem for clients, cert.pem, key.pem), used by `serve` unless [tls] names
    /// other files.
    #[arg(long)]
    pub tls_self_signed: bool,
    /// A DNS name or IP address the certificate is for (repeatable; default:
    /// localhost, 127.0.0.1, ::1, the host name and the listen addresses).
    #[arg(long = "tls-name", value_name = "NAME")]
    pub tls_names: Vec<String>,
}

#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// The proxy's operator endpoint, e.g. http://127.0.0.1:9100 (default: from
    /// `metrics.listen`).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Bearer token file (default: `metrics.token_file` or <data_dir>/metrics.token).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) for an HTTPS endpoint (default: <data_dir>/tls/ca.pem).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file (see `oram-proxy example-config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (overrides `data_dir`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// S3 listen address (overrides `s3.listen`).
    #[arg(long, value_name = "HOST:PORT")]
    pub s3_listen: Option<String>,
    /// Metrics and health endpoint address (overrides `metrics.listen`).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Swift API listen address (overrides `swift.listen`; off unless set).
    #[arg(long, value_name = "HOST:PORT")]
    pub swift_listen: Option<String>,
    /// The engine (its help lists the registry's engines).
    #[arg(long, value_name = "NAME", help = engine_help())]
    pub engine: Option<String>,
    /// Allow the non-oblivious `direct` engine (sets `engine.insecure_direct`): the
    /// storage provider then sees which blocks are read and written.
    #[arg(long)]
    pub insecure_direct: bool,
    /// Block size in bytes (overrides `engine.block_size`; fixed at creation).
    #[arg(long, value_name = "BYTES")]
    pub block_size: Option<usize>,
    /// Capacity in blocks (overrides `engine.capacity_blocks`; fixed at creation).
    #[arg(long, value_name = "BLOCKS")]
    pub capacity_blocks: Option<u64>,
    /// Tree-top cache of Path and Ring ORAM in MiB (overrides
    /// `engine.tree_cache_mib`; its depth is fixed at creation).
    #[arg(long, value_name = "MIB")]
    pub tree_cache_mib: Option<u64>,
    /// Do not fsync backend writes (throw-away benchmarks only).
    #[arg(long)]
    pub no_fsync: bool,
    /// Back-end: file:///path or s3://bucket/prefix (overrides `[backend]`).
    #[arg(long, value_name = "URL")]
    pub backend: Option<String>,
    /// S3 back-end endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS).
    #[arg(long, value_name = "URL")]
    pub backend_endpoint: Option<String>,
    /// S3 back-end region.
    #[arg(long, value_name = "NAME")]
    pub backend_region: Option<String>,
    /// Master key file (overrides `key.key_file`; default <data_dir>/master.key).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// File holding the passphrase the master key is derived from (Argon2id).
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
    /// Seconds between checkpoints to the backend; 0: at shutdown only.
    #[arg(long, value_name = "SECS")]
    pub checkpoint_interval: Option<u64>,
    /// recover: the volume expected at the backend prefix (printed by `init` and in
    /// the banner); another one is refused.
    #[arg(long, value_name = "HEX")]
    pub volume_id: Option<String>,
    /// recover: replay the shipped log up to a gap (a missing record) instead of
    /// failing; acknowledged writes after the gap are lost.
    #[arg(long)]
    pub accept_log_gap: bool,
    /// recover: the shipped log must reach this record number (noted from
    /// `oram_log_last_record` in /metrics or the serve log); a shorter log (its
    /// tail dropped) is refused.
    #[arg(long, value_name = "N")]
    pub expect_record: Option<u64>,
    /// TLS certificate chain, PEM (overrides `tls.cert_file`; with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key, PEM, mode 0600 (overrides `tls.key_file`).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Allow plain HTTP on a non-loopback address (sets `tls.allow_plain_http`).
    #[arg(long)]
    pub allow_plain_http: bool,
}

/// The configuration from the file (or defaults), the flags and the environment.
pub fn configure(args: ServeArgs) -> Result<(Config, Option<UserConfig>), String> {
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
    creds::apply(&mut cfg)?;
    // An existing volume fills the [engine] parameters the file and the flags
    // left unset with those it was created with.
    let data_dir = cfg.data_dir.clone();
    datadir::adopt_recorded(&data_dir, &mut cfg.engine).map_err(|e| e.to_string())?;
    // A data directory that records its backend is used with it when neither the
    // file nor the flags name one (a different one is refused when it opens).
    oram_volume::backend_record::apply_recorded(&data_dir, &mut cfg.backend)
        .map_err(|e| e.to_string())?;
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
