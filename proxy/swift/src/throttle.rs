//! Throttling failed logins: a token bucket per client network (an IPv4
//! address, an IPv6 /64) and one per configured user, each allowing a burst of
//! failures and refilling at [`LOGIN_REFILL_PER_SEC`].
//!
//! A login *reserves* a failure of both buckets before its credentials are
//! looked at, in one step under the lock, and a successful login gives it
//! back: concurrent attempts cannot all pass a check made before any of them
//! failed, and a user is never locked out by logging in. A login whose client
//! or user has no failure left gets 429 with `Retry-After`.
//!
//! Memory is bounded: users' buckets are made once, for the configured users
//! (an unknown user name is throttled by its client's bucket alone); at most
//! [`LOGIN_CLIENTS_TRACKED`] client networks are remembered, those whose
//! bucket is full again being forgotten first. When every remembered client is
//! still in debt, a login from any other network is refused (fails closed).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Instant;

use crate::limits::*;

/// The client address of a request, as the server puts it in the request's
/// extensions (the peer's IP). Logins without it count as one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl ClientAddr {
    /// The network a per-client limit counts: an IPv4 address (also one mapped
    /// into IPv6), an IPv6 address's /64.
    pub(crate) fn network(self) -> IpAddr {
        match self.0 {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
            ip => ip,
        }
    }
}

/// A token bucket: failures left and when it was last refilled.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    /// Refills the bucket up to `now`.
    fn refill(&mut self, burst: f64, now: Instant) {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() * LOGIN_REFILL_PER_SEC;
        self.tokens = (self.tokens + gained).min(burst);
        self.at = now;
    }

    /// Seconds until the bucket holds a failure again.
    fn wait(&self) -> u64 {
        // At most burst / rate seconds: a small positive float.
        ((1.0 - self.tokens) / LOGIN_REFILL_PER_SEC).ceil().max(1.0) as u64
    }
}

/// The buckets; see [`LoginThrottle::buckets`].
struct Buckets {
    clients: HashMap<IpAddr, Bucket>,
    users: HashMap<String, Bucket>,
}

/// The failed-login throttle of one Swift service.
pub(crate) struct LoginThrottle {
    client_burst: f64,
    user_burst: f64,
    max_clients: usize,
    /// Every client's and user's bucket; a std mutex held for the arithmetic
    /// of one reservation or refund only (never across an await).
    buckets: Mutex<Buckets>,
}

/// One failed login reserved from a client and (when known) a user; give it
/// back with [`LoginThrottle::refund`] when the login succeeds.
#[derive(Debug)]
pub(crate) struct Reservation {
    client: IpAddr,
    user: Option<String>,
}

impl LoginThrottle {
    /// A throttle for `users` (`account:user`), remembering at most
    /// `max_clients` client networks.
    pub(crate) fn new(users: impl IntoIterator<Item = String>, max_clients: usize) -> Self {
        let now = Instant::now();
        let user_burst = LOGIN_FAILURES_PER_USER as f64;
        Self {
            client_burst: LOGIN_FAILURES_PER_CLIENT as f64,
            user_burst,
            max_clients,
            buckets: Mutex::new(Buckets {
                clients: HashMap::new(),
                users: users
                    .into_iter()
                    .map(|u| (u, Bucket::full(user_burst, now)))
                    .collect(),
            }),
        }
    }

    /// Reserves one failure of `client`'s network and of `user` (as sent:
    /// `account:user`); `Err(seconds to wait)` when either has none left, or
    /// when the client is new and no room can be made for it.
    pub(crate) fn reserve(
        &self,
        client: ClientAddr,
        user: Option<&str>,
    ) -> Result<Reservation, u64> {
        self.reserve_at(client.network(), user, Instant::now())
    }

