//! S3 object lock through the S3 API, with a real client (aws-sdk-s3) against
//! the proxy over TCP: lock configuration and its preconditions, retention
//! (governance with and without the bypass, compliance), legal hold, the
//! default retention of new objects, and the headers of PUT and HEAD.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    BucketVersioningStatus, DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled,
    ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockMode, ObjectLockRetention,
    ObjectLockRetentionMode, ObjectLockRule, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use oram_tests::s3proxy::S3Proxy;

const DAY: i64 = 24 * 3600;

fn in_days(days: i64) -> DateTime {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    DateTime::from_secs(now + days * DAY)
}

async fn put(c: &Client, bucket: &str, key: &str) -> String {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(b"locked data"))
        .send()
        .await
        .unwrap()
        .version_id
        .expect("a versioned bucket")
}

async fn retain(
    c: &Client,
    key: &str,
    vid: &str,
    mode: ObjectLockRetentionMode,
    days: i64,
    bypass: bool,
) -> Result<(), String> {
    c.put_object_retention()
        .bucket("locked")
        .key(key)
        .version_id(vid)
        .retention(
            ObjectLockRetention::builder()
                .mode(mode)
                .retain_until_date(in_days(days))
                .build(),
        )
        .bypass_governance_retention(bypass)
        .send()
        .await
        .map(drop)
        .map_err(|e| e.code().unwrap_or("?").to_string())
}

async fn delete_version(c: &Client, key: &str, vid: &str, bypass: bool) -> Result<(), String> {
    c.delete_object()
        .bucket("locked")
        .key(key)
        .version_id(vid)
        .bypass_governance_retention(bypass)
        .send()
        .await
        .map(drop)
        .map_err(|e| e.code().unwrap_or("?").to_string())
}

fn lock_config(rule: Option<ObjectLockRule>) -> ObjectLockConfiguration {
    ObjectLockConfiguration::builder()
        .object_lock_enabled(ObjectLockEnabled::Enabled)
        .set_rule(rule)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_lock_configuration_needs_a_versioned_bucket() {
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("plain").send().await.unwrap();
    let e = c
        .put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(lock_config(None))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidBucketState"));
    let e = c
        .get_object_lock_configuration()
        .bucket("plain")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("ObjectLockConfigurationNotFoundError"));
    // Lock headers are refused where object lock is not enabled.
    let e = c
        .put_object()
        .bucket("plain")
        .key("k")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidRequest"));
    // Once versioned it can be enabled; versioning then cannot be suspended.
    c.put_bucket_versioning()
        .bucket("plain")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    c.put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(lock_config(None))
        .send()
        .await
        .unwrap();
    let e = c
        .put_bucket_versioning()
        .bucket("plain")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidBucketState"));
    // Days and Years together are malformed.
    let both = ObjectLockRule::builder()
        .default_retention(
            DefaultRetention::builder()
                .mode(ObjectLockRetentionMode::Governance)
                .days(1)
                .years(1)
                .build(),
        )
        .build();
    let e = c
        .put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(lock_config(Some(both)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("MalformedXML"));
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_legal_hold_protect_versions_through_s3() {
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket()
        .bucket("locked")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let v = c
        .get_bucket_versioning()
        .bucket("locked")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status, Some(BucketVersioningStatus::Enabled));

    // Governance: refused without the bypass, allowed with it.
    let gov = put(c, "locked", "g").await;
    retain(c, "g", &gov, ObjectLockRetentionMode::Governance, 1, false)
        .await
        .unwrap();
    assert_eq!(
        delete_version(c, "g", &gov, false).await,
        Err("AccessDenied".into())
    );
    // A plain DELETE only adds a delete marker.
    let d = c
        .delete_object()
        .bucket("locked")
        .key("g")
        .send()
        .await
        .unwrap();
    assert_eq!(d.delete_marker, Some(true));
    assert_eq!(
        retain(c, "g", &gov, ObjectLockRetentionMode::Governance, 0, false).await,
        Err("InvalidArgument".into()),
        "a date that is not in the future"
    );
    delete_version(c, "g", &gov, true).await.unwrap();

    // Compliance: no bypass, no shortening, no change of mode.
    let comp = put(c, "locked", "c").await;
    retain(c, "c", &comp, ObjectLockRetentionMode::Compliance, 2, false)
        .await
        .unwrap();
    let r = c
        .get_object_retention()
        .bucket("locked")
        .key("c")
        .send()
        .await
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(r.mode, Some(ObjectLockRetentionMode::Compliance));
    assert_eq!(
        delete_version(c, "c", &comp, true).await,
        Err("AccessDenied".into())
    );
    assert_eq!(
        retain(c, "c", &comp, ObjectLockRetentionMode::Compliance, 1, true).await,
        Err("AccessDenied".into())
    );
    assert_eq!(
        retain(c, "c", &comp, ObjectLockRetentionMode::Governance, 3, true).await,
        Err("AccessDenied".into())
    );
    retain(c, "c", &comp, ObjectLockRetentionMode::Compliance, 3, false)
        .await
        .unwrap();

    // Legal hold, set on PUT: blocks the delete until it is removed.
    let held = c
        .put_object()
        .bucket("locked")
        .key("h")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .body(ByteStream::from_static(b"held"))
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let head = c
        .head_object()
        .bucket("locked")
        .key("h")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.object_lock_legal_hold_status,
        Some(ObjectLockLegalHoldStatus::On)
    );
    assert_eq!(
        delete_version(c, "h", &held, true).await,
        Err("AccessDenied".into())
    );
    c.put_object_legal_hold()
        .bucket("locked")
        .key("h")
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::Off)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let status = c
        .get_object_legal_hold()
        .bucket("locked")
        .key("h")
        .send()
        .await
        .unwrap()
        .legal_hold
        .unwrap()
        .status;
    assert_eq!(status, Some(ObjectLockLegalHoldStatus::Off));
    delete_version(c, "h", &held, false).await.unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_retention_applies_to_new_objects() {
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket()
        .bucket("locked")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let rule = ObjectLockRule::builder()
        .default_retention(
            DefaultRetention::builder()
                .mode(ObjectLockRetentionMode::Governance)
                .days(1)
                .build(),
        )
        .build();
    c.put_object_lock_configuration()
        .bucket("locked")
        .object_lock_configuration(lock_config(Some(rule)))
        .send()
        .await
        .unwrap();
    let got = c
        .get_object_lock_configuration()
        .bucket("locked")
        .send()
        .await
        .unwrap()
        .object_lock_configuration
        .unwrap();
    let d = got.rule.unwrap().default_retention.unwrap();
    assert_eq!(
        (d.mode, d.days, d.years),
        (Some(ObjectLockRetentionMode::Governance), Some(1), None)
    );
    let vid = put(c, "locked", "k").await;
    let head = c
        .head_object()
        .bucket("locked")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(head.object_lock_mode, Some(ObjectLockMode::Governance));
    let until = head.object_lock_retain_until_date.unwrap().secs();
    let expect = in_days(1).secs();
    assert!(
        (expect - 60..=expect).contains(&until),
        "{until} vs {expect}"
    );
    assert_eq!(
        delete_version(c, "k", &vid, false).await,
        Err("AccessDenied".into())
    );
    // Headers on PUT override the default.
    c.put_object()
        .bucket("locked")
        .key("k2")
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(in_days(5))
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let r = c
        .get_object_retention()
        .bucket("locked")
        .key("k2")
        .send()
        .await
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(r.mode, Some(ObjectLockRetentionMode::Compliance));
    p.stop().await;
}
