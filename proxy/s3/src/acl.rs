//! ACLs: every bucket and object is its owner's alone (S3's default since 2023,
//! buckets with "bucket owner enforced" object ownership). A canned ACL or grant
//! that says just that is accepted; anything wider is refused as S3 refuses it
//! for such buckets (400 AccessControlListNotSupported). There is no anonymous
//! access through S3; other accounts reach a bucket only through its bucket
//! policy (`crate::access`), never through an ACL.
//!
//! GetBucketAcl and GetObjectAcl answer the owner's full control; PutBucketAcl
//! and PutObjectAcl accept only that and change nothing. An upload (PutObject)
//! asks for an ACL the same way ([`SetsAcl`]); CreateBucket, CopyObject and
//! CreateMultipartUpload take only a canned ACL ([`check_canned`]). A bucket
//! whose public access block blocks public ACLs refuses a public one first
//! (403, [`crate::publicaccess`]).

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::convert::owner_element;
use crate::request::owner;
use crate::OramS3;

/// What an ACL operation is about: a bucket, or an object in one. It must exist
/// and be the caller's.
enum Target<'a> {
    Bucket(&'a str),
    Object { bucket: &'a str, key: &'a str },
}

/// The ACL a request asks for, in its three forms: a canned ACL, `x-amz-grant-*`
/// headers, and an access control policy in the body.
pub(crate) struct Requested<'a> {
    canned: Option<&'a str>,
    full_control: Option<&'a str>,
    /// The other grant headers the request sets (read, read-acp, write, write-acp).
    other_grants: Vec<&'a str>,
    policy: Option<&'a AccessControlPolicy>,
}

impl Requested<'_> {
    /// Whether it asks for a public ACL (see [`crate::publicaccess`]).
    pub(crate) fn is_public(&self) -> bool {
        let mut grants: Vec<Option<&str>> = vec![self.full_control];
        grants.extend(self.other_grants.iter().map(|g| Some(*g)));
        let policy_public = self.policy.is_some_and(|p| {
            p.grants.as_deref().unwrap_or_default().iter().any(|g| {
                g.grantee
                    .as_ref()
                    .and_then(|ge| ge.uri.as_deref())
                    .is_some_and(|u| crate::publicaccess::is_public(None, &[Some(u)]))
            })
        });
        policy_public || crate::publicaccess::is_public(self.canned, &grants)
    }

    /// Accepts only the owner's full control: the canned ACL, then the grant
    /// headers, then the policy.
    fn check(&self, owner: &str) -> S3Result<()> {
        check_canned(self.canned)?;
        check_grant_headers(owner, self.full_control, &self.other_grants)?;
        if let Some(p) = self.policy {
            check_policy(owner, p)?;
        }
        Ok(())
    }
}

/// An input that asks for an ACL (the same fields in three s3s types).
pub(crate) trait SetsAcl {
    /// The ACL it asks for.
    fn requested(&self) -> Requested<'_>;

    /// Checks that it asks for no more than `owner`'s full control.
    fn check_acl(&self, owner: &str) -> S3Result<()> {
        self.requested().check(owner)
    }
}

/// PutBucketAcl and PutObjectAcl ask in all three forms, with the same fields.
macro_rules! sets_acl {
    ($($input:ty),*) => {$(
        impl SetsAcl for $input {
            fn requested(&self) -> Requested<'_> {
                Requested {
                    canned: self.acl.as_ref().map(|a| a.as_str()),
                    full_control: self.grant_full_control.as_deref(),
                    other_grants: [
                        &self.grant_read,
                        &self.grant_read_acp,
                        &self.grant_write,
                        &self.grant_write_acp,
                    ]
                    .into_iter()
                    .flatten()
                    .map(String::as_str)
                    .collect(),
                    policy: self.access_control_policy.as_ref(),
                }
            }
        }
    )*};
}

sets_acl!(PutBucketAclInput, PutObjectAclInput);

/// PutObject has no `x-amz-grant-write` and no policy.
impl SetsAcl for PutObjectInput {
    fn requested(&self) -> Requested<'_> {
        Requested {
            canned: self.acl.as_ref().map(|a| a.as_str()),
            full_control: self.grant_full_control.as_deref(),
            other_grants: [
                &self.grant_read,
                &self.grant_read_acp,
                &self.grant_write_acp,
            ]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect(),
            policy: None,
        }
    }
}

