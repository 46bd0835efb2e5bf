//! The engine figures the runner and the speed benchmark use — layout, cached
//! levels, backend bytes per op, ops per round, the trusted state's size — asked
//! from the engine itself through `oram-proxy describe --json`
//! ([`oram_engine::EngineModel`]): this crate computes none of them.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

pub use oram_engine::EngineModel;

/// The model of the configuration file `config`, as `oram-proxy serve` would run
/// it (for an existing data directory: with the parameters it was created with).
pub fn of_config(proxy: &Path, config: &Path) -> Result<EngineModel, String> {
    let out = Command::new(proxy)
        .arg("describe")
        .arg("--config")
        .arg(config)
        .arg("--json")
        .env_remove("ORAM_PROXY_PASSPHRASE")
        .env_remove("ORAM_PROXY_ROOT_USER")
        .env_remove("ORAM_PROXY_ROOT_PASSWORD")
        .output()
        .map_err(|e| format!("{} describe: {e}", proxy.display()))?;
    if !out.status.success() {
        return Err(format!(
            "oram-proxy describe: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("oram-proxy describe --json: {e}"))
}

/// The model of a volume not yet created whose `[engine]` section is `engine`
/// (TOML lines).
pub fn of_engine(proxy: &Path, engine: &str) -> Result<EngineModel, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "oram-workload-describe-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let config = dir.join("proxy.toml");
    let text = format!(
        "data_dir = {:?}\n[engine]\n{engine}",
        dir.join("data").display().to_string()
    );
    let res = std::fs::write(&config, text)
        .map_err(|e| format!("{}: {e}", config.display()))
        .and_then(|()| of_config(proxy, &config));
    let _ = std::fs::remove_dir_all(&dir);
    res
}
