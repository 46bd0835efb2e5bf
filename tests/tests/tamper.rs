//! Tampering: a flipped byte, two swapped backend objects, a replayed older version,
//! a deleted or truncated object — each gives an integrity error, never wrong data,
//! and once the right object is back everything reads correctly again.

use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey};
use oram_direct::DirectConfig;
use oram_engine::{Op, Oram, OramError};
use oram_path::PathConfig;
use oram_store_memory::MemoryStore;
use oram_tests::{block_data, direct_engine, path_oram};

const CAP: u64 = 64;
const BS: usize = 32;

async fn get(store: &MemoryStore, key: &str) -> Bytes {
    let k = ObjKey::new(key).unwrap();
    store
        .get_many(&[k])
        .await
        .unwrap()
        .remove(0)
        .expect("object exists")
}

async fn put(store: &MemoryStore, key: &str, v: Bytes) {
    store
        .put_many(vec![(ObjKey::new(key).unwrap(), v)])
        .await
        .unwrap();
}

async fn fill(engine: &dyn Oram) {
    for b in 0..CAP {
        engine
            .access(vec![Op::Write(b, block_data(b, 1, BS))])
            .await
            .unwrap();
    }
    engine.flush().await.unwrap();
}

/// Reads `block`; the data must be right or the error an integrity error.
async fn read(engine: &dyn Oram, block: u64) -> Result<(), String> {
    match engine.access(vec![Op::Read(block)]).await {
        Ok(v) => {
            assert_eq!(
                v[0],
                block_data(block, 1, BS),
                "WRONG DATA served for block {block}"
            );
            Ok(())
        }
        Err(OramError::Integrity { key, reason }) => Err(format!("{key}: {reason}")),
        // A truncated or extended object is refused by the bounded read itself.
        Err(OramError::Store(e @ oram_blockstore::StoreError::WrongSize { .. })) => {
            Err(e.to_string())
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

/// Applies `tamper`, expects the next read of `block` to fail with an integrity
/// error mentioning `expect_key`, restores `key` and expects reads to work again.
async fn check(
    engine: &dyn Oram,
    store: &MemoryStore,
    block: u64,
    keys: &[&str],
    tamper: impl std::future::Future<Output = ()>,
    expect_key: &str,
) {
    let saved: Vec<Option<Bytes>> = store
        .get_many(
            &keys
                .iter()
                .map(|k| ObjKey::new(*k).unwrap())
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    tamper.await;
    let err = read(engine, block)
        .await
        .expect_err("tampering went unnoticed");
    assert!(
        err.contains(expect_key),
        "error names {err}, expected {expect_key}"
    );
    // Reported again on retry: a failed access changes nothing.
    assert!(read(engine, block).await.is_err());
    let restore: Vec<(ObjKey, Bytes)> = keys
        .iter()
        .zip(saved)
        .filter_map(|(k, v)| v.map(|v| (ObjKey::new(*k).unwrap(), v)))
        .collect();
    store.put_many(restore).await.unwrap();
    for b in 0..CAP {
        read(engine, b)
            .await
            .expect("after restoring, all reads work");
    }
    engine.flush().await.unwrap();
}

#[tokio::test]
async fn path_oram_detects_tampering() {
    let store = Arc::new(MemoryStore::new());
    let oram = path_oram(
        store.clone(),
        PathConfig {
            capacity: CAP,
            block_size: BS,
            rng_seed: Some([8; 32]),
            ..PathConfig::default()
        },
    );
    fill(&oram).await;
    let root = "vol0/n/1";

    // 1. A flipped byte in the root bucket (on every path).
    check(
        &oram,
        &store,
        3,
        &[root],
        async {
            let mut v = get(&store, root).await.to_vec();
            v[60] ^= 0x04;
            put(&store, root, v.into()).await;
        },
        root,
    )
    .await;

    // 2. The two level-1 buckets swapped: every path crosses one of them.
    check(
        &oram,
        &store,
        9,
        &["vol0/n/2", "vol0/n/3"],
        async {
            let (a, b) = (get(&store, "vol0/n/2").await, get(&store, "vol0/n/3").await);
            put(&store, "vol0/n/2", b).await;
            put(&store, "vol0/n/3", a).await;
        },
        "vol0/n/",
    )
    .await;

    // 3. Replay: an older, authentic root put back after it was rewritten.
    let old_root = get(&store, root).await;
    read(&oram, 1).await.unwrap();
    oram.flush().await.unwrap();
    assert_ne!(get(&store, root).await, old_root, "the root was rewritten");
    check(
        &oram,
        &store,
        1,
        &[root],
        async { put(&store, root, old_root.clone()).await },
        root,
    )
    .await;

    // 4. Deleted and 5. truncated root.
    check(
        &oram,
        &store,
        2,
        &[root],
        async {
            store
                .delete_many(&[ObjKey::new(root).unwrap()])
                .await
                .unwrap();
        },
        root,
    )
    .await;
    check(
        &oram,
        &store,
        2,
        &[root],
        async {
            let v = get(&store, root).await;
            put(&store, root, v.slice(..v.len() / 2)).await;
        },
        root,
    )
    .await;
}

#[tokio::test]
async fn direct_engine_detects_tampering() {
    let store = Arc::new(MemoryStore::new());
    let engine = direct_engine(
        store.clone(),
        DirectConfig {
            capacity: CAP,
            block_size: BS,
            ..DirectConfig::default()
        },
    );
    fill(&engine).await;
    let (k1, k2) = ("vol0/b/1", "vol0/b/2");
    check(
        &engine,
        &store,
        1,
        &[k1],
        async {
            let mut v = get(&store, k1).await.to_vec();
            v[40] ^= 1;
            put(&store, k1, v.into()).await;
        },
        k1,
    )
    .await;
    check(
        &engine,
        &store,
        2,
        &[k1, k2],
        async {
            let (a, b) = (get(&store, k1).await, get(&store, k2).await);
            put(&store, k1, b).await;
            put(&store, k2, a).await;
        },
        k2,
    )
    .await;
    // Replay: block 1 rewritten with new data, then its old object put back.
    let old = get(&store, k1).await;
    engine
        .access(vec![Op::Write(1, block_data(1, 2, BS))])
        .await
        .unwrap();
    put(&store, k1, old).await;
    let err = engine.access(vec![Op::Read(1)]).await.unwrap_err();
    assert!(matches!(err, OramError::Integrity { .. }), "{err}");
    store
        .delete_many(&[ObjKey::new(k2).unwrap()])
        .await
        .unwrap();
    assert!(matches!(
        engine.access(vec![Op::Read(2)]).await,
        Err(OramError::Integrity { .. })
    ));
}
