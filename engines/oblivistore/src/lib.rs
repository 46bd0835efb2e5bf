//! ObliviStore (Stefanov & Shi, "ObliviStore: High Performance Oblivious Cloud
//! Storage", IEEE S&P 2013): the partition framework of Stefanov, Shi and Song
//! ("Towards Practical Oblivious RAM", NDSS 2012) over hierarchical partitions,
//! as §2.1 and §2.2 of Stefanov and Shi, "Multi-Cloud Oblivious Storage" (CCS
//! 2013) sum them up.
//!
//! About `√N` partitions, each a [`Hierarchy`]: levels `0..=top` of `2^ℓ` real
//! and `2^ℓ` dummy slots, filled or empty as the partition's eviction counter
//! dictates, each shuffled under a fresh permutation and sealed under a fresh
//! version when built. A position map block → partition and the eviction cache
//! live in the engine's own space of the trusted state; a partition's levels,
//! their layouts and its blocks' level and offset in the partition's own space.
//!
//! The engine is the partition framework's ([`oram_partition::Partitioned`]),
//! named `oblivistore`, partitions under `<prefix>/o/<p>`: per op, one
//! partition access — a read of the block's partition (the block's slot at its
//! level, the next unread dummy of every other filled level), or a dummy read of
//! the partition a cached block is assigned to, or of a uniformly random one;
//! the block goes to the eviction cache assigned to a fresh uniformly random
//! partition. **Evictions at the fixed rate ν**: one into the partition just
//! read (a block waiting for it, or nothing — the shuffle is the same), and with
//! probability ν − 1 a background one into a uniformly random partition (it
//! reads that partition as a dummy access first: the framework's background
//! eviction). An eviction shuffles the levels below the lowest empty one into
//! it, taking exactly `2^ℓ` slots of each (every unread real block and the
//! next unread dummies) from one GET of the level's whole object, and writes
//! the new level whole before the commit that makes it live, never over a live
//! object or the last checkpoint's.
//!
//! **What the storage server observes:** per round of `k` ops, `k` partition
//! accesses of i.i.d. uniformly random partitions and Binomial(k, ν − 1)
//! background ones, run concurrently; each is, in its partition, one ranged GET
//! of a slot of each filled level the eviction leaves alone, one GET of each
//! whole level it empties and one PUT of the level built — counts and sizes
//! that depend only on how many evictions the partition has had (see
//! [`Hierarchy`]). Rounds are one after the other (the framework's).
//!
//! **Scheduling, and the leaks of the published implementations avoided:**
//! there is no background shuffler whose work depends on demand: every shuffle
//! is the eviction an access pays for, at a fixed rate, so a starved shuffler
//! adds no work nobody paid for; a shuffle reads a level whole and takes exactly
//! `2^ℓ` slots of it whatever it holds; a block waiting in the eviction cache is still *read*
//! (a dummy read of its partition), never skipped; the shuffle buffer is a
//! semaphore whose permits per shuffle are the size of the level built — a
//! public quantity — so waiting for it reveals nothing.
//!
//! **One object per level**, rather than one object per slot: a level is
//! always written whole, so an eviction is one PUT instead of `2^(j+1)`, and a
//! level the eviction empties is read by one GET instead of `2^ℓ + 1` ranged
//! ones (`hierarchy.rs`, "Reads"). On S3 a request costs more than its bytes,
//! and on the fs back-end one file per slot would cost a file create, an fsync
//! and a rename per slot. (One object per slot was not measured.)
//!
//! **A level's permutation** comes from ChaCha20 keyed by a per-partition secret
//! in the trusted state, one stream per level version and generation: a round
//! repeated after a failure rebuilds the level exactly as before, so a PUT of the
//! failed attempt that lands late leaves a level the state describes (the fault
//! battery found that case with fresh random permutations). The secret is drawn
//! and committed on its own before the partition's first access sends anything
//! (a partition of an existing volume that has none yet gets it the same way),
//! so a failed first shuffle is repeated under the same secret too.
//!
//! **Background evictions read.** The framework's background eviction is a dummy
//! access — a read, then the eviction — so it also reads one slot per filled
//! level: about ν − 1 of an access's reads more than the paper's write-only
//! eviction (a few per cent of the bytes at ν = 1.25), in exchange for the bound
//! that every read is followed by an eviction into the same partition, which
//! makes a level's dummies suffice without early shuffles (`levels.rs` tests it).
//!
//! **Memory.** The eviction cache is the framework's (bounded; above the bound an
//! access fails with a stash overflow, nothing lost). The shuffle buffer is a
//! semaphore over all partitions, counted in slots; sealing runs on the blocking
//! pool. A built level waiting for its round's commit holds permits of a second
//! budget as large, taken without waiting (a wait there could be for the round's
//! own commit); when that budget is spent the level lands before the sub-access
//! returns. A partition holds at most its top level's `2^top` real blocks (the
//! framework's `partition_limit`): an eviction into a full partition inserts
//! nothing — exactly what an eviction finding no block waiting does, so it looks
//! the same — and the block waits in the eviction cache until a take has made
//! room, so no round fails after its requests went out for a full partition (a
//! round that did under an earlier release, which wedged the engine, completes
//! at the next start without the insert that overflowed). A partition asked all
//! the same to shuffle more blocks into its top level than it holds fails the
//! access with a configuration error before any request of that access.
//!
//! **Growth.** The engine grows online ([`oram_engine::Oram::grow`]) by growing
//! every partition alike, `P` unchanged (the framework's `grow` says why): each
//! partition's top level rises in one commit of its trusted state and starts
//! empty, so a growth writes nothing; the next eviction that finds every old
//! level filled builds the new top from them (see `grow.rs`). The shuffle
//! buffer and the landing budget double for each level added.
//!
//! **Footprint.** A level is written to a slot neither live nor the last
//! checkpoint's, so a level may keep up to three objects, and a level emptied
//! by a merge keeps its last one. After each checkpoint lands
//! (`Oram::collect_while_serving`, a partition at a time) and at a clean stop
//! (`Oram::collect`), each partition deletes what nothing can need any more: a
//! stopped partition keeps one object per level it fills.
//!
//! **Concurrency.** The partitions of a round run concurrently; within a
//! partition a round's sub-accesses run in order (the next read may hit the level
//! the previous eviction built); rounds run one after the other, so a slow
//! partition delays everyone alike. `check` reads every filled level whole and
//! opens every slot; `sweep` keeps each level's current slot and the last
//! checkpoint's.

