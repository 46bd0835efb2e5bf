//! The durable trusted state: one crash-safe [redb] database in the data directory.
//!
//! It holds everything the cloud must never see and the proxy must never forget:
//! every engine space's position map, bucket versions and slots, stash, tree-top
//! buckets, per-key metadata, write journal and intent record ([`Db::state`], a
//! [`SpaceState`] bound to this database), the object layer's index ([`Db::kv`]),
//! and a few named values (format, volume id, checkpoint epoch, generation).
//!
//! Every view keeps its tables in memory and commits the keys changed since its
//! last commit through the **group committer** ([`Committer`]): one thread that
//! writes the change sets of all concurrent callers in one redb write transaction
//! with one fsync, in the order they were submitted. A commit returns a future at
//! once; nothing blocks on a tokio worker thread and no fsync runs under a lock.
//! A failed transaction fails the database for good (redb is fail-stop after an
//! I/O error): that commit and every later one fail until the process restarts
//! and reloads the last durable state. A crash at any instant leaves the database
//! at its last durable commit.
//!
//! [`Db::snapshot`] serialises the whole database (for the sealed checkpoint kept
//! on the backend) and [`Db::restore`] rebuilds a database from one, in a new
//! **generation**: writes after a restore are sealed with it, so objects of the
//! lost timeline (written after the checkpoint) never open as current.
//!
//! The file is `<data_dir>/state.redb` (mode 0600, format [`FORMAT`]). Its
//! tables are `meta` (format, volume id, epoch, generation, checkpoint
//! bookkeeping), `positions`, `nodes`, `stash`, `local`, `keymeta`, `pending`
//! (the journal) and `intent`, all keyed by `space (u32 BE) ‖ key`, and `kv`
//! (the object index); see [`oram_state::Table`]. The committer writes at most
//! 4096 queued change sets per transaction. [`Db::open`] and [`Db::restore`]
//! write once on the caller's thread before the committer starts (the volume
//! calls them on the blocking pool). A snapshot is `ORAMSNP2` and every table
//! read in one read transaction; a snapshot of state format 1 is refused. The
//! generation is a random non-zero 64-bit value, drawn when the database is
//! created (in slot bank 0) and again by every restore (in the next bank:
//! `oram_state::BANKS`), stamped into each
//! [`oram_state::NodeVersion`] written. For operators, `maint` gives table sizes
//! and the journal's size (for `/metrics`) and compacts a closed database.

mod committer;
mod log;
mod maint;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oram_state::{CommitFuture, Durable, KvMap, Lineage, Space, SpaceState, StateError, Table};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use committer::def;
pub use committer::Committer;
pub use log::{decode_groups, encode_group, encode_groups, ShipLog};
pub use maint::{compact, Compacted, TableBytes, TableSize};

/// Format of the state database; a database of another format is refused.
/// (2: spaces, per-key metadata, intent records, generations.)
pub const FORMAT: u32 = 2;

/// The engine's trusted state kept in this database (one space of it).
pub type DbState = SpaceState;
/// The object index kept in this database.
pub type DbKv = KvMap;

const SNAPSHOT_MAGIC: &[u8; 8] = b"ORAMSNP2";

/// The database's page cache when none is given ([`Db::open`]): 256 MiB. (redb's
/// own default, 1 GiB, let a busy proxy grow to 1.5 GiB of memory with journal
/// pages; 64 MiB cost 10–20 % of large-object throughput with 64 KiB blocks, as the
/// committer re-read pages; 256 MiB measured as fast as 1 GiB.)
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

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
    /// The database file is damaged: it is not a redb file, or a page's checksum
    /// does not match (found when it is opened, before any command reads it).
    #[error(
        "state database {} is damaged ({detail}); this data directory cannot be used as it is: \
         build a new one from the backend with `oram-proxy recover` (docs/operating.md, \
         \"Durability, fsck, keys and recovery\")",
        path.display()
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What redb found.
        detail: String,
    },
    /// The database belongs to another volume.
    #[error("state database belongs to another volume")]
    OtherVolume,
    /// A stored value cannot be decoded, or a commit failed.
    #[error("state database: {0}")]
    State(#[from] StateError),
    /// A snapshot cannot be restored.
    #[error("bad state snapshot: {0}")]
    Snapshot(String),
    /// A database exists where a new one was to be created.
    #[error("{} already exists", .0.display())]
    Exists(PathBuf),
    /// A commit is too large for one group of the shipped log (or a length in
    /// it for the format's 32 bits): it is refused rather than shipped as a
    /// group `recover` could not read.
    #[error(
        "state database: a commit of {bytes} bytes does not fit the shipped log's groups \
         (at most {max}); make rounds smaller (engine.round_mib, engine.tree_cache_mib)"
    )]
    LogGroup {
        /// The commit's (or length's) size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The committer thread could not be started.
    #[error("state database: cannot start the committer: {0}")]
    Thread(std::io::Error),
}

