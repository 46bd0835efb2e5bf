//! S3 versioning: versions kept, read, listed, deleted; delete markers; the
//! null version; blocks of deleted versions freed.

use super::*;

async fn put(l: &ObjectLayer, key: &str, d: &Bytes) -> ObjectRecord {
    l.put_object(
        "a",
        "bkt",
        key,
        body(d.clone()),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap()
}

async fn get_version(l: &ObjectLayer, key: &str, vid: &str) -> Result<Bytes> {
    let o = l.open_object_version("a", "bkt", key, vid)?;
    read_all(l.read(o, None)?).await
}

fn versions(l: &ObjectLayer, prefix: &str) -> Vec<(String, String, bool, bool)> {
    let p = VersionParams {
        prefix: prefix.into(),
        max_keys: 1000,
        ..Default::default()
    };
    l.list_object_versions("a", "bkt", &p)
        .unwrap()
        .versions
        .into_iter()
        .map(|e| {
            (
                e.key,
                e.rec.version_label().to_string(),
                e.rec.delete_marker,
                e.is_latest,
            )
        })
        .collect()
}

/// Blocks the index's records hold (as `oram-proxy stats` counts them).
fn blocks_held(l: &ObjectLayer) -> u64 {
    let m = l.shared.lock();
    let mut objects = Vec::new();
    scan_prefix(m.kv.as_ref(), BLOCK_RECORDS[0], |_, v| {
        objects.push(v.to_vec());
        Ok(())
    })
    .unwrap();
    blocks_in_use(objects.iter().map(Vec::as_slice), std::iter::empty()).unwrap()
}

#[tokio::test]
async fn versions_are_kept_read_by_id_listed_and_restored() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    let empty = l.usage().free_blocks;
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    assert_eq!(
        l.head_bucket("a", "bkt").unwrap().versioning,
        Versioning::Enabled
    );
    let (d1, d2) = (data(200, 1), data(130, 2));
    let v1 = put(&l, "k", &d1).await;
    let v2 = put(&l, "k", &d2).await;
    assert_eq!(v1.version_id.len(), 32);
    assert_ne!(v1.version_id, v2.version_id);
    // Both versions hold their blocks: 4 + 3 of 64 bytes.
    assert_eq!(l.usage().free_blocks, empty - 7);
    assert_eq!(blocks_held(&l), 7);
    assert_eq!(get_version(&l, "k", &v1.version_id).await.unwrap(), d1);
    assert_eq!(
        l.get_object("a", "bkt", "k", None).map(|r| r.0.id).unwrap(),
        v2.id
    );

    // A delete without a version id makes a delete marker: in the index
    // only, like every operation on versions but reads and copies.
    let accesses = l.engine().stats().accesses;
    let del = l
        .delete_object_versioned("a", "bkt", "k", None)
        .await
        .unwrap();
    assert!(del.existed && del.delete_marker);
    let marker = del.version_id.unwrap();
    match l.head_object("a", "bkt", "k") {
        Err(ObjectError::DeleteMarker {
            version_id,
            by_version: false,
            ..
        }) => assert_eq!(version_id, marker),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        l.head_object_version("a", "bkt", "k", &marker),
        Err(ObjectError::DeleteMarker {
            by_version: true,
            ..
        })
    ));
    assert_eq!(l.usage().free_blocks, empty - 7);
    assert_eq!(
        versions(&l, ""),
        vec![
            ("k".into(), marker.clone(), true, true),
            ("k".into(), v2.version_id.clone(), false, false),
            ("k".into(), v1.version_id.clone(), false, false),
        ]
    );
    assert_eq!(l.engine().stats().accesses, accesses);
    // The check finds every version's blocks and reads past the marker.
    let check = l.check(&|_, _, _| {}).await.unwrap();
    assert!(check.is_clean(), "{:?}", check.problems);
    assert_eq!(check.blocks_used, 7);
    // The current listing no longer shows the key.
    let list = l
        .list_objects(
            "a",
            "bkt",
            &ListParams {
                max_keys: 10,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(list.objects.is_empty(), "{:?}", list.objects);
    // A bucket with versions is not empty.
    assert!(matches!(
        l.delete_bucket("a", "bkt").await,
        Err(ObjectError::BucketNotEmpty(_))
    ));

    // Restoring v1 by copying it onto its key makes a new, current version.
    let src = l
        .open_object_version("a", "bkt", "k", &v1.version_id)
        .unwrap();
    let v3 = l
        .copy_object("a", src, ("bkt", "k"), ("bkt", "k"), None, 0)
        .await
        .unwrap();
    let (rec, s) = l.get_object("a", "bkt", "k", None).unwrap();
    assert_eq!(rec.version_id, v3.version_id);
    assert_eq!(read_all(s).await.unwrap(), d1);
    assert_eq!(l.usage().free_blocks, empty - 11);
    assert_eq!(versions(&l, "").len(), 4);

    // Deleting every version for good frees every block, with no access.
    let accesses = l.engine().stats().accesses;
    for (_, vid, _, _) in versions(&l, "") {
        let d = l
            .delete_object_version("a", ("bkt", "k"), &vid, false)
            .await
            .unwrap();
        assert!(d.existed);
    }
    assert!(versions(&l, "").is_empty());
    assert_eq!(l.usage().free_blocks, empty);
    assert_eq!(blocks_held(&l), 0);
    assert_eq!(l.engine().stats().accesses, accesses);
    assert!(matches!(
        l.head_object("a", "bkt", "k"),
        Err(ObjectError::NoSuchKey(_))
    ));
    l.delete_bucket("a", "bkt").await.unwrap();
}

#[tokio::test]
async fn deleting_the_current_version_makes_the_previous_one_current() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let (d1, d2) = (data(100, 1), data(100, 2));
    let v1 = put(&l, "k", &d1).await;
    let v2 = put(&l, "k", &d2).await;
    let d = l
        .delete_object_version("a", ("bkt", "k"), &v2.version_id, false)
        .await
        .unwrap();
    assert!(d.existed && !d.delete_marker);
    let (rec, s) = l.get_object("a", "bkt", "k", None).unwrap();
    assert_eq!(rec.version_id, v1.version_id);
    assert_eq!(read_all(s).await.unwrap(), d1);
    // Removing a latest delete marker brings the object back.
    let m = l
        .delete_object_versioned("a", "bkt", "k", None)
        .await
        .unwrap();
    assert!(l.head_object("a", "bkt", "k").is_err());
    l.delete_object_version("a", ("bkt", "k"), m.version_id.as_deref().unwrap(), false)
        .await
        .unwrap();
    assert_eq!(l.head_object("a", "bkt", "k").unwrap().id, v1.id);
    // Unknown and malformed ids.
    assert!(matches!(
        l.head_object_version("a", "bkt", "k", &v2.version_id),
        Err(ObjectError::NoSuchVersion(_))
    ));
    assert!(matches!(
        l.head_object_version("a", "bkt", "k", "nonsense"),
        Err(ObjectError::InvalidArgument(_))
    ));
    let gone = l
        .delete_object_version("a", ("bkt", "k"), &v2.version_id, false)
        .await
        .unwrap();
    assert!(!gone.existed);
}

