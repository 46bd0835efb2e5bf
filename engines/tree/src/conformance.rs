//! Helpers for running the engine conformance suite
//! (`oram_engine::conformance`) on a tree scheme.

use oram_blockstore::{TraceEvent, Verb};
use oram_engine::conformance::{key_position, Params};

use crate::{Geometry, TreeConfig};

/// The generic configuration the suite asks for (`p`), with `stash_bound`.
pub fn tree_config(p: &Params, stash_bound: usize) -> TreeConfig {
    TreeConfig {
        capacity: p.capacity,
        id_limit: p.id_limit,
        block_size: p.block_size,
        cached_levels: p.cached_levels,
        stash_bound,
        max_batch: p.max_batch,
        max_inflight_writebacks: p.max_inflight_writebacks,
        round_attempts: p.round_attempts,
        collect_batch: p.collect_batch,
        prefix: p.prefix.clone(),
        rng_seed: Some(p.seed),
        ..TreeConfig::default()
    }
}

/// The leaves of the leaf-level buckets an access read (whole or in part): what
/// the uniformity check bins.
pub fn leaves_read(geo: &Geometry, access: &[TraceEvent]) -> Vec<u64> {
    access
        .iter()
        .filter(|e| matches!(e.verb, Verb::Get | Verb::GetRange))
        .filter_map(|e| key_position(&e.key))
        .filter(|&n| geo.level(n) == geo.leaf_level)
        .map(|n| n - geo.first_of_level(geo.leaf_level))
        .collect()
}
