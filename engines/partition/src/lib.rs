//! The partition framework of Stefanov, Shi and Song ("Towards Practical
//! Oblivious RAM", NDSS 2012; summed up in §2 of Stefanov and Shi, "Multi-Cloud
//! Oblivious Storage", CCS 2013) shared by the partition-based engines —
//! CURIOUS and ObliviStore: the map and eviction
//! cache ([`PartitionMap`]) and the engine that serves rounds over one
//! sub-engine per partition ([`Partitioned`]).
//!
//! Every block lives in one of `P` partitions, chosen uniformly at random when it
//! was last accessed. An access reads the block from its partition (a dummy read
//! of a uniformly random partition if it is not there), assigns it a fresh
//! uniformly random partition and keeps it in the **eviction cache** until an
//! eviction into that partition writes it there. Evictions go to partitions
//! chosen independently of the accesses (the partition just read, or a uniform
//! draw), so the sequence of partitions the storage server sees is i.i.d.
//! uniform whatever the blocks asked for.
//!
//! [`PartitionMap`] keeps this bookkeeping in one space of the trusted state:
//! `position(b)` is the block's partition, and a block in the eviction cache is
//! in that space's stash too. Its changes are staged with the partitions' own
//! ([`PartitionMap::stage`]) so that a block's move from partition `p` to `p′` —
//! taken from `p`, cached, written to `p′` — is one atomic commit: never lost,
//! never stored twice, at any instant of a crash. The storage server observes
//! nothing of this map: it lives in trusted local state only.

mod counters;
mod drive;
mod engine;
mod grow;
mod map;
mod round;

pub use engine::{
    partitions_for, validate_partitioning, Blueprint, BuildSub, Partitioned, PartitionedConfig,
    SubBuilder, MIN_EVICTION_RATE, SUB_ID_LIMIT,
};
pub use map::{draw, GrownTo, PartitionMap, Where, MAP_META_BOUND};

#[cfg(test)]
mod validation_tests {
    use crate::{validate_partitioning, MIN_EVICTION_RATE};

    #[test]
    fn an_eviction_rate_below_the_minimum_is_refused() {
        for nu in [1.0, 1.05, 2.01, f64::NAN] {
            let e = validate_partitioning("curious", 0, 1024, nu).unwrap_err();
            assert!(
                e.contains("curious_eviction_rate must be 1.1 to 2.0"),
                "{nu}: {e}"
            );
        }
        for nu in [MIN_EVICTION_RATE, 1.25, 2.0] {
            validate_partitioning("curious", 0, 1024, nu).unwrap();
        }
    }
}
