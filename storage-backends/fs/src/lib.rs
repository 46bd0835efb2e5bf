//! A [`BlockStore`] in a local directory: the embedded default back-end.
//!
//! Key `a/b/c` is the file `<root>/a/b/c`. Writes are atomic and durable: each object
//! is written to a temporary file under `<root>/.tmp`, fsynced, renamed over its final
//! name, and the directory holding it is fsynced (as is the parent of any directory
//! the write created). A reader therefore sees the old or the new object, never a
//! partial one, and a crash leaves at most stray temporary files, which
//! [`FsStore::open`] removes. Writers of different keys never share a temporary file.
//! The exception is a redoable write ([`PutMode::Redoable`], `put_many_redoable`),
//! for writes the caller can redo and nobody reads meanwhile (the tree engines'
//! bucket write-backs, which nothing durable refers to until the round's commit):
//! an object that exists is overwritten in place (`pwrite`, `fdatasync`) and a
//! missing one is created and written directly (`O_EXCL`, `fdatasync`, its
//! directory fsynced once per batch), which costs the file system no temporary
//! file and no rename — an order of magnitude cheaper for small objects — and may
//! leave a torn or partial object after a crash, which the caller writes again.
//! Batches run as a few runs of consecutive objects, one blocking task each,
//! rather than one task per object.
//!
//! Whoever can write the store directory is untrusted like any provider: the store
//! never follows a symbolic link below its root. Every file is reached from the
//! root's directory descriptor one component at a time with `openat(...,
//! O_NOFOLLOW)` (`renameat`, `unlinkat`, `mkdirat` likewise), so a link planted in
//! the tree makes the request fail instead of reading or writing outside the root;
//! and a read never buffers more than its caller's bound.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::{join_all, try_join_all};
use oram_blockstore::{
    check_bounded, clip_range, BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition,
    PutMode, PutOpts, Result, SizeBound, StoreError,
};
use rand::RngCore;
use rustix::fs::{AtFlags, Mode, OFlags};
use tokio::sync::Semaphore;

/// Name of the directory holding temporary files (never a valid key segment).
const TMP_DIR: &str = ".tmp";
/// Default number of file operations run at once.
const DEFAULT_PARALLELISM: usize = 32;
/// The lock file of conditional writes, inside the temporary directory.
const CAS_LOCK: &str = ".cas";

/// A block store in a local directory.
///
/// **What the storage server observes:** whoever can read the directory sees one
/// file per object, named by its key, with its size and modification time.
#[derive(Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    /// The root directory, opened once: every path below it is resolved from here.
    root_fd: OwnedFd,
    /// `<root>/.tmp`, opened once.
    tmp_fd: OwnedFd,
    sync: bool,
    limit: Semaphore,
    /// Serialises conditional writes ([`BlockStore::put_if`]) within this process;
    /// a `flock` on `<root>/.tmp/.cas` serialises them across processes.
    cas: std::sync::Mutex<()>,
}

/// What [`Inner::write_in_place`] did with an object.
enum Placed {
    /// An existing file was overwritten in place.
    Rewritten,
    /// A new file was created in this directory (path below the root): the
    /// directory must be fsynced before the write is durable.
    Created(String),
    /// Not written: the file has another name too (or appeared meanwhile); it is
    /// replaced the atomic way instead.
    Replace,
}

/// `items` split into at most `groups` runs of consecutive items, as even as
/// possible (each run becomes one task on the blocking pool).
fn runs<T>(items: Vec<T>, groups: usize) -> Vec<Vec<T>> {
    let n = items.len();
    let groups = groups.clamp(1, n.max(1));
    let (base, extra) = (n / groups, n % groups);
    let mut it = items.into_iter();
    (0..groups)
        .map(|g| it.by_ref().take(base + usize::from(g < extra)).collect())
        .filter(|run: &Vec<T>| !run.is_empty())
        .collect()
}

/// Flags of every directory walked: no symlinks, directories only.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn io_err(op: &'static str, key: impl std::fmt::Display) -> impl FnOnce(io::Error) -> StoreError {
    move |source| StoreError::Io {
        op,
        key: key.to_string(),
        source,
    }
}

