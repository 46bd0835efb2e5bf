//! Helpers shared by the cross-crate tests in `tests/tests/`.
//!
//! Two wrappers here inject failures that the real back-ends cannot produce on
//! demand — a PUT held back until the test releases it ([`GatedStore`]) and a
//! backend that is "down" ([`FlakyStore`]). Everything else in the tests uses the
//! real memory and fs stores and real sealing.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use std::collections::HashMap;

use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey, StoreError, TraceEvent, Verb};
use oram_engine::{Op, Oram};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub mod relay;
pub mod servers;
use oram_direct::{DirectConfig, DirectEngine};
use oram_path::{PathConfig, PathOram};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::MemState;
use tokio::sync::watch;

/// A sealer with a fixed test key.
pub fn test_sealer() -> Arc<Sealer> {
    Arc::new(Sealer::new(
        &MasterKey::from_bytes([42u8; 32]),
        VolumeId([3u8; 16]),
    ))
}

/// A Path ORAM over `store` with in-memory state.
pub fn path_oram(store: Arc<dyn BlockStore>, cfg: PathConfig) -> PathOram {
    PathOram::new(cfg, store, test_sealer(), Box::new(MemState::new())).expect("valid config")
}

/// A direct engine over `store` with in-memory state.
pub fn direct_engine(store: Arc<dyn BlockStore>, cfg: DirectConfig) -> DirectEngine {
    DirectEngine::new(cfg, store, test_sealer(), Box::new(MemState::new())).expect("valid config")
}

/// A block of `size` bytes whose content identifies `(block, version)`.
pub fn block_data(block: u64, version: u64, size: usize) -> Bytes {
    let seed =
        block.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (0..size)
        .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// Model test driver: runs `rounds` random batches (1..=max_batch ops, with repeated blocks) and
/// checks every read against the model; returns the number of ops performed.
pub async fn run_model(engine: &dyn Oram, rounds: usize, max_batch: usize, seed: u64) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cap = engine.capacity();
    let bs = engine.block_size();
    let mut model: HashMap<u64, Bytes> = HashMap::new();
    let mut version = 0u64;
    let mut total = 0;
    for r in 0..rounds {
        let n = rng.gen_range(1..=max_batch);
        // A small hot set makes repeated blocks within a batch common.
        let hot = rng.gen_bool(0.3);
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            let b = if hot {
                rng.gen_range(0..cap.min(4))
            } else {
                rng.gen_range(0..cap)
            };
            if rng.gen_bool(0.5) {
                version += 1;
                ops.push(Op::Write(b, block_data(b, version, bs)));
            } else {
                ops.push(Op::Read(b));
            }
        }
        let results = engine.access(ops.clone()).await.expect("access failed");
        assert_eq!(results.len(), ops.len());
        for (op, got) in ops.into_iter().zip(results) {
            match op {
                Op::Read(b) => {
                    let want = model
                        .get(&b)
                        .cloned()
                        .unwrap_or_else(|| Bytes::from(vec![0; bs]));
                    assert!(got == want, "round {r}: block {b} read wrong data");
                }
                Op::Write(b, d) => {
                    assert!(got.is_empty());
                    model.insert(b, d);
                }
            }
        }
        total += n;
        if r % 97 == 0 {
            engine.flush().await.unwrap();
        }
    }
    // Finally read everything back, in batches, after a flush.
    engine.flush().await.unwrap();
    let all: Vec<u64> = (0..cap).collect();
    for chunk in all.chunks(max_batch.max(1)) {
        let got = engine
            .access(chunk.iter().map(|&b| Op::Read(b)).collect())
            .await
            .unwrap();
        for (&b, g) in chunk.iter().zip(got) {
            let want = model
                .get(&b)
                .cloned()
                .unwrap_or_else(|| Bytes::from(vec![0; bs]));
            assert!(g == want, "final read of block {b} wrong");
        }
    }
    total
}

