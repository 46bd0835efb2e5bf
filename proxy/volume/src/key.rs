//! Where the master key comes from, and how a wrong one is refused at start-up.
//!
//! Sources, first match wins:
//! 1. `ORAM_PROXY_MASTER_KEY`: 64 hex digits;
//! 2. a passphrase (`ORAM_PROXY_PASSPHRASE`, or the file named by
//!    `key.passphrase_file` / `--passphrase-file`), stretched with Argon2id; the salt
//!    and cost parameters are part of the volume's parameters;
//! 3. a key file (`key.key_file` / `--key-file`, default `<data_dir>/master.key`),
//!    64 hex digits, mode 0600 (looser modes are refused). Created on first start
//!    when no other source is given.
//!
//! Every volume records a *key check*: 16 bytes derived from the master key with
//! HKDF under a purpose of its own. It reveals nothing about the key (and, for a
//! passphrase, costs a full Argon2id evaluation per guess, like any sealed object),
//! and a start with another key fails at once instead of reading garbage later.

use std::fs;
use std::path::{Path, PathBuf};

use oram_seal::MasterKey;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::config::KeyConfig;
use crate::fsutil::{check_private, hex_secret, io, unhex, unhex_vec, write_private};
use crate::VolumeError;

/// Environment variable holding the master key in hex.
pub const ENV_KEY: &str = "ORAM_PROXY_MASTER_KEY";
/// Environment variable holding the passphrase.
pub const ENV_PASSPHRASE: &str = "ORAM_PROXY_PASSPHRASE";

/// The key and passphrase taken out of the environment by [`take_env_secrets`].
static TAKEN: std::sync::Mutex<Option<EnvSecrets>> = std::sync::Mutex::new(None);

struct EnvSecrets {
    key: Option<Zeroizing<String>>,
    passphrase: Option<Zeroizing<String>>,
}

/// Moves `ORAM_PROXY_MASTER_KEY` and `ORAM_PROXY_PASSPHRASE` out of the process
/// environment (where `/proc/<pid>/environ` and every child process would see
/// them) into zeroized memory, for [`KeySource::resolve`]. The binary calls it
/// first thing, while the process is still single-threaded.
pub fn take_env_secrets() {
    let take = |name: &str| {
        let v = std::env::var_os(name)?;
        std::env::remove_var(name);
        Some(Zeroizing::new(v.into_string().unwrap_or_default()))
    };
    let secrets = EnvSecrets {
        key: take(ENV_KEY),
        passphrase: take(ENV_PASSPHRASE),
    };
    *TAKEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(secrets);
}

/// The value of a secret variable: taken from the environment earlier, or still
/// in it (library use without [`take_env_secrets`]).
fn env_secret(name: &str) -> Option<Zeroizing<String>> {
    let taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    match taken.as_ref() {
        Some(t) if name == ENV_KEY => t.key.clone(),
        Some(t) if name == ENV_PASSPHRASE => t.passphrase.clone(),
        _ => std::env::var(name).ok().map(Zeroizing::new),
    }
}

/// Argon2id parameters and salt of a passphrase-derived key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kdf {
    /// Random salt, hex.
    pub salt: String,
    /// Memory in KiB.
    pub m_kib: u32,
    /// Passes.
    pub t: u32,
    /// Lanes.
    pub p: u32,
}

impl Kdf {
    /// New parameters with a fresh salt: 64 MiB, 3 passes, 1 lane (about half a
    /// second on one core).
    pub fn generate() -> Self {
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        Self {
            salt: hex::encode(salt),
            m_kib: 64 * 1024,
            t: 3,
            p: 1,
        }
    }

    /// Derives the master key from `passphrase`.
    pub fn derive(&self, passphrase: &[u8]) -> Result<MasterKey, VolumeError> {
        self.check_bounds()?;
        let salt = unhex_vec(&self.salt)
            .ok_or_else(|| VolumeError::Key("volume parameters: bad passphrase salt".into()))?;
        let params = argon2::Params::new(self.m_kib, self.t, self.p, Some(32))
            .map_err(|e| VolumeError::Key(format!("Argon2id parameters: {e}")))?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = Zeroizing::new([0u8; 32]);
        argon
            .hash_password_into(passphrase, &salt, out.as_mut())
            .map_err(|e| VolumeError::Key(format!("Argon2id: {e}")))?;
        Ok(MasterKey::from_bytes(*out))
    }

