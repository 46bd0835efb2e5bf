//! Object and bucket tags: set on PUT, per version, kept by copies and
//! multipart completion, limits checked; no block is accessed.

use super::*;

fn tags(pairs: &[(&str, &str)]) -> Tags {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn tags_follow_versions_copies_and_uploads() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let v1 = l
        .put_object(
            "a",
            "bkt",
            "k",
            body(data(100, 1)),
            PutOptions {
                tags: tags(&[("project", "x")]),
                ..PutOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(v1.tags, tags(&[("project", "x")]));
    let v2 = l
        .put_object("a", "bkt", "k", body(data(100, 2)), PutOptions::default())
        .await
        .unwrap();
    assert!(v2.tags.is_empty());
    // Tagging a version changes it in place: no new version, same time, no access.
    let accesses = l.engine().stats().accesses;
    let t = l
        .set_object_tags("a", ("bkt", "k"), Some(&v1.version_id), tags(&[("b", "2")]))
        .await
        .unwrap();
    assert_eq!((t.id, t.modified_ms), (v1.id, v1.modified_ms));
    assert_eq!(
        l.head_object_version("a", "bkt", "k", &v1.version_id)
            .unwrap()
            .tags,
        tags(&[("b", "2")])
    );
    l.set_object_tags("a", ("bkt", "k"), None, tags(&[("cur", "1")]))
        .await
        .unwrap();
    assert_eq!(
        l.head_object("a", "bkt", "k").unwrap().tags,
        tags(&[("cur", "1")])
    );
    assert_eq!(l.engine().stats().accesses, accesses);
    let p = VersionParams {
        max_keys: 10,
        ..Default::default()
    };
    assert_eq!(
        l.list_object_versions("a", "bkt", &p)
            .unwrap()
            .versions
            .len(),
        2
    );
    // A delete marker cannot be tagged.
    let m = l
        .delete_object_versioned("a", "bkt", "k", None)
        .await
        .unwrap();
    assert!(matches!(
        l.set_object_tags("a", ("bkt", "k"), m.version_id.as_deref(), Tags::new())
            .await,
        Err(ObjectError::DeleteMarker {
            by_version: true,
            ..
        })
    ));
    // A copy keeps the source's tags unless given others.
    let src = l
        .open_object_version("a", "bkt", "k", &v1.version_id)
        .unwrap();
    let c = l
        .copy_object("a", src, ("bkt", "k"), ("bkt", "c1"), None, 0)
        .await
        .unwrap();
    assert_eq!(c.tags, tags(&[("b", "2")]));
    let src = l
        .open_object_version("a", "bkt", "k", &v1.version_id)
        .unwrap();
    let c = l
        .copy_object_with(
            "a",
            src,
            (("bkt", "k"), ("bkt", "c2")),
            CopyOptions {
                tags: Some(Tags::new()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(c.tags.is_empty());
    // A multipart upload's tags go to the object it makes.
    let id = l
        .create_multipart_tagged("a", "bkt", "mp", ObjectMeta::default(), tags(&[("m", "p")]))
        .await
        .unwrap();
    let part = l
        .upload_part(
            "a",
            ("bkt", "mp", &id),
            1,
            body(data(10, 3)),
            part_opts(None),
        )
        .await
        .unwrap();
    let rec = l
        .complete_multipart(
            "a",
            ("bkt", "mp", &id),
            &[(1, part.etag)],
            &PutMode::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(rec.tags, tags(&[("m", "p")]));
    // Bucket tags.
    l.set_bucket_tags("a", "bkt", tags(&[("team", "t")]))
        .await
        .unwrap();
    assert_eq!(
        l.head_bucket("a", "bkt").unwrap().tags,
        tags(&[("team", "t")])
    );
}

#[test]
fn tag_sets_keep_aws_limits() {
    let pair = |k: String, v: String| vec![(k, v)];
    assert!(tag_set(pair("k".repeat(128), "v".repeat(256)), MAX_OBJECT_TAGS).is_ok());
    // Characters, not bytes.
    assert!(tag_set(pair("é".repeat(128), "é".repeat(256)), MAX_OBJECT_TAGS).is_ok());
    for bad in [
        pair("k".repeat(129), "v".into()),
        pair("k".into(), "v".repeat(257)),
        pair(String::new(), "v".into()),
        pair("aws:x".into(), "v".into()),
        vec![("a".into(), "1".into()), ("a".into(), "2".into())],
        (0..11).map(|i| (format!("k{i}"), String::new())).collect(),
    ] {
        assert!(
            matches!(
                tag_set(bad.clone(), MAX_OBJECT_TAGS),
                Err(ObjectError::InvalidTag(_))
            ),
            "{bad:?}"
        );
    }
    let fifty: Vec<_> = (0..50).map(|i| (format!("k{i}"), String::new())).collect();
    assert!(tag_set(fifty, MAX_BUCKET_TAGS).is_ok());
}
