use super::*;
use crate::dlo::split_manifest;
use crate::listing::{filter_names, Entry, ListQuery};
use crate::util::split_object_path;
use http::HeaderMap;
use http_body_util::BodyExt;
use md5::Digest;

fn q(
    prefix: &str,
    delim: Option<&str>,
    marker: Option<&str>,
    end: Option<&str>,
    reverse: bool,
    limit: usize,
) -> ListQuery {
    ListQuery {
        limit,
        marker: marker.map(Into::into),
        end_marker: end.map(Into::into),
        prefix: prefix.into(),
        delimiter: delim.map(Into::into),
        reverse,
        path: false,
    }
}

fn names(e: &[Entry<()>]) -> Vec<&str> {
    e.iter().map(|e| e.name()).collect()
}

#[test]
fn account_listing_filters() {
    let items: Vec<(String, ())> = ["a", "b/1", "b/2", "c", "d"]
        .iter()
        .map(|s| (s.to_string(), ()))
        .collect();
    assert_eq!(
        names(&filter_names(
            items.clone(),
            &q("", None, None, None, false, 10)
        )),
        ["a", "b/1", "b/2", "c", "d"]
    );
    assert_eq!(
        names(&filter_names(
            items.clone(),
            &q("", Some("/"), None, None, false, 10)
        )),
        ["a", "b/", "c", "d"]
    );
    assert_eq!(
        names(&filter_names(
            items.clone(),
            &q("", None, Some("a"), Some("d"), false, 10)
        )),
        ["b/1", "b/2", "c"]
    );
    assert_eq!(
        names(&filter_names(
            items.clone(),
            &q("", None, Some("d"), Some("a"), true, 2)
        )),
        ["c", "b/2"]
    );
    assert_eq!(
        names(&filter_names(
            items.clone(),
            &q("b/", None, None, None, false, 1)
        )),
        ["b/1"]
    );
}

#[test]
fn manifest_and_paths() {
    assert_eq!(
        split_object_path("/c/o/x"),
        Some(("c".into(), "o/x".into()))
    );
    assert_eq!(split_object_path("c"), None);
    assert_eq!(split_object_path("c/"), None);
    assert_eq!(
        split_manifest("segs%20x/pre%2Ffix"),
        Some(("segs x".into(), "pre/fix".into()))
    );
    assert_eq!(
        split_manifest("segs/"),
        Some(("segs".into(), String::new()))
    );
}

// ---- the service over a real Path ORAM on the memory store ----

use http_body_util::Full;
use oram_objects::LayerConfig;
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{MemKv, MemState};
use oram_store_memory::MemoryStore;

/// Admins `alice` and `bob` (key `<name>-secret`), each of their own account.
fn admins() -> Vec<SwiftUser> {
    ["alice", "bob"]
        .iter()
        .map(|a| SwiftUser {
            account: a.to_string(),
            user: a.to_string(),
            key: format!("{a}-secret"),
            admin: true,
        })
        .collect()
}

fn api(ttl: Duration) -> SwiftApi {
    api_with(ttl, admins(), 2048, 256)
}

/// A service for `users` over a Path ORAM of `capacity` blocks of `block_size`.
fn api_with(ttl: Duration, users: Vec<SwiftUser>, capacity: u64, block_size: usize) -> SwiftApi {
    let oram = PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity,
                block_size,
                cached_levels: 3,
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
        Arc::new(MemoryStore::new()),
        Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random())),
        Box::new(MemState::new()),
    )
    .unwrap();
    let layer = ObjectLayer::new(
        Arc::new(oram),
        Box::new(MemKv::new()),
        LayerConfig::default(),
    )
    .unwrap();
    SwiftApi::new(
        layer,
        users,
        SwiftConfig {
            token_ttl: ttl,
            ..SwiftConfig::default()
        },
    )
}

async fn call(
    api: &SwiftApi,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, HeaderMap, Bytes) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    let resp = api.handle(req).await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status.as_u16(), parts.headers, body)
}

async fn login(api: &SwiftApi, who: &str) -> String {
    let key = format!("{who}-secret");
    let user = format!("{who}:{who}");
    let (s, h, _) = call(
        api,
        "GET",
        "/auth/v1.0",
        &[
            ("x-auth-user", &user),
            ("x-auth-key", &key),
            ("host", "h:1"),
        ],
        b"",
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        h["x-storage-url"],
        format!("http://h:1/v1/AUTH_{who}").as_str()
    );
    h["x-auth-token"].to_str().unwrap().to_string()
}

