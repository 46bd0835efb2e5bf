//! S3 object lock: Put/GetObjectLockConfiguration, Put/GetObjectRetention,
//! Put/GetObjectLegalHold, and the `x-amz-object-lock-*` headers of writes and
//! reads. The rules are the object layer's (`oram_objects::lock`); this maps
//! S3's XML and headers onto them, with AWS's error codes for malformed input.

use oram_objects::{
    DefaultRetention, LockRequest, ObjectLockConfig, ObjectRecord, Retention, RetentionMode,
};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::convert::timestamp;
use crate::request::owner;
use crate::OramS3;

fn malformed() -> S3Error {
    s3_error!(
        MalformedXML,
        "The XML you provided was not well-formed or did not validate against our published schema"
    )
}

/// A retention mode as S3 spells it (`GOVERNANCE`, `COMPLIANCE`); anything
/// else is `None`.
fn mode(s: &str) -> Option<RetentionMode> {
    match s {
        ObjectLockRetentionMode::GOVERNANCE => Some(RetentionMode::Governance),
        ObjectLockRetentionMode::COMPLIANCE => Some(RetentionMode::Compliance),
        _ => None,
    }
}

fn mode_name(m: RetentionMode) -> &'static str {
    match m {
        RetentionMode::Governance => ObjectLockRetentionMode::GOVERNANCE,
        RetentionMode::Compliance => ObjectLockRetentionMode::COMPLIANCE,
    }
}

/// Milliseconds since the Unix epoch of `t`.
pub(crate) fn millis(t: &Timestamp) -> i64 {
    let nanos = time::OffsetDateTime::from(t.clone()).unix_timestamp_nanos();
    i64::try_from(nanos / 1_000_000).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX })
}

/// A legal hold status (`ON`, `OFF`); anything else is MalformedXML.
fn hold(s: &str) -> S3Result<bool> {
    match s {
        ObjectLockLegalHoldStatus::ON => Ok(true),
        ObjectLockLegalHoldStatus::OFF => Ok(false),
        _ => Err(malformed()),
    }
}

/// The object lock a write asks for with its `x-amz-object-lock-mode`,
/// `-retain-until-date` and `-legal-hold` headers: the mode and the date go
/// together (one without the other is InvalidArgument, as AWS answers).
pub(crate) fn lock_request(
    m: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    legal_hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<LockRequest> {
    let retention = match (m, until) {
        (None, None) => None,
        (Some(m), Some(t)) => Some(Retention {
            mode: mode(m.as_str())
                .ok_or_else(|| s3_error!(InvalidArgument, "Unknown wormMode directive."))?,
            until_ms: millis(t),
        }),
        _ => {
            return Err(s3_error!(
            InvalidArgument,
            "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied"
        ))
        }
    };
    let legal_hold = legal_hold
        .map(|h| {
            hold(h.as_str()).map_err(|_| {
                s3_error!(
                    InvalidArgument,
                    "Legal Hold must be either of 'ON' or 'OFF'"
                )
            })
        })
        .transpose()?;
    Ok(LockRequest {
        retention,
        legal_hold,
    })
}

/// The `x-amz-object-lock-*` answers of a GET or HEAD of `rec`: its mode,
/// retain-until date and legal hold (each only when set).
pub(crate) fn lock_headers(
    rec: &ObjectRecord,
) -> (
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
) {
    (
        rec.retention
            .map(|r| ObjectLockMode::from_static(mode_name(r.mode))),
        rec.retention.map(|r| timestamp(r.until_ms)),
        rec.legal_hold
            .then(|| ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::ON)),
    )
}

/// A default retention as S3 sends it: a mode, and Days or Years (one,
/// positive).
fn default_retention(d: DefaultRetention_) -> S3Result<DefaultRetention> {
    let m = d
        .mode
        .as_ref()
        .and_then(|m| mode(m.as_str()))
        .ok_or_else(malformed)?;
    let positive = |n: i32| -> S3Result<u32> {
        u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InvalidRetentionPeriod".into()),
                "Default retention period must be a positive integer value.",
            );
            e.set_status_code(http::StatusCode::BAD_REQUEST);
            e
        })
    };
    let (days, years) = match (d.days, d.years) {
        (Some(n), None) => (positive(n)?, 0),
        (None, Some(n)) => (0, positive(n)?),
        _ => return Err(malformed()),
    };
    Ok(DefaultRetention {
        mode: m,
        days,
        years,
    })
}

/// s3s's default retention, under another name than the layer's.
type DefaultRetention_ = s3s::dto::DefaultRetention;

pub(crate) async fn put_object_lock_configuration(
    s3: &OramS3,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let conf = input.object_lock_configuration.ok_or_else(malformed)?;
    if conf.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
        return Err(malformed());
    }
    let default_retention = match conf.rule {
        None => None,
        Some(rule) => Some(default_retention(
            rule.default_retention.ok_or_else(malformed)?,
        )?),
    };
    s3.layer
        .set_object_lock_config(
            &owner,
            &input.bucket,
            ObjectLockConfig { default_retention },
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(crate) async fn get_object_lock_configuration(
    s3: &OramS3,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let owner = owner(&req)?;
    let cfg = s3
        .layer
        .object_lock_config(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    let rule = cfg.default_retention.map(|d| ObjectLockRule {
        default_retention: Some(DefaultRetention_ {
            mode: Some(ObjectLockRetentionMode::from_static(mode_name(d.mode))),
            days: (d.days > 0).then_some(d.days as i32),
            years: (d.years > 0).then_some(d.years as i32),
        }),
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule,
        }),
    }))
}

pub(crate) async fn put_object_retention(
    s3: &OramS3,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let r = input.retention.ok_or_else(malformed)?;
    // An empty Retention removes it (with the bypass, for governance).
    let retention = match (r.mode, r.retain_until_date) {
        (None, None) => None,
        (Some(m), Some(t)) => Some(Retention {
            mode: mode(m.as_str()).ok_or_else(malformed)?,
            until_ms: millis(&t),
        }),
        _ => return Err(malformed()),
    };
    s3.layer
        .set_object_retention(
            &owner,
            (&input.bucket, &input.key),
            input.version_id.as_deref(),
            retention,
            input.bypass_governance_retention.unwrap_or(false),
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(crate) async fn get_object_retention(
    s3: &OramS3,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let rec = s3
        .layer
        .object_lock_state(
            &owner,
            (&input.bucket, &input.key),
            input.version_id.as_deref(),
        )
        .map_err(|e| s3.map_err(e))?;
    let r = rec
        .retention
        .ok_or_else(|| s3.map_err(oram_objects::ObjectError::NoSuchObjectLock))?;
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from_static(mode_name(r.mode))),
            retain_until_date: Some(timestamp(r.until_ms)),
        }),
    }))
}

pub(crate) async fn put_object_legal_hold(
    s3: &OramS3,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let on = input
        .legal_hold
        .and_then(|h| h.status)
        .ok_or_else(malformed)
        .and_then(|s| hold(s.as_str()))?;
    s3.layer
        .set_object_legal_hold(
            &owner,
            (&input.bucket, &input.key),
            input.version_id.as_deref(),
            on,
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(crate) async fn get_object_legal_hold(
    s3: &OramS3,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let rec = s3
        .layer
        .object_lock_state(
            &owner,
            (&input.bucket, &input.key),
            input.version_id.as_deref(),
        )
        .map_err(|e| s3.map_err(e))?;
    let status = if rec.legal_hold {
        ObjectLockLegalHoldStatus::ON
    } else {
        ObjectLockLegalHoldStatus::OFF
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from_static(status)),
        }),
    }))
}
