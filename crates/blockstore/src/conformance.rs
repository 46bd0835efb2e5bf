//! The shared conformance suite: every back-end runs [`run_all`] in its tests.
//!
//! Each check works under its own key prefix, so the suite can share one store with
//! other data; each panics with a message naming the broken rule. The checks of
//! bounds and write modes call the core with option structs
//! ([`BlockStore::get_opts`], [`BlockStore::put_opts`], [`BlockStore::list_opts`]);
//! the others use the [`BlockStoreExt`] conveniences, which are those calls with
//! the default options.

use bytes::Bytes;
use futures::future::join_all;

use crate::{
    BlockStore, BlockStoreExt, GetOpts, ListOpts, ObjKey, PutCondition, PutMode, PutOpts,
    SizeBound, StoreError,
};

fn key(prefix: &str, rest: &str) -> ObjKey {
    ObjKey::new(format!("{prefix}/{rest}")).expect("conformance keys are valid")
}

/// Deterministic, position-dependent test bytes, so shifted or mixed data is caught.
pub fn pattern(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// Runs every check under `prefix` (a valid key prefix such as `"conf"`).
pub async fn run_all<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    round_trip(store, &format!("{prefix}/rt")).await;
    missing_is_none(store, &format!("{prefix}/miss")).await;
    overwrite_replaces(store, &format!("{prefix}/ow")).await;
    get_many_keeps_order(store, &format!("{prefix}/gm")).await;
    ranges(store, &format!("{prefix}/rg")).await;
    empty_and_large_objects(store, &format!("{prefix}/sz")).await;
    delete_many(store, &format!("{prefix}/del")).await;
    listing(store, &format!("{prefix}/ls")).await;
    concurrent_writers(store, &format!("{prefix}/cw")).await;
    atomic_overwrite(store, &format!("{prefix}/at")).await;
    bounded_reads(store, &format!("{prefix}/bd")).await;
    redoable_puts(store, &format!("{prefix}/rd")).await;
    default_options(store, &format!("{prefix}/op")).await;
}

/// The default options are the plain calls: an atomic write, a read and a
/// listing with no bound from the caller (a multi-MiB object and every key come
/// back); an atomic write through `put_opts` reads back like any other.
pub async fn default_options<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let (a, big) = (key(prefix, "a"), key(prefix, "big"));
    let items = vec![
        (a.clone(), pattern(11, 10)),
        (big.clone(), pattern(12, 3 << 20)),
    ];
    store
        .put_opts(
            items.clone(),
            PutOpts {
                mode: PutMode::Atomic,
            },
        )
        .await
        .unwrap();
    let got = store
        .get_opts(&[a.clone(), big.clone()], GetOpts { bound: None })
        .await
        .unwrap();
    assert_eq!(
        got,
        items
            .iter()
            .map(|(_, v)| Some(v.clone()))
            .collect::<Vec<_>>(),
        "an unbounded read"
    );
    let listed = store
        .list_opts(&format!("{prefix}/"), ListOpts::default())
        .await
        .unwrap();
    assert_eq!(listed, vec![a, big], "an unbounded listing");
}

