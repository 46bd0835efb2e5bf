//! The one table from S3 operations (s3s's operation names) to policy action
//! names, as AWS's documentation maps them ("Actions, resources, and
//! condition keys for Amazon S3"), for the operations this proxy serves.
//! DeleteObjects is evaluated per key as `s3:DeleteObject` (or
//! `s3:DeleteObjectVersion`); CopyObject and UploadPartCopy also ask
//! `s3:GetObject` (or `s3:GetObjectVersion`) of their source.

/// What an action applies to, and who may be granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The bucket (`arn:aws:s3:::<bucket>`).
    Bucket,
    /// An object (`arn:aws:s3:::<bucket>/<key>`).
    Object,
    /// The bucket, and only its owner may ever do it: a policy can deny it to
    /// the owner but never grant it to anyone else (creating the bucket,
    /// managing its policy and public access block).
    OwnerOnly,
}

/// One row: the operation, its action, the action when the request names a
/// `versionId` (if different), and the scope.
type Row = (&'static str, &'static str, Option<&'static str>, Scope);

use Scope::{Bucket, Object, OwnerOnly};

/// Every operation served, with its action.
const TABLE: &[Row] = &[
    // Buckets.
    ("CreateBucket", "s3:CreateBucket", None, OwnerOnly),
    ("DeleteBucket", "s3:DeleteBucket", None, Bucket),
    ("HeadBucket", "s3:ListBucket", None, Bucket),
    ("GetBucketLocation", "s3:GetBucketLocation", None, Bucket),
    ("ListObjects", "s3:ListBucket", None, Bucket),
    ("ListObjectsV2", "s3:ListBucket", None, Bucket),
    ("ListObjectVersions", "s3:ListBucketVersions", None, Bucket),
    (
        "ListMultipartUploads",
        "s3:ListBucketMultipartUploads",
        None,
        Bucket,
    ),
    (
        "GetBucketVersioning",
        "s3:GetBucketVersioning",
        None,
        Bucket,
    ),
    (
        "PutBucketVersioning",
        "s3:PutBucketVersioning",
        None,
        Bucket,
    ),
    ("GetBucketTagging", "s3:GetBucketTagging", None, Bucket),
    ("PutBucketTagging", "s3:PutBucketTagging", None, Bucket),
    ("DeleteBucketTagging", "s3:PutBucketTagging", None, Bucket),
    (
        "GetBucketLifecycleConfiguration",
        "s3:GetLifecycleConfiguration",
        None,
        Bucket,
    ),
    (
        "PutBucketLifecycleConfiguration",
        "s3:PutLifecycleConfiguration",
        None,
        Bucket,
    ),
    (
        "DeleteBucketLifecycle",
        "s3:PutLifecycleConfiguration",
        None,
        Bucket,
    ),
    (
        "GetObjectLockConfiguration",
        "s3:GetBucketObjectLockConfiguration",
        None,
        Bucket,
    ),
    (
        "PutObjectLockConfiguration",
        "s3:PutBucketObjectLockConfiguration",
        None,
        Bucket,
    ),
    ("GetBucketAcl", "s3:GetBucketAcl", None, Bucket),
    ("PutBucketAcl", "s3:PutBucketAcl", None, Bucket),
    ("GetBucketPolicy", "s3:GetBucketPolicy", None, OwnerOnly),
    ("PutBucketPolicy", "s3:PutBucketPolicy", None, OwnerOnly),
    (
        "DeleteBucketPolicy",
        "s3:DeleteBucketPolicy",
        None,
        OwnerOnly,
    ),
    (
        "GetBucketPolicyStatus",
        "s3:GetBucketPolicyStatus",
        None,
        OwnerOnly,
    ),
    (
        "GetPublicAccessBlock",
        "s3:GetBucketPublicAccessBlock",
        None,
        OwnerOnly,
    ),
    (
        "PutPublicAccessBlock",
        "s3:PutBucketPublicAccessBlock",
        None,
        OwnerOnly,
    ),
    (
        "DeletePublicAccessBlock",
        "s3:PutBucketPublicAccessBlock",
        None,
        OwnerOnly,
    ),
    // Objects.
    (
        "GetObject",
        "s3:GetObject",
        Some("s3:GetObjectVersion"),
        Object,
    ),
    (
        "HeadObject",
        "s3:GetObject",
        Some("s3:GetObjectVersion"),
        Object,
    ),
    ("PutObject", "s3:PutObject", None, Object),
    ("CopyObject", "s3:PutObject", None, Object),
    (
        "DeleteObject",
        "s3:DeleteObject",
        Some("s3:DeleteObjectVersion"),
        Object,
    ),
    ("CreateMultipartUpload", "s3:PutObject", None, Object),
    ("UploadPart", "s3:PutObject", None, Object),
    ("UploadPartCopy", "s3:PutObject", None, Object),
    ("CompleteMultipartUpload", "s3:PutObject", None, Object),
    (
        "AbortMultipartUpload",
        "s3:AbortMultipartUpload",
        None,
        Object,
    ),
    ("ListParts", "s3:ListMultipartUploadParts", None, Object),
    (
        "GetObjectTagging",
        "s3:GetObjectTagging",
        Some("s3:GetObjectVersionTagging"),
        Object,
    ),
    (
        "PutObjectTagging",
        "s3:PutObjectTagging",
        Some("s3:PutObjectVersionTagging"),
        Object,
    ),
    (
        "DeleteObjectTagging",
        "s3:DeleteObjectTagging",
        Some("s3:DeleteObjectVersionTagging"),
        Object,
    ),
    (
        "GetObjectAcl",
        "s3:GetObjectAcl",
        Some("s3:GetObjectVersionAcl"),
        Object,
    ),
    (
        "PutObjectAcl",
        "s3:PutObjectAcl",
        Some("s3:PutObjectVersionAcl"),
        Object,
    ),
    ("GetObjectRetention", "s3:GetObjectRetention", None, Object),
    ("PutObjectRetention", "s3:PutObjectRetention", None, Object),
    ("GetObjectLegalHold", "s3:GetObjectLegalHold", None, Object),
    ("PutObjectLegalHold", "s3:PutObjectLegalHold", None, Object),
];

/// Actions asked besides an operation's own: the bypass of governance
/// retention (DeleteObject, DeleteObjects, PutObjectRetention with
/// `x-amz-bypass-governance-retention: true`), and listing all buckets.
pub(crate) const BYPASS_GOVERNANCE: &str = "s3:BypassGovernanceRetention";
const OTHER_ACTIONS: [&str; 2] = [BYPASS_GOVERNANCE, "s3:ListAllMyBuckets"];

/// The action of operation `op` (with `versioned`: the request names a
/// `versionId`) and its scope; `None` for an operation not in the table (not
/// served, or ListBuckets, which is about no bucket).
pub(crate) fn of(op: &str, versioned: bool) -> Option<(&'static str, Scope)> {
    TABLE.iter().find(|r| r.0 == op).map(|&(_, a, v, scope)| {
        let action = match v {
            Some(v) if versioned => v,
            _ => a,
        };
        (action, scope)
    })
}

/// Whether an action pattern (in lower case) matches some action this proxy
/// knows: `*`, or `s3:` and a pattern.
pub(crate) fn is_known_pattern(pattern: &str) -> bool {
    let known = TABLE
        .iter()
        .flat_map(|r| [Some(r.1), r.2])
        .flatten()
        .chain(OTHER_ACTIONS);
    pattern == "*"
        || (pattern.starts_with("s3:")
            && known
                .map(str::to_ascii_lowercase)
                .any(|a| super::eval::glob(pattern, &a)))
}
