//! What the partition framework builds on: staged accesses of two engines
//! committed together, and inserts that are no access of their own.

use oram_state::Space;
use oram_statedb::Db;

use super::*;
use crate::{OramError, StagedAccess};

/// Two engines on one state database (two spaces) move a block with a take and
/// a write, committed once: after a restart both moves or neither are there. A
/// staged access dropped uncommitted is undone.
pub fn staged_accesses_commit_together_or_not_at_all(s: Arc<dyn Subject>) {
    if !s.stages() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let store: Arc<dyn BlockStore> = Arc::new(MemoryStore::new());
    let p1 = Params {
        prefix: "vol0/p1".into(),
        ..Params::default()
    };
    let p2 = Params {
        prefix: "vol0/p2".into(),
        seed: [9; 32],
        ..Params::default()
    };
    let bs = p1.block_size;
    let d = block_data(5, 1, bs);
    let zeros = Bytes::from(vec![0; bs]);
    runtime().block_on(async {
        let db = Db::open(&path, [3; 16]).unwrap();
        let a = s.build(
            &p1,
            store.clone(),
            test_sealer(),
            Box::new(db.state(Space(1)).unwrap()),
        );
        let b = s.build(
            &p2,
            store.clone(),
            test_sealer(),
            Box::new(db.state(Space(2)).unwrap()),
        );
        a.access(vec![Op::Write(5, d.clone())]).await.unwrap();
        // Dropped uncommitted: undone.
        let staged = a.access_staged(vec![Op::Take(5)]).await.unwrap();
        assert_eq!(staged.answers()[0], d);
        drop(staged);
        assert_eq!(
            a.access(vec![Op::Read(5)]).await.unwrap()[0],
            d,
            "an abandoned take stuck"
        );
        // The move: taken from a, written to b, one commit.
        let take = a.access_staged(vec![Op::Take(5)]).await.unwrap();
        let moved = take.answers()[0].clone();
        let put = b.access_staged(vec![Op::Write(5, moved)]).await.unwrap();
        let answers = StagedAccess::commit_all(vec![take, put], Default::default())
            .await
            .unwrap();
        assert_eq!(answers[0][0], d);
        assert_eq!(a.access(vec![Op::Read(5)]).await.unwrap()[0], zeros);
        assert_eq!(b.access(vec![Op::Read(5)]).await.unwrap()[0], d);
        a.flush().await.unwrap();
        b.flush().await.unwrap();
        // A second move, staged on both, never committed (the process dies).
        // (Uncommitted changes never reach the state database: dropping them with
        // the process is all a crash does to them.)
        let take = b.access_staged(vec![Op::Take(5)]).await.unwrap();
        assert_eq!(take.answers()[0], d);
    });
    // After the "crash" (runtime and memory gone): the committed move only.
    runtime().block_on(async {
        let db = Db::open(&path, [3; 16]).unwrap();
        let a = s.build(
            &p1,
            store.clone(),
            test_sealer(),
            Box::new(db.state(Space(1)).unwrap()),
        );
        let b = s.build(
            &p2,
            store.clone(),
            test_sealer(),
            Box::new(db.state(Space(2)).unwrap()),
        );
        assert_eq!(a.access(vec![Op::Read(5)]).await.unwrap()[0], zeros);
        assert_eq!(b.access(vec![Op::Read(5)]).await.unwrap()[0], d);
        for e in [&a, &b] {
            let rep = e.check(&|_, _| {}).await.unwrap();
            assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        }
    });
}

/// An insert is no access of its own: of two engines with the same seed and
/// history, one serving a dummy, the other a dummy and an insert, the server sees
/// the same requests (keys and sizes), and the inserted block reads back. Every
/// engine refuses to insert a block it holds and no access of the batch names
/// (an oblivious engine's old copy would stay where no round reads it) and
/// changes nothing.
pub fn an_insert_is_no_access_of_its_own(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params {
            capacity: 64,
            block_size: 32,
            ..Params::default()
        };
        let seen = |t: Vec<oram_blockstore::TraceEvent>| {
            t.into_iter()
                .map(|e| (format!("{:?}", e.verb), e.key, e.size))
                .collect::<Vec<_>>()
        };
        let mut traces = Vec::new();
        let mut engines = Vec::new();
        let d = block_data(20, 2, p.block_size);
        for insert in [false, true] {
            let rec = Arc::new(Recording::new(MemoryStore::new()));
            let e = mem_engine(s.as_ref(), &p, rec.clone());
            for b in 0..8 {
                e.access(vec![Op::Write(b, block_data(b, 1, p.block_size))])
                    .await
                    .unwrap();
            }
            e.flush().await.unwrap();
            rec.take_trace();
            let mut ops = vec![Op::Dummy];
            if insert {
                ops.push(Op::Insert(20, d.clone()));
            }
            let got = e.access(ops).await.unwrap();
            assert!(got.iter().all(Bytes::is_empty));
            e.flush().await.unwrap();
            traces.push(seen(rec.take_trace()));
            engines.push(e);
        }
        if s.oblivious() {
            assert!(!traces[0].is_empty());
            assert_eq!(
                traces[1], traces[0],
                "an insert showed the server more than the dummy it rode on"
            );
        }
        let e = &engines[1];
        assert_eq!(e.access(vec![Op::Read(20)]).await.unwrap()[0], d);
        let other = block_data(3, 9, p.block_size);
        let held = e
            .access(vec![Op::Dummy, Op::Insert(3, other.clone())])
            .await;
        assert!(
            matches!(held, Err(OramError::Unsupported(_))),
            "an insert of a held block: {held:?}"
        );
        assert_eq!(
            e.access(vec![Op::Read(3)]).await.unwrap()[0],
            block_data(3, 1, p.block_size),
            "a refused insert changed the block"
        );
        // Named by an access of the same batch, the old copy is read: allowed.
        let got = e
            .access(vec![Op::Take(3), Op::Insert(3, other.clone())])
            .await
            .unwrap();
        assert_eq!(got[0], block_data(3, 1, p.block_size));
        assert_eq!(e.access(vec![Op::Read(3)]).await.unwrap()[0], other);
    });
}
