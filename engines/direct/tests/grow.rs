//! The direct engine's growth: one commit of the trusted state, nothing sent,
//! kept across a reopen whatever the configuration says, never a shrink.

use std::sync::Arc;

use oram_blockstore::Recording;
use oram_direct::{DirectConfig, DirectEngine};
use oram_engine::conformance::{block_data, fill, read_back, runtime, test_sealer, Model};
use oram_engine::{Op, Oram};
use oram_state::Space;
use oram_statedb::Db;
use oram_store_memory::MemoryStore;

const START: u64 = 64;
const BS: usize = 256;

fn engine(store: &Arc<Recording<Arc<MemoryStore>>>, db: &Arc<Db>) -> DirectEngine {
    let cfg = DirectConfig {
        capacity: START,
        block_size: BS,
        prefix: "vol0".into(),
    };
    let state = Box::new(db.state(Space(0)).unwrap());
    DirectEngine::new(cfg, store.clone(), test_sealer(), state).unwrap()
}

#[test]
fn growth_sends_nothing_and_outlives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), [7; 16]).unwrap();
    let store = Arc::new(Recording::new(Arc::new(MemoryStore::new())));
    let mut model = Model::new();
    runtime().block_on(async {
        let e = engine(&store, &db);
        fill(&e, &mut model, 0..START, 1).await;
        // Beyond the capacity: refused before the growth.
        let beyond = Op::Write(START, block_data(START, 2, BS));
        assert!(e.access(vec![beyond.clone()]).await.is_err());
        store.take_trace();
        let g = e.grow(4 * START, &|_, _| {}).await.unwrap();
        assert_eq!((g.capacity, g.positions, g.written), (4 * START, 0, 0));
        assert!(store.take_trace().is_empty(), "the growth sent requests");
        assert_eq!((e.capacity(), e.id_limit()), (4 * START, 4 * START));
        // The new room takes writes; growing to the same size is a no-op and
        // shrinking is refused.
        fill(&e, &mut model, START..4 * START, 3).await;
        assert_eq!(
            e.grow(4 * START, &|_, _| {}).await.unwrap().capacity,
            4 * START
        );
        let e2 = e.grow(2 * START, &|_, _| {}).await.unwrap_err();
        assert!(e2.to_string().contains("cannot shrink"), "{e2}");
        read_back(&e, &model, 4 * START, 16).await;
    });
    // Reopened with the configuration's smaller capacity: the growth holds.
    runtime().block_on(async {
        let e = engine(&store, &db);
        assert_eq!(e.capacity(), 4 * START);
        read_back(&e, &model, 4 * START, 16).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, 4 * START);
    });
}
