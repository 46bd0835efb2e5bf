use super::*;
use oram_blockstore::BlockStoreExt;

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
    // lease over at once (while the lease is still renewed, so no wait could have
    // ended in a take-over).
    // A's renewals still rewrite `lease.run` (its process lives on here): one
    // landing between `crashed` and the start makes the start a copy beside a
    // live original, refused without writing; try again (bounded).
    let mut restarted = None;
    for _ in 0..10 {
        crashed(a.path());
        if let Ok(l) = Lease::acquire(store.clone(), "vol0", a.path(), d).await {
            restarted = Some(l);
            break;
        }
    }
    let la2 = restarted.expect("a restart after a crash takes the lease over");
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

/// A store whose next conditional PUT lands but is reported as failed: the
/// renewal that times out on our side and is applied later. A wrapper, because
/// no real back-end fails this way on demand (the MinIO relay test in
/// tests/tests/s3_backends.rs covers late PUTs of data, not of the lease).
struct LandsButFails {
    inner: Arc<dyn BlockStore>,
    fail_next: AtomicBool,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BlockStore for LandsButFails {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> StoreResult<Vec<Option<Bytes>>> {
        self.inner.get_opts(keys, opts).await
    }
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> StoreResult<Option<Bytes>> {
        self.inner.get_range(key, range).await
    }
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> StoreResult<()> {
        self.inner.put_opts(items, opts).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> StoreResult<()> {
        self.inner.delete_many(keys).await
    }
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> StoreResult<Vec<ObjKey>> {
        self.inner.list_opts(prefix, opts).await
    }
    async fn get_tagged(
        &self,
        key: &ObjKey,
        bound: SizeBound,
    ) -> StoreResult<Option<(Bytes, ObjTag)>> {
        self.inner.get_tagged(key, bound).await
    }
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> StoreResult<ObjTag> {
        let tag = self.inner.put_if(key, data, cond).await?;
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Unavailable("timed out (but landed)".into()));
        }
        Ok(tag)
    }
}

#[tokio::test]
async fn a_renewal_that_landed_after_failing_does_not_lose_the_lease() {
    let inner: Arc<dyn BlockStore> = Arc::new(
        oram_store_fs::FsStore::open(tempfile::tempdir().unwrap().keep().join("store")).unwrap(),
    );
    let store = Arc::new(LandsButFails {
        inner: inner.clone(),
        fail_next: AtomicBool::new(false),
    });
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
