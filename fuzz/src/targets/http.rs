//! The request targets: raw HTTP/1.1 request bytes through hyper's HTTP/1.1
//! server (as the binary configures it: 256 headers at most) on an in-memory pipe,
//! into the real Swift service or the real S3 service (s3s with SigV4, behind the
//! binary's request guard), each over an object layer on a Path ORAM on the memory
//! store. The response bytes are parsed back and checked: every response has a
//! status line, headers and a body framed as its headers say.
//!
//! **Input**: one to four raw requests separated by a line `~~~`. Before sending,
//! placeholders are filled in: `{LEN}` with the length of the part's body (what
//! follows the blank line), `{TOKEN}` with a valid Swift token; an S3 request whose
//! head parses and that has an `Authorization: sign` header, or an
//! `X-Amz-Signature=sign` query parameter, is signed (SigV4 header or presigned
//! URL) with the test user's secret, so that mutants reach past authentication.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use oram_objects::{LayerConfig, ObjectLayer};
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_state::{MemKv, MemState};
use oram_store_memory::MemoryStore;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::codecs::sealer;
use super::runtime;

/// The request separator inside one input.
pub const SEPARATOR: &[u8] = b"\n~~~\n";
/// Responses are read up to this size.
const MAX_RESPONSE: usize = 16 << 20;
/// A hung exchange is a failure after this long (a panic of the target).
const HANG: Duration = Duration::from_secs(120);
/// Inputs served by one service before a fresh one is built (bounds the state).
const REBUILD_EVERY: u64 = 400;

fn layer() -> ObjectLayer {
    let oram = PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity: 2048,
                block_size: 256,
                cached_levels: 3,
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
        Arc::new(MemoryStore::new()),
        Arc::new(sealer()),
        Box::new(MemState::new()),
    )
    .expect("a valid configuration");
    ObjectLayer::new(
        Arc::new(oram),
        Box::new(MemKv::new()),
        LayerConfig::default(),
    )
    .expect("an empty index")
}

