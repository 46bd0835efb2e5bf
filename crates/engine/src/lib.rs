//! The ORAM engine interface.
//!
//! An engine stores logical blocks of `block_size()` bytes on an untrusted
//! [`oram_blockstore::BlockStore`] and serves batches of operations ([`Op`]).
//! What the storage server may learn from a batch is stated by each engine; for the
//! oblivious engines it is the number of operations (`ops.len()`) and their timing.
//!
//! Besides reads and writes, the operations a partition framework needs are here:
//! read-and-remove ([`Op::Take`]), dummy accesses ([`Op::Dummy`]), block ids wider
//! than one sub-ORAM's capacity ([`Oram::id_limit`]) and a *staged* access
//! ([`Oram::access_staged`]) whose changes a parent commits, once, together with
//! other engines' ([`StagedAccess::commit_all`]).
//!
//! [`EngineSettings`] is what each engine crate's configuration implements, so that
//! the binary builds engines without knowing their internals, and its
//! [`EngineModel`] says what an engine's configuration implies; the `conformance`
//! feature brings the test suite every engine runs ([`conformance`]).
//! [`Combined`] wraps any engine so that concurrent callers share its rounds.

mod combine;
#[cfg(feature = "conformance")]
pub mod conformance;
mod model;
mod placement;
mod settings;
mod staged;
mod steps;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::StoreError;
use oram_seal::SealError;
use oram_state::StateError;

pub use combine::{Admit, Combined};
pub use model::{
    EngineModel, HierarchyLayout, Layout, PartitionLayout, Traffic, TreeLayout,
    SLOTS_PER_DIRECT_BLOCK, SLOTS_PER_POSITION,
};
pub use placement::{Local, LocalSub, Placement, RoundId};
pub use settings::{adopt_value, recorded_value, snapshot_row, EngineSettings, Parts, Shape};
pub use staged::StagedAccess;
pub use steps::{Step, StepClock};

/// One logical operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read a block; a block never written reads as zeros.
    Read(u64),
    /// Write a block; the data must be exactly `block_size()` bytes.
    Write(u64, Bytes),
    /// Read a block and remove it: its data is answered and the engine no longer
    /// stores it (it reads as zeros afterwards). For moving a block to another
    /// partition. Looks like any other access.
    Take(u64),
    /// An access of no block, indistinguishable from a read to the storage server.
    /// Answers an empty `Bytes`.
    Dummy,
    /// Store a block the engine does not hold, **without an access of its own**:
    /// it joins what the batch's other operations write back (a tree engine's
    /// stash, evicted along the paths the round reads). For a partition
    /// framework's eviction into a partition it is accessing anyway: the storage
    /// server sees nothing for it. Answers an empty `Bytes`. Inserting a block the
    /// engine holds (and no earlier op of the batch took) is refused
    /// ([`OramError::Unsupported`]): its old copy would stay where no round reads
    /// it. Each access may carry at most one insert on average, or the engine's
    /// stash grows beyond what its bound was computed for.
    Insert(u64, Bytes),
}

impl Op {
    /// The logical block the operation is for (`None` for a dummy).
    pub fn block(&self) -> Option<u64> {
        match self {
            Op::Read(b) | Op::Write(b, _) | Op::Take(b) | Op::Insert(b, _) => Some(*b),
            Op::Dummy => None,
        }
    }

    /// Whether the operation is an access of its own (everything but an
    /// [`Op::Insert`]): what the storage server sees one access for.
    pub fn accesses(&self) -> bool {
        !matches!(self, Op::Insert(..))
    }

    /// Whether the operation changes what is stored (a write or a take): its
    /// answer must wait until the change is durable.
    pub fn mutates(&self) -> bool {
        matches!(self, Op::Write(..) | Op::Take(_) | Op::Insert(..))
    }
}

