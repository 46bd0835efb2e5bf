//! Deleting superseded bucket objects once a checkpoint has landed.
//!
//! A round writes each rewritten bucket to a slot that neither the state nor the
//! last checkpoint refers to ([`oram_state::SlotPolicy::BeforeCommit`]), so a
//! position may keep up to three objects on the backend. Once the checkpoint
//! that began epoch `landed` is on the backend ([`oram_state::Lineage::landed`]),
//! a position last written before that epoch is referred to at its current slot
//! by the state and by that checkpoint alike: its other slots hold nothing a
//! restart, a `recover` from the backend or the shipped log could need
//! ([`oram_state::NodeVersion::superseded`]). The collector queues those
//! positions and each fresh round deletes a batch of their other slots,
//! concurrently with its reads and awaited before it applies, under the round
//! lock with no round landing — so no write of those keys is in flight or can
//! start before the deletes are done. At a clean stop the engine deletes the
//! rest at once ([`oram_engine::Oram::collect`]).
//!
//! Observed by the storage server: after each checkpoint, DELETEs of the other
//! slots of positions written before it and not since — a set decided by which
//! positions were written when, which the server saw as the writes themselves.

use std::collections::{BTreeMap, BTreeSet};

use oram_blockstore::ObjKey;
use oram_state::TrustedState;

/// The positions whose superseded slots are still to be deleted.
#[derive(Default)]
pub(crate) struct Collector {
    /// The `landed` epoch the queue was last filled for: positions last written
    /// before it were queued then (or earlier).
    filled: u64,
    /// Whether this process's first fill, a scan of every position, is done;
    /// later fills queue what [`Collector::wrote`] recorded.
    scanned: bool,
    /// By epoch: positions written in it with a slot to supersede (version >
    /// 1), not queued yet.
    written: BTreeMap<u64, Vec<u64>>,
    /// Positions to go through, in position order.
    queue: BTreeSet<u64>,
}

impl Collector {
    /// Queues the positions last written in an epoch the last fill did not
    /// cover, if a checkpoint landed since: the first time in a process by a
    /// scan of every position (what earlier processes wrote), then from the
    /// record of this process's writes ([`Collector::wrote`]), so a fill costs
    /// what was written since the last, not the size of the tree.
    fn refill(&mut self, state: &dyn TrustedState) {
        let landed = state.landed();
        if landed <= self.filled {
            return;
        }
        if !self.scanned {
            self.queue.extend(
                state
                    .nodes()
                    .into_iter()
                    .filter(|(_, nv)| nv.version > 1 && nv.epoch < landed)
                    .map(|(n, _)| n),
            );
            self.scanned = true;
        }
        let later = self.written.split_off(&landed);
        for (_, positions) in std::mem::replace(&mut self.written, later) {
            self.queue.extend(positions);
        }
        self.filled = landed;
    }

    /// Records that a round wrote `position` in `epoch` at a version above 1
    /// (an earlier slot to supersede once a checkpoint begun after `epoch` has
    /// landed); once an epoch is enough.
    pub(crate) fn wrote(&mut self, position: u64, epoch: u64) {
        self.written.entry(epoch).or_default().push(position);
    }

    /// The next batch of keys to delete (at most `max`, but a position's keys
    /// are never split), with the positions they belong to; positions written
    /// since they were queued are dropped from the queue.
    pub(crate) fn take(
        &mut self,
        state: &dyn TrustedState,
        key: impl Fn(u64, u8) -> ObjKey,
        max: usize,
    ) -> (Vec<u64>, Vec<ObjKey>) {
        self.refill(state);
        let landed = state.landed();
        let (mut positions, mut keys) = (Vec::new(), Vec::new());
        while keys.len() < max {
            let Some(n) = self.queue.pop_first() else {
                break;
            };
            let before = keys.len();
            keys.extend(state.node(n).superseded(landed).map(|s| key(n, s)));
            if keys.len() > before {
                positions.push(n);
            }
        }
        (positions, keys)
    }

    /// Puts back positions whose deletes failed, to be tried again.
    pub(crate) fn requeue(&mut self, positions: Vec<u64>) {
        self.queue.extend(positions);
    }
}
