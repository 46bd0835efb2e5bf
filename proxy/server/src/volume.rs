//! A volume opened for use: the backend, the key, the state database, the engine
//! and the object layer, wired together — plus the backend's volume header, the
//! sealed checkpoints of the trusted state, and recovery from one.
//!
//! Backend objects of a volume besides the engine's own:
//! - `<prefix>/meta/volume`: the volume's public parameters in plain TOML (format,
//!   volume id, engine parameters, key check, Argon2id salt), with a MAC under the
//!   master key (see `meta_auth`). It lets the proxy
//!   refuse a backend that holds another volume, and lets `recover` start from
//!   nothing but the backend settings and the key.
//! - `<prefix>/meta/checkpoint`: `ORAMCKP2 ‖ epoch (u64 BE) ‖ sealed head ‖
//!   sealed(snapshot)`: the whole state database, padded to a size fixed by the
//!   volume's parameters and sealed as (`Meta`, position 0, version = epoch); the
//!   head authenticates the epoch and the size (see `meta_auth`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oram_blockstore::{Accounting, BlockStore, BlockStoreExt, ObjKey};
use oram_engine::{Oram, OramError, Parts};
use oram_objects::{LayerConfig, ObjectLayer};
use oram_seal::{MasterKey, ObjectIdentity, ObjectKind, Sealer, VolumeId};
use oram_state::{Space, TrustedState};
use oram_statedb::Db;

use crate::config::Config;
use crate::datadir::{self, VolumeParams};
use crate::keys::{check_value, KeySource};
use crate::{open_store, ProxyError};

/// An opened volume.
pub struct Volume {
    /// Its parameters.
    pub params: VolumeParams,
    /// The backend (counted by `backend_counters`).
    pub store: Arc<dyn BlockStore>,
    /// Requests and bytes sent to the backend since the volume was opened (the
    /// volume header check at open excluded).
    pub backend_counters: Arc<Accounting<Arc<dyn BlockStore>>>,
    /// The recent backend requests, errors and latencies (the dashboard's source).
    pub tap: Arc<crate::tap::TapShared>,
    /// The data directory.
    pub data_dir: std::path::PathBuf,
    /// The state database.
    pub db: Arc<Db>,
    /// The engine.
    pub engine: Arc<dyn Oram>,
    /// The object layer over it.
    pub layer: ObjectLayer,
    /// Whether this call created the volume.
    pub created: bool,
    /// Whether this call created a key file.
    pub new_key: bool,
    /// Write-backs journaled by an earlier run (a crash) and resent now.
    pub resent: usize,
    /// The backend lease this volume holds (`None`: `[backend] lease_secs = 0`).
    pub lease: Option<Arc<crate::lease::Lease>>,
    /// The shipper of the state log (`None`: `[state] log_interval_ms = 0`).
    pub shipper: Option<crate::logship::Shipper>,
    sealer: Arc<Sealer>,
    checkpoint_size: u64,
    prefix: String,
}

fn header_key(prefix: &str) -> ObjKey {
    ObjKey::new(format!("{prefix}/meta/volume")).expect("prefix validated")
}

fn checkpoint_key(prefix: &str) -> ObjKey {
    ObjKey::new(format!("{prefix}/meta/checkpoint")).expect("prefix validated")
}

/// The largest volume header accepted (it is a few hundred bytes of TOML).
const MAX_HEADER_BYTES: u64 = 64 * 1024;

async fn read_header(
    store: &dyn BlockStore,
    prefix: &str,
) -> Result<Option<VolumeParams>, ProxyError> {
    let got = store
        .get_many_bounded(
            &[header_key(prefix)],
            oram_blockstore::SizeBound::AtMost(MAX_HEADER_BYTES),
        )
        .await?;
    match got.into_iter().next().flatten() {
        None => Ok(None),
        Some(b) => {
            let text = String::from_utf8(b.to_vec()).map_err(|_| {
                ProxyError::Params(format!("backend {prefix}/meta/volume is not text"))
            })?;
            VolumeParams::from_toml(&text, &format!("backend object {prefix}/meta/volume"))
                .map(Some)
        }
    }
}

async fn write_header(store: &dyn BlockStore, p: &VolumeParams) -> Result<(), ProxyError> {
    store
        .put_many(vec![(
            header_key(&p.prefix),
            p.to_toml().into_bytes().into(),
        )])
        .await?;
    Ok(())
}

