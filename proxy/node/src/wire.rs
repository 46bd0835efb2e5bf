//! The messages between a front and a node: length-prefixed frames over a
//! mutual-TLS stream.
//!
//! **Sizes.** A staged access of `n` ops is `n` records of the same size
//! (kind, block id, a block of data — zeros for a read, take or dummy), and its
//! answer `n` answers of one block each, so that what a network observer sees
//! of a sub-access is `n` and its timing: what the storage server sees of it
//! anyway. Maintenance messages (check, sweep, format) are rare and
//! carry reports.

use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use oram_blockstore::StoreError;
use oram_engine::{CheckReport, EngineStats, Formatted, Op, OramError, RoundId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame either side accepts (a round of 4 × 1024 ops of 256 KiB
/// blocks is 1 GiB; rounds are sized well below that).
pub const MAX_FRAME: usize = 1 << 30;

/// Bytes of an op record besides its block of data: kind (1) and block id (8).
pub const OP_HEADER: usize = 9;

/// What a front asks a node about one of its partitions.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// Stage an access of `ops` in the partition as part of `round`.
    Stage {
        /// The partition's owner token the front holds.
        token: u64,
        /// The front's round.
        round: RoundId,
        /// This attempt at staging it (unique to the front): a land or abort
        /// names it, so that one of an earlier attempt touches nothing.
        attempt: u64,
        /// The partition's sub-ops.
        ops: Vec<Op>,
    },
    /// Land the staged access of round `seq` and commit it.
    Land {
        /// The owner token.
        token: u64,
        /// The round.
        seq: u64,
        /// The attempt that staged it.
        attempt: u64,
    },
    /// Drop the staged access of round `seq` uncommitted, if it is still the
    /// one attempt `attempt` staged.
    Abort {
        /// The owner token.
        token: u64,
        /// The round.
        seq: u64,
        /// The attempt that staged it.
        attempt: u64,
    },
    /// [`oram_engine::Oram::flush`].
    Flush,
    /// The sub-engine's counters.
    Stats,
    /// [`oram_engine::Oram::check`].
    Check,
    /// [`oram_engine::Oram::sweep`].
    Sweep,
    /// [`oram_engine::Oram::format`].
    Format,
}

impl Request {
    /// The request's kind, for logs (`"stage"`, `"land"`, …): nothing of
    /// its contents.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Stage { .. } => "stage",
            Request::Land { .. } => "land",
            Request::Abort { .. } => "abort",
            Request::Flush => "flush",
            Request::Stats => "stats",
            Request::Check => "check",
            Request::Sweep => "sweep",
            Request::Format => "format",
        }
    }
}

/// A request for partition `partition`.
#[derive(Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The partition.
    pub partition: u32,
    /// What is asked.
    pub request: Request,
}

/// A node's answer.
#[derive(Debug)]
pub enum Response {
    /// A staged access's answers (one block each; empty for a write, insert or
    /// dummy).
    Answers(Vec<Bytes>),
    /// Done (land, abort, flush), with the sub-engine's counters.
    Done(EngineStats),
    /// A check's report.
    Checked(CheckReport),
    /// A sweep's count of objects deleted.
    Swept(u64),
    /// What a format did.
    Formatted(Formatted),
    /// The request failed.
    Failed(OramError),
}

/// The node's answer with the owner token it holds for the partition.
#[derive(Debug)]
pub struct Reply {
    /// The node's owner token for the partition (0: it does not own it).
    pub token: u64,
    /// The answer.
    pub response: Response,
}

/// Writes one frame: a 4-byte length and `body`.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(body).await?;
    w.flush().await
}

/// Reads one frame (`None`: the peer closed the stream between frames).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<Bytes>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is above the limit of {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(Some(Bytes::from(body)))
}

/// A message that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("malformed message: {0}")]
pub struct Malformed(pub String);

fn short(what: &str) -> Malformed {
    Malformed(format!("{what}: message too short"))
}

fn get_u8(b: &mut Bytes, what: &str) -> Result<u8, Malformed> {
    (b.remaining() >= 1)
        .then(|| b.get_u8())
        .ok_or_else(|| short(what))
}

fn get_u32(b: &mut Bytes, what: &str) -> Result<u32, Malformed> {
    (b.remaining() >= 4)
        .then(|| b.get_u32())
        .ok_or_else(|| short(what))
}

fn get_u64(b: &mut Bytes, what: &str) -> Result<u64, Malformed> {
    (b.remaining() >= 8)
        .then(|| b.get_u64())
        .ok_or_else(|| short(what))
}

