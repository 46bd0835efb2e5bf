//! The S3 users a volume is served to: from the configuration
//! (`[[users]]`), the environment (the root user), or `<data_dir>/credentials.toml`,
//! generated on first start.

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
}
