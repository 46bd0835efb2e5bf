//! Pure, synchronous Ring ORAM mechanics: the bucket object's layout, the per-bucket
//! metadata, slot choice, shuffling, the eviction order and the analytical
//! bandwidth model. No I/O, so they are tested directly.
//!
//! A bucket is one backend object of fixed size:
//!
//! ```text
//! sealed header ‖ sealed slot 0 ‖ sealed slot 1 ‖ … ‖ sealed slot Z+S−1
//! ```
//!
//! Each part is sealed on its own (kind `RingSlot`, position
//! `node × (Z+S+1) + part`, part 0 the header, part `1 + i` slot `i`, version = the
//! bucket's version), so one slot is fetched and authenticated with one ranged GET
//! of `slot_range(i)`. A slot's plaintext is `block id (u64 LE) ‖ block`, a dummy's
//! id is [`DUMMY`] and its block zeros. The header's plaintext is, per slot, the
//! block id and the leaf the block was mapped to when the bucket was written: the
//! bucket's metadata, sealed to the backend so that it can be rebuilt from there.
//! (After the tree grew, a bucket written before keeps its blocks' leaves of
//! then: prefixes of their leaves now, which a rebuild would have to extend.)

use bytes::{BufMut, Bytes};
use oram_seal::OVERHEAD;
use oram_tree::Geometry;
use rand::seq::SliceRandom;
use rand::Rng;

/// Block id of a dummy slot.
pub const DUMMY: u64 = u64::MAX;

/// Z, S and A of a Ring ORAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingParams {
    /// Real slots per bucket (Z).
    pub z: usize,
    /// Dummy slots per bucket (S): a bucket is reshuffled after S reads.
    pub s: usize,
    /// Eviction rate (A): one EvictPath every A accesses.
    pub a: usize,
}

/// The paper's recommended settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingPreset {
    /// Small client storage: Z = 4, A = 3, S = 6 ([`analytic_s`] of Z and A).
    Small,
    /// Large client storage (as in the master's thesis "Oblivious RAM in
    /// practice", Thoresen, NTNU 2019): Z = 33, A = 48, S = 63.
    Large,
}

impl RingPreset {
    /// The preset's Z, S and A.
    pub fn params(self) -> RingParams {
        match self {
            RingPreset::Small => RingParams { z: 4, s: 6, a: 3 },
            RingPreset::Large => RingParams {
                z: 33,
                s: 63,
                a: 48,
            },
        }
    }

    /// The preset's name (`small`, `large`).
    pub fn name(self) -> &'static str {
        match self {
            RingPreset::Small => "small",
            RingPreset::Large => "large",
        }
    }
}

impl std::str::FromStr for RingPreset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "small" => Ok(RingPreset::Small),
            "large" => Ok(RingPreset::Large),
            _ => Err(format!(
                "unknown Ring ORAM preset {s:?} (expected \"small\" or \"large\")"
            )),
        }
    }
}

/// Sizes of a bucket object and of its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The tree.
    pub geo: Geometry,
    /// Z, S, A.
    pub params: RingParams,
    /// Bytes per block.
    pub block_size: usize,
}

impl Layout {
    /// The expected backend work of one access over the uncached levels
    /// `cached..=L`: `(ranged, whole)` — slot reads of the read path (one per
    /// level, less the share of buckets an eviction or early reshuffle rewrote
    /// first) and whole buckets read (and written) by evictions, every A
    /// accesses, and early reshuffles. The analytical figure the bandwidth
    /// measurements compare with.
    pub fn expected_per_access(&self, cached: u32) -> (f64, f64) {
        let p = self.params;
        let a = p.a as f64;
        let (mut ranged, mut whole) = (0.0, 0.0);
        for l in cached..=self.geo.leaf_level {
            let per = 1u64 << l;
            let rho = expected_reshuffles_binomial(p.a as u64 * per - 1, 1.0 / per as f64, p.s);
            ranged += 1.0 - 1.0 / (a * per as f64) - rho / a;
            whole += (1.0 + rho) / a;
        }
        (ranged, whole)
    }

