//! Path ORAM runs the engine conformance suite (`oram_engine::conformance`).

use std::sync::Arc;

use oram_blockstore::TraceEvent;
use oram_engine::conformance::{Params, Subject};
use oram_engine::{Oram, Parts};
use oram_path::{Geometry, PathConfig, PathOram};
use oram_tree::conformance::{leaves_read, tree_config};

struct PathSubject;

fn geometry(p: &Params) -> Geometry {
    Geometry::new(p.capacity, 4, p.block_size, None)
}

impl Subject for PathSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let cfg = PathConfig {
            tree: tree_config(p, PathConfig::default().tree.stash_bound),
            z: 4,
        };
        Arc::new(
            PathOram::new(cfg, parts.store, parts.sealer, parts.state)
                .expect("valid configuration"),
        )
    }
    fn oblivious(&self) -> bool {
        true
    }
    /// The leaf of every path read.
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
        leaves_read(&geometry(p), access)
    }
    fn bins(&self, p: &Params) -> u64 {
        geometry(p).leaves
    }
    fn leaves(&self, p: &Params) -> Option<u64> {
        Some(geometry(p).leaves)
    }
    fn writes_back(&self) -> bool {
        false
    }
    fn wide_ids(&self) -> bool {
        true
    }
    fn reads_ahead(&self) -> bool {
        true
    }
}

oram_engine::engine_conformance!(PathSubject);
