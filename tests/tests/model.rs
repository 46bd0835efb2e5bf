//! Model tests: thousands of random batched reads and writes against a `HashMap`
//! model, on the memory and fs back-ends, for several Z, block sizes, capacities
//! and tree-top cache depths — and on the `direct` engine.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::BlockStore;
use oram_direct::DirectConfig;
use oram_engine::{Op, Oram};
use oram_path::PathConfig;
use oram_store_fs::FsStore;
use oram_store_memory::MemoryStore;
use oram_tests::{block_data, direct_engine, path_oram, run_model};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

struct Case {
    z: usize,
    block_size: usize,
    capacity: u64,
    cached_levels: u32,
    max_batch: usize,
}

const CASES: &[Case] = &[
    Case {
        z: 4,
        block_size: 64,
        capacity: 1000,
        cached_levels: 0,
        max_batch: 16,
    },
    Case {
        z: 2,
        block_size: 16,
        capacity: 100,
        cached_levels: 2,
        max_batch: 8,
    },
    Case {
        z: 5,
        block_size: 256,
        capacity: 37,
        cached_levels: 3,
        max_batch: 4,
    },
    Case {
        z: 3,
        block_size: 32,
        capacity: 513,
        cached_levels: 40,
        max_batch: 32,
    },
    Case {
        z: 4,
        block_size: 4096,
        capacity: 64,
        cached_levels: 1,
        max_batch: 16,
    },
    Case {
        z: 1,
        block_size: 8,
        capacity: 3,
        cached_levels: 0,
        max_batch: 4,
    },
];

fn path_cfg(c: &Case, seed: u8) -> PathConfig {
    PathConfig {
        capacity: c.capacity,
        block_size: c.block_size,
        z: c.z,
        cached_levels: c.cached_levels,
        // Z = 1 and Z = 2 need a larger stash than the Z = 4 default bound.
        stash_bound: if c.z < 3 { 10_000 } else { 89 },
        max_batch: c.max_batch.min(8), // longer batches are split into several rounds
        rng_seed: Some([seed; 32]),
        ..PathConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_matches_model_on_memory() {
    let mut ops = 0;
    for (i, c) in CASES.iter().enumerate() {
        let store = Arc::new(MemoryStore::new());
        let oram = path_oram(store.clone(), path_cfg(c, i as u8));
        ops += run_model(&oram, 600, c.max_batch, i as u64).await;
        let s = oram.stats();
        assert!(s.rounds > 0 && s.stash_max as usize <= path_cfg(c, 0).stash_bound);
        if c.cached_levels > oram.geometry().leaf_level {
            assert!(
                store.is_empty(),
                "a fully cached tree must not touch the backend"
            );
        } else {
            assert!(!store.is_empty());
        }
    }
    assert!(ops > 5000, "only {ops} ops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_matches_model_on_fs() {
    for (i, c) in CASES.iter().enumerate().take(3) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FsStore::open(dir.path()).unwrap());
        let oram = path_oram(store.clone(), path_cfg(c, 100 + i as u8));
        run_model(&oram, 250, c.max_batch, 100 + i as u64).await;
        // Real files: one per written uncached bucket.
        let listed = store.list("vol0/n/").await.unwrap();
        assert!(!listed.is_empty());
        assert!(listed.len() as u64 <= oram.geometry().node_count());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_see_their_own_writes() {
    let store: Arc<dyn BlockStore> = Arc::new(MemoryStore::new());
    let oram = path_oram(
        store,
        PathConfig {
            capacity: 800,
            block_size: 32,
            cached_levels: 2,
            rng_seed: Some([9; 32]),
            ..PathConfig::default()
        },
    );
    // Eight tasks, each owning 100 blocks, interleave their batches.
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let oram = oram.clone();
            tokio::spawn(async move {
                let mut rng = ChaCha8Rng::seed_from_u64(t);
                let mut model: HashMap<u64, Bytes> = HashMap::new();
                for v in 0..150u64 {
                    let b = t * 100 + rng.gen_range(0..100);
                    if rng.gen_bool(0.5) {
                        let d = block_data(b, v, 32);
                        oram.access(vec![Op::Write(b, d.clone())]).await.unwrap();
                        model.insert(b, d);
                    } else {
                        let got = oram.access(vec![Op::Read(b)]).await.unwrap();
                        let want = model
                            .get(&b)
                            .cloned()
                            .unwrap_or_else(|| Bytes::from(vec![0; 32]));
                        assert_eq!(got[0], want, "task {t} block {b}");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(oram.stats().accesses, 8 * 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_engine_matches_model() {
    for (store, label) in [
        (
            Arc::new(MemoryStore::new()) as Arc<dyn BlockStore>,
            "memory",
        ),
        (
            Arc::new(FsStore::open(tempfile::tempdir().unwrap().keep()).unwrap())
                as Arc<dyn BlockStore>,
            "fs",
        ),
    ] {
        let engine = direct_engine(
            store,
            DirectConfig {
                capacity: 300,
                block_size: 128,
                ..DirectConfig::default()
            },
        );
        let ops = run_model(&engine, 400, 12, 7).await;
        assert!(ops > 1000, "{label}");
    }
}

#[tokio::test]
async fn bad_ops_are_refused_without_effect() {
    let store = Arc::new(MemoryStore::new());
    let oram = path_oram(
        store.clone(),
        PathConfig {
            capacity: 10,
            block_size: 16,
            ..PathConfig::default()
        },
    );
    let err = oram.access(vec![Op::Read(10)]).await.unwrap_err();
    assert!(matches!(
        err,
        oram_engine::OramError::BlockOutOfRange {
            block: 10,
            capacity: 10
        }
    ));
    let err = oram
        .access(vec![Op::Write(1, Bytes::from_static(b"short"))])
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        oram_engine::OramError::WrongBlockSize {
            got: 5,
            want: 16,
            ..
        }
    ));
    // A batch with one bad op is refused whole: nothing reached the backend.
    let err = oram
        .access(vec![Op::Write(1, Bytes::from(vec![1; 16])), Op::Read(99)])
        .await;
    assert!(err.is_err());
    assert!(store.is_empty());
    assert_eq!(
        oram.access(vec![Op::Read(1)]).await.unwrap()[0],
        Bytes::from(vec![0; 16])
    );
}