fn redb_err(e: impl Into<redb::Error>) -> DbError {
    DbError::Redb(Box::new(e.into()))
}

impl From<DbError> for StateError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::State(s) => s,
            e => StateError::Storage(e.to_string()),
        }
    }
}

/// The state database of one volume. Shared by the engine's spaces, the object
/// layer's index and the checkpointer.
pub struct Db {
    db: Arc<redb::Database>,
    lineage: Arc<Lineage>,
    committer: Arc<Committer>,
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
        .map_err(|e| io_error(path, e))
}

/// A file operation on `path` that failed with `e`, as [`DbError::Open`].
fn io_error(path: &Path, e: std::io::Error) -> DbError {
    DbError::Open {
        path: path.to_path_buf(),
        source: Box::new(redb::DatabaseError::Storage(redb::StorageError::Io(e))),
    }
}

/// An error opening the file at `path`: [`DbError::Damaged`] when redb found the
/// file itself unreadable (not a redb file, a bad header or checksum), else
/// [`DbError::Open`] (a missing file, permissions, a file in use).
fn open_error(path: &Path, source: redb::DatabaseError) -> DbError {
    let damaged = match &source {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)) => true,
        redb::DatabaseError::Storage(redb::StorageError::Io(e)) => {
            matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            )
        }
        _ => false,
    };
    if damaged {
        DbError::Damaged {
            path: path.to_path_buf(),
            detail: source.to_string(),
        }
    } else {
        DbError::Open {
            path: path.to_path_buf(),
            source: Box::new(source),
        }
    }
}

/// Runs `open` (an open of the file at `path` and its [`verify`]), turning a panic
/// inside it into [`DbError::Damaged`]. redb trusts a cleanly closed file's
/// allocator pages at open and panics (an `unreachable!`) when one is damaged,
/// before any checksum is checked; nothing else of this crate catches panics.
///
/// A panic caught here is not printed: the panic hook (wrapped once, here) stays
/// quiet for a thread inside `guarded`, and passes every other panic on.
fn guarded<T>(path: &Path, open: impl FnOnce() -> Result<T, DbError>) -> Result<T, DbError> {
    thread_local! {
        static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(|g| g.get()) {
                previous(info);
            }
        }));
    });
    GUARDED.with(|g| g.set(true));
    // Unwind safety: on a panic nothing of `open` survives (the half-opened
    // database is dropped while unwinding); only the error is kept.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(open));
    GUARDED.with(|g| g.set(false));
    result.unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(DbError::Damaged {
            path: path.to_path_buf(),
            detail: format!("redb failed reading it: {what}"),
        })
    })
}

/// Checks every page of the current commit against its checksum before anything
/// reads it (redb would otherwise panic on a damaged page, mid-command). A
/// damaged current commit is refused, never rolled back to the previous one:
/// that commit may hold acknowledged writes. Reads the whole file once.
fn verify(path: &Path, db: &mut redb::Database) -> Result<(), DbError> {
    let damaged = |detail: String| DbError::Damaged {
        path: path.to_path_buf(),
        detail,
    };
    match db.check_integrity() {
        Ok(true) => Ok(()),
        Ok(false) => Err(damaged(
            "its last commit failed its checksums and was rolled back, or its page \
             allocation had to be rebuilt"
                .into(),
        )),
        Err(e) => Err(damaged(e.to_string())),
    }
}

fn u64_of(b: &[u8]) -> Result<u64, DbError> {
    b.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| DbError::Snapshot(format!("{} bytes where 8 were expected", b.len())))
}

/// A fresh random generation in slot bank `bank` (`oram_state::bank_of`;
/// never 0, the in-memory states' generation).
fn random_generation(bank: u8) -> u64 {
    let banks = u64::from(oram_state::BANKS);
    loop {
        let g: u64 = rand::random();
        match (g - g % banks).checked_add(u64::from(bank)) {
            Some(g) if g != 0 => return g,
            _ => continue,
        }
    }
}

/// The generation a restore from a snapshot written in `generation` draws: in
/// the next slot bank, so that nothing the restored state writes goes to an
/// object name the snapshot's timeline may still be writing
/// (`oram_state::BANKS`).
fn restored_generation(generation: u64) -> u64 {
    random_generation((oram_state::bank_of(generation) + 1) % oram_state::BANKS)
}