/// Serves `raw` through hyper's HTTP/1.1 server into `handler`; returns the raw
/// response bytes.
async fn exchange<F, Fut, B>(raw: Vec<u8>, handler: F) -> Vec<u8>
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = http::Response<B>> + Send,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (client, server) = tokio::io::duplex(raw.len() + (4 << 20));
    let svc = service_fn(move |req| {
        let h = handler.clone();
        async move { Ok::<_, std::convert::Infallible>(h(req).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    // The client half-closes after its requests: answer them all the same (the
    // binary's listener does not need this, its clients keep reading).
    http.max_headers(256).half_close(true);
    let conn = http.serve_connection(TokioIo::new(server), svc);
    let talk = async move {
        let (mut rd, mut wr) = tokio::io::split(client);
        let send = async move {
            let _ = wr.write_all(&raw).await;
            let _ = wr.shutdown().await;
        };
        let recv = async move {
            let mut out = Vec::new();
            let _ = (&mut rd)
                .take(MAX_RESPONSE as u64)
                .read_to_end(&mut out)
                .await;
            out
        };
        tokio::join!(send, recv).1
    };
    let both = async move { tokio::join!(conn, talk).1 };
    match tokio::time::timeout(HANG, both).await {
        Ok(out) => out,
        Err(_) => panic!("no complete answer within {HANG:?}"),
    }
}

/// One request part of an input, after placeholder substitution.
struct Part {
    bytes: Vec<u8>,
    /// The method, when the head parses.
    method: Option<String>,
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

fn split_parts(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() < 3 {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}

/// The head's end (after the blank line), if the head is complete.
fn head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn prepare(part: &[u8], token: &str, sign: Option<&Signer>) -> Part {
    let mut b = replace_all(part, b"{TOKEN}", token.as_bytes());
    if let Some(end) = head_end(&b) {
        let len = (b.len() - end).to_string();
        let head = replace_all(&b[..end], b"{LEN}", len.as_bytes());
        b = [head, b[end..].to_vec()].concat();
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let method = match req.parse(&b) {
        Ok(httparse::Status::Complete(_)) => req.method.map(str::to_string),
        _ => None,
    };
    if let (Some(s), Some(_)) = (sign, &method) {
        if let Some(signed) = s.sign(&b) {
            b = signed;
        }
    }
    Part { bytes: b, method }
}

/// Checks the response bytes against the requests; panics (a finding) on a
/// malformed answer. `s3_errors`: error bodies must be S3's XML.
fn check_responses(parts: &[Part], resp: &[u8], s3_errors: bool) -> Vec<u16> {
    let mut statuses = Vec::new();
    let mut rest = resp;
    for p in parts {
        if rest.is_empty() {
            break;
        }
        // Interim (1xx) answers precede the final one.
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut r = httparse::Response::new(&mut headers);
            let n = match r.parse(rest) {
                Ok(httparse::Status::Complete(n)) => n,
                other => panic!(
                    "malformed response head ({other:?}): {:?}",
                    String::from_utf8_lossy(&rest[..rest.len().min(300)])
                ),
            };
            let status = r.code.expect("a complete head has a status");
            assert!((100..600).contains(&status), "status {status}");
            let header = |name: &str| {
                r.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
            };
            let chunked = header("transfer-encoding")
                .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
            let length = header("content-length").map(|v| {
                v.parse::<usize>()
                    .unwrap_or_else(|_| panic!("content-length {v:?}"))
            });
            rest = &rest[n..];
            if status < 200 {
                continue;
            }
            statuses.push(status);
            let Some(method) = &p.method else {
                // hyper answered a request it could not parse and closed.
                return statuses;
            };
            let no_body = method == "HEAD" || status == 204 || status == 304;
            let body: Vec<u8> = if no_body {
                Vec::new()
            } else if chunked {
                let (body, used) = dechunk(rest);
                rest = &rest[used..];
                body
            } else if let Some(len) = length {
                assert!(
                    rest.len() >= len,
                    "status {status}: body of {} bytes, content-length {len}",
                    rest.len()
                );
                let body = rest[..len].to_vec();
                rest = &rest[len..];
                body
            } else {
                let body = rest.to_vec();
                rest = &[];
                body
            };
            if s3_errors && status >= 400 && !body.is_empty() {
                let text = String::from_utf8_lossy(&body);
                assert!(
                    text.contains("<Error>") && text.contains("<Code>"),
                    "S3 error {status} without an XML error body: {text:?}"
                );
            }
            break;
        }
    }
    statuses
}

/// Decodes a chunked body at the start of `b`: (body, bytes used).
fn dechunk(b: &[u8]) -> (Vec<u8>, usize) {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = b[at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or_else(|| panic!("chunk size line missing"));
        let line = std::str::from_utf8(&b[at..at + line_end]).expect("chunk size is ASCII");
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|_| panic!("chunk size {line:?}"));
        at += line_end + 2;
        if size == 0 {
            // Trailers, then the blank line.
            let end = b[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("end of the chunked body");
            if end == 0 {
                return (body, at + 2);
            }
            let t = b[at..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("end of the trailers");
            return (body, at + t + 4);
        }
        assert!(b.len() >= at + size + 2, "truncated chunk");
        body.extend_from_slice(&b[at..at + size]);
        assert_eq!(
            &b[at + size..at + size + 2],
            b"\r\n",
            "chunk not terminated"
        );
        at += size + 2;
    }
}

// ---- Swift ----

struct SwiftRig {
    api: oram_swift::SwiftApi,
    token: String,
    served: u64,
}

fn swift_rig() -> SwiftRig {
    let users = vec![
        oram_swift::SwiftUser {
            account: "alice".into(),
            user: "alice".into(),
            key: "alice-secret".into(),
            admin: true,
        },
        oram_swift::SwiftUser {
            account: "alice".into(),
            user: "guest".into(),
            key: "guest-secret".into(),
            admin: false,
        },
    ];
    let api = oram_swift::SwiftApi::new(layer(), users, oram_swift::SwiftConfig::default());
    let login = b"GET /auth/v1.0 HTTP/1.1\r\nHost: h\r\nX-Auth-User: alice:alice\r\nX-Auth-Key: alice-secret\r\n\r\n";
    let setup = [
        "PUT /v1/AUTH_alice/c HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nContent-Length: 0\r\n\r\n",
        "PUT /v1/AUTH_alice/c/o HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nContent-Length: 11\r\n\r\nhello world",
        "PUT /v1/AUTH_alice/segs HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nContent-Length: 0\r\n\r\n",
        "PUT /v1/AUTH_alice/segs/p1 HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nContent-Length: 5\r\n\r\naaaaa",
        "PUT /v1/AUTH_alice/segs/p2 HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nContent-Length: 3\r\n\r\nbbb",
    ];
    let mut rig = SwiftRig {
        api,
        token: String::new(),
        served: 0,
    };
    let resp = swift_exchange(&rig, login.to_vec());
    let text = String::from_utf8_lossy(&resp);
    rig.token = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("x-auth-token:")
                .then(|| l[13..].trim().to_string())
        })
        .expect("the login answers a token");
    for s in setup {
        let raw = s.replace("{TOKEN}", &rig.token).into_bytes();
        let resp = swift_exchange(&rig, raw);
        assert!(
            resp.starts_with(b"HTTP/1.1 201"),
            "setup {s:?}: {:?}",
            String::from_utf8_lossy(&resp)
        );
    }
    rig
}

fn swift_exchange(rig: &SwiftRig, raw: Vec<u8>) -> Vec<u8> {
    let api = rig.api.clone();
    runtime().block_on(exchange(raw, move |req| {
        let api = api.clone();
        async move { api.handle(req).await }
    }))
}

/// What both request targets do with an input: split it into requests, fill in
/// the token or signature, send them on one connection through `exchange`, check
/// every answer (`s3_errors`: S3's XML error bodies) and print the first
/// `debug_bytes` of the answers with `ORAM_FUZZ_DEBUG`; `true` when every request
/// got a 2xx answer.
fn serve(
    data: &[u8],
    token: &str,
    sign: Option<&Signer>,
    s3_errors: bool,
    debug_bytes: usize,
    exchange: impl FnOnce(Vec<u8>) -> Vec<u8>,
) -> bool {
    let parts: Vec<Part> = split_parts(data)
        .into_iter()
        .map(|p| prepare(p, token, sign))
        .collect();
    let raw: Vec<u8> = parts.iter().flat_map(|p| p.bytes.iter().copied()).collect();
    let resp = exchange(raw);
    let statuses = check_responses(&parts, &resp, s3_errors);
    if std::env::var_os("ORAM_FUZZ_DEBUG").is_some() {
        eprintln!(
            "{statuses:?} {:?}",
            String::from_utf8_lossy(&resp[..resp.len().min(debug_bytes)])
        );
    }
    !statuses.is_empty()
        && statuses.len() == parts.len()
        && statuses.iter().all(|s| (200..300).contains(s))
}

thread_local! {
    static SWIFT: std::cell::RefCell<Option<SwiftRig>> = const { std::cell::RefCell::new(None) };
    static S3: std::cell::RefCell<Option<S3Rig>> = const { std::cell::RefCell::new(None) };
}

/// The Swift front-end (`oram_swift::SwiftApi::handle`) behind hyper; `true`
/// when every request got a 2xx answer.
pub fn swift(data: &[u8]) -> bool {
    SWIFT.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|r| r.served >= REBUILD_EVERY) {
            *slot = Some(swift_rig());
        }
        let rig = slot.as_mut().expect("built");
        rig.served += 1;
        let token = rig.token.clone();
        serve(data, &token, None, false, 300, |raw| {
            swift_exchange(rig, raw)
        })
    })
}

/// Seeds of [`swift`]: one request (or a short sequence) per feature.
pub fn swift_seeds() -> Vec<Vec<u8>> {
    let t = "X-Auth-Token: {TOKEN}\r\n";
    let h = "Host: h\r\n";
    let put = |path: &str, extra: &str, body: &str| {
        format!("PUT {path} HTTP/1.1\r\n{h}{t}{extra}Content-Length: {{LEN}}\r\n\r\n{body}")
    };
    let get =
        |m: &str, path: &str, extra: &str| format!("{m} {path} HTTP/1.1\r\n{h}{t}{extra}\r\n");
    let slo =
        r#"[{"path":"/segs/p1","etag":null,"size_bytes":5},{"path":"/segs/p2","range":"0-1"}]"#;
    let seeds = [
        "GET /auth/v1.0 HTTP/1.1\r\nHost: h\r\nX-Auth-User: alice:alice\r\nX-Auth-Key: alice-secret\r\n\r\n".to_string(),
        get("GET", "/v1/AUTH_alice?format=json&limit=5&marker=a&prefix=c", ""),
        get("HEAD", "/v1/AUTH_alice", ""),
        get("GET", "/v1/AUTH_alice/c?format=xml&delimiter=/&end_marker=z&reverse=true", ""),
        get("GET", "/info", ""),
        get("GET", "/v1/AUTH_alice/c/o", "Range: bytes=1-3,-2\r\nIf-None-Match: \"x\"\r\n"),
        get("GET", "/v1/AUTH_alice/c/o", "If-Modified-Since: Sat, 29 Oct 1994 19:43:31 GMT\r\nIf-Match: *\r\n"),
        put("/v1/AUTH_alice/c/n%20e%2Fw", "Content-Type: text/plain\r\nX-Object-Meta-Color: blue\r\nETag: 5d41402abc4b2a76b9719d911017c592\r\n", "hello"),
        format!("PUT /v1/AUTH_alice/c/ch HTTP/1.1\r\n{h}{t}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n"),
        put("/v1/AUTH_alice/c/copy", "X-Copy-From: c/o\r\n", ""),
        get("COPY", "/v1/AUTH_alice/c/o", "Destination: c/o2\r\n"),
        put("/v1/AUTH_alice/c/dlo", "X-Object-Manifest: segs/p\r\n", ""),
        format!("{}{SEP}{}", put("/v1/AUTH_alice/c/slo?multipart-manifest=put", "", slo), get("GET", "/v1/AUTH_alice/c/slo", "Range: bytes=2-6\r\n"), SEP = "\n~~~\n"),
        get("GET", "/v1/AUTH_alice/c/slo?multipart-manifest=get", ""),
        format!("POST /v1/AUTH_alice?bulk-delete HTTP/1.1\r\n{h}{t}Content-Type: text/plain\r\nAccept: application/json\r\nContent-Length: {{LEN}}\r\n\r\n/c/o2\n/c/nothing\n/segs%2Fp9\n"),
        format!("POST /v1/AUTH_alice/c HTTP/1.1\r\n{h}{t}X-Container-Read: .r:*,.rlistings\r\nX-Container-Write: alice:guest\r\nX-Container-Meta-Q: 1\r\nContent-Length: 0\r\n\r\n"),
        format!("POST /v1/AUTH_alice/c/o HTTP/1.1\r\n{h}{t}X-Delete-After: 3600\r\nX-Object-Meta-A: b\r\nContent-Length: 0\r\n\r\n"),
        format!("POST /v1/AUTH_alice HTTP/1.1\r\n{h}{t}X-Account-Meta-Temp-URL-Key: k\r\nContent-Length: 0\r\n\r\n"),
        get("DELETE", "/v1/AUTH_alice/c/copy", ""),
        get("GET", "/v1/AUTH_alice/c/dlo", "Range: bytes=-4\r\n"),
    ];
    seeds.into_iter().map(String::into_bytes).collect()
}

/// Requests of [`swift`] that fail (error paths): no or a wrong token, an
/// unsupported method, a malformed manifest, a bad range.
pub fn swift_extra() -> Vec<Vec<u8>> {
    [
        "GET /v1/AUTH_alice/c/o HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /v1/AUTH_alice/c/o HTTP/1.1\r\nHost: h\r\nX-Auth-Token: AUTH_tk0000\r\n\r\n",
        "OPTIONS /v1/AUTH_alice/c/o HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nOrigin: http://x\r\nAccess-Control-Request-Method: GET\r\n\r\n",
        "PUT /v1/AUTH_alice/c/bad?multipart-manifest=put HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nContent-Length: {LEN}\r\n\r\n[{\"path\":\"/segs/none\",\"size_bytes\":-1}]",
        "GET /v1/AUTH_alice/c/o HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\nRange: bytes=9-2\r\n\r\n",
        "GET /v1/AUTH_alice/c?format=json&limit=-1&marker=%FF%00 HTTP/1.1\r\nHost: h\r\nX-Auth-Token: {TOKEN}\r\n\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

// ---- S3 ----

const ACCESS: &str = "fuzzaccess";
const SECRET: &str = "fuzz-secret-key-0123456789";
const REGION: &str = "us-east-1";

struct S3Rig {
    front: oram_s3::S3Front,
    served: u64,
}

fn s3_rig() -> S3Rig {
    let users = [oram_s3::S3User {
        access_key: ACCESS.into(),
        secret_key: SECRET.into(),
    }];
    let rig = S3Rig {
        front: oram_s3::build_service(layer(), oram_s3::UserMap::new(&users), REGION, ""),
        served: 0,
    };
    let setup = [
        "PUT /bkt HTTP/1.1\r\nHost: h\r\nAuthorization: sign\r\nContent-Length: 0\r\n\r\n",
        "PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nAuthorization: sign\r\nContent-Length: 11\r\n\r\nhello world",
    ];
    for s in setup {
        let p = prepare(s.as_bytes(), "", Some(&Signer));
        let resp = s3_exchange(&rig, p.bytes);
        assert!(
            resp.starts_with(b"HTTP/1.1 200"),
            "setup {s:?}: {:?}",
            String::from_utf8_lossy(&resp)
        );
    }
    rig
}

fn s3_exchange(rig: &S3Rig, raw: Vec<u8>) -> Vec<u8> {
    let front = rig.front.clone();
    runtime().block_on(exchange(
        raw,
        move |req: http::Request<hyper::body::Incoming>| {
            let front = front.clone();
            async move {
                // As the binary: refused on the head alone, before s3s reads the body.
                if let Some(r) = oram_server::guard::s3_refusal(&req) {
                    return oram_server::guard::s3_refusal_response(&r);
                }
                match front.call(req.map(s3s::Body::from)).await {
                    Ok(r) => r,
                    Err(e) => panic!("the S3 service failed instead of answering: {e:?}"),
                }
            }
        },
    ))
}

/// The S3 front-end (`oram_s3::S3Front::call` behind the binary's guard) behind
/// hyper; `true` when every request got a 2xx answer.
pub fn s3(data: &[u8]) -> bool {
    S3.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|r| r.served >= REBUILD_EVERY) {
            *slot = Some(s3_rig());
        }
        let rig = slot.as_mut().expect("built");
        rig.served += 1;
        serve(data, "", Some(&Signer), true, 600, |raw| {
            s3_exchange(rig, raw)
        })
    })
}

