//! Logins within bounds: failed logins throttled per client network and per
//! user, and the token cap per user.

use super::*;
use std::net::IpAddr;

fn users() -> Vec<SwiftUser> {
    let u = |account: &str, user: &str, admin: bool| SwiftUser {
        account: account.into(),
        user: user.into(),
        key: format!("{user}-secret"),
        admin,
    };
    vec![
        u("alice", "alice", true),
        u("alice", "ops", false),
        u("bob", "bob", true),
    ]
}

/// A login as `user` with `key` from `from`: the status.
async fn login_from(a: &SwiftApi, from: &str, user: &str, key: &str) -> (u16, HeaderMap) {
    let ip: IpAddr = from.parse().unwrap();
    let mut req = Request::builder()
        .uri("/auth/v1.0")
        .header("x-auth-user", user)
        .header("x-auth-key", key)
        .body(Full::new(Bytes::new()))
        .unwrap();
    req.extensions_mut().insert(ClientAddr(ip));
    let resp = a.handle(req).await;
    (resp.status().as_u16(), resp.headers().clone())
}

#[tokio::test]
async fn failed_logins_are_throttled_per_ipv6_64_not_per_address() {
    let a = api_with(Duration::from_secs(600), users(), 2048, 256);
    for n in 1..=limits::LOGIN_FAILURES_PER_CLIENT {
        let from = format!("2001:db8::{n:x}");
        let (s, _) = login_from(&a, &from, "nobody:x", "guess").await;
        assert_eq!(s, 401, "attempt {n}");
    }
    // Another address of the same /64, even with a valid key: throttled.
    let (s, h) = login_from(&a, "2001:db8::ffff", "bob:bob", "bob-secret").await;
    assert_eq!(s, 429);
    assert!(h.contains_key("retry-after"));
    // Another /64 is not.
    let (s, _) = login_from(&a, "2001:db8:0:1::1", "bob:bob", "bob-secret").await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn failed_logins_are_throttled_per_user_across_addresses() {
    let a = api_with(Duration::from_secs(600), users(), 2048, 256);
    for n in 0..limits::LOGIN_FAILURES_PER_USER {
        let from = format!("10.{}.{}.1", n / 256, n % 256);
        let (s, _) = login_from(&a, &from, "alice:alice", "guess").await;
        assert_eq!(s, 401, "attempt {n}");
    }
    // From a fresh address the user is throttled, even with its key...
    let (s, _) = login_from(&a, "192.0.2.1", "alice:alice", "alice-secret").await;
    assert_eq!(s, 429);
    // ...and another user of the same account is not.
    let (s, _) = login_from(&a, "192.0.2.1", "alice:ops", "ops-secret").await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn a_non_admin_user_cannot_evict_the_admins_tokens() {
    let a = api_with(Duration::from_secs(600), users(), 2048, 256);
    let (s, h) = login_from(&a, "192.0.2.1", "alice:alice", "alice-secret").await;
    assert_eq!(s, 200);
    let admin = h["x-auth-token"].to_str().unwrap().to_string();
    let mut first = None;
    for n in 0..=limits::MAX_TOKENS_PER_USER {
        let (s, h) = login_from(&a, "192.0.2.2", "alice:ops", "ops-secret").await;
        assert_eq!(s, 200, "login {n}");
        first.get_or_insert_with(|| h["x-auth-token"].to_str().unwrap().to_string());
    }
    let t = [("x-auth-token", admin.as_str())];
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice", &t, b"").await.0, 204);
    // The user's own oldest token went.
    let t = [("x-auth-token", first.as_deref().unwrap())];
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice/c", &t, b"").await.0, 401);
}
