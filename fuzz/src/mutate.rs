//! The mutation engine: a small xorshift generator and byte-level mutations of
//! seed inputs (bit flips, byte sets, interesting values at any offset in either
//! byte order — the length-field tweaks —, truncations, extensions, insertions,
//! deletions, block duplication, splices with another seed, and random bytes).

/// xorshift64*: fast, deterministic per seed, good enough to pick mutations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability 1/`n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Values that tend to break length and count fields.
const INTERESTING: [u64; 14] = [
    0,
    1,
    2,
    7,
    8,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    0x7fff_ffff_ffff_ffff,
    u64::MAX,
];

/// Inputs are kept below this size (a mutation never grows one past it).
pub const MAX_INPUT: usize = 1 << 20;

/// One mutation of `data` in place; `other` is another seed to splice from.
pub fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let len = data.len();
    match rng.below(11) {
        // Bit flip.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Byte set.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.next_u64() as u8;
        }
        // An interesting value, 1, 2, 4 or 8 bytes wide, big or little endian,
        // possibly plus or minus a little: the length-field tweak.
        2 if len > 0 => {
            let width = [1, 2, 4, 8][rng.below(4)];
            let mut v = INTERESTING[rng.below(INTERESTING.len())];
            if rng.one_in(3) {
                v = v.wrapping_add(rng.below(33) as u64).wrapping_sub(16);
            }
            let bytes = if rng.one_in(2) {
                v.to_be_bytes()[8 - width..].to_vec()
            } else {
                v.to_le_bytes()[..width].to_vec()
            };
            let at = rng.below(len);
            for (k, b) in bytes.into_iter().enumerate() {
                if let Some(slot) = data.get_mut(at + k) {
                    *slot = b;
                }
            }
        }
        // Truncation.
        3 if len > 0 => data.truncate(rng.below(len)),
        // Extension with random bytes or zeros.
        4 => {
            let n = 1 + rng.below(64);
            if rng.one_in(2) {
                data.extend(rng.bytes(n));
            } else {
                data.resize(len + n, 0);
            }
        }
        // Insertion of random bytes at a random offset.
        5 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let ins = rng.bytes(n);
            data.splice(at..at, ins);
        }
        // Deletion of a range.
        6 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            data.drain(at..at + n);
        }
        // Duplication of a block.
        7 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            let block = data[at..at + n].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, block);
        }
        // Splice: a prefix of this input and a suffix of another seed.
        8 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        // Random bytes throughout a short window.
        9 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(16));
            for b in &mut data[at..at + n] {
                *b = rng.next_u64() as u8;
            }
        }
        // Entirely random input (rarely).
        10 if rng.one_in(8) => {
            let n = rng.below(256);
            *data = rng.bytes(n);
        }
        _ => {
            let n = 1 + rng.below(8);
            data.extend(rng.bytes(n));
        }
    }
    data.truncate(MAX_INPUT);
}

/// A new input: a seed with 1 to 8 stacked mutations (sometimes the seed itself).
pub fn mutant(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if seeds.is_empty() {
        let n = rng.below(512);
        return rng.bytes(n);
    }
    let mut data = seeds[rng.below(seeds.len())].clone();
    if rng.one_in(50) {
        return data;
    }
    let other = &seeds[rng.below(seeds.len())];
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        mutate_once(rng, &mut data, other);
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_change_inputs_and_stay_bounded() {
        let mut rng = Rng::new(7);
        let seeds = vec![vec![1u8; 40], b"hello".to_vec()];
        let mut changed = 0;
        for _ in 0..2000 {
            let m = mutant(&mut rng, &seeds);
            assert!(m.len() <= MAX_INPUT);
            if !seeds.contains(&m) {
                changed += 1;
            }
        }
        assert!(
            changed > 1800,
            "only {changed} of 2000 mutants differ from the seeds"
        );
        // Deterministic per seed.
        let a: Vec<_> = (0..5).map(|_| Rng::new(3).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
    }
}
