//! The redoable writer ([`PutMode::Redoable`](oram_blockstore::PutMode::Redoable)):
//! an object that exists is overwritten in place (`pwrite`, `fdatasync`), a
//! missing one created and written directly (`O_EXCL`, `fdatasync`, its directory
//! fsynced once per batch) — no temporary file, no rename. Not atomic: a reader
//! meanwhile, or the file after a crash, may hold a torn or partial object, which
//! the caller writes again.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use bytes::Bytes;
use futures::future::join_all;
use oram_blockstore::{ObjKey, Result};
use rustix::fs::{Mode, OFlags};

use crate::{errno, io_err, runs, split_key, FsStore, Inner, DEFAULT_PARALLELISM};

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

impl Inner {
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
}

impl FsStore {
    /// Every object is written in place (see `Inner::write_in_place`): existing
    /// files overwritten, missing ones created directly, in runs of consecutive
    /// items on at most `DEFAULT_PARALLELISM` blocking tasks, then each directory
    /// that got a new file fsynced once. An object with a second name is replaced
    /// atomically, as `FsStore::put_atomic` does. Every object is written even
    /// when another fails; the first error is reported afterwards.
    pub(crate) async fn put_in_place(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        let results = join_all(runs(items, DEFAULT_PARALLELISM).into_iter().map(|run| {
            self.blocking(move |inner| {
                let mut dirs = std::collections::BTreeMap::new();
                let mut created = std::collections::BTreeSet::new();
                let mut replace = Vec::new();
                // Every object of the run is written even when one fails; the
                // first error is reported once the batch is done.
                let mut failed = None;
                for (key, data) in run {
                    match inner.write_in_place(&key, &data, &mut dirs) {
                        Ok(Placed::Rewritten) => {}
                        Ok(Placed::Created(dir)) => {
                            created.insert(dir);
                        }
                        Ok(Placed::Replace) => replace.push((key, data)),
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                dirs.retain(|name, _| created.contains(name));
                Ok((dirs, replace, failed))
            })
        }))
        .await;
        let mut created = std::collections::BTreeMap::new();
        let mut replace = Vec::new();
        let mut first_err = None;
        for r in results {
            match r {
                Ok((dirs, rep, failed)) => {
                    created.extend(dirs);
                    replace.extend(rep);
                    if let Some(e) = failed {
                        first_err.get_or_insert(e);
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        // Each directory that got a new file is synced once for the whole batch.
        let synced = if created.is_empty() {
            Ok(())
        } else {
            self.blocking(move |inner| inner.fsync_dirs(&created)).await
        };
        let replaced = self.put_atomic(replace).await;
        match first_err {
            Some(e) => Err(e),
            None => synced.and(replaced),
        }
    }
}
