//! The `direct` engine: blocks without ORAM.
//!
//! Logical block `b` is the sealed object `<prefix>/b/<b>`, read with one GET and
//! written with one PUT. It is the baseline every oblivious engine is measured
//! against ("No ORAM (with blocks)" in Thoresen's master's thesis "Oblivious RAM
//! in practice", NTNU 2019): it has the same sealing, freshness and block size,
//! and none of the obliviousness.
//!
//! **What the storage server observes:** exactly which blocks are read and which are
//! written, and when — the access pattern in full. Reads of never-written blocks
//! and dummy accesses cause no request at all.
//!
//! **Crash safety:** a write's new version and data are committed to the trusted
//! state (journaled) before the PUT, and resent first thing after a crash or a
//! failed PUT; a version number is never used for two different contents. As for
//! tree buckets, each block has two slots (`<prefix>/b/<b>` and `<prefix>/b/<b>.1`)
//! so that the objects a checkpoint refers to stay intact until the next one. A
//! taken block ([`Op::Take`]) keeps its version (so no version is ever reused) and
//! is marked absent in the trusted state.
//!
//! A batch reads the blocks it needs with one `get_many` (a written block whose
//! object is missing is an integrity error), commits the new versions with the
//! journal, then writes the final value of every written block with one
//! `put_many` before it answers. It keeps no intent record: it is not oblivious,
//! so a repeated read reveals nothing its trace does not already show. A staged
//! access ([`oram_engine::Oram::access_staged`]) returns the batch uncommitted;
//! its PUTs follow the parent's commit.
//!
//! **Growth** ([`Oram::grow`]): more room is only a larger id limit, so a
//! growth is one commit of the trusted state recording the new capacity (read
//! back at every open, whatever the configuration says) and sends nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey, SizeBound};
use oram_engine::{
    open_error, snapshot_row, validate_op, CheckReport, EngineModel, EngineSettings, EngineStats,
    Formatted, Grown, Layout, Op, Oram, OramError, Parts, Quiesced, Result, Shape, StagedAccess,
    Traffic,
};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::{NodeVersion, TrustedState};
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedMutexGuard;

/// Parameters of a direct engine.
#[derive(Clone, Debug)]
pub struct DirectConfig {
    /// Logical blocks.
    pub capacity: u64,
    /// Bytes per block.
    pub block_size: usize,
    /// Backend key prefix (a valid key).
    pub prefix: String,
}

impl Default for DirectConfig {
    fn default() -> Self {
        Self {
            capacity: 1 << 16,
            block_size: 4096,
            prefix: "vol0".into(),
        }
    }
}

/// The direct engine's settings in `[engine]` (`kind = "direct"`): none besides
/// the volume's shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectSettings {}

impl EngineSettings for DirectSettings {
    fn kind(&self) -> &'static str {
        "direct"
    }
    fn validate(&self, _: &Shape) -> std::result::Result<(), String> {
        Ok(())
    }
    fn oblivious(&self) -> bool {
        // Every block lives at a fixed key: the provider sees which are accessed.
        false
    }
    fn fixed(&self, _: &Shape) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn adopt(
        &mut self,
        _: &BTreeMap<String, String>,
        _: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<(), String> {
        Ok(())
    }
    fn state_bound(&self, shape: &Shape) -> u64 {
        // A version per block and an absence mark per block, at most.
        shape.capacity * (snapshot_row(8, 24) + snapshot_row(9, 0))
    }
    /// One block object per op.
    fn round_bytes_per_op(&self, shape: &Shape) -> u64 {
        shape.block_size as u64
    }
    /// A read GETs the block's sealed object, a write PUTs it.
    fn model(&self, shape: &Shape) -> EngineModel {
        let bs = shape.block_size as u64;
        let object = Sealer::sealed_len(shape.block_size) as u64;
        let read_op = Traffic {
            read_bytes: object as f64,
            written_bytes: 0.0,
            blocks: 1.0,
            requests: 1.0,
        };
        let write_op = Traffic {
            read_bytes: 0.0,
            written_bytes: object as f64,
            blocks: 1.0,
            requests: 1.0,
        };
        EngineModel {
            kind: self.kind().into(),
            oblivious: self.oblivious(),
            capacity: shape.capacity,
            block_size: bs,
            layout: Layout::Blocks,
            object_bytes: object,
            read_op,
            write_op,
            overhead: EngineModel::overhead_of(&read_op, &write_op, bs),
            assumes: "one GET of a block written before per read, one PUT per whole-block write"
                .into(),
            state_bound: self.state_bound(shape),
            state_base_bytes: self.state_bound(shape),
            cache_bytes: 0,
            stash_bound: EngineSettings::stash_bound(self, shape),
            round_bytes_per_op: self.round_bytes_per_op(shape),
            ops_per_round: shape.max_batch as u64,
            round_requests_per_op: 1.0,
        }
    }

    fn build(&self, shape: &Shape, parts: Parts) -> Result<Arc<dyn Oram>> {
        let cfg = DirectConfig {
            capacity: shape.capacity,
            block_size: shape.block_size,
            prefix: shape.prefix.clone(),
        };
        Ok(Arc::new(DirectEngine::new(
            cfg,
            parts.store,
            parts.sealer,
            parts.state,
        )?))
    }
}