/// Checks the backend's volume header against the local volume; writes it if the
/// volume's backend area is still empty (first start, or a start that crashed
/// before writing it), and rewrites it, authenticated, if it lacks its MAC or does
/// not match the local parameters (`p` is already signed).
async fn ensure_header(store: &dyn BlockStore, p: &VolumeParams) -> Result<(), ProxyError> {
    match read_header(store, &p.prefix).await? {
        Some(h) if h == *p => Ok(()),
        Some(h) if h.volume_id == p.volume_id => {
            tracing::warn!(
                "the backend's volume header differs from this data directory's (or has no \
                 MAC): rewriting it"
            );
            write_header(store, p).await
        }
        Some(h) => Err(ProxyError::Params(format!(
            "the backend prefix {:?} holds another volume ({}), not this data directory's ({})",
            p.prefix, h.volume_id, p.volume_id
        ))),
        None => {
            if !crate::lease::without_lease(store.list(&format!("{}/", p.prefix)).await?).is_empty()
            {
                return Err(ProxyError::Integrity(format!(
                    "the backend prefix {:?} holds objects but no volume header: it was \
                     tampered with or is not this volume's",
                    p.prefix
                )));
            }
            write_header(store, p).await
        }
    }
}

/// The engine space of a volume's one engine in its state database.
pub const ENGINE_SPACE: Space = Space(0);

/// The fixed size of a checkpoint's plaintext for this configuration: the
/// engine's own bound on its trusted state (its crate computes it), the
/// configured object-index budget, and 64 KiB for everything else.
pub fn checkpoint_size(cfg: &Config) -> u64 {
    let index = match cfg.state.checkpoint_index_bytes {
        0 => cfg.engine.capacity_blocks * 64,
        n => n,
    };
    64 * 1024 + cfg.engine.state_bound(&cfg.backend.prefix) + index
}

/// What a checkpoint wrote.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointInfo {
    /// Its epoch.
    pub epoch: u64,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Bytes of state in it (before padding).
    pub state_bytes: u64,
}

impl Volume {
    /// Opens the volume of `cfg.data_dir`, creating it (key, parameters, backend
    /// header) if the directory holds none. The caller holds the directory lock.
    ///
    /// A new volume needs an empty backend prefix: a prefix holding another volume
    /// is refused with a pointer to `oram-proxy recover`. Write-backs journaled
    /// before a crash are resent before this returns.
    pub async fn open(cfg: &Config) -> Result<Self, ProxyError> {
        let dir = &cfg.data_dir;
        let existed = datadir::has_volume(dir);
        let store = open_store(cfg).await?;
        // Before any write: one proxy per backend prefix.
        let (store, lease) = crate::lease::guard(cfg, store).await?;
        let source = KeySource::resolve(cfg)?;
        let (params, key, new_key) = if existed {
            let params = datadir::load_volume(dir, cfg)?;
            if !cfg.engine.adopted.is_empty() {
                tracing::info!(
                    "taken from volume.toml (the configuration does not name them): {}",
                    cfg.engine.adopted.join(", ")
                );
            }
            let state = datadir::state_path(dir);
            // Missing state is fine only for a volume that never stored anything (a
            // first start that stopped before creating it).
            if !state.exists() {
                let stored =
                    crate::lease::without_lease(store.list(&format!("{}/", params.prefix)).await?);
                if stored.iter().any(|k| *k != header_key(&params.prefix)) {
                    return Err(ProxyError::Params(format!(
                        "{} is missing: without it the volume cannot be read. Restore it \
                         from a backup, or rebuild a new data directory with `oram-proxy \
                         recover`",
                        state.display()
                    )));
                }
            }
            let key = source.load(params.kdf.as_ref(), &params.key_check)?;
            let signed = crate::meta_auth::sign_header(&key, &params);
            ensure_header(store.as_ref(), &signed).await?;
            (params, key, false)
        } else {
            let prefix = &cfg.backend.prefix;
            if let Some(h) = read_header(store.as_ref(), prefix).await? {
                return Err(ProxyError::Params(format!(
                    "the backend prefix {prefix:?} already holds volume {}: run `oram-proxy \
                     recover` to rebuild this data directory from it, or choose another \
                     [backend] prefix",
                    h.volume_id
                )));
            }
            if !crate::lease::without_lease(store.list(&format!("{prefix}/")).await?).is_empty() {
                return Err(ProxyError::Params(format!(
                    "the backend prefix {prefix:?} holds objects but no volume: refusing to \
                     mix a new volume into it"
                )));
            }
            let (key, kdf, new_key) = source.create()?;
            let params = VolumeParams::new(
                cfg,
                &VolumeId::random(),
                source.kind(),
                check_value(&key),
                kdf,
            );
            datadir::save_volume(dir, &params)?;
            // The prefix was just found empty: no need to look again.
            write_header(
                store.as_ref(),
                &crate::meta_auth::sign_header(&key, &params),
            )
            .await?;
            (params, key, new_key)
        };
        for n in params.notices(cfg) {
            tracing::warn!("{n}");
        }
        Self::assemble(cfg, params, key, store, lease, !existed, new_key).await
    }

