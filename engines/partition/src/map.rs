//! The position map block → partition and the eviction cache.

use std::collections::{BTreeSet, HashSet};

use bytes::Bytes;
use oram_state::{Layers, Staged, StateError, TrustedState};
use rand::Rng;

/// Where a block is, as the trusted state says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    /// Never written, or taken.
    Nowhere,
    /// In the eviction cache, assigned to this partition (not yet written there).
    Cached(u32),
    /// Stored in this partition.
    Stored(u32),
}

/// The position map block → partition and the eviction cache, over one space
/// of the trusted state (see the crate documentation).
pub struct PartitionMap {
    state: Box<dyn TrustedState>,
    partitions: u32,
    /// For each partition, the cached blocks assigned to it (an index of the
    /// stash, rebuilt from the state at load and after a rollback).
    waiting: Vec<BTreeSet<u64>>,
    /// For each partition, the blocks stored in it (counted at load, kept up
    /// to date by every move).
    stored: Vec<u64>,
    /// The moves into (`true`) and out of (`false`) partitions since the last
    /// settle, in the state's layers ([`PartitionMap::stage_layer`]), undone
    /// by a rollback.
    moved: Layers<Vec<(u32, bool)>>,
}

impl std::fmt::Debug for PartitionMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionMap")
            .field("partitions", &self.partitions)
            .field("cached", &self.cache_len())
            .finish_non_exhaustive()
    }
}

/// The map space's metadata key of the next round's number.
const NEXT_ROUND: &[u8] = b"partition/next_round";

/// The map space's metadata key of the growth record (`crate::grow`).
const GROWN: &[u8] = b"partition/grown";

/// Bytes of the growth record: a format byte, the capacity created with, the
/// capacity in effect and the partition limit in effect (0: none).
const GROWN_LEN: usize = 1 + 8 + 8 + 8;

/// The growth record's format.
const GROWN_FORMAT: u8 = 1;

/// The bytes the map's metadata adds to a snapshot of the trusted state, at
/// most (for an engine's [`oram_engine::EngineSettings::state_bound`]): the
/// next round's number and the growth record.
pub const MAP_META_BOUND: u64 =
    (4 + 4 + 4 + NEXT_ROUND.len() as u64 + 8) + (4 + 4 + 4 + GROWN.len() as u64 + GROWN_LEN as u64);

/// What a growth of the engine recorded in the map's space: the capacity it
/// was created with (and must be configured with), and the capacity and
/// partition limit in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrownTo {
    /// The capacity the engine was created with, in blocks.
    pub base: u64,
    /// The capacity in effect, in blocks.
    pub capacity: u64,
    /// The most blocks one partition may hold now, if the engine limits it.
    pub partition_limit: Option<u64>,
}

impl PartitionMap {
    /// The map of `partitions` partitions kept in `state` (as last committed).
    /// A partition number out of range is a corrupt state.
    pub fn load(state: Box<dyn TrustedState>, partitions: u32) -> Result<Self, StateError> {
        if partitions == 0 {
            return Err(StateError::Corrupt(
                "a partition map of no partitions".into(),
            ));
        }
        let mut map = Self {
            state,
            partitions,
            waiting: vec![BTreeSet::new(); partitions as usize],
            stored: vec![0; partitions as usize],
            moved: Layers::default(),
        };
        for (b, p) in map.state.positions() {
            if p >= u64::from(partitions) {
                return Err(StateError::Corrupt(format!(
                    "block {b} is in partition {p} of {partitions}"
                )));
            }
            if map.state.stash_get(b).is_none() {
                map.stored[p as usize] += 1;
            }
        }
        map.reindex()?;
        Ok(map)
    }