/// The direct (non-oblivious) engine.
pub struct DirectEngine {
    cfg: DirectConfig,
    /// The capacity in effect: the configuration's, or the one the last growth
    /// recorded ([`GROWN_KEY`]); changed only with the state held, after the
    /// commit that records it.
    capacity: AtomicU64,
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    /// The trusted state's space (bound into every seal).
    space: u32,
    /// The trusted state; held by one batch from its reads until its PUTs are done.
    state: Arc<tokio::sync::Mutex<Box<dyn TrustedState>>>,
    /// Guards the counters (updated once per batch).
    stats: Mutex<EngineStats>,
}

/// The trusted-state key marking block `b` taken (absent, version kept).
fn taken_key(b: u64) -> [u8; 9] {
    let mut k = [b't'; 9];
    k[1..].copy_from_slice(&b.to_be_bytes());
    k
}

/// The trusted-state key of the capacity a growth switched to (8 bytes, big
/// endian); absent until the engine grows.
const GROWN_KEY: &[u8] = b"direct/capacity";

/// The capacity recorded by a growth in `state`, if any.
fn grown_capacity(state: &dyn TrustedState) -> Result<Option<u64>> {
    match state.meta(GROWN_KEY) {
        None => Ok(None),
        Some(v) => {
            let raw: [u8; 8] = v.as_ref().try_into().map_err(|_| OramError::Integrity {
                key: "trusted state".into(),
                reason: format!("the grown capacity record has {} bytes, not 8", v.len()),
            })?;
            Ok(Some(u64::from_be_bytes(raw)))
        }
    }
}

/// The PUTs of a batch, journaled: `(block, version, key, sealed)`.
type Puts = Vec<(u64, u64, ObjKey, Bytes)>;

