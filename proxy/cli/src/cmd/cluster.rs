//! `oram-proxy cluster`: setting up a volume served by several machines.

use crate::args::{ClusterArgs, ClusterCommand};
use crate::error::CliError;

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
    }
}
