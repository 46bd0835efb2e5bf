//! The registry of engines ([`ENGINES`]) and [`Engine`], a volume's engine with
//! its crate's settings.

use std::any::Any;
use std::sync::Arc;

use oram_curious::{CuriousSettings, SubFactory, SubSpec};
use oram_direct::DirectSettings;
use oram_engine::EngineSettings;
use oram_oblivistore::ObliviStoreSettings;
use oram_path::PathSettings;
use oram_ring::RingSettings;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// One engine of the registry.
pub struct EngineEntry {
    /// The engine's name: its `kind` in `[engine]` (also what its settings'
    /// [`EngineSettings::kind`] says).
    pub name: &'static str,
    /// What it is, in a few words (`oram-proxy example-config`).
    pub title: &'static str,
    /// Its settings' part of `oram-proxy example-config` (commented out, at the
    /// defaults); empty when it has none.
    pub example: &'static str,
    /// Its settings from the engine's keys of `[engine]` (an empty table gives
    /// the defaults); an error names the key that is wrong.
    parse: fn(toml::Table) -> Result<Box<dyn AnySettings>, String>,
    /// Completes settings however they were made (CURIOUS: the settings of its
    /// partitions' sub-ORAMs); nothing for most engines.
    finish: fn(&mut dyn Any),
}

/// The engines, in the order they are documented: the one place that names
/// them (see the module documentation).
pub const ENGINES: &[EngineEntry] = &[
    entry::<PathSettings>("path", "Path ORAM", PathSettings::EXAMPLE),
    entry::<RingSettings>("ring", "Ring ORAM", RingSettings::EXAMPLE),
    EngineEntry {
        name: "curious",
        title: "CURIOUS",
        example: CuriousSettings::EXAMPLE,
        parse: parse_as::<CuriousSettings>,
        finish: curious_subs,
    },
    entry::<ObliviStoreSettings>("oblivistore", "ObliviStore", ObliviStoreSettings::EXAMPLE),
    entry::<DirectSettings>(
        "direct",
        "no ORAM: the non-oblivious baseline; it needs insecure_direct = true",
        "",
    ),
];

/// The engines' names, in the order they are documented.
pub fn kinds() -> impl Iterator<Item = &'static str> {
    ENGINES.iter().map(|e| e.name)
}

/// A registry row for settings `S` that are read from the keys with serde.
const fn entry<S: Settings>(
    name: &'static str,
    title: &'static str,
    example: &'static str,
) -> EngineEntry {
    EngineEntry {
        name,
        title,
        example,
        parse: parse_as::<S>,
        finish: nothing,
    }
}

fn nothing(_: &mut dyn Any) {}

fn parse_as<S: Settings>(t: toml::Table) -> Result<Box<dyn AnySettings>, String> {
    Ok(Box::new(settings_from::<S>(t)?))
}

fn settings_from<T: DeserializeOwned>(t: toml::Table) -> Result<T, String> {
    T::deserialize(toml::Value::Table(t)).map_err(|e| format!("[engine]: {}", e.message()))
}

/// Gives CURIOUS's settings the settings of its partitions' sub-ORAMs
/// ([`sub_factory`]), unless they have some.
fn curious_subs(s: &mut dyn Any) {
    if let Some(c) = s.downcast_mut::<CuriousSettings>() {
        if c.subs.is_none() {
            c.subs = Some(sub_factory());
        }
    }
}

/// The settings of a CURIOUS partition's sub-ORAM: the one place that knows
/// which engines may serve as one.
fn sub_factory() -> SubFactory {
    Arc::new(
        |spec: &SubSpec| -> Result<Box<dyn EngineSettings>, String> {
            match spec.kind.as_str() {
                "path" => {
                    let mut s = PathSettings {
                        z: spec.z,
                        arity: spec.arity,
                        cached_levels: spec.cached_levels,
                        // The sizing sub-ORAMs always had (not recorded).
                        leaf_divisor: 2,
                        // Partitions are prefixes of their own.
                        key_shards: 0,
                        ..PathSettings::default()
                    };
                    if spec.stash_bound > 0 {
                        s.stash_bound = spec.stash_bound;
                    }
                    s.tree_cache_bytes = Some(spec.cache_bytes);
                    s.round_attempts = Some(1);
                    Ok(Box::new(s))
                }
                "ring" => {
                    let mut s = RingSettings {
                        cached_levels: spec.cached_levels,
                        ring_stash_bound: spec.stash_bound,
                        key_shards: 0,
                        ..RingSettings::default()
                    };
                    s.tree_cache_bytes = Some(spec.cache_bytes);
                    s.round_attempts = Some(1);
                    Ok(Box::new(s))
                }
                other => Err(format!(
                    "curious_sub = {other:?}: expected \"path\" or \"ring\""
                )),
            }
        },
    )
}

