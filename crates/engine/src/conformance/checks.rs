//! The checks that need no crash: model, bad ops, tampering, a block missing from
//! where the state says, quiesce/check/sweep, a failing backend, bounded
//! write-backs, staged accesses.

use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey};
use oram_state::{MemState, Space, TrustedState};
use oram_statedb::Db;
use oram_store_memory::MemoryStore;

use super::*;
use crate::{Formatted, OramError, StagedAccess};

fn mem_engine(s: &dyn Subject, p: &Params, store: Arc<dyn BlockStore>) -> Arc<dyn Oram> {
    s.build(p, store, test_sealer(), Box::new(MemState::new()))
}

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
        assert!(store.is_empty(), "a refused batch reached the backend");
        let got = e.access(vec![Op::Read(1)]).await.unwrap();
        assert_eq!(got[0], Bytes::from(vec![0; 16]));
    });
}

/// Reads every block of `model`: each answer must be right, or the access an
/// integrity error (or a size refusal of the bounded read). Returns how many reads failed.
async fn read_or_integrity(e: &dyn Oram, model: &Model, ids: u64) -> u64 {
    let zeros = Bytes::from(vec![0; e.block_size()]);
    let mut errors = 0;
    for b in 0..ids {
        match e.access(vec![Op::Read(b)]).await {
            Ok(v) => assert!(
                v[0] == *model.get(&b).unwrap_or(&zeros),
                "WRONG DATA served for block {b}"
            ),
            Err(OramError::Integrity { .. }) => errors += 1,
            // A truncated or extended object is refused by the bounded read itself.
            Err(OramError::Store(oram_blockstore::StoreError::WrongSize { .. })) => errors += 1,
            Err(e) => panic!("unexpected error kind: {e}"),
        }
    }
    errors
}

async fn snapshot(store: &MemoryStore, prefix: &str) -> Vec<(ObjKey, Bytes)> {
    let keys = store.list(prefix).await.unwrap();
    let vals = store.get_many(&keys).await.unwrap();
    keys.into_iter()
        .zip(vals)
        .map(|(k, v)| (k, v.expect("listed")))
        .collect()
}

/// The setup of the tampering checks: a small tree with nothing cached (every
/// bucket on `store`), every block written once.
async fn filled_uncached(
    s: &dyn Subject,
    store: Arc<dyn BlockStore>,
) -> (Params, Arc<dyn Oram>, Model) {
    let p = Params {
        capacity: 64,
        block_size: 32,
        cached_levels: 0,
        ..Params::default()
    };
    let e = mem_engine(s, &p, store);
    let mut model = Model::new();
    fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
    (p, e, model)
}

/// A round whose PUTs landed but were answered with errors (lost in transit) is
/// finished again with other contents (its write turned into a read) under the
/// same keys: the provider putting the first attempt's objects back is an
/// integrity error, never wrong data. Oblivious (tree) engines.
pub fn an_interrupted_attempts_objects_never_open_as_current(s: Arc<dyn Subject>) {
    if !s.oblivious() {
        return;
    }
    runtime().block_on(async {
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let (p, e, mut model) = filled_uncached(s.as_ref(), store.clone()).await;
        let prefix = format!("{}/", p.prefix);
        // Writes until one round writes buckets (Ring ORAM evicts every A
        // accesses): that one fails after its PUTs landed.
        store.set_put_answers_lost(true);
        let mut before = snapshot(store.inner(), &prefix).await;
        let mut failed = false;
        for v in 2..40u64 {
            let d = block_data(7, v, p.block_size);
            match e.access(vec![Op::Write(7, d.clone())]).await {
                Ok(_) => {
                    model.insert(7, d);
                    before = snapshot(store.inner(), &prefix).await;
                }
                Err(OramError::Store(_)) => {
                    failed = true;
                    break;
                }
                Err(e) => panic!("unexpected error kind: {e}"),
            }
        }
        assert!(failed, "no round wrote a bucket");
        store.set_put_answers_lost(false);
        let first = snapshot(store.inner(), &prefix).await;
        // Finishes the interrupted round first (then a dummy round of its own).
        e.access(vec![Op::Dummy]).await.unwrap();
        let second = snapshot(store.inner(), &prefix).await;
        let stale: Vec<(ObjKey, Bytes)> = first
            .into_iter()
            .filter(|(k, v)| !before.iter().any(|(k0, v0)| k0 == k && v0 == v))
            .filter(|(k, v)| second.iter().any(|(k2, v2)| k2 == k && v2 != v))
            .collect();
        assert!(!stale.is_empty(), "the finished round rewrote nothing");
        store.inner().put_many(stale.clone()).await.unwrap();
        // (Wrong data fails inside read_or_integrity either way.)
        let errors = read_or_integrity(e.as_ref(), &model, p.capacity).await;
        assert!(
            errors > 0 || s.repeats_write_the_same(),
            "the interrupted attempt's objects went unnoticed"
        );
        // The provider turns honest again: the objects it put back and the
        // engine has not rewritten since (reads whose paths missed them did
        // rewrite others) get their current contents back.
        let now = snapshot(store.inner(), &prefix).await;
        let restore: Vec<(ObjKey, Bytes)> = stale
            .into_iter()
            .filter(|(k, v)| now.iter().any(|(k1, v1)| k1 == k && v1 == v))
            .filter_map(|(k, _)| second.iter().find(|(k2, _)| *k2 == k).cloned())
            .collect();
        store.inner().put_many(restore).await.unwrap();
        assert_eq!(read_or_integrity(e.as_ref(), &model, p.capacity).await, 0);
        e.flush().await.unwrap();
    });
}

