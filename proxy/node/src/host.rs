//! A node: serves its partitions' sub-engines to fronts over mutual TLS.
//!
//! For each partition it keeps a **ledger** in the node's trusted state (the
//! partition's ledger space): the last round it committed and that round's
//! answers, committed atomically with the sub-engine's changes. A front that
//! repeats a round the node already committed (its own commit was lost to a
//! failure or crash) gets the recorded answers back and the partition makes no
//! access; any other repetition is staged again, and the sub-engine finishes
//! its interrupted round with the same draws, as on one machine.
//!
//! Only the answers of the latest round can be asked for again: the front
//! lands a round only after its own commit of the round before is durable
//! (shipped), so once any partition committed round `r`, no round before `r`
//! is ever repeated. A node's checkpoint therefore drops the answers of every
//! ledger behind the latest round its partitions committed
//! ([`HostQuiet::drop_stale_answers`]), keeping their round numbers: it holds
//! at most one round's answers, not one for each partition.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use oram_engine::{Op, Oram, OramError, Quiesced, RoundId, StagedAccess};
use oram_state::TrustedState;
use tokio::net::TcpListener;

use crate::error::unavailable;
use crate::tls::ClusterTls;
use crate::wire::{Envelope, Reply, Request, Response};

/// The ledger key of the last committed round and its answers.
const DONE: &[u8] = b"node/done";

/// The answer count of a ledger record whose answers were dropped (a later
/// round committed since: [`HostQuiet::drop_stale_answers`]).
const DROPPED: u32 = u32::MAX;

/// One partition a node serves.
pub struct Served {
    /// The partition.
    pub partition: u32,
    /// Its sub-engine, built here.
    pub sub: Arc<dyn Oram>,
    /// Its ledger: a state space of the same database as the sub-engine's,
    /// used by nothing else (the partition framework's `ledger_space`).
    pub ledger: Box<dyn TrustedState>,
    /// The owner token the node holds it under (fronts must name it).
    pub token: u64,
}

struct Slot {
    sub: Arc<dyn Oram>,
    token: u64,
    /// The ledger and the access staged for the front's next land: one round
    /// of the partition at a time.
    ledger: tokio::sync::Mutex<Ledger>,
}

struct Ledger {
    state: Box<dyn TrustedState>,
    staged: Option<Staging>,
    /// An access was staged and undone since the last land: the sub-engine
    /// holds its interrupted round in memory, not committed (the front
    /// repeats the round and its land commits it). Until then the engine's
    /// view is ahead of the committed state (and of every checkpoint), so
    /// nothing is collected from it: an object only that view no longer
    /// needs may be one the committed state, restored elsewhere, still
    /// refers to.
    interrupted: bool,
}

impl Ledger {
    /// Undoes the access staged, if any (its round is repeated by the front).
    fn undo(&mut self) {
        if self.staged.take().is_some() {
            self.interrupted = true;
        }
    }
}

struct Staging {
    seq: u64,
    attempt: u64,
    access: StagedAccess,
    answers: Vec<Bytes>,
}

impl Ledger {
    /// The number of the last round committed (its answers are decoded only
    /// for a repeat: [`Ledger::done`]).
    fn done_seq(&self) -> Option<u64> {
        let b = self.state.meta(DONE)?;
        Some(u64::from_be_bytes(b.get(..8)?.try_into().ok()?))
    }

    /// Whether the last round committed is recorded without its answers.
    fn dropped(&self) -> bool {
        self.state
            .meta(DONE)
            .and_then(|b| b.get(8..12).map(|n| n == DROPPED.to_be_bytes()))
            .unwrap_or(false)
    }

    /// Drops the recorded answers if the last round committed is before
    /// `latest` (not committed: the caller commits the ledger's state);
    /// whether it changed.
    fn drop_answers_before(&mut self, latest: u64) -> bool {
        match self.done_seq() {
            Some(seq) if seq < latest && !self.dropped() => {
                let mut out = BytesMut::with_capacity(12);
                out.put_u64(seq);
                out.put_u32(DROPPED);
                self.state.set_meta(DONE, out.freeze());
                true
            }
            _ => false,
        }
    }