impl FsStore {
    /// Opens (creating if needed) the store rooted at `root`, with fsync on, and
    /// removes temporary files a crash may have left.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        Self::open_with_sync(root, true)
    }

    /// As [`FsStore::open`]; `sync = false` skips every fsync, so writes stay atomic
    /// for readers but may be lost by a power cut. Only for throw-away benchmarks.
    pub fn open_with_sync(root: impl Into<PathBuf>, sync: bool) -> Result<Self> {
        let root = root.into();
        let tmp = root.join(TMP_DIR);
        fs::create_dir_all(&root).map_err(io_err("open", root.display()))?;
        // The root itself is the operator's choice (it may be a link); below it
        // nothing is followed.
        let root_fd = rustix::fs::open(
            &root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", root.display())(e.into()))?;
        match rustix::fs::mkdirat(&root_fd, TMP_DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io_err("open", tmp.display())(e.into())),
        }
        let tmp_fd = rustix::fs::openat(&root_fd, TMP_DIR, dir_flags(), Mode::empty())
            .map_err(|e| io_err("open", tmp.display())(e.into()))?;
        for entry in fs::read_dir(&tmp).map_err(io_err("open", tmp.display()))? {
            let entry = entry.map_err(io_err("open", tmp.display()))?;
            // A leftover temp file was never renamed: its write was never acknowledged.
            if entry.file_name() != CAS_LOCK {
                let _ =
                    rustix::fs::unlinkat(&tmp_fd, entry.file_name().as_os_str(), AtFlags::empty());
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                root,
                root_fd,
                tmp_fd,
                sync,
                limit: Semaphore::new(DEFAULT_PARALLELISM),
                cas: std::sync::Mutex::new(()),
            }),
        })
    }

    /// The directory the store lives in.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Runs blocking file work on the blocking pool, at most `DEFAULT_PARALLELISM` at once.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let _permit = self
            .inner
            .limit
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("fs store closed".into()))?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Unavailable(format!("fs worker failed: {e}")))?
    }
}

/// `key`'s directory part and file name (ObjKey segments are `[A-Za-z0-9._-]`,
/// never empty or starting with `.`: no `..`, no clash with `.tmp`).
fn split_key(key: &ObjKey) -> (Vec<&str>, &str) {
    let mut segs: Vec<&str> = key.as_str().split('/').collect();
    let name = segs.pop().expect("keys are not empty");
    (segs, name)
}

fn errno(
    op: &'static str,
    what: impl std::fmt::Display,
) -> impl FnOnce(rustix::io::Errno) -> StoreError {
    move |e| io_err(op, what)(e.into())
}

impl Inner {
    fn fsync_fd(&self, fd: impl AsFd, what: &str) -> Result<()> {
        if self.sync {
            rustix::fs::fsync(fd).map_err(errno("fsync dir", what))?;
        }
        Ok(())
    }

    /// Fsyncs each of `dirs` (opened directories, by path below the root) once.
    fn fsync_dirs(&self, dirs: &std::collections::BTreeMap<String, OwnedFd>) -> Result<()> {
        for (name, d) in dirs {
            self.fsync_fd(d, name)?;
        }
        Ok(())
    }

