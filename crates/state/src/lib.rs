//! Trusted local state: what an ORAM engine must remember and the cloud must never see.
//!
//! Engines keep their position map, stash, per-object versions (for freshness),
//! locally cached buckets (tree-top cache), per-key metadata, write-back journal and
//! intent record behind [`TrustedState`]: one **space** (namespace) of the state.
//! [`SpaceState`] implements it; kept in memory only it is [`MemState`], and the
//! durable state database (`oram-statedb`) hands out the same type bound to its
//! group committer.
//!
//! # Commits
//!
//! Changes are made in memory and grouped by commits. [`TrustedState::commit`]
//! hands every change since the last commit to the durable store *at the call*
//! and returns a [`CommitFuture`] that resolves when they are durable; the caller
//! may release its locks before awaiting it. [`TrustedState::stage`] takes the
//! changes without committing them: a parent engine merges the [`Staged`] changes
//! of several spaces (and its own) and commits them once, atomically; once that
//! commit resolves, each space [`TrustedState::settle`]s (durable) or
//! [`TrustedState::rollback`]s (not) its changes.
//!
//! A durable store that fails a commit is **failed**: that commit and every later
//! one fail ([`StateError::Failed`]); the process must restart and reloads the last
//! durable state. (A database that saw an I/O error cannot be trusted to hold
//! what a retry would write.)
//!
//! Metadata above the engine (the object layer's index of buckets, objects and
//! uploads) lives behind [`KvState`], an ordered byte map with the same commits;
//! [`MemKv`] is its in-memory implementation.

mod codec;
mod commit;
mod kv;
mod space;
mod tracked;

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

pub use codec::{
    decode_bucket, decode_node, decode_pending, encode_bucket, encode_node, encode_pending,
};
pub use commit::{ready, ChangeSet, CommitFuture, Durable, Staged, Table, TableWrite};
pub use kv::{btree_range, KvMap, KvState, MemKv};
pub use space::{MemState, Opener, SpaceState};
pub use tracked::{Layers, Tracked};

/// The contents of one tree bucket: `(block id, block data)` for every real block in it.
pub type Bucket = Vec<(u64, Bytes)>;

/// Errors of the trusted state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing the state's storage failed.
    #[error("trusted state I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The stored state is inconsistent or was written by something else.
    #[error("trusted state corrupt: {0}")]
    Corrupt(String),
    /// The database holding the state failed this commit. The store is failed
    /// from now on (see [`StateError::Failed`]).
    #[error("trusted state storage: {0}")]
    Storage(String),
    /// The durable store failed an earlier commit and accepts none since: restart
    /// the process, which reloads the last durable state.
    #[error("trusted state failed earlier ({0}); restart to reload the last durable state")]
    Failed(String),
}

/// A namespace of the trusted state: the engine of one partition, one sub-ORAM.
/// Every table is keyed by space, so two spaces never see each other's entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Space(pub u32);

/// Where the write of a backend position may go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlotPolicy {
    /// The write lands only after the commit that makes it current (it is
    /// journaled first): it may overwrite the live object once that object is no
    /// longer one the last checkpoint refers to. Two slots per position.
    #[default]
    AfterCommit,
    /// The write may land *before* the commit that makes it current (the tree
    /// engines' rounds, a whole-level shuffle written ahead): it must overwrite
    /// neither the live object nor the one the last checkpoint refers to, and a
    /// position's first write spares the slot a never-written position is read
    /// at. Three slots per position.
    BeforeCommit,
}

/// The version and storage slot of one backend position (a tree node, a block).
///
/// Every position has up to three backend objects per bank (slots 0, 1, 2 in
/// bank 0; see [`bank_of`] for the others). Writes never
/// go to the slot the last checkpoint refers to ([`TrustedState::epoch`] counts
/// checkpoints), so the objects of a checkpoint stay untouched until the next
/// checkpoint is durable and a machine rebuilt from it finds every one of them;
/// writes that land before their commit ([`SlotPolicy::BeforeCommit`]) also spare
/// the live object. Which slot is written depends only on which positions were
/// written since the checkpoint, which the storage server sees anyway.
///
/// `generation` is the state's generation when the position was written: a random
/// number drawn when the state is created and at every restore from a checkpoint,
/// bound into the object's seal, so that an object of a lost timeline (written
/// after the checkpoint a state was restored from) never opens as current even
/// where its version number repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeVersion {
    /// Writes of this position so far; 0 = never written (no object).
    pub version: u64,
    /// The slot holding the current version.
    pub slot: u8,
    /// The epoch of the last write.
    pub epoch: u64,
    /// The state's generation at the last write.
    pub generation: u64,
    /// The slot the last checkpoint refers to, when the position was written in
    /// the current epoch (otherwise it is `slot`); [`NO_SLOT`] when the
    /// checkpoint has no object of the position.
    pub base: u8,
}