/// Errors of an engine.
#[derive(Debug, thiserror::Error)]
pub enum OramError {
    /// The backend failed; the access had no effect and may be retried.
    #[error("backend: {0}")]
    Store(#[from] StoreError),
    /// A backend object failed authentication, is missing, or holds something it
    /// must not, or a block is not where the trusted state says: the backend was
    /// tampered with (or rolled back). No data is returned.
    #[error("integrity violation at {key}: {reason}")]
    Integrity {
        /// The backend object concerned.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// The stash holds more blocks than its configured bound after eviction. The
    /// batch was applied and nothing was lost, but the bound is a security and
    /// memory parameter: the operator must look at the configuration.
    #[error("stash overflow: {size} blocks exceed the bound of {bound}")]
    StashOverflow {
        /// Blocks in the stash.
        size: usize,
        /// The configured bound.
        bound: usize,
    },
    /// A block id at or beyond the engine's id limit.
    #[error("block {block} out of range (limit {capacity})")]
    BlockOutOfRange {
        /// The block asked for.
        block: u64,
        /// The engine's id limit.
        capacity: u64,
    },
    /// A write whose data is not exactly one block.
    #[error("write of block {block}: {got} bytes, block size is {want}")]
    WrongBlockSize {
        /// The block written.
        block: u64,
        /// Bytes given.
        got: usize,
        /// The block size.
        want: usize,
    },
    /// Sealing failed (nonce space exhausted, object too large).
    #[error("sealing: {0}")]
    Seal(SealError),
    /// The trusted state failed (a failed commit stops the engine until the
    /// process restarts).
    #[error("trusted state: {0}")]
    State(#[from] StateError),
    /// The engine's parameters are unusable.
    #[error("invalid engine configuration: {0}")]
    Config(String),
    /// The engine does not offer this operation.
    #[error("not supported by this engine: {0}")]
    Unsupported(&'static str),
}

impl OramError {
    /// A transient backend failure: the operation may be tried again.
    pub fn unavailable(why: impl Into<String>) -> Self {
        Self::Store(StoreError::Unavailable(why.into()))
    }

    /// Whether this is [`OramError::unavailable`]: something the engine
    /// depends on cannot answer now (a cluster's partition between members).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Store(StoreError::Unavailable(_)))
    }
}

/// Result type of engine operations.
pub type Result<T, E = OramError> = std::result::Result<T, E>;

/// Whether a statistic counts up or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// Only grows (a Prometheus counter).
    Counter,
    /// A level now (a Prometheus gauge).
    Gauge,
}

/// One engine-specific statistic (Ring ORAM's evictions, say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Metric name without prefix, `snake_case` (e.g. `evictions_total`).
    pub name: &'static str,
    /// One line saying what it counts.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: StatKind,
    /// The value now.
    pub value: u64,
}

/// Counters an engine exposes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Logical block accesses served.
    pub accesses: u64,
    /// Rounds (batches sent to the backend together).
    pub rounds: u64,
    /// Blocks in the stash now.
    pub stash_len: u64,
    /// Largest stash seen after any round.
    pub stash_max: u64,
    /// Sum of the stash size after every round (mean = sum / rounds).
    pub stash_sum: u64,
    /// Write-backs waiting for the backend now (tree engines: rounds writing
    /// their buckets before their commit).
    pub pending_writebacks: u64,
    /// Backend write attempts (write-backs, or a round's bucket writes) that
    /// failed and were retried.
    pub writeback_retries: u64,
    /// Engine-specific statistics, in a fixed order.
    pub extra: Vec<Stat>,
}

/// Adds `stat` to the statistic of the same name in `stats` (summing the
/// values), or appends it: how several partitions' statistics become one list,
/// in first-seen order.
pub fn add_stat_by_name(stats: &mut Vec<Stat>, stat: Stat) {
    match stats.iter_mut().find(|c| c.name == stat.name) {
        Some(c) => c.value += stat.value,
        None => stats.push(stat),
    }
}

impl EngineStats {
    /// Mean stash size after a round.
    pub fn stash_mean(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            self.stash_sum as f64 / self.rounds as f64
        }
    }

    /// The engine-specific statistic `name`, if the engine has it.
    pub fn extra(&self, name: &str) -> Option<u64> {
        self.extra.iter().find(|s| s.name == name).map(|s| s.value)
    }
}

/// An engine storing fixed-size logical blocks on an untrusted store.
///
/// `&self` so that concurrent requests reach the engine at once; each engine
/// serialises or parallelises internally.
#[async_trait]
pub trait Oram: Send + Sync {
    /// Short engine name (`path`, `direct`, ...).
    fn name(&self) -> &'static str;
    /// Bytes per logical block.
    fn block_size(&self) -> usize;
    /// Number of logical blocks the engine has room for.
    fn capacity(&self) -> u64;
    /// Block ids are `0..id_limit()`: the capacity, unless the engine is a
    /// partition of a larger id space (it then holds at most `capacity()` blocks
    /// at once, with ids up to the limit).
    fn id_limit(&self) -> u64 {
        self.capacity()
    }

