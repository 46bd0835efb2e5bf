//! Errors of the object layer, and the classes front-ends answer them with.
//!
//! Front-ends never look inside the engine's or the state's errors: they ask
//! [`ObjectError::class`] what kind of failure it is (and so which status family
//! to answer with) and send [`ObjectError::client_message`], which for server-side
//! failures is a generic text (the details, such as stash sizes or backend keys,
//! go to the log only).

use oram_engine::OramError;
use oram_state::StateError;

/// Errors of the object layer.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// No such bucket.
    #[error("no such bucket {0}")]
    NoSuchBucket(String),
    /// No such object.
    #[error("no such key {0}")]
    NoSuchKey(String),
    /// No such version of the object (S3's `NoSuchVersion`).
    #[error("no such version {0}")]
    NoSuchVersion(String),
    /// The version read is a delete marker: asked for by its id
    /// (`by_version`; S3 answers 405), or the newest version of the key
    /// asked for (S3 answers 404 and says it is a delete marker).
    #[error("version {version_id} is a delete marker")]
    DeleteMarker {
        /// The marker's version id (`null` for the null version).
        version_id: String,
        /// When the marker was made, milliseconds since the Unix epoch.
        modified_ms: i64,
        /// Whether the request named the version.
        by_version: bool,
    },
    /// No such multipart upload.
    #[error("no such upload {0}")]
    NoSuchUpload(String),
    /// The bucket exists and belongs to another account.
    #[error("bucket {0} already exists")]
    BucketAlreadyExists(String),
    /// The caller already owns this bucket.
    #[error("bucket {0} already owned by you")]
    BucketAlreadyOwnedByYou(String),
    /// The bucket still holds objects.
    #[error("bucket {0} not empty")]
    BucketNotEmpty(String),
    /// The bucket belongs to another account, or a grant does not allow this.
    #[error("access denied")]
    AccessDenied,
    /// Not a valid bucket name.
    #[error("invalid bucket name {0:?}")]
    InvalidBucketName(String),
    /// Not a valid object key.
    #[error("invalid object key: {0}")]
    InvalidKey(String),
    /// A tag set breaks S3's rules (the text says which).
    #[error("invalid tag: {0}")]
    InvalidTag(String),
    /// A request argument the layer cannot use (the text says which).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A request that does not apply to its target as it is (S3's
    /// `InvalidRequest`: object lock asked of a bucket without it).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The bucket's state does not allow the change (S3's
    /// `InvalidBucketState`: object lock on a bucket not versioned, suspending
    /// versioning with object lock enabled).
    #[error("invalid bucket state: {0}")]
    InvalidBucketState(String),
    /// The bucket has no object lock configuration (S3's
    /// `ObjectLockConfigurationNotFoundError`).
    #[error("bucket {0} has no object lock configuration")]
    NoObjectLockConfig(String),
    /// The object version has no retention (S3's
    /// `NoSuchObjectLockConfiguration`).
    #[error("the object has no retention")]
    NoSuchObjectLock,
    /// The version is protected by object lock: retention or legal hold (S3
    /// answers `AccessDenied`); the text says which.
    #[error("object locked: {0}")]
    Locked(String),
    /// The object would be larger than allowed.
    #[error("object larger than {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// A part of a multipart upload, other than the last, is below the minimum size.
    #[error("part {part} is {size} bytes, below the minimum of {min}")]
    PartTooSmall {
        /// Part number.
        part: u32,
        /// Its size.
        size: u64,
        /// The minimum.
        min: u64,
    },
    /// A part listed for completion is missing or has another ETag.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// Parts listed for completion are not in ascending order.
    #[error("parts not in ascending order")]
    InvalidPartOrder,
    /// A part number outside 1..=10000.
    #[error("invalid part number {0}")]
    InvalidPartNumber(u32),
    /// The ORAM has too few free blocks for this write; nothing was changed.
    #[error("storage full: {needed} blocks needed, {free} free")]
    Full {
        /// Blocks the write needed beyond what it had.
        needed: u64,
        /// Blocks free.
        free: u64,
    },
    /// The client's body stream failed (connection lost, bad signature chunk).
    #[error("request body: {0}")]
    Body(String),
    /// A byte range that is empty or reaches past the end of the object.
    #[error("range not satisfiable for an object of {size} bytes")]
    InvalidRange {
        /// The object's size.
        size: u64,
    },
    /// A precondition of the request does not hold (RFC 7232: 412); nothing was
    /// changed. Also a create-only write that found the object there.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A read whose If-None-Match / If-Modified-Since says the client's copy is
    /// current (RFC 7232: 304).
    #[error("not modified")]
    NotModified,
    /// The object changed between the check of a condition and the operation.
    #[error("object {0} changed during the operation")]
    Conflict(String),
    /// The body does not match the MD5 the client sent.
    #[error("body does not match its MD5")]
    BadDigest,
    /// The body was not as long as announced.
    #[error("body of {got} bytes, {expected} announced")]
    IncompleteBody {
        /// Bytes received.
        got: u64,
        /// Bytes announced.
        expected: u64,
    },
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] OramError),
    /// The trusted state holds something unreadable.
    #[error(transparent)]
    State(#[from] StateError),
    /// The index could not be made durable. The index store is fail-stop: the layer
    /// refuses every further write until the process restarts (which reloads the
    /// last durable index).
    #[error("index not durable, writes refused until restart: {0}")]
    IndexFailed(String),
}

