//! The sections of the configuration a volume is made of — `data_dir`,
//! `[engine]` (see [`crate::engines`]), `[backend]`, `[state]`, `[key]` and `[volume]`
//! (automatic growth, [`GrowthConfig`]) — and
//! [`VolumeConfig`], which bundles them. The binary composes these with the
//! server's sections into the configuration file; every field is documented in
//! `oram-proxy example-config`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engines::EngineConfig;

/// What a volume is opened, created or recovered with.
#[derive(Clone, Debug, Default)]
pub struct VolumeConfig {
    /// Directory for key, credentials, volume parameters and the fs back-end.
    pub data_dir: PathBuf,
    /// `[engine]`.
    pub engine: EngineConfig,
    /// `[backend]`.
    pub backend: BackendConfig,
    /// `[state]`.
    pub state: StateConfig,
    /// `[key]`.
    pub key: KeyConfig,
    /// `[cluster]`: this process's role when the volume is served by several
    /// machines.
    pub cluster: crate::cluster::ClusterConfig,
    /// `[volume]`: automatic growth.
    pub growth: GrowthConfig,
}

impl VolumeConfig {
    /// The key file: `key.key_file`, or `<data_dir>/master.key`.
    pub fn key_file(&self) -> PathBuf {
        self.key.key_file(&self.data_dir)
    }

    /// The fs back-end's directory.
    pub fn store_path(&self) -> PathBuf {
        self.backend.store_path(&self.data_dir)
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        self.engine.validate()?;
        self.state.validate()?;
        self.backend.validate()?;
        self.growth.validate()?;
        self.cluster.validate()?;
        self.cluster
            .check_engine(&self.engine, &self.backend.prefix)?;
        Ok(())
    }
}

/// `[state]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Seconds between checkpoints to the backend (0: at shutdown only, and
    /// when `superseded_max_percent` asks).
    pub checkpoint_interval_secs: u64,
    /// A checkpoint is also taken as soon as the objects the engine superseded
    /// since the last one may exceed this percentage of its positions
    /// ([`oram_engine::Oram::superseded`]; 0: never): once it lands they are
    /// deleted, which bounds the backend's footprint (Path ORAM: two slots per
    /// block, so 25 % keeps a volume within 2.5× its capacity).
    pub superseded_max_percent: u64,
    /// Object-index bytes a checkpoint has room for (0: 64 per block).
    pub checkpoint_index_bytes: u64,
    /// MiB of memory the state database may cache (at least 1; default 256,
    /// [`oram_statedb::DEFAULT_CACHE_BYTES`]).
    pub cache_mib: u64,
    /// Milliseconds between two records of the shipped log (0, the default: no
    /// log; the recovery point is the last checkpoint). See `logship`.
    pub log_interval_ms: u64,
    /// KiB per record of the shipped log (every record has this size); unset:
    /// [`DEFAULT_LOG_RECORD_KIB`], or [`NODE_LOG_RECORD_KIB`] on a cluster node
    /// (the binary fills that in for `cluster.role = "node"`). Read it with
    /// [`StateConfig::record_kib`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_record_kib: Option<u64>,
}

/// KiB per shipped-log record of a volume or a cluster's front when
/// `log_record_kib` is unset: a front's stream carries the blocks of its
/// eviction cache, and smaller records cut its throughput for large objects
/// (`benches/cluster/RESULTS.md`, "How full the log records are").
pub const DEFAULT_LOG_RECORD_KIB: u64 = 1024;

/// KiB per shipped-log record of a cluster node when `log_record_kib` is unset:
/// a node's stream carries its partitions' positions and level layouts only,
/// and 1 MiB records were 0.1–2 % full there while each slot uploaded 50 MiB/s
/// at a 20 ms interval; 64 KiB records kept the same throughput
/// (`benches/cluster/RESULTS.md`, "How full the log records are").
pub const NODE_LOG_RECORD_KIB: u64 = 64;

/// How many times its own size an early checkpoint must let the engine delete
/// ([`StateConfig::checkpoint_due`]).
pub const EARLY_CHECKPOINT_GAIN: u64 = 4;

impl StateConfig {
    /// Whether `superseded`, counted by an engine whose state is at checkpoint
    /// epoch `epoch`, calls for a checkpoint of `checkpoint_bytes` now: the
    /// objects reach `superseded_max_percent` of the positions, and deleting
    /// them frees at least [`EARLY_CHECKPOINT_GAIN`] times the bytes the
    /// checkpoint uploads (a small volume of an engine with a large trusted
    /// state, CURIOUS's, would otherwise upload more than it frees).
    pub fn checkpoint_due(
        &self,
        superseded: Option<oram_engine::Superseded>,
        epoch: u64,
        checkpoint_bytes: u64,
    ) -> bool {
        let Some(s) = superseded else { return false };
        self.superseded_max_percent > 0
            && s.epoch == epoch
            && u128::from(s.objects) * u128::from(s.object_bytes)
                >= u128::from(checkpoint_bytes) * u128::from(EARLY_CHECKPOINT_GAIN)
            && s.objects > 0
            && u128::from(s.objects) * 100
                >= u128::from(s.positions) * u128::from(self.superseded_max_percent)
    }

