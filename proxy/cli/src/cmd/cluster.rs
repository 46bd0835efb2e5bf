//! `oram-proxy cluster`: setting up a volume served by several machines, and
//! what etcd says of one.

use crate::args::{ClusterArgs, ClusterCommand, ClusterStatusArgs};
use crate::error::CliError;
use crate::util::runtime;

/// `oram-proxy cluster ...`.
pub fn run(args: ClusterArgs) -> Result<(), CliError> {
    match args.command {
        ClusterCommand::Certs(a) => {
            let dirs = oram_volume::node::make_certs(&a.out, &a.name, &a.members)
                .map_err(|e| e.to_string())?;
            println!(
                "created the cluster CA {} (its key {} signs new members: keep it offline)",
                a.out.join("ca.pem").display(),
                a.out.join("ca.key").display()
            );
            for (m, d) in a.members.iter().zip(dirs) {
                println!(
                    "  {m}: {} (copy to that member; [cluster] tls_dir, or <data_dir>/cluster)",
                    d.display()
                );
            }
            Ok(())
        }
        ClusterCommand::Status(a) => status(a),
    }
}

/// `oram-proxy cluster status`: one read of etcd (registrations, owner keys,
/// the front's key), printed; fails when a slot has no live owner.
fn status(args: ClusterStatusArgs) -> Result<(), CliError> {
    let (cfg, _) = args.volume.configure()?;
    let c = &cfg.cluster;
    if !c.coordinated() {
        return Err(
            "cluster status reads etcd: this configuration names no [cluster] etcd (a \
             cluster with static membership has its nodes in cluster.nodes)"
                .to_string()
                .into(),
        );
    }
    let coord = c.coordinator().map_err(|e| e.to_string())?;
    let (members, view, front) = runtime()?
        .block_on(async {
            let members = coord.members().await?;
            let view = coord.view().await?;
            let front = coord.front().await?;
            Ok::<_, oram_volume::VolumeError>((members, view, front))
        })
        .map_err(|e| e.to_string())?;
    println!(
        "cluster {:?}: {} slots ({})",
        c.name,
        coord.slots(),
        if c.rebalances() {
            "rebalanced among the members"
        } else {
            "one per node"
        }
    );
    match front {
        Some(f) => println!("front:   {f} (active)"),
        None => println!("front:   none active"),
    }
    println!("members: {} live", members.len());
    for (id, addr) in &members {
        let held: Vec<usize> = view
            .owners
            .iter()
            .enumerate()
            .filter(|(_, o)| o.as_ref().is_some_and(|o| &o.node_id == id))
            .map(|(j, _)| j)
            .collect();
        println!("  {id:<16} {addr:<24} slots {held:?}");
    }
    println!("slots:");
    let mut unserved = 0;
    for (j, o) in view.owners.iter().enumerate() {
        let line = match o {
            None => {
                unserved += 1;
                "never claimed".to_string()
            }
            Some(o) if o.released() => {
                unserved += 1;
                format!(
                    "released (token {}): waiting for a member to claim it",
                    o.token.revision
                )
            }
            Some(o) if view.live.contains(&o.node_id) => {
                format!("live {} (token {})", o.node_id, o.token.revision)
            }
            Some(o) => {
                unserved += 1;
                format!(
                    "dead {} (token {}): its lease lapsed",
                    o.node_id, o.token.revision
                )
            }
        };
        println!("  {j:>4}  {line}");
    }
    if unserved > 0 {
        return Err(format!("{unserved} slot(s) without a live owner").into());
    }
    Ok(())
}
