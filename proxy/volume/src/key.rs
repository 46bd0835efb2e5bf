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
//! **A passphrase wraps the master key**: Argon2id of the passphrase (salt and
//! costs in the volume's parameters) is a key-encryption key, under which the
//! random master key is wrapped (AES-256-GCM, [`oram_seal::wrap_secret`]); the
//! wrapped key is a volume parameter too (`wrapped_key`, also in the backend's
//! header, so `recover` needs only the passphrase). Changing the passphrase
//! ([`crate::change_passphrase`]) wraps the same master key under a new
//! passphrase and a new salt: nothing is re-sealed. A volume created before
//! wrapping existed has no `wrapped_key`: its master key is Argon2id's output
//! itself, and the first passphrase change wraps that key.
//!
//! **Master-key rotation** ([`crate::rotate_key`]) keeps the earlier keys, wrapped
//! under the current one (`earlier_keys`, with the HKDF subkey
//! [`KEYRING_PURPOSE`]), so that objects still sealed under them open
//! ([`oram_seal::Sealer::with_keyring`]) wherever the current key does, `recover`
//! on a fresh machine included.
//!
//! Every volume records a *key check*: 16 bytes derived from the master key with
//! HKDF under a purpose of its own. It reveals nothing about the key (and, for a
//! passphrase, costs a full Argon2id evaluation per guess, like any sealed object),
//! and a start with another key fails at once instead of reading garbage later.

use std::fs;
use std::path::{Path, PathBuf};

use oram_seal::{unwrap_secret, wrap_secret, MasterKey, MASTER_KEY_LEN};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::config::KeyConfig;
use crate::fsutil::{check_private, hex_secret, io, unhex, unhex_vec, write_private};
use crate::VolumeError;

/// Associated data of a master key wrapped under a passphrase.
const PASSPHRASE_WRAP: &[u8] = b"oram-proxy/v1/passphrase-wrap";
/// Associated data of the earlier keys wrapped under the current one.
const KEYRING_WRAP: &[u8] = b"oram-proxy/v1/keyring";
/// The HKDF purpose of the subkey of the current master key that wraps the
/// earlier keys.
pub const KEYRING_PURPOSE: &str = "keyring wrap v1";

/// `key` wrapped under the passphrase: new Argon2id parameters (a fresh salt) and
/// the wrapped key, hex (what `kdf` and `wrapped_key` of the parameters hold).
pub fn wrap_for_passphrase(
    key: &MasterKey,
    passphrase: &[u8],
) -> Result<(Kdf, String), VolumeError> {
    let kdf = Kdf::generate();
    let kek = kdf.derive(passphrase)?;
    let wrapped = wrap_secret(kek.expose_bytes(), key.expose_bytes(), PASSPHRASE_WRAP);
    Ok((kdf, hex::encode(wrapped)))
}

/// The earlier master keys `earlier_keys` (a volume parameter) holds, newest
/// first, unwrapped with `current`; none if it is absent.
pub fn earlier_keys(
    current: &MasterKey,
    earlier_keys: Option<&str>,
) -> Result<Vec<MasterKey>, VolumeError> {
    let Some(hexed) = earlier_keys else {
        return Ok(Vec::new());
    };
    let bad = |why: &str| VolumeError::Key(format!("volume parameters: earlier_keys {why}"));
    let wrapped = unhex_vec(hexed).ok_or_else(|| bad("is not hex"))?;
    let kek = current.subkey(KEYRING_PURPOSE);
    let plain = unwrap_secret(&kek, &wrapped, KEYRING_WRAP)
        .map_err(|_| bad("do not unwrap under the current key (modified?)"))?;
    if !plain.len().is_multiple_of(MASTER_KEY_LEN) {
        return Err(bad("have a wrong length"));
    }
    Ok(plain
        .chunks_exact(MASTER_KEY_LEN)
        .map(|c| MasterKey::from_bytes(c.try_into().expect("chunk of the key length")))
        .collect())
}

/// The earlier keys `earlier` (newest first) wrapped under `current`, hex (what
/// `earlier_keys` of the parameters holds); `None` for none.
pub fn wrap_earlier_keys(current: &MasterKey, earlier: &[MasterKey]) -> Option<String> {
    if earlier.is_empty() {
        return None;
    }
    let mut plain = Zeroizing::new(Vec::with_capacity(earlier.len() * MASTER_KEY_LEN));
    for k in earlier {
        plain.extend_from_slice(k.expose_bytes());
    }
    let kek = current.subkey(KEYRING_PURPOSE);
    Some(hex::encode(wrap_secret(&kek, &plain, KEYRING_WRAP)))
}

