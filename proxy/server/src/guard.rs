//! Requests refused before they reach a front-end, on the request line and
//! headers alone (no body is read):
//!
//! * S3 **browser-form uploads** (`POST` with `multipart/form-data`): s3s would
//!   buffer the form, up to its file-size limit, before its access check; the
//!   proxy does not implement POST Object, so they get `501 NotImplemented` at once.
//! * **SigV2** (an `Authorization: AWS …` header, or a query naming any of
//!   `Signature`, `AWSAccessKeyId` or `Expires`, whatever else it holds): s3s
//!   checks SigV2 *before* SigV4, never checks a SigV2 request's time and compares
//!   its signature in non-constant time; `400 InvalidRequest`, as AWS answers in
//!   regions without SigV2.
//! * **Presigned URLs valid for more than 7 days** (`X-Amz-Expires` above 604 800
//!   s, AWS's own bound): `400 AuthorizationQueryParametersError`; so is an
//!   `X-Amz-Expires` given twice (s3s refuses it too, but not before it looked at
//!   the rest).
//! * **`x-amz-*` headers the signature does not cover** (not in the
//!   `SignedHeaders` of a SigV4 `Authorization` header, or in a presigned URL's
//!   `X-Amz-SignedHeaders`): `403 AccessDenied`, as AWS answers ("There were
//!   headers present in the request which were not signed"). s3s checks only the
//!   headers that are signed, and the proxy acts on `x-amz-*` headers (a copy
//!   source, metadata, tags, object lock), so without this a party on the path
//!   of a plain-HTTP request, or the holder of a presigned URL, could add one.
//!
//! The query is decoded exactly as s3s decodes it (`application/x-www-form-urlencoded`:
//! percent escapes and `+` in names and values, through `form_urlencoded`, which
//! s3s's `serde_urlencoded` uses), so `Sig%6Eature` or `X-Amz-Expire%73` is seen as
//! what s3s will see. Names are compared without regard to case (s3s's are exact:
//! this only refuses more).
//!
//! Swift logins are throttled by the Swift front-end itself (`oram_swift`, module
//! `throttle`): per client network and per user.

/// The longest presigned URL lifetime accepted, seconds (AWS's bound).
pub const MAX_PRESIGNED_EXPIRES: u64 = 604_800;

/// Why an S3 request is refused up front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum S3Refusal {
    /// A browser-form upload.
    FormPost,
    /// A SigV2-signed request.
    SigV2,
    /// A presigned URL valid for longer than [`MAX_PRESIGNED_EXPIRES`].
    ExpiresTooLong,
    /// A presigned URL naming `X-Amz-Expires` more than once.
    ExpiresRepeated,
    /// An `x-amz-*` header (this one) that the request's signature does not
    /// cover.
    UnsignedHeader(String),
}

/// The headers a SigV4 request's signature covers, lower-cased: the
/// `SignedHeaders` of its `AWS4-HMAC-SHA256` `Authorization` header, or its
/// presigned URL's `X-Amz-SignedHeaders` (decoded as s3s decodes the query).
/// `None` when it names neither, or either twice: an anonymous or malformed
/// request, which s3s refuses or treats as anonymous.
fn signed_headers<B>(req: &http::Request<B>) -> Option<Vec<String>> {
    let list = |v: &str| -> Vec<String> {
        v.split(';')
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect()
    };
    let mut auth = req.headers().get_all(http::header::AUTHORIZATION).iter();
    if let (Some(a), None) = (auth.next(), auth.next()) {
        let a = a.to_str().ok()?.trim();
        let rest = a.strip_prefix("AWS4-HMAC-SHA256")?;
        let mut found = rest
            .split(',')
            .filter_map(|c| c.trim().strip_prefix("SignedHeaders="));
        return match (found.next(), found.next()) {
            (Some(v), None) => Some(list(v)),
            _ => None,
        };
    }
    let q = req.uri().query()?;
    let mut found = query_params(q)
        .filter(|(k, _)| k.eq_ignore_ascii_case("X-Amz-SignedHeaders"))
        .map(|(_, v)| v);
    match (found.next(), found.next()) {
        (Some(v), None) => Some(list(&v)),
        _ => None,
    }
}

