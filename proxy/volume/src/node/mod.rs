//! A cluster node's volume: its data directory (made from the backend's volume
//! header on first start), its state database and the sub-engines of the
//! partitions it owns, served to the front ([`oram_node::NodeHost`]); and the
//! cluster's certificates ([`make_certs`]).
//!
//! A node keeps its state on the backend as a single proxy does, under
//! `<prefix>/node/<i>/`: checkpoints of its state database (sealed as its own,
//! [`crate::header::Owner::Node`]) every `[state] checkpoint_interval_secs` and
//! at a clean stop, and with `[state] log_interval_ms` > 0 the shipped log of
//! every commit, which a land waits for. A node whose data directory is lost is
//! rebuilt from them by `oram-proxy recover` with its configuration
//! ([`recover_node`]): with the log, up to the last round it acknowledged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oram_blockstore::{Accounting, BlockStore};
use oram_engine::Parts;
use oram_node::{ClusterTls, NodeHost, Served};
use oram_partition::PartitionedConfig;
use oram_statedb::Db;
use tokio::net::TcpListener;

mod certs;
pub mod member;
mod recover;

pub use certs::make_certs;
pub use recover::{recover_node, take_over, NodeRecovered};

use crate::backend::{open_store, VolumeHooks};
use crate::backend_record;
use crate::checkpoint::{node_prefix, CheckpointInfo, Checkpointer};
use crate::cluster::{Role, STATIC_TOKEN};
use crate::config::VolumeConfig;
use crate::datadir;
use crate::fsutil::blocking;
use crate::header::{header_is_authentic, read_header, Owner};
use crate::key::KeySource;
use crate::logship::{self, Shipper};
use crate::params::{node_checkpoint_size, VolumeParams};
use crate::volume::{conditional_checkpoints, Opened, ENGINE_SPACE};
use crate::VolumeError;

/// How often a node starting before its front looks for the volume header.
const HEADER_POLL: Duration = Duration::from_millis(500);

/// A cluster node's opened volume: the partitions it owns, ready to serve.
pub struct NodeVolume {
    /// The volume's parameters (from `volume.toml`, or the backend's header on
    /// a first start).
    pub params: VolumeParams,
    /// The partitions served.
    pub host: NodeHost,
    /// Requests and bytes this node sent to the backend.
    pub backend_counters: Arc<Accounting<Arc<dyn BlockStore>>>,
    /// The node's state database (its partitions' spaces and ledgers).
    pub db: Arc<Db>,
    /// This member's TLS identity.
    pub tls: ClusterTls,
    /// Whether this start created the data directory's volume.
    pub created: bool,
    /// The shipper of the node's state log (`None`: `[state] log_interval_ms = 0`).
    pub shipper: Option<Shipper>,
    /// The time between two checkpoints (`None`: only at a clean stop).
    pub checkpoint_every: Option<Duration>,
    checkpointer: Checkpointer,
}

impl NodeVolume {
    /// Opens node `cfg.cluster.node`'s share of the volume: on a first start,
    /// waits (at most `cluster.wait_secs`) for the front to write the volume
    /// header, authenticates it with the master key and records it as
    /// `volume.toml`; then builds the sub-engines of the partitions this node
    /// owns over its own `state.redb`. Takes no backend lease (the front holds
    /// the volume's). The caller holds the data directory's lock. Its
    /// partitions are served under [`STATIC_TOKEN`] (static membership).
    pub async fn open(cfg: &VolumeConfig, hooks: &VolumeHooks) -> Result<Self, VolumeError> {
        Self::open_as(cfg, hooks, STATIC_TOKEN).await
    }

