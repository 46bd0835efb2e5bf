//! Growing a tree online: levels added below the leaves.
//!
//! A block's leaf `x` becomes one of the leaves below it, `x·k^l + r` (`k` the
//! arity, `l` the levels added, `r` uniformly random): the old path is a prefix
//! of the new one, so no block has to move — a block stored on its old path is
//! on its new path — and the existing buckets keep their numbers, the new ones
//! following them ([`Geometry::deeper`]). Two phases:
//!
//! 1. **Prepare** ([`TreeEngine::grow_prepare`]): the growth is recorded in the
//!    trusted state as pending (target levels and capacity), then every bucket
//!    of the new levels is written as an empty bucket — sealed dummies, like
//!    [`oram_engine::Oram::format`] — in node order, 256 at a time. Each batch
//!    takes the round lock (after the round landing, if any), journals its
//!    buckets and commits, and lets go of the lock before it seals and PUTs
//!    them: rounds run beside the batches' PUTs, on the old tree, whose paths
//!    never reach the new buckets (a round's commit drops the journal entries
//!    of the batches that landed). Resuming skips the buckets already written
//!    (their version is set); a batch's PUTs that failed or never landed are
//!    in the journal and resent before anything else (after a crash, at
//!    start).
//! 2. **Switch** ([`TreeEngine::grow_switch`]): under the round lock, with no
//!    round landing or reading ahead and every interrupted round finished (an
//!    intent record's draws are leaves of the old tree), one commit of the
//!    trusted state extends every position (`x → x·k^l + r`, the `r` drawn from
//!    the engine's CSPRNG) and records the new levels and capacity; then the
//!    scheme in memory is replaced by the deeper one. No request goes out.
//!
//! The positions are extended at once rather than on each block's next access:
//! the switch costs one state transaction of one row per stored block and no
//! backend request, and afterwards there is a single kind of position — a lazy
//! scheme would have to tell old leaves from new ones per block for as long as
//! a block is not accessed, in every plan, eviction and check.
//!
//! Crash safety: before the switch commits, the durable state places every
//! block in the old tree and the engine opens at the old size (the pending
//! growth reported by [`TreeEngine::growth_pending`], resumed by growing again
//! to the same capacity); after it, at the new size. The new buckets are
//! referenced by the state from their batch's commit, so a sweep keeps them.
//!
//! Obliviousness: the PUTs of the prepare phase are a function of the tree's
//! shape (and of which new buckets an interrupted growth already wrote, which
//! the server saw); each new leaf is uniform and independent of everything the
//! server saw, as the old leaf was, so rounds after the switch are those of a
//! volume created at the new size.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use oram_blockstore::BlockStoreExt;
use oram_engine::{Grown, OramError, Result};
use oram_state::{StateError, TrustedState};
use rand::Rng;

use crate::{Geometry, Inner, TreeEngine, TreeParams, TreeScheme, FORMAT_BATCH};

/// Trusted-state key of the growth record (Ring ORAM's own keys are `c` and
/// nine-byte `i‖node`, `r‖node`).
const GROWTH_KEY: &[u8] = b"grow";
/// The record's format.
const GROWTH_FORMAT: u8 = 1;
/// Deepest tree (levels below the root) an engine opens or grows to.
const MAX_LEAF_LEVEL: u32 = 40;

/// The growth record: the shape in effect and a growth being prepared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Growth {
    /// The capacity the volume was created with (and must be configured with:
    /// the levels are counted from its tree); 0 if never grown.
    pub(crate) base: u64,
    /// Levels added below the configured tree and the capacity, in effect
    /// (`None`: the configured tree).
    pub(crate) done: Option<(u32, u64)>,
    /// A growth whose new buckets are being written: the levels (counted from
    /// the configured tree) and the capacity it switches to.
    pub(crate) pending: Option<(u32, u64)>,
}

fn put_pair(out: &mut Vec<u8>, pair: Option<(u32, u64)>) {
    let (levels, capacity) = pair.unwrap_or((0, 0));
    out.put_u32_le(levels);
    out.put_u64_le(capacity);
}

fn get_pair(b: &[u8]) -> Option<(u32, u64)> {
    let levels = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    let capacity = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
    (levels > 0).then_some((levels, capacity))
}

