//! Data PUTs this store gave up on, to tell its own late writes from another
//! writer's.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use oram_blockstore::ObjKey;

/// Data PUTs this store gave up on (an attempt timed out, the service failed):
/// each may still land later. Kept per key as keyed 64-bit hashes of their
/// bodies, for at most [`Abandoned::KEYS`] keys (all forgotten beyond: a
/// forgotten one is only reported as another writer's), so that a failed
/// condition caused by this store's own late write is told from another
/// writer's. The hashes are keyed (SipHash under a random key): the provider
/// cannot make a body of its own pass for one of these.
pub(crate) struct Abandoned {
    hasher: RandomState,
    /// Key → hashes of its abandoned bodies (at most [`Abandoned::PER_KEY`]);
    /// guards only this map, never held across an await.
    bodies: Mutex<HashMap<ObjKey, Vec<u64>>>,
}

impl Abandoned {
    const KEYS: usize = 4096;
    const PER_KEY: usize = 4;

    pub(crate) fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            bodies: Mutex::new(HashMap::new()),
        }
    }

    fn hash(&self, body: &[u8]) -> u64 {
        self.hasher.hash_one(body)
    }

    /// Remembers that `body`'s PUT of `key` was given up on.
    pub(crate) fn note(&self, key: &ObjKey, body: &[u8]) {
        let h = self.hash(body);
        let mut m = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= Self::KEYS && !m.contains_key(key) {
            m.clear();
        }
        let hs = m.entry(key.clone()).or_default();
        if hs.len() >= Self::PER_KEY {
            hs.remove(0);
        }
        hs.push(h);
    }

    /// Whether `body` is one this store gave up on for `key`.
    pub(crate) fn was_ours(&self, key: &ObjKey, body: &[u8]) -> bool {
        let h = self.hash(body);
        let m = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        m.get(key).is_some_and(|hs| hs.contains(&h))
    }

    /// Forgets `key`'s abandoned bodies (a write of it landed after them).
    pub(crate) fn forget(&self, key: &ObjKey) {
        let mut m = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(key);
    }
}
