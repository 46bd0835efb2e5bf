//! [`SpaceState`]: the one implementation of [`TrustedState`], in memory or bound
//! to a durable store.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{
    decode_bucket, decode_node, decode_pending, decode_u64, encode_bucket, encode_node,
    encode_pending,
};
use crate::{
    Bucket, ChangeSet, Durable, Lineage, NodeVersion, PendingWrite, Space, Staged, StateError,
    Table, Tracked, TrustedState,
};

/// Calls `$method` on every tracked table of a [`SpaceState`] (so that no
/// table is forgotten by a settle, a seal or a rollback).
macro_rules! each_table {
    ($s:expr, $method:ident) => {{
        $s.positions.$method();
        $s.nodes.$method();
        $s.stash.$method();
        $s.local.$method();
        $s.meta.$method();
        $s.pending.$method();
        $s.intent.$method();
    }};
}

/// The trusted state of one space: tables in memory, with the changes since the
/// last commit tracked. Without a durable store ([`MemState`]) commits are
/// immediate and nothing survives the process; bound to one (by `oram-statedb`)
/// a commit encodes the changed keys and hands them to its group committer.
pub struct SpaceState {
    space: Space,
    lineage: Arc<Lineage>,
    sink: Option<Arc<dyn Durable>>,
    positions: Tracked<u64, u64>,
    nodes: Tracked<u64, NodeVersion>,
    stash: Tracked<u64, Bytes>,
    local: Tracked<u64, Bucket>,
    meta: Tracked<Vec<u8>, Bytes>,
    pending: Tracked<u64, (NodeVersion, Bytes)>,
    /// Intent records by round sequence number (see [`TrustedState::intents`]).
    intent: Tracked<u64, Bytes>,
    /// Loads another space of the same durable store ([`TrustedState::sibling`]);
    /// `None`: a state in memory, whose siblings start empty.
    opener: Option<Opener>,
}

/// Loads the state of a space from the durable store a state belongs to.
pub type Opener = Arc<dyn Fn(Space) -> Result<SpaceState, StateError> + Send + Sync>;

/// Trusted state in process memory: lost when the process ends. Generation 0,
/// epoch 0.
pub type MemState = SpaceState;

impl Default for SpaceState {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SpaceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpaceState")
            .field("space", &self.space)
            .field("positions", &self.positions.len())
            .field("stash", &self.stash.len())
            .field("durable", &self.sink.is_some())
            .finish_non_exhaustive()
    }
}

impl SpaceState {
    /// An empty in-memory state of space 0.
    pub fn new() -> Self {
        Self::empty(Space(0), Arc::new(Lineage::default()), None)
    }

    /// An empty state of `space`, in `lineage`, committing to `sink` (if any).
    pub fn empty(space: Space, lineage: Arc<Lineage>, sink: Option<Arc<dyn Durable>>) -> Self {
        Self {
            space,
            lineage,
            sink,
            positions: Tracked::default(),
            nodes: Tracked::default(),
            stash: Tracked::default(),
            local: Tracked::default(),
            meta: Tracked::default(),
            pending: Tracked::default(),
            intent: Tracked::default(),
            opener: None,
        }
    }

    /// This state, able to load the other spaces of its durable store with
    /// `opener` (for [`TrustedState::sibling`]).
    pub fn with_opener(mut self, opener: Opener) -> Self {
        self.opener = Some(opener);
        self
    }

