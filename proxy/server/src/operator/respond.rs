//! The operator endpoint's answers: headers every answer carries, the
//! dashboard's stricter ones, and `/health`.

use oram_objects::Usage;
use oram_volume::lease::{writable, Lease};

/// Backend write calls failing in a row after which `/health` reports that the
/// backend refuses writes (rounds retry a failed write a few times first).
pub(crate) const REFUSED_WRITES: u64 = 5;

/// The used share of the capacity, in percent, from which `/health` reports
/// the volume as nearly full.
pub(crate) const NEARLY_FULL_PERCENT: u64 = 95;

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
/// lapsed (renewals failed), or while the backend refuses writes (the last
/// [`REFUSED_WRITES`] write calls failed): writes then fail and only reads
/// pass, so a load balancer or monitor must not count it as serving. 200 with
/// `degraded: …` while it serves but the volume is [`NEARLY_FULL_PERCENT`] %
/// full or more, with what to do.
pub(crate) fn health(
    lease: Option<&Lease>,
    usage: Usage,
    failed_writes_in_a_row: u64,
) -> (http::StatusCode, String) {
    use http::StatusCode;
    if let Err(e) = writable(lease) {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"));
    }
    if failed_writes_in_a_row >= REFUSED_WRITES {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the backend refuses writes: the last {failed_writes_in_a_row} write requests failed \
                 (oram_backend_errors_total{{verb=\"put\"}}; the log says why)\n"
            ),
        );
    }
    let cap = usage.capacity_blocks;
    let used = cap.saturating_sub(usage.free_blocks);
    if cap > 0 && used.saturating_mul(100) >= cap.saturating_mul(NEARLY_FULL_PERCENT) {
        return (
            StatusCode::OK,
            format!(
                "degraded: the volume is {} % full ({} of {cap} blocks free); delete objects, \
                 abort incomplete multipart uploads, or grow the volume (`oram-proxy grow`)\n",
                used * 100 / cap,
                usage.free_blocks
            ),
        );
    }
    (StatusCode::OK, "ok\n".into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use oram_blockstore::BlockStore;

    use super::*;

    fn usage(capacity_blocks: u64, free_blocks: u64) -> Usage {
        Usage {
            capacity_blocks,
            free_blocks,
            block_size: 16384,
        }
    }

    /// `/health` is degraded (200, with what to do) on a volume 95 % full and
    /// unavailable (503) while the backend refuses writes.
    #[test]
    fn health_reports_a_nearly_full_volume_and_a_backend_refusing_writes() {
        let (s, body) = health(None, usage(1000, 51), 0);
        assert_eq!((s, body.as_str()), (http::StatusCode::OK, "ok\n"));
        let (s, body) = health(None, usage(1000, 50), 0);
        assert_eq!(s, http::StatusCode::OK);
        assert!(
            body.starts_with("degraded: the volume is 95 % full (50 of 1000 blocks free)"),
            "{body}"
        );
        assert!(body.contains("delete objects"), "{body}");
        let (s, body) = health(None, usage(1000, 0), 0);
        assert!(
            s == http::StatusCode::OK && body.contains("100 % full"),
            "{body}"
        );
        let (s, body) = health(None, usage(1000, 500), REFUSED_WRITES - 1);
        assert_eq!((s, body.as_str()), (http::StatusCode::OK, "ok\n"));
        let (s, body) = health(None, usage(1000, 0), REFUSED_WRITES);
        assert_eq!(s, http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.starts_with("the backend refuses writes: the last 5 write requests failed"),
            "{body}"
        );
        // An empty volume of no capacity is not "full".
        assert_eq!(health(None, usage(0, 0), 0).1, "ok\n");
    }

    /// `/health` answers 200 `ok` while the lease is held and 503 with the
    /// reason once another proxy took the volume over.
    #[tokio::test]
    async fn health_follows_the_lease() {
        let roomy = usage(1000, 500);
        assert_eq!(
            health(None, roomy, 0),
            (http::StatusCode::OK, "ok\n".to_string())
        );
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
            health(Some(&held), roomy, 0),
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
            let (status, body) = health(Some(&held), roomy, 0);
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
