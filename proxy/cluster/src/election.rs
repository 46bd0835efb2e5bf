//! `FrontElection`: one active front, standbys waiting to take over.
//!
//! The active front holds `/<cluster>/front` = its id, attached to its lease. A
//! front campaigns with a transaction that creates the key only if it does not
//! exist (create_revision == 0); a standby that loses watches the key and campaigns
//! again when it is deleted — when the active front resigns or its lease lapses.
//! The active front learns that it lost the key from its lease
//! ([`FrontLeadership::lost`]): etcd deletes the key when the lease ends. (A key
//! deleted by other means, by an operator say, is not noticed until the lease
//! ends.)

use std::time::Duration;

use tokio::time::Instant;

use crate::keys::{check_name, Layout};
use crate::lease::KeptLease;
use crate::wire::{Compare, PutRequest, RangeRequest, TxnOp, TxnRequest, WatchEventKind};
use crate::{ClusterError, EtcdClient};

/// The front election of one cluster.
#[derive(Clone, Debug)]
pub struct FrontElection {
    client: EtcdClient,
    layout: Layout,
}

/// The active front's hold on the front key. Dropping it stops the keepalive (the
/// key lapses after the TTL); [`FrontLeadership::resign`] hands it over at once.
#[derive(Debug)]
pub struct FrontLeadership {
    front_id: String,
    revision: i64,
    lease: KeptLease,
}

impl FrontElection {
    /// The front election under `layout`'s prefix.
    pub fn new(client: EtcdClient, layout: Layout) -> Self {
        FrontElection { client, layout }
    }

    /// The active front's id and the revision it took the key at, if there is one.
    /// etcd sees a range of `/<cluster>/front`.
    pub async fn active(&self) -> Result<Option<(String, i64)>, ClusterError> {
        let resp = self.client.range(&self.layout.front(), &[]).await?;
        Ok(resp.kvs.into_iter().next().map(|kv| {
            (
                String::from_utf8_lossy(&kv.value).into_owned(),
                kv.create_revision,
            )
        }))
    }

    /// Campaigns as `front_id` with a lease of `ttl_secs`, waiting up to `patience`
    /// as a standby. Returns the leadership once the key is ours, `None` if another
    /// front still holds it when `patience` runs out (call again to keep waiting).
    /// etcd sees a lease grant, a transaction creating `/<cluster>/front` = the id
    /// if absent (else reading it), and, while waiting, watches of the key.
    pub async fn campaign(
        &self,
        front_id: &str,
        ttl_secs: i64,
        patience: Duration,
    ) -> Result<Option<FrontLeadership>, ClusterError> {
        check_name("front id", front_id)?;
        let deadline = Instant::now() + patience;
        let lease = KeptLease::grant(&self.client, ttl_secs).await?;
        let key = self.layout.front();
        loop {
            if !lease.is_alive() {
                return Err(ClusterError::LeaseLost(lease.id()));
            }
            let txn = TxnRequest {
                compare: vec![Compare::create_revision(key.clone(), 0)],
                success: vec![TxnOp::Put(PutRequest {
                    key: key.clone(),
                    value: front_id.as_bytes().to_vec(),
                    lease: lease.id(),
                })],
                failure: vec![TxnOp::Range(RangeRequest {
                    key: key.clone(),
                    range_end: vec![],
                })],
            };
            let resp = self.client.txn(&txn).await?;
            if resp.succeeded {
                let front_id = front_id.to_string();
                return Ok(Some(FrontLeadership {
                    front_id,
                    revision: resp.header.revision,
                    lease,
                }));
            }
            let holder = resp
                .responses
                .into_iter()
                .next()
                .and_then(|r| r.response_range);
            let holder = holder.and_then(|r| r.kvs.into_iter().next());
            if holder.as_ref().is_some_and(|kv| kv.lease == lease.id()) {
                // Our own earlier attempt (retried on another member) won.
                let revision = holder.map_or(0, |kv| kv.create_revision);
                return Ok(Some(FrontLeadership {
                    front_id: front_id.to_string(),
                    revision,
                    lease,
                }));
            }
            // Wait for the key to be deleted (resigned or lapsed), from the
            // revision we read it at.
            let mut cursor = resp.header.revision;
            loop {
                let now = Instant::now();
                if now >= deadline {
                    // Not ours: give the lease back now rather than at its TTL.
                    let _ = lease.revoke().await;
                    return Ok(None);
                }
                let out = self
                    .client
                    .watch_once(&key, &[], cursor + 1, deadline - now)
                    .await?;
                cursor = cursor.max(out.revision);
                if out.compacted || out.events.iter().any(|e| e.kind == WatchEventKind::Delete) {
                    break;
                }
            }
        }
    }
}

impl FrontLeadership {
    /// The id this front campaigned as.
    pub fn front_id(&self) -> &str {
        &self.front_id
    }

    /// The revision the front key was created at (grows with every new leader).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The lease the front key lives under: its [`KeptLease::state`] turns
    /// [`LeaseState::Lost`](crate::LeaseState::Lost), and [`KeptLease::lost`] returns, when the leadership
    /// is lost.
    pub fn lease(&self) -> &KeptLease {
        &self.lease
    }

    /// Resigns: revokes the lease, deleting the front key so that a standby takes
    /// over now. etcd sees a revoke.
    pub async fn resign(self) -> Result<(), ClusterError> {
        self.lease.revoke().await
    }
}
