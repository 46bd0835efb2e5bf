//! tempauth-style v1 authentication: users, and tokens kept only as hashes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::util::ct_eq;

/// Live tokens kept at most; beyond, the one closest to expiry is dropped.
const MAX_TOKENS: usize = 100_000;

/// A user of the Swift API: `X-Auth-User: <account>:<user>`, `X-Auth-Key: <key>`.
#[derive(Clone)]
pub struct SwiftUser {
    /// The account (the object layer's owner; the storage URL is `/v1/AUTH_<account>`).
    pub account: String,
    /// The user name within the account.
    pub user: String,
    /// The key (password).
    pub key: String,
}

impl std::fmt::Debug for SwiftUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwiftUser")
            .field("account", &self.account)
            .field("user", &self.user)
            .field("key", &"<redacted>")
            .finish()
    }
}

struct Entry {
    account: String,
    expires: Instant,
}

/// Users and issued tokens. A token is 32 random bytes (hex, prefixed `AUTH_tk`);
/// only its SHA-256 is kept, in memory, with its account and expiry.
pub(crate) struct Auth {
    users: Vec<SwiftUser>,
    ttl: Duration,
    tokens: Mutex<HashMap<[u8; 32], Entry>>,
}

fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Auth {
    pub(crate) fn new(users: Vec<SwiftUser>, ttl: Duration) -> Self {
        Self {
            users,
            ttl,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Checks `account:user` and `key`; on success issues a token. Returns the
    /// account and the token.
    pub(crate) fn login(&self, auth_user: &str, key: &str) -> Option<(String, String)> {
        let (account, user) = auth_user.split_once(':')?;
        // Compare every user's key, so the time does not tell which user exists.
        let mut found = None;
        for u in &self.users {
            let key_ok = ct_eq(
                &Sha256::digest(u.key.as_bytes()),
                &Sha256::digest(key.as_bytes()),
            );
            if u.account == account && u.user == user && key_ok {
                found = Some(u.account.clone());
            }
        }
        let account = found?;
        let mut raw = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut raw);
        let token = format!(
            "AUTH_tk{}",
            raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let now = Instant::now();
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.retain(|_, e| e.expires > now);
        if tokens.len() >= MAX_TOKENS {
            if let Some(k) = tokens
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| *k)
            {
                tokens.remove(&k);
            }
        }
        tokens.insert(
            token_hash(&token),
            Entry {
                account: account.clone(),
                expires: now + self.ttl,
            },
        );
        Some((account, token))
    }

    /// The account of a valid, unexpired token.
    pub(crate) fn check(&self, token: &str) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let e = tokens.get(&token_hash(token))?;
        (e.expires > Instant::now()).then(|| e.account.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Vec<SwiftUser> {
        vec![SwiftUser {
            account: "acct".into(),
            user: "acct".into(),
            key: "secret-key".into(),
        }]
    }

    #[test]
    fn login_and_check() {
        let a = Auth::new(users(), Duration::from_secs(60));
        assert!(a.login("acct:acct", "wrong").is_none());
        assert!(a.login("acct:other", "secret-key").is_none());
        assert!(a.login("acct", "secret-key").is_none());
        let (acct, tok) = a.login("acct:acct", "secret-key").unwrap();
        assert_eq!(acct, "acct");
        assert!(tok.starts_with("AUTH_tk") && tok.len() == 7 + 64);
        assert_eq!(a.check(&tok).as_deref(), Some("acct"));
        assert_eq!(a.check("AUTH_tkbogus"), None);
        // Only the hash is stored.
        let t = a.tokens.lock().unwrap();
        assert!(t.contains_key(&token_hash(&tok)));
    }

    #[test]
    fn tokens_expire() {
        let a = Auth::new(users(), Duration::ZERO);
        let (_, tok) = a.login("acct:acct", "secret-key").unwrap();
        assert_eq!(a.check(&tok), None);
    }
}
