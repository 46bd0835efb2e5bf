use super::*;
use std::ops::Range;

use oram_blockstore::{BlockStoreExt, GetOpts, ListOpts, PutOpts};

#[test]
fn a_found_record_with_huge_fields_is_bounded() {
    // Found while writing the lease fuzz target: a foreign record with a huge
    // `lease_secs` (up to TOML's largest integer) made the start's deadline
    // (`now + wait + 1 s`) overflow: a panic at start that the provider could
    // cause at will.
    let huge = Record {
        holder: "someone-else".into(),
        start: String::new(),
        generation: i64::MAX as u64,
        renewals: i64::MAX as u64,
        lease_secs: i64::MAX as u64,
        released: false,
    };
    let d = Duration::from_secs(30);
    let f = inspect(&huge.bytes(), "us", d);
    let _deadline = Instant::now() + f.wait + Duration::from_secs(1);
    assert!(!f.ours_or_free);
    assert_eq!(f.wait, Duration::from_secs(MAX_FOUND_LEASE_SECS));
    assert_eq!(f.generation, i64::MAX as u64 + 1);
    // Ordinary records keep their meaning.
    let short = Record {
        lease_secs: 5,
        generation: 4,
        ..huge.clone()
    };
    let f = inspect(&short.bytes(), "us", d);
    assert_eq!((f.wait, f.generation), (d, 5));
    let ours = Record {
        holder: "us".into(),
        ..short
    };
    assert!(inspect(&ours.bytes(), "us", d).ours_or_free);
    let junk = inspect(b"\xff not toml", "us", d);
    assert_eq!(
        (junk.who.as_str(), junk.wait, junk.generation),
        ("unreadable", d, 1)
    );
}

