//! Swift's error answers: a status with swob's HTML body, and how object-layer
//! errors map onto them (by class, so that S3 and Swift agree).

use http::header::HeaderName;
use http::StatusCode;
use oram_objects::{ErrorClass, ObjectError};

/// An error answer: status and body text.
#[derive(Debug)]
pub(crate) struct SwiftError {
    pub(crate) status: StatusCode,
    pub(crate) body: String,
    pub(crate) headers: Vec<(HeaderName, String)>,
}

pub(crate) type Res<T> = Result<T, SwiftError>;

/// Swift's default HTML body for a status.
pub(crate) fn default_body(status: StatusCode) -> String {
    let (title, text) = match status.as_u16() {
        400 => ("Bad Request", "The server could not comply with the request since it is either malformed or otherwise incorrect."),
        401 => ("Unauthorized", "This server could not verify that you are authorized to access the document you requested."),
        403 => ("Forbidden", "Access was denied to this resource."),
        404 => ("Not Found", "The resource could not be found."),
        405 => ("Method Not Allowed", "The method is not allowed for this resource."),
        409 => ("Conflict", "There was a conflict when trying to complete your request."),
        411 => ("Length Required", "Length Required"),
        412 => ("Precondition Failed", "A precondition for this request was not met."),
        413 => ("Request Entity Too Large", "The body of your request was too large for this server."),
        416 => ("Requested Range Not Satisfiable", "The Range requested is not available."),
        422 => ("Unprocessable Entity", "Unable to process the contained instructions"),
        429 => ("Too Many Requests", "Too many failed logins; retry later."),
        499 => ("Client Disconnect", "The client was disconnected during request."),
        503 => ("Service Unavailable", "The server is currently unavailable. Please try again at a later time."),
        507 => ("Insufficient Storage", "There was not enough space to save the resource."),
        _ => ("Internal Error", "The server has either erred or is incapable of performing the requested operation."),
    };
    format!("<html><h1>{title}</h1><p>{text}</p></html>")
}

pub(crate) fn err(status: u16) -> SwiftError {
    let status = StatusCode::from_u16(status).expect("valid status");
    SwiftError {
        status,
        body: default_body(status),
        headers: Vec::new(),
    }
}

pub(crate) fn err_msg(status: u16, msg: impl Into<String>) -> SwiftError {
    SwiftError {
        status: StatusCode::from_u16(status).expect("valid status"),
        body: msg.into(),
        headers: Vec::new(),
    }
}

/// The answer to an object-layer error: its class decides the status (Swift's
/// own within the family: 422 for a bad checksum, 499 for a broken body); a
/// server-side failure is logged with its details and answered with the
/// status's generic body.
pub(crate) fn obj_err(e: ObjectError) -> SwiftError {
    e.log("swift");
    match &e {
        ObjectError::BucketAlreadyExists(_) => {
            err_msg(409, "Container name is in use by another account")
        }
        ObjectError::InvalidBucketName(n) => err_msg(400, format!("Invalid container name {n:?}")),
        ObjectError::InvalidKey(m) => err_msg(400, format!("Invalid object name: {m}")),
        ObjectError::InvalidArgument(m) => err_msg(400, m.clone()),
        ObjectError::Full { needed, free } => err_msg(
            507,
            format!(
                "Insufficient Storage: this write needs {needed} more blocks of this volume and \
                 {free} are free. An overwrite needs room for the new copy before the old one is \
                 freed. Free space by deleting objects, or grow the volume (`oram-proxy grow --to \
                 SIZE`, path, ring and direct engines)."
            ),
        ),
        _ => err(match e.class() {
            // Swift's own statuses within the class's family.
            ErrorClass::BadDigest => 422,
            ErrorClass::ClientBody => 499,
            class => class.status(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_error_class() {
        use oram_objects::ObjectError as E;
        for e in [
            E::NoSuchKey("k".into()),
            E::AccessDenied,
            E::BucketNotEmpty("c".into()),
            E::PreconditionFailed("x".into()),
            E::NotModified,
            E::InvalidPartOrder,
            E::TooLarge { max: 1 },
            E::InvalidRange { size: 1 },
            E::BadDigest,
            E::Body("reset".into()),
            E::Full { needed: 2, free: 1 },
            E::IndexFailed("disk: stash of 77 blocks".into()),
        ] {
            let class = e.class();
            let a = obj_err(e);
            let status = a.status.as_u16();
            assert_eq!(status / 100, class.status() / 100, "{class:?}");
            if class.is_server() || status < 400 {
                assert_eq!(status, class.status(), "{class:?}");
                assert!(!a.body.contains("77"));
            }
        }
    }
}
