//! ObliviStore grows online: every partition's top level rises in one commit
//! of its state, nothing is written or moved, the new levels are built by the
//! evictions that follow, and an interrupted growth opens at the old size and
//! finishes. (The whole conformance suite on a grown volume is `mod grown` in
//! `conformance.rs`.)

use std::sync::Arc;
use std::time::Duration;

use oram_blockstore::{BlockStore, Recording, Verb};
use oram_engine::conformance::{fill, read_back, test_sealer, Model};
use oram_engine::{Op, Oram, OramError, Parts};
use oram_oblivistore::{oblivistore, Geometry, ObliviStoreConfig};
use oram_partition::Partitioned;
use oram_state::Space;
use oram_statedb::Db;
use oram_store_memory::MemoryStore;

const BS: usize = 32;
const CAPACITY: u64 = 512;
const PARTITIONS: u32 = 4;
const VOL: [u8; 16] = [7; 16];

/// The configuration at `CAPACITY`, with a shuffle buffer of exactly one
/// top-level shuffle (the least allowed): a shuffle into a grown top level
/// needs the buffer to have grown with it.
fn config() -> ObliviStoreConfig {
    let mut cfg = ObliviStoreConfig::new(CAPACITY, BS, PARTITIONS, 16);
    cfg.framework.cache_bound = 1 << 20;
    cfg.framework.round_attempts = 1;
    cfg.framework.rng_seed = Some([3; 32]);
    let g = cfg.geometry();
    cfg.shuffle_bytes = g.level_bytes(g.top);
    cfg
}

/// The engine over `store`, its trusted state in `db` (as last committed).
fn open(store: Arc<dyn BlockStore>, db: &Arc<Db>) -> Partitioned {
    let parts = Parts {
        store,
        sealer: test_sealer(),
        state: Box::new(db.state(Space(0)).unwrap()),
    };
    oblivistore(config(), parts, "vol0").unwrap()
}

/// Reads every block of `0..ids` back and checks the engine: no problem,
/// every block found.
async fn verify(e: &dyn Oram, model: &Model, ids: u64) {
    read_back(e, model, ids, 16).await;
    let rep = e.check(&|_, _| {}).await.expect("check");
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.blocks_found, model.len() as u64);
}

/// The level of a level object's key `vol0/o/<partition>/<level>/<slot>`.
fn level_of(key: &str) -> u32 {
    key.rsplit('/').nth(1).unwrap().parse().unwrap()
}

