//! The engines a volume can run, and `[engine]`, the section that chooses one.
//!
//! [`ENGINES`] is the one table that names them: an entry gives the engine's
//! name (its `kind`), its part of `oram-proxy example-config`, and how its
//! settings are read from the section's keys. Everything else — what an engine
//! checks, records, bounds, models and builds — is its crate's business, reached
//! through [`oram_engine::EngineSettings`]. Adding an engine is a dependency in
//! this crate's `Cargo.toml` and a row in [`ENGINES`] (see
//! `docs/adding-an-engine.md`).
//!
//! The TOML of `[engine]` is flat: `kind` selects the engine, and the other keys
//! are the volume's shape (block size, capacity, round size: [`EngineConfig`]) or
//! that engine's settings. A key that belongs to another engine is ignored with a
//! notice at start (a configuration file may list every engine's keys); any other
//! unknown key is refused.

mod config;
mod registry;
#[cfg(test)]
mod tests;

pub use config::{example, EngineConfig};
pub use registry::{kinds, Engine, EngineEntry, Settings, ENGINES};
