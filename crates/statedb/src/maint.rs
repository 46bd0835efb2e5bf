//! Maintenance of the state database for operators: table sizes (for `/metrics`
//! and `oram-proxy stats`) and compaction of the file (`oram-proxy compact`).

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use oram_state::Table;

use crate::committer::def;
use crate::{guarded, open_error, redb_err, u64_of, verify, Db, DbError, FORMAT};

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
    /// Compaction passes run.
    pub passes: u32,
}

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

/// Compacts the state database at `path` in place: frees the pages that earlier
/// transactions left unused and shrinks the file. Nothing may have the database
/// open (the caller holds the data directory's lock; redb refuses a file that is
/// in use). Refuses a file that is not a state database of this [`FORMAT`].
/// `progress(pass)` runs before every compaction pass.
pub fn compact(path: &Path, mut progress: impl FnMut(u32)) -> Result<Compacted, DbError> {
    let size = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.len())
            .map_err(|e| DbError::Open {
                path: p.to_path_buf(),
                source: Box::new(redb::DatabaseError::Storage(redb::StorageError::Io(e))),
            })
    };
    let before = size(path)?;
    let mut db = guarded(path, || {
        let mut db = redb::Database::open(path).map_err(|source| open_error(path, source))?;
        verify(path, &mut db)?;
        Ok(db)
    })?;
    {
        let txn = db.begin_read().map_err(redb_err)?;
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
    let mut passes = 0;
    // Each pass moves pages towards the start; stop when one changes nothing
    // (bounded: a pass that always reports progress would be a redb bug).
    while passes < 64 {
        progress(passes);
        passes += 1;
        if !db.compact().map_err(redb_err)? {
            break;
        }
    }
    drop(db);
    Ok(Compacted {
        before,
        after: size(path)?,
        passes,
    })
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
        {
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
        }
        let mut passes_seen = 0;
        let c = compact(&path, |_| passes_seen += 1).unwrap();
        assert_eq!(passes_seen, c.passes);
        assert!(c.after < c.before, "{c:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), c.after);
        let db = Db::open(&path, VOL).unwrap();
        let kv = db.kv().unwrap();
        assert_eq!(kv.get(b"o/0/99"), Some(vec![7u8; 2000]));
        assert_eq!(kv.get(b"o/1/0"), None);
        assert_eq!(db.state(Space(0)).unwrap().pending().len(), 1);
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
