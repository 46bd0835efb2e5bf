//! The node crate's errors (outside the engine calls, which fail with
//! [`oram_engine::OramError`]).

/// Setting up a node or a front's links.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Certificates, keys or the TLS configuration.
    #[error("cluster TLS: {0}")]
    Tls(String),
    /// Binding or accepting.
    #[error("cluster listener: {0}")]
    Io(String),
}

/// A failure the front answers by repeating its round (a node down, late, or
/// not holding what was asked): transient, as a backend that cannot be
/// reached.
pub(crate) fn unavailable(msg: String) -> oram_engine::OramError {
    oram_engine::OramError::Store(oram_blockstore::StoreError::Unavailable(msg))
}
