//! tempauth-style v1 authentication: users, and tokens kept only as hashes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::acl::Identity;
use crate::limits::MAX_TOKENS_PER_USER;
use crate::util::ct_eq;

/// Live tokens kept at most over all users; beyond, logins are refused (no
/// user can evict another's tokens).
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
    /// Whether the user administers its account (tempauth's `.admin` group): it
    /// owns the account's containers. A user without it reaches only what
    /// container ACLs grant it (`account` or `account:user`).
    pub admin: bool,
}

impl std::fmt::Debug for SwiftUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwiftUser")
            .field("account", &self.account)
            .field("user", &self.user)
            .field("key", &"<redacted>")
            .field("admin", &self.admin)
            .finish()
    }
}

struct Entry {
    who: Identity,
    expires: Instant,
}

/// Users and issued tokens. A token is 32 random bytes (hex, prefixed `AUTH_tk`);
/// only its SHA-256 is kept, in memory, with its account and expiry.
pub(crate) struct Auth {
    /// The users; replaced by [`Auth::set_users`]. A std lock held for
    /// in-memory work only: a login holds it (read) until its token is stored,
    /// so that a replacement, which revokes the tokens of users removed or
    /// given another key, never misses a token issued with an old key. Taken
    /// before `tokens`, never after.
    users: RwLock<Vec<SwiftUser>>,
    ttl: Duration,
    /// The live tokens (both maps of [`Tokens`]); a std mutex held for
    /// in-memory work only.
    tokens: Mutex<Tokens>,
}

/// A user: account and user name.
type UserKey = (String, String);

/// The live tokens, by hash and, in issue order (= expiry order: one TTL), per
/// user (account and user name).
#[derive(Default)]
struct Tokens {
    by_hash: HashMap<[u8; 32], Entry>,
    by_user: HashMap<UserKey, VecDeque<[u8; 32]>>,
}

impl Tokens {
    /// Drops `user`'s expired tokens (its oldest first): amortised O(1).
    fn prune_user(&mut self, user: &UserKey, now: Instant) {
        let Some(q) = self.by_user.get_mut(user) else {
            return;
        };
        while let Some(h) = q.front() {
            match self.by_hash.get(h) {
                Some(e) if e.expires > now => break,
                _ => {
                    let h = *h;
                    q.pop_front();
                    self.by_hash.remove(&h);
                }
            }
        }
        if q.is_empty() {
            self.by_user.remove(user);
        }
    }

    /// Drops every expired token (only when the global bound is reached).
    fn prune_all(&mut self, now: Instant) {
        let users: Vec<UserKey> = self.by_user.keys().cloned().collect();
        for u in users {
            self.prune_user(&u, now);
        }
    }
}

fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Auth {
    pub(crate) fn new(users: Vec<SwiftUser>, ttl: Duration) -> Self {
        Self {
            users: RwLock::new(users),
            ttl,
            tokens: Mutex::new(Tokens::default()),
        }
    }

    /// Serves `users` from now on: the tokens of a user no longer there, or
    /// there with another key, are revoked (its next request is refused, its
    /// next login needs the new key); other users keep theirs.
    pub(crate) fn set_users(&self, users: Vec<SwiftUser>) {
        let mut current = self.users.write().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<UserKey> = current
            .iter()
            .filter(|old| {
                !users.iter().any(|new| {
                    new.account == old.account
                        && new.user == old.user
                        && new.key == old.key
                        && new.admin == old.admin
                })
            })
            .map(|u| (u.account.clone(), u.user.clone()))
            .collect();
        *current = users;
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        for u in gone {
            for h in tokens.by_user.remove(&u).unwrap_or_default() {
                tokens.by_hash.remove(&h);
            }
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
        let users = self.users.read().unwrap_or_else(|e| e.into_inner());
        for u in users.iter() {
            let key_ok = ct_eq(
                &Sha256::digest(u.key.as_bytes()),
                &Sha256::digest(key.as_bytes()),
            );
            if u.account == account && u.user == user && key_ok {
                found = Some(Identity {
                    account: u.account.clone(),
                    user: u.user.clone(),
                    admin: u.admin,
                });
            }
        }
        let who = found?;
        let account = who.account.clone();
        let key: UserKey = (who.account.clone(), who.user.clone());
        let mut raw = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut raw);
        let token = format!("AUTH_tk{}", hex::encode(raw));
        let now = Instant::now();
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.prune_user(&key, now);
        // A user at its bound loses its own oldest token, never another user's
        // (of its account or another).
        let own = tokens.by_user.get(&key).map_or(0, VecDeque::len);
        if own >= MAX_TOKENS_PER_USER {
            if let Some(h) = tokens.by_user.get_mut(&key).and_then(VecDeque::pop_front) {
                tokens.by_hash.remove(&h);
            }
        }
        if tokens.by_hash.len() >= MAX_TOKENS {
            tokens.prune_all(now);
            if tokens.by_hash.len() >= MAX_TOKENS {
                tracing::warn!("swift: {MAX_TOKENS} live tokens: login refused");
                return None;
            }
        }
        let h = token_hash(&token);
        tokens.by_hash.insert(
            h,
            Entry {
                who,
                expires: now + self.ttl,
            },
        );
        tokens.by_user.entry(key).or_default().push_back(h);
        drop(tokens);
        drop(users);
        Some((account, token))
    }

    /// The identity of a valid, unexpired token.
    pub(crate) fn check(&self, token: &str) -> Option<Identity> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let e = tokens.by_hash.get(&token_hash(token))?;
        (e.expires > Instant::now()).then(|| e.who.clone())
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
            admin: true,
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
        assert_eq!(a.check(&tok).map(|w| w.account).as_deref(), Some("acct"));
        assert_eq!(a.check("AUTH_tkbogus"), None);
        // Only the hash is stored.
        let t = a.tokens.lock().unwrap();
        assert!(t.by_hash.contains_key(&token_hash(&tok)));
    }

    #[test]
    fn one_account_cannot_evict_another_accounts_tokens() {
        let mut us = users();
        us.push(SwiftUser {
            account: "other".into(),
            user: "other".into(),
            key: "other-key".into(),
            admin: true,
        });
        let a = Auth::new(us, Duration::from_secs(60));
        let (_, theirs) = a.login("acct:acct", "secret-key").unwrap();
        let (_, first_own) = a.login("other:other", "other-key").unwrap();
        for _ in 0..MAX_TOKENS_PER_USER + 10 {
            a.login("other:other", "other-key").unwrap();
        }
        assert_eq!(
            a.check(&theirs).map(|w| w.account).as_deref(),
            Some("acct"),
            "evicted by another account"
        );
        assert_eq!(
            a.check(&first_own),
            None,
            "an account's oldest token goes first"
        );
        let t = a.tokens.lock().unwrap();
        assert_eq!(
            t.by_user[&("other".to_string(), "other".to_string())].len(),
            MAX_TOKENS_PER_USER
        );
        assert_eq!(t.by_hash.len(), MAX_TOKENS_PER_USER + 1);
    }

    #[test]
    fn tokens_expire() {
        let a = Auth::new(users(), Duration::ZERO);
        let (_, tok) = a.login("acct:acct", "secret-key").unwrap();
        assert_eq!(a.check(&tok), None);
    }

    #[test]
    fn replaced_users_lose_their_tokens_and_old_keys() {
        let mut two = users();
        two.push(SwiftUser {
            account: "other".into(),
            user: "other".into(),
            key: "other-key-1".into(),
            admin: true,
        });
        let a = Auth::new(two, Duration::from_secs(60));
        let (_, kept) = a.login("acct:acct", "secret-key").unwrap();
        let (_, rotated) = a.login("other:other", "other-key-1").unwrap();
        // "other" gets a new key; a third user is added.
        a.set_users(vec![
            users().remove(0),
            SwiftUser {
                account: "other".into(),
                user: "other".into(),
                key: "other-key-2".into(),
                admin: true,
            },
            SwiftUser {
                account: "new".into(),
                user: "new".into(),
                key: "new-key-1".into(),
                admin: true,
            },
        ]);
        assert!(a.check(&kept).is_some());
        assert!(a.check(&rotated).is_none());
        assert!(a.login("other:other", "other-key-1").is_none());
        assert!(a.login("other:other", "other-key-2").is_some());
        let (_, new) = a.login("new:new", "new-key-1").unwrap();
        // "new" is removed again.
        a.set_users(users());
        assert!(a.check(&new).is_none());
        assert!(a.login("new:new", "new-key-1").is_none());
        assert!(a.check(&kept).is_some());
    }
}
