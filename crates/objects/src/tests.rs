//! Unit tests of the object layer over a real Path ORAM on the memory store.

use super::*;
use std::collections::BTreeMap;

use futures::StreamExt;
use md5::{Digest, Md5};
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{MemKv, MemState};
use oram_store_memory::MemoryStore;

const BS: usize = 64;

fn layer(capacity: u64) -> ObjectLayer {
    layer_with_kv(capacity, Box::new(MemKv::new()))
}

fn layer_with_kv(capacity: u64, kv: Box<dyn oram_state::KvState>) -> ObjectLayer {
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
        kv,
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

fn opts(meta: ObjectMeta, expected_len: Option<u64>) -> PutOptions {
    PutOptions {
        meta,
        expected_len,
        ..PutOptions::default()
    }
}

fn part_opts(expected_len: Option<u64>) -> PartOptions {
    PartOptions {
        expected_len,
        expected_md5: None,
    }
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
                body(d.clone()),
                opts(ObjectMeta::default(), Some(len as u64)),
            )
            .await
            .unwrap();
        assert_eq!(rec.size, len as u64);
        assert_eq!(rec.etag, hex::encode(Md5::digest(&d)));
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
    assert!(l.delete_object("alice", "bkt", "k", None).await.unwrap());
    assert!(!l.delete_object("alice", "bkt", "k", None).await.unwrap());
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
        body(v1.clone()),
        opts(ObjectMeta::default(), None),
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
        body(v2.clone()),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap();
    for i in 0..3 {
        l.put_object(
            "a",
            "bkt",
            &format!("o{i}"),
            body(data(3000, 9)),
            opts(ObjectMeta::default(), None),
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
        body(old.clone()),
        opts(ObjectMeta::default(), None),
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
        l.put_object("a", "bkt", "k", broken, opts(ObjectMeta::default(), None))
            .await,
        Err(ObjectError::Body(_))
    ));
    // A body shorter than announced.
    assert!(matches!(
        l.put_object(
            "a",
            "bkt",
            "k",
            body(data(10, 1)),
            opts(ObjectMeta::default(), Some(11))
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
            body(data(100_000, 1)),
            opts(ObjectMeta::default(), Some(100_000))
        )
        .await,
        Err(ObjectError::Full { .. })
    ));
    assert!(matches!(
        l.put_object(
            "a",
            "bkt",
            "k",
            body(data(100_000, 1)),
            opts(ObjectMeta::default(), None)
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
    // Bob's namespace has no such bucket (S3 answers AccessDenied for a name in
    // use, which the front-end learns from bucket_name_in_use).
    assert!(l.bucket_name_in_use("shared-name") && !l.bucket_name_in_use("other"));
    assert!(matches!(
        l.head_bucket("bob", "shared-name"),
        Err(ObjectError::NoSuchBucket(_))
    ));
    assert!(matches!(
        l.put_object(
            "bob",
            "shared-name",
            "x",
            body(data(5, 0)),
            opts(ObjectMeta::default(), None)
        )
        .await,
        Err(ObjectError::NoSuchBucket(_))
    ));
    assert!(matches!(
        l.delete_bucket("bob", "shared-name").await,
        Err(ObjectError::NoSuchBucket(_))
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
        body(data(5, 0)),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap();
    assert!(matches!(
        l.delete_bucket("alice", "shared-name").await,
        Err(ObjectError::BucketNotEmpty(_))
    ));
    l.delete_object("alice", "shared-name", "x", None)
        .await
        .unwrap();
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
        l.put_object(
            "a",
            "bkt",
            k,
            body(data(3, 0)),
            opts(ObjectMeta::default(), None),
        )
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
                part_opts(Some(p.len() as u64)),
            )
            .await
            .unwrap();
        listed.push((i as u32 + 1, format!("\"{}\"", rec.etag)));
    }
    // Re-uploading part 2 replaces it; the old blocks are freed.
    let p2 = data(150, 42);
    let rec = l
        .upload_part(
            "a",
            ("bkt", "big", &id),
            2,
            body(p2.clone()),
            part_opts(None),
        )
        .await
        .unwrap();
    listed[1].1 = rec.etag.clone();
    assert!(matches!(
        l.complete_multipart(
            "a",
            ("bkt", "big", &id),
            &[(2, listed[1].1.clone()), (1, listed[0].1.clone())],
            &PutMode::Overwrite
        )
        .await,
        Err(ObjectError::InvalidPartOrder)
    ));
    assert!(matches!(
        l.complete_multipart(
            "a",
            ("bkt", "big", &id),
            &[(1, "\"0000\"".into())],
            &PutMode::Overwrite
        )
        .await,
        Err(ObjectError::InvalidPart(_))
    ));
    let rec = l
        .complete_multipart("a", ("bkt", "big", &id), &listed, &PutMode::Overwrite)
        .await
        .unwrap();
    assert!(rec.etag.ends_with("-3"), "{}", rec.etag);
    let want: Bytes = [parts[0].clone(), p2, parts[2].clone()].concat().into();
    let (_, s) = l.get_object("a", "bkt", "big", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), want);
    // A range across part boundaries (parts are not block-aligned).
    let (_, s) = l.get_object("a", "bkt", "big", Some(140..310)).unwrap();
    assert_eq!(read_all(s).await.unwrap(), want.slice(140..310));
    // Completing again answers the same object (as S3 does), with the same parts
    // only, and only while that object is current.
    let again = l
        .complete_multipart("a", ("bkt", "big", &id), &listed, &PutMode::Overwrite)
        .await
        .unwrap();
    assert_eq!((again.id, again.etag.clone()), (rec.id, rec.etag.clone()));
    assert!(matches!(
        l.complete_multipart("a", ("bkt", "big", &id), &listed[..2], &PutMode::Overwrite)
            .await,
        Err(ObjectError::NoSuchUpload(_))
    ));
    l.put_object(
        "a",
        "bkt",
        "big",
        body(data(5, 5)),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap();
    assert!(matches!(
        l.complete_multipart("a", ("bkt", "big", &id), &listed, &PutMode::Overwrite)
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
        .upload_part(
            "a",
            ("bkt", "x", &id2),
            1,
            body(data(10, 0)),
            part_opts(None),
        )
        .await
        .unwrap();
    let b = l
        .upload_part(
            "a",
            ("bkt", "x", &id2),
            2,
            body(data(10, 0)),
            part_opts(None),
        )
        .await
        .unwrap();
    assert!(matches!(
        l.complete_multipart(
            "a",
            ("bkt", "x", &id2),
            &[(1, a.etag), (2, b.etag)],
            &PutMode::Overwrite
        )
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
        .put_object("a", "src", "o", body(d.clone()), opts(meta.clone(), None))
        .await
        .unwrap();
    let c = l
        .copy_object(
            "a",
            l.open_object("a", "src", "o").unwrap(),
            ("src", "o"),
            ("dst", "o2"),
            None,
            0,
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
            0,
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
        body(d.clone()),
        opts(ObjectMeta::default(), None),
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
        body(data(100, 1)),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap();
    let open = l.open_object("a", "bkt", "o").unwrap();
    l.put_object(
        "a",
        "bkt",
        "o",
        body(data(100, 2)),
        opts(ObjectMeta::default(), None),
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
            0,
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
        body(data(100, 1)),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap();
    l.put_object(
        "a",
        "bkt",
        "empty",
        body(Bytes::new()),
        opts(ObjectMeta::default(), None),
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
        l.put_object(
            "a",
            "bkt",
            k,
            body(data(3, 0)),
            opts(ObjectMeta::default(), None),
        )
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
            l.put_object(
                "a",
                "bkt",
                &key,
                body(data(300, 1)),
                PutOptions {
                    mode: PutMode::Create,
                    ..opts(ObjectMeta::default(), None)
                }
            ),
            l.put_object(
                "a",
                "bkt",
                &key,
                body(data(300, 2)),
                PutOptions {
                    mode: PutMode::Create,
                    ..opts(ObjectMeta::default(), None)
                }
            ),
        );
        assert!(a.is_ok() != b.is_ok(), "round {i}: {a:?} / {b:?}");
        assert!(matches!(
            a.err().or(b.err()),
            Some(ObjectError::PreconditionFailed(_))
        ));
        l.delete_object("a", "bkt", &key, None).await.unwrap();
        // A part upload racing an abort: the part is freed either way.
        let id = l
            .create_multipart("a", "bkt", "mp", ObjectMeta::default())
            .await
            .unwrap();
        let l2 = l.clone();
        let id2 = id.clone();
        let up = tokio::spawn(async move {
            l2.upload_part(
                "a",
                ("bkt", "mp", &id2),
                1,
                body(data(500, 3)),
                part_opts(None),
            )
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
        .create_container("a", name, meta(&[("x", "1")]), BTreeMap::new())
        .await
        .unwrap());
    for bad in ["", "a/b", "a\0b", &"c".repeat(257)] {
        assert!(matches!(
            l.create_container("a", bad, BTreeMap::new(), BTreeMap::new())
                .await,
            Err(ObjectError::InvalidBucketName(_))
        ));
    }
    // A second PUT merges metadata; an empty value removes a name.
    assert!(!l
        .create_container("a", name, meta(&[("y", "2"), ("x", "")]), BTreeMap::new())
        .await
        .unwrap());
    assert_eq!(l.head_bucket("a", name).unwrap().meta, meta(&[("y", "2")]));
    // Another account has its own container of that name.
    assert!(l
        .create_container("b", name, meta(&[("owner", "b")]), BTreeMap::new())
        .await
        .unwrap());
    assert_eq!(
        l.head_bucket("b", name).unwrap().meta,
        meta(&[("owner", "b")])
    );
    assert_eq!(l.head_bucket("a", name).unwrap().meta, meta(&[("y", "2")]));
    let b = l
        .update_bucket_meta("a", name, meta(&[("z", "3")]), BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(b.meta, meta(&[("y", "2"), ("z", "3")]));
    // Usage counts objects and bytes.
    assert_eq!(l.bucket_usage("a", name).unwrap(), (0, 0));
    l.put_object(
        "a",
        name,
        "k1",
        body(data(100, 1)),
        opts(ObjectMeta::default(), None),
    )
    .await
    .unwrap();
    let rec = l
        .put_object(
            "a",
            name,
            "k2",
            body(data(5000, 2)),
            opts(ObjectMeta::default(), None),
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
        .set_object_meta("a", name, "k2", new.clone(), 0)
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

#[tokio::test]
async fn a_part_listed_twice_counts_once_with_its_last_etag() {
    // A client that re-sent part 1 while its first upload was still running lists
    // both answers; the upload that finished last is the part.
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    let id = l
        .create_multipart("a", "bkt", "k", ObjectMeta::default())
        .await
        .unwrap();
    let b = l
        .upload_part(
            "a",
            ("bkt", "k", &id),
            1,
            body(data(8, b'B')),
            part_opts(None),
        )
        .await
        .unwrap();
    let a = l
        .upload_part(
            "a",
            ("bkt", "k", &id),
            1,
            body(data(8, b'A')),
            part_opts(None),
        )
        .await
        .unwrap();
    let rec = l
        .complete_multipart(
            "a",
            ("bkt", "k", &id),
            &[(1, b.etag.clone()), (1, a.etag.clone())],
            &PutMode::Overwrite,
        )
        .await
        .unwrap();
    assert!(rec.etag.ends_with("-1"));
    let (_, s) = l.get_object("a", "bkt", "k", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), data(8, b'A'));
    // Descending numbers are still refused.
    let id = l
        .create_multipart("a", "bkt", "k2", ObjectMeta::default())
        .await
        .unwrap();
    assert!(matches!(
        l.complete_multipart(
            "a",
            ("bkt", "k2", &id),
            &[(2, "x".into()), (1, "y".into())],
            &PutMode::Overwrite
        )
        .await,
        Err(ObjectError::InvalidPartOrder)
    ));
}

#[tokio::test]
async fn conditional_puts_and_md5_checked_once() {
    let l = layer(300);
    l.create_bucket("a", "bkt").await.unwrap();
    let put = |mode: PutMode, md5: Option<[u8; 16]>, seed: u8| {
        let l = l.clone();
        async move {
            l.put_object(
                "a",
                "bkt",
                "k",
                body(data(100, seed)),
                PutOptions {
                    mode,
                    expected_md5: md5,
                    ..PutOptions::default()
                },
            )
            .await
        }
    };
    // If-Match on a missing object: NoSuchKey (S3's answer); nothing stored.
    assert!(matches!(
        put(PutMode::IfMatch(EtagList::tag("abc")), None, 1).await,
        Err(ObjectError::NoSuchKey(_))
    ));
    let free = l.usage().free_blocks;
    let first = put(PutMode::Create, None, 1).await.unwrap();
    assert!(matches!(
        put(PutMode::Create, None, 2).await,
        Err(ObjectError::PreconditionFailed(_))
    ));
    assert!(matches!(
        put(PutMode::IfMatch(EtagList::tag("0000")), None, 2).await,
        Err(ObjectError::PreconditionFailed(_))
    ));
    let second = put(PutMode::IfMatch(EtagList::tag(first.etag.clone())), None, 2)
        .await
        .unwrap();
    assert_ne!(second.etag, first.etag);
    // A wrong MD5 stores nothing and leaks nothing; the right one is accepted.
    let right: [u8; 16] = Md5::digest(data(100, 3)).into();
    assert!(matches!(
        put(PutMode::Overwrite, Some([0; 16]), 3).await,
        Err(ObjectError::BadDigest)
    ));
    assert_eq!(l.head_object("a", "bkt", "k").unwrap().etag, second.etag);
    let third = put(PutMode::Overwrite, Some(right), 3).await.unwrap();
    assert_eq!(third.etag, hex::encode(right));
    assert_eq!(l.usage().free_blocks, free - 100u64.div_ceil(BS as u64));
    // Conditional delete.
    assert!(matches!(
        l.delete_object("a", "bkt", "k", Some(&EtagList::tag("0000")))
            .await,
        Err(ObjectError::PreconditionFailed(_))
    ));
    assert!(l
        .delete_object("a", "bkt", "k", Some(&EtagList::tag(third.etag.clone())))
        .await
        .unwrap());
}

/// A real durable index (redb) whose next commit fails.
fn layer_on_db(capacity: u64, dir: &std::path::Path) -> (ObjectLayer, Arc<oram_statedb::Db>) {
    let db = oram_statedb::Db::open(&dir.join("state.redb"), [3; 16]).unwrap();
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
    let l = ObjectLayer::new(
        Arc::new(oram),
        Box::new(db.kv().unwrap()),
        LayerConfig {
            batch_blocks: 4,
            min_part_size: 100,
        },
    )
    .unwrap();
    (l, db)
}

#[tokio::test]
async fn a_failed_index_commit_refuses_writes_until_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (l, db) = layer_on_db(300, dir.path());
    l.create_bucket("a", "bkt").await.unwrap();
    let old = l
        .put_object("a", "bkt", "k", body(data(500, 1)), PutOptions::default())
        .await
        .unwrap();
    let free = l.usage().free_blocks;
    db.inject_commit_failure();
    let e = l
        .put_object("a", "bkt", "k", body(data(500, 2)), PutOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ObjectError::IndexFailed(_)), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Unavailable);
    assert!(!l.is_writable());
    // The replaced version's blocks were not freed: the durable index still uses
    // them.
    assert!(l.usage().free_blocks < free);
    for r in [
        l.create_bucket("a", "other").await.map(drop),
        l.delete_object("a", "bkt", "k", None).await.map(drop),
        l.put_object("a", "bkt", "x", body(data(1, 1)), PutOptions::default())
            .await
            .map(drop),
    ] {
        assert!(matches!(r, Err(ObjectError::IndexFailed(_))), "{r:?}");
    }
    // Reads go on.
    assert!(l.head_object("a", "bkt", "k").is_ok());
    drop(l);
    // A restart reloads the durable index: the old object.
    let kv = db.kv().unwrap();
    let rec: ObjectRecord = decode(&kv.get(&object_key("a", "bkt", "k")).unwrap()).unwrap();
    assert_eq!(rec.etag, old.etag);
}

/// A `KvState` whose commits stay pending until released: a group committer's
/// fsync that takes its time, which a real disk cannot be made to do on demand.
struct SlowKv {
    inner: MemKv,
    gate: Arc<tokio::sync::Semaphore>,
}

impl oram_state::KvState for SlowKv {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }
    fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.inner.put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> bool {
        self.inner.delete(key)
    }
    fn range(
        &self,
        start: &[u8],
        inclusive: bool,
        end: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.inner.range(start, inclusive, end, limit)
    }
    fn commit(&mut self) -> oram_state::CommitFuture {
        let gate = self.gate.clone();
        Box::pin(async move {
            gate.acquire().await.expect("open").forget();
            Ok(())
        })
    }
}

#[tokio::test]
async fn the_lock_is_not_held_while_a_commit_becomes_durable() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let oram = PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity: 100,
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
    let l = ObjectLayer::new(
        Arc::new(oram),
        Box::new(SlowKv {
            inner: MemKv::new(),
            gate: gate.clone(),
        }),
        LayerConfig::default(),
    )
    .unwrap();
    let l2 = l.clone();
    let create = tokio::spawn(async move { l2.create_bucket("a", "bkt").await });
    // While the commit is pending, other requests run (the lock is free) and see
    // the change; the creator has no answer yet.
    let mut seen = false;
    for _ in 0..1000 {
        if l.head_bucket("a", "bkt").is_ok() {
            seen = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(seen, "the change is visible before it is durable");
    assert!(!create.is_finished(), "answered before durability");
    gate.add_permits(1);
    create.await.unwrap().unwrap();
}

#[tokio::test]
async fn accounts_have_their_own_namespaces() {
    let l = layer(300);
    // Swift containers: the same name in two accounts, each with its own objects.
    for acct in ["alice", "bob"] {
        assert!(l
            .create_container(acct, "photos", BTreeMap::new(), BTreeMap::new())
            .await
            .unwrap());
        l.put_object(
            acct,
            "photos",
            "k",
            body(data(10, acct.len() as u8)),
            PutOptions::default(),
        )
        .await
        .unwrap();
    }
    for acct in ["alice", "bob"] {
        let (_, s) = l.get_object(acct, "photos", "k", None).unwrap();
        assert_eq!(read_all(s).await.unwrap(), data(10, acct.len() as u8));
        assert_eq!(l.bucket_usage(acct, "photos").unwrap(), (1, 10));
        let names: Vec<_> = l
            .list_buckets(acct)
            .unwrap()
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(names, ["photos"]);
    }
    // S3's CreateBucket keeps names global.
    assert!(matches!(
        l.create_bucket("carol", "photos").await,
        Err(ObjectError::BucketAlreadyExists(_))
    ));
    l.delete_object("alice", "photos", "k", None).await.unwrap();
    l.delete_bucket("alice", "photos").await.unwrap();
    assert!(l.bucket_name_in_use("photos"), "bob still has one");
    l.delete_object("bob", "photos", "k", None).await.unwrap();
    l.delete_bucket("bob", "photos").await.unwrap();
    assert!(!l.bucket_name_in_use("photos"));
    l.create_bucket("carol", "photos").await.unwrap();
    // A copy across accounts (a Swift ACL grant decided it) is a new object, also
    // when the names are the same.
    l.create_container("dave", "photos", BTreeMap::new(), BTreeMap::new())
        .await
        .unwrap();
    l.put_object(
        "carol",
        "photos",
        "k",
        body(data(7, 1)),
        PutOptions::default(),
    )
    .await
    .unwrap();
    let src = l.open_object("carol", "photos", "k").unwrap();
    l.copy_object("dave", src, ("photos", "k"), ("photos", "k"), None, 0)
        .await
        .unwrap();
    let (_, s) = l.get_object("dave", "photos", "k", None).unwrap();
    assert_eq!(read_all(s).await.unwrap(), data(7, 1));
}

#[tokio::test]
async fn an_index_of_the_old_layout_opens_in_per_account_namespaces() {
    use oram_state::KvState;
    // Written by the previous release: global names.
    let mut kv = MemKv::new();
    kv.put(
        b"b/old-bucket",
        br#"{"name":"old-bucket","owner":"alice","created_ms":5}"#.to_vec(),
    );
    let rec = ObjectRecord {
        id: 1,
        size: 0,
        etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
        modified_ms: 5,
        meta: ObjectMeta::default(),
        segments: vec![],
        ..Default::default()
    };
    kv.put(b"o/old-bucket\0empty", encode(&rec));
    let l = layer_with_kv(300, Box::new(kv));
    assert_eq!(l.head_object("alice", "old-bucket", "empty").unwrap(), rec);
    assert!(l.bucket_name_in_use("old-bucket"));
    assert_eq!(l.index_counts(), (1, 1));
}

#[tokio::test]
async fn expired_objects_read_as_absent_and_are_purged() {
    let l = layer(300);
    l.create_container("a", "c", BTreeMap::new(), BTreeMap::new())
        .await
        .unwrap();
    let free = l.usage().free_blocks;
    let now = now_secs();
    let put = |key: &'static str, delete_at: i64| {
        let l = l.clone();
        async move {
            l.put_object(
                "a",
                "c",
                key,
                body(data(200, 1)),
                PutOptions {
                    delete_at,
                    ..PutOptions::default()
                },
            )
            .await
        }
    };
    put("gone", now - 1).await.unwrap();
    put("later", now + 3600).await.unwrap();
    assert!(matches!(
        l.head_object("a", "c", "gone"),
        Err(ObjectError::NoSuchKey(_))
    ));
    assert_eq!(
        l.head_object("a", "c", "later").unwrap().delete_at,
        now + 3600
    );
    let listed = l
        .list_objects(
            "a",
            "c",
            &ListParams {
                max_keys: 10,
                ..ListParams::default()
            },
        )
        .unwrap();
    assert_eq!(listed.objects.len(), 1);
    assert_eq!(l.bucket_usage("a", "c").unwrap(), (1, 200));
    // A create-only PUT over an expired object succeeds and frees its blocks.
    l.put_object(
        "a",
        "c",
        "gone",
        body(data(200, 2)),
        PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        },
    )
    .await
    .unwrap();
    l.set_object_meta("a", "c", "gone", ObjectMeta::default(), now - 1)
        .await
        .unwrap();
    let engine_before = l.engine().stats().accesses;
    assert_eq!(l.purge_expired(now, 100).await.unwrap(), 1);
    assert_eq!(l.purge_expired(now, 100).await.unwrap(), 0);
    assert_eq!(
        l.engine().stats().accesses,
        engine_before,
        "purging touches no block"
    );
    // The one left expires later; a second purge then takes it.
    assert_eq!(l.purge_expired(now + 3600, 100).await.unwrap(), 1);
    assert_eq!(l.usage().free_blocks, free);
    // A container with only expired objects can be deleted.
    put("x", now - 1).await.unwrap();
    l.delete_bucket("a", "c").await.unwrap();
    assert_eq!(l.usage().free_blocks, free);
}

#[tokio::test]
async fn containers_s3_cannot_address_are_listed_with_the_reason() {
    let l = layer(100);
    l.create_bucket("alice", "fine-bucket").await.unwrap();
    for name in ["My_Container", "snake_case", "x".repeat(64).as_str(), "ab"] {
        l.create_container("bob", name, BTreeMap::new(), BTreeMap::new())
            .await
            .unwrap();
    }
    let found: Vec<(String, String, &str)> = l
        .buckets_invisible_to_s3()
        .unwrap()
        .into_iter()
        .map(|(b, why)| (b.owner, b.name, why))
        .collect();
    assert_eq!(
        found,
        [
            ("bob".into(), "My_Container".into(), "uppercase letters"),
            ("bob".into(), "ab".into(), "shorter than 3 bytes"),
            ("bob".into(), "snake_case".into(), "an underscore"),
            ("bob".into(), "x".repeat(64), "longer than 63 bytes"),
        ]
    );
    assert_eq!(crate::bucket_name_problem("fine-bucket"), None);
    assert_eq!(
        crate::bucket_name_problem("a..b"),
        Some("two dots in a row")
    );
    assert_eq!(
        crate::bucket_name_problem("10.0.0.1"),
        Some("an IPv4 address")
    );
    assert_eq!(
        crate::bucket_name_problem("-abc"),
        Some("does not begin and end with a letter or digit")
    );
}

mod expiration;
mod lifecycle;
mod lifecycle_filters;
mod lock;
mod policy;
mod tagging;
mod versions;