mod budget;
mod fetch;
mod grow;
mod hierarchy;
mod levels;
mod settings;
mod steps;

use std::sync::Arc;

use oram_engine::{Oram, OramError, Parts, Result, Shape};
use oram_partition::{Blueprint, Partitioned, PartitionedConfig};
use tokio::sync::Semaphore;

pub use budget::SlotBudget;
pub use hierarchy::{Hierarchy, HierarchyConfig};
pub use levels::{Geometry, PerAccess, ShuffleRead};
pub use settings::ObliviStoreSettings;

/// Parameters of an ObliviStore engine.
#[derive(Clone, Debug)]
pub struct ObliviStoreConfig {
    /// The partition framework's (name `oblivistore`, letter `o`).
    pub framework: PartitionedConfig,
    /// The shuffle buffer: bytes of level objects all partitions' shuffles may
    /// hold at once (at least one top level); as much again may wait, built,
    /// for their round's commit.
    pub shuffle_bytes: u64,
    /// How an eviction reads the levels it empties.
    pub shuffle_read: ShuffleRead,
}

impl ObliviStoreConfig {
    /// The configuration of `partitions` partitions for `capacity` blocks of
    /// `block_size` bytes, rounds of `max_batch` ops, at the defaults: ν = 1.25,
    /// an eviction cache of 8 blocks per partition (at least 256), a shuffle
    /// buffer of two top levels.
    pub fn new(capacity: u64, block_size: usize, partitions: u32, max_batch: usize) -> Self {
        let mut cfg = Self {
            framework: PartitionedConfig {
                name: "oblivistore",
                letter: 'o',
                capacity,
                block_size,
                partitions,
                max_batch,
                eviction_rate: 1.25,
                cache_bound: (8 * u64::from(partitions)).max(256) as usize,
                partition_limit: None,
                round_attempts: 3,
                rng_seed: None,
            },
            shuffle_bytes: 0,
            shuffle_read: ShuffleRead::Whole,
        };
        let g = cfg.geometry();
        cfg.shuffle_bytes = 2 * g.level_bytes(g.top);
        cfg.framework.partition_limit = Some(g.reals(g.top));
        cfg
    }

