//! The model checks: random batches against a `HashMap` (repeated blocks,
//! takes, inserts and dummies, wide ids), concurrent callers, and bad ops refused
//! before anything reaches the backend.

use super::*;
use crate::OramError;

/// Random batches against a `HashMap`, on several shapes, then everything read
/// back and checked clean; with wide ids where the engine takes them.
pub fn model_matches_a_hashmap(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let shapes = [
            (256u64, 64usize, 16usize, 2u32),
            (37, 256, 4, 3),
            (513, 32, 32, 40),
            (3, 8, 4, 0),
        ];
        for (i, &(capacity, block_size, max_batch, cached_levels)) in shapes.iter().enumerate() {
            let p = Params {
                capacity,
                block_size,
                max_batch,
                cached_levels,
                seed: [i as u8; 32],
                ..Params::default()
            };
            let store = Arc::new(MemoryStore::new());
            let e = mem_engine(s.as_ref(), &p, store.clone());
            let mut model = Model::new();
            let ops = run_model(e.as_ref(), &mut model, capacity, 300, max_batch, i as u64).await;
            assert!(ops > 300);
            e.flush().await.unwrap();
            read_back(e.as_ref(), &model, capacity, max_batch).await;
            let rep = e.check(&|_, _| {}).await.unwrap();
            assert!(rep.problems.is_empty(), "{:?}", rep.problems);
            let mut stored: Vec<u64> = model.keys().copied().collect();
            stored.sort_unstable();
            assert_eq!(
                rep.written_blocks, stored,
                "check sees exactly the stored blocks"
            );
            assert!(e.stats().rounds > 0);
        }
        if s.wide_ids() {
            // A partition of a larger id space: few blocks at once, any id below the limit.
            let p = Params {
                capacity: 64,
                id_limit: Some(1 << 40),
                ..Params::default()
            };
            let e = mem_engine(s.as_ref(), &p, Arc::new(MemoryStore::new()));
            assert_eq!(e.id_limit(), 1 << 40);
            let mut model = Model::new();
            for i in 0..48u64 {
                let b = i.wrapping_mul(0x9E37_79B9) % (1 << 40);
                let d = block_data(b, 1, p.block_size);
                e.access(vec![Op::Write(b, d.clone())]).await.unwrap();
                model.insert(b, d);
            }
            for (&b, d) in &model {
                assert_eq!(&e.access(vec![Op::Read(b)]).await.unwrap()[0], d);
            }
            let err = e.access(vec![Op::Read(1 << 40)]).await.unwrap_err();
            assert!(matches!(err, OramError::BlockOutOfRange { .. }), "{err}");
            let rep = e.check(&|_, _| {}).await.unwrap();
            assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        }
    });
}

/// Eight tasks, each owning its blocks, interleave single-op accesses.
pub fn concurrent_callers_see_their_own_writes(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params {
            capacity: 800,
            block_size: 32,
            ..Params::default()
        };
        let e = mem_engine(s.as_ref(), &p, Arc::new(MemoryStore::new()));
        let tasks: Vec<_> = (0..8u64)
            .map(|t| {
                let e = e.clone();
                tokio::spawn(async move {
                    let mut rng = ChaCha8Rng::seed_from_u64(t);
                    let mut model = Model::new();
                    for v in 0..100u64 {
                        let b = t * 100 + rng.gen_range(0..100);
                        if rng.gen_bool(0.5) {
                            let d = block_data(b, v, 32);
                            e.access(vec![Op::Write(b, d.clone())]).await.unwrap();
                            model.insert(b, d);
                        } else {
                            let got = e.access(vec![Op::Read(b)]).await.unwrap();
                            let want = model.get(&b).cloned().unwrap_or(Bytes::from(vec![0; 32]));
                            assert_eq!(got[0], want, "task {t} block {b}");
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        e.flush().await.unwrap();
        assert_eq!(e.stats().accesses, 8 * 100);
    });
}

/// Out-of-range ids and wrong sizes are refused, a batch with one bad op whole,
/// before anything reaches the backend.
pub fn bad_ops_are_refused_without_effect(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params {
            capacity: 10,
            block_size: 16,
            ..Params::default()
        };
        let store = Arc::new(MemoryStore::new());
        let e = mem_engine(s.as_ref(), &p, store.clone());
        // Empty, unless the engine was grown before the check ([`GrownSubject`]).
        let prefix = format!("{}/", p.prefix);
        let before = snapshot(&store, &prefix).await;
        let err = e.access(vec![Op::Read(10)]).await.unwrap_err();
        assert!(
            matches!(err, OramError::BlockOutOfRange { block: 10, .. }),
            "{err}"
        );
        let err = e
            .access(vec![Op::Write(1, Bytes::from_static(b"short"))])
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                OramError::WrongBlockSize {
                    got: 5,
                    want: 16,
                    ..
                }
            ),
            "{err}"
        );
        let err = e
            .access(vec![Op::Write(1, Bytes::from(vec![1; 16])), Op::Take(99)])
            .await;
        assert!(err.is_err());
        assert!(
            snapshot(&store, &prefix).await == before,
            "a refused batch reached the backend"
        );
        let got = e.access(vec![Op::Read(1)]).await.unwrap();
        assert_eq!(got[0], Bytes::from(vec![0; 16]));
    });
}
