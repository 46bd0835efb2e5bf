//! Unit tests of the object layer over a real Path ORAM on the memory store.

use super::*;
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{MemKv, MemState};
use oram_store_memory::MemoryStore;

const BS: usize = 64;

fn layer(capacity: u64) -> ObjectLayer {
    let oram = PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity,
                block_size: BS,
                cached_levels: 3,
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
        Arc::new(MemoryStore::new()),
        Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random())),
        Box::new(MemState::new()),
    )
    .unwrap();
    ObjectLayer::new(
        Arc::new(oram),
        Box::new(MemKv::new()),
        LayerConfig {
            batch_blocks: 4,
            min_part_size: 100,
        },
    )
    .unwrap()
}

fn data(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect::<Vec<_>>()
        .into()
}

/// A body stream delivering `d` in uneven chunks.
fn body(d: Bytes) -> ByteStream {
    let chunks: Vec<Result<Bytes>> = d
        .chunks(37)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

async fn read_all(s: ByteStream) -> Result<Bytes> {
    let parts: Vec<Bytes> = s
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    Ok(parts.concat().into())
}

#[tokio::test]
async fn put_get_range_overwrite_delete() {
    let l = layer(500);
    l.create_bucket("alice", "bkt").await.unwrap();
    for len in [0usize, 1, 63, 64, 65, 1000, 5000] {
        let d = data(len, len as u8);
        let rec = l
            .put_object(
                "alice",
                "bkt",
                "k",
                ObjectMeta::default(),
                body(d.clone()),
                Some(len as u64),
            )
            .await
            .unwrap();
        assert_eq!(rec.size, len as u64);
        assert_eq!(rec.etag, hex(&Md5::digest(&d)));
        let (_, s) = l.get_object("alice", "bkt", "k", None).unwrap();
        assert_eq!(read_all(s).await.unwrap(), d, "len {len}");
        if len > 10 {
            for r in [0..1, 3..len as u64 - 2, len as u64 - 1..len as u64] {
                let (_, s) = l.get_object("alice", "bkt", "k", Some(r.clone())).unwrap();
                assert_eq!(
                    read_all(s).await.unwrap(),
                    d.slice(r.start as usize..r.end as usize)
                );
            }
        }
    }
    // Overwrites freed the earlier versions' blocks: only the last (5000 B) is used.
    let used = l.usage().capacity_blocks - l.usage().free_blocks;
    assert_eq!(used, 5000u64.div_ceil(BS as u64));
    assert!(l.delete_object("alice", "bkt", "k").await.unwrap());
    assert!(!l.delete_object("alice", "bkt", "k").await.unwrap());
    assert_eq!(l.usage().free_blocks, 500);
    assert!(matches!(
        l.head_object("alice", "bkt", "k"),
        Err(ObjectError::NoSuchKey(_))
    ));
}

#[tokio::test]
async fn readers_keep_the_version_they_opened() {
    let l = layer(400);
    l.create_bucket("a", "bkt").await.unwrap();
    let v1 = data(3000, 1);
    l.put_object(
        "a",
        "bkt",
        "k",
        ObjectMeta::default(),
        body(v1.clone()),
        None,
    )
    .await
    .unwrap();
    let (_, mut s) = l.get_object("a", "bkt", "k", None).unwrap();
    let first = s.next().await.unwrap().unwrap();
    // Replace and then write more objects that would reuse freed blocks.
    let v2 = data(3000, 2);
    l.put_object(
        "a",
        "bkt",
        "k",
        ObjectMeta::default(),
        body(v2.clone()),
        None,
    )
    .await
    .unwrap();
    for i in 0..3 {
        l.put_object(
            "a",
            "bkt",
            &format!("o{i}"),
            ObjectMeta::default(),
            body(data(3000, 9)),
            None,
        )
        .await
        .unwrap();
    }
    let mut got = first.to_vec();
    while let Some(c) = s.next().await {
        got.extend_from_slice(&c.unwrap());
    }
    assert_eq!(Bytes::from(got), v1, "a reader saw a mix of versions");
    drop(s);
    let (_, s) = l.get_object("a", "bkt", "k", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), v2);
    let used = l.usage().capacity_blocks - l.usage().free_blocks;
    assert_eq!(
        used,
        4 * 3000u64.div_ceil(BS as u64),
        "old version freed after the reader left"
    );
}

