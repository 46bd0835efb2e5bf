//! `oram-proxy recover`: a data directory rebuilt from the backend alone, given
//! the key.
//!
//! Steps: read the volume header `<prefix>/meta/volume` (public parameters, key
//! check, Argon2id salt) and refuse it if the configuration names other
//! parameters; derive the key and check it and the header's MAC
//! ([`crate::header`]); only then take the backend lease; open the checkpoint; rebuild the state database from it
//! in a new random generation ([`oram_statedb::Db::restore`]), so that objects
//! of the lost timeline never open as current; with a shipped log, replay the
//! records after the checkpoint ([`oram_statedb::Db::restore_replaying`]);
//! write back the S3 users the checkpoint carries ([`crate::users`]); advance
//! the epoch; record the backend ([`crate::backend_record`]); and sweep the
//! objects written after what was restored.
//! The recovery point is the last checkpoint, or with the shipped log
//! everything acknowledged that the backend still holds.
//!
//! The log is the provider's to keep: a record missing in the middle of the log
//! (a gap) fails `recover` unless the operator accepts it
//! ([`RecoverOptions::accept_log_gap`]); a missing *tail* looks like the end of
//! the log, and only a record number the operator noted while the proxy ran
//! ([`RecoverOptions::expect_record`], from `/metrics` or the serve log) shows
//! it.

use std::sync::Arc;

use oram_blockstore::{BlockStore, BlockStoreExt};
use oram_seal::{Sealer, VolumeId};
use oram_statedb::Db;

use crate::backend::{open_store, VolumeHooks};
use crate::backend_record;
use crate::checkpoint::{checkpoint_key, node_prefix};
use crate::config::VolumeConfig;
use crate::datadir;
use crate::fsutil::{blocking, hex_secret, write_private};
use crate::header::{
    header_is_authentic, open_checkpoint, parse_prefix, read_header, Owner, Prefix, HEAD_LEN,
};
use crate::key::KeySource;
use crate::lease;
use crate::logship::{read_log, ReadLog, RecordMark};
use crate::params::{checkpoint_size, VolumeParams};
use crate::volume::Volume;
use crate::VolumeError;

/// What `recover` did.
#[derive(Debug)]
pub struct Recovered {
    /// Epoch of the checkpoint used.
    pub epoch: u64,
    /// When it was taken (ms since the Unix epoch).
    pub taken_ms: u64,
    /// Buckets and objects in the restored index.
    pub buckets: u64,
    /// Objects in the restored index.
    pub objects: u64,
    /// Backend objects written after the checkpoint (and its log), removed.
    pub swept: u64,
    /// Commits replayed from the shipped log after the checkpoint.
    pub replayed: u64,
    /// Records of the shipped log read.
    pub log_records: u64,
    /// The last record of the shipped log applied (its number and time), if any.
    pub last_record: Option<RecordMark>,
    /// The gap accepted ([`RecoverOptions::accept_log_gap`]): what was missing.
    pub accepted_gap: Option<String>,
    /// The volume recovered.
    pub volume_id: String,
    /// S3 users written back to `credentials.toml` from the checkpoint (`None`:
    /// it holds none: a checkpoint of an earlier version, or users from the
    /// configuration).
    pub users_restored: Option<usize>,
    /// Whether the backend's lease record, as found, said the old proxy
    /// released it: `serve` releases only after its final checkpoint, so then
    /// nothing acknowledged was written after the checkpoint and the objects
    /// swept were stale slot copies (`None`: no readable record). The provider
    /// keeps the record: this informs the operator and proves nothing.
    pub clean_stop: Option<bool>,
}

/// What `recover` insists on.
#[derive(Clone, Debug, Default)]
pub struct RecoverOptions {
    /// The volume expected at the backend prefix; another one is refused.
    pub expect_volume: Option<String>,
    /// Replay the shipped log up to a gap (a missing record) instead of failing:
    /// acknowledged writes after the gap are lost.
    pub accept_log_gap: bool,
    /// The shipped log must reach this record number (noted while the proxy ran:
    /// `oram_log_last_record` in `/metrics`, or the serve log at each
    /// checkpoint); a log ending before it (a dropped tail) fails `recover`.
    pub expect_record: Option<u64>,
}

