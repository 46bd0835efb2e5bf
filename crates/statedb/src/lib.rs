//! The durable trusted state: one crash-safe [redb] database in the data directory.
//!
//! It holds everything the cloud must never see and the proxy must never forget:
//! the engine's position map, bucket versions and slots, stash, tree-top buckets and
//! write journal ([`DbState`], a [`TrustedState`]), the object layer's index
//! ([`DbKv`], a [`KvState`]), and a few named values (format, volume id, checkpoint
//! epoch).
//!
//! Both views keep a copy of their tables in memory and write the changes made since
//! the last `commit()` in one redb write transaction, fsynced before `commit()`
//! returns. A failed commit undoes the in-memory changes too, so memory and disk
//! never disagree. A crash at any instant leaves the database at its last commit.
//!
//! [`Db::snapshot`] serialises the whole database (for the sealed checkpoint kept
//! on the backend) and [`Db::restore`] rebuilds a database from one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use oram_state::{
    ready_commit, Bucket, CommitFuture, KvState, NodeVersion, PendingWrite, StateError,
    TrustedState,
};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

mod maint;
pub use maint::{compact, Compacted, TableSize};

/// Format of the state database; a database of another format is refused.
pub const FORMAT: u32 = 1;

type Raw = TableDefinition<'static, &'static [u8], &'static [u8]>;

const META: Raw = TableDefinition::new("meta");
const POSITIONS: Raw = TableDefinition::new("positions");
const NODES: Raw = TableDefinition::new("nodes");
const STASH: Raw = TableDefinition::new("stash");
const LOCAL: Raw = TableDefinition::new("local");
const PENDING: Raw = TableDefinition::new("pending");
const KV: Raw = TableDefinition::new("kv");
const POSMETA: Raw = TableDefinition::new("posmeta");
/// Every table, in snapshot order. Tables added later come last: a snapshot
/// written before they existed ends (before its zero padding) without them.
const TABLES: [(&str, Raw); 8] = [
    ("meta", META),
    ("positions", POSITIONS),
    ("nodes", NODES),
    ("stash", STASH),
    ("local", LOCAL),
    ("pending", PENDING),
    ("kv", KV),
    ("posmeta", POSMETA),
];

const SNAPSHOT_MAGIC: &[u8; 8] = b"ORAMSNP1";

/// Errors of the state database.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database file could not be opened or created.
    #[error("state database {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<redb::DatabaseError>,
    },
    /// A read or write of the database failed.
    #[error("state database: {0}")]
    Redb(#[from] Box<redb::Error>),
    /// The database was written by a build with another format.
    #[error("state database has format {found}; this build reads format {FORMAT}")]
    Format {
        /// The format found.
        found: u32,
    },
    /// The database belongs to another volume.
    #[error("state database belongs to another volume")]
    OtherVolume,
    /// A stored value cannot be decoded.
    #[error("state database corrupt: {0}")]
    Corrupt(String),
    /// A snapshot cannot be restored.
    #[error("bad state snapshot: {0}")]
    Snapshot(String),
    /// A database exists where a new one was to be created.
    #[error("{} already exists", .0.display())]
    Exists(PathBuf),
}

fn redb_err(e: impl Into<redb::Error>) -> DbError {
    DbError::Redb(Box::new(e.into()))
}

impl From<DbError> for StateError {
    fn from(e: DbError) -> Self {
        StateError::Storage(e.to_string())
    }
}

/// The state database of one volume. Shared by the engine's [`DbState`], the object
/// layer's [`DbKv`] and the checkpointer.
pub struct Db {
    db: redb::Database,
    epoch: AtomicU64,
    fail_next_commit: AtomicBool,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// Creates `path` readable by its owner only (0600) if it does not exist: the
/// database holds plaintext (the stash) and the position map.
fn create_private(path: &Path) -> Result<(), DbError> {
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map(drop)
        .map_err(|e| DbError::Open {
            path: path.to_path_buf(),
            source: Box::new(redb::DatabaseError::Storage(redb::StorageError::Io(e))),
        })
}

fn u64_of(b: &[u8]) -> Result<u64, DbError> {
    b.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| DbError::Corrupt(format!("{} bytes where 8 were expected", b.len())))
}