    async fn assemble(
        cfg: &Config,
        params: VolumeParams,
        key: MasterKey,
        store: Arc<dyn BlockStore>,
        lease: Option<Arc<crate::lease::Lease>>,
        created: bool,
        new_key: bool,
    ) -> Result<Self, ProxyError> {
        let volume_id = params.volume_id()?;
        let sealer = Arc::new(Sealer::new(&key, volume_id));
        drop(key);
        let tap = crate::tap::Tap::new(store);
        let tap_shared = tap.shared();
        let backend_counters = Arc::new(Accounting::new(Arc::new(tap) as Arc<dyn BlockStore>));
        let store: Arc<dyn BlockStore> = backend_counters.clone();
        let path = datadir::state_path(&cfg.data_dir);
        // Opening may create the file and fsync: off the async workers.
        let cache = usize::try_from(
            cfg.state
                .cache_mib
                .clamp(1, 1 << 30)
                .saturating_mul(1 << 20),
        )
        .unwrap_or(usize::MAX);
        let db =
            tokio::task::spawn_blocking(move || Db::open_with_cache(&path, volume_id.0, cache))
                .await
                .map_err(|e| ProxyError::Config(format!("state database: {e}")))??;
        // Before anything commits: from here on every commit is shipped too.
        let shipper = match cfg.state.log_settings() {
            Some(settings) => Some(
                crate::logship::start(
                    store.clone(),
                    sealer.clone(),
                    cfg.backend.prefix.clone(),
                    db.generation(),
                    db.ship_log()?,
                    settings,
                )
                .await?,
            ),
            None => None,
        };
        let state = db.state(ENGINE_SPACE)?;
        let resent = state.pending().len();
        let interrupted = !state.intents().is_empty();
        let engine = cfg.engine.build(
            &cfg.backend.prefix,
            Parts {
                store: store.clone(),
                sealer: sealer.clone(),
                state: Box::new(state),
            },
        )?;
        if resent > 0 {
            tracing::warn!(
                buckets = resent,
                "resending write-backs journaled before an unclean stop"
            );
        }
        if interrupted {
            tracing::warn!(
                "a round was interrupted by an unclean stop: it is repeated, as the same \
                 access, before anything else"
            );
        }
        engine.flush().await?;
        let layer = ObjectLayer::new(
            engine.clone(),
            Box::new(db.kv()?),
            LayerConfig {
                batch_blocks: cfg.engine.round_ops(),
                ..LayerConfig::default()
            },
        )?;
        let vol = Self {
            params,
            store,
            backend_counters,
            tap: tap_shared,
            data_dir: cfg.data_dir.clone(),
            db,
            engine,
            layer,
            created,
            new_key,
            resent,
            lease,
            shipper,
            sealer,
            checkpoint_size: checkpoint_size(cfg),
            prefix: cfg.backend.prefix.clone(),
        };
        if vol.shipper.is_some() && !vol.repair_checkpoint().await? {
            // Before any new round writes: the log shipped from here on continues
            // this checkpoint. A commit of an earlier run whose record never
            // landed (an unclean stop) is in it; without it the log would have a
            // gap, and a round of this run could overwrite an object the state
            // before the gap refers to. (The roll-back check comes first.)
            let c = vol.checkpoint().await?;
            tracing::info!(epoch = c.epoch, "shipped log: checkpoint taken at start");
        }
        Ok(vol)
    }

