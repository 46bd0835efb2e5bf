//! Lifecycle rules filtered by tags and object size (S3's `Filter/Tag`,
//! `ObjectSizeGreaterThan`, `ObjectSizeLessThan` and `And`), with the
//! sweep's clock given by the test (no sleeping): each version is judged by
//! its own tags and size, no block is accessed, and the filters S3 refuses are
//! refused.

use super::expiration::versions;
use super::*;
use crate::expiration::midnight_at_or_after;

const DAY: i64 = 24 * 3600 * 1000;

/// The first midnight at least `n` days after `t`.
fn day(t: i64, n: i64) -> i64 {
    midnight_at_or_after(t + n * DAY)
}

fn tags(pairs: &[(&str, &str)]) -> Tags {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Puts `len` bytes at `a/bkt/key` with `pairs` as its tags.
async fn put(l: &ObjectLayer, key: &str, len: usize, pairs: &[(&str, &str)]) -> ObjectRecord {
    l.put_object(
        "a",
        "bkt",
        key,
        body(data(len, 5)),
        PutOptions {
            tags: tags(pairs),
            ..PutOptions::default()
        },
    )
    .await
    .unwrap()
}

/// An enabled rule expiring current versions after a day, with `prefix`.
fn expiring(prefix: &str) -> LifecycleRule {
    LifecycleRule {
        enabled: true,
        prefix: prefix.into(),
        expiration_days: 1,
        ..Default::default()
    }
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Which of `keys` still exist in `a/bkt` (as current versions).
fn present<'k>(l: &ObjectLayer, keys: &[&'k str]) -> Vec<&'k str> {
    keys.iter()
        .copied()
        .filter(|k| l.head_object("a", "bkt", k).is_ok())
        .collect()
}

#[tokio::test]
async fn a_tag_filter_expires_only_the_objects_carrying_all_its_tags() {
    let l = layer(1024);
    l.create_bucket("a", "bkt").await.unwrap();
    let free = l.usage().free_blocks;
    let ts = now_ms();
    put(&l, "both", 100, &[("env", "tmp"), ("team", "x")]).await;
    put(
        &l,
        "more",
        100,
        &[("env", "tmp"), ("team", "x"), ("n", "1")],
    )
    .await;
    put(&l, "one", 100, &[("env", "tmp")]).await;
    put(&l, "other", 100, &[("env", "prod"), ("team", "x")]).await;
    put(&l, "none", 100, &[]).await;
    put(&l, "empty", 100, &[("flag", "")]).await;
    put(&l, "set", 100, &[("flag", "1")]).await;
    let t0 = now_ms();
    let per_object = (free - l.usage().free_blocks) / 7;
    let mut two = expiring("");
    two.tags = pairs(&[("team", "x"), ("env", "tmp")]);
    // A tag given without a value selects the tag with an empty value only.
    let mut flag = expiring("");
    flag.tags = pairs(&[("flag", "")]);
    l.set_bucket_lifecycle("a", "bkt", vec![two.clone(), flag.clone()])
        .await
        .unwrap();
    assert_eq!(l.bucket_lifecycle("a", "bkt").unwrap(), vec![two, flag]);
    let accesses = l.engine().stats().accesses;
    assert_eq!(l.expire_by_lifecycle(ts + DAY - 1, 100).await.unwrap(), 0);
    assert_eq!(l.expire_by_lifecycle(day(t0, 1), 100).await.unwrap(), 3);
    let all = ["both", "more", "one", "other", "none", "empty", "set"];
    assert_eq!(present(&l, &all), vec!["one", "other", "none", "set"]);
    assert_eq!(l.usage().free_blocks, free - 4 * per_object);
    // Tags are read at each sweep: an object tagged since goes at the next.
    l.set_object_tags(
        "a",
        ("bkt", "one"),
        None,
        tags(&[("env", "tmp"), ("team", "x")]),
    )
    .await
    .unwrap();
    assert_eq!(l.expire_by_lifecycle(day(t0, 1), 100).await.unwrap(), 1);
    assert_eq!(present(&l, &all), vec!["other", "none", "set"]);
    assert_eq!(
        l.engine().stats().accesses,
        accesses,
        "filtering and expiring touch no block"
    );
}

