//! The cluster's coordination layer: one ORAM served by several machines, with
//! etcd as the coordinator.
//!
//! A *front* (S3 and Swift, the object layer, the partition map, rounds) sends each
//! round's sub-accesses to the *nodes* that own the partitions. This crate is what
//! they agree through, over a real etcd cluster:
//!
//! * [`Membership`]: nodes registered under leases, kept alive by a background
//!   task that reports lease loss ([`KeptLease`]);
//! * [`Ownership`]: one owner key per partition, claimed with a compare on its
//!   mod_revision; the new mod_revision is the owner's [`FencingToken`], which the
//!   front checks on every answer ([`Ownership::check_token`]); [`assign`] spreads
//!   partitions evenly with few moves and [`Ownership::rebalance`] applies it,
//!   reassigning the partitions of nodes whose lease lapsed;
//! * [`FrontElection`]: the active front under its lease, standbys taking over when
//!   it lapses.
//!
//! **What etcd sees** ([`keys`] has the layout): the keys `/<cluster>/nodes/<id>`,
//! `/<cluster>/owners/<partition>` and `/<cluster>/front`, with node ids, addresses
//! and front ids as values, lease ids and TTLs, and the timing of registrations,
//! claims and renewals. No block id, position or object name: the calls take none,
//! and names are checked against a small alphabet before they are sent. A
//! [`Recorder`] ([`EtcdClient::with_recorder`]) sees every request, which the
//! tests use to show it.
//!
//! The client ([`EtcdClient`]) speaks etcd v3's JSON gRPC gateway (`/v3/kv/*`,
//! `/v3/lease/*`, `/v3/watch`) over the workspace's hyper, failing over between
//! members (docs/decisions/010-etcd-through-its-json-gateway.md says why not
//! gRPC). Not yet wired into `serve`: the front/node split, mutual TLS between
//! roles and failover of partitions' state come in later slices.

mod assign;
mod client;
mod codec;
mod election;
mod error;
mod fencing;
pub mod keys;
mod lease;
mod membership;
mod ownership;
mod record;
pub mod wire;

pub use assign::assign;
pub use client::{EtcdClient, WatchOutcome};
pub use election::{FrontElection, FrontLeadership};
pub use error::ClusterError;
pub use fencing::FencingToken;
pub use keys::Layout;
pub use lease::{KeptLease, LeaseDeadline, LeaseState};
pub use membership::{Membership, NodeInfo, Registration};
pub use ownership::{Claim, Move, OwnerRecord, Ownership};
pub use record::{MemoryRecorder, RecordedRequest, Recorder};
