//! The shipped log (`[state] log_interval_ms` > 0): a recovery point of zero.
//!
//! Every commit of the state database is appended to a byte stream
//! ([`oram_statedb::ShipLog`]); this module carries that stream to the backend in
//! **records of one fixed size, one record every interval**, whatever the clients
//! do: each tick seals the next at most `record − header` bytes of the stream
//! (none when idle), pads them to the record size and PUTs them as
//! `<prefix>/log/<generation>/<seq>`. A commit resolves only once the record
//! holding its last byte has landed, so an acknowledged request is on the backend
//! (checkpoint + log) before its answer, and `recover` loses nothing acknowledged
//! when the proxy's machine is lost (as long as the provider keeps the records).
//!
//! Observed by the storage server: one PUT of the same size every interval (a
//! failed PUT is repeated at the next tick, in place of a new record), the
//! records' growing numbers, and after each checkpoint the DELETEs of the records
//! it makes obsolete. The size and timing of the records do not depend on the
//! requests; when the stream outgrows the rate (record size ÷ interval), commits
//! wait longer (clients see latency, the server sees the same records).
//!
//! A snapshot knows its place in the stream (generation and offset), so
//! `recover` reads that generation's records in order from there, stops at a
//! gap (and fails there unless the operator accepts it: the provider deleted or
//! hides records), drops a trailing incomplete group (its commits were never
//! answered) and replays the rest onto the snapshot in one transaction. A
//! dropped tail is not a gap: only a record number the operator noted
//! ([`ShipStats::last_record`]) reveals it. Each record carries, sealed, when it
//! was sealed. A landed checkpoint
//! deletes the records it covers, those of earlier runs and of other
//! generations.
//!
//! * **Why a fixed rate** rather than one record per commit: the object index
//!   commits on its own (a PUT or DELETE changes it without an ORAM round of its
//!   own), so a record per commit would show the server when objects are
//!   written; records of one size at one rate show nothing.
//! * **Why a checkpoint at every open** with the log on (after the roll-back
//!   check, before anything new is written): a commit of the previous run may be
//!   durable locally but not shipped; the log would then have a gap, and a round
//!   of the new run could overwrite an object the state before the gap refers to.
//! * **Why a round's intent record does not wait for the log**
//!   ([`oram_state::Durable::submit_local`]): the round it announces writes only
//!   slots the state before it does not refer to, and its final commit, after the
//!   intent in the stream, waits; so the shipped state never refers to an object
//!   a later write replaced. That shortens a small PUT's wait from three
//!   intervals to two.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey, SizeBound};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer, OVERHEAD};
use oram_statedb::ShipLog;

use crate::VolumeError;

/// Records written before records carried their time (still read).
const MAGIC_V1: &[u8; 8] = b"ORAMLOG1";
const MAGIC: &[u8; 8] = b"ORAMLOG2";
/// Magic, generation, number, stream offset, payload length (version 1).
const HEAD_V1: usize = 8 + 8 + 8 + 8 + 4;
/// Version 2: version 1's head, then when the record was sealed (ms since the
/// Unix epoch).
const HEAD: usize = HEAD_V1 + 8;
/// The largest record accepted from the backend when reading the log back.
pub const MAX_RECORD_BYTES: usize = 64 << 20;
/// Records fetched at once by [`read_log`].
const READ_BATCH: usize = 8;

/// How the log is shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// Plaintext bytes per record (header included); every record has this size.
    pub record_bytes: usize,
    /// Time between two records.
    pub interval: Duration,
}

impl LogSettings {
    /// Stream bytes one record carries: the record size less its header.
    pub fn capacity(&self) -> usize {
        self.record_bytes.saturating_sub(HEAD)
    }
}

fn dir(prefix: &str, generation: u64) -> String {
    format!("{prefix}/log/{generation:016x}/")
}

fn key(prefix: &str, generation: u64, seq: u64) -> ObjKey {
    ObjKey::new(format!("{}{seq:016x}", dir(prefix, generation))).expect("prefix validated")
}

/// `(generation, number)` of a log record's key.
fn parse_key(prefix: &str, k: &ObjKey) -> Option<(u64, u64)> {
    let rest = k.as_str().strip_prefix(prefix)?.strip_prefix("/log/")?;
    let (g, s) = rest.split_once('/')?;
    Some((
        u64::from_str_radix(g, 16).ok()?,
        u64::from_str_radix(s, 16).ok()?,
    ))
}

