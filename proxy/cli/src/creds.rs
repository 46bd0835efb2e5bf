//! systemd credentials (`LoadCredential=` / `LoadCredentialEncrypted=` in the
//! unit): when `$CREDENTIALS_DIRECTORY` is set, the secrets found there fill the
//! configuration fields that nothing else set. systemd makes the directory
//! readable by the service only and keeps it off disk (ramfs), so secrets need not
//! sit in the state directory or in the environment.
//!
//! | credential | fills |
//! |---|---|
//! | `master-key` | `key.key_file` (64 hex digits) |
//! | `passphrase` | `key.passphrase_file` |
//! | `tls-cert`, `tls-key` | `tls.cert_file`, `tls.key_file` |
//! | `metrics-token` | `metrics.token_file` |
//! | `backend-access-key`, `backend-secret-key` | `backend.access_key`, `backend.secret_key` |
//!
//! Environment variables (`ORAM_PROXY_MASTER_KEY`, `ORAM_PROXY_PASSPHRASE`) still
//! come first, as they do over every file.

use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::config::Config;

/// The names of the credentials read.
pub const NAMES: [&str; 7] = [
    "master-key",
    "passphrase",
    "tls-cert",
    "tls-key",
    "metrics-token",
    "backend-access-key",
    "backend-secret-key",
];

/// Applies `$CREDENTIALS_DIRECTORY` (if set) to `cfg`; returns the credentials used.
pub fn apply(cfg: &mut Config) -> Result<Vec<&'static str>, String> {
    match std::env::var_os("CREDENTIALS_DIRECTORY") {
        Some(d) if !d.is_empty() => apply_dir(cfg, Path::new(&d)),
        _ => Ok(Vec::new()),
    }
}

/// Applies the credentials in `dir` to `cfg` (see the module doc).
pub fn apply_dir(cfg: &mut Config, dir: &Path) -> Result<Vec<&'static str>, String> {
    let found = |name: &str| -> Option<PathBuf> {
        let p = dir.join(name);
        p.is_file().then_some(p)
    };
    let mut used = Vec::new();
    if cfg.key.key_file.is_none() && cfg.key.passphrase_file.is_none() {
        if let Some(p) = found("passphrase") {
            cfg.key.passphrase_file = Some(p);
            used.push("passphrase");
        } else if let Some(p) = found("master-key") {
            cfg.key.key_file = Some(p);
            used.push("master-key");
        }
    }
    if cfg.tls.cert_file.is_none() && cfg.tls.key_file.is_none() {
        match (found("tls-cert"), found("tls-key")) {
            (Some(c), Some(k)) => {
                cfg.tls.cert_file = Some(c);
                cfg.tls.key_file = Some(k);
                used.extend(["tls-cert", "tls-key"]);
            }
            (None, None) => {}
            _ => return Err("credentials tls-cert and tls-key go together".into()),
        }
    }
    if cfg.metrics.token_file.is_none() {
        if let Some(p) = found("metrics-token") {
            cfg.metrics.token_file = Some(p);
            used.push("metrics-token");
        }
    }
    if cfg.backend.access_key.is_none() && cfg.backend.secret_key.is_none() {
        match (found("backend-access-key"), found("backend-secret-key")) {
            (Some(a), Some(s)) => {
                let read = |p: &Path| -> Result<String, String> {
                    let t = Zeroizing::new(
                        std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
                    );
                    Ok(t.trim().to_string())
                };
                cfg.backend.access_key = Some(read(&a)?);
                cfg.backend.secret_key = Some(read(&s)?);
                used.extend(["backend-access-key", "backend-secret-key"]);
            }
            (None, None) => {}
            _ => {
                return Err(
                    "credentials backend-access-key and backend-secret-key go together".into(),
                )
            }
        }
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_fill_only_unset_fields() {
        let d = tempfile::tempdir().unwrap();
        for n in NAMES {
            std::fs::write(d.path().join(n), format!("{n}-value\n")).unwrap();
        }
        let mut cfg = Config::default();
        let used = apply_dir(&mut cfg, d.path()).unwrap();
        // A passphrase wins over a key file when both are given.
        assert_eq!(cfg.key.passphrase_file, Some(d.path().join("passphrase")));
        assert_eq!(cfg.key.key_file, None);
        assert_eq!(cfg.tls.cert_file, Some(d.path().join("tls-cert")));
        assert_eq!(cfg.tls.key_file, Some(d.path().join("tls-key")));
        assert_eq!(cfg.metrics.token_file, Some(d.path().join("metrics-token")));
        assert_eq!(
            cfg.backend.secret_key.as_deref(),
            Some("backend-secret-key-value")
        );
        assert_eq!(used.len(), 6, "{used:?}");

        std::fs::remove_file(d.path().join("passphrase")).unwrap();
        let mut cfg = Config::default();
        cfg.tls.cert_file = Some("/etc/c.pem".into());
        cfg.tls.key_file = Some("/etc/k.pem".into());
        cfg.backend.access_key = Some("configured".into());
        cfg.backend.secret_key = Some("configured-secret".into());
        let used = apply_dir(&mut cfg, d.path()).unwrap();
        assert_eq!(cfg.key.key_file, Some(d.path().join("master-key")));
        assert_eq!(cfg.tls.cert_file, Some("/etc/c.pem".into()));
        assert_eq!(cfg.backend.access_key.as_deref(), Some("configured"));
        assert_eq!(used, ["master-key", "metrics-token"]);

        std::fs::remove_file(d.path().join("tls-key")).unwrap();
        let mut cfg = Config::default();
        assert!(apply_dir(&mut cfg, d.path()).unwrap_err().contains("tls"));
    }
}
