//! Bucket versioning through the S3 API, with a real client (aws-sdk-s3)
//! against the proxy over TCP: version ids, reads and deletes by version,
//! delete markers, listing versions, restoring by copy, the null version of a
//! suspended bucket, and the blocks of deleted versions freed; object tags
//! (per version) and bucket tags.

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier, Tag,
    Tagging, TaggingDirective, VersioningConfiguration,
};
use aws_sdk_s3::Client;

use oram_tests::s3proxy::S3Proxy as Proxy;

/// Records the named response headers of every answer.
#[derive(Debug)]
struct Headers(&'static [&'static str], Arc<Mutex<Vec<Option<String>>>>);

impl Intercept for Headers {
    fn name(&self) -> &'static str {
        "record headers"
    }

    fn read_before_deserialization(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_s3::error::BoxError> {
        for name in self.0 {
            let v = ctx.response().headers().get(*name).map(str::to_string);
            self.1.lock().unwrap().push(v);
        }
        Ok(())
    }
}

/// The volume's free bytes, from HeadBucket's fullness header.
async fn free_bytes(c: &Client) -> u64 {
    let seen = Arc::new(Mutex::new(Vec::new()));
    c.head_bucket()
        .bucket("bkt")
        .customize()
        .interceptor(Headers(&["x-oram-volume-free-bytes"], seen.clone()))
        .send()
        .await
        .unwrap();
    let v = seen.lock().unwrap()[0].clone().expect("free header");
    v.parse().unwrap()
}

async fn set_versioning(c: &Client, status: BucketVersioningStatus) {
    c.put_bucket_versioning()
        .bucket("bkt")
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .unwrap();
}

async fn put(c: &Client, key: &str, body: &[u8]) -> Option<String> {
    c.put_object()
        .bucket("bkt")
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .unwrap()
        .version_id
}

