//! The atomic writer: every object goes to its own fsynced temporary file under
//! `<root>/.tmp`, is renamed over its final name, and its directory is fsynced;
//! conditional writes ([`BlockStore::put_if`](oram_blockstore::BlockStore::put_if))
//! compare and swap under a lock, then write the same way.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;

use bytes::Bytes;
use futures::future::join_all;
use oram_blockstore::{ObjKey, ObjTag, PutCondition, Result, StoreError};
use rand::RngCore;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::{errno, io_err, split_key, FsStore, Inner, CAS_LOCK};

impl Inner {
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

impl FsStore {
    /// Stores `items` atomically and durably ([`PutMode::Atomic`](oram_blockstore::PutMode::Atomic)):
    /// all to temporary files first, then renamed into place in item order.
    pub(crate) async fn put_atomic(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
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
    pub(crate) async fn put_conditional(
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
