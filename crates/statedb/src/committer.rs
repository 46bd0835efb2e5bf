//! The group committer: one dedicated thread that writes the change sets of every
//! caller (engine spaces, the object index, named values) to redb, many at a time,
//! each group in one write transaction with one fsync.
//!
//! Callers never block: [`Committer::submit`] queues a change set (its place in
//! the commit order is the call's) and returns a future. No fsync runs on a tokio
//! worker thread or under a lock: only this thread writes.
//!
//! Failure is final (redb is fail-stop after an I/O error): the group whose
//! transaction fails and every later submission fail, with the first error, until
//! the process restarts and reloads the last durable state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use futures::channel::oneshot;
use oram_state::{ChangeSet, CommitFuture, Durable, StateError, Table};
use redb::TableDefinition;

use crate::log::{encode_groups, ShipLog, LOG_END};

/// Change sets taken per transaction at most (bounds one transaction's size).
const MAX_GROUP: usize = 4096;

pub(crate) type Raw = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// The redb table behind a state table.
pub(crate) fn def(t: Table) -> Raw {
    TableDefinition::new(t.name())
}

/// How a commit ended, for every waiter of its group.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Done,
    /// This group's transaction failed.
    Failed(String),
    /// An earlier group failed.
    FailedEarlier(String),
}

struct Job {
    changes: ChangeSet,
    done: oneshot::Sender<Outcome>,
    /// Answered once durable here, not waiting for the shipped log.
    local: bool,
}

/// State shared between the committer thread and its handle.
#[derive(Default)]
struct Shared {
    /// The first failure; set once, never cleared. The lock guards only this
    /// string (no I/O under it).
    failed: Mutex<Option<String>>,
    inject: AtomicBool,
    /// Taken by the thread between receiving a group's first change set and
    /// collecting the rest (a test holds it to make a group deterministic).
    gate: Mutex<()>,
    groups: AtomicU64,
    commits: AtomicU64,
    /// The shipped log, once [`Committer::ship_to`] set it: then a commit
    /// resolves only when its group has also landed on the backend.
    log: OnceLock<Arc<ShipLog>>,
}

/// The handle of the committer thread. Dropping the last handle stops the thread
/// (after the groups already queued) and waits for it.
pub struct Committer {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("failed", &self.failure())
            .finish_non_exhaustive()
    }
}

impl Committer {
    /// Starts the thread writing to `db`.
    pub(crate) fn start(db: Arc<redb::Database>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("oram-state-commit".into())
            .spawn(move || run(&db, &rx, &sh))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            shared,
        })
    }

    /// The first failure, if the store failed.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.failed).clone()
    }

    /// Makes the next group fail before it writes anything (and so fails the
    /// store, as a real I/O error would). Only for tests: a real disk cannot be
    /// made to fail one chosen transaction on demand.
    pub fn inject_failure(&self) {
        self.shared.inject.store(true, Ordering::SeqCst);
    }

    /// Holds the committer before its next group until the guard is dropped, so
    /// that everything submitted meanwhile is written as one group. Only for
    /// tests: it makes group sharing deterministic.
    #[doc(hidden)]
    pub fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        lock(&self.shared.gate)
    }

    /// From now on, every group is also appended to `log`, and its commits
    /// resolve only once the log's shipper has landed it. Set once, before the
    /// first commit that must be shipped; a second call fails.
    pub(crate) fn ship_to(&self, log: Arc<ShipLog>) -> Result<(), Arc<ShipLog>> {
        self.shared.log.set(log)
    }

    /// `(groups written, change sets written)` so far: how much sharing there was.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.groups.load(Ordering::Relaxed),
            self.shared.commits.load(Ordering::Relaxed),
        )
    }
}

impl Durable for Committer {
    fn submit(&self, changes: ChangeSet) -> CommitFuture {
        self.queue(changes, false)
    }

    fn submit_local(&self, changes: ChangeSet) -> CommitFuture {
        self.queue(changes, true)
    }
}

