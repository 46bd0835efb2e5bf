//! The S3 back-end against real S3 servers started on 127.0.0.1: MinIO and moto.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use oram_blockstore::BlockStoreExt;
use oram_path::{PathConfig, TreeConfig};
use oram_proxy::{BackendKind, Config, UserConfig};
use oram_tests::servers::{Minio, Moto, MINIO_PASSWORD, MINIO_USER};
use oram_tests::{block_data, path_oram, run_model};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_minio() {
    let minio = Minio::start();
    let store = minio.store("conformance", "some/prefix").await;
    oram_blockstore::conformance::run_all(&store, "conf").await;
    // The store prefix is applied on the server and stripped from listings.
    let direct = minio.store("conformance", "").await;
    let raw = direct.list("some/prefix/conf/rt/").await.unwrap();
    assert_eq!(raw.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_moto() {
    let moto = Moto::start();
    let store = moto.store("conformance", "p").await;
    oram_blockstore::conformance::run_all(&store, "conf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_model_over_minio() {
    let minio = Minio::start();
    let store = Arc::new(minio.store("model", "vol").await);
    let oram = path_oram(
        store.clone(),
        PathConfig {
            tree: TreeConfig {
                capacity: 500,
                block_size: 256,
                cached_levels: 2,
                rng_seed: Some([12; 32]),
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
    );
    let ops = run_model(&oram, 150, 12, 77).await;
    assert!(ops > 500);
    assert!(!store.list("vol0/n/").await.unwrap().is_empty());
}

fn proxy_config(minio: &Minio, dir: &std::path::Path) -> Config {
    let mut cfg = Config {
        data_dir: dir.join("data"),
        ..Config::default()
    };
    cfg.s3.listen = "127.0.0.1:0".into();
    cfg.engine.capacity_blocks = 4096;
    cfg.engine.kind = oram_proxy::Engine::new(oram_path::PathSettings {
        cached_levels: Some(3),
        ..Default::default()
    });
    cfg.backend.kind = BackendKind::S3;
    cfg.backend.bucket = "oram-volume".into();
    cfg.backend.key_prefix = "p".into();
    cfg.backend.endpoint = Some(minio.endpoint());
    cfg.backend.access_key = Some(MINIO_USER.into());
    cfg.backend.secret_key = Some(MINIO_PASSWORD.into());
    cfg.backend.max_attempts = 2;
    cfg.backend.attempt_timeout_secs = 5;
    cfg
}

fn client(endpoint: &str, user: &str, secret: &str, attempts: u32) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(user, secret, None, None, "test"))
        .retry_config(
            aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(attempts),
        )
        .timeout_config(
            aws_sdk_s3::config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(60))
                .build(),
        )
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

fn root() -> UserConfig {
    UserConfig {
        access_key: "alice".into(),
        secret_key: "alicesecret".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_over_minio_round_trip_leaks_no_names_or_plaintext() {
    let minio = Minio::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = proxy_config(&minio, dir.path());
    oram_proxy::init(&cfg, Some(root()))
        .await
        .expect("init creates the backend bucket");
    let server = oram_proxy::start(&cfg, Some(root())).await.unwrap();
    let c = client(
        &format!("http://{}", server.s3_addr()),
        "alice",
        "alicesecret",
        3,
    );
    let bucket = "confidential-bucket-name";
    c.create_bucket().bucket(bucket).send().await.unwrap();
    const MARKER: &[u8] = b"TOP-SECRET-PLAINTEXT-";
    let mut objects = BTreeMap::new();
    for (i, key) in [
        "reports/quarterly-earnings.txt",
        "diary/private-entry.md",
        "x",
    ]
    .iter()
    .enumerate()
    {
        let mut data = Vec::new();
        while data.len() < 30_000 * (i + 1) {
            data.extend_from_slice(MARKER);
            data.extend_from_slice(&block_data(i as u64, data.len() as u64, 43));
        }
        c.put_object()
            .bucket(bucket)
            .key(*key)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap();
        objects.insert(key.to_string(), data);
    }
    for (k, v) in &objects {
        let got = c.get_object().bucket(bucket).key(k).send().await.unwrap();
        assert!(
            got.body.collect().await.unwrap().into_bytes().as_ref() == v.as_slice(),
            "{k}"
        );
    }
    server.shutdown(Duration::from_secs(10)).await.unwrap();

    // Everything MinIO holds, read directly.
    let raw = minio.store("oram-volume", "").await;
    let keys = raw.list("").await.unwrap();
    assert!(keys.len() > 10, "only {} backend objects", keys.len());
    let mut sizes = std::collections::BTreeSet::new();
    let mut meta = std::collections::BTreeMap::new();
    for (k, o) in keys.iter().zip(raw.get_many(&keys).await.unwrap()) {
        let o = o.unwrap();
        for needle in [
            MARKER,
            bucket.as_bytes(),
            b"quarterly",
            b"private-entry",
            b"reports/",
        ] {
            assert!(
                !o.windows(needle.len()).any(|w| w == needle),
                "backend object {k} contains {needle:?}"
            );
        }
        let k = k.as_str();
        assert!(!k.contains("confidential") && !k.contains("quarterly") && !k.contains("diary"));
        if k.starts_with("p/vol0/n/") {
            sizes.insert(o.len());
        } else {
            meta.insert(k.to_string(), o.len());
        }
    }
    assert_eq!(sizes.len(), 1, "all tree buckets have one size: {sizes:?}");
    // Besides the tree: the public volume header, the sealed checkpoint (its
    // authenticated head, then the snapshot, whose size is fixed by the volume's
    // parameters), and the lease.
    assert_eq!(
        meta.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "p/vol0/meta/checkpoint",
            "p/vol0/meta/lease",
            "p/vol0/meta/volume"
        ]
    );
    assert_eq!(
        meta["p/vol0/meta/checkpoint"] as u64,
        oram_volume::header::HEAD_LEN as u64
            + oram_seal::OVERHEAD as u64
            + oram_volume::checkpoint_size(&cfg.volume()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_survives_a_minio_outage_without_losing_acknowledged_objects() {
    let mut minio = Minio::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = proxy_config(&minio, dir.path());
    oram_proxy::init(&cfg, Some(root())).await.unwrap();
    let server = oram_proxy::start(&cfg, Some(root())).await.unwrap();
    // One attempt per request: the client sees the errors instead of retrying them away.
    let c = client(
        &format!("http://{}", server.s3_addr()),
        "alice",
        "alicesecret",
        1,
    );
    c.create_bucket().bucket("survivor").send().await.unwrap();
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // (step, HTTP status, seconds since MinIO came back) of every refused PUT.
    let mut failures: Vec<(u64, Option<u16>, Option<f64>)> = Vec::new();
    let mut back_at: Option<std::time::Instant> = None;
    // Steps 0-11 before the outage, 12-23 during it; from 24 on MinIO is back (and
    // ready: `restart` waits for it). The proxy may need a few requests to see it
    // again (its lease lapsed, failed write-backs are resent, the SDK's pool holds
    // dead connections), more on a loaded machine: from step 24 on, PUTs are retried
    // once a second until one is accepted (at most 60), and every PUT after that
    // one must be accepted.
    let mut recovered_at: Option<u64> = None;
    let mut i = 0u64;
    let mut waits = 0;
    while i < 36 {
        if i == 12 {
            minio.stop();
        }
        if i == 24 && back_at.is_none() {
            minio.restart();
            back_at = Some(std::time::Instant::now());
        }
        let key = format!("obj{}", i % 20);
        let data = block_data(i, i, 1000 + (i as usize * 7919) % 50_000).to_vec();
        match c
            .put_object()
            .bucket("survivor")
            .key(&key)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
        {
            Ok(_) => {
                acked.insert(key, data);
                if i >= 24 && recovered_at.is_none() {
                    recovered_at = Some(i);
                }
            }
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                failures.push((i, status, back_at.map(|t| t.elapsed().as_secs_f64())));
                if i >= 24 && recovered_at.is_none() {
                    waits += 1;
                    assert!(
                        waits <= 60,
                        "the proxy did not accept a PUT within 60 tries after MinIO came \
                         back: {failures:?}"
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        // Reads of acknowledged objects during the outage fail cleanly, never with wrong data.
        if let Some((k, v)) = acked.iter().next() {
            if let Ok(out) = c.get_object().bucket("survivor").key(k).send().await {
                let got = out.body.collect().await.map(|b| b.into_bytes());
                if let Ok(got) = got {
                    assert!(
                        got.as_ref() == v.as_slice(),
                        "wrong data for {k} at step {i}"
                    );
                }
            }
        }
        i += 1;
    }
    assert!(
        failures
            .iter()
            .any(|(i, s, _)| (12..24).contains(i) && *s == Some(503)),
        "the outage must show as 503: {failures:?}"
    );
    let recovered_at = recovered_at.expect("a PUT after the outage was accepted");
    assert!(
        failures
            .iter()
            .all(|(i, _, _)| (12..=recovered_at).contains(i)),
        "failures before the outage or after the first accepted PUT: {failures:?}"
    );
    assert!(
        acked.len() >= 15,
        "too few acknowledged objects: {}",
        acked.len()
    );
    for (k, v) in &acked {
        let got = c
            .get_object()
            .bucket("survivor")
            .key(k)
            .send()
            .await
            .unwrap();
        assert!(
            got.body.collect().await.unwrap().into_bytes().as_ref() == v.as_slice(),
            "{k} lost or corrupted"
        );
    }
    server.shutdown(Duration::from_secs(10)).await.unwrap();
}

/// One PUT of `v2` is held in a relay past its attempt timeout (the store reports
/// it failed), a newer `v3` is written, then the held PUT reaches MinIO. Returns
/// MinIO's answer to the late PUT and what the object holds afterwards.
/// MinIO, a store on `bucket` (prefix `p`) straight to it, a [`HoldRelay`]
/// in front of it, and a store configuration that goes through the relay.
///
/// [`HoldRelay`]: oram_tests::relay::HoldRelay
async fn behind_a_relay(
    bucket: &str,
) -> (
    Minio,
    oram_store_s3::S3Store,
    oram_tests::relay::HoldRelay,
    oram_store_s3::S3StoreConfig,
) {
    let minio = Minio::start();
    let direct = minio.store(bucket, "p").await;
    let relay =
        oram_tests::relay::HoldRelay::start(format!("127.0.0.1:{}", minio.port).parse().unwrap())
            .await;
    let mut cfg = minio.store_config(bucket, "p");
    cfg.endpoint = Some(format!("http://{}", relay.addr()));
    (minio, direct, relay, cfg)
}

/// The `i`-th version of the late-PUT tests' object.
fn version(i: u64) -> bytes::Bytes {
    block_data(i, 7, 4096)
}

/// A store behind the relay (one attempt, of 2 s) that wrote `version(1)` of
/// `vol0/n/7` and then gave up on its PUT of `version(2)`, which the relay
/// holds in transit until released: MinIO, a direct store, the relay, the
/// store and the key.
async fn a_put_held_past_its_timeout(
    bucket: &str,
    conditional: bool,
) -> (
    Minio,
    oram_store_s3::S3Store,
    oram_tests::relay::HoldRelay,
    oram_store_s3::S3Store,
    oram_blockstore::ObjKey,
) {
    let (minio, direct, relay, mut cfg) = behind_a_relay(bucket).await;
    cfg.max_attempts = 1;
    cfg.attempt_timeout = Duration::from_secs(2);
    cfg.conditional_writes = conditional;
    let store = oram_store_s3::S3Store::new(&cfg).await;
    let key = oram_blockstore::ObjKey::new("vol0/n/7").unwrap();
    store
        .put_many(vec![(key.clone(), version(1))])
        .await
        .unwrap();
    relay.arm();
    let timed_out = store.put_many(vec![(key.clone(), version(2))]).await;
    assert!(
        matches!(timed_out, Err(oram_blockstore::StoreError::Unavailable(_))),
        "the held PUT must time out: {timed_out:?}"
    );
    assert!(relay.holding(), "the relay held the PUT");
    (minio, direct, relay, store, key)
}

async fn late_put(conditional: bool) -> (String, Vec<u8>) {
    let (_minio, direct, relay, store, key) =
        a_put_held_past_its_timeout("late", conditional).await;
    let v = version;
    // A newer version lands while the old PUT is still in flight.
    store.put_many(vec![(key.clone(), v(3))]).await.unwrap();
    assert_eq!(
        direct.get_many(std::slice::from_ref(&key)).await.unwrap()[0].as_deref(),
        Some(v(3).as_ref())
    );
    relay.release();
    let status = relay
        .held_status(Duration::from_secs(60))
        .await
        .expect("MinIO answers the late PUT");
    let now = direct.get_many(std::slice::from_ref(&key)).await.unwrap()[0]
        .clone()
        .expect("the object exists")
        .to_vec();
    assert!(now == v(2).as_ref() || now == v(3).as_ref());
    (status, now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_landing_after_its_timeout_does_not_replace_a_newer_version() {
    let (status, now) = late_put(true).await;
    assert!(status.contains(" 412 "), "MinIO's answer: {status}");
    assert!(
        now == block_data(3, 7, 4096).as_ref(),
        "the late PUT replaced the newer version"
    );
}

/// The negative control: without conditional writes the same late PUT does
/// replace the newer version (so the test above tests something).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_conditional_writes_a_late_put_replaces_a_newer_version() {
    let (status, now) = late_put(false).await;
    assert!(status.contains(" 200 "), "MinIO's answer: {status}");
    assert!(now == block_data(2, 7, 4096).as_ref());
}

/// A conditional write of a control object (the backend lease's renewal, a
/// checkpoint: `put_if`) does not wait behind data requests holding every
/// in-flight slot: with `max_in_flight = 1` and that one data PUT held in
/// transit by the relay, a `put_if` still lands (before the data PUT is
/// answered). Before the control pool a saturated link's queue of data
/// requests made the lease's renewal miss its deadline and the proxy fence
/// itself. The 30 s guard only detects the old wait (which lasted until the
/// held PUT was released); it is not a timing claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_write_does_not_wait_behind_the_data_requests_in_flight() {
    use oram_blockstore::{BlockStore, ObjKey, PutCondition};
    let (_minio, direct, relay, mut cfg) = behind_a_relay("control").await;
    cfg.max_in_flight = 1;
    cfg.max_attempts = 1;
    cfg.attempt_timeout = Duration::from_secs(120);
    let store = Arc::new(oram_store_s3::S3Store::new(&cfg).await);
    let data_key = ObjKey::new("vol0/n/1").unwrap();
    let lease_key = ObjKey::new("meta/lease").unwrap();
    // The store's first request opens its first connection: the one held.
    relay.arm();
    let data = {
        let (store, key) = (store.clone(), data_key.clone());
        tokio::spawn(async move { store.put_many(vec![(key, block_data(1, 1, 4096))]).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !relay.holding() {
        assert!(
            std::time::Instant::now() < deadline,
            "the data PUT was never held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let renewal = tokio::time::timeout(
        Duration::from_secs(30),
        store.put_if(
            &lease_key,
            bytes::Bytes::from_static(b"lease"),
            PutCondition::IfAbsent,
        ),
    )
    .await
    .expect("the control write waited for the data PUT's slot");
    renewal.expect("the control write landed");
    assert!(!data.is_finished(), "the data PUT was answered while held");
    relay.release();
    // The relay passes the held request on and keeps the server's answer (the
    // client's side of that connection is closed then).
    let status = relay
        .held_status(Duration::from_secs(60))
        .await
        .expect("MinIO answers the released PUT");
    assert!(status.contains(" 200 "), "MinIO's answer: {status}");
    let _ = data.await.unwrap();
    let got = direct.get_many(&[data_key, lease_key]).await.unwrap();
    assert_eq!(got[0].as_deref(), Some(block_data(1, 1, 4096).as_ref()));
    assert_eq!(got[1].as_deref(), Some(&b"lease"[..]));
}

/// A PUT's attempt is given time for its size: over an uplink of 256 KiB/s
/// (the relay paced), a 1 MiB checkpoint-like control write and a 1 MiB data
/// PUT each take about 4 s, longer than the store's 2 s attempt timeout, and
/// both land in one attempt (`SLOWEST_UPLOAD`: 2 s + 8 s for 1 MiB). With the
/// bare attempt timeout every attempt of a large object on a slow link timed
/// out (a node's 40 MiB checkpoint over 8 Mbit/s never landed); this fails
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_put_over_a_slow_uplink_gets_an_attempt_as_long_as_its_size_needs() {
    use oram_blockstore::{BlockStore, ObjKey, PutCondition};
    let (_minio, direct, relay, mut cfg) = behind_a_relay("slowup").await;
    cfg.max_attempts = 1;
    cfg.attempt_timeout = Duration::from_secs(2);
    let store = oram_store_s3::S3Store::new(&cfg).await;
    relay.pace_uploads(256 * 1024);
    let big = |i: u64| bytes::Bytes::from(vec![i as u8; 1 << 20]);
    let control = ObjKey::new("meta/checkpoint").unwrap();
    let data = ObjKey::new("vol0/L/3").unwrap();
    store
        .put_if(&control, big(1), PutCondition::IfAbsent)
        .await
        .expect("a 1 MiB control write lands over 256 KiB/s");
    store
        .put_many(vec![(data.clone(), big(2))])
        .await
        .expect("a 1 MiB data PUT lands over 256 KiB/s");
    let got = direct.get_many(&[control, data]).await.unwrap();
    assert_eq!(got[0].as_deref(), Some(big(1).as_ref()));
    assert_eq!(got[1].as_deref(), Some(big(2).as_ref()));
}

/// A data PUT this store gave up on (its attempt timed out in transit) that
/// lands later is recognised as its own: the next write of the key replaces
/// it (conditional on the tag just read) instead of being refused as another
/// writer's, which made a whole round fail and be repeated, with "changed by
/// another writer (a second proxy?)" in the log (seen 14 times in a
/// 64-client run on a saturated link). Bytes another writer put there are
/// still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_landing_put_of_this_store_is_replaced_and_another_writer_s_is_not() {
    let (_minio, direct, relay, store, key) = a_put_held_past_its_timeout("ownlate", true).await;
    let v = version;
    relay.release();
    let status = relay
        .held_status(Duration::from_secs(60))
        .await
        .expect("MinIO answers the late PUT");
    assert!(status.contains(" 200 "), "the late PUT landed: {status}");
    let read = |direct: &oram_store_s3::S3Store| {
        let (direct, key) = (direct.clone(), key.clone());
        async move { direct.get_many(&[key]).await.unwrap()[0].clone() }
    };
    assert_eq!(read(&direct).await.as_deref(), Some(v(2).as_ref()));
    store
        .put_many(vec![(key.clone(), v(3))])
        .await
        .expect("this store's own late write is replaced");
    assert_eq!(read(&direct).await.as_deref(), Some(v(3).as_ref()));
    direct.put_many(vec![(key.clone(), v(9))]).await.unwrap();
    let refused = store.put_many(vec![(key.clone(), v(4))]).await;
    assert!(
        matches!(
            refused,
            Err(oram_blockstore::StoreError::PreconditionFailed { .. })
        ),
        "another writer's bytes replaced: {refused:?}"
    );
    assert_eq!(read(&direct).await.as_deref(), Some(v(9).as_ref()));
}
