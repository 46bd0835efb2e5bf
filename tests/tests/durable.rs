//! Durable trusted state at the engine level: a "crash" (the runtime dropped with
//! write-backs that never reached the backend, so the process's memory is gone),
//! then a reopen of the state database from disk, must lose nothing; a failed
//! commit changes nothing; the slots a checkpoint refers to are never overwritten.
//!
//! Everything is real: the fs back-end on disk, the redb state database on disk.
//! The one stand-in is `GatedStore`, which holds PUTs back so that the crash
//! happens at a chosen point of the write-back — a real disk cannot be made to
//! stall a chosen request on demand.

use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::BlockStore;
use oram_direct::{DirectConfig, DirectEngine};
use oram_engine::{Op, Oram};
use oram_path::{PathConfig, PathOram};
use oram_state::TrustedState;
use oram_statedb::Db;
use oram_store_fs::FsStore;
use oram_tests::{block_data, test_sealer, GatedStore};

const VOL: [u8; 16] = [3; 16];

fn cfg() -> PathConfig {
    PathConfig {
        capacity: 512,
        block_size: 256,
        cached_levels: 3,
        max_batch: 16,
        ..PathConfig::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn path_engine(store: Arc<dyn BlockStore>, db: &Arc<Db>) -> PathOram {
    PathOram::new(cfg(), store, test_sealer(), Box::new(db.state().unwrap())).unwrap()
}

#[test]
fn path_oram_loses_nothing_when_it_dies_with_write_backs_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state.redb");
    let store_path = dir.path().join("store");
    // Half land; the other half are three rounds whose write-backs hang (fewer than
    // `max_inflight_writebacks`, so the rounds themselves are answered).
    let blocks = 96u64;
    {
        let rt = runtime();
        rt.block_on(async {
            let fs = FsStore::open(&store_path).unwrap();
            let gated = Arc::new(GatedStore::new(fs, true));
            let db = Db::open(&state_path, VOL).unwrap();
            let oram = path_engine(gated.clone(), &db);
            // Half the blocks land normally...
            for chunk in (0..blocks / 2).collect::<Vec<_>>().chunks(16) {
                let ops = chunk
                    .iter()
                    .map(|&b| Op::Write(b, block_data(b, 1, 256)))
                    .collect();
                oram.access(ops).await.unwrap();
            }
            oram.flush().await.unwrap();
            // ...then the backend stops taking PUTs: every later write-back hangs.
            gated.set_open(false);
            for chunk in (blocks / 2..blocks).collect::<Vec<_>>().chunks(16) {
                let ops = chunk
                    .iter()
                    .map(|&b| Op::Write(b, block_data(b, 1, 256)))
                    .collect();
                // Acknowledged: the round committed before answering.
                oram.access(ops).await.unwrap();
            }
            assert!(oram.stats().pending_writebacks > 0);
        });
        // The crash: tasks and memory gone, write-backs never sent.
        rt.shutdown_timeout(std::time::Duration::from_secs(5));
    }
    let rt = runtime();
    rt.block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(&store_path).unwrap());
        let db = Db::open(&state_path, VOL).unwrap();
        assert!(
            !db.state().unwrap().pending().is_empty(),
            "the journal holds the write-backs that never landed"
        );
        let oram = path_engine(fs, &db);
        let ops = (0..blocks).map(Op::Read).collect();
        let got = oram.access(ops).await.unwrap();
        for (b, data) in got.iter().enumerate() {
            assert_eq!(data, &block_data(b as u64, 1, 256), "block {b}");
        }
        let rep = oram.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, blocks);
        assert!(db.state().unwrap().pending().is_empty());
    });
}

