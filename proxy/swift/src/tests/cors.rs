//! CORS: preflights without a token, answered by the container's allowed
//! origins; the `Access-Control-*` headers of other answers.

use super::*;

#[tokio::test]
async fn preflights_and_answers_follow_the_containers_origins() {
    let a = api(Duration::from_secs(600));
    let tok = login(&a, "alice").await;
    let t = ("x-auth-token", tok.as_str());
    let allow = (
        "x-container-meta-access-control-allow-origin",
        "http://ok.com",
    );
    assert_eq!(
        call(&a, "PUT", "/v1/AUTH_alice/c", &[t, allow], b"")
            .await
            .0,
        201
    );
    assert_eq!(
        call(
            &a,
            "PUT",
            "/v1/AUTH_alice/c/o",
            &[t, ("content-length", "4")],
            b"data"
        )
        .await
        .0,
        201
    );
    let url = "/v1/AUTH_alice/c/o";
    // Without Origin: the methods allowed.
    let (s, h, _) = call(&a, "OPTIONS", url, &[], b"").await;
    assert_eq!(s, 200);
    assert!(h["allow"].to_str().unwrap().contains("PUT"));
    // A preflight needs a method and an allowed origin.
    let ok = ("origin", "http://ok.com");
    assert_eq!(call(&a, "OPTIONS", url, &[ok], b"").await.0, 401);
    let get = ("access-control-request-method", "GET");
    let (s, h, _) = call(&a, "OPTIONS", url, &[("origin", "http://no.com"), get], b"").await;
    assert_eq!(s, 401);
    assert!(!h.contains_key("access-control-allow-origin"));
    let asked = ("access-control-request-headers", "x-custom");
    let (s, h, _) = call(&a, "OPTIONS", url, &[ok, get, asked], b"").await;
    assert_eq!(s, 200);
    assert_eq!(h["access-control-allow-origin"], "http://ok.com");
    assert_eq!(h["access-control-allow-headers"], "x-custom");
    // Other answers carry the CORS headers only for an allowed origin.
    let (s, h, _) = call(&a, "GET", url, &[t, ok], b"").await;
    assert_eq!(s, 200);
    assert_eq!(h["access-control-allow-origin"], "http://ok.com");
    assert!(h["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .contains("etag"));
    let (_, h, _) = call(&a, "GET", url, &[t, ("origin", "http://no.com")], b"").await;
    assert!(!h.contains_key("access-control-allow-origin"));
    // Errors too (a missing object of that container).
    let (s, h, _) = call(&a, "GET", "/v1/AUTH_alice/c/none", &[t, ok], b"").await;
    assert_eq!(s, 404);
    assert_eq!(h["access-control-allow-origin"], "http://ok.com");
    // `*` allows every origin and is answered as `*`.
    let star = ("x-container-meta-access-control-allow-origin", "*");
    assert_eq!(
        call(&a, "POST", "/v1/AUTH_alice/c", &[t, star], b"")
            .await
            .0,
        204
    );
    let (s, h, _) = call(
        &a,
        "OPTIONS",
        url,
        &[("origin", "http://any.com"), get],
        b"",
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(h["access-control-allow-origin"], "*");
}
