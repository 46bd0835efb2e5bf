//! Path ORAM runs the engine conformance suite (`oram_engine::conformance`).

use std::sync::Arc;

use oram_blockstore::TraceEvent;
use oram_engine::conformance::{Params, Subject};
use oram_engine::{Oram, Parts};
use oram_path::{Geometry, PathConfig, PathOram};
use oram_tree::conformance::{leaves_read, tree_config};

/// Path ORAM of arity `arity` with `z` blocks per bucket.
struct PathSubject {
    arity: u64,
    z: usize,
}

impl PathSubject {
    fn geometry(&self, p: &Params) -> Geometry {
        Geometry::for_capacity(self.arity, p.capacity, self.z, p.block_size, None)
    }
}

impl Subject for PathSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let cfg = PathConfig {
            tree: tree_config(p, PathConfig::default().tree.stash_bound),
            z: self.z,
            arity: self.arity,
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
        leaves_read(&self.geometry(p), access)
    }
    fn bins(&self, p: &Params) -> u64 {
        self.geometry(p).leaves
    }
    fn leaves(&self, p: &Params) -> Option<u64> {
        Some(self.geometry(p).leaves)
    }
    fn arity(&self) -> u64 {
        self.arity
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

oram_engine::engine_conformance!(PathSubject { arity: 2, z: 4 });

/// The k-ary tree of the CURIOUS paper's sub-ORAM (k = 3, Z = 5) passes too.
mod ternary {
    use super::*;
    oram_engine::engine_conformance!(PathSubject { arity: 3, z: 5 });
}
