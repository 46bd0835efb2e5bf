//! What an engine crate's configuration offers the binary: validation, the
//! parameters fixed at volume creation, a bound on its trusted state, and the
//! engine itself — so the binary builds engines without knowing their internals.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use oram_blockstore::BlockStore;
use oram_seal::Sealer;
use oram_state::TrustedState;

use crate::{EngineModel, Oram, OramError, Placement, Result};

/// What every engine of a volume is given: its size and its backend prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Logical blocks.
    pub capacity: u64,
    /// Bytes per block.
    pub block_size: usize,
    /// Blocks per round (the object layer's streaming step too).
    pub max_batch: usize,
    /// Backend key prefix of the volume (a valid key).
    pub prefix: String,
    /// Block ids are `0..id_limit`; `None`: the capacity. A partition
    /// framework's sub-engine holds `capacity` blocks of the whole volume's ids.
    pub id_limit: Option<u64>,
}

/// The pieces an engine is built from.
pub struct Parts {
    /// The backend.
    pub store: Arc<dyn BlockStore>,
    /// The volume's sealer.
    pub sealer: Arc<Sealer>,
    /// The engine's trusted state (one space).
    pub state: Box<dyn TrustedState>,
}

/// An engine crate's configuration (the payload of the binary's `[engine]`
/// section for one `kind`).
pub trait EngineSettings: Debug + Send + Sync {
    /// The engine's name (`path`, `ring`, `direct`): the `kind` it is configured by.
    fn kind(&self) -> &'static str;

    /// Checks values that parse but cannot work.
    fn validate(&self, shape: &Shape) -> std::result::Result<(), String>;

    /// Whether the engine hides from the storage provider which blocks are read
    /// and written. A non-oblivious engine (the `direct` baseline) runs only with
    /// the operator's explicit consent.
    fn oblivious(&self) -> bool {
        true
    }

    /// The parameters that decide where data lives — which backend object holds
    /// what, what is kept locally instead — by name. They are recorded when a
    /// volume is created; a start with other values is refused, since the data
    /// would not be found (or silently lost).
    fn fixed(&self, shape: &Shape) -> BTreeMap<String, String>;

    /// Takes from `recorded` (what [`EngineSettings::fixed`] returned when the
    /// volume was created) the value of every fixed parameter whose setting the
    /// configuration does not name (`named(key)` says whether it names the
    /// setting `key`), so that an existing volume keeps its parameters when the
    /// defaults change. A named setting is kept (and a start with it refused when
    /// it differs); a recorded value that does not parse is an error.
    fn adopt(
        &mut self,
        recorded: &BTreeMap<String, String>,
        named: &dyn Fn(&str) -> bool,
    ) -> std::result::Result<(), String>;

    /// The block bytes one op of a round reads from the backend, at most (a round
    /// writes no more than it reads): for sizing rounds in bytes (`[engine]
    /// round_mib` in the binary). What the storage server observes does not
    /// depend on it beyond the number of ops per round.
    fn round_bytes_per_op(&self, shape: &Shape) -> u64;

    /// An upper bound of the bytes the engine's trusted state takes in a snapshot
    /// of the state database (position map, versions, stash at its bound, local
    /// buckets, metadata, intent record), so that the sealed checkpoint can be
    /// padded to a size that depends only on the parameters.
    fn state_bound(&self, shape: &Shape) -> u64;

    /// An upper bound of the trusted state a cluster node keeps for `owned` of
    /// the engine's partitions (their sub-engines' states: no position map or
    /// eviction cache, which the front keeps), so that the node's checkpoint
    /// can be padded to a size that depends only on the parameters and on how
    /// many partitions it owns (public). The default is the share of
    /// [`EngineSettings::state_bound`] that `owned` of the partitions make.
    fn node_state_bound(&self, shape: &Shape, owned: u64) -> u64 {
        let partitions = u64::from(self.partitions(shape).unwrap_or(1).max(1));
        self.state_bound(shape)
            .saturating_mul(owned)
            .div_ceil(partitions)
    }

