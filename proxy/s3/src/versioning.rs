//! Versioning: Put/GetBucketVersioning, the version ids answers carry, and
//! opening an object by version.

use oram_objects::{ObjectRecord, OpenObject, Versioning};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::request::owner;
use crate::OramS3;

/// The `x-amz-version-id` of a record: its version id; none for the null
/// version (as AWS answers a PUT into a suspended bucket) and in a bucket never
/// versioned.
pub(crate) fn version_of(rec: &ObjectRecord) -> Option<String> {
    (!rec.version_id.is_empty()).then(|| rec.version_id.clone())
}

impl OramS3 {
    /// Opens `bucket/key` for reading: version `version` if named, else the
    /// current one.
    pub(crate) fn open(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> S3Result<OpenObject> {
        match version {
            Some(v) => self.layer.open_object_version(owner, bucket, key, v),
            None => self.layer.open_object(owner, bucket, key),
        }
        .map_err(|e| self.map_err(e))
    }
}

pub(crate) async fn put_bucket_versioning(
    s3: &OramS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let conf = input.versioning_configuration;
    if conf
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let state = match conf.status.as_ref().map(|s| s.as_str()) {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            ))
        }
    };
    s3.layer
        .set_bucket_versioning(&owner, &input.bucket, state)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

pub(crate) async fn get_bucket_versioning(
    s3: &OramS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let owner = owner(&req)?;
    let b = s3
        .layer
        .head_bucket(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    // Never versioned: no Status element at all.
    let status = match b.versioning {
        Versioning::Off => None,
        Versioning::Enabled => Some(BucketVersioningStatus::ENABLED),
        Versioning::Suspended => Some(BucketVersioningStatus::SUSPENDED),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: status.map(BucketVersioningStatus::from_static),
        ..Default::default()
    }))
}