/// Reads bounded by the caller ([`GetOpts::bound`]): an object of another size is
/// `WrongSize`, a missing one `None`; listings beyond their bound
/// ([`ListOpts::max_keys`]) fail. The conveniences `get_many_bounded` and
/// `list_bounded` agree with the core calls.
pub async fn bounded_reads<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let (a, b, gone) = (key(prefix, "a"), key(prefix, "b"), key(prefix, "gone"));
    store
        .put_many(vec![
            (a.clone(), pattern(7, 100)),
            (b.clone(), pattern(8, 5000)),
        ])
        .await
        .unwrap();
    let got = store
        .get_opts(
            &[a.clone(), gone.clone()],
            GetOpts {
                bound: Some(SizeBound::Exact(100)),
            },
        )
        .await
        .unwrap();
    assert_eq!(got, vec![Some(pattern(7, 100)), None], "exact bound");
    for bound in [
        SizeBound::Exact(99),
        SizeBound::Exact(101),
        SizeBound::AtMost(99),
    ] {
        let e = store
            .get_opts(std::slice::from_ref(&a), GetOpts::bounded(bound))
            .await;
        assert!(
            matches!(e, Err(StoreError::WrongSize { .. })),
            "a 100-byte object must not pass {bound}: {e:?}"
        );
    }
    let e = store
        .get_opts(
            &[a.clone(), b.clone()],
            GetOpts::bounded(SizeBound::AtMost(4096)),
        )
        .await;
    assert!(
        matches!(e, Err(StoreError::WrongSize { .. })),
        "a 5000-byte object must not pass at most 4096: {e:?}"
    );
    let got = store
        .get_opts(
            std::slice::from_ref(&b),
            GetOpts::bounded(SizeBound::AtMost(5000)),
        )
        .await
        .unwrap();
    assert_eq!(got, vec![Some(pattern(8, 5000))]);
    let got = store
        .get_many_bounded(std::slice::from_ref(&b), SizeBound::Exact(5000))
        .await
        .unwrap();
    assert_eq!(got, vec![Some(pattern(8, 5000))], "get_many_bounded");
    let e = store
        .get_many_bounded(std::slice::from_ref(&b), SizeBound::Exact(4999))
        .await;
    assert!(
        matches!(e, Err(StoreError::WrongSize { .. })),
        "get_many_bounded: {e:?}"
    );
    let listed = store
        .list_opts(&format!("{prefix}/"), ListOpts { max_keys: Some(2) })
        .await
        .unwrap();
    assert_eq!(listed, vec![a.clone(), b.clone()]);
    let e = store
        .list_opts(&format!("{prefix}/"), ListOpts::at_most(1))
        .await;
    assert!(
        matches!(e, Err(StoreError::WrongSize { .. })),
        "a listing of 2 keys must not pass a bound of 1: {e:?}"
    );
    let listed = store.list_bounded(&format!("{prefix}/"), 2).await.unwrap();
    assert_eq!(listed, vec![a.clone(), b.clone()], "list_bounded");
    let e = store.list_bounded(&format!("{prefix}/"), 1).await;
    assert!(
        matches!(e, Err(StoreError::WrongSize { .. })),
        "list_bounded: {e:?}"
    );
}

/// Conditional writes, for back-ends that offer them: create-only, compare-and-swap
/// on the tag, and a failed condition changes nothing.
pub async fn conditional_writes<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let k = key(prefix, "lease");
    let bound = SizeBound::AtMost(1 << 20);
    assert!(store.get_tagged(&k, bound).await.unwrap().is_none());
    let t1 = store
        .put_if(&k, pattern(1, 64), PutCondition::IfAbsent)
        .await
        .expect("create-only write of a missing object");
    let e = store
        .put_if(&k, pattern(2, 64), PutCondition::IfAbsent)
        .await;
    assert!(
        matches!(e, Err(StoreError::PreconditionFailed { .. })),
        "create-only write of an existing object: {e:?}"
    );
    let (v, tag) = store.get_tagged(&k, bound).await.unwrap().unwrap();
    assert_eq!(
        (v, &tag),
        (pattern(1, 64), &t1),
        "tag of the object read back"
    );
    let t2 = store
        .put_if(&k, pattern(3, 64), PutCondition::IfMatch(t1.clone()))
        .await
        .expect("compare-and-swap on the current tag");
    assert_ne!(t1, t2, "a new write has a new tag");
    let e = store
        .put_if(&k, pattern(4, 64), PutCondition::IfMatch(t1.clone()))
        .await;
    assert!(
        matches!(e, Err(StoreError::PreconditionFailed { .. })),
        "compare-and-swap on a stale tag: {e:?}"
    );
    let (v, tag) = store.get_tagged(&k, bound).await.unwrap().unwrap();
    assert_eq!(
        (v, tag),
        (pattern(3, 64), t2),
        "failed conditions changed nothing"
    );
    // The same content written again still gets a tag that the next swap accepts.
    let t3 = store
        .put_if(
            &k,
            pattern(3, 64),
            PutCondition::IfMatch(store.get_tagged(&k, bound).await.unwrap().unwrap().1),
        )
        .await
        .unwrap();
    store
        .put_if(&k, pattern(5, 64), PutCondition::IfMatch(t3))
        .await
        .unwrap();
}

/// A put object reads back byte-exact.
pub async fn round_trip<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let k = key(prefix, "a");
    let v = pattern(1, 1000);
    store.put_many(vec![(k.clone(), v.clone())]).await.unwrap();
    let got = store.get_many(std::slice::from_ref(&k)).await.unwrap();
    assert_eq!(got, vec![Some(v)], "round trip returned other bytes");
}

/// A key never written reads as `None`, not as an error.
pub async fn missing_is_none<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let got = store
        .get_many(&[key(prefix, "nothing/here")])
        .await
        .unwrap();
    assert_eq!(got, vec![None], "missing object must read as None");
    let got = store
        .get_range(&key(prefix, "nothing"), 0..10)
        .await
        .unwrap();
    assert_eq!(got, None, "ranged read of a missing object must be None");
}