impl Db {
    /// Opens the database at `path` for volume `volume`, creating it if absent.
    ///
    /// Refuses a database of another [`FORMAT`] or another volume.
    pub fn open(path: &Path, volume: [u8; 16]) -> Result<Arc<Self>, DbError> {
        let this = Self::create(path)?;
        this.write(|txn| {
            for (_, t) in TABLES {
                txn.open_table(t)?;
            }
            let mut meta = txn.open_table(META)?;
            if meta.get(&b"format"[..])?.is_none() {
                meta.insert(&b"format"[..], &u64::from(FORMAT).to_be_bytes()[..])?;
                meta.insert(&b"volume"[..], &volume[..])?;
                meta.insert(&b"epoch"[..], &0u64.to_be_bytes()[..])?;
            }
            Ok(())
        })?;
        this.check(volume)?;
        Ok(Arc::new(this))
    }

    /// Opens (creating it 0600 if absent) the redb file at `path`.
    fn create(path: &Path) -> Result<Self, DbError> {
        create_private(path)?;
        let db = redb::Database::create(path).map_err(|source| DbError::Open {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
        Ok(Self {
            db,
            epoch: AtomicU64::new(0),
            fail_next_commit: AtomicBool::new(false),
        })
    }

    fn check(&self, volume: [u8; 16]) -> Result<(), DbError> {
        let format = u64_of(&self.meta("format")?.unwrap_or_default())?;
        if format != u64::from(FORMAT) {
            return Err(DbError::Format {
                found: format as u32,
            });
        }
        if self.meta("volume")?.as_deref() != Some(&volume[..]) {
            return Err(DbError::OtherVolume);
        }
        let epoch = u64_of(&self.meta("epoch")?.unwrap_or_default())?;
        self.epoch.store(epoch, Ordering::SeqCst);
        Ok(())
    }

    /// Builds a new database at `path` from a [`Db::snapshot`] of volume `volume`.
    /// Fails if `path` exists.
    pub fn restore(path: &Path, volume: [u8; 16], snapshot: &[u8]) -> Result<Arc<Self>, DbError> {
        if path.exists() {
            return Err(DbError::Exists(path.to_path_buf()));
        }
        let tables = parse_snapshot(snapshot)?;
        let this = Self::create(path)?;
        this.write(|txn| {
            for (name, t) in TABLES {
                let mut table = txn.open_table(t)?;
                for (k, v) in tables.get(name).into_iter().flatten() {
                    table.insert(&k[..], &v[..])?;
                }
            }
            Ok(())
        })?;
        this.check(volume)?;
        Ok(Arc::new(this))
    }

    /// Runs `f` in one durable write transaction.
    fn write(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), DbError> {
        if self.fail_next_commit.swap(false, Ordering::SeqCst) {
            return Err(DbError::Corrupt("injected commit failure".into()));
        }
        let txn = self.db.begin_write().map_err(redb_err)?;
        match f(&txn) {
            Ok(()) => txn.commit().map_err(redb_err),
            Err(e) => {
                let _ = txn.abort();
                Err(redb_err(e))
            }
        }
    }

    /// Makes the next commit fail before it writes anything. Only for tests: a real
    /// disk cannot be made to fail one chosen transaction on demand.
    #[doc(hidden)]
    pub fn inject_commit_failure(&self) {
        self.fail_next_commit.store(true, Ordering::SeqCst);
    }

    /// The checkpoint epoch: the number of checkpoints completed.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Records (durably) that checkpoint `epoch - 1` is complete: writes from now on
    /// belong to `epoch`.
    pub fn set_epoch(&self, epoch: u64) -> Result<(), DbError> {
        self.set_meta("epoch", &epoch.to_be_bytes())?;
        self.epoch.store(epoch, Ordering::SeqCst);
        Ok(())
    }

    /// A named value.
    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let t = txn.open_table(META).map_err(redb_err)?;
        Ok(t.get(name.as_bytes())
            .map_err(redb_err)?
            .map(|v| v.value().to_vec()))
    }

    /// Stores a named value durably.
    pub fn set_meta(&self, name: &str, value: &[u8]) -> Result<(), DbError> {
        self.write(|txn| {
            txn.open_table(META)?.insert(name.as_bytes(), value)?;
            Ok(())
        })
    }

    /// Serialises every table as of the last commit (one consistent read
    /// transaction).
    pub fn snapshot(&self) -> Result<Vec<u8>, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let mut out = SNAPSHOT_MAGIC.to_vec();
        for (name, t) in TABLES {
            let table = txn.open_table(t).map_err(redb_err)?;
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            let n = table.len().map_err(redb_err)?;
            out.extend_from_slice(&n.to_be_bytes());
            for entry in table.iter().map_err(redb_err)? {
                let (k, v) = entry.map_err(redb_err)?;
                for part in [k.value(), v.value()] {
                    out.extend_from_slice(&(part.len() as u32).to_be_bytes());
                    out.extend_from_slice(part);
                }
            }
        }
        Ok(out)
    }