#[tokio::test]
async fn failed_uploads_leave_the_old_object_and_free_their_blocks() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    let old = data(1000, 1);
    l.put_object(
        "a",
        "bkt",
        "k",
        ObjectMeta::default(),
        body(old.clone()),
        None,
    )
    .await
    .unwrap();
    let free = l.usage().free_blocks;
    // A body that breaks after 2000 bytes.
    let broken: ByteStream = Box::pin(futures::stream::iter(vec![
        Ok(data(2000, 5)),
        Err(ObjectError::Body("connection reset".into())),
    ]));
    assert!(matches!(
        l.put_object("a", "bkt", "k", ObjectMeta::default(), broken, None)
            .await,
        Err(ObjectError::Body(_))
    ));
    // A body shorter than announced.
    assert!(matches!(
        l.put_object(
            "a",
            "bkt",
            "k",
            ObjectMeta::default(),
            body(data(10, 1)),
            Some(11)
        )
        .await,
        Err(ObjectError::IncompleteBody {
            got: 10,
            expected: 11
        })
    ));
    // Too big for the ORAM: refused up front, and also when the length is unknown.
    assert!(matches!(
        l.put_object(
            "a",
            "bkt",
            "k",
            ObjectMeta::default(),
            body(data(100_000, 1)),
            Some(100_000)
        )
        .await,
        Err(ObjectError::Full { .. })
    ));
    assert!(matches!(
        l.put_object(
            "a",
            "bkt",
            "k",
            ObjectMeta::default(),
            body(data(100_000, 1)),
            None
        )
        .await,
        Err(ObjectError::Full { .. })
    ));
    assert_eq!(l.usage().free_blocks, free, "failed uploads leaked blocks");
    let (_, s) = l.get_object("a", "bkt", "k", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), old);
}

#[tokio::test]
async fn buckets_belong_to_their_owner() {
    let l = layer(100);
    l.create_bucket("alice", "shared-name").await.unwrap();
    assert!(matches!(
        l.create_bucket("alice", "shared-name").await,
        Err(ObjectError::BucketAlreadyOwnedByYou(_))
    ));
    assert!(matches!(
        l.create_bucket("bob", "shared-name").await,
        Err(ObjectError::BucketAlreadyExists(_))
    ));
    assert!(matches!(
        l.head_bucket("bob", "shared-name"),
        Err(ObjectError::AccessDenied)
    ));
    assert!(matches!(
        l.put_object(
            "bob",
            "shared-name",
            "x",
            ObjectMeta::default(),
            body(data(5, 0)),
            None
        )
        .await,
        Err(ObjectError::AccessDenied)
    ));
    assert!(matches!(
        l.delete_bucket("bob", "shared-name").await,
        Err(ObjectError::AccessDenied)
    ));
    assert_eq!(l.list_buckets("alice").unwrap().len(), 1);
    assert!(l.list_buckets("bob").unwrap().is_empty());
    for bad in ["ab", "Upper", "-x-", "a..b", "192.168.1.1", &"a".repeat(64)] {
        assert!(
            matches!(
                l.create_bucket("alice", bad).await,
                Err(ObjectError::InvalidBucketName(_))
            ),
            "{bad}"
        );
    }
    l.put_object(
        "alice",
        "shared-name",
        "x",
        ObjectMeta::default(),
        body(data(5, 0)),
        None,
    )
    .await
    .unwrap();
    assert!(matches!(
        l.delete_bucket("alice", "shared-name").await,
        Err(ObjectError::BucketNotEmpty(_))
    ));
    l.delete_object("alice", "shared-name", "x").await.unwrap();
    l.delete_bucket("alice", "shared-name").await.unwrap();
    assert!(matches!(
        l.head_bucket("alice", "shared-name"),
        Err(ObjectError::NoSuchBucket(_))
    ));
}

#[tokio::test]
async fn listing_with_prefix_delimiter_and_pages() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    let keys = ["a/1", "a/2", "a/b/3", "b", "c/1", "c/2", "d"];
    for k in keys {
        l.put_object("a", "bkt", k, ObjectMeta::default(), body(data(3, 0)), None)
            .await
            .unwrap();
    }
    let list = |prefix: &str, delim: Option<&str>, after: Option<&str>, max| {
        l.list_objects(
            "a",
            "bkt",
            &ListParams {
                prefix: prefix.into(),
                delimiter: delim.map(Into::into),
                start_after: after.map(Into::into),
                max_keys: max,
            },
        )
        .unwrap()
    };
    let r = list("", Some("/"), None, 1000);
    assert_eq!(
        r.objects.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(),
        ["b", "d"]
    );
    assert_eq!(r.common_prefixes, ["a/", "c/"]);
    assert!(!r.truncated);
    let r = list("a/", Some("/"), None, 1000);
    assert_eq!(
        r.objects.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(),
        ["a/1", "a/2"]
    );
    assert_eq!(r.common_prefixes, ["a/b/"]);
    // Pages of 2 with the delimiter: a/, b | c/, d.
    let p1 = list("", Some("/"), None, 2);
    assert!(p1.truncated);
    assert_eq!(p1.common_prefixes, ["a/"]);
    assert_eq!(p1.next_start_after.as_deref(), Some("b"));
    let p2 = list("", Some("/"), p1.next_start_after.as_deref(), 2);
    assert_eq!(p2.common_prefixes, ["c/"]);
    assert_eq!(p2.objects[0].0, "d");
    assert!(!p2.truncated);
    // Pages without delimiter cover every key once, in order.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let r = list("", None, after.as_deref(), 3);
        seen.extend(r.objects.iter().map(|o| o.0.clone()));
        if !r.truncated {
            break;
        }
        after = r.next_start_after;
    }
    assert_eq!(seen, keys);
    // A marker equal to a common prefix skips it.
    assert_eq!(list("", Some("/"), Some("a/"), 10).common_prefixes, ["c/"]);
}

