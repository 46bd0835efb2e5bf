//! Bucket policies through the S3 API, with real clients (aws-sdk-s3) against
//! the proxy over TCP (and TLS): the document stored, read, deleted and its
//! status; malformed documents refused with nothing stored; a second user let
//! in where a policy allows and nowhere else; an explicit Deny binding the
//! owner (who can still manage the policy); `aws:SourceIp` and
//! `aws:SecureTransport`; the public access block's `BlockPublicPolicy` and
//! `RestrictPublicBuckets`.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier, PublicAccessBlockConfiguration};
use aws_sdk_s3::Client;
use oram_proxy::UserConfig;
use oram_tests::s3proxy::S3Proxy;

/// A proxy with users alice (the root) and bob.
async fn two_users() -> S3Proxy {
    S3Proxy::start_with(add_bob).await
}

fn add_bob(cfg: &mut oram_proxy::Config) {
    cfg.users = vec![UserConfig {
        access_key: "bob".into(),
        secret_key: "bobsecret1".into(),
    }];
}

fn bob(p: &S3Proxy) -> Client {
    p.client_as("bob", "bobsecret1")
}

/// A policy of one or more statements (a JSON list's items).
fn policy(statements: &str) -> String {
    format!(r#"{{"Version":"2012-10-17","Statement":[{statements}]}}"#)
}

async fn put_policy(c: &Client, bucket: &str, doc: &str) -> Result<(), String> {
    c.put_bucket_policy()
        .bucket(bucket)
        .policy(doc)
        .send()
        .await
        .map(drop)
        .map_err(|e| e.code().unwrap_or("<none>").to_string())
}

async fn put(c: &Client, bucket: &str, key: &str, body: &'static [u8]) -> Result<(), String> {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(body))
        .send()
        .await
        .map(drop)
        .map_err(|e| e.code().unwrap_or("<none>").to_string())
}

async fn get(c: &Client, bucket: &str, key: &str) -> Result<Vec<u8>, String> {
    match c.get_object().bucket(bucket).key(key).send().await {
        Ok(o) => Ok(o.body.collect().await.unwrap().into_bytes().to_vec()),
        Err(e) => Err(e.code().unwrap_or("<none>").to_string()),
    }
}

async fn stored_policy(c: &Client, bucket: &str) -> Result<String, String> {
    c.get_bucket_policy()
        .bucket(bucket)
        .send()
        .await
        .map(|o| o.policy().unwrap_or_default().to_string())
        .map_err(|e| e.code().unwrap_or("<none>").to_string())
}

fn denied<T: std::fmt::Debug>(r: Result<T, String>) {
    assert_eq!(r.unwrap_err(), "AccessDenied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_status_delete() {
    let p = two_users().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    assert_eq!(
        stored_policy(c, "bkt").await.unwrap_err(),
        "NoSuchBucketPolicy"
    );
    let e = c
        .get_bucket_policy_status()
        .bucket("bkt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NoSuchBucketPolicy"));
    // Kept byte for byte, whitespace included.
    let private = policy(
        r#"{"Sid":"bob reads","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:user/bob"},
            "Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
    );
    put_policy(c, "bkt", &private).await.unwrap();
    assert_eq!(stored_policy(c, "bkt").await.unwrap(), private);
    let status = |c: Client| async move {
        c.get_bucket_policy_status()
            .bucket("bkt")
            .send()
            .await
            .unwrap()
            .policy_status
            .unwrap()
            .is_public
    };
    assert_eq!(status(c.clone()).await, Some(false));
    let public = policy(
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
    );
    put_policy(c, "bkt", &public).await.unwrap();
    assert_eq!(status(c.clone()).await, Some(true));
    // Only the owner manages the policy, whatever it says.
    let b = bob(&p);
    denied(stored_policy(&b, "bkt").await);
    denied(put_policy(&b, "bkt", &public).await);
    let e = b
        .delete_bucket_policy()
        .bucket("bkt")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    c.delete_bucket_policy().bucket("bkt").send().await.unwrap();
    assert_eq!(
        stored_policy(c, "bkt").await.unwrap_err(),
        "NoSuchBucketPolicy"
    );
    // Deleting again is fine, as on AWS.
    c.delete_bucket_policy().bucket("bkt").send().await.unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_policies_are_refused_and_nothing_is_stored() {
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    let ok = r#""Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*""#;
    let bad = [
        "{not json".to_string(),
        format!(r#"{{"Version":"2012-10-18","Statement":[{{{ok}}}]}}"#),
        policy(r#"{"Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#),
        policy(r#"{"Effect":"Allow","Principal":"*","Resource":"arn:aws:s3:::bkt/*"}"#),
        policy(r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject"}"#),
        policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}"#,
        ),
        policy(&format!(
            r#"{{{ok},"Condition":{{"NumericLessThan":{{"s3:max-keys":"10"}}}}}}"#
        )),
        policy(&format!(
            r#"{{{ok},"Condition":{{"StringEquals":{{"aws:UserAgent":"x"}}}}}}"#
        )),
        policy(
            r#"{"Effect":"Allow","NotPrincipal":{"AWS":"bob"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
        ),
        // Over 20 KiB: refused on its declared length, before it is read.
        policy(&format!(r#"{{"Sid":"{}",{ok}}}"#, "x".repeat(21 * 1024))),
    ];
    for doc in &bad {
        assert_eq!(
            put_policy(c, "bkt", doc).await.unwrap_err(),
            "MalformedPolicy",
            "{doc:.200}"
        );
        assert_eq!(
            stored_policy(c, "bkt").await.unwrap_err(),
            "NoSuchBucketPolicy"
        );
    }
    // A refused policy leaves the stored one in place.
    let good = policy(&format!("{{{ok}}}"));
    put_policy(c, "bkt", &good).await.unwrap();
    assert_eq!(
        put_policy(c, "bkt", &bad[1]).await.unwrap_err(),
        "MalformedPolicy"
    );
    assert_eq!(stored_policy(c, "bkt").await.unwrap(), good);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_user_gets_what_the_policy_grants_and_nothing_more() {
    let p = two_users().await;
    let (a, b) = (&p.client, &bob(&p));
    a.create_bucket().bucket("shared").send().await.unwrap();
    put(a, "shared", "pub/a", b"public a").await.unwrap();
    put(a, "shared", "priv/b", b"private b").await.unwrap();
    b.create_bucket().bucket("bobs").send().await.unwrap();
    // Without a policy another account's bucket is closed.
    denied(get(b, "shared", "pub/a").await);
    put_policy(
        a,
        "shared",
        &policy(
            r#"{"Effect":"Allow","Principal":{"AWS":["bob"]},"Action":"s3:GetObject","Resource":"arn:aws:s3:::shared/pub/*"},
               {"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::shared",
                "Condition":{"StringLike":{"s3:prefix":"pub/*"}}}"#,
        ),
    )
    .await
    .unwrap();
    assert_eq!(get(b, "shared", "pub/a").await.unwrap(), b"public a");
    denied(get(b, "shared", "priv/b").await);
    denied(put(b, "shared", "pub/new", b"x").await);
    let del = b.delete_object().bucket("shared").key("pub/a").send().await;
    denied(del.map_err(|e| e.code().unwrap_or("<none>").to_string()));
    let objects = Delete::builder()
        .objects(ObjectIdentifier::builder().key("pub/a").build().unwrap())
        .build()
        .unwrap();
    let e = b
        .delete_objects()
        .bucket("shared")
        .delete(objects)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    // Listing: only under the prefix the condition names.
    let listed = b
        .list_objects_v2()
        .bucket("shared")
        .prefix("pub/")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["pub/a"]);
    let e = b
        .list_objects_v2()
        .bucket("shared")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    // A copy out of the shared bucket into bob's own reads as the policy allows.
    b.copy_object()
        .bucket("bobs")
        .key("copy")
        .copy_source("shared/pub/a")
        .send()
        .await
        .unwrap();
    assert_eq!(get(b, "bobs", "copy").await.unwrap(), b"public a");
    let e = b
        .copy_object()
        .bucket("bobs")
        .key("copy2")
        .copy_source("shared/priv/b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    // The shared bucket is still alice's alone in listings, and untouched.
    let names: Vec<String> = b
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|x| x.name().map(str::to_string))
        .collect();
    assert_eq!(names, ["bobs"]);
    assert_eq!(get(a, "shared", "pub/a").await.unwrap(), b"public a");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_deny_binds_the_owner_who_keeps_the_policy() {
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    put(c, "bkt", "k", b"kept").await.unwrap();
    put_policy(
        c,
        "bkt",
        &policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:DeleteObject","Resource":"arn:aws:s3:::bkt/*"}"#,
        ),
    )
    .await
    .unwrap();
    let e = c
        .delete_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    let objects = Delete::builder()
        .objects(ObjectIdentifier::builder().key("k").build().unwrap())
        .build()
        .unwrap();
    let e = c
        .delete_objects()
        .bucket("bkt")
        .delete(objects)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    assert_eq!(get(c, "bkt", "k").await.unwrap(), b"kept");
    // Deny everything: the owner can still read and replace the policy.
    let all = policy(
        r#"{"Effect":"Deny","Principal":"*","Action":"*","Resource":["arn:aws:s3:::bkt","arn:aws:s3:::bkt/*"]}"#,
    );
    put_policy(c, "bkt", &all).await.unwrap();
    denied(get(c, "bkt", "k").await);
    let e = c.list_objects_v2().bucket("bkt").send().await.unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    assert_eq!(stored_policy(c, "bkt").await.unwrap(), all);
    c.delete_bucket_policy().bucket("bkt").send().await.unwrap();
    c.delete_object()
        .bucket("bkt")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(get(c, "bkt", "k").await.unwrap_err(), "NoSuchKey");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ip_conditions_see_the_peer_address() {
    let p = two_users().await;
    let (a, b) = (&p.client, &bob(&p));
    a.create_bucket().bucket("bkt").send().await.unwrap();
    put(a, "bkt", "k", b"v").await.unwrap();
    let allow_from = |net: &str| {
        policy(&format!(
            r#"{{"Effect":"Allow","Principal":{{"AWS":"bob"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*",
                "Condition":{{"IpAddress":{{"aws:SourceIp":"{net}"}}}}}}"#
        ))
    };
    put_policy(a, "bkt", &allow_from("127.0.0.1/32"))
        .await
        .unwrap();
    assert_eq!(get(b, "bkt", "k").await.unwrap(), b"v");
    put_policy(a, "bkt", &allow_from("10.0.0.0/8"))
        .await
        .unwrap();
    denied(get(b, "bkt", "k").await);
    // A Deny from outside 10.0.0.0/8 binds the owner on loopback.
    put_policy(
        a,
        "bkt",
        &policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*",
                "Condition":{"NotIpAddress":{"aws:SourceIp":["10.0.0.0/8","2001:db8::/32"]}}}"#,
        ),
    )
    .await
    .unwrap();
    denied(get(a, "bkt", "k").await);
    p.stop().await;
}

const DENY_PLAIN: &str = r#"{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*",
    "Condition":{"Bool":{"aws:SecureTransport":"false"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_transport_is_the_tls_listener() {
    // Plain HTTP: the Deny on insecure transport holds.
    let p = S3Proxy::start().await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    put(c, "bkt", "k", b"v").await.unwrap();
    put_policy(c, "bkt", &policy(DENY_PLAIN)).await.unwrap();
    denied(get(c, "bkt", "k").await);
    p.stop().await;

    // TLS: the same policy lets the request through; one denying secure
    // transport shows the key is true there (not merely missing).
    let p = S3Proxy::start_tls(|_| {}).await;
    let c = &p.client;
    c.create_bucket().bucket("bkt").send().await.unwrap();
    put(c, "bkt", "k", b"v").await.unwrap();
    put_policy(c, "bkt", &policy(DENY_PLAIN)).await.unwrap();
    assert_eq!(get(c, "bkt", "k").await.unwrap(), b"v");
    put_policy(c, "bkt", &policy(&DENY_PLAIN.replace("false", "true")))
        .await
        .unwrap();
    denied(get(c, "bkt", "k").await);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_access_block_blocks_and_restricts_public_policies() {
    let p = two_users().await;
    let (a, b) = (&p.client, &bob(&p));
    a.create_bucket().bucket("bkt").send().await.unwrap();
    put(a, "bkt", "k", b"v").await.unwrap();
    let block = |policy: bool, restrict: bool| {
        PublicAccessBlockConfiguration::builder()
            .block_public_policy(policy)
            .restrict_public_buckets(restrict)
            .build()
    };
    let public = policy(
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
    );
    a.put_public_access_block()
        .bucket("bkt")
        .public_access_block_configuration(block(true, false))
        .send()
        .await
        .unwrap();
    denied(put_policy(a, "bkt", &public).await);
    assert_eq!(
        stored_policy(a, "bkt").await.unwrap_err(),
        "NoSuchBucketPolicy"
    );
    // Restricted to a network: not public, accepted.
    let narrowed = policy(
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*",
            "Condition":{"IpAddress":{"aws:SourceIp":"127.0.0.0/8"}}}"#,
    );
    put_policy(a, "bkt", &narrowed).await.unwrap();
    assert_eq!(get(b, "bkt", "k").await.unwrap(), b"v");
    // Without the block a public policy is accepted and opens the bucket to
    // every user; RestrictPublicBuckets closes it again to all but the owner.
    a.put_public_access_block()
        .bucket("bkt")
        .public_access_block_configuration(block(false, false))
        .send()
        .await
        .unwrap();
    put_policy(a, "bkt", &public).await.unwrap();
    assert_eq!(get(b, "bkt", "k").await.unwrap(), b"v");
    a.put_public_access_block()
        .bucket("bkt")
        .public_access_block_configuration(block(false, true))
        .send()
        .await
        .unwrap();
    denied(get(b, "bkt", "k").await);
    assert_eq!(get(a, "bkt", "k").await.unwrap(), b"v");
    p.stop().await;
}