    /// The last round committed and its answers (`None` also when they were
    /// dropped).
    fn done(&self) -> Option<(u64, Vec<Bytes>)> {
        let mut b = self.state.meta(DONE)?.clone();
        if b.remaining() < 12 {
            return None;
        }
        let seq = b.get_u64();
        let n = b.get_u32();
        if n == DROPPED {
            return None;
        }
        let n = n as usize;
        let mut answers = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            if b.remaining() < 4 {
                return None;
            }
            let len = b.get_u32() as usize;
            if b.remaining() < len {
                return None;
            }
            answers.push(b.split_to(len));
        }
        Some((seq, answers))
    }

    fn set_done(&mut self, seq: u64, answers: &[Bytes]) {
        let mut out =
            BytesMut::with_capacity(12 + answers.iter().map(|a| 4 + a.len()).sum::<usize>());
        out.put_u64(seq);
        out.put_u32(answers.len() as u32);
        for a in answers {
            out.put_u32(a.len() as u32);
            out.put_slice(a);
        }
        self.state.set_meta(DONE, out.freeze());
    }
}

/// Every partition of a node held between rounds ([`NodeHost::quiesce`]),
/// until dropped.
pub struct HostQuiet<'a> {
    /// Each partition's ledger (no round lands) and its sub-engine's quiesce.
    held: Vec<(tokio::sync::MutexGuard<'a, Ledger>, Quiesced)>,
}

impl HostQuiet<'_> {
    /// Drops, and commits, the answers of every ledger whose last round is
    /// before the latest round any partition of this node committed: no front
    /// repeats such a round (see the module documentation), so a checkpoint
    /// taken next holds one round's answers at most. The round numbers stay
    /// (a repeat of a dropped round is refused, not staged again). Returns how
    /// many ledgers changed.
    ///
    /// The storage server sees nothing: the ledgers are trusted state.
    pub async fn drop_stale_answers(&mut self) -> Result<usize, OramError> {
        let Some(latest) = self.held.iter().filter_map(|(l, _)| l.done_seq()).max() else {
            return Ok(0);
        };
        let mut commits = Vec::new();
        for (led, _) in &mut self.held {
            if led.drop_answers_before(latest) {
                commits.push(led.state.commit());
            }
        }
        // Each commit was handed to the database at its call: they are
        // grouped, and awaited in turn.
        let n = commits.len();
        for c in commits {
            c.await.map_err(OramError::State)?;
        }
        Ok(n)
    }
}

impl std::fmt::Debug for HostQuiet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostQuiet")
            .field("partitions", &self.held.len())
            .finish()
    }
}

/// A node's partitions, served to fronts. Cheap to clone.
#[derive(Clone)]
pub struct NodeHost {
    inner: Arc<HostInner>,
}

struct HostInner {
    block_size: usize,
    slots: HashMap<u32, Slot>,
}

impl std::fmt::Debug for NodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHost")
            .field("partitions", &self.partitions())
            .finish_non_exhaustive()
    }
}

impl NodeHost {
    /// A host of `served`, whose sub-engines take blocks of `block_size` bytes.
    pub fn new(block_size: usize, served: Vec<Served>) -> Self {
        let slots = served
            .into_iter()
            .map(|s| {
                (
                    s.partition,
                    Slot {
                        sub: s.sub,
                        token: s.token,
                        ledger: tokio::sync::Mutex::new(Ledger {
                            state: s.ledger,
                            staged: None,
                            interrupted: false,
                        }),
                    },
                )
            })
            .collect();
        Self {
            inner: Arc::new(HostInner { block_size, slots }),
        }
    }

    /// Each served partition's engine statistics now, in ascending partition
    /// order (for the node's operator endpoint).
    pub fn stats(&self) -> Vec<oram_engine::EngineStats> {
        self.partitions()
            .into_iter()
            .filter_map(|p| self.inner.slots.get(&p).map(|s| s.sub.stats()))
            .collect()
    }

    /// Whether `other` is this host (a clone of it).
    pub fn same(&self, other: &NodeHost) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The partitions served, ascending.
    pub fn partitions(&self) -> Vec<u32> {
        let mut ps: Vec<u32> = self.inner.slots.keys().copied().collect();
        ps.sort_unstable();
        ps
    }

    /// Serves fronts on `listener` until `shutdown` resolves. Each connection
    /// is served on its own task; a peer without a certificate of the
    /// cluster's CA is refused at the handshake.
    ///
    /// Observed by the storage server: the partitions' own requests, as their
    /// engines make them.
    pub async fn serve(
        &self,
        listener: TcpListener,
        tls: ClusterTls,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        crate::serve::serve(self, listener, tls, shutdown).await;
    }

    /// Writes back what every partition has pending, between rounds (a node
    /// stopping). The storage server sees the partitions' pending write-backs.
    pub async fn flush(&self) -> Result<(), OramError> {
        self.each_between_rounds(|sub| async move { sub.flush().await.map(|()| 0) })
            .await
            .map(|_| ())
    }