/// Flipped, swapped, replayed, deleted, truncated objects: integrity errors,
/// never wrong data, also on retry; once the objects are back, all reads work.
pub fn tampering_is_an_integrity_error_never_wrong_data(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let store = Arc::new(MemoryStore::new());
        let (p, e, mut model) = filled_uncached(s.as_ref(), store.clone()).await;
        let prefix = format!("{}/", p.prefix);
        type Tamper = fn(Vec<(ObjKey, Bytes)>) -> Vec<(ObjKey, Bytes)>;
        let cases: [(&str, Tamper); 3] = [
            ("a flipped byte", |objs| {
                objs.into_iter()
                    .map(|(k, v)| {
                        let mut v = v.to_vec();
                        let at = v.len() / 2;
                        v[at] ^= 0x10;
                        (k, v.into())
                    })
                    .collect()
            }),
            ("swapped objects", |objs| {
                let n = objs.len();
                (0..n)
                    .map(|i| (objs[i].0.clone(), objs[(i + 1) % n].1.clone()))
                    .collect()
            }),
            ("truncated objects", |objs| {
                objs.into_iter()
                    .map(|(k, v)| (k, v.slice(..v.len() - 7)))
                    .collect()
            }),
        ];
        for (what, tamper) in cases {
            let good = snapshot(&store, &prefix).await;
            let bad = tamper(good.clone());
            store.put_many(bad.clone()).await.unwrap();
            let errors = read_or_integrity(e.as_ref(), &model, p.capacity).await;
            assert!(errors > 0, "{what} went unnoticed");
            // The provider turns honest again: it puts back what it tampered
            // with, except objects the engine has written since (rounds whose
            // reads missed the tampered bytes — one slot of a level read by
            // ranged GETs — commit and write; putting the old object back over
            // a live one would be a rollback, rightly refused).
            let now = snapshot(&store, &prefix).await;
            let untouched: Vec<(ObjKey, Bytes)> = good
                .into_iter()
                .filter(|(k, _)| {
                    bad.iter()
                        .any(|(kb, vb)| kb == k && now.iter().any(|(kn, vn)| kn == k && vn == vb))
                })
                .collect();
            store.put_many(untouched).await.unwrap();
            assert_eq!(
                read_or_integrity(e.as_ref(), &model, p.capacity).await,
                0,
                "after restoring ({what})"
            );
            e.flush().await.unwrap();
        }
        // Replay: old, authentic objects put back after the engine rewrote them.
        let old = snapshot(&store, &prefix).await;
        fill(e.as_ref(), &mut model, 0..p.capacity, 2).await;
        let now = snapshot(&store, &prefix).await;
        let replayed: Vec<(ObjKey, Bytes)> = old
            .into_iter()
            .filter(|(k, v)| now.iter().any(|(k2, v2)| k2 == k && v2 != v))
            .collect();
        assert!(!replayed.is_empty(), "the writes rewrote nothing");
        store.put_many(replayed).await.unwrap();
        assert!(
            read_or_integrity(e.as_ref(), &model, p.capacity).await > 0,
            "a replay went unnoticed"
        );
        store.put_many(now.clone()).await.unwrap();
        assert_eq!(read_or_integrity(e.as_ref(), &model, p.capacity).await, 0);
        e.flush().await.unwrap();
        // Deleted.
        let now = snapshot(&store, &prefix).await;
        let keys: Vec<ObjKey> = now.iter().map(|(k, _)| k.clone()).collect();
        store.delete_many(&keys).await.unwrap();
        assert!(
            read_or_integrity(e.as_ref(), &model, p.capacity).await > 0,
            "deletion went unnoticed"
        );
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(
            rep.objects_bad > 0 && !rep.problems.is_empty(),
            "check missed the deletion"
        );
        store.put_many(now).await.unwrap();
        assert_eq!(read_or_integrity(e.as_ref(), &model, p.capacity).await, 0);
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// A block the state places on a path where it is not (a lost bucket, a state
/// out of step with the backend) is an integrity error, never zeros. Tree engines
/// only: the others keep no positions.
pub fn a_block_missing_from_where_the_state_says_is_an_integrity_error(s: Arc<dyn Subject>) {
    let p = Params {
        capacity: 128,
        block_size: 32,
        cached_levels: 0,
        ..Params::default()
    };
    let Some(leaves) = s.leaves(&p) else {
        return;
    };
    if !s.places_blocks_in_its_space() {
        return;
    }
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let store: Arc<dyn BlockStore> = Arc::new(MemoryStore::new());
        let mut model = Model::new();
        {
            let db = Db::open(&path, [3; 16]).unwrap();
            let e = s.build(
                &p,
                store.clone(),
                test_sealer(),
                Box::new(db.state(Space(0)).unwrap()),
            );
            fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
        }
        // The trusted state now places one block, stored in a backend bucket, in
        // the other half of the tree: the path read for it shares only the root
        // (cached nowhere) with the path it is on.
        let victim = {
            let db = Db::open(&path, [3; 16]).unwrap();
            let mut st = db.state(Space(0)).unwrap();
            let stash = st.stash_blocks();
            let (b, leaf) = st
                .positions()
                .into_iter()
                .find(|(b, _)| !stash.contains(b))
                .expect("a block outside the stash");
            st.set_position(b, (leaf + leaves / 2) % leaves);
            st.commit().await.unwrap();
            b
        };
        let db = Db::open(&path, [3; 16]).unwrap();
        let e = s.build(
            &p,
            store,
            test_sealer(),
            Box::new(db.state(Space(0)).unwrap()),
        );
        match e.access(vec![Op::Read(victim)]).await {
            Ok(v) => panic!(
                "block {victim} was served ({}) although it is not where the state says",
                if v[0].iter().all(|&x| x == 0) {
                    "as zeros"
                } else {
                    "as data"
                }
            ),
            Err(OramError::Integrity { reason, .. }) => {
                assert!(reason.contains(&format!("block {victim}")), "{reason}")
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    });
}

/// Quiesce holds accesses off; check is clean and counts what is stored; sweep
/// removes only what the state does not refer to.
pub fn quiesce_check_and_sweep(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(MemoryStore::new());
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        run_model(e.as_ref(), &mut model, p.capacity, 100, p.max_batch, 3).await;
        let guard = e.quiesce().await.unwrap();
        let e2 = e.clone();
        let waiting = tokio::spawn(async move { e2.access(vec![Op::Read(1)]).await });
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        assert!(
            !waiting.is_finished(),
            "an access ran while the engine was quiesced"
        );
        drop(guard);
        waiting.await.unwrap().unwrap();
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, model.len() as u64);
        // A stray object under the engine's prefix is swept; nothing else is.
        let keys = store.list(&format!("{}/", p.prefix)).await.unwrap();
        // A position far beyond the engine's, beside its objects.
        let dir = keys[0].as_str().rsplit_once('/').unwrap().0;
        let stray = ObjKey::new(format!("{dir}/999999999")).unwrap();
        store
            .put_many(vec![(stray.clone(), Bytes::from_static(b"x"))])
            .await
            .unwrap();
        // (Engines that write ahead of their commit also leave each rewritten
        // position's previous object, which nothing refers to.)
        let swept = e.sweep().await.unwrap();
        assert!(swept >= 1, "the stray object stayed");
        assert!(store.get_many(&[stray]).await.unwrap()[0].is_none());
        assert_eq!(e.sweep().await.unwrap(), 0, "a second sweep found more");
        read_back(e.as_ref(), &model, p.capacity, p.max_batch).await;
    });
}

