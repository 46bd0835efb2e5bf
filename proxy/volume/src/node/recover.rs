//! `oram-proxy recover` with a node's configuration: a cluster node's data
//! directory rebuilt from the backend alone (its checkpoint and shipped log
//! under `<prefix>/node/<i>/`), given the key.

use oram_seal::Sealer;

use crate::backend::VolumeHooks;
use crate::backend_record;
use crate::cluster::{Role, STATIC_TOKEN};
use crate::config::VolumeConfig;
use crate::datadir;
use crate::fsutil::blocking;
use crate::header::{header_is_authentic, Owner};
use crate::key::KeySource;
use crate::params::node_checkpoint_size;
use crate::recover::{begin, restore_state, Begun, RecoverOptions, RestoredState};
use crate::VolumeError;

use super::NodeVolume;

/// What recovering a node did.
#[derive(Debug)]
pub struct NodeRecovered {
    /// The node.
    pub node: u32,
    /// The partitions it serves.
    pub partitions: Vec<u32>,
    /// Epoch of the checkpoint used.
    pub epoch: u64,
    /// Commits replayed from the node's shipped log after it.
    pub replayed: u64,
    /// Records of the shipped log read.
    pub log_records: u64,
    /// The last record applied, if any.
    pub last_record: Option<crate::RecordMark>,
    /// The gap accepted ([`RecoverOptions::accept_log_gap`]): what was missing.
    pub accepted_gap: Option<String>,
    /// Backend objects of its partitions written after what was restored,
    /// removed.
    pub swept: u64,
    /// The volume.
    pub volume_id: String,
}

/// Rebuilds node `cfg.cluster.node`'s empty data directory from the backend:
/// authenticates the volume header with the key (as a node's first start
/// does), restores the node's state database from its latest checkpoint and
/// the shipped log after it (as `recover` does), records `volume.toml` and the
/// backend, then opens the node's partitions (which takes a checkpoint: the
/// restored state becomes the node's on the backend) and deletes the objects
/// its partitions wrote after what was restored.
///
/// Refused, before anything is written: a configuration without the shipped
/// log (`[state] log_interval_ms = 0`: a node restored to its last checkpoint
/// would have lost rounds the front committed since, and with them the
/// blocks the front's map places in its partitions), a data directory that
/// holds a volume, a backend without the volume or the node's checkpoint, a
/// header that does not authenticate, and a log with a gap or a missing tail
/// (as [`crate::recover`] says).
///
/// The node's old process must be stopped for good (its machine lost): a
/// cluster with static membership has no lease to fence it. A checkpoint it
/// still wrote would be refused by the backend's condition (another writer
/// replaced it), not its partitions' other writes.
pub async fn recover_node(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    opts: &RecoverOptions,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<NodeRecovered, VolumeError> {
    let (done, node, lock) = rebuild(cfg, hooks, opts, progress, STATIC_TOKEN, None).await?;
    drop((node, lock));
    Ok(done)
}

/// A standby's take-over of slot `cfg.cluster.node`, claimed in etcd under
/// `token` ([`crate::coord`]): the slot's state rebuilt into this standby's
/// empty data directory from the backend as [`recover_node`] does, opened and
/// returned ready to serve under `token`, with the data directory's lock
/// (`lock`, which the caller took while it waited). The fence of the node's
/// writes is in `hooks`.
pub async fn take_over(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    token: u64,
    lock: std::fs::File,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<(NodeRecovered, NodeVolume, std::fs::File), VolumeError> {
    rebuild(
        cfg,
        hooks,
        &RecoverOptions::default(),
        progress,
        token,
        Some(lock),
    )
    .await
}

async fn rebuild(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
    opts: &RecoverOptions,
    progress: &(dyn Fn(&str) + Send + Sync),
    token: u64,
    held: Option<std::fs::File>,
) -> Result<(NodeRecovered, NodeVolume, std::fs::File), VolumeError> {
    let c = &cfg.cluster;
    if c.role != Role::Node {
        return Err(VolumeError::Config(
            "a node is recovered with its configuration (cluster.role = \"node\")".into(),
        ));
    }
    if cfg.state.log_settings().is_none() {
        return Err(VolumeError::Config(
            "a cluster node can be recovered only from its shipped log ([state] \
             log_interval_ms > 0 on the node): its checkpoint alone misses the rounds the \
             front committed since, and the blocks they moved. Restore the node's data \
             directory from a backup instead"
                .into(),
        ));
    }
    let me = u32::try_from(c.node)
        .map_err(|_| VolumeError::Config("cluster.node is out of range".into()))?;
    let Begun {
        _lock: lock,
        store,
        params,
        cfg: adopted,
    } = begin(cfg, hooks, opts.expect_volume.as_deref(), progress, held).await?;
    let cfg = &adopted;
    let dir = &cfg.data_dir;
    let prefix = &cfg.backend.prefix;
    let source = KeySource::resolve(&cfg.key, dir)?;
    let key = params.load_key(&source)?;
    if !header_is_authentic(&key, &params) {
        return Err(VolumeError::Integrity(format!(
            "the volume header at {prefix}/meta/volume does not authenticate under this key: \
             another volume's key, or a header tampered with"
        )));
    }
    let Some(partitions) = cfg
        .engine
        .kind
        .settings()
        .partitions(&cfg.engine.shape(prefix))
    else {
        return Err(VolumeError::Config(format!(
            "the {} engine has no partitions: this volume is not a cluster's",
            cfg.engine.kind.name()
        )));
    };
    let owned = c.partitions_of(c.node, partitions);
    let volume_id = params.volume_id()?;
    let earlier = crate::key::earlier_keys(&key, params.earlier_keys.as_deref())?;
    let sealer = Sealer::with_keyring(&key, &earlier, volume_id);
    drop((key, earlier));
    let RestoredState {
        epoch,
        db,
        replayed,
        log,
    } = restore_state(
        store.as_ref(),
        &sealer,
        prefix,
        Owner::Node(me),
        node_checkpoint_size(cfg, owned.len() as u64),
        datadir::state_path(dir),
        volume_id,
        opts,
        progress,
    )
    .await?;
    drop(db);
    let mut params = params;
    params.mac = None;
    let (d, p, c2) = (dir.to_path_buf(), params.clone(), cfg.clone());
    blocking("writing volume.toml and backend.toml", move || {
        datadir::save_volume(&d, &p)?;
        backend_record::record(&c2)
    })
    .await?;
    progress("opening the node's partitions");
    let node = NodeVolume::open_as(cfg, hooks, token).await?;
    progress("removing backend objects written after the checkpoint");
    let swept = node.host.sweep().await?;
    // The restored state is already the node's checkpoint (taken by `open`:
    // the log is on); the write-backs flushed here are in its shipped log.
    node.host.flush().await?;
    let done = NodeRecovered {
        node: me,
        partitions: node.host.partitions(),
        epoch,
        replayed,
        log_records: log.records,
        last_record: log.last,
        accepted_gap: log.gap,
        swept,
        volume_id: params.volume_id,
    };
    Ok((done, node, lock))
}
