//! The data directory: volume parameters, generated credentials, the lock, and the
//! state database (`state.redb`).

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use oram_seal::VolumeId;
use rand::RngCore;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::config::{Config, UserConfig};
use crate::keys::{check_private, hex, io, unhex, write_private, Kdf};
use crate::ProxyError;

/// Version of the data directory layout (2: durable state database, key check;
/// 3: sealed objects bind space and generation, intent records, the engine's
/// data-placing parameters recorded).
pub const FORMAT: u32 = 3;

/// What an operator can do with a data directory of an older format.
const OLDER_FORMAT_ADVICE: &str = "keep serving it with the oram-proxy release that \
created it, or move its objects: start this release on a new data directory and backend \
prefix, and copy the buckets across through the two proxies' S3 APIs (for example \
`rclone sync old:bucket new:bucket`); see README.md, \"Upgrading\"";

/// Creates the data directory (mode 0700) if needed; refuses an existing one that
/// group or others may enter (it holds the key, the credentials and the plaintext
/// trusted state).
pub fn ensure_dir(dir: &Path) -> Result<(), ProxyError> {
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(io(dir))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    let mode = fs::metadata(dir).map_err(io(dir))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(ProxyError::Key(format!(
            "data directory {} has mode {:o}: group and others must have no access \
             (chmod 700 {})",
            dir.display(),
            mode & 0o777,
            dir.display()
        )));
    }
    Ok(())
}

/// Takes the exclusive lock of the data directory (`<dir>/lock`), held as long as
/// the returned file is open; fails if another process holds it.
pub fn lock(dir: &Path) -> Result<fs::File, ProxyError> {
    let path = dir.join("lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io(&path))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(fs::TryLockError::WouldBlock) => Err(ProxyError::Params(format!(
            "data directory {} is in use by another oram-proxy",
            dir.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(io(&path)(e)),
    }
}