impl Db {
    /// Opens the database at `path` for volume `volume`, creating it (in a fresh
    /// random generation) if absent. Blocks on file I/O and an fsync: call it from
    /// a blocking context at start-up.
    ///
    /// Refuses a database of another [`FORMAT`] or another volume.
    pub fn open(path: &Path, volume: [u8; 16]) -> Result<Arc<Self>, DbError> {
        Self::open_with_cache(path, volume, DEFAULT_CACHE_BYTES)
    }

    /// [`Db::open`] with a page cache of at most `cache_bytes` (pages beyond it
    /// are read from the file again, usually from the kernel's page cache).
    pub fn open_with_cache(
        path: &Path,
        volume: [u8; 16],
        cache_bytes: usize,
    ) -> Result<Arc<Self>, DbError> {
        let db = Self::create(path, cache_bytes)?;
        write_now(&db, |txn| {
            for t in Table::ALL {
                txn.open_table(def(t))?;
            }
            let mut meta = txn.open_table(def(Table::Meta))?;
            if meta.get(&b"format"[..])?.is_none() {
                meta.insert(&b"format"[..], &u64::from(FORMAT).to_be_bytes()[..])?;
                meta.insert(&b"volume"[..], &volume[..])?;
                meta.insert(&b"epoch"[..], &0u64.to_be_bytes()[..])?;
                meta.insert(&b"generation"[..], &random_generation(0).to_be_bytes()[..])?;
            }
            Ok(())
        })?;
        Self::start(db, volume)
    }

    fn create(path: &Path, cache_bytes: usize) -> Result<redb::Database, DbError> {
        create_private(path)?;
        guarded(path, || {
            let mut db = redb::Builder::new()
                .set_cache_size(cache_bytes)
                .create(path)
                .map_err(|source| open_error(path, source))?;
            verify(path, &mut db)?;
            Ok(db)
        })
    }

    /// Checks format and volume, loads the lineage, starts the committer.
    fn start(db: redb::Database, volume: [u8; 16]) -> Result<Arc<Self>, DbError> {
        let meta = |name: &str| read_meta(&db, name);
        let format = meta("format")?
            .map(|b| u64_of(&b))
            .transpose()?
            .unwrap_or(0);
        if format != u64::from(FORMAT) {
            return Err(DbError::Format {
                found: format as u32,
            });
        }
        if meta("volume")?.as_deref() != Some(&volume[..]) {
            return Err(DbError::OtherVolume);
        }
        let epoch = meta("epoch")?.map(|b| u64_of(&b)).transpose()?.unwrap_or(0);
        let generation = meta("generation")?
            .map(|b| u64_of(&b))
            .transpose()?
            .unwrap_or(0);
        // The checkpoint recorded as uploaded (see `Db::set_landed`).
        let uploaded = meta("checkpoint_uploaded")?
            .map(|b| u64_of(&b))
            .transpose()?;
        let lineage = Lineage::new(epoch, generation);
        if let Some(k) = uploaded {
            lineage.set_landed(k + 1);
        }
        let db = Arc::new(db);
        let committer = Committer::start(db.clone()).map_err(DbError::Thread)?;
        Ok(Arc::new(Self {
            db,
            lineage: Arc::new(lineage),
            committer: Arc::new(committer),
        }))
    }

    /// Builds a new database at `path` from a [`Db::snapshot`] of volume `volume`,
    /// in a **new random generation** (so that objects the lost timeline wrote
    /// after the snapshot never open as current). Fails if `path` exists. Blocks
    /// on file I/O.
    pub fn restore(path: &Path, volume: [u8; 16], snapshot: &[u8]) -> Result<Arc<Self>, DbError> {
        Self::restore_replaying(path, volume, snapshot, &[])
    }

    /// [`Db::restore`], then the change sets of the shipped log after the
    /// snapshot applied in order (all in one transaction). The new generation
    /// starts a new log stream (`log_end` 0).
    pub fn restore_replaying(
        path: &Path,
        volume: [u8; 16],
        snapshot: &[u8],
        log: &[oram_state::ChangeSet],
    ) -> Result<Arc<Self>, DbError> {
        if path.exists() {
            return Err(DbError::Exists(path.to_path_buf()));
        }
        let tables = parse_snapshot(snapshot)?;
        let generation = restored_generation(snapshot_meta(&tables, "generation")?);
        let db = Self::create(path, DEFAULT_CACHE_BYTES)?;
        write_now(&db, |txn| {
            for t in Table::ALL {
                let mut table = txn.open_table(def(t))?;
                for (k, v) in tables.get(t.name()).into_iter().flatten() {
                    table.insert(&k[..], &v[..])?;
                }
            }
            committer::apply(txn, log.iter())?;
            let mut meta = txn.open_table(def(Table::Meta))?;
            meta.insert(&b"generation"[..], &generation.to_be_bytes()[..])?;
            meta.insert(log::LOG_END.as_bytes(), &0u64.to_be_bytes()[..])?;
            Ok(())
        })?;
        Self::start(db, volume)
    }

