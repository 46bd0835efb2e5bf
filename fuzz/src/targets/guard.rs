//! The request guard's query decoding ([`guard`]) against an independent
//! decoder, and static large object manifests through the Swift front-end
//! ([`slo_seeds`], [`slo_extra`], run by the `swift` target's function).
//!
//! The guard refuses SigV2 and over-long presigned URLs before s3s sees them,
//! on the query as s3s will decode it. A bypass is a query the guard lets
//! through while s3s would read a SigV2 name or a long `X-Amz-Expires` in it:
//! this target decodes every input with its own percent- and `+`-decoder and
//! asserts that the guard's verdict is the one the decoded names and values
//! call for — so a mutation that hides `Signature` behind `%53ig%6Eature`, a
//! `+`, a second `X-Amz-Expires` or a mixed form fails the run if the guard
//! misses it.

use oram_server::guard::{s3_refusal, S3Refusal, MAX_PRESIGNED_EXPIRES};

/// `application/x-www-form-urlencoded` decoding, written apart from the guard's
/// (which uses `form_urlencoded`, as s3s does): `+` is a space, `%XX` a byte, a
/// `%` not followed by two hex digits itself; then UTF-8, lossily.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the guard must do with a query, from its decoded names and values.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Refuse it so: s3s would otherwise act on a SigV2 name, a second
    /// `X-Amz-Expires`, or one it parses (as a `u32`, as s3s does) above the cap.
    Refuse(S3Refusal),
    /// Let it through to s3s: nothing in it is the guard's business.
    Pass,
    /// Either: an `X-Amz-Expires` that is a number s3s cannot parse (which s3s
    /// refuses itself).
    Either,
}

/// The verdict a query calls for.
fn expected(query: &str) -> Verdict {
    let pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect();
    let is = |k: &str, n: &str| k.eq_ignore_ascii_case(n);
    if pairs
        .iter()
        .any(|(k, _)| is(k, "Signature") || is(k, "AWSAccessKeyId") || is(k, "Expires"))
    {
        return Verdict::Refuse(S3Refusal::SigV2);
    }
    let expires: Vec<&String> = pairs
        .iter()
        .filter(|(k, _)| is(k, "X-Amz-Expires"))
        .map(|(_, v)| v)
        .collect();
    match expires[..] {
        [] => Verdict::Pass,
        [v] => match v.parse::<u32>() {
            Ok(n) if u64::from(n) > MAX_PRESIGNED_EXPIRES => {
                Verdict::Refuse(S3Refusal::ExpiresTooLong)
            }
            Ok(_) => Verdict::Pass,
            Err(_) => {
                let digits = v.strip_prefix('+').unwrap_or(v);
                if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
                    Verdict::Either
                } else {
                    Verdict::Pass
                }
            }
        },
        _ => Verdict::Refuse(S3Refusal::ExpiresRepeated),
    }
}

/// The guard on a GET whose query is the input (characters a URI cannot carry
/// dropped); panics when its verdict is not one the decoded query allows — a
/// SigV2 name, a repeated or an over-long `X-Amz-Expires` let through (a
/// bypass), or a query refused that s3s should have judged. `true` when the
/// guard refused the request (every seed is a form it must refuse).
pub fn guard(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let query: String = text
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '#')
        .collect();
    let Ok(req) = http::Request::get(format!("/bkt/obj?{query}")).body(()) else {
        return false;
    };
    let Some(q) = req.uri().query() else {
        return false;
    };
    let got = s3_refusal(&req);
    match expected(q) {
        Verdict::Refuse(r) => assert_eq!(got, Some(r), "the guard let ?{q} through"),
        Verdict::Pass => assert_eq!(got, None, "the guard refused ?{q}"),
        Verdict::Either => {}
    }
    got.is_some()
}

