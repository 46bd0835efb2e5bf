//! Ring ORAM (Ren et al., "Constants Count: Practical Improvements to Oblivious
//! RAM", USENIX Security 2015), built for a high-latency object store, as a
//! scheme of the shared tree core (`oram-tree`), a peer of Path ORAM.
//!
//! Bucket `n` is one backend object, `<prefix>/r/<n>` (or `<prefix>/r/<n>.<slot>`,
//! see [`oram_state::NodeVersion`]): a sealed header and Z + S separately sealed,
//! fixed-size slots (see [`layout`]). The bucket's metadata — block id per slot,
//! which slots were read, the read count — lives in the trusted state, under two
//! keys per bucket (the slot map, written with the bucket, and the read state,
//! changed by every read); the header repeats the ids (and leaves) sealed on the
//! backend. The top `cached_levels` levels live in the trusted state instead.
//!
//! One round of `k` ops (see `oram-tree` for the round, its intent record and the
//! write-back), in named steps (`round`):
//! 1. **draw leaves**: each op draws the leaf to read and a new leaf;
//! 2. **schedule evictions**: the round's EvictPaths are the next
//!    `⌊(n+k)/A⌋ − ⌊n/A⌋` leaves in reverse-lexicographic order (`n` = accesses so
//!    far);
//! 3. **plan reads**: a bucket on an eviction path, or one whose reads would reach
//!    S this round (an **early reshuffle**), is fetched whole; any other bucket
//!    gets one ranged GET of one slot per read path through it — the slot of the
//!    wanted block where it is, a uniformly random unread dummy elsewhere (at
//!    least `S − count > r` unread dummies are left); merging a reshuffle's read
//!    with the online read saves a round trip, and all requests go out
//!    concurrently (one round trip);
//! 4. **open and check** every part against its version and the metadata, and
//!    that every stored block the ops name is found;
//! 5. **serve** the ops from the stash;
//! 6. **evict and reshuffle**: the eviction paths are refilled greedily from the
//!    stash, reshuffled buckets get their blocks back in a new random permutation,
//!    and every rewritten bucket goes back to the backend. The permutations come
//!    from the round's seed, kept in its intent record (ChaCha20 keyed by the
//!    seed, a stream per bucket: [`oram_tree::RoundRandom`]), not from the
//!    engine's running generator: a round repeated after a failure lays its
//!    buckets out as its first attempt did, so the round that read ahead of it
//!    (planned on those layouts) is repeated with the same slots too.
//!
//! **What the storage server observes per round:** ranged GETs of one slot-sized
//! range of the buckets on `k` uniformly random paths (the slot uniformly random
//! among those not read since the bucket was written, whether it holds the wanted
//! block or a dummy), whole-object GETs and PUTs of the buckets on the eviction
//! paths (a fixed schedule) and of the buckets read S times (a function of the
//! random paths), all objects of one size. A round the server makes fail is
//! repeated exactly — the same ranges — then completed; so is a round that read
//! ahead of it. Freshness: every part is
//! sealed with the bucket's space, version and generation.
//!
//! **One object per bucket**, not one per slot: the backend bills and rate-limits
//! per request, so writing a bucket is one PUT instead of Z + S (96 with the
//! large preset), fetching it whole for an eviction is one GET, and listings,
//! [`oram_engine::Oram::sweep`] and [`oram_engine::Oram::check`] see `2^(L+1)`
//! objects rather than `(Z+S)·2^(L+1)`. Online reads are the same either way: one
//! ranged GET per bucket, all of one length at slot boundaries.
//!
//! **Metadata keys** in the trusted state (per-key metadata, part of snapshots
//! and checkpoints): `i‖node`, the block id in each slot, written when the bucket
//! is; `r‖node`, the read flags and read count, changed by every read through
//! the bucket — so a read rewrites only the small read state. The online read
//! needs no metadata round trip.
//!
//! **Parameters.** The presets ([`layout::RingPreset`]) are the paper's; S follows
//! its analytical model ([`layout::analytic_s`]: reads of a bucket between two of
//! its evictions are about Poisson(A), a bucket read S times is reshuffled early,
//! and S minimises the overall bandwidth — 6 for Z = 4, A = 3; 62 for Z = 33,
//! A = 48, within 0.02 % of the 63 used by the master's thesis "Oblivious RAM in
//! practice"). Z, S, A, the leaves and the cached levels are fixed when the
//! volume is created.
//! The cached levels are local buckets of Z real blocks (no dummies, no read
//! counts) that take part in evictions like backend buckets. A never-written
//! bucket reads as absent until its first rewrite; [`oram_engine::Oram::format`]
//! writes every one up front (all dummies, with their metadata).
//!
//! **Bandwidth** per access over `l` uncached levels: online, `l` ranged GETs of
//! one sealed slot and no metadata traffic; overall, per level, `(1 + ρ)/A`
//! whole-bucket GETs and PUTs, `ρ` the expected early reshuffles per eviction
//! period — per level in the engine's model
//! ([`layout::Layout::expected_per_access`], what
//! [`oram_engine::EngineSettings::model`] reports), by the paper's Poisson
//! approximation in [`layout::PaperBandwidth`]. The paper reads Z slots to evict
//! a bucket; by default (`ring_evict_read = "whole"`) the engine reads the whole
//! object, one request instead of Z, since requests cost more than bytes on S3 —
//! so its overall bytes are the paper's plus `S·l/A·(1 + ρ)` slots. `"slots"`
//! reads Z slots with Z ranged GETs, as the paper does. `tests/ring.rs` checks
//! the measured requests and bytes per access against the model (within 8 %),
//! and `benches/benches/ring_oram.rs` prints them beside the paper's and Path
//! ORAM's.