    /// Runs `f` on each partition's sub-engine in ascending order, the
    /// partition held between rounds meanwhile (an access staged and not
    /// landed is undone: the front repeats its round); returns the sum of
    /// what `f` counted.
    async fn each_between_rounds<F, Fut>(&self, f: F) -> Result<u64, OramError>
    where
        F: Fn(Arc<dyn Oram>) -> Fut,
        Fut: std::future::Future<Output = Result<u64, OramError>>,
    {
        let mut n = 0;
        for p in self.partitions() {
            let slot = &self.inner.slots[&p];
            let _led = idle(slot).await;
            n += f(slot.sub.clone()).await?;
        }
        Ok(n)
    }

    /// After the node's checkpoint landed, while serving: each partition's
    /// [`Oram::collect_while_serving`] in turn, holding off only that
    /// partition's rounds meanwhile. A partition with an access staged, or
    /// with an interrupted round its engine holds uncommitted (an access
    /// undone since its last land), is left alone: its engine's view is
    /// ahead of the committed state, and deleting what only that view no
    /// longer needs could delete an object the committed state (restored by
    /// the slot's next owner, or after a crash) still refers to. A later
    /// checkpoint's collection deletes them (a clean stop or hand-off
    /// collects nothing: `NodeVolume::finish` in `oram-volume`). Returns how
    /// many keys were deleted.
    ///
    /// Observed by the storage server: each partition's DELETEs of objects
    /// superseded before that checkpoint, right after it.
    pub async fn collect_while_serving(&self) -> Result<u64, OramError> {
        let mut n = 0;
        for p in self.partitions() {
            let slot = &self.inner.slots[&p];
            let led = slot.ledger.lock().await;
            if led.staged.is_some() || led.interrupted {
                continue;
            }
            n += slot.sub.collect_while_serving().await?;
            drop(led);
        }
        Ok(n)
    }

    /// Deletes every partition's unreferenced objects, between rounds (a node
    /// restored from the backend: what its lost timeline wrote after the
    /// restored state). Returns how many. The storage server sees each
    /// partition's LIST and DELETEs.
    pub async fn sweep(&self) -> Result<u64, OramError> {
        self.each_between_rounds(|sub| async move { sub.sweep().await })
            .await
    }

    /// Holds every partition between rounds until the returned guard drops:
    /// an access staged and not landed is undone (the front repeats its
    /// round), no round lands meanwhile, and every sub-engine is quiesced. A
    /// node's checkpoint snapshots its database under it. Partitions are taken
    /// in ascending order.
    ///
    /// The storage server sees no request of its own; the partitions' requests
    /// pause.
    pub async fn quiesce(&self) -> Result<HostQuiet<'_>, OramError> {
        let mut held = Vec::with_capacity(self.inner.slots.len());
        for p in self.partitions() {
            let slot = &self.inner.slots[&p];
            let ledger = idle(slot).await;
            let sub = slot.sub.quiesce().await?;
            held.push((ledger, sub));
        }
        Ok(HostQuiet { held })
    }

    /// Answers one request. Every request runs on a task of its own
    /// ([`oram_engine::detached`]) and to its end, whatever becomes of the
    /// connection: a node stopping aborts its connections, and a stage or land
    /// cut off half way would leave the partition's state or ledger half
    /// changed in memory (its commit made or not) for the checkpoint and the
    /// collection that follow.
    pub(crate) async fn handle(&self, env: Envelope) -> Reply {
        let p = env.partition;
        let Some(slot) = self.inner.slots.get(&p) else {
            return not_served(p);
        };
        let (host, request) = (self.clone(), env.request);
        let response = oram_engine::detached(async move { host.respond(p, request).await }).await;
        Reply {
            token: slot.token,
            response: response.unwrap_or_else(Response::Failed),
        }
    }

    /// Answers `request` for partition `p` (served: [`NodeHost::handle`]
    /// looked it up).
    async fn respond(&self, p: u32, request: Request) -> Result<Response, OramError> {
        let slot = self
            .inner
            .slots
            .get(&p)
            .ok_or_else(|| unavailable(format!("partition {p} is not served by this node")))?;
        let fenced = |token: u64| -> Result<(), OramError> {
            if token == slot.token {
                Ok(())
            } else {
                Err(unavailable(format!(
                    "partition {p} is held here under owner token {}, not {token}",
                    slot.token
                )))
            }
        };
        match request {
            Request::Stage {
                token,
                round,
                attempt,
                ops,
            } => {
                fenced(token)?;
                self.stage(slot, round, attempt, ops)
                    .await
                    .map(Response::Answers)
            }
            Request::Land {
                token,
                seq,
                attempt,
            } => {
                fenced(token)?;
                land(slot, seq, attempt).await?;
                Ok(Response::Done(slot.sub.stats()))
            }
            Request::Abort {
                token,
                seq,
                attempt,
            } => {
                fenced(token)?;
                let mut led = slot.ledger.lock().await;
                if led
                    .staged
                    .as_ref()
                    .is_some_and(|s| s.seq == seq && s.attempt == attempt)
                {
                    led.undo();
                }
                Ok(Response::Done(slot.sub.stats()))
            }
            Request::Flush => {
                let _led = idle(slot).await;
                slot.sub.flush().await?;
                Ok(Response::Done(slot.sub.stats()))
            }
            Request::Stats => Ok(Response::Done(slot.sub.stats())),
            Request::Check => {
                let _led = idle(slot).await;
                Ok(Response::Checked(slot.sub.check(&|_, _| {}).await?))
            }
            Request::Sweep => {
                let _led = idle(slot).await;
                Ok(Response::Swept(slot.sub.sweep().await?))
            }
            Request::Format => {
                let _led = idle(slot).await;
                Ok(Response::Formatted(slot.sub.format(&|_, _| {}).await?))
            }
        }
    }

    /// Stages `ops` as round `round`, or answers a repeated round committed
    /// already from the ledger (no access).
    async fn stage(
        &self,
        slot: &Slot,
        round: RoundId,
        attempt: u64,
        ops: Vec<Op>,
    ) -> Result<Vec<Bytes>, OramError> {
        let mut led = slot.ledger.lock().await;
        // An access staged earlier and never landed is undone (its engine keeps
        // its interrupted round to be finished by this one).
        led.undo();
        if let Some(done) = led.done_seq() {
            // Decoded only for the repeat of the round recorded.
            let replay = if round.repeat && done == round.seq {
                led.done()
            } else {
                None
            };
            if round.repeat && done == round.seq && led.dropped() {
                return Err(OramError::Config(format!(
                    "round {done} is repeated after a later round committed (its answers \
                     were dropped): the front's state is older than the node's"
                )));
            }
            if let Some((_, answers)) = replay {
                if answers.len() != ops.len() {
                    return Err(OramError::Config(format!(
                        "round {done} is repeated with {} ops, it had {}",
                        ops.len(),
                        answers.len()
                    )));
                }
                return Ok(answers);
            }
            if !round.repeat && round.seq <= done {
                return Err(OramError::Config(format!(
                    "round {} is not after round {done}, the last this partition \
                     committed: the front's state is older than the node's",
                    round.seq
                )));
            }
        }
        let access = slot.sub.access_staged(ops).await?;
        let answers = access.answers().to_vec();
        led.staged = Some(Staging {
            seq: round.seq,
            attempt,
            access,
            answers: answers.clone(),
        });
        Ok(answers)
    }
}

