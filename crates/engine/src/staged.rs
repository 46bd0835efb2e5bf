//! Staged accesses: the changes of an access handed to a parent, which commits
//! them once, together with other engines' and its own.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use oram_state::Staged;

use crate::{OramError, Result};

/// The backend writes a staged access still has to land before its changes may
/// commit (a tree engine's buckets).
type Land = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// How the engine ends a staged round once the parent's commit is settled:
/// `Ok` — the changes are durable (an engine that writes back after its commit
/// starts its write-backs); `Err` — they never will be, undo them in memory.
type Finish = Box<dyn FnOnce(std::result::Result<(), String>) + Send>;

/// An access performed but not committed ([`crate::Oram::access_staged`]). The
/// engine serves nothing else until it is committed or dropped; dropping it
/// uncommitted undoes its changes in the engine's memory.
pub struct StagedAccess {
    answers: Vec<Bytes>,
    changes: Option<Staged>,
    land: Option<Land>,
    /// Whether `land` was started ([`StagedAccess::start_landing`]).
    started: bool,
    finish: Option<Finish>,
}

impl std::fmt::Debug for StagedAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedAccess")
            .field("answers", &self.answers.len())
            .field("changes", &self.changes)
            .finish()
    }
}

impl StagedAccess {
    /// An access with `answers`, whose trusted-state `changes` are not committed;
    /// `finish` is called once with the outcome of their commit (or an error if
    /// the access is dropped uncommitted). For engines.
    pub fn new(
        answers: Vec<Bytes>,
        changes: Staged,
        finish: impl FnOnce(std::result::Result<(), String>) + Send + 'static,
    ) -> Self {
        Self {
            answers,
            changes: Some(changes),
            land: None,
            started: false,
            finish: Some(Box::new(finish)),
        }
    }

    /// As [`StagedAccess::new`], with backend writes (`land`) that must be on the
    /// backend before the changes commit: [`StagedAccess::commit_all`] runs every
    /// part's writes, at once, before its one commit. Until then the answers are
    /// known and the objects they were read from unchanged, so a parent may answer
    /// reads early.
    pub fn landing(
        answers: Vec<Bytes>,
        changes: Staged,
        land: impl Future<Output = Result<()>> + Send + 'static,
        finish: impl FnOnce(std::result::Result<(), String>) + Send + 'static,
    ) -> Self {
        let mut staged = Self::new(answers, changes, finish);
        staged.land = Some(Box::pin(land));
        staged
    }

    /// Starts the backend writes of this access now, on the runtime, instead
    /// of when [`StagedAccess::commit_all`] runs them: a parent that stages
    /// several accesses at once lets the first ones' writes overlap the
    /// others' reads. The writes go to objects no committed state refers to
    /// (that is what lets them wait for the commit), so writing them before
    /// the parent knows its round succeeded changes nothing a reader sees; a
    /// round that then fails leaves them written, as a write of a failed
    /// attempt that arrived late would, and its repeat writes the same again.
    ///
    /// A parent whose round fails must call [`StagedAccess::stop_landing`]
    /// before it drops the access, so that the writes are done before the
    /// engine undoes the access (as when a commit fails after every write
    /// landed) and none is still under way when the round is repeated.
    ///
    /// Observed: the same writes, sent sooner — while the parent's other
    /// accesses are still reading, and even when one of those then fails.
    pub fn start_landing(&mut self) {
        if let Some(land) = self.land.take() {
            self.started = true;
            let running = tokio::spawn(land);
            self.land = Some(Box::pin(async move {
                match running.await {
                    Ok(landed) => landed,
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(_) => Err(OramError::Store(oram_blockstore::StoreError::Unavailable(
                        "the engine's runtime is shutting down".into(),
                    ))),
                }
            }));
        }
    }

    /// Waits for the writes [`StagedAccess::start_landing`] started, whatever
    /// their outcome (the access is about to be dropped uncommitted); writes
    /// not started are never sent.
    pub async fn stop_landing(&mut self) {
        let land = self.land.take();
        if let Some(land) = land.filter(|_| self.started) {
            let _ = land.await;
        }
    }

    /// The answers (valid only once committed: until then the changes that
    /// produced them may still be undone).
    pub fn answers(&self) -> &[Bytes] {
        &self.answers
    }

    /// Lands the backend writes of every access in `parts` (at once), then
    /// commits the changes of them all and `extra` (the parent's own, e.g. its
    /// map of which partition holds a block) in **one** atomic commit, then lets
    /// each engine finish its round. Returns each part's answers. All parts'
    /// states must live in the same durable store. A write that does not land
    /// fails the whole commit (nothing is committed; each engine undoes its part).
    pub async fn commit_all(
        mut parts: Vec<StagedAccess>,
        extra: Staged,
    ) -> Result<Vec<Vec<Bytes>>> {
        let lands: Vec<Land> = parts.iter_mut().filter_map(|p| p.land.take()).collect();
        let landed = futures::future::join_all(lands).await;
        if let Some(e) = landed.into_iter().find_map(|r| r.err()) {
            let reason = e.to_string();
            for mut p in parts {
                if let Some(f) = p.finish.take() {
                    f(Err(reason.clone()));
                }
            }
            return Err(e);
        }
        let mut all = extra;
        let mut merged = Ok(());
        for p in &mut parts {
            if let Some(c) = p.changes.take() {
                if merged.is_ok() {
                    merged = all.merge(c);
                }
            }
        }
        let outcome = match merged {
            Ok(()) => all.commit().await,
            Err(e) => Err(e),
        };
        let result = outcome.as_ref().map(|_| ()).map_err(|e| e.to_string());
        let mut answers = Vec::with_capacity(parts.len());
        for mut p in parts {
            if let Some(f) = p.finish.take() {
                f(result.clone());
            }
            answers.push(std::mem::take(&mut p.answers));
        }
        outcome.map_err(OramError::State)?;
        Ok(answers)
    }

    /// Commits this access alone; returns its answers.
    pub async fn commit(self) -> Result<Vec<Bytes>> {
        let mut a = Self::commit_all(vec![self], Staged::default()).await?;
        Ok(a.pop().unwrap_or_default())
    }
}

impl Drop for StagedAccess {
    fn drop(&mut self) {
        if let Some(f) = self.finish.take() {
            f(Err("staged access dropped without a commit".into()));
        }
    }
}