    /// [`EngineSettings::state_bound`] of a volume created at `created` and
    /// grown ([`crate::Oram::grow`]) to `capacity` blocks, at least
    /// `created.capacity`: what its checkpoints are padded to. The default is
    /// the bound of a volume created at `capacity` — right for an engine whose
    /// growth gives it the shape it would have had, created at that size; an
    /// engine that grows by whole levels (a tree) has more room than that.
    fn grown_state_bound(&self, created: &Shape, capacity: u64) -> u64 {
        self.state_bound(&Shape {
            capacity,
            ..created.clone()
        })
    }

    /// The largest stash the engine allows after an access, in blocks (0: it
    /// keeps no stash): what monitoring compares the stash size with.
    fn stash_bound(&self, shape: &Shape) -> u64 {
        let _ = shape;
        0
    }

    /// The engine's sizing and analytical cost at `shape`, from the engine's own
    /// formulas: layout, expected backend bytes per op, local state, round size
    /// (for benchmarks and `oram-proxy describe`; nothing the engine runs on).
    fn model(&self, shape: &Shape) -> EngineModel;

    /// Builds the engine. Write-backs journaled in the state by an earlier run are
    /// queued to be resent (by the first flush or access).
    fn build(&self, shape: &Shape, parts: Parts) -> Result<Arc<dyn Oram>>;

    /// The engine's partitions, if it has any (the partition engines: their
    /// number at `shape`); `None` for an engine that cannot be spread over
    /// machines.
    fn partitions(&self, shape: &Shape) -> Option<u32> {
        let _ = shape;
        None
    }

    /// Builds the engine with its partitions where `place` puts them (a
    /// cluster's front: on the nodes). The storage server sees what
    /// [`EngineSettings::build`]'s engine shows it. Engines without partitions
    /// refuse.
    fn build_placed(
        &self,
        shape: &Shape,
        parts: Parts,
        place: &dyn Placement,
    ) -> Result<Arc<dyn Oram>> {
        let _ = (shape, parts, place);
        Err(OramError::Config(format!(
            "the {} engine has no partitions to serve on other machines \
             (a cluster needs the oblivistore or curious engine)",
            self.kind()
        )))
    }

    /// Builds the sub-engines of partitions `which` alone, in this process, over
    /// `parts` (whose state is the engine's space: each partition's is its
    /// sibling, as in [`EngineSettings::build`]) — a cluster node's share.
    /// Engines without partitions refuse.
    fn build_partitions(
        &self,
        shape: &Shape,
        parts: Parts,
        which: &[u32],
    ) -> Result<Vec<(u32, Arc<dyn Oram>)>> {
        let _ = (shape, parts, which);
        Err(OramError::Config(format!(
            "the {} engine has no partitions to serve on other machines",
            self.kind()
        )))
    }
}

/// Bytes one row of an engine table takes in a snapshot: the framing (4 + 4), the
/// space (4), a key of `key` bytes and a value of `value` bytes.
pub fn snapshot_row(key: u64, value: u64) -> u64 {
    4 + 4 + 4 + key + value
}

/// Sets `setting` to the value recorded under `name` unless the configuration
/// names `key` (for [`EngineSettings::adopt`]); a recorded value that does not
/// parse as a `T` is an error.
pub fn adopt_value<T: std::str::FromStr>(
    setting: &mut T,
    recorded: &BTreeMap<String, String>,
    name: &str,
    key: &str,
    named: &dyn Fn(&str) -> bool,
) -> std::result::Result<(), String> {
    if let Some(v) = recorded_value(recorded, name, key, named)? {
        *setting = v;
    }
    Ok(())
}

/// The value recorded under `name` as a `T`, unless the configuration names
/// `key` (for [`EngineSettings::adopt`] of settings [`adopt_value`] cannot set,
/// such as one derived from others when absent); a recorded value that does not
/// parse is an error.
pub fn recorded_value<T: std::str::FromStr>(
    recorded: &BTreeMap<String, String>,
    name: &str,
    key: &str,
    named: &dyn Fn(&str) -> bool,
) -> std::result::Result<Option<T>, String> {
    if named(key) {
        return Ok(None);
    }
    recorded
        .get(name)
        .map(|v| {
            v.parse()
                .map_err(|_| format!("volume.toml: {name} = {v:?} is not a valid {key}"))
        })
        .transpose()
}