/// Slots a position may use within one bank.
pub const SLOTS: u8 = 3;

/// Banks of [`SLOTS`] slots each. A state writes in the bank of its generation
/// ([`bank_of`]); a restore from a checkpoint draws its new generation in the
/// next bank (`oram_statedb`). So the writes of a restored state — a recovered
/// volume, a cluster node's slot taken over by another machine — never go to an
/// object name its predecessor wrote in: a write of the predecessor still under
/// way (a paused process resuming, a PUT already on the wire) can only land on
/// a name of the old bank, which the successor reads only for positions it has
/// not rewritten, at the slot that was live then (never the one a write was
/// going to). The bank is a function of how many restores a volume went
/// through, which the storage server sees anyway. Five banks: a write delayed
/// across five restores would meet its own bank again.
pub const BANKS: u8 = 5;

/// The number of slot values in use: slots `0..SLOT_LIMIT` (bank `b` holds
/// `b * SLOTS .. (b + 1) * SLOTS`); [`NO_SLOT`] is the first value past them.
pub const SLOT_LIMIT: u8 = SLOTS * BANKS;

/// The bank writes in `generation` go to (see [`BANKS`]).
pub fn bank_of(generation: u64) -> u8 {
    (generation % u64::from(BANKS)) as u8
}

/// The slots of the bank `slot` belongs to (none for [`NO_SLOT`]).
fn bank_slots(slot: u8) -> std::ops::Range<u8> {
    if slot >= SLOT_LIMIT {
        return 0..0;
    }
    let first = slot / SLOTS * SLOTS;
    first..first + SLOTS
}

impl NodeVersion {
    /// A position never written, as a state in `generation` reads it: version
    /// 0 (no object expected) at the first slot of the generation's bank,
    /// which stays empty until a write of the position is committed. (Slot 0
    /// in bank 0; a restored state reads elsewhere, so that the first write of
    /// a position by the process it replaced, landing late, is not taken for
    /// an object the provider planted.)
    pub fn unwritten(generation: u64) -> Self {
        Self {
            slot: bank_of(generation) * SLOTS,
            ..Self::default()
        }
    }

    /// The version after one more write during `epoch`, in `generation`, under
    /// `policy`.
    pub fn next(self, epoch: u64, generation: u64, policy: SlotPolicy) -> Self {
        let written = self.version > 0;
        let this_epoch = written && self.epoch == epoch;
        // The slot the last checkpoint refers to ([`NO_SLOT`] if it refers to no
        // object of this position).
        let ckpt = match (written, this_epoch) {
            (false, _) => NO_SLOT,
            (true, true) => self.base,
            (true, false) => self.slot,
        };
        // Slots of this generation's bank: a slot of another bank is never
        // written (see [`BANKS`]), so avoiding it is free.
        let bank = bank_of(generation) * SLOTS;
        let pick = |avoid: &[u8]| {
            (bank..bank + SLOTS)
                .find(|s| !avoid.contains(s))
                .expect("three slots avoid two")
        };
        // A slot this generation wrote, which it may overwrite in place.
        let own = written && self.generation == generation;
        let slot = match (policy, written) {
            // The bank's first slot (in bank 0, the slot a never-written
            // position is read at: the write lands after its commit).
            (SlotPolicy::AfterCommit, false) => pick(&[]),
            // The slot a never-written position is read at must stay empty
            // until the write is committed (an object there is an integrity
            // error: one the provider planted).
            (SlotPolicy::BeforeCommit, false) => pick(&[self.slot]),
            (SlotPolicy::AfterCommit, true) if this_epoch && own => self.slot,
            (SlotPolicy::AfterCommit, true) => pick(&[self.slot, ckpt]),
            (SlotPolicy::BeforeCommit, true) => pick(&[self.slot, ckpt]),
        };
        Self {
            version: self.version + 1,
            slot,
            epoch,
            generation,
            base: ckpt,
        }
    }