/// Environment variable holding the master key in hex.
pub const ENV_KEY: &str = "ORAM_PROXY_MASTER_KEY";
/// Environment variable holding the passphrase.
pub const ENV_PASSPHRASE: &str = "ORAM_PROXY_PASSPHRASE";

/// Environment variable holding the new passphrase of `oram-proxy key passphrase`.
pub const ENV_NEW_PASSPHRASE: &str = "ORAM_PROXY_NEW_PASSPHRASE";
/// Environment variable holding the new master key (hex) of `oram-proxy key rotate`.
pub const ENV_NEW_KEY: &str = "ORAM_PROXY_NEW_MASTER_KEY";

/// The secrets taken out of the environment by [`take_env_secrets`]; the mutex
/// guards only this record.
static TAKEN: std::sync::Mutex<Option<EnvSecrets>> = std::sync::Mutex::new(None);

struct EnvSecrets {
    key: Option<Zeroizing<String>>,
    passphrase: Option<Zeroizing<String>>,
    new_key: Option<Zeroizing<String>>,
    new_passphrase: Option<Zeroizing<String>>,
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
        new_key: take(ENV_NEW_KEY),
        new_passphrase: take(ENV_NEW_PASSPHRASE),
    };
    *TAKEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(secrets);
}

/// The value of a secret variable ([`ENV_KEY`], [`ENV_PASSPHRASE`],
/// [`ENV_NEW_KEY`], [`ENV_NEW_PASSPHRASE`]): taken from the environment earlier,
/// or still in it (library use without [`take_env_secrets`]).
pub fn env_secret(name: &str) -> Option<Zeroizing<String>> {
    let taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    match taken.as_ref() {
        Some(t) if name == ENV_KEY => t.key.clone(),
        Some(t) if name == ENV_PASSPHRASE => t.passphrase.clone(),
        Some(t) if name == ENV_NEW_KEY => t.new_key.clone(),
        Some(t) if name == ENV_NEW_PASSPHRASE => t.new_passphrase.clone(),
        _ => std::env::var(name).ok().map(Zeroizing::new),
    }
}

/// A passphrase file's contents (mode 0600 required), without one trailing
/// newline (`\n` or `\r\n`).
pub fn read_passphrase_file(path: &Path) -> Result<Zeroizing<Vec<u8>>, VolumeError> {
    check_private(path)?;
    let text = Zeroizing::new(fs::read(path).map_err(io(path))?);
    let mut trimmed: &[u8] = &text;
    if let Some(t) = trimmed.strip_suffix(b"\n") {
        trimmed = t;
    }
    if let Some(t) = trimmed.strip_suffix(b"\r") {
        trimmed = t;
    }
    Ok(Zeroizing::new(trimmed.to_vec()))
}

