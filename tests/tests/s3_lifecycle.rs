//! Bucket lifecycle configurations and the volume's fullness headers through the
//! S3 API, with a real client (aws-sdk-s3) against the proxy over TCP.

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketVersioningStatus,
    ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator,
    LifecycleRuleFilter, NoncurrentVersionExpiration, NoncurrentVersionTransition, Tag, Transition,
    TransitionStorageClass, VersioningConfiguration,
};

use oram_tests::s3proxy::S3Proxy as Proxy;

fn abort_rule(id: &str, prefix: &str, days: i32) -> LifecycleRule {
    LifecycleRule::builder()
        .id(id)
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
        .abort_incomplete_multipart_upload(
            AbortIncompleteMultipartUpload::builder()
                .days_after_initiation(days)
                .build(),
        )
        .build()
        .unwrap()
}

fn config(rules: Vec<LifecycleRule>) -> BucketLifecycleConfiguration {
    BucketLifecycleConfiguration::builder()
        .set_rules(Some(rules))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_configurations_are_put_read_and_deleted() {
    let p = Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let e = c
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(e.code(), Some("NoSuchLifecycleConfiguration"));
    let rules = vec![abort_rule("tmp", "tmp/", 3), abort_rule("all", "", 10)];
    c.put_bucket_lifecycle_configuration()
        .bucket("bkt")
        .lifecycle_configuration(config(rules.clone()))
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), rules.as_slice());

    // Rules this proxy cannot apply (transitions: the ORAM has no storage
    // classes) or S3 refuses (an upload abort with a tag filter) are refused,
    // and the stored configuration stays as it was.
    let transition = LifecycleRule::builder()
        .id("cold")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("logs/").build())
        .transitions(
            Transition::builder()
                .days(30)
                .storage_class(TransitionStorageClass::Glacier)
                .build(),
        )
        .build()
        .unwrap();
    let tagged = LifecycleRule::builder()
        .id("tag")
        .status(ExpirationStatus::Enabled)
        .filter(
            LifecycleRuleFilter::builder()
                .tag(Tag::builder().key("k").value("v").build().unwrap())
                .build(),
        )
        .abort_incomplete_multipart_upload(
            AbortIncompleteMultipartUpload::builder()
                .days_after_initiation(1)
                .build(),
        )
        .build()
        .unwrap();
    for (rule, code, words) in [
        (
            transition,
            "NotImplemented",
            &["Transition", "storage classes"][..],
        ),
        (
            tagged,
            "InvalidRequest",
            &["AbortIncompleteMultipartUpload cannot be specified with Tags."][..],
        ),
    ] {
        let e = c
            .put_bucket_lifecycle_configuration()
            .bucket("bkt")
            .lifecycle_configuration(config(vec![abort_rule("ok", "", 2), rule]))
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(e.code(), Some(code), "{e:?}");
        let message = e.message().unwrap_or_default();
        for w in words {
            assert!(message.contains(w), "{message}");
        }
    }
    let e = c
        .put_bucket_lifecycle_configuration()
        .bucket("bkt")
        .lifecycle_configuration(config(vec![abort_rule("zero", "", 0)]))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(e.code(), Some("InvalidArgument"), "{e:?}");
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), rules.as_slice());

    c.delete_bucket_lifecycle()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    let e = c
        .get_bucket_lifecycle_configuration()
        .bucket("bkt")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(e.code(), Some("NoSuchLifecycleConfiguration"));
    let e = c
        .get_bucket_lifecycle_configuration()
        .bucket("nope")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(e.code(), Some("NoSuchBucket"));
    p.stop().await;
}

fn rule(id: &str, prefix: &str) -> aws_sdk_s3::types::builders::LifecycleRuleBuilder {
    LifecycleRule::builder()
        .id(id)
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
}

