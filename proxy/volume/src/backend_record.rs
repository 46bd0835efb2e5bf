//! The backend a data directory belongs to, recorded in `<data_dir>/backend.toml`
//! (0600): the back-end's kind, its location (fs: the directory; s3: bucket, key
//! prefix, endpoint and region) and the volume's prefix — never credentials.
//!
//! A command given no backend (no `--backend`, no `[backend]` location) uses the
//! recorded one ([`apply_recorded`]); a backend given explicitly that differs from
//! the record is refused before the backend is touched ([`check`]). The record is
//! written by `init`, `recover` and every successful open of a volume that has
//! none yet ([`record`]), so a data directory of an earlier version gains it at
//! its next start.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{BackendConfig, BackendKind, VolumeConfig};
use crate::fsutil::{io, write_private};
use crate::VolumeError;

/// The file of the record in the data directory.
pub fn record_path(dir: &Path) -> PathBuf {
    dir.join("backend.toml")
}

/// Where a volume's backend is: what `backend.toml` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendRecord {
    kind: BackendKind,
    /// The volume's prefix on the backend.
    prefix: String,
    /// fs: the directory, absolute (`None`: `<data_dir>/store`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    /// s3: bucket.
    #[serde(default)]
    bucket: String,
    /// s3: key prefix inside the bucket.
    #[serde(default)]
    key_prefix: String,
    /// s3: endpoint (`None`: AWS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    /// s3: region.
    #[serde(default)]
    region: String,
}

impl BackendRecord {
    fn of(cfg: &VolumeConfig) -> Self {
        let b = &cfg.backend;
        match b.kind {
            BackendKind::Fs => {
                let default = cfg.data_dir.join("store");
                let path = b
                    .path
                    .as_ref()
                    .filter(|p| absolute(p) != absolute(&default))
                    .map(|p| absolute(p));
                Self {
                    kind: b.kind,
                    prefix: b.prefix.clone(),
                    path,
                    bucket: String::new(),
                    key_prefix: String::new(),
                    endpoint: None,
                    region: String::new(),
                }
            }
            BackendKind::S3 => Self {
                kind: b.kind,
                prefix: b.prefix.clone(),
                path: None,
                bucket: b.bucket.clone(),
                key_prefix: b.key_prefix.clone(),
                endpoint: b.endpoint.clone(),
                region: b.region.clone(),
            },
        }
    }

    /// The record as a URL an operator recognises (`--backend` syntax, with the
    /// endpoint and the prefix).
    fn describe(&self, data_dir: &Path) -> String {
        match self.kind {
            BackendKind::Fs => format!(
                "file://{} (prefix {:?})",
                self.path
                    .clone()
                    .unwrap_or_else(|| data_dir.join("store"))
                    .display(),
                self.prefix
            ),
            BackendKind::S3 => format!(
                "s3://{}/{} at {} ({}, prefix {:?})",
                self.bucket,
                self.key_prefix,
                self.endpoint.as_deref().unwrap_or("AWS"),
                self.region,
                self.prefix
            ),
        }
    }