pub mod layout;
mod round;
mod settings;

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::{BufMut, Bytes};
use oram_engine::{CheckReport, Op, OramError, Result, Stat, StatKind};
use oram_seal::ObjectKind;
use oram_state::{NodeVersion, StateError, TrustedState};
use oram_tree::{
    Applied, ApplyCx, OpenCx, PlanCx, Requests, Sealing, TreeEngine, TreeParams, TreeScheme,
};
use rand_chacha::ChaCha20Rng;

pub use layout::{
    analytic_s, paper_bandwidth, Layout, Meta, PaperBandwidth, RingParams, RingPreset, DUMMY,
};
pub use oram_tree::{Geometry, TreeConfig};
pub use round::{RingNote, RingOpened, RingPlan};
pub use settings::RingSettings;

/// A Ring ORAM engine. Cheap to clone (shared state).
pub type RingOram = TreeEngine<RingScheme>;

/// How a bucket is read to evict or reshuffle it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictRead {
    /// One GET of the whole object (Z + S slots): one request per bucket.
    #[default]
    Whole,
    /// Z ranged GETs, as in the paper: every unread real slot and unread dummies to
    /// make up Z. Fewer bytes, Z requests per bucket.
    Slots,
}

impl EvictRead {
    /// The name used in the configuration (`whole`, `slots`).
    pub fn name(self) -> &'static str {
        match self {
            EvictRead::Whole => "whole",
            EvictRead::Slots => "slots",
        }
    }
}

impl std::str::FromStr for EvictRead {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "whole" => Ok(EvictRead::Whole),
            "slots" => Ok(EvictRead::Slots),
            _ => Err(format!(
                "unknown eviction read {s:?} (expected \"whole\" or \"slots\")"
            )),
        }
    }
}

/// Parameters of a Ring ORAM instance.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// What every tree engine is configured with. Here the stash bound defaults
    /// to 150 and the leaves to the power of two ≥ 2 · capacity / Z (room for
    /// about twice the blocks in real slots at the leaves alone).
    pub tree: TreeConfig,
    /// Z, S and A (see [`RingPreset`]).
    pub params: RingParams,
    /// How buckets are read for EvictPath and early reshuffles.
    pub evict_read: EvictRead,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            tree: TreeConfig {
                stash_bound: 150,
                ..TreeConfig::default()
            },
            params: RingPreset::Small.params(),
            evict_read: EvictRead::Whole,
        }
    }
}

impl RingConfig {
    /// The default stash bound for `params` and `max_batch`: a round may hold up
    /// to `max_batch` freshly read blocks on top of the steady-state stash, whose
    /// tail the stash test measures (≈ 2·A + 3·Z covers it with a wide margin).
    pub fn default_stash_bound(params: RingParams, max_batch: usize) -> usize {
        64 + 2 * params.a + 3 * params.z + max_batch
    }

    /// The default number of leaves for `capacity` blocks and `z` real slots per
    /// bucket: the power of two ≥ 2 · capacity / Z.
    pub fn leaves_for(capacity: u64, z: usize) -> u64 {
        (2 * capacity)
            .div_ceil(z.max(1) as u64)
            .max(1)
            .next_power_of_two()
    }
}

