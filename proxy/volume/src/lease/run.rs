//! What a data directory remembers of the lease it last wrote (`<dir>/lease.run`),
//! and how a start judges the lease record it finds with it.
//!
//! The holder id (`lease.id`) names a data directory, and a copy of the directory
//! (a VM clone, a restored backup) carries it: on its own it would make the copy
//! take a live original's lease at once. So every start draws a random **start
//! id**, and before each write of the lease record (acquire, renewal, release)
//! the directory durably records in `lease.run` the start id and the record's
//! position — its generation and renewal count — with the machine's boot id and
//! the process id. The lease record carries the start id too.
//!
//! A start that finds its own holder id in the record then judges
//! ([`judge`]):
//!
//! * **behind**: the record's position is past the one this directory recorded
//!   (the original renewed, or stopped, after the copy was taken) — refused, with
//!   a pointer to `recover`, whether or not the original still runs;
//! * **the crashed process of this very directory**: the record names the start
//!   id `lease.run` names, on this boot of this machine, and that process is gone —
//!   taken over at once, as before;
//! * otherwise (a copy beside a live original, or a restart after a reboot)
//!   watched for the lease duration like another holder's: a record that changes
//!   (the original renews) refuses the start.
//!
//! The position is the lease's own renewal count, not a count of the state's
//! commits: the lease record is plaintext, and the provider would read the write
//! rate from a commit count. It moves every `lease_secs / 4`, so a copy taken
//! less than that before its original died is not told apart by it.

use std::path::Path;

use rand::RngCore;

use crate::fsutil::io;
use crate::VolumeError;

/// The file, in the data directory.
const FILE: &str = "lease.run";

/// What the directory recorded before its last write of the lease record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunMark {
    /// The start that wrote it.
    pub start: String,
    /// The lease generation written.
    pub generation: u64,
    /// The renewal count written.
    pub renewals: u64,
    /// The machine's boot id then (empty: unknown).
    pub boot: String,
    /// The process.
    pub pid: u32,
}

/// A new random start id (128 bits, hex).
pub(crate) fn new_start_id() -> String {
    let mut id = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut id);
    hex::encode(id)
}