    /// Loads the engine's trusted state. One engine per database.
    pub fn state(self: &Arc<Self>) -> Result<DbState, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        Ok(DbState {
            db: self.clone(),
            positions: Journal::load(&txn, POSITIONS)?,
            nodes: Journal::load(&txn, NODES)?,
            stash: Journal::load(&txn, STASH)?,
            local: Journal::load(&txn, LOCAL)?,
            posmeta: Journal::load(&txn, POSMETA)?,
            pending: Journal::load(&txn, PENDING)?,
        })
    }

    /// Loads the object index.
    pub fn kv(self: &Arc<Self>) -> Result<DbKv, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        Ok(DbKv {
            db: self.clone(),
            map: Journal::load(&txn, KV)?,
            failed: None,
        })
    }
}

type SnapshotTables = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

fn parse_snapshot(mut s: &[u8]) -> Result<SnapshotTables, DbError> {
    fn take<'a>(s: &mut &'a [u8], n: usize) -> Result<&'a [u8], DbError> {
        if s.len() < n {
            return Err(DbError::Snapshot("truncated".into()));
        }
        let (a, b) = s.split_at(n);
        *s = b;
        Ok(a)
    }
    if take(&mut s, 8)? != SNAPSHOT_MAGIC {
        return Err(DbError::Snapshot("not a state snapshot".into()));
    }
    let mut out = SnapshotTables::new();
    for (name, _) in TABLES {
        if s.iter().all(|&b| b == 0) {
            // An older snapshot without the later tables (only padding is left).
            continue;
        }
        let len = take(&mut s, 1)?[0] as usize;
        if take(&mut s, len)? != name.as_bytes() {
            return Err(DbError::Snapshot(format!("table {name} expected")));
        }
        let n = u64_of(take(&mut s, 8)?)?;
        let mut rows = Vec::new();
        for _ in 0..n {
            let mut kv = [Vec::new(), Vec::new()];
            for part in &mut kv {
                let l = u32::from_be_bytes(take(&mut s, 4)?.try_into().expect("4 bytes")) as usize;
                *part = take(&mut s, l)?.to_vec();
            }
            let [k, v] = kv;
            rows.push((k, v));
        }
        out.insert(name.to_string(), rows);
    }
    if !s.iter().all(|&b| b == 0) {
        return Err(DbError::Snapshot("trailing bytes".into()));
    }
    Ok(out)
}

/// How keys and values of a table are stored.
trait Codec: Sized {
    fn enc(&self) -> Vec<u8>;
    fn dec(b: &[u8]) -> Result<Self, DbError>;
}

impl Codec for u64 {
    fn enc(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }
    fn dec(b: &[u8]) -> Result<Self, DbError> {
        u64_of(b)
    }
}

impl Codec for NodeVersion {
    fn enc(&self) -> Vec<u8> {
        let mut v = self.version.to_be_bytes().to_vec();
        v.extend_from_slice(&self.packed_epoch_slot().to_be_bytes());
        v
    }
    fn dec(b: &[u8]) -> Result<Self, DbError> {
        if b.len() != 16 {
            return Err(DbError::Corrupt("node version of the wrong size".into()));
        }
        Ok(NodeVersion::from_packed(u64_of(&b[..8])?, u64_of(&b[8..])?))
    }
}

impl Codec for Bytes {
    fn enc(&self) -> Vec<u8> {
        self.to_vec()
    }
    fn dec(b: &[u8]) -> Result<Self, DbError> {
        Ok(Bytes::copy_from_slice(b))
    }
}

impl Codec for Vec<u8> {
    fn enc(&self) -> Vec<u8> {
        self.clone()
    }
    fn dec(b: &[u8]) -> Result<Self, DbError> {
        Ok(b.to_vec())
    }
}