impl OramS3 {
    /// The caller of `req`, who must own `target`.
    fn owner_of<T>(&self, req: &S3Request<T>, target: Target<'_>) -> S3Result<String> {
        let owner = owner(req)?;
        match target {
            Target::Bucket(bucket) => self.layer.head_bucket(&owner, bucket).map(drop),
            Target::Object { bucket, key } => self.layer.head_object(&owner, bucket, key).map(drop),
        }
        .map_err(|e| self.map_err(e))?;
        Ok(owner)
    }

    /// The ACL of `target`: its owner's full control.
    fn get_acl<T>(&self, req: &S3Request<T>, target: Target<'_>) -> S3Result<(Owner, Vec<Grant>)> {
        let owner = self.owner_of(req, target)?;
        Ok(owner_acl(&owner))
    }

    /// Checks a request to set the ACL of `target`; there is nothing to change.
    fn put_acl<I: SetsAcl>(&self, req: &S3Request<I>, target: Target<'_>) -> S3Result<()> {
        let bucket = match target {
            Target::Bucket(b) | Target::Object { bucket: b, .. } => b,
        };
        let owner = self.owner_of(req, target)?;
        self.check_public_acl(&owner, bucket, req.input.requested().is_public())?;
        req.input.check_acl(&owner)
    }
}

pub(crate) async fn get_bucket_acl(
    s3: &OramS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let (owner, grants) = s3.get_acl(&req, Target::Bucket(&req.input.bucket))?;
    Ok(S3Response::new(GetBucketAclOutput {
        owner: Some(owner),
        grants: Some(grants),
    }))
}

pub(crate) async fn put_bucket_acl(
    s3: &OramS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    s3.put_acl(&req, Target::Bucket(&req.input.bucket))?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

pub(crate) async fn get_object_acl(
    s3: &OramS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let target = Target::Object {
        bucket: &req.input.bucket,
        key: &req.input.key,
    };
    let (owner, grants) = s3.get_acl(&req, target)?;
    Ok(S3Response::new(GetObjectAclOutput {
        owner: Some(owner),
        grants: Some(grants),
        ..Default::default()
    }))
}

pub(crate) async fn put_object_acl(
    s3: &OramS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let target = Target::Object {
        bucket: &req.input.bucket,
        key: &req.input.key,
    };
    s3.put_acl(&req, target)?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

/// The ACL every bucket and object has: its owner with FULL_CONTROL.
fn owner_acl(owner: &str) -> (Owner, Vec<Grant>) {
    let grant = Grant {
        grantee: Some(Grantee {
            display_name: Some(owner.to_string()),
            email_address: None,
            id: Some(owner.to_string()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    };
    (owner_element(owner), vec![grant])
}

/// A canned ACL: only those that leave the owner alone with full control.
pub(crate) fn check_canned(acl: Option<&str>) -> S3Result<()> {
    match acl {
        None | Some("private" | "bucket-owner-full-control" | "bucket-owner-read") => Ok(()),
        Some(other) => Err(acl_not_supported(&format!("the canned ACL {other:?}"))),
    }
}

/// The error S3 answers for an ACL on a bucket that does not allow ACLs.
fn acl_not_supported(what: &str) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("AccessControlListNotSupported".into()),
        format!("The bucket does not allow ACLs: {what} would grant access beyond the owner's; only the owner's full control (canned ACL private) is supported."),
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

/// `x-amz-grant-*` headers: only `x-amz-grant-full-control: id="<owner>"`.
fn check_grant_headers(
    owner: &str,
    full_control: Option<&str>,
    other_grants: &[&str],
) -> S3Result<()> {
    if !other_grants.is_empty() {
        return Err(acl_not_supported(
            "a grant other than the owner's full control",
        ));
    }
    if let Some(g) = full_control {
        let only_owner = g.split(',').all(|e| {
            let e = e.trim();
            e.strip_prefix("id=")
                .is_some_and(|id| id.trim().trim_matches('"') == owner)
        });
        if !only_owner {
            return Err(acl_not_supported("a full-control grant to someone else"));
        }
    }
    Ok(())
}

/// An access control policy sent as XML: only the owner's full control.
fn check_policy(owner: &str, p: &AccessControlPolicy) -> S3Result<()> {
    let ok = p.grants.as_deref().unwrap_or_default().iter().all(|g| {
        g.permission
            .as_ref()
            .is_some_and(|p| p.as_str() == Permission::FULL_CONTROL)
            && g.grantee
                .as_ref()
                .is_some_and(|ge| ge.id.as_deref() == Some(owner) && ge.uri.is_none())
    });
    if ok {
        Ok(())
    } else {
        Err(acl_not_supported("the access control policy"))
    }
}
