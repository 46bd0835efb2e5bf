//! The key layout under a cluster's prefix, and the shapes of the names written.
//!
//! ```text
//! /<cluster>/nodes/<node-id>     value: the node's address     under the node's lease
//! /<cluster>/owners/<partition>  value: the owner's node id    no lease; mod_revision = fencing token
//! /<cluster>/front               value: the active front's id  under the front's lease
//! /<cluster>/slots               value: the number of slots    written once, by the first member
//! ```
//!
//! An owner key whose value is empty is a slot **released** by its owner (a
//! rebalance hand-off): no one serves it, and any member may claim it.
//!
//! These are the only keys written, and node ids, addresses, decimal partition
//! numbers and the role names `nodes`, `owners`, `front` the only strings in them:
//! no block id, position or object name can be expressed. Names are checked
//! ([`check_name`]) before anything is sent.

use crate::ClusterError;

/// The longest node id or cluster name.
pub const MAX_NAME: usize = 64;
/// The longest address.
pub const MAX_ADDRESS: usize = 128;

/// Checks a cluster name or node id: 1 to [`MAX_NAME`] bytes of `[A-Za-z0-9._-]`.
pub fn check_name(what: &'static str, value: &str) -> Result<(), ClusterError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ClusterError::InvalidName {
            what,
            value: value.to_string(),
            rule: "1 to 64 bytes of [A-Za-z0-9._-]",
        })
    }
}

/// Checks a node's address: `host:port`, 1 to [`MAX_ADDRESS`] bytes of
/// `[A-Za-z0-9._:-]` and `[`, `]` (IPv6), with a port.
pub fn check_address(value: &str) -> Result<(), ClusterError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_ADDRESS
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-[]".contains(&b))
        && value
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(ClusterError::InvalidName {
            what: "address",
            value: value.to_string(),
            rule: "host:port, up to 128 bytes of [A-Za-z0-9._:-[]]",
        })
    }
}

/// The keys of one cluster: everything lives under `/<cluster>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    /// The layout of cluster `name` (checked with [`check_name`]).
    pub fn new(name: &str) -> Result<Self, ClusterError> {
        check_name("cluster name", name)?;
        Ok(Layout {
            prefix: format!("/{name}/"),
        })
    }

    /// `/<cluster>/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `/<cluster>/nodes/`: the prefix of every registration.
    pub fn nodes_prefix(&self) -> Vec<u8> {
        format!("{}nodes/", self.prefix).into_bytes()
    }

    /// `/<cluster>/nodes/<node-id>`: a node's registration.
    pub fn node(&self, node_id: &str) -> Vec<u8> {
        format!("{}nodes/{node_id}", self.prefix).into_bytes()
    }

    /// `/<cluster>/owners/`: the prefix of every owner key.
    pub fn owners_prefix(&self) -> Vec<u8> {
        format!("{}owners/", self.prefix).into_bytes()
    }

    /// `/<cluster>/owners/<partition>`: the owner of a partition (decimal).
    pub fn owner(&self, partition: u32) -> Vec<u8> {
        format!("{}owners/{partition}", self.prefix).into_bytes()
    }

    /// `/<cluster>/front`: the active front.
    pub fn front(&self) -> Vec<u8> {
        format!("{}front", self.prefix).into_bytes()
    }

    /// `/<cluster>/slots`: the number of slots, fixed when the first member
    /// starts.
    pub fn slots(&self) -> Vec<u8> {
        format!("{}slots", self.prefix).into_bytes()
    }

    /// The node id of a registration key, if `key` is one.
    pub fn parse_node(&self, key: &[u8]) -> Option<String> {
        let rest = key.strip_prefix(self.nodes_prefix().as_slice())?;
        let id = std::str::from_utf8(rest).ok()?;
        check_name("node id", id).ok()?;
        Some(id.to_string())
    }

    /// The partition of an owner key, if `key` is one.
    pub fn parse_owner(&self, key: &[u8]) -> Option<u32> {
        let rest = key.strip_prefix(self.owners_prefix().as_slice())?;
        let s = std::str::from_utf8(rest).ok()?;
        if s.is_empty()
            || !s.bytes().all(|b| b.is_ascii_digit())
            || (s.len() > 1 && s.starts_with('0'))
        {
            return None;
        }
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_odd_names_are_refused() {
        let l = Layout::new("c1").unwrap();
        assert_eq!(l.node("n-1"), b"/c1/nodes/n-1");
        assert_eq!(l.parse_node(&l.node("n-1")).as_deref(), Some("n-1"));
        assert_eq!(l.parse_owner(&l.owner(17)), Some(17));
        assert_eq!(l.parse_owner(b"/c1/owners/017"), None);
        assert_eq!(l.front(), b"/c1/front");
        assert_eq!(l.slots(), b"/c1/slots");
        assert!(Layout::new("a/b").is_err());
        assert!(check_name("node id", "bucket/object.txt").is_err());
        assert!(check_name("node id", "").is_err());
        assert!(check_address("127.0.0.1:7000").is_ok());
        assert!(check_address("[::1]:7000").is_ok());
        assert!(check_address("host").is_err());
        assert!(check_address("a b:1").is_err());
    }
}
