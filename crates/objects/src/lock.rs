//! S3 object lock: a bucket's object lock configuration, and the retention
//! and legal hold of each object version, as AWS defines them.
//!
//! **Enabling.** Object lock is enabled when a bucket is created with it
//! ([`ObjectLayer::create_bucket_with_lock`], which enables versioning too),
//! or later on a bucket whose versioning is enabled
//! ([`ObjectLayer::set_object_lock_config`]); a bucket not versioned is
//! refused with [`ObjectError::InvalidBucketState`]. Once enabled it cannot be
//! disabled, and versioning cannot be suspended.
//!
//! **What is protected.** A lock protects one *version*: a DELETE without a
//! version id still only adds a delete marker, and a PUT adds a new version.
//! Removing a version (DELETE with its id) is refused with
//! [`ObjectError::Locked`] while it is under a legal hold or its retention
//! date is in the future — in governance mode unless the request bypasses
//! governance retention, in compliance mode always. A compliance retention
//! can neither be shortened, removed nor changed to governance; a governance
//! retention can be shortened, removed or changed to compliance only with the
//! bypass (either can be extended in its mode). Retention and legal hold
//! are allowed only in a bucket with object lock enabled
//! ([`ObjectError::InvalidRequest`]), and such a bucket refuses expiry times
//! (Swift's `X-Delete-At`), so no version under lock ever expires.
//!
//! **What the storage server observes.** The configuration lives in the
//! bucket record and the lock state in the version's record, both in the
//! trusted local index: setting or reading them, and refusing a delete, sends
//! no backend request. Writes that carry a lock move their data as any other
//! write does.

use crate::records::*;
use crate::{now_ms, Meta, ObjectError, ObjectLayer, Result};

const DAY_MS: i64 = 24 * 3600 * 1000;

/// What S3 answers a lock asked of a bucket without object lock.
fn missing_config() -> ObjectError {
    ObjectError::InvalidRequest("Bucket is missing Object Lock Configuration".into())
}

impl DefaultRetention {
    /// The retention a version written at `now_ms` gets.
    pub fn retention_from(&self, now_ms: i64) -> Retention {
        let days = i64::from(self.days) + 365 * i64::from(self.years);
        Retention {
            mode: self.mode,
            until_ms: now_ms.saturating_add(days.saturating_mul(DAY_MS)),
        }
    }
}

impl Retention {
    /// Whether the retention still protects its version at `now_ms`.
    pub fn active(&self, now_ms: i64) -> bool {
        self.until_ms > now_ms
    }
}

