//! Names the operation of a client request from its method, path, query and a few
//! headers — for the per-operation metrics and the dashboard's client-side view.
//! Both classifiers return names from a fixed set, so the metrics' label sets stay
//! bounded whatever clients send.

use http::{HeaderMap, Method};

/// What a request is: its operation and, for object operations, the object's path
/// (`bucket/key` or `container/object`, still percent-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// Operation name (S3 API names; Swift: the same style).
    pub op: &'static str,
    /// The object addressed, for object reads and writes.
    pub object: Option<String>,
    /// Whether the operation reads object data (for the dashboard).
    pub read: bool,
}

fn query_names(query: Option<&str>) -> Vec<&str> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k))
        .collect()
}

fn has(names: &[&str], n: &str) -> bool {
    names.contains(&n)
}

fn query_value<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|p| {
        p.split_once('=')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })
}

/// Bucket sub-resources that configure rather than list.
const BUCKET_CONFIG: &[&str] = &[
    "acl",
    "policy",
    "cors",
    "lifecycle",
    "tagging",
    "versioning",
    "encryption",
    "logging",
    "notification",
    "replication",
    "website",
    "ownershipControls",
    "publicAccessBlock",
    "object-lock",
    "accelerate",
    "requestPayment",
    "policyStatus",
    "intelligent-tiering",
    "inventory",
    "analytics",
    "metrics",
];

/// The path of an S3 request as path-style: a request for host
/// `<bucket>.<domain>` (virtual-hosted–style addressing under the configured
/// `domain`; empty: none) gets `/<bucket>` before its path.
pub fn s3_path_style<'a>(
    path: &'a str,
    headers: &HeaderMap,
    domain: &str,
) -> std::borrow::Cow<'a, str> {
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok());
    match host.and_then(|h| oram_s3::virtual_host_bucket(h, domain)) {
        Some(bucket) => format!("/{bucket}{path}").into(),
        None => path.into(),
    }
}