#[test]
fn a_failed_commit_leaves_the_engine_as_before() {
    let rt = runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.path().join("s")).unwrap());
        let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
        let oram = path_engine(fs.clone(), &db);
        oram.access(vec![Op::Write(1, block_data(1, 1, 256))])
            .await
            .unwrap();
        oram.flush().await.unwrap();
        db.inject_commit_failure();
        let err = oram
            .access(vec![Op::Write(1, block_data(1, 2, 256))])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("trusted state"), "{err}");
        // Nothing changed: the old data is served, the tree is consistent.
        let got = oram.access(vec![Op::Read(1)]).await.unwrap();
        assert_eq!(got[0], block_data(1, 1, 256));
        let rep = oram.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        // And after a restart too.
        drop(oram);
        let oram = path_engine(fs, &db);
        let got = oram.access(vec![Op::Read(1)]).await.unwrap();
        assert_eq!(got[0], block_data(1, 1, 256));
    });
}

#[test]
fn writes_after_a_checkpoint_never_touch_the_objects_it_refers_to() {
    let rt = runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.path().join("s")).unwrap());
        let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
        let oram = path_engine(fs.clone(), &db);
        for b in 0..64 {
            oram.access(vec![Op::Write(b, block_data(b, 1, 256))])
                .await
                .unwrap();
        }
        // A checkpoint: quiesce, snapshot every object the state refers to, new epoch.
        let quiet = oram.quiesce().await.unwrap();
        let keys = fs.list("vol0/").await.unwrap();
        let before: Vec<Option<Bytes>> = fs.get_many(&keys).await.unwrap();
        let snap = db.snapshot().unwrap();
        db.set_epoch(db.epoch() + 1).unwrap();
        drop(quiet);
        for round in 2..6 {
            let ops = (0..64)
                .map(|b| Op::Write(b, block_data(b, round, 256)))
                .collect();
            oram.access(ops).await.unwrap();
        }
        oram.flush().await.unwrap();
        assert_eq!(
            fs.get_many(&keys).await.unwrap(),
            before,
            "an object the checkpoint refers to was overwritten"
        );
        // A machine rebuilt from the checkpoint reads the checkpoint's data.
        drop(oram);
        let restored = Db::restore(&dir.path().join("restored.redb"), VOL, &snap).unwrap();
        let old = path_engine(fs.clone(), &restored);
        assert!(
            old.sweep().await.unwrap() > 0,
            "post-checkpoint objects removed"
        );
        let got = old.access((0..64).map(Op::Read).collect()).await.unwrap();
        for (b, d) in got.iter().enumerate() {
            assert_eq!(d, &block_data(b as u64, 1, 256));
        }
        let rep = old.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

#[test]
fn direct_engine_resends_its_journal_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state.redb");
    let store_path = dir.path().join("store");
    let dcfg = DirectConfig {
        capacity: 64,
        block_size: 128,
        prefix: "vol0".into(),
    };
    {
        let rt = runtime();
        rt.block_on(async {
            let gated = Arc::new(GatedStore::new(FsStore::open(&store_path).unwrap(), true));
            let db = Db::open(&state_path, VOL).unwrap();
            let e = Arc::new(
                DirectEngine::new(
                    dcfg.clone(),
                    gated.clone(),
                    test_sealer(),
                    Box::new(db.state().unwrap()),
                )
                .unwrap(),
            );
            e.access(vec![Op::Write(5, block_data(5, 1, 128))])
                .await
                .unwrap();
            gated.set_open(false);
            // The PUT of version 2 hangs: the write is journaled but not acknowledged.
            let e2 = e.clone();
            let t =
                tokio::spawn(
                    async move { e2.access(vec![Op::Write(5, block_data(5, 2, 128))]).await },
                );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            assert!(!t.is_finished());
        });
        rt.shutdown_timeout(std::time::Duration::from_secs(5));
    }
    let rt = runtime();
    rt.block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(&store_path).unwrap());
        let db = Db::open(&state_path, VOL).unwrap();
        let e = DirectEngine::new(dcfg, fs, test_sealer(), Box::new(db.state().unwrap())).unwrap();
        // Version 2 was journaled, so it is what the block holds now: never an
        // integrity error, never version 2's number reused for other data.
        let got = e.access(vec![Op::Read(5)]).await.unwrap();
        assert_eq!(got[0], block_data(5, 2, 128));
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.written_blocks, vec![5]);
    });
}
