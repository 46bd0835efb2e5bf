//! What the handlers read from a request: its account, its body and length, its
//! conditions against an object, its copy source, and the client metadata of an
//! upload.

use futures::StreamExt;
use oram_objects::{ByteStream, Dialect, ObjectError, ObjectRecord, Preconditions, Validators};
use s3s::dto::{CopySource, StreamingBlob};
use s3s::{s3_error, S3Request, S3Result};

use crate::convert::{http_date, map_err, timestamp, PAYLOAD_HASH_MISMATCH};

/// The client metadata of a PutObject, CopyObject (REPLACE) or
/// CreateMultipartUpload input (the same fields in three types).
/// `Content-Encoding` loses `aws-chunked` (the transfer framing of a streaming
/// upload, not the object's encoding) as S3 does; `Expires` is kept as an HTTP
/// date (the same attribute Swift's `Expires` sets).
macro_rules! object_meta {
    ($input:expr) => {
        ::oram_objects::ObjectMeta {
            content_type: $input.content_type,
            content_encoding: $input
                .content_encoding
                .and_then(|e| $crate::request::content_encoding(&e)),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            user: $input
                .metadata
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
            extra: $input
                .expires
                .as_ref()
                .and_then($crate::convert::http_date)
                .map(|d| ($crate::request::EXPIRES.to_string(), d))
                .into_iter()
                .collect(),
        }
    };
}
pub(crate) use object_meta;

/// The name of the `Expires` attribute in `ObjectMeta::extra`.
pub(crate) const EXPIRES: &str = "expires";

/// A `Content-Encoding` value without `aws-chunked` (`None` if nothing is left).
pub(crate) fn content_encoding(v: &str) -> Option<String> {
    let kept: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The connection a request came on, as the server knows it: the peer's
/// address (`aws:SourceIp` in bucket policies; no `X-Forwarded-For` or other
/// header is trusted) and whether it is the TLS listener's
/// (`aws:SecureTransport`). The server puts it in each request's extensions;
/// without it both keys are missing from a policy's view of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConn {
    /// The peer address of the TCP connection.
    pub addr: std::net::IpAddr,
    /// Whether the request came over TLS.
    pub tls: bool,
}

/// The account a request acts as on its bucket, when a bucket policy lets the
/// caller use another account's bucket: the bucket's owner (set by
/// `crate::access`, read by [`owner`]).
#[derive(Debug, Clone)]
pub(crate) struct ActAs(pub(crate) String);

/// The account a copy reads its source as, when a bucket policy lets the
/// caller read another account's bucket (read by [`source_owner`]).
#[derive(Debug, Clone)]
pub(crate) struct ActAsSource(pub(crate) String);

/// The caller of a request: its access key. Anonymous requests never get here
/// (s3s refuses them when auth is set), but refuse them again to be sure.
pub(crate) fn caller<T>(req: &S3Request<T>) -> S3Result<String> {
    req.credentials
        .as_ref()
        .map(|c| c.access_key.clone())
        .ok_or_else(|| s3_error!(AccessDenied, "anonymous access is not allowed"))
}

/// The account a request acts as on its bucket: the caller, or the bucket's
/// owner where the bucket's policy allows the caller this request
/// ([`ActAs`]). Every handler reaches the object layer as this account, so
/// without a policy a caller reaches its own buckets only.
pub(crate) fn owner<T>(req: &S3Request<T>) -> S3Result<String> {
    let caller = caller(req)?;
    Ok(req
        .extensions
        .get::<ActAs>()
        .map_or(caller, |a| a.0.clone()))
}

/// The account a copy (CopyObject, UploadPartCopy) reads its source as: the
/// caller, or the source bucket's owner where that bucket's policy allows the
/// caller to read the source ([`ActAsSource`]).
pub(crate) fn source_owner<T>(req: &S3Request<T>) -> S3Result<String> {
    let caller = caller(req)?;
    Ok(req
        .extensions
        .get::<ActAsSource>()
        .map_or(caller, |a| a.0.clone()))
}

/// The request body as the object layer reads it (none: empty). s3s checks a
/// signed payload hash as the body is read and fails the stream at its end on
/// a mismatch; that failure (its type is private to s3s: known by its text)
/// becomes [`PAYLOAD_HASH_MISMATCH`].
pub(crate) fn body_stream(blob: Option<StreamingBlob>) -> ByteStream {
    match blob {
        None => Box::pin(futures::stream::empty()),
        Some(b) => Box::pin(b.map(|r| {
            r.map_err(|e| {
                let text = e.to_string();
                if text.contains("Sha256Mismatch") {
                    ObjectError::Body(PAYLOAD_HASH_MISMATCH.into())
                } else {
                    ObjectError::Body(text)
                }
            })
        })),
    }
}

/// The declared Content-Length of an upload: not negative, at most the largest
/// object (`None`: not declared).
pub(crate) fn check_len(len: Option<i64>) -> S3Result<Option<u64>> {
    match len {
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "negative Content-Length")),
        Some(n) if n as u64 > oram_objects::MAX_PUT_SIZE => Err(s3_error!(
            EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed object size of 5 GiB."
        )),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

/// Applies the request's conditions to `rec` (RFC 7232, S3's reading).
/// `reading`: GET/HEAD answer 304 where the precondition is "not modified".
/// A 304 or 412 carries the object's ETag and Last-Modified, as S3 sends them.
pub(crate) fn check_conditions(
    rec: &ObjectRecord,
    conditions: &Preconditions,
    reading: bool,
) -> S3Result<()> {
    conditions
        .evaluate(Some(Validators::of(rec)), reading, Dialect::S3)
        .map_err(|e| {
            let mut err = map_err(e);
            let mut h = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", rec.etag)) {
                h.insert(http::header::ETAG, v);
            }
            if let Some(v) = http_date(&timestamp(rec.modified_ms))
                .and_then(|d| http::HeaderValue::from_str(&d).ok())
            {
                h.insert(http::header::LAST_MODIFIED, v);
            }
            err.set_headers(h);
            err
        })
}

/// The bucket, key and version (`?versionId=`) of an `x-amz-copy-source` (an
/// access point is refused).
pub(crate) fn copy_source(src: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match src {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_string),
        )),
        _ => Err(s3_error!(
            NotImplemented,
            "only bucket/key copy sources are supported"
        )),
    }
}