#[tokio::test]
async fn multipart_upload_complete_abort() {
    let l = layer(600);
    l.create_bucket("a", "bkt").await.unwrap();
    let id = l
        .create_multipart("a", "bkt", "big", ObjectMeta::default())
        .await
        .unwrap();
    let parts: Vec<Bytes> = (0..3)
        .map(|i| data(if i < 2 { 150 } else { 77 }, i))
        .collect();
    let mut listed = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let rec = l
            .upload_part(
                "a",
                ("bkt", "big", &id),
                i as u32 + 1,
                body(p.clone()),
                Some(p.len() as u64),
            )
            .await
            .unwrap();
        listed.push((i as u32 + 1, format!("\"{}\"", rec.etag)));
    }
    // Re-uploading part 2 replaces it; the old blocks are freed.
    let p2 = data(150, 42);
    let rec = l
        .upload_part("a", ("bkt", "big", &id), 2, body(p2.clone()), None)
        .await
        .unwrap();
    listed[1].1 = rec.etag.clone();
    assert!(matches!(
        l.complete_multipart(
            "a",
            ("bkt", "big", &id),
            &[(2, listed[1].1.clone()), (1, listed[0].1.clone())]
        )
        .await,
        Err(ObjectError::InvalidPartOrder)
    ));
    assert!(matches!(
        l.complete_multipart("a", ("bkt", "big", &id), &[(1, "\"0000\"".into())])
            .await,
        Err(ObjectError::InvalidPart(_))
    ));
    let rec = l
        .complete_multipart("a", ("bkt", "big", &id), &listed)
        .await
        .unwrap();
    assert!(rec.etag.ends_with("-3"), "{}", rec.etag);
    let want: Bytes = [parts[0].clone(), p2, parts[2].clone()].concat().into();
    let (_, s) = l.get_object("a", "bkt", "big", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), want);
    // A range across part boundaries (parts are not block-aligned).
    let (_, s) = l.get_object("a", "bkt", "big", Some(140..310)).unwrap();
    assert_eq!(read_all(s).await.unwrap(), want.slice(140..310));
    assert!(matches!(
        l.complete_multipart("a", ("bkt", "big", &id), &listed)
            .await,
        Err(ObjectError::NoSuchUpload(_))
    ));
    // Small non-final parts are refused; abort frees everything.
    let id2 = l
        .create_multipart("a", "bkt", "x", ObjectMeta::default())
        .await
        .unwrap();
    let free = l.usage().free_blocks;
    let a = l
        .upload_part("a", ("bkt", "x", &id2), 1, body(data(10, 0)), None)
        .await
        .unwrap();
    let b = l
        .upload_part("a", ("bkt", "x", &id2), 2, body(data(10, 0)), None)
        .await
        .unwrap();
    assert!(matches!(
        l.complete_multipart("a", ("bkt", "x", &id2), &[(1, a.etag), (2, b.etag)])
            .await,
        Err(ObjectError::PartTooSmall { part: 1, .. })
    ));
    assert_eq!(l.list_uploads("a", "bkt", "").unwrap().len(), 1);
    l.abort_multipart("a", ("bkt", "x", &id2)).await.unwrap();
    assert_eq!(l.usage().free_blocks, free);
    assert!(l.list_uploads("a", "bkt", "").unwrap().is_empty());
}