    /// At most how many bytes of shipped log `logs` logs (a cluster member
    /// ships one per slot it serves) may hold on the backend at once, busy or
    /// idle: a record of `log_record_kib` every `log_interval_ms` each, kept
    /// until the next checkpoint has landed (about `checkpoint_interval_secs`;
    /// counted twice, for a checkpoint still uploading). `None` without a log
    /// or periodic checkpoints. A function of the configuration alone.
    pub fn log_bytes_bound(&self, logs: u64) -> Option<u64> {
        if self.checkpoint_interval_secs == 0 {
            return None;
        }
        Some(
            self.log_bytes_per_sec()?
                .saturating_mul(2 * self.checkpoint_interval_secs)
                .saturating_mul(logs),
        )
    }

    /// Bytes one shipped log uploads each second, busy or idle (a record of
    /// `log_record_kib` every `log_interval_ms`); `None` without a log.
    pub fn log_bytes_per_sec(&self) -> Option<u64> {
        (self.log_interval_ms > 0).then(|| (self.record_kib() << 10) * 1000 / self.log_interval_ms)
    }

    /// How the log is shipped, if it is.
    pub fn log_settings(&self) -> Option<crate::logship::LogSettings> {
        (self.log_interval_ms > 0).then(|| crate::logship::LogSettings {
            record_bytes: (self.record_kib() as usize) << 10,
            interval: std::time::Duration::from_millis(self.log_interval_ms),
        })
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            checkpoint_interval_secs: 300,
            superseded_max_percent: 25,
            checkpoint_index_bytes: 0,
            cache_mib: 256,
            log_interval_ms: 0,
            log_record_kib: None,
        }
    }
}

impl StateConfig {
    /// KiB per shipped-log record: `log_record_kib`, or
    /// [`DEFAULT_LOG_RECORD_KIB`] when unset.
    pub fn record_kib(&self) -> u64 {
        self.log_record_kib.unwrap_or(DEFAULT_LOG_RECORD_KIB)
    }

