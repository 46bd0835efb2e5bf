//! A volume served by several machines (`[cluster]`): which role this process
//! plays, where the front finds the nodes, and which partitions each node owns.
//!
//! * `role = "single"` (the default): the volume on one machine, exactly as
//!   without this section.
//! * `role = "front"`: this process serves S3 and Swift, keeps the object
//!   index, the partition framework's map and eviction cache, and runs the
//!   rounds; every partition is served by a node over mutual TLS
//!   ([`oram_node::RemotePlacement`]). It holds the volume's backend lease and
//!   writes the header, checkpoints and shipped log, as a single proxy does.
//! * `role = "node"`: this process serves its partitions' sub-engines
//!   ([`crate::node::NodeVolume`]): their trusted state in its own `state.redb`, sealing, and
//!   every backend request for them. It creates its data directory from the
//!   volume header on the backend (authenticated with the master key), so a
//!   node needs only the configuration, the key and its TLS identity.
//!
//! **Membership**: `nodes` lists every node's address in the same order on
//! every member, and node `i` owns the *slot* `i`, the partitions `p` with
//! `p % nodes.len() == i`. Without `etcd` that is all (static membership,
//! owner token [`STATIC_TOKEN`], nothing but the operator fencing a node).
//! With `etcd` ([`crate::coord`]) each slot is owned under an etcd lease with a
//! fencing token, and a standby node takes over a dead node's slot.
//!
//! **More slots than nodes** (`slots`, with etcd only): slot `j` holds the
//! partitions `p % slots == j` and starts on node `j % nodes.len()`; a node
//! process serves a set of slots and the members rebalance them while serving
//! ([`crate::node::member`], decision 015): a node that joins takes slots
//! over, one at a time, from the members holding more than their share.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use oram_blockstore::StoreError;
use oram_engine::{Oram, OramError, Parts};
use oram_node::{ClusterTls, NodeLink, RemotePlacement, Timeouts};
use serde::{Deserialize, Serialize};

use crate::coord::{Coordinator, FrontLeadership};
use crate::engines::EngineConfig;
use crate::VolumeError;

/// The owner token every node holds its partitions under while membership is
/// static (a front and a node name the same one).
pub const STATIC_TOKEN: u64 = 1;

/// What this process is in a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The whole volume in this process (no cluster).
    #[default]
    Single,
    /// S3, Swift, the object layer and the rounds; partitions on the nodes.
    Front,
    /// Serves partitions to the front.
    Node,
}

impl Role {
    /// The role's name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Role::Single => "single",
            Role::Front => "front",
            Role::Node => "node",
        }
    }
}

/// `[cluster]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `single` (default), `front` or `node`.
    pub role: Role,
    /// Every node's address (`host:port`), in the same order on every member.
    pub nodes: Vec<String>,
    /// This node's index in `nodes` (role `node`).
    pub node: usize,
    /// The address this node listens on (default: its entry in `nodes`).
    pub listen: String,
    /// The address a standby (or a joining member) is reached at, registered
    /// in etcd (default: `listen`): another when a relay or NAT is between
    /// the front and it.
    pub advertise: String,
    /// The directory of this member's TLS identity: `ca.pem`, `member.pem`,
    /// `member.key` (`oram-proxy cluster certs` makes them); default
    /// `<data_dir>/cluster`.
    pub tls_dir: Option<PathBuf>,
    /// Seconds a starting member waits for the others: a node for the volume
    /// header the front writes, a front for its nodes.
    pub wait_secs: u64,
    /// The client URLs of the etcd cluster that coordinates the members
    /// (`http://host:port`); empty: static membership.
    pub etcd: Vec<String>,
    /// The cluster's name: the prefix of its keys in etcd.
    pub name: String,
    /// This member's id in etcd (default `node<i>`, or `front`).
    pub id: String,
    /// The TTL of a node's registration in etcd, in seconds: a node silent this
    /// long is taken as dead and its slot taken over by a standby.
    pub lease_secs: u64,
    /// With etcd, a member that waits to replace another: a node without a
    /// slot of its own takes over a dead node's slot; a front with an empty
    /// data directory becomes the active front when the active one's lease
    /// lapses, rebuilt from the backend (`recover`).
    pub standby: bool,
    /// With etcd, the number of slots (0: one per entry of `nodes`): more
    /// slots than nodes lets the members rebalance while serving (a node that
    /// joins takes some over). Fixed when the cluster first starts (recorded
    /// in etcd; a member configured otherwise is refused).
    pub slots: u32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            role: Role::Single,
            nodes: Vec::new(),
            node: 0,
            listen: String::new(),
            advertise: String::new(),
            tls_dir: None,
            wait_secs: 120,
            etcd: Vec::new(),
            name: "oram".into(),
            id: String::new(),
            lease_secs: 5,
            standby: false,
            slots: 0,
        }
    }
}