/// A second put replaces the first, also with a shorter value.
pub async fn overwrite_replaces<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let k = key(prefix, "x");
    store
        .put_many(vec![(k.clone(), pattern(2, 5000))])
        .await
        .unwrap();
    store
        .put_many(vec![(k.clone(), pattern(3, 100))])
        .await
        .unwrap();
    let got = store.get_many(std::slice::from_ref(&k)).await.unwrap();
    assert_eq!(
        got,
        vec![Some(pattern(3, 100))],
        "overwrite did not replace"
    );
}

/// A redoable write ([`PutMode::Redoable`]) stores like an atomic one once it
/// returned: new objects (also under a new directory-like prefix) and
/// replacements, longer and shorter, read back whole; objects it was not given
/// are untouched. The first write goes through `put_opts`, the replacements
/// through the convenience `put_many_redoable`.
pub async fn redoable_puts<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let keys: Vec<ObjKey> = (0..6).map(|i| key(prefix, &format!("d/r{i}"))).collect();
    let bystander = key(prefix, "d/other");
    store
        .put_many(vec![(bystander.clone(), pattern(99, 300))])
        .await
        .unwrap();
    // First write: none exist yet.
    let first: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), pattern(i as u8, 4000)))
        .collect();
    store
        .put_opts(
            first.clone(),
            PutOpts {
                mode: PutMode::Redoable,
            },
        )
        .await
        .unwrap();
    let got = store.get_many(&keys).await.unwrap();
    assert_eq!(
        got,
        first
            .iter()
            .map(|(_, v)| Some(v.clone()))
            .collect::<Vec<_>>(),
        "redoable puts of new objects"
    );
    // Replacements of the same size, longer, shorter and empty, several times.
    for round in 1..4u8 {
        let lens = [4000, 4000, 9000, 10, 0, 4000];
        let next: Vec<_> = keys
            .iter()
            .zip(lens)
            .enumerate()
            .map(|(i, (k, n))| (k.clone(), pattern(round * 16 + i as u8, n)))
            .collect();
        store.put_many_redoable(next.clone()).await.unwrap();
        let got = store.get_many(&keys).await.unwrap();
        assert_eq!(
            got,
            next.iter()
                .map(|(_, v)| Some(v.clone()))
                .collect::<Vec<_>>(),
            "redoable replacements, round {round}"
        );
        assert_eq!(
            store.get_range(&keys[2], 8990..9000).await.unwrap(),
            Some(next[2].1.slice(8990..9000)),
            "ranged read after a longer replacement"
        );
    }
    assert_eq!(
        store
            .get_many(std::slice::from_ref(&bystander))
            .await
            .unwrap(),
        vec![Some(pattern(99, 300))],
        "an object not written changed"
    );
    store.put_many_redoable(Vec::new()).await.unwrap();
    store
        .put_opts(Vec::new(), PutOpts::redoable())
        .await
        .unwrap();
}

/// `get_many` answers in the order of its keys, with `None` in the gaps.
pub async fn get_many_keeps_order<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let items: Vec<_> = (0..20u8)
        .map(|i| (key(prefix, &format!("k{i}")), pattern(i, 100 + i as usize)))
        .collect();
    store.put_many(items.clone()).await.unwrap();
    let mut keys = Vec::new();
    let mut want = Vec::new();
    for (i, (k, v)) in items.iter().enumerate().rev() {
        keys.push(k.clone());
        want.push(Some(v.clone()));
        if i % 3 == 0 {
            keys.push(key(prefix, &format!("absent{i}")));
            want.push(None);
        }
    }
    let got = store.get_many(&keys).await.unwrap();
    assert_eq!(got, want, "get_many lost the order of its keys");
    assert!(store.get_many(&[]).await.unwrap().is_empty());
}

/// Ranged reads return exactly the bytes asked for, clipped at the end.
pub async fn ranges<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let k = key(prefix, "r");
    let v = pattern(4, 4096);
    store.put_many(vec![(k.clone(), v.clone())]).await.unwrap();
    for (s, e) in [
        (0u64, 1u64),
        (0, 4096),
        (100, 200),
        (4000, 4096),
        (4095, 4096),
    ] {
        let got = store.get_range(&k, s..e).await.unwrap();
        assert_eq!(got, Some(v.slice(s as usize..e as usize)), "range {s}..{e}");
    }
    let got = store.get_range(&k, 4000..9000).await.unwrap();
    assert_eq!(
        got,
        Some(v.slice(4000..)),
        "range past the end must be clipped"
    );
    let got = store.get_range(&k, 5000..6000).await.unwrap();
    assert_eq!(
        got,
        Some(Bytes::new()),
        "range starting past the end must be empty"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let bad = store.get_range(&k, 10..5).await;
    assert!(
        matches!(bad, Err(StoreError::InvalidRange { .. })),
        "reversed range must be refused"
    );
}