impl DirectEngine {
    /// Creates the engine; block versions live in `state`. Its capacity is
    /// the one a growth recorded in `state`, if larger than `cfg.capacity`.
    pub fn new(
        cfg: DirectConfig,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Result<Self> {
        if cfg.capacity == 0 || cfg.block_size == 0 {
            return Err(OramError::Config(
                "capacity and block size must be positive".into(),
            ));
        }
        ObjKey::new(format!("{}/b/0", cfg.prefix))
            .map_err(|e| OramError::Config(format!("prefix: {e}")))?;
        let capacity =
            grown_capacity(state.as_ref())?.map_or(cfg.capacity, |c| c.max(cfg.capacity));
        Ok(Self {
            capacity: AtomicU64::new(capacity),
            cfg,
            store,
            sealer,
            space: state.space().0,
            state: Arc::new(tokio::sync::Mutex::new(state)),
            stats: Mutex::new(EngineStats::default()),
        })
    }

    /// The backend key of logical block `block` in `slot`.
    pub fn block_key(&self, block: u64, slot: u8) -> ObjKey {
        let key = if slot == 0 {
            format!("{}/b/{block}", self.cfg.prefix)
        } else {
            format!("{}/b/{block}.{slot}", self.cfg.prefix)
        };
        ObjKey::new(key).expect("prefix validated")
    }

    /// The size of every block object: reads are bounded to exactly this, so a
    /// back-end never buffers more and a truncated or extended object is refused
    /// by the read itself.
    fn object_bound(&self) -> SizeBound {
        SizeBound::Exact(Sealer::sealed_len(self.cfg.block_size) as u64)
    }

    /// Sends the journaled writes that are not known to have landed.
    async fn resend(&self, state: &mut dyn TrustedState) -> Result<()> {
        let pending = state.pending();
        if pending.is_empty() {
            return Ok(());
        }
        let mut items = Vec::with_capacity(pending.len());
        for (b, nv, plain) in &pending {
            items.push((self.block_key(*b, nv.slot), self.seal(*b, nv, plain)?));
        }
        self.store.put_many(items).await?;
        for (b, nv, _) in pending {
            state.pending_done(b, nv.version);
        }
        Ok(())
    }

    fn identity(&self, block: u64, nv: &NodeVersion) -> ObjectIdentity {
        ObjectIdentity {
            kind: ObjectKind::DirectBlock,
            space: self.space,
            position: block,
            version: nv.version,
            generation: nv.generation,
        }
    }

    fn seal(&self, block: u64, nv: &NodeVersion, plain: &[u8]) -> Result<Bytes> {
        self.sealer
            .seal(&self.identity(block, nv), plain)
            .map_err(OramError::Seal)
    }

    fn open(&self, block: u64, nv: NodeVersion, obj: Option<Bytes>) -> Result<Bytes> {
        let key = self.block_key(block, nv.slot);
        let sealed = obj.ok_or_else(|| OramError::Integrity {
            key: key.to_string(),
            reason: format!("block version {} missing", nv.version),
        })?;
        let plain = self
            .sealer
            .open(&self.identity(block, &nv), &sealed)
            .map_err(|e| open_error(key.as_str(), e))?;
        if plain.len() != self.cfg.block_size {
            return Err(OramError::Integrity {
                key: key.to_string(),
                reason: format!(
                    "{} bytes where a block has {}",
                    plain.len(),
                    self.cfg.block_size
                ),
            });
        }
        Ok(plain.into())
    }

    /// Reads what `ops` need, serves them, and journals the new versions (not
    /// committed). Returns the answers and the PUTs to send once committed.
    async fn run(&self, state: &mut dyn TrustedState, ops: Vec<Op>) -> Result<(Vec<Bytes>, Puts)> {
        for op in &ops {
            validate_op(op, self.capacity(), self.cfg.block_size)?;
        }
        let stored = |state: &dyn TrustedState, b: u64| {
            state.node(b).version > 0 && state.meta(&taken_key(b)).is_none()
        };
        // An insert of a block held and named by no access of the batch is
        // refused before anything is sent, as by every engine (`Op::Insert`).
        let accessed: BTreeSet<u64> = ops
            .iter()
            .filter(|o| o.accesses())
            .filter_map(Op::block)
            .collect();
        for op in &ops {
            if let Op::Insert(b, _) = op {
                if stored(state, *b) && !accessed.contains(b) {
                    return Err(OramError::Unsupported(
                        "insert of a block the engine holds (write it instead)",
                    ));
                }
            }
        }
        self.resend(state).await?;
        // Blocks to fetch: read (or taken) before any write of the same batch.
        let mut written: HashMap<u64, ()> = HashMap::new();
        let mut fetch: BTreeMap<u64, NodeVersion> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Read(b) | Op::Take(b) if !written.contains_key(b) && stored(state, *b) => {
                    fetch.insert(*b, state.node(*b));
                }
                Op::Write(b, _) | Op::Insert(b, _) => {
                    written.insert(*b, ());
                }
                _ => {}
            }
        }
        let keys: Vec<ObjKey> = fetch
            .iter()
            .map(|(&b, nv)| self.block_key(b, nv.slot))
            .collect();
        let got = self
            .store
            .get_many_bounded(&keys, self.object_bound())
            .await?;
        let mut current: HashMap<u64, Option<Bytes>> = HashMap::new();
        for ((&b, &nv), obj) in fetch.iter().zip(got) {
            current.insert(b, Some(self.open(b, nv, obj)?));
        }
        let zeros = Bytes::from(vec![0u8; self.cfg.block_size]);
        let mut answers = Vec::with_capacity(ops.len());
        let mut changed: BTreeMap<u64, Option<Bytes>> = BTreeMap::new();
        for op in ops {
            let value = |current: &HashMap<u64, Option<Bytes>>, b: u64| {
                current
                    .get(&b)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| zeros.clone())
            };
            answers.push(match op {
                Op::Read(b) => value(&current, b),
                // Not oblivious: an insert (of a block not held) is a write.
                Op::Write(b, d) | Op::Insert(b, d) => {
                    current.insert(b, Some(d.clone()));
                    changed.insert(b, Some(d));
                    Bytes::new()
                }
                Op::Take(b) => {
                    let v = value(&current, b);
                    current.insert(b, None);
                    changed.insert(b, None);
                    v
                }
                Op::Dummy => Bytes::new(),
            });
        }
        // Journal the new versions; the PUTs follow the commit.
        let mut puts = Vec::new();
        for (b, data) in changed {
            match data {
                Some(d) => {
                    state.remove_meta(&taken_key(b));
                    let nv = state.advance(b);
                    state.pending_put(b, nv, d.clone());
                    puts.push((
                        b,
                        nv.version,
                        self.block_key(b, nv.slot),
                        self.seal(b, &nv, &d)?,
                    ));
                }
                None => state.set_meta(&taken_key(b), Bytes::new()),
            }
        }
        Ok((answers, puts))
    }

    /// Sends a committed batch's PUTs and drops their journal entries (committed
    /// with the next commit).
    async fn put(&self, state: &mut dyn TrustedState, puts: Puts) -> Result<()> {
        if puts.is_empty() {
            return Ok(());
        }
        let items = puts
            .iter()
            .map(|(_, _, k, v)| (k.clone(), v.clone()))
            .collect();
        self.store.put_many(items).await?;
        for (b, v, _, _) in puts {
            state.pending_done(b, v);
        }
        Ok(())
    }

    fn count(&self, ops: usize) {
        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        st.accesses += ops as u64;
        st.rounds += 1;
    }
}