    fn reindex(&mut self) -> Result<(), StateError> {
        for w in &mut self.waiting {
            w.clear();
        }
        for b in self.state.stash_blocks() {
            let p = self
                .state
                .position(b)
                .ok_or_else(|| StateError::Corrupt(format!("cached block {b} has no partition")))?;
            self.waiting[p as usize].insert(b);
        }
        Ok(())
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The trusted state of the map (for statistics and checks).
    pub fn state(&self) -> &dyn TrustedState {
        self.state.as_ref()
    }

    /// Blocks stored in partition `p` (cached blocks assigned to it are not).
    pub fn stored(&self, p: u32) -> u64 {
        self.stored[p as usize]
    }

    fn count(&mut self, p: u32, into: bool) {
        let n = &mut self.stored[p as usize];
        *n = if into { *n + 1 } else { n.saturating_sub(1) };
        self.moved.open_mut().push((p, into));
    }

    /// Where block `b` is.
    pub fn locate(&self, b: u64) -> Where {
        match self.state.position(b) {
            None => Where::Nowhere,
            Some(p) if self.state.stash_get(b).is_some() => Where::Cached(p as u32),
            Some(p) => Where::Stored(p as u32),
        }
    }

    /// The data of a cached block.
    pub fn cached(&self, b: u64) -> Option<&Bytes> {
        self.state.stash_get(b)
    }

    /// Puts block `b` (its current data) in the eviction cache, assigned to
    /// partition `p`; wherever it was before, it is there no more.
    pub fn cache(&mut self, b: u64, data: Bytes, p: u32) {
        if let Where::Stored(q) = self.locate(b) {
            self.count(q, false);
        }
        self.unindex(b);
        self.state.set_position(b, u64::from(p));
        self.state.stash_insert(b, data);
        self.waiting[p as usize].insert(b);
    }

    /// Block `b` is stored nowhere any more (taken).
    pub fn forget(&mut self, b: u64) {
        if let Where::Stored(q) = self.locate(b) {
            self.count(q, false);
        }
        self.unindex(b);
        self.state.remove_position(b);
        self.state.stash_remove(b);
    }

    fn unindex(&mut self, b: u64) {
        if let Where::Cached(p) = self.locate(b) {
            self.waiting[p as usize].remove(&b);
        }
    }

    /// Takes from the eviction cache one block assigned to partition `p`, none of
    /// `except`, and records it as stored there (the caller writes it there in
    /// the same commit). `None` when no such block waits: the eviction writes a
    /// dummy.
    pub fn evict(&mut self, p: u32, except: &HashSet<u64>) -> Option<(u64, Bytes)> {
        let b = *self.waiting[p as usize]
            .iter()
            .find(|b| !except.contains(b))?;
        self.waiting[p as usize].remove(&b);
        let data = self.state.stash_remove(b)?;
        self.count(p, true);
        Some((b, data))
    }

    /// Takes block `b` from the eviction cache if it waits there for partition
    /// `p`, recording it as stored there (an eviction repeated as recorded).
    pub fn evict_block(&mut self, b: u64, p: u32) -> Option<Bytes> {
        if self.locate(b) != Where::Cached(p) {
            return None;
        }
        self.waiting[p as usize].remove(&b);
        let data = self.state.stash_remove(b)?;
        self.count(p, true);
        Some(data)
    }

    /// Whether a block other than `except` waits in the eviction cache for
    /// partition `p`.
    pub fn waits(&self, p: u32, except: &HashSet<u64>) -> bool {
        self.waiting[p as usize].iter().any(|b| !except.contains(b))
    }

    /// The intent records of the map's space (see [`TrustedState::intents`]).
    pub fn intents(&self) -> Vec<(u64, Bytes)> {
        self.state.intents()
    }

    /// Records (or, with `None`, drops) intent record `seq`, staged on its own
    /// (see [`TrustedState::stage_intent`]).
    pub fn stage_intent(&mut self, seq: u64, intent: Option<Bytes>) -> Staged {
        self.state.stage_intent(seq, intent)
    }

    /// Drops intent record `seq` with the next commit of the map.
    pub fn clear_intent(&mut self, seq: u64) {
        self.state.set_intent(seq, None);
    }

    /// Blocks in the eviction cache.
    pub fn cache_len(&self) -> usize {
        self.state.stash_len()
    }

    /// Blocks stored in partitions or cached.
    pub fn blocks(&self) -> u64 {
        self.state.positions_len()
    }

    /// Every block with its partition, and whether it is cached.
    pub fn all(&self) -> Vec<(u64, Where)> {
        self.state
            .positions()
            .into_iter()
            .map(|(b, _)| (b, self.locate(b)))
            .collect()
    }

    /// The number the next round gets: above every round committed or
    /// recorded before, restarts included (0 for a new map).
    pub fn next_round(&self) -> u64 {
        let committed = self
            .state
            .meta(NEXT_ROUND)
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_le_bytes);
        let recorded = self.state.intents().last().map_or(0, |(s, _)| s + 1);
        committed.max(recorded)
    }

    /// Records, with the next commit of the map, that the next round is `seq`.
    pub fn set_next_round(&mut self, seq: u64) {
        self.state
            .set_meta(NEXT_ROUND, Bytes::copy_from_slice(&seq.to_le_bytes()));
    }

    /// The growth last committed (`None`: never grown).
    pub fn grown(&self) -> Result<Option<GrownTo>, StateError> {
        let Some(b) = self.state.meta(GROWN) else {
            return Ok(None);
        };
        if b.len() != GROWN_LEN || b[0] != GROWN_FORMAT {
            return Err(StateError::Corrupt("malformed growth record".into()));
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Some(GrownTo {
            base: word(1),
            capacity: word(9),
            partition_limit: Some(word(17)).filter(|&l| l != 0),
        }))
    }

