//! The access log (`[log] access = true`, `--access-log`): one line per client
//! request of the S3 and Swift listeners, under the log target [`TARGET`] at
//! info level, written when the request is over (its answer's body sent or
//! dropped, its body no longer read). Fields: `api`, `remote` (client address),
//! `user` (the S3 access key the request names in its `Authorization` header or
//! presigned query; the Swift `<account>:<user>` of its token or login), `method`,
//! `path` (as sent, percent-encoded, without the query string: a presigned URL's
//! signature and credential stay out), `op` (the operation, from the fixed set
//! of [`crate::classify`]), `status`, `bytes_in` and `bytes_out` (body bytes),
//! `duration_ms`, `request_id` (S3 `x-amz-request-id`, Swift `x-trans-id`). A
//! secret key, signature, token or query value is never part of it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::Api;

/// The log target of the access log (what `RUST_LOG` names to route it, e.g.
/// `RUST_LOG=warn,oram_proxy::access=info`).
pub const TARGET: &str = "oram_proxy::access";

/// Longest user name and path logged (bytes; longer ones are cut).
const MAX_FIELD: usize = 1024;

/// What the answer said (set once, when the handler returned).
struct Answer {
    status: u16,
    request_id: String,
    user: Option<String>,
}

/// One request's entry, shared by its request body (bytes in), its answer's
/// body (bytes out) and the handler's wrapper; the line is written when the
/// last of them lets go of it.
pub(crate) struct Entry {
    api: Api,
    remote: Option<SocketAddr>,
    method: http::Method,
    path: String,
    op: &'static str,
    /// The S3 access key the request names (Swift: from the answer).
    user: Option<String>,
    started: Instant,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    answer: OnceLock<Answer>,
}

impl Entry {
    /// The entry of a request, before its handler runs.
    pub(crate) fn new<B>(api: Api, req: &http::Request<B>, op: &'static str) -> Self {
        let uri = req.uri();
        let user = match api {
            Api::S3 => s3_access_key(req.headers(), uri.query()),
            Api::Swift => None,
        };
        Self {
            api,
            remote: req
                .extensions()
                .get::<crate::serve::PeerAddr>()
                .map(|p| p.0),
            method: req.method().clone(),
            path: clean(uri.path()),
            op,
            user,
            started: Instant::now(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            answer: OnceLock::new(),
        }
    }

    /// Notes the answer's status, request id and (Swift) user.
    pub(crate) fn answered<B>(&self, resp: &http::Response<B>) {
        let h = resp.headers();
        let request_id = ["x-amz-request-id", "x-trans-id"]
            .iter()
            .find_map(|n| h.get(*n).and_then(|v| v.to_str().ok()))
            .map_or_else(|| "-".to_string(), clean);
        let user = resp
            .extensions()
            .get::<oram_swift::RequestUser>()
            .map(|u| clean(&u.0));
        let _ = self.answer.set(Answer {
            status: resp.status().as_u16(),
            request_id,
            user,
        });
    }

    /// Notes that the handler failed (status 500, as the metrics count it).
    pub(crate) fn failed(&self) {
        let _ = self.answer.set(Answer {
            status: 500,
            request_id: "-".into(),
            user: None,
        });
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let (status, request_id, answer_user) = match self.answer.get() {
            Some(a) => (a.status, a.request_id.as_str(), a.user.as_deref()),
            None => (0, "-", None),
        };
        let remote = self
            .remote
            .map_or_else(|| "-".to_string(), |a| a.to_string());
        let user = self.user.as_deref().or(answer_user).unwrap_or("-");
        tracing::info!(
            target: TARGET,
            api = self.api.name(),
            remote = %remote,
            user,
            method = %self.method,
            path = %self.path,
            op = self.op,
            status,
            bytes_in = self.bytes_in.load(Ordering::Relaxed),
            bytes_out = self.bytes_out.load(Ordering::Relaxed),
            duration_ms = %format_args!("{:.3}", self.started.elapsed().as_secs_f64() * 1e3),
            request_id,
            "request"
        );
    }
}

/// `s` with control characters replaced (a log line stays one line) and cut to
/// [`MAX_FIELD`] bytes.
fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_FIELD));
    for c in s.chars() {
        if out.len() + c.len_utf8() > MAX_FIELD {
            break;
        }
        out.push(if c.is_control() { '?' } else { c });
    }
    out
}

/// The access key an S3 request names: SigV4's `Credential=<key>/...` or
/// SigV2's `AWS <key>:<signature>` in `Authorization`, or a presigned URL's
/// `X-Amz-Credential` / `AWSAccessKeyId`. Only the key: never the signature.
/// The key is the one claimed; a refused signature still shows it.
fn s3_access_key(headers: &http::HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256") {
            let cred = rest
                .split(',')
                .find_map(|p| p.trim().strip_prefix("Credential="))?;
            return Some(clean(cred.split('/').next().unwrap_or("")));
        }
        if let Some(rest) = auth.strip_prefix("AWS ") {
            return Some(clean(rest.split(':').next().unwrap_or("")));
        }
        return None;
    }
    let query = query?;
    query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        match k {
            "X-Amz-Credential" => {
                let v = v.replace("%2F", "/").replace("%2f", "/");
                Some(clean(v.split('/').next().unwrap_or("")))
            }
            "AWSAccessKeyId" => Some(clean(v)),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_access_key_is_taken_from_a_request() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=AKID1/20240101/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=deadbeef"
                .parse()
                .unwrap(),
        );
        assert_eq!(s3_access_key(&h, None).as_deref(), Some("AKID1"));
        h.insert(
            http::header::AUTHORIZATION,
            "AWS AKID2:c2lnbmF0dXJl".parse().unwrap(),
        );
        assert_eq!(s3_access_key(&h, None).as_deref(), Some("AKID2"));
        let none = http::HeaderMap::new();
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID3%2F20240101%2Fus-east-1\
                 %2Fs3%2Faws4_request&X-Amz-Signature=deadbeef";
        assert_eq!(s3_access_key(&none, Some(q)).as_deref(), Some("AKID3"));
        let q = "AWSAccessKeyId=AKID4&Signature=c2ln&Expires=1";
        assert_eq!(s3_access_key(&none, Some(q)).as_deref(), Some("AKID4"));
        assert_eq!(s3_access_key(&none, Some("list-type=2")), None);
        assert_eq!(clean("a\nb\u{7f}c"), "a?b?c");
        assert_eq!(clean(&"x".repeat(5000)).len(), MAX_FIELD);
    }
}
