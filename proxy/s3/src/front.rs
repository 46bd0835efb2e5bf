//! What the S3 service does around s3s: a request id on every answer (the same
//! in the `x-amz-request-id` header and an error's XML `RequestId`), a
//! `<Message>` in every error document (s3s leaves some without one:
//! [`crate::messages`]), one log line per refused request (debug for a client
//! error, warn for a server error; s3s's own error-level lines are filtered out
//! by the binary's default log filter), and requests signed for a legacy region
//! name.
//!
//! **Legacy regions.** s3s accepts any region of `[a-z0-9-]` in a SigV4
//! credential scope (as MinIO accepts any region) but refuses other names, such
//! as `US` and `EU`, which s3cmd sends by default (`bucket_location = US`) and
//! which AWS reads as us-east-1 and eu-west-1. For such a request the front
//! checks the signature itself, with the client's region, against the user's
//! secret; if it holds, it signs the same canonical request again for the AWS
//! region and hands that to s3s, which verifies it as usual. A signature that
//! does not hold is left alone (s3s answers `SignatureDoesNotMatch`); a streaming
//! (aws-chunked) upload with a legacy region, whose chunk signatures cannot be
//! re-signed here, is refused with `AuthorizationHeaderMalformed`.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH};
use rand::RngCore;
use s3s::service::S3Service;
use s3s::{s3_error, Body, HttpError};
use sha2::{Digest, Sha256};

use crate::UserMap;

/// The AWS region a legacy region name stands for.
pub fn legacy_region(name: &str) -> Option<&'static str> {
    match name {
        "US" => Some("us-east-1"),
        "EU" => Some("eu-west-1"),
        _ => None,
    }
}

/// The S3 HTTP service: s3s over the object layer, with request ids and legacy
/// regions (see the module documentation). Cheap to clone.
#[derive(Clone)]
pub struct S3Front {
    service: S3Service,
    /// The users, to check legacy-region signatures (the map s3s checks with).
    secrets: UserMap,
}

impl S3Front {
    pub(crate) fn new(service: S3Service, secrets: UserMap) -> Self {
        Self { service, secrets }
    }

    /// Serves one request.
    pub async fn call(
        &self,
        mut req: http::Request<Body>,
    ) -> Result<http::Response<Body>, HttpError> {
        let id = request_id();
        let method = req.method().clone();
        let early = match resign_legacy_region(&mut req, &self.secrets) {
            Ok(()) => None,
            Err(e) => Some(
                e.to_http_response()
                    .map_err(|e| HttpError::new(Box::new(e)))?,
            ),
        };
        let mut resp = match early {
            Some(r) => r,
            None => self.service.call(req).await?,
        };
        add_request_id(&mut resp, &id);
        log_refusal(&resp, &method, &id);
        Ok(resp)
    }
}

/// One line for a refused request: its status, S3 error code and request id
/// (no path: object names stay out of the log at the default level).
fn log_refusal(resp: &http::Response<Body>, method: &http::Method, id: &str) {
    let status = resp.status();
    if status.as_u16() < 400 {
        return;
    }
    let doc = resp.body().bytes();
    let code = doc
        .as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(crate::messages::code_of)
        .unwrap_or("-");
    if status.is_server_error() {
        tracing::warn!(%method, status = status.as_u16(), code, request_id = id, "s3 request failed");
    } else {
        tracing::debug!(%method, status = status.as_u16(), code, request_id = id, "s3 request refused");
    }
}

/// 16 upper-case hex digits, as AWS's request ids look.
fn request_id() -> String {
    let mut b = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode_upper(b)
}

/// Puts `id` into the answer's headers and, for an S3 error body without one,
/// into its XML; gives an error body without a `<Message>` one.
fn add_request_id(resp: &mut http::Response<Body>, id: &str) {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(id) {
        h.insert("x-amz-request-id", v.clone());
        h.insert("x-amz-id-2", v);
    }
    if resp.status().as_u16() < 300 {
        return;
    }
    if resp.status() == http::StatusCode::NOT_MODIFIED {
        // s3s renders a 304 as an error document; S3 sends none (hyper drops the
        // body of a 304, but its length would still be announced).
        let h = resp.headers_mut();
        h.remove(CONTENT_LENGTH);
        h.remove(http::header::CONTENT_TYPE);
        *resp.body_mut() = Body::empty();
        return;
    }
    let Some(bytes) = resp.body().bytes() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return;
    };
    if !text.contains("<Error>") {
        return;
    }
    let with_message = crate::messages::with_message(text);
    let text = with_message.as_deref().unwrap_or(text);
    let body = match text.rfind("</Error>") {
        Some(i) if !text.contains("<RequestId>") => {
            format!("{}<RequestId>{id}</RequestId>{}", &text[..i], &text[i..])
        }
        _ if with_message.is_some() => text.to_string(),
        _ => return,
    };
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    *resp.body_mut() = Body::from(Bytes::from(body));
}

/// The parts of a SigV4 `Authorization` header.
struct SigV4 {
    access_key: String,
    date: String,
    region: String,
    service: String,
    signed_headers: String,
    signature: String,
}

