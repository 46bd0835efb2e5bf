//! Static large objects within bounds: the flattened segment count, the
//! manifest bytes and the nesting depth a request may expand (when a manifest
//! is put, read and deleted), and `multipart-manifest=delete` reading only
//! manifests the caller may read.

use super::*;
use oram_objects::{ObjectMeta, PutOptions};

/// A service with room for manifests of 1000 segments (4 MiB of blocks).
fn big_api() -> SwiftApi {
    api_with(Duration::from_secs(600), admins(), 1024, 4096)
}

async fn put(a: &SwiftApi, tok: &str, uri: &str, body: &[u8]) -> (u16, HeaderMap, String) {
    let len = body.len().to_string();
    let h = [("x-auth-token", tok), ("content-length", len.as_str())];
    let (s, h, b) = call(a, "PUT", uri, &h, body).await;
    (s, h, String::from_utf8_lossy(&b).into_owned())
}

/// Puts manifest `c/o` naming `paths`; its status, ETag (hex) and body.
async fn put_manifest(
    a: &SwiftApi,
    tok: &str,
    (c, o): (&str, &str),
    paths: &[String],
) -> (u16, String, String) {
    let m: Vec<_> = paths
        .iter()
        .map(|p| serde_json::json!({ "path": p }))
        .collect();
    let uri = format!("/v1/AUTH_alice/{c}/{o}?multipart-manifest=put");
    let (s, h, body) = put(a, tok, &uri, serde_json::to_string(&m).unwrap().as_bytes()).await;
    let etag = h
        .get("etag")
        .map(|e| e.to_str().unwrap().trim_matches('"').to_string())
        .unwrap_or_default();
    (s, etag, body)
}

/// Stores manifest `c/o` of `alice` as a version without the recorded
/// expansion stored it: straight through the object layer, unchecked.
async fn put_legacy_manifest(a: &SwiftApi, (c, o): (&str, &str), entries: &serde_json::Value) {
    let json = serde_json::to_vec(entries).unwrap();
    let mut meta = ObjectMeta::default();
    meta.extra.insert(crate::slo::SLO.into(), "True".into());
    meta.extra
        .insert(crate::slo::SLO_SIZE.into(), "1000000".into());
    meta.extra
        .insert(crate::slo::SLO_ETAG.into(), "0".repeat(32));
    let opts = PutOptions {
        meta,
        expected_len: Some(json.len() as u64),
        ..PutOptions::default()
    };
    let body: oram_objects::ByteStream =
        Box::pin(futures::stream::once(async move { Ok(Bytes::from(json)) }));
    a.inner
        .layer
        .put_object("alice", c, o, body, opts)
        .await
        .unwrap();
}

/// One plain segment `s/x` and manifest `s/a` of 1000 references to it.
async fn thousand(a: &SwiftApi, tok: &str) -> String {
    assert_eq!(put(a, tok, "/v1/AUTH_alice/s", b"").await.0, 201);
    assert_eq!(put(a, tok, "/v1/AUTH_alice/s/x", b"x").await.0, 201);
    let (s, etag, body) = put_manifest(a, tok, ("s", "a"), &vec!["/s/x".into(); 1000]).await;
    assert_eq!(s, 201, "{body}");
    etag
}

#[tokio::test]
async fn a_manifest_expanding_beyond_the_segment_budget_is_refused_when_put() {
    let a = big_api();
    let tok = login(&a, "alice").await;
    thousand(&a, &tok).await;
    // Ten times a manifest of 1000 is the budget exactly; eleven is beyond.
    let (s, _, body) = put_manifest(&a, &tok, ("s", "t10"), &vec!["/s/a".into(); 10]).await;
    assert_eq!(s, 201, "{body}");
    let (s, _, body) = put_manifest(&a, &tok, ("s", "t11"), &vec!["/s/a".into(); 11]).await;
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("10000 segments"), "{body}");
    // Three levels of 1000: refused at the second.
    let (s, _, body) = put_manifest(&a, &tok, ("s", "t"), &vec!["/s/a".into(); 1000]).await;
    assert_eq!(s, 400, "{body}");
    let t = [("x-auth-token", tok.as_str())];
    for o in ["t11", "t"] {
        let uri = format!("/v1/AUTH_alice/s/{o}");
        assert_eq!(call(&a, "HEAD", &uri, &t, b"").await.0, 404, "{o}");
    }
    // What was accepted reads whole within the budget.
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/s/t10", &t, b"").await;
    assert_eq!((s, body.len()), (200, 10_000));
    assert_eq!(a.slo_segments_read(), 10_000);
}

#[tokio::test]
async fn a_manifest_nested_deeper_than_the_limit_is_refused_when_put() {
    let a = api(Duration::from_secs(600));
    let tok = login(&a, "alice").await;
    assert_eq!(put(&a, &tok, "/v1/AUTH_alice/s", b"").await.0, 201);
    assert_eq!(put(&a, &tok, "/v1/AUTH_alice/s/x", b"x").await.0, 201);
    let mut below = "/s/x".to_string();
    for depth in 1..=limits::MAX_MANIFEST_NESTING {
        let o = format!("m{depth}");
        let (s, _, body) = put_manifest(&a, &tok, ("s", &o), &[below]).await;
        assert_eq!(s, 201, "depth {depth}: {body}");
        below = format!("/s/{o}");
    }
    let (s, _, body) = put_manifest(&a, &tok, ("s", "deeper"), &[below.clone()]).await;
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("nested"), "{body}");
    let t = [("x-auth-token", tok.as_str())];
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/s/m10", &t, b"").await;
    assert_eq!((s, &body[..]), (200, &b"x"[..]));
}