#[tokio::test]
async fn copy_and_metadata_replace() {
    let l = layer(300);
    l.create_bucket("a", "src").await.unwrap();
    l.create_bucket("a", "dst").await.unwrap();
    let meta = ObjectMeta {
        content_type: Some("text/plain".into()),
        user: [("k".to_string(), "v".to_string())].into(),
        ..ObjectMeta::default()
    };
    let d = data(777, 3);
    let src = l
        .put_object("a", "src", "o", meta.clone(), body(d.clone()), None)
        .await
        .unwrap();
    let c = l
        .copy_object(
            "a",
            l.open_object("a", "src", "o").unwrap(),
            ("src", "o"),
            ("dst", "o2"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(c.meta, meta);
    assert_eq!(c.etag, src.etag);
    let (_, s) = l.get_object("a", "dst", "o2", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), d);
    let new_meta = ObjectMeta {
        content_type: Some("application/x".into()),
        ..ObjectMeta::default()
    };
    let used = l.usage().free_blocks;
    let r = l
        .copy_object(
            "a",
            l.open_object("a", "src", "o").unwrap(),
            ("src", "o"),
            ("src", "o"),
            Some(new_meta.clone()),
        )
        .await
        .unwrap();
    assert_eq!(r.meta, new_meta);
    assert_eq!(
        l.usage().free_blocks,
        used,
        "metadata-only copy moved no data"
    );
    let (_, s) = l.get_object("a", "src", "o", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), d);
}

#[tokio::test]
async fn range_reads_touch_only_their_blocks() {
    let l = layer(400);
    l.create_bucket("a", "bkt").await.unwrap();
    let d = data(100 * BS, 4);
    l.put_object(
        "a",
        "bkt",
        "k",
        ObjectMeta::default(),
        body(d.clone()),
        None,
    )
    .await
    .unwrap();
    for (range, blocks) in [
        (0..1u64, 1u64),
        (BS as u64 - 1..BS as u64 + 1, 2),
        (10 * BS as u64..20 * BS as u64, 10),
    ] {
        let before = l.engine().stats().accesses;
        let (_, s) = l.get_object("a", "bkt", "k", Some(range.clone())).unwrap();
        assert_eq!(
            read_all(s).await.unwrap(),
            d.slice(range.start as usize..range.end as usize)
        );
        assert_eq!(
            l.engine().stats().accesses - before,
            blocks,
            "range {range:?}"
        );
    }
}

#[tokio::test]
async fn copy_onto_itself_after_a_replace_is_a_conflict() {
    let l = layer(100);
    l.create_bucket("a", "bkt").await.unwrap();
    l.put_object(
        "a",
        "bkt",
        "o",
        ObjectMeta::default(),
        body(data(100, 1)),
        None,
    )
    .await
    .unwrap();
    let open = l.open_object("a", "bkt", "o").unwrap();
    l.put_object(
        "a",
        "bkt",
        "o",
        ObjectMeta::default(),
        body(data(100, 2)),
        None,
    )
    .await
    .unwrap();
    let r = l
        .copy_object(
            "a",
            open,
            ("bkt", "o"),
            ("bkt", "o"),
            Some(ObjectMeta::default()),
        )
        .await;
    assert!(matches!(r, Err(ObjectError::Conflict(_))), "{r:?}");
}