/// Counters specific to Ring ORAM (besides [`oram_engine::EngineStats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// EvictPath operations done.
    pub evictions: u64,
    /// Buckets reshuffled early (read S times before their eviction).
    pub early_reshuffles: u64,
    /// Online ranged reads that fetched the wanted block, by slot index.
    pub real_reads_by_slot: Vec<u64>,
    /// Online ranged reads of a dummy, by slot index.
    pub dummy_reads_by_slot: Vec<u64>,
}

/// Ring ORAM's part of the tree core: the bucket layout, the metadata and the
/// round's steps.
pub struct RingScheme {
    lay: Layout,
    cached_levels: u32,
    id_limit: u64,
    evict_read: EvictRead,
    /// Guards the counters of rounds already durable (updated once per round).
    stats: Mutex<RingStats>,
}

/// Trusted-state key of the engine's durable counters.
const COUNTERS_KEY: &[u8] = b"c";

/// Trusted-state key of bucket `node`'s slot map.
fn ids_key(node: u64) -> [u8; 9] {
    let mut k = [b'i'; 9];
    k[1..].copy_from_slice(&node.to_be_bytes());
    k
}

/// Trusted-state key of bucket `node`'s read state.
fn reads_key(node: u64) -> [u8; 9] {
    let mut k = [b'r'; 9];
    k[1..].copy_from_slice(&node.to_be_bytes());
    k
}

/// The engine's durable counters.
#[derive(Clone, Copy, Default)]
struct Counters {
    accesses: u64,
    evictions: u64,
}

impl Counters {
    fn load(state: &dyn TrustedState) -> Result<Self> {
        match state.meta(COUNTERS_KEY) {
            None => Ok(Self::default()),
            Some(b) if b.len() == 16 => Ok(Self {
                accesses: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                evictions: u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
            }),
            Some(_) => {
                Err(StateError::Corrupt("Ring ORAM counters of the wrong size".into()).into())
            }
        }
    }
    fn store(&self, state: &mut dyn TrustedState) {
        let mut v = Vec::with_capacity(16);
        v.put_u64_le(self.accesses);
        v.put_u64_le(self.evictions);
        state.set_meta(COUNTERS_KEY, v.into());
    }
}

impl RingScheme {
    /// The bucket layout (sizes, ranges).
    pub fn layout(&self) -> Layout {
        self.lay
    }

    /// Ring-specific counters.
    pub fn ring_stats(&self) -> RingStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn cached(&self, node: u64) -> bool {
        self.lay.geo.level(node) < self.cached_levels
    }

    fn load_meta(&self, state: &dyn TrustedState, node: u64) -> Result<Meta> {
        let slots = self.lay.slots();
        match state.meta(&ids_key(node)) {
            None => Ok(Meta::fresh(slots)),
            Some(ids) => {
                let reads = state.meta(&reads_key(node));
                Meta::decode(ids, reads.map(|r| r.as_ref()), slots)
                    .map_err(|e| StateError::Corrupt(format!("bucket {node}: {e}")).into())
            }
        }
    }

    /// Records a rewritten bucket's metadata (nothing read yet).
    fn store_new_meta(&self, state: &mut dyn TrustedState, node: u64, meta: &Meta) {
        state.set_meta(&ids_key(node), meta.encode_ids());
        state.remove_meta(&reads_key(node));
    }

    /// The plaintext of a bucket never written: all dummies (in any order: every
    /// dummy slot is the same).
    fn empty_plain(&self) -> Bytes {
        let lay = &self.lay;
        let mut v = Vec::with_capacity(lay.bucket_plain());
        for _ in 0..lay.slots() {
            v.put_u64_le(DUMMY);
            v.put_u64_le(0);
        }
        for _ in 0..lay.slots() {
            v.put_u64_le(DUMMY);
            v.resize(v.len() + lay.block_size, 0);
        }
        v.into()
    }

