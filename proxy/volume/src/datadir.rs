//! The data directory: its mode, its lock, the volume's parameters
//! (`volume.toml`) and the state database (`state.redb`). The credentials file
//! is [`crate::users`]'s.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::VolumeConfig;
use crate::engines::EngineConfig;
use crate::fsutil::{io, write_private};
use crate::params::VolumeParams;
pub use crate::params::FORMAT;
use crate::VolumeError;

/// Creates the data directory (mode 0700) if needed; refuses an existing one that
/// group or others may enter (it holds the key, the credentials and the plaintext
/// trusted state).
pub fn ensure_dir(dir: &Path) -> Result<(), VolumeError> {
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(io(dir))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    let mode = fs::metadata(dir).map_err(io(dir))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(VolumeError::Key(format!(
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
pub fn lock(dir: &Path) -> Result<fs::File, VolumeError> {
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
        Err(fs::TryLockError::WouldBlock) => Err(VolumeError::Params(format!(
            "data directory {} is in use by another oram-proxy",
            dir.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(io(&path)(e)),
    }
}

/// Whether the directory already holds a volume.
pub fn has_volume(dir: &Path) -> bool {
    dir.join("volume.toml").exists()
}

/// When `data_dir` holds a volume, takes its recorded parameters for the
/// `[engine]` keys the configuration does not name
/// ([`VolumeParams::adopt_into`]); a directory without a volume is left to the
/// configuration (`init` creates it from that).
pub fn adopt_recorded(data_dir: &Path, engine: &mut EngineConfig) -> Result<(), VolumeError> {
    if !has_volume(data_dir) {
        return Ok(());
    }
    read_volume(data_dir)?.adopt_into(engine)
}

/// Reads `<dir>/volume.toml`, unchecked.
pub fn read_volume(dir: &Path) -> Result<VolumeParams, VolumeError> {
    let path = dir.join("volume.toml");
    let text = fs::read_to_string(&path).map_err(io(&path))?;
    VolumeParams::from_toml(&text, &path.display().to_string())
}

/// Loads `<dir>/volume.toml` and checks it against the configuration.
pub fn load_volume(dir: &Path, cfg: &VolumeConfig) -> Result<VolumeParams, VolumeError> {
    let p = read_volume(dir)?;
    p.check_config(cfg, dir)?;
    Ok(p)
}

/// Writes `<dir>/volume.toml` (0600) for a new volume.
pub fn save_volume(dir: &Path, p: &VolumeParams) -> Result<(), VolumeError> {
    write_private(&dir.join("volume.toml"), &p.to_toml())
}

/// The state database of the data directory.
pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.redb")
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

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
}
