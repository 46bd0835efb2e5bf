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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, ObjKey};
use oram_engine::{open_error, validate_op, EngineStats, Op, Oram, OramError, Result};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::TrustedState;

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
    state: tokio::sync::Mutex<Box<dyn TrustedState>>,
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
            state: tokio::sync::Mutex::new(state),
            stats: Mutex::new(EngineStats::default()),
        })
    }

    /// The backend key of logical block `block`.
    pub fn block_key(&self, block: u64) -> ObjKey {
        ObjKey::new(format!("{}/b/{block}", self.cfg.prefix)).expect("prefix validated")
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
        // Blocks to fetch: read before any write of the same batch, and written before.
        let mut written: HashMap<u64, Bytes> = HashMap::new();
        let mut fetch: BTreeMap<u64, u64> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Read(b) if !written.contains_key(b) => {
                    let v = state.version(*b);
                    if v > 0 {
                        fetch.insert(*b, v);
                    }
                }
                Op::Read(_) => {}
                Op::Write(b, d) => {
                    written.insert(*b, d.clone());
                }
            }
        }
        let keys: Vec<ObjKey> = fetch.keys().map(|&b| self.block_key(b)).collect();
        let got = self.store.get_many(&keys).await?;
        let mut current: HashMap<u64, Bytes> = HashMap::new();
        for ((&b, &v), obj) in fetch.iter().zip(got) {
            let key = self.block_key(b);
            let sealed = obj.ok_or_else(|| OramError::Integrity {
                key: key.to_string(),
                reason: format!("block version {v} missing"),
            })?;
            let plain = self
                .sealer
                .open(&Self::identity(b, v), &sealed)
                .map_err(|e| open_error(key.as_str(), e))?;
            current.insert(b, plain.into());
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
        let mut items = Vec::with_capacity(written.len());
        let mut versions = Vec::with_capacity(written.len());
        for &b in written.keys() {
            let v = state.version(b) + 1;
            let sealed = self
                .sealer
                .seal(&Self::identity(b, v), &current[&b])
                .map_err(OramError::Seal)?;
            items.push((self.block_key(b), sealed));
            versions.push((b, v));
        }
        self.store.put_many(items).await?;
        for (b, v) in versions {
            state.set_version(b, v);
        }
        state.commit()?;
        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        st.accesses += results.len() as u64;
        st.rounds += 1;
        Ok(results)
    }

    async fn flush(&self) -> Result<()> {
        // Writes are on the backend before `access` returns.
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }
}
