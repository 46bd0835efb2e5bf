//! Size bounds on what a back-end may answer, and the tags of conditional writes.

use bytes::Bytes;

use crate::{ObjKey, Result, StoreError};

/// How large an object the caller of a bounded read ([`crate::GetOpts::bound`],
/// [`crate::BlockStoreExt::get_many_bounded`]) accepts. The engines know the exact
/// size of every object they wrote (buckets, slots and blocks are fixed-size), so
/// they ask for [`SizeBound::Exact`]; objects of variable size (the volume header)
/// use [`SizeBound::AtMost`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeBound {
    /// Exactly this many bytes.
    Exact(u64),
    /// At most this many bytes.
    AtMost(u64),
}

impl SizeBound {
    /// The most bytes this bound admits: a back-end never buffers more.
    pub fn max(&self) -> u64 {
        match *self {
            SizeBound::Exact(n) | SizeBound::AtMost(n) => n,
        }
    }

    /// Whether an object of `len` bytes is within the bound.
    pub fn admits(&self, len: u64) -> bool {
        match *self {
            SizeBound::Exact(n) => len == n,
            SizeBound::AtMost(n) => len <= n,
        }
    }

    /// `Ok` if `len` is within the bound, else [`StoreError::WrongSize`] naming `key`.
    pub fn check(&self, key: &ObjKey, len: u64) -> Result<()> {
        if self.admits(len) {
            Ok(())
        } else {
            Err(self.violation(key.as_str(), format!("{len} bytes")))
        }
    }

    /// The error for an answer `got` (e.g. `"more than 4096 bytes"`) outside the bound.
    pub fn violation(&self, key: &str, got: String) -> StoreError {
        StoreError::WrongSize {
            key: key.to_string(),
            got,
            expected: self.to_string(),
        }
    }
}

impl std::fmt::Display for SizeBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeBound::Exact(n) => write!(f, "exactly {n} bytes"),
            SizeBound::AtMost(n) => write!(f, "at most {n} bytes"),
        }
    }
}

/// Checks every present object of a `get_opts` (`get_many`) answer against `bound`.
pub fn check_bounded(keys: &[ObjKey], got: &[Option<Bytes>], bound: SizeBound) -> Result<()> {
    for (k, v) in keys.iter().zip(got) {
        if let Some(v) = v {
            bound.check(k, v.len() as u64)?;
        }
    }
    Ok(())
}

/// The version tag of a stored object (S3: its ETag; fs: inode, size and
/// modification time; memory: a write counter). Opaque: only compared for equality.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjTag(pub String);

/// The condition of a [`crate::BlockStore::put_if`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutCondition {
    /// Only if no object exists under the key (S3: `If-None-Match: *`).
    IfAbsent,
    /// Only if the object's current tag is this one (S3: `If-Match`).
    IfMatch(ObjTag),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let k = ObjKey::new("a/b").unwrap();
        assert!(SizeBound::Exact(5).check(&k, 5).is_ok());
        assert!(SizeBound::Exact(5).check(&k, 4).is_err());
        assert!(SizeBound::AtMost(5).check(&k, 4).is_ok());
        let e = SizeBound::AtMost(5).check(&k, 6).unwrap_err().to_string();
        assert!(e.contains("6 bytes") && e.contains("at most 5"), "{e}");
        let got = vec![Some(Bytes::from_static(b"abc")), None];
        let keys = vec![k.clone(), k.clone()];
        assert!(check_bounded(&keys, &got, SizeBound::Exact(3)).is_ok());
        assert!(check_bounded(&keys, &got, SizeBound::Exact(2)).is_err());
    }
}