/// The answer to a request for partition `p`, which this node does not serve
/// (the front repeats its round once its route follows the partition).
pub(crate) fn not_served(p: u32) -> Reply {
    Reply {
        token: 0,
        response: Response::Failed(unavailable(format!(
            "partition {p} is not served by this node"
        ))),
    }
}

impl crate::serve::Answers for NodeHost {
    fn block_size(&self) -> usize {
        self.inner.block_size
    }
    async fn answer(&self, env: Envelope) -> Reply {
        self.handle(env).await
    }
}

/// The ledger with no access staged (maintenance runs between rounds).
async fn idle(slot: &Slot) -> tokio::sync::MutexGuard<'_, Ledger> {
    let mut led = slot.ledger.lock().await;
    led.undo();
    led
}

/// Lands round `seq`'s staged access and commits it with the ledger's record of
/// it; a land repeated after its reply was lost is answered from the ledger.
async fn land(slot: &Slot, seq: u64, attempt: u64) -> Result<(), OramError> {
    let mut led = slot.ledger.lock().await;
    match led.staged.take() {
        Some(st) if st.seq == seq && st.attempt == attempt => {
            led.set_done(seq, &st.answers);
            let extra = led.state.stage();
            match StagedAccess::commit_all(vec![st.access], extra).await {
                Ok(_) => {
                    led.state.settle();
                    // The engine's view is the committed state again.
                    led.interrupted = false;
                    Ok(())
                }
                Err(e) => {
                    led.state.rollback();
                    led.interrupted = true;
                    Err(e)
                }
            }
        }
        Some(st) => {
            let (staged, tried) = (st.seq, st.attempt);
            drop(st);
            led.interrupted = true;
            Err(unavailable(format!(
                "round {seq} (attempt {attempt}) landed while round {staged} (attempt {tried}) \
                 was staged: the front repeats it"
            )))
        }
        None if led.done_seq() == Some(seq) => Ok(()),
        None => Err(unavailable(format!(
            "round {seq} is not staged on this node (it restarted or the round was undone): \
             the front repeats it"
        ))),
    }
}
