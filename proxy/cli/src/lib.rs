//! `oram-proxy`: an S3- and Swift-compatible proxy that keeps its objects in an
//! Oblivious RAM on an untrusted object store.
//!
//! This crate is the binary (`src/main.rs`: one file per command under
//! `src/cmd/`) and the one place that sees the whole configuration file
//! ([`config`]). Underneath, [`oram_volume`] runs a volume's life cycle without
//! HTTP and [`oram_server`] serves it. The functions here are the binary's
//! commands as a library, for tests and embedders: each checks the whole
//! configuration first, then hands the volume and the server their sections.

pub mod config;
pub mod creds;
pub mod example;
pub mod notify;

pub use config::Config;
pub use oram_server::{ServeError, Server};
pub use oram_volume::{
    BackendKind, Engine, RecoverOptions, Recovered, UserConfig, VolumeError, VolumeHooks,
};

use oram_objects::{CheckPhase, LayerCheck};

/// Opens (creating on first start) the data directory and serves it (see
/// [`oram_server::start`]). `root` is the user from `ORAM_PROXY_ROOT_USER` /
/// `ORAM_PROXY_ROOT_PASSWORD`.
pub async fn start(cfg: &Config, root: Option<UserConfig>) -> Result<Server, ServeError> {
    start_with_hooks(cfg, root, VolumeHooks::default()).await
}

/// [`start`], with `hooks` wrapped around the backend (the fault-injecting and
/// recording stores of the tests).
pub async fn start_with_hooks(
    cfg: &Config,
    root: Option<UserConfig>,
    hooks: VolumeHooks,
) -> Result<Server, ServeError> {
    cfg.validate().map_err(ServeError::Config)?;
    oram_server::start(&cfg.server(), &cfg.volume(), &cfg.users, root, hooks).await
}

/// `oram-proxy init`: creates the data directory (key, volume parameters,
/// credentials) and, for the S3 back-end, the bucket. Returns what it did.
pub async fn init(cfg: &Config, root: Option<UserConfig>) -> Result<Vec<String>, VolumeError> {
    init_with_progress(cfg, root, &|_| {}).await
}

/// [`init`], telling `progress` each step as it begins.
pub async fn init_with_progress(
    cfg: &Config,
    root: Option<UserConfig>,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Vec<String>, VolumeError> {
    cfg.validate().map_err(VolumeError::Config)?;
    let hooks = VolumeHooks::default();
    oram_volume::init(&cfg.volume(), &hooks, &cfg.users, root, progress).await
}

/// `oram-proxy fsck`: opens the volume (recovering from an unclean stop like a
/// start does) and checks everything ([`oram_objects::ObjectLayer::check`]).
pub async fn fsck(
    cfg: &Config,
    progress: &(dyn Fn(CheckPhase, u64, u64) + Send + Sync),
) -> Result<LayerCheck, VolumeError> {
    cfg.validate().map_err(VolumeError::Config)?;
    oram_volume::fsck(&cfg.volume(), &VolumeHooks::default(), progress).await
}

/// `oram-proxy recover` (see [`oram_volume::recover`]).
pub async fn recover(cfg: &Config) -> Result<Recovered, VolumeError> {
    recover_with_progress(cfg, &RecoverOptions::default(), &|_| {}).await
}

/// `oram-proxy recover [--volume-id ID] [--accept-log-gap] [--expect-record N]`:
/// as [`recover`], with what `opts` insists on ([`RecoverOptions`]), telling
/// `progress` each step as it begins.
pub async fn recover_with_progress(
    cfg: &Config,
    opts: &RecoverOptions,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Recovered, VolumeError> {
    cfg.validate().map_err(VolumeError::Config)?;
    oram_volume::recover(&cfg.volume(), &VolumeHooks::default(), opts, progress).await
}