/// `format` on an engine holding data: a tree engine writes exactly its
/// never-written uncached buckets (afterwards every uncached bucket is stored),
/// reporting progress up to its position count; a second call writes nothing and
/// changes no object; the data reads back and the check is clean. An engine
/// without a tree has nothing to format and leaves the backend untouched.
pub fn format_writes_what_was_never_written_and_only_once(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(MemoryStore::new());
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..24, 1).await;
        let prefix = format!("{}/", p.prefix);
        let stored = |keys: &[ObjKey]| -> std::collections::BTreeSet<u64> {
            keys.iter()
                .filter_map(|k| key_position(k.as_str()))
                .collect()
        };
        let keys = |keys: Vec<ObjKey>| -> std::collections::BTreeSet<String> {
            keys.into_iter()
                .filter(|k| key_position(k.as_str()).is_some())
                .map(|k| k.as_str().to_string())
                .collect()
        };
        let before = stored(&store.list(&prefix).await.unwrap());
        let before_keys = keys(store.list(&prefix).await.unwrap());
        let snap_before = snapshot(&store, &prefix).await;
        let calls = std::sync::Mutex::new(Vec::new());
        let f = e
            .format(&|done, total| calls.lock().unwrap().push((done, total)))
            .await
            .unwrap();
        let calls = calls.into_inner().unwrap();
        assert!(!calls.is_empty(), "format reported no progress");
        assert!(
            calls.iter().all(|&(d, t)| t == f.positions && d <= t),
            "progress beyond or beside the total {}: {calls:?}",
            f.positions
        );
        assert!(
            calls.windows(2).all(|w| w[0].0 <= w[1].0),
            "progress went backwards: {calls:?}"
        );
        assert_eq!(calls.last(), Some(&(f.positions, f.positions)));
        let after = stored(&store.list(&prefix).await.unwrap());
        match s.leaves(&p) {
            Some(leaves) => {
                // Levels `0..=L` with `k^L` leaves; the first `c` levels hold
                // `(k^c − 1)/(k − 1)` nodes.
                let k = s.arity();
                let levels = leaves.ilog(k) + 1;
                let above = |c: u32| (k.pow(c) - 1) / (k - 1);
                let cached = above(p.cached_levels.min(levels));
                let nodes = above(levels);
                let uncached: std::collections::BTreeSet<u64> = (cached + 1..=nodes).collect();
                assert_eq!(f.positions, s.trees() * uncached.len() as u64);
                assert_eq!(after, uncached, "not every uncached bucket is stored");
                let after_keys = keys(store.list(&prefix).await.unwrap());
                let new = after_keys.difference(&before_keys).count() as u64;
                assert_eq!(f.written, new, "written is not what was missing");
                if s.trees() == 1 {
                    assert_eq!(new, after.difference(&before).count() as u64);
                }
                assert!(
                    f.written > 0 && f.written < f.positions,
                    "the fill left no bucket unwritten, or wrote none: {f:?}"
                );
            }
            None => {
                assert_eq!(f, Formatted::default());
                assert_eq!(snapshot(&store, &prefix).await, snap_before);
            }
        }
        // Idempotent: nothing written, nothing changed.
        let snap = snapshot(&store, &prefix).await;
        let again = e.format(&|_, _| {}).await.unwrap();
        assert_eq!(again.written, 0, "a second format wrote {again:?}");
        assert_eq!(again.positions, f.positions);
        assert!(
            snapshot(&store, &prefix).await == snap,
            "a second format changed backend objects"
        );
        read_back(e.as_ref(), &model, p.capacity, p.max_batch).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, model.len() as u64);
    });
}