#[tokio::test]
async fn auth_is_checked_and_scoped_to_the_account() {
    let a = api(Duration::from_secs(600));
    let (s, h, _) = call(
        &a,
        "GET",
        "/auth/v1.0",
        &[("x-auth-user", "alice:alice"), ("x-auth-key", "bob-secret")],
        b"",
    )
    .await;
    assert_eq!(s, 401);
    assert!(h.contains_key("www-authenticate"));
    let alice = login(&a, "alice").await;
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice", &[], b"").await.0, 401);
    let t = [("x-auth-token", alice.as_str())];
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice", &t, b"").await.0, 204);
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_bob", &t, b"").await.0, 403);
    assert_eq!(call(&a, "PUT", "/v1/AUTH_bob/c", &t, b"").await.0, 403);
    let bad = [("x-auth-token", "AUTH_tk0000")];
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice", &bad, b"").await.0, 401);
    // Expired tokens are refused.
    let e = api(Duration::ZERO);
    let tok = login(&e, "alice").await;
    let t = [("x-auth-token", tok.as_str())];
    assert_eq!(call(&e, "HEAD", "/v1/AUTH_alice", &t, b"").await.0, 401);
}

#[tokio::test]
async fn objects_listings_limits_and_large_objects() {
    let a = api(Duration::from_secs(600));
    let tok = login(&a, "alice").await;
    let t = [("x-auth-token", tok.as_str())];
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c", &t, b"").await.0, 201);
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c", &t, b"").await.0, 202);
    // No length and no chunked encoding: 411. Too long a name: 400.
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c/x", &t, b"").await.0, 411);
    let long = format!("/v1/AUTH_alice/c/{}", "n".repeat(1025));
    let with_len = [("x-auth-token", tok.as_str()), ("content-length", "1")];
    assert_eq!(call(&a, "PUT", &long, &with_len, b"x").await.0, 400);
    // Metadata limits.
    let big = "v".repeat(257);
    let h = [
        ("x-auth-token", tok.as_str()),
        ("content-length", "0"),
        ("x-object-meta-k", big.as_str()),
    ];
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c/m", &h, b"").await.0, 400);
    // Objects, listings in three formats.
    for name in ["a/1", "a/2", "b", "%C3%BC"] {
        let h = [("x-auth-token", tok.as_str()), ("content-length", "3")];
        let uri = format!("/v1/AUTH_alice/c/{name}");
        assert_eq!(call(&a, "PUT", &uri, &h, b"abc").await.0, 201);
    }
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/c?delimiter=/", &t, b"").await;
    assert_eq!((s, &body[..]), (200, "a/\nb\nü\n".as_bytes()));
    // `path=` over names ending in a multi-byte character (once a panic).
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/c?path=", &t, b"").await;
    assert_eq!((s, &body[..]), (200, "b\nü\n".as_bytes()));
    let (_, h, body) = call(
        &a,
        "GET",
        "/v1/AUTH_alice/c?format=json&prefix=a/&reverse=1",
        &t,
        b"",
    )
    .await;
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v[0]["name"], "a/2");
    assert_eq!(v[1]["hash"], "900150983cd24fb0d6963f7d28e17f72");
    let (_, _, body) = call(
        &a,
        "GET",
        "/v1/AUTH_alice/c?format=xml&marker=a/2&end_marker=%C3%BC",
        &t,
        b"",
    )
    .await;
    let xml = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        xml.contains("<container name=\"c\"><object><name>b</name>"),
        "{xml}"
    );
    assert!(!xml.contains("a/2") && !xml.contains('ü'));
    assert_eq!(
        call(&a, "GET", "/v1/AUTH_alice/c?limit=10001", &t, b"")
            .await
            .0,
        412
    );
    // Not empty: 409.
    assert_eq!(call(&a, "DELETE", "/v1/AUTH_alice/c", &t, b"").await.0, 409);
    // A dynamic large object over a/1 and a/2.
    let h = [
        ("x-auth-token", tok.as_str()),
        ("content-length", "0"),
        ("x-object-manifest", "c/a/"),
    ];
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/c/big", &h, b"").await.0,
        201
    );
    let (s, h, body) = call(&a, "GET", "/v1/AUTH_alice/c/big", &t, b"").await;
    assert_eq!((s, &body[..]), (200, &b"abcabc"[..]));
    assert!(h["etag"].to_str().unwrap().starts_with('"'));
    let r = [("x-auth-token", tok.as_str()), ("range", "bytes=2-3")];
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/c/big", &r, b"").await;
    assert_eq!((s, &body[..]), (206, &b"ca"[..]));
    let m = [("x-auth-token", tok.as_str())];
    let (_, _, body) = call(
        &a,
        "GET",
        "/v1/AUTH_alice/c/big?multipart-manifest=get",
        &m,
        b"",
    )
    .await;
    assert!(body.is_empty());
    // Bulk delete of everything, then the container.
    let list = "/c/a/1\n/c/a/2\n/c/b\n/c/%C3%BC\n/c/big\n/c/none\n/c\n";
    let h = [
        ("x-auth-token", tok.as_str()),
        ("accept", "application/json"),
    ];
    let (s, _, body) = call(
        &a,
        "POST",
        "/v1/AUTH_alice?bulk-delete",
        &h,
        list.as_bytes(),
    )
    .await;
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (v["Number Deleted"].as_u64(), v["Number Not Found"].as_u64()),
        (Some(6), Some(1))
    );
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice/c", &t, b"").await.0, 404);
}

