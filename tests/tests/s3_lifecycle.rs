//! Bucket lifecycle configurations and the volume's fullness headers through the
//! S3 API, with a real client (aws-sdk-s3) against the proxy over TCP.

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
    LifecycleExpiration, LifecycleRule, LifecycleRuleFilter, Tag,
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

    // Rules this proxy cannot apply are refused, naming the element, and the
    // stored configuration stays as it was.
    let expiring = LifecycleRule::builder()
        .id("exp")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("logs/").build())
        .expiration(LifecycleExpiration::builder().days(30).build())
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
    for (rule, element) in [(expiring, "Expiration"), (tagged, "Filter/Tag")] {
        let e = c
            .put_bucket_lifecycle_configuration()
            .bucket("bkt")
            .lifecycle_configuration(config(vec![abort_rule("ok", "", 2), rule]))
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(e.code(), Some("NotImplemented"), "{e:?}");
        let message = e.message().unwrap_or_default();
        assert!(message.contains(element), "{message}");
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
