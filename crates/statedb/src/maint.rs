//! Maintenance of the state database for operators: table sizes (for `/metrics`
//! and `oram-proxy stats`) and compaction of the file (`oram-proxy compact`).

use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use oram_state::Table;

use crate::committer::def;
use crate::{
    create_private, guarded, io_error, open_error, redb_err, u64_of, verify, Db, DbError,
    DEFAULT_CACHE_BYTES, FORMAT,
};

/// The size of one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSize {
    /// The table's name (`positions`, `stash`, `pending` (the write-back journal), ...).
    pub name: &'static str,
    /// Entries in it.
    pub entries: u64,
}

/// The live bytes of one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableBytes {
    /// The table's name.
    pub name: &'static str,
    /// Bytes of its keys and values.
    pub stored: u64,
    /// Bytes of its tree's branch pages and other bookkeeping.
    pub metadata: u64,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// File size before, bytes.
    pub before: u64,
    /// File size after, bytes.
    pub after: u64,
    /// Entries copied into the new file, every table together.
    pub entries: u64,
}

/// The file a compaction builds beside `state.redb` before renaming it over it.
fn compacting_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compacting");
    path.with_file_name(name)
}

/// Bytes of keys and values copied per write transaction of a compaction: bounds
/// what redb keeps dirty in memory at once.
const COPY_BATCH_BYTES: usize = 32 << 20;

impl Db {
    /// Backend positions written at least once, of every space, and how many of
    /// them were last written in epoch `since` or later: `(written, since)`. Reads
    /// the whole `nodes` table (in one read transaction, committed state only);
    /// the volume's key rotation counts its progress with it.
    pub fn nodes_written_since(&self, since: u64) -> Result<(u64, u64), DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let table = match txn.open_table(def(Table::Nodes)) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0, 0)),
            Err(e) => return Err(redb_err(e)),
        };
        let (mut written, mut recent) = (0u64, 0u64);
        for entry in table.iter().map_err(redb_err)? {
            let (_, v) = entry.map_err(redb_err)?;
            let nv = oram_state::decode_node(v.value())?;
            if nv.version == 0 {
                continue;
            }
            written += 1;
            if nv.epoch >= since {
                recent += 1;
            }
        }
        Ok((written, recent))
    }

    /// Entries of every table. Cheap: redb keeps each table's length in its root.
    pub fn table_sizes(&self) -> Result<Vec<TableSize>, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let mut out = Vec::with_capacity(Table::ALL.len());
        for t in Table::ALL {
            let name = t.name();
            let entries = match txn.open_table(def(t)) {
                Ok(table) => table.len().map_err(redb_err)?,
                Err(redb::TableError::TableDoesNotExist(_)) => 0,
                Err(e) => return Err(redb_err(e)),
            };
            out.push(TableSize { name, entries });
        }
        Ok(out)
    }

    /// Live bytes of every table: its entries' keys and values, and the tree
    /// pages above them (not the file's free or fragmented pages). Walks each
    /// table's tree: for `oram-proxy stats` on a stopped proxy, not for `/metrics`.
    pub fn live_bytes(&self) -> Result<Vec<TableBytes>, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let mut out = Vec::with_capacity(Table::ALL.len());
        for t in Table::ALL {
            let (stored, metadata) = match txn.open_table(def(t)) {
                Ok(table) => {
                    let st = table.stats().map_err(redb_err)?;
                    (st.stored_bytes(), st.metadata_bytes())
                }
                Err(redb::TableError::TableDoesNotExist(_)) => (0, 0),
                Err(e) => return Err(redb_err(e)),
            };
            out.push(TableBytes {
                name: t.name(),
                stored,
                metadata,
            });
        }
        Ok(out)
    }

    /// Entries and stored bytes (keys and values) of the write-back journal: the
    /// buckets whose write-back has not been confirmed by the backend yet.
    pub fn journal_size(&self) -> Result<(u64, u64), DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        match txn.open_table(def(Table::Pending)) {
            Ok(t) => Ok((
                t.len().map_err(redb_err)?,
                t.stats().map_err(redb_err)?.stored_bytes(),
            )),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok((0, 0)),
            Err(e) => Err(redb_err(e)),
        }
    }
}

