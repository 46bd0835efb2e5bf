//! The TOML configuration. Every field is optional (defaults below) and unknown
//! fields are rejected. `oram-proxy example-config` prints [`example`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A documented configuration with every field at its default: what
/// `oram-proxy example-config` prints. The `[engine]` part comes from the engine
/// crates.
pub fn example() -> String {
    format!(
        "{EXAMPLE_HEAD}{}\n{EXAMPLE_TAIL}",
        crate::engines::example()
    )
}

const EXAMPLE_HEAD: &str = r#"# oram-proxy configuration. Every field is optional; the values shown are the defaults.

# Directory holding the master key, the credentials, the volume parameters and,
# with the fs back-end, the sealed ORAM objects.
data_dir = "./oram-data"

[s3]
# Address the S3 API listens on.
listen = "127.0.0.1:8480"
# Region reported to clients (GetBucketLocation, HeadBucket).
region = "us-east-1"
# Requests served at once; more get 503 SlowDown (clients retry).
max_concurrent_requests = 64

[metrics]
# Address of the operator endpoint: GET /metrics (Prometheus text: client requests
# by operation and status, latencies, backend requests, bytes and errors, engine,
# checkpoint, journal, lease and TLS gauges), GET /health and the dashboard
# (/dashboard). Empty: off. On a non-loopback address it needs a bearer token and
# speaks HTTPS when [tls] is configured.
listen = ""
# File holding the bearer token for /metrics and the dashboard's data (mode 0600).
# Unset: none on loopback; on other addresses <data_dir>/metrics.token, generated.
# token_file = "/etc/oram-proxy/metrics.token"
# Serve the dashboard (/dashboard): live backend requests beside client requests.
dashboard = true
# Show object names on the dashboard instead of keyed digests.
dashboard_object_names = false
[swift]
# Address the OpenStack Swift API listens on; "" (the default) leaves it off
# (--swift-listen). Auth v1 at http://<listen>/auth/v1.0 with
# X-Auth-User: <access_key>:<access_key> and X-Auth-Key: <secret_key>.
listen = ""
# Lifetime of a Swift auth token, seconds.
token_ttl_secs = 86400
# Requests served at once; more get 503 (clients retry).
max_concurrent_requests = 64
# Further Swift users in the accounts of the S3 users (tempauth's users): without
# admin they reach only containers whose X-Container-Read/-Write ACLs name them
# (<account>:<user>) or their account. The file then holds secrets (mode 0600).
# [[swift.users]]
# account = "<an access key above>"
# user = "reader"
# key = "<8+ characters>"
# admin = false

[limits]
# Connections served at once per listener (S3, Swift); more wait in the backlog.
max_connections = 1024
# Connections one client address (IPv6: one /64) may hold at once; beyond: 503.
max_connections_per_client = 256
# Seconds a client has to send its request headers; also how long an idle
# keep-alive connection stays open.
header_timeout_secs = 30
# Seconds a request body may stall (no byte arriving) before the request fails.
body_timeout_secs = 60
# Seconds a response may stall (the client reading nothing) before the
# connection is closed.
send_timeout_secs = 60
[tls]
# PEM certificate chain (server certificate first) and private key (mode 0600) of
# the S3 and Swift listeners, which then speak HTTPS only. Both unset: the pair
# `oram-proxy init --tls-self-signed` wrote to <data_dir>/tls/ if present, else
# plain HTTP. SIGHUP reloads the files without dropping connections.
# cert_file = "/etc/oram-proxy/tls/cert.pem"
# key_file = "/etc/oram-proxy/tls/key.pem"
# Plain HTTP on a non-loopback address is refused unless this is true
# (--allow-plain-http); it then logs a warning at every start.
allow_plain_http = false

"#;

