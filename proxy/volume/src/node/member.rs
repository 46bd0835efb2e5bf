//! A node process that serves a *set* of slots, rebalanced among the members
//! while they serve (`[cluster] slots`, decision 015).
//!
//! Each slot lives in its own sub-directory of the data directory,
//! `slots/<j>/` (its state database, `volume.toml`, lock), and is one
//! [`NodeVolume`] with its own checkpoints and shipped log under
//! `<prefix>/node/<j>/`; one listener answers for all of them ([`HostSet`]).
//!
//! **Balance.** Every [`BALANCE_EVERY`] a member reads the owner keys and the
//! live registrations and computes the even, minimal-move assignment
//! ([`oram_cluster::assign`]; every member computes the same one from the same
//! read) and takes at most one [`Step`] ([`plan`]):
//!
//! * it **claims** a slot the assignment gives it whose owner is not live (its
//!   lease lapsed) or released it, and takes it over from the slot's
//!   checkpoint and shipped log on the backend, as a standby takes over a dead
//!   node's slot ([`super::take_over`]);
//! * or it **hands off** a slot the assignment gives to another member: the
//!   slot's partitions stop being answered (a round staged there is repeated
//!   by the front at the next owner), its pending write-backs land, its final
//!   checkpoint is written (its log shipped), and its owner key is emptied
//!   with a compare on this member's token (released): the next owner's
//!   claim is a new fencing token. Its sub-directory is then deleted; what it
//!   held is on the backend.
//!
//! A slot never claimed is its home node's to start afresh (slot `j` starts on
//! node `j % nodes.len()`), and nobody balances while any slot is unclaimed
//! (the cluster is forming). A released slot is never started afresh: its
//! state is on the backend.
//!
//! What the storage server sees: each slot's requests, whichever member sends
//! them; a hand-off adds the slot's write-backs, a checkpoint PUT and its
//! DELETEs, and the new owner's restore (reads of the checkpoint and the log, a
//! LIST and DELETEs of what the slot wrote after them, a checkpoint PUT). What
//! etcd sees: owner keys claimed and emptied, registrations; no block id,
//! position or object name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use oram_blockstore::{Accounting, AccountingSnapshot, BlockStore};
use oram_node::{ClusterTls, HostSet};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{take_over, wait_for_header, NodeVolume};
use crate::backend::{open_store, VolumeHooks};
use crate::config::VolumeConfig;
use crate::coord::{Coordinator, SlotView};
use crate::datadir;
use crate::fsutil::{blocking, io};
use crate::{ShipStats, VolumeError};

/// How often a member looks whether the slots are balanced (one range of
/// the owner keys and one of the registrations each time).
pub const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// What a member does next, from one read of etcd ([`plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Claim `slot`, whose owner key was last written at revision `expected`,
    /// and take it over from the backend.
    Claim {
        /// The slot.
        slot: u32,
        /// Its owner key's revision as read.
        expected: i64,
    },
    /// Hand `slot` to the member the balance gives it to.
    HandOff {
        /// The slot.
        slot: u32,
    },
    /// Nothing to do.
    Stay,
}

/// The step member `me`, serving `serving`, takes from `view`: the first slot
/// the even, minimal-move assignment over the live members gives it and no
/// live member holds (claim), else the first it serves that the assignment
/// gives to another (hand off). Nothing while a slot was never claimed, or
/// while `me` is not live.
pub fn plan(view: &SlotView, me: &str, serving: &[u32]) -> Step {
    if view.owners.iter().any(Option::is_none) || !view.live.iter().any(|l| l == me) {
        return Step::Stay;
    }
    let current: Vec<Option<String>> = view
        .owners
        .iter()
        .map(|o| {
            o.as_ref()
                .filter(|o| !o.released() && view.live.contains(&o.node_id))
                .map(|o| o.node_id.clone())
        })
        .collect();
    let Ok(target) = oram_cluster::assign(&current, &view.live) else {
        return Step::Stay;
    };
    let claim = target
        .iter()
        .zip(&current)
        .position(|(t, now)| t == me && now.is_none());
    if let Some(j) = claim {
        let expected = view.owners[j].as_ref().map_or(0, |o| o.token.revision);
        return Step::Claim {
            slot: j as u32,
            expected,
        };
    }
    let give = target
        .iter()
        .zip(&current)
        .enumerate()
        .position(|(j, (t, now))| {
            now.as_deref() == Some(me) && t != me && serving.contains(&(j as u32))
        });
    match give {
        Some(j) => Step::HandOff { slot: j as u32 },
        None => Step::Stay,
    }
}