impl Growth {
    /// The record in `state` (none: never grown), refused if the engine is
    /// configured with another capacity than the volume was created with.
    pub(crate) fn open(state: &dyn TrustedState, params: &TreeParams) -> Result<Self> {
        let rec = Self::load(state)?;
        if rec.base != 0 && rec.base != params.capacity {
            return Err(OramError::Config(format!(
                "the volume was created with a capacity of {} blocks (and grew to {}): it must \
                 be opened with {0}, not {}",
                rec.base,
                rec.done.map_or(rec.base, |d| d.1),
                params.capacity
            )));
        }
        Ok(rec)
    }

    /// The record in `state` (none: never grown).
    pub(crate) fn load(state: &dyn TrustedState) -> Result<Self> {
        match state.meta(GROWTH_KEY) {
            None => Ok(Self::default()),
            Some(b) if b.len() == 33 && b[0] == GROWTH_FORMAT => Ok(Self {
                base: u64::from_le_bytes(b[1..9].try_into().expect("8 bytes")),
                done: get_pair(&b[9..21]),
                pending: get_pair(&b[21..33]),
            }),
            Some(_) => Err(StateError::Corrupt("malformed growth record".into()).into()),
        }
    }

    /// The levels a growth to `levels` (counted from the configured tree)
    /// adds to the tree in effect (0: a larger capacity in the room the tree
    /// has).
    fn added(&self, levels: u32) -> Result<u32> {
        levels
            .checked_sub(self.done.map_or(0, |d| d.0))
            .ok_or_else(|| {
                StateError::Corrupt("growth record: fewer levels than in effect".into()).into()
            })
    }

    fn store(&self, state: &mut dyn TrustedState) {
        let mut v = vec![GROWTH_FORMAT];
        v.put_u64_le(self.base);
        put_pair(&mut v, self.done);
        put_pair(&mut v, self.pending);
        state.set_meta(GROWTH_KEY, Bytes::from(v));
    }
}

/// `geo` with `levels` more levels, at most [`MAX_LEAF_LEVEL`] deep.
pub(crate) fn deeper(geo: &Geometry, levels: u32) -> Result<Geometry> {
    geo.deeper(levels)
        .filter(|g| g.leaf_level <= MAX_LEAF_LEVEL)
        .ok_or_else(|| {
            OramError::Config(format!(
                "a tree of {} levels cannot grow by {levels} (at most {MAX_LEAF_LEVEL} deep)",
                geo.leaf_level + 1
            ))
        })
}

/// The levels a tree created for `created` blocks grows by to hold
/// `capacity`, and the room it then has: it keeps the room per block it was
/// created with, each level multiplying it by `arity` — so that a tree grown
/// to `capacity` is the tree of a volume created for the returned room, and
/// several growths never make it larger than one growth to the same capacity.
pub fn grown_room(created: u64, capacity: u64, arity: u64) -> (u32, u64) {
    let (mut levels, mut room) = (0u32, created.max(1));
    while room < capacity {
        room = room.saturating_mul(arity.max(2));
        levels += 1;
    }
    (levels, room)
}

/// The id limit of a volume grown to `capacity`: the capacity if the limit was
/// the configured capacity, else the wider of the two.
pub(crate) fn grown_id_limit(params: &TreeParams, capacity: u64) -> u64 {
    if params.id_limit == params.capacity {
        capacity
    } else {
        params.id_limit.max(capacity)
    }
}

/// A growth to prepare or switch to.
struct Target {
    /// Levels this growth adds to the tree in effect.
    add: u32,
    /// The capacity it switches to.
    capacity: u64,
}

impl<S: TreeScheme> TreeEngine<S> {
    /// The growth prepared and not switched to (interrupted by a crash or a
    /// failure): the capacity to grow to again, which resumes it.
    pub async fn growth_pending(&self) -> Result<Option<u64>> {
        let g = self.inner.idle().await;
        Ok(Growth::load(g.state.as_ref())?.pending.map(|(_, c)| c))
    }

    /// Phase 1 of [`oram_engine::Oram::grow`] (see the module `grow`):
    /// records the growth to `capacity` as pending and writes every bucket of
    /// the new levels, beside the rounds; the engine stays at its old size.
    /// `progress(done, total)` counts the new buckets gone through.
    ///
    /// Observed by the storage server: a PUT of every new bucket not written
    /// yet, in node order, 256 at a time, beside the rounds (whose requests
    /// go on meanwhile).
    pub async fn grow_prepare(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        self.inner.grow_prepare(capacity, progress).await
    }

