//! The volume's fullness in the account's headers.

use super::*;
use crate::account::{CAPACITY_HEADER, FREE_HEADER, QUOTA_HEADER};

fn number(h: &HeaderMap, name: &str) -> u64 {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_account_shows_the_volumes_capacity_and_free_space() {
    // 2048 blocks of 256 bytes.
    let a = api(Duration::from_secs(600));
    let tok = login(&a, "alice").await;
    let t = [("x-auth-token", tok.as_str())];
    let (s, h, _) = call(&a, "HEAD", "/v1/AUTH_alice", &t, b"").await;
    assert_eq!(s, 204);
    let capacity = number(&h, QUOTA_HEADER);
    assert_eq!(capacity, 2048 * 256);
    assert_eq!(number(&h, CAPACITY_HEADER), capacity);
    let free = number(&h, FREE_HEADER);
    assert!(free <= capacity);
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c", &t, b"").await.0, 201);
    let put = [t[0], ("content-length", "1000")];
    let (s, _, _) = call(&a, "PUT", "/v1/AUTH_alice/c/o", &put, &[1u8; 1000]).await;
    assert_eq!(s, 201);
    // GET too; 1000 bytes take 4 blocks.
    let (s, h, _) = call(&a, "GET", "/v1/AUTH_alice", &t, b"").await;
    assert_eq!(s, 200);
    assert_eq!(number(&h, FREE_HEADER), free - 4 * 256);
    assert_eq!(h.get_all(QUOTA_HEADER).iter().count(), 1);
    // The quota is the proxy's to set, not the client's.
    let set = [t[0], (QUOTA_HEADER, "5")];
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice", &set, b"").await.0, 403);
    let (_, h, _) = call(&a, "HEAD", "/v1/AUTH_alice", &t, b"").await;
    assert_eq!(number(&h, QUOTA_HEADER), capacity);
}