/// Seeds of [`guard`]: SigV2 and long or repeated expiry, plain, percent-encoded
/// and mixed with SigV4's names.
pub fn guard_seeds() -> Vec<Vec<u8>> {
    [
        "AWSAccessKeyId=AKIA&Expires=1700000000&Signature=abc%3D",
        "Sig%6Eature=abc",
        "%53ignature=abc&X-Amz-Signature=00",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Expires=300&X-Amz-Signature=00&Expires=1",
        "X-Amz-Expires=604801&X-Amz-Signature=00",
        "X-Amz-Expire%73=99999999999999999999999&X-Amz-Signature=00",
        "x-amz-expires=0000000604801",
        "X-Amz-Expires=1&X-Amz-Expires=2",
        "X-Amz-Expires=300&x%2Damz%2Dexpires=300",
        "awsaccesskeyid=a&list-type=2",
        "EXPIRES+=1&Expires=1",
        "X-Amz-Expires=%2B604801",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Queries [`guard`] must let through (s3s's to judge): SigV4 presigned within
/// the bound, look-alike names, empty and odd forms.
pub fn guard_extra() -> Vec<Vec<u8>> {
    [
        "X-Amz-Expires=604800&X-Amz-Signature=00",
        "list-type=2&prefix=Signature&delimiter=%2F",
        "Signatures=1&Expire=2&AWSAccessKey=3",
        "X-Amz-Expires=abc",
        "X-Amz-Expires=",
        "&&=&%&%zz=%",
        "X-Amz-Expires=+1",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Seeds of the `slo` target (the `swift` target's function on these inputs):
/// manifests that nest, read whole and by range, listed as manifests, and a
/// manifest deleted with its segments. Each is a sequence of requests that
/// stands alone.
pub fn slo_seeds() -> Vec<Vec<u8>> {
    let t = "X-Auth-Token: {TOKEN}\r\n";
    let h = "Host: h\r\n";
    let put = |path: &str, body: &str| {
        format!("PUT {path} HTTP/1.1\r\n{h}{t}Content-Length: {{LEN}}\r\n\r\n{body}")
    };
    let get =
        |m: &str, path: &str, extra: &str| format!("{m} {path} HTTP/1.1\r\n{h}{t}{extra}\r\n");
    let manifest = |path: &str, body: &str| put(&format!("{path}?multipart-manifest=put"), body);
    let inner = r#"[{"path":"/segs/p1","size_bytes":5},{"path":"/segs/p2","range":"1-2"}]"#;
    let outer = r#"[{"path":"/c/inner"},{"path":"/segs/p1","range":"-2"},{"path":"/c/inner","range":"3-6"}]"#;
    let sep = "\n~~~\n";
    [
        [
            manifest("/v1/AUTH_alice/c/inner", inner),
            manifest("/v1/AUTH_alice/c/outer", outer),
            get("GET", "/v1/AUTH_alice/c/outer", ""),
            get("GET", "/v1/AUTH_alice/c/outer", "Range: bytes=3-9\r\n"),
            get("HEAD", "/v1/AUTH_alice/c/outer", ""),
        ]
        .join(sep),
        [
            manifest("/v1/AUTH_alice/c/inner", inner),
            get("GET", "/v1/AUTH_alice/c/inner?multipart-manifest=get", ""),
            get(
                "GET",
                "/v1/AUTH_alice/c/inner?multipart-manifest=get&format=raw",
                "",
            ),
        ]
        .join(sep),
        [
            put("/v1/AUTH_alice/segs/d1", "ddddd"),
            put("/v1/AUTH_alice/segs/d2", "ee"),
            manifest(
                "/v1/AUTH_alice/c/gone",
                r#"[{"path":"/segs/d1"},{"path":"/segs/d2"}]"#,
            ),
            get(
                "DELETE",
                "/v1/AUTH_alice/c/gone?multipart-manifest=delete",
                "",
            ),
        ]
        .join(sep),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

/// Manifests the `slo` target must refuse: nested beyond the depth bound, an
/// expansion beyond the per-request segment budget, sizes and ranges that
/// overflow, a manifest naming itself.
pub fn slo_extra() -> Vec<Vec<u8>> {
    let t = "X-Auth-Token: {TOKEN}\r\n";
    let h = "Host: h\r\n";
    let manifest = |path: &str, body: &str| {
        format!("PUT {path}?multipart-manifest=put HTTP/1.1\r\n{h}{t}Content-Length: {{LEN}}\r\n\r\n{body}")
    };
    let sep = "\n~~~\n";
    // Eleven manifests, each nesting the one before.
    let deep: Vec<String> = (0..=oram_swift::limits::MAX_MANIFEST_NESTING)
        .map(|i| {
            let inner = if i == 0 {
                "/segs/p1".to_string()
            } else {
                format!("/c/n{}", i - 1)
            };
            manifest(
                &format!("/v1/AUTH_alice/c/n{i}"),
                &format!(r#"[{{"path":"{inner}"}}]"#),
            )
        })
        .collect();
    // 101 segments, then 100 of those: 10 100 > the 10 000 budget.
    let wide = |path: &str, n: usize| {
        format!("[{}]", vec![format!(r#"{{"path":"{path}"}}"#); n].join(","))
    };
    let budget = [
        manifest("/v1/AUTH_alice/c/w1", &wide("/segs/p1", 101)),
        manifest("/v1/AUTH_alice/c/w2", &wide("/c/w1", 100)),
    ]
    .join(sep);
    [
        deep.join(sep),
        budget,
        manifest(
            "/v1/AUTH_alice/c/big",
            r#"[{"path":"/segs/p1","size_bytes":18446744073709551615}]"#,
        ),
        manifest(
            "/v1/AUTH_alice/c/rng",
            r#"[{"path":"/segs/p1","range":"0-18446744073709551615"},{"path":"/segs/p2","range":"18446744073709551614-"}]"#,
        ),
        manifest("/v1/AUTH_alice/c/self", r#"[{"path":"/c/self"}]"#),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_decodes_as_form_urlencoding_does() {
        assert_eq!(decode("Sig%6Eature"), "Signature");
        assert_eq!(decode("a+b%2"), "a b%2");
        assert_eq!(decode("%zz%4"), "%zz%4");
        use Verdict::*;
        assert_eq!(expected("Sig%6Eature=1"), Refuse(S3Refusal::SigV2));
        assert_eq!(expected("X-Amz-Expires=604800"), Pass);
        assert_eq!(
            expected("X-Amz-Expires=%2B604801"),
            Refuse(S3Refusal::ExpiresTooLong)
        );
        assert_eq!(expected("X-Amz-Expires=99999999999"), Either);
        assert_eq!(
            expected("X-Amz-Expires=1&x-amz-expires=1"),
            Refuse(S3Refusal::ExpiresRepeated)
        );
    }
}
