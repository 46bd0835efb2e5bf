//! Bucket operations: ListBuckets, CreateBucket, DeleteBucket, HeadBucket,
//! and GetBucketLocation.
//!
//! ListBuckets and HeadBucket also carry the volume's fullness, in bytes of
//! object data, in two headers of their own ([`CAPACITY_HEADER`],
//! [`FREE_HEADER`]), from the object layer's usage figures.

use oram_objects::ObjectError;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::acl::check_canned;
use crate::convert::{decode_token, encode_token, owner_element, timestamp};
use crate::request::owner;
use crate::OramS3;

/// The volume's capacity in bytes of object data, on ListBuckets and HeadBucket.
pub const CAPACITY_HEADER: &str = "x-oram-volume-capacity-bytes";
/// The volume's free space in bytes of object data, on ListBuckets and HeadBucket.
pub const FREE_HEADER: &str = "x-oram-volume-free-bytes";

/// `output` as an answer with the volume's fullness headers.
fn with_fullness<T>(s3: &OramS3, output: T) -> S3Response<T> {
    let usage = s3.layer.usage();
    let mut resp = S3Response::new(output);
    resp.headers
        .insert(CAPACITY_HEADER, usage.capacity_bytes().into());
    resp.headers.insert(FREE_HEADER, usage.free_bytes().into());
    resp
}

pub(crate) async fn list_buckets(
    s3: &OramS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let max = match input.max_buckets {
        None => usize::MAX,
        Some(n) if (1..=10_000).contains(&n) => n as usize,
        Some(_) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-buckets must be between 1 and 10000"
            ))
        }
    };
    let after = input
        .continuation_token
        .as_deref()
        .map(decode_token)
        .transpose()?;
    let prefix = input.prefix.clone().unwrap_or_default();
    // Swift containers whose names S3 cannot address are not listed.
    let all: Vec<_> = s3
        .layer
        .list_buckets(&owner)
        .map_err(|e| s3.map_err(e))?
        .into_iter()
        .filter(|b| oram_objects::valid_bucket_name(&b.name))
        .filter(|b| b.name.starts_with(&prefix))
        .filter(|b| after.as_ref().is_none_or(|a| b.name > *a))
        .collect();
    let truncated = all.len() > max;
    let page = &all[..all.len().min(max)];
    Ok(with_fullness(
        s3,
        ListBucketsOutput {
            buckets: Some(
                page.iter()
                    .map(|b| Bucket {
                        name: Some(b.name.clone()),
                        creation_date: Some(timestamp(b.created_ms)),
                        bucket_region: Some(s3.region.clone()),
                    })
                    .collect(),
            ),
            owner: Some(owner_element(&owner)),
            continuation_token: page
                .last()
                .filter(|_| truncated)
                .map(|b| encode_token(&b.name)),
            prefix: input.prefix,
        },
    ))
}

pub(crate) async fn create_bucket(
    s3: &OramS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
    let created = if input.object_lock_enabled_for_bucket == Some(true) {
        s3.layer
            .create_bucket_with_lock(&owner, &input.bucket)
            .await
    } else {
        s3.layer.create_bucket(&owner, &input.bucket).await
    };
    match created {
        Ok(_) => {}
        // us-east-1 answers 200 to re-creating your own bucket (and changes
        // nothing); every other region answers BucketAlreadyOwnedByYou.
        Err(ObjectError::BucketAlreadyOwnedByYou(_)) if s3.region == "us-east-1" => {}
        Err(e) => return Err(s3.map_err(e)),
    }
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{}", input.bucket)),
    }))
}

pub(crate) async fn delete_bucket(
    s3: &OramS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .delete_bucket(&owner, &req.input.bucket)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}

pub(crate) async fn head_bucket(
    s3: &OramS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .head_bucket(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    Ok(with_fullness(
        s3,
        HeadBucketOutput {
            bucket_region: Some(s3.region.clone()),
            ..Default::default()
        },
    ))
}

pub(crate) async fn get_bucket_location(
    s3: &OramS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .head_bucket(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    // The region by name, us-east-1 too (AWS sends an empty constraint for
    // us-east-1, which several clients read as "no region").
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint: Some(BucketLocationConstraint::from(s3.region.clone())),
    }))
}
