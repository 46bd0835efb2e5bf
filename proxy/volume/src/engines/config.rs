//! `[engine]`: the volume's shape (block size, capacity, round size) and the
//! chosen [`Engine`] with its settings, read from and written to one flat TOML
//! table (see the module documentation of [`crate::engines`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use oram_engine::{EngineModel, Oram, Parts, Shape};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::registry::{Engine, ENGINES};

/// `[engine]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Bytes per block (fixed when the volume is created).
    pub block_size: usize,
    /// Logical blocks (fixed when the volume is created: its starting size).
    pub capacity_blocks: u64,
    /// The capacity in effect of an existing volume that grew, as its
    /// `volume.toml` records it (not a configuration key: set by
    /// [`crate::VolumeParams::adopt_into`]); `None` for a volume at its starting
    /// size. The engine is built with `capacity_blocks` whatever this says.
    pub grown_blocks: Option<u64>,
    /// Most blocks per engine round and per streaming step of an object.
    pub max_batch: usize,
    /// Most MiB of blocks one round reads from the backend (and writes back):
    /// rounds take fewer than `max_batch` ops where the engine's per-op cost
    /// ([`oram_engine::EngineSettings::round_bytes_per_op`]) says so. Bounds the memory a round
    /// holds whatever the block size.
    pub round_mib: u64,
    /// The engine and its settings (`kind` in the TOML).
    pub kind: Engine,
    /// The operator's explicit consent to a non-oblivious engine (`direct`):
    /// without it such an engine is refused.
    pub insecure_direct: bool,
    /// Keys of other engines found in `[engine]` and ignored.
    pub ignored: Vec<String>,
    /// The keys the configuration names: those of `[engine]` in the file (other
    /// engines' keys excepted) and those set by flags. For an existing volume,
    /// every fixed parameter not named here is taken from the volume
    /// ([`EngineConfig::adopt`]).
    pub named: BTreeSet<String>,
    /// What [`EngineConfig::adopt`] took from the volume that differs from the
    /// configuration's value (`key recorded (default: value)`), for the start's
    /// notices.
    pub adopted: Vec<String>,
    /// The engine keys of `[engine]` as the file wrote them (TOML), so that an
    /// engine taken from an existing volume ([`EngineConfig::adopt`]) reads its
    /// own keys from them rather than losing those the configured engine ignored.
    pub settings_toml: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            block_size: 16_384,
            capacity_blocks: 65_536,
            grown_blocks: None,
            max_batch: 64,
            round_mib: 64,
            kind: Engine::default(),
            insecure_direct: false,
            ignored: Vec::new(),
            named: BTreeSet::new(),
            adopted: Vec::new(),
            settings_toml: String::new(),
        }
    }
}

impl EngineConfig {
    /// Switches to engine `name` with its default settings (`--engine`).
    pub fn set_kind(&mut self, name: &str) -> Result<(), String> {
        if self.kind.name() != name {
            self.switch_kind(name)?;
        }
        self.named.insert("kind".into());
        Ok(())
    }

    /// Sets the tree-top cache's budget (`--tree-cache-mib`); for an engine
    /// without a tree-top cache (one whose settings have no `tree_cache_mib`,
    /// such as `oblivistore` and `direct`) it is listed in
    /// [`EngineConfig::ignored`], like another engine's key in the file (a notice
    /// at start).
    pub fn set_tree_cache_mib(&mut self, mib: u64) {
        const KEY: &str = "tree_cache_mib";
        let value = toml::Value::Integer(i64::try_from(mib).unwrap_or(i64::MAX));
        let name = self.kind.name();
        if !Engine::accepts(name, KEY, &value) {
            self.ignored.push(KEY.into());
            return;
        }
        let mut t = self.kind.to_table();
        t.insert(KEY.into(), value);
        match Engine::parse(name, t) {
            Ok((engine, _)) => self.kind = engine,
            Err(_) => {
                self.ignored.push(KEY.into());
                return;
            }
        }
        self.named.insert(KEY.into());
    }

    /// Switches to engine `name`, its settings read from the file's `[engine]`
    /// keys ([`EngineConfig::settings_toml`]: those the engine configured before
    /// ignored included), so that `--engine` or an engine taken from a volume
    /// keeps what the file says of it.
    fn switch_kind(&mut self, name: &str) -> Result<(), String> {
        let table: toml::Table = toml::from_str(&self.settings_toml)
            .map_err(|e| format!("[engine]: {}", e.message()))?;
        let keys: Vec<String> = table.keys().cloned().collect();
        let (engine, ignored) = Engine::parse(name, table)?;
        self.kind = engine;
        for k in keys {
            if ignored.contains(&k) {
                self.named.remove(&k);
            } else {
                self.named.insert(k);
            }
        }
        self.ignored = ignored;
        Ok(())
    }