/// This boot of this machine (Linux's boot id; empty where there is none, and
/// then no process is ever proved gone).
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether process `pid` may still run on this machine (`true` when unknown).
pub(crate) fn may_run(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Reads `<dir>/lease.run` (`None`: absent, as in a directory of an earlier
/// version). Blocking file I/O.
pub(crate) fn read(dir: &Path) -> Result<Option<RunMark>, VolumeError> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) => toml::from_str(&s).map(Some).map_err(|e| {
            VolumeError::Params(format!(
                "{} is malformed ({e}); remove it only if no copy of this data directory \
                 can be running",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Replaces `<dir>/lease.run` durably (a new file, fsynced, renamed over the
/// old one). Blocking file I/O: call it off the async workers.
pub(crate) fn write(dir: &Path, mark: &RunMark) -> Result<(), VolumeError> {
    // Guards the one temporary file name: two writers of this process (a
    // renewal and a start, release or test beside it) would remove or rename
    // each other's file. Other processes are kept out by the data directory's lock.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = dir.join(format!("{FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let text = toml::to_string(mark).map_err(|e| VolumeError::Config(e.to_string()))?;
    crate::fsutil::write_private(&tmp, &text)?;
    let path = dir.join(FILE);
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    if let Ok(d) = std::fs::File::open(dir) {
        d.sync_all().map_err(io(dir))?;
    }
    Ok(())
}

/// [`write`] on a blocking thread.
pub(crate) async fn write_async(dir: &Path, mark: RunMark) -> Result<(), VolumeError> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || write(&dir, &mark))
        .await
        .map_err(|e| VolumeError::Config(format!("writing lease.run: {e}")))?
}

/// The lease record a start found, as far as [`judge`] needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// It names this data directory's holder id.
    pub ours: bool,
    /// It was released (a clean stop).
    pub released: bool,
    /// Its start id (empty: written by a version without them).
    pub start: String,
    /// Its generation and renewal count.
    pub position: (u64, u64),
}

/// What a start does with the lease record it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Take it over now.
    TakeNow,
    /// Watch it for the lease duration; take it over if it does not change.
    Watch,
    /// Refuse: this data directory is behind the lease (the message says why).
    Behind(String),
}

/// Judges `seen` (`None`: an unreadable record) for a directory that recorded
/// `local`, on the machine booted as `boot`, `may_run` telling whether a process
/// may still run (see the module documentation).
pub fn judge(
    seen: Option<&Seen>,
    local: Option<&RunMark>,
    boot: &str,
    may_run: impl Fn(u32) -> bool,
) -> Verdict {
    let Some(seen) = seen else {
        return Verdict::Watch;
    };
    if !seen.ours {
        return if seen.released {
            Verdict::TakeNow
        } else {
            Verdict::Watch
        };
    }
    if seen.start.is_empty() {
        // Written by a version without start ids: a clean stop frees it as
        // before; anything else is watched (a copy's original would renew).
        return if seen.released {
            Verdict::TakeNow
        } else {
            Verdict::Watch
        };
    }
    let behind = |why: String| {
        Verdict::Behind(format!(
            "this data directory is behind the volume's backend lease ({why}): it is a copy \
             or a restored backup of a data directory that kept running after it was taken, \
             and starting it would lose (and could corrupt) what that one wrote since. Use \
             the data directory that last ran, or rebuild one from the backend with \
             `oram-proxy recover` into an empty directory"
        ))
    };
    let Some(local) = local else {
        return behind(format!(
            "the lease was written by start {} of this data directory, which has no record \
             of it (lease.run)",
            seen.start
        ));
    };
    if seen.position > (local.generation, local.renewals) {
        return behind(format!(
            "the lease is at generation {}, renewal {}; this directory last wrote generation \
             {}, renewal {}",
            seen.position.0, seen.position.1, local.generation, local.renewals
        ));
    }
    if seen.released {
        return Verdict::TakeNow;
    }
    let crashed_here =
        seen.start == local.start && !boot.is_empty() && local.boot == boot && !may_run(local.pid);
    if crashed_here {
        Verdict::TakeNow
    } else {
        Verdict::Watch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(start: &str, position: (u64, u64), released: bool) -> Seen {
        Seen {
            ours: true,
            released,
            start: start.into(),
            position,
        }
    }

    fn mark(start: &str, generation: u64, renewals: u64, boot: &str, pid: u32) -> RunMark {
        RunMark {
            start: start.into(),
            generation,
            renewals,
            boot: boot.into(),
            pid,
        }
    }

    #[test]
    fn a_copy_is_told_from_the_crashed_directory_it_was_taken_from() {
        let gone: fn(u32) -> bool = |_| false;
        let runs: fn(u32) -> bool = |_| true;
        let here = mark("s1", 3, 10, "boot-a", 42);
        // The crashed process of this directory, on this boot: at once.
        assert_eq!(
            judge(
                Some(&seen("s1", (3, 10), false)),
                Some(&here),
                "boot-a",
                gone
            ),
            Verdict::TakeNow
        );
        // Its last renewal recorded here but never landed: still ours.
        assert_eq!(
            judge(
                Some(&seen("s1", (3, 9), false)),
                Some(&here),
                "boot-a",
                gone
            ),
            Verdict::TakeNow
        );
        // The same files, but that process still runs (a copy on this machine),
        // or another boot (a clone, a backup on another machine, a reboot):
        // watched.
        for (boot, alive) in [("boot-a", runs), ("boot-b", gone)] {
            assert_eq!(
                judge(Some(&seen("s1", (3, 10), false)), Some(&here), boot, alive),
                Verdict::Watch
            );
        }
        // The original renewed or stopped after the copy was taken: behind,
        // whether or not it still runs.
        for s in [
            seen("s1", (3, 11), false),
            seen("s1", (3, 11), true),
            seen("s2", (4, 0), false),
        ] {
            let v = judge(Some(&s), Some(&here), "boot-a", gone);
            assert!(
                matches!(&v, Verdict::Behind(m) if m.contains("oram-proxy recover")),
                "{v:?}"
            );
        }
        assert!(matches!(
            judge(Some(&seen("s1", (1, 0), false)), None, "boot-a", gone),
            Verdict::Behind(_)
        ));
        // A clean stop of this directory: at once.
        assert_eq!(
            judge(
                Some(&seen("s1", (3, 11), true)),
                Some(&mark("s1", 3, 11, "", 1)),
                "",
                runs
            ),
            Verdict::TakeNow
        );
        // Records of earlier versions (no start id), other holders, junk.
        let legacy = seen("", (2, 5), false);
        assert_eq!(judge(Some(&legacy), None, "boot-a", gone), Verdict::Watch);
        let legacy_released = seen("", (2, 5), true);
        assert_eq!(
            judge(Some(&legacy_released), None, "boot-a", gone),
            Verdict::TakeNow
        );
        let other = Seen {
            ours: false,
            ..seen("s9", (9, 9), false)
        };
        assert_eq!(
            judge(Some(&other), Some(&here), "boot-a", gone),
            Verdict::Watch
        );
        assert_eq!(judge(None, Some(&here), "boot-a", gone), Verdict::Watch);
        // No boot id known: never proved crashed.
        assert_eq!(
            judge(
                Some(&seen("s1", (3, 10), false)),
                Some(&mark("s1", 3, 10, "", 42)),
                "",
                gone
            ),
            Verdict::Watch
        );
    }

    #[test]
    fn the_mark_survives_a_rewrite_and_a_malformed_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        let m = mark("s1", 1, 0, &boot_id(), std::process::id());
        write(d.path(), &m).unwrap();
        let m2 = RunMark { renewals: 1, ..m };
        write(d.path(), &m2).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(m2));
        std::fs::write(d.path().join(FILE), "junk = ").unwrap();
        assert!(read(d.path()).is_err());
        assert!(may_run(std::process::id()));
    }
}
