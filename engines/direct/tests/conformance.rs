//! The direct engine runs the engine conformance suite
//! (`oram_engine::conformance`): everything that applies to an engine that is
//! not oblivious, and the trace checks as a negative control that must fail.

use std::sync::Arc;

use oram_blockstore::TraceEvent;
use oram_direct::{DirectConfig, DirectEngine};
use oram_engine::conformance::{key_position, Params, Subject};
use oram_engine::{Oram, Parts};

struct DirectSubject;

impl Subject for DirectSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let cfg = DirectConfig {
            capacity: p.capacity,
            block_size: p.block_size,
            prefix: p.prefix.clone(),
        };
        Arc::new(
            DirectEngine::new(cfg, parts.store, parts.sealer, parts.state)
                .expect("valid configuration"),
        )
    }
    fn oblivious(&self) -> bool {
        false
    }
    /// The block of every request: the access pattern in full.
    fn positions(&self, _: &Params, access: &[TraceEvent]) -> Vec<u64> {
        access.iter().filter_map(|e| key_position(&e.key)).collect()
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

/// Every check on a volume created at half the capacity and grown.
mod grown {
    use super::*;
    oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(DirectSubject));
}