/// The numbers of `generation`'s records on the backend, ascending (one listing).
async fn record_numbers(
    store: &dyn BlockStore,
    prefix: &str,
    generation: u64,
) -> Result<Vec<u64>, VolumeError> {
    let mut seqs: Vec<u64> = store
        .list(&dir(prefix, generation))
        .await?
        .iter()
        .filter_map(|k| parse_key(prefix, k))
        .filter(|(g, _)| *g == generation)
        .map(|(_, s)| s)
        .collect();
    seqs.sort_unstable();
    Ok(seqs)
}

fn identity(generation: u64, seq: u64) -> ObjectIdentity {
    ObjectIdentity {
        kind: ObjectKind::Log,
        space: 0,
        position: seq,
        version: 0,
        generation,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Seals record `seq` holding stream bytes `payload` from offset `start`, padded
/// to `record_bytes`, stamped with the time `at_ms` (inside the seal: the
/// provider sees only that records come at the interval, which it sees anyway).
fn seal_record(
    sealer: &Sealer,
    generation: u64,
    seq: u64,
    start: u64,
    payload: &[u8],
    record_bytes: usize,
    at_ms: u64,
) -> Result<Bytes, VolumeError> {
    let mut plain = Vec::with_capacity(record_bytes);
    plain.extend_from_slice(MAGIC);
    plain.extend_from_slice(&generation.to_be_bytes());
    plain.extend_from_slice(&seq.to_be_bytes());
    plain.extend_from_slice(&start.to_be_bytes());
    plain.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    plain.extend_from_slice(&at_ms.to_be_bytes());
    plain.extend_from_slice(payload);
    debug_assert!(plain.len() <= record_bytes);
    plain.resize(record_bytes.max(plain.len()), 0);
    let sealed = sealer
        .seal(&identity(generation, seq), &plain)
        .map_err(oram_engine::OramError::Seal)?;
    zeroize::Zeroize::zeroize(&mut plain);
    Ok(sealed)
}

/// An opened record.
struct Opened {
    /// Stream offset of the payload's first byte.
    start: u64,
    payload: Vec<u8>,
    /// When it was sealed (ms since the Unix epoch); `None` for a version-1 record.
    at_ms: Option<u64>,
}

/// Opens record `seq` (either version).
fn open_record(
    sealer: &Sealer,
    generation: u64,
    seq: u64,
    sealed: &[u8],
) -> Result<Opened, VolumeError> {
    let bad = |what: &str| {
        VolumeError::Integrity(format!("log record {generation:016x}/{seq:016x}: {what}"))
    };
    let plain = sealer
        .open(&identity(generation, seq), sealed)
        .map_err(|e| bad(&format!("does not open ({e})")))?;
    let head = match plain.get(..8) {
        Some(m) if m == MAGIC && plain.len() >= HEAD => HEAD,
        Some(m) if m == MAGIC_V1 && plain.len() >= HEAD_V1 => HEAD_V1,
        _ => return Err(bad("not a log record")),
    };
    let u64_at = |i: usize| u64::from_be_bytes(plain[i..i + 8].try_into().expect("8 bytes"));
    if u64_at(8) != generation || u64_at(16) != seq {
        return Err(bad("names another record"));
    }
    let start = u64_at(24);
    let len = u32::from_be_bytes(plain[32..36].try_into().expect("4 bytes")) as usize;
    if head + len > plain.len() {
        return Err(bad("payload longer than the record"));
    }
    Ok(Opened {
        start,
        payload: plain[head..head + len].to_vec(),
        at_ms: (head == HEAD).then(|| u64_at(HEAD_V1)),
    })
}

/// Counters of the shipper, for logs and tests.
#[derive(Debug, Default)]
pub struct ShipStats {
    /// Records landed.
    pub records: AtomicU64,
    /// PUTs of a record that failed (each repeated at the next tick).
    pub failures: AtomicU64,
    /// Where the landed stream ends: the state changes shipped so far in this
    /// generation (an offset: a later run of the same generation goes on from
    /// its predecessor's).
    pub bytes: AtomicU64,
    /// Stream bytes one record carries (the record size less its header).
    pub record_capacity: u64,
    /// The number of the last record landed, plus one (0: none yet). The operator
    /// notes it (`/metrics`, the serve log) as the anchor `recover
    /// --expect-record` checks: the backend cannot be trusted to keep the log's
    /// tail.
    pub last_record: AtomicU64,
}

impl ShipStats {
    /// The number of the last record landed by this run, if any.
    pub fn last_record(&self) -> Option<u64> {
        self.last_record.load(Ordering::Relaxed).checked_sub(1)
    }
}

/// The task shipping one volume's log. Dropping it stops the task (commits still
/// waiting then never resolve: the process is going away).
pub struct Shipper {
    task: tokio::task::JoinHandle<()>,
    /// The records this run landed: number → stream offset after it. Guards only
    /// the map (no I/O under it).
    landed: Arc<Mutex<BTreeMap<u64, u64>>>,
    store: Arc<dyn BlockStore>,
    prefix: String,
    generation: u64,
    /// The first record number of this run: records before it (an earlier run's)
    /// are obsolete once this run's first checkpoint has landed.
    first: u64,
    /// What the task did so far.
    pub stats: Arc<ShipStats>,
}

impl std::fmt::Debug for Shipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shipper")
            .field("generation", &self.generation)
            .field("first", &self.first)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts shipping `log` of the state database in `generation` to `store` under
/// `prefix`. Record numbers continue after the highest one of this generation
/// already on the backend (listed once here).
pub async fn start(
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    prefix: String,
    generation: u64,
    log: Arc<ShipLog>,
    settings: LogSettings,
) -> Result<Shipper, VolumeError> {
    let first = record_numbers(store.as_ref(), &prefix, generation)
        .await?
        .last()
        .map_or(0, |s| s + 1);
    let landed = Arc::new(Mutex::new(BTreeMap::new()));
    let stats = Arc::new(ShipStats {
        record_capacity: settings.capacity() as u64,
        ..ShipStats::default()
    });
    let task = tokio::spawn(ship(
        store.clone(),
        sealer,
        prefix.clone(),
        generation,
        first,
        log,
        settings,
        landed.clone(),
        stats.clone(),
    ));
    Ok(Shipper {
        task,
        landed,
        store,
        prefix,
        generation,
        first,
        stats,
    })
}

#[allow(clippy::too_many_arguments)]
async fn ship(
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    prefix: String,
    generation: u64,
    mut seq: u64,
    log: Arc<ShipLog>,
    settings: LogSettings,
    landed: Arc<Mutex<BTreeMap<u64, u64>>>,
    stats: Arc<ShipStats>,
) {
    let mut tick = tokio::time::interval(settings.interval);
    // A PUT slower than the interval delays the next record; none is skipped or
    // sent in a burst to catch up.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let capacity = settings.capacity();
    // The record being shipped: number, stream offset after it, sealed bytes.
    let mut pending: Option<(u64, u64, Bytes)> = None;
    loop {
        tick.tick().await;
        if pending.is_none() {
            let (start, bytes) = log.take(capacity);
            let end = start + bytes.len() as u64;
            match seal_record(
                &sealer,
                generation,
                seq,
                start,
                &bytes,
                settings.record_bytes,
                now_ms(),
            ) {
                Ok(sealed) => pending = Some((seq, end, sealed)),
                Err(e) => {
                    // Sealing a bounded record cannot fail; if it did, nothing
                    // waiting would ever be answered: say so loudly.
                    tracing::error!("shipped log: cannot seal a record: {e}");
                    return;
                }
            }
        }
        let Some((n, end, sealed)) = &pending else {
            continue;
        };
        match store
            .put_many(vec![(key(&prefix, generation, *n), sealed.clone())])
            .await
        {
            Ok(()) => {
                // Shown before the commits it holds are answered: a client that
                // got its answer finds the number at least this far.
                stats.last_record.store(n + 1, Ordering::Relaxed);
                log.landed(*end);
                lock(&landed).insert(*n, *end);
                stats.records.fetch_add(1, Ordering::Relaxed);
                stats.bytes.store(*end, Ordering::Relaxed);
                seq = n + 1;
                pending = None;
            }
            Err(e) => {
                let failures = stats.failures.fetch_add(1, Ordering::Relaxed);
                // One line per hundred failures: a backend that is down would
                // otherwise log at the record rate.
                if failures.is_multiple_of(100) {
                    tracing::warn!(
                        failures = failures + 1,
                        "shipped log: a record did not land ({e}); it is sent again at the \
                         next tick, and commits wait for it"
                    );
                }
            }
        }
    }
}

impl Shipper {
    /// Deletes the records a landed checkpoint made obsolete: this run's records
    /// up to stream offset `upto` (the checkpoint's), every record of an earlier
    /// run of this generation, and every record of another generation. Returns
    /// how many were deleted. The highest-numbered record of this generation is
    /// always kept: it carries the number `recover --expect-record` looks for
    /// (and the next run's numbers continue after it).
    ///
    /// Observed by the storage server: one listing of `<prefix>/log/` and the
    /// DELETEs.
    pub async fn prune(&self, upto: u64) -> Result<u64, VolumeError> {
        let all = self.store.list(&format!("{}/log/", self.prefix)).await?;
        let highest = all
            .iter()
            .filter_map(|k| parse_key(&self.prefix, k))
            .filter(|(g, _)| *g == self.generation)
            .map(|(_, s)| s)
            .max();
        let dead: Vec<ObjKey> = {
            let landed = lock(&self.landed);
            all.into_iter()
                .filter(|k| match parse_key(&self.prefix, k) {
                    Some((g, s)) if g == self.generation => {
                        Some(s) != highest
                            && (s < self.first || landed.get(&s).is_some_and(|end| *end <= upto))
                    }
                    Some(_) => true,
                    // Not a record of ours: left alone.
                    None => false,
                })
                .collect()
        };
        if dead.is_empty() {
            return Ok(0);
        }
        self.store.delete_many(&dead).await?;
        let mut landed = lock(&self.landed);
        for k in &dead {
            if let Some((_, s)) = parse_key(&self.prefix, k) {
                landed.remove(&s);
            }
        }
        Ok(dead.len() as u64)
    }
}

/// A record of the log, as `recover` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMark {
    /// Its number.
    pub number: u64,
    /// When it was sealed (ms since the Unix epoch); `None` for a record written
    /// before records carried their time.
    pub at_ms: Option<u64>,
}

/// What [`read_log`] found.
#[derive(Debug, Default)]
pub struct ReadLog {
    /// The stream from the requested offset, as far as it runs without a gap.
    pub stream: Vec<u8>,
    /// Records downloaded.
    pub records: u64,
    /// The last record whose bytes are in `stream` or were covered by the
    /// checkpoint (the log applied up to it), if any.
    pub last: Option<RecordMark>,
    /// What is missing, if the stream stops at a gap: records the provider
    /// deleted or hides in the middle of the log after the checkpoint.
    pub gap: Option<String>,
}

/// Reads the shipped log of `generation` from stream offset `from` (where a
/// checkpoint's snapshot stands): lists the generation's records and downloads
/// them in order, every one opened and checked.
///
/// The stream stops at a **gap**, described in [`ReadLog::gap`]: a record listed
/// but not returned, a record whose bytes do not continue the stream (records
/// holding them are missing), or, once the stream has passed the checkpoint, a
/// record number skipped (a missing record, even an empty one: every record
/// after the checkpoint stays until a later checkpoint covers it). A missing
/// *tail* is not a gap: only a number the operator noted can show it
/// ([`ReadLog::last`]).
pub async fn read_log(
    store: &dyn BlockStore,
    sealer: &Sealer,
    prefix: &str,
    generation: u64,
    from: u64,
) -> Result<ReadLog, VolumeError> {
    let seqs = record_numbers(store, prefix, generation).await?;
    let mut out = ReadLog::default();
    let mut pos = from;
    // The number of the last record whose bytes went into the stream.
    let mut used: Option<u64> = None;
    let name = |s: u64| format!("{generation:016x}/{s:016x}");
    let bound = SizeBound::AtMost((MAX_RECORD_BYTES + OVERHEAD) as u64);
    'batches: for batch in seqs.chunks(READ_BATCH) {
        let keys: Vec<ObjKey> = batch.iter().map(|s| key(prefix, generation, *s)).collect();
        let got = store.get_many_bounded(&keys, bound).await?;
        for (seq, obj) in batch.iter().zip(got) {
            let Some(obj) = obj else {
                out.gap = Some(format!("record {} was listed but is missing", name(*seq)));
                break 'batches;
            };
            out.records += 1;
            let rec = open_record(sealer, generation, *seq, &obj)?;
            let end = rec.start + rec.payload.len() as u64;
            if let Some(prev) = used {
                if *seq != prev + 1 {
                    out.gap = Some(format!(
                        "records {} to {} are missing (the stream stops after record {})",
                        name(prev + 1),
                        name(seq - 1),
                        name(prev)
                    ));
                    break 'batches;
                }
            }
            if rec.start > pos {
                out.gap = Some(format!(
                    "stream bytes {pos} to {} are missing: the records holding them, \
                     before record {}, are gone",
                    rec.start,
                    name(*seq)
                ));
                break 'batches;
            }
            out.last = Some(RecordMark {
                number: *seq,
                at_ms: rec.at_ms,
            });
            if end <= pos {
                // Covered by the checkpoint already (or empty at its position).
                if used.is_some() {
                    used = Some(*seq);
                }
                continue;
            }
            out.stream
                .extend_from_slice(&rec.payload[(pos - rec.start) as usize..]);
            pos = end;
            used = Some(*seq);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
