//! The ETags this store last saw per key, for conditional writes: bounded memory,
//! approximately least-recently-used.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use oram_blockstore::ObjKey;

/// What the store last saw of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Known {
    /// The object's ETag (as the server sent it, quotes included).
    Tag(String),
    /// The object did not exist (a 404, or this store deleted it).
    Absent,
}

/// A compact form: an MD5 ETag as 16 bytes, anything else as text.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stored {
    Md5([u8; 16]),
    Text(Box<str>),
    Absent,
}

fn compact(k: Known) -> Stored {
    match k {
        Known::Absent => Stored::Absent,
        Known::Tag(t) => {
            let hex = t.trim_matches('"');
            let mut md5 = [0u8; 16];
            let ok = hex.len() == 32
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                && (0..16).all(|i| {
                    u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                        .map(|b| md5[i] = b)
                        .is_ok()
                });
            if ok && t == format!("\"{hex}\"") {
                Stored::Md5(md5)
            } else {
                Stored::Text(t.into())
            }
        }
    }
}

fn expand(s: &Stored) -> Known {
    match s {
        Stored::Absent => Known::Absent,
        Stored::Text(t) => Known::Tag(t.to_string()),
        Stored::Md5(b) => Known::Tag(format!(
            "\"{}\"",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        )),
    }
}

/// Two generations of at most `cap / 2` entries each: when the current one is
/// full it becomes the previous one (the older previous one is dropped), so
/// memory stays bounded and recently used keys stay known. Keys are 64-bit
/// hashes: a collision can only cause a needless precondition failure, which
/// the store resolves by reading the object.
pub(crate) struct Etags {
    hasher: RandomState,
    /// (current, previous) generation; the lock guards both.
    maps: Mutex<(HashMap<u64, Stored>, HashMap<u64, Stored>)>,
    half: usize,
}

impl Etags {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            maps: Mutex::new((HashMap::new(), HashMap::new())),
            half: (cap / 2).max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<u64, Stored>, HashMap<u64, Stored>)> {
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, key: &ObjKey) -> Option<Known> {
        let h = self.hasher.hash_one(key.as_str());
        let m = self.lock();
        m.0.get(&h).or_else(|| m.1.get(&h)).map(expand)
    }

    pub(crate) fn set(&self, key: &ObjKey, k: Known) {
        let h = self.hasher.hash_one(key.as_str());
        let mut m = self.lock();
        if m.0.len() >= self.half && !m.0.contains_key(&h) {
            let cur = std::mem::take(&mut m.0);
            m.1 = cur;
        }
        m.1.remove(&h);
        m.0.insert(h, compact(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_recent_keys_within_bounds() {
        let e = Etags::new(4);
        let k = |i: u32| ObjKey::new(format!("v/n/{i}")).unwrap();
        let md5 = "\"0123456789abcdef0123456789abcdef\"".to_string();
        e.set(&k(1), Known::Tag(md5.clone()));
        e.set(&k(2), Known::Tag("\"other-1\"".into()));
        e.set(&k(3), Known::Absent);
        assert_eq!(e.get(&k(1)), Some(Known::Tag(md5)));
        assert_eq!(e.get(&k(2)), Some(Known::Tag("\"other-1\"".into())));
        assert_eq!(e.get(&k(3)), Some(Known::Absent));
        for i in 4..10 {
            e.set(&k(i), Known::Absent);
        }
        assert_eq!(e.get(&k(1)), None, "old keys are forgotten");
        assert_eq!(e.get(&k(9)), Some(Known::Absent));
        let m = e.lock();
        assert!(m.0.len() + m.1.len() <= 4);
    }
}
