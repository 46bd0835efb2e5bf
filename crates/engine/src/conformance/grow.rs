//! Growth ([`crate::Oram::grow`]): the whole suite on a grown volume
//! ([`GrownSubject`], one line per engine), and the checks of the growth itself for
//! the engines that grow ([`crate::engine_growth!`]): every block kept while
//! rounds go on, the growth's requests independent of the data, a crash or a
//! failing store at any point of it.

use std::sync::Mutex;

use oram_blockstore::Verb;
use oram_state::{MemState, Space};
use oram_statedb::Db;
use oram_store_fs::FsStore;
use oram_store_memory::MemoryStore;

use super::crash::crash;
use super::*;

/// A subject whose every engine is a grown volume: created at
/// `⌈capacity / arity⌉` blocks, one tree level less, and grown to the
/// capacity the check asks for before the check sees it (an engine opened on
/// a state that grew already has that capacity and is not grown again). Every
/// check of the suite then runs on a grown volume:
///
/// ```ignore
/// oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(MySubject));
/// ```
pub struct GrownSubject<S>(pub S);

impl<S: Subject> Subject for GrownSubject<S> {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let small = Params {
            capacity: p.capacity.div_ceil(self.0.arity()),
            ..p.clone()
        };
        let e = self.0.engine(&small, parts);
        if e.capacity() < p.capacity {
            let grow = async {
                let g = e.grow(p.capacity, &|_, _| {}).await.expect("growth");
                assert_eq!(g.capacity, p.capacity);
            };
            // The suite builds engines inside its runtime and outside.
            match tokio::runtime::Handle::try_current() {
                Ok(h) => tokio::task::block_in_place(|| h.block_on(grow)),
                Err(_) => runtime().block_on(grow),
            }
        }
        assert_eq!(e.capacity(), p.capacity, "the grown capacity");
        e
    }
    fn oblivious(&self) -> bool {
        self.0.oblivious()
    }
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
        self.0.positions(p, access)
    }
    fn bins(&self, p: &Params) -> u64 {
        self.0.bins(p)
    }
    fn leaves(&self, p: &Params) -> Option<u64> {
        self.0.leaves(p)
    }
    fn arity(&self) -> u64 {
        self.0.arity()
    }
    fn places_blocks_in_its_space(&self) -> bool {
        self.0.places_blocks_in_its_space()
    }
    fn every_write_puts(&self) -> bool {
        self.0.every_write_puts()
    }
    fn answers_reads_early(&self) -> bool {
        self.0.answers_reads_early()
    }
    fn stages(&self) -> bool {
        self.0.stages()
    }
    fn trees(&self) -> u64 {
        self.0.trees()
    }
    fn writes_back(&self) -> bool {
        self.0.writes_back()
    }
    fn wide_ids(&self) -> bool {
        self.0.wide_ids()
    }
    fn rounds_run_in_phases(&self) -> bool {
        self.0.rounds_run_in_phases()
    }
    fn repeats_write_the_same(&self) -> bool {
        self.0.repeats_write_the_same()
    }
    fn reads_ahead(&self) -> bool {
        self.0.reads_ahead()
    }
    fn rounds_in_flight(&self) -> bool {
        self.0.rounds_in_flight()
    }
    fn collects(&self) -> bool {
        self.0.collects()
    }
}

/// Generates one `#[test]` per growth check for a [`Subject`] whose engine
/// grows.
#[macro_export]
macro_rules! engine_growth {
    ($subject:expr) => {
        mod engine_growth {
            #[allow(unused_imports)]
            use super::*;
            fn subject() -> ::std::sync::Arc<dyn $crate::conformance::Subject> {
                ::std::sync::Arc::new($subject)
            }
            $crate::engine_conformance!(@tests
                growth_keeps_every_block_while_rounds_go_on,
                growth_requests_do_not_depend_on_the_data,
                a_crash_during_growth_leaves_the_old_size_and_loses_nothing,
                a_failing_store_during_growth_loses_nothing
            );
        }
    };
}