    /// Slots per bucket, Z + S.
    pub fn slots(&self) -> usize {
        self.params.z + self.params.s
    }
    /// Plaintext bytes of one slot.
    pub fn slot_plain(&self) -> usize {
        8 + self.block_size
    }
    /// Sealed bytes of one slot: what one online ranged GET transfers.
    pub fn slot_sealed(&self) -> usize {
        self.slot_plain() + OVERHEAD
    }
    /// Plaintext bytes of the header.
    pub fn header_plain(&self) -> usize {
        16 * self.slots()
    }
    /// Sealed bytes of the header.
    pub fn header_sealed(&self) -> usize {
        self.header_plain() + OVERHEAD
    }
    /// Plaintext of a whole bucket (header, then the slots), as journaled.
    pub fn bucket_plain(&self) -> usize {
        self.header_plain() + self.slots() * self.slot_plain()
    }
    /// Bytes of a bucket object on the backend.
    pub fn object_len(&self) -> usize {
        self.header_sealed() + self.slots() * self.slot_sealed()
    }
    /// The byte range of slot `i` inside the bucket object.
    pub fn slot_range(&self, i: usize) -> std::ops::Range<u64> {
        let start = (self.header_sealed() + i * self.slot_sealed()) as u64;
        start..start + self.slot_sealed() as u64
    }
    /// The seal position of part `part` (0 = header, 1 + i = slot i) of `node`.
    pub fn seal_position(&self, node: u64, part: usize) -> u64 {
        node * (self.slots() as u64 + 1) + part as u64
    }
    /// The plaintext of slot `i` inside a bucket's plaintext.
    pub fn slot_of(&self, plain: &Bytes, i: usize) -> Bytes {
        let s = self.header_plain() + i * self.slot_plain();
        plain.slice(s..s + self.slot_plain())
    }
    /// The header part of a bucket's plaintext.
    pub fn header_of(&self, plain: &Bytes) -> Bytes {
        plain.slice(..self.header_plain())
    }
    /// The leaf evicted by the `g`-th EvictPath: reverse-lexicographic order, i.e.
    /// `g mod leaves` with its `L` bits reversed, so consecutive evictions spread
    /// over the tree and every bucket at level `l` is evicted every `2^l` of them.
    pub fn evict_leaf(&self, g: u64) -> u64 {
        self.geo.reverse_lexicographic(g)
    }
}

/// What the trusted state remembers of one bucket (Ring ORAM's metadata): the block
/// id in every slot (written with the bucket), which slots were read since the
/// bucket was last written, and how many reads that was (changed by every read).
/// The two parts are kept under separate keys, so a read rewrites only the small
/// second one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Reads since the bucket was last written.
    pub count: u32,
    /// Block id per slot ([`DUMMY`] for a dummy).
    pub ids: Vec<u64>,
    /// Whether each slot was read since the bucket was last written.
    pub read: Vec<bool>,
}

impl Meta {
    /// A bucket never written: all dummies, none read.
    pub fn fresh(slots: usize) -> Self {
        Self {
            count: 0,
            ids: vec![DUMMY; slots],
            read: vec![false; slots],
        }
    }

    /// The slot map for the trusted state: per slot the id (u64 LE).
    pub fn encode_ids(&self) -> Bytes {
        let mut v = Vec::with_capacity(8 * self.ids.len());
        for id in &self.ids {
            v.put_u64_le(*id);
        }
        v.into()
    }

    /// The read state for the trusted state: count (u32 LE), then one bit per slot.
    pub fn encode_reads(&self) -> Bytes {
        let mut v = Vec::with_capacity(4 + self.read.len().div_ceil(8));
        v.put_u32_le(self.count);
        v.resize(4 + self.read.len().div_ceil(8), 0);
        for (i, r) in self.read.iter().enumerate() {
            if *r {
                v[4 + i / 8] |= 1 << (i % 8);
            }
        }
        v.into()
    }

    /// The inverse of [`Meta::encode_ids`] and [`Meta::encode_reads`] (no read
    /// state: nothing read) for a bucket of `slots` slots.
    pub fn decode(ids: &[u8], reads: Option<&[u8]>, slots: usize) -> Result<Self, String> {
        if ids.len() != 8 * slots {
            return Err(format!(
                "bucket slot map has {} bytes, expected {}",
                ids.len(),
                8 * slots
            ));
        }
        let ids: Vec<u64> = ids
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let (count, read) = match reads {
            None => (0, vec![false; slots]),
            Some(r) if r.len() == 4 + slots.div_ceil(8) => (
                u32::from_le_bytes(r[..4].try_into().expect("4 bytes")),
                (0..slots)
                    .map(|i| r[4 + i / 8] & (1 << (i % 8)) != 0)
                    .collect(),
            ),
            Some(r) => {
                return Err(format!(
                    "bucket read state has {} bytes, expected {}",
                    r.len(),
                    4 + slots.div_ceil(8)
                ))
            }
        };
        Ok(Self { count, ids, read })
    }