const DAY_MS: i64 = 24 * 3600 * 1000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiration_rules_expire_objects_versions_and_lone_delete_markers() {
    let p = Proxy::start().await;
    let c = &p.client;
    let layer = p.server().layer();
    c.create_bucket().bucket("plain").send().await.unwrap();
    let plain = vec![
        rule("tmp", "tmp/")
            .expiration(LifecycleExpiration::builder().days(1).build())
            .build()
            .unwrap(),
        // 2100-01-01, midnight UTC.
        rule("later", "archive/")
            .expiration(
                LifecycleExpiration::builder()
                    .date(DateTime::from_secs(4_102_444_800))
                    .build(),
            )
            .build()
            .unwrap(),
    ];
    c.put_bucket_lifecycle_configuration()
        .bucket("plain")
        .lifecycle_configuration(config(plain.clone()))
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("plain")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), plain.as_slice());
    for key in ["tmp/a", "keep/b", "archive/c"] {
        c.put_object()
            .bucket("plain")
            .key(key)
            .body(vec![1u8; 5000].into())
            .send()
            .await
            .unwrap();
    }
    // The sweep the purge loop runs, three days from now.
    let t = now_ms() + 3 * DAY_MS;
    assert_eq!(layer.expire_by_lifecycle(t, 1000).await.unwrap(), 1);
    let e = c
        .head_object()
        .bucket("plain")
        .key("tmp/a")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_not_found(), "{e:?}");
    for key in ["keep/b", "archive/c"] {
        c.head_object()
            .bucket("plain")
            .key(key)
            .send()
            .await
            .unwrap();
    }

    c.create_bucket().bucket("ver").send().await.unwrap();
    c.put_bucket_versioning()
        .bucket("ver")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let rules = vec![
        rule("expire", "")
            .expiration(LifecycleExpiration::builder().days(1).build())
            .noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder()
                    .noncurrent_days(1)
                    .build(),
            )
            .build()
            .unwrap(),
        rule("markers", "")
            .expiration(
                LifecycleExpiration::builder()
                    .expired_object_delete_marker(true)
                    .build(),
            )
            .build()
            .unwrap(),
    ];
    c.put_bucket_lifecycle_configuration()
        .bucket("ver")
        .lifecycle_configuration(config(rules.clone()))
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("ver")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), rules.as_slice());
    let mut vids = Vec::new();
    for n in 0..2u8 {
        let out = c
            .put_object()
            .bucket("ver")
            .key("k")
            .body(vec![n; 5000].into())
            .send()
            .await
            .unwrap();
        vids.push(out.version_id().unwrap().to_string());
    }
    // The current version gets a delete marker; the older one, noncurrent
    // since the second was written, goes.
    assert_eq!(layer.expire_by_lifecycle(t, 1000).await.unwrap(), 1);
    let list = c.list_object_versions().bucket("ver").send().await.unwrap();
    assert_eq!(list.delete_markers().len(), 1);
    assert!(list.delete_markers()[0].is_latest().unwrap());
    let versions: Vec<&str> = list
        .versions()
        .iter()
        .map(|v| v.version_id().unwrap())
        .collect();
    assert_eq!(versions, vec![vids[1].as_str()]);
    // Three days later the second version, noncurrent since the marker, goes,
    // and with it the marker, then the only version left.
    assert_eq!(
        layer
            .expire_by_lifecycle(t + 3 * DAY_MS, 1000)
            .await
            .unwrap(),
        1
    );
    let list = c.list_object_versions().bucket("ver").send().await.unwrap();
    assert!(list.versions().is_empty(), "{list:?}");
    assert!(list.delete_markers().is_empty(), "{list:?}");
    p.stop().await;
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build().unwrap()
}