    /// Opens a whole bucket object fetched for `node` at `nv`: its plaintext, or
    /// that of an empty bucket if never written.
    fn open_bucket(
        &self,
        s: &Sealing,
        node: u64,
        nv: &NodeVersion,
        obj: Option<Bytes>,
    ) -> Result<Bytes> {
        let lay = &self.lay;
        let Some(sealed) = s.expect_object(node, nv, obj)? else {
            return Ok(self.empty_plain());
        };
        if sealed.len() != lay.object_len() {
            let len = sealed.len();
            let want = lay.object_len();
            return Err(s.integrity(node, nv, format!("object has {len} bytes, expected {want}")));
        }
        let mut plain = Vec::with_capacity(lay.bucket_plain());
        let h = &sealed[..lay.header_sealed()];
        plain.extend_from_slice(&s.open(node, lay.seal_position(node, 0), nv, h)?);
        for i in 0..lay.slots() {
            let r = lay.slot_range(i);
            let part = &sealed[r.start as usize..r.end as usize];
            plain.extend_from_slice(&s.open(node, lay.seal_position(node, 1 + i), nv, part)?);
        }
        if plain.len() != lay.bucket_plain() {
            return Err(s.integrity(node, nv, "malformed bucket"));
        }
        Ok(plain.into())
    }

    /// Checks that a bucket's plaintext agrees with the trusted metadata: the
    /// header and every slot name the block the metadata expects there.
    fn verify_bucket(
        &self,
        s: &Sealing,
        node: u64,
        nv: &NodeVersion,
        meta: &Meta,
        plain: &Bytes,
    ) -> Result<()> {
        let lay = &self.lay;
        let header = layout::decode_header(lay, &lay.header_of(plain))
            .map_err(|e| s.integrity(node, nv, e))?;
        for (i, ((hid, _), want)) in header.iter().zip(&meta.ids).enumerate() {
            let (sid, _) = layout::decode_slot(lay, &lay.slot_of(plain, i))
                .map_err(|e| s.integrity(node, nv, e))?;
            if hid != want || sid != *want {
                return Err(s.integrity(
                    node,
                    nv,
                    format!("slot {i} does not hold the block the metadata names"),
                ));
            }
        }
        Ok(())
    }
}

impl TreeScheme for RingScheme {
    type Config = RingConfig;
    type Plan = RingPlan;
    type Opened = RingOpened;
    type Note = RingNote;
    type CheckCx = HashMap<u64, std::result::Result<Meta, String>>;

    const NAME: &'static str = "ring";
    const DIR: &'static str = "r";
    const KIND: ObjectKind = ObjectKind::RingSlot;

    fn new(cfg: &RingConfig) -> Result<(Self, TreeParams)> {
        let p = cfg.params;
        if p.z == 0 || p.s == 0 || p.a == 0 {
            return Err(OramError::Config("Z, S and A must be positive".into()));
        }
        if p.z + p.s > 4096 {
            return Err(OramError::Config("Z + S above 4096 slots".into()));
        }
        let t = &cfg.tree;
        let leaves = t
            .leaves
            .unwrap_or_else(|| RingConfig::leaves_for(t.capacity, p.z));
        let geo = Geometry::new(t.capacity, p.z, t.block_size, Some(leaves));
        let lay = Layout {
            geo,
            params: p,
            block_size: t.block_size,
        };
        let slots = lay.slots();
        let scheme = Self {
            lay,
            cached_levels: t.cached_levels.min(geo.leaf_level + 1),
            id_limit: t.id_limit(),
            evict_read: cfg.evict_read,
            stats: Mutex::new(RingStats {
                real_reads_by_slot: vec![0; slots],
                dummy_reads_by_slot: vec![0; slots],
                ..RingStats::default()
            }),
        };
        Ok((scheme, t.params()))
    }

    fn geometry(&self) -> &Geometry {
        &self.lay.geo
    }

    fn cached_levels(&self) -> u32 {
        self.cached_levels
    }

    /// A bucket's layout (Z + S slots, its seal positions) does not depend on
    /// the depth, nor does the metadata of the buckets already written; the
    /// eviction schedule goes on over the new leaves (reverse-lexicographic
    /// order of the eviction count modulo the leaves). The headers of buckets
    /// written before keep the leaves their blocks had then (prefixes of
    /// their leaves now); nothing checks a header's leaves.
    fn grown(&self, geo: Geometry, id_limit: u64) -> Result<Self> {
        Ok(Self {
            lay: Layout { geo, ..self.lay },
            cached_levels: self.cached_levels,
            id_limit,
            evict_read: self.evict_read,
            stats: Mutex::new(self.ring_stats()),
        })
    }

    fn object_len(&self) -> u64 {
        self.lay.object_len() as u64
    }

