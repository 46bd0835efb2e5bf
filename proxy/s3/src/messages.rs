//! A `<Message>` for every S3 error answer that has none.
//!
//! s3s refuses some requests before they reach the object layer (a signature
//! that does not match, a bucket name or key it cannot parse) with an error
//! document holding only a `<Code>`; aws cli and boto3 then print "Unknown" as
//! the reason, which tells a new user nothing. [`default_message`] says, for
//! each code S3 clients meet, what it means and what to check; a code it does
//! not know still gets a sentence naming it.

/// What an S3 error `code` means, for an error document that carries no
/// message of its own.
pub(crate) fn default_message(code: &str) -> String {
    let m = match code {
        "SignatureDoesNotMatch" => {
            "The request's signature does not match the one computed with the secret key of \
             its access key. Check the secret key, and that the client signs for the endpoint \
             it sends to (a proxy or load balancer in front must not change the Host header)."
        }
        "InvalidAccessKeyId" => {
            "No user of this proxy has this access key. Check the access key (the proxy's users \
             are in credentials.toml in its data directory)."
        }
        "AccessDenied" => "Access denied.",
        "AuthorizationHeaderMalformed" => {
            "The Authorization header is not a well-formed AWS Signature Version 4 header."
        }
        "AuthorizationQueryParametersError" => {
            "The presigned URL's query parameters are malformed or out of range."
        }
        "RequestTimeTooSkewed" => {
            "The request's time differs too much from the proxy's clock. Check the clocks of \
             the client and the proxy."
        }
        "InvalidBucketName" => {
            "The bucket name is not valid: it must be 3 to 63 characters of lower-case letters, \
             digits, dots and hyphens, starting and ending with a letter or digit, and not \
             look like an IP address."
        }
        "KeyTooLongError" => "The object key is longer than 1024 bytes (UTF-8).",
        "InvalidURI" => "The request's path cannot be parsed as a bucket and an object key.",
        "NoSuchBucket" => "The bucket does not exist.",
        "NoSuchKey" => "The object does not exist.",
        "NoSuchUpload" => {
            "The multipart upload does not exist: it was completed or aborted, or its id is wrong."
        }
        "NoSuchVersion" => "The version does not exist.",
        "BucketNotEmpty" => "The bucket is not empty: delete its objects first.",
        "BucketAlreadyOwnedByYou" => "You already own a bucket of this name.",
        "BucketAlreadyExists" => "A bucket of this name exists and belongs to another user.",
        "TooManyBuckets" => "The proxy's limit on the number of buckets is reached.",
        "InvalidArgument" => "An argument of the request is not valid.",
        "InvalidRequest" => "The request is not valid.",
        "MalformedXML" => "The XML in the request body is not well-formed or not valid.",
        "MissingContentLength" => "The request needs a Content-Length header.",
        "IncompleteBody" => "The body is shorter than its Content-Length header said.",
        "EntityTooLarge" => "The upload is larger than the largest size allowed.",
        "EntityTooSmall" => {
            "A part of the multipart upload other than the last is smaller than 5 MiB."
        }
        "InvalidPart" => {
            "A part named in the completion was not uploaded, or its ETag does not match."
        }
        "InvalidPartOrder" => "The parts of the completion are not in ascending order.",
        "InvalidDigest" => "The Content-MD5 header is not a valid base64 MD5 digest.",
        "BadDigest" => "The Content-MD5 header does not match the body received.",
        "XAmzContentSHA256Mismatch" => {
            "The x-amz-content-sha256 header does not match the body received."
        }
        "PreconditionFailed" => "A condition of the request (If-Match and the like) does not hold.",
        "InvalidRange" => "The requested range does not overlap the object.",
        "MethodNotAllowed" => "This method is not allowed on this resource.",
        "NotImplemented" => "This proxy does not implement this request or header.",
        "MetadataTooLarge" => "The object's user metadata is larger than 2 KiB.",
        "InvalidStorageClass" => "The storage class is not one this proxy accepts.",
        "RequestTimeout" => "The body did not arrive in time.",
        "SlowDown" | "ServiceUnavailable" => {
            "The proxy is busy or cannot reach its backend; retry later."
        }
        "InternalError" => "The proxy failed to serve the request; its log says why.",
        _ => return format!("The request was refused ({code})."),
    };
    m.to_string()
}

/// `text` (an S3 error document) with a `<Message>` after its `<Code>` when it
/// has none; `None` when it has one, or is not an error document.
pub(crate) fn with_message(text: &str) -> Option<String> {
    if text.contains("<Message>") || text.contains("<Message/>") {
        return None;
    }
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    let code = &text[start..end];
    let close = end + "</Code>".len();
    Some(format!(
        "{}<Message>{}</Message>{}",
        &text[..close],
        xml_escape(&default_message(code)),
        &text[close..]
    ))
}

/// The S3 error code of an error document.
pub(crate) fn code_of(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    Some(&text[start..end])
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_without_a_message_gets_one_after_its_code() {
        let doc = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InvalidBucketName</Code></Error>";
        let out = with_message(doc).unwrap();
        assert!(out.starts_with(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InvalidBucketName</Code><Message>The bucket name is not valid"
        ));
        assert!(out.ends_with("</Message></Error>"));
        assert_eq!(code_of(&out), Some("InvalidBucketName"));
    }

    #[test]
    fn a_message_already_there_is_kept_and_unknown_codes_are_named() {
        let doc = "<Error><Code>AccessDenied</Code><Message>mine</Message></Error>";
        assert_eq!(with_message(doc), None);
        assert_eq!(with_message("no error here"), None);
        let out = with_message("<Error><Code>OddCode</Code></Error>").unwrap();
        assert!(out.contains("<Message>The request was refused (OddCode).</Message>"));
    }
}