/// Empty objects and multi-MiB objects both round-trip.
pub async fn empty_and_large_objects<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let e = key(prefix, "empty");
    let l = key(prefix, "large");
    let big = pattern(5, 4 << 20);
    store
        .put_many(vec![(e.clone(), Bytes::new()), (l.clone(), big.clone())])
        .await
        .unwrap();
    let got = store.get_many(&[e, l]).await.unwrap();
    assert_eq!(
        got[0],
        Some(Bytes::new()),
        "empty object must exist and be empty"
    );
    assert_eq!(got[1].as_ref().map(|b| b.len()), Some(big.len()));
    assert!(got[1].as_ref() == Some(&big), "large object corrupted");
}

/// Deleted objects are gone; deleting a missing key is not an error.
pub async fn delete_many<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let a = key(prefix, "a");
    let b = key(prefix, "b");
    store
        .put_many(vec![
            (a.clone(), pattern(6, 10)),
            (b.clone(), pattern(7, 10)),
        ])
        .await
        .unwrap();
    store
        .delete_many(&[a.clone(), key(prefix, "never")])
        .await
        .unwrap();
    let got = store.get_many(&[a, b]).await.unwrap();
    assert_eq!(
        got,
        vec![None, Some(pattern(7, 10))],
        "delete removed the wrong thing"
    );
}

/// Listing returns exactly the live keys under a prefix, sorted.
pub async fn listing<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let names = ["b/2", "a", "b/1", "c/d/e", "z"];
    store
        .put_many(
            names
                .iter()
                .map(|n| (key(prefix, n), pattern(8, 3)))
                .collect(),
        )
        .await
        .unwrap();
    store
        .put_many(vec![(key(&format!("{prefix}x"), "outside"), pattern(9, 3))])
        .await
        .unwrap();
    store.delete_many(&[key(prefix, "z")]).await.unwrap();
    let got = store.list(&format!("{prefix}/")).await.unwrap();
    let want: Vec<_> = ["a", "b/1", "b/2", "c/d/e"]
        .iter()
        .map(|n| key(prefix, n))
        .collect();
    assert_eq!(got, want, "listing wrong");
    let got = store.list(&format!("{prefix}/b/")).await.unwrap();
    assert_eq!(got, vec![key(prefix, "b/1"), key(prefix, "b/2")]);
}

/// Many writers of different keys at once all land intact.
pub async fn concurrent_writers<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let writers = (0..16u8).map(|w| async move {
        let items: Vec<_> = (0..8u8)
            .map(|i| {
                (
                    key(prefix, &format!("w{w}/i{i}")),
                    pattern(w ^ i, 2000 + i as usize),
                )
            })
            .collect();
        store.put_many(items).await.unwrap();
    });
    join_all(writers).await;
    for w in 0..16u8 {
        let keys: Vec<_> = (0..8u8)
            .map(|i| key(prefix, &format!("w{w}/i{i}")))
            .collect();
        let got = store.get_many(&keys).await.unwrap();
        for (i, g) in got.into_iter().enumerate() {
            assert_eq!(
                g,
                Some(pattern(w ^ i as u8, 2000 + i)),
                "writer {w} item {i} lost or mixed"
            );
        }
    }
}

/// Readers racing an overwrite see the whole old or the whole new object.
pub async fn atomic_overwrite<S: BlockStore + ?Sized>(store: &S, prefix: &str) {
    let k = key(prefix, "obj");
    let a = Bytes::from(vec![0xAA; 256 << 10]);
    let b = Bytes::from(vec![0xBB; 64 << 10]);
    store.put_many(vec![(k.clone(), a.clone())]).await.unwrap();
    let writer = async {
        for i in 0..40 {
            let v = if i % 2 == 0 { b.clone() } else { a.clone() };
            store.put_many(vec![(k.clone(), v)]).await.unwrap();
        }
    };
    let reader = async {
        for _ in 0..80 {
            let got = store.get_many(std::slice::from_ref(&k)).await.unwrap();
            let got = got.into_iter().next().flatten().expect("object vanished");
            assert!(got == a || got == b, "torn read: {} bytes", got.len());
            tokio::task::yield_now().await;
        }
    };
    tokio::join!(writer, reader);
}