    /// Seals a bucket's plaintext part by part into its backend object.
    fn seal_bucket(
        &self,
        s: &Sealing,
        node: u64,
        nv: &NodeVersion,
        plain: &Bytes,
    ) -> Result<Bytes> {
        let lay = &self.lay;
        let mut out = Vec::with_capacity(lay.object_len());
        out.extend_from_slice(&s.seal(lay.seal_position(node, 0), nv, &lay.header_of(plain))?);
        for i in 0..lay.slots() {
            let position = lay.seal_position(node, 1 + i);
            out.extend_from_slice(&s.seal(position, nv, &lay.slot_of(plain, i))?);
        }
        debug_assert_eq!(out.len(), lay.object_len());
        Ok(out.into())
    }

    fn part_range(&self, slot: usize) -> std::ops::Range<u64> {
        self.lay.slot_range(slot)
    }

    fn empty_bucket(
        &self,
        state: &mut dyn TrustedState,
        node: u64,
        rng: &mut ChaCha20Rng,
    ) -> Bytes {
        let (meta, plain) = layout::shuffle_bucket(&self.lay, &[], rng);
        self.store_new_meta(state, node, &meta);
        plain
    }

    fn plan(&self, cx: &mut PlanCx<'_, '_>, blocks: &[Option<u64>]) -> Result<RingPlan> {
        self.plan_round(cx, blocks)
    }

    fn requests(&self, plan: &RingPlan) -> Requests {
        plan.requests()
    }

    fn open(&self, cx: OpenCx<'_>, plan: &RingPlan) -> Result<RingOpened> {
        self.open_round(cx, plan)
    }

    fn apply(
        &self,
        cx: ApplyCx<'_>,
        plan: RingPlan,
        opened: RingOpened,
        ops: Vec<Op>,
    ) -> Result<Applied<RingNote>> {
        self.apply_round(cx, plan, opened, ops)
    }

    fn committed(&self, note: RingNote) {
        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        st.evictions += note.evictions;
        st.early_reshuffles += note.reshuffles;
        for (slot, real) in note.online_reads {
            if real {
                st.real_reads_by_slot[slot] += 1;
            } else {
                st.dummy_reads_by_slot[slot] += 1;
            }
        }
    }

    fn stats(&self) -> Vec<Stat> {
        let st = self.ring_stats();
        vec![
            Stat {
                name: "ring_evictions_total",
                help: "Ring ORAM EvictPath operations.",
                kind: StatKind::Counter,
                value: st.evictions,
            },
            Stat {
                name: "ring_early_reshuffles_total",
                help: "Ring ORAM buckets reshuffled early (read S times before their eviction).",
                kind: StatKind::Counter,
                value: st.early_reshuffles,
            },
        ]
    }

    fn check_prepare(&self, state: &dyn TrustedState) -> Self::CheckCx {
        let slots = self.lay.slots();
        state
            .meta_range(b"i")
            .into_iter()
            .filter_map(|(k, ids)| {
                let node = u64::from_be_bytes(k.get(1..9)?.try_into().ok()?);
                let reads = state.meta(&reads_key(node));
                Some((node, Meta::decode(&ids, reads.map(|r| r.as_ref()), slots)))
            })
            .collect()
    }

    fn check_bucket(
        &self,
        s: &Sealing,
        metas: &Self::CheckCx,
        node: u64,
        nv: &NodeVersion,
        obj: Option<Bytes>,
        rep: &mut CheckReport,
    ) -> Result<Vec<(u64, Bytes)>> {
        let lay = &self.lay;
        let meta = match metas.get(&node) {
            None => Meta::fresh(lay.slots()),
            Some(Ok(m)) => m.clone(),
            Some(Err(e)) => {
                rep.problem(format!("bucket {node}: metadata: {e}"));
                return Ok(Vec::new());
            }
        };
        if meta.count as usize != meta.read.iter().filter(|r| **r).count()
            || meta.count as usize >= lay.params.s
        {
            rep.problem(format!(
                "bucket {node}: read count {} inconsistent (S = {})",
                meta.count, lay.params.s
            ));
        }
        if nv.version == 0 && obj.is_none() {
            if !meta.valid_real().is_empty() {
                rep.problem(format!("never-written bucket {node} has real blocks"));
            }
            return Ok(Vec::new());
        }
        let plain = self.open_bucket(s, node, nv, obj)?;
        self.verify_bucket(s, node, nv, &meta, &plain)?;
        let mut blocks = Vec::new();
        for (i, b) in meta.valid_real() {
            if let Ok((_, d)) = layout::decode_slot(lay, &lay.slot_of(&plain, i)) {
                blocks.push((b, d));
            }
        }
        Ok(blocks)
    }
}