#[tokio::test]
async fn a_manifest_tree_put_unchecked_is_expanded_lazily_within_the_request_budget() {
    let a = big_api();
    let tok = login(&a, "alice").await;
    let etag = thousand(&a, &tok).await;
    let t = [("x-auth-token", tok.as_str())];
    let sub = |n: usize| {
        let e = serde_json::json!({
            "name": "/s/a", "bytes": 1000, "hash": etag, "sub_slo": true,
        });
        serde_json::Value::Array(vec![e; n])
    };
    // 1000 x 1000 segments, as a version that did not count them stored it.
    put_legacy_manifest(&a, ("s", "t"), &sub(1000)).await;
    let size = |o: &str| a.inner.layer.head_object("alice", "s", o).unwrap().size;
    // One byte of it reads the top manifest and one nested manifest only.
    let r = [("x-auth-token", tok.as_str()), ("range", "bytes=1000-1000")];
    let (s, _, body) = call(&a, "GET", "/v1/AUTH_alice/s/t", &r, b"").await;
    assert_eq!((s, &body[..]), (206, &b"x"[..]));
    assert_eq!(a.slo_manifest_bytes_read(), size("t") + size("a"));
    assert_eq!(a.slo_segments_read(), 1);
    // Deleting it with its segments stops at the budget before deleting anything.
    let (s, _, body) = call(
        &a,
        "DELETE",
        "/v1/AUTH_alice/s/t?multipart-manifest=delete",
        &t,
        b"",
    )
    .await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(s, 400, "{text}");
    assert!(text.contains("Too many buffered slo segments"), "{text}");
    assert_eq!(call(&a, "HEAD", "/v1/AUTH_alice/s/x", &t, b"").await.0, 200);
    // Eleven nested manifests of 1000: the read stops at the segment budget,
    // having read at most that many segments.
    put_legacy_manifest(&a, ("s", "t11"), &sub(11)).await;
    let mut req = Request::builder().uri("/v1/AUTH_alice/s/t11");
    req = req.header("x-auth-token", tok.as_str());
    let resp = a.handle(req.body(Full::new(Bytes::new())).unwrap()).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.into_body().collect().await.is_err(), "a cut body");
    assert_eq!(
        a.slo_segments_read(),
        1 + limits::MAX_SLO_SEGMENTS_PER_REQUEST
    );
}

#[tokio::test]
async fn multipart_delete_reads_no_manifest_the_caller_cannot_read() {
    let a = api(Duration::from_secs(600));
    let alice = login(&a, "alice").await;
    let bob = login(&a, "bob").await;
    let at = [("x-auth-token", alice.as_str())];
    for c in ["hidden", "w", "rw"] {
        let uri = format!("/v1/AUTH_alice/{c}");
        assert_eq!(put(&a, &alice, &uri, b"").await.0, 201);
    }
    // bob may write `w` (not read it) and read and write `rw`; `hidden` is alice's.
    let acl = |c: &str, read: bool| {
        let uri = format!("/v1/AUTH_alice/{c}");
        let mut h = vec![
            ("x-auth-token", alice.as_str()),
            ("x-container-write", "bob"),
        ];
        if read {
            h.push(("x-container-read", "bob"));
        }
        (uri, h)
    };
    for (c, read) in [("w", false), ("rw", true)] {
        let (uri, h) = acl(c, read);
        assert_eq!(call(&a, "POST", &uri, &h, b"").await.0, 204);
    }
    assert_eq!(
        put(&a, &alice, "/v1/AUTH_alice/hidden/secret-seg", b"s")
            .await
            .0,
        201
    );
    assert_eq!(put(&a, &alice, "/v1/AUTH_alice/rw/seg", b"r").await.0, 201);
    let (s, _, b) = put_manifest(
        &a,
        &alice,
        ("hidden", "sub"),
        &["/hidden/secret-seg".into()],
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let top = ["/hidden/sub".to_string(), "/rw/seg".to_string()];
    for c in ["w", "rw"] {
        let (s, _, b) = put_manifest(&a, &alice, (c, "top"), &top).await;
        assert_eq!(s, 201, "{b}");
    }
    let bt = [("x-auth-token", bob.as_str())];
    // A manifest bob cannot read is neither read nor deleted.
    let uri = "/v1/AUTH_alice/w/top?multipart-manifest=delete";
    let (s, _, body) = call(&a, "DELETE", uri, &bt, b"").await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(s, 200, "{text}");
    assert!(text.contains("/w/top, 403 Forbidden"), "{text}");
    assert!(!text.contains("hidden"), "{text}");
    assert_eq!(
        call(&a, "HEAD", "/v1/AUTH_alice/w/top", &at, b"").await.0,
        200
    );
    assert_eq!(
        call(&a, "HEAD", "/v1/AUTH_alice/rw/seg", &at, b"").await.0,
        200
    );
    // One bob can read: the nested manifest in `hidden` is not read, so no
    // name in it shows; what bob may delete is deleted.
    let uri = "/v1/AUTH_alice/rw/top?multipart-manifest=delete";
    let (s, _, body) = call(&a, "DELETE", uri, &bt, b"").await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(s, 200, "{text}");
    assert!(text.contains("/hidden/sub, 403 Forbidden"), "{text}");
    assert!(!text.contains("secret-seg"), "{text}");
    assert!(text.contains("Number Deleted: 2"), "{text}");
    for (o, want) in [
        ("hidden/sub", 200),
        ("hidden/secret-seg", 200),
        ("rw/seg", 404),
        ("rw/top", 404),
    ] {
        let uri = format!("/v1/AUTH_alice/{o}");
        assert_eq!(call(&a, "HEAD", &uri, &at, b"").await.0, want, "{o}");
    }
}