fn parse_authorization(v: &str) -> Option<SigV4> {
    let rest = v.strip_prefix("AWS4-HMAC-SHA256")?.trim();
    let mut cred = None;
    let mut signed = None;
    let mut sig = None;
    for part in rest.split(',') {
        let (k, val) = part.trim().split_once('=')?;
        match k.trim() {
            "Credential" => cred = Some(val.trim()),
            "SignedHeaders" => signed = Some(val.trim()),
            "Signature" => sig = Some(val.trim()),
            _ => {}
        }
    }
    let mut c = cred?.split('/');
    let access_key = c.next()?.to_string();
    let date = c.next()?.to_string();
    let region = c.next()?.to_string();
    let service = c.next()?.to_string();
    (c.next()? == "aws4_request").then_some(())?;
    Some(SigV4 {
        access_key,
        date,
        region,
        service,
        signed_headers: signed?.to_string(),
        signature: sig?.to_string(),
    })
}

/// Percent-encodes as SigV4 does (unreserved characters kept, upper-case hex).
fn aws_encode(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn canonical_query(q: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> = q
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| percent_encoding::percent_decode_str(s).collect::<Vec<u8>>();
            (aws_encode(&dec(k)), aws_encode(&dec(v)))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn canonical_request(req: &http::Request<Body>, signed_headers: &str) -> Option<String> {
    let mut headers = String::new();
    for name in signed_headers.split(';') {
        let values: Vec<String> = req
            .headers()
            .get_all(name)
            .iter()
            .map(|v| {
                let v = String::from_utf8_lossy(v.as_bytes());
                v.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect();
        if values.is_empty() && name != "host" {
            return None;
        }
        let value = if values.is_empty() {
            req.uri().authority()?.as_str().to_string()
        } else {
            values.join(",")
        };
        headers.push_str(&format!("{name}:{value}\n"));
    }
    let payload = req
        .headers()
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("UNSIGNED-PAYLOAD");
    Some(format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method().as_str(),
        req.uri().path(),
        canonical_query(req.uri().query()),
        headers,
        signed_headers,
        payload
    ))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn signature(secret: &str, a: &SigV4, region: &str, amz_date: &str, canonical: &str) -> String {
    let scope = format!("{}/{region}/{}/aws4_request", a.date, a.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k = hmac(format!("AWS4{secret}").as_bytes(), a.date.as_bytes());
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, a.service.as_bytes());
    let k = hmac(&k, b"aws4_request");
    hex::encode(hmac(&k, to_sign.as_bytes()))
}

/// Constant-time equality of two strings of the same length.
fn ct_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Re-signs a request whose credential scope names a legacy region (see the
/// module documentation); leaves every other request as it is.
fn resign_legacy_region(
    req: &mut http::Request<Body>,
    secrets: &UserMap,
) -> Result<(), s3s::S3Error> {
    let Some(auth) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_authorization)
    else {
        return Ok(());
    };
    let Some(region) = legacy_region(&auth.region) else {
        return Ok(());
    };
    let streaming = req
        .headers()
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("STREAMING-"));
    if streaming {
        return Err(s3_error!(
            AuthorizationHeaderMalformed,
            "The region {:?} is accepted only for requests that are not streamed in signed chunks; configure the region {region}",
            auth.region
        ));
    }
    let (Some(secret), Some(amz_date), Some(canonical)) = (
        secrets.secret(&auth.access_key),
        req.headers()
            .get("x-amz-date")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        canonical_request(req, &auth.signed_headers),
    ) else {
        return Ok(());
    };
    if !ct_eq(
        &signature(&secret, &auth, &auth.region, &amz_date, &canonical),
        &auth.signature,
    ) {
        // Not ours to fix: s3s refuses it.
        return Ok(());
    }
    let new = format!(
        "AWS4-HMAC-SHA256 Credential={}/{}/{region}/{}/aws4_request, SignedHeaders={}, Signature={}",
        auth.access_key,
        auth.date,
        auth.service,
        auth.signed_headers,
        signature(&secret, &auth, region, &amz_date, &canonical)
    );
    if let Ok(v) = HeaderValue::from_str(&new) {
        req.headers_mut().insert(AUTHORIZATION, v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published SigV4 example (GET of a ranged object, examplebucket).
    #[test]
    fn signature_matches_the_aws_example() {
        let req = http::Request::builder()
            .method("GET")
            .uri("http://examplebucket.s3.amazonaws.com/test.txt")
            .header("host", "examplebucket.s3.amazonaws.com")
            .header("range", "bytes=0-9")
            .header(
                "x-amz-content-sha256",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            )
            .header("x-amz-date", "20130524T000000Z")
            .body(Body::empty())
            .unwrap();
        let auth = parse_authorization("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41").unwrap();
        let canonical = canonical_request(&req, &auth.signed_headers).unwrap();
        assert_eq!(
            signature(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                &auth,
                "us-east-1",
                "20130524T000000Z",
                &canonical
            ),
            auth.signature
        );
    }

    #[test]
    fn legacy_names_and_query_canonicalisation() {
        assert_eq!(legacy_region("US"), Some("us-east-1"));
        assert_eq!(legacy_region("EU"), Some("eu-west-1"));
        assert_eq!(legacy_region("us-east-1"), None);
        assert_eq!(
            canonical_query(Some("prefix=a%20b&acl&delimiter=%2F")),
            "acl=&delimiter=%2F&prefix=a%20b"
        );
    }

    #[test]
    fn error_bodies_get_the_request_id() {
        let mut resp = s3_error!(NoSuchKey, "gone").to_http_response().unwrap();
        add_request_id(&mut resp, "0123456789ABCDEF");
        assert_eq!(resp.headers()["x-amz-request-id"], "0123456789ABCDEF");
        let body = resp.body().bytes().unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            text.contains("<RequestId>0123456789ABCDEF</RequestId></Error>"),
            "{text}"
        );
        assert_eq!(
            resp.headers()[CONTENT_LENGTH].to_str().unwrap(),
            body.len().to_string()
        );
    }
}
