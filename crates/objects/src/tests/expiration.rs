//! Lifecycle expiration of current versions, noncurrent versions and lone
//! delete markers, with the sweep's clock given by the test (no sleeping); no
//! block is accessed by it, and no locked version is removed.

use super::*;
use crate::expiration::midnight_at_or_after;

const DAY: i64 = 24 * 3600 * 1000;

/// The first midnight at least `n` days after `t`: by then a rule of `n` days
/// is due for anything written (or made noncurrent) at or before `t`.
fn day(t: i64, n: i64) -> i64 {
    midnight_at_or_after(t + n * DAY)
}

/// The versions of `a/bkt/key`, newest first: (version label, delete marker).
pub(super) fn versions(l: &ObjectLayer, key: &str) -> Vec<(String, bool)> {
    let m = l.shared.lock();
    let mut out = Vec::new();
    if let Some(cur) = m.stored_object("a", "bkt", key).unwrap() {
        out.push((cur.version_label().to_string(), false));
    }
    scan_prefix(m.kv.as_ref(), &versions_base("a", "bkt", key), |_, v| {
        let rec: ObjectRecord = decode(v).unwrap();
        out.push((rec.version_label().to_string(), rec.delete_marker));
        Ok(())
    })
    .unwrap();
    out
}

async fn put(l: &ObjectLayer, key: &str, lock: LockRequest) -> ObjectRecord {
    l.put_object(
        "a",
        "bkt",
        key,
        body(data(200, 3)),
        PutOptions {
            lock,
            ..PutOptions::default()
        },
    )
    .await
    .unwrap()
}