    /// A cluster node's defaults: `log_record_kib` unset becomes
    /// [`NODE_LOG_RECORD_KIB`].
    pub fn for_node(mut self) -> Self {
        self.log_record_kib.get_or_insert(NODE_LOG_RECORD_KIB);
        self
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.superseded_max_percent > 200 {
            return Err(
                "state.superseded_max_percent must be 0 (no early checkpoints) to 200".into(),
            );
        }
        if self.log_interval_ms > 0 {
            if !(10..=60_000).contains(&self.log_interval_ms) {
                return Err("state.log_interval_ms must be 0 (no log) or 10 to 60000".into());
            }
            let most = (crate::logship::MAX_RECORD_BYTES >> 10) as u64;
            if !(64..=most).contains(&self.record_kib()) {
                return Err(format!("state.log_record_kib must be 64 to {most}"));
            }
        }
        Ok(())
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

impl KeyConfig {
    /// The key file: `key_file`, or `<data_dir>/master.key`.
    pub fn key_file(&self, data_dir: &Path) -> PathBuf {
        self.key_file
            .clone()
            .unwrap_or_else(|| data_dir.join("master.key"))
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
    /// GiB the operator allows this volume on the backend (a bucket's budget or
    /// quota); 0: none. Shown as `oram_backend_budget_bytes`, and the alert
    /// `OramProxyBackendBudgetTooSmall` fires when the engine's objects can
    /// outgrow it. Nothing is refused because of it.
    pub budget_gib: f64,
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
            budget_gib: 0.0,
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

impl BackendConfig {
    /// The fs back-end's directory: `path`, or `<data_dir>/store`.
    pub fn store_path(&self, data_dir: &Path) -> PathBuf {
        self.path.clone().unwrap_or_else(|| data_dir.join("store"))
    }

    /// `budget_gib` in bytes (0: no budget).
    pub fn budget_bytes(&self) -> u64 {
        (self.budget_gib * (1u64 << 30) as f64) as u64
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.budget_gib >= 0.0 && self.budget_gib.is_finite()) {
            return Err("backend.budget_gib must be 0 (none) or a positive number of GiB".into());
        }
        if self.kind == BackendKind::S3 {
            if self.bucket.is_empty() {
                return Err("backend.bucket is required with the s3 back-end".into());
            }
            if self.access_key.is_some() != self.secret_key.is_some() {
                return Err("backend.access_key and backend.secret_key go together".into());
            }
            if self.max_in_flight == 0 || self.max_attempts == 0 {
                return Err(
                    "backend.max_in_flight and backend.max_attempts must be positive".into(),
                );
            }
        }
        Ok(())
    }
}

/// `[volume]`: when a volume grows by itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrowthConfig {
    /// The fraction of the capacity used (0 < `grow_at` < 1) at which a
    /// serving proxy doubles its volume, up to `max_size`; 0 (the default):
    /// never by itself.
    pub grow_at: f64,
    /// The largest size automatic growth goes to (`"16GiB"`, see
    /// [`parse_size`]); required with `grow_at`. `oram-proxy grow` is not
    /// bound by it.
    pub max_size: String,
}

impl GrowthConfig {
    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.grow_at == 0.0 {
            return Ok(());
        }
        if !(self.grow_at > 0.0 && self.grow_at < 1.0) {
            return Err(format!(
                "volume.grow_at {} must be a fraction between 0 and 1 (e.g. 0.8), or 0 for no \
                 automatic growth",
                self.grow_at
            ));
        }
        if self.max_size.is_empty() {
            return Err("volume.grow_at needs volume.max_size (e.g. \"16GiB\")".into());
        }
        parse_size(&self.max_size).map_err(|e| format!("volume.max_size: {e}"))?;
        Ok(())
    }

    /// The capacity (blocks of `block_size` bytes) automatic growth would take
    /// a volume of `capacity` blocks with `free` free to: double, at most
    /// `max_size`; `None` while it is used below `grow_at`, or off, or at its
    /// limit.
    pub fn target(&self, capacity: u64, free: u64, block_size: usize) -> Option<u64> {
        if self.grow_at <= 0.0 || capacity == 0 {
            return None;
        }
        let max = parse_size(&self.max_size).ok()? / block_size.max(1) as u64;
        let used = capacity.saturating_sub(free);
        let full = used as f64 / capacity as f64 >= self.grow_at;
        (full && capacity < max).then(|| capacity.saturating_mul(2).min(max))
    }
}

/// A size in bytes as an operator writes it: a number, optionally followed by
/// `B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB` or `T`/`TiB` (powers of 1024; case
/// and a space before the unit do not matter).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return Err(format!("bad size {s:?} (e.g. 4GiB, 512MiB, 1048576)")),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("bad size {s:?} (e.g. 4GiB, 512MiB, 1048576)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_bound_scales_with_rate_checkpoint_interval_and_logs() {
        let off = StateConfig::default();
        assert_eq!(off.log_bytes_bound(8), None, "no log");
        let on = StateConfig {
            log_interval_ms: 20,
            log_record_kib: Some(64),
            checkpoint_interval_secs: 300,
            ..StateConfig::default()
        };
        // 64 KiB every 20 ms: 3.2 MiB/s; 600 s of it per log.
        assert_eq!(on.log_bytes_bound(1), Some(3_276_800 * 600));
        assert_eq!(on.log_bytes_bound(8), Some(8 * 3_276_800 * 600));
        let rare = StateConfig {
            checkpoint_interval_secs: 0,
            ..on.clone()
        };
        assert_eq!(rare.log_bytes_bound(1), None, "no periodic checkpoints");
    }

    #[test]
    fn sizes_parse_like_an_operator_writes_them() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4 gib"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        for bad in ["", "GiB", "4 GB", "-1", "0", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn automatic_growth_doubles_up_to_the_limit() {
        let off = GrowthConfig::default();
        assert_eq!(off.target(100, 0, 1024), None);
        off.validate().unwrap();
        let p = GrowthConfig {
            grow_at: 0.8,
            max_size: "300KiB".into(),
        };
        p.validate().unwrap();
        assert_eq!(p.target(100, 21, 1024), None, "79 % used");
        assert_eq!(p.target(100, 20, 1024), Some(200));
        assert_eq!(p.target(200, 0, 1024), Some(300), "at most max_size");
        assert_eq!(p.target(300, 0, 1024), None, "at the limit");
        for (at, max) in [(1.0, "1G"), (-0.5, "1G"), (0.5, ""), (0.5, "lots")] {
            let bad = GrowthConfig {
                grow_at: at,
                max_size: max.into(),
            };
            assert!(bad.validate().is_err(), "{at} {max}");
        }
    }

    #[test]
    fn a_checkpoint_is_due_when_the_superseded_objects_reach_the_allowance() {
        let s = StateConfig::default();
        let count = |objects, epoch| {
            Some(oram_engine::Superseded {
                objects,
                positions: 1000,
                epoch,
                object_bytes: 100,
            })
        };
        assert!(!s.checkpoint_due(None, 3, 1000));
        assert!(!s.checkpoint_due(count(0, 3), 3, 1000));
        assert!(!s.checkpoint_due(count(249, 3), 3, 1000));
        assert!(s.checkpoint_due(count(250, 3), 3, 1000));
        // A count of the epoch before: no round since the last checkpoint.
        assert!(!s.checkpoint_due(count(900, 2), 3, 1000));
        // A checkpoint larger than a quarter of what it would free: not yet.
        assert!(!s.checkpoint_due(count(250, 3), 3, 6251));
        assert!(s.checkpoint_due(count(250, 3), 3, 6250));
        let off = StateConfig {
            superseded_max_percent: 0,
            ..StateConfig::default()
        };
        assert!(!off.checkpoint_due(count(900, 3), 3, 1000));
        assert!(StateConfig {
            superseded_max_percent: 201,
            ..StateConfig::default()
        }
        .validate()
        .is_err());
    }
}
