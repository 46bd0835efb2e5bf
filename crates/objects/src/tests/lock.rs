//! S3 object lock: enabling it, retention and legal hold enforced on the
//! deletion of versions, defaults applied to new versions; no block is
//! accessed to set or check a lock.

use super::*;

const DAY: i64 = 24 * 3600 * 1000;

async fn put_locked(l: &ObjectLayer, key: &str, lock: LockRequest) -> Result<ObjectRecord> {
    l.put_object(
        "a",
        "bkt",
        key,
        body(data(100, 1)),
        PutOptions {
            lock,
            ..PutOptions::default()
        },
    )
    .await
}

fn retention(mode: RetentionMode, from_now_ms: i64) -> Option<Retention> {
    Some(Retention {
        mode,
        until_ms: now_ms() + from_now_ms,
    })
}

async fn delete(l: &ObjectLayer, vid: &str, bypass: bool) -> Result<Deleted> {
    l.delete_object_version("a", ("bkt", "k"), vid, bypass)
        .await
}

#[tokio::test]
async fn object_lock_needs_versioning_and_keeps_it_enabled() {
    let l = layer(100);
    l.create_bucket("a", "bkt").await.unwrap();
    assert!(matches!(
        l.object_lock_config("a", "bkt"),
        Err(ObjectError::NoObjectLockConfig(_))
    ));
    // Not versioned: refused, as AWS does.
    assert!(matches!(
        l.set_object_lock_config("a", "bkt", ObjectLockConfig::default())
            .await,
        Err(ObjectError::InvalidBucketState(_))
    ));
    // Locks are refused where object lock is not enabled.
    assert!(matches!(
        put_locked(
            &l,
            "k",
            LockRequest {
                legal_hold: Some(true),
                ..Default::default()
            }
        )
        .await,
        Err(ObjectError::InvalidRequest(_))
    ));
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let bad = DefaultRetention {
        mode: RetentionMode::Governance,
        days: 1,
        years: 1,
    };
    assert!(matches!(
        l.set_object_lock_config(
            "a",
            "bkt",
            ObjectLockConfig {
                default_retention: Some(bad)
            }
        )
        .await,
        Err(ObjectError::InvalidArgument(_))
    ));
    l.set_object_lock_config("a", "bkt", ObjectLockConfig::default())
        .await
        .unwrap();
    assert_eq!(
        l.object_lock_config("a", "bkt").unwrap(),
        ObjectLockConfig::default()
    );
    assert!(matches!(
        l.set_bucket_versioning("a", "bkt", Versioning::Suspended)
            .await,
        Err(ObjectError::InvalidBucketState(_))
    ));
    // Created with lock: versioned at once.
    let b = l.create_bucket_with_lock("a", "locked").await.unwrap();
    assert_eq!(b.versioning, Versioning::Enabled);
    assert!(b.object_lock.is_some());
    // Expiry times are refused in a bucket with object lock.
    let put = l
        .put_object(
            "a",
            "bkt",
            "x",
            body(data(10, 1)),
            PutOptions {
                delete_at: 4_000_000_000,
                ..PutOptions::default()
            },
        )
        .await;
    assert!(
        matches!(put, Err(ObjectError::InvalidArgument(_))),
        "{put:?}"
    );
}

