//! `oram-proxy serve` with `[cluster] role = "node"`: serves this node's
//! partitions to the cluster's front until SIGTERM or SIGINT. With
//! `[cluster] etcd`, the node registers and claims its slot there, or (a
//! standby) waits for a dead node's slot and takes it over
//! (`oram_volume::coord`), and stops when its lease is lost.

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
        let c = &cfg.cluster;
        if c.rebalances() {
            return rebalanced(&cfg, vcfg, &notify, &mut signals).await;
        }
        if c.coordinated() {
            return coordinated(&cfg, vcfg, &notify, &mut signals).await;
        }
        // One process per data directory.
        let _lock = datadir::lock(dir).map_err(|e| e.to_string())?;
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
        print_serving(&node, bound);
        let _endpoint = operator_endpoint(&cfg, dir, &node, c.node).await?;
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

/// The banner lines every serving node prints (the tests wait for the
/// partitions line).
fn print_serving(node: &NodeVolume, bound: std::net::SocketAddr) {
    println!("  listen:     {bound} (mutual TLS)");
    println!("  partitions: {:?}", node.host.partitions());
    println!("  volume id:  {}", node.params.volume_id);
}

/// The node's operator endpoint (`[metrics] listen`: `/metrics` and
/// `/health`) for one slot, served until the returned handle is dropped;
/// `None` without one.
async fn operator_endpoint(
    cfg: &Config,
    dir: &std::path::Path,
    node: &NodeVolume,
    slot: usize,
) -> Result<Option<oram_server::NodeEndpoint>, String> {
    let host = node.host.clone();
    let source = oram_server::NodeSource::of_slot(
        slot as u32,
        node.params.engine.clone(),
        node.backend_counters.clone(),
        Box::new(move || host.partitions().into_iter().zip(host.stats()).collect()),
        node.shipper.as_ref().map(|s| s.stats.clone()),
    );
    serve_endpoint(cfg, dir, source).await
}

/// Serves `source` on `[metrics] listen` and prints where.
async fn serve_endpoint(
    cfg: &Config,
    dir: &std::path::Path,
    source: oram_server::NodeSource,
) -> Result<Option<oram_server::NodeEndpoint>, String> {
    let ep = oram_server::serve_node_endpoint(&cfg.metrics, dir, source)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(ep) = &ep {
        println!(
            "  metrics:    http://{}/metrics (token in {})",
            ep.addr,
            ep.token_file.display()
        );
    }
    Ok(ep)
}

/// The file in a standby's data directory naming the slot it took over: on a
/// restart it serves that slot as its own.
const SLOT_FILE: &str = "slot";