/// Compacts the state database at `path`: copies every entry of every table,
/// in key order, into a new file beside it (`state.redb.compacting`), checks that
/// each table has as many entries as before and that redb finds the new file
/// intact, makes it durable and renames it over `path` (unless it is not smaller:
/// then it is removed and `path` left as it was). The new file holds the
/// live pages only, whatever the old one's layout (redb's own in-place
/// compaction stops at the first page it cannot move lower, and then may shrink
/// nothing). A crash before the rename leaves `path` as it was; the next
/// compaction removes the half-built file. Needs free space for the live data.
///
/// Nothing may have the database open (the caller holds the data directory's
/// lock; redb refuses a file that is in use). Refuses a file that is not a state
/// database of this [`FORMAT`]. `progress(table)` runs before each table is
/// copied. Blocks on file I/O and fsyncs.
pub fn compact(path: &Path, mut progress: impl FnMut(&'static str)) -> Result<Compacted, DbError> {
    let size = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.len())
            .map_err(|e| io_error(p, e))
    };
    {
        // Opened for writing first: redb checks the file (and would repair an
        // unclean one, which `verify` reports as damage).
        let checked = guarded(path, || {
            let mut db = redb::Database::open(path).map_err(|source| open_error(path, source))?;
            verify(path, &mut db)?;
            Ok(db)
        })?;
        let txn = checked.begin_read().map_err(redb_err)?;
        let meta = txn.open_table(def(Table::Meta)).map_err(redb_err)?;
        let format = match meta.get(&b"format"[..]).map_err(redb_err)? {
            Some(v) => u64_of(v.value())?,
            None => 0,
        };
        if format != u64::from(FORMAT) {
            return Err(DbError::Format {
                found: format as u32,
            });
        }
    }
    // Measured after that open's close (which records redb's allocator state in
    // the file) and copied from a read-only open, which writes nothing.
    let before = size(path)?;
    let old = guarded(path, || {
        redb::Builder::new()
            .set_cache_size(DEFAULT_CACHE_BYTES)
            .open_read_only(path)
            .map_err(|source| open_error(path, source))
    })?;
    let new_path = compacting_path(path);
    match std::fs::remove_file(&new_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(&new_path, e)),
    }
    let copied = copy_tables(&old, &new_path, &mut progress);
    drop(old);
    let entries = match copied {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&new_path);
            return Err(e);
        }
    };
    // A file already as tight as its copy is left as it was: a compaction never
    // makes the file larger.
    let copy = size(&new_path)?;
    if copy >= before {
        std::fs::remove_file(&new_path).map_err(|e| io_error(&new_path, e))?;
        return Ok(Compacted {
            before,
            after: before,
            entries,
        });
    }
    // The new file belongs to whoever owned the old one (a compaction run as
    // root must not leave a file the proxy's own user cannot open), and is on
    // disk before it replaces the old one; the rename is made durable too.
    let settled = (|| {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(path)?;
        let made = std::fs::metadata(&new_path)?;
        if (made.uid(), made.gid()) != (owner.uid(), owner.gid()) {
            std::os::unix::fs::chown(&new_path, Some(owner.uid()), Some(owner.gid()))?;
        }
        std::fs::File::open(&new_path)?.sync_all()
    })();
    if let Err(e) = settled {
        let _ = std::fs::remove_file(&new_path);
        return Err(io_error(&new_path, e));
    }
    std::fs::rename(&new_path, path).map_err(|e| io_error(path, e))?;
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(dir, e))?;
    }
    Ok(Compacted {
        before,
        after: size(path)?,
        entries,
    })
}

