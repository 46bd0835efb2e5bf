//! `oram-proxy recover`: a lost data directory rebuilt from the backend.

use crate::args::{configure, ServeArgs};
use crate::error::CliError;
use crate::util::{logging, runtime, spinner, utc};

/// `oram-proxy recover`.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    let opts = oram_proxy::RecoverOptions {
        expect_volume: args.volume_id.clone(),
        accept_log_gap: args.accept_log_gap,
        expect_record: args.expect_record,
    };
    let (cfg, _) = configure(args)?;
    logging("warn");
    let spinner = spinner("recover");
    let progress = |step: &str| spinner.set_message(step.to_string());
    let r = runtime()?.block_on(async {
        oram_proxy::recover_with_progress(&cfg, &opts, &progress)
            .await
            .map_err(|e| e.to_string())
    });
    spinner.finish_and_clear();
    let r = r?;
    println!(
        "recovered {} from checkpoint epoch {} taken {} ({} buckets, {} objects)",
        cfg.data_dir.display(),
        r.epoch,
        utc(r.taken_ms / 1000),
        r.buckets,
        r.objects
    );
    if r.log_records > 0 {
        println!(
            "replayed {} commits from {} records of the shipped log after it ([state] \
             log_interval_ms): everything acknowledged up to the last record is restored",
            r.replayed, r.log_records
        );
        match r.last_record {
            Some(l) => println!(
                "the last record applied is number {}{}: check it against the number the \
                 proxy showed (oram_log_last_record), or pass --expect-record",
                l.number,
                l.at_ms
                    .map_or(String::new(), |ms| format!(", sealed {}", utc(ms / 1000)))
            ),
            None => println!("no record of the log was applied"),
        }
        if let Some(gap) = &r.accepted_gap {
            println!("the log had a gap, accepted (--accept-log-gap): {gap}");
        }
        println!(
            "removed {} backend objects written after the last shipped commit",
            r.swept
        );
    } else {
        println!(
            "removed {} backend objects written after that checkpoint; anything acknowledged after it is lost",
            r.swept
        );
    }
    println!(
        "volume id {} (pass --volume-id to insist on it)",
        r.volume_id
    );
    println!("run `oram-proxy fsck` to verify, then `oram-proxy serve`");
    Ok(())
}