const EXAMPLE_TAIL: &str = r#"[backend]
# "fs" (a local directory) or "s3" (AWS S3, IBM Cloud Object Storage, MinIO, ...).
# On the command line: --backend file:///path or --backend s3://bucket/prefix.
kind = "fs"
# Key prefix of this volume's objects (inside the directory or bucket prefix).
prefix = "vol0"
# fs: directory of the store; default "<data_dir>/store".
# path = "/var/lib/oram-proxy/store"
# fs: fsync every write (turn off only for throw-away benchmarks).
fsync = true
# s3: the bucket holding the volume (create it with `oram-proxy init`).
bucket = ""
# s3: key prefix inside the bucket ("" for none).
key_prefix = ""
# s3: endpoint URL; unset for AWS S3 itself (--backend-endpoint).
# endpoint = "http://127.0.0.1:9000"
# s3: region (--backend-region); IBM COS: the endpoint's region, e.g. "eu-de".
region = "us-east-1"
# s3: path-style addressing (endpoint/bucket/key); MinIO and most custom endpoints
# need it. Default: on when an endpoint is set.
# path_style = true
# s3: static credentials; unset: the standard AWS chain (AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY, profiles, instance metadata).
# access_key = ""
# secret_key = ""
# s3: requests in flight towards the backend.
max_in_flight = 32
# s3: timeout of one request attempt, seconds.
attempt_timeout_secs = 30
# s3: attempts per request (exponential back-off with jitter in between).
max_attempts = 4
# s3: send If-Match / If-None-Match: * with every PUT, so that a PUT that timed
# out but lands later cannot replace a newer version (AWS S3 and MinIO support
# it; turn off only for a service that rejects conditional writes).
conditional_writes = true
# Seconds of the backend lease (<prefix>/meta/lease): one proxy at a time may
# write a volume; it renews the lease every third of this and stops writing when
# it cannot. A second proxy waits this long for a silent holder before taking
# over. 0: no lease (only for a service without conditional writes).
lease_secs = 30

[state]
# The trusted state (position map, stash, object index...) lives in
# <data_dir>/state.redb, committed with fsync before every acknowledgement. It is
# also checkpointed to the backend, sealed and padded to a fixed size, so that
# `oram-proxy recover` can rebuild a lost data directory: every this many seconds
# and at shutdown (0 = at shutdown only). A checkpoint pauses the engine while it
# uploads.
checkpoint_interval_secs = 300
# Bytes of object index a checkpoint has room for; 0 = 64 per block of capacity.
# A larger index doubles the checkpoint (its size then hints at the index size).
checkpoint_index_bytes = 0
# MiB of memory the state database keeps as its page cache (pages beyond it are
# read from state.redb again, usually from the kernel's page cache).
cache_mib = 256
# The shipped log: a recovery point of zero. With log_interval_ms > 0 every commit
# of the state is also carried to the backend, sealed, in records of
# log_record_kib each, one every log_interval_ms whatever the clients do (idle
# too: that is what keeps the records' pattern independent of the requests), and
# a request is answered only once its record has landed. `recover` then replays
# the log after the last checkpoint and loses nothing acknowledged. It costs
# latency (up to one interval plus a PUT per commit), a throughput cap (the state
# changes of a round must fit log_record_kib / log_interval_ms) and constant
# upload traffic. 0 = no log.
log_interval_ms = 0
log_record_kib = 1024

[key]
# The master key: ORAM_PROXY_MASTER_KEY (64 hex digits) if set; else a passphrase
# (ORAM_PROXY_PASSPHRASE, or this file, mode 0600) stretched with Argon2id; else
# the key file (mode 0600), created on first start.
# passphrase_file = "/etc/oram-proxy/passphrase"
# key_file = "<data_dir>/master.key"

# Users of the S3 API. Without any, a user is generated on first start and kept in
# <data_dir>/credentials.toml; ORAM_PROXY_ROOT_USER / ORAM_PROXY_ROOT_PASSWORD set
# the first user instead.
# [[users]]
# access_key = "alice"
# secret_key = "a-long-random-secret"
"#;

/// The whole configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Directory for key, credentials, volume parameters and the fs back-end.
    pub data_dir: PathBuf,
    /// The S3 API.
    pub s3: S3Config,
    /// The metrics and health endpoint.
    pub metrics: MetricsConfig,
    /// The Swift API.
    pub swift: SwiftConfig,
    /// TLS of the S3 and Swift listeners.
    pub tls: crate::tls::TlsConfig,
    /// The engine.
    pub engine: EngineConfig,
    /// The backend store.
    pub backend: BackendConfig,
    /// Trusted state and checkpoints.
    pub state: StateConfig,
    /// Master key source.
    pub key: KeyConfig,
    /// S3 users.
    pub users: Vec<UserConfig>,
    /// Connection limits of the S3 and Swift listeners.
    pub limits: crate::limits::LimitsConfig,
    /// In-process hooks (tests and embedders); not part of the file format.
    #[serde(skip)]
    pub hooks: Hooks,
}