impl ClusterConfig {
    /// Whether the volume is served by a cluster (this process a front or a
    /// node).
    pub fn is_cluster(&self) -> bool {
        self.role != Role::Single
    }

    /// The directory of this member's TLS identity.
    pub fn tls_dir(&self, data_dir: &Path) -> PathBuf {
        self.tls_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("cluster"))
    }

    /// This member's TLS identity.
    pub fn tls(&self, data_dir: &Path) -> Result<ClusterTls, VolumeError> {
        let dir = self.tls_dir(data_dir);
        ClusterTls::from_dir(&dir).map_err(|e| {
            VolumeError::Config(format!(
                "{e} (a cluster member needs its identity in {}: make them with `oram-proxy \
                 cluster certs`)",
                dir.display()
            ))
        })
    }

    /// The address a node listens on.
    pub fn node_listen(&self) -> &str {
        if self.listen.is_empty() {
            self.nodes.get(self.node).map_or("", String::as_str)
        } else {
            &self.listen
        }
    }

    /// The address a member registers in etcd: its entry in `nodes`, or for
    /// a standby `advertise` (default `listen`).
    pub fn advertised(&self) -> String {
        if !self.standby {
            self.nodes.get(self.node).cloned().unwrap_or_default()
        } else if self.advertise.is_empty() {
            self.listen.clone()
        } else {
            self.advertise.clone()
        }
    }

    /// How long a starting member waits for the others.
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.wait_secs)
    }

    /// Whether etcd coordinates the members (slots owned under leases, failover
    /// to standbys) rather than the static list alone.
    pub fn coordinated(&self) -> bool {
        !self.etcd.is_empty()
    }

    /// The number of slots: `slots`, or one per entry of `nodes`.
    pub fn slot_count(&self) -> usize {
        if self.slots > 0 {
            self.slots as usize
        } else {
            self.nodes.len()
        }
    }

    /// Whether this member serves a set of slots that the members rebalance
    /// (`slots` set): [`crate::node::member`].
    pub fn rebalances(&self) -> bool {
        self.slots > 0
    }

    /// The slots node `n` of `nodes` starts with: `j % nodes.len() == n`.
    pub fn home_slots(&self, n: usize) -> Vec<u32> {
        let count = self.nodes.len().max(1);
        (0..self.slot_count() as u32)
            .filter(|j| *j as usize % count == n)
            .collect()
    }

    /// The cluster's coordinator in etcd (`etcd`, `name`, [`Self::slot_count`]
    /// slots).
    pub fn coordinator(&self) -> Result<Coordinator, VolumeError> {
        let slots = u32::try_from(self.slot_count())
            .map_err(|_| VolumeError::Config("too many cluster.nodes".into()))?;
        Coordinator::new(&self.etcd, &self.name, slots)
    }

    /// Becomes the cluster's active front as this member ([`crate::coord::lead`]),
    /// waiting as a standby while another front is active.
    pub async fn lead(&self) -> Result<FrontLeadership, VolumeError> {
        crate::coord::lead(&self.etcd, &self.name, &self.member_id(), self.lease_secs).await
    }

    /// This member's id in etcd.
    pub fn member_id(&self) -> String {
        if !self.id.is_empty() {
            self.id.clone()
        } else if self.role == Role::Front {
            "front".into()
        } else {
            format!("node{}", self.node)
        }
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if !self.is_cluster() {
            return Ok(());
        }
        if self.nodes.is_empty() {
            return Err(format!(
                "cluster.role = \"{}\" needs cluster.nodes: every node's host:port, in the \
                 same order on every member",
                self.role.name()
            ));
        }
        for (i, a) in self.nodes.iter().enumerate() {
            if a.rsplit_once(':')
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
            {
                return Err(format!("cluster.nodes[{i}] = {a:?}: expected host:port"));
            }
            if self.nodes[..i].contains(a) {
                return Err(format!("cluster.nodes lists {a:?} twice"));
            }
        }
        if !self.advertise.is_empty() {
            if let Err(e) = oram_cluster::keys::check_address(&self.advertise) {
                return Err(format!("cluster.advertise: {e}"));
            }
            if !self.standby {
                return Err(
                    "cluster.advertise is a standby's (a node with a slot of its own is \
                     reached at its entry in cluster.nodes)"
                        .into(),
                );
            }
        }
        if self.slots > 0 {
            if !self.coordinated() {
                return Err(format!(
                    "cluster.slots = {} needs cluster.etcd: the members rebalance slots \
                     through etcd",
                    self.slots
                ));
            }
            if (self.slots as usize) < self.nodes.len() {
                return Err(format!(
                    "cluster.slots = {} is fewer than cluster.nodes ({}): every node starts \
                     with a slot at least",
                    self.slots,
                    self.nodes.len()
                ));
            }
        }
        if self.coordinated() {
            if let Err(e) = oram_cluster::keys::check_name("cluster name", &self.name)
                .and_then(|()| oram_cluster::keys::check_name("member id", &self.member_id()))
            {
                return Err(format!("[cluster]: {e}"));
            }
            if self.lease_secs < 2 {
                return Err(format!(
                    "cluster.lease_secs = {}: at least 2 (etcd's minimum TTL; 5 or more rides \
                     through an etcd leader's death)",
                    self.lease_secs
                ));
            }
        }
        if self.standby {
            if !self.coordinated() {
                return Err(
                    "cluster.standby = true needs cluster.etcd: a standby node takes \
                            over a dead node's slot, a standby front a dead front's place"
                        .into(),
                );
            }
            if self.role == Role::Front {
                if self.id.is_empty() {
                    return Err(
                        "a standby front needs cluster.id (its own name in etcd; the \
                                active front defaults to \"front\")"
                            .into(),
                    );
                }
                return Ok(());
            }
            if self.listen.is_empty() {
                return Err(
                    "a standby node needs cluster.listen (the address it serves a \
                            slot on once it takes one over)"
                        .into(),
                );
            }
            if self.id.is_empty() {
                return Err(
                    "a standby node needs cluster.id (its own name in etcd; the \
                            slots' nodes default to node<i>)"
                        .into(),
                );
            }
            return Ok(());
        }
        if self.role == Role::Node && self.node >= self.nodes.len() {
            return Err(format!(
                "cluster.node = {} but cluster.nodes has {} entries (the index of this node, \
                 from 0)",
                self.node,
                self.nodes.len()
            ));
        }
        Ok(())
    }

    /// Refuses an engine without partitions for a cluster role (checked with
    /// the configuration, before anything is written).
    pub fn check_engine(&self, engine: &EngineConfig, prefix: &str) -> Result<(), String> {
        if self.is_cluster()
            && engine
                .kind
                .settings()
                .partitions(&engine.shape(prefix))
                .is_none()
        {
            return Err(format!(
                "cluster.role = \"{}\" needs an engine with partitions to spread over the \
                 nodes (engine.kind = \"oblivistore\" or \"curious\"), not {:?}",
                self.role.name(),
                engine.kind.name()
            ));
        }
        Ok(())
    }

    /// The partitions slot `n` holds, of `partitions`.
    pub fn partitions_of(&self, n: usize, partitions: u32) -> Vec<u32> {
        let count = self.slot_count().max(1);
        (0..partitions)
            .filter(|p| *p as usize % count == n)
            .collect()
    }

    /// The front's placement: every partition on the node that owns it.
    pub fn placement(
        &self,
        data_dir: &Path,
        partitions: u32,
        block_size: usize,
    ) -> Result<RemotePlacement, VolumeError> {
        let tls = self.tls(data_dir)?;
        let mut place = RemotePlacement::new();
        for (n, addr) in self.nodes.iter().enumerate() {
            let link = NodeLink::new(addr.clone(), tls.clone(), block_size, Timeouts::default());
            for p in self.partitions_of(n, partitions) {
                place.own(p, link.clone(), STATIC_TOKEN);
            }
        }
        Ok(place)
    }
}

