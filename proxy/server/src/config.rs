//! The TOML configuration. Every field is optional (defaults below) and unknown
//! fields are rejected. `oram-proxy example-config` prints [`EXAMPLE`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A documented configuration with every field at its default.
pub const EXAMPLE: &str = r#"# oram-proxy configuration. Every field is optional; the values shown are the defaults.

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

[engine]
# "path" (Path ORAM) or "direct" (no ORAM: the non-oblivious baseline).
kind = "path"
# Bytes per ORAM block. Fixed when the data directory is created.
block_size = 4096
# Logical blocks in the ORAM (capacity = block_size x capacity_blocks; 1 GiB by
# default). Fixed when the data directory is created.
capacity_blocks = 262144
# Path ORAM: blocks per bucket (Z). Fixed when the data directory is created.
z = 4
# Path ORAM: tree levels kept in local memory (tree-top cache); each saves a
# backend GET and PUT per access and costs 2^level buckets of memory.
cached_levels = 10
# Path ORAM: largest stash allowed after an access.
stash_bound = 89
# Blocks moved per engine round (and per streaming step of an object).
max_batch = 64
# Path ORAM: rounds whose write-back may be pending at once.
max_inflight_writebacks = 4

[backend]
# "fs": a local directory (the only back-end so far).
kind = "fs"
# Directory of the fs back-end; default "<data_dir>/store".
# path = "/var/lib/oram-proxy/store"
# fsync every write (turn off only for throw-away benchmarks).
fsync = true
# Key prefix of this volume's objects.
prefix = "vol0"

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
    /// The engine.
    pub engine: EngineConfig,
    /// The backend store.
    pub backend: BackendConfig,
    /// S3 users.
    pub users: Vec<UserConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./oram-data"),
            s3: S3Config::default(),
            engine: EngineConfig::default(),
            backend: BackendConfig::default(),
            users: Vec::new(),
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

/// Which engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Path ORAM.
    Path,
    /// No ORAM (baseline).
    Direct,
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineKind::Path => "path",
            EngineKind::Direct => "direct",
        })
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "path" => Ok(EngineKind::Path),
            "direct" => Ok(EngineKind::Direct),
            _ => Err(format!(
                "unknown engine {s:?} (expected \"path\" or \"direct\")"
            )),
        }
    }
}

/// `[engine]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Engine kind.
    pub kind: EngineKind,
    /// Bytes per block.
    pub block_size: usize,
    /// Logical blocks.
    pub capacity_blocks: u64,
    /// Path ORAM bucket size.
    pub z: usize,
    /// Path ORAM tree-top cache levels.
    pub cached_levels: u32,
    /// Path ORAM stash bound.
    pub stash_bound: usize,
    /// Blocks per round.
    pub max_batch: usize,
    /// Path ORAM pending write-back rounds.
    pub max_inflight_writebacks: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            kind: EngineKind::Path,
            block_size: 4096,
            capacity_blocks: 262_144,
            z: 4,
            cached_levels: 10,
            stash_bound: 89,
            max_batch: 64,
            max_inflight_writebacks: 4,
        }
    }
}

/// Which back-end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// A local directory.
    Fs,
}

/// `[backend]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackendConfig {
    /// Back-end kind.
    pub kind: BackendKind,
    /// fs: directory (default `<data_dir>/store`).
    pub path: Option<PathBuf>,
    /// fs: fsync writes.
    pub fsync: bool,
    /// Key prefix of the volume.
    pub prefix: String,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            kind: BackendKind::Fs,
            path: None,
            fsync: true,
            prefix: "vol0".into(),
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

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        let e = &self.engine;
        if e.block_size < 16 || e.block_size > (16 << 20) {
            return Err(format!(
                "engine.block_size {} outside 16 B ..= 16 MiB",
                e.block_size
            ));
        }
        if e.capacity_blocks == 0 || e.z == 0 || e.max_batch == 0 || e.max_inflight_writebacks == 0
        {
            return Err(
                "engine.capacity_blocks, z, max_batch and max_inflight_writebacks must be positive"
                    .into(),
            );
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
        for u in &self.users {
            if u.access_key.len() < 3 || u.secret_key.len() < 8 {
                return Err(format!(
                    "user {:?}: access key needs 3+ characters and secret key 8+",
                    u.access_key
                ));
            }
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
        let c = Config::parse(EXAMPLE).unwrap();
        let d = Config::default();
        assert_eq!(toml::to_string(&c).unwrap(), toml::to_string(&d).unwrap());
        c.validate().unwrap();
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        assert!(Config::parse("data_dir = 'x'\nbogus = 1")
            .unwrap_err()
            .contains("bogus"));
        assert!(Config::parse("[engine]\nkind = 'ring2'").is_err());
        assert!(Config::parse("[s3]\nlisten = 5").is_err());
        let c = Config::parse("[engine]\nblock_size = 1").unwrap();
        assert!(c.validate().unwrap_err().contains("block_size"));
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
