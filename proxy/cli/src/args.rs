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
    Fsck(FsckArgs),
    /// Rebuild an empty data directory from the backend's latest checkpoint, given
    /// the backend settings and the key (key file, ORAM_PROXY_MASTER_KEY, or the
    /// passphrase). Objects written after that checkpoint are lost.
    Recover(RecoverArgs),
    /// Summarise a running proxy's state from its operator endpoint (engine,
    /// stash, backlog, checkpoint age, capacity used...); with no proxy running,
    /// what the data directory knows.
    Stats(StatsArgs),
    /// Add, list, remove or rotate the S3 users of a running proxy, through its
    /// operator endpoint (token required), without a restart.
    User(UserArgs),
    /// Grow a running proxy's volume, online, to SIZE (path, ring and direct
    /// engines), through its operator endpoint (token required); shows the
    /// progress.
    Grow(GrowArgs),
    /// Shrink state.redb (the proxy must be stopped).
    Compact(CompactArgs),
    /// Write every backend bucket the engine may read that was never written
    /// (empty), so that no read finds one missing (the proxy must be stopped).
    /// Safe on a volume holding data; a second run writes nothing. The direct
    /// engine has nothing to format.
    Format(FormatArgs),
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
    /// Set up a volume served by several machines: `cluster certs` makes the
    /// cluster's CA and each member's TLS identity (see `[cluster]` in
    /// `oram-proxy example-config`).
    Cluster(ClusterArgs),
}

#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Make the cluster's CA (OUT/ca.pem, OUT/ca.key: keep the key offline) and
    /// a TLS identity per member (OUT/<member>/: copy it to that member and
    /// point `[cluster] tls_dir` at it, or put it in <data_dir>/cluster).
    Certs(ClusterCertsArgs),
    /// What etcd says of a cluster coordinated by it (`[cluster] etcd` in the
    /// configuration given): the live members and their addresses, each
    /// slot's owner, fencing token and state, and the active front. Exit
    /// status 0 when every slot has a live owner, 1 otherwise.
    Status(ClusterStatusArgs),
}

#[derive(clap::Args)]
pub struct ClusterStatusArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
}

#[derive(clap::Args)]
pub struct ClusterCertsArgs {
    /// Directory to write into (created, mode 0700).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The members, comma-separated: e.g. front,node0,node1,node2.
    #[arg(long, value_delimiter = ',', required = true)]
    pub members: Vec<String>,
    /// The cluster's name (the CA's subject).
    #[arg(long, default_value = "oram-proxy")]
    pub name: String,
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
    pub volume: VolumeArgs,
    /// File holding the new passphrase (mode 0600; default: ORAM_PROXY_NEW_PASSPHRASE).
    #[arg(long, value_name = "FILE")]
    pub new_passphrase_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct KeyRotateArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
    /// Take the new key (64 hex digits) from ORAM_PROXY_NEW_MASTER_KEY instead of
    /// generating one (required when the key comes from ORAM_PROXY_MASTER_KEY).
    #[arg(long)]
    pub new_key_from_env: bool,
}

#[derive(clap::Args)]
pub struct KeyStatusArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
}

#[derive(clap::Args)]
pub struct KeyForgetArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
}

// One struct of flags per command, made of the groups below: every command
// finds its configuration with `ConfigArgs`; those that open or create the
// volume add `VolumeArgs`; only `serve` (and `init`, for the certificate's
// names) has the listeners' flags.

/// `serve`'s flags.
#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
    #[command(flatten)]
    pub listen: ListenArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Seconds between checkpoints to the backend; 0: at shutdown only.
    #[arg(long, value_name = "SECS", help_heading = "Server")]
    pub checkpoint_interval: Option<u64>,
    /// Log one line per client request (S3 and Swift) under the target
    /// `oram_proxy::access` (sets `log.access`; no secrets, signatures or tokens).
    #[arg(long, help_heading = "Server")]
    pub access_log: bool,
}

impl ServeArgs {
    /// The configuration `serve` runs with.
    pub fn configure(&self) -> Result<(Config, Option<UserConfig>), String> {
        configure(&self.volume.place, |cfg| {
            self.volume.apply(cfg)?;
            self.listen.apply(cfg);
            self.tls.apply(cfg);
            if let Some(c) = self.checkpoint_interval {
                cfg.state.checkpoint_interval_secs = c;
            }
            if self.access_log {
                cfg.log.access = true;
            }
            Ok(())
        })
    }
}

