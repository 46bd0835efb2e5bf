//! The ETags this store last saw per key, for conditional writes: bounded memory,
//! approximately least-recently-used, and ordered against writes so that a read
//! sent before a write cannot replace what the write recorded.

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

/// One key's entry: what was seen, and the number of writes recorded (by this
/// store, all keys) when it was seen.
#[derive(Clone, Debug)]
struct Entry {
    known: Stored,
    seq: u64,
}

/// A read's place among the writes: the number of writes recorded when the
/// read was sent ([`Etags::ticket`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket(u64);

/// The two generations and the write count; the lock in [`Etags`] guards all.
#[derive(Default)]
struct Maps {
    cur: HashMap<u64, Entry>,
    prev: HashMap<u64, Entry>,
    /// Writes recorded so far (all keys).
    writes: u64,
}

/// Two generations of at most `cap / 2` entries each: when the current one is
/// full it becomes the previous one (the older previous one is dropped), so
/// memory stays bounded and recently used keys stay known. Keys are 64-bit
/// hashes: a collision can only cause a needless precondition failure, which
/// the store resolves by reading the object.
///
/// Reads and writes of one key may overlap (a read-ahead round GETs the
/// buckets the round before it is PUTting): a read records what it saw only
/// if no write of the key was recorded after the read was sent, so a GET that
/// answers with the old ETag after the PUT recorded the new one leaves the new
/// one. (A key whose entry was dropped meanwhile takes the read's tag: at
/// worst one needless precondition failure, resolved as above.)
pub(crate) struct Etags {
    hasher: RandomState,
    /// Both generations and the write count.
    maps: Mutex<Maps>,
    half: usize,
}

impl Etags {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            maps: Mutex::new(Maps::default()),
            half: (cap / 2).max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, key: &ObjKey) -> Option<Known> {
        let h = self.hasher.hash_one(key.as_str());
        let m = self.lock();
        m.cur
            .get(&h)
            .or_else(|| m.prev.get(&h))
            .map(|e| expand(&e.known))
    }

    /// Taken before a read is sent; handed to [`Etags::read`] with its answer.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket(self.lock().writes)
    }

    /// Records what a write (a PUT's answer, a delete) left of `key`.
    pub(crate) fn wrote(&self, key: &ObjKey, k: Known) {
        let h = self.hasher.hash_one(key.as_str());
        let mut m = self.lock();
        m.writes += 1;
        let seq = m.writes;
        self.insert(
            &mut m,
            h,
            Entry {
                known: compact(k),
                seq,
            },
        );
    }

    /// Records what a read sent at `ticket` saw of `key`, unless a write of
    /// `key` was recorded after it was sent (the read's answer may predate it).
    pub(crate) fn read(&self, key: &ObjKey, k: Known, ticket: Ticket) {
        let h = self.hasher.hash_one(key.as_str());
        let mut m = self.lock();
        let newer = m
            .cur
            .get(&h)
            .or_else(|| m.prev.get(&h))
            .is_some_and(|e| e.seq > ticket.0);
        if !newer {
            self.insert(
                &mut m,
                h,
                Entry {
                    known: compact(k),
                    seq: ticket.0,
                },
            );
        }
    }

    fn insert(&self, m: &mut Maps, h: u64, e: Entry) {
        if m.cur.len() >= self.half && !m.cur.contains_key(&h) {
            m.prev = std::mem::take(&mut m.cur);
        }
        m.prev.remove(&h);
        m.cur.insert(h, e);
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
        e.wrote(&k(1), Known::Tag(md5.clone()));
        e.read(&k(2), Known::Tag("\"other-1\"".into()), e.ticket());
        e.wrote(&k(3), Known::Absent);
        assert_eq!(e.get(&k(1)), Some(Known::Tag(md5)));
        assert_eq!(e.get(&k(2)), Some(Known::Tag("\"other-1\"".into())));
        assert_eq!(e.get(&k(3)), Some(Known::Absent));
        for i in 4..10 {
            e.wrote(&k(i), Known::Absent);
        }
        assert_eq!(e.get(&k(1)), None, "old keys are forgotten");
        assert_eq!(e.get(&k(9)), Some(Known::Absent));
        let m = e.lock();
        assert!(m.cur.len() + m.prev.len() <= 4);
    }

    /// A read-ahead GET sent before a PUT of the same key, answering with the
    /// old tag after the PUT recorded the new one, leaves the PUT's tag.
    #[test]
    fn a_read_sent_before_a_write_does_not_replace_the_write_s_tag() {
        let e = Etags::new(1 << 10);
        let k = ObjKey::new("v/n/1").unwrap();
        let (old, new) = ("\"old-1\"".to_string(), "\"new-1\"".to_string());
        e.wrote(&k, Known::Tag(old.clone()));
        let get = e.ticket();
        e.wrote(&k, Known::Tag(new.clone()));
        e.read(&k, Known::Tag(old.clone()), get);
        assert_eq!(e.get(&k), Some(Known::Tag(new.clone())));
        // A 404 answered late (the key was absent when the GET was sent) too.
        let get = e.ticket();
        let k2 = ObjKey::new("v/n/2").unwrap();
        e.wrote(&k2, Known::Tag(new.clone()));
        e.read(&k2, Known::Absent, get);
        assert_eq!(e.get(&k2), Some(Known::Tag(new.clone())));
        // An older read answering after a newer one leaves the newer one's.
        let early = e.ticket();
        e.wrote(&k, Known::Tag("\"newer-1\"".into()));
        let late = e.ticket();
        e.read(&k, Known::Tag("\"newest-1\"".into()), late);
        e.read(&k, Known::Tag(new), early);
        assert_eq!(e.get(&k), Some(Known::Tag("\"newest-1\"".into())));
        // A read sent after the write is recorded (another writer's change).
        e.read(&k, Known::Tag(old.clone()), e.ticket());
        assert_eq!(e.get(&k), Some(Known::Tag(old)));
    }
}
