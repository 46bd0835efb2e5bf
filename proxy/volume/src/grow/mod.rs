//! Growing a volume online ([`Volume::grow`]): the engine first, then the
//! object layer's free space, then the records of the capacity in effect
//! (`volume.toml` and the backend header, [`VolumeParams::grown_blocks`]).
//!
//! Every engine grows; a cluster's volume does not yet and is refused
//! before anything is written. The order, and what a crash (kill -9) at each
//! point leaves:
//!
//! 1. `volume.toml` and the header record the growth as started
//!    ([`VolumeParams::growing_to`]). A crash here: the old size.
//! 2. The engine prepares the new room between its rounds and switches to it
//!    in one commit of its trusted state ([`oram_engine::Oram::grow`]). A crash
//!    before the switch: the old size, the growth pending in the engine's state;
//!    after it: the new size (the engine opens with the shape it recorded).
//! 3. The object layer's free space takes the new blocks
//!    ([`oram_objects::ObjectLayer::grow_to`]): in memory only, since the layer
//!    rebuilds it from the index and the engine's capacity at every open.
//! 4. `volume.toml` and the header record the new capacity and drop the growth
//!    started. A crash before: the next open finds the engine larger than
//!    recorded and records the engine's capacity
//!    ([`Volume::adopt_engine_capacity`]).
//! 5. The growth is added to the local growth history ([`read_history`],
//!    `growths.toml`): informative, a failure to write it is a warning, and a
//!    crash before it leaves the growth out of the history.
//!
//! So the engine's trusted state is the one record of the size that counts;
//! `volume.toml` and the header follow it. A growth interrupted before its
//! switch is resumed by growing to the same capacity again: `serve` does so in
//! the background at start ([`Volume::growth_pending`]); the offline commands
//! leave it pending and say so.
//!
//! Observed by the storage server: the header rewritten twice (the growth's
//! target, then the capacity in effect: both public), the engine's growth
//! (see [`oram_engine::Oram::grow`]: the new objects, written between the
//! rounds) and, afterwards, checkpoints of the size of the new capacity.

mod history;

use std::time::{SystemTime, UNIX_EPOCH};

use oram_engine::Grown;

pub use history::{read_history, GrowthRecord, HISTORY_FILE, HISTORY_KEEP};

use crate::fsutil::blocking;
use crate::header::{sign_header_with, write_header};
use crate::params::checkpoint_size_at;
use crate::{datadir, GrowthConfig, Volume, VolumeError, VolumeParams};

/// Why a cluster's volume does not grow, for messages.
pub const CLUSTER_DOES_NOT_GROW: &str = "a cluster's volume cannot grow yet (its partitions are \
served by nodes; growth is for a volume on one machine): copy it to a new, larger volume \
instead";

impl Volume {
    /// Whether the volume can grow: every engine grows, on one machine (a
    /// cluster's front does not: [`CLUSTER_DOES_NOT_GROW`]).
    pub fn grows(&self) -> bool {
        self.engine.grows()
    }

    /// The capacity in effect, in blocks (the engine's).
    pub fn capacity_blocks(&self) -> u64 {
        self.engine.capacity()
    }

    /// The capacity `policy` would grow this volume to now ([`GrowthConfig::target`]).
    pub fn growth_due(&self, policy: &GrowthConfig) -> Option<u64> {
        let u = self.layer.usage();
        policy.target(u.capacity_blocks, u.free_blocks, u.block_size)
    }

    /// A growth recorded as started and not finished (a crash or a failure
    /// before the engine's switch): the capacity to grow to again, which
    /// resumes it.
    pub fn growth_pending(&self) -> Option<u64> {
        self.params
            .growing_to
            .filter(|&to| to > self.engine.capacity())
    }