/// The parameters a volume was created with; they cannot change afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeParams {
    /// Data directory format.
    pub format: u32,
    /// Random id bound into every sealed object.
    pub volume_id: String,
    /// Engine kind.
    pub engine: String,
    /// Bytes per block.
    pub block_size: usize,
    /// Logical blocks.
    pub capacity_blocks: u64,
    /// Backend key prefix.
    pub prefix: String,
    /// Size of a checkpoint's plaintext when the volume was created (informative:
    /// a start with parameters that change it warns, since the provider sees it).
    pub checkpoint_bytes: u64,
    /// Where the key came from when the volume was created (`file`, `env`,
    /// `passphrase`); informative.
    pub key_source: String,
    /// Public check value of the master key (see `keys`).
    pub key_check: String,
    /// The engine's parameters that decide where data lives (its crate names
    /// them: Z, S, A, leaves, cached levels, ...); a start with other values is
    /// refused.
    pub fixed: BTreeMap<String, String>,
    /// Argon2id parameters, when the key is derived from a passphrase.
    pub kdf: Option<Kdf>,
    /// The backend header's MAC under the master key (see `meta_auth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl VolumeParams {
    /// The parameters of a new volume.
    pub fn new(
        c: &Config,
        volume_id: &VolumeId,
        key_source: &str,
        key_check: String,
        kdf: Option<Kdf>,
    ) -> Self {
        Self {
            format: FORMAT,
            volume_id: hex(&volume_id.0),
            engine: c.engine.kind.name().to_string(),
            block_size: c.engine.block_size,
            capacity_blocks: c.engine.capacity_blocks,
            prefix: c.backend.prefix.clone(),
            checkpoint_bytes: crate::volume::checkpoint_size(c),
            key_source: key_source.into(),
            key_check,
            fixed: c.engine.fixed(&c.backend.prefix),
            kdf,
            mac: None,
        }
    }

    /// The parameters as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("parameters serialise")
    }

    /// Parses parameters written by [`VolumeParams::to_toml`]; refuses another format.
    pub fn from_toml(text: &str, whence: &str) -> Result<Self, ProxyError> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let f: Format =
            toml::from_str(text).map_err(|e| ProxyError::Params(format!("{whence}: {e}")))?;
        if f.format != FORMAT {
            let advice = match f.format {
                1 => "format 1 kept its state in memory: nothing in it survived a restart; move \
                      the directory away"
                    .to_string(),
                f if f < FORMAT => format!(
                    "it was created by an older oram-proxy, whose objects this release cannot \
                     open; {OLDER_FORMAT_ADVICE}"
                ),
                _ => "it was created by a newer oram-proxy; use that release".to_string(),
            };
            return Err(ProxyError::Params(format!(
                "{whence} has format {}, this build reads format {FORMAT}: {advice}",
                f.format
            )));
        }
        toml::from_str(text).map_err(|e| ProxyError::Params(format!("{whence}: {e}")))
    }

    /// Refuses a configuration that differs from these parameters.
    pub fn check_config(&self, cfg: &Config, dir: &Path) -> Result<(), ProxyError> {
        let want = Self::new(cfg, &self.volume_id()?, "", String::new(), None);
        let p = self;
        let mut diffs = Vec::new();
        if p.engine != want.engine {
            diffs.push(format!("engine {} (configured: {})", p.engine, want.engine));
        }
        if p.block_size != want.block_size {
            diffs.push(format!(
                "block_size {} (configured: {})",
                p.block_size, want.block_size
            ));
        }
        if p.capacity_blocks != want.capacity_blocks {
            diffs.push(format!(
                "capacity_blocks {} (configured: {})",
                p.capacity_blocks, want.capacity_blocks
            ));
        }
        for name in p
            .fixed
            .keys()
            .chain(want.fixed.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let (had, now) = (p.fixed.get(name), want.fixed.get(name));
            if had != now {
                diffs.push(format!(
                    "{name} {} (configured: {})",
                    had.map_or("unset", |v| v.as_str()),
                    now.map_or("unset", |v| v.as_str())
                ));
            }
        }
        if p.prefix != want.prefix {
            diffs.push(format!("prefix {} (configured: {})", p.prefix, want.prefix));
        }
        if !diffs.is_empty() {
            return Err(ProxyError::Params(format!(
                "data directory {} was created with other parameters: {}. These decide where \
                 the data lives (on the backend or in the local state, in which object): set \
                 them back to the recorded values; to change them, copy the data to a new \
                 volume",
                dir.display(),
                diffs.join(", ")
            )));
        }
        Ok(())
    }

    /// What a start with `cfg` should warn about: parameters that may change but
    /// change what the provider sees (the checkpoint's size), and configuration
    /// keys ignored.
    pub fn notices(&self, cfg: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let now = crate::volume::checkpoint_size(cfg);
        if now != self.checkpoint_bytes {
            out.push(format!(
                "checkpoints are now padded to {now} bytes instead of {}: a setting that sizes \
                 the trusted state changed since the volume was created (stash_bound, max_batch, \
                 round_mib, the engine's cache or partitions, state.checkpoint_index_bytes), or this \
                 version of oram-proxy bounds that state differently; the backend sees the new size",
                self.checkpoint_bytes
            ));
        }
        for k in &cfg.engine.ignored {
            out.push(format!(
                "[engine] {k} does not apply to engine {:?}: ignored",
                cfg.engine.kind.name()
            ));
        }
        out
    }

    /// Takes these parameters for every `[engine]` key `cfg` does not name (see
    /// [`crate::engines::EngineConfig::adopt`]): a volume keeps its shape when defaults
    /// change, and a configuration needs to name only what it wants to differ.
    pub fn adopt_into(&self, cfg: &mut Config) -> Result<(), ProxyError> {
        cfg.engine
            .adopt(
                &self.engine,
                self.block_size,
                self.capacity_blocks,
                &self.fixed,
                &self.prefix,
            )
            .map_err(|e| ProxyError::Params(format!("volume.toml: {e}")))
    }

    /// The volume id.
    pub fn volume_id(&self) -> Result<VolumeId, ProxyError> {
        unhex::<16>(&self.volume_id)
            .map(|b| VolumeId(*b))
            .ok_or_else(|| ProxyError::Params("volume.toml: bad volume_id".into()))
    }
}