    /// Opens the directory holding `key` without following links; `None` if a
    /// directory on the way is missing. With `create`, creates the missing ones
    /// (0700), fsyncing the parent of every directory created.
    fn parent(&self, key: &ObjKey, op: &'static str, create: bool) -> Result<Option<OwnedFd>> {
        let (dirs, _) = split_key(key);
        let mut cur = rustix::io::dup(&self.root_fd).map_err(errno(op, key))?;
        for d in dirs {
            let next = match rustix::fs::openat(&cur, d, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&cur, d, Mode::from_raw_mode(0o700)) {
                        Ok(()) => self.fsync_fd(&cur, d)?,
                        Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(errno("mkdir", key)(e)),
                    }
                    rustix::fs::openat(&cur, d, dir_flags(), Mode::empty())
                        .map_err(errno(op, key))?
                }
                Err(rustix::io::Errno::NOENT) => return Ok(None),
                // ELOOP / ENOTDIR: a link or a file where a directory must be.
                Err(e) => return Err(errno(op, key)(e)),
            };
            cur = next;
        }
        Ok(Some(cur))
    }

    /// Writes `key` in place for a redoable write: a regular file
    /// with a single name is overwritten (`data` at offset 0, the file cut to its
    /// length), a missing one is created (`O_EXCL`) and written directly — no
    /// temporary file, no rename — and either is `fdatasync`ed (when syncing).
    /// `dirs` caches the directories already opened by this batch (by path). Not
    /// atomic: a reader meanwhile, or the file after a crash, may hold part old and
    /// part new, or part of a new file (see [`PutMode::Redoable`](oram_blockstore::PutMode::Redoable)).
    fn write_in_place(
        &self,
        key: &ObjKey,
        data: &[u8],
        dirs: &mut std::collections::BTreeMap<String, OwnedFd>,
    ) -> Result<Placed> {
        use std::os::unix::fs::FileExt;
        let (segs, name) = split_key(key);
        let dir_name = segs.join("/");
        if !dirs.contains_key(&dir_name) {
            let dir = self
                .parent(key, "put", true)?
                .ok_or_else(|| io_err("put", key)(io::ErrorKind::NotFound.into()))?;
            dirs.insert(dir_name.clone(), dir);
        }
        let dir = &dirs[&dir_name];
        // O_NONBLOCK: opening a FIFO planted in the tree must fail, not hang.
        let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let (f, placed) = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => (File::from(fd), Placed::Rewritten),
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::openat(
                    dir,
                    name,
                    flags | OFlags::CREATE | OFlags::EXCL,
                    Mode::from_raw_mode(0o600),
                ) {
                    Ok(fd) => (File::from(fd), Placed::Created(dir_name)),
                    // Someone else's file appeared meanwhile: replaced atomically.
                    Err(rustix::io::Errno::EXIST) => return Ok(Placed::Replace),
                    Err(e) => return Err(errno("put", key)(e)),
                }
            }
            Err(e) => return Err(errno("put", key)(e)),
        };
        let meta = f.metadata().map_err(io_err("put", key))?;
        if !meta.is_file() {
            return Err(io_err("put", key)(io::Error::other("not a regular file")));
        }
        // A second name (a hard link planted by whoever writes the store) may
        // point outside: such a file is replaced, never written through.
        if std::os::unix::fs::MetadataExt::nlink(&meta) != 1 {
            return Ok(Placed::Replace);
        }
        let res = (|| {
            f.write_all_at(data, 0)?;
            if meta.len() > data.len() as u64 {
                f.set_len(data.len() as u64)?;
            }
            if self.sync {
                f.sync_data()?;
            }
            Ok(())
        })();
        res.map_err(io_err("put", key))?;
        Ok(placed)
    }

    /// Opens `key` for reading without following links; `None` if it is missing.
    fn open_file(&self, key: &ObjKey) -> Result<Option<File>> {
        let Some(dir) = self.parent(key, "get", false)? else {
            return Ok(None);
        };
        let (_, name) = split_key(key);
        match rustix::fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let f = File::from(fd);
                let meta = f.metadata().map_err(io_err("get", key))?;
                if !meta.is_file() {
                    return Err(io_err("get", key)(io::Error::other("not a regular file")));
                }
                Ok(Some(f))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(errno("get", key)(e)),
        }
    }

    /// Reads `key` whole, refusing (before reading) a file outside `bound`.
    fn read_bounded(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<Bytes>> {
        let Some(f) = self.open_file(key)? else {
            return Ok(None);
        };
        let len = f.metadata().map_err(io_err("get", key))?.len();
        bound.check(key, len)?;
        let mut buf = Vec::with_capacity(len as usize);
        // The file may grow meanwhile: never read past the bound.
        f.take(bound.max().saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(io_err("get", key))?;
        bound.check(key, buf.len() as u64)?;
        Ok(Some(Bytes::from(buf)))
    }

    /// The tag of an open file: inode, size and modification time.
    fn tag_of(f: &File, key: &ObjKey) -> Result<ObjTag> {
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata().map_err(io_err("get", key))?;
        Ok(ObjTag(format!(
            "{}-{}-{}.{}",
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec()
        )))
    }

    /// Writes `data` to a fresh temporary file and fsyncs it; returns its name in
    /// the temporary directory.
    fn write_temp(&self, key: &ObjKey, data: &[u8]) -> Result<String> {
        let mut name = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut name);
        let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = format!("{hex}.tmp");
        let res = (|| {
            let fd = rustix::fs::openat(
                &self.tmp_fd,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut f = File::from(fd);
            f.write_all(data)?;
            if self.sync {
                f.sync_all()?;
            }
            Ok::<_, io::Error>(())
        })();
        if let Err(e) = res {
            let _ = rustix::fs::unlinkat(&self.tmp_fd, tmp.as_str(), AtFlags::empty());
            return Err(io_err("put", key)(e));
        }
        Ok(tmp)
    }

    /// Renames temporary file `tmp` over `key` (in `dir`, its directory).
    fn install(&self, tmp: &str, dir: &OwnedFd, key: &ObjKey) -> Result<()> {
        let (_, name) = split_key(key);
        rustix::fs::renameat(&self.tmp_fd, tmp, dir, name).map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.tmp_fd, tmp, AtFlags::empty());
            errno("put", key)(e)
        })
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BlockStore for FsStore {
    /// Reads in runs of consecutive keys on at most `DEFAULT_PARALLELISM`
    /// blocking tasks; each file is refused before it is read if its size is
    /// outside the bound, and never read past it (no bound: any size).
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let bound = opts.bound.unwrap_or(SizeBound::AtMost(u64::MAX));
        let runs = runs(keys.to_vec(), DEFAULT_PARALLELISM);
        let got: Vec<Option<Bytes>> = try_join_all(runs.into_iter().map(|run| {
            self.blocking(move |inner| {
                run.iter()
                    .map(|key| inner.read_bounded(key, bound))
                    .collect::<Result<Vec<_>>>()
            })
        }))
        .await?
        .into_iter()
        .flatten()
        .collect();
        check_bounded(keys, &got, bound)?;
        Ok(got)
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        let key = key.clone();
        self.blocking(move |inner| {
            let Some(mut f) = inner.open_file(&key)? else {
                clip_range(&range, 0)?;
                return Ok(None);
            };
            let len = f.metadata().map_err(io_err("get", &key))?.len();
            let r = clip_range(&range, len)?;
            let mut buf = vec![0u8; r.len()];
            f.seek(SeekFrom::Start(r.start as u64))
                .and_then(|_| f.read_exact(&mut buf))
                .map_err(io_err("get", &key))?;
            Ok(Some(Bytes::from(buf)))
        })
        .await
    }

    /// [`PutMode::Atomic`]: see `FsStore::put_atomic` (temporary files, renamed
    /// into place); [`PutMode::Redoable`]: see `FsStore::put_in_place`.
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()> {
        match opts.mode {
            PutMode::Atomic => self.put_atomic(items).await,
            PutMode::Redoable => self.put_in_place(items).await,
        }
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        let keys = keys.to_vec();
        self.blocking(move |inner| {
            let mut dirs: std::collections::BTreeMap<String, OwnedFd> = Default::default();
            for key in keys {
                let Some(d) = inner.parent(&key, "delete", false)? else {
                    continue;
                };
                let (segs, name) = split_key(&key);
                match rustix::fs::unlinkat(&d, name, AtFlags::empty()) {
                    Ok(()) => {
                        dirs.insert(segs.join("/"), d);
                    }
                    Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(errno("delete", &key)(e)),
                }
            }
            inner.fsync_dirs(&dirs)
        })
        .await
    }

    /// Walks the tree below the deepest directory the prefix names (see
    /// `FsStore::list_keys`), failing beyond the bound (no bound: any number).
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        self.list_keys(prefix, opts.max_keys.unwrap_or(usize::MAX))
            .await
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        let key = key.clone();
        self.blocking(move |inner| {
            let Some(f) = inner.open_file(&key)? else {
                return Ok(None);
            };
            let tag = Inner::tag_of(&f, &key)?;
            let len = f.metadata().map_err(io_err("get", &key))?.len();
            bound.check(&key, len)?;
            let mut buf = Vec::with_capacity(len as usize);
            f.take(bound.max().saturating_add(1))
                .read_to_end(&mut buf)
                .map_err(io_err("get", &key))?;
            bound.check(&key, buf.len() as u64)?;
            Ok(Some((Bytes::from(buf), tag)))
        })
        .await
    }

    /// See `FsStore::put_conditional`: a compare-and-swap under a lock, then an
    /// atomic write.
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        self.put_conditional(key, data, cond).await
    }
}