    /// The shipped log's stream offset after the last durable commit (0 if the log
    /// was never shipped in this generation).
    pub fn log_end(&self) -> Result<u64, DbError> {
        Ok(self
            .meta(log::LOG_END)?
            .map(|b| u64_of(&b))
            .transpose()?
            .unwrap_or(0))
    }

    /// Ships every commit from now on: a commit resolves only when its changes
    /// are durable here and the returned log's shipper reports them landed on the
    /// backend. The stream continues where the last shipped commit of this
    /// database left it. Call it before anything commits; fails if called twice.
    pub fn ship_log(&self) -> Result<Arc<ShipLog>, DbError> {
        let log = Arc::new(ShipLog::new(self.log_end()?));
        self.committer
            .ship_to(log.clone())
            .map_err(|_| DbError::Snapshot("the log is shipped already".into()))?;
        Ok(log)
    }

    /// The group committer every view of this database commits through.
    pub fn committer(&self) -> &Arc<Committer> {
        &self.committer
    }

    /// The first failure of a commit, if the database failed.
    pub fn failure(&self) -> Option<String> {
        self.committer.failure()
    }

    /// Makes the next commit fail (and with it the database, as a real I/O error
    /// would). Only for tests: a real disk cannot be made to fail one chosen
    /// transaction on demand.
    #[doc(hidden)]
    pub fn inject_commit_failure(&self) {
        self.committer.inject_failure();
    }

    /// The checkpoint epoch: the number of checkpoints completed.
    pub fn epoch(&self) -> u64 {
        self.lineage.epoch()
    }

    /// The generation this database writes in.
    pub fn generation(&self) -> u64 {
        self.lineage.generation()
    }

    /// Records (durably) that checkpoint `epoch - 1` is complete: writes from now
    /// on belong to `epoch`. Call it with the engines quiesced.
    pub async fn set_epoch(&self, epoch: u64) -> Result<(), DbError> {
        self.set_meta("epoch", &epoch.to_be_bytes()).await?;
        self.lineage.set_epoch(epoch);
        Ok(())
    }

    /// Records that the checkpoint which began `epoch` is on the backend (after
    /// its upload landed; loaded again at open from the `checkpoint_uploaded`
    /// value): engines may then delete the objects it and the state no longer
    /// refer to ([`oram_state::Lineage::landed`]).
    pub fn set_landed(&self, epoch: u64) {
        self.lineage.set_landed(epoch);
    }

    /// The epoch begun by the last checkpoint known to be on the backend.
    pub fn landed(&self) -> u64 {
        self.lineage.landed()
    }

    /// A named value (a short read transaction).
    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, DbError> {
        read_meta(&self.db, name)
    }

    /// Stores a named value through the committer; durable when the future
    /// resolves.
    pub fn set_meta(&self, name: &str, value: &[u8]) -> CommitFuture {
        let mut cs = oram_state::ChangeSet::default();
        cs.push(Table::Meta, name.as_bytes().to_vec(), Some(value.to_vec()));
        self.committer.submit(cs)
    }

    /// Serialises every table as of the last durable commit (one consistent read
    /// transaction). Reads the whole file: call it from a blocking context.
    pub fn snapshot(&self) -> Result<Vec<u8>, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let mut out = SNAPSHOT_MAGIC.to_vec();
        for t in Table::ALL {
            let name = t.name();
            let table = txn.open_table(def(t)).map_err(redb_err)?;
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

    /// Loads the trusted state of engine space `space` (empty if never used).
    /// Several spaces may be loaded at once; their changes can be committed
    /// together ([`oram_state::Staged::merge`]).
    pub fn state(self: &Arc<Self>, space: Space) -> Result<DbState, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let prefix = space.0.to_be_bytes();
        let mut rows = Vec::new();
        for t in Table::ALL {
            if matches!(t, Table::Kv | Table::Meta) {
                continue;
            }
            let table = txn.open_table(def(t)).map_err(redb_err)?;
            for entry in table.range(&prefix[..]..).map_err(redb_err)? {
                let (k, v) = entry.map_err(redb_err)?;
                if !k.value().starts_with(&prefix) {
                    break;
                }
                rows.push((t, k.value()[4..].to_vec(), v.value().to_vec()));
            }
        }
        let sink: Arc<dyn Durable> = self.committer.clone();
        // Weak: a state must not keep the database (and its file lock) alive.
        let db = Arc::downgrade(self);
        let opener: oram_state::Opener = Arc::new(move |space| {
            let db = db.upgrade().ok_or_else(|| {
                oram_state::StateError::Failed("the state database is closed".into())
            })?;
            db.state(space)
                .map_err(|e| oram_state::StateError::Storage(e.to_string()))
        });
        Ok(
            SpaceState::from_rows(space, self.lineage.clone(), Some(sink), rows)?
                .with_opener(opener),
        )
    }

