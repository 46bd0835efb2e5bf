//! CURIOUS runs the engine conformance suite (`oram_engine::conformance`), with
//! the paper's ternary Path ORAM (Z = 5) in each of 8 partitions, and with Ring
//! ORAM.

use std::sync::Arc;

use oram_blockstore::{TraceEvent, Verb};
use oram_curious::{Curious, CuriousConfig};
use oram_engine::conformance::{Params, Subject};
use oram_engine::{Oram, Parts, Shape};
use oram_path::{Geometry, PathConfig, PathOram, TreeConfig};
use oram_ring::{RingConfig, RingOram, RingPreset};

const PARTITIONS: u32 = 8;

struct CuriousSubject {
    ring: bool,
    /// Under `GrownSubject`: every engine was created at a third (Path) or
    /// half (Ring) of the capacity and grown, each partition's tree by levels
    /// below its leaves.
    grown: bool,
}

fn config(p: &Params) -> CuriousConfig {
    CuriousConfig {
        name: "curious",
        letter: 'c',
        capacity: p.capacity,
        block_size: p.block_size,
        partitions: PARTITIONS,
        max_batch: p.max_batch,
        eviction_rate: 1.25,
        cache_bound: 1 << 20,
        partition_limit: None,
        round_attempts: p.round_attempts,
        rng_seed: Some(p.seed),
    }
}

impl CuriousSubject {
    /// The tree of every partition of an engine created for `p`.
    fn created(&self, p: &Params) -> Geometry {
        let cap = config(p).sub_capacity();
        if self.ring {
            let z = RingPreset::Small.params().z;
            return Geometry::new(cap, z, p.block_size, Some(RingConfig::leaves_for(cap, z)));
        }
        Geometry::for_capacity(3, cap, 5, p.block_size, None)
    }

    /// The tree of every partition: as created for `p`, or, grown, as created
    /// for the smaller capacity and deepened until it has the room `p` needs
    /// (as a tree's growth does).
    fn geometry(&self, p: &Params) -> Geometry {
        if !self.grown {
            return self.created(p);
        }
        let arity = self.arity();
        let small = Params {
            capacity: p.capacity.div_ceil(arity),
            ..p.clone()
        };
        let (geo, need) = (self.created(&small), config(p).sub_capacity());
        let (mut room, mut add) = (config(&small).sub_capacity(), 0);
        while room < need {
            room *= arity;
            add += 1;
        }
        geo.deeper(add).expect("a deeper tree")
    }
}

/// The partition and node of a sub-ORAM's key `<prefix>/c/<partition>/n/<node>[.<slot>]`.
fn partition_node(key: &str) -> Option<(u32, u64)> {
    let mut parts = key.rsplit('/');
    let node = parts.next()?.split('.').next()?.parse().ok()?;
    parts.next()?;
    let partition = parts.next()?.parse().ok()?;
    Some((partition, node))
}

impl Subject for CuriousSubject {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let cfg = config(p);
        let sub_shape = Shape {
            capacity: cfg.sub_capacity(),
            block_size: p.block_size,
            max_batch: cfg.sub_batch(),
            prefix: p.prefix.clone(),
            id_limit: Some(p.capacity),
        };
        let ring = self.ring;
        let seed = p.seed;
        let cached = p.cached_levels;
        let build = move |partition: u32, shape: &Shape, parts: Parts| {
            let mut seed = seed;
            seed[0] ^= partition as u8;
            seed[1] ^= (partition >> 8) as u8;
            let tree = TreeConfig {
                capacity: shape.capacity,
                id_limit: shape.id_limit,
                block_size: shape.block_size,
                cached_levels: cached,
                max_batch: shape.max_batch,
                // A failed round is repeated as a whole, by the framework.
                round_attempts: 1,
                prefix: shape.prefix.clone(),
                rng_seed: Some(seed),
                ..TreeConfig::default()
            };
            let e: Arc<dyn Oram> = if ring {
                let params = RingPreset::Small.params();
                let cfg = RingConfig {
                    tree: TreeConfig {
                        stash_bound: RingConfig::default_stash_bound(params, shape.max_batch),
                        ..tree
                    },
                    params,
                    ..RingConfig::default()
                };
                Arc::new(RingOram::new(cfg, parts.store, parts.sealer, parts.state)?)
            } else {
                let cfg = PathConfig {
                    tree,
                    z: 5,
                    arity: 3,
                };
                Arc::new(PathOram::new(cfg, parts.store, parts.sealer, parts.state)?)
            };
            Ok(e)
        };
        Arc::new(Curious::new(cfg, parts, &sub_shape, &build).expect("valid configuration"))
    }
    fn oblivious(&self) -> bool {
        true
    }
    /// The partition of every path read (one leaf-level bucket each).
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
        leaf_partitions(&self.geometry(p), access)
    }
    fn bins(&self, _: &Params) -> u64 {
        u64::from(PARTITIONS)
    }
    fn leaves(&self, p: &Params) -> Option<u64> {
        Some(self.geometry(p).leaves)
    }
    fn arity(&self) -> u64 {
        self.created(&Params::default()).arity
    }
    fn places_blocks_in_its_space(&self) -> bool {
        false
    }
    fn every_write_puts(&self) -> bool {
        !self.ring
    }
    fn trees(&self) -> u64 {
        u64::from(PARTITIONS)
    }
    fn writes_back(&self) -> bool {
        false
    }
    fn wide_ids(&self) -> bool {
        false
    }
    fn collects(&self) -> bool {
        true
    }

    fn reads_ahead(&self) -> bool {
        false
    }
    fn rounds_in_flight(&self) -> bool {
        true
    }
    fn stages(&self) -> bool {
        false
    }
}

fn leaf_partitions(geo: &Geometry, access: &[TraceEvent]) -> Vec<u64> {
    access
        .iter()
        .filter(|e| matches!(e.verb, Verb::Get | Verb::GetRange))
        .filter_map(|e| partition_node(&e.key))
        .filter(|&(_, n)| geo.level(n) == geo.leaf_level)
        .map(|(p, _)| u64::from(p))
        .collect()
}

oram_engine::engine_conformance!(CuriousSubject {
    ring: false,
    grown: false
});

// Growth: every partition's tree grows by levels below its leaves, one
// partition after the other, rounds beside them.
oram_engine::engine_growth!(CuriousSubject {
    ring: false,
    grown: false
});

mod ring {
    use super::*;
    oram_engine::engine_conformance!(CuriousSubject {
        ring: true,
        grown: false
    });
}

/// Every check on a volume created at a third of the capacity and grown.
mod grown {
    use super::*;
    oram_engine::engine_conformance!(oram_engine::conformance::GrownSubject(CuriousSubject {
        ring: false,
        grown: true
    }));
}
