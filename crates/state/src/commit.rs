//! Commits: the changes a state hands to durable storage, and the future that
//! says when they are durable.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::StateError;

/// Resolves when the changes handed over by a commit are durable (or the durable
/// store failed). Owns everything it needs: it may be awaited after the lock that
/// guarded the state is released, or on another task.
pub type CommitFuture = Pin<Box<dyn Future<Output = Result<(), StateError>> + Send + 'static>>;

/// A commit future that is already resolved (in-memory states, empty commits).
pub fn ready(result: Result<(), StateError>) -> CommitFuture {
    Box::pin(std::future::ready(result))
}

/// A table of the durable trusted state. Engine tables are keyed by
/// `space (u32 BE) ‖ key`; [`Table::Kv`] by the object layer's own keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Block → leaf.
    Positions,
    /// Backend position → version, slot, epoch, generation.
    Nodes,
    /// Block → data, for blocks in the stash.
    Stash,
    /// Node → bucket, for buckets kept locally (tree-top cache).
    Local,
    /// Engine-chosen byte key → value (per-key metadata).
    KeyMeta,
    /// Backend position → journaled write (version and plaintext).
    Pending,
    /// The intent record of the round in progress (key: the space alone).
    Intent,
    /// The object layer's index.
    Kv,
    /// Named values of the database itself (format, volume, epoch, generation).
    Meta,
}

impl Table {
    /// Every table, in snapshot order.
    pub const ALL: [Table; 9] = [
        Table::Meta,
        Table::Positions,
        Table::Nodes,
        Table::Stash,
        Table::Local,
        Table::KeyMeta,
        Table::Pending,
        Table::Intent,
        Table::Kv,
    ];

    /// The table's name in the database.
    pub fn name(self) -> &'static str {
        match self {
            Table::Positions => "positions",
            Table::Nodes => "nodes",
            Table::Stash => "stash",
            Table::Local => "local",
            Table::KeyMeta => "keymeta",
            Table::Pending => "pending",
            Table::Intent => "intent",
            Table::Kv => "kv",
            Table::Meta => "meta",
        }
    }
}

/// One write of a commit: the new value of `key` in `table` (`None`: deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableWrite {
    /// The table.
    pub table: Table,
    /// The encoded key.
    pub key: Vec<u8>,
    /// The encoded value, or `None` to delete the key.
    pub value: Option<Vec<u8>>,
}

/// The writes of one or more commits, applied in order, atomically.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// The writes, in the order they are applied (a later write of a key wins).
    pub writes: Vec<TableWrite>,
}

impl ChangeSet {
    /// Adds one write.
    pub fn push(&mut self, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.writes.push(TableWrite { table, key, value });
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// Durable storage that takes change sets: the group committer of the state
/// database. [`Durable::submit`] queues the changes at once (their place in the
/// commit order is the call's) and returns a future that resolves when they are
/// durable; concurrent submissions may share one fsync.
pub trait Durable: Send + Sync + 'static {
    /// Queues `changes` to be written in one atomic step.
    fn submit(&self, changes: ChangeSet) -> CommitFuture;

    /// As [`Durable::submit`], but the future resolves once the changes are
    /// durable **here**, without waiting for a shipped log to carry them to the
    /// backend (they are shipped all the same, in order). For a record that only
    /// guards this machine's own crash recovery — a round's intent record, whose
    /// round writes nothing the shipped state refers to and commits again before
    /// any later round writes. Without a shipped log it is [`Durable::submit`].
    fn submit_local(&self, changes: ChangeSet) -> CommitFuture {
        self.submit(changes)
    }
}

/// Changes taken from one or more states (namespaces) of the same durable store,
/// not yet committed: a parent engine merges the staged changes of several
/// namespaces and commits them once, atomically.
#[derive(Default)]
pub struct Staged {
    changes: ChangeSet,
    sink: Option<Arc<dyn Durable>>,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("writes", &self.changes.writes.len())
            .field("durable", &self.sink.is_some())
            .finish()
    }
}

impl Staged {
    /// Changes bound for `sink` (`None`: a state that is not durable).
    pub fn new(changes: ChangeSet, sink: Option<Arc<dyn Durable>>) -> Self {
        Self { changes, sink }
    }

    /// The writes staged.
    pub fn changes(&self) -> &ChangeSet {
        &self.changes
    }

    /// Appends `other`'s changes (applied after these). Both must be bound for the
    /// same durable store (or for none).
    pub fn merge(&mut self, other: Staged) -> Result<(), StateError> {
        match (&self.sink, &other.sink) {
            (Some(a), Some(b)) if !same_sink(a, b) => {
                return Err(StateError::Corrupt(
                    "changes of two different state databases cannot commit together".into(),
                ))
            }
            (None, Some(_)) => self.sink = other.sink.clone(),
            _ => {}
        }
        self.changes.writes.extend(other.changes.writes);
        Ok(())
    }

    /// Hands the changes to their durable store; resolves when they, and
    /// everything submitted to that store before them, are durable. Without a
    /// durable store the future is ready at once.
    pub fn commit(self) -> CommitFuture {
        match self.sink {
            Some(sink) => sink.submit(self.changes),
            None => ready(Ok(())),
        }
    }

    /// As [`Staged::commit`], durable locally only (see [`Durable::submit_local`]).
    pub fn commit_local(self) -> CommitFuture {
        match self.sink {
            Some(sink) => sink.submit_local(self.changes),
            None => ready(Ok(())),
        }
    }
}

fn same_sink(a: &Arc<dyn Durable>, b: &Arc<dyn Durable>) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const (), Arc::as_ptr(b) as *const ())
}
