//! Maintenance: quiesce, check and sweep; `format` writes only never-written
//! positions, once.

use super::*;
use crate::Formatted;

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
