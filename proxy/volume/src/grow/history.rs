//! The growth history: every growth [`crate::Volume::grow`] finished, newest
//! last, the last [`HISTORY_KEEP`] of them, in `<data_dir>/growths.toml`
//! ([`read_history`]). Written once per growth, after the records of the new
//! capacity, atomically (a new file fsynced, renamed over the old one, the
//! directory fsynced), off the async workers.
//!
//! Informative only: nothing reads it to decide anything, and the engine's
//! trusted state stays the one record of the size. A crash between a growth's
//! switch and this write leaves that growth out of the history (the capacity
//! in effect is right regardless); a volume restored with `recover` starts
//! with no history (the file is local, never on the backend).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fsutil::{io, write_private};
use crate::VolumeError;

/// The growths the history keeps (the oldest are dropped).
pub const HISTORY_KEEP: usize = 32;

/// The file of the history in the data directory.
pub const HISTORY_FILE: &str = "growths.toml";

/// One finished growth.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrowthRecord {
    /// The capacity (blocks) it started from.
    pub from_blocks: u64,
    /// The capacity (blocks) it grew to.
    pub to_blocks: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// When it started (this run of it, for a growth resumed after a crash),
    /// seconds since the Unix epoch.
    pub started_unix: u64,
    /// When it finished, seconds since the Unix epoch.
    pub finished_unix: u64,
    /// The backend positions (for a tree engine: buckets) the growth added.
    pub positions: u64,
    /// The positions this run wrote (fewer than `positions` for a growth
    /// resumed after a crash: those written before were skipped).
    pub written: u64,
    /// The bytes of the objects it wrote to the backend (`written` objects of
    /// the engine's object size).
    pub backend_bytes: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct HistoryFile {
    #[serde(default)]
    growth: Vec<GrowthRecord>,
}

/// The growth history of the data directory `dir`, oldest first (empty when
/// the volume never grew, or grew before the history existed).
pub fn read_history(dir: &Path) -> Result<Vec<GrowthRecord>, VolumeError> {
    let path = dir.join(HISTORY_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&path)(e)),
    };
    let f: HistoryFile = toml::from_str(&text)
        .map_err(|e| VolumeError::Params(format!("{}: {e}", path.display())))?;
    Ok(f.growth)
}

/// Appends `rec` to the history of `dir`, keeping the last [`HISTORY_KEEP`];
/// replaces the file atomically. Blocking (fsync): call it off the async
/// workers.
pub(crate) fn append_history(dir: &Path, rec: GrowthRecord) -> Result<(), VolumeError> {
    let mut growth = read_history(dir)?;
    growth.push(rec);
    let extra = growth.len().saturating_sub(HISTORY_KEEP);
    growth.drain(..extra);
    let text = toml::to_string(&HistoryFile { growth })
        .map_err(|e| VolumeError::Params(format!("growth history: {e}")))?;
    let path = dir.join(HISTORY_FILE);
    let tmp = dir.join(format!("{HISTORY_FILE}.new"));
    let _ = std::fs::remove_file(&tmp);
    write_private(&tmp, &text)?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64) -> GrowthRecord {
        GrowthRecord {
            from_blocks: 64 << i,
            to_blocks: 128 << i,
            block_size: 4096,
            started_unix: 1000 + i,
            finished_unix: 1010 + i,
            positions: 7 + i,
            written: 7 + i,
            backend_bytes: (7 + i) * 100,
        }
    }

    /// The history keeps the last HISTORY_KEEP growths in order, survives a
    /// reread, starts empty, and refuses a damaged file rather than dropping it.
    #[test]
    fn the_history_is_bounded_ordered_and_kept() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_history(d.path()).unwrap().is_empty());
        for i in 0..HISTORY_KEEP as u64 + 5 {
            append_history(d.path(), rec(i)).unwrap();
        }
        let h = read_history(d.path()).unwrap();
        assert_eq!(h.len(), HISTORY_KEEP);
        assert_eq!(h[0], rec(5));
        assert_eq!(h[HISTORY_KEEP - 1], rec(HISTORY_KEEP as u64 + 4));
        assert!(!d.path().join("growths.toml.new").exists());
        crate::fsutil::check_private(&d.path().join(HISTORY_FILE)).unwrap();
        std::fs::write(d.path().join(HISTORY_FILE), "growth = 3").unwrap();
        assert!(read_history(d.path()).is_err());
    }
}