/// Result type of the object layer.
pub type Result<T, E = ObjectError> = std::result::Result<T, E>;

/// What kind of failure an [`ObjectError`] is: the front-ends answer every error
/// of a class with a status of the same family, so S3 and Swift agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The bucket, object or upload does not exist (404).
    NotFound,
    /// The caller may not do this (403).
    Forbidden,
    /// The operation does not apply to what it names: a delete marker read by
    /// its version id (405).
    MethodNotAllowed,
    /// The request conflicts with the current state: name taken, bucket not
    /// empty, a concurrent change (409).
    Conflict,
    /// The client's copy is current (304).
    NotModified,
    /// A precondition does not hold (412).
    Precondition,
    /// The request is malformed or names something invalid (400).
    Invalid,
    /// The object is larger than allowed (413).
    TooLarge,
    /// The byte range cannot be served (416).
    Range,
    /// The body does not match its checksum (400 in S3, 422 in Swift).
    BadDigest,
    /// The client's body was cut short or failed (400 in S3, 499 in Swift).
    ClientBody,
    /// The ORAM has no room for the write (507).
    Full,
    /// A transient failure below the layer: the backend is down, or the index
    /// or engine state could not be made durable (503).
    Unavailable,
    /// Backend data failed its integrity check: tampering, roll-back or
    /// corruption; retrying does not help (500).
    Integrity,
    /// Anything else the server got wrong (500).
    Internal,
}

impl ErrorClass {
    /// The HTTP status a front-end answers with (a front-end may pick another
    /// status of the same hundred, as noted on the variants).
    pub fn status(self) -> u16 {
        match self {
            ErrorClass::NotFound => 404,
            ErrorClass::Forbidden => 403,
            ErrorClass::MethodNotAllowed => 405,
            ErrorClass::Conflict => 409,
            ErrorClass::NotModified => 304,
            ErrorClass::Precondition => 412,
            ErrorClass::Invalid | ErrorClass::BadDigest | ErrorClass::ClientBody => 400,
            ErrorClass::TooLarge => 413,
            ErrorClass::Range => 416,
            ErrorClass::Full => 507,
            ErrorClass::Unavailable => 503,
            ErrorClass::Integrity | ErrorClass::Internal => 500,
        }
    }

    /// Whether the failure is the server's (5xx): its details stay in the log.
    pub fn is_server(self) -> bool {
        self.status() >= 500
    }
}

