//! The server's sections of the configuration: `[s3]`, `[swift]`,
//! `[metrics]`, `[tls]` ([`crate::tls::TlsConfig`]), `[limits]`
//! ([`crate::limits::LimitsConfig`]) and `[log]`, bundled as [`ServerConfig`]. The binary
//! composes them with the volume's sections into the configuration file; every
//! field is documented in `oram-proxy example-config`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::limits::LimitsConfig;
use crate::tls::TlsConfig;

/// What the server listens with.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// `[s3]`.
    pub s3: S3Config,
    /// `[swift]`.
    pub swift: SwiftConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[tls]`.
    pub tls: TlsConfig,
    /// `[limits]`.
    pub limits: LimitsConfig,
    /// `[log]`.
    pub log: LogConfig,
}

impl ServerConfig {
    /// Checks values that parse but cannot work (the limits are checked by
    /// [`LimitsConfig::validate`]).
    pub fn validate(&self) -> Result<(), String> {
        if self.s3.max_concurrent_requests == 0 {
            return Err("s3.max_concurrent_requests must be positive".into());
        }
        self.s3.listen.parse::<SocketAddr>().map_err(|_| {
            format!(
                "s3.listen {:?} is not HOST:PORT with an IP address",
                self.s3.listen
            )
        })?;
        if !self.s3.domain.is_empty() {
            if let Some(why) = oram_s3::domain_problem(&self.s3.domain) {
                return Err(format!("s3.domain {:?} {why}", self.s3.domain));
            }
        }
        for u in &self.swift.users {
            u.validate()?;
        }
        if !self.swift.listen.is_empty() {
            self.swift.listen.parse::<SocketAddr>().map_err(|_| {
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
            self.metrics.listen.parse::<SocketAddr>().map_err(|_| {
                format!(
                    "metrics.listen {:?} is not HOST:PORT with an IP address",
                    self.metrics.listen
                )
            })?;
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err("tls.cert_file and tls.key_file go together".into());
        }
        Ok(())
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
    /// Days after which a multipart upload is aborted (its parts' space freed)
    /// in a bucket without a lifecycle rule of its own that does it; 0: never.
    pub abort_incomplete_uploads_after_days: u32,
    /// The domain of virtual-hosted–style addressing: a request for host
    /// `<bucket>.<domain>` addresses that bucket. Empty: path-style only.
    pub domain: String,
}

impl Default for S3Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8480".into(),
            region: "us-east-1".into(),
            max_concurrent_requests: 64,
            abort_incomplete_uploads_after_days: 7,
            domain: String::new(),
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

/// `[log]`: what the server logs besides its events (the filter and the format
/// are `RUST_LOG`'s, see docs/operating.md).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// One line per client request (S3 and Swift) under the target
    /// `oram_proxy::access`, at info level: time, client address, user, method,
    /// path without the query, status, bytes in and out, duration, request id.
    /// Never a secret key, signature, token or presigned query.
    pub access: bool,
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
