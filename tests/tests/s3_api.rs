//! The S3 API with a real client (aws-sdk-s3) against the proxy over TCP.

use std::sync::Arc;

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, Delete, MetadataDirective, ObjectIdentifier,
};
use aws_sdk_s3::Client;
use futures::StreamExt;
use md5::{Digest, Md5};
use oram_proxy::{Config, UserConfig};
use oram_tests::block_data;

struct Proxy {
    server: Option<oram_proxy::Server>,
    _dir: tempfile::TempDir,
    endpoint: String,
}

impl Proxy {
    async fn start(tune: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        cfg.s3.listen = "127.0.0.1:0".into();
        cfg.engine.capacity_blocks = 1 << 16;
        cfg.users = vec![UserConfig {
            access_key: "bob".into(),
            secret_key: "bobsecret1".into(),
        }];
        tune(&mut cfg);
        let root = UserConfig {
            access_key: "alice".into(),
            secret_key: "alicesecret".into(),
        };
        let server = oram_proxy::start(&cfg, Some(root))
            .await
            .expect("proxy starts");
        let endpoint = format!("http://{}", server.s3_addr());
        Self {
            server: Some(server),
            _dir: dir,
            endpoint,
        }
    }

    fn client(&self, user: &str, secret: &str) -> Client {
        let http = aws_smithy_http_client::Builder::new().build_http();
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .force_path_style(true)
            .credentials_provider(Credentials::new(user, secret, None, None, "test"))
            .http_client(http)
            .build();
        Client::from_conf(conf)
    }

    fn alice(&self) -> Client {
        self.client("alice", "alicesecret")
    }

    async fn stop(mut self) {
        self.server
            .take()
            .unwrap()
            .shutdown(std::time::Duration::from_secs(10))
            .await
            .unwrap();
    }
}

fn code<E: ProvideErrorMetadata>(e: &E) -> String {
    e.code().unwrap_or("<none>").to_string()
}

