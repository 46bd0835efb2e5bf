//! Conversions between the object layer and s3s: errors, times, ETags, bodies,
//! listing encodings.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use oram_objects::{ByteStream, EntityTag, ErrorClass, EtagList, ObjectError, Preconditions};
use s3s::dto::{ETag, ETagCondition, Owner, StreamingBlob, Timestamp, TimestampFormat};
use s3s::stream::{ByteStream as S3ByteStream, RemainingLength};
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result, StdError};
use tokio::sync::mpsc;

/// What a body whose bytes do not hash to its signed `x-amz-content-sha256`
/// fails with (the object layer's [`ObjectError::Body`], from
/// `crate::request::body_stream`), answered `XAmzContentSHA256Mismatch`.
pub(crate) const PAYLOAD_HASH_MISMATCH: &str = "x-amz-content-sha256 mismatch";

/// Maps an object-layer error to the S3 error a client expects. The status
/// follows the error's class (the Swift front-end answers the same class); a
/// server-side failure is logged with its details and answered with a generic
/// message.
pub(crate) fn map_err(e: ObjectError) -> S3Error {
    use ObjectError as E;
    let class = e.class();
    e.log("s3");
    match e {
        E::NoSuchBucket(b) => s3_error!(NoSuchBucket, "The specified bucket does not exist: {b}"),
        E::NoSuchKey(_) => s3_error!(NoSuchKey, "The specified key does not exist."),
        E::NoSuchUpload(_) => s3_error!(NoSuchUpload, "The specified multipart upload does not exist."),
        E::NoSuchVersion(_) => s3_error!(NoSuchVersion, "The specified version does not exist."),
        E::DeleteMarker { version_id, modified_ms, by_version } => {
            let mut err = if by_version {
                s3_error!(MethodNotAllowed, "The specified method is not allowed against this resource.")
            } else {
                s3_error!(NoSuchKey, "The specified key does not exist.")
            };
            let mut h = http::HeaderMap::new();
            h.insert("x-amz-delete-marker", http::HeaderValue::from_static("true"));
            if let Ok(v) = http::HeaderValue::from_str(&version_id) {
                h.insert("x-amz-version-id", v);
            }
            if let Some(v) = http_date(&timestamp(modified_ms))
                .and_then(|d| http::HeaderValue::from_str(&d).ok())
            {
                h.insert(http::header::LAST_MODIFIED, v);
            }
            err.set_headers(h);
            err
        }
        E::BucketAlreadyExists(_) => s3_error!(BucketAlreadyExists),
        E::BucketAlreadyOwnedByYou(_) => s3_error!(BucketAlreadyOwnedByYou),
        E::BucketNotEmpty(_) => s3_error!(BucketNotEmpty, "The bucket you tried to delete is not empty."),
        E::AccessDenied => s3_error!(AccessDenied, "Access Denied"),
        E::InvalidBucketName(b) => s3_error!(InvalidBucketName, "The specified bucket is not valid: {b}"),
        E::InvalidKey(m) => s3_error!(KeyTooLongError, "{m}"),
        E::InvalidArgument(m) => s3_error!(InvalidArgument, "{m}"),
        E::InvalidRequest(m) => s3_error!(InvalidRequest, "{m}"),
        E::InvalidBucketState(m) => s3_error!(InvalidBucketState, "{m}"),
        E::NoObjectLockConfig(_) => s3_error!(
            ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket"
        ),
        E::NoSuchObjectLock => s3_error!(
            NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration"
        ),
        E::Locked(m) => s3_error!(AccessDenied, "Access Denied because object protected by object lock: {m}"),
        E::InvalidTag(m) => s3_error!(InvalidTag, "{m}"),
        E::TooLarge { max } => s3_error!(EntityTooLarge, "Your proposed upload exceeds the maximum allowed size of {max} bytes."),
        E::PartTooSmall { part, size, min } => s3_error!(
            EntityTooSmall,
            "Part {part} is {size} bytes; every part but the last must be at least {min} bytes."
        ),
        E::InvalidPart(m) => s3_error!(InvalidPart, "{m}"),
        E::InvalidPartOrder => s3_error!(InvalidPartOrder, "The list of parts was not in ascending order."),
        E::InvalidPartNumber(n) => s3_error!(InvalidArgument, "invalid part number {n}"),
        E::Full { needed, free } => {
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("XOramStorageFull".into()),
                full_message(needed, free),
            );
            err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            err
        }
        E::InvalidRange { size } => s3_error!(
            InvalidRange,
            "The requested range is not satisfiable (object size {size})"
        ),
        E::PreconditionFailed(_) => s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        ),
        E::NotModified => S3Error::new(S3ErrorCode::NotModified),
        E::Conflict(_) => s3_error!(
            OperationAborted,
            "A conflicting operation changed the object; try again."
        ),
        E::BadDigest => s3_error!(BadDigest, "The Content-MD5 you specified did not match what we received."),
        E::Body(m) if m == PAYLOAD_HASH_MISMATCH => {
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            );
            err.set_status_code(http::StatusCode::BAD_REQUEST);
            err
        }
        E::Body(m) => s3_error!(IncompleteBody, "request body: {m}"),
        E::IncompleteBody { got, expected } => s3_error!(
            IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header ({got} of {expected})."
        ),
        e @ (E::Engine(_) | E::State(_) | E::IndexFailed(_)) => {
            let code = match class {
                ErrorClass::Unavailable => S3ErrorCode::ServiceUnavailable,
                _ => S3ErrorCode::InternalError,
            };
            S3Error::with_message(code, e.client_message())
        }
    }
}