/// Reads every block of `0..ids` back and compares with `model` (zeros where
/// it has nothing), then checks the engine: no problem, every block found.
async fn verify(e: &dyn Oram, model: &Model, ids: u64) {
    read_back(e, model, ids, 16).await;
    let rep = e.check(&|_, _| {}).await.expect("check");
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.blocks_found, model.len() as u64);
}

/// Params of the growth checks: several batches of new buckets.
fn grow_params() -> Params {
    Params {
        capacity: 1024,
        max_batch: 8,
        ..Params::default()
    }
}

/// A volume filled and then grown to twice its capacity, with accesses
/// served between the growth's batches (from its progress callback, at the
/// old size): every block written before, during and after reads back, the
/// check finds every block where it belongs, and blocks beyond the old
/// capacity can be written.
pub fn growth_keeps_every_block_while_rounds_go_on(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = grow_params();
        let e = mem_engine(s.as_ref(), &p, Arc::new(MemoryStore::new()));
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
        run_model(e.as_ref(), &mut model, p.capacity, 40, p.max_batch, 11).await;
        // Between two batches of the growth, a caller writes and reads: its
        // accesses run on the runtime's workers while the growth waits for
        // them (the growth holds no lock while it reports progress).
        let during = Arc::new(Mutex::new(Vec::new()));
        let h = tokio::runtime::Handle::current();
        let progress = |done: u64, total: u64| {
            if done == 0 || done == total {
                return;
            }
            let (e, during) = (e.clone(), during.clone());
            let bs = p.block_size;
            let (tx, rx) = std::sync::mpsc::channel();
            h.spawn(async move {
                let b = done % 64;
                let d = block_data(b, 1000 + done, bs);
                let w = e
                    .access(vec![Op::Write(b, d.clone()), Op::Read(b + 1)])
                    .await;
                let r = e.access(vec![Op::Read(b)]).await;
                let cap = e.capacity();
                tx.send((w.is_ok() && r.map(|r| r[0] == d).unwrap_or(false), cap))
                    .unwrap();
                during.lock().unwrap().push((b, d));
            });
            let (ok, cap) = rx
                .recv_timeout(std::time::Duration::from_secs(120))
                .expect("an access during the growth never finished");
            assert!(ok, "an access during the growth failed or read wrong");
            assert_eq!(cap, p.capacity, "the new size before the switch");
        };
        let g = e.grow(2 * p.capacity, &progress).await.expect("growth");
        let during = std::mem::take(&mut *during.lock().unwrap());
        assert!(during.len() >= 2, "no access ran during the growth");
        model.extend(during);
        assert_eq!(g.capacity, 2 * p.capacity);
        assert_eq!((e.capacity(), e.id_limit()), (g.capacity, g.capacity));
        assert!(g.positions > 256 && g.written == g.positions, "{g:?}");
        verify(e.as_ref(), &model, g.capacity).await;
        // The new room: blocks beyond the old capacity, and more rounds.
        fill(e.as_ref(), &mut model, p.capacity..g.capacity, 2).await;
        run_model(e.as_ref(), &mut model, g.capacity, 40, p.max_batch, 12).await;
        verify(e.as_ref(), &model, g.capacity).await;
        // Growing to the size it has is a no-op; shrinking is refused.
        assert_eq!(e.grow(g.capacity, &|_, _| {}).await.unwrap().written, 0);
        assert!(e.grow(p.capacity, &|_, _| {}).await.is_err());
    });
}

