//! `Membership`: nodes registered under leases.
//!
//! A node writes `/<cluster>/nodes/<node-id>` = its address, attached to its own
//! lease, and keeps the lease alive ([`KeptLease`]). When the node stops renewing
//! (it died, was paused or cut off), etcd deletes the registration after the TTL:
//! the live nodes are exactly the registrations present.

use std::time::Duration;

use crate::keys::{check_address, check_name, Layout};
use crate::lease::KeptLease;
use crate::{ClusterError, EtcdClient, WatchOutcome};

/// A live node as registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node id.
    pub id: String,
    /// The address it serves on.
    pub address: String,
    /// The lease its registration is attached to.
    pub lease: i64,
}

/// The registrations of one cluster.
#[derive(Clone, Debug)]
pub struct Membership {
    client: EtcdClient,
    layout: Layout,
}

/// A node's registration: alive while its lease is kept. Dropping it stops the
/// keepalive (the registration lapses after the TTL);
/// [`Registration::deregister`] removes it at once.
#[derive(Debug)]
pub struct Registration {
    node_id: String,
    lease: KeptLease,
}

impl Membership {
    /// The registrations under `layout`'s prefix.
    pub fn new(client: EtcdClient, layout: Layout) -> Self {
        Membership { client, layout }
    }

    /// Registers node `node_id` at `address` under a new lease of `ttl_secs` and
    /// starts keeping it alive. A registration of the same id under another lease
    /// is replaced. etcd sees a lease grant, then a put of
    /// `/<cluster>/nodes/<node-id>` = `address` with the lease, then the renewals.
    pub async fn register(
        &self,
        node_id: &str,
        address: &str,
        ttl_secs: i64,
    ) -> Result<Registration, ClusterError> {
        check_name("node id", node_id)?;
        check_address(address)?;
        let lease = KeptLease::grant(&self.client, ttl_secs).await?;
        self.client
            .put(&self.layout.node(node_id), address.as_bytes(), lease.id())
            .await?;
        Ok(Registration {
            node_id: node_id.to_string(),
            lease,
        })
    }

    /// The live nodes (the registrations present), by id. etcd sees one range
    /// over `/<cluster>/nodes/`.
    pub async fn live_nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        Ok(self.live_nodes_at().await?.0)
    }

    /// [`Membership::live_nodes`] with the revision they were read at (a cursor
    /// for [`Membership::wait_for_change`]).
    pub async fn live_nodes_at(&self) -> Result<(Vec<NodeInfo>, i64), ClusterError> {
        let resp = self
            .client
            .range_prefix(&self.layout.nodes_prefix())
            .await?;
        let mut out = Vec::with_capacity(resp.kvs.len());
        for kv in resp.kvs {
            let malformed = |detail: &str| ClusterError::Malformed {
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                detail: detail.to_string(),
            };
            let id = self
                .layout
                .parse_node(&kv.key)
                .ok_or_else(|| malformed("not a node id"))?;
            let address =
                String::from_utf8(kv.value.clone()).map_err(|_| malformed("address not UTF-8"))?;
            out.push(NodeInfo {
                id,
                address,
                lease: kv.lease,
            });
        }
        Ok((out, resp.header.revision))
    }

    /// Waits up to `wait` for a registration to appear or vanish after revision
    /// `after` (from [`Membership::live_nodes_at`]). etcd sees a watch of
    /// `/<cluster>/nodes/` from `after + 1`.
    pub async fn wait_for_change(
        &self,
        after: i64,
        wait: Duration,
    ) -> Result<WatchOutcome, ClusterError> {
        let prefix = self.layout.nodes_prefix();
        self.client
            .watch_once(&prefix, &crate::wire::prefix_end(&prefix), after + 1, wait)
            .await
    }
}

impl Registration {
    /// The node id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The lease the registration lives under: its [`KeptLease::state`] turns
    /// [`LeaseState::Lost`](crate::LeaseState::Lost), and [`KeptLease::lost`] returns, when the
    /// registration is lost.
    pub fn lease(&self) -> &KeptLease {
        &self.lease
    }

    /// Removes the registration now by revoking its lease. etcd sees a revoke.
    pub async fn deregister(self) -> Result<(), ClusterError> {
        self.lease.revoke().await
    }
}
