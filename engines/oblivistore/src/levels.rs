//! The levels of one hierarchical partition: their sizes, which level an
//! eviction builds from which, the layout of a shuffled level, and the analytical
//! cost of an access, the check of a batch. Synchronous and free of I/O.

use std::collections::HashSet;

use bytes::{Buf, BufMut, Bytes};
use oram_engine::{validate_op, Op, OramError, Result};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::{NodeVersion, StateError, TrustedState};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// The block id a dummy slot holds.
pub(crate) const DUMMY: u64 = u64::MAX;

/// Bytes of a slot's plaintext before the block: the block id.
pub(crate) const SLOT_HEADER: usize = 8;

/// The sizes of one partition's levels.
///
/// Level `ℓ` (0 ≤ ℓ ≤ `top`), when filled, is one backend object of `2^(ℓ+1)`
/// sealed slots of one size: at most `2^ℓ` real blocks, the rest dummies, in a
/// uniformly random order. The top level holds the partition's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The top level: `2^top` ≥ the blocks the partition is sized for.
    pub top: u32,
    /// Bytes per block.
    pub block_size: usize,
}

/// How an eviction reads the levels it empties (`oblivistore_shuffle_read`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShuffleRead {
    /// One GET of each level's whole object (`2^(ℓ+1)` slots), which also
    /// serves the partition read's slot: one request per level, twice the
    /// shuffle's bytes.
    #[default]
    Whole,
    /// A ranged GET per slot the shuffle takes (`2^ℓ` of each level) and the
    /// partition read's: the fewest bytes, `2^ℓ + 1` requests per level.
    Slots,
}

impl ShuffleRead {
    /// The name used in the configuration (`whole`, `slots`).
    pub fn name(self) -> &'static str {
        match self {
            ShuffleRead::Whole => "whole",
            ShuffleRead::Slots => "slots",
        }
    }
}

impl std::str::FromStr for ShuffleRead {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "whole" => Ok(ShuffleRead::Whole),
            "slots" => Ok(ShuffleRead::Slots),
            _ => Err(format!("\"{s}\" is not \"whole\" or \"slots\"")),
        }
    }
}

/// What one partition access (a read of every filled level and the eviction
/// that follows it) costs on average over the partition's eviction counter,
/// once the partition has been filled to its top level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerAccess {
    /// Slots read: one of each filled level the eviction leaves alone, every
    /// slot of each level it empties (its shuffle's).
    pub read_slots: f64,
    /// Slots written (the level each eviction builds).
    pub written_slots: f64,
    /// GET requests: one per filled level (a ranged GET of one slot, or a
    /// GET of the whole level).
    pub gets: f64,
    /// PUT requests (one level object per eviction).
    pub puts: f64,
}

impl Geometry {
    /// The levels of a partition of `capacity` blocks.
    pub fn for_capacity(capacity: u64, block_size: usize) -> Self {
        Self {
            top: capacity.max(1).next_power_of_two().trailing_zeros(),
            block_size,
        }
    }

    /// Slots of level `l`.
    pub fn slots(&self, l: u32) -> u64 {
        2u64 << l
    }

    /// Real blocks level `l` may hold.
    pub fn reals(&self, l: u32) -> u64 {
        1u64 << l
    }

    /// Bytes of one sealed slot.
    pub fn slot_len(&self) -> usize {
        Sealer::sealed_len(SLOT_HEADER + self.block_size)
    }

    /// Bytes of level `l`'s object.
    pub fn level_bytes(&self, l: u32) -> u64 {
        self.slots(l) * self.slot_len() as u64
    }