/// The `Owner` element of an account: its access key as both id and display name.
pub(crate) fn owner_element(account: &str) -> Owner {
    Owner {
        display_name: Some(account.to_string()),
        id: Some(account.to_string()),
    }
}

/// A timestamp from milliseconds since the epoch.
pub(crate) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

/// Decodes a Content-MD5 header (base64 of 16 bytes).
pub(crate) fn decode_md5(s: &str) -> S3Result<[u8; 16]> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
        .and_then(|v| <[u8; 16]>::try_from(v).ok())
        .ok_or_else(|| s3_error!(InvalidDigest, "The Content-MD5 you specified was invalid."))
}

/// The layer's form of an s3s If-Match / If-None-Match condition.
pub(crate) fn etag_list(c: &ETagCondition) -> EtagList {
    match c {
        ETagCondition::Any => EtagList::Any,
        ETagCondition::ETag(e) => EtagList::Tags(vec![EntityTag {
            weak: matches!(e, ETag::Weak(_)),
            tag: e.value().to_string(),
        }]),
    }
}

/// An s3s timestamp as an HTTP date.
pub(crate) fn http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// Seconds since the epoch of an s3s timestamp.
pub(crate) fn timestamp_to_secs(t: &Timestamp) -> Option<i64> {
    Some(time::OffsetDateTime::from(t.clone()).unix_timestamp())
}

/// The preconditions of a request, from the four s3s fields.
pub(crate) fn preconditions(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> Preconditions {
    Preconditions {
        if_match: if_match.map(etag_list),
        if_none_match: if_none_match.map(etag_list),
        if_modified_since: if_modified_since.and_then(timestamp_to_secs),
        if_unmodified_since: if_unmodified_since.and_then(timestamp_to_secs),
    }
}

/// A response body fed by a task that reads the object ahead, one batch at a time.
struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, ObjectError>>,
    remaining: usize,
}

impl Stream for ChannelBody {
    type Item = Result<Bytes, StdError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => {
                self.remaining = self.remaining.saturating_sub(b.len());
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl S3ByteStream for ChannelBody {
    fn remaining_length(&self) -> RemainingLength {
        RemainingLength::new_exact(self.remaining)
    }
}

/// Turns an object stream of `len` bytes into a response body. The reader task
/// stays one batch ahead of the client and stops when the client goes away.
/// Reads the first chunk of an object before the response is committed, so that an
/// error there (an integrity violation, the backend down) becomes a proper S3 error
/// response instead of a body cut short.
pub(crate) async fn prefetch(mut stream: ByteStream) -> Result<ByteStream, ObjectError> {
    match stream.next().await {
        None => Ok(Box::pin(futures::stream::empty())),
        Some(Err(e)) => Err(e),
        Some(Ok(first)) => Ok(Box::pin(
            futures::stream::once(async move { Ok(first) }).chain(stream),
        )),
    }
}

pub(crate) fn streaming_blob(mut stream: ByteStream, len: u64) -> StreamingBlob {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if let Err(e) = &item {
                tracing::warn!("object read failed mid-response: {e}");
            }
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    StreamingBlob::new(ChannelBody {
        rx,
        remaining: len as usize,
    })
}

/// Percent-encodes a key for `encoding-type=url` (everything but unreserved
/// characters and `/`).
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An opaque ListObjectsV2 continuation token for "after this key".
pub(crate) fn encode_token(after: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(after.as_bytes())
}

/// The key a continuation token stands for.
pub(crate) fn decode_token(token: &str) -> S3Result<String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|v| String::from_utf8(v).ok())
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "The continuation token provided is incorrect"
            )
        })
}

