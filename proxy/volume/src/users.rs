//! The S3 users a volume is served to: from the configuration
//! (`[[users]]`), the environment (the root user), or `<data_dir>/credentials.toml`,
//! generated on first start.
//!
//! The content of `credentials.toml` (secret keys included) is also kept in the
//! state database (meta `credentials`, [`keep_in_state`]), so every checkpoint
//! carries it, sealed and padded like the rest of the state: `recover` writes it
//! back ([`restore_from_state`]) and the old credentials keep working.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::fsutil::{check_private, io, write_private};
use crate::VolumeError;

/// `[[users]]`
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// Access key.
    pub access_key: String,
    /// Secret key.
    pub secret_key: String,
}

impl UserConfig {
    /// Checks the lengths: access key 3+ characters, secret key 8+.
    pub fn validate(&self) -> Result<(), String> {
        if self.access_key.len() < 3 || self.secret_key.len() < 8 {
            return Err(format!(
                "user {:?}: access key needs 3+ characters and secret key 8+",
                self.access_key
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserConfig")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
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
    configured: &[UserConfig],
    root: Option<UserConfig>,
) -> Result<(Vec<UserConfig>, bool), VolumeError> {
    let mut users: Vec<UserConfig> = root.into_iter().collect();
    users.extend(configured.iter().cloned());
    if !users.is_empty() {
        for u in &users {
            u.validate().map_err(VolumeError::Config)?;
        }
        return Ok((users, false));
    }
    let path = credentials_path(dir);
    if path.exists() {
        check_private(&path)?;
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        let c: Credentials = toml::from_str(&text)
            .map_err(|e| VolumeError::Config(format!("{}: {e}", path.display())))?;
        if c.users.is_empty() {
            return Err(VolumeError::Config(format!(
                "{} lists no user",
                path.display()
            )));
        }
        for u in &c.users {
            u.validate()
                .map_err(|e| VolumeError::Config(format!("{}: {e}", path.display())))?;
        }
        return Ok((c.users, false));
    }
    let mut rng = rand::thread_rng();
    let mut ak = [0u8; 8];
    let mut sk = [0u8; 20];
    rng.fill_bytes(&mut ak);
    rng.fill_bytes(&mut sk);
    let user = UserConfig {
        access_key: format!("oram{}", hex::encode(ak)),
        secret_key: hex::encode(sk),
    };
    let c = Credentials { users: vec![user] };
    let text = toml::to_string(&c).map_err(|e| VolumeError::Config(e.to_string()))?;
    write_private(&path, &text)?;
    Ok((c.users, true))
}

/// Where generated credentials are kept.
pub fn credentials_path(dir: &Path) -> PathBuf {
    dir.join("credentials.toml")
}

/// The state database's meta entry holding `credentials.toml`'s content.
const CREDENTIALS_META: &str = "credentials";

/// Keeps `<dir>/credentials.toml`'s content in the state database when it
/// differs from what is kept there (users come from the file at start, so a
/// change reaches the backend with the next checkpoint, and with the shipped
/// log's next record when the volume ships one). Users of the configuration or
/// the environment are the operator's to keep and are not copied. Returns
/// whether it wrote.
pub async fn keep_in_state(dir: &Path, db: &oram_statedb::Db) -> Result<bool, VolumeError> {
    let path = credentials_path(dir);
    // A small file, read off the async workers all the same.
    let text = tokio::task::spawn_blocking(move || match fs::read(&path) {
        Ok(t) => Ok(Some(zeroize::Zeroizing::new(t))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    })
    .await
    .map_err(|e| VolumeError::Config(format!("reading the credentials: {e}")))??;
    let Some(text) = text else {
        return Ok(false);
    };
    let kept = db.meta(CREDENTIALS_META)?.map(zeroize::Zeroizing::new);
    if kept.as_deref().map(|k| k.as_slice()) == Some(text.as_slice()) {
        return Ok(false);
    }
    db.set_meta(CREDENTIALS_META, &text)
        .await
        .map_err(oram_engine::OramError::State)?;
    Ok(true)
}

/// Writes the credentials a restored state database holds back to
/// `<dir>/credentials.toml` (0600), unless the file exists. Returns the number
/// of users written (`None`: the state holds none, e.g. a checkpoint of a
/// version before credentials were kept in it, or users from the configuration).
pub fn restore_from_state(dir: &Path, db: &oram_statedb::Db) -> Result<Option<usize>, VolumeError> {
    let Some(bytes) = db.meta(CREDENTIALS_META)?.map(zeroize::Zeroizing::new) else {
        return Ok(None);
    };
    let path = credentials_path(dir);
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| VolumeError::Integrity("the checkpoint's credentials are not text".into()))?;
    let c: Credentials = toml::from_str(text)
        .map_err(|e| VolumeError::Integrity(format!("the checkpoint's credentials: {e}")))?;
    if path.exists() {
        return Ok(None);
    }
    write_private(&path, text)?;
    Ok(Some(c.users.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_generated_once_or_taken_from_env_and_config() {
        let d = tempfile::tempdir().unwrap();
        let (u1, generated) = users(d.path(), &[], None).unwrap();
        assert!(generated);
        let (u2, generated) = users(d.path(), &[], None).unwrap();
        assert!(!generated);
        assert_eq!(u1[0].secret_key, u2[0].secret_key);
        let root = UserConfig {
            access_key: "root".into(),
            secret_key: "rootsecret".into(),
        };
        let (u3, _) = users(d.path(), &[], Some(root)).unwrap();
        assert_eq!(u3.len(), 1);
        assert_eq!(u3[0].access_key, "root");
        let weak = UserConfig {
            access_key: "root".into(),
            secret_key: "x".into(),
        };
        assert!(users(d.path(), &[], Some(weak)).is_err());
        fs::write(credentials_path(d.path()), "users = []\n").unwrap();
        assert!(users(d.path(), &[], None)
            .unwrap_err()
            .to_string()
            .contains("no user"));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn credentials_travel_in_the_state_snapshot_and_are_written_back_private() {
        use std::os::unix::fs::PermissionsExt;
        let vol = [7u8; 16];
        let a = tempfile::tempdir().unwrap();
        let (old, _) = users(a.path(), &[], None).unwrap();
        let db = oram_statedb::Db::open(&a.path().join("state.redb"), vol).unwrap();
        assert!(keep_in_state(a.path(), &db).await.unwrap());
        // Unchanged: nothing is written again.
        assert!(!keep_in_state(a.path(), &db).await.unwrap());
        let snap = db.snapshot().unwrap();
        let b = tempfile::tempdir().unwrap();
        let restored = oram_statedb::Db::restore(&b.path().join("state.redb"), vol, &snap).unwrap();
        assert_eq!(restore_from_state(b.path(), &restored).unwrap(), Some(1));
        let path = credentials_path(b.path());
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (again, generated) = users(b.path(), &[], None).unwrap();
        assert!(!generated);
        assert_eq!(again[0].access_key, old[0].access_key);
        assert_eq!(again[0].secret_key, old[0].secret_key);
        // A state without credentials (an earlier version's checkpoint).
        let c = tempfile::tempdir().unwrap();
        let empty = oram_statedb::Db::open(&c.path().join("state.redb"), vol).unwrap();
        assert_eq!(restore_from_state(c.path(), &empty).unwrap(), None);
        assert!(!credentials_path(c.path()).exists());
    }
}
