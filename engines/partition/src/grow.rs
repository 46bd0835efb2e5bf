//! Growing a partitioned engine online ([`oram_engine::Oram::grow`]): every
//! partition grows alike, and the partitions stay `P`.
//!
//! Each partition's sub-engine grows to the room a partition of the new
//! capacity needs ([`PartitionedConfig::sub_capacity_at`]) by its own growth —
//! a tree (CURIOUS) by levels below its leaves, a hierarchical partition
//! (ObliviStore) by a new, empty top level — one partition after the other,
//! in two steps: what the growth writes ([`oram_engine::Oram::grow_prepare`]:
//! a tree's new buckets), beside the rounds; then, under the round lock and
//! after repeating an interrupted round if there is one (so that no
//! sub-engine holds a round to finish when it switches), the partition's
//! switch ([`oram_engine::Oram::grow`], which then writes nothing more).
//! Rounds wait for one partition's switch at a time — one commit of its state.
//! Then **one commit** of the map's space records the capacity and the
//! partition limit in effect ([`GrownTo`]); until it, the engine serves the
//! old capacity, whichever partitions grew already.
//!
//! Why not more partitions: the map places every block in a partition drawn
//! uniformly among `P` at its last access. With more partitions, a block not
//! accessed since the growth would be in one of the old `P` and a block
//! accessed since in any of them, so which partitions the rounds read would
//! tell blocks touched since the growth from the others — unless a sweep
//! moved every old block first, a pass over the whole volume. Growing every
//! partition alike moves nothing: the partitions a round reads stay i.i.d.
//! uniform among the same `P`. The cost is partitions larger than `⌈√N⌉` after
//! a growth (each one's accesses cost the logarithm of its size more), and an
//! eviction cache sized for the `P` the engine was created with — which it
//! still has.
//!
//! Crash safety: each partition's growth is its engine's own (the old size or
//! the new one, never between); a crash between two partitions' growths
//! leaves the engine at its old capacity with some partitions larger — they
//! serve the same blocks — and growing again to the same capacity skips the
//! partitions grown and finishes the others.
//!
//! Observed by the storage server: each partition's growth in turn, in
//! partition order (a function of the public shapes only), and rounds of the
//! same kind as before in between; no request for the commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use oram_engine::{Grown, OramError, Result};

use crate::engine::Inner;
use crate::{GrownTo, PartitionMap, PartitionedConfig, SUB_ID_LIMIT};

/// The capacity and partition limit in effect for an engine configured with
/// `cfg` whose map is `map`: the last growth's, or the configured ones.
/// Refused if the engine is configured with another capacity than it was
/// created with.
pub(crate) fn in_effect(cfg: &PartitionedConfig, map: &PartitionMap) -> Result<(u64, Option<u64>)> {
    match map.grown()? {
        None => Ok((cfg.capacity, cfg.partition_limit)),
        Some(g) if g.base != cfg.capacity => Err(OramError::Config(format!(
            "the volume was created with a capacity of {} blocks (and grew to {}): it must be \
             opened with {0}, not {}",
            g.base, g.capacity, cfg.capacity
        ))),
        Some(g) => Ok((g.capacity, g.partition_limit)),
    }
}

impl Inner {
    /// [`oram_engine::Oram::grow`] (see the module).
    pub(crate) async fn grow(
        self: Arc<Self>,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        if self.ship_intents {
            return Err(OramError::Unsupported(
                "growing a volume whose partitions are served by cluster nodes",
            ));
        }
        let from = self.capacity();
        if capacity < from {
            return Err(OramError::Config(format!(
                "a volume cannot shrink ({from} blocks, {capacity} asked for)"
            )));
        }
        if capacity == from {
            progress(0, 0);
            return Ok(Grown {
                capacity,
                ..Grown::default()
            });
        }
        if capacity > SUB_ID_LIMIT {
            return Err(OramError::Config(format!(
                "a partitioned engine holds at most {SUB_ID_LIMIT} blocks"
            )));
        }
        let room = self.cfg.sub_capacity_at(capacity);
        let count = self.subs.len() as u64;
        // Every partition has the same shape: each adds as many objects.
        let each = AtomicU64::new(0);
        let mut written = 0u64;
        for (p, sub) in self.subs.iter().enumerate() {
            let p = p as u64;
            if sub.capacity() < room {
                // The long part beside the rounds, then the switch alone
                // under the round lock, with no round left to finish.
                let forward = |done: u64, total: u64| {
                    if total > 0 {
                        each.fetch_max(total, Ordering::Relaxed);
                        progress(p * total + done, count * total);
                    }
                };
                let prepared = sub.grow_prepare(room, &forward).await?;
                each.fetch_max(prepared.positions, Ordering::Relaxed);
                written += prepared.written;
                let mut fw = self.round.lock().await;
                self.repeat_all(&mut fw).await?;
                written += sub.grow(room, &|_, _| {}).await?.written;
            }
            // A partition whose growth writes nothing: progress in partitions.
            if each.load(Ordering::Relaxed) == 0 {
                progress(p + 1, count);
            }
        }
        let each = each.load(Ordering::Relaxed);
        let mut fw = self.round.lock().await;
        self.reap(&mut fw).await?;
        let partition_limit = match self.cfg.partition_limit {
            Some(_) => self.subs.iter().map(|s| s.capacity()).min(),
            None => None,
        };
        fw.map.set_grown(GrownTo {
            base: self.cfg.capacity,
            capacity,
            partition_limit,
        });
        if let Err(e) = fw.map.stage().commit().await {
            fw.map.rollback()?;
            return Err(e.into());
        }
        fw.map.settle();
        self.capacity.store(capacity, Ordering::Release);
        self.partition_limit
            .store(partition_limit.unwrap_or(u64::MAX), Ordering::Release);
        drop(fw);
        Ok(Grown {
            capacity,
            positions: each * count,
            written,
        })
    }
}
