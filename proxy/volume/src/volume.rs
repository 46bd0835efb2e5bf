//! A volume opened for use: the backend, the key, the state database, the engine
//! and the object layer, wired together.
//!
//! Backend objects of a volume besides the engine's own: the volume header
//! `<prefix>/meta/volume` ([`crate::header`]), the checkpoints
//! `<prefix>/meta/checkpoint` ([`crate::checkpoint`]), the lease
//! `<prefix>/meta/lease` ([`crate::lease`]) and the shipped log
//! `<prefix>/log/...` ([`crate::logship`]).
//!
//! [`Volume::open`] is shared by `serve`, `init`, `fsck` and `format`. It first
//! refuses a backend other than the one the data directory records
//! ([`crate::backend_record`]), then checks everything it can without writing,
//! before it takes the backend lease (a refused start must not fence the
//! owner): for a new data directory, an empty backend prefix; for an existing
//! one, the parameters, the key (its key check) and that the backend header
//! names the same volume (a backend without it is refused once the directory
//! holds state). Under the lease it creates the key ([`crate::key`]),
//! `volume.toml` and the backend header of a new volume, or rewrites an
//! existing volume's header with its MAC if needed, and records the backend.
//! Then it opens `state.redb` on the blocking
//! pool, loads the engine's space ([`ENGINE_SPACE`]), builds the engine through
//! the registry, warns if the journal holds write-backs or an interrupted
//! round's intent record, flushes (resending the journal) and builds the object
//! layer over the same database's index. Every start then compares the backend's
//! checkpoint epoch with the local one ([`Volume::repair_checkpoint`]): one
//! behind is normal, two behind is a crash mid-checkpoint (a new checkpoint is
//! taken before serving), anything else is a roll-back and refused. With the
//! shipped log, open takes that checkpoint itself ([`crate::logship`] says why).

use std::sync::Arc;

use oram_blockstore::{Accounting, BlockStore, BlockStoreExt};
use oram_engine::{Combined, Oram, Parts};
use oram_objects::{LayerConfig, ObjectLayer};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{Space, TrustedState};
use oram_statedb::Db;

use crate::backend::{backend_url, open_store, VolumeHooks};
use crate::backend_record;
use crate::checkpoint::{CheckpointInfo, Checkpointer};
use crate::cluster::{self, Role};
use crate::config::VolumeConfig;
use crate::datadir;
use crate::fsutil::blocking;
use crate::header::{ensure_header, header_key, read_header, sign_header, write_header, Owner};
use crate::key::{check_value, KeySource};
use crate::lease::{self, without_lease, Lease};
use crate::logship::{self, Shipper};
use crate::params::{checkpoint_size_at, VolumeParams};
use crate::VolumeError;

/// An opened volume.
pub struct Volume {
    /// Its parameters.
    pub params: VolumeParams,
    /// The backend (counted by `backend_counters`).
    pub store: Arc<dyn BlockStore>,
    /// Requests and bytes sent to the backend since the volume was opened (the
    /// volume header check at open excluded).
    pub backend_counters: Arc<Accounting<Arc<dyn BlockStore>>>,
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
    pub lease: Option<Arc<Lease>>,
    /// The shipper of the state log (`None`: `[state] log_interval_ms = 0`).
    pub shipper: Option<Shipper>,
    /// Writes the volume's checkpoints (`<prefix>/meta/checkpoint`).
    pub(crate) checkpointer: Checkpointer,
    /// The volume header's MAC key, to re-sign the header when the volume grows.
    pub(crate) header_mac: zeroize::Zeroizing<[u8; 32]>,
    /// What decides the checkpoints' size at another capacity (the engine's
    /// configuration, its prefix, the index budget).
    pub(crate) sizing: crate::config::VolumeConfig,
    /// One growth at a time (held across the whole growth).
    pub(crate) grow_lock: tokio::sync::Mutex<()>,
    /// The master-key rotation's progress as last counted, at open and after
    /// every checkpoint (`None`: no earlier key kept); guards only this value,
    /// and is never held across an await.
    pub(crate) rotation: std::sync::Mutex<Option<crate::rotation::RotationProgress>>,
}

/// What a volume's process (a single proxy, a front or a node) opens before
/// its engine: the sealer, the counted backend and the state database.
pub(crate) struct Opened {
    pub(crate) sealer: Arc<Sealer>,
    pub(crate) backend_counters: Arc<Accounting<Arc<dyn BlockStore>>>,
    /// The backend as the engine sees it (counted, observed).
    pub(crate) store: Arc<dyn BlockStore>,
    pub(crate) db: Arc<Db>,
}