    /// A state of `space` holding `rows` (`(table, key without the space,
    /// value)`, as written by its commits).
    pub fn from_rows(
        space: Space,
        lineage: Arc<Lineage>,
        sink: Option<Arc<dyn Durable>>,
        rows: impl IntoIterator<Item = (Table, Vec<u8>, Vec<u8>)>,
    ) -> Result<Self, StateError> {
        let mut positions = BTreeMap::new();
        let mut nodes = BTreeMap::new();
        let mut stash = BTreeMap::new();
        let mut local = BTreeMap::new();
        let mut meta = BTreeMap::new();
        let mut pending = BTreeMap::new();
        let mut intent = BTreeMap::new();
        for (table, k, v) in rows {
            match table {
                Table::Positions => {
                    positions.insert(decode_u64(&k)?, decode_u64(&v)?);
                }
                Table::Nodes => {
                    nodes.insert(decode_u64(&k)?, decode_node(&v)?);
                }
                Table::Stash => {
                    stash.insert(decode_u64(&k)?, Bytes::from(v));
                }
                Table::Local => {
                    local.insert(decode_u64(&k)?, decode_bucket(&v)?);
                }
                Table::KeyMeta => {
                    meta.insert(k, Bytes::from(v));
                }
                Table::Pending => {
                    pending.insert(decode_u64(&k)?, decode_pending(&v)?);
                }
                Table::Intent => {
                    intent.insert(decode_intent_key(&k)?, Bytes::from(v));
                }
                Table::Kv | Table::Meta => {
                    return Err(StateError::Corrupt(format!(
                        "{} row in an engine space",
                        table.name()
                    )))
                }
            }
        }
        Ok(Self {
            positions: Tracked::from_map(positions),
            nodes: Tracked::from_map(nodes),
            stash: Tracked::from_map(stash),
            local: Tracked::from_map(local),
            meta: Tracked::from_map(meta),
            pending: Tracked::from_map(pending),
            intent: Tracked::from_map(intent),
            ..Self::empty(space, lineage, sink)
        })
    }

    /// An in-memory state in `generation` (tests of generations).
    pub fn with_generation(generation: u64) -> Self {
        Self::empty(Space(0), Arc::new(Lineage::new(0, generation)), None)
    }

    /// The key of `key` in an engine table: `space (u32 BE) ‖ key`.
    pub fn table_key(space: Space, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(4 + key.len());
        k.extend_from_slice(&space.0.to_be_bytes());
        k.extend_from_slice(key);
        k
    }

    fn encode_changes(&self) -> ChangeSet {
        let mut cs = ChangeSet::default();
        let key = |k: &[u8]| Self::table_key(self.space, k);
        for (k, v) in self.positions.changed() {
            cs.push(
                Table::Positions,
                key(&k.to_be_bytes()),
                v.map(|v| v.to_be_bytes().to_vec()),
            );
        }
        for (k, v) in self.nodes.changed() {
            cs.push(Table::Nodes, key(&k.to_be_bytes()), v.map(encode_node));
        }
        for (k, v) in self.stash.changed() {
            cs.push(Table::Stash, key(&k.to_be_bytes()), v.map(|v| v.to_vec()));
        }
        for (k, v) in self.local.changed() {
            cs.push(Table::Local, key(&k.to_be_bytes()), v.map(encode_bucket));
        }
        for (k, v) in self.meta.changed() {
            cs.push(Table::KeyMeta, key(k), v.map(|v| v.to_vec()));
        }
        for (k, v) in self.pending.changed() {
            cs.push(
                Table::Pending,
                key(&k.to_be_bytes()),
                v.map(|(nv, p)| encode_pending(nv, p)),
            );
        }
        for (seq, v) in self.intent.changed() {
            cs.push(Table::Intent, key(&intent_key(*seq)), v.map(|v| v.to_vec()));
        }
        cs
    }
}

/// The key of intent record `seq` (after the space): empty for 0 — the one
/// record of volumes written before rounds were numbered — else `seq` (u64 BE).
fn intent_key(seq: u64) -> Vec<u8> {
    match seq {
        0 => Vec::new(),
        s => s.to_be_bytes().to_vec(),
    }
}

fn decode_intent_key(k: &[u8]) -> Result<u64, StateError> {
    match k.len() {
        0 => Ok(0),
        _ => decode_u64(k),
    }
}