impl ObjectError {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        use ObjectError as E;
        match self {
            E::NoSuchBucket(_) | E::NoSuchKey(_) | E::NoSuchUpload(_) | E::NoSuchVersion(_) => {
                ErrorClass::NotFound
            }
            E::DeleteMarker { by_version, .. } => {
                if *by_version {
                    ErrorClass::MethodNotAllowed
                } else {
                    ErrorClass::NotFound
                }
            }
            E::NoObjectLockConfig(_) | E::NoSuchObjectLock => ErrorClass::NotFound,
            E::AccessDenied | E::Locked(_) => ErrorClass::Forbidden,
            E::BucketAlreadyExists(_)
            | E::BucketAlreadyOwnedByYou(_)
            | E::BucketNotEmpty(_)
            | E::InvalidBucketState(_)
            | E::Conflict(_) => ErrorClass::Conflict,
            E::NotModified => ErrorClass::NotModified,
            E::PreconditionFailed(_) => ErrorClass::Precondition,
            E::InvalidBucketName(_)
            | E::InvalidKey(_)
            | E::InvalidArgument(_)
            | E::InvalidRequest(_)
            | E::InvalidTag(_)
            | E::PartTooSmall { .. }
            | E::InvalidPart(_)
            | E::InvalidPartOrder
            | E::InvalidPartNumber(_) => ErrorClass::Invalid,
            E::TooLarge { .. } => ErrorClass::TooLarge,
            E::InvalidRange { .. } => ErrorClass::Range,
            E::BadDigest => ErrorClass::BadDigest,
            E::Body(_) | E::IncompleteBody { .. } => ErrorClass::ClientBody,
            E::Full { .. } => ErrorClass::Full,
            E::IndexFailed(_) => ErrorClass::Unavailable,
            E::Engine(e) => match e {
                OramError::Store(_) | OramError::State(_) => ErrorClass::Unavailable,
                OramError::Integrity { .. } => ErrorClass::Integrity,
                _ => ErrorClass::Internal,
            },
            E::State(_) => ErrorClass::Internal,
        }
    }

    /// A text for the client: this error's own text for client errors, a generic
    /// one for server-side failures (whose details belong in the log only).
    pub fn client_message(&self) -> String {
        match self.class() {
            ErrorClass::Unavailable => {
                "The storage service is unavailable; retry later.".to_string()
            }
            ErrorClass::Integrity => {
                "Integrity check of stored data failed; no data was returned.".to_string()
            }
            ErrorClass::Internal => "Internal error.".to_string(),
            _ => self.to_string(),
        }
    }

    /// Logs a server-side failure with its details (at `error` for integrity
    /// violations and internal errors, `warn` for transient ones). Client errors
    /// are not logged.
    pub fn log(&self, context: &str) {
        match self.class() {
            ErrorClass::Unavailable => tracing::warn!("{context}: {self}"),
            ErrorClass::Integrity => tracing::error!("{context}: INTEGRITY VIOLATION: {self}"),
            ErrorClass::Internal => tracing::error!("{context}: {self}"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_details_never_reach_clients() {
        let e = ObjectError::Engine(OramError::StashOverflow {
            size: 120,
            bound: 89,
        });
        assert_eq!(e.class(), ErrorClass::Internal);
        assert!(
            !e.client_message().contains("120"),
            "{}",
            e.client_message()
        );
        let e = ObjectError::Engine(OramError::Integrity {
            key: "oram/n/17".into(),
            reason: "tag".into(),
        });
        assert_eq!(e.class(), ErrorClass::Integrity);
        assert_eq!(e.class().status(), 500);
        assert!(!e.client_message().contains("oram/n/17"));
        let e = ObjectError::IndexFailed("disk gone".into());
        assert_eq!(e.class().status(), 503);
        assert!(!e.client_message().contains("disk"));
        // Client errors keep their text.
        let e = ObjectError::NoSuchKey("k".into());
        assert_eq!(e.class().status(), 404);
        assert!(e.client_message().contains("k"));
    }
}
