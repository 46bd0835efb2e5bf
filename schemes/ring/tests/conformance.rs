//! Ring ORAM runs the engine conformance suite (`oram_engine::conformance`).

use std::sync::Arc;

use oram_blockstore::{BlockStore, TraceEvent, Verb};
use oram_engine::conformance::{Params, Subject};
use oram_engine::Oram;
use oram_ring::{RingConfig, RingOram, RingPreset};
use oram_seal::Sealer;
use oram_state::TrustedState;
use oram_tree::Geometry;

struct RingSubject;

fn geometry(p: &Params) -> Geometry {
    let z = RingPreset::Small.params().z;
    let leaves = RingConfig::leaves_for(p.capacity, z);
    Geometry::new(p.capacity, z, p.block_size, Some(leaves))
}

impl Subject for RingSubject {
    fn build(
        &self,
        p: &Params,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Arc<dyn Oram> {
        let params = RingPreset::Small.params();
        let cfg = RingConfig {
            capacity: p.capacity,
            id_limit: p.id_limit,
            block_size: p.block_size,
            params,
            cached_levels: p.cached_levels,
            stash_bound: RingConfig::default_stash_bound(params, p.max_batch),
            max_batch: p.max_batch,
            max_inflight_writebacks: p.max_inflight_writebacks,
            prefix: p.prefix.clone(),
            rng_seed: Some(p.seed),
            ..RingConfig::default()
        };
        Arc::new(RingOram::new(cfg, store, sealer, state).expect("valid configuration"))
    }
    fn oblivious(&self) -> bool {
        true
    }
    /// The leaf-level buckets read: the read path's and (every A accesses) the
    /// eviction path's, which follows a fixed schedule over all leaves.
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
        let geo = geometry(p);
        access
            .iter()
            .filter(|e| matches!(e.verb, Verb::Get | Verb::GetRange))
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

oram_engine::engine_conformance!(RingSubject);
