//! Random draws that can be replayed, and the intent record that stores them.
//!
//! A round's plan — which leaves it reads, which dummy slots — is a function of
//! the trusted state, the blocks its ops name and its random draws. The draws are
//! logged; the intent record (`blocks ‖ draws`, varint-encoded, and the round's
//! seed) is committed before the round's reads go out. A round that fails after
//! its reads went out (a backend error, a tampered object, a crash) is planned
//! again from the same record — same leaves, same slots — and finished before
//! anything new is drawn.
//!
//! The apply step's randomness (Ring ORAM's bucket permutations, the leaves of
//! inserted blocks) comes from the round's seed ([`RoundRandom`]), drawn when
//! the round is planned and kept in its record: every attempt of the round lays
//! out its buckets the same way, so a round planned on its applied state — one
//! that read ahead of it — plans the same reads again after it is repeated.

use bytes::Bytes;
use oram_engine::{OramError, Result};
use oram_state::StateError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The source of a plan's random choices: fresh from the engine's CSPRNG (and
/// logged), or replayed from an intent record.
pub struct Draws<'a> {
    rng: Option<&'a mut ChaCha20Rng>,
    log: Vec<u64>,
    replay: Option<std::vec::IntoIter<u64>>,
}

impl<'a> Draws<'a> {
    /// Fresh draws from `rng`, logged.
    pub fn fresh(rng: &'a mut ChaCha20Rng) -> Self {
        Self {
            rng: Some(rng),
            log: Vec::new(),
            replay: None,
        }
    }

    /// The draws of an earlier plan, in order.
    pub fn replay(draws: Vec<u64>) -> Self {
        Self {
            rng: None,
            log: Vec::new(),
            replay: Some(draws.into_iter()),
        }
    }

    /// A uniformly random number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> Result<u64> {
        if let Some(r) = &mut self.replay {
            return match r.next() {
                Some(v) if v < n => Ok(v),
                _ => Err(mismatch()),
            };
        }
        let v = self
            .rng
            .as_mut()
            .expect("fresh draws have an rng")
            .gen_range(0..n);
        self.log.push(v);
        Ok(v)
    }

    /// The draws made so far (empty when replaying).
    pub fn into_log(self) -> Vec<u64> {
        self.log
    }

    /// Whether a replay used every recorded draw (or this is not a replay).
    pub fn exhausted(&mut self) -> bool {
        self.replay.as_mut().is_none_or(|r| r.next().is_none())
    }
}

fn mismatch() -> OramError {
    StateError::Corrupt("the intent record does not match the trusted state".into()).into()
}

/// The randomness of one round's apply step: keyed streams from the round's
/// seed, a ChaCha20 key drawn from the engine's CSPRNG when the round is
/// planned and stored only in its intent record (in the trusted state). A
/// stream is a pseudorandom function of (seed, stream id): the same on every
/// attempt of the round, independent between ids and between rounds.
#[derive(Clone)]
pub struct RoundRandom {
    seed: [u8; 32],
}

impl RoundRandom {
    /// The randomness of a round whose intent record holds `seed`.
    pub fn new(seed: [u8; 32]) -> Self {
        Self { seed }
    }

    /// The stream for the layout of bucket `node` (Ring ORAM: its permutation).
    /// A round lays out a bucket at most once.
    pub fn node(&self, node: u64) -> ChaCha20Rng {
        self.stream(node)
    }

    /// The stream for everything else the apply step draws, in order (the
    /// leaves of inserted blocks).
    pub fn rest(&self) -> ChaCha20Rng {
        // Node ids stay far below 2^64 − 1 (trees are at most 41 levels deep).
        self.stream(u64::MAX)
    }

    fn stream(&self, id: u64) -> ChaCha20Rng {
        let mut rng = ChaCha20Rng::from_seed(self.seed);
        rng.set_stream(id);
        rng
    }
}

/// What a round was asked for and what it drew: enough to plan it again and
/// to apply it again the same way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Intent {
    /// The block of each op (`None` for a dummy).
    pub blocks: Vec<Option<u64>>,
    /// The plan's random draws, in order.
    pub draws: Vec<u64>,
    /// Attempts of this round before the current one (0 for the first). Each
    /// attempt writes its buckets under versions of its own (the version after
    /// the round's base plus the attempt), so that an object an interrupted
    /// attempt left on the backend — different contents under the same key —
    /// never opens as the current one.
    pub attempt: u64,
    /// The seed of the round's apply step ([`RoundRandom`]), drawn when the
    /// round was planned.
    pub seed: [u8; 32],
}