#[tokio::test]
async fn suspended_versioning_replaces_the_null_version() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    let empty = l.usage().free_blocks;
    // Written before versioning: the null version.
    let d0 = data(100, 0);
    put(&l, "k", &d0).await;
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let v1 = put(&l, "k", &data(100, 1)).await;
    assert_eq!(get_version(&l, "k", "null").await.unwrap(), d0);
    l.set_bucket_versioning("a", "bkt", Versioning::Suspended)
        .await
        .unwrap();
    let d2 = data(64, 2);
    let n = put(&l, "k", &d2).await;
    assert!(n.version_id.is_empty() && n.seq > 0);
    // The old null version went (its 2 blocks freed); v1 stays.
    assert_eq!(
        versions(&l, ""),
        vec![
            ("k".into(), "null".into(), false, true),
            ("k".into(), v1.version_id.clone(), false, false),
        ]
    );
    assert_eq!(l.usage().free_blocks, empty - 3);
    assert_eq!(get_version(&l, "k", "null").await.unwrap(), d2);
    // A delete makes a null delete marker in place of the null version.
    let d = l
        .delete_object_versioned("a", "bkt", "k", None)
        .await
        .unwrap();
    assert_eq!(d.version_id.as_deref(), Some("null"));
    assert_eq!(
        versions(&l, ""),
        vec![
            ("k".into(), "null".into(), true, true),
            ("k".into(), v1.version_id.clone(), false, false),
        ]
    );
    assert_eq!(l.usage().free_blocks, empty - 2);
    // A bucket cannot go back to unversioned.
    assert!(l
        .set_bucket_versioning("a", "bkt", Versioning::Off)
        .await
        .is_err());
}