    fn apply(&self, b: &mut BackendConfig) {
        b.kind = self.kind;
        // A prefix the configuration names is kept (and checked against the
        // record when the volume opens).
        if b.prefix == BackendConfig::default().prefix {
            b.prefix = self.prefix.clone();
        }
        b.path = self.path.clone();
        b.bucket = self.bucket.clone();
        b.key_prefix = self.key_prefix.clone();
        if self.kind == BackendKind::S3 {
            b.endpoint = self.endpoint.clone();
            b.region = self.region.clone();
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn read(dir: &Path) -> Result<Option<BackendRecord>, VolumeError> {
    let path = record_path(dir);
    if !path.exists() {
        return Ok(None);
    }
    let text = fs::read_to_string(&path).map_err(io(&path))?;
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| VolumeError::Params(format!("{}: {e}", path.display())))
}

/// Whether the configuration names a backend's location (a `--backend` URL, an
/// s3 `[backend]`, or an fs `path`); otherwise the recorded one applies.
pub fn names_backend(b: &BackendConfig) -> bool {
    b.kind == BackendKind::S3 || b.path.is_some()
}

/// When the configuration names no backend location and the data directory
/// records one, takes the recorded backend (kind, location, and the prefix
/// unless the configuration names one; the credentials and tuning stay the
/// configuration's). Returns whether it did.
pub fn apply_recorded(data_dir: &Path, backend: &mut BackendConfig) -> Result<bool, VolumeError> {
    if names_backend(backend) {
        return Ok(false);
    }
    match read(data_dir)? {
        Some(r) => {
            r.apply(backend);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Refuses a configuration whose backend differs from the one the data
/// directory records (nothing is checked without a record).
pub fn check(cfg: &VolumeConfig) -> Result<(), VolumeError> {
    let Some(recorded) = read(&cfg.data_dir)? else {
        return Ok(());
    };
    let given = BackendRecord::of(cfg);
    if given != recorded {
        return Err(VolumeError::Params(format!(
            "data directory {} belongs to the backend {}, not {}: omit --backend (and \
             [backend]'s location) to use the recorded one; a data directory never moves \
             to another backend (for another copy of the volume, recover a new data \
             directory from it)",
            cfg.data_dir.display(),
            recorded.describe(&cfg.data_dir),
            given.describe(&cfg.data_dir)
        )));
    }
    Ok(())
}

/// Records the configuration's backend in the data directory if it records none.
pub fn record(cfg: &VolumeConfig) -> Result<(), VolumeError> {
    if record_path(&cfg.data_dir).exists() {
        return Ok(());
    }
    let text = toml::to_string(&BackendRecord::of(cfg))
        .map_err(|e| VolumeError::Config(format!("backend record: {e}")))?;
    write_private(
        &record_path(&cfg.data_dir),
        &format!(
            "# The backend of this data directory (written by oram-proxy; no credentials).\n\
             {text}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> VolumeConfig {
        VolumeConfig {
            data_dir: dir.to_path_buf(),
            ..VolumeConfig::default()
        }
    }

    #[test]
    fn a_command_without_a_backend_uses_the_recorded_one() {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(d.path());
        c.backend.set_url("s3://bkt/some/prefix").unwrap();
        c.backend.endpoint = Some("http://127.0.0.1:9000".into());
        c.backend.region = "eu-north-1".into();
        c.backend.secret_key = Some("do-not-record".into());
        c.backend.access_key = Some("ak".into());
        record(&c).unwrap();
        let text = fs::read_to_string(record_path(d.path())).unwrap();
        assert!(
            !text.contains("do-not-record") && !text.contains("ak\""),
            "{text}"
        );
        let mut plain = cfg(d.path());
        assert!(apply_recorded(d.path(), &mut plain.backend).unwrap());
        assert_eq!(plain.backend.kind, BackendKind::S3);
        assert_eq!(plain.backend.bucket, "bkt");
        assert_eq!(plain.backend.key_prefix, "some/prefix");
        assert_eq!(plain.backend.region, "eu-north-1");
        check(&plain).unwrap();
    }

    #[test]
    fn a_backend_other_than_the_recorded_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(d.path());
        c.backend
            .set_url(&format!("file://{}/real", d.path().display()))
            .unwrap();
        record(&c).unwrap();
        // The default store inside the data directory is another backend.
        let mut plain = cfg(d.path());
        check(&plain).unwrap_err();
        apply_recorded(d.path(), &mut plain.backend).unwrap();
        check(&plain).unwrap();
        let mut other = cfg(d.path());
        other.backend.set_url("file:///elsewhere").unwrap();
        let err = check(&other).unwrap_err().to_string();
        assert!(
            err.contains("belongs to the backend") && err.contains("/real"),
            "{err}"
        );
        // No record (a data directory of an earlier version): nothing is refused.
        let e = tempfile::tempdir().unwrap();
        check(&cfg(e.path())).unwrap();
        let mut none = cfg(e.path());
        assert!(!apply_recorded(e.path(), &mut none.backend).unwrap());
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        fs::write(record_path(d.path()), "kind = 7\n").unwrap();
        assert!(check(&cfg(d.path())).is_err());
        assert!(apply_recorded(d.path(), &mut cfg(d.path()).backend).is_err());
    }
}