/// Builds a front's engine: the volume's (`engine` under backend prefix
/// `prefix`), with every partition on the node `cluster` names for it (TLS
/// identity under `data_dir`): with etcd, its slot's live owner, followed as
/// it moves ([`crate::coord`]); otherwise the static list's.
pub(crate) async fn build_front(
    cluster: &ClusterConfig,
    engine: &EngineConfig,
    prefix: &str,
    data_dir: &Path,
    parts: Parts,
) -> Result<Arc<dyn Oram>, VolumeError> {
    let settings = engine.kind.settings();
    let shape = engine.shape(prefix);
    let partitions = settings.partitions(&shape).ok_or_else(|| {
        VolumeError::Config(format!(
            "the {} engine has no partitions to serve on nodes",
            engine.kind.name()
        ))
    })?;
    let place = if cluster.coordinated() {
        crate::coord::keep_routes(
            cluster.coordinator()?,
            cluster.tls(data_dir)?,
            cluster.wait(),
            partitions,
            shape.block_size,
        )
        .await?
    } else {
        cluster.placement(data_dir, partitions, shape.block_size)?
    };
    Ok(settings.build_placed(&shape, parts, &place)?)
}

/// A front's first flush (which resends what an earlier run journaled),
/// repeated while nodes cannot be reached, for at most `cluster.wait_secs`:
/// the front may start before its nodes.
pub(crate) async fn flush_waiting(
    cfg: &ClusterConfig,
    engine: &Arc<dyn Oram>,
) -> Result<(), VolumeError> {
    let until = std::time::Instant::now() + cfg.wait();
    let mut told = false;
    loop {
        match engine.flush().await {
            Ok(()) => return Ok(()),
            Err(OramError::Store(StoreError::Unavailable(e)))
                if std::time::Instant::now() < until =>
            {
                if !told {
                    tracing::info!("waiting for the cluster's nodes: {e}");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The `[cluster]` part of `oram-proxy example-config`.
pub fn example() -> String {
    r#"[cluster]
# "single" (this process serves the whole volume: the default), "front" (S3,
# Swift and the rounds; partitions on the nodes) or "node" (serves partitions to
# the front). A cluster needs the oblivistore or curious engine, a backend every
# member reaches (S3, or a directory they share) and `oram-proxy cluster certs`.
role = "single"
# Every node's host:port, in the same order on every member; node i owns the
# partitions p with p % len(nodes) == i.
nodes = []
# This node's index in `nodes` (role "node") and the address it listens on
# (default: its entry in `nodes`).
node = 0
listen = ""
# The address a standby registers in etcd, when the front reaches it at another
# than `listen` (a relay, NAT); default `listen`.
advertise = ""
# This member's TLS identity (ca.pem, member.pem, member.key); default
# <data_dir>/cluster.
# tls_dir = "/etc/oram-proxy/cluster"
# Seconds a starting member waits for the others.
wait_secs = 120
# etcd's client URLs: each node then owns its slot under a lease and a fencing
# token, and a standby takes over a dead node's slot (docs/cluster.md). Empty:
# static membership.
etcd = []
# The prefix of the cluster's keys in etcd; this member's id there (default
# node<i>, or front); a node's lease in seconds.
name = "oram"
# id = "spare1"
lease_secs = 5
# With etcd: a node without a slot of its own, waiting to take over a dead
# node's (its own id and listen, an empty data directory); or a front waiting
# to replace the active one (its own id, an empty data directory, the shipped
# log on). With `slots`: a member that joins with no slots and is handed its
# share.
standby = false
# With etcd: the number of slots (0: one per entry of `nodes`). More slots than
# nodes lets machines join while serving and be handed slots; fixed when the
# cluster first starts (docs/cluster.md, "Adding machines while serving").
slots = 0
"#
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(role: Role, nodes: &[&str]) -> ClusterConfig {
        ClusterConfig {
            role,
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            ..ClusterConfig::default()
        }
    }

    #[test]
    fn a_cluster_needs_its_nodes_named_once_each() {
        assert!(cfg(Role::Single, &[]).validate().is_ok());
        let e = cfg(Role::Front, &[]).validate().unwrap_err();
        assert!(e.contains("needs cluster.nodes"), "{e}");
        let e = cfg(Role::Front, &["127.0.0.1"]).validate().unwrap_err();
        assert!(e.contains("expected host:port"), "{e}");
        let e = cfg(Role::Front, &["a:1", "a:1"]).validate().unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let mut n = cfg(Role::Node, &["a:1", "b:2"]);
        n.node = 2;
        assert!(n.validate().unwrap_err().contains("cluster.node = 2"));
        n.node = 1;
        assert!(n.validate().is_ok());
        assert_eq!(n.node_listen(), "b:2");
    }

    #[test]
    fn etcd_settings_and_standbys_are_checked() {
        let mut n = cfg(Role::Node, &["a:1", "b:2"]);
        n.node = 1;
        assert_eq!(n.member_id(), "node1");
        assert!(!n.coordinated());
        n.standby = true;
        let e = n.validate().unwrap_err();
        assert!(e.contains("needs cluster.etcd"), "{e}");
        n.etcd = vec!["http://127.0.0.1:2379".into()];
        assert!(n.coordinated());
        let e = n.validate().unwrap_err();
        assert!(e.contains("cluster.listen"), "{e}");
        n.listen = "127.0.0.1:7000".into();
        let e = n.validate().unwrap_err();
        assert!(e.contains("cluster.id"), "{e}");
        n.id = "spare1".into();
        assert!(n.validate().is_ok());
        assert_eq!(n.member_id(), "spare1");
        n.id = "spare 1".into();
        assert!(n.validate().unwrap_err().contains("[cluster]"));
        n.id = "spare1".into();
        n.lease_secs = 1;
        assert!(n.validate().unwrap_err().contains("lease_secs = 1"));
        n.lease_secs = 5;
        n.name = "a/b".into();
        assert!(n.validate().unwrap_err().contains("[cluster]"));

        let mut f = cfg(Role::Front, &["a:1"]);
        f.etcd = vec!["127.0.0.1:2379".into()];
        assert_eq!(f.member_id(), "front");
        assert!(f.validate().is_ok());
        f.standby = true;
        assert!(f
            .validate()
            .unwrap_err()
            .contains("standby front needs cluster.id"));
        f.id = "front2".into();
        assert!(f.validate().is_ok());
    }

    #[test]
    fn a_cluster_needs_an_engine_with_partitions() {
        let mut engine = EngineConfig::default();
        engine.set_kind("path").unwrap();
        let front = cfg(Role::Front, &["a:1"]);
        let e = front.check_engine(&engine, "vol0").unwrap_err();
        assert!(e.contains("oblivistore"), "{e}");
        assert!(cfg(Role::Single, &[]).check_engine(&engine, "vol0").is_ok());
        engine.set_kind("oblivistore").unwrap();
        assert!(front.check_engine(&engine, "vol0").is_ok());
    }

    #[test]
    fn every_partition_has_exactly_one_node() {
        let c = cfg(Role::Front, &["a:1", "b:2", "c:3"]);
        let mut all: Vec<u32> = (0..3).flat_map(|n| c.partitions_of(n, 64)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..64).collect::<Vec<_>>());
        assert_eq!(c.partitions_of(1, 7), vec![1, 4]);
    }
}