#[tokio::test]
async fn size_filters_select_strictly_above_and_below_their_bounds() {
    let l = layer(1024);
    l.create_bucket("a", "bkt").await.unwrap();
    let sizes = [0usize, 100, 101, 199, 200];
    let keys = ["s0", "s100", "s101", "s199", "s200"];
    for (k, n) in keys.iter().zip(sizes) {
        put(&l, k, n, &[]).await;
    }
    let t = day(now_ms(), 1);
    let mut between = expiring("");
    between.size_greater_than = Some(100);
    between.size_less_than = Some(200);
    l.set_bucket_lifecycle("a", "bkt", vec![between])
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 2);
    assert_eq!(present(&l, &keys), vec!["s0", "s100", "s200"]);
    let mut above = expiring("");
    above.size_greater_than = Some(199);
    l.set_bucket_lifecycle("a", "bkt", vec![above])
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 1);
    assert_eq!(present(&l, &keys), vec!["s0", "s100"]);
    // Greater than 0 leaves the empty object; less than 1 takes it alone.
    let mut nonempty = expiring("");
    nonempty.size_greater_than = Some(100);
    l.set_bucket_lifecycle("a", "bkt", vec![nonempty])
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 0);
    let mut empty = expiring("");
    empty.size_less_than = Some(1);
    l.set_bucket_lifecycle("a", "bkt", vec![empty])
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 1);
    assert_eq!(present(&l, &keys), vec!["s100"]);
    let mut below = expiring("");
    below.size_less_than = Some(101);
    l.set_bucket_lifecycle("a", "bkt", vec![below])
        .await
        .unwrap();
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 1);
    assert!(present(&l, &keys).is_empty());
}

#[tokio::test]
async fn and_combines_prefix_tags_and_sizes() {
    let l = layer(1024);
    l.create_bucket("a", "bkt").await.unwrap();
    let tmp = [("env", "tmp")];
    put(&l, "logs/hit", 150, &tmp).await;
    put(&l, "logs/large", 300, &tmp).await;
    put(&l, "logs/small", 10, &tmp).await;
    put(&l, "logs/untagged", 150, &[]).await;
    put(&l, "data/hit", 150, &tmp).await;
    let mut r = expiring("logs/");
    r.tags = pairs(&tmp);
    r.size_greater_than = Some(10);
    r.size_less_than = Some(300);
    l.set_bucket_lifecycle("a", "bkt", vec![r]).await.unwrap();
    let accesses = l.engine().stats().accesses;
    let t = day(now_ms(), 1);
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 1);
    let keys = [
        "logs/hit",
        "logs/large",
        "logs/small",
        "logs/untagged",
        "data/hit",
    ];
    assert_eq!(present(&l, &keys), keys[1..].to_vec());
    assert_eq!(l.expire_by_lifecycle(t, 100).await.unwrap(), 0);
    assert_eq!(l.engine().stats().accesses, accesses);
}

#[tokio::test]
async fn versions_are_judged_by_their_own_tags() {
    let l = layer(1024);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let scratch = [("class", "scratch")];
    let v1 = put(&l, "k", 100, &scratch).await;
    let v2 = put(&l, "k", 100, &[]).await;
    let v3 = put(&l, "k", 100, &scratch).await;
    put(&l, "plain", 100, &[]).await;
    let t0 = now_ms();
    let mut noncurrent = LifecycleRule {
        enabled: true,
        noncurrent_days: 1,
        ..Default::default()
    };
    noncurrent.tags = pairs(&scratch);
    l.set_bucket_lifecycle("a", "bkt", vec![noncurrent.clone()])
        .await
        .unwrap();
    let accesses = l.engine().stats().accesses;
    // v1 (tagged) goes; v2 (untagged) stays; v3 is current.
    assert_eq!(l.expire_by_lifecycle(day(t0, 1), 100).await.unwrap(), 1);
    assert_eq!(
        versions(&l, "k"),
        vec![
            (v3.version_id.clone(), false),
            (v2.version_id.clone(), false)
        ]
    );
    assert_ne!(v1.version_id, v2.version_id);
    // Expiring tagged current versions: a marker in front of v3 only.
    let mut current = expiring("");
    current.tags = pairs(&scratch);
    l.set_bucket_lifecycle("a", "bkt", vec![noncurrent, current])
        .await
        .unwrap();
    let t1 = now_ms();
    assert_eq!(l.expire_by_lifecycle(day(t1, 1), 100).await.unwrap(), 1);
    let after = versions(&l, "k");
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after[0].1, "a delete marker is the newest: {after:?}");
    assert!(l.head_object("a", "bkt", "plain").is_ok());
    // v3, noncurrent since the marker, goes a day later; v2 and the marker,
    // which carry no tags, stay.
    assert_eq!(l.expire_by_lifecycle(day(t1, 3), 100).await.unwrap(), 1);
    let left = versions(&l, "k");
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left[0].1);
    assert_eq!(left[1], (v2.version_id.clone(), false));
    assert_eq!(l.expire_by_lifecycle(day(t1, 30), 100).await.unwrap(), 0);
    assert_eq!(l.engine().stats().accesses, accesses);
}