/// Seeds of [`s3`]: signed requests of most operations, a presigned GET, an
/// aws-chunked upload and a few unsigned or wrongly signed ones.
pub fn s3_seeds() -> Vec<Vec<u8>> {
    let a = "Authorization: sign\r\n";
    let h = "Host: h\r\n";
    let req = |m: &str, path: &str, extra: &str, body: &str| {
        format!("{m} {path} HTTP/1.1\r\n{h}{a}{extra}Content-Length: {{LEN}}\r\n\r\n{body}")
    };
    let delete = "<Delete><Quiet>false</Quiet><Object><Key>a</Key></Object><Object><Key>obj2</Key><VersionId>null</VersionId></Object></Delete>";
    let chunked = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n";
    let seeds = [
        req("GET", "/", "", ""),
        req("GET", "/bkt?list-type=2&prefix=o&delimiter=%2F&max-keys=2&start-after=a", "", ""),
        req("GET", "/bkt?uploads&prefix=", "", ""),
        req("HEAD", "/bkt/obj", "", ""),
        req("GET", "/bkt/obj", "Range: bytes=2-5\r\nIf-None-Match: \"abc\"\r\nIf-Modified-Since: Sat, 29 Oct 1994 19:43:31 GMT\r\n", ""),
        req("PUT", "/bkt/n%20k%2Fy", "Content-Type: text/plain\r\nx-amz-meta-color: blue\r\nContent-MD5: XUFAKrxLKna5cZ2REBfFkg==\r\nx-amz-acl: private\r\n", "hello"),
        req("PUT", "/bkt/copy", "x-amz-copy-source: /bkt/obj\r\nx-amz-metadata-directive: REPLACE\r\nx-amz-copy-source-if-match: \"5eb63bbbe01eeed093cb22bb8f5acdc3\"\r\n", ""),
        req("POST", "/bkt?delete", "", delete),
        format!("{}\n~~~\n{}", req("POST", "/bkt/mp?uploads", "", ""), req("GET", "/bkt?uploads", "", "")),
        req("GET", "/bkt/obj?acl", "", ""),
        req("GET", "/bkt?location", "", ""),
        req("DELETE", "/bkt/copy", "", ""),
        format!("PUT /bkt/aws HTTP/1.1\r\n{h}{a}x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER\r\nContent-Encoding: aws-chunked\r\nx-amz-decoded-content-length: 5\r\nx-amz-trailer: x-amz-checksum-crc32\r\nContent-Length: {{LEN}}\r\n\r\n{chunked}"),
        format!("GET /bkt/obj?X-Amz-Expires=300&X-Amz-Signature=sign HTTP/1.1\r\n{h}\r\n"),
    ];
    seeds.into_iter().map(String::into_bytes).collect()
}