/// Filled, grown to 4× with accesses between the partitions' growths, then
/// filled to the new capacity: every block
/// written before, during and after reads back, here and after a reopen;
/// each partition's top level rose by two and the evictions built the first
/// new level (a PUT of its size), within a shuffle buffer of one old top
/// level, which grew with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growth_sends_nothing_and_the_evictions_build_the_new_levels() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let rec = Arc::new(Recording::new(MemoryStore::new()));
    let e = Arc::new(open(rec.clone(), &db));
    let old = config().geometry();
    let mut model = Model::new();
    fill(e.as_ref(), &mut model, 0..CAPACITY, 1).await;
    rec.take_trace();

    let during = std::sync::Mutex::new(Vec::new());
    let h = tokio::runtime::Handle::current();
    let progress = |done: u64, total: u64| {
        if done == total {
            return;
        }
        // Between two partitions' growths, a caller writes and reads back.
        let e = e.clone();
        let b = done;
        let d = oram_engine::conformance::block_data(b, 100 + done, BS);
        let wrote = d.clone();
        let (ok, cap) = tokio::task::block_in_place(|| {
            h.block_on(async move {
                e.access(vec![Op::Write(b, d.clone())]).await.unwrap();
                let got = e.access(vec![Op::Read(b)]).await.unwrap();
                (got[0] == d, e.capacity())
            })
        });
        assert!(ok, "an access during the growth read wrong");
        assert_eq!(cap, CAPACITY, "the new capacity before the growth's commit");
        during.lock().unwrap().push((b, wrote));
    };
    let g = e.grow(4 * CAPACITY, &progress).await.expect("growth");
    let during = std::mem::take(&mut *during.lock().unwrap());
    assert_eq!(
        during.len(),
        PARTITIONS as usize - 1,
        "no access between partitions"
    );
    // Only the accesses' own reads and level PUTs (a growth alone sends
    // nothing: the next test).
    let other: Vec<_> = rec
        .take_trace()
        .into_iter()
        .filter(|t| !matches!(t.verb, Verb::Get | Verb::GetRange | Verb::Put))
        .collect();
    assert!(other.is_empty(), "the growth sent requests: {other:?}");
    model.extend(during);
    assert_eq!((g.capacity, g.positions, g.written), (4 * CAPACITY, 0, 0));
    assert_eq!(e.capacity(), 4 * CAPACITY);
    for p in 0..PARTITIONS {
        assert_eq!(
            e.partition(p).capacity(),
            1 << (old.top + 2),
            "partition {p}"
        );
    }
    verify(e.as_ref(), &model, CAPACITY).await;

    // The new room, within a shuffle buffer that must have grown (a shuffle
    // into a grown level waits for it forever otherwise).
    let filled = tokio::time::timeout(
        Duration::from_secs(600),
        fill(e.as_ref(), &mut model, CAPACITY..4 * CAPACITY, 2),
    );
    filled
        .await
        .expect("the shuffle buffer did not grow with the top level");
    let new_level = Geometry {
        top: old.top + 1,
        block_size: BS,
    };
    let built = rec.take_trace().into_iter().any(|t| {
        t.verb == Verb::Put
            && level_of(&t.key) == old.top + 1
            && t.size == new_level.level_bytes(old.top + 1)
    });
    assert!(built, "no eviction built the first new level");
    verify(e.as_ref(), &model, 4 * CAPACITY).await;

    // Growing to the size it has is a no-op; shrinking is refused.
    assert_eq!(
        e.grow(4 * CAPACITY, &|_, _| {}).await.unwrap().capacity,
        4 * CAPACITY
    );
    assert!(matches!(
        e.grow(CAPACITY, &|_, _| {}).await,
        Err(OramError::Config(_))
    ));
    drop(e);

    // Reopened with the configuration it was created with: the new size.
    let e = open(rec.clone(), &db);
    assert_eq!(e.capacity(), 4 * CAPACITY, "the growth did not persist");
    verify(&e, &model, 4 * CAPACITY).await;
}

/// What a kill -9 between two partitions' growths leaves — two partitions
/// grown (each one's commit made), the engine's own record not — opens at
/// the old size with every block (ids past it refused), and growing again
/// finishes, sending nothing: the other partitions grow, and the new size
/// persists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growth_interrupted_between_partitions_opens_at_the_old_size_and_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let rec = Arc::new(Recording::new(MemoryStore::new()));
    let store: Arc<dyn BlockStore> = rec.clone();
    let e = open(store.clone(), &db);
    let mut model = Model::new();
    fill(&e, &mut model, 0..CAPACITY, 1).await;
    let room = config().framework.sub_capacity_at(4 * CAPACITY);
    for p in 0..2 {
        e.partition(p).grow(room, &|_, _| {}).await.unwrap();
    }
    drop(e);

    let e = open(store.clone(), &db);
    assert_eq!(e.capacity(), CAPACITY, "not the old size");
    assert!(e.partition(0).capacity() >= room && e.partition(3).capacity() < room);
    verify(&e, &model, CAPACITY).await;
    let past = e.access(vec![Op::Read(CAPACITY)]).await;
    assert!(past.is_err(), "a block past the old capacity was served");

    rec.take_trace();
    let g = e.grow(4 * CAPACITY, &|_, _| {}).await.expect("finish");
    assert_eq!(g.capacity, 4 * CAPACITY);
    assert!(rec.take_trace().is_empty(), "the growth sent requests");
    assert!((0..PARTITIONS).all(|p| e.partition(p).capacity() >= room));
    fill(&e, &mut model, 3 * CAPACITY..3 * CAPACITY + 64, 2).await;
    drop(e);
    let e = open(store, &db);
    assert_eq!(e.capacity(), 4 * CAPACITY, "the growth did not persist");
    verify(&e, &model, 4 * CAPACITY).await;
}