    /// The unread slot holding `block`, if any.
    pub fn find(&self, block: u64) -> Option<usize> {
        (0..self.ids.len()).find(|&i| self.ids[i] == block && !self.read[i])
    }

    /// Unread slots holding real blocks, as `(slot, block)`.
    pub fn valid_real(&self) -> Vec<(usize, u64)> {
        (0..self.ids.len())
            .filter(|&i| self.ids[i] != DUMMY && !self.read[i])
            .map(|i| (i, self.ids[i]))
            .collect()
    }

    /// The unread dummy slots, in slot order.
    pub fn unread_dummies(&self) -> Vec<usize> {
        (0..self.ids.len())
            .filter(|&i| self.ids[i] == DUMMY && !self.read[i])
            .collect()
    }

    /// A uniformly random unread dummy slot, if one is left.
    pub fn pick_dummy(&self, rng: &mut impl Rng) -> Option<usize> {
        self.unread_dummies().choose(rng).copied()
    }

    /// Marks slot `i` read.
    pub fn mark_read(&mut self, i: usize) {
        debug_assert!(!self.read[i], "slot read twice");
        self.read[i] = true;
        self.count += 1;
    }
}

/// Lays out a freshly written bucket: the real blocks `(id, leaf, data)` (at most
/// Z) and dummies in a uniformly random permutation of the Z + S slots. Returns the
/// new metadata and the bucket's plaintext (header, slots).
pub fn shuffle_bucket(
    lay: &Layout,
    blocks: &[(u64, u64, Bytes)],
    rng: &mut impl Rng,
) -> (Meta, Bytes) {
    assert!(blocks.len() <= lay.params.z, "bucket over capacity");
    let slots = lay.slots();
    let mut order: Vec<Option<usize>> = (0..slots)
        .map(|i| (i < blocks.len()).then_some(i))
        .collect();
    order.shuffle(rng);
    let mut meta = Meta::fresh(slots);
    let mut header = Vec::with_capacity(lay.header_plain());
    let mut body = Vec::with_capacity(slots * lay.slot_plain());
    for (slot, which) in order.iter().enumerate() {
        match which {
            Some(j) => {
                let (id, leaf, data) = &blocks[*j];
                debug_assert_eq!(data.len(), lay.block_size);
                meta.ids[slot] = *id;
                header.put_u64_le(*id);
                header.put_u64_le(*leaf);
                body.put_u64_le(*id);
                body.extend_from_slice(data);
            }
            None => {
                header.put_u64_le(DUMMY);
                header.put_u64_le(0);
                body.put_u64_le(DUMMY);
                body.resize(body.len() + lay.block_size, 0);
            }
        }
    }
    header.extend_from_slice(&body);
    (meta, header.into())
}

/// Decodes a header plaintext into `(id, leaf)` per slot.
pub fn decode_header(lay: &Layout, h: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    if h.len() != lay.header_plain() {
        return Err(format!(
            "bucket header has {} bytes, expected {}",
            h.len(),
            lay.header_plain()
        ));
    }
    Ok(h.chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
            )
        })
        .collect())
}

/// Decodes a slot plaintext into `(id, block)`.
pub fn decode_slot(lay: &Layout, s: &Bytes) -> Result<(u64, Bytes), String> {
    if s.len() != lay.slot_plain() {
        return Err(format!(
            "slot has {} bytes, expected {}",
            s.len(),
            lay.slot_plain()
        ));
    }
    let id = u64::from_le_bytes(s[..8].try_into().expect("8 bytes"));
    Ok((id, s.slice(8..)))
}

