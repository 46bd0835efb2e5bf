//! Path ORAM's own properties (the engine conformance suite, in
//! `tests/conformance.rs`, covers what every engine must do): the model test for
//! several bucket sizes, block sizes, capacities and cache depths on the memory
//! and fs stores; one round trip and one write-back per batch; and the stash
//! bound (Z = 4, N = 2^14 blocks all written, then 10^5 random accesses: the
//! stash never exceeds the default bound of 89 blocks) and its overflow.

use std::collections::BTreeSet;
use std::sync::Arc;

use oram_blockstore::{BlockStore, BlockStoreExt, Recording, TraceEvent, Verb};
use oram_engine::conformance::{block_data, model_and_read_back, test_sealer, trace_of_one_batch};
use oram_engine::{Op, Oram};
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_state::MemState;
use oram_store_fs::FsStore;
use oram_store_memory::MemoryStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn path_oram(store: Arc<dyn BlockStore>, cfg: PathConfig) -> PathOram {
    PathOram::new(cfg, store, test_sealer(), Box::new(MemState::new())).expect("valid config")
}

/// The node of a bucket key `<prefix>/n/[<shard>/]<node>[.<slot>]`.
fn node_of(e: &TraceEvent) -> u64 {
    let name = e.key.rsplit('/').next().unwrap();
    name.split('.').next().unwrap().parse().unwrap()
}

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
        tree: TreeConfig {
            capacity: c.capacity,
            block_size: c.block_size,
            cached_levels: c.cached_levels,
            // Z = 1 and Z = 2 need a larger stash than the Z = 4 default bound.
            stash_bound: if c.z < 3 { 10_000 } else { 89 },
            max_batch: c.max_batch.min(8), // longer batches are split into several rounds
            rng_seed: Some([seed; 32]),
            ..PathConfig::default().tree
        },
        z: c.z,
        arity: 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_matches_model_on_memory() {
    let mut ops = 0;
    for (i, c) in CASES.iter().enumerate() {
        let store = Arc::new(MemoryStore::new());
        let oram = path_oram(store.clone(), path_cfg(c, i as u8));
        ops += model_and_read_back(&oram, 600, c.max_batch, i as u64).await;
        let s = oram.stats();
        assert!(s.rounds > 0 && s.stash_max as usize <= path_cfg(c, 0).tree.stash_bound);
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
        model_and_read_back(&oram, 250, c.max_batch, 100 + i as u64).await;
        // Real files: at most three per written uncached bucket (its live,
        // previous and checkpoint slots).
        let listed = store.list("vol0/n/").await.unwrap();
        assert!(!listed.is_empty());
        assert!(listed.len() as u64 <= 3 * oram.geometry().node_count());
    }
}

/// A tree with key shards keeps bucket `n` under `vol0/n/<n mod 16, hex>/`:
/// every shard used, each key's shard its node's, the data read back from
/// real files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_keys_spread_the_tree_over_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsStore::open(dir.path()).unwrap());
    let mut cfg = path_cfg(&CASES[0], 7);
    cfg.tree.key_shards = 16;
    let oram = path_oram(store.clone(), cfg.clone());
    assert_eq!(oram.node_key(17, 0).as_str(), "vol0/n/1/17");
    assert_eq!(oram.node_key(26, 2).as_str(), "vol0/n/a/26.2");
    model_and_read_back(&oram, 250, CASES[0].max_batch, 7).await;
    let listed = store.list("vol0/n/").await.unwrap();
    let mut shards = BTreeSet::new();
    for k in &listed {
        let parts: Vec<&str> = k.as_str().split('/').collect();
        assert_eq!(parts.len(), 4, "{k}");
        let node: u64 = parts[3].split('.').next().unwrap().parse().unwrap();
        assert_eq!(parts[2], format!("{:x}", node % 16), "{k}");
        shards.insert(parts[2].to_string());
    }
    assert_eq!(shards.len(), 16, "{shards:?}");
    // Without shards (every volume of earlier versions): `vol0/n/<node>`.
    cfg.tree.key_shards = 0;
    let plain = path_oram(Arc::new(MemoryStore::new()), cfg.clone());
    assert_eq!(plain.node_key(17, 1).as_str(), "vol0/n/17.1");
    // More than the layout allows: refused.
    cfg.tree.key_shards = oram_tree::MAX_KEY_SHARDS + 1;
    let err = PathOram::new(cfg, store, test_sealer(), Box::new(MemState::new()));
    assert!(err.is_err());
}