async fn get(c: &Client, key: &str, version: Option<&str>) -> Vec<u8> {
    c.get_object()
        .bucket("bkt")
        .key(key)
        .set_version_id(version.map(str::to_string))
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_delete_markers_listing_and_restore_by_copy() {
    let p = Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    // Never versioned: no status, no version ids.
    let v = c
        .get_bucket_versioning()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status, None);
    assert_eq!(put(c, "plain", b"x").await, None);
    c.delete_object()
        .bucket("bkt")
        .key("plain")
        .send()
        .await
        .unwrap();
    let empty = free_bytes(c).await;

    set_versioning(c, BucketVersioningStatus::Enabled).await;
    let v = c
        .get_bucket_versioning()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status, Some(BucketVersioningStatus::Enabled));
    let (d1, d2) = (vec![1u8; 50_000], vec![2u8; 30_000]);
    let v1 = put(c, "k", &d1).await.expect("version id");
    let v2 = put(c, "k", &d2).await.expect("version id");
    assert_ne!(v1, v2);
    assert_eq!(get(c, "k", None).await, d2);
    assert_eq!(get(c, "k", Some(&v1)).await, d1);
    let h = c
        .head_object()
        .bucket("bkt")
        .key("k")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    assert_eq!(h.version_id.as_deref(), Some(v1.as_str()));
    assert_eq!(h.content_length, Some(50_000));
    // Both versions hold space.
    assert!(free_bytes(c).await <= empty - 80_000);

    // A DELETE makes a delete marker; the key then reads as absent.
    let d = c
        .delete_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(d.delete_marker, Some(true));
    let marker = d.version_id.expect("marker version");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let e = c
        .get_object()
        .bucket("bkt")
        .key("k")
        .customize()
        .interceptor(Headers(
            &["x-amz-delete-marker", "x-amz-version-id"],
            seen.clone(),
        ))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NoSuchKey"));
    assert_eq!(
        *seen.lock().unwrap(),
        vec![Some("true".to_string()), Some(marker.clone())]
    );
    let e = c
        .get_object()
        .bucket("bkt")
        .key("k")
        .version_id(&marker)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(405));
    let e = c
        .get_object()
        .bucket("bkt")
        .key("k")
        .version_id(format!("{:032x}", 7))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NoSuchVersion"));
    let cur = c.list_objects_v2().bucket("bkt").send().await.unwrap();
    assert!(cur.contents().is_empty());

    let l = c.list_object_versions().bucket("bkt").send().await.unwrap();
    let versions: Vec<_> = l
        .versions()
        .iter()
        .map(|v| (v.version_id().unwrap(), v.is_latest(), v.size()))
        .collect();
    assert_eq!(
        versions,
        vec![
            (v2.as_str(), Some(false), Some(30_000)),
            (v1.as_str(), Some(false), Some(50_000)),
        ]
    );
    let markers: Vec<_> = l
        .delete_markers()
        .iter()
        .map(|m| (m.version_id().unwrap(), m.is_latest()))
        .collect();
    assert_eq!(markers, vec![(marker.as_str(), Some(true))]);

    // Restore v1 by copying it onto its key.
    let cp = c
        .copy_object()
        .bucket("bkt")
        .key("k")
        .copy_source(format!("bkt/k?versionId={v1}"))
        .send()
        .await
        .unwrap();
    assert_eq!(cp.copy_source_version_id.as_deref(), Some(v1.as_str()));
    let v3 = cp.version_id.expect("new version");
    assert_eq!(get(c, "k", None).await, d1);

    // Delete every version for good: the space comes back.
    let l = c.list_object_versions().bucket("bkt").send().await.unwrap();
    let mut ids: Vec<ObjectIdentifier> = Vec::new();
    for v in l.versions() {
        ids.push(
            ObjectIdentifier::builder()
                .key("k")
                .version_id(v.version_id().unwrap())
                .build()
                .unwrap(),
        );
    }
    for m in l.delete_markers() {
        ids.push(
            ObjectIdentifier::builder()
                .key("k")
                .version_id(m.version_id().unwrap())
                .build()
                .unwrap(),
        );
    }
    assert_eq!(ids.len(), 4);
    assert!(ids.iter().any(|i| i.version_id() == Some(v3.as_str())));
    let out = c
        .delete_objects()
        .bucket("bkt")
        .delete(Delete::builder().set_objects(Some(ids)).build().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(out.deleted().len(), 4, "{:?}", out.errors());
    assert_eq!(
        out.deleted()
            .iter()
            .filter(|d| d.delete_marker() == Some(true))
            .count(),
        1
    );
    let removed_marker = out
        .deleted()
        .iter()
        .find(|d| d.delete_marker() == Some(true))
        .unwrap();
    assert_eq!(
        removed_marker.delete_marker_version_id(),
        Some(marker.as_str())
    );
    assert_eq!(removed_marker.version_id(), Some(marker.as_str()));
    assert_eq!(free_bytes(c).await, empty);
    let l = c.list_object_versions().bucket("bkt").send().await.unwrap();
    assert!(l.versions().is_empty() && l.delete_markers().is_empty());
    c.delete_bucket().bucket("bkt").send().await.unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_buckets_write_the_null_version_and_multipart_makes_versions() {
    let p = Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    set_versioning(c, BucketVersioningStatus::Enabled).await;
    let v1 = put(c, "k", b"one").await.unwrap();
    // A multipart upload makes a version too.
    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket("bkt")
        .key("k")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from(b"two".to_vec()))
        .send()
        .await
        .unwrap();
    let done = c
        .complete_multipart_upload()
        .bucket("bkt")
        .key("k")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let v2 = done.version_id.expect("version id");
    assert_ne!(v1, v2);

    set_versioning(c, BucketVersioningStatus::Suspended).await;
    let v = c
        .get_bucket_versioning()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status, Some(BucketVersioningStatus::Suspended));
    // The null version is not named in a PUT's answer (as AWS answers it).
    assert_eq!(put(c, "k", b"three").await, None);
    assert_eq!(put(c, "k", b"four").await, None);
    assert_eq!(get(c, "k", Some("null")).await, b"four");
    let l = c.list_object_versions().bucket("bkt").send().await.unwrap();
    let ids: Vec<_> = l
        .versions()
        .iter()
        .map(|v| v.version_id().unwrap())
        .collect();
    assert_eq!(ids, vec!["null", v2.as_str(), v1.as_str()]);
    assert_eq!(get(c, "k", Some(&v1)).await, b"one");
    p.stop().await;
}

