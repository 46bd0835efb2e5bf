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

impl PathSubject {
    /// The binary tree's keys sharded as a new volume's are
    /// (`<prefix>/n/<shard>/<node>`), the ternary one's not, as CURIOUS's
    /// sub-ORAMs': every check runs on both layouts.
    fn config(&self, p: &Params) -> PathConfig {
        let mut tree = tree_config(p, PathConfig::default().tree.stash_bound);
        if self.arity == 2 {
            tree.key_shards = oram_tree::DEFAULT_KEY_SHARDS;
        }
        PathConfig {
            tree,
            z: self.z,
            arity: self.arity,
        }
    }
}

impl Subject for PathSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let cfg = self.config(p);
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
    fn collects(&self) -> bool {
        true
    }

    fn reads_ahead(&self) -> bool {
        true
    }
}

oram_engine::engine_conformance!(PathSubject { arity: 2, z: 4 });
oram_engine::engine_growth!(PathSubject { arity: 2, z: 4 });

#[test]
fn a_crash_between_the_growth_phases_leaves_the_old_size() {
    let subject = PathSubject { arity: 2, z: 4 };
    oram_engine::conformance::a_crash_between_the_growth_phases_leaves_the_old_size(
        Arc::new(PathSubject { arity: 2, z: 4 }),
        &move |p, parts, capacity| {
            let cfg = subject.config(&p);
            Box::pin(async move {
                let e = PathOram::new(cfg, parts.store, parts.sealer, parts.state).unwrap();
                e.grow_prepare(capacity, &|_, _| {}).await.unwrap()
            })
        },
    );
}

/// Every check on a volume created one level smaller and grown.
mod grown {
    use super::*;
    oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(PathSubject {
        arity: 2,
        z: 4
    }));
}

/// The k-ary tree of the CURIOUS paper's sub-ORAM (k = 3, Z = 5) passes too.
mod ternary {
    use super::*;
    oram_engine::engine_conformance!(PathSubject { arity: 3, z: 5 });

    /// Grown by a level of three times the leaves.
    mod grown {
        use super::*;
        oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(PathSubject {
            arity: 3,
            z: 5
        }));
    }
}

/// Growths to sizes between powers of two keep the tree no larger than one
/// growth to the last size: 512 → 600 adds a level (room for 1024), 600 →
/// 1000 then fits in that room, writes nothing and only records the capacity,
/// and 1000 → 1100 adds one more level (room for 2048), not two.
#[test]
fn growths_count_the_room_from_the_created_tree() {
    use oram_engine::conformance::{fill, read_back, runtime, test_sealer, Model};
    runtime().block_on(async {
        let p = Params {
            capacity: 512,
            ..Params::default()
        };
        let s = PathSubject { arity: 2, z: 4 };
        let e = s.build(
            &p,
            Arc::new(oram_store_memory::MemoryStore::new()),
            test_sealer(),
            Box::new(oram_state::MemState::new()),
        );
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..512, 1).await;
        let first = e.grow(600, &|_, _| {}).await.unwrap();
        assert!(first.written > 0 && first.written == first.positions);
        let second = e.grow(1000, &|_, _| {}).await.unwrap();
        assert_eq!(
            (second.capacity, second.positions, second.written),
            (1000, 0, 0)
        );
        assert_eq!(e.capacity(), 1000);
        fill(e.as_ref(), &mut model, 600..1000, 2).await;
        let third = e.grow(1100, &|_, _| {}).await.unwrap();
        assert_eq!(
            third.positions,
            2 * first.positions,
            "one level of twice the buckets"
        );
        read_back(e.as_ref(), &model, 1100, 16).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}