    /// The analytical cost of one partition access in steady state, averaged
    /// over one cycle of the eviction counter (`2^top` evictions).
    /// The levels an eviction empties are read as `read` says.
    pub fn expected_per_access(&self, read: ShuffleRead) -> PerAccess {
        let mut filled = vec![false; self.top as usize + 1];
        filled[self.top as usize] = true;
        let cycle = 1u64 << self.top;
        let mut cost = PerAccess {
            read_slots: 0.0,
            written_slots: 0.0,
            gets: 0.0,
            puts: 0.0,
        };
        for _ in 0..cycle {
            let reads = filled.iter().filter(|&&f| f).count() as f64;
            let (j, sources) = eviction_target(&filled);
            match read {
                // A level the eviction empties is read whole (its partition
                // read's slot with it), every other filled level one slot.
                ShuffleRead::Whole => {
                    let whole: u64 = sources.iter().map(|&l| self.slots(l)).sum();
                    cost.read_slots += reads - sources.len() as f64 + whole as f64;
                    cost.gets += reads;
                }
                ShuffleRead::Slots => {
                    let merged: u64 = sources.iter().map(|&l| self.reals(l)).sum();
                    cost.read_slots += reads + merged as f64;
                    cost.gets += reads + merged as f64;
                }
            }
            cost.written_slots += self.slots(j) as f64;
            cost.puts += 1.0;
            for l in sources {
                filled[l as usize] = false;
            }
            filled[j as usize] = true;
        }
        let n = cycle as f64;
        PerAccess {
            read_slots: cost.read_slots / n,
            written_slots: cost.written_slots / n,
            gets: cost.gets / n,
            puts: cost.puts / n,
        }
    }

    /// An upper bound of the bytes one partition's trusted state takes in a
    /// snapshot: its positions, every level's layout, version and dummy
    /// counter, and the partition's secret.
    pub fn state_bound(&self) -> u64 {
        let row = oram_engine::snapshot_row;
        // The positions, the secret and a growth's top level.
        let positions = self.reals(self.top) * row(8, 8) + row(1, 32) + row(1, 4);
        let levels: u64 = (0..=self.top)
            .map(|l| row(2, 8 + 12 * self.slots(l)) + row(2, 4) + row(8, 48))
            .sum();
        positions + levels
    }
}

/// The level an eviction builds, given which levels are filled, and the filled
/// levels it empties into it: the lowest empty level, built from every level
/// below it (all filled); when all are filled, the top level again, from all of
/// them. Depends only on the partition's eviction counter.
pub(crate) fn eviction_target(filled: &[bool]) -> (u32, Vec<u32>) {
    let top = filled.len() as u32 - 1;
    match filled.iter().position(|f| !f) {
        Some(j) => (j as u32, (0..j as u32).collect()),
        None => (top, (0..=top).collect()),
    }
}

/// The layout of a filled level, fixed when it was shuffled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `(offset, block)` of every real block written into the level (a block
    /// read since is still listed: it is at this offset no more when its
    /// position says otherwise).
    pub reals: Vec<(u32, u64)>,
    /// The dummy offsets in the (random) order they are read: reads and
    /// shuffles take the next unread one (the paper's GetNextDummy), so a round
    /// repeated after a failure reads the same slots.
    pub dummies: Vec<u32>,
}

impl Layout {
    /// The layout as stored in the trusted state.
    pub fn encode(&self) -> Bytes {
        let mut b = Vec::with_capacity(8 + 12 * self.reals.len() + 4 * self.dummies.len());
        b.put_u32(self.reals.len() as u32);
        for &(off, block) in &self.reals {
            b.put_u32(off);
            b.put_u64(block);
        }
        b.put_u32(self.dummies.len() as u32);
        for &off in &self.dummies {
            b.put_u32(off);
        }
        b.into()
    }

    /// Decodes a stored layout of a level of `slots` slots.
    pub fn decode(mut b: &[u8], slots: u64) -> Result<Self> {
        let bad = || OramError::State(StateError::Corrupt("an ObliviStore level layout".into()));
        let take_u32 = |b: &mut &[u8]| {
            if b.remaining() < 4 {
                Err(bad())
            } else {
                Ok(b.get_u32())
            }
        };
        let n = take_u32(&mut b)? as usize;
        if n as u64 > slots || b.remaining() < n * 12 {
            return Err(bad());
        }
        let mut reals = Vec::with_capacity(n);
        for _ in 0..n {
            let off = b.get_u32();
            reals.push((off, b.get_u64()));
        }
        let d = take_u32(&mut b)? as usize;
        if (n + d) as u64 != slots || b.remaining() != d * 4 {
            return Err(bad());
        }
        let dummies: Vec<u32> = (0..d).map(|_| b.get_u32()).collect();
        if reals
            .iter()
            .map(|r| r.0)
            .chain(dummies.iter().copied())
            .any(|o| u64::from(o) >= slots)
        {
            return Err(bad());
        }
        Ok(Self { reals, dummies })
    }
}