/// The chi-square statistic of `counts` against a uniform distribution.
pub fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// The critical value of the chi-square distribution with `df` degrees of freedom
/// at significance 0.001 (Wilson–Hilferty approximation, within 1% for df ≥ 10).
pub fn chi_square_critical_001(df: u64) -> f64 {
    let df = df as f64;
    let z = 3.090_232; // standard normal quantile of 0.999
    let t = 2.0 / (9.0 * df);
    df * (1.0 - t + z * t.sqrt()).powi(3)
}

/// One backend request without its key: verb, size and range.
pub type Request = (Verb, u64, Option<Range<u64>>);

/// The shape of a trace: per backend call, the verb, size and range of each request
/// — everything the server sees except the keys (whose distribution is tested
/// separately).
pub type Shape = Vec<Vec<Request>>;

/// Groups a trace into calls (the `Recording` wrapper records a call's requests
/// contiguously) and drops the keys.
pub fn shape_of(trace: &[TraceEvent]) -> Shape {
    trace
        .chunk_by(|a, b| a.call == b.call)
        .map(|call| {
            call.iter()
                .map(|e| (e.verb, e.size, e.range.clone()))
                .collect()
        })
        .collect()
}

/// Wraps a store so that PUTs wait until the gate is opened.
pub struct GatedStore<S> {
    inner: S,
    open: watch::Sender<bool>,
}

impl<S> GatedStore<S> {
    /// A store whose PUTs pass only while the gate is open (`open`).
    pub fn new(inner: S, open: bool) -> Self {
        Self {
            inner,
            open: watch::channel(open).0,
        }
    }
    /// Opens or closes the gate.
    pub fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }
}

#[async_trait]
impl<S: BlockStore> BlockStore for GatedStore<S> {
    async fn get_many(&self, keys: &[ObjKey]) -> Result<Vec<Option<Bytes>>, StoreError> {
        self.inner.get_many(keys).await
    }
    async fn get_range(&self, key: &ObjKey, r: Range<u64>) -> Result<Option<Bytes>, StoreError> {
        self.inner.get_range(key, r).await
    }
    async fn put_many(&self, items: Vec<(ObjKey, Bytes)>) -> Result<(), StoreError> {
        let mut rx = self.open.subscribe();
        rx.wait_for(|o| *o).await.expect("sender alive");
        self.inner.put_many(items).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<(), StoreError> {
        self.inner.delete_many(keys).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjKey>, StoreError> {
        self.inner.list(prefix).await
    }
}

/// Wraps a store that can be switched "down": every request then fails with
/// `StoreError::Unavailable` and changes nothing.
pub struct FlakyStore<S> {
    inner: S,
    down: AtomicBool,
    puts_down: AtomicBool,
}

impl<S> FlakyStore<S> {
    /// A store that is up.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            down: AtomicBool::new(false),
            puts_down: AtomicBool::new(false),
        }
    }
    /// Makes only PUTs fail (reads keep working), or PUTs work again.
    pub fn set_puts_down(&self, down: bool) {
        self.puts_down.store(down, Ordering::SeqCst);
    }
    /// Takes the store down or brings it back.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("test: backend down".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl<S: BlockStore> BlockStore for FlakyStore<S> {
    async fn get_many(&self, keys: &[ObjKey]) -> Result<Vec<Option<Bytes>>, StoreError> {
        self.check()?;
        self.inner.get_many(keys).await
    }
    async fn get_range(&self, key: &ObjKey, r: Range<u64>) -> Result<Option<Bytes>, StoreError> {
        self.check()?;
        self.inner.get_range(key, r).await
    }
    async fn put_many(&self, items: Vec<(ObjKey, Bytes)>) -> Result<(), StoreError> {
        self.check()?;
        if self.puts_down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("test: PUTs failing".into()));
        }
        self.inner.put_many(items).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_many(keys).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjKey>, StoreError> {
        self.check()?;
        self.inner.list(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi_square_helpers() {
        assert_eq!(chi_square(&[10, 10, 10, 10]), 0.0);
        assert_eq!(chi_square(&[20, 0, 10, 10]), 20.0);
        // Tabulated: df = 10 → 29.59, df = 100 → 149.45 at p = 0.001.
        assert!((chi_square_critical_001(10) - 29.59).abs() < 0.3);
        assert!((chi_square_critical_001(100) - 149.45).abs() < 0.5);
    }
}