/// What an engine crate's settings must be for the registry: its
/// [`EngineSettings`], read from and written to `[engine]` with serde, and
/// cloned with the configuration.
pub trait Settings: EngineSettings + Serialize + DeserializeOwned + Clone + Any {}

impl<T: EngineSettings + Serialize + DeserializeOwned + Clone + Any> Settings for T {}

/// [`Settings`] behind a pointer: what [`Engine`] holds.
trait AnySettings: Send + Sync {
    fn settings(&self) -> &dyn EngineSettings;
    fn settings_mut(&mut self) -> &mut dyn EngineSettings;
    fn clone_box(&self) -> Box<dyn AnySettings>;
    fn to_table(&self) -> toml::Table;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Settings> AnySettings for T {
    fn settings(&self) -> &dyn EngineSettings {
        self
    }
    fn settings_mut(&mut self) -> &mut dyn EngineSettings {
        self
    }
    fn clone_box(&self) -> Box<dyn AnySettings> {
        Box::new(self.clone())
    }
    fn to_table(&self) -> toml::Table {
        match toml::Value::try_from(self) {
            Ok(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The engine of a volume, with its crate's settings.
pub struct Engine(Box<dyn AnySettings>);

impl Engine {
    /// The engine `name` with its default settings.
    pub fn named(name: &str) -> Result<Self, String> {
        Self::parse(name, toml::Table::new()).map(|(e, _)| e)
    }

    /// An engine with these settings (completed as its registry entry says).
    pub fn new<S: Settings>(settings: S) -> Self {
        let mut boxed: Box<dyn AnySettings> = Box::new(settings);
        if let Some(entry) = ENGINES.iter().find(|e| e.name == boxed.settings().kind()) {
            (entry.finish)(boxed.as_any_mut());
        }
        Self(boxed)
    }

    /// The engine's name (one of [`kinds`]).
    pub fn name(&self) -> &'static str {
        self.settings().kind()
    }

    /// The settings, as the engine crate offers them.
    pub fn settings(&self) -> &dyn EngineSettings {
        self.0.settings()
    }

    /// The settings, to change one (e.g. [`EngineSettings::adopt`]).
    pub fn settings_mut(&mut self) -> &mut dyn EngineSettings {
        self.0.settings_mut()
    }

    /// The settings as their crate's type `S`, if this is that engine.
    pub fn get<S: Settings>(&self) -> Option<&S> {
        self.0.as_any().downcast_ref()
    }

    /// The settings as their crate's type `S`, if this is that engine, to change
    /// them.
    pub fn get_mut<S: Settings>(&mut self) -> Option<&mut S> {
        self.0.as_any_mut().downcast_mut()
    }

    /// The settings as the TOML keys of `[engine]` they are written as.
    pub fn to_table(&self) -> toml::Table {
        self.0.to_table()
    }

    /// Whether `key = value` is one of engine `name`'s settings.
    pub(super) fn accepts(name: &str, key: &str, value: &toml::Value) -> bool {
        let mut t = toml::Table::new();
        t.insert(key.to_string(), value.clone());
        ENGINES
            .iter()
            .find(|e| e.name == name)
            .is_some_and(|e| (e.parse)(t).is_ok())
    }

    /// Engine `name` from the keys of `[engine]` that are not the shape's;
    /// returns the keys ignored because they belong to another engine.
    pub(super) fn parse(name: &str, mut rest: toml::Table) -> Result<(Self, Vec<String>), String> {
        let Some(entry) = ENGINES.iter().find(|e| e.name == name) else {
            return Err(format!(
                "unknown engine {name:?} (expected one of {})",
                kinds()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let mut ignored = Vec::new();
        let keys: Vec<String> = rest.keys().cloned().collect();
        for k in keys {
            let v = &rest[&k];
            if !Self::accepts(name, &k, v) && kinds().any(|o| Self::accepts(o, &k, v)) {
                rest.remove(&k);
                ignored.push(k);
            }
        }
        let mut settings = (entry.parse)(rest)?;
        (entry.finish)(settings.as_any_mut());
        Ok((Self(settings), ignored))
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::named(ENGINES[0].name).expect("the first engine's defaults parse")
    }
}

impl Clone for Engine {
    fn clone(&self) -> Self {
        Self(self.0.clone_box())
    }
}

impl PartialEq for Engine {
    /// The same engine with the same settings (as they are written).
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.to_table() == other.to_table()
    }
}

impl Eq for Engine {}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.settings().fmt(f)
    }
}
