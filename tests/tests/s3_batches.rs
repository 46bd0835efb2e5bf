//! The S3 back-end's batches and ETag cache against MinIO, observed through a
//! relay that records what MinIO was sent: a failed request of a batch does not
//! keep the others from being sent, and a GET answered late does not leave a
//! stale ETag behind.

use std::time::Duration;

use oram_blockstore::{BlockStoreExt, ObjKey, SizeBound, StoreError};
use oram_store_s3::S3Store;
use oram_tests::relay::HoldRelay;
use oram_tests::servers::Minio;

/// A store on MinIO's bucket `bucket` (created) through a new relay, its
/// settings changed by `tune`, beside one that reaches MinIO directly.
async fn relayed(
    minio: &Minio,
    bucket: &str,
    max_in_flight: usize,
    tune: impl FnOnce(&mut oram_store_s3::S3StoreConfig),
) -> (S3Store, S3Store, HoldRelay) {
    let direct = minio.store(bucket, "p").await;
    let relay = HoldRelay::start(format!("127.0.0.1:{}", minio.port).parse().unwrap()).await;
    let mut cfg = minio.store_config(bucket, "p");
    cfg.endpoint = Some(format!("http://{}", relay.addr()));
    cfg.max_in_flight = max_in_flight;
    tune(&mut cfg);
    (direct, S3Store::new(&cfg).await, relay)
}

/// The keys `p/<i>` a request line of `method` names (the path, before any query).
/// Which of `keys` the relay never saw a `method` request for, and what it saw.
fn unsent(
    relay: &HoldRelay,
    method: &str,
    bucket: &str,
    keys: &[ObjKey],
) -> (Vec<ObjKey>, Vec<String>) {
    let prefix = format!("{method} /{bucket}/p/");
    let got: Vec<String> = relay
        .requests()
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.split(['?', ' ']).next().unwrap_or("").to_string())
        .collect();
    let missing = keys
        .iter()
        .filter(|k| !got.iter().any(|g| g == k.as_str()))
        .cloned()
        .collect();
    (missing, got)
}

fn keys(n: usize) -> Vec<ObjKey> {
    (0..n)
        .map(|i| ObjKey::new(format!("n/{i}")).unwrap())
        .collect()
}

/// One GET of a batch fails (the object is not of the size the caller expects)
/// while the others wait for the one connection slot: every other GET is still
/// sent to MinIO, and the batch reports the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_get_of_a_batch_still_sends_every_other_get() {
    let minio = Minio::start();
    let (direct, store, relay) = relayed(&minio, "batch-get", 1, |_| {}).await;
    let keys = keys(8);
    let mut items: Vec<_> = keys
        .iter()
        .map(|k| (k.clone(), bytes::Bytes::from_static(b"x")))
        .collect();
    items[0].1 = bytes::Bytes::from_static(b"xx");
    direct.put_many(items).await.unwrap();
    let err = store
        .get_many_bounded(&keys, SizeBound::Exact(1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::WrongSize { .. }), "{err:?}");
    let (missing, got) = unsent(&relay, "GET", "batch-get", &keys);
    assert!(
        missing.is_empty(),
        "GETs never sent: {missing:?} (sent: {got:?})"
    );
}

/// One PUT of a batch fails (held in transit past its only attempt's timeout)
/// while the others wait for the one connection slot: every other PUT is still
/// sent to MinIO and lands, and the batch reports the failure. (A refused
/// condition would not do: its resolution GET queues behind the other PUTs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_put_of_a_batch_still_sends_every_other_put() {
    let minio = Minio::start();
    let (direct, store, relay) = relayed(&minio, "batch-put", 1, |cfg| {
        cfg.max_attempts = 1;
        cfg.attempt_timeout = Duration::from_secs(2);
    })
    .await;
    let keys = keys(8);
    relay.arm();
    let items = keys
        .iter()
        .map(|k| (k.clone(), bytes::Bytes::from_static(b"2")))
        .collect();
    let err = store.put_many(items).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(relay.holding(), "the relay held the first PUT");
    let (missing, got) = unsent(&relay, "PUT", "batch-put", &keys);
    assert!(
        missing.is_empty(),
        "PUTs never sent: {missing:?} (sent: {got:?})"
    );
    let now = direct.get_many(&keys).await.unwrap();
    assert_eq!(now[0], None, "the held PUT never reached MinIO");
    assert!(now[1..].iter().all(|o| o.as_deref() == Some(&b"2"[..])));
}

/// A read-ahead GET of an object the round before is PUTting: MinIO answers
/// it with the old version, the answer is delayed in transit until the PUT has
/// landed and recorded the new ETag, then arrives. The next write of the
/// object is conditional on the PUT's ETag, not the late GET's, so it succeeds
/// (a stale ETag would make it fail as "changed by another writer").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_answered_after_a_put_leaves_the_put_s_etag() {
    let minio = Minio::start();
    let (direct, store, relay) = relayed(&minio, "late-get", 32, |_| {}).await;
    let key = ObjKey::new("n/7").unwrap();
    let v = |b: &'static [u8]| vec![(key.clone(), bytes::Bytes::from_static(b))];
    store.put_many(v(b"v1")).await.unwrap();
    relay.arm_answer();
    let reader = store.clone();
    let k = key.clone();
    let get = tokio::spawn(async move { reader.get_many(std::slice::from_ref(&k)).await });
    assert!(
        relay.answer_held(Duration::from_secs(30)).await,
        "MinIO answered the GET (held in transit)"
    );
    store.put_many(v(b"v2")).await.unwrap();
    relay.release();
    let old = tokio::time::timeout(Duration::from_secs(60), get)
        .await
        .expect("the GET ends")
        .unwrap()
        .unwrap();
    assert_eq!(
        old[0].as_deref(),
        Some(&b"v1"[..]),
        "the GET saw the old version"
    );
    store.put_many(v(b"v3")).await.unwrap();
    assert_eq!(
        direct.get_many(std::slice::from_ref(&key)).await.unwrap()[0].as_deref(),
        Some(&b"v3"[..])
    );
}
