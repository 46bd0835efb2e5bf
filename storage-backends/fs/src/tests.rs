//! The fs back-end's tests: the conformance suite, the in-place writer, links
//! and FIFOs planted in the tree, bounds, temporary files and failed writes.

use super::*;
use oram_blockstore::BlockStoreExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    oram_blockstore::conformance::run_all(&store, "conf").await;
    oram_blockstore::conformance::conditional_writes(&store, "cond").await;
    // Nothing left behind in the temporary directory after successful writes.
    let left: Vec<_> = fs::read_dir(dir.path().join(TMP_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != CAS_LOCK)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn redoable_puts_overwrite_existing_files_in_place() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = FsStore::open(&root).unwrap();
    let (a, b) = (ObjKey::new("v/n/1").unwrap(), ObjKey::new("v/n/2").unwrap());
    store
        .put_many(vec![(a.clone(), Bytes::from(vec![1u8; 5000]))])
        .await
        .unwrap();
    let ino = fs::metadata(root.join("v/n/1")).unwrap().ino();
    // `a` exists: rewritten in place (same inode); `b` does not: created.
    store
        .put_many_redoable(vec![
            (a.clone(), Bytes::from(vec![2u8; 5000])),
            (b.clone(), Bytes::from(vec![3u8; 70])),
        ])
        .await
        .unwrap();
    assert_eq!(fs::metadata(root.join("v/n/1")).unwrap().ino(), ino);
    assert_eq!(fs::read(root.join("v/n/1")).unwrap(), vec![2u8; 5000]);
    assert_eq!(fs::read(root.join("v/n/2")).unwrap(), vec![3u8; 70]);
    // A shorter object cuts the file.
    store
        .put_many_redoable(vec![(a.clone(), Bytes::from(vec![4u8; 10]))])
        .await
        .unwrap();
    assert_eq!(fs::read(root.join("v/n/1")).unwrap(), vec![4u8; 10]);
    assert_eq!(fs::metadata(root.join("v/n/1")).unwrap().ino(), ino);
    // A batch larger than the number of runs, half new (some in a directory
    // that does not exist yet), half existing: every object whole, and read
    // back in order by a batched read with missing keys among them.
    let items: Vec<(ObjKey, Bytes)> = (0..100u32)
        .map(|i| {
            let dir = if i % 2 == 0 { "v/n" } else { "v/fresh/deep" };
            let key = ObjKey::new(format!("{dir}/{i}")).unwrap();
            (key, Bytes::from(vec![i as u8; 100 + i as usize]))
        })
        .collect();
    store.put_many_redoable(items[..50].to_vec()).await.unwrap();
    store.put_many_redoable(items.clone()).await.unwrap();
    let mut keys: Vec<ObjKey> = items.iter().map(|(k, _)| k.clone()).collect();
    keys.insert(37, ObjKey::new("v/n/missing").unwrap());
    let got = store.get_many(&keys).await.unwrap();
    assert_eq!(got.len(), 101);
    assert_eq!(got[37], None);
    got.iter()
        .enumerate()
        .filter(|&(i, _)| i != 37)
        .zip(&items)
        .for_each(|((_, g), (k, v))| assert_eq!(g.as_ref(), Some(v), "{k}"));
    // Nothing left in the temporary directory.
    let left: Vec<_> = fs::read_dir(root.join(TMP_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != CAS_LOCK)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A store under `<tmp>/store` holding `key` ("sealed"), and another directory
/// outside it holding `secret` ("not yours").
async fn store_beside_a_secret(
    key: &str,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    PathBuf,
    FsStore,
    ObjKey,
) {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = FsStore::open(&root).unwrap();
    let k = ObjKey::new(key).unwrap();
    store
        .put_many(vec![(k.clone(), Bytes::from_static(b"sealed"))])
        .await
        .unwrap();
    fs::write(outside.path().join("secret"), b"not yours").unwrap();
    (dir, outside, root, store, k)
}

#[tokio::test]
async fn redoable_puts_never_write_through_a_planted_link_or_fifo() {
    let (_dir, outside, root, store, k) = store_beside_a_secret("v/n/1").await;
    // A link in place of an object: the in-place write refuses it (O_NOFOLLOW).
    let k8 = ObjKey::new("v/n/8").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), root.join("v/n/8")).unwrap();
    assert!(store
        .put_many_redoable(vec![(k8.clone(), Bytes::from_static(b"mine"))])
        .await
        .is_err());
    assert_eq!(
        fs::read(outside.path().join("secret")).unwrap(),
        b"not yours"
    );
    // A hard link to a file outside: replaced, not written through.
    let k7 = ObjKey::new("v/n/7").unwrap();
    fs::hard_link(outside.path().join("secret"), root.join("v/n/7")).unwrap();
    store
        .put_many_redoable(vec![(k7, Bytes::from_static(b"mine"))])
        .await
        .unwrap();
    assert_eq!(
        fs::read(outside.path().join("secret")).unwrap(),
        b"not yours"
    );
    assert_eq!(fs::read(root.join("v/n/7")).unwrap(), b"mine");
    // A link in place of a directory: no write lands outside.
    std::os::unix::fs::symlink(outside.path(), root.join("v/x")).unwrap();
    let kx = ObjKey::new("v/x/secret").unwrap();
    assert!(store
        .put_many_redoable(vec![(kx, Bytes::from_static(b"mine"))])
        .await
        .is_err());
    assert_eq!(
        fs::read(outside.path().join("secret")).unwrap(),
        b"not yours"
    );
    // A FIFO in place of an object: refused at once, not waited on.
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        root.join("v/n/9").as_path(),
        Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let k9 = ObjKey::new("v/n/9").unwrap();
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        store.put_many_redoable(vec![(k9, Bytes::from_static(b"mine"))]),
    )
    .await
    .expect("a write to a FIFO hung");
    assert!(r.is_err());
    // The genuine object is untouched.
    assert_eq!(
        store.get_many(&[k]).await.unwrap(),
        vec![Some(Bytes::from_static(b"sealed"))]
    );
}