#[tokio::test]
async fn retention_and_legal_hold_protect_versions() {
    let l = layer(100);
    l.create_bucket_with_lock("a", "bkt").await.unwrap();
    let free = l.usage().free_blocks;
    let gov = put_locked(
        &l,
        "k",
        LockRequest {
            retention: retention(RetentionMode::Governance, DAY),
            legal_hold: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(gov.retention.unwrap().mode, RetentionMode::Governance);
    let accesses = l.engine().stats().accesses;
    // A retained version cannot be deleted...
    assert!(matches!(
        delete(&l, &gov.version_id, false).await,
        Err(ObjectError::Locked(_))
    ));
    // ...but a DELETE without a version id adds a delete marker.
    let marker = l
        .delete_object_versioned("a", "bkt", "k", None)
        .await
        .unwrap();
    assert!(marker.delete_marker);
    delete(&l, marker.version_id.as_deref().unwrap(), false)
        .await
        .unwrap();
    // A governance retention cannot be shortened without the bypass...
    let shorter = retention(RetentionMode::Governance, DAY / 2);
    assert!(matches!(
        l.set_object_retention("a", ("bkt", "k"), None, shorter, false)
            .await,
        Err(ObjectError::Locked(_))
    ));
    // ...nor removed; it can be extended.
    assert!(matches!(
        l.set_object_retention("a", ("bkt", "k"), Some(&gov.version_id), None, false)
            .await,
        Err(ObjectError::Locked(_))
    ));
    let longer = retention(RetentionMode::Governance, 2 * DAY);
    l.set_object_retention("a", ("bkt", "k"), None, longer, false)
        .await
        .unwrap();
    // A change of mode needs the bypass too.
    let comp = retention(RetentionMode::Compliance, 2 * DAY);
    assert!(matches!(
        l.set_object_retention("a", ("bkt", "k"), None, comp, false)
            .await,
        Err(ObjectError::Locked(_))
    ));
    // Checking and setting locks touch no block.
    assert_eq!(l.engine().stats().accesses, accesses);
    // The bypass lifts a governance retention.
    let d = delete(&l, &gov.version_id, true).await.unwrap();
    assert!(d.existed);

    // Compliance: no bypass, no shortening, no change to governance.
    let comp = put_locked(
        &l,
        "k",
        LockRequest {
            retention: retention(RetentionMode::Compliance, DAY),
            legal_hold: None,
        },
    )
    .await
    .unwrap();
    assert!(matches!(
        delete(&l, &comp.version_id, true).await,
        Err(ObjectError::Locked(_))
    ));
    for weaker in [
        retention(RetentionMode::Compliance, DAY / 2),
        retention(RetentionMode::Governance, 2 * DAY),
        None,
    ] {
        assert!(matches!(
            l.set_object_retention("a", ("bkt", "k"), None, weaker, true)
                .await,
            Err(ObjectError::Locked(_))
        ));
    }
    // A date in the past is refused.
    assert!(matches!(
        l.set_object_retention(
            "a",
            ("bkt", "k"),
            None,
            retention(RetentionMode::Compliance, -DAY),
            false
        )
        .await,
        Err(ObjectError::InvalidArgument(_))
    ));
    // An expired retention no longer protects: shorten it into the past by
    // writing the record as a clock that moved on would see it.
    {
        let mut m = l.shared.lock();
        let (at, mut rec) = m
            .addressed_version(("a", "bkt", "k"), Some(&comp.version_id))
            .unwrap();
        rec.retention = retention(RetentionMode::Compliance, -1);
        m.kv.put(&at, crate::records::encode(&rec));
    }
    assert!(delete(&l, &comp.version_id, false).await.unwrap().existed);

    // Legal hold: blocks deletion until removed, bypass or not.
    let held = put_locked(
        &l,
        "k",
        LockRequest {
            retention: None,
            legal_hold: Some(true),
        },
    )
    .await
    .unwrap();
    assert!(held.legal_hold);
    assert!(matches!(
        delete(&l, &held.version_id, true).await,
        Err(ObjectError::Locked(_))
    ));
    l.set_object_legal_hold("a", ("bkt", "k"), Some(&held.version_id), false)
        .await
        .unwrap();
    assert!(
        !l.object_lock_state("a", ("bkt", "k"), None)
            .unwrap()
            .legal_hold
    );
    delete(&l, &held.version_id, false).await.unwrap();
    // Every version went and its blocks with it.
    assert_eq!(l.usage().free_blocks, free);
}

#[tokio::test]
async fn default_retention_applies_to_puts_copies_and_uploads() {
    let l = layer(100);
    l.create_bucket_with_lock("a", "bkt").await.unwrap();
    l.set_object_lock_config(
        "a",
        "bkt",
        ObjectLockConfig {
            default_retention: Some(DefaultRetention {
                mode: RetentionMode::Compliance,
                days: 2,
                years: 0,
            }),
        },
    )
    .await
    .unwrap();
    let before = now_ms();
    let rec = put_locked(&l, "k", LockRequest::default()).await.unwrap();
    let r = rec.retention.unwrap();
    assert_eq!(r.mode, RetentionMode::Compliance);
    assert!(r.until_ms >= before + 2 * DAY && r.until_ms <= now_ms() + 2 * DAY);
    // An explicit retention wins over the default.
    let own = put_locked(
        &l,
        "k",
        LockRequest {
            retention: retention(RetentionMode::Governance, DAY),
            legal_hold: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(own.retention.unwrap().mode, RetentionMode::Governance);
    // A copy gets the default, not the source's lock.
    let src = l
        .open_object_version("a", "bkt", "k", &own.version_id)
        .unwrap();
    let c = l
        .copy_object_with(
            "a",
            src,
            (("bkt", "k"), ("bkt", "c")),
            CopyOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(c.retention.unwrap().mode, RetentionMode::Compliance);
    // A multipart upload's lock is applied at completion.
    let id = l
        .create_multipart_locked(
            "a",
            ("bkt", "mp"),
            ObjectMeta::default(),
            Tags::new(),
            LockRequest {
                retention: None,
                legal_hold: Some(true),
            },
        )
        .await
        .unwrap();
    let part = l
        .upload_part(
            "a",
            ("bkt", "mp", &id),
            1,
            body(data(10, 3)),
            part_opts(None),
        )
        .await
        .unwrap();
    let mp = l
        .complete_multipart(
            "a",
            ("bkt", "mp", &id),
            &[(1, part.etag)],
            &PutMode::Overwrite,
        )
        .await
        .unwrap();
    assert!(mp.legal_hold);
    assert_eq!(mp.retention.unwrap().mode, RetentionMode::Compliance);
    // The lock is stored with the version.
    let stored = l.object_lock_state("a", ("bkt", "mp"), None).unwrap();
    assert_eq!(stored.retention, mp.retention);
}
