//! Bucket lifecycle: PutBucketLifecycleConfiguration,
//! GetBucketLifecycleConfiguration and DeleteBucketLifecycle.
//!
//! The object layer applies one action, `AbortIncompleteMultipartUpload`, to
//! the keys of a prefix. A configuration with anything else it cannot apply
//! (`Expiration`, `Transition`, `NoncurrentVersionExpiration`,
//! `NoncurrentVersionTransition`, a `Tag` or object-size filter) is refused as a
//! whole with `NotImplemented` and a message naming the element, never stored
//! in part.

use oram_objects::LifecycleRule as Rule;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

use crate::request::owner;
use crate::OramS3;

fn unsupported(element: &str) -> S3Error {
    s3_error!(
        NotImplemented,
        "lifecycle element {element} is not supported: this proxy applies only \
         AbortIncompleteMultipartUpload rules, filtered by key prefix"
    )
}

/// The key prefix a rule's filter (or its legacy top-level `Prefix`) selects.
fn rule_prefix(r: &LifecycleRule) -> S3Result<String> {
    let Some(f) = &r.filter else {
        return Ok(r.prefix.clone().unwrap_or_default());
    };
    if r.prefix.is_some() {
        return Err(s3_error!(
            MalformedXML,
            "a rule has either Filter or Prefix, not both"
        ));
    }
    if f.tag.is_some() {
        return Err(unsupported("Filter/Tag"));
    }
    if f.object_size_greater_than.is_some() {
        return Err(unsupported("Filter/ObjectSizeGreaterThan"));
    }
    if f.object_size_less_than.is_some() {
        return Err(unsupported("Filter/ObjectSizeLessThan"));
    }
    let Some(and) = &f.and else {
        return Ok(f.prefix.clone().unwrap_or_default());
    };
    if f.prefix.is_some() {
        return Err(s3_error!(
            MalformedXML,
            "a Filter has either And or Prefix, not both"
        ));
    }
    if and.tags.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(unsupported("Filter/And/Tag"));
    }
    if and.object_size_greater_than.is_some() {
        return Err(unsupported("Filter/And/ObjectSizeGreaterThan"));
    }
    if and.object_size_less_than.is_some() {
        return Err(unsupported("Filter/And/ObjectSizeLessThan"));
    }
    Ok(and.prefix.clone().unwrap_or_default())
}

/// One S3 rule as the object layer stores it, or why it cannot be.
fn to_rule(r: &LifecycleRule) -> S3Result<Rule> {
    if r.expiration.is_some() {
        return Err(unsupported("Expiration"));
    }
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(unsupported("Transition"));
    }
    if r.noncurrent_version_expiration.is_some() {
        return Err(unsupported("NoncurrentVersionExpiration"));
    }
    if r.noncurrent_version_transitions
        .as_ref()
        .is_some_and(|t| !t.is_empty())
    {
        return Err(unsupported("NoncurrentVersionTransition"));
    }
    let enabled = match r.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        s => {
            return Err(s3_error!(
                MalformedXML,
                "Status is Enabled or Disabled, not {s:?}"
            ))
        }
    };
    let Some(abort) = &r.abort_incomplete_multipart_upload else {
        return Err(s3_error!(
            InvalidArgument,
            "At least one action needs to be specified in a rule"
        ));
    };
    let days = match abort.days_after_initiation {
        Some(d) if d > 0 => d as u32,
        _ => {
            return Err(s3_error!(
                InvalidArgument,
                "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer"
            ))
        }
    };
    Ok(Rule {
        id: r.id.clone().unwrap_or_default(),
        enabled,
        prefix: rule_prefix(r)?,
        abort_incomplete_days: days,
    })
}

fn from_rule(r: Rule) -> LifecycleRule {
    LifecycleRule {
        abort_incomplete_multipart_upload: Some(AbortIncompleteMultipartUpload {
            days_after_initiation: Some(r.abort_incomplete_days as i32),
        }),
        expiration: None,
        filter: Some(LifecycleRuleFilter {
            prefix: Some(r.prefix),
            ..Default::default()
        }),
        id: (!r.id.is_empty()).then_some(r.id),
        noncurrent_version_expiration: None,
        noncurrent_version_transitions: None,
        prefix: None,
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        transitions: None,
    }
}

pub(crate) async fn put_bucket_lifecycle_configuration(
    s3: &OramS3,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let Some(conf) = input.lifecycle_configuration else {
        return Err(s3_error!(
            MalformedXML,
            "the request has no LifecycleConfiguration"
        ));
    };
    if conf.rules.is_empty() {
        return Err(s3_error!(
            MalformedXML,
            "a LifecycleConfiguration has at least one Rule"
        ));
    }
    let rules = conf.rules.iter().map(to_rule).collect::<S3Result<_>>()?;
    s3.layer
        .set_bucket_lifecycle(&owner, &input.bucket, rules)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

pub(crate) async fn get_bucket_lifecycle_configuration(
    s3: &OramS3,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let owner = owner(&req)?;
    let rules = s3
        .layer
        .bucket_lifecycle(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    if rules.is_empty() {
        return Err(s3_error!(
            NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist"
        ));
    }
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(rules.into_iter().map(from_rule).collect()),
        ..Default::default()
    }))
}

pub(crate) async fn delete_bucket_lifecycle(
    s3: &OramS3,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .set_bucket_lifecycle(&owner, &req.input.bucket, Vec::new())
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}
