//! Keys to files: every file is reached from the root's directory descriptor
//! one component at a time (`openat(..., O_NOFOLLOW)`), so a link planted in the
//! tree makes the request fail instead of leaving the root.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};

use bytes::Bytes;
use oram_blockstore::{ObjKey, ObjTag, Result, SizeBound};
use rustix::fs::{Mode, OFlags};

use crate::{errno, io_err, Inner};

/// Flags of every directory walked: no symlinks, directories only.
pub(crate) fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// `key`'s directory part and file name (ObjKey segments are `[A-Za-z0-9._-]`,
/// never empty or starting with `.`: no `..`, no clash with `.tmp`).
pub(crate) fn split_key(key: &ObjKey) -> (Vec<&str>, &str) {
    let mut segs: Vec<&str> = key.as_str().split('/').collect();
    let name = segs.pop().expect("keys are not empty");
    (segs, name)
}

impl Inner {
    /// Fsyncs an opened directory `what` (when syncing).
    pub(crate) fn fsync_fd(&self, fd: impl AsFd, what: &str) -> Result<()> {
        if self.sync {
            rustix::fs::fsync(fd).map_err(errno("fsync dir", what))?;
        }
        Ok(())
    }

    /// Fsyncs each of `dirs` (opened directories, by path below the root) once.
    pub(crate) fn fsync_dirs(
        &self,
        dirs: &std::collections::BTreeMap<String, OwnedFd>,
    ) -> Result<()> {
        for (name, d) in dirs {
            self.fsync_fd(d, name)?;
        }
        Ok(())
    }

    /// Opens the directory holding `key` without following links; `None` if a
    /// directory on the way is missing. With `create`, creates the missing ones
    /// (0700), fsyncing the parent of every directory created.
    pub(crate) fn parent(
        &self,
        key: &ObjKey,
        op: &'static str,
        create: bool,
    ) -> Result<Option<OwnedFd>> {
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

    /// Opens `key` for reading without following links; `None` if it is missing.
    pub(crate) fn open_file(&self, key: &ObjKey) -> Result<Option<File>> {
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
    pub(crate) fn read_bounded(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<Bytes>> {
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
    pub(crate) fn tag_of(f: &File, key: &ObjKey) -> Result<ObjTag> {
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
}