    /// The levels of every partition: its top level holds the framework's
    /// partition capacity (the mean load plus ten standard deviations).
    pub fn geometry(&self) -> Geometry {
        Geometry::for_capacity(self.framework.sub_capacity(), self.framework.block_size)
    }
}

/// Builds an ObliviStore engine whose map lives in `parts.state`, its
/// partitions in sibling spaces, under backend prefix `prefix`. A partition
/// holds at most its top level's `2^top` real blocks (the framework's
/// `partition_limit`, set here whatever `cfg` says): an eviction into a full
/// one leaves its block waiting in the eviction cache.
pub fn oblivistore(cfg: ObliviStoreConfig, parts: Parts, prefix: &str) -> Result<Partitioned> {
    oblivistore_blueprint(cfg, prefix)?.engine(parts, &oram_engine::Local)
}

/// What [`oblivistore`] builds, to be built whole or in part
/// ([`Blueprint::engine`] with partitions placed elsewhere, or
/// [`Blueprint::partitions`] on a cluster node). The partitions share one
/// shuffle buffer per process.
pub fn oblivistore_blueprint(mut cfg: ObliviStoreConfig, prefix: &str) -> Result<Blueprint> {
    let geometry = cfg.geometry();
    cfg.framework.partition_limit = Some(geometry.reals(geometry.top));
    let slot = geometry.slot_len() as u64;
    let permits = (cfg.shuffle_bytes / slot).min(Semaphore::MAX_PERMITS as u64);
    if permits < geometry.slots(geometry.top) {
        return Err(OramError::Config(format!(
            "the shuffle buffer ({} bytes) must hold one top-level shuffle ({} bytes)",
            cfg.shuffle_bytes,
            geometry.level_bytes(geometry.top)
        )));
    }
    let shuffle = SlotBudget::new(permits, geometry.top);
    let landing = SlotBudget::new(permits, geometry.top);
    let sub_shape = Shape {
        capacity: cfg.framework.sub_capacity(),
        block_size: cfg.framework.block_size,
        max_batch: cfg.framework.sub_batch(),
        prefix: prefix.to_string(),
        id_limit: Some(cfg.framework.capacity),
    };
    let seed = cfg.framework.rng_seed;
    let shuffle_read = cfg.shuffle_read;
    let build = move |p: u32, shape: &Shape, parts: Parts| {
        let rng_seed = seed.map(|mut s| {
            s[0] ^= p as u8 ^ 0x5a;
            s[1] ^= (p >> 8) as u8;
            s
        });
        let h = Hierarchy::new(
            HierarchyConfig {
                geometry,
                id_limit: shape.id_limit.unwrap_or(shape.capacity),
                prefix: shape.prefix.clone(),
                rng_seed,
                shuffle_read,
            },
            parts.store,
            parts.sealer,
            parts.state,
            shuffle.clone(),
            landing.clone(),
        )?;
        Ok(Arc::new(h) as Arc<dyn Oram>)
    };
    Ok(Blueprint {
        cfg: cfg.framework,
        sub_shape,
        build: Arc::new(build),
    })
}
