//! The S3 users a volume is served to: from the environment (the root user),
//! the configuration (`[[users]]`) and `<data_dir>/credentials.toml` — all three
//! together; the file is generated with one user on a first start that has no
//! other user, and is the one source changed while serving ([`UserDirectory`]:
//! `oram-proxy user add|list|remove|rotate`).
//!
//! The content of `credentials.toml` (secret keys included) is also kept in the
//! state database (meta `credentials`, [`keep_in_state`], and at every live
//! change), so every checkpoint and the shipped log carry it, sealed and padded
//! like the rest of the state: `recover` writes it back ([`restore_from_state`])
//! and the users of the moment keep working.

mod live;

pub use live::{ChangeDone, UserChange, UserDirectory, UserError};

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

/// Where a served user is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserSource {
    /// `ORAM_PROXY_ROOT_USER` / `ORAM_PROXY_ROOT_PASSWORD`.
    Environment,
    /// `[[users]]` in the configuration file.
    Config,
    /// `<data_dir>/credentials.toml` (generated, or changed while serving).
    Credentials,
}

impl UserSource {
    /// Its name in `oram-proxy user list`: `environment`, `config` or
    /// `credentials`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Environment => "environment",
            Self::Config => "config",
            Self::Credentials => "credentials",
        }
    }
}

/// A served user and where it is defined.
#[derive(Clone, Debug)]
pub struct SourcedUser {
    /// The user (its `Debug` hides the secret key).
    pub user: UserConfig,
    /// Where it is defined.
    pub source: UserSource,
}

/// A random access key (`oram` and 16 hex digits) and secret key (40 hex digits).
fn generate(access_key: Option<String>) -> UserConfig {
    let mut rng = rand::thread_rng();
    let mut ak = [0u8; 8];
    let mut sk = [0u8; 20];
    rng.fill_bytes(&mut ak);
    rng.fill_bytes(&mut sk);
    UserConfig {
        access_key: access_key.unwrap_or_else(|| format!("oram{}", hex::encode(ak))),
        secret_key: hex::encode(sk),
    }
}

/// Reads `credentials.toml`'s users (checked: mode 0600, lengths; an empty list
/// only when `others` users are defined elsewhere).
fn read_credentials(path: &Path, others: bool) -> Result<Vec<UserConfig>, VolumeError> {
    check_private(path)?;
    let text = zeroize::Zeroizing::new(fs::read_to_string(path).map_err(io(path))?);
    let c: Credentials = toml::from_str(&text)
        .map_err(|e| VolumeError::Config(format!("{}: {e}", path.display())))?;
    if c.users.is_empty() && !others {
        return Err(VolumeError::Config(format!(
            "{} lists no user",
            path.display()
        )));
    }
    for u in &c.users {
        u.validate()
            .map_err(|e| VolumeError::Config(format!("{}: {e}", path.display())))?;
    }
    Ok(c.users)
}

/// The users to serve with their sources, and whether one was generated just
/// now (to print it once).
///
/// `ORAM_PROXY_ROOT_USER`/`ORAM_PROXY_ROOT_PASSWORD` (first), the
/// configuration's users, then `<dir>/credentials.toml`'s; when none of these
/// defines a user, one is generated and saved there (0600). An access key
/// defined twice is refused, except a `credentials.toml` entry repeating a
/// configured user exactly (secret included), which is left out.
pub fn load(
    dir: &Path,
    configured: &[UserConfig],
    root: Option<UserConfig>,
) -> Result<(Vec<SourcedUser>, bool), VolumeError> {
    let mut users: Vec<SourcedUser> = root
        .into_iter()
        .map(|user| SourcedUser {
            user,
            source: UserSource::Environment,
        })
        .collect();
    users.extend(configured.iter().map(|u| SourcedUser {
        user: u.clone(),
        source: UserSource::Config,
    }));
    for (i, u) in users.iter().enumerate() {
        u.user.validate().map_err(VolumeError::Config)?;
        if users[..i]
            .iter()
            .any(|o| o.user.access_key == u.user.access_key)
        {
            return Err(VolumeError::Config(format!(
                "user {:?} is defined twice (environment and configuration)",
                u.user.access_key
            )));
        }
    }
    let path = credentials_path(dir);
    let (file, generated) = if path.exists() {
        (read_credentials(&path, !users.is_empty())?, false)
    } else if users.is_empty() {
        let c = Credentials {
            users: vec![generate(None)],
        };
        let text = zeroize::Zeroizing::new(
            toml::to_string(&c).map_err(|e| VolumeError::Config(e.to_string()))?,
        );
        write_private(&path, &text)?;
        (c.users, true)
    } else {
        (Vec::new(), false)
    };
    for u in file {
        match users.iter().find(|o| o.user.access_key == u.access_key) {
            Some(o) if o.user.secret_key == u.secret_key => {}
            Some(o) => {
                return Err(VolumeError::Config(format!(
                    "user {:?} is defined both in {} and in the {} with another secret key: \
                     remove one of them",
                    u.access_key,
                    path.display(),
                    match o.source {
                        UserSource::Environment => "environment",
                        _ => "configuration",
                    }
                )))
            }
            None => users.push(SourcedUser {
                user: u,
                source: UserSource::Credentials,
            }),
        }
    }
    Ok((users, generated))
}

/// [`load`], without the sources.
pub fn users(
    dir: &Path,
    configured: &[UserConfig],
    root: Option<UserConfig>,
) -> Result<(Vec<UserConfig>, bool), VolumeError> {
    let (users, generated) = load(dir, configured, root)?;
    Ok((users.into_iter().map(|u| u.user).collect(), generated))
}

/// Where generated credentials are kept.
pub fn credentials_path(dir: &Path) -> PathBuf {
    dir.join("credentials.toml")
}

/// The state database's meta entry holding `credentials.toml`'s content.
const CREDENTIALS_META: &str = "credentials";

/// Keeps `<dir>/credentials.toml`'s content in the state database when it
/// differs from what is kept there (at start: the file may have been edited
/// while the proxy was stopped; a change reaches the backend with the next
/// checkpoint, and with the shipped log's next record when the volume ships
/// one). Changes made while serving update both at once ([`UserDirectory`]). Users of the configuration or
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
        // The environment's user comes first, and the generated one is still
        // served (all three sources together).
        let (u3, _) = users(d.path(), &[], Some(root.clone())).unwrap();
        assert_eq!(u3.len(), 2);
        assert_eq!(u3[0].access_key, "root");
        assert_eq!(u3[1].access_key, u1[0].access_key);
        // A configured user repeating the file's exactly is served once; with
        // another secret it is refused.
        let (u4, _) = users(d.path(), &u1, Some(root.clone())).unwrap();
        assert_eq!(u4.len(), 2);
        let clash = UserConfig {
            access_key: u1[0].access_key.clone(),
            secret_key: "another-secret".into(),
        };
        let e = users(d.path(), &[clash], None).unwrap_err().to_string();
        assert!(e.contains("defined both"), "{e}");
        assert!(!e.contains("another-secret"), "{e}");
        assert!(
            users(d.path(), std::slice::from_ref(&root), Some(root.clone()))
                .unwrap_err()
                .to_string()
                .contains("defined twice")
        );
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
        // An empty file is fine beside users defined elsewhere (its last user
        // was removed while serving).
        let (u5, _) = users(d.path(), &u1, None).unwrap();
        assert_eq!(u5.len(), 1);
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
