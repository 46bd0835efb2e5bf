//! `oram-proxy compact`: shrinks `state.redb` while the proxy is stopped.

use crate::args::CompactArgs;
use crate::error::CliError;
use crate::util::spinner;

/// `oram-proxy compact`.
pub fn run(args: CompactArgs) -> Result<(), CliError> {
    let (cfg, _) = args.configure()?;
    let spinner = spinner("compacting state.redb");
    let r = oram_volume::compact(&cfg.volume(), |table| {
        spinner.set_message(format!("copying {table}"))
    });
    spinner.finish_and_clear();
    let c = r.map_err(|e| e.to_string())?;
    println!(
        "compacted {}: {} -> {} bytes ({} entries copied)",
        oram_volume::datadir::state_path(&cfg.data_dir).display(),
        c.before,
        c.after,
        c.entries
    );
    Ok(())
}
