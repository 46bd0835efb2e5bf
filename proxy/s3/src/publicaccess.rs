//! Public access block: Put/Get/DeletePublicAccessBlock of a bucket, and the
//! check that honours `BlockPublicAcls` — a request setting a public ACL (a
//! canned `public-read`, `public-read-write` or `authenticated-read`, or a
//! grant to the AllUsers or AuthenticatedUsers groups) on a bucket that
//! blocks them is `403 AccessDenied`, as AWS answers, before the ACL checks
//! of [`crate::acl`]. `BlockPublicPolicy` refuses a public bucket policy
//! (`crate::bucketpolicy`), `RestrictPublicBuckets` keeps a public policy from
//! granting anything to other accounts (`crate::access`); `IgnorePublicAcls`
//! is stored and answered, with nothing to do, since no public ACL is ever
//! accepted.

use oram_objects::PublicAccessBlock;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::request::owner;
use crate::OramS3;

/// The canned ACLs S3 counts as public.
const PUBLIC_CANNED: [&str; 3] = ["public-read", "public-read-write", "authenticated-read"];

/// The grantee groups S3 counts as public.
const PUBLIC_GROUPS: [&str; 2] = [
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
];

/// Whether a request's ACL, as a canned ACL and its grant headers, is public.
pub(crate) fn is_public(canned: Option<&str>, grants: &[Option<&str>]) -> bool {
    canned.is_some_and(|c| PUBLIC_CANNED.contains(&c))
        || grants
            .iter()
            .flatten()
            .any(|g| PUBLIC_GROUPS.iter().any(|u| g.contains(u)))
}

impl OramS3 {
    /// Refuses (`403 AccessDenied`) a public ACL asked of `owner`'s bucket
    /// `bucket` while its public access block blocks public ACLs. A missing
    /// bucket is left to the operation to report.
    pub(crate) fn check_public_acl(&self, owner: &str, bucket: &str, public: bool) -> S3Result<()> {
        if !public {
            return Ok(());
        }
        let blocked = self
            .layer
            .head_bucket(owner, bucket)
            .ok()
            .and_then(|b| b.public_access_block)
            .is_some_and(|p| p.block_public_acls);
        if blocked {
            return Err(s3_error!(AccessDenied, "Access Denied"));
        }
        Ok(())
    }
}

fn setting(s: Option<bool>) -> bool {
    s.unwrap_or(false)
}

pub(crate) async fn put_public_access_block(
    s3: &OramS3,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let c = input.public_access_block_configuration;
    let block = PublicAccessBlock {
        block_public_acls: setting(c.block_public_acls),
        ignore_public_acls: setting(c.ignore_public_acls),
        block_public_policy: setting(c.block_public_policy),
        restrict_public_buckets: setting(c.restrict_public_buckets),
    };
    s3.layer
        .set_public_access_block(&owner, &input.bucket, Some(block))
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
}

pub(crate) async fn get_public_access_block(
    s3: &OramS3,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let owner = owner(&req)?;
    let b = s3
        .layer
        .head_bucket(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    let Some(p) = b.public_access_block else {
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
            "The public access block configuration was not found",
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    };
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(p.block_public_acls),
            ignore_public_acls: Some(p.ignore_public_acls),
            block_public_policy: Some(p.block_public_policy),
            restrict_public_buckets: Some(p.restrict_public_buckets),
        }),
    }))
}

pub(crate) async fn delete_public_access_block(
    s3: &OramS3,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .set_public_access_block(&owner, &req.input.bucket, None)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_acls_are_recognised() {
        assert!(is_public(Some("public-read"), &[]));
        assert!(is_public(Some("authenticated-read"), &[]));
        assert!(!is_public(Some("private"), &[None]));
        assert!(is_public(
            None,
            &[Some(
                "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\""
            )]
        ));
        assert!(!is_public(None, &[Some("id=\"alice\"")]));
    }
}
