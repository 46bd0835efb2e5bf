//! ObliviStore and CURIOUS (Path sub-ORAMs), with their partitions served by
//! nodes over mutual TLS, run the
//! engine conformance suite (`oram_engine::conformance`): the front's partition
//! framework places each of 8 partitions on one of 3 nodes (each node on its
//! own thread and runtime, with its own listener on 127.0.0.1), every sub-access
//! goes over the wire, and each node commits its partitions with their ledger.
//! Everything the suite checks of the local engine — the model, crashes between
//! a round's reads and its commit, failed rounds repeated exactly, tampering,
//! trace independence, maintenance — holds across machines.

use std::sync::Arc;

use oram_blockstore::{TraceEvent, Verb};
use oram_engine::conformance::{Params, Subject};
use oram_engine::{Oram, Parts};
use oram_oblivistore::{oblivistore_blueprint, ObliviStoreConfig};
use oram_tests::cluster::{clustered, node_parts};

const PARTITIONS: u32 = 8;
const NODES: u32 = 3;

struct ClusteredObliviStore;

/// The partition of a level object's key `<prefix>/o/<partition>/<level>/<slot>`.
fn partition_of(key: &str) -> Option<u32> {
    let mut parts = key.rsplit('/');
    parts.next()?;
    parts.next()?;
    parts.next()?.parse().ok()
}

impl Subject for ClusteredObliviStore {
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
        let mut cfg = ObliviStoreConfig::new(p.capacity, p.block_size, PARTITIONS, p.max_batch);
        cfg.framework.cache_bound = 1 << 20;
        cfg.framework.round_attempts = p.round_attempts;
        cfg.framework.rng_seed = Some(p.seed);
        let blueprint = oblivistore_blueprint(cfg, &p.prefix).expect("valid configuration");
        let nodes = (0..NODES).map(|_| node_parts(&parts)).collect();
        clustered(&blueprint, parts, nodes, 0)
    }
    fn rounds_in_flight(&self) -> bool {
        true
    }
    fn oblivious(&self) -> bool {
        true
    }
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

oram_engine::engine_conformance!(ClusteredObliviStore);

/// CURIOUS with the paper's ternary Path ORAM (Z = 5) in each of 8 partitions,
/// the partitions on 3 nodes.
mod curious {
    use std::sync::Arc;

    use oram_blockstore::{TraceEvent, Verb};
    use oram_engine::conformance::{Params, Subject};
    use oram_engine::{Oram, Parts, Shape};
    use oram_partition::{Blueprint, PartitionedConfig};
    use oram_path::{Geometry, PathConfig, PathOram, TreeConfig};
    use oram_tests::cluster::{clustered, node_parts};

    use super::{NODES, PARTITIONS};

    struct ClusteredCurious;

    fn config(p: &Params) -> PartitionedConfig {
        PartitionedConfig {
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

    fn geometry(p: &Params) -> Geometry {
        Geometry::for_capacity(3, config(p).sub_capacity(), 5, p.block_size, None)
    }

    /// The partition and node of a key `<prefix>/c/<partition>/n/<node>[.<slot>]`.
    fn partition_node(key: &str) -> Option<(u32, u64)> {
        let mut parts = key.rsplit('/');
        let node = parts.next()?.split('.').next()?.parse().ok()?;
        parts.next()?;
        let partition = parts.next()?.parse().ok()?;
        Some((partition, node))
    }

    impl Subject for ClusteredCurious {
        fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram> {
            let cfg = config(p);
            let sub_shape = Shape {
                capacity: cfg.sub_capacity(),
                block_size: p.block_size,
                max_batch: cfg.sub_batch(),
                prefix: p.prefix.clone(),
                id_limit: Some(p.capacity),
            };
            let (seed, cached) = (p.seed, p.cached_levels);
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
                    round_attempts: 1,
                    prefix: shape.prefix.clone(),
                    rng_seed: Some(seed),
                    ..TreeConfig::default()
                };
                let cfg = PathConfig {
                    tree,
                    z: 5,
                    arity: 3,
                };
                let e: Arc<dyn Oram> =
                    Arc::new(PathOram::new(cfg, parts.store, parts.sealer, parts.state)?);
                Ok(e)
            };
            let blueprint = Blueprint {
                cfg,
                sub_shape,
                build: Arc::new(build),
            };
            let nodes = (0..NODES).map(|_| node_parts(&parts)).collect();
            clustered(&blueprint, parts, nodes, 0)
        }
        fn rounds_in_flight(&self) -> bool {
            true
        }
        fn oblivious(&self) -> bool {
            true
        }
        fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64> {
            let geo = geometry(p);
            access
                .iter()
                .filter(|e| matches!(e.verb, Verb::Get | Verb::GetRange))
                .filter_map(|e| partition_node(&e.key))
                .filter(|&(_, n)| geo.level(n) == geo.leaf_level)
                .map(|(p, _)| u64::from(p))
                .collect()
        }
        fn bins(&self, _: &Params) -> u64 {
            u64::from(PARTITIONS)
        }
        fn leaves(&self, p: &Params) -> Option<u64> {
            Some(geometry(p).leaves)
        }
        fn arity(&self) -> u64 {
            geometry(&Params::default()).arity
        }
        fn places_blocks_in_its_space(&self) -> bool {
            false
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
        fn stages(&self) -> bool {
            false
        }
    }

    oram_engine::engine_conformance!(ClusteredCurious);
}