    /// The object index's entries whose keys start with `prefix`, in key order:
    /// a read of the local file only (`oram-proxy stats` with no proxy running).
    pub fn kv_prefix(&self, prefix: &[u8]) -> Result<Vec<KvEntry>, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let table = txn.open_table(def(Table::Kv)).map_err(redb_err)?;
        let mut out = Vec::new();
        for entry in table.range(prefix..).map_err(redb_err)? {
            let (k, v) = entry.map_err(redb_err)?;
            if !k.value().starts_with(prefix) {
                break;
            }
            out.push((k.value().to_vec(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Loads the object index.
    pub fn kv(self: &Arc<Self>) -> Result<DbKv, DbError> {
        let txn = self.db.begin_read().map_err(redb_err)?;
        let table = txn.open_table(def(Table::Kv)).map_err(redb_err)?;
        let mut map = BTreeMap::new();
        for entry in table.iter().map_err(redb_err)? {
            let (k, v) = entry.map_err(redb_err)?;
            map.insert(k.value().to_vec(), v.value().to_vec());
        }
        let sink: Arc<dyn Durable> = self.committer.clone();
        Ok(KvMap::with_sink(map, Some(sink)))
    }
}

/// A key and its value in the object index.
pub type KvEntry = (Vec<u8>, Vec<u8>);

fn read_meta(db: &redb::Database, name: &str) -> Result<Option<Vec<u8>>, DbError> {
    let txn = db.begin_read().map_err(redb_err)?;
    let t = txn.open_table(def(Table::Meta)).map_err(redb_err)?;
    Ok(t.get(name.as_bytes())
        .map_err(redb_err)?
        .map(|v| v.value().to_vec()))
}

/// One durable write transaction on the caller's thread (open and restore only,
/// before the committer runs).
fn write_now(
    db: &redb::Database,
    f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
) -> Result<(), DbError> {
    let txn = db.begin_write().map_err(redb_err)?;
    match f(&txn) {
        Ok(()) => txn.commit().map_err(redb_err),
        Err(e) => {
            let _ = txn.abort();
            Err(redb_err(e))
        }
    }
}

type SnapshotTables = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

/// Where a [`Db::snapshot`] stands in the shipped log: `(generation, stream
/// offset)`. The log records after it are those of that generation from that
/// offset on.
pub fn snapshot_position(snapshot: &[u8]) -> Result<(u64, u64), DbError> {
    let tables = parse_snapshot(snapshot)?;
    Ok((
        snapshot_meta(&tables, "generation")?,
        snapshot_meta(&tables, log::LOG_END)?,
    ))
}

/// The named value `name` of a parsed snapshot (0 if absent).
fn snapshot_meta(tables: &SnapshotTables, name: &str) -> Result<u64, DbError> {
    tables
        .get(Table::Meta.name())
        .into_iter()
        .flatten()
        .find(|(k, _)| k == name.as_bytes())
        .map(|(_, v)| u64_of(v))
        .transpose()
        .map(|v| v.unwrap_or(0))
}

fn parse_snapshot(mut s: &[u8]) -> Result<SnapshotTables, DbError> {
    fn take<'a>(s: &mut &'a [u8], n: usize) -> Result<&'a [u8], DbError> {
        if s.len() < n {
            return Err(DbError::Snapshot("truncated".into()));
        }
        let (a, b) = s.split_at(n);
        *s = b;
        Ok(a)
    }
    let magic = take(&mut s, 8)?;
    if magic != SNAPSHOT_MAGIC {
        return Err(DbError::Snapshot(if magic == b"ORAMSNP1" {
            "a snapshot of an older oram-proxy (state format 1)".into()
        } else {
            "not a state snapshot".into()
        }));
    }
    let mut out = SnapshotTables::new();
    for t in Table::ALL {
        let name = t.name();
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

#[cfg(test)]
mod tests;