#[tokio::test]
async fn planted_symlinks_are_never_followed() {
    let (_dir, outside, root, store, k) = store_beside_a_secret("vol/n/7").await;
    // A link in place of an object, pointing at a file outside the root.
    let link = root.join("vol/n/8");
    std::os::unix::fs::symlink(outside.path().join("secret"), &link).unwrap();
    let k8 = ObjKey::new("vol/n/8").unwrap();
    assert!(
        store.get_many(std::slice::from_ref(&k8)).await.is_err(),
        "read through a link"
    );
    assert!(
        store.get_range(&k8, 0..4).await.is_err(),
        "ranged read through a link"
    );
    // A link in place of a directory: reads fail, writes do not land outside.
    std::os::unix::fs::symlink(outside.path(), root.join("vol/x")).unwrap();
    let kx = ObjKey::new("vol/x/secret").unwrap();
    assert!(store.get_many(std::slice::from_ref(&kx)).await.is_err());
    let kw = ObjKey::new("vol/x/new").unwrap();
    assert!(store
        .put_many(vec![(kw.clone(), Bytes::from_static(b"x"))])
        .await
        .is_err());
    assert!(
        !outside.path().join("new").exists(),
        "a write went through a link"
    );
    assert!(store.delete_many(std::slice::from_ref(&kx)).await.is_err());
    assert!(
        outside.path().join("secret").exists(),
        "a delete went through a link"
    );
    // Listings skip links; the genuine object still reads.
    let listed = store.list("vol/").await.unwrap();
    assert_eq!(listed, vec![k.clone()]);
    assert_eq!(
        store.get_many(&[k]).await.unwrap(),
        vec![Some(Bytes::from_static(b"sealed"))]
    );
    // Overwriting the link's key replaces the link itself, not its target.
    store
        .put_many(vec![(k8.clone(), Bytes::from_static(b"mine"))])
        .await
        .unwrap();
    assert_eq!(
        fs::read(outside.path().join("secret")).unwrap(),
        b"not yours"
    );
}

#[tokio::test]
async fn bounded_reads_stop_at_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let k = ObjKey::new("v/big").unwrap();
    fs::create_dir_all(dir.path().join("v")).unwrap();
    fs::write(dir.path().join("v/big"), vec![7u8; 1 << 20]).unwrap();
    let e = store
        .get_many_bounded(std::slice::from_ref(&k), SizeBound::Exact(4141))
        .await;
    assert!(matches!(e, Err(StoreError::WrongSize { .. })), "{e:?}");
}

#[tokio::test]
async fn objects_are_plain_files_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let k = ObjKey::new("vol/n/7").unwrap();
    store
        .put_many(vec![(k.clone(), Bytes::from_static(b"sealed"))])
        .await
        .unwrap();
    assert_eq!(fs::read(dir.path().join("vol/n/7")).unwrap(), b"sealed");
    drop(store);
    let store = FsStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get_many(&[k]).await.unwrap(),
        vec![Some(Bytes::from_static(b"sealed"))]
    );
}

#[tokio::test]
async fn open_sweeps_stale_temporaries_and_list_ignores_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    store
        .put_many(vec![(
            ObjKey::new("a/b").unwrap(),
            Bytes::from_static(b"x"),
        )])
        .await
        .unwrap();
    // A crash between write and rename leaves a temporary file behind.
    let dead = dir.path().join(TMP_DIR).join("dead.tmp");
    fs::write(&dead, b"partial").unwrap();
    let old = std::time::SystemTime::now() - STALE_TEMP;
    fs::File::options()
        .write(true)
        .open(&dead)
        .unwrap()
        .set_modified(old)
        .unwrap();
    // Another process's write under way on a shared directory.
    let live = dir.path().join(TMP_DIR).join("live.tmp");
    fs::write(&live, b"in flight").unwrap();
    assert_eq!(store.list("").await.unwrap().len(), 1, "temp file listed");
    drop(store);
    let _store = FsStore::open(dir.path()).unwrap();
    let left: Vec<_> = fs::read_dir(dir.path().join(TMP_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != CAS_LOCK)
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("live.tmp")]);
}