/// One slot being served.
struct Running {
    node: Arc<NodeVolume>,
    token: u64,
    /// Stops the slot's checkpoint ticker.
    stop: watch::Sender<bool>,
    ticker: tokio::task::JoinHandle<()>,
    _lock: std::fs::File,
}

/// A member serving a set of slots, balancing them with the others.
pub struct Member {
    coord: Coordinator,
    me: String,
    /// The member's configuration, its data directory the root of `slots/`.
    base: VolumeConfig,
    hooks: VolumeHooks,
    set: HostSet,
    /// Guards the slots served: changed by one balance step at a time, and at
    /// the stop.
    slots: tokio::sync::Mutex<BTreeMap<u32, Running>>,
    /// Guards the request and shipped-log counters of the slots served and the
    /// request counters of those handed off, updated as a slot joins or leaves
    /// (read by the operator endpoint, which must not wait for a balance step).
    counted: std::sync::Mutex<Counted>,
}

/// The backend requests of a member's slots.
#[derive(Default)]
struct Counted {
    /// Sent for the slots handed off (so that the member's counts only grow).
    retired: AccountingSnapshot,
    /// Each slot served now and its counters.
    live: BTreeMap<u32, LiveCounters>,
}

/// The counters of one slot served.
struct LiveCounters {
    /// Its backend requests.
    requests: Arc<Accounting<Arc<dyn BlockStore>>>,
    /// Its shipped log's.
    log: Option<Arc<ShipStats>>,
}

impl Member {
    /// Starts member `me` of `coord`'s cluster with configuration `base`
    /// (its data directory holding `slots/`; its backend writes fenced by the
    /// hook in `hooks`; the slot count agreed in etcd checked by the caller
    /// before it registered, [`Coordinator::agree_slots`]): waits for the
    /// volume header (for the block size), reopens the slots it served before
    /// a restart that etcd still names it the owner of (a new claim, a new
    /// token), deletes the sub-directories of slots others hold now, rebuilds
    /// from the backend a slot etcd names it the owner of without a
    /// sub-directory (lost, or a take-over cut short), and (unless `standby`)
    /// starts the never-claimed slots of node `cluster.node` afresh.
    pub async fn start(
        mut base: VolumeConfig,
        hooks: VolumeHooks,
        coord: Coordinator,
        me: String,
        standby: bool,
    ) -> Result<Self, VolumeError> {
        if base.state.log_settings().is_none() {
            return Err(VolumeError::Config(
                "a member of a cluster with cluster.slots needs [state] log_interval_ms > 0: a \
                 slot it claims is rebuilt from the slot's checkpoint and shipped log"
                    .into(),
            ));
        }
        let root = base.data_dir.clone();
        // Every slot's files name the member's identity and key explicitly.
        base.cluster.tls_dir = Some(base.cluster.tls_dir(&root));
        if base.key.passphrase_file.is_none() && base.key.key_file.is_none() {
            base.key.key_file = Some(base.key.key_file(&root));
        }
        let store = open_store(&base, &hooks).await?;
        let prefix = base.backend.prefix.clone();
        let header = wait_for_header(store.as_ref(), &prefix, base.cluster.wait()).await?;
        header.adopt_into(&mut base.engine)?;
        drop(store);
        let block_size = base.engine.shape(&prefix).block_size;
        let member = Self {
            coord,
            me,
            base,
            hooks,
            set: HostSet::new(block_size),
            slots: tokio::sync::Mutex::new(BTreeMap::new()),
            counted: std::sync::Mutex::new(Counted::default()),
        };
        let view = member.coord.view().await?;
        for j in member.slot_dirs().await? {
            let owner = view.owners.get(j as usize).cloned().flatten();
            match owner {
                Some(o) if o.node_id == member.me => {
                    let Some(token) = member.coord.claim(j, &member.me, o.token.revision).await?
                    else {
                        return Err(VolumeError::Config(format!(
                            "slot {j}: its owner key changed while this member reclaimed it"
                        )));
                    };
                    member.open(j, token).await?;
                }
                _ => {
                    tracing::warn!(
                        slot = j,
                        "another member holds slot {j} now: its stale sub-directory is deleted"
                    );
                    member.remove_dir(j).await?;
                }
            }
        }
        for (j, owner) in view.owners.iter().enumerate() {
            let j = j as u32;
            if member.slots.lock().await.contains_key(&j) {
                continue;
            }
            let home = !standby
                && member
                    .base
                    .cluster
                    .home_slots(member.base.cluster.node)
                    .contains(&j);
            match owner {
                // Never claimed: its home node starts it afresh.
                None if home => {
                    if let Some(token) = member.coord.claim(j, &member.me, 0).await? {
                        member.open(j, token).await?;
                    }
                }
                // Still this member's, its directory lost (or a take-over cut
                // short by a crash): rebuilt from the backend.
                Some(o) if o.node_id == member.me => {
                    if let Some(token) = member.coord.claim(j, &member.me, o.token.revision).await?
                    {
                        member.take(j, token).await?;
                    }
                }
                _ => {}
            }
        }
        Ok(member)
    }