impl TrustedState for SpaceState {
    fn space(&self) -> Space {
        self.space
    }
    fn sibling(&self, space: Space) -> Result<Box<dyn TrustedState>, StateError> {
        match &self.opener {
            Some(open) => Ok(Box::new(open(space)?)),
            None if self.sink.is_none() => {
                Ok(Box::new(Self::empty(space, self.lineage.clone(), None)))
            }
            None => Err(StateError::Corrupt(
                "this durable state cannot load other spaces".into(),
            )),
        }
    }
    fn position(&self, block: u64) -> Option<u64> {
        self.positions.get(&block).copied()
    }
    fn set_position(&mut self, block: u64, leaf: u64) {
        if self.position(block) != Some(leaf) {
            self.positions.insert(block, leaf);
        }
    }
    fn remove_position(&mut self, block: u64) {
        self.positions.remove(&block);
    }
    fn positions_len(&self) -> u64 {
        self.positions.len() as u64
    }
    fn positions(&self) -> Vec<(u64, u64)> {
        self.positions.iter().map(|(a, b)| (*a, *b)).collect()
    }
    fn node(&self, pos: u64) -> NodeVersion {
        self.nodes
            .get(&pos)
            .copied()
            .unwrap_or_else(|| NodeVersion::unwritten(self.lineage.generation()))
    }
    fn set_node(&mut self, pos: u64, nv: NodeVersion) {
        self.nodes.insert(pos, nv);
    }
    fn nodes(&self) -> Vec<(u64, NodeVersion)> {
        self.nodes.iter().map(|(a, b)| (*a, *b)).collect()
    }
    fn epoch(&self) -> u64 {
        self.lineage.epoch()
    }
    fn generation(&self) -> u64 {
        self.lineage.generation()
    }
    fn landed(&self) -> u64 {
        self.lineage.landed()
    }
    fn stash_insert(&mut self, block: u64, data: Bytes) {
        self.stash.insert(block, data);
    }
    fn stash_remove(&mut self, block: u64) -> Option<Bytes> {
        self.stash.remove(&block)
    }
    fn stash_get(&self, block: u64) -> Option<&Bytes> {
        self.stash.get(&block)
    }
    fn stash_len(&self) -> usize {
        self.stash.len()
    }
    fn stash_blocks(&self) -> Vec<u64> {
        self.stash.iter().map(|(k, _)| *k).collect()
    }
    fn local_bucket(&self, node: u64) -> Option<&Bucket> {
        self.local.get(&node)
    }
    fn set_local_bucket(&mut self, node: u64, bucket: Bucket) {
        // Most tree-top buckets do not change in a round: write only those that do.
        let unchanged = match self.local.get(&node) {
            Some(b) => *b == bucket,
            None => bucket.is_empty(),
        };
        if !unchanged {
            self.local.insert(node, bucket);
        }
    }
    fn meta(&self, key: &[u8]) -> Option<&Bytes> {
        self.meta.map().get(key)
    }
    fn set_meta(&mut self, key: &[u8], value: Bytes) {
        if self.meta(key) != Some(&value) {
            self.meta.insert(key.to_vec(), value);
        }
    }
    fn remove_meta(&mut self, key: &[u8]) {
        self.meta.remove(&key.to_vec());
    }
    fn meta_range(&self, prefix: &[u8]) -> Vec<(Vec<u8>, Bytes)> {
        self.meta
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
    fn pending_put(&mut self, pos: u64, nv: NodeVersion, plain: Bytes) {
        self.pending.insert(pos, (nv, plain));
    }
    fn pending_done(&mut self, pos: u64, version: u64) {
        if self
            .pending
            .get(&pos)
            .is_some_and(|(nv, _)| nv.version == version)
        {
            self.pending.remove(&pos);
        }
    }
    fn pending(&self) -> Vec<PendingWrite> {
        self.pending
            .iter()
            .map(|(p, (nv, b))| (*p, *nv, b.clone()))
            .collect()
    }
    fn intents(&self) -> Vec<(u64, Bytes)> {
        self.intent.iter().map(|(s, b)| (*s, b.clone())).collect()
    }
    fn set_intent(&mut self, seq: u64, intent: Option<Bytes>) {
        match intent {
            Some(i) => self.intent.insert(seq, i),
            None => {
                self.intent.remove(&seq);
            }
        }
    }
    fn stage_intent(&mut self, seq: u64, intent: Option<Bytes>) -> Staged {
        let key = Self::table_key(self.space, &intent_key(seq));
        let mut cs = ChangeSet::default();
        if self.sink.is_some() {
            cs.push(Table::Intent, key, intent.as_ref().map(|i| i.to_vec()));
        }
        self.intent.set_settled(seq, intent);
        Staged::new(cs, self.sink.clone())
    }
    fn stage(&mut self) -> Staged {
        // In memory there is nothing to encode: the tables are all there is.
        let changes = match self.sink {
            Some(_) => self.encode_changes(),
            None => ChangeSet::default(),
        };
        Staged::new(changes, self.sink.clone())
    }
    fn settle(&mut self) {
        each_table!(self, settle);
    }
    fn stage_layer(&mut self) -> Staged {
        let staged = self.stage();
        each_table!(self, seal);
        staged
    }
    fn settle_oldest(&mut self) {
        each_table!(self, settle_oldest);
    }
    fn rollback(&mut self) {
        each_table!(self, rollback);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_state_behaves_like_maps() {
        let mut s = MemState::new();
        assert_eq!(s.position(3), None);
        s.set_position(3, 9);
        assert_eq!(s.position(3), Some(9));
        assert_eq!(s.positions_len(), 1);
        s.remove_position(3);
        assert_eq!(s.position(3), None);
        assert_eq!(s.node(7).version, 0);
        assert_eq!(s.advance(7).version, 1);
        assert_eq!(s.advance(7).version, 2);
        assert_eq!(s.node(7).slot, 0, "one epoch: the slot never flips");
        s.pending_put(7, s.node(7), Bytes::from_static(b"p"));
        s.pending_done(7, 1);
        assert_eq!(s.pending().len(), 1, "an older version does not clear it");
        s.pending_done(7, 2);
        assert!(s.pending().is_empty());
        s.stash_insert(5, Bytes::from_static(b"a"));
        s.stash_insert(1, Bytes::from_static(b"b"));
        s.stash_insert(5, Bytes::from_static(b"c"));
        assert_eq!(s.stash_len(), 2);
        assert_eq!(s.stash_blocks(), vec![1, 5]);
        assert_eq!(s.stash_get(5).unwrap().as_ref(), b"c");
        assert_eq!(s.stash_remove(5).unwrap().as_ref(), b"c");
        assert_eq!(s.stash_remove(5), None);
        assert!(s.local_bucket(1).is_none());
        s.set_local_bucket(1, vec![(4, Bytes::from_static(b"x"))]);
        assert_eq!(s.local_bucket(1).unwrap().len(), 1);
        assert!(s.meta(b"r9").is_none());
        s.set_meta(b"r9", Bytes::from_static(b"m1"));
        s.set_meta(b"r9", Bytes::from_static(b"m2"));
        s.set_meta(b"s1", Bytes::from_static(b"other"));
        assert_eq!(s.meta(b"r9").unwrap().as_ref(), b"m2");
        assert_eq!(s.meta_range(b"r").len(), 1);
        s.set_intent(1, Some(Bytes::from_static(b"plan")));
        assert_eq!(s.intents(), vec![(1, Bytes::from_static(b"plan"))]);
        let staged = s.stage();
        assert!(staged.changes().is_empty(), "nothing to encode in memory");
        // Staged changes can be undone until they are settled.
        s.rollback();
        assert!(s.intents().is_empty() && s.meta(b"r9").is_none());
        assert!(s.stash_blocks().is_empty() && s.local_bucket(1).is_none());
        assert!(s.pending().is_empty() && s.node(7).version == 0);
        s.set_intent(1, Some(Bytes::from_static(b"plan")));
        s.stash_insert(1, Bytes::from_static(b"b"));
        drop(s.commit());
        s.set_intent(1, None);
        s.set_position(8, 1);
        s.stash_remove(1);
        // A record staged on its own while other changes are pending survives
        // their rollback, and is not one of them.
        drop(s.stage_intent(2, Some(Bytes::from_static(b"ahead"))));
        s.rollback();
        assert_eq!(
            s.intents(),
            vec![
                (1, Bytes::from_static(b"plan")),
                (2, Bytes::from_static(b"ahead"))
            ]
        );
        assert_eq!(s.position(8), None);
        assert_eq!(s.stash_blocks(), vec![1]);
        drop(s.stage_intent(2, None));
        s.rollback();
        assert_eq!(s.intents().len(), 1);
    }

    #[test]
    fn a_bound_state_encodes_exactly_the_changed_keys_and_reloads_from_them() {
        struct Keep(std::sync::Mutex<Vec<ChangeSet>>);
        impl Durable for Keep {
            fn submit(&self, changes: ChangeSet) -> crate::CommitFuture {
                self.0.lock().unwrap().push(changes);
                crate::ready(Ok(()))
            }
        }
        let keep = Arc::new(Keep(Default::default()));
        let lineage = Arc::new(Lineage::new(2, 99));
        let mut s = SpaceState::empty(Space(7), lineage.clone(), Some(keep.clone()));
        s.set_position(1, 10);
        let nv = s.advance(4);
        assert_eq!((nv.epoch, nv.generation), (2, 99));
        s.stash_insert(2, Bytes::from_static(b"two"));
        s.set_local_bucket(1, vec![(2, Bytes::from_static(b"x"))]);
        s.set_meta(b"k", Bytes::from_static(b"v"));
        s.pending_put(4, nv, Bytes::from_static(b"plain"));
        s.set_intent(3, Some(Bytes::from_static(b"i")));
        drop(s.commit());
        s.stash_remove(2);
        // A record staged on its own is a commit of its own, and only that.
        s.set_position(5, 50);
        let own = s.stage_intent(4, Some(Bytes::from_static(b"j")));
        assert_eq!(own.changes().writes.len(), 1);
        drop(own.commit());
        drop(s.commit());
        let sets = keep.0.lock().unwrap().clone();
        assert_eq!(sets[0].writes.len(), 7);
        assert_eq!(sets[1].writes.len(), 1, "only the intent record");
        assert_eq!(sets[2].writes.len(), 2, "only the changed keys");
        assert!(sets[0]
            .writes
            .iter()
            .all(|w| w.key.starts_with(&7u32.to_be_bytes())));
        // Reload from the rows, as the database would.
        let mut rows: BTreeMap<(Table, Vec<u8>), Vec<u8>> = BTreeMap::new();
        for w in sets.iter().flat_map(|c| c.writes.iter()) {
            match &w.value {
                Some(v) => rows.insert((w.table, w.key[4..].to_vec()), v.clone()),
                None => rows.remove(&(w.table, w.key[4..].to_vec())),
            };
        }
        let r = SpaceState::from_rows(
            Space(7),
            lineage,
            None,
            rows.into_iter().map(|((t, k), v)| (t, k, v)),
        )
        .unwrap();
        assert_eq!(r.position(1), Some(10));
        assert_eq!(r.node(4), nv);
        assert_eq!(r.stash_len(), 0);
        assert_eq!(r.local_bucket(1).unwrap().len(), 1);
        assert_eq!(r.meta(b"k").unwrap().as_ref(), b"v");
        assert_eq!(r.pending()[0].2.as_ref(), b"plain");
        assert_eq!(
            r.intents(),
            vec![(3, Bytes::from_static(b"i")), (4, Bytes::from_static(b"j"))]
        );
    }

    #[test]
    fn an_unnumbered_intent_record_of_an_earlier_version_comes_first() {
        let rows = vec![
            (
                Table::Intent,
                9u64.to_be_bytes().to_vec(),
                b"later".to_vec(),
            ),
            (Table::Intent, Vec::new(), b"old".to_vec()),
        ];
        let lineage = Arc::new(Lineage::new(0, 1));
        let r = SpaceState::from_rows(Space(0), lineage.clone(), None, rows).unwrap();
        assert_eq!(
            r.intents(),
            vec![
                (0, Bytes::from_static(b"old")),
                (9, Bytes::from_static(b"later"))
            ]
        );
        assert_eq!(intent_key(0), Vec::<u8>::new());
        let bad = vec![(Table::Intent, vec![1, 2, 3], b"x".to_vec())];
        assert!(SpaceState::from_rows(Space(0), lineage, None, bad).is_err());
    }
}