    /// The slots of this position whose objects nothing refers to once the
    /// checkpoint that began epoch `landed` is on the backend ([`Lineage::landed`]):
    /// none if the position was written since (its other slots may hold that
    /// checkpoint's object, or a write landing before its commit) or at most once
    /// (only its current slot was ever written); else every slot but the current
    /// one — which the state and that checkpoint both refer to — of the banks
    /// of its current slot and of its base ([`NodeVersion::slots`]). Which slots
    /// these are depends only on which positions were written and when the
    /// checkpoints and restores were taken, all of which the storage server sees
    /// anyway.
    pub fn superseded(&self, landed: u64) -> impl Iterator<Item = u8> {
        let done = self.version > 1 && self.epoch < landed;
        let current = self.slot;
        self.slots().filter(move |s| done && *s != current)
    }

    /// Every slot this position may hold an object in that its state can tell:
    /// those of the bank of its current slot and, when the last checkpoint's
    /// object is in another bank (the position's first write after a restore),
    /// those of that bank. Objects of earlier banks still (a write of a
    /// replaced process landing late) are left to a sweep.
    pub fn slots(&self) -> impl Iterator<Item = u8> {
        let (current, base) = (bank_slots(self.slot), bank_slots(self.base));
        let other = if base == current { 0..0 } else { base };
        current.chain(other)
    }
}

/// The `base` of a position the last checkpoint has no object of (first written
/// since).
pub const NO_SLOT: u8 = 0xf;

/// A write of a backend position that is durable in the trusted state but maybe
/// not yet on the backend: `(position, version, plaintext)`.
pub type PendingWrite = (u64, NodeVersion, Bytes);

/// The checkpoint epoch and the generation a state writes in, shared by every
/// space of one store.
#[derive(Debug, Default)]
pub struct Lineage {
    epoch: AtomicU64,
    generation: AtomicU64,
    /// See [`Lineage::landed`].
    landed: AtomicU64,
}

impl Lineage {
    /// A lineage at `epoch` in `generation`.
    pub fn new(epoch: u64, generation: u64) -> Self {
        Self {
            epoch: AtomicU64::new(epoch),
            generation: AtomicU64::new(generation),
            landed: AtomicU64::new(0),
        }
    }
    /// The checkpoint epoch (checkpoints completed).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }
    /// The generation (random; new at every restore).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
    /// Moves to `epoch` (once it is durable).
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
    }
    /// Moves to `generation` (once it is durable).
    pub fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::SeqCst);
    }
    /// The epoch begun by the last checkpoint known to be on the backend (0: none
    /// known): a position last written in an earlier epoch is referred to, at
    /// its current slot, by that checkpoint and by the state alike, so its other
    /// slots hold nothing a restart or a rebuild could need
    /// ([`NodeVersion::superseded`]). Never above [`Lineage::epoch`].
    pub fn landed(&self) -> u64 {
        self.landed.load(Ordering::SeqCst).min(self.epoch())
    }
    /// Records that the checkpoint which began `epoch` is on the backend.
    pub fn set_landed(&self, epoch: u64) {
        self.landed.fetch_max(epoch, Ordering::SeqCst);
    }
}