/// Whether the directory already holds a volume.
pub fn has_volume(dir: &Path) -> bool {
    dir.join("volume.toml").exists()
}

/// When `cfg.data_dir` holds a volume, takes its recorded parameters for the
/// `[engine]` keys the configuration does not name
/// ([`VolumeParams::adopt_into`]); a directory without a volume is left to the
/// configuration (`init` creates it from that).
pub fn adopt_recorded(cfg: &mut Config) -> Result<(), ProxyError> {
    if !has_volume(&cfg.data_dir) {
        return Ok(());
    }
    let path = cfg.data_dir.join("volume.toml");
    let text = fs::read_to_string(&path).map_err(io(&path))?;
    VolumeParams::from_toml(&text, &path.display().to_string())?.adopt_into(cfg)
}

/// Loads `<dir>/volume.toml` and checks it against the configuration.
pub fn load_volume(dir: &Path, cfg: &Config) -> Result<VolumeParams, ProxyError> {
    let path = dir.join("volume.toml");
    let text = fs::read_to_string(&path).map_err(io(&path))?;
    let p = VolumeParams::from_toml(&text, &path.display().to_string())?;
    p.check_config(cfg, dir)?;
    Ok(p)
}

/// Writes `<dir>/volume.toml` (0600) for a new volume.
pub fn save_volume(dir: &Path, p: &VolumeParams) -> Result<(), ProxyError> {
    write_private(&dir.join("volume.toml"), &p.to_toml())
}

/// The state database of the data directory.
pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.redb")
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    users: Vec<UserConfig>,
}

/// The users to serve, and whether one was generated just now (to print it once).
///
/// Order of precedence: `ORAM_PROXY_ROOT_USER`/`ORAM_PROXY_ROOT_PASSWORD` (first
/// user), users from the configuration, `<dir>/credentials.toml`, else a generated
/// user saved there (0600).
pub fn users(
    dir: &Path,
    cfg: &Config,
    root: Option<UserConfig>,
) -> Result<(Vec<UserConfig>, bool), ProxyError> {
    let mut users: Vec<UserConfig> = root.into_iter().collect();
    users.extend(cfg.users.iter().cloned());
    if !users.is_empty() {
        for u in &users {
            u.validate().map_err(ProxyError::Config)?;
        }
        return Ok((users, false));
    }
    let path = credentials_path(dir);
    if path.exists() {
        check_private(&path)?;
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        let c: Credentials = toml::from_str(&text)
            .map_err(|e| ProxyError::Config(format!("{}: {e}", path.display())))?;
        if c.users.is_empty() {
            return Err(ProxyError::Config(format!(
                "{} lists no user",
                path.display()
            )));
        }
        for u in &c.users {
            u.validate()
                .map_err(|e| ProxyError::Config(format!("{}: {e}", path.display())))?;
        }
        return Ok((c.users, false));
    }
    let mut rng = rand::thread_rng();
    let mut ak = [0u8; 8];
    let mut sk = [0u8; 20];
    rng.fill_bytes(&mut ak);
    rng.fill_bytes(&mut sk);
    let user = UserConfig {
        access_key: format!("oram{}", hex(&ak)),
        secret_key: hex(&sk),
    };
    let c = Credentials { users: vec![user] };
    let text = toml::to_string(&c).map_err(|e| ProxyError::Config(e.to_string()))?;
    write_private(&path, &text)?;
    Ok((c.users, true))
}