/// `E[⌊R / S⌋]` for `R ~ Binomial(n, p)`: the expected number of early reshuffles of a
/// bucket between two of its evictions, when it is read `R` times meanwhile.
pub fn expected_reshuffles_binomial(n: u64, p: f64, s: usize) -> f64 {
    let s = s.max(1) as u64;
    if p >= 1.0 {
        return (n / s) as f64;
    }
    if p <= 0.0 {
        return 0.0;
    }
    // pmf(k + 1) = pmf(k) · (n − k)/(k + 1) · p/(1 − p), from pmf(0) = (1 − p)^n.
    let mut pmf = (n as f64 * (1.0 - p).ln()).exp();
    let ratio = p / (1.0 - p);
    let mean = n as f64 * p;
    let mut total = 0.0;
    for k in 0..=n {
        total += pmf * (k / s) as f64;
        if k as f64 > mean + 50.0 && pmf < 1e-18 {
            break;
        }
        pmf *= (n - k) as f64 / (k + 1) as f64 * ratio;
    }
    total
}

/// `E[⌊R / S⌋]` for `R ~ Poisson(a)`: the paper's approximation of the expected
/// early reshuffles per bucket between two evictions of it.
pub fn expected_reshuffles_poisson(a: usize, s: usize) -> f64 {
    let a = a as f64;
    let s = s.max(1) as u64;
    let mut total = 0.0;
    let mut ln_fact = 0.0;
    for k in 0..(a as u64 * 6 + 100) {
        if k > 0 {
            ln_fact += (k as f64).ln();
        }
        let pmf = (-a + k as f64 * a.ln() - ln_fact).exp();
        total += pmf * (k / s) as f64;
    }
    total
}

/// The analytical bandwidth per access of the paper's Ring ORAM (no XOR trick, no
/// metadata traffic), in blocks, over `levels` levels on the backend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaperBandwidth {
    /// Online: one block per bucket of the read path.
    pub online_blocks: f64,
    /// Overall: online plus EvictPath (read Z, write Z + S per bucket, every A
    /// accesses) plus early reshuffles (the same per reshuffle).
    pub overall_blocks: f64,
    /// Expected early reshuffles per bucket per eviction period (Poisson model).
    pub reshuffles_per_period: f64,
}

/// [`PaperBandwidth`] for `p` over `levels` backend levels.
pub fn paper_bandwidth(p: RingParams, levels: u32) -> PaperBandwidth {
    let l = levels as f64;
    let rho = expected_reshuffles_poisson(p.a, p.s);
    let per_bucket = (2 * p.z + p.s) as f64 * (1.0 + rho) / p.a as f64;
    PaperBandwidth {
        online_blocks: l,
        overall_blocks: l * (1.0 + per_bucket),
        reshuffles_per_period: rho,
    }
}

