//! What a stopped ObliviStore volume keeps on the backend: once a checkpoint has
//! landed, `collect` deletes every level object nothing can need, so each
//! partition keeps one object per level it fills.

use std::sync::Arc;

use oram_blockstore::{BlockStore, BlockStoreExt};
use oram_engine::conformance::{block_data, test_sealer};
use oram_engine::{Op, Oram, Parts};
use oram_oblivistore::{oblivistore, ObliviStoreConfig};
use oram_state::Space;
use oram_statedb::Db;
use oram_store_memory::MemoryStore;

const BS: usize = 32;
const CAPACITY: u64 = 256;

async fn objects(store: &dyn BlockStore) -> usize {
    store.list("vol0/").await.unwrap().len()
}

/// Marks a checkpoint as taken and landed (what a volume's checkpoint does to
/// the state's lineage), with the engine quiesced.
async fn landed_checkpoint(e: &dyn Oram, db: &Arc<Db>) {
    let quiet = e.quiesce().await.unwrap();
    let epoch = db.epoch() + 1;
    db.set_epoch(epoch).await.unwrap();
    db.set_landed(epoch);
    drop(quiet);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_partition_keeps_one_object_per_filled_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), [7; 16]).unwrap();
    let mem = Arc::new(MemoryStore::new());
    let store: Arc<dyn BlockStore> = mem.clone();
    let mut cfg = ObliviStoreConfig::new(CAPACITY, BS, 8, 16);
    cfg.framework.cache_bound = 1 << 20;
    cfg.framework.rng_seed = Some([3; 32]);
    let parts = Parts {
        store: store.clone(),
        sealer: test_sealer(),
        state: Box::new(db.state(Space(0)).unwrap()),
    };
    let e = oblivistore(cfg, parts, "vol0").unwrap();
    // Every block written three times: levels rebuilt, some emptied since.
    for v in 1..=3 {
        for chunk in (0..CAPACITY).collect::<Vec<_>>().chunks(16) {
            let ops = chunk
                .iter()
                .map(|&b| Op::Write(b, block_data(b, v, BS)))
                .collect();
            e.access(ops).await.unwrap();
        }
    }
    e.flush().await.unwrap();
    landed_checkpoint(&e, &db).await;
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
