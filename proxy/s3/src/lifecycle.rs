//! Bucket lifecycle: PutBucketLifecycleConfiguration,
//! GetBucketLifecycleConfiguration and DeleteBucketLifecycle.
//!
//! The object layer applies `AbortIncompleteMultipartUpload`, `Expiration`
//! (`Days`, `Date`, `ExpiredObjectDeleteMarker`) and
//! `NoncurrentVersionExpiration` (`NoncurrentDays`, `NewerNoncurrentVersions`)
//! to the objects a rule's `Filter` selects: by `Prefix`, `Tag`,
//! `ObjectSizeGreaterThan`, `ObjectSizeLessThan`, or several of them in `And`
//! (the object layer checks the filter as S3 does: distinct tag keys, sizes in
//! order, no tag or size filter on upload aborts and lone-marker removal). A
//! configuration with a transition (`Transition`,
//! `NoncurrentVersionTransition`) is refused as a whole with `NotImplemented`
//! and a message naming the element, never stored in part: every object lives
//! in the one ORAM, there is no storage class to move it to.
//!
//! GetBucketLifecycleConfiguration answers each filter in one form: a filter
//! of one predicate as that element alone (a rule without tags or sizes as
//! `Filter/Prefix`, even empty), one of several as `And` (without an empty
//! `Prefix`), tags in the order given.

use oram_objects::LifecycleRule as Rule;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result};

use crate::convert::timestamp;
use crate::objectlock::millis;
use crate::request::owner;
use crate::OramS3;

fn no_transitions(element: &str) -> S3Error {
    s3_error!(
        NotImplemented,
        "lifecycle element {element} is not supported: this proxy keeps every object \
         in one Oblivious RAM, which has no storage classes to transition objects to; \
         only AbortIncompleteMultipartUpload, Expiration and \
         NoncurrentVersionExpiration rules are applied"
    )
}

/// A size bound of a filter, in bytes: not negative (InvalidRequest naming
/// `what`).
fn size(n: Option<i64>, what: &str) -> S3Result<Option<u64>> {
    n.map(|n| {
        u64::try_from(n)
            .map_err(|_| s3_error!(InvalidRequest, "'{what}' must not be negative, not {n}"))
    })
    .transpose()
}

/// A filter's tag as (key, value); a `Tag` without `Key` is malformed, one
/// without `Value` selects the versions whose tag of that key has an empty
/// value (as on S3).
fn tag(t: &Tag) -> S3Result<(String, String)> {
    let key = t
        .key
        .clone()
        .ok_or_else(|| s3_error!(MalformedXML, "a Tag in a lifecycle Filter has a Key"))?;
    Ok((key, t.value.clone().unwrap_or_default()))
}

/// Sets `rule`'s prefix, tags and size bounds from the S3 rule's filter (or
/// its legacy top-level `Prefix`). A `Filter` has at most one of `Prefix`,
/// `Tag`, `ObjectSizeGreaterThan`, `ObjectSizeLessThan` and `And`
/// (MalformedXML otherwise); the object layer checks the values.
fn rule_filter(r: &LifecycleRule, rule: &mut Rule) -> S3Result<()> {
    let Some(f) = &r.filter else {
        rule.prefix = r.prefix.clone().unwrap_or_default();
        return Ok(());
    };
    if r.prefix.is_some() {
        return Err(s3_error!(
            MalformedXML,
            "a rule has either Filter or Prefix, not both"
        ));
    }
    let given = [
        f.prefix.is_some(),
        f.tag.is_some(),
        f.object_size_greater_than.is_some(),
        f.object_size_less_than.is_some(),
        f.and.is_some(),
    ];
    if given.into_iter().filter(|g| *g).count() > 1 {
        return Err(s3_error!(
            MalformedXML,
            "a lifecycle Filter has at most one of Prefix, Tag, ObjectSizeGreaterThan, \
             ObjectSizeLessThan and And (combine them in And)"
        ));
    }
    let (prefix, tags, greater, less) = match &f.and {
        Some(and) => (
            &and.prefix,
            and.tags
                .iter()
                .flatten()
                .map(tag)
                .collect::<S3Result<_>>()?,
            and.object_size_greater_than,
            and.object_size_less_than,
        ),
        None => (
            &f.prefix,
            f.tag.iter().map(tag).collect::<S3Result<_>>()?,
            f.object_size_greater_than,
            f.object_size_less_than,
        ),
    };
    rule.prefix = prefix.clone().unwrap_or_default();
    rule.tags = tags;
    rule.size_greater_than = size(greater, "ObjectSizeGreaterThan")?;
    rule.size_less_than = size(less, "ObjectSizeLessThan")?;
    Ok(())
}

