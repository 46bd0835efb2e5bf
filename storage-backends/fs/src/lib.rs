//! A [`BlockStore`] in a local directory: the embedded default back-end.
//!
//! Key `a/b/c` is the file `<root>/a/b/c`. Writes are atomic and durable: each object
//! is written to a temporary file under `<root>/.tmp`, fsynced, renamed over its final
//! name, and the directory holding it is fsynced (as is the parent of any directory
//! the write created). A reader therefore sees the old or the new object, never a
//! partial one, and a crash leaves at most stray temporary files, which
//! [`FsStore::open`] removes. Writers of different keys never share a temporary file.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::{join_all, try_join_all};
use oram_blockstore::{clip_range, BlockStore, ObjKey, Result, StoreError};
use rand::RngCore;
use tokio::sync::Semaphore;

/// Name of the directory holding temporary files (never a valid key segment).
const TMP_DIR: &str = ".tmp";
/// Default number of file operations run at once.
const DEFAULT_PARALLELISM: usize = 32;

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
    tmp: PathBuf,
    sync: bool,
    limit: Semaphore,
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
        fs::create_dir_all(&tmp).map_err(io_err("open", root.display()))?;
        for entry in fs::read_dir(&tmp).map_err(io_err("open", tmp.display()))? {
            let entry = entry.map_err(io_err("open", tmp.display()))?;
            // A leftover temp file was never renamed: its write was never acknowledged.
            let _ = fs::remove_file(entry.path());
        }
        Ok(Self {
            inner: Arc::new(Inner {
                root,
                tmp,
                sync,
                limit: Semaphore::new(DEFAULT_PARALLELISM),
            }),
        })
    }

    /// The directory the store lives in.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    fn path_of(&self, key: &ObjKey) -> PathBuf {
        // ObjKey segments are [A-Za-z0-9._-] and never start with '.', so the path
        // cannot escape the root or collide with the temporary directory.
        self.inner.root.join(key.as_str())
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

impl Inner {
    fn fsync_dir(&self, dir: &Path) -> Result<()> {
        if self.sync {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err("fsync dir", dir.display()))?;
        }
        Ok(())
    }

    /// Creates `dir` and its missing ancestors, fsyncing the parent of every
    /// directory created so that the new entries are durable.
    fn ensure_dir(&self, dir: &Path) -> Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        let mut missing = vec![dir.to_path_buf()];
        let mut cur = dir.parent();
        while let Some(p) = cur {
            if p.is_dir() {
                break;
            }
            missing.push(p.to_path_buf());
            cur = p.parent();
        }
        for d in missing.iter().rev() {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
                Err(e) => return Err(io_err("mkdir", d.display())(e)),
            }
            if let Some(parent) = d.parent() {
                self.fsync_dir(parent)?;
            }
        }
        Ok(())
    }

    /// Writes `data` to a fresh temporary file and fsyncs it; returns its path.
    fn write_temp(&self, key: &ObjKey, data: &[u8]) -> Result<PathBuf> {
        let mut name = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut name);
        let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = self.tmp.join(format!("{hex}.tmp"));
        let res = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(data)?;
            if self.sync {
                f.sync_all()?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("put", key)(e));
        }
        Ok(tmp)
    }
}

#[async_trait]
impl BlockStore for FsStore {
    async fn get_many(&self, keys: &[ObjKey]) -> Result<Vec<Option<Bytes>>> {
        try_join_all(keys.iter().map(|key| {
            let path = self.path_of(key);
            let key = key.clone();
            self.blocking(move |_| match fs::read(&path) {
                Ok(v) => Ok(Some(Bytes::from(v))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err("get", key)(e)),
            })
        }))
        .await
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        let path = self.path_of(key);
        let key = key.clone();
        self.blocking(move |_| {
            let mut f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    clip_range(&range, 0)?;
                    return Ok(None);
                }
                Err(e) => return Err(io_err("get", key)(e)),
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

    async fn put_many(&self, items: Vec<(ObjKey, Bytes)>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        // Phase 1: every object into its own fsynced temporary file, concurrently.
        // Nothing is visible yet, so a failure here leaves every object as it was.
        let results = join_all(items.iter().map(|(key, data)| {
            let (key, data) = (key.clone(), data.clone());
            let target = self.path_of(&key);
            self.blocking(move |inner| {
                inner.ensure_dir(target.parent().expect("keys have a parent"))?;
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
            for t in temps {
                let _ = fs::remove_file(t);
            }
            return Err(e);
        }
        // Phase 2: rename into place (in item order) and fsync each directory once.
        let moves: Vec<(PathBuf, PathBuf, ObjKey)> = temps
            .into_iter()
            .zip(items)
            .map(|(tmp, (key, _))| (tmp, self.path_of(&key), key))
            .collect();
        self.blocking(move |inner| {
            let mut dirs = BTreeSet::new();
            let mut failed = None;
            for (tmp, target, key) in moves {
                if failed.is_some() {
                    let _ = fs::remove_file(&tmp);
                    continue;
                }
                match fs::rename(&tmp, &target) {
                    Ok(()) => {
                        dirs.insert(target.parent().expect("has parent").to_path_buf());
                    }
                    Err(e) => {
                        let _ = fs::remove_file(&tmp);
                        failed = Some(io_err("put", key)(e));
                    }
                }
            }
            for d in &dirs {
                inner.fsync_dir(d)?;
            }
            failed.map_or(Ok(()), Err)
        })
        .await
    }

    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        let paths: Vec<(PathBuf, ObjKey)> =
            keys.iter().map(|k| (self.path_of(k), k.clone())).collect();
        self.blocking(move |inner| {
            let mut dirs = BTreeSet::new();
            for (p, key) in paths {
                match fs::remove_file(&p) {
                    Ok(()) => {
                        dirs.insert(p.parent().expect("has parent").to_path_buf());
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err("delete", key)(e)),
                }
            }
            for d in &dirs {
                inner.fsync_dir(d)?;
            }
            Ok(())
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjKey>> {
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
            let start = if base.is_empty() {
                inner.root.clone()
            } else {
                inner.root.join(&base)
            };
            walk(&start, &base, &mut out)?;
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

/// Collects the keys of all files under `dir` (whose key prefix is `rel`).
fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<()> {
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
            walk(&entry.path(), &key, out)?;
        } else if ft.is_file() {
            out.push(key);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        oram_blockstore::conformance::run_all(&store, "conf").await;
        // Nothing left behind in the temporary directory after successful writes.
        assert_eq!(fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count(), 0);
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
        assert_eq!(fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count(), 0);
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
