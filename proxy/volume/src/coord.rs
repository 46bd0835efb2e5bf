//! A cluster coordinated by etcd (`[cluster] etcd`): the nodes' *slots* owned
//! under leases, with fencing tokens, and failover of a dead node's slot to a
//! standby.
//!
//! A volume has as many **slots** as `cluster.nodes` has entries, fixed at
//! creation; slot `i` holds the partitions `p % slots == i` and its state on
//! the backend under `<prefix>/node/<i>/` (decision 012). etcd holds, through
//! the `oram-cluster` crate:
//!
//! * `/<name>/nodes/<id>` = the member's address, under its lease of
//!   `lease_secs` ([`Membership`]);
//! * `/<name>/owners/<slot>` = the id of the node serving the slot. Claimed
//!   with a compare on its mod_revision; the new mod_revision is the owner's
//!   **fencing token**, which the node serves its partitions under and the front
//!   checks on every answer ([`oram_node::Route`]).
//!
//! A node with a slot of its own (`cluster.node = i`) registers and claims slot
//! `i` at start, and refuses to start if another node has taken the slot over
//! (its data directory is then stale). A **standby** (`cluster.standby`)
//! registers, then watches for a slot whose owner's registration has lapsed,
//! claims it, rebuilds the slot's state from the backend (the restore of
//! `recover`, [`crate::node::recover_node`]) and serves it. The front follows
//! the owner keys (`keep_routes`) and sends each partition's requests to its
//! slot's live owner, refusing any answer under another token.
//!
//! **Fencing a node that lost its lease** (a paused process, a cut link): its
//! backend writes go through a [`FencedStore`] ([`etcd_fence`]), which refuses every PUT and
//! DELETE from a margin (the node uses a fifth of the TTL) before the lease's
//! local deadline, and abandons one under way then. The local deadline counts
//! from when the last renewal was *sent*, so it passes no later than etcd's
//! expiry, before a standby can claim the slot: no write of the node starts
//! after that (a request already handed to the operating system may still
//! complete). The backend's conditional checkpoint PUT refuses its checkpoint
//! besides, and the front refuses its answers (an old token). Its process
//! then stops.
//!
//! What etcd sees: the member ids and addresses, slot numbers, lease ids and
//! the timing of registrations, claims and renewals; never a block id, a
//! position or an object name.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use oram_blockstore::{BlockStore, StoreError};
use oram_cluster::{
    Claim, EtcdClient, FrontElection, Layout, LeaseDeadline, Membership, Ownership,
};
pub use oram_cluster::{FrontLeadership, Registration};
use oram_node::{ClusterTls, NodeLink, RemotePlacement, Route, Timeouts};

use crate::fence::{FencedStore, WriteFence};

use crate::VolumeError;

/// How often the front reads the owner keys, and a standby looks for a dead
/// slot: one range of the owners and one of the registrations each time.
pub const POLL: Duration = Duration::from_millis(250);

/// How long the front's rounds ride out a partition whose node answers that it
/// is unavailable before failing the client's request: a slot handed between
/// members (about a second), or a dead node's slot taken over (its lease's TTL,
/// 5 s by default, and the take-over's restore).
pub const RIDE_OUT: Duration = Duration::from_secs(10);

/// The per-request timeout of the etcd client.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

fn cluster_error(e: oram_cluster::ClusterError) -> VolumeError {
    VolumeError::Config(format!("etcd: {e}"))
}

/// A member's view of the cluster's keys in etcd.
#[derive(Clone, Debug)]
pub struct Coordinator {
    client: EtcdClient,
    layout: Layout,
    membership: Membership,
    ownership: Ownership,
    slots: u32,
}

impl Coordinator {
    /// The coordinator of the cluster named `name` in the etcd cluster whose
    /// client URLs are `etcd`, with `slots` slots. Connects lazily.
    pub fn new(etcd: &[String], name: &str, slots: u32) -> Result<Self, VolumeError> {
        let client = EtcdClient::new(etcd, ETCD_TIMEOUT).map_err(cluster_error)?;
        let layout = Layout::new(name).map_err(cluster_error)?;
        Ok(Self {
            membership: Membership::new(client.clone(), layout.clone()),
            ownership: Ownership::new(client.clone(), layout.clone(), slots),
            client,
            layout,
            slots,
        })
    }

