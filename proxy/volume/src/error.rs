//! The volume layer's error.

use std::path::PathBuf;

use oram_blockstore::StoreError;
use oram_engine::OramError;

/// Why a volume could not be created, opened, checkpointed or recovered.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// A file or directory could not be used.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The master key is missing, unreadable or too exposed.
    #[error("master key: {0}")]
    Key(String),
    /// The data directory was created with other parameters or another format.
    #[error("{0}")]
    Params(String),
    /// The backend could not be opened or cleared.
    #[error("backend: {0}")]
    Store(#[from] StoreError),
    /// The engine could not be created.
    #[error("engine: {0}")]
    Engine(#[from] OramError),
    /// The object layer could not be created.
    #[error("object layer: {0}")]
    Objects(#[from] oram_objects::ObjectError),
    /// The state database could not be used.
    #[error("{0}")]
    State(#[from] oram_statedb::DbError),
    /// A growth was refused (an engine that cannot grow, a smaller size, another
    /// growth under way).
    #[error("{0}")]
    Grow(String),
    /// The backend holds something this volume did not write: tampering, a
    /// roll-back, or a wrong bucket.
    #[error("integrity: {0}")]
    Integrity(String),
}