    /// As [`NodeVolume::open`], the partitions served under the fencing token
    /// `token` (the slot's owner key revision in etcd, [`crate::coord`]); the
    /// fence of the node's writes, if any, is in `hooks`.
    pub async fn open_as(
        cfg: &VolumeConfig,
        hooks: &VolumeHooks,
        token: u64,
    ) -> Result<Self, VolumeError> {
        let c = &cfg.cluster;
        if c.role != Role::Node {
            return Err(VolumeError::Config(
                "a node's volume is opened with cluster.role = \"node\"".into(),
            ));
        }
        let dir = &cfg.data_dir;
        let tls = c.tls(dir)?;
        backend_record::check(cfg)?;
        let store = open_store(cfg, hooks).await?;
        let source = KeySource::resolve(&cfg.key, dir)?;
        let prefix = &cfg.backend.prefix;
        let existed = datadir::has_volume(dir);
        let mut cfg = cfg.clone();
        let (params, key) = if existed {
            let params = datadir::load_volume(dir, &cfg)?;
            let key = params.load_key(&source)?;
            match read_header(store.as_ref(), prefix).await? {
                Some(h) if h.volume_id == params.volume_id => {}
                Some(h) => {
                    return Err(VolumeError::Params(format!(
                        "the backend prefix {prefix:?} holds volume {}, not this node's ({})",
                        h.volume_id, params.volume_id
                    )))
                }
                None => {
                    return Err(VolumeError::Params(format!(
                        "the backend holds no volume header at prefix {prefix:?}: it is not \
                         this node's backend (volume {})",
                        params.volume_id
                    )))
                }
            }
            (params, key)
        } else {
            let header = wait_for_header(store.as_ref(), prefix, c.wait()).await?;
            // Read from the untrusted backend: bounded before any derivation.
            if let Some(kdf) = &header.kdf {
                kdf.check_bounds()?;
            }
            header.adopt_into(&mut cfg.engine)?;
            header.check_config(&cfg, dir)?;
            let key = header.load_key(&source)?;
            if !header_is_authentic(&key, &header) {
                return Err(VolumeError::Integrity(format!(
                    "the volume header at {prefix}/meta/volume does not authenticate under \
                     this node's key: another volume's key, or a header tampered with"
                )));
            }
            let mut params = header;
            params.mac = None;
            let (d, p) = (dir.to_path_buf(), params.clone());
            blocking("writing volume.toml", move || datadir::save_volume(&d, &p)).await?;
            (params, key)
        };
        let c2 = cfg.clone();
        blocking("writing backend.toml", move || backend_record::record(&c2)).await?;
        let settings = cfg.engine.kind.settings();
        let shape = cfg.engine.shape(prefix);
        let Some(partitions) = settings.partitions(&shape) else {
            return Err(VolumeError::Config(format!(
                "the {} engine has no partitions to serve on a node (a cluster needs the \
                 oblivistore or curious engine)",
                cfg.engine.kind.name()
            )));
        };
        let Opened {
            sealer,
            backend_counters,
            store,
            db,
        } = Opened::open(&cfg, hooks, &params, key, store).await?;
        let me = u32::try_from(c.node)
            .map_err(|_| VolumeError::Config("cluster.node is out of range".into()))?;
        // Before anything commits: from here on every commit is shipped too.
        let shipper = match cfg.state.log_settings() {
            Some(settings) => Some(
                logship::start(
                    store.clone(),
                    sealer.clone(),
                    node_prefix(prefix, me),
                    db.generation(),
                    db.ship_log()?,
                    settings,
                )
                .await?,
            ),
            None => None,
        };
        let which = c.partitions_of(c.node, partitions);
        let checkpointer = Checkpointer::new(
            store.clone(),
            sealer.clone(),
            db.clone(),
            prefix,
            Owner::Node(me),
            node_checkpoint_size(&cfg, which.len() as u64),
            conditional_checkpoints(&cfg),
        );
        let subs = settings.build_partitions(
            &shape,
            Parts {
                store,
                sealer,
                state: Box::new(db.state(ENGINE_SPACE)?),
            },
            &which,
        )?;
        let mut served = Vec::with_capacity(subs.len());
        for (partition, sub) in subs {
            let ledger = db.state(PartitionedConfig::ledger_space(ENGINE_SPACE, partition))?;
            served.push(Served {
                partition,
                sub,
                ledger: Box::new(ledger),
                token,
            });
        }
        let host = NodeHost::new(shape.block_size, served);
        let node = Self {
            params,
            host,
            backend_counters,
            db,
            tls,
            created: !existed,
            shipper,
            checkpoint_every: (cfg.state.checkpoint_interval_secs > 0)
                .then(|| Duration::from_secs(cfg.state.checkpoint_interval_secs)),
            checkpointer,
        };
        // The roll-back check, then (with the log, at every start, as a single
        // proxy does; `crate::logship` says why) a checkpoint before any round.
        if node.checkpointer.check_backend().await? || node.shipper.is_some() {
            let c = node.checkpoint().await?;
            tracing::info!(epoch = c.epoch, "node checkpoint taken at start");
        }
        Ok(node)
    }