    /// Takes a volume's recorded parameters — its engine `kind`, `block_size`,
    /// `capacity_blocks` and the engine's fixed parameters `fixed` (as
    /// [`EngineConfig::fixed`] gave them at creation) — for each one the
    /// configuration does not name ([`EngineConfig::named`]), so that an existing
    /// volume keeps its shape when the defaults change. Named values are kept: a
    /// start where they differ from the volume's is refused afterwards. What was
    /// taken that differs from the configured value is listed in
    /// [`EngineConfig::adopted`].
    pub fn adopt(
        &mut self,
        kind: &str,
        block_size: usize,
        capacity_blocks: u64,
        fixed: &BTreeMap<String, String>,
        prefix: &str,
    ) -> Result<(), String> {
        let (was_kind, was_fixed) = (self.kind.name(), self.fixed(prefix));
        if !self.named.contains("kind") && self.kind.name() != kind {
            self.switch_kind(kind)?;
        }
        let named = self.named.clone();
        let is_named = |k: &str| named.contains(k);
        if !is_named("block_size") && self.block_size != block_size {
            self.adopted.push(format!(
                "block_size {block_size} (default: {})",
                self.block_size
            ));
            self.block_size = block_size;
        }
        if !is_named("capacity_blocks") && self.capacity_blocks != capacity_blocks {
            self.adopted.push(format!(
                "capacity_blocks {capacity_blocks} (default: {})",
                self.capacity_blocks
            ));
            self.capacity_blocks = capacity_blocks;
        }
        if self.kind.name() == kind {
            self.kind.settings_mut().adopt(fixed, &is_named)?;
        }
        if self.kind.name() != was_kind {
            self.adopted.push(format!(
                "kind {:?} (default: {was_kind:?})",
                self.kind.name()
            ));
        } else {
            for (k, v) in self.fixed(prefix) {
                match was_fixed.get(&k) {
                    Some(w) if *w != v => self.adopted.push(format!("{k} {v} (default: {w})")),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The capacity in effect: [`EngineConfig::grown_blocks`] if the volume
    /// grew, else `capacity_blocks`.
    pub fn capacity_in_effect(&self) -> u64 {
        self.grown_blocks.unwrap_or(self.capacity_blocks)
    }

    /// The volume's shape under backend prefix `prefix`; its `max_batch` is
    /// [`EngineConfig::round_ops`].
    pub fn shape(&self, prefix: &str) -> Shape {
        let mut shape = Shape {
            capacity: self.capacity_blocks,
            block_size: self.block_size,
            max_batch: self.max_batch,
            prefix: prefix.to_string(),
            id_limit: None,
        };
        shape.max_batch = self.round_ops_of(&shape);
        shape
    }

    /// Ops per round: `max_batch`, or fewer where a round of that many would
    /// read more than `round_mib` from the backend (at least one).
    pub fn round_ops(&self) -> usize {
        self.shape("vol0").max_batch
    }

    fn round_ops_of(&self, shape: &Shape) -> usize {
        let per_op = self.kind.settings().round_bytes_per_op(shape).max(1);
        let fit = self.round_mib.saturating_mul(1 << 20) / per_op;
        self.max_batch
            .min(usize::try_from(fit).unwrap_or(usize::MAX))
            .max(1)
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.block_size < 16 || self.block_size > (16 << 20) {
            return Err(format!(
                "engine.block_size {} outside 16 B ..= 16 MiB",
                self.block_size
            ));
        }
        if self.capacity_blocks == 0 || self.max_batch == 0 || self.round_mib == 0 {
            return Err(
                "engine.capacity_blocks, engine.max_batch and engine.round_mib must be positive"
                    .into(),
            );
        }
        if !self.kind.settings().oblivious() && !self.insecure_direct {
            return Err(format!(
                "engine {:?} stores every block at a fixed place: the storage provider \
                 sees exactly which blocks are read and written (no obliviousness). It is a \
                 baseline for measurements; to run it anyway set [engine] insecure_direct = \
                 true or pass --insecure-direct",
                self.kind.name()
            ));
        }
        self.kind.settings().validate(&self.shape("vol0"))
    }

    /// The parameters of the engine that decide where data lives.
    pub fn fixed(&self, prefix: &str) -> BTreeMap<String, String> {
        self.kind.settings().fixed(&self.shape(prefix))
    }

    /// An upper bound of the engine's trusted state in a snapshot.
    pub fn state_bound(&self, prefix: &str) -> u64 {
        self.kind.settings().state_bound(&self.shape(prefix))
    }

    /// An upper bound of a cluster node's trusted state for `owned` of the
    /// engine's partitions ([`oram_engine::EngineSettings::node_state_bound`]).
    pub fn node_state_bound(&self, prefix: &str, owned: u64) -> u64 {
        self.kind
            .settings()
            .node_state_bound(&self.shape(prefix), owned)
    }

    /// [`EngineConfig::state_bound`] of the volume grown to `capacity` blocks
    /// (the created capacity or more: as its engine grows).
    pub fn state_bound_at(&self, prefix: &str, capacity: u64) -> u64 {
        let settings = self.kind.settings();
        let created = self.shape(prefix);
        if capacity <= created.capacity {
            return settings.state_bound(&created);
        }
        settings.grown_state_bound(&created, capacity)
    }

    /// What the engine's configuration implies at the volume's shape: layout,
    /// backend bytes per op, local state, round size (`oram-proxy describe`).
    pub fn model(&self, prefix: &str) -> EngineModel {
        self.kind.settings().model(&self.shape(prefix))
    }

    /// Builds the engine.
    pub fn build(&self, prefix: &str, parts: Parts) -> oram_engine::Result<Arc<dyn Oram>> {
        self.kind.settings().build(&self.shape(prefix), parts)
    }
}

/// The `[engine]` part of `oram-proxy example-config`.
pub fn example() -> String {
    format!(
        r#"[engine]
{}kind = "{}"
# Required to run the "direct" engine (--insecure-direct): the storage provider
# then sees exactly which blocks are read and written.
insecure_direct = false
# Bytes per ORAM block (an object takes whole blocks: a smaller block wastes less
# on small objects, a larger one moves large objects in fewer, cheaper rounds).
# Fixed when the data directory is created.
block_size = 16384
# Logical blocks in the ORAM (capacity = block_size x capacity_blocks; 1 GiB by
# default). Fixed when the data directory is created.
capacity_blocks = 65536
# Most blocks moved per engine round (and per streaming step of an object).
max_batch = 64
# Most MiB of blocks one round reads from the backend (it writes back as much):
# with large blocks or a small tree-top cache a round takes fewer than max_batch
# blocks, so that the memory a round holds stays within a bound in bytes.
round_mib = 64
{}"#,
        comment(&kinds_text()),
        ENGINES[0].name,
        ENGINES.iter().map(|e| e.example).collect::<String>()
    )
}

/// `"path" (Path ORAM), ... or "direct" (...). Fixed when ...`: the engines of
/// the registry with their titles.
fn kinds_text() -> String {
    let names: Vec<String> = ENGINES
        .iter()
        .map(|e| format!("{:?} ({})", e.name, e.title))
        .collect();
    let (last, rest) = names.split_last().expect("the registry is not empty");
    format!(
        "{} or {last}. Fixed when the data directory is created.",
        rest.join(", ")
    )
}

/// `text` as TOML comment lines of at most 80 columns.
fn comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split(' ') {
        if line.len() + 1 + word.len() > 80 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

const SHAPE_KEYS: [&str; 6] = [
    "kind",
    "block_size",
    "capacity_blocks",
    "max_batch",
    "round_mib",
    "insecure_direct",
];

impl<'de> Deserialize<'de> for EngineConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut t = toml::Table::deserialize(d)?;
        let mut out = EngineConfig::default();
        let mut named: BTreeSet<String> = t.keys().cloned().collect();
        let name = match t.remove("kind") {
            None => ENGINES[0].name.to_string(),
            Some(toml::Value::String(s)) => s,
            Some(v) => return Err(D::Error::custom(format!("engine.kind: {v} is not a name"))),
        };
        let int = |t: &mut toml::Table, k: &str| -> Result<Option<u64>, D::Error> {
            match t.remove(k) {
                None => Ok(None),
                Some(toml::Value::Integer(i)) if i >= 0 => Ok(Some(i as u64)),
                Some(v) => Err(D::Error::custom(format!(
                    "engine.{k}: {v} is not a non-negative integer"
                ))),
            }
        };
        if let Some(v) = int(&mut t, "block_size")? {
            out.block_size = v as usize;
        }
        if let Some(v) = int(&mut t, "capacity_blocks")? {
            out.capacity_blocks = v;
        }
        if let Some(v) = int(&mut t, "max_batch")? {
            out.max_batch = v as usize;
        }
        if let Some(v) = int(&mut t, "round_mib")? {
            out.round_mib = v;
        }
        match t.remove("insecure_direct") {
            None => {}
            Some(toml::Value::Boolean(b)) => out.insecure_direct = b,
            Some(v) => {
                return Err(D::Error::custom(format!(
                    "engine.insecure_direct: {v} is not true or false"
                )))
            }
        }
        out.settings_toml = toml::to_string(&t).map_err(D::Error::custom)?;
        let (kind, ignored) = Engine::parse(&name, t).map_err(D::Error::custom)?;
        out.kind = kind;
        for k in &ignored {
            named.remove(k);
        }
        out.ignored = ignored;
        out.named = named;
        Ok(out)
    }
}

impl Serialize for EngineConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = toml::Table::new();
        t.insert("kind".into(), self.kind.name().into());
        t.insert("block_size".into(), (self.block_size as i64).into());
        t.insert(
            "capacity_blocks".into(),
            (self.capacity_blocks as i64).into(),
        );
        t.insert("max_batch".into(), (self.max_batch as i64).into());
        t.insert("round_mib".into(), (self.round_mib as i64).into());
        t.insert("insecure_direct".into(), self.insecure_direct.into());
        for (k, v) in self.kind.to_table() {
            debug_assert!(!SHAPE_KEYS.contains(&k.as_str()));
            t.insert(k, v);
        }
        t.serialize(s)
    }
}