impl Opened {
    /// Seals with `key` (keys rotated out still open what they sealed), counts
    /// what is sent to `store` from here on (above the observers of `hooks`),
    /// and opens the data directory's `state.redb` off the async workers.
    pub(crate) async fn open(
        cfg: &VolumeConfig,
        hooks: &VolumeHooks,
        params: &VolumeParams,
        key: MasterKey,
        store: Arc<dyn BlockStore>,
    ) -> Result<Self, VolumeError> {
        let volume_id = params.volume_id()?;
        let earlier = crate::key::earlier_keys(&key, params.earlier_keys.as_deref())?;
        let sealer = Arc::new(Sealer::with_keyring(&key, &earlier, volume_id));
        drop((key, earlier));
        // Observers (the server's tap) see what the engine and checkpoints send,
        // above the lease; the counters count it from here on.
        let store = match &hooks.observe {
            Some(observe) => observe(store),
            None => store,
        };
        let backend_counters = Arc::new(Accounting::new(store));
        let store: Arc<dyn BlockStore> = backend_counters.clone();
        let path = datadir::state_path(&cfg.data_dir);
        let cache = usize::try_from(
            cfg.state
                .cache_mib
                .clamp(1, 1 << 30)
                .saturating_mul(1 << 20),
        )
        .unwrap_or(usize::MAX);
        // Opening may create the file and fsync: off the async workers.
        let db =
            tokio::task::spawn_blocking(move || Db::open_with_cache(&path, volume_id.0, cache))
                .await
                .map_err(|e| VolumeError::Config(format!("state database: {e}")))??;
        Ok(Self {
            sealer,
            backend_counters,
            store,
            db,
        })
    }
}

/// Whether `cfg`'s checkpoints are written conditionally: always on the fs
/// back-end; on S3 unless `[backend] conditional_writes = false`.
pub(crate) fn conditional_checkpoints(cfg: &VolumeConfig) -> bool {
    cfg.backend.kind == crate::config::BackendKind::Fs || cfg.backend.conditional_writes
}

/// The engine space of a volume's one engine in its state database.
pub const ENGINE_SPACE: Space = Space(0);

impl Volume {
    /// Opens the volume of `cfg.data_dir`, creating it (key, parameters, backend
    /// header) if the directory holds none. The caller holds the directory lock.
    ///
    /// A new volume needs an empty backend prefix: a prefix holding another volume
    /// is refused with a pointer to `oram-proxy recover`. An existing one needs
    /// the backend it records and that backend's header of this volume. Every
    /// such refusal comes before the backend lease is taken. The users of
    /// `credentials.toml` are kept in the state
    /// ([`crate::users::keep_in_state`]). Write-backs journaled before a crash
    /// are resent before this returns.
    pub async fn open(cfg: &VolumeConfig, hooks: &VolumeHooks) -> Result<Self, VolumeError> {
        Self::open_with(cfg, hooks, None).await
    }

