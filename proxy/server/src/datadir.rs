//! The data directory: master key, volume parameters and generated credentials.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use oram_seal::{MasterKey, VolumeId};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::config::{Config, UserConfig};
use crate::ProxyError;

/// Version of the data directory layout.
pub const FORMAT: u32 = 1;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProxyError + '_ {
    move |source| ProxyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.trim();
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Writes a new file readable by its owner only; fails if it exists.
fn write_private(path: &Path, contents: &str) -> Result<(), ProxyError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.write_all(contents.as_bytes()).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Refuses a secret file that group or others may read.
fn check_private(path: &Path) -> Result<(), ProxyError> {
    let mode = fs::metadata(path).map_err(io(path))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(ProxyError::Key(format!(
            "{} has mode {:o}: group and others must have no access (chmod 600 {})",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}

/// Creates the data directory (mode 0700) if needed.
pub fn ensure_dir(dir: &Path) -> Result<(), ProxyError> {
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(io(dir))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
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

/// Loads `<dir>/master.key`, or creates it (0600) if `create` and the directory is new.
pub fn master_key(dir: &Path, create: bool) -> Result<(MasterKey, bool), ProxyError> {
    let path = dir.join("master.key");
    if path.exists() {
        check_private(&path)?;
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        let bytes = unhex::<32>(&text).ok_or_else(|| {
            ProxyError::Key(format!("{} does not hold 64 hex digits", path.display()))
        })?;
        return Ok((MasterKey::from_bytes(bytes), false));
    }
    if !create {
        return Err(ProxyError::Key(format!(
            "{} is missing, but the data directory already holds a volume: without its key the data cannot be read",
            path.display()
        )));
    }
    let key = MasterKey::generate();
    write_private(&path, &format!("{}\n", hex(key.expose_bytes())))?;
    Ok((key, true))
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
    /// Bucket size (Path ORAM).
    pub z: usize,
    /// Backend key prefix.
    pub prefix: String,
}

impl VolumeParams {
    fn from_config(c: &Config, volume_id: &VolumeId) -> Self {
        Self {
            format: FORMAT,
            volume_id: hex(&volume_id.0),
            engine: c.engine.kind.to_string(),
            block_size: c.engine.block_size,
            capacity_blocks: c.engine.capacity_blocks,
            z: c.engine.z,
            prefix: c.backend.prefix.clone(),
        }
    }

    /// The volume id.
    pub fn volume_id(&self) -> Result<VolumeId, ProxyError> {
        unhex::<16>(&self.volume_id)
            .map(VolumeId)
            .ok_or_else(|| ProxyError::Params("volume.toml: bad volume_id".into()))
    }
}

/// Whether the directory already holds a volume.
pub fn has_volume(dir: &Path) -> bool {
    dir.join("volume.toml").exists()
}

/// Loads `<dir>/volume.toml` and checks it against the configuration, or creates it.
pub fn volume(dir: &Path, cfg: &Config) -> Result<VolumeParams, ProxyError> {
    let path = dir.join("volume.toml");
    if !path.exists() {
        let p = VolumeParams::from_config(cfg, &VolumeId::random());
        let text = toml::to_string(&p).map_err(|e| ProxyError::Params(e.to_string()))?;
        write_private(&path, &text)?;
        return Ok(p);
    }
    let text = fs::read_to_string(&path).map_err(io(&path))?;
    let p: VolumeParams = toml::from_str(&text)
        .map_err(|e| ProxyError::Params(format!("{}: {e}", path.display())))?;
    if p.format != FORMAT {
        return Err(ProxyError::Params(format!(
            "{} has format {}, this build reads format {FORMAT}",
            dir.display(),
            p.format
        )));
    }
    let want = VolumeParams::from_config(cfg, &p.volume_id()?);
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
    if p.z != want.z {
        diffs.push(format!("z {} (configured: {})", p.z, want.z));
    }
    if p.prefix != want.prefix {
        diffs.push(format!("prefix {} (configured: {})", p.prefix, want.prefix));
    }
    if !diffs.is_empty() {
        return Err(ProxyError::Params(format!(
            "data directory {} was created with other parameters: {}",
            dir.display(),
            diffs.join(", ")
        )));
    }
    Ok(p)
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
    fn key_is_created_private_and_reloaded() {
        let d = tempfile::tempdir().unwrap();
        let (k1, new) = master_key(d.path(), true).unwrap();
        assert!(new);
        let mode = fs::metadata(d.path().join("master.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (k2, new) = master_key(d.path(), true).unwrap();
        assert!(!new);
        assert_eq!(k1.expose_bytes(), k2.expose_bytes());
        fs::set_permissions(
            d.path().join("master.key"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(master_key(d.path(), true)
            .unwrap_err()
            .to_string()
            .contains("chmod 600"));
        let e = tempfile::tempdir().unwrap();
        assert!(master_key(e.path(), false)
            .unwrap_err()
            .to_string()
            .contains("missing"));
    }

    #[test]
    fn volume_parameters_are_fixed() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        let p = volume(d.path(), &cfg).unwrap();
        assert_eq!(volume(d.path(), &cfg).unwrap(), p);
        cfg.engine.block_size = 8192;
        let err = volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("block_size 4096 (configured: 8192)"), "{err}");
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