/// A backend that is down fails accesses without changing anything; PUTs that
/// fail are kept and resent; nothing acknowledged is lost.
pub fn a_failing_backend_fails_cleanly_and_loses_nothing(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..32, 1).await;
        store.set_down(true);
        let err = e
            .access(vec![Op::Write(3, block_data(3, 9, p.block_size))])
            .await
            .unwrap_err();
        assert!(matches!(err, OramError::Store(_)), "{err}");
        store.set_down(false);
        read_back(e.as_ref(), &model, 32, p.max_batch).await;
        // PUTs failing: the write is answered (write-back engines) or not, but it
        // is never lost once answered, and accesses fail until the backend takes it.
        store.set_puts_down(true);
        let d = block_data(4, 2, p.block_size);
        let answered = e.access(vec![Op::Write(4, d.clone())]).await.is_ok();
        if answered {
            model.insert(4, d);
            if s.every_write_puts() {
                assert!(
                    e.flush().await.is_err(),
                    "a flush succeeded with PUTs failing"
                );
            }
        }
        store.set_puts_down(false);
        e.flush().await.unwrap();
        read_back(e.as_ref(), &model, 32, p.max_batch).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// Engines that write back after answering ([`Subject::writes_back`]): answers
/// do not wait for write-backs; at most `max_inflight_writebacks` rounds are
/// pending, the next one waits. The others: a read is answered while the PUTs
/// of its round (if any) hang, a write only once its PUTs landed, and nothing
/// overtakes a round whose PUTs hang.
pub fn write_backs_are_bounded_and_answers_do_not_wait_for_them(s: Arc<dyn Subject>) {
    if !s.writes_back() {
        return writes_are_answered_after_their_puts(s);
    }
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..8, 1).await;
        store.set_puts_open(false);
        let d = block_data(2, 2, p.block_size);
        e.access(vec![Op::Write(2, d.clone())]).await.unwrap();
        model.insert(2, d);
        // Reads are answered from memory while the write-backs hang, until every
        // write-back slot is taken (a round need not write anything).
        for i in 0..100u64 {
            if e.stats().pending_writebacks == p.max_inflight_writebacks as u64 {
                break;
            }
            let b = i % 8;
            let got = e.access(vec![Op::Read(b)]).await.unwrap();
            assert_eq!(got[0], model[&b], "block {b}");
        }
        assert_eq!(
            e.stats().pending_writebacks,
            p.max_inflight_writebacks as u64
        );
        let e2 = e.clone();
        let fifth = tokio::spawn(async move { e2.access(vec![Op::Read(2)]).await });
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        assert!(
            !fifth.is_finished(),
            "a round ran with every write-back slot taken"
        );
        store.set_puts_open(true);
        assert_eq!(fifth.await.unwrap().unwrap()[0], model[&2]);
        e.flush().await.unwrap();
        assert_eq!(e.stats().pending_writebacks, 0);
    });
}

