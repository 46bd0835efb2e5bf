//! `recover` against a shipped log the provider has cut (SECURITY-REVIEW-2 M2): a
//! record missing in the middle fails `recover` unless the operator accepts the
//! gap; a dropped tail is invisible without the record number the operator noted,
//! and `--expect-record` catches it.
//!
//! The lost machine runs in a runtime of its own, dropped at the loss: its tasks
//! stop and every write it started has finished, so the backend holds exactly
//! what the loss left. Every `recover` reads a copy of that backend (a recovery
//! writes a checkpoint and prunes the old log).

use std::path::{Path, PathBuf};

use oram_objects::{ByteStream, PutOptions};
use oram_proxy::{Config, RecoverOptions, VolumeError, VolumeHooks};

fn config(dir: &Path) -> Config {
    let mut cfg = Config {
        data_dir: dir.join("data"),
        ..Config::default()
    };
    cfg.engine.capacity_blocks = 1024;
    cfg.backend.path = Some(dir.join("store"));
    // No lease: the lost machine never released one, and the tests need no wait.
    cfg.backend.lease_secs = 0;
    cfg.state.log_interval_ms = 10;
    cfg.state.checkpoint_interval_secs = 0;
    // Outside the data directory, so that the volume can be recovered without it.
    cfg.key.key_file = Some(dir.join("master.key"));
    cfg
}

fn body(i: u64) -> ByteStream {
    let b = bytes::Bytes::from(format!("object {i}").repeat(100));
    Box::pin(futures::stream::once(async move { Ok(b) }))
}

/// Runs a proxy's volume that stores `n` objects, one after the other, and is
/// lost (no final checkpoint, no clean stop). Returns, after each object was
/// acknowledged, the number of the last log record landed.
fn lose_machine_after(cfg: &Config, n: u64) -> Vec<u64> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let marks = rt.block_on(async {
        oram_volume::datadir::ensure_dir(&cfg.data_dir).unwrap();
        let _lock = oram_volume::datadir::lock(&cfg.data_dir).unwrap();
        let vol = oram_volume::Volume::open(&cfg.volume(), &VolumeHooks::default())
            .await
            .unwrap();
        vol.layer.create_bucket("alice", "bkt").await.unwrap();
        let mut marks = Vec::new();
        for i in 0..n {
            vol.layer
                .put_object(
                    "alice",
                    "bkt",
                    &format!("o{i}"),
                    body(i),
                    PutOptions::default(),
                )
                .await
                .unwrap();
            let shipper = vol.shipper.as_ref().expect("the log is shipped");
            marks.push(shipper.stats.last_record().expect("records landed"));
        }
        marks
    });
    // The machine is lost: its tasks stop; writes under way finish first.
    drop(rt);
    marks
}

/// The log records on the fs backend at `store`: number → file.
fn records(store: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![store.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.to_string_lossy().contains("/log/") {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                if let Ok(n) = u64::from_str_radix(&name, 16) {
                    out.push((n, p));
                }
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// `recover` into a new data directory, from a copy of the backend as the loss
/// (and the provider) left it.
fn recover(
    cfg: &Config,
    attempt: &str,
    opts: RecoverOptions,
) -> Result<oram_proxy::Recovered, VolumeError> {
    let root = cfg.data_dir.parent().unwrap();
    let mut c = cfg.clone();
    c.data_dir = root.join(format!("data-{attempt}"));
    let store = root.join(format!("store-{attempt}"));
    copy_dir(cfg.backend.path.as_ref().unwrap(), &store);
    c.backend.path = Some(store);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(oram_proxy::recover_with_progress(&c, &opts, &|_| {}))
}

#[test]
fn a_missing_middle_record_fails_recover_unless_the_gap_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let marks = lose_machine_after(&cfg, 6);
    // The provider deletes the records that carried the fourth object's commits
    // (those landed after the third was acknowledged, up to its own answer).
    let (after_third, fourth) = (marks[2], marks[3]);
    let mut deleted = 0;
    for (n, path) in records(cfg.backend.path.as_ref().unwrap()) {
        if n > after_third && n <= fourth {
            std::fs::remove_file(path).unwrap();
            deleted += 1;
        }
    }
    assert!(deleted > 0);
    // Before: a warning in the log, and success with the last three objects gone.
    let err = recover(&cfg, "strict", RecoverOptions::default())
        .expect_err("a gap in the log fails recover")
        .to_string();
    assert!(
        err.contains("gap") && err.contains("--accept-log-gap") && err.contains("missing"),
        "{err}"
    );
    let r = recover(
        &cfg,
        "accepted",
        RecoverOptions {
            accept_log_gap: true,
            ..RecoverOptions::default()
        },
    )
    .expect("the operator accepts the gap");
    assert_eq!(r.objects, 3, "everything before the gap, nothing after it");
    assert!(r.accepted_gap.is_some());
    let last = r.last_record.expect("records applied");
    assert_eq!(last.number, after_third);
    assert!(last.at_ms.is_some(), "records carry their time");
}

#[test]
fn a_dropped_tail_is_caught_by_the_record_number_the_operator_noted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let marks = lose_machine_after(&cfg, 5);
    let noted = *marks.last().unwrap();
    // The provider drops every record after the third object's answer.
    let cut = marks[2];
    for (n, path) in records(cfg.backend.path.as_ref().unwrap()) {
        if n > cut {
            std::fs::remove_file(path).unwrap();
        }
    }
    // Without the anchor a dropped tail looks like the end of the log: recover
    // succeeds, and says where the log ended.
    let r = recover(&cfg, "plain", RecoverOptions::default()).unwrap();
    assert_eq!(r.objects, 3);
    assert_eq!(r.last_record.map(|l| l.number), Some(cut));
    // With the number the operator noted, it is refused.
    let err = recover(
        &cfg,
        "anchored",
        RecoverOptions {
            expect_record: Some(noted),
            ..RecoverOptions::default()
        },
    )
    .expect_err("the log ends before the noted record")
    .to_string();
    assert!(
        err.contains(&format!("record {noted} was expected"))
            && err.contains(&format!("record {cut}")),
        "{err}"
    );
    // A number the log reaches passes.
    let r = recover(
        &cfg,
        "reached",
        RecoverOptions {
            expect_record: Some(cut),
            ..RecoverOptions::default()
        },
    )
    .unwrap();
    assert_eq!(r.objects, 3);
}
