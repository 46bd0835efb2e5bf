//! Requests refused before they reach a front-end, on the request line and
//! headers alone (no body is read):
//!
//! * S3 **browser-form uploads** (`POST` with `multipart/form-data`): s3s would
//!   buffer the form, up to its file-size limit, before its access check; the
//!   proxy does not implement POST Object, so they get `501 NotImplemented` at once.
//! * **SigV2** (an `Authorization: AWS …` header, or a query with `Signature=` and
//!   no `X-Amz-Signature`): s3s never checks a SigV2 request's time and compares
//!   its signature in non-constant time; `400 InvalidRequest`, as AWS answers in
//!   regions without SigV2.
//! * **Presigned URLs valid for more than 7 days** (`X-Amz-Expires` above 604 800
//!   s, AWS's own bound): `400 AuthorizationQueryParametersError`.
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
}

fn query_params(q: &str) -> impl Iterator<Item = (&str, &str)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
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
    let v2_header = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            let v = v.trim_start();
            v.len() >= 4 && v[..4].eq_ignore_ascii_case("AWS ")
        });
    if v2_header {
        return Some(S3Refusal::SigV2);
    }
    if let Some(q) = req.uri().query() {
        let mut v2_sig = false;
        let mut v4_sig = false;
        let mut expires_too_long = false;
        for (k, v) in query_params(q) {
            if k.eq_ignore_ascii_case("Signature") || k.eq_ignore_ascii_case("AWSAccessKeyId") {
                v2_sig = true;
            } else if k.eq_ignore_ascii_case("X-Amz-Signature")
                || k.eq_ignore_ascii_case("X-Amz-Algorithm")
            {
                v4_sig = true;
            } else if k.eq_ignore_ascii_case("X-Amz-Expires") {
                // Unparseable values are s3s's to refuse; huge ones are ours.
                expires_too_long = v
                    .parse::<u128>()
                    .map_or(v.len() > 7 && v.bytes().all(|b| b.is_ascii_digit()), |n| {
                        n > u128::from(MAX_PRESIGNED_EXPIRES)
                    });
            }
        }
        if v2_sig && !v4_sig {
            return Some(S3Refusal::SigV2);
        }
        if expires_too_long {
            return Some(S3Refusal::ExpiresTooLong);
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
}