    /// Grows the volume, online, to `capacity` blocks (see the module): accesses
    /// and object requests keep being served meanwhile. `progress(done, total)`
    /// counts the new backend objects the engine writes. Growing to the
    /// capacity in effect finishes nothing left and changes nothing; shrinking
    /// is refused, and so is an engine that cannot grow (naming the ones that
    /// can). One growth at a time: a second call waits for the first.
    ///
    /// A growth that changed the capacity is added to the growth history
    /// ([`Volume::growth_history`]).
    ///
    /// Observed by the storage server: the header rewritten before and after,
    /// and the engine's growth ([`oram_engine::Oram::grow`]).
    pub async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown, VolumeError> {
        if !self.grows() {
            return Err(VolumeError::Grow(CLUSTER_DOES_NOT_GROW.into()));
        }
        let _one = self.grow_lock.lock().await;
        let started_unix = unix_secs();
        let from = self.engine.capacity();
        if capacity < from {
            return Err(VolumeError::Grow(format!(
                "a volume cannot shrink ({from} blocks, {capacity} asked for)"
            )));
        }
        if capacity > from {
            self.rewrite_record(move |p| match p.growing_to {
                Some(to) if to != capacity && to > from => Err(VolumeError::Grow(format!(
                    "a growth to {to} blocks is under way: grow to {to} to finish it first"
                ))),
                _ => {
                    p.growing_to = Some(capacity);
                    Ok(())
                }
            })
            .await?;
        }
        let out = self.engine.grow(capacity, progress).await?;
        self.grown_to(self.engine.capacity()).await?;
        if out.capacity > from {
            let object_bytes = self
                .sizing
                .engine
                .model(&self.sizing.backend.prefix)
                .object_bytes;
            let rec = GrowthRecord {
                from_blocks: from,
                to_blocks: out.capacity,
                block_size: self.engine.block_size() as u64,
                started_unix,
                finished_unix: unix_secs(),
                positions: out.positions,
                written: out.written,
                backend_bytes: out.written.saturating_mul(object_bytes),
            };
            let dir = self.data_dir.clone();
            let added = blocking("writing the growth history", move || {
                history::append_history(&dir, rec)
            })
            .await;
            if let Err(e) = added {
                tracing::warn!("the volume grew, but its growth history was not updated: {e}");
            }
        }
        Ok(out)
    }

    /// The growths this volume finished, oldest first, the last
    /// [`HISTORY_KEEP`] ([`read_history`] of its data directory).
    pub async fn growth_history(&self) -> Result<Vec<GrowthRecord>, VolumeError> {
        let dir = self.data_dir.clone();
        blocking("reading the growth history", move || read_history(&dir)).await
    }

    /// The engine is at `capacity`: the object layer takes the new blocks, the
    /// checkpoints their new size, and the records the capacity in effect.
    async fn grown_to(&self, capacity: u64) -> Result<(), VolumeError> {
        self.layer.grow_to(capacity)?;
        let size = checkpoint_size_at(&self.sizing, capacity);
        self.checkpointer.set_size(size);
        self.rewrite_record(move |p| {
            p.grown_blocks = (capacity != p.capacity_blocks).then_some(capacity);
            if p.growing_to.is_some_and(|to| to <= capacity) {
                p.growing_to = None;
            }
            p.checkpoint_bytes = size;
            Ok(())
        })
        .await
    }

    /// At open: when the engine's capacity is not the one `volume.toml` records
    /// (a crash after a growth's switch and before the records were rewritten,
    /// or a `recover` from a checkpoint older than the last growth), records
    /// the engine's; drops a growth started that the engine finished; warns of
    /// one it did not.
    pub(crate) async fn adopt_engine_capacity(&mut self) -> Result<(), VolumeError> {
        let (now, recorded) = (self.engine.capacity(), self.params.capacity_in_effect());
        let finished = self.params.growing_to.is_some_and(|to| to <= now);
        if now != recorded || finished {
            if now < recorded {
                tracing::warn!(
                    engine = now,
                    recorded,
                    "the engine's state has fewer blocks than volume.toml records (a recovery \
                     from a checkpoint taken before the last growth): recording the engine's"
                );
            } else if now > recorded {
                tracing::warn!(
                    engine = now,
                    recorded,
                    "the volume grew before an unclean stop that left volume.toml behind: \
                     recording the engine's capacity"
                );
            }
            self.grown_to(now).await?;
            self.params = read_params(self).await?;
        }
        if let Some(to) = self.growth_pending() {
            tracing::warn!(
                from = now,
                to,
                "a growth was interrupted before it switched: the volume has its old size \
                 until it is grown to {to} blocks again (serve resumes it)"
            );
        }
        Ok(())
    }

    /// Rewrites `volume.toml` (atomically) and then the backend header with
    /// `change` made to the recorded parameters.
    async fn rewrite_record(
        &self,
        change: impl FnOnce(&mut VolumeParams) -> Result<(), VolumeError> + Send + 'static,
    ) -> Result<(), VolumeError> {
        let dir = self.data_dir.clone();
        let p = blocking("rewriting volume.toml", move || {
            let mut p = datadir::read_volume(&dir)?;
            change(&mut p)?;
            p.mac = None;
            p.replace_in(&dir)?;
            Ok(p)
        })
        .await?;
        let signed = sign_header_with(&self.header_mac, &p);
        write_header(self.store.as_ref(), &signed).await
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn read_params(vol: &Volume) -> Result<VolumeParams, VolumeError> {
    let dir = vol.data_dir.clone();
    blocking("reading volume.toml", move || datadir::read_volume(&dir)).await
}

#[cfg(test)]
mod tests;
