//! Path ORAM runs the engine conformance suite (`oram_engine::conformance`).

use std::sync::Arc;

use oram_blockstore::{BlockStore, TraceEvent, Verb};
use oram_engine::conformance::{Params, Subject};
use oram_engine::Oram;
use oram_path::{Geometry, PathConfig, PathOram};
use oram_seal::Sealer;
use oram_state::TrustedState;

struct PathSubject;

fn geometry(p: &Params) -> Geometry {
    Geometry::new(p.capacity, 4, p.block_size, None)
}

impl Subject for PathSubject {
    fn build(
        &self,
        p: &Params,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Arc<dyn Oram> {
        let cfg = PathConfig {
            capacity: p.capacity,
            id_limit: p.id_limit,
            block_size: p.block_size,
            cached_levels: p.cached_levels,
            max_batch: p.max_batch,
            max_inflight_writebacks: p.max_inflight_writebacks,
            prefix: p.prefix.clone(),
            rng_seed: Some(p.seed),
            ..PathConfig::default()
        };
        Arc::new(PathOram::new(cfg, store, sealer, state).expect("valid configuration"))
    }
    fn oblivious(&self) -> bool {
        true
    }
    /// The leaf of every path read.
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
        let geo = geometry(p);
        access
            .iter()
            .filter(|e| e.verb == Verb::Get)
            .filter_map(|e| {
                e.key
                    .rsplit('/')
                    .next()?
                    .split('.')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .filter(|&n| geo.level(n) == geo.leaf_level)
            .map(|n| n - geo.leaves)
            .collect()
    }
    fn bins(&self, p: &Params) -> u64 {
        geometry(p).leaves
    }
    fn leaves(&self, p: &Params) -> Option<u64> {
        Some(geometry(p).leaves)
    }
    fn writes_back(&self) -> bool {
        true
    }
    fn wide_ids(&self) -> bool {
        true
    }
}

oram_engine::engine_conformance!(PathSubject);
