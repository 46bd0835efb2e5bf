//! Ring ORAM runs the engine conformance suite (`oram_engine::conformance`).

use std::sync::Arc;

use oram_blockstore::TraceEvent;
use oram_engine::conformance::{Params, Subject};
use oram_engine::{Oram, Parts};
use oram_ring::{Geometry, RingConfig, RingOram, RingPreset};
use oram_tree::conformance::{leaves_read, tree_config};

struct RingSubject;

fn geometry(p: &Params) -> Geometry {
    let z = RingPreset::Small.params().z;
    let leaves = RingConfig::leaves_for(p.capacity, z);
    Geometry::new(p.capacity, z, p.block_size, Some(leaves))
}

fn config(p: &Params) -> RingConfig {
    let params = RingPreset::Small.params();
    let bound = RingConfig::default_stash_bound(params, p.max_batch);
    RingConfig {
        tree: tree_config(p, bound),
        params,
        ..RingConfig::default()
    }
}

impl Subject for RingSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let cfg = config(p);
        Arc::new(
            RingOram::new(cfg, parts.store, parts.sealer, parts.state)
                .expect("valid configuration"),
        )
    }
    fn oblivious(&self) -> bool {
        true
    }
    /// The leaf-level buckets read: the read path's and (every A accesses) the
    /// eviction path's, which follows a fixed schedule over all leaves.
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
        leaves_read(&geometry(p), access)
    }
    fn leaves(&self, p: &Params) -> Option<u64> {
        Some(geometry(p).leaves)
    }
    fn bins(&self, p: &Params) -> u64 {
        geometry(p).leaves
    }
    fn wide_ids(&self) -> bool {
        true
    }
    fn collects(&self) -> bool {
        true
    }

    fn reads_ahead(&self) -> bool {
        true
    }
    fn writes_back(&self) -> bool {
        false
    }
}

oram_engine::engine_conformance!(RingSubject);
oram_engine::engine_growth!(RingSubject);

#[test]
fn a_crash_between_the_growth_phases_leaves_the_old_size() {
    oram_engine::conformance::a_crash_between_the_growth_phases_leaves_the_old_size(
        Arc::new(RingSubject),
        &|p, parts, capacity| {
            Box::pin(async move {
                let e = RingOram::new(config(&p), parts.store, parts.sealer, parts.state).unwrap();
                e.grow_prepare(capacity, &|_, _| {}).await.unwrap()
            })
        },
    );
}

/// Every check on a volume created one level smaller and grown.
mod grown {
    use super::*;
    oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(RingSubject));
}
