//! Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus: a bucket's policy,
//! checked ([`crate::policy::Policy::parse`]) and kept as sent in the
//! bucket's record in the trusted index (never sent to the backend). Only
//! the bucket's owner may use them (`crate::access` never grants them to
//! anyone else, and never denies them to the owner). With `BlockPublicPolicy`
//! in the bucket's public access block, a public policy is `403
//! AccessDenied`.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::policy::Policy;
use crate::request::owner;
use crate::OramS3;

/// `400 MalformedPolicy` with `message`.
pub(crate) fn malformed(message: &str) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("MalformedPolicy".into()),
        message.to_string(),
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

fn no_policy() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("NoSuchBucketPolicy".into()),
        "The bucket policy does not exist",
    );
    e.set_status_code(http::StatusCode::NOT_FOUND);
    e
}

pub(crate) async fn put_bucket_policy(
    s3: &OramS3,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let b = s3
        .layer
        .head_bucket(&owner, &input.bucket)
        .map_err(|e| s3.map_err(e))?;
    let policy = Policy::parse(&input.policy, &input.bucket).map_err(|m| malformed(&m))?;
    let block = b.public_access_block.is_some_and(|p| p.block_public_policy);
    if block && policy.is_public() {
        return Err(s3_error!(
            AccessDenied,
            "Access Denied: the bucket's public access block blocks public policies"
        ));
    }
    s3.layer
        .set_bucket_policy(&owner, &input.bucket, Some(input.policy))
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

/// The stored policy of the caller's bucket `bucket`.
fn stored<T>(s3: &OramS3, req: &S3Request<T>, bucket: &str) -> S3Result<String> {
    let owner = owner(req)?;
    let b = s3
        .layer
        .head_bucket(&owner, bucket)
        .map_err(|e| s3.map_err(e))?;
    b.policy.ok_or_else(no_policy)
}

pub(crate) async fn get_bucket_policy(
    s3: &OramS3,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let policy = stored(s3, &req, &req.input.bucket)?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy),
    }))
}

pub(crate) async fn get_bucket_policy_status(
    s3: &OramS3,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let doc = stored(s3, &req, &req.input.bucket)?;
    // A stored policy that no longer parses grants nothing: not public.
    let public = Policy::parse(&doc, &req.input.bucket).is_ok_and(|p| p.is_public());
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(public),
        }),
    }))
}

pub(crate) async fn delete_bucket_policy(
    s3: &OramS3,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .set_bucket_policy(&owner, &req.input.bucket, None)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
}
