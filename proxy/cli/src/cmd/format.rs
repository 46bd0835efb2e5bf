//! `oram-proxy format`: every never-written backend position the engine may read
//! written once, while the proxy is stopped.

use oram_volume::VolumeHooks;

use crate::args::FormatArgs;
use crate::error::CliError;
use crate::util::{bar, logging, runtime};

/// `oram-proxy format`.
pub fn run(args: FormatArgs) -> Result<(), CliError> {
    let (cfg, _) = args.volume.configure()?;
    logging("warn");
    let pb = bar(0, "format   [{bar:40}] {pos}/{len} buckets ({eta})");
    let progress = |done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
    };
    let r = runtime()?.block_on(async {
        cfg.validate()?;
        oram_volume::format(&cfg.volume(), &VolumeHooks::default(), &progress)
            .await
            .map_err(|e| e.to_string())
    });
    pb.finish_and_clear();
    let r = r?;
    let f = r.formatted;
    println!("format of {} ({} engine)", cfg.data_dir.display(), r.engine);
    if f.positions == 0 {
        println!(
            "  nothing to format: the {} engine reads only blocks it wrote (a never-written \
             block causes no backend request)",
            r.engine
        );
        return Ok(());
    }
    println!(
        "  {} buckets on the backend: {} written now, {} already written",
        f.positions,
        f.written,
        f.positions - f.written
    );
    println!("  took {:.1} s", r.elapsed.as_secs_f64());
    match r.checkpoint {
        Some(c) => println!("  checkpoint epoch {} taken", c.epoch),
        None => println!("  nothing written: no checkpoint needed"),
    }
    Ok(())
}
