//! The configuration every tree engine shares (its scheme adds its own).

use std::collections::BTreeMap;

use oram_engine::Shape;

use crate::{TreeParams, MAX_KEY_SHARDS};

/// Key shards of a new volume's tree ([`TreeConfig::key_shards`]): 16 prefixes,
/// sixteen times one prefix's request rates at S3 (3,500 PUT and 5,500 GET a
/// second each) once the provider has split them.
pub const DEFAULT_KEY_SHARDS: u32 = 16;

/// Refuses more key shards than the key layout allows ([`MAX_KEY_SHARDS`]):
/// the one check of the engines' settings and of [`crate::Sealing`].
pub fn check_key_shards(shards: u32) -> Result<(), String> {
    if shards > MAX_KEY_SHARDS {
        return Err(format!("{shards} key shards: at most {MAX_KEY_SHARDS}"));
    }
    Ok(())
}

/// The name under which a volume records its tree's key shards.
const KEY_SHARDS: &str = "key_shards";

/// Records `shards` in a volume's fixed parameters when there are any (a volume
/// recording none has none: every volume of earlier versions).
pub fn record_key_shards(fixed: &mut BTreeMap<String, String>, shards: u32) {
    if shards > 1 {
        fixed.insert(KEY_SHARDS.into(), shards.to_string());
    }
}

/// The key shards a volume recorded ([`record_key_shards`]); 0 if none.
pub fn recorded_key_shards(recorded: &BTreeMap<String, String>) -> Result<u32, String> {
    match recorded.get(KEY_SHARDS) {
        None => Ok(0),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n <= MAX_KEY_SHARDS => Ok(n),
            _ => Err(format!(
                "the volume's recorded key_shards {v:?} is not a number up to {MAX_KEY_SHARDS}"
            )),
        },
    }
}

/// What every tree engine is configured with besides its scheme's own
/// parameters (Z, S, A, ...). Each scheme's configuration embeds one as `tree`.
#[derive(Clone, Debug)]
pub struct TreeConfig {
    /// Logical blocks stored (any number ≥ 1, not only powers of two): the
    /// capacity the volume was created with, also once it grew (a grown engine
    /// takes its shape from its trusted state, see `TreeEngine::grow_prepare`).
    pub capacity: u64,
    /// Block ids are `0..id_limit`; default: the capacity. A partition of a larger
    /// id space holds at most `capacity` blocks with ids up to the limit.
    pub id_limit: Option<u64>,
    /// Bytes per block.
    pub block_size: usize,
    /// Number of leaves; default: the scheme's (a power of two).
    pub leaves: Option<u64>,
    /// Levels of the tree, from the root, kept in trusted local state instead of
    /// the backend (tree-top cache). Each saves backend reads and writes per
    /// access. Recorded in the volume: changing it would orphan buckets.
    pub cached_levels: u32,
    /// Largest stash allowed after a round; above it an access fails with
    /// [`oram_engine::OramError::StashOverflow`] (nothing is lost). The default
    /// (89) is Path ORAM's for Z = 4 (overflow probability below 2⁻⁸⁰ per
    /// access); other schemes' default configurations set their own.
    pub stash_bound: usize,
    /// Most ops served in one round; longer batches are split into several rounds.
    pub max_batch: usize,
    /// Accepted for compatibility; unused: a round's buckets are written before
    /// its commit, so one round's are in memory at a time.
    pub max_inflight_writebacks: usize,
    /// Attempts of one round's bucket writes before the round fails (it is
    /// finished again, as the same access, by the next round).
    pub writeback_attempts: u32,
    /// Attempts of a round within one access: a round the backend interrupted (a
    /// transient store error) is finished as the same access (same leaves and
    /// slots) and the access's own round drawn again, up to this many times in
    /// all, before the access fails. The server sees what a client's retry would
    /// show it.
    pub round_attempts: u32,
    /// Most superseded objects' keys one round deletes once a checkpoint has
    /// landed (see [`oram_engine::Oram::collect`]); 1,000 is one S3
    /// DeleteObjects request.
    pub collect_batch: usize,
    /// Backend key prefix of this volume (a valid key, e.g. `vol0`).
    pub prefix: String,
    /// Key shards: bucket `n`'s objects go under `<prefix>/<dir>/<n mod
    /// key_shards, in hex>/`, so that a provider that limits requests per key
    /// prefix (S3) serves the tree from as many prefixes. 0 or 1: no shard
    /// segment (volumes created before). Recorded in the volume.
    pub key_shards: u32,
    /// Seed for the random choices. `None` (the default, and the only safe
    /// choice in production) seeds from the OS; tests fix it for reproducible
    /// traces.
    pub rng_seed: Option<[u8; 32]>,
}

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            capacity: 1 << 16,
            id_limit: None,
            block_size: 4096,
            leaves: None,
            cached_levels: 0,
            stash_bound: 89,
            max_batch: 64,
            max_inflight_writebacks: 4,
            writeback_attempts: 4,
            round_attempts: 3,
            collect_batch: 1000,
            prefix: "vol0".into(),
            key_shards: 0,
            rng_seed: None,
        }
    }
}

impl TreeConfig {
    /// The configuration of a volume of `shape` with these scheme settings (the
    /// rest at their defaults).
    pub fn for_shape(
        shape: &Shape,
        cached_levels: u32,
        stash_bound: usize,
        max_inflight_writebacks: usize,
    ) -> Self {
        Self {
            capacity: shape.capacity,
            block_size: shape.block_size,
            cached_levels,
            stash_bound,
            max_batch: shape.max_batch,
            max_inflight_writebacks,
            prefix: shape.prefix.clone(),
            id_limit: shape.id_limit,
            ..Self::default()
        }
    }

    /// The block ids' limit: `id_limit`, or the capacity.
    pub fn id_limit(&self) -> u64 {
        self.id_limit.unwrap_or(self.capacity)
    }

    /// The generic engine parameters (validated by the engine).
    pub fn params(&self) -> TreeParams {
        TreeParams {
            capacity: self.capacity,
            id_limit: self.id_limit(),
            block_size: self.block_size,
            max_batch: self.max_batch,
            max_inflight_writebacks: self.max_inflight_writebacks,
            writeback_attempts: self.writeback_attempts,
            round_attempts: self.round_attempts,
            stash_bound: self.stash_bound,
            collect_batch: self.collect_batch.max(1),
            prefix: self.prefix.clone(),
            key_shards: self.key_shards,
            rng_seed: self.rng_seed,
        }
    }
}