/// The growth's own requests are the same whatever the volume holds and
/// whatever was done to it before: two volumes with different contents and
/// histories, grown alike, show the same PUTs, of the same keys and sizes, in
/// the same order, and nothing else.
pub fn growth_requests_do_not_depend_on_the_data(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = grow_params();
        let mut traces = Vec::new();
        for variant in 0..2u64 {
            let (_, rec, e) = recorded_engine(s.as_ref(), &p);
            let mut model = Model::new();
            if variant == 0 {
                fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
            } else {
                fill(e.as_ref(), &mut model, p.capacity / 2..p.capacity, 9).await;
                run_model(e.as_ref(), &mut model, p.capacity, 30, p.max_batch, 5).await;
                e.flush().await.unwrap();
            }
            rec.take_trace();
            let g = e.grow(4 * p.capacity, &|_, _| {}).await.expect("growth");
            let trace: Vec<(Verb, String, u64)> = rec
                .take_trace()
                .into_iter()
                .map(|t| (t.verb, t.key, t.size))
                .collect();
            assert_eq!(trace.len() as u64, g.positions, "one PUT per new object");
            assert!(trace.iter().all(|t| t.0 == Verb::Put), "{trace:?}");
            verify(e.as_ref(), &model, g.capacity).await;
            traces.push(trace);
        }
        assert!(
            traces[0] == traces[1],
            "the growth's requests depend on the data"
        );
    });
}

/// A volume on disk (fs store, redb state) whose growth the process dies in:
/// before the first batch of new objects lands, after one batch, and before
/// the last batch. It reopens at its old size with every block, reports nothing
/// lost to the check, and grows again (resuming) to the new size.
pub fn a_crash_during_growth_leaves_the_old_size_and_loses_nothing(s: Arc<dyn Subject>) {
    const VOL: [u8; 16] = [3; 16];
    let p = Params {
        capacity: 512,
        block_size: 256,
        cached_levels: 3,
        ..Params::default()
    };
    let open = |store: Arc<dyn BlockStore>, db: &Arc<Db>| {
        let state = Box::new(db.state(Space(0)).unwrap());
        s.build(&p, store, test_sealer(), state)
    };
    let mut positions = None;
    for batches in [0u64, 1, 5] {
        let dir = tempfile::tempdir().unwrap();
        let (state_path, store_path) = (dir.path().join("state.redb"), dir.path().join("store"));
        let mut model = Model::new();
        let rt = runtime();
        rt.block_on(async {
            let store = Arc::new(HoldStore::new(FsStore::open(&store_path).unwrap()));
            let db = Db::open(&state_path, VOL).unwrap();
            let e = open(store.clone(), &db);
            fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
            run_model(e.as_ref(), &mut model, p.capacity, 20, p.max_batch, 3).await;
            e.flush().await.unwrap();
            // The PUTs of batch `batches` (or the last one) hang: the process
            // dies with that batch journaled and not landed.
            let hold = store.clone();
            let grow = tokio::spawn({
                let e = e.clone();
                async move {
                    let cb = move |done: u64, total: u64| {
                        if done >= (batches * 256).min(total.saturating_sub(256)) {
                            hold.set_puts_open(false);
                        }
                    };
                    e.grow(4 * p.capacity, &cb).await
                }
            });
            for _ in 0..1000 {
                if store.puts_waiting() > 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(store.puts_waiting() > 0, "the growth sent no PUT");
            assert!(!grow.is_finished(), "the growth ended with its PUTs held");
        });
        crash(rt);
        runtime().block_on(async {
            let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(&store_path).unwrap());
            let db = Db::open(&state_path, VOL).unwrap();
            let e = open(fs, &db);
            assert_eq!(e.capacity(), p.capacity, "not the old size after the crash");
            verify(e.as_ref(), &model, p.capacity).await;
            let g = e.grow(4 * p.capacity, &|_, _| {}).await.expect("resume");
            assert_eq!(e.capacity(), 4 * p.capacity);
            assert!(g.written < g.positions, "nothing was resumed: {g:?}");
            assert_eq!(*positions.get_or_insert(g.positions), g.positions);
            verify(e.as_ref(), &model, 4 * p.capacity).await;
            fill(
                e.as_ref(),
                &mut model,
                3 * p.capacity..3 * p.capacity + 8,
                2,
            )
            .await;
            drop(e);
            // Reopened: the new size, everything there.
            let e = open(Arc::new(FsStore::open(&store_path).unwrap()), &db);
            assert_eq!(e.capacity(), 4 * p.capacity, "the growth did not persist");
            verify(e.as_ref(), &model, 4 * p.capacity).await;
        });
    }
}

