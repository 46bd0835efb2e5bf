//! Changing the keys of a volume (the proxy stopped): a new passphrase
//! ([`change_passphrase`]), a new master key ([`rotate_key`]), the rotation's
//! progress ([`key_status`]) and dropping the keys rotated out once nothing
//! needs them ([`forget_earlier_keys`]).
//!
//! **Passphrase change**: the master key stays; it is wrapped under the new
//! passphrase with a new salt ([`crate::key`]), `volume.toml` is replaced
//! atomically and the backend's header rewritten (signed, as always, with the
//! master key), so `recover` on a fresh machine takes the new passphrase. The
//! old passphrase no longer unwraps anything this volume records — but the key
//! it protected is the same: someone who knew the old passphrase and kept (or
//! gets from the provider) an old header can still derive the key. Against
//! that, rotate the key.
//!
//! **Rotation**: a new master key seals from now on; the old one (and any
//! earlier ones) still open, wrapped under the new one in the parameters and
//! the backend's header (`earlier_keys`), so `recover` with only the new key
//! opens objects still sealed under an old one. Nothing is re-sealed at once:
//! every ORAM access rewrites what it reads, so objects move to the new key as
//! the engine rewrites them. Progress is counted in the trusted state: every
//! backend position records the checkpoint epoch of its last write, and every
//! write from epoch *R* on — the first epoch after the start with the new key,
//! kept in the state (`key_rotation`) — is sealed under it. A checkpoint taken
//! when no position is older (`key_rotation_clean`) refers only to objects
//! under the new key; once it is uploaded, the rotation is complete and the
//! earlier keys can be dropped.
//!
//! Crash safety of a rotation with a key file: the new key is written to
//! `<key file>.new` first, then `volume.toml` (atomically: the commit point),
//! then the header, then the new file renamed over the old one; a start that
//! finds the key file failing the key check and `<key file>.new` passing it
//! completes the rename ([`crate::key`]).
//!
//! **What the storage server observes**: a rewritten volume header (its key
//! check, Argon2id salt and wrapped keys change: the event is public, and
//! the length of `earlier_keys` shows how many keys are kept), the lease and
//! start-up traffic of two opens, and one checkpoint. Sealed objects do not
//! say which key sealed them (the sealed format is unchanged; a new key looks
//! like a new session, as after any restart), and re-sealing happens only
//! through the accesses the engine makes anyway.

use std::path::PathBuf;

use oram_seal::MasterKey;
use oram_statedb::Db;

use crate::rotation::progress_of;
pub use crate::rotation::RotationProgress;

use crate::backend::VolumeHooks;
use crate::checkpoint::CheckpointInfo;
use crate::config::VolumeConfig;
use crate::datadir;
use crate::fsutil::blocking;
use crate::header::{sign_header, write_header};
use crate::key::{
    check_value, earlier_keys, install_key_file, pending_key_file, wrap_earlier_keys,
    wrap_for_passphrase, write_key_file, KeySource,
};
use crate::params::VolumeParams;
use crate::volume::Volume;
use crate::VolumeError;

/// What `oram-proxy key status` reports.
#[derive(Clone, Debug)]
pub struct KeyStatus {
    /// Where the key came from at creation (`file`, `env`, `passphrase`).
    pub key_source: String,
    /// Whether the key comes from a passphrase (Argon2id parameters recorded).
    pub passphrase: bool,
    /// Whether the passphrase wraps the key (it can change without re-sealing;
    /// `false` with a passphrase: a volume of an earlier release whose key is
    /// Argon2id's output itself, until its first passphrase change).
    pub wrapped: bool,
    /// Master keys rotated out and still kept.
    pub earlier_keys: usize,
    /// The rotation's progress (`None`: no earlier key is kept).
    pub rotation: Option<RotationProgress>,
}

/// The new key of [`rotate_key`].
pub enum NewMasterKey {
    /// A fresh random key (written to the key file, or wrapped under the
    /// passphrase).
    Generate,
    /// This key (for a key from `ORAM_PROXY_MASTER_KEY`: the operator's new one).
    Given(MasterKey),
}

/// What [`rotate_key`] did.
#[derive(Debug)]
pub struct Rotated {
    /// The key file now holding the new key (`None`: passphrase or environment).
    pub key_file: Option<PathBuf>,
    /// Master keys rotated out and kept (the one replaced now included).
    pub earlier_keys: usize,
    /// The first epoch sealed under the new key alone.
    pub since_epoch: u64,
    /// The checkpoint taken under the new key.
    pub checkpoint: CheckpointInfo,
}

impl Volume {
    /// The master-key rotation's progress (`None`: no earlier key is kept),
    /// counted now. Reads the whole position table (on the blocking pool); the
    /// storage server observes nothing.
    pub async fn rotation_progress(&self) -> Result<Option<RotationProgress>, VolumeError> {
        progress_of(self.db.clone(), self.params.clone()).await
    }