    /// Registers this member (`id` at `address`) under a lease of `ttl_secs`,
    /// kept alive in the background. etcd sees a lease grant, a put of
    /// `/<name>/nodes/<id>`, then a renewal every third of the TTL.
    pub async fn register(
        &self,
        id: &str,
        address: &str,
        ttl_secs: u64,
    ) -> Result<Registration, VolumeError> {
        self.membership
            .register(id, address, ttl_secs.min(i64::MAX as u64) as i64)
            .await
            .map_err(cluster_error)
    }

    async fn live(&self) -> Result<Vec<oram_cluster::NodeInfo>, VolumeError> {
        self.membership.live_nodes().await.map_err(cluster_error)
    }

    /// Claims slot `slot` for node `me`, which serves it from its own data
    /// directory: returns the fencing token. Refused when another node owns
    /// the slot (a standby took it over: this node's state is stale).
    pub async fn claim_own_slot(&self, me: &str, slot: u32) -> Result<u64, VolumeError> {
        for _ in 0..16 {
            let expected = match self.ownership.owner(slot).await.map_err(cluster_error)? {
                None => 0,
                Some(o) if o.node_id == me => o.token.revision,
                Some(o) => {
                    return Err(VolumeError::Config(format!(
                        "slot {slot} is served by node {:?} since it took the slot over \
                         (token {}): this node's data directory is behind it. Start this \
                         machine as a standby instead (cluster.standby = true, its own \
                         cluster.id and cluster.listen, an empty data directory)",
                        o.node_id, o.token.revision
                    )))
                }
            };
            match self
                .ownership
                .claim(slot, me, expected)
                .await
                .map_err(cluster_error)?
            {
                Claim::Claimed(t) => return Ok(token_of(t.revision)),
                Claim::Conflict(_) => continue,
            }
        }
        Err(VolumeError::Config(format!(
            "slot {slot}: its owner key kept changing while this node claimed it"
        )))
    }

    /// One look for a slot whose owner is dead (its registration lapsed):
    /// claims the first such slot for `me` and returns it with the fencing
    /// token. `None`: every owned slot's node is alive (or another standby
    /// claimed it first). A slot never claimed is its own node's to start.
    pub async fn take_dead_slot(&self, me: &str) -> Result<Option<(u32, u64)>, VolumeError> {
        // The owners first: a node registers before it claims, so an owner
        // read here that is not live in the later read has lost its lease
        // (read the other way, a node starting in between would look dead).
        let owners = self.ownership.owners().await.map_err(cluster_error)?;
        let live = self.live().await?;
        for (slot, owner) in owners.into_iter().enumerate() {
            let Some(o) = owner else { continue };
            if live.iter().any(|n| n.id == o.node_id) {
                continue;
            }
            let slot = slot as u32;
            if let Claim::Claimed(t) = self
                .ownership
                .claim(slot, me, o.token.revision)
                .await
                .map_err(cluster_error)?
            {
                return Ok(Some((slot, token_of(t.revision))));
            }
        }
        Ok(None)
    }

    /// Every slot's live owner: its address and fencing token (`None`: no
    /// owner, or its owner's registration lapsed).
    pub async fn table(&self) -> Result<Vec<Option<(String, u64)>>, VolumeError> {
        let owners = self.ownership.owners().await.map_err(cluster_error)?;
        let live = self.live().await?;
        Ok(owners
            .into_iter()
            .map(|o| {
                let o = o?;
                let n = live.iter().find(|n| n.id == o.node_id)?;
                Some((n.address.clone(), token_of(o.token.revision)))
            })
            .collect())
    }

    /// The number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Checks that the cluster's slot count in etcd is this member's (the
    /// first member to start records it): a member configured with another
    /// count would serve the wrong partitions.
    pub async fn agree_slots(&self) -> Result<(), VolumeError> {
        let agreed = self.ownership.agreed_count().await.map_err(cluster_error)?;
        if agreed == self.slots {
            return Ok(());
        }
        Err(VolumeError::Config(format!(
            "this member's configuration has {} slots but the cluster was started with {agreed} \
             (cluster.slots, or the length of cluster.nodes): the slot count is fixed when a \
             cluster first starts",
            self.slots
        )))
    }

