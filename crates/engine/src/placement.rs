//! Where a partitioned engine's partitions run: in this process, or on other
//! machines (a cluster's nodes), and which round of its parent a partition's
//! staged access belongs to.

use std::sync::Arc;

use crate::{Oram, Result, Shape};

/// The round of a parent (a partition framework) that a staged access belongs
/// to ([`Oram::access_staged_round`]). Round numbers only grow over the life of
/// a volume's state, restarts included, so that a partition served elsewhere
/// can tell a repeated round it already committed from a new one.
///
/// Observed by the storage server: nothing (it never leaves trusted processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundId {
    /// The round's number (its intent record's sequence number).
    pub seq: u64,
    /// Whether this is the exact repetition of an interrupted round (its ops as
    /// reads) rather than its first attempt.
    pub repeat: bool,
}

/// Builds a partition's sub-engine in this process (handed to
/// [`Placement::place`]; calling it at most once).
pub type LocalSub<'a> = Box<dyn FnOnce() -> Result<Arc<dyn Oram>> + Send + 'a>;

/// Decides where each partition of a partitioned engine runs.
///
/// Whatever it returns must behave as the local sub-engine would: the same
/// block size, capacity and id limit, and the same staged accesses
/// ([`Oram::access_staged_round`]), so that the storage server sees the same
/// requests wherever a partition runs.
pub trait Placement: Send + Sync {
    /// Partition `p`'s sub-engine of `shape`: `local` builds it in this process
    /// (its trusted state in this process's state database).
    fn place(&self, p: u32, shape: &Shape, local: LocalSub<'_>) -> Result<Arc<dyn Oram>>;

    /// Whether partitions run in other processes (a cluster's nodes). The
    /// parent then makes each round's intent record durable as it makes its
    /// other commits (with the shipped log: on the backend) before any
    /// sub-access goes out, so that a parent rebuilt from the backend knows
    /// every round its partitions may have committed, and repeats it; in one
    /// process a local commit is enough (the partitions' state is rebuilt with
    /// the parent's).
    fn remote(&self) -> bool {
        false
    }

    /// How long a round keeps being repeated while a partition's node answers
    /// that it is unavailable (a partition moving between a cluster's members,
    /// a node taken over): the round is repeated exactly, with a backoff, until
    /// this long after its first attempt, and only then fails. Zero (the
    /// default): a round makes its usual attempts only. The storage server
    /// sees the repeats as it sees any retried round.
    fn ride_out(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// Every partition in this process: a volume on one machine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl Placement for Local {
    fn place(&self, _p: u32, _shape: &Shape, local: LocalSub<'_>) -> Result<Arc<dyn Oram>> {
        local()
    }
}