/// The S that minimises the paper's overall bandwidth for `z` and `a` (its analytical
/// model: reads of a bucket between two of its evictions are Poisson(A); a bucket
/// read S times is reshuffled early).
pub fn analytic_s(z: usize, a: usize) -> usize {
    (1..=4 * a + 20)
        .min_by(|&x, &y| {
            let p = |s| paper_bandwidth(RingParams { z, s, a }, 1).overall_blocks;
            p(x).total_cmp(&p(y))
        })
        .expect("non-empty range")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn lay(z: usize, s: usize) -> Layout {
        Layout {
            geo: Geometry::new(64, z, 16, Some(16)),
            params: RingParams { z, s, a: 3 },
            block_size: 16,
        }
    }

    #[test]
    fn presets_follow_the_analytical_model() {
        assert_eq!(analytic_s(4, 3), RingPreset::Small.params().s);
        // The thesis's S = 63 for Z = 33, A = 48; this model puts the optimum one
        // lower, with the same bandwidth to 0.02%.
        let s = analytic_s(33, 48);
        assert!((62..=63).contains(&s), "{s}");
        let at = |s| paper_bandwidth(RingParams { z: 33, s, a: 48 }, 1).overall_blocks;
        assert!((at(63) - at(s)).abs() / at(s) < 1e-3);
        assert_eq!("large".parse::<RingPreset>().unwrap(), RingPreset::Large);
        assert!("huge".parse::<RingPreset>().is_err());
    }

    #[test]
    fn poisson_and_binomial_models_agree_for_deep_levels() {
        let p = expected_reshuffles_poisson(3, 6);
        let b = expected_reshuffles_binomial(3 << 12, 1.0 / 4096.0, 6);
        assert!((p - b).abs() < 1e-3, "{p} {b}");
        // Exact small cases: Bin(2, 1/2) with S = 1 has E[R] = 1.
        assert!((expected_reshuffles_binomial(2, 0.5, 1) - 1.0).abs() < 1e-12);
        assert!(
            (expected_reshuffles_binomial(4, 0.5, 2) - (6.0 / 16.0 + 4.0 / 16.0 + 2.0 / 16.0))
                .abs()
                < 1e-12
        );
    }

    #[test]
    fn layout_sizes_and_ranges_tile_the_object() {
        let l = lay(4, 6);
        assert_eq!(l.slots(), 10);
        assert_eq!(l.slot_range(0).start as usize, l.header_sealed());
        assert_eq!(l.slot_range(9).end as usize, l.object_len());
        for i in 0..9 {
            assert_eq!(l.slot_range(i).end, l.slot_range(i + 1).start);
        }
        assert_eq!(l.seal_position(2, 0), 22);
        assert_eq!(l.seal_position(2, 10), 32);
        assert_eq!(l.seal_position(3, 0), 33);
    }

    #[test]
    fn shuffled_bucket_round_trips_and_metadata_codec() {
        let l = lay(4, 6);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let blocks: Vec<(u64, u64, Bytes)> = (0..3)
            .map(|b| (b, b + 10, Bytes::from(vec![b as u8; 16])))
            .collect();
        let (mut meta, plain) = shuffle_bucket(&l, &blocks, &mut rng);
        assert_eq!(plain.len(), l.bucket_plain());
        let header = decode_header(&l, &l.header_of(&plain)).unwrap();
        for (i, (id, leaf)) in header.iter().enumerate() {
            assert_eq!(*id, meta.ids[i]);
            let (sid, data) = decode_slot(&l, &l.slot_of(&plain, i)).unwrap();
            assert_eq!(sid, *id);
            if *id != DUMMY {
                assert_eq!(*leaf, id + 10);
                assert_eq!(data, blocks[*id as usize].2);
            }
        }
        assert_eq!(meta.valid_real().len(), 3);
        let at = meta.find(2).unwrap();
        meta.mark_read(at);
        assert_eq!(meta.find(2), None);
        assert_eq!(meta.count, 1);
        let d = meta.pick_dummy(&mut rng).unwrap();
        assert_eq!(meta.ids[d], DUMMY);
        let (ids, reads) = (meta.encode_ids(), meta.encode_reads());
        assert_eq!(
            reads.len(),
            4 + 2,
            "a read rewrites a few bytes, not the slot map"
        );
        assert_eq!(Meta::decode(&ids, Some(&reads), 10).unwrap(), meta);
        assert!(Meta::decode(&ids, Some(&reads), 11).is_err());
        let unread = Meta::decode(&ids, None, 10).unwrap();
        assert_eq!((unread.count, unread.ids), (0, meta.ids.clone()));
    }

    /// The slot a real block sits in and the dummy slot read instead are both
    /// uniform over the Z + S slots: the offset of a ranged read says nothing
    /// about whether it fetched real data.
    #[test]
    fn real_and_dummy_reads_hit_uniformly_distributed_slots() {
        let l = lay(4, 6);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut real = vec![0u64; 10];
        let mut dummy = vec![0u64; 10];
        for _ in 0..20_000 {
            let blocks: Vec<(u64, u64, Bytes)> = (0..rng.gen_range(1..=4u64))
                .map(|b| (b, 0, Bytes::from(vec![0u8; 16])))
                .collect();
            let (meta, _) = shuffle_bucket(&l, &blocks, &mut rng);
            real[meta.find(0).unwrap()] += 1;
            dummy[meta.pick_dummy(&mut rng).unwrap()] += 1;
        }
        let chi = |c: &[u64]| {
            let e = c.iter().sum::<u64>() as f64 / c.len() as f64;
            c.iter().map(|&x| (x as f64 - e).powi(2) / e).sum::<f64>()
        };
        // Critical value of chi-square, df = 9, significance 0.001: 27.88.
        assert!(chi(&real) < 27.88, "real {real:?}");
        assert!(chi(&dummy) < 27.88, "dummy {dummy:?}");
    }
}