    /// The live members: `(id, address)`, by id. etcd sees one range of the
    /// registrations.
    pub async fn members(&self) -> Result<Vec<(String, String)>, VolumeError> {
        let mut m: Vec<(String, String)> = self
            .live()
            .await?
            .into_iter()
            .map(|n| (n.id, n.address))
            .collect();
        m.sort();
        Ok(m)
    }

    /// The active front's id, if one holds the front's key. etcd sees one
    /// range of it.
    pub async fn front(&self) -> Result<Option<String>, VolumeError> {
        let election = FrontElection::new(self.client.clone(), self.layout.clone());
        Ok(election
            .active()
            .await
            .map_err(cluster_error)?
            .map(|(id, _)| id))
    }

    /// Every slot's owner key and the ids of the live members, read in that
    /// order (an owner not live in the later read has lost its lease).
    pub async fn view(&self) -> Result<SlotView, VolumeError> {
        let owners = self.ownership.owners().await.map_err(cluster_error)?;
        let live = self.live().await?.into_iter().map(|n| n.id).collect();
        Ok(SlotView { owners, live })
    }

    /// Claims `slot` for `me` if its owner key was last written at revision
    /// `expected` (0: never claimed): the fencing token, or `None` when the key
    /// changed meanwhile. etcd sees one transaction.
    pub async fn claim(
        &self,
        slot: u32,
        me: &str,
        expected: i64,
    ) -> Result<Option<u64>, VolumeError> {
        match self
            .ownership
            .claim(slot, me, expected)
            .await
            .map_err(cluster_error)?
        {
            Claim::Claimed(t) => Ok(Some(token_of(t.revision))),
            Claim::Conflict(_) => Ok(None),
        }
    }

    /// Releases `slot`, held under `token`, for another member to claim
    /// (after its final checkpoint): `false` if the owner key changed since
    /// (this member's lease lapsed and another took it). etcd sees one
    /// transaction.
    pub async fn release(&self, slot: u32, token: u64) -> Result<bool, VolumeError> {
        let rev = i64::try_from(token).unwrap_or(i64::MAX);
        self.ownership
            .release(slot, rev)
            .await
            .map_err(cluster_error)
    }
}

/// What [`Coordinator::view`] read.
#[derive(Clone, Debug)]
pub struct SlotView {
    /// Each slot's owner key (`None`: never claimed; a released slot has an
    /// empty owner id).
    pub owners: Vec<Option<oram_cluster::OwnerRecord>>,
    /// The ids of the members whose registrations are live.
    pub live: Vec<String>,
}

/// Becomes the active front of cluster `name` (etcd at `etcd`) as `me`:
/// campaigns for `/<name>/front` under a lease of `lease_secs`, waiting as a
/// standby while another front holds it. etcd sees a lease grant, a
/// transaction per attempt and watches of the key while waiting, then the
/// renewals.
pub async fn lead(
    etcd: &[String],
    name: &str,
    me: &str,
    lease_secs: u64,
) -> Result<FrontLeadership, VolumeError> {
    let client = EtcdClient::new(etcd, ETCD_TIMEOUT).map_err(cluster_error)?;
    let layout = Layout::new(name).map_err(cluster_error)?;
    let election = FrontElection::new(client, layout);
    let ttl = lease_secs.min(i64::MAX as u64) as i64;
    let mut told = false;
    loop {
        if let Some(l) = election
            .campaign(me, ttl, Duration::from_secs(30))
            .await
            .map_err(cluster_error)?
        {
            return Ok(l);
        }
        if !told {
            let active = election.active().await.ok().flatten();
            tracing::info!(active = ?active.map(|a| a.0), "standing by: another front is active");
            told = true;
        }
    }
}

