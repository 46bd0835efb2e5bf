//! `FencingToken`: which owner of a partition is current.
//!
//! A node that takes a partition writes its owner key with a compare on the key's
//! previous mod_revision; the new mod_revision (etcd's store revision at the write,
//! which only grows) is its token. A later owner's token is therefore always
//! greater. The front checks the token of every answer against the owner key
//! ([`Ownership::check_token`](crate::Ownership::check_token)). The later slice
//! binds the token's 16 bytes ([`FencingToken::to_bytes`]) into what the node
//! writes for the partition — the sealed identity of its objects or a per-partition
//! head object written conditionally — so that whatever a stale owner (paused past
//! its lease) writes late carries an older token than the current owner's, and is
//! refused or never opens as current.

use std::cmp::Ordering;

/// The magic of the encoding (version 1).
const MAGIC: &[u8; 4] = b"oft1";

/// A partition owner's fencing token: the partition and the revision at which its
/// owner key was written by the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FencingToken {
    /// The partition.
    pub partition: u32,
    /// The owner key's mod_revision after the claim.
    pub revision: i64,
}

impl FencingToken {
    /// The encoded length.
    pub const LEN: usize = 16;

    /// The token as 16 bytes: `oft1`, the partition (big-endian u32), the revision
    /// (big-endian u64). Fixed length, to bind into sealed data.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4..8].copy_from_slice(&self.partition.to_be_bytes());
        out[8..].copy_from_slice(&(self.revision as u64).to_be_bytes());
        out
    }

    /// Decodes [`FencingToken::to_bytes`]'s output; `None` for anything else (a
    /// wrong length or magic, or a revision past `i64::MAX`).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::LEN || &bytes[..4] != MAGIC {
            return None;
        }
        let partition = u32::from_be_bytes(bytes[4..8].try_into().ok()?);
        let revision = i64::try_from(u64::from_be_bytes(bytes[8..].try_into().ok()?)).ok()?;
        Some(FencingToken {
            partition,
            revision,
        })
    }

    /// Whether this token is from a later owner of the same partition than
    /// `other`'s (false for tokens of different partitions).
    pub fn supersedes(&self, other: &FencingToken) -> bool {
        self.partial_cmp(other) == Some(Ordering::Greater)
    }
}

/// Tokens of one partition are ordered by revision (newer is greater); tokens of
/// different partitions are not comparable.
impl PartialOrd for FencingToken {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self.partition == other.partition).then(|| self.revision.cmp(&other.revision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_the_newer_one_wins() {
        let old = FencingToken {
            partition: 3,
            revision: 41,
        };
        let new = FencingToken {
            partition: 3,
            revision: 57,
        };
        assert_eq!(FencingToken::from_bytes(&old.to_bytes()), Some(old));
        assert!(new.supersedes(&old));
        assert!(!old.supersedes(&new));
        assert!(!old.supersedes(&old));
        let other = FencingToken {
            partition: 4,
            revision: 99,
        };
        assert_eq!(other.partial_cmp(&old), None);
        assert!(!other.supersedes(&old));
        assert_eq!(FencingToken::from_bytes(&old.to_bytes()[..15]), None);
        let mut bad = new.to_bytes();
        bad[0] = b'x';
        assert_eq!(FencingToken::from_bytes(&bad), None);
    }
}
