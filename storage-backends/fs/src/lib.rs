//! A [`BlockStore`] in a local directory: the embedded default back-end.
//!
//! Key `a/b/c` is the file `<root>/a/b/c`. Writes are atomic and durable: each object
//! is written to a temporary file under `<root>/.tmp`, fsynced, renamed over its final
//! name, and the directory holding it is fsynced (as is the parent of any directory
//! the write created). A reader therefore sees the old or the new object, never a
//! partial one, and a crash leaves at most stray temporary files, which
//! [`FsStore::open`] removes once they are ten minutes old (a younger one may be
//! another process's write under way in a directory several share). Writers of different keys never share a temporary file.
//! The exception is a redoable write ([`PutMode::Redoable`], `put_many_redoable`),
//! for writes the caller can redo and nobody reads meanwhile (the tree engines'
//! bucket write-backs, which nothing durable refers to until the round's commit):
//! an object that exists is overwritten in place (`pwrite`, `fdatasync`) and a
//! missing one is created and written directly (`O_EXCL`, `fdatasync`, its
//! directory fsynced once per batch), which costs the file system no temporary
//! file and no rename — an order of magnitude cheaper for small objects — and may
//! leave a torn or partial object after a crash, which the caller writes again.
//! Batches run as a few runs of consecutive objects, one blocking task each,
//! rather than one task per object. A batched read or redoable write goes on
//! with every other object of the batch when one fails and reports the first
//! error afterwards, so which object failed changes nothing else the store does
//! (an atomic batch stops renaming at a failed rename: see `put_atomic`).
//!
//! Whoever can write the store directory is untrusted like any provider: the store
//! never follows a symbolic link below its root. Every file is reached from the
//! root's directory descriptor one component at a time with `openat(...,
//! O_NOFOLLOW)` (`renameat`, `unlinkat`, `mkdirat` likewise), so a link planted in
//! the tree makes the request fail instead of reading or writing outside the root;
//! and a read never buffers more than its caller's bound.
//!
//! Modules: `paths` resolves keys to files below the root; `atomic` is the
//! temporary-file writer (and conditional writes); `in_place` the redoable
//! writer; `list` walks the tree for listings.

mod atomic;
mod in_place;
mod list;
mod paths;
#[cfg(test)]
mod tests;

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::join_all;
use oram_blockstore::{
    check_bounded, clip_range, BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition,
    PutMode, PutOpts, Result, SizeBound, StoreError,
};
use rustix::fs::{AtFlags, Mode, OFlags};
use tokio::sync::Semaphore;

use paths::{dir_flags, split_key};

/// Name of the directory holding temporary files (never a valid key segment).
const TMP_DIR: &str = ".tmp";
/// Default number of file operations run at once.
const DEFAULT_PARALLELISM: usize = 32;
/// The lock file of conditional writes, inside the temporary directory.
const CAS_LOCK: &str = ".cas";

/// A temporary file at least this old when a store opens is a crashed write's
/// leftover, removed; a younger one may be another process's write under way.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(600);

/// A block store in a local directory.
///
/// **What the storage server observes:** whoever can read the directory sees one
/// file per object, named by its key, with its size and modification time.
#[derive(Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
}

/// What every clone of an [`FsStore`] shares: the root's descriptors, the
/// bound on file operations at once, and the lock of conditional writes.
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

fn io_err(op: &'static str, key: impl std::fmt::Display) -> impl FnOnce(io::Error) -> StoreError {
    move |source| StoreError::Io {
        op,
        key: key.to_string(),
        source,
    }
}

fn errno(
    op: &'static str,
    what: impl std::fmt::Display,
) -> impl FnOnce(rustix::io::Errno) -> StoreError {
    move |e| io_err(op, what)(e.into())
}

impl FsStore {
    /// Opens (creating if needed) the store rooted at `root`, with fsync on, and
    /// removes temporary files a crash may have left (ten minutes old or more).
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
            // A leftover temp file was never renamed: its write was never
            // acknowledged. A recent one may be another process's write under
            // way on a directory several processes share (a cluster's members):
            // it is left to that process.
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age >= STALE_TEMP);
            if entry.file_name() != CAS_LOCK && stale {
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

/// Free and total bytes of the file system holding `dir` (`statvfs`; free as an
/// unprivileged writer sees it). A blocking call: one system call, no I/O to the
/// disk beyond the file system's own counters.
pub fn disk_space(dir: &Path) -> io::Result<DiskSpace> {
    let st = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
    let unit = if st.f_frsize > 0 {
        st.f_frsize
    } else {
        st.f_bsize
    };
    Ok(DiskSpace {
        free: st.f_bavail.saturating_mul(unit),
        total: st.f_blocks.saturating_mul(unit),
    })
}

/// What [`disk_space`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskSpace {
    /// Bytes an unprivileged writer may still use.
    pub free: u64,
    /// Bytes of the file system.
    pub total: u64,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BlockStore for FsStore {
    /// Reads in runs of consecutive keys on at most `DEFAULT_PARALLELISM`
    /// blocking tasks; each file is refused before it is read if its size is
    /// outside the bound, and never read past it (no bound: any size). Every
    /// file is read even when another fails (the first error is reported
    /// afterwards), so which one failed changes nothing else that is done.
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let bound = opts.bound.unwrap_or(SizeBound::AtMost(u64::MAX));
        let runs = runs(keys.to_vec(), DEFAULT_PARALLELISM);
        let results = join_all(runs.into_iter().map(|run| {
            self.blocking(move |inner| {
                Ok(run
                    .iter()
                    .map(|key| inner.read_bounded(key, bound))
                    .collect::<Vec<_>>())
            })
        }))
        .await;
        let mut got = Vec::with_capacity(keys.len());
        for run in results {
            for r in run? {
                got.push(r?);
            }
        }
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
