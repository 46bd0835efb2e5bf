//! `ClusterError`: every way a coordination call fails.

/// An error of the coordination layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No etcd member answered: every endpoint refused the connection, timed out or
    /// said it was unavailable. Carries the last member's error.
    #[error("no etcd member answered (tried {tried}): {last}")]
    Unavailable {
        /// How many endpoints were tried.
        tried: usize,
        /// The last endpoint's failure.
        last: String,
    },
    /// etcd answered with an error (its gRPC status code and message), e.g. a lease
    /// that does not exist (code 5).
    #[error("etcd refused {path}: code {code}: {message}")]
    Etcd {
        /// The gateway path the request went to.
        path: &'static str,
        /// The gRPC status code.
        code: i32,
        /// etcd's message.
        message: String,
    },
    /// etcd's answer was not the JSON this crate expects.
    #[error("unexpected answer from etcd at {path}: {detail}")]
    Protocol {
        /// The gateway path the request went to.
        path: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A value read from etcd under the cluster prefix does not parse (a node id,
    /// address or partition number).
    #[error("malformed cluster record {key}: {detail}")]
    Malformed {
        /// The key (printable: keys under the prefix are ASCII by construction).
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// A name given to this crate (cluster name, node id, address) is outside the
    /// allowed shape: only `[A-Za-z0-9._:-]`, 1 to 64 bytes (addresses up to 128).
    #[error("invalid {what} {value:?}: {rule}")]
    InvalidName {
        /// Which name (`"cluster name"`, `"node id"`, `"address"`).
        what: &'static str,
        /// The value given.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The lease under which a registration or the front key lives is gone.
    #[error("lease {0} is lost")]
    LeaseLost(i64),
    /// There are no live nodes to assign partitions to.
    #[error("no live node to assign partitions to")]
    NoLiveNodes,
}