/// Where generated credentials are kept.
pub fn credentials_path(dir: &Path) -> PathBuf {
    dir.join("credentials.toml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_parameters_are_fixed() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        let p = VolumeParams::new(&cfg, &VolumeId::random(), "file", "ab".repeat(16), None);
        save_volume(d.path(), &p).unwrap();
        assert_eq!(load_volume(d.path(), &cfg).unwrap(), p);
        cfg.engine.block_size = 8192;
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("block_size 16384 (configured: 8192)"), "{err}");
        let old = "format = 1\nvolume_id = \"00\"\n";
        let err = VolumeParams::from_toml(old, "x").unwrap_err().to_string();
        assert!(err.contains("format 1"), "{err}");
        let old = "format = 2\nvolume_id = \"00\"\n";
        let err = VolumeParams::from_toml(old, "x").unwrap_err().to_string();
        assert!(
            err.contains("older oram-proxy") && err.contains("rclone"),
            "{err}"
        );
    }

    /// The tree-top cache keeps buckets in the local state instead of the
    /// backend: a start with another depth would look for them in the wrong
    /// place (and read blocks as missing). Refused, naming the parameter.
    #[test]
    fn a_changed_cache_depth_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        let p = VolumeParams::new(&cfg, &VolumeId::random(), "file", "ab".repeat(16), None);
        // The default: 16 KiB blocks, 1 GiB, a 16 MiB tree-top cache = 8 levels.
        assert_eq!(p.fixed.get("cached_levels").map(String::as_str), Some("8"));
        save_volume(d.path(), &p).unwrap();
        let crate::config::Engine::Path(s) = &mut cfg.engine.kind else {
            unreachable!()
        };
        s.cached_levels = Some(12);
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("cached_levels 8 (configured: 12)"), "{err}");
        // So is another cache budget that gives another depth, unless the
        // configuration leaves the depth to the volume (below).
        let crate::config::Engine::Path(s) = &mut cfg.engine.kind else {
            unreachable!()
        };
        (s.cached_levels, s.tree_cache_mib) = (None, 64);
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("cached_levels 8 (configured: 10)"), "{err}");
        // A parameter that only changes the checkpoint's size is a warning.
        let mut cfg = Config::default();
        let crate::config::Engine::Path(s) = &mut cfg.engine.kind else {
            unreachable!()
        };
        s.stash_bound = 200;
        assert!(load_volume(d.path(), &cfg).is_ok());
        assert!(p.notices(&cfg)[0].contains("padded"));
        // Ring ORAM records its own parameters.
        let mut cfg = Config::default();
        cfg.engine.set_kind("ring").unwrap();
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(
            err.contains("engine path (configured: ring)") && err.contains("s unset"),
            "{err}"
        );
    }

    /// A volume created with other values than today's defaults starts with a
    /// configuration that names none of them; named values must still match.
    #[test]
    fn unnamed_parameters_are_taken_from_the_volume() {
        let d = tempfile::tempdir().unwrap();
        let at = |dir: &Path| Config {
            data_dir: dir.to_path_buf(),
            ..Config::default()
        };
        let mut made = at(d.path());
        made.engine.block_size = 4096;
        made.engine.capacity_blocks = 4096;
        let crate::config::Engine::Path(s) = &mut made.engine.kind else {
            unreachable!()
        };
        s.cached_levels = Some(6);
        let p = VolumeParams::new(&made, &VolumeId::random(), "file", "ab".repeat(16), None);
        save_volume(d.path(), &p).unwrap();
        let mut cfg = at(d.path());
        assert!(load_volume(d.path(), &cfg).is_err(), "defaults differ");
        adopt_recorded(&mut cfg).unwrap();
        assert_eq!(load_volume(d.path(), &cfg).unwrap(), p);
        assert_eq!(cfg.engine.block_size, 4096);
        let taken = cfg.engine.adopted.join(", ");
        assert!(
            taken.contains("block_size 4096 (default: 16384)")
                && taken.contains("cached_levels 6 (default: 8)"),
            "{taken}"
        );
        // A named value is not replaced: the start is refused, naming it.
        let mut cfg = Config {
            engine: toml::from_str("block_size = 16384").unwrap(),
            ..at(d.path())
        };
        adopt_recorded(&mut cfg).unwrap();
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("block_size 4096 (configured: 16384)"), "{err}");
        // A volume made with 4 KiB blocks and the old default depth (10 levels)
        // starts with today's defaults and keeps its depth: the cache budget only
        // sizes a new volume's cache.
        let old = tempfile::tempdir().unwrap();
        let mut made = at(old.path());
        (made.engine.block_size, made.engine.capacity_blocks) = (4096, 262_144);
        if let crate::config::Engine::Path(s) = &mut made.engine.kind {
            s.cached_levels = Some(10);
        }
        let p = VolumeParams::new(&made, &VolumeId::random(), "file", "ab".repeat(16), None);
        save_volume(old.path(), &p).unwrap();
        let mut cfg = Config {
            engine: toml::from_str("tree_cache_mib = 1").unwrap(),
            ..at(old.path())
        };
        adopt_recorded(&mut cfg).unwrap();
        assert_eq!(load_volume(old.path(), &cfg).unwrap(), p);
        assert_eq!(cfg.engine.fixed("vol0")["cached_levels"], "10");
        // A directory without a volume keeps the configuration as it is.
        let empty = tempfile::tempdir().unwrap();
        let mut cfg = at(empty.path());
        adopt_recorded(&mut cfg).unwrap();
        assert_eq!(cfg.engine, Config::default().engine);
    }

    /// An ObliviStore volume records its partitions: a configuration that names
    /// nothing takes the engine and them; other named partitions are refused.
    #[test]
    fn an_oblivistore_volume_keeps_its_partitions() {
        let d = tempfile::tempdir().unwrap();
        let at = |dir: &Path, engine: &str| Config {
            data_dir: dir.to_path_buf(),
            engine: toml::from_str(engine).unwrap(),
            ..Config::default()
        };
        let made = at(
            d.path(),
            "kind = 'oblivistore'\noblivistore_partitions = 16\ncapacity_blocks = 4096",
        );
        let p = VolumeParams::new(&made, &VolumeId::random(), "file", "ab".repeat(16), None);
        assert_eq!(p.engine, "oblivistore");
        assert_eq!(p.fixed.get("partitions").map(String::as_str), Some("16"));
        save_volume(d.path(), &p).unwrap();
        let mut cfg = at(d.path(), "");
        adopt_recorded(&mut cfg).unwrap();
        assert_eq!(load_volume(d.path(), &cfg).unwrap(), p);
        assert_eq!(cfg.engine.kind.name(), "oblivistore");
        let mut cfg = at(d.path(), "kind = 'oblivistore'\noblivistore_partitions = 8");
        adopt_recorded(&mut cfg).unwrap();
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("partitions 16 (configured: 8)"), "{err}");
    }

    #[test]
    fn data_directory_must_be_private() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("data");
        ensure_dir(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("chmod 700"), "{err}");
    }

    #[test]
    fn one_process_per_data_directory() {
        let d = tempfile::tempdir().unwrap();
        let held = lock(d.path()).unwrap();
        assert!(lock(d.path()).unwrap_err().to_string().contains("in use"));
        drop(held);
        lock(d.path()).unwrap();
    }

    #[test]
    fn users_generated_once_or_taken_from_env_and_config() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let (u1, generated) = users(d.path(), &cfg, None).unwrap();
        assert!(generated);
        let (u2, generated) = users(d.path(), &cfg, None).unwrap();
        assert!(!generated);
        assert_eq!(u1[0].secret_key, u2[0].secret_key);
        let root = UserConfig {
            access_key: "root".into(),
            secret_key: "rootsecret".into(),
        };
        let (u3, _) = users(d.path(), &cfg, Some(root)).unwrap();
        assert_eq!(u3.len(), 1);
        assert_eq!(u3[0].access_key, "root");
        let weak = UserConfig {
            access_key: "root".into(),
            secret_key: "x".into(),
        };
        assert!(users(d.path(), &cfg, Some(weak)).is_err());
        fs::write(credentials_path(d.path()), "users = []\n").unwrap();
        assert!(users(d.path(), &cfg, None)
            .unwrap_err()
            .to_string()
            .contains("no user"));
    }
}