/// A rule with filter `f` expiring current versions a day after they are written.
fn filtered(id: &str, f: LifecycleRuleFilter) -> LifecycleRule {
    LifecycleRule::builder()
        .id(id)
        .status(ExpirationStatus::Enabled)
        .filter(f)
        .expiration(LifecycleExpiration::builder().days(1).build())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_and_size_filters_are_kept_as_given_and_select_what_expires() {
    let p = Proxy::start().await;
    let c = &p.client;
    let layer = p.server().layer();
    c.create_bucket().bucket("filters").send().await.unwrap();
    let and = LifecycleRuleAndOperator::builder()
        .prefix("logs/")
        .tags(tag("env", "tmp"))
        .tags(tag("team", "x"))
        .object_size_greater_than(10)
        .object_size_less_than(5000)
        .build();
    let rules = vec![
        filtered(
            "tag",
            LifecycleRuleFilter::builder().tag(tag("k", "v")).build(),
        ),
        filtered("and", LifecycleRuleFilter::builder().and(and).build()),
        filtered(
            "big",
            LifecycleRuleFilter::builder()
                .object_size_greater_than(1000)
                .build(),
        ),
        LifecycleRule::builder()
            .id("small")
            .status(ExpirationStatus::Disabled)
            .filter(
                LifecycleRuleFilter::builder()
                    .object_size_less_than(2)
                    .build(),
            )
            .noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder()
                    .noncurrent_days(1)
                    .build(),
            )
            .build()
            .unwrap(),
        abort_rule("uploads", "", 3),
    ];
    c.put_bucket_lifecycle_configuration()
        .bucket("filters")
        .lifecycle_configuration(config(rules.clone()))
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("filters")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), rules.as_slice());

    // (key, size, tags, expires)
    let objects: [(&str, usize, &str, bool); 6] = [
        ("tagged", 100, "k=v&other=1", true),
        ("valued", 100, "k=w", false),
        ("logs/both", 100, "env=tmp&team=x", true),
        ("logs/one", 100, "env=tmp", false),
        ("plain", 100, "", false),
        ("large", 2000, "", true),
    ];
    for (key, size, tagging, _) in objects {
        c.put_object()
            .bucket("filters")
            .key(key)
            .tagging(tagging)
            .body(vec![3u8; size].into())
            .send()
            .await
            .unwrap();
    }
    let t = now_ms() + 3 * DAY_MS;
    assert_eq!(layer.expire_by_lifecycle(t, 1000).await.unwrap(), 3);
    for (key, _, _, expires) in objects {
        let head = c.head_object().bucket("filters").key(key).send().await;
        assert_eq!(head.is_err(), expires, "{key}: {head:?}");
    }

    // Filters S3 refuses, with S3's codes; nothing is stored.
    let marker = LifecycleRule::builder()
        .id("m")
        .status(ExpirationStatus::Enabled)
        .filter(
            LifecycleRuleFilter::builder()
                .object_size_less_than(9)
                .build(),
        )
        .expiration(
            LifecycleExpiration::builder()
                .expired_object_delete_marker(true)
                .build(),
        )
        .build()
        .unwrap();
    let and = |gt: i64, lt: i64, tags: Vec<Tag>| {
        LifecycleRuleFilter::builder()
            .and(
                LifecycleRuleAndOperator::builder()
                    .object_size_greater_than(gt)
                    .object_size_less_than(lt)
                    .set_tags(Some(tags))
                    .build(),
            )
            .build()
    };
    let noncurrent_transition = LifecycleRule::builder()
        .id("nt")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("").build())
        .noncurrent_version_transitions(
            NoncurrentVersionTransition::builder()
                .noncurrent_days(30)
                .storage_class(TransitionStorageClass::Glacier)
                .build(),
        )
        .build()
        .unwrap();
    let refused = [
        (
            marker,
            "InvalidRequest",
            "ExpiredObjectDeleteMarker cannot be specified with Object Size.",
        ),
        (
            filtered("order", and(100, 50, vec![])),
            "InvalidRequest",
            "'ObjectSizeLessThan' has to be a value greater than 'ObjectSizeGreaterThan'.",
        ),
        (
            filtered("negative", and(-1, 50, vec![])),
            "InvalidRequest",
            "ObjectSizeGreaterThan",
        ),
        (
            filtered("twice", and(1, 50, vec![tag("a", "1"), tag("a", "2")])),
            "InvalidRequest",
            "Duplicate Tag Keys are not allowed.",
        ),
        (
            filtered(
                "two",
                LifecycleRuleFilter::builder()
                    .prefix("logs/")
                    .tag(tag("k", "v"))
                    .build(),
            ),
            "MalformedXML",
            "And",
        ),
        (
            noncurrent_transition,
            "NotImplemented",
            "NoncurrentVersionTransition",
        ),
    ];
    for (rule, code, words) in refused {
        let e = c
            .put_bucket_lifecycle_configuration()
            .bucket("filters")
            .lifecycle_configuration(config(vec![rule.clone()]))
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(e.code(), Some(code), "{rule:?}: {e:?}");
        let message = e.message().unwrap_or_default();
        assert!(message.contains(words), "{message}");
    }
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("filters")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), rules.as_slice());
    p.stop().await;
}

/// The values of the fullness headers of the answers seen.
type Seen = Arc<Mutex<Vec<(String, Option<u64>)>>>;

/// The fullness headers' names, as docs/s3.md gives them.
const FULLNESS: [&str; 2] = ["x-oram-volume-capacity-bytes", "x-oram-volume-free-bytes"];

/// Records the fullness headers of every answer, as a client reading raw
/// response headers does.
#[derive(Debug)]
struct Record(Seen);

impl Intercept for Record {
    fn name(&self) -> &'static str {
        "record fullness headers"
    }

    fn read_before_deserialization(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_s3::error::BoxError> {
        for name in FULLNESS {
            let v = ctx
                .response()
                .headers()
                .get(name)
                .and_then(|v| v.parse().ok());
            self.0.lock().unwrap().push((name.to_string(), v));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_bucket_and_list_buckets_carry_the_volumes_fullness() {
    let p = Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let seen: Seen = Arc::default();
    c.head_bucket()
        .bucket("bkt")
        .customize()
        .interceptor(Record(seen.clone()))
        .send()
        .await
        .unwrap();
    let head = std::mem::take(&mut *seen.lock().unwrap());
    let capacity = head[0].1.expect("capacity header");
    let free = head[1].1.expect("free header");
    assert!(free <= capacity && capacity > 0, "{head:?}");
    // An object of 100 000 bytes takes at least that much of the free space.
    c.put_object()
        .bucket("bkt")
        .key("k")
        .body(vec![7u8; 100_000].into())
        .send()
        .await
        .unwrap();
    c.list_buckets()
        .customize()
        .interceptor(Record(seen.clone()))
        .send()
        .await
        .unwrap();
    let list = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(list[0].1, Some(capacity));
    assert!(
        list[1].1.expect("free header") <= free - 100_000,
        "{list:?}"
    );
    p.stop().await;
}