impl FsStore {
    /// Stores `items` atomically and durably ([`PutMode::Atomic`](oram_blockstore::PutMode::Atomic)):
    /// all to temporary files first, then renamed into place in item order.
    async fn put_atomic(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        // Phase 1: every object into its own fsynced temporary file, concurrently.
        // Nothing is visible yet, so a failure here leaves every object as it was.
        let results = join_all(items.iter().map(|(key, data)| {
            let (key, data) = (key.clone(), data.clone());
            self.blocking(move |inner| {
                inner.parent(&key, "put", true)?;
                inner.write_temp(&key, &data)
            })
        }))
        .await;
        let mut temps = Vec::with_capacity(results.len());
        let mut first_err = None;
        for r in results {
            match r {
                Ok(t) => temps.push(t),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            let inner = self.inner.clone();
            for t in temps {
                let _ = rustix::fs::unlinkat(&inner.tmp_fd, t.as_str(), AtFlags::empty());
            }
            return Err(e);
        }
        // Phase 2: rename into place (in item order) and fsync each directory once.
        let moves: Vec<(String, ObjKey)> = temps
            .into_iter()
            .zip(items)
            .map(|(tmp, (key, _))| (tmp, key))
            .collect();
        self.blocking(move |inner| {
            let mut dirs: std::collections::BTreeMap<String, OwnedFd> = Default::default();
            let mut failed = None;
            for (tmp, key) in moves {
                if failed.is_some() {
                    let _ = rustix::fs::unlinkat(&inner.tmp_fd, tmp.as_str(), AtFlags::empty());
                    continue;
                }
                let res = inner
                    .parent(&key, "put", true)
                    .and_then(|d| {
                        d.ok_or_else(|| io_err("put", &key)(io::ErrorKind::NotFound.into()))
                    })
                    .and_then(|d| {
                        inner.install(&tmp, &d, &key)?;
                        Ok(d)
                    });
                match res {
                    Ok(d) => {
                        let (segs, _) = split_key(&key);
                        dirs.insert(segs.join("/"), d);
                    }
                    Err(e) => {
                        let _ = rustix::fs::unlinkat(&inner.tmp_fd, tmp.as_str(), AtFlags::empty());
                        failed = Some(e);
                    }
                }
            }
            inner.fsync_dirs(&dirs)?;
            failed.map_or(Ok(()), Err)
        })
        .await
    }

    /// Stores `key` only if `cond` holds on its current tag, serialised within
    /// this process by a mutex and across processes by a `flock` on
    /// `<root>/.tmp/.cas`; returns the new file's tag.
    async fn put_conditional(
        &self,
        key: &ObjKey,
        data: Bytes,
        cond: PutCondition,
    ) -> Result<ObjTag> {
        let key = key.clone();
        self.blocking(move |inner| {
            let _local = inner.cas.lock().unwrap_or_else(|e| e.into_inner());
            // Across processes: an exclusive lock on the lock file while comparing
            // and swapping.
            let lock_fd = rustix::fs::openat(
                &inner.tmp_fd,
                CAS_LOCK,
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(errno("put", &key))?;
            let lock = File::from(lock_fd);
            lock.lock().map_err(io_err("put", &key))?;
            let current = match inner.open_file(&key)? {
                Some(f) => Some(Inner::tag_of(&f, &key)?),
                None => None,
            };
            let ok = match (&cond, &current) {
                (PutCondition::IfAbsent, None) => true,
                (PutCondition::IfMatch(want), Some(have)) => want == have,
                _ => false,
            };
            if !ok {
                return Err(StoreError::PreconditionFailed {
                    key: key.to_string(),
                });
            }
            let dir = inner
                .parent(&key, "put", true)?
                .ok_or_else(|| io_err("put", &key)(io::ErrorKind::NotFound.into()))?;
            let tmp = inner.write_temp(&key, &data)?;
            inner.install(&tmp, &dir, &key)?;
            inner.fsync_fd(&dir, key.as_str())?;
            let f = inner
                .open_file(&key)?
                .ok_or_else(|| io_err("put", &key)(io::ErrorKind::NotFound.into()))?;
            Inner::tag_of(&f, &key)
        })
        .await
    }
}

impl FsStore {
    /// Every object is written in place (see `Inner::write_in_place`): existing
    /// files overwritten, missing ones created directly, in runs of consecutive
    /// items on at most `DEFAULT_PARALLELISM` blocking tasks, then each directory
    /// that got a new file fsynced once. An object with a second name is replaced
    /// atomically, as `FsStore::put_atomic` does.
    async fn put_in_place(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        let results = join_all(runs(items, DEFAULT_PARALLELISM).into_iter().map(|run| {
            self.blocking(move |inner| {
                let mut dirs = std::collections::BTreeMap::new();
                let mut created = std::collections::BTreeSet::new();
                let mut replace = Vec::new();
                for (key, data) in run {
                    match inner.write_in_place(&key, &data, &mut dirs)? {
                        Placed::Rewritten => {}
                        Placed::Created(dir) => {
                            created.insert(dir);
                        }
                        Placed::Replace => replace.push((key, data)),
                    }
                }
                dirs.retain(|name, _| created.contains(name));
                Ok((dirs, replace))
            })
        }))
        .await;
        let mut created = std::collections::BTreeMap::new();
        let mut replace = Vec::new();
        for r in results {
            let (dirs, rep) = r?;
            created.extend(dirs);
            replace.extend(rep);
        }
        // Each directory that got a new file is synced once for the whole batch.
        if !created.is_empty() {
            self.blocking(move |inner| inner.fsync_dirs(&created))
                .await?;
        }
        self.put_atomic(replace).await
    }
}

impl FsStore {
    /// The keys starting with `prefix`, sorted; [`StoreError::WrongSize`] once
    /// more than `max_keys` are found.
    async fn list_keys(&self, prefix: &str, max_keys: usize) -> Result<Vec<ObjKey>> {
        // Start the walk at the deepest directory the prefix names in full.
        let base = prefix.rfind('/').map(|i| &prefix[..i]).unwrap_or("");
        let base = if base.is_empty() || ObjKey::new(base).is_err() {
            String::new()
        } else {
            base.to_string()
        };
        let prefix = prefix.to_string();
        self.blocking(move |inner| {
            let mut out = Vec::new();
            let mut start = inner.root.clone();
            for seg in base.split('/').filter(|s| !s.is_empty()) {
                start.push(seg);
                // Links are not followed: a linked directory lists as nothing.
                match fs::symlink_metadata(&start) {
                    Ok(m) if m.is_dir() => {}
                    _ => return Ok(Vec::new()),
                }
            }
            walk(&start, &base, &prefix, max_keys, &mut out)?;
            let mut keys: Vec<ObjKey> = out
                .into_iter()
                .filter(|k| k.starts_with(&prefix))
                .filter_map(|k| ObjKey::new(k).ok())
                .collect();
            keys.sort();
            Ok(keys)
        })
        .await
    }
}

/// Collects the keys of all files under `dir` (whose key prefix is `rel`) that
/// start with `prefix`, failing beyond `max` of them. Links are skipped.
fn walk(dir: &Path, rel: &str, prefix: &str, max: usize, out: &mut Vec<String>) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("list", dir.display())(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue; // the temporary directory and anything else that is not a key
        }
        let key = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry.file_type().map_err(io_err("list", dir.display()))?;
        if ft.is_dir() {
            walk(&entry.path(), &key, prefix, max, out)?;
        } else if ft.is_file() && key.starts_with(prefix) {
            out.push(key);
            if out.len() > max {
                return Err(StoreError::WrongSize {
                    key: prefix.to_string(),
                    got: format!("more than {max} keys"),
                    expected: format!("at most {max} keys"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        fs::write(dir.path().join(TMP_DIR).join("dead.tmp"), b"partial").unwrap();
        assert_eq!(store.list("").await.unwrap().len(), 1, "temp file listed");
        drop(store);
        let _store = FsStore::open(dir.path()).unwrap();
        let left = fs::read_dir(dir.path().join(TMP_DIR))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != CAS_LOCK)
            .count();
        assert_eq!(left, 0);
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
}
