//! What a stopped ObliviStore volume keeps on the backend: once a checkpoint has
//! landed, `collect` deletes every level object nothing can need, so each
//! partition keeps one object per level it fills.

use std::sync::Arc;

use oram_blockstore::{BlockStore, BlockStoreExt};
use oram_engine::conformance::{block_data, landed_checkpoint, test_sealer};
use oram_engine::{Op, Oram, Parts};
use oram_oblivistore::{oblivistore, ObliviStoreConfig};
use oram_partition::Partitioned;
use oram_state::Space;
use oram_statedb::Db;
use oram_store_memory::MemoryStore;

const BS: usize = 32;
const CAPACITY: u64 = 256;

async fn objects(store: &dyn BlockStore) -> usize {
    store.list("vol0/").await.unwrap().len()
}

/// A volume whose state is a redb database (so checkpoints can land) over a
/// memory store, seeded with `seed`, every block written `versions` times in
/// rounds of 16.
struct Volume {
    _dir: tempfile::TempDir,
    db: Arc<Db>,
    store: Arc<dyn BlockStore>,
    e: Arc<Partitioned>,
}

impl Volume {
    async fn written(seed: u8, versions: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("state.redb"), [seed; 16]).unwrap();
        let store: Arc<dyn BlockStore> = Arc::new(MemoryStore::new());
        let mut cfg = ObliviStoreConfig::new(CAPACITY, BS, 8, 16);
        cfg.framework.cache_bound = 1 << 20;
        cfg.framework.rng_seed = Some([seed; 32]);
        let parts = Parts {
            store: store.clone(),
            sealer: test_sealer(),
            state: Box::new(db.state(Space(0)).unwrap()),
        };
        let e = Arc::new(oblivistore(cfg, parts, "vol0").unwrap());
        for v in 1..=versions {
            write(&e, 0..CAPACITY, v, 16).await;
        }
        Self {
            _dir: dir,
            db,
            store,
            e,
        }
    }
}

/// Writes version `v` of `blocks`, `round` blocks a call.
async fn write(e: &Partitioned, blocks: std::ops::Range<u64>, v: u64, round: usize) {
    for chunk in blocks.collect::<Vec<_>>().chunks(round) {
        let ops = chunk
            .iter()
            .map(|&b| Op::Write(b, block_data(b, v, BS)))
            .collect();
        e.access(ops).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_partition_keeps_one_object_per_filled_level() {
    // Every block written three times: levels rebuilt, some emptied since.
    let Volume { _dir, db, store, e } = Volume::written(3, 3).await;
    e.flush().await.unwrap();
    landed_checkpoint(e.as_ref(), &db).await;
    let before = objects(store.as_ref()).await;
    let deleted = e.collect().await.unwrap();
    let after = objects(store.as_ref()).await;
    let report = e.check(&|_, _| {}).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // `check` reads each filled level's object: exactly what is left.
    assert_eq!(after as u64, report.objects_read, "{before} objects before");
    assert!(
        after < before && deleted >= (before - after) as u64,
        "{before} objects before, {after} after, {deleted} keys deleted"
    );
    eprintln!("{before} level objects before the collect, {after} after");
    // What a sweep (a LIST) would delete, the collect deleted already.
    assert_eq!(e.sweep().await.unwrap(), 0, "unreferenced objects stayed");
    // Nothing needed went: every block reads back.
    for b in 0..CAPACITY {
        let got = e.access(vec![Op::Read(b)]).await.unwrap();
        assert_eq!(got[0], block_data(b, 3, BS), "block {b}");
    }
}

/// While serving: after a landed checkpoint, `collect_while_serving` deletes
/// the superseded level objects a partition at a time while rounds go on
/// (rounds that reach a partition being collected wait for it); nothing any
/// round or the checkpoint needs goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superseded_levels_go_while_rounds_go_on() {
    let Volume { _dir, db, store, e } = Volume::written(4, 3).await;
    landed_checkpoint(e.as_ref(), &db).await;
    let before = objects(store.as_ref()).await;
    // Rounds of writes (version 4 of the first half) beside the collect.
    let writer = {
        let e = e.clone();
        tokio::spawn(async move { write(&e, 0..CAPACITY / 2, 4, 8).await })
    };
    let deleted = e.collect_while_serving().await.unwrap();
    writer.await.unwrap();
    assert!(deleted > 0, "nothing collected");
    let report = e.check(&|_, _| {}).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    for b in 0..CAPACITY {
        let want = block_data(b, if b < CAPACITY / 2 { 4 } else { 3 }, BS);
        let got = e.access(vec![Op::Read(b)]).await.unwrap();
        assert_eq!(got[0], want, "block {b}");
    }
    eprintln!(
        "{before} level objects at the checkpoint, {deleted} keys deleted while serving, {} now",
        objects(store.as_ref()).await
    );
}