#[tokio::test]
async fn reads_check_their_range() {
    let l = layer(100);
    l.create_bucket("a", "bkt").await.unwrap();
    l.put_object(
        "a",
        "bkt",
        "o",
        ObjectMeta::default(),
        body(data(100, 1)),
        None,
    )
    .await
    .unwrap();
    l.put_object(
        "a",
        "bkt",
        "empty",
        ObjectMeta::default(),
        body(Bytes::new()),
        None,
    )
    .await
    .unwrap();
    for r in [5..5, 50..101, 200..300] {
        let open = l.open_object("a", "bkt", "o").unwrap();
        assert!(matches!(
            l.read(open, Some(r)),
            Err(ObjectError::InvalidRange { size: 100 })
        ));
    }
    let open = l.open_object("a", "bkt", "empty").unwrap();
    assert!(read_all(l.read(open, None).unwrap())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn listing_after_the_prefix_range_is_empty() {
    let l = layer(100);
    l.create_bucket("a", "bkt").await.unwrap();
    for k in ["a1", "a2", "b1"] {
        l.put_object("a", "bkt", k, ObjectMeta::default(), body(data(3, 0)), None)
            .await
            .unwrap();
    }
    for after in ["b", "z", "a\u{10ffff}"] {
        let r = l
            .list_objects(
                "a",
                "bkt",
                &ListParams {
                    prefix: "a".into(),
                    delimiter: Some("/".into()),
                    start_after: Some(after.into()),
                    max_keys: 10,
                },
            )
            .unwrap();
        assert!(
            r.objects.is_empty() && !r.truncated,
            "start-after {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_and_racing_aborts_keep_the_allocator_consistent() {
    let l = layer(2000);
    l.create_bucket("a", "bkt").await.unwrap();
    let free = l.usage().free_blocks;
    for i in 0..40 {
        // Two create-only PUTs of the same new key: exactly one wins.
        let key = format!("new{i}");
        let (a, b) = tokio::join!(
            l.put_object_if_absent(
                "a",
                "bkt",
                &key,
                ObjectMeta::default(),
                body(data(300, 1)),
                None
            ),
            l.put_object_if_absent(
                "a",
                "bkt",
                &key,
                ObjectMeta::default(),
                body(data(300, 2)),
                None
            ),
        );
        assert!(a.is_ok() != b.is_ok(), "round {i}: {a:?} / {b:?}");
        assert!(matches!(
            a.err().or(b.err()),
            Some(ObjectError::AlreadyExists(_))
        ));
        l.delete_object("a", "bkt", &key).await.unwrap();
        // A part upload racing an abort: the part is freed either way.
        let id = l
            .create_multipart("a", "bkt", "mp", ObjectMeta::default())
            .await
            .unwrap();
        let l2 = l.clone();
        let id2 = id.clone();
        let up = tokio::spawn(async move {
            l2.upload_part("a", ("bkt", "mp", &id2), 1, body(data(500, 3)), None)
                .await
        });
        tokio::task::yield_now().await;
        let _ = l.abort_multipart("a", ("bkt", "mp", &id)).await;
        let _ = up.await.unwrap();
        let _ = l.abort_multipart("a", ("bkt", "mp", &id)).await;
        assert_eq!(
            l.usage().free_blocks,
            free,
            "round {i}: blocks leaked or double-freed"
        );
    }
}

#[tokio::test]
async fn containers_accounts_and_metadata() {
    let l = layer(300);
    let meta = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // Swift names beyond S3's rules; still refused: '/', NUL, empty, > 256 bytes.
    let name = "Ünïcode Container_1";
    assert!(l
        .create_container("a", name, meta(&[("x", "1")]))
        .await
        .unwrap());
    for bad in ["", "a/b", "a\0b", &"c".repeat(257)] {
        assert!(matches!(
            l.create_container("a", bad, BTreeMap::new()).await,
            Err(ObjectError::InvalidBucketName(_))
        ));
    }
    // A second PUT merges metadata; an empty value removes a name.
    assert!(!l
        .create_container("a", name, meta(&[("y", "2"), ("x", "")]))
        .await
        .unwrap());
    assert_eq!(l.head_bucket("a", name).unwrap().meta, meta(&[("y", "2")]));
    assert!(matches!(
        l.create_container("b", name, BTreeMap::new()).await,
        Err(ObjectError::BucketAlreadyExists(_))
    ));
    assert!(matches!(
        l.update_bucket_meta("b", name, BTreeMap::new()).await,
        Err(ObjectError::AccessDenied)
    ));
    let b = l
        .update_bucket_meta("a", name, meta(&[("z", "3")]))
        .await
        .unwrap();
    assert_eq!(b.meta, meta(&[("y", "2"), ("z", "3")]));
    // Usage counts objects and bytes.
    assert_eq!(l.bucket_usage("a", name).unwrap(), (0, 0));
    l.put_object(
        "a",
        name,
        "k1",
        ObjectMeta::default(),
        body(data(100, 1)),
        None,
    )
    .await
    .unwrap();
    let rec = l
        .put_object(
            "a",
            name,
            "k2",
            ObjectMeta::default(),
            body(data(5000, 2)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(l.bucket_usage("a", name).unwrap(), (2, 5100));
    // Metadata-only update keeps data and ETag.
    let new = ObjectMeta {
        extra: meta(&[("x-object-manifest", "c/p")]),
        ..ObjectMeta::default()
    };
    let r = l
        .set_object_meta("a", name, "k2", new.clone())
        .await
        .unwrap();
    assert_eq!((r.etag.clone(), r.meta.clone()), (rec.etag, new));
    let (_, s) = l.get_object("a", name, "k2", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), data(5000, 2));
    // Account metadata per account.
    assert!(l.account_meta("a").unwrap().is_empty());
    l.update_account_meta("a", meta(&[("m", "v")]))
        .await
        .unwrap();
    assert_eq!(l.account_meta("a").unwrap(), meta(&[("m", "v")]));
    assert!(l.account_meta("b").unwrap().is_empty());
    l.update_account_meta("a", meta(&[("m", "")]))
        .await
        .unwrap();
    assert!(l.account_meta("a").unwrap().is_empty());
}