#[tokio::test]
async fn filters_s3_refuses_are_refused() {
    let l = layer(64);
    l.create_bucket("a", "bkt").await.unwrap();
    let tagged = |r: LifecycleRule| LifecycleRule {
        tags: pairs(&[("k", "v")]),
        ..r
    };
    let sized = |r: LifecycleRule| LifecycleRule {
        size_greater_than: Some(5),
        ..r
    };
    let abort = LifecycleRule {
        enabled: true,
        abort_incomplete_days: 1,
        ..Default::default()
    };
    let marker = LifecycleRule {
        enabled: true,
        expired_object_delete_marker: true,
        ..Default::default()
    };
    let mut twice = expiring("");
    twice.tags = pairs(&[("k", "v"), ("k", "w")]);
    let mut none_below = expiring("");
    none_below.size_less_than = Some(0);
    let mut crossed = expiring("");
    crossed.size_greater_than = Some(10);
    crossed.size_less_than = Some(10);
    for (bad, message) in [
        (
            tagged(abort.clone()),
            "AbortIncompleteMultipartUpload cannot be specified with Tags.",
        ),
        (
            sized(abort),
            "AbortIncompleteMultipartUpload cannot be specified with Object Size.",
        ),
        (
            tagged(marker.clone()),
            "ExpiredObjectDeleteMarker cannot be specified with Tags.",
        ),
        (
            sized(marker),
            "ExpiredObjectDeleteMarker cannot be specified with Object Size.",
        ),
        (twice, "Duplicate Tag Keys are not allowed."),
        (none_below, "'ObjectSizeLessThan' must be at least 1"),
        (
            crossed,
            "'ObjectSizeLessThan' has to be a value greater than 'ObjectSizeGreaterThan'.",
        ),
    ] {
        match l.set_bucket_lifecycle("a", "bkt", vec![bad.clone()]).await {
            Err(ObjectError::InvalidRequest(m)) => assert_eq!(m, message, "{bad:?}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let mut eleven = expiring("");
    eleven.tags = (0..=MAX_OBJECT_TAGS)
        .map(|i| (format!("k{i}"), String::new()))
        .collect();
    let mut empty_key = expiring("");
    empty_key.tags = pairs(&[("", "v")]);
    let mut long_value = expiring("");
    long_value.tags = vec![("k".into(), "v".repeat(MAX_TAG_VALUE + 1))];
    for bad in [eleven, empty_key, long_value] {
        assert!(
            matches!(
                l.set_bucket_lifecycle("a", "bkt", vec![bad.clone()]).await,
                Err(ObjectError::InvalidArgument(_))
            ),
            "{bad:?}"
        );
    }
    assert!(l.bucket_lifecycle("a", "bkt").unwrap().is_empty());
    // The same filters with expirations are kept as given; an upload abort
    // in another rule of the configuration is fine.
    let mut ok = sized(tagged(expiring("p/")));
    ok.size_less_than = Some(6);
    ok.noncurrent_days = 2;
    let mut abort_all = expiring("");
    abort_all.expiration_days = 0;
    abort_all.abort_incomplete_days = 3;
    let rules = vec![ok, abort_all];
    l.set_bucket_lifecycle("a", "bkt", rules.clone())
        .await
        .unwrap();
    assert_eq!(l.bucket_lifecycle("a", "bkt").unwrap(), rules);
}
