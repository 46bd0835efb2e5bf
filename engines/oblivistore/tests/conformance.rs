//! ObliviStore runs the engine conformance suite (`oram_engine::conformance`)
//! with 8 hierarchical partitions.

use std::sync::Arc;

use oram_blockstore::{TraceEvent, Verb};
use oram_engine::conformance::{Params, Subject};
use oram_engine::{Oram, Parts};
use oram_oblivistore::{oblivistore, ObliviStoreConfig};

const PARTITIONS: u32 = 8;

struct ObliviStoreSubject;

/// The partition of a level object's key `<prefix>/o/<partition>/<level>/<slot>`.
fn partition_of(key: &str) -> Option<u32> {
    let mut parts = key.rsplit('/');
    parts.next()?;
    parts.next()?;
    parts.next()?.parse().ok()
}

impl Subject for ObliviStoreSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let mut cfg = ObliviStoreConfig::new(p.capacity, p.block_size, PARTITIONS, p.max_batch);
        cfg.framework.cache_bound = 1 << 20;
        cfg.framework.round_attempts = p.round_attempts;
        cfg.framework.rng_seed = Some(p.seed);
        Arc::new(oblivistore(cfg, parts, &p.prefix).expect("valid configuration"))
    }
    fn rounds_in_flight(&self) -> bool {
        true
    }
    fn oblivious(&self) -> bool {
        true
    }
    /// The partition of every level written: each partition access ends with
    /// one PUT, of the level its eviction builds.
    fn positions(&self, _: &Params, access: &[TraceEvent]) -> Vec<u64> {
        access
            .iter()
            .filter(|e| matches!(e.verb, Verb::Put))
            .filter_map(|e| partition_of(&e.key))
            .map(u64::from)
            .collect()
    }
    fn bins(&self, _: &Params) -> u64 {
        u64::from(PARTITIONS)
    }
    fn leaves(&self, _: &Params) -> Option<u64> {
        None
    }
    fn places_blocks_in_its_space(&self) -> bool {
        false
    }
    fn writes_back(&self) -> bool {
        false
    }
    fn wide_ids(&self) -> bool {
        false
    }
    fn stages(&self) -> bool {
        false
    }
    fn rounds_run_in_phases(&self) -> bool {
        true
    }
    fn repeats_write_the_same(&self) -> bool {
        true
    }
}

oram_engine::engine_conformance!(ObliviStoreSubject);

/// Every check on a volume created at half the capacity and grown: each
/// partition's top level raised, nothing moved.
mod grown {
    use super::*;
    oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(ObliviStoreSubject));
}
