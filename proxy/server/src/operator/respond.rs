//! The operator endpoint's answers: headers every answer carries, the
//! dashboard's stricter ones, and `/health`.

use oram_volume::lease::{writable, Lease};

/// An answer of `status` with a body of `ctype`, never cached.
pub(crate) fn respond(
    status: http::StatusCode,
    ctype: &str,
    body: impl Into<bytes::Bytes>,
) -> http::Response<s3s::Body> {
    let mut r = http::Response::new(s3s::Body::from(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(ctype).expect("valid content type"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    h.insert(
        "x-content-type-options",
        http::HeaderValue::from_static("nosniff"),
    );
    r
}

/// A response for the dashboard's routes (the dashboard's: a strict content security policy).
pub(crate) fn dashboard_response(
    ctype: &str,
    body: impl Into<bytes::Bytes>,
) -> http::Response<s3s::Body> {
    let mut r = respond(http::StatusCode::OK, ctype, body);
    let h = r.headers_mut();
    h.insert(
        "content-security-policy",
        http::HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    h.insert("x-frame-options", http::HeaderValue::from_static("DENY"));
    h.insert(
        "referrer-policy",
        http::HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `GET /health`: 200 `ok` while this proxy may write; 503 with the reason
/// once its backend lease is lost (another proxy took the volume over) or
/// lapsed (renewals failed): writes are then refused and only reads pass, so a
/// load balancer or monitor must not count it as serving.
pub(crate) fn health(lease: Option<&Lease>) -> (http::StatusCode, String) {
    match writable(lease) {
        Ok(()) => (http::StatusCode::OK, "ok\n".into()),
        Err(e) => (http::StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use oram_blockstore::BlockStore;

    use super::*;

    /// `/health` answers 200 `ok` while the lease is held and 503 with the
    /// reason once another proxy took the volume over.
    #[tokio::test]
    async fn health_follows_the_lease() {
        assert_eq!(health(None), (http::StatusCode::OK, "ok\n".to_string()));
        let store: Arc<dyn BlockStore> = Arc::new(
            oram_store_fs::FsStore::open(tempfile::tempdir().unwrap().keep().join("store"))
                .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let d = Duration::from_secs(2);
        let held = Lease::acquire(store.clone(), "vol0", dir.path(), d)
            .await
            .unwrap();
        assert_eq!(
            health(Some(&held)),
            (http::StatusCode::OK, "ok\n".to_string())
        );
        // A restart in the same data directory after a crash takes the lease over
        // at once; the old holder notices at its next renewal (every quarter of
        // the lease). The crash: `lease.run` names a process that is gone (this
        // one still runs, so a start beside it would be refused as a copy). A
        // renewal of the old holder may rewrite `lease.run` between the edit and
        // the start: then the start is refused and tried again (bounded).
        let run = dir.path().join("lease.run");
        let mut taker = None;
        for _ in 0..10 {
            let text = std::fs::read_to_string(&run).unwrap();
            let crashed: Vec<String> = text
                .lines()
                .map(|l| {
                    if l.starts_with("pid = ") {
                        "pid = 4294967295".to_string()
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            assert!(crashed.iter().any(|l| l == "pid = 4294967295"), "{text}");
            std::fs::write(&run, crashed.join("\n")).unwrap();
            if let Ok(t) = Lease::acquire(store.clone(), "vol0", dir.path(), d).await {
                taker = Some(t);
                break;
            }
        }
        let _taker = taker.expect("a restart after a crash takes the lease over");
        let deadline = Instant::now() + Duration::from_secs(30);
        let (status, body) = loop {
            let (status, body) = health(Some(&held));
            if status != http::StatusCode::OK || Instant::now() > deadline {
                break (status, body);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(status, http::StatusCode::SERVICE_UNAVAILABLE);
        // Fenced either way: at its next renewal the old holder finds the lease
        // taken over, or (a renewal delayed on a busy machine) its validity lapses
        // first; both refuse writes and answer 503.
        assert!(
            body.contains("another proxy took over") || body.contains("could not be renewed"),
            "{body}"
        );
    }
}