    /// Performs `ops` in order and returns one result per op: the block's data for
    /// a `Read` or `Take`, an empty `Bytes` for a `Write` or `Dummy`. Later ops see
    /// earlier writes. Returns once the changes are durable; a batch of reads only
    /// may be answered before the bookkeeping of its round is (see each engine).
    ///
    /// Observed by the storage server: depends on the engine; an oblivious engine
    /// reveals only `ops.len()` and the timing.
    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>>;

    /// As [`Oram::access`], calling `admitted` once the engine has put this
    /// call in its order: a call made after that is served after this one (it
    /// sees this call's writes), and may overlap it. An engine that serves one
    /// call at a time (the default) admits the next when this one returns;
    /// one with several rounds in flight ([`Combined`] makes use of it) admits
    /// it as soon as a new round could begin: once this call's last round has
    /// its place in the order and has read (its writes and commit may still
    /// be under way). A caller sharing calls gathers the next call's requests
    /// then, not earlier, so that the call carries every request that arrived
    /// while this one read.
    ///
    /// Observed: as [`Oram::access`].
    async fn access_admitting(&self, ops: Vec<Op>, admitted: Admit) -> Result<Vec<Bytes>> {
        let out = self.access(ops).await;
        admitted.admit();
        out
    }

    /// Performs `ops` (at most one round's worth) like [`Oram::access`], but does
    /// not commit: the caller commits the returned changes, together with other
    /// engines' and its own, with [`StagedAccess::commit_all`]. Until then the
    /// engine serves nothing else; dropping the access uncommitted undoes it (its
    /// reads were still seen, as for a failed access).
    async fn access_staged(&self, ops: Vec<Op>) -> Result<StagedAccess> {
        let _ = ops;
        Err(OramError::Unsupported("staged access"))
    }

    /// As [`Oram::access_staged`], as part of its parent's round `round`. An
    /// engine served in this process ignores the round (the default); a
    /// partition served on another machine uses it to answer the repetition
    /// of a round it already committed from what it recorded, with no access.
    async fn access_staged_round(&self, round: RoundId, ops: Vec<Op>) -> Result<StagedAccess> {
        let _ = round;
        self.access_staged(ops).await
    }

    /// Waits until every access already answered is stored on the backend, retrying
    /// failed write-backs once.
    async fn flush(&self) -> Result<()>;

    /// The engine's counters.
    fn stats(&self) -> EngineStats;

    /// Waits until every write is on the backend and the trusted state committed,
    /// then holds off every access until the returned guard is dropped: the backend
    /// and the trusted state stay consistent with each other meanwhile (for a
    /// checkpoint). Observed: the write-backs still pending, then silence.
    async fn quiesce(&self) -> Result<Quiesced>;

    /// Verifies every invariant of the engine against the backend: reads every
    /// object the trusted state refers to, checks that it opens with its version,
    /// and that every written block is stored exactly once where it belongs.
    /// Calls `progress(done, total)` as it goes. Integrity problems are collected in
    /// the report; only a backend failure ends the check with an error.
    ///
    /// Observed: a GET of every written position in position order (the same for
    /// any contents), with accesses held off meanwhile.
    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport>;

    /// Deletes the engine's backend objects that the trusted state does not refer to
    /// (left by writes after the checkpoint a state was rebuilt from). Returns how
    /// many. Observed: a LIST of the engine's objects and DELETEs of the unused ones.
    async fn sweep(&self) -> Result<u64>;

    /// Deletes at once the backend objects the engine superseded and no longer
    /// needs (after a checkpoint landed) that it would otherwise delete a batch
    /// at a time in its next rounds; holds accesses off meanwhile. For a clean
    /// stop, after its checkpoint, so that a stopped volume keeps one object per
    /// position. Returns how many keys it deleted. Engines that keep nothing
    /// superseded do nothing (the default).
    ///
    /// Observed: DELETEs of positions' other slots, positions written before
    /// the last checkpoint (see the engine).
    async fn collect(&self) -> Result<u64> {
        Ok(0)
    }

    /// After a checkpoint landed, while serving: deletes the superseded
    /// objects the engine does not delete within its rounds, holding off only
    /// the accesses of the part being collected (a partition), not all of
    /// them. Returns how many keys it deleted. Engines that delete their
    /// superseded objects with their rounds (the tree engines) or keep none do
    /// nothing (the default).
    ///
    /// Observed: DELETEs of objects written before the last checkpoint and
    /// superseded since, right after that checkpoint (see the engine).
    async fn collect_while_serving(&self) -> Result<u64> {
        Ok(0)
    }