    /// [`Volume::open`] with the key from `source` instead of the one the
    /// configuration and environment name (`None`: that one).
    pub async fn open_with(
        cfg: &VolumeConfig,
        hooks: &VolumeHooks,
        source: Option<KeySource>,
    ) -> Result<Self, VolumeError> {
        let dir = &cfg.data_dir;
        if cfg.cluster.role == Role::Node {
            return Err(VolumeError::Config(
                "this is a cluster node's configuration (cluster.role = \"node\"): `oram-proxy \
                 serve` runs the node; the volume's commands (init, fsck, format, recover, key, \
                 user) run on the front"
                    .into(),
            ));
        }
        if cfg.cluster.role == Role::Front {
            // The front's TLS identity is checked before anything is written.
            cfg.cluster.tls(dir)?;
        }
        let existed = datadir::has_volume(dir);
        // A backend other than the one this directory belongs to is refused
        // before it is touched.
        backend_record::check(cfg)?;
        let store = open_store(cfg, hooks).await?;
        let source = match source {
            Some(s) => s,
            None => KeySource::resolve(&cfg.key, dir)?,
        };
        let prefix = &cfg.backend.prefix;
        // Everything that can refuse this start without writing is checked before
        // the lease is taken: a refused start must not fence the real owner.
        let (params, key) = if existed {
            let params = datadir::load_volume(dir, cfg)?;
            if !cfg.engine.adopted.is_empty() {
                tracing::info!(
                    "taken from volume.toml (the configuration does not name them): {}",
                    cfg.engine.adopted.join(", ")
                );
            }
            let state = datadir::state_path(dir);
            let header = read_header(store.as_ref(), &params.prefix).await?;
            // Missing state is fine only for a volume that never stored anything (a
            // first start that stopped before creating it).
            if !state.exists() {
                let stored = without_lease(store.list(&format!("{}/", params.prefix)).await?);
                if stored.iter().any(|k| *k != header_key(&params.prefix)) {
                    return Err(VolumeError::Params(format!(
                        "{} is missing: without it the volume cannot be read. Restore it \
                         from a backup, or rebuild a new data directory with `oram-proxy \
                         recover`",
                        state.display()
                    )));
                }
            } else if header.is_none() {
                // Never initialise a backend for a volume that has stored state.
                return Err(VolumeError::Params(format!(
                    "the backend {} holds no volume header at prefix {:?}: it is not this \
                     data directory's backend (volume {}). Start with the backend it was \
                     created or recovered with (`backend.toml` in the data directory records \
                     it; omit --backend to use it)",
                    backend_url(cfg),
                    params.prefix,
                    params.volume_id
                )));
            }
            if let Some(h) = &header {
                if h.volume_id != params.volume_id {
                    return Err(VolumeError::Params(format!(
                        "the backend prefix {:?} holds another volume ({}), not this data \
                         directory's ({})",
                        params.prefix, h.volume_id, params.volume_id
                    )));
                }
            }
            let key = params.load_key(&source)?;
            (Some(params), Some(key))
        } else {
            if let Some(h) = read_header(store.as_ref(), prefix).await? {
                return Err(VolumeError::Params(format!(
                    "the backend prefix {prefix:?} already holds volume {}: run `oram-proxy \
                     recover` to rebuild this data directory from it, or choose another \
                     [backend] prefix",
                    h.volume_id
                )));
            }
            if !without_lease(store.list(&format!("{prefix}/")).await?).is_empty() {
                return Err(VolumeError::Params(format!(
                    "the backend prefix {prefix:?} holds objects but no volume: refusing to \
                     mix a new volume into it"
                )));
            }
            (None, None)
        };
        // Before any write: one proxy per backend prefix.
        let (store, lease) = lease::guard(&cfg.backend, dir, store).await?;
        let (params, key, new_key) = match (params, key) {
            (Some(params), Some(key)) => {
                let signed = sign_header(&key, &params);
                ensure_header(store.as_ref(), &signed).await?;
                (params, key, false)
            }
            _ => {
                let made = source.create()?;
                let (key, new_key) = (made.key, made.created_file);
                let params = VolumeParams {
                    wrapped_key: made.wrapped,
                    ..VolumeParams::new(
                        cfg,
                        &VolumeId::random(),
                        source.kind(),
                        check_value(&key),
                        made.kdf,
                    )
                };
                let (d, p) = (dir.to_path_buf(), params.clone());
                blocking("writing volume.toml", move || datadir::save_volume(&d, &p)).await?;
                // The prefix was just found empty: no need to look again.
                write_header(store.as_ref(), &sign_header(&key, &params)).await?;
                (params, key, new_key)
            }
        };
        let c = cfg.clone();
        blocking("writing backend.toml", move || backend_record::record(&c)).await?;
        for n in params.notices(cfg) {
            tracing::warn!("{n}");
        }
        let mut vol =
            Self::assemble(cfg, hooks, params, key, store, lease, !existed, new_key).await?;
        // The engine's own record of its size wins (a crash after a growth's
        // switch, before volume.toml and the header were rewritten).
        vol.adopt_engine_capacity().await?;
        // The S3 users travel with the state, so that `recover` restores them.
        crate::users::keep_in_state(dir, &vol.db).await?;
        Ok(vol)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn assemble(
        cfg: &VolumeConfig,
        hooks: &VolumeHooks,
        params: VolumeParams,
        key: MasterKey,
        store: Arc<dyn BlockStore>,
        lease: Option<Arc<Lease>>,
        created: bool,
        new_key: bool,
    ) -> Result<Self, VolumeError> {
        let header_mac = crate::header::mac_key(&key);
        let Opened {
            sealer,
            backend_counters,
            store,
            db,
        } = Opened::open(cfg, hooks, &params, key, store).await?;
        // Before anything commits: from here on every commit is shipped too.
        let shipper = match cfg.state.log_settings() {
            Some(settings) => Some(
                logship::start(
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
        // A rotation in progress counts from the first epoch this key wrote alone.
        crate::rotation::mark_rotation(&db, &params).await?;
        let state = db.state(ENGINE_SPACE)?;
        let resent = state.pending().len();
        let interrupted = !state.intents().is_empty();
        let parts = Parts {
            store: store.clone(),
            sealer: sealer.clone(),
            state: Box::new(state),
        };
        let engine = match cfg.cluster.role {
            Role::Front => {
                cluster::build_front(
                    &cfg.cluster,
                    &cfg.engine,
                    &cfg.backend.prefix,
                    &cfg.data_dir,
                    parts,
                )
                .await?
            }
            _ => cfg.engine.build(&cfg.backend.prefix, parts)?,
        };
        // Concurrent callers (the object layer's requests) share the engine's
        // rounds, each of at most the engine's round size
        // (`oram_engine::Combined`).
        let max_batch = cfg.engine.shape(&cfg.backend.prefix).max_batch;
        let engine: Arc<dyn Oram> = Arc::new(Combined::new(engine, max_batch));
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
        if cfg.cluster.role == Role::Front {
            cluster::flush_waiting(&cfg.cluster, &engine).await?;
        } else {
            engine.flush().await?;
        }
        let layer = ObjectLayer::new(
            engine.clone(),
            Box::new(db.kv()?),
            LayerConfig {
                batch_blocks: cfg.engine.round_ops(),
                ..LayerConfig::default()
            },
        )?;
        let rotation = crate::rotation::progress_of(db.clone(), params.clone()).await?;
        let vol = Self {
            checkpointer: Checkpointer::new(
                store.clone(),
                sealer.clone(),
                db.clone(),
                &cfg.backend.prefix,
                Owner::Volume,
                checkpoint_size_at(cfg, engine.capacity()),
                conditional_checkpoints(cfg),
            ),
            params,
            store,
            backend_counters,
            data_dir: cfg.data_dir.clone(),
            db,
            engine,
            layer,
            created,
            new_key,
            resent,
            lease,
            shipper,
            header_mac,
            sizing: cfg.clone(),
            grow_lock: tokio::sync::Mutex::new(()),
            rotation: std::sync::Mutex::new(rotation),
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
}

impl Volume {
    /// Writes a checkpoint: quiesces the engine, snapshots the state database, pads
    /// it to the fixed size, seals and uploads it, and starts a new epoch (so the
    /// objects it refers to stay untouched until the next checkpoint). The
    /// engine serves again once the snapshot is taken if the log is shipped,
    /// else once the upload landed (`Checkpointer::write` says why).
    ///
    /// Observed by the storage server: one PUT of `<prefix>/meta/checkpoint`, always
    /// of the same size, with accesses paused while it is taken (and uploaded,
    /// without a log) (conditional: see the module documentation), preceded by a
    /// ranged GET of its head and a GET of it at the first checkpoint of this
    /// process.
    pub async fn checkpoint(&self) -> Result<CheckpointInfo, VolumeError> {
        let quiet = self.engine.quiesce().await?;
        // A key rotation whose every position is re-sealed: this checkpoint is
        // the first to need no earlier key.
        crate::rotation::note_checkpoint(&self.db, &self.params, self.db.epoch()).await?;
        // Handed over: let go once the snapshot is taken if the log is
        // shipped, else once the upload landed (`Checkpointer::write`).
        let info = self
            .checkpointer
            .write(self.shipper.as_ref(), quiet)
            .await?;
        self.recount_rotation().await;
        Ok(info)
    }

    /// Whether the engine's superseded objects call for a checkpoint now
    /// ([`crate::StateConfig::checkpoint_due`], with this volume's checkpoint
    /// size).
    pub fn checkpoint_due(&self, state: &crate::StateConfig) -> bool {
        state.checkpoint_due(
            self.engine.superseded(),
            self.db.epoch(),
            self.checkpointer.size(),
        )
    }

    /// The epoch of the checkpoint on the backend, if any, authenticated: reads and
    /// opens the checkpoint's sealed head (a checkpoint of the earlier format is
    /// downloaded and opened whole).
    pub async fn backend_checkpoint_epoch(&self) -> Result<Option<u64>, VolumeError> {
        self.checkpointer.backend_epoch().await
    }

    /// Compares the backend's checkpoint with the local epoch. Normally the backend
    /// holds checkpoint `epoch - 1`. After a crash in the middle of a checkpoint it
    /// holds `epoch - 2` (or none at epoch 1): then a new one is taken now, before
    /// anything is written in the new epoch — unless the upload is recorded as
    /// landed. Anything else means the backend was
    /// rolled back (or is written by another proxy): an integrity error. Returns
    /// whether a checkpoint was taken.
    pub async fn repair_checkpoint(&self) -> Result<bool, VolumeError> {
        if self.checkpointer.check_backend().await? {
            self.checkpoint().await?;
            return Ok(true);
        }
        Ok(false)
    }
}
