//! The offline commands of a volume, each under the data directory's lock:
//! `init`, `fsck`, `compact` and `format` (`recover` is [`crate::recover`]).

use std::time::Duration;

use oram_objects::{CheckPhase, LayerCheck};

use crate::backend::{create_bucket, VolumeHooks};
use crate::checkpoint::CheckpointInfo;
use crate::config::VolumeConfig;
use crate::datadir;
use crate::users::{credentials_path, users, UserConfig};
use crate::volume::Volume;
use crate::VolumeError;

/// `oram-proxy init`: creates the data directory (key, volume parameters,
/// credentials) and, for the S3 back-end, the bucket, telling `progress` each
/// step as it begins (the backend wrapped by `hooks`). `configured` are the configuration's users and `root` the
/// root user of the environment. Returns what it did.
pub async fn init(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    configured: &[UserConfig],
    root: Option<UserConfig>,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Vec<String>, VolumeError> {
    let dir = &cfg.data_dir;
    let mut done = Vec::new();
    if matches!(cfg.backend.kind, crate::config::BackendKind::S3) {
        progress("creating the backend bucket");
    }
    if let Some(made) = create_bucket(cfg).await? {
        done.push(made);
    }
    progress("preparing the data directory");
    datadir::ensure_dir(dir)?;
    let _lock = datadir::lock(dir)?;
    let (users, generated) = users(dir, configured, root)?;
    progress("creating the volume (key, parameters, backend header)");
    let vol = Volume::open(cfg, hooks).await?;
    if vol.new_key {
        done.push(format!("created master key {}", cfg.key_file().display()));
    }
    if vol.created {
        done.push(format!("created volume {}", vol.params.volume_id));
    }
    if generated {
        done.push(format!(
            "created user {} (secret in {})",
            users[0].access_key,
            credentials_path(dir).display()
        ));
    }
    progress("writing back");
    vol.engine.flush().await?;
    Ok(done)
}

/// `oram-proxy fsck`: opens the volume (recovering from an unclean stop like a
/// start does) and checks everything ([`oram_objects::ObjectLayer::check`]),
/// telling `progress` how far it got (the backend wrapped by `hooks`).
pub async fn fsck(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    progress: &(dyn Fn(CheckPhase, u64, u64) + Send + Sync),
) -> Result<LayerCheck, VolumeError> {
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(VolumeError::Params(format!(
            "{} holds no volume",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    let vol = Volume::open(cfg, hooks).await?;
    vol.repair_checkpoint().await?;
    let rep = vol.layer.check(progress).await?;
    // Re-reading the objects moved blocks (ORAM reads write back): leave nothing
    // journaled, and a checkpoint that includes it.
    vol.engine.flush().await?;
    if rep.is_clean() {
        vol.checkpoint().await?;
    }
    Ok(rep)
}

/// `oram-proxy compact`: takes the data directory's lock (so no proxy runs) and
/// compacts `state.redb` ([`oram_statedb::compact`]).
pub fn compact(
    cfg: &VolumeConfig,
    progress: impl FnMut(&'static str),
) -> Result<oram_statedb::Compacted, VolumeError> {
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(VolumeError::Params(format!(
            "{} holds no volume",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    Ok(oram_statedb::compact(&datadir::state_path(dir), progress)?)
}

/// What `oram-proxy format` did.
#[derive(Debug, Clone)]
pub struct FormatDone {
    /// The volume's engine (`path`, `ring`, `direct`).
    pub engine: String,
    /// The engine's positions and how many were written now.
    pub formatted: oram_engine::Formatted,
    /// The checkpoint taken afterwards (none when nothing was written).
    pub checkpoint: Option<CheckpointInfo>,
    /// How long the format itself took (opening the volume excluded).
    pub elapsed: Duration,
}

/// `oram-proxy format`: takes the data directory's lock (so no proxy runs),
/// opens the volume as `fsck` does (through `hooks`; the backend lease, recovery from an unclean
/// stop, an interrupted checkpoint completed), and has the engine write every
/// position it may read that was never written ([`oram_engine::Oram::format`]),
/// calling `progress(done, total)` as it goes. Positions already written are left
/// alone, so it is safe on a volume holding data and a second run writes nothing.
/// When anything was written, everything is flushed and a checkpoint taken, so
/// that `recover` knows the new objects too.
///
/// Observed by the storage server: the lease and header traffic of any open, one
/// PUT per never-written position in position order, and the checkpoint PUT.
pub async fn format(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<FormatDone, VolumeError> {
    let dir = &cfg.data_dir;
    if !datadir::has_volume(dir) {
        return Err(VolumeError::Params(format!(
            "{} holds no volume (create it with `oram-proxy init`)",
            dir.display()
        )));
    }
    let _lock = datadir::lock(dir)?;
    let vol = Volume::open(cfg, hooks).await?;
    vol.repair_checkpoint().await?;
    let start = std::time::Instant::now();
    let formatted = vol.engine.format(progress).await?;
    vol.engine.flush().await?;
    let elapsed = start.elapsed();
    let checkpoint = match formatted.written {
        0 => None,
        _ => Some(vol.checkpoint().await?),
    };
    Ok(FormatDone {
        engine: vol.params.engine.clone(),
        formatted,
        checkpoint,
        elapsed,
    })
}