/// Copies every table of `old` into a new database at `new_path` (created
/// private), checks the entry counts and the new file's integrity; returns the
/// entries copied.
fn copy_tables(
    old: &impl ReadableDatabase,
    new_path: &Path,
    progress: &mut impl FnMut(&'static str),
) -> Result<u64, DbError> {
    create_private(new_path)?;
    let mut new = guarded(new_path, || {
        redb::Builder::new()
            .set_cache_size(DEFAULT_CACHE_BYTES)
            .create(new_path)
            .map_err(|source| open_error(new_path, source))
    })?;
    let read = old.begin_read().map_err(redb_err)?;
    let mut total = 0u64;
    for t in Table::ALL {
        progress(t.name());
        let source = match read.open_table(def(t)) {
            Ok(table) => Some(table),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(redb_err(e)),
        };
        let mut entries = source
            .as_ref()
            .map(|s| s.iter())
            .transpose()
            .map_err(redb_err)?
            .into_iter()
            .flatten()
            .peekable();
        // One transaction per batch of about COPY_BATCH_BYTES (and at least one,
        // so that an empty table exists in the new file as in the old).
        loop {
            let txn = new.begin_write().map_err(redb_err)?;
            {
                let mut table = txn.open_table(def(t)).map_err(redb_err)?;
                let mut bytes = 0usize;
                while bytes < COPY_BATCH_BYTES {
                    let Some(entry) = entries.next() else { break };
                    let (k, v) = entry.map_err(redb_err)?;
                    table.insert(k.value(), v.value()).map_err(redb_err)?;
                    bytes += k.value().len() + v.value().len();
                }
            }
            txn.commit().map_err(redb_err)?;
            if entries.peek().is_none() {
                break;
            }
        }
        let had = match &source {
            Some(s) => s.len().map_err(redb_err)?,
            None => 0,
        };
        let txn = new.begin_read().map_err(redb_err)?;
        let has = txn
            .open_table(def(t))
            .map_err(redb_err)?
            .len()
            .map_err(redb_err)?;
        if has != had {
            return Err(DbError::Damaged {
                path: new_path.to_path_buf(),
                detail: format!("the copy of table {} has {has} entries of {had}", t.name()),
            });
        }
        total += had;
    }
    drop(read);
    // The file grew by whole regions as the copy went: trim what its end holds
    // unused.
    new.compact().map_err(redb_err)?;
    verify(new_path, &mut new)?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use oram_state::{KvState, Space, TrustedState};

    const VOL: [u8; 16] = [9; 16];

    #[tokio::test]
    async fn sizes_count_entries_and_compaction_shrinks_without_losing_anything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let total = {
            let db = Db::open(&path, VOL).unwrap();
            let mut kv = db.kv().unwrap();
            // Many records written in many transactions, most deleted again:
            // the file keeps the pages they used until it is compacted.
            for round in 0..40u32 {
                for i in 0..100u32 {
                    kv.put(format!("o/{round}/{i}").as_bytes(), vec![7u8; 2000]);
                }
                kv.commit().await.unwrap();
            }
            for round in 1..40u32 {
                for i in 0..100u32 {
                    assert!(kv.delete(format!("o/{round}/{i}").as_bytes()));
                }
                kv.commit().await.unwrap();
            }
            let mut s = db.state(Space(0)).unwrap();
            s.pending_put(5, s.node(5), Bytes::from_static(b"bucket"));
            s.commit().await.unwrap();
            let sizes = db.table_sizes().unwrap();
            let kv_entries = sizes.iter().find(|t| t.name == "kv").unwrap().entries;
            assert_eq!(kv_entries, 100);
            let (entries, bytes) = db.journal_size().unwrap();
            assert_eq!(entries, 1);
            assert!(bytes >= 6, "{bytes}");
            // Live bytes count the 100 records left, not the pages the deleted
            // 3,900 used: far less than the file.
            let live = db.live_bytes().unwrap();
            let kv_live = live.iter().find(|t| t.name == "kv").unwrap();
            assert!(kv_live.stored >= 100 * 2000, "{kv_live:?}");
            let total: u64 = live.iter().map(|t| t.stored + t.metadata).sum();
            let file = std::fs::metadata(&path).unwrap().len();
            assert!(total < file / 4, "live {total}, file {file}");
            total
        };
        // What an interrupted compaction left beside the file is replaced.
        std::fs::write(compacting_path(&path), b"half-built").unwrap();
        let mut tables_seen = Vec::new();
        let c = compact(&path, |t| tables_seen.push(t)).unwrap();
        assert_eq!(tables_seen, Table::ALL.map(|t| t.name()));
        assert!(c.after < c.before, "{c:?}");
        // The copy holds the live pages only: within a small factor of the live
        // bytes, not the file the deletions left.
        assert!(c.after < 4 * total.max(64 << 10), "live {total}, {c:?}");
        assert!(!compacting_path(&path).exists());
        // A second compaction never makes the file larger (its `before` is taken
        // after the check's open and close, which records redb's allocator state).
        let again = compact(&path, |_| {}).unwrap();
        assert!(again.after <= again.before, "{again:?}");
        assert!(again.after <= c.after, "{again:?}");
        assert!(!compacting_path(&path).exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), again.after);
        let db = Db::open(&path, VOL).unwrap();
        let kv = db.kv().unwrap();
        assert_eq!(kv.get(b"o/0/99"), Some(vec![7u8; 2000]));
        assert_eq!(kv.get(b"o/1/0"), None);
        assert_eq!(db.state(Space(0)).unwrap().pending().len(), 1);
    }

    #[tokio::test]
    async fn a_compaction_keeps_the_file_s_owner() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            // Records written and deleted again: a file its copy is smaller than.
            let db = Db::open(&path, VOL).unwrap();
            let mut kv = db.kv().unwrap();
            for i in 0..400u32 {
                kv.put(format!("o/{i}").as_bytes(), vec![7u8; 2000]);
            }
            kv.commit().await.unwrap();
            for i in 0..400u32 {
                assert!(kv.delete(format!("o/{i}").as_bytes()));
            }
            kv.commit().await.unwrap();
        }
        // Only root may give the file away (as an operator's `sudo oram-proxy
        // compact` on a proxy running as its own user would find it).
        if std::os::unix::fs::chown(&path, Some(65534), Some(65534)).is_err() {
            eprintln!("not root: the owner cannot be changed here, nothing to check");
            return;
        }
        // The copy replaced it, and the file is still the user's.
        let c = compact(&path, |_| {}).unwrap();
        assert!(c.after < c.before, "{c:?}");
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
        assert!(!compacting_path(&path).exists());
        drop(Db::open(&path, VOL).unwrap());
    }

    #[test]
    fn compaction_refuses_other_files_and_open_databases() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let db = Db::open(&path, VOL).unwrap();
        assert!(compact(&path, |_| {}).is_err(), "an open database");
        drop(db);
        let other = dir.path().join("other.redb");
        {
            let odb = redb::Database::create(&other).unwrap();
            let txn = odb.begin_write().unwrap();
            txn.open_table(def(Table::Meta)).unwrap();
            txn.commit().unwrap();
        }
        let err = compact(&other, |_| {}).unwrap_err().to_string();
        assert!(err.contains("format 0"), "{err}");
        assert!(compact(&dir.path().join("absent.redb"), |_| {}).is_err());
    }
}