    fn reserve_at(
        &self,
        client: IpAddr,
        user: Option<&str>,
        now: Instant,
    ) -> Result<Reservation, u64> {
        let (cb, ub) = (self.client_burst, self.user_burst);
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let Buckets { clients, users } = &mut *b;
        if !clients.contains_key(&client) && clients.len() >= self.max_clients {
            // Forget the clients whose bucket is full again (no debt).
            clients.retain(|_, k| {
                k.refill(cb, now);
                k.tokens < cb
            });
            if clients.len() >= self.max_clients {
                return Err(1);
            }
        }
        let mut c = clients
            .get(&client)
            .copied()
            .unwrap_or(Bucket::full(cb, now));
        c.refill(cb, now);
        if c.tokens < 1.0 {
            clients.insert(client, c);
            return Err(c.wait());
        }
        let user = match user.and_then(|u| users.get_mut(u).map(|k| (u, k))) {
            None => None,
            Some((name, k)) => {
                k.refill(ub, now);
                if k.tokens < 1.0 {
                    return Err(k.wait());
                }
                k.tokens -= 1.0;
                Some(name.to_string())
            }
        };
        c.tokens -= 1.0;
        clients.insert(client, c);
        Ok(Reservation { client, user })
    }

    /// Gives back a reservation (the login succeeded).
    pub(crate) fn refund(&self, r: Reservation) {
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = b.clients.get_mut(&r.client) {
            k.tokens = (k.tokens + 1.0).min(self.client_burst);
        }
        if let Some(k) = r.user.and_then(|u| b.users.get_mut(&u)) {
            k.tokens = (k.tokens + 1.0).min(self.user_burst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_reservation_is_taken_before_the_login_is_checked() {
        let t = LoginThrottle::new(["a:a".to_string()], 10);
        let now = Instant::now();
        // Attempts in flight at once: each holds its reservation, so the one
        // beyond the burst is refused before any of them failed.
        let held: Vec<_> = (0..LOGIN_FAILURES_PER_CLIENT)
            .map(|_| t.reserve_at(ip("10.0.0.1"), None, now).unwrap())
            .collect();
        assert!(t.reserve_at(ip("10.0.0.1"), None, now).is_err());
        // Successes give theirs back.
        for r in held {
            t.refund(r);
        }
        assert!(t.reserve_at(ip("10.0.0.1"), Some("a:a"), now).is_ok());
    }

    #[test]
    fn a_full_client_table_fails_closed_until_a_client_is_out_of_debt() {
        let t = LoginThrottle::new(Vec::new(), 2);
        let now = Instant::now();
        t.reserve_at(ip("10.0.0.1"), None, now).unwrap();
        t.reserve_at(ip("10.0.0.2"), None, now).unwrap();
        assert_eq!(
            t.reserve_at(ip("10.0.0.3"), None, now).unwrap_err(),
            1,
            "no room while both owe: refused"
        );
        assert_eq!(t.buckets.lock().unwrap().clients.len(), 2);
        // Once a debt is paid back, its client is forgotten to make room.
        let later = now + Duration::from_secs(1);
        t.reserve_at(ip("10.0.0.3"), None, later).unwrap();
        assert!(t.buckets.lock().unwrap().clients.len() <= 2);
    }

    #[test]
    fn unknown_user_names_take_no_memory() {
        let t = LoginThrottle::new(["a:a".to_string()], 10);
        let now = Instant::now();
        for n in 0..5 {
            let _ = t.reserve_at(ip("10.0.0.1"), Some(&format!("x:{n}")), now);
        }
        assert_eq!(t.buckets.lock().unwrap().users.len(), 1);
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let a = ClientAddr(ip("2001:db8::1")).network();
        assert_eq!(a, ClientAddr(ip("2001:db8::ffff:1")).network());
        assert_ne!(a, ClientAddr(ip("2001:db8:0:1::1")).network());
        assert_eq!(ClientAddr(ip("::ffff:10.0.0.1")).network(), ip("10.0.0.1"));
    }
}