/// Wraps the opened backend store (e.g. the fault-injection wrapper of the tests).
pub type StoreHook = std::sync::Arc<
    dyn Fn(
            std::sync::Arc<dyn oram_blockstore::BlockStore>,
        ) -> std::sync::Arc<dyn oram_blockstore::BlockStore>
        + Send
        + Sync,
>;

/// In-process hooks.
#[derive(Clone, Default)]
pub struct Hooks {
    /// Applied to the backend store when a volume opens it.
    pub wrap_store: Option<StoreHook>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("wrap_store", &self.wrap_store.is_some())
            .finish()
    }
}

/// `[metrics]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Listen address of `/metrics`, `/health` and the dashboard; empty: no endpoint.
    pub listen: String,
    /// Bearer token file for `/metrics` and the dashboard's data.
    pub token_file: Option<PathBuf>,
    /// Whether the dashboard is served.
    pub dashboard: bool,
    /// Whether the dashboard shows object names (else keyed digests).
    pub dashboard_object_names: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: String::new(),
            token_file: None,
            dashboard: true,
            dashboard_object_names: false,
        }
    }
}

/// `[state]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Seconds between checkpoints to the backend (0: at shutdown only).
    pub checkpoint_interval_secs: u64,
    /// Object-index bytes a checkpoint has room for (0: 64 per block).
    pub checkpoint_index_bytes: u64,
    /// MiB of memory the state database may cache (at least 1; default 256,
    /// [`oram_statedb::DEFAULT_CACHE_BYTES`]).
    pub cache_mib: u64,
    /// Milliseconds between two records of the shipped log (0, the default: no
    /// log; the recovery point is the last checkpoint). See `logship`.
    pub log_interval_ms: u64,
    /// KiB per record of the shipped log (every record has this size).
    pub log_record_kib: u64,
}

impl StateConfig {
    /// How the log is shipped, if it is.
    pub fn log_settings(&self) -> Option<crate::logship::LogSettings> {
        (self.log_interval_ms > 0).then(|| crate::logship::LogSettings {
            record_bytes: (self.log_record_kib as usize) << 10,
            interval: std::time::Duration::from_millis(self.log_interval_ms),
        })
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            checkpoint_interval_secs: 300,
            checkpoint_index_bytes: 0,
            cache_mib: 256,
            log_interval_ms: 0,
            log_record_kib: 1024,
        }
    }
}

/// `[key]`
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeyConfig {
    /// File holding the passphrase (mode 0600).
    pub passphrase_file: Option<PathBuf>,
    /// The key file; default `<data_dir>/master.key`.
    pub key_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./oram-data"),
            s3: S3Config::default(),
            metrics: MetricsConfig::default(),
            swift: SwiftConfig::default(),
            tls: crate::tls::TlsConfig::default(),
            engine: EngineConfig::default(),
            backend: BackendConfig::default(),
            state: StateConfig::default(),
            key: KeyConfig::default(),
            users: Vec::new(),
            limits: crate::limits::LimitsConfig::default(),
            hooks: Hooks::default(),
        }
    }
}

/// `[s3]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3Config {
    /// Listen address.
    pub listen: String,
    /// Region reported to clients.
    pub region: String,
    /// Requests served at once.
    pub max_concurrent_requests: usize,
}

impl Default for S3Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8480".into(),
            region: "us-east-1".into(),
            max_concurrent_requests: 64,
        }
    }
}

/// `[swift]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwiftConfig {
    /// Listen address; empty: the Swift API is off.
    pub listen: String,
    /// Token lifetime in seconds.
    pub token_ttl_secs: u64,
    /// Requests served at once.
    pub max_concurrent_requests: usize,
    /// Further Swift users (`[[swift.users]]`) in the S3 users' accounts.
    pub users: Vec<SwiftUserConfig>,
}

