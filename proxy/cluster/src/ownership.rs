//! `Ownership`: which node owns each partition, and its fencing token.
//!
//! `/<cluster>/owners/<partition>` holds the owner's node id. It is not attached to
//! a lease: when the owner's registration lapses the key stays, naming a node that
//! is no longer live, until a live node claims the partition. A claim is a
//! transaction that writes the key only if its mod_revision is still the one the
//! claimant read; the new mod_revision is the claimant's [`FencingToken`]. So two
//! claims from the same read cannot both succeed, and every later owner's token is
//! greater than every earlier one's.

use crate::assign::assign;
use crate::fencing::FencingToken;
use crate::keys::{check_name, Layout};
use crate::membership::Membership;
use crate::wire::{Compare, PutRequest, RangeRequest, TxnOp, TxnRequest};
use crate::{ClusterError, EtcdClient};

/// A partition's current owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The owner's node id; empty when its last owner released it
    /// ([`Ownership::release`]).
    pub node_id: String,
    /// Its fencing token (the owner key's mod_revision).
    pub token: FencingToken,
}

impl OwnerRecord {
    /// Whether the partition was released by its last owner: no one serves it
    /// and any member may claim it (with a compare on this token's revision).
    pub fn released(&self) -> bool {
        self.node_id.is_empty()
    }
}

/// The outcome of [`Ownership::claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The partition is the claimant's, with this token.
    Claimed(FencingToken),
    /// The owner key changed since the claimant's read: this is the owner now
    /// (`None`: the key was deleted).
    Conflict(Option<OwnerRecord>),
}

/// A partition that [`Ownership::rebalance`] moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The partition.
    pub partition: u32,
    /// Its owner before (`None`: unowned).
    pub from: Option<String>,
    /// Its owner now.
    pub to: String,
    /// The new owner's token.
    pub token: FencingToken,
}

/// The owner keys of a cluster of `partitions` partitions.
#[derive(Clone, Debug)]
pub struct Ownership {
    client: EtcdClient,
    layout: Layout,
    partitions: u32,
}

impl Ownership {
    /// The owner keys of partitions `0..partitions` under `layout`'s prefix.
    pub fn new(client: EtcdClient, layout: Layout, partitions: u32) -> Self {
        Ownership {
            client,
            layout,
            partitions,
        }
    }

    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The owner of every partition (`None`: unowned). etcd sees one range over
    /// `/<cluster>/owners/`.
    pub async fn owners(&self) -> Result<Vec<Option<OwnerRecord>>, ClusterError> {
        let resp = self
            .client
            .range_prefix(&self.layout.owners_prefix())
            .await?;
        let mut out = vec![None; self.partitions as usize];
        for kv in resp.kvs {
            let Some(p) = self
                .layout
                .parse_owner(&kv.key)
                .filter(|p| *p < self.partitions)
            else {
                continue;
            };
            out[p as usize] = Some(self.record(p, &kv.key, kv.value, kv.mod_revision)?);
        }
        Ok(out)
    }

    /// The owner of `partition`. etcd sees a range of its owner key.
    pub async fn owner(&self, partition: u32) -> Result<Option<OwnerRecord>, ClusterError> {
        let key = self.layout.owner(partition);
        let resp = self.client.range(&key, &[]).await?;
        match resp.kvs.into_iter().next() {
            Some(kv) => Ok(Some(self.record(
                partition,
                &key,
                kv.value,
                kv.mod_revision,
            )?)),
            None => Ok(None),
        }
    }

    /// Claims `partition` for `node_id` if its owner key was last written at
    /// `expected` (the token's revision from the caller's read; 0: unowned).
    /// etcd sees one transaction: compare the owner key's mod_revision, then put
    /// the node id, or else read the key.
    pub async fn claim(
        &self,
        partition: u32,
        node_id: &str,
        expected: i64,
    ) -> Result<Claim, ClusterError> {
        check_name("node id", node_id)?;
        self.check_partition(partition)?;
        let key = self.layout.owner(partition);
        let txn = put_or_read(
            Compare::mod_revision(key.clone(), expected),
            &key,
            node_id.as_bytes().to_vec(),
        );
        let resp = self.client.txn(&txn).await?;
        if resp.succeeded {
            return Ok(Claim::Claimed(FencingToken {
                partition,
                revision: resp.header.revision,
            }));
        }
        let current = resp
            .responses
            .into_iter()
            .next()
            .and_then(|r| r.response_range);
        match current.and_then(|r| r.kvs.into_iter().next()) {
            Some(kv) => Ok(Claim::Conflict(Some(self.record(
                partition,
                &key,
                kv.value,
                kv.mod_revision,
            )?))),
            None => Ok(Claim::Conflict(None)),
        }
    }