impl Committer {
    fn queue(&self, changes: ChangeSet, local: bool) -> CommitFuture {
        let (done, rx) = oneshot::channel();
        let sent = self.tx.as_ref().is_some_and(|tx| {
            tx.send(Job {
                changes,
                done,
                local,
            })
            .is_ok()
        });
        Box::pin(async move {
            if !sent {
                return Err(StateError::Failed("the state database is closed".into()));
            }
            match rx.await {
                Ok(Outcome::Done) => Ok(()),
                Ok(Outcome::Failed(e)) => Err(StateError::Storage(e)),
                Ok(Outcome::FailedEarlier(e)) => Err(StateError::Failed(e)),
                Err(_) => Err(StateError::Failed("the state committer stopped".into())),
            }
        })
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            // The thread ends once the queue is drained; a panic there already
            // failed every waiter (their senders dropped).
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(db: &redb::Database, rx: &mpsc::Receiver<Job>, shared: &Shared) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        drop(lock(&shared.gate));
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let earlier = lock(&shared.failed).clone();
        let log = shared.log.get();
        // With a shipped log: the group's bytes, and the stream offset after them
        // (recorded in the same transaction).
        // A group of empty change sets adds nothing: its commits wait only for
        // what is already in the stream.
        let empty = jobs.iter().all(|j| j.changes.is_empty());
        let mut unshippable = None;
        let group = log.and_then(|l| {
            let bytes = if empty {
                Vec::new()
            } else {
                match encode_groups(&jobs.iter().map(|j| &j.changes).collect::<Vec<_>>()) {
                    Ok(b) => b,
                    Err(e) => {
                        unshippable = Some(e.to_string());
                        return None;
                    }
                }
            };
            let end = l.end() + bytes.len() as u64;
            Some((bytes, end))
        });
        let outcome = if let Some(e) = earlier {
            Outcome::FailedEarlier(e)
        } else if let Some(e) = unshippable {
            // Nothing written or shipped: these commits fail, later ones may not.
            Outcome::Failed(e)
        } else {
            let result = if shared.inject.swap(false, Ordering::SeqCst) {
                Err("injected commit failure".to_string())
            } else {
                write(db, &jobs, group.as_ref().filter(|_| !empty).map(|g| g.1))
            };
            match result {
                Ok(()) => {
                    shared.groups.fetch_add(1, Ordering::Relaxed);
                    shared
                        .commits
                        .fetch_add(jobs.len() as u64, Ordering::Relaxed);
                    Outcome::Done
                }
                Err(e) => {
                    *lock(&shared.failed) = Some(e.clone());
                    Outcome::Failed(e)
                }
            }
        };
        match (log, group, &outcome) {
            // Durable here; answered once it has landed there too.
            (Some(l), Some((bytes, _)), Outcome::Done) => {
                let (local, shipped): (Vec<Job>, Vec<Job>) =
                    jobs.into_iter().partition(|j| j.local);
                // In the stream first: a local commit, once answered, is in it
                // (the shipped-log test checks its bytes wait there).
                l.append(&bytes, shipped.into_iter().map(|j| j.done));
                for j in local {
                    let _ = j.done.send(Outcome::Done);
                }
            }
            _ => {
                for j in jobs {
                    // A waiter that went away does not care.
                    let _ = j.done.send(outcome.clone());
                }
            }
        }
    }
}

/// Applies change sets to `txn` as if one after the other: table by table, each
/// table's writes in order (a later write of a key wins). Used by the committer
/// and by a restore replaying the shipped log.
pub(crate) fn apply<'a>(
    txn: &redb::WriteTransaction,
    sets: impl Iterator<Item = &'a ChangeSet> + Clone,
) -> Result<(), redb::Error> {
    for t in Table::ALL {
        let mut writes = sets
            .clone()
            .flat_map(|c| c.writes.iter())
            .filter(|w| w.table == t)
            .peekable();
        if writes.peek().is_none() {
            continue;
        }
        let mut table = txn.open_table(def(t))?;
        for w in writes {
            match &w.value {
                Some(v) => {
                    table.insert(&w.key[..], &v[..])?;
                }
                None => {
                    table.remove(&w.key[..])?;
                }
            }
        }
    }
    Ok(())
}

/// Writes every job's changes, in order, in one durable transaction.
///
/// With `log_end`, the named value `log_end` is set to it in the same transaction.
fn write(db: &redb::Database, jobs: &[Job], log_end: Option<u64>) -> Result<(), String> {
    if log_end.is_none() && jobs.iter().all(|j| j.changes.is_empty()) {
        // Nothing to write: everything queued before is durable already.
        return Ok(());
    }
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    let applied = (|| -> Result<(), redb::Error> {
        apply(&txn, jobs.iter().map(|j| &j.changes))?;
        if let Some(end) = log_end {
            txn.open_table(def(Table::Meta))?
                .insert(LOG_END.as_bytes(), &end.to_be_bytes()[..])?;
        }
        Ok(())
    })();
    match applied {
        Ok(()) => txn.commit().map_err(|e| e.to_string()),
        Err(e) => {
            let _ = txn.abort();
            Err(e.to_string())
        }
    }
}
