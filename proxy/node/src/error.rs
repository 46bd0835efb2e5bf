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