/// `init`'s flags.
#[derive(clap::Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
    #[command(flatten)]
    pub listen: ListenArgs,
    /// Also make a private CA and a TLS server certificate in <data_dir>/tls/
    /// (ca.pem for clients, cert.pem, key.pem), used by `serve` unless [tls] names
    /// other files.
    #[arg(long, help_heading = "TLS")]
    pub tls_self_signed: bool,
    /// A DNS name or IP address the certificate is for (repeatable; default:
    /// localhost, 127.0.0.1, ::1, the host name and the listen addresses).
    #[arg(long = "tls-name", value_name = "NAME", help_heading = "TLS")]
    pub tls_names: Vec<String>,
}

impl InitArgs {
    /// The configuration `init` runs with.
    pub fn configure(&self) -> Result<(Config, Option<UserConfig>), String> {
        configure(&self.volume.place, |cfg| {
            self.volume.apply(cfg)?;
            self.listen.apply(cfg);
            Ok(())
        })
    }
}

/// `fsck`'s flags.
#[derive(clap::Args)]
pub struct FsckArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
}

/// `format`'s flags.
#[derive(clap::Args)]
pub struct FormatArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
}

/// `recover`'s flags.
#[derive(clap::Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
    /// The volume expected at the backend prefix (printed by `init` and in the
    /// banner); another one is refused.
    #[arg(long, value_name = "HEX", help_heading = "Recovery")]
    pub volume_id: Option<String>,
    /// Replay the shipped log up to a gap (a missing record) instead of failing;
    /// acknowledged writes after the gap are lost.
    #[arg(long, help_heading = "Recovery")]
    pub accept_log_gap: bool,
    /// The shipped log must reach this record number (noted from
    /// `oram_log_last_record` in /metrics or the serve log); a shorter log (its
    /// tail dropped) is refused.
    #[arg(long, value_name = "N", help_heading = "Recovery")]
    pub expect_record: Option<u64>,
}

/// `describe`'s flags.
#[derive(clap::Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub volume: VolumeArgs,
    /// Print the model as JSON (the fields of `oram_engine::EngineModel`).
    #[arg(long)]
    pub json: bool,
}

/// `compact`'s flags: it needs only the data directory.
#[derive(clap::Args)]
pub struct CompactArgs {
    #[command(flatten)]
    pub place: ConfigArgs,
}

impl CompactArgs {
    /// The configuration `compact` runs with.
    pub fn configure(&self) -> Result<(Config, Option<UserConfig>), String> {
        configure(&self.place, |_| Ok(()))
    }
}