/// A token from an owner key's revision (etcd's revisions start at 1).
fn token_of(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

/// The front's placement with etcd: waits (at most `wait`) until every slot
/// of `coord` has a live owner, puts each partition on its slot's route (links
/// with the front's identity `tls`), and keeps the routes following the owner
/// keys in the background (every [`POLL`]) for as long as the routes are in
/// use.
pub(crate) async fn keep_routes(
    coord: Coordinator,
    tls: ClusterTls,
    wait: Duration,
    partitions: u32,
    block_size: usize,
) -> Result<RemotePlacement, VolumeError> {
    coord.agree_slots().await?;
    let until = Instant::now() + wait;
    let mut told = false;
    let table = loop {
        let table = match coord.table().await {
            Ok(t) if t.iter().all(Option::is_some) => break t,
            Ok(t) => format!(
                "slots without a live node: {:?}",
                t.iter()
                    .enumerate()
                    .filter(|(_, o)| o.is_none())
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
            ),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= until {
            return Err(VolumeError::Config(format!(
                "the cluster's nodes did not all register in etcd within {} s ({table})",
                wait.as_secs()
            )));
        }
        if !told {
            tracing::info!("waiting for the cluster's nodes in etcd: {table}");
            told = true;
        }
        tokio::time::sleep(POLL).await;
    };
    let link = move |addr: &str| {
        NodeLink::new(
            addr.to_string(),
            tls.clone(),
            block_size,
            Timeouts::default(),
        )
    };
    let routes: Vec<(Arc<Route>, String)> = table
        .into_iter()
        .flatten()
        .map(|(addr, token)| (Route::new(link(&addr), token), addr))
        .collect();
    let mut place = RemotePlacement::new();
    place.ride_out(RIDE_OUT);
    for p in 0..partitions {
        place.route(p, routes[(p % coord.slots()) as usize].0.clone());
    }
    let weak: Vec<(Weak<Route>, String, u64)> = routes
        .iter()
        .map(|(r, a)| (Arc::downgrade(r), a.clone(), r.get().1))
        .collect();
    tokio::spawn(follow(coord, weak, link));
    Ok(place)
}

/// Moves each slot's route to its owner as etcd names it, until no route is
/// in use any more.
async fn follow(
    coord: Coordinator,
    mut routes: Vec<(Weak<Route>, String, u64)>,
    link: impl Fn(&str) -> Arc<NodeLink> + Send + 'static,
) {
    let mut failing = false;
    loop {
        tokio::time::sleep(POLL).await;
        if routes.iter().all(|(r, _, _)| r.strong_count() == 0) {
            return;
        }
        let table = match coord.table().await {
            Ok(t) => {
                failing = false;
                t
            }
            Err(e) => {
                if !failing {
                    tracing::warn!("reading the slots' owners from etcd: {e}");
                    failing = true;
                }
                continue;
            }
        };
        for (slot, ((route, addr, token), now)) in routes.iter_mut().zip(table).enumerate() {
            let Some((a, t)) = now else { continue };
            if (&a, t) == (&*addr, *token) {
                continue;
            }
            let Some(r) = route.upgrade() else { continue };
            tracing::info!(slot, node = %a, token = t, "slot moved: its partitions' requests go there");
            r.set(link(&a), t);
            *addr = a;
            *token = t;
        }
    }
}

/// A node's etcd lease as a [`WriteFence`]: writes are refused
/// (`StoreError::Fenced`) from `margin` before the lease's local deadline on,
/// and one under way is abandoned then. The deadline is checked by the writer
/// itself, so a process resumed after a pause sends nothing before it has
/// looked.
struct EtcdFence {
    deadline: LeaseDeadline,
    margin: Duration,
}

impl EtcdFence {
    fn until(&self) -> tokio::time::Instant {
        self.deadline
            .get()
            .checked_sub(self.margin)
            .unwrap_or_else(tokio::time::Instant::now)
    }
}

#[async_trait]
impl WriteFence for EtcdFence {
    async fn admit(&self) -> Result<(), StoreError> {
        self.check()
    }
    fn recheck_at(&self) -> Instant {
        self.until().into_std()
    }
    fn check(&self) -> Result<(), StoreError> {
        if tokio::time::Instant::now() < self.until() {
            return Ok(());
        }
        Err(StoreError::Fenced(
            "this node's etcd lease lapsed: another node may serve its slot now".into(),
        ))
    }
}

/// The hook (a `VolumeHooks::wrap_backend`) that fences a node's backend
/// writes with its etcd lease, whose deadline is `deadline`, stopping them
/// `margin` early ([`FencedStore`]).
#[allow(clippy::type_complexity)]
pub fn etcd_fence(
    deadline: LeaseDeadline,
    margin: Duration,
) -> Arc<dyn Fn(Arc<dyn BlockStore>) -> Arc<dyn BlockStore> + Send + Sync> {
    let fence = Arc::new(EtcdFence { deadline, margin });
    Arc::new(move |store| Arc::new(FencedStore::new(store, fence.clone())))
}
