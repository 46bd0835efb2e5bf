//! What this build is (recorded by `build.rs`): for `oram-proxy --version` and
//! `oram_build_info` in `/metrics`.

/// The version of the workspace.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit built (`-dirty` when the work tree had changes; `unknown`
/// outside a checkout).
pub const COMMIT: &str = env!("ORAM_BUILD_COMMIT");
/// The cargo profile (`debug`, `release`).
pub const PROFILE: &str = env!("ORAM_BUILD_PROFILE");
/// The target triple.
pub const TARGET: &str = env!("ORAM_BUILD_TARGET");