impl Codec for Bucket {
    fn enc(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for (id, data) in self {
            v.extend_from_slice(&id.to_be_bytes());
            v.extend_from_slice(&(data.len() as u32).to_be_bytes());
            v.extend_from_slice(data);
        }
        v
    }
    fn dec(mut b: &[u8]) -> Result<Self, DbError> {
        let mut out = Vec::new();
        while !b.is_empty() {
            if b.len() < 12 {
                return Err(DbError::Corrupt("truncated local bucket".into()));
            }
            let id = u64_of(&b[..8])?;
            let len = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")) as usize;
            let data = b
                .get(12..12 + len)
                .ok_or_else(|| DbError::Corrupt("truncated local bucket".into()))?;
            out.push((id, Bytes::copy_from_slice(data)));
            b = &b[12 + len..];
        }
        Ok(out)
    }
}

impl Codec for (NodeVersion, Bytes) {
    fn enc(&self) -> Vec<u8> {
        let mut v = self.0.enc();
        v.extend_from_slice(&self.1);
        v
    }
    fn dec(b: &[u8]) -> Result<Self, DbError> {
        if b.len() < 16 {
            return Err(DbError::Corrupt("truncated journal entry".into()));
        }
        Ok((
            NodeVersion::dec(&b[..16])?,
            Bytes::copy_from_slice(&b[16..]),
        ))
    }
}

/// One table in memory, with the old value of every key changed since the last
/// commit (to write the changes, or to undo them).
struct Journal<K, V> {
    table: Raw,
    map: BTreeMap<K, V>,
    undo: BTreeMap<K, Option<V>>,
}