#[tokio::test]
async fn a_batch_reads_the_union_of_its_paths_once_and_writes_back_once() {
    let rec = Arc::new(Recording::new(MemoryStore::new()));
    let oram = path_oram(
        rec.clone(),
        PathConfig {
            tree: TreeConfig {
                capacity: 1024,
                block_size: 16,
                rng_seed: Some([3; 32]),
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
    );
    let geo = oram.geometry();
    let t = trace_of_one_batch(&oram, &rec).await;
    let calls: Vec<&[TraceEvent]> = t.chunk_by(|a, b| a.call == b.call).collect();
    assert_eq!(calls.len(), 2, "one GET round trip and one PUT round");
    assert!(calls[0].iter().all(|e| e.verb == Verb::Get));
    assert!(calls[1].iter().all(|e| e.verb == Verb::Put));
    let got: BTreeSet<u64> = calls[0].iter().map(node_of).collect();
    let put: BTreeSet<u64> = calls[1].iter().map(node_of).collect();
    assert_eq!(got.len(), calls[0].len(), "a bucket fetched twice");
    assert_eq!(got, put);
    assert!(got.contains(&1), "the root is on every path");
    // 16 random paths share their top: the union is much smaller than 16 full paths.
    assert!(got.len() < 16 * (geo.leaf_level as usize + 1));
    let leaves = got
        .iter()
        .filter(|&&n| geo.level(n) == geo.leaf_level)
        .count();
    assert!((1..=16).contains(&leaves));
}

/// The engine's model of its requests per op in a round of k ops
/// (`EngineModel::round_requests_per_op`: the union of k paths read once and
/// written back) is what a recording store counts, within 3 %, for rounds of
/// 16 random reads on the tree the settings build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modelled_requests_per_op_are_what_the_store_sees() {
    use oram_engine::{EngineSettings, Shape};
    const K: usize = 16;
    const ROUNDS: usize = 150;
    let settings = oram_path::PathSettings {
        cached_levels: Some(2),
        ..Default::default()
    };
    let shape = Shape {
        capacity: 4096,
        block_size: 16,
        max_batch: K,
        prefix: "vol0".into(),
        id_limit: None,
    };
    let model = settings.model(&shape);
    let mut cfg = settings.config(&shape);
    cfg.tree.rng_seed = Some([9; 32]);
    let rec = Arc::new(Recording::new(MemoryStore::new()));
    let oram = path_oram(rec.clone(), cfg);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    rec.take_trace();
    for _ in 0..ROUNDS {
        let ops = (0..K)
            .map(|_| Op::Read(rng.gen_range(0..shape.capacity)))
            .collect();
        oram.access(ops).await.unwrap();
    }
    oram.flush().await.unwrap();
    let requests = rec
        .take_trace()
        .iter()
        .filter(|e| matches!(e.verb, Verb::Get | Verb::GetRange | Verb::Put))
        .count() as f64;
    let measured = requests / (K * ROUNDS) as f64;
    let want = model.round_requests_per_op;
    assert!(
        (measured - want).abs() < 0.03 * want,
        "measured {measured:.3} requests per op, modelled {want:.3}"
    );
    // Alone, an op reads and writes each uncached level's bucket.
    let levels = model.tree().unwrap().uncached_levels() as f64;
    assert_eq!(model.read_op.requests, 2.0 * levels);
    assert!(want < model.read_op.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stash_stays_within_bound() {
    const N: u64 = 1 << 14;
    const ACCESSES: usize = 100_000;
    const BS: usize = 16;
    let cfg = PathConfig {
        tree: TreeConfig {
            capacity: N,
            block_size: BS,
            // The stash does not depend on where the top buckets live; caching them
            // only makes the test faster.
            cached_levels: 7,
            rng_seed: Some([14; 32]),
            ..PathConfig::default().tree
        },
        z: 4,
        arity: 2,
    };
    let bound = cfg.tree.stash_bound;
    let oram = path_oram(Arc::new(MemoryStore::new()), cfg);
    // Write every block once, one access at a time.
    for b in 0..N {
        oram.access(vec![Op::Write(b, block_data(b, 0, BS))])
            .await
            .expect("fill");
    }
    oram.flush().await.unwrap();
    let fill = oram.stats();
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let mut max_seen = 0;
    for i in 0..ACCESSES {
        let b = rng.gen_range(0..N);
        let op = if i % 2 == 0 {
            Op::Read(b)
        } else {
            Op::Write(b, block_data(b, i as u64, BS))
        };
        let res = oram
            .access(vec![op])
            .await
            .expect("access (stash overflow?)");
        if i % 2 == 0 && i % 1000 == 0 {
            // Spot-check content: block b was last written at some version ≤ i.
            assert_eq!(res[0].len(), BS);
        }
        max_seen = max_seen.max(oram.stats().stash_len);
    }
    oram.flush().await.unwrap();
    let s = oram.stats();
    let rounds = s.rounds - fill.rounds;
    let mean = (s.stash_sum - fill.stash_sum) as f64 / rounds as f64;
    println!(
        "stash after each of {ACCESSES} accesses (N = {N}, Z = 4, {} leaves): max {} mean {:.3} (bound {bound}); over the fill too: max {}",
        oram.geometry().leaves,
        max_seen,
        mean,
        s.stash_max
    );
    assert_eq!(s.accesses, N + ACCESSES as u64);
    assert!(
        s.stash_max as usize <= bound,
        "stash {} over bound {bound}",
        s.stash_max
    );
    // Fewer than one block on average: the tree is doing the storing.
    assert!(mean < 1.0, "mean stash {mean}");
}

#[tokio::test]
async fn overflow_is_a_clear_error_and_loses_nothing() {
    // Z = 1 with a tiny tree and a bound of 2 overflows quickly.
    let oram = path_oram(
        Arc::new(MemoryStore::new()),
        PathConfig {
            tree: TreeConfig {
                capacity: 64,
                block_size: 8,
                leaves: Some(4),
                stash_bound: 2,
                rng_seed: Some([1; 32]),
                ..PathConfig::default().tree
            },
            z: 1,
            arity: 2,
        },
    );
    let mut overflowed = false;
    for b in 0..64 {
        match oram.access(vec![Op::Write(b, block_data(b, 1, 8))]).await {
            Ok(_) => {}
            Err(oram_engine::OramError::StashOverflow { size, bound }) => {
                assert!(size > bound && bound == 2);
                overflowed = true;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(
        overflowed,
        "7 buckets cannot hold 64 blocks without overflow"
    );
    assert!(oram.stats().stash_len > 2);
    // Reads fail too while the stash is over the bound: no answer rather than a wrong one.
    assert!(matches!(
        oram.access(vec![Op::Read(0)]).await,
        Err(oram_engine::OramError::StashOverflow { .. })
    ));
    // Every write took effect, though reported with an error: nothing was lost.
    oram.set_stash_bound(1000);
    for b in 0..64 {
        let got = oram.access(vec![Op::Read(b)]).await.unwrap();
        assert_eq!(got[0], block_data(b, 1, 8), "block {b}");
    }
}