/// The position a block at `offset` of level `l` is recorded at.
pub(crate) fn join(l: u32, offset: u32) -> u64 {
    (u64::from(l) << 32) | u64::from(offset)
}

/// The level and offset of a recorded position.
pub(crate) fn split(pos: u64) -> (u32, u32) {
    ((pos >> 32) as u32, pos as u32)
}

/// What slot `offset` of level `l` in `space`, at version `nv`, is.
pub(crate) fn slot_identity(space: u32, l: u32, offset: u32, nv: NodeVersion) -> ObjectIdentity {
    ObjectIdentity {
        kind: ObjectKind::LevelSlot,
        space,
        position: join(l, offset),
        version: nv.version,
        generation: nv.generation,
    }
}

/// The object of level `l` at version `nv`: every slot sealed in order, a real
/// block's as its id and data, a dummy's as [`DUMMY`] and zeros.
pub(crate) fn seal_level(
    sealer: &Sealer,
    space: u32,
    l: u32,
    nv: NodeVersion,
    block_size: usize,
    contents: &[Option<(u64, Bytes)>],
) -> Result<Bytes> {
    let len = Sealer::sealed_len(SLOT_HEADER + block_size);
    let mut object = Vec::with_capacity(contents.len() * len);
    let zeros = vec![0u8; block_size];
    let mut plain = Vec::with_capacity(SLOT_HEADER + block_size);
    for (off, slot) in contents.iter().enumerate() {
        plain.clear();
        match slot {
            Some((b, d)) => {
                plain.put_u64(*b);
                plain.extend_from_slice(d);
            }
            None => {
                plain.put_u64(DUMMY);
                plain.extend_from_slice(&zeros);
            }
        }
        let sealed = sealer
            .seal(&slot_identity(space, l, off as u32, nv), &plain)
            .map_err(OramError::Seal)?;
        object.extend_from_slice(&sealed);
    }
    Ok(object.into())
}

/// The key of a partition's secret: the seed of its levels' permutations.
pub(crate) const SECRET_KEY: &[u8] = b"S";

/// The generator of level `l`'s permutation at version `nv`: ChaCha20 keyed by
/// the partition's secret, one stream per (version, generation), one region of
/// it per level.
pub(crate) fn permutation_rng(secret: &[u8], l: u32, nv: NodeVersion) -> ChaCha20Rng {
    let mut key = [0u8; 32];
    key.copy_from_slice(&secret[..32]);
    let mut rng = ChaCha20Rng::from_seed(key);
    rng.set_stream(nv.version ^ nv.generation.rotate_left(32));
    rng.set_word_pos(u128::from(l) << 48);
    rng
}

/// The trusted-state key of level `l`'s layout.
pub(crate) fn layout_key(l: u32) -> [u8; 2] {
    [b'L', l as u8]
}

/// The trusted-state key of the top level a growth switched to (`crate::grow`).
pub(crate) const TOP_KEY: &[u8] = b"T";

/// The trusted-state key of level `l`'s count of dummies read.
pub(crate) fn counter_key(l: u32) -> [u8; 2] {
    [b'N', l as u8]
}