/// A node coordinated by etcd: registers, then claims its own slot (or, a
/// standby, waits for a dead node's slot and rebuilds it from the backend),
/// serves it under the claim's fencing token with its backend writes fenced by
/// the lease, and stops on a signal or when the lease is lost.
async fn coordinated(
    cfg: &Config,
    mut vcfg: oram_volume::VolumeConfig,
    notify: &Notifier,
    signals: &mut Signals,
) -> Result<(), String> {
    use oram_volume::coord::POLL;
    let c = &cfg.cluster;
    let dir = vcfg.data_dir.clone();
    let me = c.member_id();
    let coord = c.coordinator().map_err(|e| e.to_string())?;
    let slot_file = dir.join(SLOT_FILE);
    // A standby that took a slot over serves it as its own after a restart.
    let taken = match std::fs::read_to_string(&slot_file) {
        Ok(s) => Some(
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{}: not a slot number", slot_file.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", slot_file.display())),
    };
    let standby = c.standby && taken.is_none();
    if standby && datadir::has_volume(&dir) {
        return Err(format!(
            "{} holds a volume but names no slot it took over: a standby starts with an \
             empty data directory",
            dir.display()
        ));
    }
    // One process per data directory, a standby's too while it waits.
    let lock = datadir::lock(&dir).map_err(|e| e.to_string())?;
    let (listener, bound, registration, hooks) = join_etcd(c, &coord, &me).await?;
    let lease = registration.lease();
    let _watchdog = notify.spawn_watchdog();
    let (node, _lock, slot) = if standby {
        println!("oram-proxy standby node {me:?}: waiting for a slot whose node dies");
        println!("  listen:     {bound} (mutual TLS)");
        notify.ready("standby: waiting for a slot");
        let (slot, token) = loop {
            tokio::select! {
                () = signals.stop() => return Ok(()),
                () = lease.lost() => return Err("the etcd lease was lost while standing by".into()),
                () = tokio::time::sleep(POLL) => {}
            }
            match coord.take_dead_slot(&me).await {
                Ok(Some(found)) => break found,
                Ok(None) => {}
                Err(e) => tracing::warn!("looking for a dead slot: {e}"),
            }
        };
        tracing::warn!(
            slot,
            token,
            "took over a dead node's slot: rebuilding it from the backend"
        );
        vcfg.cluster.node = slot as usize;
        let progress = |step: &str| tracing::info!("take-over: {step}");
        let (done, node, lock) =
            oram_volume::node::take_over(&vcfg, &hooks, token, lock, &progress)
                .await
                .map_err(|e| format!("taking over slot {slot}: {e}"))?;
        std::fs::write(&slot_file, format!("{slot}\n"))
            .map_err(|e| format!("{}: {e}", slot_file.display()))?;
        println!(
            "  took over slot {slot}: epoch {}, {} commits replayed, {} objects swept",
            done.epoch, done.replayed, done.swept
        );
        (node, lock, slot as usize)
    } else {
        let slot = taken.unwrap_or(c.node);
        vcfg.cluster.node = slot;
        let token = coord
            .claim_own_slot(&me, slot as u32)
            .await
            .map_err(|e| e.to_string())?;
        notify.status("opening the node's partitions");
        let node = NodeVolume::open_as(&vcfg, &hooks, token)
            .await
            .map_err(|e| e.to_string())?;
        (node, lock, slot)
    };
    println!(
        "oram-proxy {} serving cluster slot {slot} of {} as {me:?} (etcd)",
        oram_server::build_info::VERSION,
        c.nodes.len()
    );
    print_serving(&node, bound);
    let _endpoint = operator_endpoint(cfg, &dir, &node, slot).await?;
    notify.ready(&format!("serving slot {slot} on {bound}"));
    let serving = node.serve(listener, signals.stop());
    serve_under_lease(serving, registration, &me, &format!("slot {slot}")).await
}

/// Runs `serving` (a node's or a member's serve loop) until it ends, then
/// leaves etcd; a lost lease ends it at once instead: its writes are fenced
/// already, so neither a final write-back nor a checkpoint could land.
/// `held` names what another member may serve now.
async fn serve_under_lease(
    serving: impl std::future::Future<Output = Result<(), oram_volume::VolumeError>>,
    registration: oram_volume::coord::Registration,
    me: &str,
    held: &str,
) -> Result<(), String> {
    let lease = registration.lease();
    let served = tokio::select! {
        r = serving => r,
        () = lease.lost() => {
            return Err(format!(
                "the etcd lease of {me:?} was lost (a pause or a cut link longer than its \
                 {} s TTL): {held} may be served by another node now; this one stopped \
                 without writing",
                lease.ttl().as_secs()
            ))
        }
    };
    served.map_err(|e| format!("final write-back failed: {e}"))?;
    registration
        .deregister()
        .await
        .map_err(|e| format!("leaving etcd: {e}"))?;
    tracing::info!("stopped");
    Ok(())
}

/// Above this much shipped log on the backend a member warns at start.
const LOG_WARN_BYTES: u64 = 10 << 30;

/// A member ships one log per slot it serves: prints what that costs if it
/// serves every slot (record PUTs and bytes uploaded each second, busy or idle:
/// every record has one size; the log kept on the backend between
/// checkpoints), and warns when the log kept is large.
fn log_volume_note(state: &oram_volume::StateConfig, slots: u64) {
    let Some(per_log) = state.log_bytes_per_sec() else {
        return;
    };
    let puts = slots as f64 * 1000.0 / state.log_interval_ms as f64;
    let mib = (slots * per_log) as f64 / f64::from(1u32 << 20);
    let bound = state.log_bytes_bound(slots);
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let kept = bound.map_or_else(String::new, |b| {
        format!(", up to {:.1} GiB kept between checkpoints", gib(b))
    });
    println!(
        "  log:        one per slot; serving all {slots}: {puts:.0} record PUTs/s and {mib:.1} \
         MiB/s uploaded, busy or idle{kept}"
    );
    if let Some(b) = bound.filter(|b| *b > LOG_WARN_BYTES) {
        tracing::warn!(
            "the shipped logs of {slots} slots may keep {:.1} GiB on the backend between \
             checkpoints ({} KiB every {} ms per slot, checkpoints every {} s): lower \
             state.log_record_kib (oram_log_stream_bytes in /metrics shows how full the records \
             are) or state.checkpoint_interval_secs, or raise state.log_interval_ms",
            gib(b),
            state.record_kib(),
            state.log_interval_ms,
            state.checkpoint_interval_secs
        );
    }
}