impl Default for SwiftConfig {
    fn default() -> Self {
        Self {
            listen: String::new(),
            token_ttl_secs: 86_400,
            max_concurrent_requests: 64,
            users: Vec::new(),
        }
    }
}

pub use crate::engines::{Engine, EngineConfig};
/// `[[swift.users]]`: a Swift user `<account>:<user>` with key `key` in the
/// account of S3 user `account`; an admin owns the account, anyone else reaches
/// only what container ACLs grant.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwiftUserConfig {
    /// The account: an S3 user's access key.
    pub account: String,
    /// The user name within the account.
    pub user: String,
    /// The key (password), 8+ characters.
    pub key: String,
    /// Whether the user administers the account.
    #[serde(default)]
    pub admin: bool,
}

impl SwiftUserConfig {
    /// Checks the names (non-empty, no `:`) and the key's length.
    pub fn validate(&self) -> Result<(), String> {
        if self.account.is_empty()
            || self.user.is_empty()
            || self.account.contains(':')
            || self.user.contains(':')
            || self.key.len() < 8
        {
            return Err(format!(
                "swift user {:?}:{:?}: account and user must be non-empty without ':' and the key 8+ characters",
                self.account, self.user
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for SwiftUserConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SwiftUserConfig")
            .field("account", &self.account)
            .field("user", &self.user)
            .field("key", &"<redacted>")
            .field("admin", &self.admin)
            .finish()
    }
}

/// Which back-end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// A local directory.
    Fs,
    /// An S3-compatible service.
    S3,
}

/// `[backend]`
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackendConfig {
    /// Back-end kind.
    pub kind: BackendKind,
    /// Key prefix of the volume.
    pub prefix: String,
    /// fs: directory (default `<data_dir>/store`).
    pub path: Option<PathBuf>,
    /// fs: fsync writes.
    pub fsync: bool,
    /// s3: bucket.
    pub bucket: String,
    /// s3: key prefix inside the bucket.
    pub key_prefix: String,
    /// s3: endpoint URL (`None`: AWS).
    pub endpoint: Option<String>,
    /// s3: region.
    pub region: String,
    /// s3: path-style addressing (`None`: on when an endpoint is set).
    pub path_style: Option<bool>,
    /// s3: access key (`None`: the standard AWS chain).
    pub access_key: Option<String>,
    /// s3: secret key.
    pub secret_key: Option<String>,
    /// s3: requests in flight.
    pub max_in_flight: usize,
    /// s3: attempt timeout in seconds.
    pub attempt_timeout_secs: u64,
    /// s3: attempts per request.
    pub max_attempts: u32,
    /// s3: conditional PUTs (`If-Match` / `If-None-Match: *`).
    pub conditional_writes: bool,
    /// Seconds of the backend lease; 0: no lease.
    pub lease_secs: u64,
}

impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendConfig")
            .field("kind", &self.kind)
            .field("prefix", &self.prefix)
            .field("path", &self.path)
            .field("bucket", &self.bucket)
            .field("key_prefix", &self.key_prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            kind: BackendKind::Fs,
            prefix: "vol0".into(),
            path: None,
            fsync: true,
            bucket: String::new(),
            key_prefix: String::new(),
            endpoint: None,
            region: "us-east-1".into(),
            path_style: None,
            access_key: None,
            secret_key: None,
            max_in_flight: 32,
            attempt_timeout_secs: 30,
            max_attempts: 4,
            conditional_writes: true,
            lease_secs: 30,
        }
    }
}

impl BackendConfig {
    /// Applies a `--backend` URL: `file:///path` or `s3://bucket[/prefix]`.
    pub fn set_url(&mut self, url: &str) -> Result<(), String> {
        if let Some(path) = url.strip_prefix("file://") {
            if path.is_empty() {
                return Err(format!("--backend {url:?}: file:// needs a path"));
            }
            self.kind = BackendKind::Fs;
            self.path = Some(PathBuf::from(path));
            Ok(())
        } else if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("--backend {url:?}: s3:// needs a bucket"));
            }
            self.kind = BackendKind::S3;
            self.bucket = bucket.to_string();
            self.key_prefix = prefix.trim_matches('/').to_string();
            Ok(())
        } else {
            Err(format!(
                "--backend {url:?}: expected file:///path or s3://bucket/prefix"
            ))
        }
    }
}