    /// At most how many objects the engine keeps beyond one per position since
    /// its last checkpoint began (the checkpoint's own, and earlier versions
    /// written before their commit), which a checkpoint that lands lets it
    /// delete ([`Oram::collect`]): for taking a checkpoint early when they grow.
    /// `None` for engines that keep nothing superseded or do not count it. A
    /// count of what the storage server saw written (which positions, since
    /// when), so acting on it reveals nothing more.
    fn superseded(&self) -> Option<Superseded> {
        None
    }

    /// Writes every backend object the engine may ever read that was never
    /// written (empty), so that every read finds an object of full size (no
    /// lazy-initialisation pattern). Objects already written are left alone: safe
    /// on an engine holding data, and a second call writes nothing. Calls
    /// `progress(done, total)` as it goes, over the engine's backend positions.
    /// Engines that never read an unwritten object do nothing (the default).
    ///
    /// Observed by the storage server: one PUT per never-written position, in
    /// position order and in batches, with accesses held off meanwhile — which
    /// positions had been written before is revealed (it always was: their reads
    /// did or did not find an object).
    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        progress(0, 0);
        Ok(Formatted::default())
    }

    /// Grows the engine, online, to hold `capacity` blocks (its id limit grows
    /// with it unless it was set wider): accesses keep being served while the
    /// new room is prepared, and the switch to the new size is one commit of
    /// the trusted state — a crash at any point leaves the old size or the new
    /// one, never between, and nothing stored is lost. A growth interrupted by
    /// a crash is resumed by calling `grow` again with the same capacity.
    /// Calls `progress(done, total)` over the objects the growth writes.
    /// Growing to the capacity the engine has is a no-op; shrinking is refused.
    ///
    /// Every engine grows: `path` and `ring` by levels below their leaves,
    /// `direct` by one commit, `curious` and `oblivistore` by growing every
    /// partition alike; an engine that does not (the default, and a cluster's
    /// front) refuses with [`OramError::Unsupported`].
    ///
    /// Observed by the storage server: that the volume grows, by how much (the
    /// new objects) and when; for a tree engine a PUT of every bucket of the
    /// new levels, in node order and in batches beside the rounds (the same
    /// for any contents), each of the size of every other bucket; for a
    /// partitioned engine each partition's growth in turn. Afterwards the
    /// rounds are those of a volume created at the new size.
    async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        let _ = (capacity, progress);
        Err(OramError::Unsupported("growing a volume with this engine"))
    }

    /// Whether [`Oram::grow`] can grow this engine (`false`, the default:
    /// every growth is refused).
    fn grows(&self) -> bool {
        false
    }

    /// The first phase of [`Oram::grow`] alone: writes, beside the rounds,
    /// what the growth to `capacity` needs (a tree's new buckets), and leaves
    /// the engine at its old size; a later `grow` to the same capacity writes
    /// nothing more and switches. Lets a caller that must hold off rounds for
    /// the switch (a partitioned engine growing its partitions) do the long
    /// part without holding them off. Calls `progress(done, total)` over the
    /// objects written. The default prepares nothing: an engine whose growth
    /// writes nothing, or that does not grow (its `grow` refuses).
    ///
    /// Observed by the storage server: the PUTs of [`Oram::grow`], nothing
    /// else.
    async fn grow_prepare(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        let _ = progress;
        Ok(Grown {
            capacity,
            ..Grown::default()
        })
    }
}

/// What [`Oram::grow`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grown {
    /// The capacity in effect afterwards (blocks).
    pub capacity: u64,
    /// The backend objects the growth added (for a tree engine: the buckets of
    /// its new levels), 0 if it was already that large.
    pub positions: u64,
    /// Objects written by this call (those of `positions` an interrupted
    /// growth had not written yet).
    pub written: u64,
}

/// How many backend objects an engine may keep that only its last checkpoint
/// or an earlier state refers to ([`Oram::superseded`]), against its positions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Superseded {
    /// Objects superseded since the last checkpoint, at most.
    pub objects: u64,
    /// The engine's backend positions (one live object each, once written).
    pub positions: u64,
    /// The checkpoint epoch the count is of (a count of an earlier epoch is
    /// stale: no round ran since the checkpoint that ended it).
    pub epoch: u64,
    /// Bytes of one object (the objects counted are all this size).
    pub object_bytes: u64,
}