/// The query's names and values, decoded as s3s decodes them.
fn query_params(
    q: &str,
) -> impl Iterator<Item = (std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> {
    form_urlencoded::parse(q.as_bytes())
}

/// Whether `v` (an `X-Amz-Expires` value, decoded) is above the cap. Values that
/// are not a number are s3s's to refuse; any all-digit value too long to parse is
/// above it.
fn expires_above_cap(v: &str) -> bool {
    v.parse::<u128>().map_or(
        !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()),
        |n| n > u128::from(MAX_PRESIGNED_EXPIRES),
    )
}

/// The refusal an S3 request earns from its method, URI and headers, if any.
pub fn s3_refusal<B>(req: &http::Request<B>) -> Option<S3Refusal> {
    let headers = req.headers();
    if req.method() == http::Method::POST {
        let form = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                ct.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("multipart/form-data")
            });
        if form {
            return Some(S3Refusal::FormPost);
        }
    }
    // Any header that is not valid text is looked at as bytes: s3s may still read
    // it as Latin-1.
    let v2_header = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .any(|v| {
            let v = v.as_bytes().trim_ascii_start();
            v.len() >= 4 && v[..4].eq_ignore_ascii_case(b"AWS ")
        });
    if v2_header {
        return Some(S3Refusal::SigV2);
    }
    if let Some(q) = req.uri().query() {
        let mut expires = 0usize;
        let mut expires_too_long = false;
        for (k, v) in query_params(q) {
            if ["Signature", "AWSAccessKeyId", "Expires"]
                .iter()
                .any(|n| k.eq_ignore_ascii_case(n))
            {
                // Whatever else is present: s3s looks for SigV2 first.
                return Some(S3Refusal::SigV2);
            }
            if k.eq_ignore_ascii_case("X-Amz-Expires") {
                expires += 1;
                expires_too_long |= expires_above_cap(&v);
            }
        }
        if expires > 1 {
            return Some(S3Refusal::ExpiresRepeated);
        }
        if expires_too_long {
            return Some(S3Refusal::ExpiresTooLong);
        }
    }
    if let Some(signed) = signed_headers(req) {
        // Header names are lower-case in `http`.
        let unsigned = headers
            .keys()
            .map(|n| n.as_str())
            .find(|n| n.starts_with("x-amz-") && !signed.iter().any(|s| s == n));
        if let Some(n) = unsigned {
            return Some(S3Refusal::UnsignedHeader(n.to_string()));
        }
    }
    None
}

