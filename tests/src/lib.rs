//! Helpers shared by the cross-crate tests in `tests/tests/` (the engine tests
//! live with the engines: each runs the conformance suite of `oram-engine`).

use std::sync::Arc;

use oram_blockstore::BlockStore;
use oram_engine::Oram;

pub mod cluster;
pub mod relay;
pub mod s3proxy;
pub mod servers;
use oram_path::{PathConfig, PathOram};
use oram_state::MemState;

pub use oram_engine::conformance::{block_data, chi_square, chi_square_critical_001, test_sealer};

/// A Path ORAM over `store` with in-memory state.
pub fn path_oram(store: Arc<dyn BlockStore>, cfg: PathConfig) -> PathOram {
    PathOram::new(cfg, store, test_sealer(), Box::new(MemState::new())).expect("valid config")
}

/// Model test driver: `rounds` random batches (1..=max_batch ops, repeated
/// blocks, takes and dummies) checked against a `HashMap`, then everything read
/// back after a flush; returns the number of ops performed.
pub async fn run_model(engine: &dyn Oram, rounds: usize, max_batch: usize, seed: u64) -> usize {
    let mut model = oram_engine::conformance::Model::new();
    let cap = engine.capacity();
    let n =
        oram_engine::conformance::run_model(engine, &mut model, cap, rounds, max_batch, seed).await;
    engine.flush().await.unwrap();
    oram_engine::conformance::read_back(engine, &model, cap, max_batch).await;
    n
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
