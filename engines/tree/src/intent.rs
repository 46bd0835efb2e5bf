//! Random draws that can be replayed, and the intent record that stores them.
//!
//! A round's plan — which leaves it reads, which dummy slots — is a function of
//! the trusted state, the blocks its ops name and its random draws. The draws are
//! logged; the intent record (`blocks ‖ draws`, varint-encoded) is committed before
//! the round's reads go out. A round that fails after its reads went out (a
//! backend error, a tampered object, a crash) is planned again from the same
//! record — same leaves, same slots — and finished before anything new is drawn.

use bytes::Bytes;
use oram_engine::{OramError, Result};
use oram_state::StateError;
use rand::Rng;
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

/// What a round was asked for and what it drew: enough to plan it again.
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
}

/// Format 1: no attempt counter (read as attempt 0); format 2: with it.
const INTENT_FORMAT_V1: u8 = 1;
const INTENT_FORMAT: u8 = 2;

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
    /// `format ‖ attempt ‖ n ‖ (block + 1, or 0 for a dummy)ⁿ ‖ m ‖ drawᵐ`, varints.
    pub fn encode(&self) -> Bytes {
        let mut out = vec![INTENT_FORMAT];
        put_varint(&mut out, self.attempt);
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

    /// The inverse of [`Intent::encode`].
    pub fn decode(mut b: &[u8]) -> Result<Self> {
        let bad = || StateError::Corrupt("malformed intent record".into());
        let (&format, rest) = b.split_first().ok_or_else(bad)?;
        b = rest;
        let attempt = match format {
            INTENT_FORMAT_V1 => 0,
            INTENT_FORMAT => get_varint(&mut b).ok_or_else(bad)?,
            _ => return Err(bad().into()),
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn intents_round_trip_and_draws_replay() {
        let i = Intent {
            blocks: vec![Some(0), None, Some(u64::MAX - 1), Some(300)],
            draws: vec![0, 127, 128, 1 << 40, u64::MAX],
            attempt: 300,
        };
        assert_eq!(Intent::decode(&i.encode()).unwrap(), i);
        assert!(Intent::decode(&i.encode()[..5]).is_err());
        assert!(Intent::decode(&[9]).is_err());
        // A record of the first format (no attempt counter) reads as attempt 0.
        let v1 = [INTENT_FORMAT_V1, 2, 1, 0, 1, 5];
        let old = Intent::decode(&v1).unwrap();
        assert_eq!(
            old,
            Intent {
                blocks: vec![Some(0), None],
                draws: vec![5],
                attempt: 0
            }
        );
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
}