fn rule(prefix: &str) -> LifecycleRule {
    LifecycleRule {
        enabled: true,
        prefix: prefix.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn expiration_removes_old_objects_of_an_unversioned_bucket_by_prefix() {
    let l = layer(256);
    l.create_bucket("a", "bkt").await.unwrap();
    let free = l.usage().free_blocks;
    let ts = now_ms();
    put(&l, "logs/a", LockRequest::default()).await;
    put(&l, "data/b", LockRequest::default()).await;
    let t0 = now_ms();
    let per_object = (free - l.usage().free_blocks) / 2;
    let mut logs = rule("logs/");
    logs.expiration_days = 2;
    let mut data_rule = rule("data/");
    data_rule.expiration_date_ms = day(t0, 5);
    l.set_bucket_lifecycle("a", "bkt", vec![logs.clone(), data_rule.clone()])
        .await
        .unwrap();
    assert_eq!(
        l.bucket_lifecycle("a", "bkt").unwrap(),
        vec![logs, data_rule]
    );
    let accesses = l.engine().stats().accesses;
    // Not yet two days old.
    assert_eq!(
        l.expire_by_lifecycle(ts + 2 * DAY - 1, 100).await.unwrap(),
        0
    );
    assert!(l.head_object("a", "bkt", "logs/a").is_ok());
    assert_eq!(l.expire_by_lifecycle(day(t0, 2), 100).await.unwrap(), 1);
    assert!(matches!(
        l.head_object("a", "bkt", "logs/a"),
        Err(ObjectError::NoSuchKey(_))
    ));
    assert!(l.head_object("a", "bkt", "data/b").is_ok());
    assert_eq!(l.usage().free_blocks, free - per_object);
    // The date rule acts from its date on.
    assert_eq!(l.expire_by_lifecycle(day(t0, 5) - 1, 100).await.unwrap(), 0);
    assert_eq!(l.expire_by_lifecycle(day(t0, 5), 100).await.unwrap(), 1);
    assert!(l.head_object("a", "bkt", "data/b").is_err());
    assert_eq!(l.usage().free_blocks, free);
    assert_eq!(
        l.engine().stats().accesses,
        accesses,
        "expiration touches no block"
    );
    // A disabled rule does nothing.
    put(&l, "logs/c", LockRequest::default()).await;
    let mut off = rule("logs/");
    off.expiration_days = 1;
    off.enabled = false;
    l.set_bucket_lifecycle("a", "bkt", vec![off]).await.unwrap();
    assert_eq!(
        l.expire_by_lifecycle(day(now_ms(), 30), 100).await.unwrap(),
        0
    );
    assert!(l.head_object("a", "bkt", "logs/c").is_ok());
}

#[tokio::test]
async fn versioned_expiration_adds_a_marker_then_noncurrent_versions_and_the_lone_marker_go() {
    let l = layer(256);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let free = l.usage().free_blocks;
    let ts = now_ms();
    let v1 = put(&l, "k", LockRequest::default()).await;
    let v2 = put(&l, "k", LockRequest::default()).await;
    let t0 = now_ms();
    let per_version = (free - l.usage().free_blocks) / 2;
    let mut r = rule("");
    r.expiration_days = 1;
    r.noncurrent_days = 3;
    l.set_bucket_lifecycle("a", "bkt", vec![r.clone()])
        .await
        .unwrap();
    let accesses = l.engine().stats().accesses;
    assert_eq!(l.expire_by_lifecycle(ts + DAY - 1, 100).await.unwrap(), 0);
    // The current version expires: a delete marker in front of it, nothing freed.
    let a = day(t0, 1);
    assert_eq!(l.expire_by_lifecycle(a, 100).await.unwrap(), 1);
    let vs = versions(&l, "k");
    assert_eq!(vs.len(), 3, "{vs:?}");
    assert!(vs[0].1, "a delete marker is the newest version: {vs:?}");
    assert_eq!(vs[1].0, v2.version_id);
    assert_eq!(vs[2].0, v1.version_id);
    assert!(matches!(
        l.head_object("a", "bkt", "k"),
        Err(ObjectError::DeleteMarker { .. })
    ));
    assert_eq!(l.usage().free_blocks, free - 2 * per_version);
    // v1 became noncurrent when v2 was written, v2 when the marker was.
    assert_eq!(l.expire_by_lifecycle(day(t0, 3), 100).await.unwrap(), 1);
    let vs = versions(&l, "k");
    assert_eq!(vs.len(), 2, "{vs:?}");
    assert_eq!(vs[1].0, v2.version_id);
    assert_eq!(l.usage().free_blocks, free - per_version);
    let c = day(a, 3);
    assert_eq!(l.expire_by_lifecycle(c, 100).await.unwrap(), 1);
    let vs = versions(&l, "k");
    assert_eq!(vs.len(), 1);
    assert!(vs[0].1);
    assert_eq!(l.usage().free_blocks, free);
    // Without ExpiredObjectDeleteMarker the lone marker stays; with it, it goes.
    assert_eq!(l.expire_by_lifecycle(c, 100).await.unwrap(), 0);
    let mut markers = rule("");
    markers.expired_object_delete_marker = true;
    l.set_bucket_lifecycle("a", "bkt", vec![r, markers])
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(c, 100).await.unwrap(), 1);
    assert!(versions(&l, "k").is_empty());
    assert!(matches!(
        l.head_object("a", "bkt", "k"),
        Err(ObjectError::NoSuchKey(_))
    ));
    assert_eq!(
        l.engine().stats().accesses,
        accesses,
        "expiration touches no block"
    );
}

#[tokio::test]
async fn newer_noncurrent_versions_are_kept_whatever_their_age() {
    let l = layer(256);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let mut vids = Vec::new();
    for _ in 0..4 {
        vids.push(put(&l, "k", LockRequest::default()).await.version_id);
    }
    let t0 = now_ms();
    let mut r = rule("");
    r.noncurrent_days = 1;
    r.newer_noncurrent_versions = 2;
    l.set_bucket_lifecycle("a", "bkt", vec![r]).await.unwrap();
    assert_eq!(l.expire_by_lifecycle(day(t0, 1), 100).await.unwrap(), 1);
    let left: Vec<String> = versions(&l, "k").into_iter().map(|v| v.0).collect();
    assert_eq!(
        left,
        vec![vids[3].clone(), vids[2].clone(), vids[1].clone()]
    );
    assert_eq!(l.expire_by_lifecycle(day(t0, 9), 100).await.unwrap(), 0);
}

#[tokio::test]
async fn lifecycle_never_removes_a_locked_version() {
    let l = layer(256);
    l.create_bucket_with_lock("a", "bkt").await.unwrap();
    let held = put(
        &l,
        "k",
        LockRequest {
            legal_hold: Some(true),
            ..Default::default()
        },
    )
    .await;
    let until = now_ms() + 100 * DAY;
    let retained = put(
        &l,
        "k",
        LockRequest {
            retention: Some(Retention {
                mode: RetentionMode::Governance,
                until_ms: until,
            }),
            ..Default::default()
        },
    )
    .await;
    let plain = put(&l, "k", LockRequest::default()).await;
    let t0 = now_ms();
    let mut r = rule("");
    r.expiration_days = 1;
    r.noncurrent_days = 1;
    l.set_bucket_lifecycle("a", "bkt", vec![r]).await.unwrap();
    let t = day(t0, 10);
    // The current version gets a delete marker; both locked versions stay.
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 1);
    let labels = |l: &ObjectLayer| -> Vec<String> {
        versions(l, "k").into_iter().skip(1).map(|v| v.0).collect()
    };
    assert_eq!(
        labels(&l),
        vec![
            plain.version_id.clone(),
            retained.version_id.clone(),
            held.version_id.clone()
        ]
    );
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 0);
    // Once the hold is lifted that version goes; the retained one stays
    // until its date has passed.
    l.set_object_legal_hold("a", ("bkt", "k"), Some(&held.version_id), false)
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 1);
    assert_eq!(
        labels(&l),
        vec![plain.version_id.clone(), retained.version_id.clone()]
    );
    assert_eq!(l.expire_by_lifecycle(until - 1, 100).await.unwrap(), 1);
    assert_eq!(labels(&l), vec![retained.version_id.clone()]);
    assert_eq!(l.expire_by_lifecycle(until, 100).await.unwrap(), 1);
    assert!(labels(&l).is_empty());
}