#[tokio::test]
async fn version_listings_page_with_markers_and_roll_up_prefixes() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    for key in ["a", "b", "d/x", "d/y"] {
        put(&l, key, &data(10, 1)).await;
        put(&l, key, &data(10, 2)).await;
    }
    l.delete_object_versioned("a", "bkt", "b", None)
        .await
        .unwrap();
    let all = versions(&l, "");
    assert_eq!(all.len(), 9);
    // Pages of two, following the markers, give the same entries.
    let mut paged = Vec::new();
    let mut p = VersionParams {
        max_keys: 2,
        ..Default::default()
    };
    for _ in 0..10 {
        let r = l.list_object_versions("a", "bkt", &p).unwrap();
        paged.extend(r.versions.into_iter().map(|e| {
            (
                e.key,
                e.rec.version_label().to_string(),
                e.rec.delete_marker,
                e.is_latest,
            )
        }));
        if !r.truncated {
            break;
        }
        p.key_marker = r.next_key_marker;
        p.version_id_marker = r.next_version_id_marker;
    }
    assert_eq!(paged, all);
    // With a delimiter, d/ is one common prefix.
    let r = l
        .list_object_versions(
            "a",
            "bkt",
            &VersionParams {
                delimiter: Some("/".into()),
                max_keys: 100,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(r.common_prefixes, vec!["d/".to_string()]);
    assert_eq!(r.versions.len(), 5);
    // The current listing shows a, d/x, d/y (b's newest is a delete marker).
    let cur = l
        .list_objects(
            "a",
            "bkt",
            &ListParams {
                max_keys: 100,
                ..Default::default()
            },
        )
        .unwrap();
    let keys: Vec<_> = cur.objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "d/x", "d/y"]);
}

#[tokio::test]
async fn an_unversioned_bucket_stores_records_as_before() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    put(&l, "k", &data(10, 1)).await;
    put(&l, "k", &data(10, 2)).await;
    let m = l.shared.lock();
    let raw = m.kv.get(&object_key("a", "bkt", "k")).unwrap();
    let text = String::from_utf8(raw).unwrap();
    for field in ["version_id", "seq", "delete_marker", "tags"] {
        assert!(!text.contains(field), "{text}");
    }
    let braw = String::from_utf8(m.kv.get(&bucket_key("a", "bkt")).unwrap()).unwrap();
    assert!(!braw.contains("versioning"), "{braw}");
    let mut n = 0;
    scan_prefix(m.kv.as_ref(), &objects_base("a", "bkt"), |_, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn multipart_completion_into_a_versioned_bucket_keeps_the_old_version() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    l.set_bucket_versioning("a", "bkt", Versioning::Enabled)
        .await
        .unwrap();
    let v1 = put(&l, "k", &data(100, 1)).await;
    let id = l
        .create_multipart("a", "bkt", "k", ObjectMeta::default())
        .await
        .unwrap();
    let p = l
        .upload_part(
            "a",
            ("bkt", "k", &id),
            1,
            body(data(50, 3)),
            part_opts(None),
        )
        .await
        .unwrap();
    let rec = l
        .complete_multipart("a", ("bkt", "k", &id), &[(1, p.etag)], &PutMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(rec.version_id.len(), 32);
    let v = versions(&l, "");
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].1, rec.version_id);
    assert_eq!(v[1].1, v1.version_id);
    assert_eq!(
        get_version(&l, "k", &v1.version_id).await.unwrap(),
        data(100, 1)
    );
}
