//! The cluster's data path: one ORAM's partitions served by several machines.
//!
//! A *front* runs the partition framework (its map, eviction cache and rounds)
//! with each partition placed on the *node* that owns it
//! ([`RemotePlacement`], [`RemotePartition`]); a node serves its partitions'
//! sub-engines ([`NodeHost`]), which hold the partitions' trusted state, seal
//! and open, and make every backend request for them. Front and node talk over
//! mutual TLS with the cluster's own CA ([`ClusterTls`]).
//!
//! **A round across machines.** The front makes its intent record durable,
//! then sends every partition of the round its sub-ops at once (a *stage*);
//! each node stages the access and answers; the front answers reads, then
//! asks every node to *land* (write the partition's objects and commit the
//! sub-engine's changes together with its ledger: this round and its answers),
//! and commits its map last. A failure anywhere repeats the round exactly: a
//! node that committed answers the repeat from its ledger with no access; a
//! node that did not stages it again and its engine finishes its interrupted
//! round with the same draws. Round numbers only grow (the framework records
//! the next one with every commit), so a node refuses a new round numbered at
//! or below one it committed: the front's state would be older than its own.
//!
//! **Owner tokens.** Every stage, land and abort names the token under which
//! the front believes the node owns the partition, and every answer carries
//! the node's: a mismatch is refused on both sides (the coordinator's owner
//! key revision in a cluster coordinated by etcd).
//!
//! **What a network observer sees** (TLS 1.3 hides the contents): per staged
//! access of `n` ops, a request of `n` records of one block each and an answer
//! of `n` blocks ([`wire`]), then a land and its answer of fixed size — the
//! partitions of a round and their op counts, which the storage server sees
//! anyway, and the timing of rounds.

mod error;
mod host;
mod hostset;
mod remote;
mod serve;
pub mod tls;
pub mod wire;

pub use error::NodeError;
pub use host::{HostQuiet, NodeHost, Served};
pub use hostset::HostSet;
pub use remote::{NodeLink, RemotePartition, RemotePlacement, Route, Timeouts};
pub use tls::{mint_ca, mint_member, ClusterCa, ClusterTls};