#[tokio::test]
async fn expiration_rules_s3_refuses_are_refused() {
    let l = layer(64);
    l.create_bucket("a", "bkt").await.unwrap();
    let midnight = day(now_ms(), 3);
    let mut both = rule("");
    both.expiration_days = 1;
    both.expiration_date_ms = midnight;
    let mut marker_and_days = rule("");
    marker_and_days.expiration_days = 1;
    marker_and_days.expired_object_delete_marker = true;
    let mut not_midnight = rule("");
    not_midnight.expiration_date_ms = midnight + 1;
    let mut newer_alone = rule("");
    newer_alone.newer_noncurrent_versions = 2;
    let mut too_many = rule("");
    too_many.noncurrent_days = 1;
    too_many.newer_noncurrent_versions = MAX_NEWER_NONCURRENT + 1;
    for bad in [both, marker_and_days, not_midnight, newer_alone, too_many] {
        assert!(
            matches!(
                l.set_bucket_lifecycle("a", "bkt", vec![bad.clone()]).await,
                Err(ObjectError::InvalidArgument(_))
            ),
            "{bad:?}"
        );
    }
    assert!(l.bucket_lifecycle("a", "bkt").unwrap().is_empty());
    let mut ok = rule("x/");
    ok.expiration_date_ms = midnight;
    ok.noncurrent_days = 4;
    ok.newer_noncurrent_versions = 1;
    l.set_bucket_lifecycle("a", "bkt", vec![ok.clone()])
        .await
        .unwrap();
    assert_eq!(l.bucket_lifecycle("a", "bkt").unwrap(), vec![ok]);
}
