//! CURIOUS (Bindschaedler, Naveed, Pan, Wang, Huang — "Practicing Oblivious
//! Access on Cloud Storage", CCS 2015): the partition framework over a
//! pluggable sub-ORAM, one sub-engine per partition, served in rounds.
//!
//! `P` partitions, each an ordinary engine (Path ORAM — of any arity, the
//! paper's k = 3, Z = 5 tree by default — or Ring ORAM) in its own space of the
//! trusted state and under its own backend prefix `<prefix>/c/<partition>`. The
//! position map block → partition and the eviction cache live in this engine's
//! own space ([`oram_partition::PartitionMap`]).
//!
//! The engine is the partition framework's ([`oram_partition::Partitioned`]),
//! named `curious`, partitions under `<prefix>/c/<p>`. **A round** of up to
//! `max_batch` ops: every op makes one
//! sub-ORAM access — a take of its block from the partition holding it, or a
//! dummy access of the partition its cached block is assigned to, or of a
//! uniformly random one; one block waiting in the eviction cache for that
//! partition rides on the access as an insert (no access of its own); with
//! probability ν − 1 a background eviction makes a dummy access of a uniformly
//! random partition carrying one more. Every block the round named goes to the
//! eviction cache assigned to a fresh random partition (or is forgotten if
//! taken). The partitions' accesses run **concurrently**, each staged; then
//! **one commit** covers them all and the map, so a block moving from `p` to
//! `p′` is never lost or stored twice at any instant of a crash.
//!
//! **What the storage server observes per round of `k` ops:** `k` sub-ORAM
//! accesses to i.i.d. uniformly random partitions plus Binomial(k, ν − 1)
//! background ones, each partition's accesses as its engine shows them (Path
//! ORAM: the union of its paths read, then written). Which partitions are
//! accessed is independent of the blocks: a block's partition was drawn at its
//! last access and is revealed once, when it is next accessed. Rounds are
//! strictly one after the other: a request waits for the round before it,
//! whichever partitions either touches, so waiting never reveals that two
//! requests share a partition (the TaoStore attack on the published code, which
//! let a request for a block in transit proceed while one for another block of a
//! busy partition waited). One slow partition delays the round it is in, and so
//! every request after it, alike.
//!
//! **Sub-ORAMs.** A Path ORAM partition is the shallowest tree whose two lowest
//! levels hold the partition's capacity (`oram_tree::Geometry::for_capacity`);
//! a partition is sized for `N/P` blocks plus ten standard deviations of the
//! load, lives in the space `(space + 1)·2^16 + p`, and takes the volume's block
//! ids. The crate imports no engine: whoever builds the settings (the volume's
//! engine registry) hands [`CuriousSettings`] a [`SubFactory`] that makes the
//! sub-ORAMs' settings. The framework's failures, crash repetition, answers once
//! read and maintenance are [`oram_partition::Partitioned`]'s.
//!
//! **Tests** (`tests/`): the whole conformance suite twice (ternary Path ORAM and
//! Ring ORAM, 8 partitions); partitions and pairs of consecutive partitions
//! uniform whatever the workload (ν = 1; the variant that gives a cached block's
//! dummy a fresh partition fails it); background evictions independent of the
//! workload (ν = 1.25); one slow partition delays every request alike; the
//! eviction cache stays small over 100 000 accesses; bandwidth per access is the
//! analytical ν × 2 × uncached levels × sealed bucket, within 10 %.

mod settings;

pub use oram_partition::{BuildSub, Partitioned as Curious, PartitionedConfig as CuriousConfig};
pub use settings::{
    sub_stash_allowance, CuriousSettings, SubFactory, SubSpec, SUB_STASH_PER_PARTITION,
};