fn writes_are_answered_after_their_puts(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..8, 1).await;
        let pause = || async {
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        // A write waits for its PUTs.
        store.set_puts_open(false);
        let d = block_data(2, 2, p.block_size);
        let (e2, d2) = (e.clone(), d.clone());
        let write = tokio::spawn(async move { e2.access(vec![Op::Write(2, d2)]).await });
        pause().await;
        if store.puts_waiting() > 0 || s.every_write_puts() {
            assert!(store.puts_waiting() > 0, "the write sent no PUT");
            assert!(!write.is_finished(), "a write was answered before its PUTs");
        }
        store.set_puts_open(true);
        write.await.unwrap().unwrap();
        model.insert(2, d);
        // A read does not (its round's PUTs, if any, hang), and the next access
        // is served once they land.
        store.set_puts_open(false);
        if s.answers_reads_early() {
            let got = e.access(vec![Op::Read(3)]).await.unwrap();
            assert_eq!(got[0], model[&3], "block 3");
        } else {
            let e3 = e.clone();
            let read = tokio::spawn(async move { e3.access(vec![Op::Read(3)]).await });
            pause().await;
            if store.puts_waiting() > 0 {
                assert!(
                    !read.is_finished(),
                    "a read was answered before its round's PUTs"
                );
            }
            store.set_puts_open(true);
            assert_eq!(read.await.unwrap().unwrap()[0], model[&3], "block 3");
            store.set_puts_open(false);
        }
        let e3 = e.clone();
        let read = tokio::spawn(async move { e3.access(vec![Op::Read(5)]).await });
        pause().await;
        store.set_puts_open(true);
        assert_eq!(read.await.unwrap().unwrap()[0], model[&5]);
        e.flush().await.unwrap();
        assert_eq!(e.stats().pending_writebacks, 0);
        read_back(e.as_ref(), &model, 8, p.max_batch).await;
    });
}

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
/// the same requests (keys and sizes), and the inserted block reads back. An
/// oblivious engine refuses to insert a block it holds (the old copy would stay
/// where no round reads it) and changes nothing; an engine that is not oblivious
/// may treat an insert as a write.
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
        if s.oblivious() {
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
        } else {
            held.unwrap();
        }
        assert_eq!(e.access(vec![Op::Read(3)]).await.unwrap()[0], other);
    });
}