/// PUTs that fail during a growth fail it, with nothing lost: the volume
/// keeps its old size and every block; growing again finishes the growth,
/// the objects whose PUTs failed included.
pub fn a_failing_store_during_growth_loses_nothing(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = grow_params();
        let faults = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = s.build(&p, faults.clone(), test_sealer(), Box::new(MemState::new()));
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
        let hold = faults.clone();
        let failed = e
            .grow(2 * p.capacity, &move |done, _| {
                if done >= 256 {
                    hold.set_puts_down(true);
                }
            })
            .await;
        assert!(failed.is_err(), "the growth succeeded with PUTs failing");
        faults.set_puts_down(false);
        assert_eq!(e.capacity(), p.capacity);
        verify(e.as_ref(), &model, p.capacity).await;
        run_model(e.as_ref(), &mut model, p.capacity, 20, p.max_batch, 4).await;
        let g = e.grow(2 * p.capacity, &|_, _| {}).await.expect("growth");
        assert!(g.written < g.positions, "{g:?}");
        assert_eq!(e.capacity(), 2 * p.capacity);
        verify(e.as_ref(), &model, 2 * p.capacity).await;
    });
}

/// Prepares a growth of an engine built from `Parts` for `Params` to a
/// capacity, and stops there (a tree engine's `grow_prepare`): the first
/// phase of [`crate::Oram::grow`] alone, which the trait does not offer.
pub type Prepare =
    dyn Fn(Params, Parts, u64) -> futures::future::BoxFuture<'static, crate::Grown> + Send + Sync;

/// A volume on disk whose growth is prepared — every new object written —
/// and not switched to when the process dies: it reopens at its old size
/// with every block, and growing again writes nothing more and switches.
/// Not in [`crate::engine_growth!`]: it needs the engine's first phase alone
/// (`prepare`).
pub fn a_crash_between_the_growth_phases_leaves_the_old_size(
    s: Arc<dyn Subject>,
    prepare: &Prepare,
) {
    const VOL: [u8; 16] = [3; 16];
    let p = Params {
        capacity: 512,
        block_size: 256,
        cached_levels: 3,
        ..Params::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (state_path, store_path) = (dir.path().join("state.redb"), dir.path().join("store"));
    let open = |db: &Arc<Db>| {
        let state = Box::new(db.state(Space(0)).unwrap());
        let store = Arc::new(FsStore::open(&store_path).unwrap());
        Parts {
            store,
            sealer: test_sealer(),
            state,
        }
    };
    let mut model = Model::new();
    let rt = runtime();
    let prepared = rt.block_on(async {
        let db = Db::open(&state_path, VOL).unwrap();
        let e = s.engine(&p, open(&db));
        fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
        run_model(e.as_ref(), &mut model, p.capacity, 20, p.max_batch, 3).await;
        e.flush().await.unwrap();
        drop(e);
        prepare(p.clone(), open(&db), 4 * p.capacity).await
    });
    assert_eq!(prepared.capacity, 4 * p.capacity);
    assert!(prepared.written == prepared.positions && prepared.written > 0);
    crash(rt);
    runtime().block_on(async {
        let db = Db::open(&state_path, VOL).unwrap();
        let e = s.engine(&p, open(&db));
        assert_eq!(e.capacity(), p.capacity, "not the old size after the crash");
        verify(e.as_ref(), &model, p.capacity).await;
        run_model(e.as_ref(), &mut model, p.capacity, 10, p.max_batch, 4).await;
        let g = e.grow(4 * p.capacity, &|_, _| {}).await.expect("switch");
        assert_eq!((g.written, g.positions), (0, prepared.positions));
        assert_eq!(e.capacity(), 4 * p.capacity);
        verify(e.as_ref(), &model, 4 * p.capacity).await;
        drop(e);
        let e = s.engine(&p, open(&db));
        assert_eq!(e.capacity(), 4 * p.capacity, "the growth did not persist");
        verify(e.as_ref(), &model, 4 * p.capacity).await;
    });
}
