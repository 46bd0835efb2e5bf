//! The shipped log: every committed change set, as a byte stream that a shipper
//! (the proxy's, `[state] log_interval_ms`) carries to the backend in sealed records
//! of one fixed size at a fixed rate. With it a commit resolves only when its
//! changes are durable locally **and** on the backend, so that `recover` — the last
//! checkpoint plus the log after it — loses nothing acknowledged when the proxy's
//! machine is lost.
//!
//! The stream is the concatenation of **groups**, one per transaction of the
//! committer, in commit order: `u32 BE length ‖ body`, where the body is the
//! group's writes (`u32 BE count`, then per write `u8 table ‖ u32 BE key length ‖
//! key ‖ u8 present ‖ [u32 BE value length ‖ value]`). Each transaction records
//! the stream offset after its own group as the named value `log_end`, so a
//! snapshot says where in the stream it stands ([`snapshot_position`]).

use std::collections::VecDeque;
use std::sync::Mutex;

use oram_state::{ChangeSet, Table};

use crate::committer::Outcome;
use crate::DbError;

/// The named value holding the stream offset after the last committed group.
pub(crate) const LOG_END: &str = "log_end";

/// Longest group accepted when decoding (a transaction of the committer is at
/// most a few hundred MiB; a larger length is corruption).
const MAX_GROUP_BYTES: usize = 1 << 30;

/// The part of the stream not yet known to be on the backend, and the commits
/// waiting for it. Shared by the committer thread (which appends) and the
/// shipper (which takes bytes into records and reports them landed).
pub struct ShipLog {
    /// Guards the queue; held for memory operations only (no I/O under it).
    queue: Mutex<Queue>,
}

struct Queue {
    /// Stream offset after the last group appended.
    end: u64,
    /// Stream offset up to which bytes were taken into records.
    taken: u64,
    /// Stream offset of `buf[0]`: everything before it landed.
    base: u64,
    /// Bytes from `base` to `end`.
    buf: VecDeque<u8>,
    /// Commits waiting for the stream to land up to their offset, in order.
    waiters: VecDeque<(u64, futures::channel::oneshot::Sender<Outcome>)>,
}

impl std::fmt::Debug for ShipLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.lock();
        f.debug_struct("ShipLog")
            .field("end", &q.end)
            .field("landed", &q.base)
            .field("waiting", &q.waiters.len())
            .finish()
    }
}