/// Requests of [`s3`] that fail (error paths): parts and completion of an unknown
/// upload (their XML and query parsing), a canned ACL, chunked without a length,
/// SigV2, no signature, a browser form.
pub fn s3_extra() -> Vec<Vec<u8>> {
    let a = "Authorization: sign\r\n";
    let h = "Host: h\r\n";
    let req = |m: &str, path: &str, extra: &str, body: &str| {
        format!("{m} {path} HTTP/1.1\r\n{h}{a}{extra}Content-Length: {{LEN}}\r\n\r\n{body}")
    };
    let complete = "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"5d41402abc4b2a76b9719d911017c592\"</ETag></Part></CompleteMultipartUpload>";
    let seeds = [
        req("PUT", "/bkt/mp?partNumber=1&uploadId=abc", "", "hello"),
        req("POST", "/bkt/mp?uploadId=abc", "", complete),
        req("PUT", "/bkt/obj?acl", "x-amz-acl: public-read\r\n", ""),
        req("POST", "/bkt?delete", "Content-MD5: AAAAAAAAAAAAAAAAAAAAAA==\r\n", "<Delete><Object><Key>a</Key></Object></Delete>"),
        format!("PUT /bkt/chunked HTTP/1.1\r\n{h}{a}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        format!("PUT /bkt/aws HTTP/1.1\r\n{h}{a}x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\r\nContent-Encoding: aws-chunked\r\nx-amz-decoded-content-length: 5\r\nContent-Length: {{LEN}}\r\n\r\n5;chunk-signature=00\r\nhello\r\n0;chunk-signature=00\r\n\r\n"),
        format!("GET /bkt/obj HTTP/1.1\r\n{h}Authorization: AWS {ACCESS}:c2lnbmF0dXJl\r\nDate: Sat, 29 Oct 1994 19:43:31 GMT\r\n\r\n"),
        format!("GET /bkt/obj HTTP/1.1\r\n{h}\r\n"),
        format!("GET /US-bkt/obj HTTP/1.1\r\n{h}Authorization: AWS4-HMAC-SHA256 Credential={ACCESS}/20240101/US/s3/aws4_request, SignedHeaders=host, Signature=00\r\nx-amz-date: 20240101T000000Z\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\r\n"),
        format!("POST /bkt HTTP/1.1\r\n{h}Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {{LEN}}\r\n\r\n--x\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--x--\r\n"),
    ];
    seeds.into_iter().map(String::into_bytes).collect()
}

/// SigV4 for the fuzz requests (header or presigned), with the test user's key.
struct Signer;

const UNRESERVED: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";

fn uri_encode(b: &[u8], keep_slash: bool) -> String {
    let mut out = String::new();
    for &c in b {
        if UNRESERVED.contains(&c) || (keep_slash && c == b'/') {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

fn uri_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(msg);
    m.finalize().into_bytes().to_vec()
}

/// `YYYYMMDD'T'HHMMSS'Z'` of `t`.
fn amz_date(t: SystemTime) -> String {
    let d = time::OffsetDateTime::from(t);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

impl Signer {
    /// Signs the request in `raw` (head complete) if it asks for it; `None` if it
    /// does not or cannot be read.
    fn sign(&self, raw: &[u8]) -> Option<Vec<u8>> {
        let end = head_end(raw)?;
        let head = std::str::from_utf8(&raw[..end]).ok()?;
        let mut lines = head.split("\r\n");
        let request_line = lines.next()?;
        let mut rl = request_line.split(' ');
        let (method, target, version) = (rl.next()?, rl.next()?, rl.next()?);
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let header_sign = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("authorization") && v == "sign");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let presign = query.split('&').any(|kv| kv == "X-Amz-Signature=sign");
        if !header_sign && !presign {
            return None;
        }
        let host = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("host"))
            .map_or("", |(_, v)| v.as_str())
            .to_string();
        let date = amz_date(SystemTime::now());
        let day = &date[..8];
        let scope = format!("{day}/{REGION}/s3/aws4_request");
        let mut params: Vec<(Vec<u8>, Vec<u8>)> = query
            .split('&')
            .filter(|kv| !kv.is_empty() && *kv != "X-Amz-Signature=sign")
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (uri_decode(k), uri_decode(v))
            })
            .collect();
        let payload = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("x-amz-content-sha256"))
            .map_or("UNSIGNED-PAYLOAD".to_string(), |(_, v)| v.clone());
        let mut out_headers: Vec<(String, String)> = headers
            .iter()
            .filter(|(k, _)| {
                !k.eq_ignore_ascii_case("authorization")
                    && !k.eq_ignore_ascii_case("x-amz-date")
                    && !k.eq_ignore_ascii_case("x-amz-content-sha256")
            })
            .cloned()
            .collect();
        // Every header signed: `host` and the `x-amz-*` ones (the proxy refuses
        // an `x-amz-*` header the signature does not cover, as AWS does).
        let mut signed: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        signed.insert("host".into(), vec![host.clone()]);
        if !presign {
            out_headers.push(("x-amz-date".into(), date.clone()));
            out_headers.push(("x-amz-content-sha256".into(), payload.clone()));
        }
        for (k, v) in &out_headers {
            let k = k.to_ascii_lowercase();
            if k.starts_with("x-amz-") {
                signed.entry(k).or_default().push(v.trim().to_string());
            }
        }
        let signed_headers = signed.keys().cloned().collect::<Vec<_>>().join(";");
        let canonical_headers: String = signed
            .iter()
            .map(|(k, v)| format!("{k}:{}\n", v.join(",")))
            .collect();
        if presign {
            for (k, v) in [
                ("X-Amz-Algorithm", "AWS4-HMAC-SHA256".to_string()),
                ("X-Amz-Credential", format!("{ACCESS}/{scope}")),
                ("X-Amz-Date", date.clone()),
                ("X-Amz-SignedHeaders", signed_headers.clone()),
            ] {
                params.push((k.as_bytes().to_vec(), v.into_bytes()));
            }
            if !params.iter().any(|(k, _)| k == b"X-Amz-Expires") {
                params.push((b"X-Amz-Expires".to_vec(), b"300".to_vec()));
            }
        }
        let mut enc: Vec<(String, String)> = params
            .iter()
            .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
            .collect();
        enc.sort();
        let canonical_query = enc
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let canonical_path = uri_encode(&uri_decode(path), true);
        let payload_line = if presign {
            "UNSIGNED-PAYLOAD"
        } else {
            payload.as_str()
        };
        let canonical = format!(
            "{method}\n{canonical_path}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{payload_line}"
        );
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let mut key = hmac(format!("AWS4{SECRET}").as_bytes(), day.as_bytes());
        for part in [REGION, "s3", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        let signature = hex::encode(hmac(&key, to_sign.as_bytes()));
        let target = if presign {
            enc.push(("X-Amz-Signature".into(), signature));
            let q = enc
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&");
            format!("{path}?{q}")
        } else {
            out_headers.push((
                "Authorization".into(),
                format!(
                    "AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
                ),
            ));
            target.to_string()
        };
        let mut out = format!("{method} {target} {version}\r\n");
        for (k, v) in out_headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&raw[end..]);
        Some(bytes)
    }
}