/// Makes `dir`'s `lease.run` name a process that no longer runs on this boot (the
/// process that wrote it is this test's: it cannot be killed without ending it).
fn crashed(dir: &Path) {
    let mut m = run::read(dir).unwrap().unwrap();
    m.pid = u32::MAX;
    m.boot = run::boot_id();
    run::write(dir, &m).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn fs_store() -> Arc<dyn BlockStore> {
    Arc::new(
        oram_store_fs::FsStore::open(tempfile::tempdir().unwrap().keep().join("store")).unwrap(),
    )
}

#[tokio::test]
async fn a_copy_of_a_live_data_directory_is_refused_and_the_original_keeps_its_lease() {
    // Issue 36 item 6: the copy carried `lease.id`, was taken for the holder and
    // took the lease at once, fencing the original.
    let store = fs_store();
    let (a, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let d = Duration::from_secs(2);
    let la = Lease::acquire(store.clone(), "vol0", a.path(), d)
        .await
        .unwrap();
    copy_dir(a.path(), copy.path());
    let err = Lease::acquire(store.clone(), "vol0", copy.path(), d)
        .await
        .err()
        .expect("the copy is refused")
        .to_string();
    assert!(err.contains("copy of this data directory"), "{err}");
    la.check().unwrap();
    assert_eq!(la.generation(), 1);
    assert!(!la.lost.load(Ordering::SeqCst));
    la.renew(false).await.unwrap();
}

#[tokio::test]
async fn a_copy_behind_the_lease_is_refused_even_when_the_original_is_gone() {
    let store = fs_store();
    let (a, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let d = Duration::from_secs(60);
    let la = Lease::acquire(store.clone(), "vol0", a.path(), d)
        .await
        .unwrap();
    copy_dir(a.path(), copy.path());
    // The original runs on (a renewal) and stops cleanly.
    la.renew(false).await.unwrap();
    la.release().await;
    drop(la);
    let err = Lease::acquire(store.clone(), "vol0", copy.path(), d)
        .await
        .err()
        .expect("the copy is behind")
        .to_string();
    assert!(
        err.contains("behind") && err.contains("oram-proxy recover"),
        "{err}"
    );
    // Also when the original crashed instead (nothing released), on this boot.
    let (b, copy_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = fs_store();
    let lb = Lease::acquire(store.clone(), "vol0", b.path(), d)
        .await
        .unwrap();
    copy_dir(b.path(), copy_b.path());
    lb.renew(false).await.unwrap();
    // The original dies: no renewal after this one.
    lb.halt_renewals();
    drop(lb.renewing.lock().await);
    drop(lb);
    crashed(copy_b.path());
    let err = Lease::acquire(store.clone(), "vol0", copy_b.path(), d)
        .await
        .err()
        .expect("the copy is behind")
        .to_string();
    assert!(err.contains("behind"), "{err}");
    // The original directory itself restarts at once.
    crashed(b.path());
    let lb2 = Lease::acquire(store.clone(), "vol0", b.path(), d)
        .await
        .unwrap();
    assert_eq!(lb2.generation(), 2);
}

#[tokio::test]
async fn a_second_holder_is_refused_and_the_first_is_fenced_after_a_take_over() {
    let store: Arc<dyn BlockStore> = Arc::new(
        oram_store_fs::FsStore::open(tempfile::tempdir().unwrap().keep().join("store")).unwrap(),
    );
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let d = Duration::from_secs(2);
    let la = Lease::acquire(store.clone(), "vol0", a.path(), d)
        .await
        .unwrap();
    assert_eq!(la.generation(), 1);
    la.check().unwrap();
    assert!(writable(Some(&la)).is_ok());
    // B sees A renewing: refused.
    let err = Lease::acquire(store.clone(), "vol0", b.path(), d)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("another oram-proxy holds the backend lease"),
        "{err}"
    );
    // A restart of A (same data directory) after its process died takes its own
    // lease over at once (within the lease's validity, so no wait could have
    // ended in a take-over). The death: A's renewals stop and `lease.run` names
    // a process that no longer runs.
    la.halt_renewals();
    // A renewal under way when it was halted finishes first; none starts after.
    drop(la.renewing.lock().await);
    crashed(a.path());
    let la2 = Lease::acquire(store.clone(), "vol0", a.path(), d)
        .await
        .expect("a restart after a crash takes the lease over");
    assert_eq!(la2.generation(), 2);
    // The old incarnation is fenced at its next renewal.
    let _ = la.renew(false).await;
    assert!(matches!(la.check(), Err(StoreError::Fenced(_))));
    // Its /health says so (a monitor must not count it as serving).
    let body = writable(Some(&la)).unwrap_err().to_string();
    assert!(body.contains("another proxy took over"), "{body}");
    let fenced = LeasedStore::new(store.clone(), la.clone());
    let k = ObjKey::new("vol0/n/1").unwrap();
    assert!(matches!(
        fenced.put_many(vec![(k, Bytes::from_static(b"x"))]).await,
        Err(StoreError::Fenced(_))
    ));
    // A released lease is free for anyone.
    la2.release().await;
    let lb = Lease::acquire(store.clone(), "vol0", b.path(), d)
        .await
        .unwrap();
    assert_eq!(lb.generation(), 3);
}

/// The fs store with failures no real back-end produces on demand: a lease
/// renewal (`put_if`) that lands but reports failure, as a renewal that timed
/// out on our side and was applied later (the MinIO relay test in
/// tests/tests/s3_backends.rs covers late PUTs of data, not of the lease);
/// lease renewals refused outright (a backend cut off); and data PUTs held
/// without an answer (a server that never answers) until released.
#[derive(Default)]
struct Faulty {
    inner: Option<Arc<dyn BlockStore>>,
    /// The next `put_if` lands, then fails.
    fail_next: AtomicBool,
    /// Every `put_if` fails without landing.
    refuse_renewals: AtomicBool,
    /// `put_opts` waits for this before it goes on.
    hold_puts: Option<Arc<tokio::sync::Semaphore>>,
}

impl Faulty {
    fn over_fs() -> Self {
        Self {
            inner: Some(fs_store()),
            ..Self::default()
        }
    }

    fn inner(&self) -> &Arc<dyn BlockStore> {
        self.inner.as_ref().expect("an inner store")
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BlockStore for Faulty {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> StoreResult<Vec<Option<Bytes>>> {
        self.inner().get_opts(keys, opts).await
    }
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> StoreResult<Option<Bytes>> {
        self.inner().get_range(key, range).await
    }
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> StoreResult<()> {
        if let Some(gate) = &self.hold_puts {
            // One release lets one write through.
            gate.acquire().await.expect("gate open").forget();
        }
        self.inner().put_opts(items, opts).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> StoreResult<()> {
        self.inner().delete_many(keys).await
    }
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> StoreResult<Vec<ObjKey>> {
        self.inner().list_opts(prefix, opts).await
    }
    async fn get_tagged(
        &self,
        key: &ObjKey,
        bound: SizeBound,
    ) -> StoreResult<Option<(Bytes, ObjTag)>> {
        self.inner().get_tagged(key, bound).await
    }
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> StoreResult<ObjTag> {
        if self.refuse_renewals.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the backend is cut off".into()));
        }
        let tag = self.inner().put_if(key, data, cond).await?;
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Unavailable("timed out (but landed)".into()));
        }
        Ok(tag)
    }
}

/// A write in flight goes on while the lease is renewed, however long it takes,
/// and is abandoned (not left to its back-end's retries) once the lease lapses.
#[tokio::test]
async fn a_write_goes_on_while_the_lease_is_renewed_and_is_abandoned_when_it_lapses() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let store = Arc::new(Faulty {
        hold_puts: Some(gate.clone()),
        ..Faulty::over_fs()
    });
    let dir = tempfile::tempdir().unwrap();
    let d = Duration::from_secs(2);
    let l = Lease::acquire(store.clone(), "vol0", dir.path(), d)
        .await
        .unwrap();
    let leased = Arc::new(LeasedStore::new(store.clone(), l.clone()));
    let k = ObjKey::new("vol0/n/1").unwrap();
    // A write that takes three lease times: the renewals go on beside it.
    let w = {
        let (leased, k) = (leased.clone(), k.clone());
        tokio::spawn(async move {
            leased
                .put_many(vec![(k, Bytes::from_static(b"long"))])
                .await
        })
    };
    tokio::time::sleep(d * 3).await;
    assert!(
        !w.is_finished(),
        "a write was cut short while the lease held"
    );
    gate.add_permits(1);
    w.await.unwrap().unwrap();
    assert_eq!(
        store.get_many(std::slice::from_ref(&k)).await.unwrap()[0]
            .clone()
            .unwrap(),
        Bytes::from_static(b"long")
    );
    // Another one, held for good; the backend then refuses the renewals: the
    // lease lapses and the write is abandoned with it.
    let w = {
        let (leased, k) = (leased.clone(), k.clone());
        tokio::spawn(async move {
            leased
                .put_many(vec![(k, Bytes::from_static(b"late"))])
                .await
        })
    };
    store.refuse_renewals.store(true, Ordering::SeqCst);
    let r = tokio::time::timeout(Duration::from_secs(60), w)
        .await
        .expect("the write outlived its lapsed lease")
        .unwrap();
    assert!(matches!(r, Err(StoreError::Fenced(_))), "{r:?}");
    assert!(l.check().is_err());
    assert_eq!(
        store.get_many(std::slice::from_ref(&k)).await.unwrap()[0]
            .clone()
            .unwrap(),
        Bytes::from_static(b"long")
    );
}

#[tokio::test]
async fn a_renewal_that_landed_after_failing_does_not_lose_the_lease() {
    let store = Arc::new(Faulty::over_fs());
    let inner = store.inner().clone();
    let dir = tempfile::tempdir().unwrap();
    let d = Duration::from_secs(60);
    let l = Lease::acquire(store.clone(), "vol0", dir.path(), d)
        .await
        .unwrap();
    store.fail_next.store(true, Ordering::SeqCst);
    assert!(matches!(
        l.renew(false).await,
        Err(StoreError::Unavailable(_))
    ));
    // The next renewal is refused (the tag moved), finds its own record there
    // and adopts it; the one after succeeds. Never lost.
    let first = l.renew(false).await;
    assert!(
        matches!(first, Err(StoreError::Unavailable(_))),
        "{first:?}"
    );
    l.renew(false).await.unwrap();
    l.check().unwrap();
    assert!(!l.lost.load(Ordering::SeqCst));
    // Expired (as after a backend outage): the next write renews it first and
    // goes through, also when that renewal meets one of our own late ones.
    let leased = LeasedStore::new(store.clone(), l.clone());
    let k = ObjKey::new("vol0/n/1").unwrap();
    for late in [false, true] {
        if late {
            store.fail_next.store(true, Ordering::SeqCst);
            let _ = l.renew(false).await;
        }
        l.lock().valid_until = Instant::now();
        assert!(l.check().is_err());
        assert!(writable(Some(&l)).is_err());
        leased
            .put_many(vec![(k.clone(), Bytes::from_static(b"x"))])
            .await
            .unwrap();
        l.check().unwrap();
    }
    // A take-over by another data directory is still recognised as one.
    let other = tempfile::tempdir().unwrap();
    l.release().await;
    let taker = Lease::acquire(inner.clone(), "vol0", other.path(), d)
        .await
        .unwrap();
    assert_eq!(taker.generation(), 2);
    let _ = l.renew(false).await;
    assert!(matches!(l.check(), Err(StoreError::Fenced(_))));
}
