//! The `direct` engine: blocks without ORAM.
//!
//! Logical block `b` is the sealed object `<prefix>/b/<b>`, read with one GET and
//! written with one PUT. It is the baseline every oblivious engine is measured
//! against ("No ORAM (with blocks)" in the thesis): it has the same sealing,
//! freshness and block size, and none of the obliviousness.
//!
//! **What the storage server observes:** exactly which blocks are read and which are
//! written, and when — the access pattern in full. Reads of never-written blocks
//! cause no request at all.
//!
//! **Crash safety:** a write's new version and data are committed to the trusted
//! state (journaled) before the PUT, and resent first thing after a crash or a
//! failed PUT; a version number is never used for two different contents. As for
//! tree buckets, each block has two slots (`<prefix>/b/<b>` and `<prefix>/b/<b>.1`)
//! so that the objects a checkpoint refers to stay intact until the next one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey};
use oram_engine::{
    open_error, validate_op, CheckReport, EngineStats, Op, Oram, OramError, Quiesced, Result,
};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::{NodeVersion, TrustedState};

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

/// The direct (non-oblivious) engine.
pub struct DirectEngine {
    cfg: DirectConfig,
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    state: Arc<tokio::sync::Mutex<Box<dyn TrustedState>>>,
    stats: Mutex<EngineStats>,
}

impl DirectEngine {
    /// Creates the engine; block versions live in `state`.
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
        Ok(Self {
            cfg,
            store,
            sealer,
            state: Arc::new(tokio::sync::Mutex::new(state)),
            stats: Mutex::new(EngineStats::default()),
        })
    }

    /// The backend key of logical block `block` in `slot` (0 or 1).
    pub fn block_key(&self, block: u64, slot: u8) -> ObjKey {
        let key = if slot == 0 {
            format!("{}/b/{block}", self.cfg.prefix)
        } else {
            format!("{}/b/{block}.{slot}", self.cfg.prefix)
        };
        ObjKey::new(key).expect("prefix validated")
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

    fn seal(&self, block: u64, nv: &NodeVersion, plain: &[u8]) -> Result<Bytes> {
        self.sealer
            .seal(&Self::identity(block, nv.version), plain)
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
            .open(&Self::identity(block, nv.version), &sealed)
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

    fn identity(block: u64, version: u64) -> ObjectIdentity {
        ObjectIdentity {
            kind: ObjectKind::DirectBlock,
            position: block,
            version,
        }
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
        self.cfg.capacity
    }

    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        for op in &ops {
            validate_op(op, self.cfg.capacity, self.cfg.block_size)?;
        }
        let mut state = self.state.lock().await;
        self.resend(state.as_mut()).await?;
        // Blocks to fetch: read before any write of the same batch, and written before.
        let mut written: HashMap<u64, Bytes> = HashMap::new();
        let mut fetch: BTreeMap<u64, NodeVersion> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Read(b) if !written.contains_key(b) => {
                    let nv = state.node(*b);
                    if nv.version > 0 {
                        fetch.insert(*b, nv);
                    }
                }
                Op::Read(_) => {}
                Op::Write(b, d) => {
                    written.insert(*b, d.clone());
                }
            }
        }
        let keys: Vec<ObjKey> = fetch
            .iter()
            .map(|(&b, nv)| self.block_key(b, nv.slot))
            .collect();
        let got = self
            .store
            .get_many_bounded(
                &keys,
                oram_blockstore::SizeBound::Exact(Sealer::sealed_len(self.cfg.block_size) as u64),
            )
            .await?;
        let mut current: HashMap<u64, Bytes> = HashMap::new();
        for ((&b, &nv), obj) in fetch.iter().zip(got) {
            current.insert(b, self.open(b, nv, obj)?);
        }
        let zeros = Bytes::from(vec![0u8; self.cfg.block_size]);
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Read(b) => {
                    results.push(current.get(&b).cloned().unwrap_or_else(|| zeros.clone()))
                }
                Op::Write(b, d) => {
                    current.insert(b, d);
                    results.push(Bytes::new());
                }
            }
        }
        // Journal the new versions first, then PUT; a failed PUT is resent by the
        // next access (or after a crash), before anything else.
        let mut items = Vec::with_capacity(written.len());
        let mut versions = Vec::with_capacity(written.len());
        for &b in written.keys() {
            let nv = state.advance(b);
            state.pending_put(b, nv, current[&b].clone());
            items.push((self.block_key(b, nv.slot), self.seal(b, &nv, &current[&b])?));
            versions.push((b, nv.version));
        }
        if !items.is_empty() {
            state.commit()?;
            self.store.put_many(items).await?;
            for (b, v) in versions {
                state.pending_done(b, v);
            }
        }
        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        st.accesses += results.len() as u64;
        st.rounds += 1;
        Ok(results)
    }

    async fn flush(&self) -> Result<()> {
        self.quiesce().await.map(drop)
    }

    fn stats(&self) -> EngineStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn quiesce(&self) -> Result<Quiesced> {
        let mut state = self.state.clone().lock_owned().await;
        self.resend(state.as_mut()).await?;
        state.commit()?;
        Ok(Quiesced::new(state))
    }

    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let mut state = self.state.lock().await;
        self.resend(state.as_mut()).await?;
        state.commit()?;
        let nodes = state.nodes();
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
                .get_many_bounded(
                    &keys,
                    oram_blockstore::SizeBound::Exact(
                        Sealer::sealed_len(self.cfg.block_size) as u64
                    ),
                )
                .await?;
            for ((b, nv), obj) in chunk.iter().zip(got) {
                if *b >= self.cfg.capacity {
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
        let live: std::collections::BTreeSet<ObjKey> = state
            .nodes()
            .into_iter()
            .map(|(b, nv)| self.block_key(b, nv.slot))
            .collect();
        let prefix = format!("{}/b/", self.cfg.prefix);
        Ok(oram_blockstore::delete_unreferenced(self.store.as_ref(), &prefix, &live).await?)
    }
}