async fn get_bytes(c: &Client, bucket: &str, key: &str) -> Vec<u8> {
    let out = c.get_object().bucket(bucket).key(key).send().await.unwrap();
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

fn md5_hex(d: &[u8]) -> String {
    Md5::digest(d).iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets() {
    let p = Proxy::start(|_| {}).await;
    let c = p.alice();
    c.create_bucket().bucket("alpha").send().await.unwrap();
    c.create_bucket().bucket("beta").send().await.unwrap();
    c.put_object()
        .bucket("alpha")
        .key("kept")
        .body(ByteStream::from_static(b"kept"))
        .send()
        .await
        .unwrap();
    // us-east-1: creating a bucket you own answers 200 and changes nothing.
    c.create_bucket().bucket("alpha").send().await.unwrap();
    assert_eq!(get_bytes(&c, "alpha", "kept").await, b"kept");
    c.delete_object()
        .bucket("alpha")
        .key("kept")
        .send()
        .await
        .unwrap();
    let e = c.create_bucket().bucket("x").send().await.unwrap_err();
    assert_eq!(code(&e.into_service_error()), "InvalidBucketName");
    let names: Vec<String> = c
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .map(|b| b.name().unwrap().to_string())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    c.head_bucket().bucket("alpha").send().await.unwrap();
    let loc = c
        .get_bucket_location()
        .bucket("alpha")
        .send()
        .await
        .unwrap();
    // The region by name, us-east-1 too (as MinIO answers; AWS sends an empty
    // constraint for us-east-1, which several clients read as "no region").
    assert_eq!(
        loc.location_constraint().map_or("", |c| c.as_str()),
        "us-east-1"
    );
    let v = c
        .get_bucket_versioning()
        .bucket("alpha")
        .send()
        .await
        .unwrap();
    assert!(v.status().is_none(), "never versioned");
    c.put_object()
        .bucket("alpha")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let e = c.delete_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(code(&e.into_service_error()), "BucketNotEmpty");
    c.delete_object()
        .bucket("alpha")
        .key("k")
        .send()
        .await
        .unwrap();
    c.delete_bucket().bucket("alpha").send().await.unwrap();
    let e = c.head_bucket().bucket("alpha").send().await.unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 404);
    let e = c
        .get_object()
        .bucket("nope")
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "NoSuchBucket");

    // Another user sees none of it and may not touch it.
    let bob = p.client("bob", "bobsecret1");
    assert!(bob
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .is_empty());
    let e = bob
        .put_object()
        .bucket("beta")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "AccessDenied");
    let e = bob.create_bucket().bucket("beta").send().await.unwrap_err();
    assert_eq!(code(&e.into_service_error()), "BucketAlreadyExists");
    let wrong = p.client("alice", "not-the-secret");
    let e = wrong.list_buckets().send().await.unwrap_err();
    assert_eq!(code(&e.into_service_error()), "SignatureDoesNotMatch");
    let unknown = p.client("mallory", "whatever12");
    let e = unknown.list_buckets().send().await.unwrap_err();
    assert_eq!(code(&e.into_service_error()), "InvalidAccessKeyId");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_metadata_ranges_conditions_copy() {
    let p = Proxy::start(|_| {}).await;
    let c = p.alice();
    c.create_bucket().bucket("objs").send().await.unwrap();
    let data = block_data(7, 1, 100_000).to_vec();
    let put = c
        .put_object()
        .bucket("objs")
        .key("dir/file.bin")
        .body(ByteStream::from(data.clone()))
        .content_type("application/x-test")
        .content_encoding("identity")
        .content_disposition("attachment; filename=\"f.bin\"")
        .metadata("color", "blue")
        .metadata("shape", "round")
        .send()
        .await
        .unwrap();
    let etag = format!("\"{}\"", md5_hex(&data));
    assert_eq!(put.e_tag(), Some(etag.as_str()));
    assert_eq!(get_bytes(&c, "objs", "dir/file.bin").await, data);
    let h = c
        .head_object()
        .bucket("objs")
        .key("dir/file.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(h.content_length(), Some(100_000));
    assert_eq!(h.content_type(), Some("application/x-test"));
    assert_eq!(h.content_encoding(), Some("identity"));
    assert_eq!(
        h.content_disposition(),
        Some("attachment; filename=\"f.bin\"")
    );
    assert_eq!(
        h.metadata().unwrap().get("color").map(String::as_str),
        Some("blue")
    );
    assert_eq!(h.e_tag(), Some(etag.as_str()));

    // Ranges: inside, suffix, open-ended, across block boundaries, beyond the end.
    for (range, want) in [
        ("bytes=0-0", &data[0..1]),
        ("bytes=4090-4200", &data[4090..4201]),
        ("bytes=-100", &data[99_900..]),
        ("bytes=99990-", &data[99_990..]),
        ("bytes=50000-200000", &data[50_000..]),
    ] {
        let out = c
            .get_object()
            .bucket("objs")
            .key("dir/file.bin")
            .range(range)
            .send()
            .await
            .unwrap();
        assert_eq!(out.content_length(), Some(want.len() as i64), "{range}");
        assert!(out.content_range().unwrap().ends_with("/100000"));
        assert_eq!(
            out.body.collect().await.unwrap().into_bytes().as_ref(),
            want,
            "{range}"
        );
    }
    let e = c
        .get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .range("bytes=100000-")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "InvalidRange");

    // Conditional reads.
    c.get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_match(&etag)
        .send()
        .await
        .unwrap();
    let e = c
        .get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_match("\"abc\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 412);
    let e = c
        .get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_none_match(&etag)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 304);
    let past = aws_sdk_s3::primitives::DateTime::from_secs(1_000_000_000);
    let future = aws_sdk_s3::primitives::DateTime::from_secs(4_000_000_000);
    c.get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_modified_since(past)
        .send()
        .await
        .unwrap();
    let e = c
        .get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_modified_since(future)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 304);
    c.get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_unmodified_since(future)
        .send()
        .await
        .unwrap();
    let e = c
        .get_object()
        .bucket("objs")
        .key("dir/file.bin")
        .if_unmodified_since(past)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 412);

    // Copy keeps metadata (COPY) or replaces it (REPLACE).
    c.copy_object()
        .bucket("objs")
        .key("copy1")
        .copy_source("objs/dir/file.bin")
        .send()
        .await
        .unwrap();
    let h = c
        .head_object()
        .bucket("objs")
        .key("copy1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        h.metadata().unwrap().get("shape").map(String::as_str),
        Some("round")
    );
    assert_eq!(get_bytes(&c, "objs", "copy1").await, data);
    c.copy_object()
        .bucket("objs")
        .key("copy2")
        .copy_source("objs/dir/file.bin")
        .metadata_directive(MetadataDirective::Replace)
        .content_type("text/plain")
        .metadata("new", "yes")
        .send()
        .await
        .unwrap();
    let h = c
        .head_object()
        .bucket("objs")
        .key("copy2")
        .send()
        .await
        .unwrap();
    assert_eq!(h.content_type(), Some("text/plain"));
    let m = h.metadata().unwrap();
    assert_eq!(m.get("new").map(String::as_str), Some("yes"));
    assert!(!m.contains_key("color"));
    let e = c
        .copy_object()
        .bucket("objs")
        .key("dir/file.bin")
        .copy_source("objs/dir/file.bin")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "InvalidRequest");
    let e = c
        .copy_object()
        .bucket("objs")
        .key("c3")
        .copy_source("objs/dir/file.bin")
        .copy_source_if_match("\"nope\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 412);

    // Overwrite, delete, missing keys, DeleteObjects.
    c.put_object()
        .bucket("objs")
        .key("copy1")
        .body(ByteStream::from_static(b"short"))
        .send()
        .await
        .unwrap();
    assert_eq!(get_bytes(&c, "objs", "copy1").await, b"short");
    c.delete_object()
        .bucket("objs")
        .key("copy1")
        .send()
        .await
        .unwrap();
    let e = c
        .get_object()
        .bucket("objs")
        .key("copy1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "NoSuchKey");
    c.delete_object()
        .bucket("objs")
        .key("never-existed")
        .send()
        .await
        .unwrap();
    let del = Delete::builder()
        .objects(ObjectIdentifier::builder().key("copy2").build().unwrap())
        .objects(ObjectIdentifier::builder().key("missing").build().unwrap())
        .build()
        .unwrap();
    let out = c
        .delete_objects()
        .bucket("objs")
        .delete(del)
        .send()
        .await
        .unwrap();
    assert_eq!(out.deleted().len(), 2);
    assert!(out.errors().is_empty());
    let e = c
        .head_object()
        .bucket("objs")
        .key("copy2")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 404);
    // The original is untouched by all of it.
    assert_eq!(get_bytes(&c, "objs", "dir/file.bin").await, data);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_three_parts_of_5mib_and_a_tail() {
    let p = Proxy::start(|c| c.engine.block_size = 16384).await;
    let c = p.alice();
    c.create_bucket().bucket("mpu").send().await.unwrap();
    let parts: Vec<Vec<u8>> = (0..4u64)
        .map(|i| block_data(i, 9, if i < 3 { 5 << 20 } else { 123_457 }).to_vec())
        .collect();
    let up = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("big/object")
        .content_type("application/octet-stream")
        .metadata("origin", "multipart")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    let listed = c
        .list_multipart_uploads()
        .bucket("mpu")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.uploads().len(), 1);
    assert_eq!(listed.uploads()[0].upload_id(), Some(id.as_str()));
    let mut done = Vec::new();
    let mut md5s = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let out = c
            .upload_part()
            .bucket("mpu")
            .key("big/object")
            .upload_id(&id)
            .part_number(i as i32 + 1)
            .body(ByteStream::from(part.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(out.e_tag().unwrap(), format!("\"{}\"", md5_hex(part)));
        md5s.extend_from_slice(&Md5::digest(part));
        done.push(
            CompletedPart::builder()
                .part_number(i as i32 + 1)
                .e_tag(out.e_tag().unwrap())
                .build(),
        );
    }
    let lp = c
        .list_parts()
        .bucket("mpu")
        .key("big/object")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(lp.parts().len(), 4);
    assert_eq!(lp.parts()[3].size(), Some(123_457));
    let out = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("big/object")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done.clone()))
                .build(),
        )
        .send()
        .await
        .unwrap();
    let want_etag = format!("\"{}-4\"", md5_hex(&md5s));
    assert_eq!(out.e_tag(), Some(want_etag.as_str()));
    let whole: Vec<u8> = parts.concat();
    let got = get_bytes(&c, "mpu", "big/object").await;
    assert!(got == whole, "multipart object differs");
    let h = c
        .head_object()
        .bucket("mpu")
        .key("big/object")
        .send()
        .await
        .unwrap();
    assert_eq!(
        h.metadata().unwrap().get("origin").map(String::as_str),
        Some("multipart")
    );
    assert_eq!(h.e_tag(), Some(want_etag.as_str()));
    // A range across the boundary of parts 1 and 2.
    let r = c
        .get_object()
        .bucket("mpu")
        .key("big/object")
        .range("bytes=5242000-5243000")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.body.collect().await.unwrap().into_bytes().as_ref(),
        &whole[5_242_000..5_243_001]
    );
    assert!(c
        .list_multipart_uploads()
        .bucket("mpu")
        .send()
        .await
        .unwrap()
        .uploads()
        .is_empty());

    // Errors: wrong ETag, small parts, unknown upload; abort; upload part copy.
    let up2 = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("x")
        .send()
        .await
        .unwrap();
    let id2 = up2.upload_id().unwrap();
    let small = c
        .upload_part()
        .bucket("mpu")
        .key("x")
        .upload_id(id2)
        .part_number(1)
        .body(ByteStream::from_static(b"tiny"))
        .send()
        .await
        .unwrap();
    let e = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("x")
        .upload_id(id2)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag("\"0123\"")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "InvalidPart");
    let copy = c
        .upload_part_copy()
        .bucket("mpu")
        .key("x")
        .upload_id(id2)
        .part_number(2)
        .copy_source("mpu/big/object")
        .copy_source_range("bytes=0-5242879")
        .send()
        .await
        .unwrap();
    let e = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("x")
        .upload_id(id2)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(small.e_tag().unwrap())
                        .build(),
                )
                .parts(
                    CompletedPart::builder()
                        .part_number(2)
                        .e_tag(copy.copy_part_result().unwrap().e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "EntityTooSmall");
    c.abort_multipart_upload()
        .bucket("mpu")
        .key("x")
        .upload_id(id2)
        .send()
        .await
        .unwrap();
    let e = c
        .list_parts()
        .bucket("mpu")
        .key("x")
        .upload_id(id2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e.into_service_error()), "NoSuchUpload");
    let free = p.server.as_ref().unwrap().layer().usage();
    let used = free.capacity_blocks - free.free_blocks;
    let per_part: u64 = parts.iter().map(|p| p.len().div_ceil(16384) as u64).sum();
    assert_eq!(
        used, per_part,
        "only the completed object's blocks are in use: aborted parts were freed"
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_100_mib_put_and_get() {
    let p = Proxy::start(|c| {
        c.engine.block_size = 65536;
        c.engine.capacity_blocks = 4096;
    })
    .await;
    let c = p.alice();
    c.create_bucket().bucket("stream").send().await.unwrap();
    const LEN: usize = 100 << 20;
    // The body is generated chunk by chunk; the test never holds the object either.
    let chunks =
        (0..LEN / (1 << 20)).map(|i| Ok::<_, std::io::Error>(block_data(i as u64, 3, 1 << 20)));
    let mut want = Md5::new();
    for i in 0..LEN / (1 << 20) {
        want.update(block_data(i as u64, 3, 1 << 20));
    }
    let want = want.finalize();
    let body = streaming_body(futures::stream::iter(chunks));
    let put = c
        .put_object()
        .bucket("stream")
        .key("big")
        .content_length(LEN as i64)
        .body(body)
        .send()
        .await
        .unwrap();
    let want_hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(put.e_tag().unwrap(), format!("\"{want_hex}\""));
    let mut out = c
        .get_object()
        .bucket("stream")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(out.content_length(), Some(LEN as i64));
    let mut got = Md5::new();
    let mut n = 0usize;
    while let Some(chunk) = out.body.try_next().await.unwrap() {
        n += chunk.len();
        got.update(&chunk);
    }
    assert_eq!(n, LEN);
    assert_eq!(got.finalize(), want, "100 MiB object corrupted");
    p.stop().await;
}

/// A streaming request body from a stream of chunks (its length is set on the request).
fn streaming_body(
    s: impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + Sync + 'static,
) -> ByteStream {
    let body = http_body_util::StreamBody::new(s.map(|r| r.map(hyper::body::Frame::data)));
    ByteStream::from_body_1_x(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_of_1100_keys() {
    let p = Proxy::start(|c| c.backend.fsync = false).await;
    let c = p.alice();
    c.create_bucket().bucket("many").send().await.unwrap();
    let mut keys = Vec::new();
    for d in 0..11 {
        for f in 0..100 {
            keys.push(format!("d{d:02}/f{f:03}"));
        }
    }
    keys.push("top level+odd key é".to_string());
    keys.sort();
    futures::stream::iter(keys.clone())
        .for_each_concurrent(8, |k| {
            let c = c.clone();
            async move {
                c.put_object()
                    .bucket("many")
                    .key(&k)
                    .body(ByteStream::from(k.clone().into_bytes()))
                    .send()
                    .await
                    .unwrap();
            }
        })
        .await;

    // v2, pages of 250, no delimiter: every key once, in order.
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let out = c
            .list_objects_v2()
            .bucket("many")
            .max_keys(250)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        seen.extend(out.contents().iter().map(|o| o.key().unwrap().to_string()));
        if !out.is_truncated().unwrap() {
            break;
        }
        token = out.next_continuation_token().map(str::to_string);
    }
    assert_eq!(seen, keys);
    // Delimiter: 11 common prefixes and one top-level key.
    let out = c
        .list_objects_v2()
        .bucket("many")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    assert_eq!(out.common_prefixes().len(), 11);
    assert_eq!(out.contents().len(), 1);
    assert_eq!(out.key_count(), Some(12));
    // Prefix + delimiter + start-after.
    let out = c
        .list_objects_v2()
        .bucket("many")
        .prefix("d03/")
        .delimiter("/")
        .start_after("d03/f049")
        .send()
        .await
        .unwrap();
    assert_eq!(out.contents().len(), 50);
    assert_eq!(out.contents()[0].key(), Some("d03/f050"));
    // v1 with marker, pages of 400 with delimiter-free listing.
    let mut seen = Vec::new();
    let mut marker = None;
    loop {
        let out = c
            .list_objects()
            .bucket("many")
            .max_keys(400)
            .set_marker(marker.clone())
            .send()
            .await
            .unwrap();
        seen.extend(out.contents().iter().map(|o| o.key().unwrap().to_string()));
        if !out.is_truncated().unwrap() {
            break;
        }
        marker = out.next_marker().map(str::to_string);
    }
    assert_eq!(seen.len(), keys.len());
    // encoding-type=url: keys come back percent-encoded (the Rust SDK, unlike
    // botocore, does not decode them; the aws cli test covers decoding).
    let out = c
        .list_objects_v2()
        .bucket("many")
        .prefix("top")
        .encoding_type(aws_sdk_s3::types::EncodingType::Url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.contents()[0].key(),
        Some("top%20level%2Bodd%20key%20%C3%A9")
    );
    assert_eq!(out.prefix(), Some("top"));
    let v = c
        .list_object_versions()
        .bucket("many")
        .prefix("d10/")
        .send()
        .await
        .unwrap();
    assert_eq!(v.versions().len(), 100);
    assert!(v
        .versions()
        .iter()
        .all(|x| x.version_id() == Some("null") && x.is_latest() == Some(true)));
    assert_eq!(
        get_bytes(&c, "many", "top level+odd key é").await,
        "top level+odd key é".as_bytes()
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_clients() {
    let p = Arc::new(Proxy::start(|_| {}).await);
    p.alice()
        .create_bucket()
        .bucket("conc")
        .send()
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let c = p.alice();
            tokio::spawn(async move {
                let mut mine: std::collections::HashMap<String, Vec<u8>> = Default::default();
                for i in 0..12u64 {
                    let key = format!("client{t}/obj{}", i % 5);
                    match i % 4 {
                        0 | 1 => {
                            let d = block_data(
                                t * 100 + i,
                                i,
                                (1000 + 7919 * (i as usize + t as usize)) % 60_000,
                            )
                            .to_vec();
                            c.put_object()
                                .bucket("conc")
                                .key(&key)
                                .body(ByteStream::from(d.clone()))
                                .send()
                                .await
                                .unwrap();
                            mine.insert(key, d);
                        }
                        2 => {
                            if let Some(want) = mine.get(&key) {
                                assert!(
                                    &get_bytes(&c, "conc", &key).await == want,
                                    "client {t} {key}"
                                );
                            }
                        }
                        _ => {
                            c.delete_object()
                                .bucket("conc")
                                .key(&key)
                                .send()
                                .await
                                .unwrap();
                            mine.remove(&key);
                        }
                    }
                }
                for (k, v) in &mine {
                    assert!(&get_bytes(&c, "conc", k).await == v, "client {t} final {k}");
                }
                mine.len()
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let listed = p
        .alice()
        .list_objects_v2()
        .bucket("conc")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.contents().len(), total);
    Arc::try_unwrap(p).ok().unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_oram_refuses_writes_and_keeps_what_it_has() {
    let p = Proxy::start(|c| {
        c.engine.capacity_blocks = 64;
        c.engine.block_size = 1024;
    })
    .await;
    let c = p.alice();
    c.create_bucket().bucket("full").send().await.unwrap();
    let keep = block_data(1, 1, 40 * 1024).to_vec();
    c.put_object()
        .bucket("full")
        .key("keep")
        .body(ByteStream::from(keep.clone()))
        .send()
        .await
        .unwrap();
    let e = c
        .put_object()
        .bucket("full")
        .key("big")
        .body(ByteStream::from(vec![1u8; 30 * 1024]))
        .send()
        .await
        .unwrap_err();
    let status = e.raw_response().unwrap().status().as_u16();
    let e = e.into_service_error();
    assert_eq!(status, 507);
    assert_eq!(code(&e), "XOramStorageFull");
    let msg = e.message().unwrap();
    assert!(msg.contains("full"), "{msg}");
    // It says why an overwrite may not fit, and what to do.
    assert!(
        msg.contains("An overwrite needs room for the new copy"),
        "{msg}"
    );
    assert!(msg.contains("deleting objects"), "{msg}");
    // Overwriting the kept object with something too big fails too, and keeps it.
    let e = c
        .put_object()
        .bucket("full")
        .key("keep")
        .body(ByteStream::from(vec![2u8; 60 * 1024]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 507);
    assert_eq!(get_bytes(&c, "full", "keep").await, keep);
    c.put_object()
        .bucket("full")
        .key("small")
        .body(ByteStream::from(vec![3u8; 10 * 1024]))
        .send()
        .await
        .unwrap();
    p.stop().await;
}