    /// Refuses costs outside what this build ever creates, give or take: at most
    /// [`MAX_KDF_M_KIB`] of memory, [`MAX_KDF_T`] passes and [`MAX_KDF_P`] lanes, and
    /// a salt of 8 to 64 bytes. Checked before any derivation, because `recover`
    /// reads them from the backend, whose provider is not trusted.
    pub fn check_bounds(&self) -> Result<(), VolumeError> {
        let salt_len = self.salt.trim().len() / 2;
        if self.m_kib == 0
            || self.m_kib > MAX_KDF_M_KIB
            || self.t == 0
            || self.t > MAX_KDF_T
            || self.p == 0
            || self.p > MAX_KDF_P
            || !(8..=64).contains(&salt_len)
        {
            return Err(VolumeError::Key(format!(
                "Argon2id parameters out of bounds (m = {} KiB, t = {}, p = {}, salt {} bytes; \
                 at most {MAX_KDF_M_KIB} KiB, {MAX_KDF_T} passes, {MAX_KDF_P} lanes): \
                 refusing to derive",
                self.m_kib, self.t, self.p, salt_len
            )));
        }
        Ok(())
    }
}

/// Most memory an Argon2id derivation may use, KiB (1 GiB).
pub const MAX_KDF_M_KIB: u32 = 1 << 20;
/// Most Argon2id passes.
pub const MAX_KDF_T: u32 = 16;
/// Most Argon2id lanes.
pub const MAX_KDF_P: u32 = 16;

/// Where this start takes the key from.
pub enum KeySource {
    /// `ORAM_PROXY_MASTER_KEY`.
    Env(MasterKey),
    /// A passphrase (from the environment or a file).
    Passphrase(Zeroizing<Vec<u8>>),
    /// A key file.
    File(PathBuf),
}

impl KeySource {
    /// The source the configuration and environment name; `data_dir` holds the
    /// default key file.
    pub fn resolve(cfg: &KeyConfig, data_dir: &Path) -> Result<Self, VolumeError> {
        if let Some(hexkey) = env_secret(ENV_KEY) {
            let bytes = unhex::<32>(&hexkey).ok_or_else(|| {
                VolumeError::Key(format!("{ENV_KEY} does not hold 64 hex digits"))
            })?;
            return Ok(Self::Env(MasterKey::from_bytes(*bytes)));
        }
        if let Some(p) = env_secret(ENV_PASSPHRASE) {
            return Self::passphrase(p.as_bytes().to_vec(), ENV_PASSPHRASE);
        }
        if let Some(path) = &cfg.passphrase_file {
            check_private(path)?;
            let text = Zeroizing::new(fs::read(path).map_err(io(path))?);
            let mut trimmed: &[u8] = &text;
            if let Some(t) = trimmed.strip_suffix(b"\n") {
                trimmed = t;
            }
            if let Some(t) = trimmed.strip_suffix(b"\r") {
                trimmed = t;
            }
            return Self::passphrase(trimmed.to_vec(), &path.display().to_string());
        }
        Ok(Self::File(cfg.key_file(data_dir)))
    }

    fn passphrase(p: Vec<u8>, from: &str) -> Result<Self, VolumeError> {
        let p = Zeroizing::new(p);
        if p.len() < 12 {
            return Err(VolumeError::Key(format!(
                "the passphrase from {from} is shorter than 12 bytes"
            )));
        }
        Ok(Self::Passphrase(p))
    }

