//! A cluster node's volume: its data directory (made from the backend's volume
//! header on first start), its state database and the sub-engines of the
//! partitions it owns, served to the front ([`oram_node::NodeHost`]); and the
//! cluster's certificates ([`make_certs`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use oram_blockstore::{Accounting, BlockStore};
use oram_engine::Parts;
use oram_node::{ClusterTls, NodeHost, Served};
use oram_partition::PartitionedConfig;
use oram_statedb::Db;
use tokio::net::TcpListener;

mod certs;

pub use certs::make_certs;

use crate::backend::{open_store, VolumeHooks};
use crate::backend_record;
use crate::cluster::{Role, STATIC_TOKEN};
use crate::config::VolumeConfig;
use crate::datadir;
use crate::fsutil::blocking;
use crate::header::{header_is_authentic, read_header};
use crate::key::KeySource;
use crate::params::VolumeParams;
use crate::volume::{Opened, ENGINE_SPACE};
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
}

impl NodeVolume {
    /// Opens node `cfg.cluster.node`'s share of the volume: on a first start,
    /// waits (at most `cluster.wait_secs`) for the front to write the volume
    /// header, authenticates it with the master key and records it as
    /// `volume.toml`; then builds the sub-engines of the partitions this node
    /// owns over its own `state.redb`. Takes no backend lease (the front holds
    /// the volume's). The caller holds the data directory's lock.
    pub async fn open(cfg: &VolumeConfig, hooks: &VolumeHooks) -> Result<Self, VolumeError> {
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
        let which = c.partitions_of(c.node, partitions);
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
                token: STATIC_TOKEN,
            });
        }
        let host = NodeHost::new(shape.block_size, served);
        Ok(Self {
            params,
            host,
            backend_counters,
            db,
            tls,
            created: !existed,
        })
    }

    /// Serves the partitions to fronts on `listener` until `shutdown`, then
    /// writes back what they have pending.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), VolumeError> {
        self.host.serve(listener, self.tls.clone(), shutdown).await;
        self.host.flush().await?;
        Ok(())
    }
}

/// The volume header at `prefix`, waiting at most `wait` for the front to
/// write it.
async fn wait_for_header(
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