fn get_bytes(b: &mut Bytes, n: usize, what: &str) -> Result<Bytes, Malformed> {
    (b.remaining() >= n)
        .then(|| b.split_to(n))
        .ok_or_else(|| short(what))
}

fn put_str(out: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(1 << 16)];
    out.put_u32(s.len() as u32);
    out.put_slice(s);
}

fn get_str(b: &mut Bytes, what: &str) -> Result<String, Malformed> {
    let n = get_u32(b, what)? as usize;
    let raw = get_bytes(b, n, what)?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// A count of items of at least `each` bytes, checked against what is left.
fn get_count(b: &mut Bytes, each: usize, what: &str) -> Result<usize, Malformed> {
    let n = get_u32(b, what)? as usize;
    if n.saturating_mul(each.max(1)) > b.remaining() {
        return Err(short(what));
    }
    Ok(n)
}

const STAGE: u8 = 1;
const LAND: u8 = 2;
const ABORT: u8 = 3;
const FLUSH: u8 = 4;
const STATS: u8 = 5;
const CHECK: u8 = 6;
const SWEEP: u8 = 7;
const FORMAT: u8 = 8;

const OP_READ: u8 = 1;
const OP_WRITE: u8 = 2;
const OP_TAKE: u8 = 3;
const OP_DUMMY: u8 = 4;
const OP_INSERT: u8 = 5;

impl Envelope {
    /// The frame body, every op record `OP_HEADER + block_size` bytes.
    pub fn encode(&self, block_size: usize) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u32(self.partition);
        match &self.request {
            Request::Stage {
                token,
                round,
                attempt,
                ops,
            } => {
                out.reserve(40 + ops.len() * (OP_HEADER + block_size));
                out.put_u8(STAGE);
                out.put_u64(*token);
                out.put_u64(*attempt);
                out.put_u64(round.seq);
                out.put_u8(u8::from(round.repeat));
                out.put_u32(block_size as u32);
                out.put_u32(ops.len() as u32);
                for op in ops {
                    let (kind, block, data) = match op {
                        Op::Read(b) => (OP_READ, *b, None),
                        Op::Write(b, d) => (OP_WRITE, *b, Some(d)),
                        Op::Take(b) => (OP_TAKE, *b, None),
                        Op::Dummy => (OP_DUMMY, 0, None),
                        Op::Insert(b, d) => (OP_INSERT, *b, Some(d)),
                    };
                    out.put_u8(kind);
                    out.put_u64(block);
                    match data {
                        Some(d) if d.len() == block_size => out.put_slice(d),
                        // The framework validates every op first, so no
                        // block of another size gets here; one would be cut
                        // or padded to keep the record's size.
                        Some(d) => {
                            let n = d.len().min(block_size);
                            out.put_slice(&d[..n]);
                            out.put_bytes(0, block_size - n);
                        }
                        None => out.put_bytes(0, block_size),
                    }
                }
            }
            Request::Land {
                token,
                seq,
                attempt,
            } => {
                out.put_u8(LAND);
                out.put_u64(*token);
                out.put_u64(*seq);
                out.put_u64(*attempt);
            }
            Request::Abort {
                token,
                seq,
                attempt,
            } => {
                out.put_u8(ABORT);
                out.put_u64(*token);
                out.put_u64(*seq);
                out.put_u64(*attempt);
            }
            Request::Flush => out.put_u8(FLUSH),
            Request::Stats => out.put_u8(STATS),
            Request::Check => out.put_u8(CHECK),
            Request::Sweep => out.put_u8(SWEEP),
            Request::Format => out.put_u8(FORMAT),
        }
        out.freeze()
    }

    /// Decodes a frame body; `block_size` is the node's (a stage of another
    /// block size is refused).
    pub fn decode(mut b: Bytes, block_size: usize) -> Result<Self, Malformed> {
        let partition = get_u32(&mut b, "partition")?;
        let request = match get_u8(&mut b, "kind")? {
            STAGE => {
                let token = get_u64(&mut b, "token")?;
                let attempt = get_u64(&mut b, "attempt")?;
                let seq = get_u64(&mut b, "round")?;
                let repeat = get_u8(&mut b, "repeat")? != 0;
                let size = get_u32(&mut b, "block size")? as usize;
                if size != block_size {
                    return Err(Malformed(format!(
                        "blocks of {size} bytes: this node's partitions take {block_size}"
                    )));
                }
                let n = get_count(&mut b, OP_HEADER + block_size, "ops")?;
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = get_u8(&mut b, "op")?;
                    let block = get_u64(&mut b, "op")?;
                    let data = get_bytes(&mut b, block_size, "op data")?;
                    ops.push(match kind {
                        OP_READ => Op::Read(block),
                        OP_WRITE => Op::Write(block, data),
                        OP_TAKE => Op::Take(block),
                        OP_DUMMY => Op::Dummy,
                        OP_INSERT => Op::Insert(block, data),
                        k => return Err(Malformed(format!("unknown op kind {k}"))),
                    });
                }
                Request::Stage {
                    token,
                    round: RoundId { seq, repeat },
                    attempt,
                    ops,
                }
            }
            LAND => Request::Land {
                token: get_u64(&mut b, "token")?,
                seq: get_u64(&mut b, "round")?,
                attempt: get_u64(&mut b, "attempt")?,
            },
            ABORT => Request::Abort {
                token: get_u64(&mut b, "token")?,
                seq: get_u64(&mut b, "round")?,
                attempt: get_u64(&mut b, "attempt")?,
            },
            FLUSH => Request::Flush,
            STATS => Request::Stats,
            CHECK => Request::Check,
            SWEEP => Request::Sweep,
            FORMAT => Request::Format,
            k => return Err(Malformed(format!("unknown request kind {k}"))),
        };
        if b.has_remaining() {
            return Err(Malformed(format!(
                "{} bytes after the request",
                b.remaining()
            )));
        }
        Ok(Self { partition, request })
    }
}