#[tokio::test]
async fn write_error_is_reported_and_old_object_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let k = ObjKey::new("d/obj").unwrap();
    store
        .put_many(vec![(k.clone(), Bytes::from_static(b"old"))])
        .await
        .unwrap();
    // A file where a directory must go makes the second write fail.
    fs::write(dir.path().join("blocker"), b"file").unwrap();
    let bad = ObjKey::new("blocker/x").unwrap();
    let err = store
        .put_many(vec![
            (k.clone(), Bytes::from_static(b"new")),
            (bad, Bytes::from_static(b"y")),
        ])
        .await;
    assert!(matches!(err, Err(StoreError::Io { .. })), "{err:?}");
    assert_eq!(
        store.get_many(&[k]).await.unwrap(),
        vec![Some(Bytes::from_static(b"old"))],
        "a failed batch must not replace objects"
    );
}

/// The names of the files (not directories) opened in `dir` since `watch` was
/// set up on it, as the kernel reports them (inotify `IN_OPEN`).
#[cfg(target_os = "linux")]
fn opened_files(watch: &OwnedFd) -> std::collections::BTreeSet<String> {
    use rustix::fs::inotify;
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut reader = inotify::Reader::new(watch, &mut buf);
    let mut names = std::collections::BTreeSet::new();
    // Bounded: the kernel queue holds at most a few thousand events here.
    for _ in 0..100_000 {
        match reader.next() {
            Ok(ev) => {
                if ev.events().contains(inotify::ReadFlags::OPEN)
                    && !ev.events().contains(inotify::ReadFlags::ISDIR)
                {
                    if let Some(n) = ev.file_name() {
                        names.insert(n.to_string_lossy().into_owned());
                    }
                }
            }
            Err(rustix::io::Errno::WOULDBLOCK) => break,
            Err(e) => panic!("inotify: {e}"),
        }
    }
    names
}

/// A store holding a batch of `4 × DEFAULT_PARALLELISM` objects `v/n/<i>` of
/// `body` (more keys than runs, so each run handles several), with a directory
/// planted in place of object 8 (it opens the third run of four); the
/// directory it lives in, its root, the keys and the planted one's number.
async fn batch_with_a_directory(
    body: &'static [u8],
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    FsStore,
    Vec<ObjKey>,
    usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = FsStore::open(&root).unwrap();
    let keys: Vec<ObjKey> = (0..4 * DEFAULT_PARALLELISM)
        .map(|i| ObjKey::new(format!("v/n/{i}")).unwrap())
        .collect();
    store
        .put_many(
            keys.iter()
                .map(|k| (k.clone(), Bytes::from_static(body)))
                .collect(),
        )
        .await
        .unwrap();
    let bad = 8;
    fs::remove_file(root.join(format!("v/n/{bad}"))).unwrap();
    fs::create_dir(root.join(format!("v/n/{bad}"))).unwrap();
    (dir, root, store, keys, bad)
}

/// A batch of more keys than there are runs (so each run reads several), one
/// of them a directory where a file should be: the read fails, and every
/// other file of the batch was still opened and read (observed by the kernel,
/// not by the store), so which object failed changes nothing else.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_of_a_batch_still_reads_every_other_file() {
    use rustix::fs::inotify;
    let (_dir, root, store, keys, bad) = batch_with_a_directory(b"x").await;
    let n = keys.len();
    let watch =
        inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&watch, root.join("v/n"), inotify::WatchFlags::OPEN).unwrap();
    let err = store.get_many(&keys).await.unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let opened = opened_files(&watch);
    let missed: Vec<usize> = (0..n)
        .filter(|&i| i != bad && !opened.contains(&i.to_string()))
        .collect();
    assert!(
        missed.is_empty(),
        "files of the batch never opened: {missed:?}"
    );
}

/// A redoable batch with one object that cannot be written (a directory in its
/// place): the batch fails, and every other object was still written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_redoable_write_of_a_batch_still_writes_every_other_object() {
    let (_dir, root, store, keys, bad) = batch_with_a_directory(b"old").await;
    let n = keys.len();
    store
        .put_many_redoable(
            keys.iter()
                .map(|k| (k.clone(), Bytes::from_static(b"new")))
                .collect(),
        )
        .await
        .unwrap_err();
    let stale: Vec<usize> = (0..n)
        .filter(|&i| i != bad && fs::read(root.join(format!("v/n/{i}"))).unwrap() != b"new")
        .collect();
    assert!(
        stale.is_empty(),
        "objects of the batch not written: {stale:?}"
    );
}

#[test]
fn disk_space_reports_the_file_system_of_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let before = disk_space(dir.path()).unwrap();
    assert!(
        before.total > 0 && before.free <= before.total,
        "{before:?}"
    );
    assert!(
        disk_space(&dir.path().join("missing")).is_err(),
        "a missing directory has no file system"
    );
}