/// The S3 error answer of a refusal (S3 XML, as s3s writes its own errors).
pub fn s3_refusal_response(r: &S3Refusal) -> http::Response<s3s::Body> {
    let err = match r {
        S3Refusal::FormPost => s3s::s3_error!(
            NotImplemented,
            "Browser-based uploads (POST Object with multipart/form-data) are not supported; use PUT."
        ),
        S3Refusal::SigV2 => s3s::s3_error!(
            InvalidRequest,
            "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
        ),
        S3Refusal::ExpiresTooLong => s3s::s3_error!(
            AuthorizationQueryParametersError,
            "X-Amz-Expires must be less than a week (in seconds) that is; 604800"
        ),
        S3Refusal::ExpiresRepeated => s3s::s3_error!(
            AuthorizationQueryParametersError,
            "X-Amz-Expires must be given once"
        ),
        S3Refusal::UnsignedHeader(name) => s3s::s3_error!(
            AccessDenied,
            "There were headers present in the request which were not signed: {}",
            name
        ),
    };
    err.to_http_response().unwrap_or_else(|_| {
        let mut r = http::Response::new(s3s::Body::empty());
        *r.status_mut() = http::StatusCode::BAD_REQUEST;
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::Request<()> {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn refusals() {
        let form = req(
            "POST",
            "/bkt",
            &[("content-type", "Multipart/Form-Data; boundary=x")],
        );
        assert_eq!(s3_refusal(&form), Some(S3Refusal::FormPost));
        let delete = req(
            "POST",
            "/bkt?delete",
            &[("content-type", "application/xml")],
        );
        assert_eq!(s3_refusal(&delete), None, "DeleteObjects is a POST too");
        let v2 = req("GET", "/b/k", &[("authorization", "AWS AKID:c2lnbmF0dXJl")]);
        assert_eq!(s3_refusal(&v2), Some(S3Refusal::SigV2));
        let v4 = req(
            "GET",
            "/b/k",
            &[("authorization", "AWS4-HMAC-SHA256 Credential=a/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00")],
        );
        assert_eq!(s3_refusal(&v4), None);
        let v2q = req(
            "GET",
            "/b/k?AWSAccessKeyId=a&Expires=99999999999&Signature=x",
            &[],
        );
        assert_eq!(s3_refusal(&v2q), Some(S3Refusal::SigV2));
        let v4q = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a&X-Amz-Date=20250101T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature=00&X-Amz-Expires=";
        assert_eq!(s3_refusal(&req("GET", &format!("{v4q}604800"), &[])), None);
        assert_eq!(
            s3_refusal(&req("GET", &format!("{v4q}604801"), &[])),
            Some(S3Refusal::ExpiresTooLong)
        );
        assert_eq!(
            s3_refusal(&req(
                "GET",
                &format!("{v4q}4294967295000000000000000000000000000000"),
                &[]
            )),
            Some(S3Refusal::ExpiresTooLong)
        );
        let r = s3_refusal_response(&S3Refusal::ExpiresTooLong);
        assert_eq!(r.status(), 400);
        assert_eq!(s3_refusal_response(&S3Refusal::FormPost).status(), 501);
    }

    #[test]
    fn sigv2_is_refused_however_its_query_is_encoded_or_mixed() {
        let v4 = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20250101T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature=00&X-Amz-Expires=60";
        for q in [
            // Names percent-encoded: s3s decodes them before looking.
            "AWSAccessKey%49d=a&Expires=4000000000&Sig%6Eature=x".to_string(),
            "%41%57%53AccessKeyId=a&%45xpires=4000000000&%53ignature=x".to_string(),
            "AWSAccessKeyId=a&Expires=4000000000&Signature%3D=x&Sig%6eature=y".to_string(),
            // SigV2 fields beside SigV4 ones (s3s checks SigV2 first).
            "AWSAccessKeyId=a&Expires=4000000000&Signature=x&X-Amz-Algorithm=x".to_string(),
            format!("{v4}&Signature=x"),
            format!("{v4}&AWSAccessKeyId=a"),
            format!("{v4}&Expires=4000000000"),
            // Any one of them alone, in any case.
            "signature=x".to_string(),
            "awsaccesskeyid=a".to_string(),
            "EXPIRES=1".to_string(),
        ] {
            assert_eq!(
                s3_refusal(&req("GET", &format!("/b/k?{q}"), &[])),
                Some(S3Refusal::SigV2),
                "{q}"
            );
        }
        assert_eq!(s3_refusal(&req("GET", &format!("/b/k?{v4}"), &[])), None);
        // A name that only looks like one once decoded wrongly is left alone.
        assert_eq!(
            s3_refusal(&req("GET", "/b/k?Signatures=x&response-expires=1", &[])),
            None
        );
        let v2 = req("GET", "/b/k", &[("authorization", "  aws AKID:c2ln")]);
        assert_eq!(s3_refusal(&v2), Some(S3Refusal::SigV2));
    }

    #[test]
    fn presigned_expiry_is_capped_on_the_decoded_value_and_given_once() {
        let base = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a&X-Amz-Date=20250101T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature=00";
        for (tail, want) in [
            ("&X-Amz-Expire%73=604801", Some(S3Refusal::ExpiresTooLong)),
            ("&x-amz-expires=604801", Some(S3Refusal::ExpiresTooLong)),
            (
                "&X-Amz-Expires=%36%30%34%38%30%31",
                Some(S3Refusal::ExpiresTooLong),
            ),
            (
                "&X-Amz-Expires=6048010000000000000000000000000000000000000000",
                Some(S3Refusal::ExpiresTooLong),
            ),
            ("&X-Amz-Expires=%36%30%34%38%30%30", None),
            // Given twice, in any spelling: refused whichever one s3s would use.
            (
                "&X-Amz-Expires=60&X-Amz-Expires=999999999",
                Some(S3Refusal::ExpiresRepeated),
            ),
            (
                "&X-Amz-Expires=999999999&X-Amz-Expire%73=60",
                Some(S3Refusal::ExpiresRepeated),
            ),
            (
                "&X-Amz-Expires=60&X-Amz-Expires=60",
                Some(S3Refusal::ExpiresRepeated),
            ),
            // `+` encoded is a sign both parsers accept; a bare `+` is a space,
            // which neither does (s3s refuses it).
            ("&X-Amz-Expires=%2B604801", Some(S3Refusal::ExpiresTooLong)),
            ("&X-Amz-Expires=+604801", None),
        ] {
            assert_eq!(
                s3_refusal(&req("GET", &format!("{base}{tail}"), &[])),
                want,
                "{tail}"
            );
        }
        let r = s3_refusal_response(&S3Refusal::ExpiresRepeated);
        assert_eq!(r.status(), 400);
    }

    #[test]
    fn x_amz_headers_the_signature_does_not_cover_are_refused() {
        let auth = |signed: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential=a/20250101/us-east-1/s3/aws4_request, \
                 SignedHeaders={signed}, Signature=00"
            )
        };
        let signed = auth("host;x-amz-content-sha256;x-amz-date");
        let base = [
            ("authorization", signed.as_str()),
            ("x-amz-date", "20250101T000000Z"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
        ];
        assert_eq!(s3_refusal(&req("PUT", "/b/k", &base)), None);
        // Other headers need not be signed.
        let mut more = base.to_vec();
        more.push(("content-type", "text/plain"));
        more.push(("x-amzn-trace-id", "Root=1"));
        assert_eq!(s3_refusal(&req("PUT", "/b/k", &more)), None);
        // An x-amz-* header outside SignedHeaders, in any case.
        for extra in ["x-amz-copy-source", "X-Amz-Meta-Owner", "x-amz-tagging"] {
            let mut h = base.to_vec();
            h.push((extra, "v"));
            assert_eq!(
                s3_refusal(&req("PUT", "/b/k", &h)),
                Some(S3Refusal::UnsignedHeader(extra.to_ascii_lowercase())),
                "{extra}"
            );
        }
        // Signed (the list in any case): accepted.
        let signed_meta = auth("Host;X-Amz-Content-Sha256;x-amz-date;x-amz-meta-owner");
        let h = [
            ("authorization", signed_meta.as_str()),
            ("x-amz-date", "20250101T000000Z"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            ("x-amz-meta-owner", "me"),
        ];
        assert_eq!(s3_refusal(&req("PUT", "/b/k", &h)), None);
        // A presigned URL: its X-Amz-SignedHeaders, decoded.
        let pre = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a&X-Amz-Date=20250101T000000Z&X-Amz-Expires=60&X-Amz-Signature=00&X-Amz-SignedHeaders=";
        assert_eq!(s3_refusal(&req("PUT", &format!("{pre}host"), &[])), None);
        assert_eq!(
            s3_refusal(&req(
                "PUT",
                &format!("{pre}host"),
                &[("x-amz-copy-source", "other/key")]
            )),
            Some(S3Refusal::UnsignedHeader("x-amz-copy-source".into()))
        );
        assert_eq!(
            s3_refusal(&req(
                "PUT",
                &format!("{pre}host%3Bx-amz-copy-source"),
                &[("x-amz-copy-source", "other/key")]
            )),
            None
        );
        // Anonymous, or no SignedHeaders to go by: s3s's to judge.
        assert_eq!(
            s3_refusal(&req("GET", "/b/k", &[("x-amz-meta-a", "1")])),
            None
        );
        let r = s3_refusal_response(&S3Refusal::UnsignedHeader("x-amz-tagging".into()));
        assert_eq!(r.status(), 403);
    }
}