#[tokio::test]
async fn container_acls_admit_other_accounts_and_referrers() {
    let a = api(Duration::from_secs(600));
    let alice = login(&a, "alice").await;
    let bob = login(&a, "bob").await;
    let ta = [("x-auth-token", alice.as_str())];
    let tb = [("x-auth-token", bob.as_str())];
    let put_a = [("x-auth-token", alice.as_str()), ("content-length", "2")];
    let put_b = [("x-auth-token", bob.as_str()), ("content-length", "2")];
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c", &ta, b"").await.0, 201);
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/c/o", &put_a, b"hi").await.0,
        201
    );
    // No grant: bob is refused everything, an anonymous caller is asked to log in.
    for (m, uri) in [
        ("GET", "/v1/AUTH_alice/c/o"),
        ("GET", "/v1/AUTH_alice/c"),
        ("DELETE", "/v1/AUTH_alice/c/o"),
        ("HEAD", "/v1/AUTH_alice"),
        ("GET", "/v1/AUTH_alice/nothing/o"),
    ] {
        assert_eq!(call(&a, m, uri, &tb, b"").await.0, 403, "{m} {uri}");
        assert_eq!(call(&a, m, uri, &[], b"").await.0, 401, "{m} {uri}");
    }
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/c/p", &put_b, b"xx").await.0,
        403
    );
    // A read grant to bob's account: reads and listings, no writes, no ACL headers.
    let h = [
        ("x-auth-token", alice.as_str()),
        ("x-container-read", " bob ,"),
    ];
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &h, b"").await.0, 204);
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/c/o", &tb, b"").await;
    assert_eq!((s, &body[..]), (200, &b"hi"[..]));
    let (s, h, body) = call(&a, "GET", "/v1/AUTH_alice/c", &tb, b"").await;
    assert_eq!((s, &body[..]), (200, &b"o\n"[..]));
    assert!(!h.contains_key("x-container-read"));
    let (_, h, _) = call(&a, "HEAD", "/v1/AUTH_alice/c", &ta, b"").await;
    assert_eq!(h["x-container-read"], "bob");
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/c/p", &put_b, b"xx").await.0,
        403
    );
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &tb, b"").await.0, 403);
    // A write grant to bob:bob: PUT, COPY across accounts, DELETE.
    let h = [
        ("x-auth-token", alice.as_str()),
        ("x-container-write", "bob:bob"),
    ];
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &h, b"").await.0, 204);
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/c/p", &put_b, b"xx").await.0,
        201
    );
    assert_eq!(call(&a, "PUT", "/v1/AUTH_bob/mine", &tb, b"").await.0, 201);
    let put_bm = [("x-auth-token", bob.as_str()), ("content-length", "3")];
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_bob/mine/s", &put_bm, b"bob")
            .await
            .0,
        201
    );
    let copy = [
        ("x-auth-token", bob.as_str()),
        ("destination", "c/from-bob"),
        ("destination-account", "AUTH_alice"),
    ];
    assert_eq!(
        call(&a, "COPY", "/v1/AUTH_bob/mine/s", &copy, b"").await.0,
        201
    );
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/c/from-bob", &ta, b"").await;
    assert_eq!((s, &body[..]), (200, &b"bob"[..]));
    // ...and from alice's container into bob's own (X-Copy-From-Account).
    let h = [
        ("x-auth-token", bob.as_str()),
        ("content-length", "0"),
        ("x-copy-from", "c/o"),
        ("x-copy-from-account", "AUTH_alice"),
    ];
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_bob/mine/copy", &h, b"").await.0,
        201
    );
    // A source container bob may not read: 403 before anything else.
    let h = [
        ("x-auth-token", alice.as_str()),
        ("content-length", "0"),
        ("x-copy-from", "mine/s"),
        ("x-copy-from-account", "AUTH_bob"),
    ];
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/c/x", &h, b"").await.0, 403);
    assert_eq!(
        call(&a, "DELETE", "/v1/AUTH_alice/c/p", &tb, b"").await.0,
        204
    );
    // Referrer grants: anyone reads objects; listings need .rlistings.
    assert_eq!(call(&a, "GET", "/v1/AUTH_alice/c/o", &[], b"").await.0, 401);
    let h = [
        ("x-auth-token", alice.as_str()),
        ("x-container-read", ".r:*"),
    ];
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &h, b"").await.0, 204);
    assert_eq!(call(&a, "GET", "/v1/AUTH_alice/c/o", &[], b"").await.0, 200);
    assert_eq!(call(&a, "GET", "/v1/AUTH_alice/c", &[], b"").await.0, 401);
    assert_eq!(
        call(
            &a,
            "PUT",
            "/v1/AUTH_alice/c/o",
            &[("content-length", "2")],
            b"no"
        )
        .await
        .0,
        401
    );
    let h = [
        ("x-auth-token", alice.as_str()),
        ("x-container-read", ".r:*,.rlistings"),
    ];
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &h, b"").await.0, 204);
    assert_eq!(call(&a, "GET", "/v1/AUTH_alice/c", &[], b"").await.0, 200);
    // Removal, and bad ACLs.
    let h = [
        ("x-auth-token", alice.as_str()),
        ("x-remove-container-read", "x"),
    ];
    assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &h, b"").await.0, 204);
    assert_eq!(call(&a, "GET", "/v1/AUTH_alice/c/o", &[], b"").await.0, 401);
    for (k, v) in [("x-container-write", ".r:*"), ("x-container-read", ".x:y")] {
        let h = [("x-auth-token", alice.as_str()), (k, v)];
        assert_eq!(call(&a, "POST", "/v1/AUTH_alice/c", &h, b"").await.0, 400);
    }
    // An invalid token is 401 even where the container is public.
    let bad = [("x-auth-token", "AUTH_tk0000")];
    assert_eq!(
        call(&a, "GET", "/v1/AUTH_alice/c/o", &bad, b"").await.0,
        401
    );
}