    /// Phase 2 of [`oram_engine::Oram::grow`]: once every round in progress
    /// is done, switches to the prepared growth in one commit of the trusted
    /// state (every position extended, the new shape recorded). Returns the
    /// new capacity, or `None` if no growth was prepared.
    ///
    /// Observed by the storage server: nothing (PUTs of new buckets whose
    /// first PUT failed, if any, as before any round), and a pause of the
    /// rounds for the commit.
    pub async fn grow_switch(&self) -> Result<Option<u64>> {
        let inner = self.inner.clone();
        oram_engine::detached(async move { inner.grow_switch().await }).await
    }
}

impl<S: TreeScheme> Inner<S> {
    /// The growth to `capacity`: the pending one, or a new one recorded as
    /// pending; `None` if the engine has that capacity already.
    async fn target(&self, capacity: u64) -> Result<Option<Target>> {
        let mut g = self.quiesce().await?;
        let rec = Growth::load(g.state.as_ref())?;
        let done = rec.done.map_or(0, |d| d.0);
        if let Some((levels, c)) = rec.pending {
            if c != capacity {
                return Err(OramError::Config(format!(
                    "a growth to {c} blocks is under way: grow to {c} to finish it first"
                )));
            }
            return Ok(Some(Target {
                add: rec.added(levels)?,
                capacity,
            }));
        }
        let current = self.capacity.load(Ordering::Acquire);
        if capacity < current {
            return Err(OramError::Config(format!(
                "a volume cannot shrink ({current} blocks, {capacity} asked for)"
            )));
        }
        if capacity == current {
            return Ok(None);
        }
        // The tree keeps the room per block it was created with: the levels
        // are counted from the configured tree, not from the capacity in
        // effect (which may be less than the room the tree has).
        let geo = *self.scheme().geometry();
        let (levels, _) = grown_room(self.params.capacity, capacity, geo.arity);
        let add = rec.added(levels.max(done))?;
        deeper(&geo, add)?;
        let levels = done + add;
        let rec = Growth {
            base: self.params.capacity,
            done: rec.done,
            pending: Some((levels, capacity)),
        };
        rec.store(g.state.as_mut());
        g.state.commit().await?;
        Ok(Some(Target { add, capacity }))
    }

    async fn grow_prepare(
        self: &Arc<Self>,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        let Some(t) = self.target(capacity).await? else {
            progress(0, 0);
            return Ok(Grown {
                capacity,
                ..Grown::default()
            });
        };
        // The bucket format does not depend on the depth: the scheme in effect
        // makes and seals the new buckets.
        let scheme = self.scheme();
        let old = *scheme.geometry();
        let geo = deeper(&old, t.add)?;
        let (first, last) = (old.node_count() + 1, geo.node_count());
        let mut out = Grown {
            capacity: t.capacity,
            positions: last + 1 - first,
            written: 0,
        };
        progress(0, out.positions);
        let mut node = first;
        while node <= last {
            let end = (node + FORMAT_BATCH).min(last + 1);
            // On a task of its own: a caller that goes away never leaves a
            // batch journaled and neither written nor queued to be resent.
            let batch = self.clone().grow_batch(scheme.clone(), node..end);
            out.written += oram_engine::detached(batch).await?;
            node = end;
            progress(node - first, out.positions);
        }
        Ok(out)
    }

    /// Writes the buckets of `nodes` not written yet (empty); returns how
    /// many. They are made and journaled under the round lock, then sealed and
    /// written with the lock let go: rounds go on meanwhile (they never read a
    /// bucket of the new levels before the switch), and the journal entries
    /// are dropped with a later round's commit.
    async fn grow_batch(self: Arc<Self>, scheme: Arc<S>, nodes: Range<u64>) -> Result<u64> {
        let written = {
            let mut g = self.idle().await;
            let rs = &mut *g;
            let todo: Vec<u64> = nodes.filter(|n| rs.state.node(*n).version == 0).collect();
            if todo.is_empty() {
                return Ok(0);
            }
            let mut written = Vec::with_capacity(todo.len());
            for n in todo {
                let plain = scheme.empty_bucket(rs.state.as_mut(), n, &mut rs.rng);
                let nv = rs.state.advance(n);
                rs.state.pending_put(n, nv, plain.clone());
                written.push((n, nv, plain));
            }
            // Journaled first: PUTs that fail or never land are resent before
            // anything else (after a crash, from the journal).
            rs.state.commit().await?;
            written
        };
        let mut items = Vec::with_capacity(written.len());
        for (n, nv, plain) in &written {
            items.push((
                self.sealing.key(*n, nv.slot),
                scheme.seal_bucket(&self.sealing, *n, nv, plain)?,
            ));
        }
        if let Err(e) = self.store.put_many_redoable(items).await {
            self.wb.requeue(written);
            return Err(e.into());
        }
        let n = written.len() as u64;
        self.wb
            .landed(written.into_iter().map(|(node, nv, _)| (node, nv.version)));
        Ok(n)
    }