/// Format 1: no attempt counter (read as attempt 0); format 2: with it, no
/// seed; format 3: with the seed. A record of format 1 or 2 (written before
/// the seed existed) is given a fresh seed when read; the seed is durable
/// before the round's next attempt reads anything, as that attempt records its
/// number (in format 3).
const INTENT_FORMAT_V1: u8 = 1;
const INTENT_FORMAT_V2: u8 = 2;
const INTENT_FORMAT: u8 = 3;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl Intent {
    /// `format ‖ attempt ‖ seed ‖ n ‖ (block + 1, or 0 for a dummy)ⁿ ‖ m ‖
    /// drawᵐ`, varints but the seed (32 bytes).
    pub fn encode(&self) -> Bytes {
        let mut out = vec![INTENT_FORMAT];
        put_varint(&mut out, self.attempt);
        out.extend_from_slice(&self.seed);
        put_varint(&mut out, self.blocks.len() as u64);
        for b in &self.blocks {
            put_varint(&mut out, b.map_or(0, |b| b.wrapping_add(1)));
        }
        put_varint(&mut out, self.draws.len() as u64);
        for d in &self.draws {
            put_varint(&mut out, *d);
        }
        out.into()
    }

    /// The inverse of [`Intent::encode`]; a record of an earlier format (no
    /// seed) gets `fresh_seed()`.
    pub fn decode(mut b: &[u8], fresh_seed: impl FnOnce() -> [u8; 32]) -> Result<Self> {
        let bad = || StateError::Corrupt("malformed intent record".into());
        let (&format, rest) = b.split_first().ok_or_else(bad)?;
        b = rest;
        let attempt = match format {
            INTENT_FORMAT_V1 => 0,
            INTENT_FORMAT_V2 | INTENT_FORMAT => get_varint(&mut b).ok_or_else(bad)?,
            _ => return Err(bad().into()),
        };
        let seed = if format == INTENT_FORMAT {
            let (seed, rest) = b.split_first_chunk::<32>().ok_or_else(bad)?;
            b = rest;
            *seed
        } else {
            fresh_seed()
        };
        let n = get_varint(&mut b).ok_or_else(bad)?;
        let mut blocks = Vec::new();
        for _ in 0..n {
            let v = get_varint(&mut b).ok_or_else(bad)?;
            blocks.push(v.checked_sub(1));
        }
        let m = get_varint(&mut b).ok_or_else(bad)?;
        let mut draws = Vec::new();
        for _ in 0..m {
            draws.push(get_varint(&mut b).ok_or_else(bad)?);
        }
        if !b.is_empty() {
            return Err(bad().into());
        }
        Ok(Self {
            blocks,
            draws,
            attempt,
            seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn intents_round_trip_and_draws_replay() {
        let unused = || panic!("a record with a seed needs no fresh one");
        let i = Intent {
            blocks: vec![Some(0), None, Some(u64::MAX - 1), Some(300)],
            draws: vec![0, 127, 128, 1 << 40, u64::MAX],
            attempt: 300,
            seed: [7; 32],
        };
        assert_eq!(Intent::decode(&i.encode(), unused).unwrap(), i);
        assert!(Intent::decode(&i.encode()[..5], unused).is_err());
        assert!(Intent::decode(&i.encode()[..30], unused).is_err());
        assert!(Intent::decode(&[9], unused).is_err());
        // A record of the first format (no attempt counter) reads as attempt 0,
        // one of the first two (no seed) with a fresh seed.
        let v1 = [INTENT_FORMAT_V1, 2, 1, 0, 1, 5];
        let old = Intent::decode(&v1, || [3; 32]).unwrap();
        let want = Intent {
            blocks: vec![Some(0), None],
            draws: vec![5],
            attempt: 0,
            seed: [3; 32],
        };
        assert_eq!(old, want);
        let v2 = [INTENT_FORMAT_V2, 4, 2, 1, 0, 1, 5];
        let old = Intent::decode(&v2, || [3; 32]).unwrap();
        assert_eq!(old, Intent { attempt: 4, ..want });
        // Written again (as its next attempt is), it keeps that seed.
        assert_eq!(Intent::decode(&old.encode(), unused).unwrap(), old);
        let mut rng = ChaCha20Rng::from_seed([1; 32]);
        let mut d = Draws::fresh(&mut rng);
        let drawn: Vec<u64> = (0..50).map(|_| d.below(1000).unwrap()).collect();
        let log = d.into_log();
        assert_eq!(log, drawn);
        let mut r = Draws::replay(log.clone());
        let again: Vec<u64> = (0..50).map(|_| r.below(1000).unwrap()).collect();
        assert_eq!(again, drawn);
        assert!(r.exhausted());
        assert!(r.below(10).is_err(), "a replay cannot draw more");
        let mut r = Draws::replay(vec![500]);
        assert!(r.below(100).is_err(), "a recorded draw out of range");
    }

    #[test]
    fn round_random_streams_are_keyed_by_seed_and_id() {
        let sample = |mut r: ChaCha20Rng| -> [u64; 4] { std::array::from_fn(|_| r.gen()) };
        let a = RoundRandom::new([1; 32]);
        assert_eq!(sample(a.node(5)), sample(RoundRandom::new([1; 32]).node(5)));
        assert_ne!(sample(a.node(5)), sample(a.node(6)));
        assert_ne!(sample(a.node(5)), sample(a.rest()));
        assert_ne!(sample(a.node(5)), sample(RoundRandom::new([2; 32]).node(5)));
    }
}