const R_ANSWERS: u8 = 1;
const R_DONE: u8 = 2;
const R_CHECKED: u8 = 3;
const R_SWEPT: u8 = 4;
const R_FORMATTED: u8 = 5;
const R_FAILED: u8 = 6;

// Error classes: what the front rebuilds.
const E_TRANSIENT: u8 = 1;
const E_INTEGRITY: u8 = 2;
const E_STASH: u8 = 3;
const E_RANGE: u8 = 4;
const E_SIZE: u8 = 5;
const E_CONFIG: u8 = 6;
const E_OTHER: u8 = 7;
const E_WRONG_SIZE: u8 = 8;

fn put_stats(out: &mut BytesMut, s: &EngineStats) {
    for v in [
        s.accesses,
        s.rounds,
        s.stash_len,
        s.stash_max,
        s.stash_sum,
        s.pending_writebacks,
        s.writeback_retries,
    ] {
        out.put_u64(v);
    }
}

fn get_stats(b: &mut Bytes) -> Result<EngineStats, Malformed> {
    let mut v = [0u64; 7];
    for x in &mut v {
        *x = get_u64(b, "stats")?;
    }
    Ok(EngineStats {
        accesses: v[0],
        rounds: v[1],
        stash_len: v[2],
        stash_max: v[3],
        stash_sum: v[4],
        pending_writebacks: v[5],
        writeback_retries: v[6],
        ..EngineStats::default()
    })
}

fn put_error(out: &mut BytesMut, e: &OramError) {
    match e {
        OramError::Store(StoreError::WrongSize { key, got, expected }) => {
            out.put_u8(E_WRONG_SIZE);
            put_str(out, key);
            put_str(out, got);
            put_str(out, expected);
        }
        OramError::Store(s) if s.is_transient() => {
            out.put_u8(E_TRANSIENT);
            put_str(out, &s.to_string());
        }
        OramError::Integrity { key, reason } => {
            out.put_u8(E_INTEGRITY);
            put_str(out, key);
            put_str(out, reason);
        }
        OramError::StashOverflow { size, bound } => {
            out.put_u8(E_STASH);
            out.put_u64(*size as u64);
            out.put_u64(*bound as u64);
        }
        OramError::BlockOutOfRange { block, capacity } => {
            out.put_u8(E_RANGE);
            out.put_u64(*block);
            out.put_u64(*capacity);
        }
        OramError::WrongBlockSize { block, got, want } => {
            out.put_u8(E_SIZE);
            out.put_u64(*block);
            out.put_u64(*got as u64);
            out.put_u64(*want as u64);
        }
        OramError::Config(m) => {
            out.put_u8(E_CONFIG);
            put_str(out, m);
        }
        other => {
            out.put_u8(E_OTHER);
            put_str(out, &other.to_string());
        }
    }
}