    /// The partitions served now.
    pub fn hosts(&self) -> &HostSet {
        &self.set
    }

    /// The slots served now, ascending (read without waiting for a balance
    /// step under way).
    pub fn slots(&self) -> Vec<u32> {
        self.counted().live.keys().copied().collect()
    }

    /// The requests and bytes this member sent to the backend since it
    /// started: for the slots it serves and for those it handed off.
    pub fn backend_counts(&self) -> AccountingSnapshot {
        let c = self.counted();
        c.live
            .values()
            .fold(c.retired, |sum, a| sum.plus(&a.requests.snapshot()))
    }

    /// The shipped-log counters of each slot served now, ascending.
    pub fn log_stats(&self) -> Vec<(u32, Arc<ShipStats>)> {
        self.counted()
            .live
            .iter()
            .filter_map(|(j, c)| Some((*j, c.log.clone()?)))
            .collect()
    }

    /// The engine of the volume's partitions.
    pub fn engine(&self) -> String {
        self.base.engine.kind.name().to_string()
    }

    fn counted(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.counted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves fronts on `listener` (identity `tls`) and balances every
    /// [`BALANCE_EVERY`] until `shutdown`; then finishes every slot (its
    /// write-backs and final checkpoint), keeping its owner key for a restart.
    pub async fn serve(
        &self,
        listener: TcpListener,
        tls: ClusterTls,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), VolumeError> {
        let (stopped, mut stopping) = watch::channel(false);
        let serving = async {
            self.set.serve(listener, tls, shutdown).await;
            let _ = stopped.send(true);
        };
        let balancing = async {
            let mut failing = false;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(BALANCE_EVERY) => {}
                    _ = stopping.changed() => return,
                }
                match self.step().await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        tracing::warn!("balancing the slots: {e}");
                        failing = true;
                    }
                    Err(e) => tracing::debug!("balancing the slots: {e}"),
                }
            }
        };
        tokio::join!(serving, balancing);
        let mut slots = self.slots.lock().await;
        let mut first = None;
        // Every slot's checkpoints stop before the first slot finishes, so
        // that none checkpoints and collects beside the others' final ones.
        for r in slots.values() {
            let _ = r.stop.send(true);
        }
        for (j, r) in std::mem::take(&mut *slots) {
            let _ = r.ticker.await;
            if let Err(e) = r.node.finish().await {
                tracing::error!(slot = j, "final write-back failed: {e}");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// One balance step ([`plan`]).
    async fn step(&self) -> Result<(), VolumeError> {
        let view = self.coord.view().await?;
        let serving = self.slots();
        match plan(&view, &self.me, &serving) {
            Step::Stay => Ok(()),
            Step::Claim { slot, expected } => {
                let Some(token) = self.coord.claim(slot, &self.me, expected).await? else {
                    return Ok(());
                };
                tracing::warn!(
                    slot,
                    token,
                    "claimed a slot: rebuilding it from the backend"
                );
                if let Err(e) = self.take(slot, token).await {
                    // Released again, for this member or another to retry.
                    let _ = self.coord.release(slot, token).await;
                    return Err(e);
                }
                Ok(())
            }
            Step::HandOff { slot } => self.hand_off(slot).await,
        }
    }

    /// Hands `slot` off: stops answering its partitions, finishes it (final
    /// checkpoint), releases its owner key and deletes its sub-directory. On
    /// a failure before the release it is served again.
    async fn hand_off(&self, slot: u32) -> Result<(), VolumeError> {
        let Some(mut r) = self.slots.lock().await.remove(&slot) else {
            return Ok(());
        };
        tracing::info!(slot, "handing the slot off to another member");
        let partitions = r.node.host.partitions();
        self.set.remove(&partitions);
        let _ = r.stop.send(true);
        let _ = (&mut r.ticker).await;
        let done = match r.node.finish().await {
            Ok(()) => self.coord.release(slot, r.token).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(released) => {
                if !released {
                    tracing::warn!(
                        slot,
                        "the slot's owner key changed before its release: another member holds it"
                    );
                }
                {
                    let mut c = self.counted();
                    if let Some(a) = c.live.remove(&slot) {
                        c.retired = c.retired.plus(&a.requests.snapshot());
                    }
                }
                drop(r);
                self.remove_dir(slot).await?;
                tracing::info!(slot, "slot handed off");
                Ok(())
            }
            Err(e) => {
                self.serve_slot(slot, r.node, r.token, r._lock).await?;
                Err(e)
            }
        }
    }

    /// Takes `slot`, claimed under `token`, over from the backend into its
    /// (emptied) sub-directory, and serves it.
    async fn take(&self, slot: u32, token: u64) -> Result<(), VolumeError> {
        self.remove_dir(slot).await?;
        let cfg = self.slot_config(slot);
        let lock = self.lock_dir(slot).await?;
        let progress = |step: &str| tracing::info!(slot, "take-over: {step}");
        let (done, node, lock) = take_over(&cfg, &self.hooks, token, lock, &progress).await?;
        tracing::info!(
            slot,
            epoch = done.epoch,
            replayed = done.replayed,
            swept = done.swept,
            "took the slot over"
        );
        self.serve_slot(slot, node, token, lock).await
    }

    /// Opens `slot` from its sub-directory (created empty for a slot never
    /// claimed: it is made from the volume header) under `token`, and serves
    /// it.
    async fn open(&self, slot: u32, token: u64) -> Result<(), VolumeError> {
        let cfg = self.slot_config(slot);
        let lock = self.lock_dir(slot).await?;
        let node = NodeVolume::open_as(&cfg, &self.hooks, token).await?;
        tracing::info!(slot, token, "serving the slot");
        self.serve_slot(slot, node, token, lock).await
    }

    /// Adds `node` (slot `slot`, under `token`) to the partitions answered
    /// and starts its checkpoints.
    async fn serve_slot(
        &self,
        slot: u32,
        node: impl Into<Arc<NodeVolume>>,
        token: u64,
        lock: std::fs::File,
    ) -> Result<(), VolumeError> {
        let node: Arc<NodeVolume> = node.into();
        self.set.add(&node.host).map_err(VolumeError::Config)?;
        self.counted().live.insert(
            slot,
            LiveCounters {
                requests: node.backend_counters.clone(),
                log: node.shipper.as_ref().map(|s| s.stats.clone()),
            },
        );
        let (stop, stopping) = watch::channel(false);
        let ticking = node.clone();
        let ticker = tokio::spawn(async move { ticking.checkpoint_until(stopping).await });
        self.slots.lock().await.insert(
            slot,
            Running {
                node,
                token,
                stop,
                ticker,
                _lock: lock,
            },
        );
        Ok(())
    }

    /// Slot `slot`'s configuration: the member's, with its data directory
    /// `slots/<slot>/` and `cluster.node = slot`.
    fn slot_config(&self, slot: u32) -> VolumeConfig {
        let mut cfg = self.base.clone();
        cfg.data_dir = self.slot_dir(slot);
        cfg.cluster.node = slot as usize;
        cfg
    }

    fn slot_dir(&self, slot: u32) -> PathBuf {
        self.base.data_dir.join("slots").join(slot.to_string())
    }

    /// The slots with a sub-directory holding a volume, ascending.
    async fn slot_dirs(&self) -> Result<Vec<u32>, VolumeError> {
        let root = self.base.data_dir.join("slots");
        let count = self.coord.slots();
        blocking("listing the slots' directories", move || {
            let mut out = Vec::new();
            let entries = match std::fs::read_dir(&root) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(io(&root)(e)),
            };
            for entry in entries {
                let entry = entry.map_err(io(&root))?;
                let Some(j) = entry
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<u32>().ok())
                else {
                    continue;
                };
                if j < count && datadir::has_volume(&entry.path()) {
                    out.push(j);
                }
            }
            out.sort_unstable();
            Ok(out)
        })
        .await
    }

    /// Creates slot `slot`'s sub-directory if needed and takes its lock.
    async fn lock_dir(&self, slot: u32) -> Result<std::fs::File, VolumeError> {
        let dir = self.slot_dir(slot);
        blocking("locking a slot's directory", move || {
            datadir::ensure_dir(&dir)?;
            datadir::lock(&dir)
        })
        .await
    }

    /// Deletes slot `slot`'s sub-directory, if any.
    async fn remove_dir(&self, slot: u32) -> Result<(), VolumeError> {
        let dir = self.slot_dir(slot);
        blocking(
            "deleting a slot's directory",
            move || match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io(&dir)(e)),
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oram_cluster::{FencingToken, OwnerRecord};

    fn owner(slot: u32, id: &str, rev: i64) -> Option<OwnerRecord> {
        Some(OwnerRecord {
            node_id: id.into(),
            token: FencingToken {
                partition: slot,
                revision: rev,
            },
        })
    }

    fn view(owners: &[&str], live: &[&str]) -> SlotView {
        SlotView {
            owners: owners
                .iter()
                .enumerate()
                .map(|(j, o)| {
                    if *o == "?" {
                        None
                    } else {
                        owner(j as u32, o, 10 + j as i64)
                    }
                })
                .collect(),
            live: live.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_joining_member_is_handed_slots_one_at_a_time_until_even() {
        // Four slots on two nodes; a third member joins.
        let v = view(&["a", "b", "a", "b"], &["a", "b", "c"]);
        // One of the members over its share hands its highest slot off; the
        // other keeps its two (the extra slot stays with a node holding more).
        let steps: Vec<Step> = ["a", "b"]
            .iter()
            .map(|m| {
                let serving: Vec<u32> = (0..4)
                    .filter(|j| v.owners[*j as usize].as_ref().unwrap().node_id == *m)
                    .collect();
                plan(&v, m, &serving)
            })
            .collect();
        assert_eq!(
            steps.iter().filter(|s| **s != Step::Stay).count(),
            1,
            "{steps:?}"
        );
        assert!(steps.contains(&Step::HandOff { slot: 3 }), "{steps:?}");
        // The joiner waits for it, then claims the released slot.
        assert_eq!(plan(&v, "c", &[]), Step::Stay);
        let released = view(&["a", "b", "a", ""], &["a", "b", "c"]);
        assert_eq!(
            plan(&released, "c", &[]),
            Step::Claim {
                slot: 3,
                expected: 13
            }
        );
        assert_eq!(plan(&released, "b", &[1]), Step::Stay);
        // Balanced: nobody moves.
        let even = view(&["a", "b", "a", "c"], &["a", "b", "c"]);
        for (m, s) in [("a", vec![0, 2]), ("b", vec![1]), ("c", vec![3])] {
            assert_eq!(plan(&even, m, &s), Step::Stay, "{m}");
        }
    }

    #[test]
    fn a_dead_members_slots_are_spread_and_a_forming_cluster_waits() {
        let v = view(&["a", "b", "c", "a", "b", "c"], &["a", "b"]);
        let a = plan(&v, "a", &[0, 3]);
        let b = plan(&v, "b", &[1, 4]);
        let claimed: Vec<u32> = [a, b]
            .iter()
            .filter_map(|s| match s {
                Step::Claim { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        assert_eq!(claimed.len(), 2, "{a:?} {b:?}");
        assert!(claimed.iter().all(|j| [2, 5].contains(j)), "{claimed:?}");
        assert_ne!(claimed[0], claimed[1]);
        // A slot never claimed: its home node starts it; nobody balances.
        let forming = view(&["a", "?", "a", "?"], &["a", "b", "c"]);
        for m in ["a", "b", "c"] {
            assert_eq!(plan(&forming, m, &[]), Step::Stay);
        }
        // A member whose registration is not live does nothing.
        let v = view(&["a", "a"], &["b"]);
        assert_eq!(plan(&v, "a", &[0, 1]), Step::Stay);
    }
}