    /// Records `grown` with the next commit of the map.
    pub fn set_grown(&mut self, grown: GrownTo) {
        let mut v = Vec::with_capacity(GROWN_LEN);
        v.push(GROWN_FORMAT);
        v.extend_from_slice(&grown.base.to_le_bytes());
        v.extend_from_slice(&grown.capacity.to_le_bytes());
        v.extend_from_slice(&grown.partition_limit.unwrap_or(0).to_le_bytes());
        self.state.set_meta(GROWN, Bytes::from(v));
    }

    /// The changes since the last settle, to be committed with the partitions'
    /// (see [`TrustedState::stage`]).
    pub fn stage(&mut self) -> Staged {
        self.state.stage()
    }

    /// The staged changes are durable.
    pub fn settle(&mut self) {
        self.state.settle();
        self.moved.settle();
    }

    /// The changes since the last settle or staged layer, staged as a layer
    /// of their own (see [`TrustedState::stage_layer`]): a round in flight's,
    /// while the next round changes the map.
    pub fn stage_layer(&mut self) -> Staged {
        self.moved.seal();
        self.state.stage_layer()
    }

    /// The oldest layer staged is durable.
    pub fn settle_oldest(&mut self) {
        self.state.settle_oldest();
        self.moved.settle_oldest();
    }

    /// Undoes every change since the last settle, every layer's.
    pub fn rollback(&mut self) -> Result<(), StateError> {
        self.state.rollback();
        for moves in self.moved.take_newest_first() {
            for (p, into) in moves.into_iter().rev() {
                let n = &mut self.stored[p as usize];
                *n = if into { n.saturating_sub(1) } else { *n + 1 };
            }
        }
        self.reindex()
    }
}

/// A partition drawn uniformly at random among `partitions`.
pub fn draw(rng: &mut impl Rng, partitions: u32) -> u32 {
    rng.gen_range(0..partitions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oram_state::MemState;
    use rand::SeedableRng;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn a_block_moves_through_the_cache_and_a_rollback_restores_the_index() {
        let mut m = PartitionMap::load(Box::new(MemState::new()), 4).unwrap();
        assert_eq!(m.locate(7), Where::Nowhere);
        m.cache(7, b("x"), 2);
        assert_eq!(m.locate(7), Where::Cached(2));
        assert_eq!(m.evict(1, &HashSet::new()), None);
        assert_eq!(
            m.evict(2, &HashSet::from([7])),
            None,
            "an excluded block stays"
        );
        assert_eq!(m.evict_block(7, 1), None, "not waiting for that partition");
        assert!(m.waits(2, &HashSet::new()) && !m.waits(2, &HashSet::from([7])));
        assert_eq!(m.stored(2), 0);
        assert_eq!(m.evict(2, &HashSet::new()), Some((7, b("x"))));
        assert_eq!(m.locate(7), Where::Stored(2));
        assert_eq!(m.stored(2), 1);
        drop(m.stage());
        m.settle();
        // Read again: cached for partition 3, then the round is undone.
        m.cache(7, b("y"), 3);
        m.cache(8, b("z"), 3);
        assert_eq!(m.cache_len(), 2);
        assert_eq!(m.stored(2), 0, "block 7 left partition 2");
        m.rollback().unwrap();
        assert_eq!(m.locate(7), Where::Stored(2));
        assert_eq!(m.stored(2), 1, "the rollback counts it there again");
        assert_eq!(m.locate(8), Where::Nowhere);
        assert_eq!(m.evict(3, &HashSet::new()), None, "the index was rebuilt");
        m.forget(7);
        assert_eq!(m.locate(7), Where::Nowhere);
        assert_eq!(m.stored(2), 0);
        assert_eq!(m.blocks(), 0);
        // Counted at load from the state.
        drop(m.stage());
        m.settle();
        m.cache(9, b("w"), 1);
        assert!(m.evict(1, &HashSet::new()).is_some());
        drop(m.stage());
        m.settle();
        let m = PartitionMap::load(m.state, 4).unwrap();
        assert_eq!((m.stored(1), m.stored(2)), (1, 0));
    }

    #[test]
    fn a_partition_out_of_range_is_a_corrupt_state() {
        let mut s = MemState::new();
        s.set_position(1, 9);
        assert!(PartitionMap::load(Box::new(s), 4).is_err());
        assert!(PartitionMap::load(Box::new(MemState::new()), 0).is_err());
    }

    #[test]
    fn draws_are_uniform() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut n = [0u32; 8];
        for _ in 0..80_000 {
            n[draw(&mut rng, 8) as usize] += 1;
        }
        assert!(n.iter().all(|&c| (9_000..11_000).contains(&c)), "{n:?}");
    }
}