/// A stored rule's filter, in one form (see the module documentation).
fn filter_of(r: &Rule) -> LifecycleRuleFilter {
    let bytes = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    let (greater, less) = (bytes(r.size_greater_than), bytes(r.size_less_than));
    let mut tags: Vec<Tag> = r
        .tags
        .iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect();
    let predicates = usize::from(!r.prefix.is_empty())
        + tags.len()
        + usize::from(greater.is_some())
        + usize::from(less.is_some());
    if predicates > 1 {
        return LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                object_size_greater_than: greater,
                object_size_less_than: less,
                prefix: (!r.prefix.is_empty()).then(|| r.prefix.clone()),
                tags: (!tags.is_empty()).then_some(tags),
            }),
            ..Default::default()
        };
    }
    LifecycleRuleFilter {
        object_size_greater_than: greater,
        object_size_less_than: less,
        tag: tags.pop(),
        prefix: (predicates == 0 || !r.prefix.is_empty()).then(|| r.prefix.clone()),
        ..Default::default()
    }
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
/// Date, a Date at midnight, the filter's tags and sizes and the actions they
/// allow).
fn to_rule(r: &LifecycleRule) -> S3Result<Rule> {
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(no_transitions("Transition"));
    }
    if r.noncurrent_version_transitions
        .as_ref()
        .is_some_and(|t| !t.is_empty())
    {
        return Err(no_transitions("NoncurrentVersionTransition"));
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
        ..Default::default()
    };
    rule_filter(r, &mut rule)?;
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
        filter: Some(filter_of(&r)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    fn tag(k: &str, v: Option<&str>) -> Tag {
        Tag {
            key: Some(k.into()),
            value: v.map(Into::into),
        }
    }

    fn with_filter(f: LifecycleRuleFilter) -> LifecycleRule {
        LifecycleRule {
            expiration: Some(LifecycleExpiration {
                days: Some(1),
                ..Default::default()
            }),
            filter: Some(f),
            status: ExpirationStatus::from_static(ExpirationStatus::ENABLED),
            abort_incomplete_multipart_upload: None,
            id: None,
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            prefix: None,
            transitions: None,
        }
    }

    fn code(r: S3Result<Rule>) -> S3ErrorCode {
        r.unwrap_err().code().clone()
    }

    #[test]
    fn filters_are_stored_and_answered_in_one_form() {
        let and = LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                object_size_greater_than: Some(0),
                object_size_less_than: Some(10),
                prefix: Some("logs/".into()),
                tags: Some(vec![tag("b", Some("2")), tag("a", None)]),
            }),
            ..Default::default()
        };
        let rule = to_rule(&with_filter(and.clone())).unwrap();
        assert_eq!(rule.prefix, "logs/");
        assert_eq!(
            rule.tags,
            vec![("b".into(), "2".into()), ("a".into(), String::new())]
        );
        assert_eq!(
            (rule.size_greater_than, rule.size_less_than),
            (Some(0), Some(10))
        );
        // The tag without a value comes back with an empty one.
        let mut expected = and;
        if let Some(a) = expected.and.as_mut() {
            a.tags = Some(vec![tag("b", Some("2")), tag("a", Some(""))]);
        }
        assert_eq!(from_rule(rule).filter, Some(expected));
        // One predicate, in And or not, comes back as that element alone.
        for (given, answered) in [
            (
                LifecycleRuleFilter {
                    and: Some(LifecycleRuleAndOperator {
                        tags: Some(vec![tag("k", Some("v"))]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                LifecycleRuleFilter {
                    tag: Some(tag("k", Some("v"))),
                    ..Default::default()
                },
            ),
            (
                LifecycleRuleFilter {
                    object_size_less_than: Some(7),
                    ..Default::default()
                },
                LifecycleRuleFilter {
                    object_size_less_than: Some(7),
                    ..Default::default()
                },
            ),
            (
                LifecycleRuleFilter::default(),
                LifecycleRuleFilter {
                    prefix: Some(String::new()),
                    ..Default::default()
                },
            ),
        ] {
            let rule = to_rule(&with_filter(given)).unwrap();
            assert_eq!(from_rule(rule).filter, Some(answered));
        }
    }

    #[test]
    fn malformed_filters_are_refused_with_their_codes() {
        let two = LifecycleRuleFilter {
            prefix: Some("p/".into()),
            object_size_greater_than: Some(3),
            ..Default::default()
        };
        assert_eq!(code(to_rule(&with_filter(two))), S3ErrorCode::MalformedXML);
        let keyless = LifecycleRuleFilter {
            tag: Some(Tag {
                key: None,
                value: Some("v".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            code(to_rule(&with_filter(keyless))),
            S3ErrorCode::MalformedXML
        );
        let negative = LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                object_size_less_than: Some(-5),
                prefix: Some("p/".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            code(to_rule(&with_filter(negative))),
            S3ErrorCode::InvalidRequest
        );
        let mut transition = with_filter(LifecycleRuleFilter::default());
        transition.transitions = Some(vec![Transition::default()]);
        let e = to_rule(&transition).unwrap_err();
        assert_eq!(*e.code(), S3ErrorCode::NotImplemented);
        assert!(e.message().unwrap_or_default().contains("storage classes"));
    }
}