    /// Releases `partition`, owned by `node_id` under the token revision
    /// `expected`: its owner key is emptied (the partition is free to claim,
    /// and never again its own node's to start afresh) if it was last written
    /// at `expected`. etcd sees one transaction: compare the owner key's
    /// mod_revision, then put an empty value, or else read the key.
    pub async fn release(&self, partition: u32, expected: i64) -> Result<bool, ClusterError> {
        self.check_partition(partition)?;
        let key = self.layout.owner(partition);
        let txn = TxnRequest {
            compare: vec![Compare::mod_revision(key.clone(), expected)],
            success: vec![TxnOp::Put(PutRequest {
                key: key.clone(),
                value: Vec::new(),
                lease: 0,
            })],
            failure: vec![],
        };
        Ok(self.client.txn(&txn).await?.succeeded)
    }

    /// The number of partitions (slots) every member must agree on: recorded
    /// by the first member that calls this (as `self.partitions()`), then
    /// read. etcd sees one transaction: put `/<cluster>/slots` if it is
    /// absent, or else read it.
    pub async fn agreed_count(&self) -> Result<u32, ClusterError> {
        let key = self.layout.slots();
        let txn = put_or_read(
            Compare::create_revision(key.clone(), 0),
            &key,
            self.partitions.to_string().into_bytes(),
        );
        let resp = self.client.txn(&txn).await?;
        if resp.succeeded {
            return Ok(self.partitions);
        }
        let kv = resp
            .responses
            .into_iter()
            .next()
            .and_then(|r| r.response_range)
            .and_then(|r| r.kvs.into_iter().next());
        kv.and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse().ok())
            .ok_or_else(|| ClusterError::Malformed {
                key: String::from_utf8_lossy(&key).into_owned(),
                detail: "value is not a slot count".into(),
            })
    }

    /// Whether `token` is the current owner's token of its partition (the front
    /// calls it on every answer a node gives: an answer with any other token is
    /// from a stale owner and is refused). etcd sees a linearizable range of the
    /// owner key.
    pub async fn check_token(&self, token: &FencingToken) -> Result<bool, ClusterError> {
        Ok(self
            .owner(token.partition)
            .await?
            .is_some_and(|o| o.token == *token))
    }

    /// Gives every partition a live owner: reads the live nodes and the owners,
    /// computes the even, minimal-move assignment ([`assign`]) and claims each
    /// partition whose owner changes with a compare on what was read. Returns the
    /// moves made; a claim that loses to a concurrent change is skipped (call again
    /// to converge). Partitions of nodes whose lease lapsed are reassigned here.
    /// etcd sees a range of the registrations, a range of the owner keys, and one
    /// claim transaction per move.
    pub async fn rebalance(&self, membership: &Membership) -> Result<Vec<Move>, ClusterError> {
        let live: Vec<String> = membership
            .live_nodes()
            .await?
            .into_iter()
            .map(|n| n.id)
            .collect();
        let owners = self.owners().await?;
        let current: Vec<Option<String>> = owners
            .iter()
            .map(|o| o.as_ref().map(|o| o.node_id.clone()))
            .collect();
        let target = assign(&current, &live)?;
        let mut moves = Vec::new();
        for (p, to) in target.into_iter().enumerate() {
            let now = &owners[p];
            if now.as_ref().is_some_and(|o| o.node_id == to) {
                continue;
            }
            let partition = p as u32;
            let expected = now.as_ref().map_or(0, |o| o.token.revision);
            if let Claim::Claimed(token) = self.claim(partition, &to, expected).await? {
                moves.push(Move {
                    partition,
                    from: now.as_ref().map(|o| o.node_id.clone()),
                    to,
                    token,
                });
            }
        }
        Ok(moves)
    }

    fn check_partition(&self, partition: u32) -> Result<(), ClusterError> {
        if partition < self.partitions {
            return Ok(());
        }
        Err(ClusterError::InvalidName {
            what: "partition",
            value: partition.to_string(),
            rule: "below the partition count",
        })
    }

    fn record(
        &self,
        partition: u32,
        key: &[u8],
        value: Vec<u8>,
        rev: i64,
    ) -> Result<OwnerRecord, ClusterError> {
        let node_id = String::from_utf8(value)
            .ok()
            .filter(|v| v.is_empty() || check_name("node id", v).is_ok())
            .ok_or_else(|| ClusterError::Malformed {
                key: String::from_utf8_lossy(key).into_owned(),
                detail: "value is not a node id".into(),
            })?;
        Ok(OwnerRecord {
            node_id,
            token: FencingToken {
                partition,
                revision: rev,
            },
        })
    }
}

/// A transaction that puts `value` at `key` (no lease) if `compare` holds, or
/// else reads `key`.
fn put_or_read(compare: Compare, key: &[u8], value: Vec<u8>) -> TxnRequest {
    TxnRequest {
        compare: vec![compare],
        success: vec![TxnOp::Put(PutRequest {
            key: key.to_vec(),
            value,
            lease: 0,
        })],
        failure: vec![TxnOp::Range(RangeRequest {
            key: key.to_vec(),
            range_end: vec![],
        })],
    }
}
