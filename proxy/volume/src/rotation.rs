//! Where a master-key rotation stands, kept in the trusted state (see
//! [`crate::rekey`] for the rotation itself): the first epoch written under the
//! current key alone (`key_rotation`), and the first checkpoint taken with every
//! backend position re-sealed (`key_rotation_clean`). Every backend position
//! records the epoch of its last write, so the count survives restarts and
//! `recover` (the state, meta included, is in every checkpoint).

use oram_statedb::Db;

use crate::fsutil::blocking;
use crate::params::VolumeParams;
use crate::VolumeError;

/// State meta: the rotation in progress, `key check (hex) ‖ epoch R (u64 BE)`.
const ROTATION: &str = "key_rotation";
/// State meta: a checkpoint of epoch E was taken with every position at or
/// after R, `key check (hex) ‖ E (u64 BE)`.
const ROTATION_CLEAN: &str = "key_rotation_clean";

/// Where a master-key rotation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotationProgress {
    /// The first checkpoint epoch written under the current key alone.
    pub since_epoch: u64,
    /// Backend positions written at least once.
    pub positions: u64,
    /// Of them, those last written from `since_epoch` on (under the current key).
    pub resealed: u64,
    /// Whether an uploaded checkpoint refers only to objects under the current
    /// key: the earlier keys are no longer needed.
    pub complete: bool,
}

impl RotationProgress {
    /// `resealed / positions` (1 for a volume with no position written).
    pub fn ratio(&self) -> f64 {
        if self.positions == 0 {
            1.0
        } else {
            self.resealed as f64 / self.positions as f64
        }
    }
}

fn meta_value(key_check: &str, epoch: u64) -> Vec<u8> {
    let mut v = key_check.as_bytes().to_vec();
    v.extend_from_slice(&epoch.to_be_bytes());
    v
}

/// The epoch a meta value of [`meta_value`] records for `key_check`, if it is
/// this key's.
fn meta_epoch(db: &Db, name: &str, key_check: &str) -> Result<Option<u64>, VolumeError> {
    Ok(db.meta(name)?.and_then(|v| {
        let (check, epoch) = v.split_at_checked(v.len().checked_sub(8)?)?;
        let epoch = u64::from_be_bytes(epoch.try_into().ok()?);
        (check == key_check.as_bytes()).then_some(epoch)
    }))
}

/// At every open: with earlier keys kept and no rotation recorded for the
/// current key (a rotation's first start, or a state restored from a checkpoint
/// taken before it), records one from the next epoch on (the writes of this
/// epoch may be under the old key: counting them as old is the safe side).
pub(crate) async fn mark_rotation(db: &Db, p: &VolumeParams) -> Result<(), VolumeError> {
    if p.earlier_keys.is_none() || meta_epoch(db, ROTATION, &p.key_check)?.is_some() {
        return Ok(());
    }
    let since = db.epoch() + 1;
    db.set_meta(ROTATION, &meta_value(&p.key_check, since))
        .await
        .map_err(oram_engine::OramError::State)?;
    tracing::info!(
        since_epoch = since,
        "master-key rotation: counting re-sealed positions"
    );
    Ok(())
}

/// Before a checkpoint's snapshot (the engine quiesced): if every position is
/// under the current key, records that this checkpoint (`epoch`) is clean.
pub(crate) async fn note_checkpoint(
    db: &std::sync::Arc<Db>,
    p: &VolumeParams,
    epoch: u64,
) -> Result<(), VolumeError> {
    if p.earlier_keys.is_none() || meta_epoch(db, ROTATION_CLEAN, &p.key_check)?.is_some() {
        return Ok(());
    }
    let Some(progress) = progress_of(db.clone(), p.clone()).await? else {
        return Ok(());
    };
    if progress.resealed == progress.positions {
        db.set_meta(ROTATION_CLEAN, &meta_value(&p.key_check, epoch))
            .await
            .map_err(oram_engine::OramError::State)?;
    }
    Ok(())
}

/// The rotation's progress in `db` for parameters `p` (`None`: no earlier key
/// kept). Reads the whole position table: on the blocking pool.
pub(crate) async fn progress_of(
    db: std::sync::Arc<Db>,
    p: VolumeParams,
) -> Result<Option<RotationProgress>, VolumeError> {
    blocking("counting re-sealed positions", move || {
        progress_now(&db, &p)
    })
    .await
}

fn progress_now(db: &Db, p: &VolumeParams) -> Result<Option<RotationProgress>, VolumeError> {
    if p.earlier_keys.is_none() {
        return Ok(None);
    }
    // Not recorded yet (a volume not opened since the rotation): all from the
    // next epoch on.
    let since = meta_epoch(db, ROTATION, &p.key_check)?.unwrap_or(db.epoch() + 1);
    let (positions, resealed) = db.nodes_written_since(since)?;
    let uploaded = db
        .meta("checkpoint_uploaded")?
        .and_then(|b| b.try_into().ok().map(u64::from_be_bytes));
    let clean = meta_epoch(db, ROTATION_CLEAN, &p.key_check)?;
    let complete = matches!((clean, uploaded), (Some(c), Some(u)) if u >= c);
    Ok(Some(RotationProgress {
        since_epoch: since,
        positions,
        resealed,
        complete,
    }))
}
