//! Public access block through the S3 API, with a real client (aws-sdk-s3)
//! against the proxy over TCP: the configuration stored, read and deleted,
//! and `BlockPublicAcls` honoured on uploads and ACL changes.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ObjectCannedAcl, PublicAccessBlockConfiguration};
use aws_sdk_s3::Client;
use oram_tests::s3proxy::S3Proxy;

async fn put_public(c: &Client) -> Option<String> {
    c.put_object()
        .bucket("bkt")
        .key("k")
        .acl(ObjectCannedAcl::PublicRead)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .err()
        .and_then(|e| e.code().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_public_acls_refuses_public_acls() {
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let e = c
        .get_public_access_block()
        .bucket("bkt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NoSuchPublicAccessBlockConfiguration"));
    // Without a block a public ACL is refused as unsupported (400).
    assert_eq!(
        put_public(c).await.as_deref(),
        Some("AccessControlListNotSupported")
    );
    c.put_public_access_block()
        .bucket("bkt")
        .public_access_block_configuration(
            PublicAccessBlockConfiguration::builder()
                .block_public_acls(true)
                .restrict_public_buckets(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let got = c
        .get_public_access_block()
        .bucket("bkt")
        .send()
        .await
        .unwrap()
        .public_access_block_configuration
        .unwrap();
    assert_eq!(
        (
            got.block_public_acls,
            got.ignore_public_acls,
            got.block_public_policy,
            got.restrict_public_buckets
        ),
        (Some(true), Some(false), Some(false), Some(true))
    );
    // With BlockPublicAcls: 403 AccessDenied, as AWS answers.
    assert_eq!(put_public(c).await.as_deref(), Some("AccessDenied"));
    let e = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .acl(ObjectCannedAcl::PublicReadWrite)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    c.put_object()
        .bucket("bkt")
        .key("k")
        .acl(ObjectCannedAcl::Private)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let e = c
        .put_object_acl()
        .bucket("bkt")
        .key("k")
        .acl(ObjectCannedAcl::AuthenticatedRead)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    c.delete_public_access_block()
        .bucket("bkt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        put_public(c).await.as_deref(),
        Some("AccessControlListNotSupported")
    );
    p.stop().await;
}