/// The trusted state of one space. Never leaves the proxy machine unsealed.
///
/// Positions are leaves for tree engines; versions count the writes of a backend
/// position (node, slot or block) so that replayed older objects are detected.
/// See the crate documentation for commits, staging and failures.
pub trait TrustedState: Send + 'static {
    /// The space this state belongs to.
    fn space(&self) -> Space;
    /// The state of another space of the same durable store, loaded as last
    /// committed (empty if never used), whose changes can be committed together
    /// with this one's ([`Staged::merge`]): for a partition framework's
    /// sub-engines. A state in memory gives an empty state in memory.
    fn sibling(&self, space: Space) -> Result<Box<dyn TrustedState>, StateError>;

    /// The leaf `block` is mapped to, or `None` if the block is not stored.
    fn position(&self, block: u64) -> Option<u64>;
    /// Maps `block` to `leaf`.
    fn set_position(&mut self, block: u64, leaf: u64);
    /// Forgets `block`'s position (the block is no longer stored).
    fn remove_position(&mut self, block: u64);
    /// Number of blocks with a position.
    fn positions_len(&self) -> u64;
    /// Every `(block, leaf)` pair, in block order.
    fn positions(&self) -> Vec<(u64, u64)>;

    /// The current version of backend position `pos` (if never written,
    /// [`NodeVersion::unwritten`] in the state's generation).
    fn node(&self, pos: u64) -> NodeVersion;
    /// Records one more write of `pos` ([`SlotPolicy::AfterCommit`]) and returns
    /// its version.
    fn advance(&mut self, pos: u64) -> NodeVersion {
        self.advance_with(pos, SlotPolicy::AfterCommit)
    }
    /// Records one more write of `pos` under `policy` and returns its version.
    fn advance_with(&mut self, pos: u64, policy: SlotPolicy) -> NodeVersion {
        let next = self.node(pos).next(self.epoch(), self.generation(), policy);
        self.set_node(pos, next);
        next
    }
    /// Sets the version of `pos`.
    fn set_node(&mut self, pos: u64, nv: NodeVersion);
    /// Every written position with its version, in position order.
    fn nodes(&self) -> Vec<(u64, NodeVersion)>;
    /// The checkpoint epoch writes happen in (0 when never checkpointed).
    fn epoch(&self) -> u64;
    /// The generation writes happen in.
    fn generation(&self) -> u64;
    /// The epoch begun by the last checkpoint known to be on the backend
    /// ([`Lineage::landed`]; 0 when none is known).
    fn landed(&self) -> u64;

    /// Puts `block` into the stash (replacing an earlier copy).
    fn stash_insert(&mut self, block: u64, data: Bytes);
    /// Takes `block` out of the stash.
    fn stash_remove(&mut self, block: u64) -> Option<Bytes>;
    /// The stashed copy of `block`.
    fn stash_get(&self, block: u64) -> Option<&Bytes>;
    /// Number of blocks in the stash.
    fn stash_len(&self) -> usize;
    /// The ids of all stashed blocks, in ascending order.
    fn stash_blocks(&self) -> Vec<u64>;

    /// A bucket kept locally instead of on the backend (tree-top cache); `None` if
    /// never set (an empty bucket).
    fn local_bucket(&self, node: u64) -> Option<&Bucket>;
    /// Replaces a locally kept bucket.
    fn set_local_bucket(&mut self, node: u64, bucket: Bucket);

    /// Engine-specific metadata under an engine-chosen key (Ring ORAM: a bucket's
    /// slot map and its read state, as two keys), opaque to the state. A change
    /// rewrites only its own key.
    fn meta(&self, key: &[u8]) -> Option<&Bytes>;
    /// Sets the metadata under `key`.
    fn set_meta(&mut self, key: &[u8], value: Bytes);
    /// Removes the metadata under `key`.
    fn remove_meta(&mut self, key: &[u8]);
    /// Every metadata entry whose key starts with `prefix`, in key order.
    fn meta_range(&self, prefix: &[u8]) -> Vec<(Vec<u8>, Bytes)>;

    /// Journals a write of `pos` that the backend may not have yet. Replaces an
    /// earlier journaled write of `pos`.
    fn pending_put(&mut self, pos: u64, nv: NodeVersion, plain: Bytes);
    /// Drops the journaled write of `pos` if it is still `version` (it landed).
    fn pending_done(&mut self, pos: u64, version: u64);
    /// Every journaled write, in position order: after a crash they are sent again.
    fn pending(&self) -> Vec<PendingWrite>;

    /// The intent records, by round sequence number (ascending): what each round
    /// in progress reads, committed before its reads go out, so that after a
    /// crash the same rounds are finished first, in this order. At most two: a
    /// round whose writes are landing and one reading ahead of it.
    fn intents(&self) -> Vec<(u64, Bytes)>;
    /// Sets or clears intent record `seq`, as a change like any other.
    fn set_intent(&mut self, seq: u64, intent: Option<Bytes>);
    /// Sets or clears intent record `seq` **on its own**, outside the changes
    /// since the last settle, and returns it staged for a commit of its own: for
    /// a round that reads ahead while an earlier round's changes are staged and
    /// not yet durable. In memory the record is part of the baseline at once (a
    /// rollback of the earlier changes keeps it). `seq` must not have been
    /// changed since the last settle.
    fn stage_intent(&mut self, seq: u64, intent: Option<Bytes>) -> Staged;

    /// The changes since the last [`TrustedState::settle`], to be committed (alone
    /// or merged with other spaces' changes) by the caller, who then settles them
    /// (durable) or rolls them back (not). Stage once per settle.
    fn stage(&mut self) -> Staged;
    /// The staged changes are durable: they can no longer be undone.
    fn settle(&mut self);
    /// Undoes every change since the last settle (every layer's: see
    /// [`TrustedState::stage_layer`]).
    fn rollback(&mut self);
    /// As [`TrustedState::stage`], then a new layer of changes begins: for a
    /// parent with several rounds in flight, each round's changes staged on
    /// their own while later rounds change the state. Once the oldest staged
    /// layer's commit is durable, [`TrustedState::settle_oldest`] makes it the
    /// baseline; if it fails, [`TrustedState::rollback`] undoes every layer.
    fn stage_layer(&mut self) -> Staged;
    /// The oldest layer [`TrustedState::stage_layer`] staged is durable (with
    /// no layer staged: as [`TrustedState::settle`]).
    fn settle_oldest(&mut self);
    /// Hands every change since the last settle to the durable store now and
    /// settles them; the future resolves when they are durable. On error the store
    /// is failed (see the crate documentation); memory keeps the changes. An
    /// engine that wants to undo a failed commit stages, awaits, and settles or
    /// rolls back itself.
    fn commit(&mut self) -> CommitFuture {
        let staged = self.stage();
        self.settle();
        staged.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_flip_once_per_epoch_after_commit() {
        let p = SlotPolicy::AfterCommit;
        let v0 = NodeVersion::default();
        let a = v0.next(0, 5, p);
        assert_eq!((a.version, a.slot, a.generation), (1, 0, 5));
        let b = a.next(0, 5, p);
        assert_eq!((b.version, b.slot), (2, 0));
        let c = b.next(1, 5, p);
        assert_eq!((c.version, c.slot, c.epoch, c.base), (3, 1, 1, 0));
        let d = c.next(1, 5, p);
        assert_eq!((d.version, d.slot, d.generation), (4, 1, 5));
        let e = d.next(3, 5, p);
        assert_eq!((e.version, e.slot), (5, 0));
        // First write in a later epoch goes to slot 0 (nothing to protect).
        assert_eq!(v0.next(7, 0, p).slot, 0);
    }

    #[test]
    fn a_new_generation_writes_in_its_own_bank_and_never_over_its_predecessor() {
        for p in [SlotPolicy::AfterCommit, SlotPolicy::BeforeCommit] {
            // Written twice in generation 5 (bank 0) during epoch 3.
            let old = NodeVersion::default().next(2, 5, p).next(3, 5, p);
            assert!(old.slot < SLOTS && old.base < SLOTS);
            // A restore in generation 6 (bank 1), the same epoch or a later one:
            // neither the live slot nor the checkpoint's is written, nor any
            // other of bank 0, where a late write of generation 5 could land.
            for epoch in [3, 4] {
                let new = old.next(epoch, 6, p);
                assert_eq!(bank_of(new.generation), 1);
                assert!((SLOTS..2 * SLOTS).contains(&new.slot), "{p:?} {new:?}");
                // Once a checkpoint after it landed, its predecessors' slots go.
                let mut gone: Vec<u8> = new.superseded(epoch + 1).collect();
                gone.sort_unstable();
                let expect: Vec<u8> = (0..2 * SLOTS).filter(|s| *s != new.slot).collect();
                assert_eq!(gone, expect, "{p:?} epoch {epoch}");
                // Written again in its bank: its own bank only from then on.
                let again = new.next(epoch + 1, 6, p).next(epoch + 2, 6, p);
                assert!((SLOTS..2 * SLOTS).contains(&again.base));
                assert!(again
                    .superseded(epoch + 3)
                    .all(|s| (SLOTS..2 * SLOTS).contains(&s)));
            }
            // A never-written position written first in bank 4.
            let first = NodeVersion::default().next(0, 4, p);
            assert!((4 * SLOTS..5 * SLOTS).contains(&first.slot));
            assert!(first.slot < SLOT_LIMIT && SLOT_LIMIT <= NO_SLOT);
        }
    }

    #[test]
    fn writes_ahead_of_their_commit_spare_the_live_and_the_checkpoint_slot() {
        let p = SlotPolicy::BeforeCommit;
        let mut nv = NodeVersion::default().next(0, 5, p);
        assert_eq!(nv.slot, 1, "a first write spares the never-written slot");
        assert_eq!(nv.base, NO_SLOT);
        // Until a checkpoint refers to one, two objects take turns.
        let mut used = std::collections::BTreeSet::new();
        for _ in 0..5 {
            let next = nv.next(0, 5, p);
            assert_ne!(next.slot, nv.slot, "overwrote the live object");
            used.insert(next.slot);
            nv = next;
        }
        assert_eq!(used.len(), 2, "{used:?}");
        // Each later epoch: the checkpoint refers to the slot live at its start.
        for epoch in 1..6u64 {
            let ckpt = nv.slot;
            for _ in 0..4 {
                let live = nv.slot;
                let next = nv.next(epoch, 5, p);
                assert_ne!(next.slot, live, "overwrote the live object");
                assert_ne!(next.slot, ckpt, "overwrote the checkpoint's object");
                assert!(next.slot < SLOTS, "generation 5 writes in bank 0");
                assert_eq!(next.base, ckpt);
                nv = next;
            }
        }
    }
}
