//! `oram-proxy recover`: a lost data directory rebuilt from the backend.

use crate::args::{RecoverArgs, VolumeArgs};
use crate::error::CliError;
use crate::util::{logging, runtime, spinner, utc};

/// `oram-proxy recover`.
pub fn run(args: RecoverArgs) -> Result<(), CliError> {
    let opts = oram_proxy::RecoverOptions {
        expect_volume: args.volume_id.clone(),
        accept_log_gap: args.accept_log_gap,
        expect_record: args.expect_record,
    };
    let extra = next_flags(&args.volume);
    let (cfg, _) = args.volume.configure()?;
    let next = format!(" --data-dir {}{extra}", quote(&cfg.data_dir));
    logging("warn");
    let spinner = spinner("recover");
    let progress = |step: &str| spinner.set_message(step.to_string());
    if cfg.cluster.role == oram_volume::cluster::Role::Node {
        let r = runtime()?.block_on(async {
            cfg.validate()?;
            oram_volume::node::recover_node(
                &cfg.volume(),
                &oram_volume::VolumeHooks::default(),
                &opts,
                &progress,
            )
            .await
            .map_err(|e| e.to_string())
        });
        spinner.finish_and_clear();
        return node_recovered(&r?, &cfg.data_dir, &extra);
    }
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
        match &r.accepted_gap {
            Some(gap) => println!(
                "the log had a gap, accepted (--accept-log-gap): {gap}; writes acknowledged \
                 after it are lost"
            ),
            None => println!("no acknowledged write is lost: the log has no gap"),
        }
        println!(
            "removed {} backend objects nothing restored refers to (stale slot copies and \
             unfinished writes; no data of the restored state)",
            r.swept
        );
    } else if r.clean_stop == Some(true) {
        println!(
            "the old proxy stopped cleanly (the backend's lease record says it released \
             the lease after its final checkpoint): no acknowledged write is lost; the {} \
             backend objects removed were stale slot copies the checkpoint does not refer to",
            r.swept
        );
    } else {
        println!(
            "removed {} backend objects the checkpoint does not refer to (stale slot copies, \
             and whatever was written after it); the recovery point is the checkpoint: the \
             old proxy did not stop cleanly{}, so writes acknowledged after {} are lost (the \
             shipped log, [state] log_interval_ms, keeps them)",
            r.swept,
            if r.clean_stop.is_none() {
                " or left no lease record"
            } else {
                ""
            },
            utc(r.taken_ms / 1000)
        );
    }
    match r.users_restored {
        Some(n) => println!(
            "restored {n} S3 user(s) to {} (the old access and secret keys work)",
            oram_volume::users::credentials_path(&cfg.data_dir).display()
        ),
        None => println!(
            "the checkpoint holds no S3 users (users of the configuration or the \
             environment, or a checkpoint of an earlier version): configure them as before"
        ),
    }
    println!(
        "volume id {} (pass --volume-id to insist on it)",
        r.volume_id
    );
    println!("next, verify and then serve (the backend is recorded in the data directory):");
    if std::env::var_os(oram_volume::key::ENV_KEY).is_some() {
        println!("(with {} set as it is now)", oram_volume::key::ENV_KEY);
    }
    println!("  oram-proxy fsck{next}");
    println!("  oram-proxy serve{next}");
    Ok(())
}

/// What `recover` says after rebuilding a cluster node's data directory.
fn node_recovered(
    r: &oram_volume::node::NodeRecovered,
    dir: &std::path::Path,
    extra: &str,
) -> Result<(), CliError> {
    println!(
        "recovered cluster node {} into {} from its checkpoint epoch {} (partitions {:?})",
        r.node,
        dir.display(),
        r.epoch,
        r.partitions
    );
    println!(
        "replayed {} commits from {} records of the node's shipped log: every round the \
         node acknowledged up to the last record is restored",
        r.replayed, r.log_records
    );
    if let Some(l) = r.last_record {
        println!("the last record applied is number {}", l.number);
    }
    match &r.accepted_gap {
        Some(gap) => println!(
            "the log had a gap, accepted (--accept-log-gap): {gap}; rounds after it are lost, \
             and with them blocks of these partitions (run `oram-proxy fsck` on the front)"
        ),
        None => println!("no acknowledged round is lost: the log has no gap"),
    }
    println!(
        "removed {} backend objects of its partitions nothing restored refers to",
        r.swept
    );
    println!("volume id {}", r.volume_id);
    println!("next, serve the node (the front repeats the round it interrupted):");
    println!("  oram-proxy serve --data-dir {}{extra}", quote(dir));
    Ok(())
}

/// A path as an absolute, shell-quoted argument.
fn quote(p: &std::path::Path) -> String {
    let s = std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The flags the next commands need besides the data directory: the
/// configuration file and passphrase file if recover was given them (the
/// backend is recorded; a key given by file was copied into the directory; a
/// key from the environment must stay set).
fn next_flags(args: &VolumeArgs) -> String {
    let mut out = String::new();
    if let Some(c) = &args.place.config {
        out.push_str(&format!(" --config {}", quote(c)));
    }
    if let Some(p) = &args.passphrase_file {
        out.push_str(&format!(" --passphrase-file {}", quote(p)));
    }
    out
}