    /// Writes a checkpoint: quiesces the engine, snapshots the state database, pads
    /// it to the fixed size, seals and uploads it, and starts a new epoch (so the
    /// objects it refers to stay untouched until the next checkpoint).
    ///
    /// Observed by the storage server: one PUT of `<prefix>/meta/checkpoint`, always
    /// of the same size, with accesses paused meanwhile.
    pub async fn checkpoint(&self) -> Result<CheckpointInfo, ProxyError> {
        let quiet = self.engine.quiesce().await?;
        let epoch = self.db.epoch();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        self.db
            .set_meta("checkpoint_ms", &now_ms.to_be_bytes())
            .await
            .map_err(OramError::State)?;
        // Where the shipped log stands, read before the snapshot: at most the
        // snapshot's own position (commits of the object index may still run).
        let log_end = self.db.log_end()?;
        // Reading the whole database: off the async workers.
        let db = self.db.clone();
        let mut snap = tokio::task::spawn_blocking(move || db.snapshot())
            .await
            .map_err(|e| ProxyError::Config(format!("state snapshot: {e}")))??;
        let state_bytes = snap.len() as u64;
        let mut size = self.checkpoint_size;
        while size < state_bytes {
            size *= 2;
        }
        if size != self.checkpoint_size {
            tracing::warn!(
                state_bytes,
                padded = size,
                "the trusted state outgrew the checkpoint size: the checkpoint is larger, \
                 which shows the backend that the index grew (raise state.checkpoint_index_bytes)"
            );
        }
        snap.resize(size as usize, 0);
        let sealed = self
            .sealer
            .seal(&ObjectIdentity::plain(ObjectKind::Meta, 0, epoch), &snap)
            .map_err(OramError::Seal)?;
        drop(snap);
        let obj = crate::meta_auth::checkpoint_object(&self.sealer, epoch, size, &sealed)?;
        drop(sealed);
        let bytes = obj.len() as u64;
        let obj = bytes::Bytes::from(obj);
        // The epoch moves first: once the upload may have landed, writes must
        // already avoid the slots it refers to. A start that finds the backend's
        // checkpoint behind the local epoch takes a new one before serving.
        self.db.set_epoch(epoch + 1).await?;
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            match self
                .store
                .put_many(vec![(checkpoint_key(&self.prefix), obj.clone())])
                .await
            {
                Ok(()) => {
                    // Not needed for consistency (a start compares epochs): lets a
                    // start tell a roll-back from an interrupted checkpoint.
                    self.db
                        .set_meta("checkpoint_uploaded", &epoch.to_be_bytes())
                        .await
                        .map_err(OramError::State)?;
                    if let Some(s) = &self.shipper {
                        // Records the checkpoint covers; one that stays is
                        // deleted after the next checkpoint.
                        match s.prune(log_end).await {
                            Ok(n) => tracing::debug!(records = n, "shipped log pruned"),
                            Err(e) => tracing::warn!("shipped log: pruning failed: {e}"),
                        }
                    }
                    break;
                }
                Err(e) if attempt >= 5 => {
                    tracing::error!(
                        "checkpoint upload failed ({e}); until one succeeds, `recover` may be \
                         unable to use the previous checkpoint"
                    );
                    return Err(e.into());
                }
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
            }
        }
        drop(quiet);
        Ok(CheckpointInfo {
            epoch,
            bytes,
            state_bytes,
        })
    }

    /// The epoch of the checkpoint on the backend, if any, authenticated: reads and
    /// opens the checkpoint's sealed head (a checkpoint of the earlier format is
    /// downloaded and opened whole).
    pub async fn backend_checkpoint_epoch(&self) -> Result<Option<u64>, ProxyError> {
        use crate::meta_auth::{open_checkpoint, parse_prefix, Prefix, HEAD_LEN};
        let key = checkpoint_key(&self.prefix);
        let Some(head) = self.store.get_range(&key, 0..HEAD_LEN as u64).await? else {
            return Ok(None);
        };
        match parse_prefix(&self.sealer, &head)? {
            Prefix::V2(h) => Ok(Some(h.epoch)),
            Prefix::V1(_) => {
                let bound = oram_blockstore::SizeBound::AtMost(
                    self.checkpoint_size
                        .saturating_mul(8)
                        .saturating_add(1 << 20),
                );
                let obj = self
                    .store
                    .get_many_bounded(std::slice::from_ref(&key), bound)
                    .await?
                    .into_iter()
                    .next()
                    .flatten()
                    .ok_or_else(|| {
                        ProxyError::Integrity("the backend checkpoint vanished".into())
                    })?;
                Ok(Some(open_checkpoint(&self.sealer, &obj)?.0))
            }
        }
    }

    /// Compares the backend's checkpoint with the local epoch. Normally the backend
    /// holds checkpoint `epoch - 1`. After a crash in the middle of a checkpoint it
    /// holds `epoch - 2` (or none at epoch 1): then a new one is taken now, before
    /// anything is written in the new epoch — unless the upload is recorded as
    /// landed. Anything else means the backend was
    /// rolled back (or is written by another proxy): an integrity error. Returns
    /// whether a checkpoint was taken.
    pub async fn repair_checkpoint(&self) -> Result<bool, ProxyError> {
        let local = self.db.epoch();
        let backend = self.backend_checkpoint_epoch().await?;
        let behind = match backend {
            None => local,
            Some(e) => local.wrapping_sub(e + 1),
        };
        // Whether the upload of checkpoint `local - 1` is known to have landed: then
        // a backend one checkpoint behind was rolled back, not interrupted.
        let landed = self
            .db
            .meta("checkpoint_uploaded")?
            .and_then(|b| b.try_into().ok().map(u64::from_be_bytes))
            .is_some_and(|e| e + 1 == local);
        match behind {
            0 => Ok(false),
            1 if !landed => {
                tracing::warn!(
                    local_epoch = local,
                    backend_epoch = ?backend,
                    "the last checkpoint did not complete: taking one now"
                );
                self.checkpoint().await?;
                Ok(true)
            }
            _ => Err(ProxyError::Integrity(format!(
                "the backend's checkpoint is {} but this data directory is at epoch {local}: \
                 the backend was rolled back, or another proxy writes to it",
                backend.map_or("missing".to_string(), |e| format!("at epoch {e}"))
            ))),
        }
    }
}