fn tagging(pairs: &[(&str, &str)]) -> Tagging {
    Tagging::builder()
        .set_tag_set(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build().unwrap())
                .collect(),
        ))
        .build()
        .unwrap()
}

async fn object_tags(c: &Client, key: &str, version: Option<&str>) -> Vec<(String, String)> {
    c.get_object_tagging()
        .bucket("bkt")
        .key(key)
        .set_version_id(version.map(str::to_string))
        .send()
        .await
        .unwrap()
        .tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_tags_per_version_and_bucket_tags_within_aws_limits() {
    let p = Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    set_versioning(c, BucketVersioningStatus::Enabled).await;
    let v1 = c
        .put_object()
        .bucket("bkt")
        .key("k")
        .tagging("project=oram&owner=a%20b")
        .body(ByteStream::from(b"one".to_vec()))
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let g = c.get_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(g.tag_count, Some(2));
    let seen = Arc::new(Mutex::new(Vec::new()));
    c.head_object()
        .bucket("bkt")
        .key("k")
        .customize()
        .interceptor(Headers(&["x-amz-tagging-count"], seen.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![Some("2".to_string())]);
    assert_eq!(
        object_tags(c, "k", None).await,
        vec![
            ("owner".to_string(), "a b".to_string()),
            ("project".to_string(), "oram".to_string())
        ]
    );
    let v2 = put(c, "k", b"two").await.unwrap();
    assert!(object_tags(c, "k", None).await.is_empty());
    let g = c.get_object().bucket("bkt").key("k").send().await.unwrap();
    assert_eq!(g.tag_count, None);
    // Tag the old version by id: the current one keeps none.
    let out = c
        .put_object_tagging()
        .bucket("bkt")
        .key("k")
        .version_id(&v1)
        .tagging(tagging(&[("old", "yes")]))
        .send()
        .await
        .unwrap();
    assert_eq!(out.version_id.as_deref(), Some(v1.as_str()));
    assert_eq!(
        object_tags(c, "k", Some(&v1)).await,
        vec![("old".to_string(), "yes".to_string())]
    );
    assert!(object_tags(c, "k", Some(&v2)).await.is_empty());
    // Copy with REPLACE tags, then delete them.
    c.copy_object()
        .bucket("bkt")
        .key("copy")
        .copy_source(format!("bkt/k?versionId={v1}"))
        .tagging_directive(TaggingDirective::Replace)
        .tagging("new=1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        object_tags(c, "copy", None).await,
        vec![("new".to_string(), "1".to_string())]
    );
    c.delete_object_tagging()
        .bucket("bkt")
        .key("copy")
        .send()
        .await
        .unwrap();
    assert!(object_tags(c, "copy", None).await.is_empty());

    // AWS's limits: 10 tags, keys of 128 and values of 256 characters.
    let eleven: Vec<(String, String)> = (0..11).map(|i| (format!("k{i}"), "v".into())).collect();
    let refs: Vec<(&str, &str)> = eleven
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let long_key = "k".repeat(129);
    let long_value = "v".repeat(257);
    for bad in [
        tagging(&refs),
        tagging(&[(long_key.as_str(), "v")]),
        tagging(&[("k", long_value.as_str())]),
    ] {
        let e = c
            .put_object_tagging()
            .bucket("bkt")
            .key("k")
            .tagging(bad)
            .send()
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some("InvalidTag"));
    }
    let e = c
        .put_object()
        .bucket("bkt")
        .key("k2")
        .tagging(format!("{long_key}=v"))
        .body(ByteStream::from(b"x".to_vec()))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidTag"));

    // Bucket tags.
    let e = c
        .get_bucket_tagging()
        .bucket("bkt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NoSuchTagSet"));
    c.put_bucket_tagging()
        .bucket("bkt")
        .tagging(tagging(&[("team", "storage")]))
        .send()
        .await
        .unwrap();
    let t = c.get_bucket_tagging().bucket("bkt").send().await.unwrap();
    assert_eq!(t.tag_set()[0].key(), "team");
    c.delete_bucket_tagging()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert!(c.get_bucket_tagging().bucket("bkt").send().await.is_err());
    p.stop().await;
}
