//! The server's error.

use oram_volume::VolumeError;

/// Why a server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The server's configuration is unusable (TLS files, the metrics token,
    /// Swift users).
    #[error("configuration: {0}")]
    Config(String),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The volume could not be opened, checkpointed or written back.
    #[error(transparent)]
    Volume(#[from] VolumeError),
}
