//! `oram-proxy serve` with `[cluster] role = "node"`: serves this node's
//! partitions to the cluster's front until SIGTERM or SIGINT.

use oram_proxy::config::Config;
use oram_proxy::notify::Notifier;
use oram_volume::node::NodeVolume;
use oram_volume::{datadir, VolumeHooks};

use super::serve::Signals;
use crate::error::CliError;
use crate::util::{logging, runtime};

/// Runs the node `cfg` describes.
pub fn run(cfg: Config) -> Result<(), CliError> {
    cfg.validate()?;
    logging("info");
    let notify = Notifier::from_env();
    runtime()?.block_on(async move {
        let mut signals = Signals::install().map_err(|e| format!("signal handlers: {e}"))?;
        let vcfg = cfg.volume();
        let dir = &vcfg.data_dir;
        datadir::ensure_dir(dir).map_err(|e| e.to_string())?;
        // One process per data directory.
        let _lock = datadir::lock(dir).map_err(|e| e.to_string())?;
        let c = &cfg.cluster;
        let addr = c.node_listen();
        // Bound before the backend is touched: a port conflict changes nothing.
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cluster listener {addr}: {e}"))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        notify.status("opening the node's partitions");
        let _watchdog = notify.spawn_watchdog();
        let node = NodeVolume::open(&vcfg, &VolumeHooks::default())
            .await
            .map_err(|e| e.to_string())?;
        println!(
            "oram-proxy {} serving cluster node {} of {}",
            oram_server::build_info::VERSION,
            c.node,
            c.nodes.len()
        );
        println!("  listen:     {bound} (mutual TLS)");
        println!("  partitions: {:?}", node.host.partitions());
        println!("  volume id:  {}", node.params.volume_id);
        println!("  data dir:   {}", dir.display());
        if node.created {
            println!("  volume:     joined (volume.toml written from the backend's header)");
        }
        notify.ready(&format!("serving partitions on {bound}"));
        node.serve(listener, signals.stop())
            .await
            .map_err(|e| format!("final write-back failed: {e}"))?;
        tracing::info!("stopped");
        Ok::<(), String>(())
    })?;
    Ok(())
}
