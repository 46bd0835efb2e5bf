//! `oram-proxy serve` with `[cluster] role = "front"` and `etcd`: the front
//! becomes the cluster's active front first (`ClusterConfig::lead`); a
//! standby front (`cluster.standby`) waits for that, then rebuilds its empty
//! data directory from the backend (`recover`: the active front's checkpoint
//! and shipped log) before it serves.

use oram_proxy::config::Config;
use oram_proxy::notify::Notifier;
use oram_volume::coord::FrontLeadership;
use oram_volume::datadir;

use super::serve::Signals;

/// Campaigns until this front is the active one (`None`: stopped by a signal
/// meanwhile); a standby with an empty data directory then recovers it.
pub(crate) async fn lead(
    cfg: &Config,
    signals: &mut Signals,
    notify: &Notifier,
) -> Result<Option<FrontLeadership>, String> {
    let c = &cfg.cluster;
    let dir = &cfg.data_dir;
    let empty = !datadir::has_volume(dir);
    if c.standby && empty && cfg.state.log_settings().is_none() {
        return Err(
            "a standby front is rebuilt from the active front's shipped log: set [state] \
             log_interval_ms > 0 on both fronts"
                .into(),
        );
    }
    if c.standby {
        println!(
            "oram-proxy standby front {:?}: waiting for the active front's etcd lease to lapse",
            c.member_id()
        );
        notify.status("standby: waiting to become the active front");
    }
    let leadership = tokio::select! {
        () = signals.stop() => return Ok(None),
        l = c.lead() => l.map_err(|e| e.to_string())?,
    };
    tracing::info!(
        front = leadership.front_id(),
        revision = leadership.revision(),
        "this front is the cluster's active front"
    );
    if c.standby && empty {
        println!("  taking over: rebuilding the front from the backend");
        let progress = |step: &str| tracing::info!("take-over: {step}");
        let r = oram_proxy::recover_with_progress(
            cfg,
            &oram_proxy::RecoverOptions::default(),
            &progress,
        )
        .await
        .map_err(|e| format!("taking over as the active front: {e}"))?;
        println!(
            "  took over as the active front: checkpoint epoch {}, {} commits replayed",
            r.epoch, r.replayed
        );
    }
    Ok(Some(leadership))
}