impl ShipLog {
    /// A log whose stream continues at offset `end` (everything before it is
    /// treated as landed).
    pub(crate) fn new(end: u64) -> Self {
        Self {
            queue: Mutex::new(Queue {
                end,
                taken: end,
                base: end,
                buf: VecDeque::new(),
                waiters: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Every critical section leaves the queue consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stream offset after the last group appended.
    pub(crate) fn end(&self) -> u64 {
        self.lock().end
    }

    /// Appends a committed group and the commits it answers (they resolve once
    /// the stream has landed up to the group's end).
    pub(crate) fn append(
        &self,
        group: &[u8],
        done: impl IntoIterator<Item = futures::channel::oneshot::Sender<Outcome>>,
    ) {
        let mut q = self.lock();
        q.buf.extend(group);
        q.end += group.len() as u64;
        let end = q.end;
        if end == q.base {
            // Nothing outstanding: durable everywhere already.
            for d in done {
                let _ = d.send(Outcome::Done);
            }
        } else {
            q.waiters.extend(done.into_iter().map(|d| (end, d)));
        }
    }

    /// Takes the next at most `max` bytes not yet taken into a record: their
    /// stream offset and the bytes (possibly none). The caller ships them and
    /// reports [`ShipLog::landed`]; bytes taken are not handed out again.
    pub fn take(&self, max: usize) -> (u64, Vec<u8>) {
        let mut q = self.lock();
        let start = q.taken;
        let skip = (start - q.base) as usize;
        let n = max.min(q.buf.len() - skip);
        let bytes: Vec<u8> = q.buf.range(skip..skip + n).copied().collect();
        q.taken += n as u64;
        (start, bytes)
    }

    /// Reports that the stream is on the backend up to offset `end` (records are
    /// shipped in order): resolves every commit up to it.
    pub fn landed(&self, end: u64) {
        let mut q = self.lock();
        if end <= q.base {
            return;
        }
        let drop_n = ((end.min(q.end)) - q.base) as usize;
        q.buf.drain(..drop_n);
        q.base += drop_n as u64;
        while q.waiters.front().is_some_and(|(e, _)| *e <= q.base) {
            if let Some((_, d)) = q.waiters.pop_front() {
                let _ = d.send(Outcome::Done);
            }
        }
    }

    /// `(stream end, landed up to)`: how far the backend is behind.
    pub fn position(&self) -> (u64, u64) {
        let q = self.lock();
        (q.end, q.base)
    }
}

fn table_index(t: Table) -> u8 {
    Table::ALL
        .iter()
        .position(|x| *x == t)
        .expect("every table is in Table::ALL") as u8
}

/// Encodes one group (length prefix included). Panics if the group is larger
/// than the shipped log's bound (1 GiB, which `decode_groups` refuses): the
/// committer uses [`encode_groups`], which splits or refuses such a group.
pub fn encode_group(writes: &[&ChangeSet]) -> Vec<u8> {
    encode_bounded(writes, MAX_GROUP_BYTES).expect("a group within the shipped log's bound")
}

/// Encodes the change sets of one committer transaction as one or more groups
/// of at most 1 GiB each (what `decode_groups` accepts), split between change
/// sets, never inside one; an error if one change set alone is larger (then
/// nothing is shipped, and its commit fails). Groups land in order, so a crash
/// while shipping leaves a prefix of whole change sets, each as atomic as its
/// own commit.
pub fn encode_groups(writes: &[&ChangeSet]) -> Result<Vec<u8>, DbError> {
    encode_groups_within(writes, MAX_GROUP_BYTES)
}

/// [`encode_groups`] with groups of at most `max` bytes (body, without its
/// length prefix).
pub(crate) fn encode_groups_within(writes: &[&ChangeSet], max: usize) -> Result<Vec<u8>, DbError> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut body = 4; // the count
    for (i, c) in writes.iter().enumerate() {
        let size = body_bytes(c);
        if 4 + size > max {
            return Err(DbError::LogGroup {
                bytes: 4 + size,
                max,
            });
        }
        if body + size > max {
            out.extend(encode_bounded(&writes[start..i], max)?);
            start = i;
            body = 4;
        }
        body += size;
    }
    if start < writes.len() {
        out.extend(encode_bounded(&writes[start..], max)?);
    }
    Ok(out)
}

/// The encoded size of `c`'s writes in a group's body.
fn body_bytes(c: &ChangeSet) -> usize {
    c.writes
        .iter()
        .map(|w| 1 + 4 + w.key.len() + 1 + w.value.as_ref().map_or(0, |v| 4 + v.len()))
        .sum()
}

/// One group of `writes`, refused if its body is larger than `max` (or a count
/// or length does not fit the format's 32 bits).
fn encode_bounded(writes: &[&ChangeSet], max: usize) -> Result<Vec<u8>, DbError> {
    let u32_of = |n: usize| {
        u32::try_from(n).map_err(|_| DbError::LogGroup {
            bytes: n,
            max: u32::MAX as usize,
        })
    };
    let mut body = Vec::new();
    let count: usize = writes.iter().map(|c| c.writes.len()).sum();
    body.extend_from_slice(&u32_of(count)?.to_be_bytes());
    for w in writes.iter().flat_map(|c| c.writes.iter()) {
        body.push(table_index(w.table));
        body.extend_from_slice(&u32_of(w.key.len())?.to_be_bytes());
        body.extend_from_slice(&w.key);
        match &w.value {
            Some(v) => {
                body.push(1);
                body.extend_from_slice(&u32_of(v.len())?.to_be_bytes());
                body.extend_from_slice(v);
            }
            None => body.push(0),
        }
    }
    if body.len() > max {
        return Err(DbError::LogGroup {
            bytes: body.len(),
            max,
        });
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&u32_of(body.len())?.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes the complete groups at the start of `stream`: the change sets, in
/// order, and the bytes they took. A trailing incomplete group (its end never
/// reached the backend, so none of its commits was acknowledged) is left out; a
/// malformed complete group is an error.
pub fn decode_groups(stream: &[u8]) -> Result<(Vec<ChangeSet>, usize), DbError> {
    let bad = |what: &str| DbError::Snapshot(format!("shipped log: {what}"));
    let mut out = Vec::new();
    let mut at = 0usize;
    while stream.len() - at >= 4 {
        let len = u32::from_be_bytes(stream[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len > MAX_GROUP_BYTES {
            return Err(bad("group length out of range"));
        }
        if stream.len() - at - 4 < len {
            break;
        }
        let mut body = &stream[at + 4..at + 4 + len];
        let mut take = |n: usize| -> Result<&[u8], DbError> {
            if body.len() < n {
                return Err(bad("group truncated inside"));
            }
            let (a, b) = body.split_at(n);
            body = b;
            Ok(a)
        };
        let u32_of = |b: &[u8]| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize;
        let count = u32_of(take(4)?);
        let mut cs = ChangeSet::default();
        for _ in 0..count {
            let t = *Table::ALL
                .get(take(1)?[0] as usize)
                .ok_or_else(|| bad("unknown table"))?;
            let klen = u32_of(take(4)?);
            let key = take(klen)?.to_vec();
            let value = match take(1)?[0] {
                0 => None,
                1 => {
                    let vlen = u32_of(take(4)?);
                    Some(take(vlen)?.to_vec())
                }
                _ => return Err(bad("bad value flag")),
            };
            cs.push(t, key, value);
        }
        if !body.is_empty() {
            return Err(bad("trailing bytes in a group"));
        }
        out.push(cs);
        at += 4 + len;
    }
    Ok((out, at))
}