impl Superseded {
    /// The sum of several engines' counts (a partition framework's), each of
    /// the latest epoch any of them counts in; stale counts are left out.
    pub fn sum(counts: impl IntoIterator<Item = Superseded>) -> Option<Superseded> {
        let counts: Vec<Superseded> = counts.into_iter().collect();
        let epoch = counts.iter().map(|c| c.epoch).max()?;
        Some(Superseded {
            objects: counts
                .iter()
                .filter(|c| c.epoch == epoch)
                .map(|c| c.objects)
                .sum(),
            positions: counts.iter().map(|c| c.positions).sum(),
            epoch,
            object_bytes: counts.iter().map(|c| c.object_bytes).max().unwrap_or(0),
        })
    }
}

/// What [`Oram::format`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Formatted {
    /// The backend positions the engine may read (for a tree engine: its uncached
    /// buckets); 0 for an engine with nothing to format.
    pub positions: u64,
    /// Objects written by this call (the positions never written before).
    pub written: u64,
}

/// Holds off an engine's accesses while alive (see [`Oram::quiesce`]).
pub struct Quiesced(#[allow(dead_code)] Box<dyn Send>);

impl Quiesced {
    /// Wraps the guard that keeps the engine idle.
    pub fn new(guard: impl Send + 'static) -> Self {
        Self(Box::new(guard))
    }
}

/// What [`Oram::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Backend objects read and opened.
    pub objects_read: u64,
    /// Positions whose object could not be checked (integrity problems included).
    pub objects_bad: u64,
    /// Distinct blocks found stored (backend, local buckets, stash).
    pub blocks_found: u64,
    /// Blocks in the stash.
    pub stash_len: u64,
    /// The logical blocks the engine holds data for, ascending.
    pub written_blocks: Vec<u64>,
    /// Everything wrong, one line each (the first 1000).
    pub problems: Vec<String>,
    /// How many problems there were in all.
    pub problems_total: u64,
}

impl CheckReport {
    /// Ends a check: `found` maps every block found stored to where (any value),
    /// `positions` are the blocks the trusted state places somewhere, `journaled`
    /// the write-backs still journaled. A positioned block stored nowhere is a
    /// problem (unless objects could not be read: then it is their problem), as is
    /// anything still journaled after a flush; `blocks_found` and `written_blocks`
    /// are filled from `found`.
    pub fn finish<'a, V>(
        &mut self,
        positions: impl IntoIterator<Item = &'a u64>,
        found: std::collections::HashMap<u64, V>,
        journaled: usize,
    ) {
        for b in positions {
            if !found.contains_key(b) && self.objects_bad == 0 {
                self.problem(format!("block {b} has a position but is stored nowhere"));
            }
        }
        let mut written: Vec<u64> = found.into_keys().collect();
        written.sort_unstable();
        self.blocks_found = written.len() as u64;
        self.written_blocks = written;
        if journaled > 0 {
            self.problem(format!(
                "{journaled} write-backs still journaled after a flush"
            ));
        }
    }

    /// Records a problem (keeps the first 1000).
    pub fn problem(&mut self, p: impl Into<String>) {
        self.problems_total += 1;
        if self.problems.len() < 1000 {
            self.problems.push(p.into());
        }
    }
}

/// Checks an op against an engine's id limit and block size.
pub fn validate_op(op: &Op, id_limit: u64, block_size: usize) -> Result<()> {
    let Some(block) = op.block() else {
        return Ok(());
    };
    if block >= id_limit {
        return Err(OramError::BlockOutOfRange {
            block,
            capacity: id_limit,
        });
    }
    if let Op::Write(_, d) | Op::Insert(_, d) = op {
        if d.len() != block_size {
            return Err(OramError::WrongBlockSize {
                block,
                got: d.len(),
                want: block_size,
            });
        }
    }
    Ok(())
}

/// Maps an error of opening a sealed object to [`OramError`]: authentication
/// failures are integrity violations at `key`.
pub fn open_error(key: &str, e: SealError) -> OramError {
    match e {
        SealError::NonceExhausted | SealError::TooLarge => OramError::Seal(e),
        other => OramError::Integrity {
            key: key.to_string(),
            reason: other.to_string(),
        },
    }
}

/// Runs `work` — a round of an engine — on a task of its own and waits for it. A
/// round, once begun, must run to its end: a caller that goes away (a client
/// disconnecting drops its request's future) must not leave a round half done
/// (changes applied in memory but neither committed nor undone). Detached, the
/// work finishes and its result is dropped (a staged access dropped so is
/// undone). A panic in the work is the caller's panic; a runtime shutting down is
/// a transient backend error.
pub async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    match tokio::spawn(work).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(OramError::Store(StoreError::Unavailable(
            "the engine's runtime is shutting down".into(),
        ))),
    }
}
