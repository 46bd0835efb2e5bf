//! Object keys.

use std::fmt;

/// The longest key accepted, in bytes (S3 allows 1024).
pub const MAX_KEY_LEN: usize = 512;

/// A validated backend object key such as `vol0/n/17`.
///
/// Keys are `/`-separated segments of ASCII letters, digits, `-`, `_` and `.`; no
/// segment is empty or starts with `.`. The rule keeps keys portable to every
/// back-end (a file path, an S3 key) and leaves names beginning with `.` to back-ends
/// for their own bookkeeping (the fs back-end's temporary files).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey(String);

/// A string that is not a valid [`ObjKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid object key {key:?}: {reason}")]
pub struct InvalidKey {
    /// The rejected key.
    pub key: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

impl ObjKey {
    /// Validates and wraps `key`.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidKey> {
        let key = key.into();
        let bad = |reason| {
            Err(InvalidKey {
                key: key.clone(),
                reason,
            })
        };
        if key.is_empty() {
            return bad("empty");
        }
        if key.len() > MAX_KEY_LEN {
            return bad("too long");
        }
        for seg in key.split('/') {
            if seg.is_empty() {
                return bad("empty segment");
            }
            if seg.starts_with('.') {
                return bad("segment starts with '.'");
            }
            if !seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            {
                return bad("characters other than [A-Za-z0-9._-]");
            }
        }
        Ok(Self(key))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjKey({:?})", self.0)
    }
}

impl AsRef<str> for ObjKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_keys() {
        for k in ["a", "vol0/n/17", "x-y_z.1/2"] {
            assert_eq!(ObjKey::new(k).unwrap().as_str(), k);
        }
    }

    #[test]
    fn rejects_bad_keys() {
        for k in [
            "", "/a", "a/", "a//b", ".tmp/x", "a/.b", "a b", "a/../b", "é",
        ] {
            assert!(ObjKey::new(k).is_err(), "{k:?} accepted");
        }
        assert!(ObjKey::new("a".repeat(MAX_KEY_LEN + 1)).is_err());
    }
}