    async fn grow_switch(self: Arc<Self>) -> Result<Option<u64>> {
        // No round in progress, none to finish (every intent record's draws are
        // leaves of the tree in effect), every journaled new bucket resent.
        let mut g = loop {
            let mut g = self.quiesce().await?;
            match g.sticky.pop_first() {
                Some((seq, intent)) => self.finish_interrupted(g, seq, intent).await?,
                None => break g,
            }
        };
        let rs = &mut *g;
        let rec = Growth::load(rs.state.as_ref())?;
        let Some((levels, capacity)) = rec.pending else {
            return Ok(None);
        };
        let scheme = self.scheme();
        let old = *scheme.geometry();
        let geo = deeper(&old, rec.added(levels)?)?;
        let id_limit = grown_id_limit(&self.params, capacity);
        let grown = scheme.grown(geo, id_limit)?;
        let first = old.node_count() + 1;
        if let Some(n) = (first..=geo.node_count()).find(|n| rs.state.node(*n).version == 0) {
            return Err(OramError::Config(format!(
                "bucket {n} of the growth to {capacity} blocks was never written: grow again"
            )));
        }
        // Every leaf x becomes a uniformly random leaf below it.
        let factor = geo.leaves / old.leaves;
        for (block, leaf) in rs.state.positions() {
            let below = rs.rng.gen_range(0..factor);
            rs.state.set_position(block, leaf * factor + below);
        }
        let rec = Growth {
            done: Some((levels, capacity)),
            pending: None,
            ..rec
        };
        rec.store(rs.state.as_mut());
        if let Err(e) = rs.state.stage().commit().await {
            rs.state.rollback();
            return Err(e.into());
        }
        rs.state.settle();
        *self.scheme.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(grown);
        self.capacity.store(capacity, Ordering::Release);
        self.id_limit.store(id_limit, Ordering::Release);
        drop(g);
        Ok(Some(capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oram_state::MemState;

    #[test]
    fn the_growth_record_round_trips_and_pins_the_created_capacity() {
        let mut state = MemState::new();
        let params = crate::TreeConfig {
            capacity: 100,
            ..crate::TreeConfig::default()
        }
        .params();
        assert_eq!(Growth::open(&state, &params).unwrap(), Growth::default());
        let rec = Growth {
            base: 100,
            done: Some((1, 200)),
            pending: Some((3, 800)),
        };
        rec.store(&mut state);
        assert_eq!(Growth::open(&state, &params).unwrap(), rec);
        // Opened with the grown capacity (or any other): refused, naming both.
        let other = crate::TreeConfig {
            capacity: 200,
            ..crate::TreeConfig::default()
        }
        .params();
        let e = Growth::open(&state, &other).unwrap_err().to_string();
        assert!(e.contains("100 blocks") && e.contains("grew to 200"), "{e}");
        state.set_meta(GROWTH_KEY, Bytes::from_static(&[GROWTH_FORMAT, 1]));
        assert!(Growth::load(&state).is_err());
        // Id limits: the capacity's, unless configured wider.
        assert_eq!(grown_id_limit(&params, 400), 400);
        let wide = crate::TreeConfig {
            capacity: 100,
            id_limit: Some(1000),
            ..crate::TreeConfig::default()
        }
        .params();
        assert_eq!(grown_id_limit(&wide, 400), 1000);
        assert_eq!(grown_id_limit(&wide, 4000), 4000);
    }

    #[test]
    fn the_room_is_counted_from_the_created_tree() {
        assert_eq!(grown_room(100, 100, 2), (0, 100));
        assert_eq!(grown_room(100, 150, 2), (1, 200));
        // 150 and then 250 or 450: the levels of one growth to 450.
        assert_eq!(grown_room(100, 250, 2), (2, 400));
        assert_eq!(grown_room(100, 450, 2), (3, 800));
        assert_eq!(grown_room(148, 420, 3), (1, 444));
    }
}