/// When the newest checkpoint known to be on the backend was taken (ms since the
/// Unix epoch): the last checkpoint, if its upload is recorded as landed.
pub fn last_checkpoint_ms(db: &Db) -> Option<u64> {
    let u64_meta = |name: &str| {
        db.meta(name)
            .ok()
            .flatten()
            .and_then(|b| b.try_into().ok().map(u64::from_be_bytes))
    };
    let uploaded = u64_meta("checkpoint_uploaded")?;
    (uploaded + 1 == db.epoch())
        .then(|| u64_meta("checkpoint_ms"))
        .flatten()
}

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
    /// The volume recovered.
    pub volume_id: String,
}

/// `oram-proxy recover`: rebuilds an empty data directory from the backend's
/// volume header and latest checkpoint, given the key (any [`KeySource`]; a key
/// file is copied into the data directory). Objects written after that checkpoint
/// are lost, and the backend objects they left are deleted.
pub async fn recover(cfg: &Config, expect: Option<&str>) -> Result<Recovered, ProxyError> {
    recover_with_progress(cfg, expect, &|_| {}).await
}

/// [`recover`], telling `progress` each step as it begins.
pub async fn recover_with_progress(
    cfg: &Config,
    expect: Option<&str>,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Recovered, ProxyError> {
    let dir = &cfg.data_dir;
    if datadir::has_volume(dir) || datadir::state_path(dir).exists() {
        return Err(ProxyError::Params(format!(
            "{} already holds a volume: recover into an empty data directory",
            dir.display()
        )));
    }
    progress("reading the volume header");
    let store = open_store(cfg).await?;
    let prefix = &cfg.backend.prefix;
    // Before any write (the sweep): the old proxy, if alive, must have stopped.
    let (store, lease) = crate::lease::guard(cfg, store).await?;
    let params = read_header(store.as_ref(), prefix)
        .await?
        .ok_or_else(|| ProxyError::Params(format!("no volume at backend prefix {prefix:?}")))?;
    // The header's parameters fill what the configuration does not name (they
    // are authenticated below, before anything is restored).
    let mut adopted = cfg.clone();
    params.adopt_into(&mut adopted)?;
    let cfg = &adopted;
    params.check_config(cfg, dir)?;
    if let Some(want) = expect {
        if !params.volume_id.eq_ignore_ascii_case(want.trim()) {
            return Err(ProxyError::Params(format!(
                "the backend prefix {prefix:?} holds volume {}, not {want}",
                params.volume_id
            )));
        }
    }
    // Read from the untrusted backend: bounded before any derivation.
    if let Some(kdf) = &params.kdf {
        kdf.check_bounds()?;
    }
    let source = KeySource::resolve(cfg)?;
    let key = match &source {
        // The key file of the lost machine, wherever the operator kept it.
        KeySource::File(path) if !path.starts_with(dir) => {
            let key = source.load(params.kdf.as_ref(), &params.key_check)?;
            let own = dir.join("master.key");
            crate::keys::write_private(
                &own,
                &zeroize::Zeroizing::new(format!(
                    "{}\n",
                    *crate::keys::hex_secret(key.expose_bytes())
                )),
            )?;
            key
        }
        _ => source.load(params.kdf.as_ref(), &params.key_check)?,
    };
    if !crate::meta_auth::header_is_authentic(&key, &params) {
        return Err(ProxyError::Integrity(format!(
            "the volume header at {prefix}/meta/volume does not authenticate under this key \
             (no MAC, or a wrong one): it was tampered with, or was written by a version \
             without header MACs (start that version's data directory once with this \
             version, or recover with it)"
        )));
    }
    let volume_id = params.volume_id()?;
    progress("downloading the latest checkpoint");
    let sealer = Sealer::new(&key, volume_id);
    let ckpt = checkpoint_key(prefix);
    let no_checkpoint = || {
        ProxyError::Params(
            "the backend holds no checkpoint of this volume yet: nothing to recover from".into(),
        )
    };
    // The authenticated head names the exact size: nothing more is downloaded.
    let head = store
        .get_range(&ckpt, 0..crate::meta_auth::HEAD_LEN as u64)
        .await?
        .ok_or_else(no_checkpoint)?;
    let bound = match crate::meta_auth::parse_prefix(&sealer, &head)? {
        crate::meta_auth::Prefix::V2(h) => oram_blockstore::SizeBound::Exact(h.total),
        crate::meta_auth::Prefix::V1(_) => oram_blockstore::SizeBound::AtMost(
            checkpoint_size(cfg)
                .saturating_mul(8)
                .saturating_add(1 << 20),
        ),
    };
    let obj = store
        .get_many_bounded(std::slice::from_ref(&ckpt), bound)
        .await?
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(no_checkpoint)?;
    progress("opening and restoring the checkpoint");
    let (epoch, snap) = crate::meta_auth::open_checkpoint(&sealer, &obj)?;
    drop(obj);
    let snap = zeroize::Zeroizing::new(snap);
    // The shipped log after the checkpoint, if the volume ships one: whatever was
    // acknowledged after the checkpoint is in it.
    let (log_generation, log_from) = oram_statedb::snapshot_position(&snap)?;
    progress("reading the shipped log after the checkpoint");
    let log =
        crate::logship::read_log(store.as_ref(), &sealer, prefix, log_generation, log_from).await?;
    if log.gap {
        tracing::warn!("the shipped log has a gap (a missing record): replaying up to it only");
    }
    let (groups, _) = oram_statedb::decode_groups(&log.stream)?;
    drop(log.stream);
    let replayed = groups.len() as u64;
    // A restore draws a new generation: objects the lost timeline wrote after
    // this checkpoint (and its log) never open as current, even where versions
    // repeat. It writes the whole database: off the async workers.
    let path = datadir::state_path(dir);
    let db = tokio::task::spawn_blocking(move || {
        Db::restore_replaying(&path, volume_id.0, &snap, &groups)
    })
    .await
    .map_err(|e| ProxyError::Config(format!("state restore: {e}")))??;
    let taken_ms = db
        .meta("checkpoint_ms")?
        .and_then(|b| b.try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0);
    // The checkpoint is complete: writes from now on go to a new epoch (the log
    // replayed may have moved it already).
    if db.epoch() < epoch + 1 {
        db.set_epoch(epoch + 1).await?;
    }
    drop(db);
    datadir::save_volume(dir, &params)?;
    progress("opening the volume");
    let vol = Volume::assemble(cfg, params, key, store, lease, false, false).await?;
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
        volume_id: vol.params.volume_id.clone(),
    })
}