    /// The rotation's progress as counted at open and after the last checkpoint
    /// (for `/metrics`: no scan).
    pub fn last_rotation_progress(&self) -> Option<RotationProgress> {
        *self.rotation.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the rotation's progress again (after a checkpoint); a failure is
    /// logged and leaves the last count.
    pub(crate) async fn recount_rotation(&self) {
        if self.params.earlier_keys.is_none() {
            return;
        }
        match self.rotation_progress().await {
            Ok(p) => *self.rotation.lock().unwrap_or_else(|e| e.into_inner()) = p,
            Err(e) => tracing::warn!("counting the key rotation's progress: {e}"),
        }
    }
}

/// Rewrites the volume's parameters to `p`: `volume.toml` atomically, then the
/// backend's header signed with `key` (through the volume's leased store).
async fn rewrite_params(
    vol: &Volume,
    key: &MasterKey,
    p: &VolumeParams,
) -> Result<(), VolumeError> {
    let (dir, local) = (vol.data_dir.clone(), p.clone());
    blocking("replacing volume.toml", move || local.replace_in(&dir)).await?;
    write_header(vol.store.as_ref(), &sign_header(key, p)).await
}

/// Releases the volume's lease (a clean stop), so the next open takes it at once.
async fn close(vol: Volume) {
    if let Some(l) = &vol.lease {
        l.release().await;
    }
}

fn existing(cfg: &VolumeConfig) -> Result<(), VolumeError> {
    if !datadir::has_volume(&cfg.data_dir) {
        return Err(VolumeError::Params(format!(
            "{} holds no volume",
            cfg.data_dir.display()
        )));
    }
    Ok(())
}

/// `oram-proxy key passphrase`: wraps the master key under `new` (at least 12
/// bytes) with a new salt; the old key source (the configured passphrase, or a
/// key file or environment key: the volume then takes a passphrase) proves the
/// right to. The proxy must be stopped (the data directory's lock is taken).
/// Nothing is re-sealed. See the module documentation for what the old
/// passphrase can still do. Returns the key file that proved it, if any: it
/// still holds the master key (and still opens the volume) until deleted.
pub async fn change_passphrase(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    new: &[u8],
) -> Result<Option<PathBuf>, VolumeError> {
    existing(cfg)?;
    if new.len() < 12 {
        return Err(VolumeError::Key(
            "the new passphrase is shorter than 12 bytes".into(),
        ));
    }
    let _lock = datadir::lock(&cfg.data_dir)?;
    let source = KeySource::resolve(&cfg.key, &cfg.data_dir)?;
    let vol = Volume::open(cfg, hooks).await?;
    let key = vol.params.load_key(&source)?;
    let (kdf, wrapped) = wrap_for_passphrase(&key, new)?;
    let p = VolumeParams {
        kdf: Some(kdf),
        wrapped_key: Some(wrapped),
        key_source: "passphrase".into(),
        mac: None,
        ..vol.params.clone()
    };
    rewrite_params(&vol, &key, &p).await?;
    close(vol).await;
    Ok(match source {
        KeySource::File(path) => Some(path),
        _ => None,
    })
}

/// `oram-proxy key rotate`: a new master key seals from now on; the current one
/// joins the earlier keys, which still open (see the module documentation).
/// The new key: for a key file, `new` (generated or given) replaces the file's
/// key; for a passphrase, `new` is wrapped under the same passphrase (a new
/// salt); for `ORAM_PROXY_MASTER_KEY`, `new` must be given (start with it
/// afterwards). Ends with a checkpoint sealed under the new key. The proxy must
/// be stopped.
pub async fn rotate_key(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    new: NewMasterKey,
) -> Result<Rotated, VolumeError> {
    existing(cfg)?;
    let dir = &cfg.data_dir;
    let _lock = datadir::lock(dir)?;
    let source = KeySource::resolve(&cfg.key, dir)?;
    let vol = Volume::open(cfg, hooks).await?;
    let old = vol.params.load_key(&source)?;
    let new_key = match (new, &source) {
        (NewMasterKey::Given(k), _) => k,
        (NewMasterKey::Generate, KeySource::Env(_)) => {
            return Err(VolumeError::Key(format!(
                "the key comes from {}: give the new key (`oram-proxy key rotate \
                 --new-key-from-env` reads it from ORAM_PROXY_NEW_MASTER_KEY)",
                crate::key::ENV_KEY
            )))
        }
        (NewMasterKey::Generate, _) => MasterKey::generate(),
    };
    let check = check_value(&new_key);
    if check == vol.params.key_check {
        return Err(VolumeError::Key(
            "the new key is the current key: nothing to rotate".into(),
        ));
    }
    let mut ring = vec![MasterKey::from_bytes(*old.expose_bytes())];
    ring.extend(earlier_keys(&old, vol.params.earlier_keys.as_deref())?);
    let earlier = ring.len();
    let mut p = VolumeParams {
        key_check: check,
        earlier_keys: wrap_earlier_keys(&new_key, &ring),
        mac: None,
        ..vol.params.clone()
    };
    drop((ring, old));
    let mut key_file = None;
    match &source {
        KeySource::Passphrase(pw) => {
            let (kdf, wrapped) = wrap_for_passphrase(&new_key, pw)?;
            (p.kdf, p.wrapped_key) = (Some(kdf), Some(wrapped));
        }
        KeySource::File(path) => {
            let next = pending_key_file(path);
            let k = MasterKey::from_bytes(*new_key.expose_bytes());
            let n = next.clone();
            blocking("writing the new key file", move || {
                // A leftover of a rotation that stopped before volume.toml
                // changed: its key was never used.
                let _ = std::fs::remove_file(&n);
                write_key_file(&n, &k)
            })
            .await?;
            key_file = Some(path.clone());
        }
        KeySource::Env(_) => {}
    }
    // The commit point: volume.toml names the new key.
    rewrite_params(&vol, &new_key, &p).await?;
    if let Some(path) = &key_file {
        let (from, to) = (pending_key_file(path), path.clone());
        blocking("installing the new key file", move || {
            install_key_file(&from, &to)
        })
        .await?;
    }
    close(vol).await;
    // The second open seals under the new key; the checkpoint makes the backend
    // independent of the old key's checkpoint.
    let source = match source {
        KeySource::Env(_) => KeySource::Env(new_key),
        _ => KeySource::resolve(&cfg.key, dir)?,
    };
    let vol = Volume::open_with(cfg, hooks, Some(source)).await?;
    vol.repair_checkpoint().await?;
    let checkpoint = vol.checkpoint().await?;
    let since_epoch = vol
        .last_rotation_progress()
        .map_or(checkpoint.epoch + 1, |r| r.since_epoch);
    close(vol).await;
    Ok(Rotated {
        key_file,
        earlier_keys: earlier,
        since_epoch,
        checkpoint,
    })
}

/// `oram-proxy key status`: the key's source and the rotation's progress, from
/// the data directory alone (the proxy stopped; no key needed).
pub async fn key_status(cfg: &VolumeConfig) -> Result<KeyStatus, VolumeError> {
    existing(cfg)?;
    let dir = cfg.data_dir.clone();
    let _lock = datadir::lock(&dir)?;
    let p = datadir::read_volume(&dir)?;
    let volume = p.volume_id()?;
    let path = datadir::state_path(&dir);
    let db = blocking("opening the state database", move || {
        Ok(Db::open(&path, volume.0)?)
    })
    .await?;
    let rotation = progress_of(db, p.clone()).await?;
    Ok(KeyStatus {
        key_source: p.key_source.clone(),
        passphrase: p.kdf.is_some(),
        wrapped: p.wrapped_key.is_some(),
        earlier_keys: p.earlier_keys.as_deref().map_or(0, |h| {
            (h.trim().len() / 2).saturating_sub(oram_seal::WRAP_OVERHEAD)
                / oram_seal::MASTER_KEY_LEN
        }),
        rotation,
    })
}

/// `oram-proxy key forget-earlier`: drops the keys rotated out, once the
/// rotation is complete ([`RotationProgress::complete`]); refused before. The
/// proxy must be stopped.
pub async fn forget_earlier_keys(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
) -> Result<usize, VolumeError> {
    existing(cfg)?;
    let _lock = datadir::lock(&cfg.data_dir)?;
    let source = KeySource::resolve(&cfg.key, &cfg.data_dir)?;
    let vol = Volume::open(cfg, hooks).await?;
    let key = vol.params.load_key(&source)?;
    let kept = earlier_keys(&key, vol.params.earlier_keys.as_deref())?.len();
    match vol.rotation_progress().await? {
        None => return Ok(0),
        Some(r) if !r.complete => {
            return Err(VolumeError::Key(format!(
                "the rotation is not complete ({} of {} positions re-sealed{}): objects or \
                 the backend's checkpoint still need an earlier key",
                r.resealed,
                r.positions,
                if r.resealed == r.positions {
                    "; a checkpoint is still to be taken"
                } else {
                    ""
                }
            )))
        }
        Some(_) => {}
    }
    let p = VolumeParams {
        earlier_keys: None,
        mac: None,
        ..vol.params.clone()
    };
    rewrite_params(&vol, &key, &p).await?;
    close(vol).await;
    Ok(kept)
}

#[cfg(test)]
mod tests;