    /// Writes a checkpoint of the node's state database: holds every partition
    /// between rounds ([`NodeHost::quiesce`]: a round staged meanwhile is
    /// repeated by the front), drops the ledgers' answers no front can ask
    /// for again ([`oram_node::HostQuiet::drop_stale_answers`]: the checkpoint
    /// holds one round's answers at most: `params::node_checkpoint_size`),
    /// snapshots, seals and uploads it. With the shipped log on, the partitions
    /// serve again once the snapshot is taken, while it uploads; without, only
    /// once it landed (see `Checkpointer::write` for why), as a single
    /// proxy's.
    ///
    /// Observed by the storage server: one PUT of
    /// `<prefix>/node/<i>/meta/checkpoint`, always of the same size
    /// (conditional, as the volume's: see `Volume::checkpoint`), with this node's
    /// partitions paused while it is taken (and uploaded, without a log).
    pub async fn checkpoint(&self) -> Result<CheckpointInfo, VolumeError> {
        let mut quiet = self.host.quiesce().await?;
        let dropped = quiet.drop_stale_answers().await?;
        tracing::debug!(ledgers = dropped, "answers of earlier rounds dropped");
        // Handed over: let go once the snapshot is taken if the log is
        // shipped, else once the upload landed (`Checkpointer::write`).
        self.checkpointer.write(self.shipper.as_ref(), quiet).await
    }

    /// Serves the partitions to fronts on `listener` until `shutdown`,
    /// checkpointing every [`NodeVolume::checkpoint_every`] (a checkpoint under
    /// way when `shutdown` comes completes first) and deleting what each
    /// checkpoint freed; then [`NodeVolume::finish`]es.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), VolumeError> {
        let (stopped, stopping) = tokio::sync::watch::channel(false);
        let serving = async {
            self.host.serve(listener, self.tls.clone(), shutdown).await;
            let _ = stopped.send(true);
        };
        tokio::join!(serving, self.checkpoint_until(stopping));
        self.finish().await
    }

    /// Checkpoints every [`NodeVolume::checkpoint_every`] and deletes what
    /// each checkpoint freed, until `stopping` turns true (or its sender
    /// drops); a checkpoint under way then completes first. A failed
    /// checkpoint is logged, and the next one tried in turn.
    pub async fn checkpoint_until(&self, mut stopping: tokio::sync::watch::Receiver<bool>) {
        let Some(every) = self.checkpoint_every else {
            return;
        };
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stopping.changed() => return,
            }
            match self.checkpoint().await {
                Ok(c) => {
                    tracing::info!(
                        epoch = c.epoch,
                        bytes = c.bytes,
                        state_bytes = c.state_bytes,
                        log_record = ?c.log_record,
                        "node checkpoint written"
                    );
                    self.collect_freed().await;
                }
                Err(e) => tracing::error!("node checkpoint failed: {e}"),
            }
        }
    }

    /// The end of serving (a clean stop, or a slot handed to another node):
    /// writes back what the partitions have pending and takes a final
    /// checkpoint (the slot's state on the backend, its log shipped). The
    /// storage server sees the write-backs and one checkpoint PUT.
    ///
    /// Nothing is collected here: what the slot's engines superseded stays on
    /// the backend until the next owner's first checkpoint collects it from
    /// its own committed state. (The long chaos run of a rebalancing cluster,
    /// `benches/cluster/chaos_slots.py`, found a clean stop's collection
    /// deleting a level object that the slot's next owner still referred to;
    /// the cause was a front's round cut off half way by the stop, which
    /// `NodeHost::handle` now runs to its end; decision 015.)
    pub async fn finish(&self) -> Result<(), VolumeError> {
        self.host.flush().await?;
        let c = self.checkpoint().await?;
        tracing::info!(
            epoch = c.epoch,
            bytes = c.bytes,
            log_record = ?c.log_record,
            "final node checkpoint written"
        );
        Ok(())
    }

    /// Deletes what the checkpoint that just landed freed (ObliviStore's
    /// superseded levels), as a single proxy does after its checkpoints, a
    /// partition at a time beside the rounds. A failure is logged and loses
    /// nothing: a later checkpoint's collection deletes them.
    async fn collect_freed(&self) {
        match self.host.collect_while_serving().await {
            Ok(n) => tracing::debug!(keys = n, "superseded objects deleted"),
            Err(e) => tracing::warn!("deleting superseded objects failed: {e}"),
        }
    }
}

/// The volume header at `prefix`, waiting at most `wait` for the front to
/// write it.
pub(crate) async fn wait_for_header(
    store: &dyn BlockStore,
    prefix: &str,
    wait: Duration,
) -> Result<VolumeParams, VolumeError> {
    let until = Instant::now() + wait;
    let mut told = false;
    loop {
        if let Some(h) = read_header(store, prefix).await? {
            return Ok(h);
        }
        if Instant::now() >= until {
            return Err(VolumeError::Params(format!(
                "no volume header at backend prefix {prefix:?} after {} s: start the \
                 cluster's front (it creates the volume), or check that this node's [backend] \
                 names the front's",
                wait.as_secs()
            )));
        }
        if !told {
            tracing::info!(
                "waiting for the front to create the volume at backend prefix {prefix:?}"
            );
            told = true;
        }
        tokio::time::sleep(HEADER_POLL).await;
    }
}
