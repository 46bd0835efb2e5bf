//! Conversions between the object layer and s3s: errors, times, ETags, bodies,
//! listing encodings.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use oram_engine::OramError;
use oram_objects::{ByteStream, ObjectError};
use s3s::dto::{ETagCondition, StreamingBlob, Timestamp};
use s3s::stream::{ByteStream as S3ByteStream, RemainingLength};
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result, StdError};
use tokio::sync::mpsc;

/// Maps an object-layer error to the S3 error a client expects.
pub(crate) fn map_err(e: ObjectError) -> S3Error {
    use ObjectError as E;
    match e {
        E::NoSuchBucket(b) => s3_error!(NoSuchBucket, "The specified bucket does not exist: {b}"),
        E::NoSuchKey(_) => s3_error!(NoSuchKey, "The specified key does not exist."),
        E::NoSuchUpload(_) => s3_error!(NoSuchUpload, "The specified multipart upload does not exist."),
        E::BucketAlreadyExists(_) => s3_error!(BucketAlreadyExists),
        E::BucketAlreadyOwnedByYou(_) => s3_error!(BucketAlreadyOwnedByYou),
        E::BucketNotEmpty(_) => s3_error!(BucketNotEmpty, "The bucket you tried to delete is not empty."),
        E::AccessDenied => s3_error!(AccessDenied, "Access Denied"),
        E::InvalidBucketName(b) => s3_error!(InvalidBucketName, "The specified bucket is not valid: {b}"),
        E::InvalidKey(m) => s3_error!(KeyTooLongError, "{m}"),
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
                format!("The ORAM volume is full: the upload needs {needed} more blocks, {free} are free."),
            );
            err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            err
        }
        E::InvalidRange { size } => s3_error!(
            InvalidRange,
            "The requested range is not satisfiable (object size {size})"
        ),
        E::AlreadyExists(_) => s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold (the object exists)."
        ),
        E::Conflict(_) => s3_error!(
            OperationAborted,
            "A conflicting operation changed the object; try again."
        ),
        E::BadDigest => s3_error!(BadDigest, "The Content-MD5 you specified did not match what we received."),
        E::Body(m) => s3_error!(IncompleteBody, "request body: {m}"),
        E::IncompleteBody { got, expected } => s3_error!(
            IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header ({got} of {expected})."
        ),
        E::Engine(OramError::Store(e)) => {
            tracing::warn!("backend unavailable: {e}");
            s3_error!(ServiceUnavailable, "The storage backend is unavailable; retry later.")
        }
        E::Engine(OramError::Integrity { key, reason }) => {
            tracing::error!(backend_object = %key, "INTEGRITY VIOLATION: {reason}");
            s3_error!(InternalError, "Integrity check of backend data failed; no data was returned.")
        }
        E::Engine(e) => {
            tracing::error!("engine: {e}");
            s3_error!(InternalError, "engine error: {e}")
        }
        E::State(e) => {
            tracing::error!("trusted state: {e}");
            s3_error!(InternalError, "trusted state error")
        }
    }
}

/// A timestamp from milliseconds since the epoch.
pub(crate) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

/// As [`timestamp`], truncated to whole seconds (the resolution of HTTP dates).
pub(crate) fn timestamp_secs(ms: i64) -> Timestamp {
    timestamp(ms.max(0) / 1000 * 1000)
}

/// Whether an If-Match / If-None-Match condition matches `etag` (unquoted).
pub(crate) fn etag_matches(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value().trim_matches('"') == etag,
    }
}

/// Decodes a Content-MD5 header (base64 of 16 bytes).
pub(crate) fn decode_md5(s: &str) -> S3Result<[u8; 16]> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
        .and_then(|v| <[u8; 16]>::try_from(v).ok())
        .ok_or_else(|| s3_error!(InvalidDigest, "The Content-MD5 you specified was invalid."))
}

/// Passes a body through, failing at its end with `BadDigest` unless its MD5 is `want`.
pub(crate) fn md5_checked(body: ByteStream, want: [u8; 16]) -> ByteStream {
    let state = (body, Some(Md5::new()));
    Box::pin(futures::stream::unfold(
        state,
        move |(mut body, hasher)| async move {
            let mut hasher = hasher?;
            match body.next().await {
                Some(Ok(chunk)) => {
                    hasher.update(&chunk);
                    Some((Ok(chunk), (body, Some(hasher))))
                }
                Some(Err(e)) => Some((Err(e), (body, None))),
                None => {
                    let got: [u8; 16] = hasher.finalize().into();
                    (got != want).then_some((Err(ObjectError::BadDigest), (body, None)))
                }
            }
        },
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(url_encode("a b/c+d%é"), "a%20b/c%2Bd%25%C3%A9");
        assert_eq!(decode_token(&encode_token("dir/ü x")).unwrap(), "dir/ü x");
        assert!(decode_token("!!!").is_err());
        assert!(decode_md5("1B2M2Y8AsgTpgAmY7PhCfg==").is_ok());
        assert!(decode_md5("short").is_err());
    }

    #[tokio::test]
    async fn md5_check_fails_the_stream_on_mismatch() {
        let body = || -> ByteStream {
            Box::pin(futures::stream::iter(vec![Ok(Bytes::from_static(b"abc"))]))
        };
        let right: [u8; 16] = Md5::digest(b"abc").into();
        let ok: Vec<_> = md5_checked(body(), right).collect().await;
        assert!(ok.iter().all(|r| r.is_ok()));
        let bad: Vec<_> = md5_checked(body(), [0; 16]).collect().await;
        assert!(matches!(bad.last(), Some(Err(ObjectError::BadDigest))));
    }
}