/// `oram-proxy recover [--volume-id ID] [--accept-log-gap] [--expect-record N]`:
/// rebuilds an empty data directory from
/// the backend's volume header and latest checkpoint (and the shipped log after
/// it), given the key (any [`KeySource`]; a key file is copied into the data
/// directory), under the directory's lock. A backend whose (authenticated)
/// header names another volume than `opts.expect_volume` is refused, and so is
/// a shipped log with a gap or ending before `opts.expect_record`
/// ([`RecoverOptions`]), before anything is restored. Objects written after
/// the last checkpoint and log record are lost, and the backend objects they
/// left are deleted. Tells `progress` each step as it begins.
pub async fn recover(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    opts: &RecoverOptions,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Recovered, VolumeError> {
    let expect = opts.expect_volume.as_deref();
    match cfg.cluster.role {
        crate::cluster::Role::Single => {}
        crate::cluster::Role::Node => {
            return Err(VolumeError::Config(
                "this is a cluster node's configuration: a node is rebuilt by \
                 oram_volume::node::recover_node, which `oram-proxy recover` runs for it"
                    .into(),
            ))
        }
        // A front's state says which rounds its nodes may have landed only if
        // every round's intent record is on the backend before the round goes
        // out, which the shipped log gives (`oram_engine::Placement::remote`);
        // its checkpoint alone would disagree with the nodes about every round
        // since.
        crate::cluster::Role::Front if cfg.state.log_settings().is_none() => {
            return Err(VolumeError::Config(
                "a cluster's front can be recovered only from its shipped log ([state] \
                 log_interval_ms > 0 on the front): its checkpoint alone misses the rounds its \
                 nodes landed since. Restore the front's data directory from a backup instead"
                    .into(),
            ))
        }
        crate::cluster::Role::Front => {}
    }
    let Begun {
        _lock,
        store,
        params,
        cfg: adopted,
    } = begin(cfg, hooks, expect, progress, None).await?;
    let cfg = &adopted;
    let dir = &cfg.data_dir;
    let prefix = &cfg.backend.prefix;
    let source = KeySource::resolve(&cfg.key, dir)?;
    let key = match &source {
        // The key file of the lost machine, wherever the operator kept it.
        KeySource::File(path) if !path.starts_with(dir) => {
            let key = params.load_key(&source)?;
            let own = dir.join("master.key");
            write_private(
                &own,
                &zeroize::Zeroizing::new(format!("{}\n", *hex_secret(key.expose_bytes()))),
            )?;
            key
        }
        _ => params.load_key(&source)?,
    };
    if !header_is_authentic(&key, &params) {
        return Err(VolumeError::Integrity(format!(
            "the volume header at {prefix}/meta/volume does not authenticate under this key \
             (no MAC, or a wrong one): it was tampered with, or was written by a version \
             without header MACs (start that version's data directory once with this \
             version, or recover with it)"
        )));
    }
    let volume_id = params.volume_id()?;
    // Whether the old proxy stopped cleanly, read before the lease is taken over.
    let clean_stop = lease::released_on_backend(store.as_ref(), prefix).await?;
    // Before any write (the sweep): the old proxy, if alive, must have stopped.
    let (store, lease) = lease::guard(&cfg.backend, dir, store).await?;
    // Objects still sealed under keys rotated out open too: the header carries
    // them, wrapped under this key.
    let earlier = crate::key::earlier_keys(&key, params.earlier_keys.as_deref())?;
    let sealer = Sealer::with_keyring(&key, &earlier, volume_id);
    drop(earlier);
    let restored = restore_state(
        store.as_ref(),
        &sealer,
        prefix,
        Owner::Volume,
        checkpoint_size(cfg),
        datadir::state_path(dir),
        volume_id,
        opts,
        progress,
    )
    .await?;
    let RestoredState {
        epoch,
        db,
        replayed,
        log,
    } = restored;
    // The S3 users the state carries: the old credentials keep working.
    let users_dir = dir.clone();
    let (db, users_restored) = tokio::task::spawn_blocking(move || {
        let users = crate::users::restore_from_state(&users_dir, &db)?;
        Ok::<_, VolumeError>((db, users))
    })
    .await
    .map_err(|e| VolumeError::Config(format!("state restore: {e}")))??;
    let taken_ms = db
        .meta("checkpoint_ms")?
        .and_then(|b| b.try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0);
    drop(db);
    let (d, p, c) = (dir.to_path_buf(), params.clone(), cfg.clone());
    blocking("writing volume.toml and backend.toml", move || {
        datadir::save_volume(&d, &p)?;
        // Later commands given no backend use this one.
        backend_record::record(&c)
    })
    .await?;
    progress("opening the volume");
    let vol = Volume::assemble(cfg, hooks, params, key, store, lease, false, false).await?;
    progress("removing backend objects written after the checkpoint");
    let swept = vol.engine.sweep().await?;
    let usage = vol.layer.index_counts();
    Ok(Recovered {
        epoch,
        taken_ms,
        buckets: usage.0,
        objects: usage.1,
        swept,
        replayed,
        log_records: log.records,
        last_record: log.last,
        accepted_gap: log.gap,
        volume_id: vol.params.volume_id.clone(),
        users_restored,
        clean_stop,
    })
}

/// A state database rebuilt from an owner's checkpoint and shipped log.
pub(crate) struct RestoredState {
    /// The checkpoint's epoch.
    pub(crate) epoch: u64,
    /// The database, in a new generation, at the epoch after the checkpoint's.
    pub(crate) db: std::sync::Arc<Db>,
    /// Commits replayed from the log.
    pub(crate) replayed: u64,
    /// What the log held (its stream consumed).
    pub(crate) log: ReadLog,
}

/// Downloads `owner`'s latest checkpoint under the volume's `prefix` (its
/// authenticated head names the exact size; `size` bounds a checkpoint of the
/// earlier format), reads the shipped log after it (where `owner` ships it),
/// refuses a log with a gap or a missing tail as `opts` says (before anything
/// is written), and rebuilds the state database at `path` from both in a new
/// random generation, so that objects of the lost timeline written after them
/// never open as current. The database moves to the epoch after the
/// checkpoint's. Tells `progress` each step as it begins.
///
/// Observed by the storage server: a GET of the checkpoint's head and of the
/// whole checkpoint, a LIST of the log's generation and GETs of its records.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn restore_state(
    store: &dyn BlockStore,
    sealer: &Sealer,
    prefix: &str,
    owner: Owner,
    size: u64,
    path: std::path::PathBuf,
    volume_id: VolumeId,
    opts: &RecoverOptions,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<RestoredState, VolumeError> {
    progress("downloading the latest checkpoint");
    let ckpt = checkpoint_key(prefix, owner);
    let no_checkpoint = || {
        VolumeError::Params(format!(
            "the backend holds no checkpoint at {ckpt} yet: nothing to recover from"
        ))
    };
    // The authenticated head names the exact size: nothing more is downloaded.
    let head = store
        .get_range(&ckpt, 0..HEAD_LEN as u64)
        .await?
        .ok_or_else(no_checkpoint)?;
    let bound = match parse_prefix(sealer, owner, &head)? {
        Prefix::V2(h) => oram_blockstore::SizeBound::Exact(h.total),
        Prefix::V1(_) => {
            oram_blockstore::SizeBound::AtMost(size.saturating_mul(8).saturating_add(1 << 20))
        }
    };
    let obj = store
        .get_many_bounded(std::slice::from_ref(&ckpt), bound)
        .await?
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(no_checkpoint)?;
    progress("opening and restoring the checkpoint");
    let (epoch, snap) = open_checkpoint(sealer, owner, &obj)?;
    drop(obj);
    let snap = zeroize::Zeroizing::new(snap);
    // The shipped log after the checkpoint, if the volume ships one: whatever was
    // acknowledged after the checkpoint is in it.
    let (log_generation, log_from) = oram_statedb::snapshot_position(&snap)?;
    progress("reading the shipped log after the checkpoint");
    let log_prefix = match owner {
        Owner::Volume => prefix.to_string(),
        Owner::Node(i) => node_prefix(prefix, i),
    };
    let mut log = read_log(store, sealer, &log_prefix, log_generation, log_from).await?;
    if let Some(gap) = &log.gap {
        if !opts.accept_log_gap {
            return Err(VolumeError::Integrity(format!(
                "the shipped log after the checkpoint has a gap: {gap}. Acknowledged writes \
                 after it would be lost (the provider deleted or hides records). Nothing was \
                 restored; pass --accept-log-gap to recover up to the gap{}",
                log.last
                    .map_or(String::new(), |l| format!(" (record {})", l.number))
            )));
        }
        tracing::warn!("the shipped log has a gap ({gap}): replaying up to it only");
    }
    if let Some(want) = opts.expect_record {
        let reached = log.last.map(|l| l.number);
        if reached.is_none_or(|n| n < want) {
            return Err(VolumeError::Integrity(format!(
                "the shipped log ends at {} but record {want} was expected: its tail is missing \
                 (the provider deleted or hides it, or the record number is of another \
                 generation of the log). Nothing was restored",
                reached.map_or("no record".to_string(), |n| format!("record {n}")),
            )));
        }
    }
    let (groups, _) = oram_statedb::decode_groups(&log.stream)?;
    log.stream = Vec::new();
    let replayed = groups.len() as u64;
    // It writes the whole database: off the async workers.
    let db = tokio::task::spawn_blocking(move || {
        Db::restore_replaying(&path, volume_id.0, &snap, &groups)
    })
    .await
    .map_err(|e| VolumeError::Config(format!("state restore: {e}")))??;
    // The checkpoint is complete: writes from now on go to a new epoch (the log
    // replayed may have moved it already).
    if db.epoch() < epoch + 1 {
        db.set_epoch(epoch + 1).await?;
    }
    Ok(RestoredState {
        epoch,
        db,
        replayed,
        log,
    })
}

/// What every `recover` starts from ([`begin`]).
pub(crate) struct Begun {
    /// The data directory's lock, held until the recover ends.
    pub(crate) _lock: std::fs::File,
    /// The backend.
    pub(crate) store: Arc<dyn BlockStore>,
    /// The backend's volume header: checked, not yet authenticated.
    pub(crate) params: VolumeParams,
    /// The configuration with the header's parameters filling what it does not
    /// name.
    pub(crate) cfg: VolumeConfig,
}

/// The start of every `recover`: locks the data directory and refuses one that
/// holds a volume, refuses a backend other than the one it records, reads the
/// volume header and checks it against the configuration (whose unnamed
/// parameters it fills), against `expect` (the volume id insisted on) and its
/// key-derivation costs against their bounds, before anything is derived from
/// it. The caller authenticates it with the key. Nothing is written.
pub(crate) async fn begin(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    expect: Option<&str>,
    progress: &(dyn Fn(&str) + Send + Sync),
    held: Option<std::fs::File>,
) -> Result<Begun, VolumeError> {
    datadir::ensure_dir(&cfg.data_dir)?;
    let lock = match held {
        Some(lock) => lock,
        None => datadir::lock(&cfg.data_dir)?,
    };
    let dir = &cfg.data_dir;
    if datadir::has_volume(dir) || datadir::state_path(dir).exists() {
        return Err(VolumeError::Params(format!(
            "{} already holds a volume: recover into an empty data directory",
            dir.display()
        )));
    }
    backend_record::check(cfg)?;
    progress("reading the volume header");
    let store = open_store(cfg, hooks).await?;
    let prefix = &cfg.backend.prefix;
    let params = read_header(store.as_ref(), prefix)
        .await?
        .ok_or_else(|| VolumeError::Params(format!("no volume at backend prefix {prefix:?}")))?;
    // The header's parameters fill what the configuration does not name (the
    // caller authenticates them before anything is restored).
    let mut adopted = cfg.clone();
    params.adopt_into(&mut adopted.engine)?;
    params.check_config(&adopted, dir)?;
    if let Some(want) = expect {
        if !params.volume_id.eq_ignore_ascii_case(want.trim()) {
            return Err(VolumeError::Params(format!(
                "the backend prefix {prefix:?} holds volume {}, not {want}",
                params.volume_id
            )));
        }
    }
    // Read from the untrusted backend: bounded before any derivation.
    if let Some(kdf) = &params.kdf {
        kdf.check_bounds()?;
    }
    Ok(Begun {
        _lock: lock,
        store,
        params,
        cfg: adopted,
    })
}