/// Classifies a path-style S3 request (see [`s3_path_style`]).
pub fn s3(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> Classified {
    let q = query_names(query);
    let trimmed = path.trim_start_matches('/');
    let (bucket, key) = match trimmed.split_once('/') {
        Some((b, k)) => (b, k),
        None => (trimmed, ""),
    };
    let plain = |op| Classified {
        op,
        object: None,
        read: false,
    };
    if bucket.is_empty() {
        return plain(match *method {
            Method::GET => "ListBuckets",
            _ => "Other",
        });
    }
    if key.is_empty() {
        let config = BUCKET_CONFIG.iter().any(|c| has(&q, c));
        return plain(match *method {
            Method::GET if has(&q, "uploads") => "ListMultipartUploads",
            Method::GET if has(&q, "versions") => "ListObjectVersions",
            Method::GET if has(&q, "location") => "GetBucketLocation",
            Method::GET if config => "GetBucketConfig",
            Method::GET if query_value(query, "list-type") == Some("2") => "ListObjectsV2",
            Method::GET => "ListObjects",
            Method::HEAD => "HeadBucket",
            Method::PUT if config => "PutBucketConfig",
            Method::PUT => "CreateBucket",
            Method::DELETE if config => "DeleteBucketConfig",
            Method::DELETE => "DeleteBucket",
            Method::POST if has(&q, "delete") => "DeleteObjects",
            _ => "Other",
        });
    }
    let copy = headers.contains_key("x-amz-copy-source");
    let object = Some(format!("{bucket}/{key}"));
    let sub = has(&q, "acl") || has(&q, "tagging") || has(&q, "retention");
    let (op, data) = match *method {
        Method::GET if has(&q, "uploadId") => ("ListParts", false),
        Method::GET if sub => ("GetObjectConfig", false),
        Method::GET => ("GetObject", true),
        Method::HEAD => ("HeadObject", false),
        Method::PUT if has(&q, "uploadId") && copy => ("UploadPartCopy", true),
        Method::PUT if has(&q, "uploadId") => ("UploadPart", true),
        Method::PUT if sub => ("PutObjectConfig", false),
        Method::PUT if copy => ("CopyObject", true),
        Method::PUT => ("PutObject", true),
        Method::POST if has(&q, "uploads") => ("CreateMultipartUpload", false),
        Method::POST if has(&q, "uploadId") => ("CompleteMultipartUpload", true),
        Method::DELETE if has(&q, "uploadId") => ("AbortMultipartUpload", false),
        Method::DELETE => ("DeleteObject", true),
        _ => ("Other", false),
    };
    Classified {
        op,
        object: data.then_some(object).flatten(),
        read: op == "GetObject",
    }
}

/// Classifies a Swift request (`/auth/v1.0`, `/info`, `/v1/<account>/...`).
pub fn swift(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> Classified {
    let plain = |op| Classified {
        op,
        object: None,
        read: false,
    };
    match path {
        "/info" => return plain("Info"),
        "/healthcheck" => return plain("Healthcheck"),
        "/auth/v1.0" | "/auth/v1.0/" | "/auth/v1" | "/auth/v1/" | "/v1.0" | "/v1.0/" => {
            return plain("Auth")
        }
        _ => {}
    }
    let Some(rest) = path.strip_prefix("/v1/") else {
        return plain("Other");
    };
    let q = query_names(query);
    let mut segs = rest.splitn(3, '/');
    let _account = segs.next().unwrap_or("");
    let container = segs.next().unwrap_or("");
    let object = segs.next().unwrap_or("");
    if has(&q, "bulk-delete") {
        return plain("BulkDelete");
    }
    if container.is_empty() {
        return plain(match *method {
            Method::GET => "GetAccount",
            Method::HEAD => "HeadAccount",
            Method::POST => "PostAccount",
            _ => "Other",
        });
    }
    if object.is_empty() {
        return plain(match *method {
            Method::GET => "GetContainer",
            Method::HEAD => "HeadContainer",
            Method::PUT => "PutContainer",
            Method::POST => "PostContainer",
            Method::DELETE => "DeleteContainer",
            _ => "Other",
        });
    }
    let copy_from = headers.contains_key("x-copy-from");
    let (op, data) = match method.as_str() {
        "GET" => ("GetObject", true),
        "HEAD" => ("HeadObject", false),
        "PUT" if copy_from => ("CopyObject", true),
        "PUT" => ("PutObject", true),
        "COPY" => ("CopyObject", true),
        "POST" => ("PostObject", false),
        "DELETE" => ("DeleteObject", true),
        _ => ("Other", false),
    };
    Classified {
        op,
        object: data.then(|| format!("{container}/{object}")),
        read: op == "GetObject",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3op(m: &str, p: &str, q: Option<&str>, copy: bool) -> &'static str {
        let mut h = HeaderMap::new();
        if copy {
            h.insert("x-amz-copy-source", "b/k".parse().unwrap());
        }
        s3(&m.parse().unwrap(), p, q, &h).op
    }

    #[test]
    fn virtual_hosted_requests_are_classified_by_their_bucket() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::HOST,
            "bkt.s3.example.test:8480".parse().unwrap(),
        );
        let path = s3_path_style("/dir/key", &h, "s3.example.test");
        assert_eq!(path, "/bkt/dir/key");
        let c = s3(&Method::GET, &path, None, &h);
        assert_eq!(
            (c.op, c.object.as_deref()),
            ("GetObject", Some("bkt/dir/key"))
        );
        assert_eq!(s3_path_style("/", &h, "s3.example.test"), "/bkt/");
        // No domain, or another host: the path as it is.
        assert_eq!(s3_path_style("/dir/key", &h, ""), "/dir/key");
        h.insert(http::header::HOST, "127.0.0.1:8480".parse().unwrap());
        assert_eq!(s3_path_style("/b/k", &h, "s3.example.test"), "/b/k");
    }

    #[test]
    fn s3_operations() {
        assert_eq!(s3op("GET", "/", None, false), "ListBuckets");
        assert_eq!(s3op("PUT", "/b", None, false), "CreateBucket");
        assert_eq!(s3op("PUT", "/b/", None, false), "CreateBucket");
        assert_eq!(s3op("HEAD", "/b", None, false), "HeadBucket");
        assert_eq!(s3op("DELETE", "/b", None, false), "DeleteBucket");
        assert_eq!(s3op("GET", "/b", None, false), "ListObjects");
        assert_eq!(
            s3op("GET", "/b", Some("list-type=2&prefix=x"), false),
            "ListObjectsV2"
        );
        assert_eq!(
            s3op("GET", "/b", Some("versions"), false),
            "ListObjectVersions"
        );
        assert_eq!(
            s3op("GET", "/b", Some("uploads"), false),
            "ListMultipartUploads"
        );
        assert_eq!(
            s3op("GET", "/b", Some("location="), false),
            "GetBucketLocation"
        );
        assert_eq!(
            s3op("GET", "/b", Some("versioning"), false),
            "GetBucketConfig"
        );
        assert_eq!(s3op("POST", "/b", Some("delete"), false), "DeleteObjects");
        assert_eq!(s3op("GET", "/b/k/x", None, false), "GetObject");
        assert_eq!(s3op("HEAD", "/b/k", None, false), "HeadObject");
        assert_eq!(s3op("PUT", "/b/k", None, false), "PutObject");
        assert_eq!(s3op("PUT", "/b/k", None, true), "CopyObject");
        assert_eq!(s3op("DELETE", "/b/k", None, false), "DeleteObject");
        assert_eq!(
            s3op("POST", "/b/k", Some("uploads"), false),
            "CreateMultipartUpload"
        );
        assert_eq!(
            s3op("PUT", "/b/k", Some("partNumber=1&uploadId=x"), false),
            "UploadPart"
        );
        assert_eq!(
            s3op("PUT", "/b/k", Some("partNumber=1&uploadId=x"), true),
            "UploadPartCopy"
        );
        assert_eq!(
            s3op("POST", "/b/k", Some("uploadId=x"), false),
            "CompleteMultipartUpload"
        );
        assert_eq!(
            s3op("DELETE", "/b/k", Some("uploadId=x"), false),
            "AbortMultipartUpload"
        );
        assert_eq!(s3op("GET", "/b/k", Some("uploadId=x"), false), "ListParts");
        assert_eq!(
            s3op("GET", "/b/k", Some("tagging"), false),
            "GetObjectConfig"
        );
        assert_eq!(s3op("PATCH", "/b/k", None, false), "Other");
        let c = s3(&Method::GET, "/b/dir/k", None, &HeaderMap::new());
        assert_eq!(c.object.as_deref(), Some("b/dir/k"));
        assert!(c.read);
        let c = s3(&Method::HEAD, "/b/k", None, &HeaderMap::new());
        assert_eq!(c.object, None);
    }

    #[test]
    fn swift_operations() {
        let op = |m: &str, p: &str, q: Option<&str>| {
            swift(&m.parse().unwrap(), p, q, &HeaderMap::new()).op
        };
        assert_eq!(op("GET", "/auth/v1.0", None), "Auth");
        assert_eq!(op("GET", "/info", None), "Info");
        assert_eq!(op("GET", "/v1/AUTH_a", None), "GetAccount");
        assert_eq!(op("HEAD", "/v1/AUTH_a/", None), "HeadAccount");
        assert_eq!(op("PUT", "/v1/AUTH_a/c", None), "PutContainer");
        assert_eq!(op("GET", "/v1/AUTH_a/c/", None), "GetContainer");
        assert_eq!(op("DELETE", "/v1/AUTH_a/c", None), "DeleteContainer");
        assert_eq!(op("GET", "/v1/AUTH_a/c/o/p", None), "GetObject");
        assert_eq!(op("PUT", "/v1/AUTH_a/c/o", None), "PutObject");
        assert_eq!(op("COPY", "/v1/AUTH_a/c/o", None), "CopyObject");
        assert_eq!(op("POST", "/v1/AUTH_a", Some("bulk-delete")), "BulkDelete");
        assert_eq!(op("GET", "/elsewhere", None), "Other");
        let mut h = HeaderMap::new();
        h.insert("x-copy-from", "c/o".parse().unwrap());
        assert_eq!(
            swift(&Method::PUT, "/v1/AUTH_a/c/o2", None, &h).op,
            "CopyObject"
        );
        let c = swift(&Method::GET, "/v1/AUTH_a/c/o/p", None, &HeaderMap::new());
        assert_eq!(c.object.as_deref(), Some("c/o/p"));
    }
}