/// `[[users]]`
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// Access key.
    pub access_key: String,
    /// Secret key.
    pub secret_key: String,
}

impl UserConfig {
    /// Checks the lengths: access key 3+ characters, secret key 8+.
    pub fn validate(&self) -> Result<(), String> {
        if self.access_key.len() < 3 || self.secret_key.len() < 8 {
            return Err(format!(
                "user {:?}: access key needs 3+ characters and secret key 8+",
                self.access_key
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserConfig")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

impl Config {
    /// Parses a configuration file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Reads and parses a configuration file. A file that holds secrets (users'
    /// secret keys, the backend's secret key) must not be readable by group or
    /// others.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cfg = Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if cfg.holds_secrets() {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} holds secret keys but has mode {:o}: group and others must have no \
                     access (chmod 600 {})",
                    path.display(),
                    mode & 0o777,
                    path.display()
                ));
            }
        }
        Ok(cfg)
    }

    /// Whether the configuration holds secrets (users, the backend's secret key).
    pub fn holds_secrets(&self) -> bool {
        !self.users.is_empty() || !self.swift.users.is_empty() || self.backend.secret_key.is_some()
    }

    /// The key file: `key.key_file`, or `<data_dir>/master.key`.
    pub fn key_file(&self) -> PathBuf {
        self.key
            .key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("master.key"))
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        self.engine.validate()?;
        self.limits.validate()?;
        if self.state.log_interval_ms > 0 {
            if !(10..=60_000).contains(&self.state.log_interval_ms) {
                return Err("state.log_interval_ms must be 0 (no log) or 10 to 60000".into());
            }
            let most = (crate::logship::MAX_RECORD_BYTES >> 10) as u64;
            if !(64..=most).contains(&self.state.log_record_kib) {
                return Err(format!("state.log_record_kib must be 64 to {most}"));
            }
        }
        if self.backend.kind == BackendKind::S3 {
            if self.backend.bucket.is_empty() {
                return Err("backend.bucket is required with the s3 back-end".into());
            }
            if self.backend.access_key.is_some() != self.backend.secret_key.is_some() {
                return Err("backend.access_key and backend.secret_key go together".into());
            }
            if self.backend.max_in_flight == 0 || self.backend.max_attempts == 0 {
                return Err(
                    "backend.max_in_flight and backend.max_attempts must be positive".into(),
                );
            }
        }
        if self.s3.max_concurrent_requests == 0 {
            return Err("s3.max_concurrent_requests must be positive".into());
        }
        self.s3
            .listen
            .parse::<std::net::SocketAddr>()
            .map_err(|_| {
                format!(
                    "s3.listen {:?} is not HOST:PORT with an IP address",
                    self.s3.listen
                )
            })?;
        for u in &self.swift.users {
            u.validate()?;
        }
        if !self.swift.listen.is_empty() {
            self.swift
                .listen
                .parse::<std::net::SocketAddr>()
                .map_err(|_| {
                    format!(
                        "swift.listen {:?} is not HOST:PORT with an IP address",
                        self.swift.listen
                    )
                })?;
            if self.swift.max_concurrent_requests == 0 || self.swift.token_ttl_secs == 0 {
                return Err(
                    "swift.max_concurrent_requests and swift.token_ttl_secs must be positive"
                        .into(),
                );
            }
        }
        if !self.metrics.listen.is_empty() {
            self.metrics
                .listen
                .parse::<std::net::SocketAddr>()
                .map_err(|_| {
                    format!(
                        "metrics.listen {:?} is not HOST:PORT with an IP address",
                        self.metrics.listen
                    )
                })?;
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err("tls.cert_file and tls.key_file go together".into());
        }
        for u in &self.users {
            u.validate()?;
        }
        Ok(())
    }

    /// The fs back-end's directory.
    pub fn store_path(&self) -> PathBuf {
        self.backend
            .path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("store"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_is_the_default_and_valid() {
        let c = Config::parse(&example()).unwrap();
        assert!(c.engine.ignored.is_empty());
        let d = Config::default();
        assert_eq!(toml::to_string(&c).unwrap(), toml::to_string(&d).unwrap());
        c.validate().unwrap();
    }

    #[test]
    fn backend_urls() {
        let mut b = BackendConfig::default();
        b.set_url("s3://bkt/some/prefix/").unwrap();
        assert_eq!(
            (b.kind, b.bucket.as_str(), b.key_prefix.as_str()),
            (BackendKind::S3, "bkt", "some/prefix")
        );
        b.set_url("s3://only").unwrap();
        assert_eq!((b.bucket.as_str(), b.key_prefix.as_str()), ("only", ""));
        b.set_url("file:///var/x").unwrap();
        assert_eq!(
            (b.kind, b.path.clone()),
            (BackendKind::Fs, Some(PathBuf::from("/var/x")))
        );
        assert!(b.set_url("http://x").is_err());
        assert!(b.set_url("s3://").is_err());
        let c = Config::parse("[backend]\nkind = 's3'").unwrap();
        assert!(c.validate().unwrap_err().contains("bucket"));
        let dbg = format!(
            "{:?}",
            Config::parse("[backend]\nsecret_key = 'hunter22'").unwrap()
        );
        assert!(!dbg.contains("hunter22"));
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        assert!(Config::parse("data_dir = 'x'\nbogus = 1")
            .unwrap_err()
            .contains("bogus"));
        assert!(Config::parse("[engine]\nkind = 'ring2'").is_err());
        for key in [
            "ring_evict_read",
            "curious_sub",
            "oblivistore_eviction_rate",
        ] {
            assert!(example().contains(key), "every engine documented: {key}");
        }
        assert!(Config::parse("[s3]\nlisten = 5").is_err());
        let c = Config::parse("[swift]\nlisten = '127.0.0.1:8481'").unwrap();
        assert!(c.validate().is_ok());
        assert!(Config::default().swift.listen.is_empty());
        let c = Config::parse("[swift]\nlisten = 'nowhere'").unwrap();
        assert!(c.validate().is_err());
        assert!(Config::parse("[swift]\nlisten = ''\nbogus = 1").is_err());
        // Further Swift users: validated, and the file then holds secrets.
        let users = "[swift]\nlisten = '127.0.0.1:8481'\n[[swift.users]]\naccount = 'acct'\nuser = 'reader'\nkey = 'reader-key-1'\n";
        let c = Config::parse(users).unwrap();
        assert!(c.validate().is_ok() && c.holds_secrets());
        assert!(!c.swift.users[0].admin);
        assert!(!format!("{:?}", c.swift.users[0]).contains("reader-key-1"));
        let c = Config::parse(&users.replace("reader-key-1", "short")).unwrap();
        assert!(c.validate().unwrap_err().contains("swift user"));
        let c = Config::parse(&users.replace("'reader'", "'a:b'")).unwrap();
        assert!(c.validate().is_err());
        let c = Config::parse("[engine]\nblock_size = 1").unwrap();
        assert!(c.validate().unwrap_err().contains("block_size"));
        let c = Config::parse("[engine]\nkind = 'ring'\nring_preset = 'huge'").unwrap();
        assert!(c.validate().unwrap_err().contains("ring_preset"));
        assert!(Config::parse("[engine]\nring_x = 1").is_err());
        let c =
            Config::parse("[engine]\nkind = 'ring'\nring_preset = 'large'\nring_s = 70").unwrap();
        c.validate().unwrap();
        let c = Config::parse("[engine]\nkind = 'ring'\nring_evict_read = 'some'").unwrap();
        assert!(c.validate().unwrap_err().contains("ring_evict_read"));
        let mut c = Config::default();
        c.engine.set_kind("ring").unwrap();
        assert_eq!(c.engine.kind.name(), "ring");
        assert!(c.engine.set_kind("nope").is_err());
        let c = Config::parse("[s3]\nlisten = 'localhost'").unwrap();
        assert!(c.validate().is_err());
        let c = Config::parse("[[users]]\naccess_key = 'al'\nsecret_key = 'x'").unwrap();
        assert!(c.validate().is_err());
        let dbg = format!(
            "{:?}",
            Config::parse("[[users]]\naccess_key = 'alice'\nsecret_key = 'topsecret1'").unwrap()
        );
        assert!(!dbg.contains("topsecret1"));
    }
}
