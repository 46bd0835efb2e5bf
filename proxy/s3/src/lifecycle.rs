//! Bucket lifecycle: PutBucketLifecycleConfiguration,
//! GetBucketLifecycleConfiguration and DeleteBucketLifecycle.
//!
//! The object layer applies `AbortIncompleteMultipartUpload`, `Expiration`
//! (`Days`, `Date`, `ExpiredObjectDeleteMarker`) and
//! `NoncurrentVersionExpiration` (`NoncurrentDays`, `NewerNoncurrentVersions`)
//! to the keys of a prefix. A configuration with anything else it cannot apply
//! (`Transition`, `NoncurrentVersionTransition`, a `Tag` or object-size filter)
//! is refused as a whole with `NotImplemented` and a message naming the
//! element, never stored in part.

use oram_objects::LifecycleRule as Rule;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

use crate::convert::timestamp;
use crate::objectlock::millis;
use crate::request::owner;
use crate::OramS3;

fn unsupported(element: &str) -> S3Error {
    s3_error!(
        NotImplemented,
        "lifecycle element {element} is not supported: this proxy applies only \
         AbortIncompleteMultipartUpload, Expiration and NoncurrentVersionExpiration \
         rules, filtered by key prefix"
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

/// A positive number of days, or InvalidArgument naming `what`.
fn positive(d: Option<i32>, what: &str) -> S3Result<u32> {
    match d {
        Some(d) if d > 0 => Ok(d as u32),
        _ => Err(s3_error!(
            InvalidArgument,
            "'{what}' in a lifecycle rule must be a positive integer"
        )),
    }
}

/// One S3 rule as the object layer stores it, or why it cannot be. The
/// object layer checks the combinations (an action in every rule, Days or
/// Date, a Date at midnight).
fn to_rule(r: &LifecycleRule) -> S3Result<Rule> {
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(unsupported("Transition"));
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
    let mut rule = Rule {
        id: r.id.clone().unwrap_or_default(),
        enabled,
        prefix: rule_prefix(r)?,
        ..Default::default()
    };
    if let Some(abort) = &r.abort_incomplete_multipart_upload {
        rule.abort_incomplete_days = positive(abort.days_after_initiation, "DaysAfterInitiation")?;
    }
    if let Some(e) = &r.expiration {
        if e.days.is_some() {
            rule.expiration_days = positive(e.days, "Days")?;
        }
        if let Some(d) = &e.date {
            rule.expiration_date_ms = millis(d);
        }
        rule.expired_object_delete_marker = e.expired_object_delete_marker == Some(true);
        if e.days.is_none() && e.date.is_none() && e.expired_object_delete_marker.is_none() {
            return Err(s3_error!(
                MalformedXML,
                "an Expiration has Days, Date or ExpiredObjectDeleteMarker"
            ));
        }
    }
    if let Some(n) = &r.noncurrent_version_expiration {
        rule.noncurrent_days = positive(n.noncurrent_days, "NoncurrentDays")?;
        if n.newer_noncurrent_versions.is_some() {
            rule.newer_noncurrent_versions =
                positive(n.newer_noncurrent_versions, "NewerNoncurrentVersions")?;
        }
    }
    if rule.abort_incomplete_days == 0 && !rule.acts_on_objects() {
        return Err(s3_error!(
            InvalidArgument,
            "At least one action needs to be specified in a rule"
        ));
    }
    Ok(rule)
}

fn from_rule(r: Rule) -> LifecycleRule {
    let expiration = (r.expiration_days > 0
        || r.expiration_date_ms > 0
        || r.expired_object_delete_marker)
        .then(|| LifecycleExpiration {
            date: (r.expiration_date_ms > 0).then(|| timestamp(r.expiration_date_ms)),
            days: (r.expiration_days > 0).then_some(r.expiration_days as i32),
            expired_object_delete_marker: r.expired_object_delete_marker.then_some(true),
        });
    let noncurrent = (r.noncurrent_days > 0).then(|| NoncurrentVersionExpiration {
        noncurrent_days: Some(r.noncurrent_days as i32),
        newer_noncurrent_versions: (r.newer_noncurrent_versions > 0)
            .then_some(r.newer_noncurrent_versions as i32),
    });
    LifecycleRule {
        abort_incomplete_multipart_upload: (r.abort_incomplete_days > 0).then_some(
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(r.abort_incomplete_days as i32),
            },
        ),
        expiration,
        filter: Some(LifecycleRuleFilter {
            prefix: Some(r.prefix),
            ..Default::default()
        }),
        id: (!r.id.is_empty()).then_some(r.id),
        noncurrent_version_expiration: noncurrent,
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