/// `stats`' flags: where the operator endpoint is, and the data directory.
#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub place: ConfigArgs,
    /// The operator endpoint's address, as `serve` was given it (overrides
    /// `metrics.listen`).
    #[arg(long, value_name = "HOST:PORT", help_heading = "Endpoint")]
    pub metrics_listen: Option<String>,
    /// The proxy's operator endpoint, e.g. http://127.0.0.1:9100 (default: from
    /// `metrics.listen`).
    #[arg(long, value_name = "URL", help_heading = "Endpoint")]
    pub url: Option<String>,
    /// Bearer token file (default: `metrics.token_file` or <data_dir>/metrics.token).
    #[arg(long, value_name = "FILE", help_heading = "Endpoint")]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) for an HTTPS endpoint (default: <data_dir>/tls/ca.pem).
    #[arg(long, value_name = "FILE", help_heading = "Endpoint")]
    pub ca_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct UserArgs {
    #[command(subcommand)]
    pub action: UserAction,
    /// TOML configuration file (where `metrics.listen` and the token are).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Data directory (overrides `data_dir`; holds the generated token).
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// The proxy's operator endpoint, e.g. http://127.0.0.1:9100 (default: from
    /// `metrics.listen`).
    #[arg(long, value_name = "URL", global = true)]
    pub url: Option<String>,
    /// Bearer token file (default: `metrics.token_file` or <data_dir>/metrics.token).
    #[arg(long, value_name = "FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) for an HTTPS endpoint (default: <data_dir>/tls/ca.pem).
    #[arg(long, value_name = "FILE", global = true)]
    pub ca_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct GrowArgs {
    /// The new size, e.g. 4GiB, 512MiB or a number of bytes (rounded up to
    /// whole blocks).
    #[arg(long, value_name = "SIZE")]
    pub to: String,
    /// Return once the growth started instead of following it.
    #[arg(long)]
    pub no_wait: bool,
    /// TOML configuration file (where `metrics.listen` and the token are).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (overrides `data_dir`; holds the generated token).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
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

#[derive(Subcommand)]
pub enum UserAction {
    /// Add a user (its secret key, when generated, is printed once).
    Add {
        /// The access key (default: generated, `oram` and 16 hex digits).
        #[arg(long, value_name = "KEY")]
        access_key: Option<String>,
        /// A file (mode 0600) holding the secret key (default: generated).
        #[arg(long, value_name = "FILE")]
        secret_key_file: Option<PathBuf>,
    },
    /// List the users: access keys and where each is defined (no secret key).
    List,
    /// Remove a user: refused for the last user and for users of the
    /// configuration or the environment; a user owning buckets needs --force.
    Remove {
        /// The access key.
        access_key: String,
        /// Remove a user owning buckets (they stay, owned by its access key).
        #[arg(long)]
        force: bool,
    },
    /// Give a user a new secret key (printed once when generated); the old one
    /// stops working.
    Rotate {
        /// The access key.
        access_key: String,
        /// A file (mode 0600) holding the new secret key (default: generated).
        #[arg(long, value_name = "FILE")]
        secret_key_file: Option<PathBuf>,
    },
}

impl StatsArgs {
    /// The configuration `stats` runs with.
    pub fn configure(&self) -> Result<(Config, Option<UserConfig>), String> {
        configure(&self.place, |cfg| {
            if let Some(l) = &self.metrics_listen {
                cfg.metrics.listen = l.clone();
            }
            Ok(())
        })
    }
}

/// Where the configuration is: the file and the data directory (every command).
#[derive(clap::Args, Clone)]
pub struct ConfigArgs {
    /// TOML configuration file (see `oram-proxy example-config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (overrides `data_dir`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// The volume: its engine, backend and key (every command that opens or creates
/// it).
#[derive(clap::Args)]
pub struct VolumeArgs {
    #[command(flatten)]
    pub place: ConfigArgs,
    /// The engine (its help lists the registry's engines).
    #[arg(long, value_name = "NAME", help = engine_help(), help_heading = "Engine")]
    pub engine: Option<String>,
    /// Allow the non-oblivious `direct` engine (sets `engine.insecure_direct`): the
    /// storage provider then sees which blocks are read and written.
    #[arg(long, help_heading = "Engine")]
    pub insecure_direct: bool,
    /// Block size in bytes (overrides `engine.block_size`; fixed at creation).
    #[arg(long, value_name = "BYTES", help_heading = "Engine")]
    pub block_size: Option<usize>,
    /// Capacity in blocks (overrides `engine.capacity_blocks`): the starting size
    /// at creation; a volume grows with `oram-proxy grow`.
    #[arg(long, value_name = "BLOCKS", help_heading = "Engine")]
    pub capacity_blocks: Option<u64>,
    /// Tree-top cache of Path and Ring ORAM in MiB (overrides
    /// `engine.tree_cache_mib`; its depth is fixed at creation).
    #[arg(long, value_name = "MIB", help_heading = "Engine")]
    pub tree_cache_mib: Option<u64>,
    /// Do not fsync backend writes (throw-away benchmarks only).
    #[arg(long, help_heading = "Backend")]
    pub no_fsync: bool,
    /// Back-end: file:///path or s3://bucket/prefix (overrides `[backend]`).
    #[arg(long, value_name = "URL", help_heading = "Backend")]
    pub backend: Option<String>,
    /// S3 back-end endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS).
    #[arg(long, value_name = "URL", help_heading = "Backend")]
    pub backend_endpoint: Option<String>,
    /// S3 back-end region.
    #[arg(long, value_name = "NAME", help_heading = "Backend")]
    pub backend_region: Option<String>,
    /// Master key file (overrides `key.key_file`; default <data_dir>/master.key).
    #[arg(long, value_name = "FILE", help_heading = "Key")]
    pub key_file: Option<PathBuf>,
    /// File holding the passphrase the master key is derived from (Argon2id).
    #[arg(long, value_name = "FILE", help_heading = "Key")]
    pub passphrase_file: Option<PathBuf>,
}

impl VolumeArgs {
    /// The configuration of a command with only these flags.
    pub fn configure(&self) -> Result<(Config, Option<UserConfig>), String> {
        configure(&self.place, |cfg| self.apply(cfg))
    }

    /// Puts the flags given into `cfg` (the engine first: it resets that engine's
    /// settings the flags after it override).
    fn apply(&self, cfg: &mut Config) -> Result<(), String> {
        if let Some(e) = &self.engine {
            cfg.engine.set_kind(e)?;
        }
        if self.insecure_direct {
            cfg.engine.insecure_direct = true;
        }
        if let Some(b) = self.block_size {
            cfg.engine.block_size = b;
            cfg.engine.named.insert("block_size".into());
        }
        if let Some(c) = self.capacity_blocks {
            cfg.engine.capacity_blocks = c;
            cfg.engine.named.insert("capacity_blocks".into());
        }
        if let Some(m) = self.tree_cache_mib {
            cfg.engine.set_tree_cache_mib(m);
        }
        if self.no_fsync {
            cfg.backend.fsync = false;
        }
        if let Some(url) = &self.backend {
            cfg.backend.set_url(url)?;
        }
        if let Some(ep) = &self.backend_endpoint {
            cfg.backend.endpoint = Some(ep.clone());
        }
        if let Some(r) = &self.backend_region {
            cfg.backend.region = r.clone();
        }
        if let Some(k) = &self.key_file {
            cfg.key.key_file = Some(k.clone());
        }
        if let Some(p) = &self.passphrase_file {
            cfg.key.passphrase_file = Some(p.clone());
        }
        Ok(())
    }
}

/// The listeners' addresses (`serve`; `init` names the certificate after them).
#[derive(clap::Args)]
pub struct ListenArgs {
    /// S3 listen address (overrides `s3.listen`).
    #[arg(long, value_name = "HOST:PORT", help_heading = "Listeners")]
    pub s3_listen: Option<String>,
    /// Metrics and health endpoint address (overrides `metrics.listen`).
    #[arg(long, value_name = "HOST:PORT", help_heading = "Listeners")]
    pub metrics_listen: Option<String>,
    /// Swift API listen address (overrides `swift.listen`; off unless set).
    #[arg(long, value_name = "HOST:PORT", help_heading = "Listeners")]
    pub swift_listen: Option<String>,
}

impl ListenArgs {
    fn apply(&self, cfg: &mut Config) {
        if let Some(l) = &self.s3_listen {
            cfg.s3.listen = l.clone();
        }
        if let Some(l) = &self.metrics_listen {
            cfg.metrics.listen = l.clone();
        }
        if let Some(l) = &self.swift_listen {
            cfg.swift.listen = l.clone();
        }
    }
}

/// The listeners' TLS (`serve`).
#[derive(clap::Args)]
pub struct TlsArgs {
    /// TLS certificate chain, PEM (overrides `tls.cert_file`; with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key", help_heading = "TLS")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key, PEM, mode 0600 (overrides `tls.key_file`).
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = "TLS")]
    pub tls_key: Option<PathBuf>,
    /// Allow plain HTTP on a non-loopback address (sets `tls.allow_plain_http`).
    #[arg(long, help_heading = "TLS")]
    pub allow_plain_http: bool,
}

impl TlsArgs {
    fn apply(&self, cfg: &mut Config) {
        if let (Some(c), Some(k)) = (&self.tls_cert, &self.tls_key) {
            cfg.tls.cert_file = Some(c.clone());
            cfg.tls.key_file = Some(k.clone());
        }
        if self.allow_plain_http {
            cfg.tls.allow_plain_http = true;
        }
    }
}

/// The configuration from the file (or defaults), the data directory flag, the
/// command's other flags (`overrides`) and the environment.
fn configure(
    place: &ConfigArgs,
    overrides: impl FnOnce(&mut Config) -> Result<(), String>,
) -> Result<(Config, Option<UserConfig>), String> {
    let mut cfg = match &place.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(d) = &place.data_dir {
        cfg.data_dir = d.clone();
    }
    overrides(&mut cfg)?;
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