    /// A short name for messages and the volume parameters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Env(_) => "env",
            Self::Passphrase(_) => "passphrase",
            Self::File(_) => "file",
        }
    }

    /// The key of a new volume: creates the key file (0600) or the Argon2id
    /// parameters as needed. Returns the key, the KDF parameters (passphrase only)
    /// and whether a key file was created.
    pub fn create(&self) -> Result<(MasterKey, Option<Kdf>, bool), VolumeError> {
        match self {
            Self::Env(k) => Ok((MasterKey::from_bytes(*k.expose_bytes()), None, false)),
            Self::Passphrase(p) => {
                let kdf = Kdf::generate();
                Ok((kdf.derive(p)?, Some(kdf), false))
            }
            Self::File(path) if path.exists() => Ok((read_key_file(path)?, None, false)),
            Self::File(path) => {
                let key = MasterKey::generate();
                let text = Zeroizing::new(format!("{}\n", *hex_secret(key.expose_bytes())));
                write_private(path, &text)?;
                Ok((key, None, true))
            }
        }
    }

    /// The key of an existing volume, checked against its key check.
    pub fn load(&self, kdf: Option<&Kdf>, key_check: &str) -> Result<MasterKey, VolumeError> {
        let key = match (self, kdf) {
            (Self::Env(k), _) => MasterKey::from_bytes(*k.expose_bytes()),
            (Self::Passphrase(p), Some(kdf)) => kdf.derive(p)?,
            (Self::Passphrase(_), None) => {
                return Err(VolumeError::Key(
                    "a passphrase was given, but this volume's key is not derived from one".into(),
                ))
            }
            (Self::File(path), _) if !path.exists() => {
                let hint = if kdf.is_some() {
                    format!(" (this volume's key comes from a passphrase: set {ENV_PASSPHRASE} or --passphrase-file)")
                } else {
                    String::new()
                };
                return Err(VolumeError::Key(format!(
                    "{} is missing, but the volume exists: without its key the data cannot be read{hint}",
                    path.display()
                )));
            }
            (Self::File(path), _) => read_key_file(path)?,
        };
        if check_value(&key) != key_check {
            return Err(VolumeError::Key(format!(
                "wrong key ({}): it is not the key this volume was created with",
                self.kind()
            )));
        }
        Ok(key)
    }
}

/// The public key check of `key` (hex).
pub fn check_value(key: &MasterKey) -> String {
    hex::encode(&key.subkey("oram-proxy key check v1")[..16])
}

fn read_key_file(path: &Path) -> Result<MasterKey, VolumeError> {
    check_private(path)?;
    let text = Zeroizing::new(fs::read_to_string(path).map_err(io(path))?);
    let bytes = unhex::<32>(&text).ok_or_else(|| {
        VolumeError::Key(format!("{} does not hold 64 hex digits", path.display()))
    })?;
    Ok(MasterKey::from_bytes(*bytes))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn passphrase_derivation_is_deterministic_and_salted() {
        let kdf = Kdf {
            salt: "00112233445566778899aabbccddeeff".into(),
            m_kib: 1024,
            t: 1,
            p: 1,
        };
        let a = kdf.derive(b"correct horse battery").unwrap();
        let b = kdf.derive(b"correct horse battery").unwrap();
        let c = kdf.derive(b"correct horse battery!").unwrap();
        assert_eq!(a.expose_bytes(), b.expose_bytes());
        assert_ne!(a.expose_bytes(), c.expose_bytes());
        let other = Kdf {
            salt: "ff112233445566778899aabbccddeeff".into(),
            ..kdf.clone()
        };
        assert_ne!(
            other
                .derive(b"correct horse battery")
                .unwrap()
                .expose_bytes(),
            a.expose_bytes()
        );
        let check = check_value(&a);
        assert!(
            KeySource::Passphrase(Zeroizing::new(b"correct horse battery".to_vec()))
                .load(Some(&kdf), &check)
                .is_ok()
        );
        let err = KeySource::Passphrase(Zeroizing::new(b"wrong horse battery".to_vec()))
            .load(Some(&kdf), &check)
            .unwrap_err()
            .to_string();
        assert!(err.contains("wrong key"), "{err}");
    }

    #[test]
    fn key_file_is_created_private_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("master.key");
        let src = KeySource::File(path.clone());
        let (k1, kdf, created) = src.create().unwrap();
        assert!(created && kdf.is_none());
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let check = check_value(&k1);
        let k2 = src.load(None, &check).unwrap();
        assert_eq!(k1.expose_bytes(), k2.expose_bytes());
        assert!(src
            .load(None, &"00".repeat(16))
            .unwrap_err()
            .to_string()
            .contains("wrong key"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(src
            .load(None, &check)
            .unwrap_err()
            .to_string()
            .contains("chmod 600"));
        let missing = KeySource::File(d.path().join("none.key"));
        assert!(missing
            .load(None, &check)
            .unwrap_err()
            .to_string()
            .contains("missing"));
    }
}