/// The full-volume error's message: what the write needed, and what to do.
fn full_message(needed: u64, free: u64) -> String {
    format!(
        "The ORAM volume is full: this write needs {needed} more blocks and {free} are free. \
         An overwrite needs room for the new copy before the old one is freed. Free space by \
         deleting objects or aborting incomplete multipart uploads, or grow the volume \
         (`oram-proxy grow --to SIZE`, path, ring and direct engines; `[volume] grow_at` grows it by \
         itself)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of every variant the front-end can build without the engine (the
    /// object layer's own tests cover the engine's and the state's classes).
    pub(crate) fn every_error() -> Vec<ObjectError> {
        use oram_objects::ObjectError as E;
        vec![
            E::NoSuchBucket("b".into()),
            E::NoSuchKey("k".into()),
            E::NoSuchUpload("u".into()),
            E::NoSuchVersion("v".into()),
            E::DeleteMarker {
                version_id: "null".into(),
                modified_ms: 0,
                by_version: false,
            },
            E::DeleteMarker {
                version_id: "null".into(),
                modified_ms: 0,
                by_version: true,
            },
            E::BucketAlreadyExists("b".into()),
            E::BucketAlreadyOwnedByYou("b".into()),
            E::BucketNotEmpty("b".into()),
            E::AccessDenied,
            E::InvalidBucketName("B".into()),
            E::InvalidKey("k".into()),
            E::InvalidArgument("x".into()),
            E::InvalidRequest("x".into()),
            E::InvalidBucketState("x".into()),
            E::NoObjectLockConfig("b".into()),
            E::NoSuchObjectLock,
            E::Locked("retention".into()),
            E::InvalidTag("x".into()),
            E::TooLarge { max: 1 },
            E::PartTooSmall {
                part: 1,
                size: 1,
                min: 2,
            },
            E::InvalidPart("p".into()),
            E::InvalidPartOrder,
            E::InvalidPartNumber(0),
            E::Full { needed: 2, free: 1 },
            E::Body("reset".into()),
            E::InvalidRange { size: 1 },
            E::PreconditionFailed("x".into()),
            E::NotModified,
            E::Conflict("k".into()),
            E::BadDigest,
            E::IncompleteBody {
                got: 1,
                expected: 2,
            },
            E::IndexFailed("disk: stash of 77 blocks".into()),
        ]
    }

    #[test]
    fn statuses_follow_the_error_class() {
        for e in every_error() {
            let class = e.class();
            let text = e.to_string();
            let s3 = map_err(e);
            let status = s3.status_code().expect("every code has a status").as_u16();
            // The class's family always (S3 answers 400 EntityTooLarge where the
            // class says 413); the exact status for server failures, which both
            // front-ends must answer alike.
            assert_eq!(
                status / 100,
                class.status() / 100,
                "{text}: {:?}",
                s3.code()
            );
            if class.is_server() || status < 400 {
                assert_eq!(status, class.status(), "{text}");
            }
            if class.is_server() {
                let msg = s3.message().unwrap_or_default();
                assert!(!msg.contains("77") && !msg.contains("disk"), "{msg}");
            }
        }
    }

    #[test]
    fn encodings() {
        assert_eq!(url_encode("a b/c+d%é"), "a%20b/c%2Bd%25%C3%A9");
        assert_eq!(decode_token(&encode_token("dir/ü x")).unwrap(), "dir/ü x");
        assert!(decode_token("!!!").is_err());
        assert!(decode_md5("1B2M2Y8AsgTpgAmY7PhCfg==").is_ok());
        assert!(decode_md5("short").is_err());
    }
}
