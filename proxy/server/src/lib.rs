//! Serving a volume over HTTP: the S3 listener (and, when configured, the Swift
//! listener) with TLS, connection limits, request guards and a concurrency limit
//! each, telemetry of the clients, the tap of what the backend sees, and the
//! operator endpoint (`/metrics`, `/health`, the dashboard); one stop signal for
//! all of it and a graceful shutdown that writes back and checkpoints.
//!
//! The volume below ([`oram_volume`]) needs no HTTP; the front-ends
//! ([`oram_s3`], [`oram_swift`]) see only the object layer. The binary
//! (`proxy/cli`) reads the configuration and calls [`start`].
//!
//! Map: [`start()`] and [`Server`] (start-up and shutdown), `serve` (the accept
//! loop), `swift` (the Swift listener), [`tls`], `limits` ([`LimitsConfig`]),
//! [`guard`] (requests refused before their body is read), `classify` and
//! `telemetry` (what clients asked), `tap` (what the backend saw), `operator`
//! (metrics and dashboard), [`Growth`] (the volume growing in the background), `tasks` (the stop signal), `config`
//! ([`ServerConfig`]). Modules are private unless another crate uses them.

pub mod build_info;
mod classify;
mod config;
mod error;
mod grow;
pub mod guard;
mod limits;
mod operator;
mod serve;
mod start;
mod swift;
mod tap;
mod tasks;
mod telemetry;
pub mod tls;

pub use config::{LogConfig, MetricsConfig, S3Config, ServerConfig, SwiftConfig, SwiftUserConfig};
pub use error::ServeError;
pub use grow::{GrowStatus, Growth};
pub use limits::LimitsConfig;
pub use operator::{serve_node_endpoint, NodeEndpoint, NodeSource};
pub use serve::{PeerAddr, ServedBody};
pub use start::{start, Server, StartInfo};
pub use telemetry::{Telemetry, ACCESS_LOG_TARGET};
pub use tls::{CertInfo, TlsConfig};