#[async_trait]
impl Oram for DirectEngine {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn block_size(&self) -> usize {
        self.cfg.block_size
    }

    fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let n = ops.len();
        let mut state = self.state.lock().await;
        let (answers, puts) = match self.run(state.as_mut(), ops).await {
            Ok(r) => r,
            Err(e) => {
                state.rollback();
                return Err(e);
            }
        };
        if let Err(e) = state.stage().commit().await {
            state.rollback();
            return Err(e.into());
        }
        state.settle();
        // Durable now: a PUT that fails stays journaled and is resent first by the
        // next access (which fails while the backend refuses).
        let _ = self.put(state.as_mut(), puts).await;
        self.count(n);
        Ok(answers)
    }

    async fn access_staged(&self, ops: Vec<Op>) -> Result<StagedAccess> {
        let n = ops.len();
        let mut state: OwnedMutexGuard<Box<dyn TrustedState>> =
            self.state.clone().lock_owned().await;
        let (answers, puts) = match self.run(state.as_mut(), ops).await {
            Ok(r) => r,
            Err(e) => {
                state.rollback();
                return Err(e);
            }
        };
        let changes = state.stage();
        let store = self.store.clone();
        self.count(n);
        Ok(StagedAccess::new(answers, changes, move |outcome| {
            let mut state = state;
            if outcome.is_err() {
                state.rollback();
                return;
            }
            state.settle();
            // Committed: send the PUTs, holding the state until they are done (a
            // failed PUT stays journaled and is resent first by the next access).
            tokio::spawn(async move {
                let items = puts
                    .iter()
                    .map(|(_, _, k, v)| (k.clone(), v.clone()))
                    .collect();
                if store.put_many(items).await.is_ok() {
                    for (b, v, _, _) in puts {
                        state.pending_done(b, v);
                    }
                }
            });
        }))
    }

    async fn flush(&self) -> Result<()> {
        self.quiesce().await.map(drop)
    }

    fn stats(&self) -> EngineStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn quiesce(&self) -> Result<Quiesced> {
        let mut state = self.state.clone().lock_owned().await;
        self.resend(state.as_mut()).await?;
        state.commit().await?;
        Ok(Quiesced::new(state))
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let mut state = self.state.lock().await;
        self.resend(state.as_mut()).await?;
        state.commit().await?;
        let nodes: Vec<(u64, NodeVersion)> = state
            .nodes()
            .into_iter()
            .filter(|(b, _)| state.meta(&taken_key(*b)).is_none())
            .collect();
        let total = nodes.len() as u64;
        let mut rep = CheckReport::default();
        let mut done = 0;
        for chunk in nodes.chunks(256) {
            let keys: Vec<ObjKey> = chunk
                .iter()
                .map(|(b, nv)| self.block_key(*b, nv.slot))
                .collect();
            let got = self
                .store
                .get_many_bounded(&keys, self.object_bound())
                .await?;
            for ((b, nv), obj) in chunk.iter().zip(got) {
                if *b >= self.capacity() {
                    rep.problem(format!("block {b} beyond the capacity"));
                    continue;
                }
                rep.objects_read += 1;
                match self.open(*b, *nv, obj) {
                    Ok(_) => rep.written_blocks.push(*b),
                    Err(e) => {
                        rep.objects_bad += 1;
                        rep.problem(e.to_string());
                    }
                }
            }
            done += chunk.len() as u64;
            progress(done, total);
        }
        rep.blocks_found = rep.written_blocks.len() as u64;
        Ok(rep)
    }

    async fn sweep(&self) -> Result<u64> {
        let state = self.state.lock().await;
        let live: BTreeSet<ObjKey> = state
            .nodes()
            .into_iter()
            .map(|(b, nv)| self.block_key(b, nv.slot))
            .collect();
        let prefix = format!("{}/b/", self.cfg.prefix);
        Ok(oram_blockstore::delete_unreferenced(self.store.as_ref(), &prefix, &live).await?)
    }

    fn grows(&self) -> bool {
        true
    }

    /// More room: the new capacity recorded in one commit of the trusted state
    /// (between batches), nothing written to the backend. Growing to the
    /// capacity in effect is a no-op; shrinking is refused. A crash before the
    /// commit leaves the old size, after it the new one.
    ///
    /// Observed by the storage server: nothing (the blocks beyond the old
    /// capacity appear as they are first written, as any block does).
    async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        let mut state = self.state.lock().await;
        let current = self.capacity();
        if capacity < current {
            return Err(OramError::Config(format!(
                "a volume cannot shrink ({current} blocks, {capacity} asked for)"
            )));
        }
        if capacity > current {
            state.set_meta(GROWN_KEY, Bytes::copy_from_slice(&capacity.to_be_bytes()));
            if let Err(e) = state.commit().await {
                state.rollback();
                return Err(e.into());
            }
            self.capacity.store(capacity, Ordering::Release);
        }
        progress(0, 0);
        Ok(Grown {
            capacity,
            positions: 0,
            written: 0,
        })
    }

    /// Nothing to format: a never-written block is answered with zeros without a
    /// request, so no read can find an object missing. Observed: nothing.
    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        progress(0, 0);
        Ok(Formatted::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_one_sealed_block_per_op() {
        let shape = Shape {
            capacity: 8,
            block_size: 4096,
            max_batch: 64,
            prefix: "vol0".into(),
            id_limit: None,
        };
        let m = DirectSettings::default().model(&shape);
        // The objects the engine writes (`object_bound`): the sealed block.
        assert_eq!(m.object_bytes, 4096 + oram_seal::OVERHEAD as u64);
        assert_eq!((m.read_op.written_bytes, m.write_op.read_bytes), (0.0, 0.0));
        assert_eq!(m.read_op.read_bytes, m.object_bytes as f64);
        assert_eq!(m.overhead_blocks(), 1.0);
        assert!((m.overhead - 4141.0 / 4096.0).abs() < 1e-12);
        assert!(!m.oblivious && m.layout == Layout::Blocks);
    }
}