fn get_error(b: &mut Bytes) -> Result<OramError, Malformed> {
    Ok(match get_u8(b, "error")? {
        E_TRANSIENT => OramError::Store(StoreError::Unavailable(get_str(b, "error")?)),
        E_INTEGRITY => OramError::Integrity {
            key: get_str(b, "error key")?,
            reason: get_str(b, "error reason")?,
        },
        E_STASH => OramError::StashOverflow {
            size: get_u64(b, "error")? as usize,
            bound: get_u64(b, "error")? as usize,
        },
        E_RANGE => OramError::BlockOutOfRange {
            block: get_u64(b, "error")?,
            capacity: get_u64(b, "error")?,
        },
        E_SIZE => OramError::WrongBlockSize {
            block: get_u64(b, "error")?,
            got: get_u64(b, "error")? as usize,
            want: get_u64(b, "error")? as usize,
        },
        E_CONFIG => OramError::Config(get_str(b, "error")?),
        E_WRONG_SIZE => OramError::Store(StoreError::WrongSize {
            key: get_str(b, "error key")?,
            got: get_str(b, "error")?,
            expected: get_str(b, "error")?,
        }),
        E_OTHER => OramError::Store(StoreError::Rejected {
            op: "node",
            key: String::new(),
            message: get_str(b, "error")?,
        }),
        k => return Err(Malformed(format!("unknown error class {k}"))),
    })
}

