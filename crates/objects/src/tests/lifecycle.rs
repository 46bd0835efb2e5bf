//! Lifecycle rules and the sweep of stale multipart uploads.

use super::*;

const DAY_MS: i64 = 24 * 3600 * 1000;

/// Starts an upload of `key` in `a/bkt` with one part of 300 bytes (5 blocks)
/// and makes it `age_days` older than it is.
async fn upload(l: &ObjectLayer, key: &str, age_days: i64) -> String {
    let id = l
        .create_multipart("a", "bkt", key, ObjectMeta::default())
        .await
        .unwrap();
    l.upload_part(
        "a",
        ("bkt", key, &id),
        1,
        body(data(300, 1)),
        part_opts(Some(300)),
    )
    .await
    .unwrap();
    // Backdated in the index, as if started `age_days` ago.
    let mut m = l.shared.lock();
    let mut u: UploadRecord = decode(&m.kv.get(&upload_key(&id)).unwrap()).unwrap();
    u.initiated_ms -= age_days * DAY_MS;
    m.kv.put(&upload_key(&id), encode(&u));
    id
}

fn exists(l: &ObjectLayer, key: &str, id: &str) -> bool {
    match l.get_upload("a", "bkt", key, id) {
        Ok(_) => true,
        Err(ObjectError::NoSuchUpload(_)) => false,
        Err(e) => panic!("{e}"),
    }
}

fn rule(id: &str, prefix: &str, days: u32) -> LifecycleRule {
    LifecycleRule {
        id: id.into(),
        enabled: true,
        prefix: prefix.into(),
        abort_incomplete_days: days,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_rule_aborts_the_uploads_older_than_its_days_and_frees_their_blocks() {
    let l = layer(256);
    l.create_bucket("a", "bkt").await.unwrap();
    assert!(l.bucket_lifecycle("a", "bkt").unwrap().is_empty());
    let rules = vec![rule("tmp", "tmp/", 2)];
    l.set_bucket_lifecycle("a", "bkt", rules.clone())
        .await
        .unwrap();
    assert_eq!(l.bucket_lifecycle("a", "bkt").unwrap(), rules);
    let free = l.usage().free_blocks;
    let old = upload(&l, "tmp/old", 3).await;
    let young = upload(&l, "tmp/young", 1).await;
    let elsewhere = upload(&l, "keep/x", 30).await;
    let per_upload = (free - l.usage().free_blocks) / 3;
    assert_eq!(per_upload, 5);
    let accesses = l.engine().stats().accesses;
    let now = now_ms();
    // The default does not apply: the bucket has its own rule.
    assert_eq!(l.abort_stale_uploads(now, 7, 100).await.unwrap(), 1);
    assert!(!exists(&l, "tmp/old", &old));
    assert!(exists(&l, "tmp/young", &young));
    assert!(exists(&l, "keep/x", &elsewhere));
    assert_eq!(l.usage().free_blocks, free - 2 * per_upload);
    assert_eq!(
        l.engine().stats().accesses,
        accesses,
        "aborting touches no block"
    );
    assert_eq!(l.abort_stale_uploads(now, 7, 100).await.unwrap(), 0);
    // The younger one is due a day later.
    assert_eq!(
        l.abort_stale_uploads(now + DAY_MS, 7, 100).await.unwrap(),
        1
    );
    assert!(!exists(&l, "tmp/young", &young));
    // With the rule disabled the bucket has none of its own: the default applies.
    let mut off = rule("tmp", "tmp/", 2);
    off.enabled = false;
    l.set_bucket_lifecycle("a", "bkt", vec![off]).await.unwrap();
    assert_eq!(l.abort_stale_uploads(now, 7, 100).await.unwrap(), 1);
    assert!(!exists(&l, "keep/x", &elsewhere));
    assert_eq!(l.usage().free_blocks, free);
    // Removing the configuration.
    l.set_bucket_lifecycle("a", "bkt", Vec::new())
        .await
        .unwrap();
    assert!(l.bucket_lifecycle("a", "bkt").unwrap().is_empty());
}

#[tokio::test]
async fn without_a_rule_the_default_applies_and_0_disables_it() {
    let l = layer(256);
    l.create_bucket("a", "bkt").await.unwrap();
    let free = l.usage().free_blocks;
    let old = upload(&l, "k1", 8).await;
    let young = upload(&l, "k2", 6).await;
    let now = now_ms();
    assert_eq!(l.abort_stale_uploads(now, 0, 100).await.unwrap(), 0);
    assert!(exists(&l, "k1", &old) && exists(&l, "k2", &young));
    assert_eq!(l.abort_stale_uploads(now, 7, 100).await.unwrap(), 1);
    assert!(!exists(&l, "k1", &old));
    assert!(exists(&l, "k2", &young));
    assert_eq!(l.usage().free_blocks, free - 5);
    // At most `limit` per call.
    let third = upload(&l, "k3", 9).await;
    assert_eq!(l.abort_stale_uploads(now, 1, 1).await.unwrap(), 1);
    assert_eq!(l.abort_stale_uploads(now, 1, 1).await.unwrap(), 1);
    assert!(!exists(&l, "k2", &young) && !exists(&l, "k3", &third));
    assert_eq!(l.usage().free_blocks, free);
}

#[tokio::test]
async fn the_shortest_matching_rule_wins_and_bad_configurations_are_refused() {
    let rules = vec![rule("a", "", 10), rule("b", "logs/", 3)];
    assert_eq!(abort_days(&rules, "logs/x", 7), Some(3));
    assert_eq!(abort_days(&rules, "data/x", 7), Some(10));
    assert_eq!(abort_days(&[rule("b", "logs/", 3)], "data/x", 7), None);
    assert_eq!(abort_days(&[], "data/x", 7), Some(7));
    assert_eq!(abort_days(&[], "data/x", 0), None);
    let l = layer(64);
    l.create_bucket("a", "bkt").await.unwrap();
    for bad in [
        vec![rule("x", "", 1), rule("x", "p/", 2)],
        vec![rule("x", "", 0)],
        vec![rule(&"i".repeat(MAX_RULE_ID + 1), "", 1)],
    ] {
        assert!(matches!(
            l.set_bucket_lifecycle("a", "bkt", bad).await,
            Err(ObjectError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        l.set_bucket_lifecycle("a", "nope", vec![rule("x", "", 1)])
            .await,
        Err(ObjectError::NoSuchBucket(_))
    ));
    assert!(matches!(
        l.bucket_lifecycle("b", "bkt"),
        Err(ObjectError::NoSuchBucket(_))
    ));
}
