//! The configuration file: the volume's sections (`data_dir`, `[engine]`,
//! `[backend]`, `[state]`, `[key]`, `[[users]]`, from [`oram_volume`]) and the
//! server's (`[s3]`, `[swift]`, `[metrics]`, `[tls]`, `[limits]`, `[log]`, from
//! [`oram_server`]) in one TOML file. Every field is optional (defaults below)
//! and unknown fields are rejected. `oram-proxy example-config` prints
//! [`crate::example::example`]. Only the binary sees the whole configuration:
//! the volume and the server each get their sections ([`Config::volume`],
//! [`Config::server`]).

use std::path::{Path, PathBuf};

use oram_server::{
    LimitsConfig, LogConfig, MetricsConfig, S3Config, ServerConfig, SwiftConfig, TlsConfig,
};
use oram_volume::cluster::ClusterConfig;
use oram_volume::{
    BackendConfig, EngineConfig, GrowthConfig, KeyConfig, StateConfig, UserConfig, VolumeConfig,
};
use serde::{Deserialize, Serialize};

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
    pub tls: TlsConfig,
    /// The engine.
    pub engine: EngineConfig,
    /// Automatic growth of the volume (`[volume]`).
    pub volume: GrowthConfig,
    /// The backend store.
    pub backend: BackendConfig,
    /// Trusted state and checkpoints.
    pub state: StateConfig,
    /// Master key source.
    pub key: KeyConfig,
    /// S3 users.
    pub users: Vec<UserConfig>,
    /// Connection limits of the S3 and Swift listeners.
    pub limits: LimitsConfig,
    /// What the server logs (the access log).
    pub log: LogConfig,
    /// This process's role when the volume is served by several machines.
    pub cluster: ClusterConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./oram-data"),
            s3: S3Config::default(),
            metrics: MetricsConfig::default(),
            swift: SwiftConfig::default(),
            tls: TlsConfig::default(),
            engine: EngineConfig::default(),
            volume: GrowthConfig::default(),
            backend: BackendConfig::default(),
            state: StateConfig::default(),
            key: KeyConfig::default(),
            users: Vec::new(),
            limits: LimitsConfig::default(),
            log: LogConfig::default(),
            cluster: ClusterConfig::default(),
        }
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
        self.key.key_file(&self.data_dir)
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        self.engine.validate()?;
        self.limits.validate()?;
        self.state.validate()?;
        self.backend.validate()?;
        self.volume.validate()?;
        self.cluster.validate()?;
        self.cluster
            .check_engine(&self.engine, &self.backend.prefix)?;
        self.server().validate()?;
        for u in &self.users {
            u.validate()?;
        }
        Ok(())
    }

    /// The volume's sections.
    pub fn volume(&self) -> VolumeConfig {
        VolumeConfig {
            data_dir: self.data_dir.clone(),
            engine: self.engine.clone(),
            backend: self.backend.clone(),
            // A node's shipped-log records default smaller than a front's.
            state: match self.cluster.role {
                oram_volume::cluster::Role::Node => self.state.clone().for_node(),
                _ => self.state.clone(),
            },
            key: self.key.clone(),
            cluster: self.cluster.clone(),
            growth: self.volume.clone(),
        }
    }

    /// The server's sections.
    pub fn server(&self) -> ServerConfig {
        ServerConfig {
            s3: self.s3.clone(),
            swift: self.swift.clone(),
            metrics: self.metrics.clone(),
            tls: self.tls.clone(),
            limits: self.limits.clone(),
            log: self.log.clone(),
        }
    }

    /// The fs back-end's directory.
    pub fn store_path(&self) -> PathBuf {
        self.backend.store_path(&self.data_dir)
    }
}

#[cfg(test)]
mod tests {
    use oram_volume::BackendKind;

    use super::*;
    use crate::example::example;

    #[test]
    fn example_is_the_default_and_valid() {
        let c = Config::parse(&example()).unwrap();
        assert!(c.engine.ignored.is_empty());
        let d = Config::default();
        assert_eq!(toml::to_string(&c).unwrap(), toml::to_string(&d).unwrap());
        c.validate().unwrap();
    }

    #[test]
    fn a_node_s_log_records_default_to_64_kib_and_a_front_s_to_1_mib() {
        let with = |role: &str, extra: &str| {
            let c = Config::parse(&format!(
                "[state]\nlog_interval_ms = 20\n{extra}[cluster]\nrole = \"{role}\"\n"
            ))
            .unwrap();
            let v = c.volume();
            (
                v.state.record_kib(),
                v.state.log_settings().unwrap().record_bytes,
            )
        };
        assert_eq!(with("node", ""), (64, 64 << 10));
        assert_eq!(with("front", ""), (1024, 1 << 20));
        assert_eq!(with("single", ""), (1024, 1 << 20));
        // A value set is kept, on a node too.
        assert_eq!(with("node", "log_record_kib = 256\n"), (256, 256 << 10));
        assert_eq!(with("front", "log_record_kib = 64\n"), (64, 64 << 10));
    }

    #[test]
    fn abandoned_uploads_are_aborted_after_7_days_unless_set() {
        assert_eq!(Config::default().s3.abort_incomplete_uploads_after_days, 7);
        let c = Config::parse("[s3]\nabort_incomplete_uploads_after_days = 0").unwrap();
        assert_eq!(c.s3.abort_incomplete_uploads_after_days, 0);
        c.validate().unwrap();
        assert!(Config::parse("[s3]\nabort_incomplete_uploads_after_days = -1").is_err());
    }

    #[test]
    fn the_virtual_host_domain_is_checked() {
        assert_eq!(Config::default().s3.domain, "");
        let c = Config::parse("[s3]\ndomain = \"s3.example.test\"").unwrap();
        assert_eq!(c.s3.domain, "s3.example.test");
        c.validate().unwrap();
        for bad in [
            "s3.example.test:8480",
            "127.0.0.1",
            "localhost",
            "S3.Example.test",
        ] {
            let c = Config::parse(&format!("[s3]\ndomain = {bad:?}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("s3.domain"), "{bad}: {e}");
        }
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
