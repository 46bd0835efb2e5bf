//! `oram-proxy fsck`: every ORAM invariant and every object's bytes checked.

use oram_objects::CheckPhase;

use crate::args::FsckArgs;
use crate::error::CliError;
use crate::util::{bar, logging, runtime};

/// `oram-proxy fsck`: exit 0 when clean, 1 when problems were found, 2 when
/// the check could not run.
pub fn run(args: FsckArgs) -> Result<(), CliError> {
    match check(args) {
        Ok(true) => Ok(()),
        Ok(false) => Err(CliError::ProblemsFound),
        Err(e) => Err(CliError::CheckNotRun(e)),
    }
}

fn check(args: FsckArgs) -> Result<bool, String> {
    let (cfg, _) = args.volume.configure()?;
    logging("warn");
    let engine_bar = bar(0, "engine   [{bar:40}] {pos}/{len} nodes ({eta})");
    let object_bar = bar(0, "objects  [{bar:40}] {bytes}/{total_bytes} ({eta})");
    let progress = |phase: CheckPhase, done: u64, total: u64| {
        let pb = match phase {
            CheckPhase::Engine => &engine_bar,
            CheckPhase::Objects => {
                engine_bar.finish();
                &object_bar
            }
        };
        pb.set_length(total);
        pb.set_position(done);
    };
    let rep = runtime()?.block_on(async {
        oram_proxy::fsck(&cfg, &progress)
            .await
            .map_err(|e| e.to_string())
    })?;
    engine_bar.finish();
    object_bar.finish();
    let e = &rep.engine;
    println!("fsck of {}", cfg.data_dir.display());
    println!(
        "  engine:  {} backend objects opened ({} bad), {} blocks stored, {} in the stash",
        e.objects_read, e.objects_bad, e.blocks_found, e.stash_len
    );
    println!(
        "  index:   {} buckets, {} objects, {} unfinished uploads, {} blocks in use",
        rep.buckets, rep.objects, rep.uploads, rep.blocks_used
    );
    println!(
        "  data:    {} bytes re-read and checked against their ETags",
        rep.bytes_verified
    );
    let problems = e.problems_total + rep.problems_total;
    if problems == 0 {
        println!("clean");
        return Ok(true);
    }
    println!("{problems} problems:");
    for p in e.problems.iter().chain(rep.problems.iter()) {
        println!("  - {p}");
    }
    let shown = (e.problems.len() + rep.problems.len()) as u64;
    if shown < problems {
        println!("  ... and {} more", problems - shown);
    }
    Ok(false)
}