impl Reply {
    /// The frame body, every answer `4 + block_size` bytes.
    pub fn encode(&self, block_size: usize) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u64(self.token);
        match &self.response {
            Response::Answers(answers) => {
                out.reserve(8 + answers.len() * (4 + block_size));
                out.put_u8(R_ANSWERS);
                out.put_u32(answers.len() as u32);
                for a in answers {
                    let n = a.len().min(block_size);
                    out.put_u32(n as u32);
                    out.put_slice(&a[..n]);
                    out.put_bytes(0, block_size - n);
                }
            }
            Response::Done(stats) => {
                out.put_u8(R_DONE);
                put_stats(&mut out, stats);
            }
            Response::Checked(r) => {
                out.put_u8(R_CHECKED);
                for v in [r.objects_read, r.objects_bad, r.blocks_found, r.stash_len] {
                    out.put_u64(v);
                }
                out.put_u32(r.written_blocks.len() as u32);
                for b in &r.written_blocks {
                    out.put_u64(*b);
                }
                out.put_u32(r.problems.len() as u32);
                for p in &r.problems {
                    put_str(&mut out, p);
                }
                out.put_u64(r.problems_total);
            }
            Response::Swept(n) => {
                out.put_u8(R_SWEPT);
                out.put_u64(*n);
            }
            Response::Formatted(f) => {
                out.put_u8(R_FORMATTED);
                out.put_u64(f.positions);
                out.put_u64(f.written);
            }
            Response::Failed(e) => {
                out.put_u8(R_FAILED);
                put_error(&mut out, e);
            }
        }
        out.freeze()
    }

    /// Decodes a frame body.
    pub fn decode(mut b: Bytes, block_size: usize) -> Result<Self, Malformed> {
        let token = get_u64(&mut b, "token")?;
        let response = match get_u8(&mut b, "kind")? {
            R_ANSWERS => {
                let n = get_count(&mut b, 4 + block_size, "answers")?;
                let mut answers = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = get_u32(&mut b, "answer")? as usize;
                    if len > block_size {
                        return Err(Malformed(format!(
                            "an answer of {len} bytes, blocks are {block_size}"
                        )));
                    }
                    let mut slot = get_bytes(&mut b, block_size, "answer")?;
                    slot.truncate(len);
                    answers.push(slot);
                }
                Response::Answers(answers)
            }
            R_DONE => Response::Done(get_stats(&mut b)?),
            R_CHECKED => {
                let mut r = CheckReport {
                    objects_read: get_u64(&mut b, "report")?,
                    objects_bad: get_u64(&mut b, "report")?,
                    blocks_found: get_u64(&mut b, "report")?,
                    stash_len: get_u64(&mut b, "report")?,
                    ..CheckReport::default()
                };
                let n = get_count(&mut b, 8, "report blocks")?;
                for _ in 0..n {
                    r.written_blocks.push(get_u64(&mut b, "report blocks")?);
                }
                let n = get_count(&mut b, 4, "report problems")?;
                for _ in 0..n {
                    r.problems.push(get_str(&mut b, "report problems")?);
                }
                r.problems_total = get_u64(&mut b, "report")?;
                Response::Checked(r)
            }
            R_SWEPT => Response::Swept(get_u64(&mut b, "swept")?),
            R_FORMATTED => Response::Formatted(Formatted {
                positions: get_u64(&mut b, "formatted")?,
                written: get_u64(&mut b, "formatted")?,
            }),
            R_FAILED => Response::Failed(get_error(&mut b)?),
            k => return Err(Malformed(format!("unknown response kind {k}"))),
        };
        if b.has_remaining() {
            return Err(Malformed(format!(
                "{} bytes after the reply",
                b.remaining()
            )));
        }
        Ok(Self { token, response })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(v: u8) -> Bytes {
        Bytes::from(vec![v; 16])
    }

    #[test]
    fn a_stage_is_the_same_size_whatever_its_ops_are() {
        let stage = |ops: Vec<Op>| Envelope {
            partition: 3,
            request: Request::Stage {
                token: 9,
                round: RoundId {
                    seq: 7,
                    repeat: false,
                },
                attempt: 11,
                ops,
            },
        };
        let reads = stage(vec![Op::Read(1), Op::Dummy, Op::Take(5)]);
        let writes = stage(vec![
            Op::Write(1, block(1)),
            Op::Insert(2, block(2)),
            Op::Write(9, block(3)),
        ]);
        let (a, b) = (reads.encode(16), writes.encode(16));
        assert_eq!(a.len(), b.len());
        assert_eq!(Envelope::decode(a, 16).unwrap(), reads);
        assert_eq!(Envelope::decode(b, 16).unwrap(), writes);
    }

    #[test]
    fn answers_are_the_same_size_whatever_they_hold() {
        let one = Reply {
            token: 4,
            response: Response::Answers(vec![block(1), Bytes::new()]),
        };
        let two = Reply {
            token: 4,
            response: Response::Answers(vec![Bytes::new(), block(7)]),
        };
        let (a, b) = (one.encode(16), two.encode(16));
        assert_eq!(a.len(), b.len());
        match Reply::decode(a, 16).unwrap().response {
            Response::Answers(x) => assert_eq!(x, vec![block(1), Bytes::new()]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_keep_their_class() {
        let e = Reply {
            token: 1,
            response: Response::Failed(OramError::Integrity {
                key: "k".into(),
                reason: "bad tag".into(),
            }),
        };
        match Reply::decode(e.encode(16), 16).unwrap().response {
            Response::Failed(OramError::Integrity { key, reason }) => {
                assert_eq!((key.as_str(), reason.as_str()), ("k", "bad tag"))
            }
            other => panic!("{other:?}"),
        }
        let w = Reply {
            token: 1,
            response: Response::Failed(OramError::Store(StoreError::WrongSize {
                key: "k".into(),
                got: "3 bytes".into(),
                expected: "exactly 4 bytes".into(),
            })),
        };
        match Reply::decode(w.encode(16), 16).unwrap().response {
            Response::Failed(OramError::Store(StoreError::WrongSize { key, .. })) => {
                assert_eq!(key, "k")
            }
            other => panic!("{other:?}"),
        }
        let t = Reply {
            token: 1,
            response: Response::Failed(OramError::Store(StoreError::Unavailable("x".into()))),
        };
        match Reply::decode(t.encode(16), 16).unwrap().response {
            Response::Failed(OramError::Store(s)) => assert!(s.is_transient()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn damaged_messages_are_refused_never_a_panic() {
        let good = Envelope {
            partition: 1,
            request: Request::Stage {
                token: 2,
                round: RoundId {
                    seq: 3,
                    repeat: true,
                },
                attempt: 8,
                ops: vec![Op::Write(4, block(5)), Op::Dummy],
            },
        }
        .encode(16);
        for cut in 0..good.len() {
            assert!(
                Envelope::decode(good.slice(..cut), 16).is_err(),
                "cut {cut}"
            );
        }
        for i in 0..good.len() {
            let mut bad = good.to_vec();
            bad[i] ^= 0xff;
            let _ = Envelope::decode(Bytes::from(bad), 16);
        }
        assert!(
            Envelope::decode(good.clone(), 32).is_err(),
            "another block size"
        );
        let reply = Reply {
            token: 1,
            response: Response::Checked(CheckReport {
                written_blocks: vec![1, 2],
                problems: vec!["x".into()],
                problems_total: 1,
                ..CheckReport::default()
            }),
        }
        .encode(16);
        for cut in 0..reply.len() {
            assert!(Reply::decode(reply.slice(..cut), 16).is_err(), "cut {cut}");
        }
        for i in 0..reply.len() {
            let mut bad = reply.to_vec();
            bad[i] ^= 0xff;
            let _ = Reply::decode(Bytes::from(bad), 16);
        }
    }
}