/// A coordinated member joining etcd: binds its listener (an address in use
/// fails before etcd or the backend is touched), checks the cluster's slot
/// count (before registering: a member configured with another never looks
/// live), registers its advertised address under a lease of
/// `cluster.lease_secs`, and returns the hooks that fence its backend writes
/// with that lease (stopping a fifth of the TTL early).
async fn join_etcd(
    c: &oram_volume::cluster::ClusterConfig,
    coord: &oram_volume::coord::Coordinator,
    me: &str,
) -> Result<
    (
        tokio::net::TcpListener,
        std::net::SocketAddr,
        oram_volume::coord::Registration,
        VolumeHooks,
    ),
    String,
> {
    // A standby's `listen` is required, so this is its own address too.
    let listen = c.node_listen();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cluster listener {listen}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    coord.agree_slots().await.map_err(|e| e.to_string())?;
    let registration = coord
        .register(me, &c.advertised(), c.lease_secs)
        .await
        .map_err(|e| e.to_string())?;
    let lease = registration.lease();
    let hooks = VolumeHooks {
        wrap_backend: Some(oram_volume::coord::etcd_fence(
            lease.deadline(),
            lease.ttl() / 5,
        )),
        ..VolumeHooks::default()
    };
    Ok((listener, bound, registration, hooks))
}

/// A member of a cluster with more slots than nodes (`[cluster] slots`): serves
/// a set of slots from `slots/<j>/` under its data directory, rebalanced with
/// the other members through etcd while serving
/// ([`oram_volume::node::member`]); a standby starts with none and is handed
/// its share. Stops on a signal (each slot's final checkpoint written, its
/// owner key kept for the restart) or when its lease is lost.
async fn rebalanced(
    cfg: &Config,
    vcfg: oram_volume::VolumeConfig,
    notify: &Notifier,
    signals: &mut Signals,
) -> Result<(), String> {
    use oram_volume::node::member::Member;
    let c = &cfg.cluster;
    let dir = vcfg.data_dir.clone();
    let state = vcfg.state.clone();
    let me = c.member_id();
    let coord = c.coordinator().map_err(|e| e.to_string())?;
    if datadir::has_volume(&dir) {
        return Err(format!(
            "{} holds a node's volume of its own: a member of a cluster with cluster.slots \
             keeps each slot in slots/<j>/ under an otherwise empty data directory",
            dir.display()
        ));
    }
    // One process per data directory.
    let _lock = datadir::lock(&dir).map_err(|e| e.to_string())?;
    let tls = c.tls(&dir).map_err(|e| e.to_string())?;
    let (listener, bound, registration, hooks) = join_etcd(c, &coord, &me).await?;
    let lease = registration.lease();
    let _watchdog = notify.spawn_watchdog();
    notify.status("opening the member's slots");
    let member = tokio::select! {
        m = Member::start(vcfg, hooks, coord, me.clone(), c.standby) => m.map_err(|e| e.to_string())?,
        () = signals.stop() => return Ok(()),
        () = lease.lost() => return Err("the etcd lease was lost while starting".into()),
    };
    println!(
        "oram-proxy {} serving cluster member {me:?}: {} slots, rebalanced through etcd",
        oram_server::build_info::VERSION,
        c.slot_count()
    );
    println!("  listen:     {bound} (mutual TLS)");
    println!("  slots:      {:?}", member.slots());
    println!("  partitions: {:?}", member.hosts().partitions());
    log_volume_note(&state, c.slot_count() as u64);
    let member = std::sync::Arc::new(member);
    let source = {
        let (a, b, c, d) = (
            member.clone(),
            member.clone(),
            member.clone(),
            member.clone(),
        );
        oram_server::NodeSource {
            slots: Box::new(move || a.slots()),
            engine: c.engine(),
            backend: Box::new(move || b.backend_counts()),
            stats: Box::new(move || c.hosts().stats()),
            logs: Box::new(move || d.log_stats()),
        }
    };
    let _endpoint = serve_endpoint(cfg, &dir, source).await?;
    notify.ready(&format!("member serving on {bound}"));
    let serving = member.serve(listener, tls, signals.stop());
    serve_under_lease(serving, registration, &me, "its slots").await
}
