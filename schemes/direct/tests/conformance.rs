//! The direct engine runs the engine conformance suite
//! (`oram_engine::conformance`): everything that applies to an engine that is
//! not oblivious, and the trace checks as a negative control that must fail.

use std::sync::Arc;

use oram_blockstore::{BlockStore, TraceEvent};
use oram_direct::{DirectConfig, DirectEngine};
use oram_engine::conformance::{Params, Subject};
use oram_engine::Oram;
use oram_seal::Sealer;
use oram_state::TrustedState;

struct DirectSubject;

impl Subject for DirectSubject {
    fn build(
        &self,
        p: &Params,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Arc<dyn Oram> {
        let cfg = DirectConfig {
            capacity: p.capacity,
            block_size: p.block_size,
            prefix: p.prefix.clone(),
        };
        Arc::new(DirectEngine::new(cfg, store, sealer, state).expect("valid configuration"))
    }
    fn oblivious(&self) -> bool {
        false
    }
    /// The block of every request: the access pattern in full.
    fn positions(&self, _: &Params, access: &[TraceEvent]) -> Vec<u64> {
        access
            .iter()
            .filter_map(|e| {
                e.key
                    .rsplit('/')
                    .next()?
                    .split('.')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .collect()
    }
    fn bins(&self, p: &Params) -> u64 {
        p.capacity
    }
    fn leaves(&self, _: &Params) -> Option<u64> {
        None
    }
    fn writes_back(&self) -> bool {
        false
    }
    fn wide_ids(&self) -> bool {
        false
    }
}

oram_engine::engine_conformance!(DirectSubject);