/// Checks `ops` is a framework's batch for this partition: accesses (takes
/// of blocks held, dummies) each followed by at most one insert of a block
/// not held (or taken earlier in the batch).
pub(crate) fn check_batch(
    st: &dyn TrustedState,
    ops: &[Op],
    id_limit: u64,
    block_size: usize,
) -> Result<()> {
    let mut taken = HashSet::new();
    let mut after_access = false;
    for op in ops {
        validate_op(op, id_limit, block_size)?;
        match op {
            Op::Take(b) => {
                taken.insert(*b);
                after_access = true;
            }
            Op::Dummy => after_access = true,
            Op::Insert(b, _) => {
                if !after_access {
                    return Err(OramError::Unsupported(
                        "an insert rides on the access before it (one per access)",
                    ));
                }
                if st.position(*b).is_some() && !taken.contains(b) {
                    return Err(OramError::Unsupported(
                        "insert of a block the engine holds (write it instead)",
                    ));
                }
                after_access = false;
            }
            Op::Read(_) | Op::Write(..) => {
                return Err(OramError::Unsupported(
                    "a hierarchical partition serves its framework's takes, dummies \
                     and inserts",
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evictions_follow_a_binary_counter_and_refill_the_top() {
        let mut filled = vec![false; 3];
        let mut seen = Vec::new();
        for _ in 0..9 {
            let (j, sources) = eviction_target(&filled);
            for l in &sources {
                filled[*l as usize] = false;
            }
            filled[j as usize] = true;
            seen.push((j, sources));
        }
        assert_eq!(
            seen,
            vec![
                (0, vec![]),
                (1, vec![0]),
                (0, vec![]),
                (2, vec![0, 1]),
                (0, vec![]),
                (1, vec![0]),
                (0, vec![]),
                (2, vec![0, 1, 2]),
                (0, vec![]),
            ]
        );
    }

    #[test]
    fn a_level_is_read_at_most_as_often_as_it_has_dummies() {
        // Every access reads each filled level once and is followed by one
        // eviction: a level lives 2^l evictions, so at most 2^l reads, and its
        // shuffle then takes 2^l more slots: 2^(l+1) in all, its size.
        let top = 4;
        let g = Geometry::for_capacity(1 << top, 8);
        let mut filled = vec![false; top as usize + 1];
        let mut reads = vec![0u64; top as usize + 1];
        for _ in 0..1000 {
            for (l, f) in filled.iter().enumerate() {
                if *f {
                    reads[l] += 1;
                }
            }
            let (j, sources) = eviction_target(&filled);
            for &l in &sources {
                assert!(reads[l as usize] + g.reals(l) <= g.slots(l), "level {l}");
                filled[l as usize] = false;
                reads[l as usize] = 0;
            }
            filled[j as usize] = true;
        }
    }

    #[test]
    fn the_analytical_cost_counts_reads_shuffles_and_puts() {
        // top = 1: levels 0 (2 slots) and 1 (4 slots). Steady state from {1}:
        // evict → level 0 (reads: a slot of level 1, one GET); evict → all
        // filled, top rebuilt from 0 and 1, both read whole (2 + 4 slots, two
        // GETs).
        let g = Geometry::for_capacity(2, 8);
        assert_eq!(g.top, 1);
        let c = g.expected_per_access(ShuffleRead::Whole);
        assert_eq!(c.read_slots, (1.0 + 6.0) / 2.0);
        assert_eq!(c.gets, (1.0 + 2.0) / 2.0);
        assert_eq!(c.written_slots, (2.0 + 4.0) / 2.0);
        assert_eq!(c.puts, 1.0);
        // Slot by slot: 2 filled + 1 + 2 merged slots, a GET each.
        let c = g.expected_per_access(ShuffleRead::Slots);
        assert_eq!(c.read_slots, (1.0 + 5.0) / 2.0);
        assert_eq!(c.gets, (1.0 + 5.0) / 2.0);
        assert_eq!(c.written_slots, (2.0 + 4.0) / 2.0);
    }

    #[test]
    fn layouts_round_trip_and_bad_ones_are_corrupt() {
        let l = Layout {
            reals: vec![(3, 17), (0, 2)],
            dummies: vec![1, 2],
        };
        assert_eq!(Layout::decode(&l.encode(), 4).unwrap(), l);
        assert!(Layout::decode(&l.encode(), 8).is_err(), "wrong slot count");
        let out = Layout {
            reals: vec![(9, 1)],
            dummies: vec![0, 1, 2],
        };
        assert!(
            Layout::decode(&out.encode(), 4).is_err(),
            "offset out of range"
        );
        assert!(Layout::decode(&[0, 0], 4).is_err());
        assert_eq!(split(join(5, 77)), (5, 77));
    }
}