#[tokio::test]
async fn static_large_objects() {
    let a = api(Duration::from_secs(600));
    let tok = login(&a, "alice").await;
    let t = [("x-auth-token", tok.as_str())];
    assert_eq!(call(&a, "PUT", "/v1/AUTH_alice/s", &t, b"").await.0, 201);
    for (name, data) in [("s1", &b"hello "[..]), ("s2", b"world"), ("s3", b"!")] {
        let len = data.len().to_string();
        let h = [
            ("x-auth-token", tok.as_str()),
            ("content-length", len.as_str()),
        ];
        let uri = format!("/v1/AUTH_alice/s/{name}");
        assert_eq!(call(&a, "PUT", &uri, &h, data).await.0, 201);
    }
    let md5 = |b: &[u8]| hex::encode(md5::Md5::digest(b));
    let manifest = serde_json::json!([
        {"path": "/s/s1", "etag": md5(b"hello "), "size_bytes": 6},
        {"path": "s/s2", "range": "1-3"},
        {"path": "/s/s3"},
    ])
    .to_string();
    let len = manifest.len().to_string();
    let h = [
        ("x-auth-token", tok.as_str()),
        ("content-length", len.as_str()),
    ];
    let (s, hd, _) = call(
        &a,
        "PUT",
        "/v1/AUTH_alice/s/m?multipart-manifest=put",
        &h,
        manifest.as_bytes(),
    )
    .await;
    assert_eq!(s, 201);
    let want = md5(format!("{}{}:1-3;{}", md5(b"hello "), md5(b"world"), md5(b"!")).as_bytes());
    assert_eq!(hd["etag"], format!("\"{want}\"").as_str());
    let (s, hd, body) = call(&a, "GET", "/v1/AUTH_alice/s/m", &t, b"").await;
    assert_eq!((s, &body[..]), (200, &b"hello orl!"[..]));
    assert_eq!(hd["x-static-large-object"], "True");
    let r = [("x-auth-token", tok.as_str()), ("range", "bytes=4-7")];
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/s/m", &r, b"").await;
    assert_eq!((s, &body[..]), (206, &b"o or"[..]));
    let (_, hd, _) = call(&a, "HEAD", "/v1/AUTH_alice/s/m", &t, b"").await;
    assert_eq!(hd["content-length"], "10");
    // A manifest within a manifest, ranged.
    let nested = r#"[{"path": "/s/m", "range": "2-8"}, {"path": "/s/s3"}]"#;
    let len = nested.len().to_string();
    let h = [
        ("x-auth-token", tok.as_str()),
        ("content-length", len.as_str()),
    ];
    let uri = "/v1/AUTH_alice/s/n?multipart-manifest=put";
    assert_eq!(call(&a, "PUT", uri, &h, nested.as_bytes()).await.0, 201);
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/s/n", &t, b"").await;
    assert_eq!((s, &body[..]), (200, &b"llo orl!"[..]));
    // A segment replaced after the manifest was put: the read fails.
    let h = [("x-auth-token", tok.as_str()), ("content-length", "1")];
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/s/s3", &h, b"?").await.0,
        201
    );
    assert_eq!(call(&a, "GET", "/v1/AUTH_alice/s/m", &t, b"").await.0, 409);
    // Mismatches are listed in one 400; nothing is stored.
    let bad = r#"[{"path": "/s/s1", "size_bytes": 7}, {"path": "/s/none"}]"#;
    let len = bad.len().to_string();
    let h = [
        ("x-auth-token", tok.as_str()),
        ("content-length", len.as_str()),
    ];
    let uri = "/v1/AUTH_alice/s/bad?multipart-manifest=put";
    let (s, _, body) = call(&a, "PUT", uri, &h, bad.as_bytes()).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(s, 400, "{text}");
    assert!(
        text.contains("/s/s1, Size Mismatch") && text.contains("/s/none, 404 Not Found"),
        "{text}"
    );
    assert_eq!(
        call(&a, "HEAD", "/v1/AUTH_alice/s/bad", &t, b"").await.0,
        404
    );
    for bad in [
        "{}",
        "[]",
        "[{\"path\": \"/s/s1\", \"x\": 1}]",
        "[{\"path\": \"s1\"}]",
    ] {
        let len = bad.len().to_string();
        let h = [
            ("x-auth-token", tok.as_str()),
            ("content-length", len.as_str()),
        ];
        assert_eq!(
            call(&a, "PUT", uri, &h, bad.as_bytes()).await.0,
            400,
            "{bad}"
        );
    }
    // Deleting the manifest with its segments.
    let (s, _, body) = call(
        &a,
        "DELETE",
        "/v1/AUTH_alice/s/n?multipart-manifest=delete",
        &[
            ("x-auth-token", tok.as_str()),
            ("accept", "application/json"),
        ],
        b"",
    )
    .await;
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    // n, m, s3 (named twice: once found), and m's s1, s2.
    assert_eq!(v["Number Deleted"], 5, "{v}");
    let (_, _, body) = call(&a, "GET", "/v1/AUTH_alice/s", &t, b"").await;
    assert!(body.is_empty(), "{}", String::from_utf8_lossy(&body));
}

mod auth_limits;
mod cors;
mod fullness;
mod slo_limits;