/// A master key from hex (64 digits), for `ORAM_PROXY_NEW_MASTER_KEY`.
pub fn key_from_hex(text: &str, from: &str) -> Result<MasterKey, VolumeError> {
    let bytes = unhex::<32>(text)
        .ok_or_else(|| VolumeError::Key(format!("{from} does not hold 64 hex digits")))?;
    Ok(MasterKey::from_bytes(*bytes))
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
            let p = read_passphrase_file(path)?;
            return Self::passphrase(p.to_vec(), &path.display().to_string());
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

    /// The key of a new volume: creates the key file (0600), or a random key
    /// wrapped under the passphrase, as needed.
    pub fn create(&self) -> Result<NewKey, VolumeError> {
        let plain = |key| NewKey {
            key,
            kdf: None,
            wrapped: None,
            created_file: false,
        };
        match self {
            Self::Env(k) => Ok(plain(MasterKey::from_bytes(*k.expose_bytes()))),
            Self::Passphrase(p) => {
                let key = MasterKey::generate();
                let (kdf, wrapped) = wrap_for_passphrase(&key, p)?;
                Ok(NewKey {
                    key,
                    kdf: Some(kdf),
                    wrapped: Some(wrapped),
                    created_file: false,
                })
            }
            Self::File(path) if path.exists() => Ok(plain(read_key_file(path)?)),
            Self::File(path) => {
                let key = MasterKey::generate();
                write_key_file(path, &key)?;
                Ok(NewKey {
                    created_file: true,
                    ..plain(key)
                })
            }
        }
    }

    /// The key of an existing volume, checked against its key check, from the
    /// parts of its parameters (see [`crate::VolumeParams::load_key`]): the Argon2id
    /// parameters, the wrapped key (`None`: the passphrase's Argon2id output is
    /// the key itself, as in volumes made before wrapping) and the key check.
    pub fn load_parts(
        &self,
        kdf: Option<&Kdf>,
        wrapped: Option<&str>,
        key_check: &str,
    ) -> Result<MasterKey, VolumeError> {
        let key = match (self, kdf) {
            (Self::Env(k), _) => MasterKey::from_bytes(*k.expose_bytes()),
            (Self::Passphrase(p), Some(kdf)) => match wrapped {
                None => kdf.derive(p)?,
                Some(w) => {
                    let w = unhex_vec(w).ok_or_else(|| {
                        VolumeError::Key("volume parameters: wrapped_key is not hex".into())
                    })?;
                    let kek = kdf.derive(p)?;
                    let plain =
                        unwrap_secret(kek.expose_bytes(), &w, PASSPHRASE_WRAP).map_err(|_| {
                            VolumeError::Key(
                                "wrong key: the passphrase does not unwrap this volume's master key (after \
                                 `oram-proxy key passphrase`, only the new passphrase does)"
                                    .into(),
                            )
                        })?;
                    let bytes: [u8; MASTER_KEY_LEN] =
                        plain.as_slice().try_into().map_err(|_| {
                            VolumeError::Key(
                                "volume parameters: wrapped_key has a wrong length".into(),
                            )
                        })?;
                    MasterKey::from_bytes(bytes)
                }
            },
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
            (Self::File(path), _) => {
                let key = read_key_file(path)?;
                let next = pending_key_file(path);
                if check_value(&key) != key_check && next.exists() {
                    // A rotation stopped after volume.toml named the new key and
                    // before its file replaced the old one: complete it.
                    let new = read_key_file(&next)?;
                    if check_value(&new) == key_check {
                        install_key_file(&next, path)?;
                        tracing::warn!(
                            "{} holds the key of an interrupted rotation: installed it",
                            next.display()
                        );
                        return Ok(new);
                    }
                }
                key
            }
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

/// Where a rotation writes the new key before `volume.toml` names it.
pub fn pending_key_file(path: &std::path::Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// Renames `from` over `to` and makes it durable.
pub fn install_key_file(from: &std::path::Path, to: &std::path::Path) -> Result<(), VolumeError> {
    std::fs::rename(from, to).map_err(io(to))?;
    if let Some(parent) = to.parent() {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(io(parent))?;
    }
    Ok(())
}

/// What [`KeySource::create`] made for a new volume.
pub struct NewKey {
    /// The master key.
    pub key: MasterKey,
    /// Argon2id parameters (passphrase only).
    pub kdf: Option<Kdf>,
    /// The key wrapped under the passphrase, hex (passphrase only).
    pub wrapped: Option<String>,
    /// Whether a key file was created.
    pub created_file: bool,
}

/// Writes `key` to a new key file `path` (0600; fails if it exists).
pub fn write_key_file(path: &Path, key: &MasterKey) -> Result<(), VolumeError> {
    let text = Zeroizing::new(format!("{}\n", *hex_secret(key.expose_bytes())));
    write_private(path, &text)
}

/// Reads a key file (64 hex digits, mode 0600).
pub fn read_key_file(path: &Path) -> Result<MasterKey, VolumeError> {
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
                .load_parts(Some(&kdf), None, &check)
                .is_ok()
        );
        let err = KeySource::Passphrase(Zeroizing::new(b"wrong horse battery".to_vec()))
            .load_parts(Some(&kdf), None, &check)
            .unwrap_err()
            .to_string();
        assert!(err.contains("wrong key"), "{err}");
    }

    #[test]
    fn key_file_is_created_private_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("master.key");
        let src = KeySource::File(path.clone());
        let made = src.create().unwrap();
        assert!(made.created_file && made.kdf.is_none());
        let k1 = made.key;
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let check = check_value(&k1);
        let k2 = src.load_parts(None, None, &check).unwrap();
        assert_eq!(k1.expose_bytes(), k2.expose_bytes());
        assert!(src
            .load_parts(None, None, &"00".repeat(16))
            .unwrap_err()
            .to_string()
            .contains("wrong key"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(src
            .load_parts(None, None, &check)
            .unwrap_err()
            .to_string()
            .contains("chmod 600"));
        let missing = KeySource::File(d.path().join("none.key"));
        assert!(missing
            .load_parts(None, None, &check)
            .unwrap_err()
            .to_string()
            .contains("missing"));
    }
}