/// Refuses ([`ObjectError::Locked`]) the removal of version `rec` at `now_ms`
/// while a legal hold or an unexpired retention protects it; `bypass`
/// (S3's `x-amz-bypass-governance-retention`) lifts a governance retention.
pub(crate) fn check_deletable(rec: &ObjectRecord, now_ms: i64, bypass: bool) -> Result<()> {
    if rec.legal_hold {
        return Err(ObjectError::Locked(
            "the version is under a legal hold".into(),
        ));
    }
    match rec.retention {
        Some(r) if r.active(now_ms) => match r.mode {
            RetentionMode::Compliance => Err(ObjectError::Locked(
                "the version is under compliance retention".into(),
            )),
            RetentionMode::Governance if !bypass => Err(ObjectError::Locked(
                "the version is under governance retention".into(),
            )),
            RetentionMode::Governance => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Checks a retention date asked for at `now_ms`: it must be in the future.
fn check_future(r: &Retention, now_ms: i64) -> Result<()> {
    if r.until_ms <= now_ms {
        return Err(ObjectError::InvalidArgument(
            "The retain until date must be in the future!".into(),
        ));
    }
    Ok(())
}

/// Checks the lock `req` of a new version `rec` of bucket `b`, and sets it on
/// `rec` (with the bucket's default retention when `req` names none). A lock
/// asked of a bucket without object lock is [`ObjectError::InvalidRequest`];
/// an expiry time in a bucket with it, [`ObjectError::InvalidArgument`].
pub(crate) fn lock_new_version(
    b: &BucketRecord,
    rec: &mut ObjectRecord,
    req: &LockRequest,
) -> Result<()> {
    let Some(cfg) = &b.object_lock else {
        return if req.is_empty() {
            Ok(())
        } else {
            Err(missing_config())
        };
    };
    if rec.delete_at > 0 {
        return Err(ObjectError::InvalidArgument(
            "objects in a bucket with object lock cannot expire".into(),
        ));
    }
    let now = now_ms();
    if let Some(r) = &req.retention {
        check_future(r, now)?;
    }
    rec.retention = req
        .retention
        .or_else(|| cfg.default_retention.map(|d| d.retention_from(now)));
    rec.legal_hold = req.legal_hold.unwrap_or(false);
    Ok(())
}

/// Checks a default retention: a period of days or of years (one, positive).
fn check_default(d: &DefaultRetention) -> Result<()> {
    if (d.days > 0) == (d.years > 0) {
        return Err(ObjectError::InvalidArgument(
            "a default retention needs a positive period of Days or of Years".into(),
        ));
    }
    Ok(())
}

impl Meta {
    /// The bucket `name` of `owner`, which must have object lock enabled
    /// ([`ObjectError::InvalidRequest`] otherwise).
    fn locking_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        let b = self.owned_bucket(owner, name)?;
        if b.object_lock.is_none() {
            return Err(missing_config());
        }
        Ok(b)
    }
}

impl ObjectLayer {
    /// Creates bucket `name` with object lock enabled (S3's CreateBucket with
    /// `x-amz-bucket-object-lock-enabled: true`): its versioning is enabled
    /// too. Otherwise as [`ObjectLayer::create_bucket`].
    pub async fn create_bucket_with_lock(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        self.create_bucket_as(owner, name, |b| {
            b.versioning = Versioning::Enabled;
            b.object_lock = Some(ObjectLockConfig::default());
        })
        .await
    }

    /// Enables object lock on bucket `name` (if not yet) and sets its default
    /// retention (S3's `PutObjectLockConfiguration`). The bucket's versioning
    /// must be enabled ([`ObjectError::InvalidBucketState`] otherwise); a
    /// default retention needs a positive period of days or of years
    /// ([`ObjectError::InvalidArgument`]).
    pub async fn set_object_lock_config(
        &self,
        owner: &str,
        name: &str,
        cfg: ObjectLockConfig,
    ) -> Result<()> {
        if let Some(d) = &cfg.default_retention {
            check_default(d)?;
        }
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                if b.object_lock.is_none() && b.versioning != Versioning::Enabled {
                    return Err(ObjectError::InvalidBucketState(
                        "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration"
                            .into(),
                    ));
                }
                b.object_lock = Some(cfg);
                m.kv.put(&bucket_key(owner, name), encode(&b));
                Ok(())
            })
            .await
    }

    /// The object lock configuration of bucket `name`;
    /// [`ObjectError::NoObjectLockConfig`] if object lock is not enabled.
    pub fn object_lock_config(&self, owner: &str, name: &str) -> Result<ObjectLockConfig> {
        self.shared
            .lock()
            .owned_bucket(owner, name)?
            .object_lock
            .ok_or_else(|| ObjectError::NoObjectLockConfig(name.into()))
    }

    /// The record of `bucket/key` — its current version, or version `vid` —
    /// to read its lock state from; the bucket must have object lock enabled
    /// ([`ObjectError::InvalidRequest`] otherwise).
    pub fn object_lock_state(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        vid: Option<&str>,
    ) -> Result<ObjectRecord> {
        let m = self.shared.lock();
        m.locking_bucket(owner, bucket)?;
        Ok(m.addressed_version((owner, bucket, key), vid)?.1)
    }

    /// Sets (or, with `None`, removes) the retention of `bucket/key` — its
    /// current version, or version `vid` (S3's `PutObjectRetention`). A
    /// compliance retention still active cannot be shortened, removed or
    /// have its mode changed; a governance retention still active can be so
    /// changed only with `bypass` (both: [`ObjectError::Locked`]). Extending
    /// a retention in its mode needs no bypass.
    /// A new date must be in the future ([`ObjectError::InvalidArgument`]).
    pub async fn set_object_retention(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        vid: Option<&str>,
        retention: Option<Retention>,
        bypass: bool,
    ) -> Result<ObjectRecord> {
        self.shared
            .commit(|m| {
                m.locking_bucket(owner, bucket)?;
                let (at, mut rec) = m.addressed_version((owner, bucket, key), vid)?;
                let now = now_ms();
                if let Some(r) = &retention {
                    check_future(r, now)?;
                }
                if rec.delete_at > 0 {
                    return Err(ObjectError::InvalidRequest(
                        "an object with an expiry time cannot be locked".into(),
                    ));
                }
                if let Some(old) = rec.retention.filter(|o| o.active(now)) {
                    let weaker = match &retention {
                        None => true,
                        Some(new) => new.until_ms < old.until_ms || new.mode != old.mode,
                    };
                    if weaker
                        && (old.mode == RetentionMode::Compliance
                            || (old.mode == RetentionMode::Governance && !bypass))
                    {
                        return Err(ObjectError::Locked(format!(
                            "the version's {} retention cannot be shortened, removed or have its mode changed",
                            match old.mode {
                                RetentionMode::Compliance => "compliance",
                                RetentionMode::Governance => "governance",
                            }
                        )));
                    }
                }
                rec.retention = retention;
                m.kv.put(&at, encode(&rec));
                Ok(rec)
            })
            .await
    }

    /// Sets or removes the legal hold of `bucket/key` — its current version,
    /// or version `vid` (S3's `PutObjectLegalHold`).
    pub async fn set_object_legal_hold(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        vid: Option<&str>,
        on: bool,
    ) -> Result<ObjectRecord> {
        self.shared
            .commit(|m| {
                m.locking_bucket(owner, bucket)?;
                let (at, mut rec) = m.addressed_version((owner, bucket, key), vid)?;
                if on && rec.delete_at > 0 {
                    return Err(ObjectError::InvalidRequest(
                        "an object with an expiry time cannot be locked".into(),
                    ));
                }
                rec.legal_hold = on;
                m.kv.put(&at, encode(&rec));
                Ok(rec)
            })
            .await
    }
}