impl<K: Codec + Ord + Clone, V: Codec + Clone> Journal<K, V> {
    fn load(txn: &redb::ReadTransaction, table: Raw) -> Result<Self, DbError> {
        let t = txn.open_table(table).map_err(redb_err)?;
        let mut map = BTreeMap::new();
        for entry in t.iter().map_err(redb_err)? {
            let (k, v) = entry.map_err(redb_err)?;
            map.insert(K::dec(k.value())?, V::dec(v.value())?);
        }
        Ok(Self {
            table,
            map,
            undo: BTreeMap::new(),
        })
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    fn insert(&mut self, k: K, v: V) {
        let old = self.map.insert(k.clone(), v);
        self.undo.entry(k).or_insert(old);
    }

    fn remove(&mut self, k: &K) -> Option<V> {
        let old = self.map.remove(k);
        if old.is_some() {
            self.undo.entry(k.clone()).or_insert_with(|| old.clone());
        }
        old
    }

    fn write(&self, txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
        if self.undo.is_empty() {
            return Ok(());
        }
        let mut t = txn.open_table(self.table)?;
        for k in self.undo.keys() {
            let key = k.enc();
            match self.map.get(k) {
                Some(v) => {
                    t.insert(&key[..], &v.enc()[..])?;
                }
                None => {
                    t.remove(&key[..])?;
                }
            }
        }
        Ok(())
    }

    fn rollback(&mut self) {
        for (k, old) in std::mem::take(&mut self.undo) {
            match old {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
    }

    fn settle(&mut self) {
        self.undo.clear();
    }
}

/// The engine's trusted state, durable in the state database.
pub struct DbState {
    db: Arc<Db>,
    positions: Journal<u64, u64>,
    nodes: Journal<u64, NodeVersion>,
    stash: Journal<u64, Bytes>,
    local: Journal<u64, Bucket>,
    posmeta: Journal<u64, Bytes>,
    pending: Journal<u64, (NodeVersion, Bytes)>,
}

impl TrustedState for DbState {
    fn position(&self, block: u64) -> Option<u64> {
        self.positions.get(&block).copied()
    }
    fn set_position(&mut self, block: u64, leaf: u64) {
        if self.position(block) != Some(leaf) {
            self.positions.insert(block, leaf);
        }
    }
    fn positions_len(&self) -> u64 {
        self.positions.map.len() as u64
    }
    fn positions(&self) -> Vec<(u64, u64)> {
        self.positions.map.iter().map(|(a, b)| (*a, *b)).collect()
    }
    fn node(&self, pos: u64) -> NodeVersion {
        self.nodes.get(&pos).copied().unwrap_or_default()
    }
    fn set_node(&mut self, pos: u64, nv: NodeVersion) {
        self.nodes.insert(pos, nv);
    }
    fn nodes(&self) -> Vec<(u64, NodeVersion)> {
        self.nodes.map.iter().map(|(a, b)| (*a, *b)).collect()
    }
    fn epoch(&self) -> u64 {
        self.db.epoch()
    }
    fn stash_insert(&mut self, block: u64, data: Bytes) {
        self.stash.insert(block, data);
    }
    fn stash_remove(&mut self, block: u64) -> Option<Bytes> {
        self.stash.remove(&block)
    }
    fn stash_get(&self, block: u64) -> Option<&Bytes> {
        self.stash.get(&block)
    }
    fn stash_len(&self) -> usize {
        self.stash.map.len()
    }
    fn stash_blocks(&self) -> Vec<u64> {
        self.stash.map.keys().copied().collect()
    }
    fn local_bucket(&self, node: u64) -> Option<&Bucket> {
        self.local.get(&node)
    }
    fn set_local_bucket(&mut self, node: u64, bucket: Bucket) {
        // Most tree-top buckets do not change in a round: write only those that do.
        let unchanged = match self.local.get(&node) {
            Some(b) => *b == bucket,
            None => bucket.is_empty(),
        };
        if !unchanged {
            self.local.insert(node, bucket);
        }
    }
    fn pos_meta(&self, pos: u64) -> Option<&Bytes> {
        self.posmeta.get(&pos)
    }
    fn set_pos_meta(&mut self, pos: u64, meta: Bytes) {
        if self.posmeta.get(&pos) != Some(&meta) {
            self.posmeta.insert(pos, meta);
        }
    }
    fn pending_put(&mut self, pos: u64, nv: NodeVersion, plain: Bytes) {
        self.pending.insert(pos, (nv, plain));
    }
    fn pending_done(&mut self, pos: u64, version: u64) {
        if self
            .pending
            .get(&pos)
            .is_some_and(|(nv, _)| nv.version == version)
        {
            self.pending.remove(&pos);
        }
    }
    fn pending(&self) -> Vec<PendingWrite> {
        self.pending
            .map
            .iter()
            .map(|(p, (nv, b))| (*p, *nv, b.clone()))
            .collect()
    }
    fn commit(&mut self) -> Result<(), StateError> {
        let r = self.db.write(|txn| {
            self.positions.write(txn)?;
            self.nodes.write(txn)?;
            self.stash.write(txn)?;
            self.local.write(txn)?;
            self.posmeta.write(txn)?;
            self.pending.write(txn)
        });
        match r {
            Ok(()) => {
                self.positions.settle();
                self.nodes.settle();
                self.stash.settle();
                self.local.settle();
                self.posmeta.settle();
                self.pending.settle();
                Ok(())
            }
            Err(e) => {
                self.positions.rollback();
                self.nodes.rollback();
                self.stash.rollback();
                self.local.rollback();
                self.posmeta.rollback();
                self.pending.rollback();
                Err(e.into())
            }
        }
    }
}

/// The object index, durable in the state database.
///
/// This version writes each commit synchronously inside [`KvState::commit`] and
/// returns a ready future (a group committer replaces it). A failed write fails
/// the index for good, as the [`KvState`] contract says: redb is fail-stop after
/// an I/O error, so nothing is undone in memory and every later commit fails.
pub struct DbKv {
    db: Arc<Db>,
    map: Journal<Vec<u8>, Vec<u8>>,
    /// Why the index failed, once a commit has failed.
    failed: Option<String>,
}

impl KvState for DbKv {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map.map.get(key).cloned()
    }
    fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.map.insert(key.to_vec(), value);
    }
    fn delete(&mut self, key: &[u8]) -> bool {
        self.map.remove(&key.to_vec()).is_some()
    }
    fn range(
        &self,
        start: &[u8],
        inclusive: bool,
        end: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        oram_state::btree_range(&self.map.map, start, inclusive, end, limit)
    }
    fn commit(&mut self) -> CommitFuture {
        if let Some(why) = &self.failed {
            return ready_commit(Err(StateError::Storage(format!(
                "the index failed earlier and needs a restart: {why}"
            ))));
        }
        match self.db.write(|txn| self.map.write(txn)) {
            Ok(()) => {
                self.map.settle();
                ready_commit(Ok(()))
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                ready_commit(Err(e.into()))
            }
        }
    }
}

#[cfg(test)]
mod tests;
