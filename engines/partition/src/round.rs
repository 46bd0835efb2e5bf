//! One round: which sub-ORAM access each op makes, the evictions that ride on
//! them, and the answers once the partitions have answered. Synchronous and
//! free of I/O; the engine runs the partitions' accesses and the commit.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::{draw, PartitionMap, Where};
use bytes::{Buf, BufMut, Bytes};
use oram_engine::{Op, OramError, Result};
use oram_state::StateError;
use rand::Rng;
use rand_chacha::ChaCha20Rng;

/// Where an op's block was when the round began.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Stored nowhere: reads as zeros.
    Nowhere,
    /// In the eviction cache.
    Cache,
    /// Taken from a partition by this round: the answer at `idx` of its ops.
    Taken { partition: u32, idx: usize },
}

/// A planned round.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The ops of each partition's sub-ORAM access: its accesses (a take or a
    /// dummy per op, a dummy per background eviction) and the inserts of the
    /// evictions riding on them.
    pub(crate) subs: BTreeMap<u32, Vec<Op>>,
    /// For each block the ops name, where it was when the round began.
    sources: HashMap<u64, Source>,
    /// For each block the ops name, the partition it is assigned to next.
    assign: HashMap<u64, u32>,
    /// Blocks written from the eviction cache into a partition.
    pub(crate) evicted: u64,
    /// Evictions that found nothing to write (a dummy insert: nothing).
    pub(crate) empty_evictions: u64,
    /// Evictions that left the block waiting for their partition in the cache
    /// because the partition holds as many blocks as it may (they insert
    /// nothing, which looks the same).
    pub(crate) deferred: u64,
    /// Background evictions (a dummy access of their own).
    pub(crate) background: u64,
}

impl Plan {
    /// Sub-ORAM accesses the storage server sees (inserts are none).
    pub(crate) fn accesses(&self) -> u64 {
        self.subs
            .values()
            .map(|ops| ops.iter().filter(|o| o.accesses()).count() as u64)
            .sum()
    }
}

/// Plans a round of `ops` on `map` (which it changes: the evicted blocks are
/// recorded as stored in their partitions; [`PartitionMap::rollback`] undoes it).
///
/// For each op, one access of one partition: the partition of its block if the
/// block is stored there (a take) or waits in the eviction cache for it (a dummy:
/// the block's assignment, fresh since its last access, is revealed only now), a
/// uniformly random partition otherwise (a dummy). Riding on that access, one
/// block waiting for that partition is inserted (the piggy-backed eviction);
/// then, with probability `background` (ν − 1), a dummy access of a uniformly
/// random partition carries one more. Four draws are made for every op whatever
/// the op (a partition for a dummy, the background eviction's coin and
/// partition, the block's next partition), so the draws — and with them which
/// partitions dummies and background evictions access — do not depend on the
/// blocks.
///
/// An insert (a block not held, or named by an access of the round too) is no
/// access: it joins the eviction cache. Inserting a block held and named by no
/// access is refused before anything changes.
///
/// With a `limit` (the most blocks a partition may hold), an eviction into a
/// partition that would then hold more — counting the blocks the round takes
/// from it before — inserts nothing: the block keeps waiting in the cache for
/// a later eviction, after a take has made room. An eviction that inserts
/// nothing is what an eviction finding no block waiting does, and looks the
/// same to the storage server, so the partition's load never shows.
pub(crate) fn plan(
    map: &mut PartitionMap,
    rng: &mut ChaCha20Rng,
    ops: &[Op],
    background: f64,
    limit: Option<u64>,
) -> Result<Plan> {
    let partitions = map.partitions();
    // Blocks of this round stay out of the evictions: their data is the round's.
    let named: HashSet<u64> = ops.iter().filter_map(Op::block).collect();
    let accessed: HashSet<u64> = ops
        .iter()
        .filter(|o| o.accesses())
        .filter_map(Op::block)
        .collect();
    for op in ops {
        if let Op::Insert(b, _) = op {
            if map.locate(*b) != Where::Nowhere && !accessed.contains(b) {
                return Err(OramError::Unsupported(
                    "insert of a block the engine holds (write it instead)",
                ));
            }
        }
    }
    let mut plan = Plan::default();
    let mut room = Room::new(limit);
    for op in ops {
        let fresh = draw(rng, partitions);
        let extra = rng.gen_bool(background);
        let extra_partition = draw(rng, partitions);
        let next = draw(rng, partitions);
        if let Some(b) = op.block() {
            plan.assign.entry(b).or_insert(next);
        }
        if let Op::Insert(b, _) = op {
            // No access of its own; held blocks get their source from their access.
            if map.locate(*b) == Where::Nowhere {
                plan.sources.entry(*b).or_insert(Source::Nowhere);
            }
            continue;
        }
        let (partition, access) = match op.block() {
            Some(b) if !plan.sources.contains_key(&b) => match map.locate(b) {
                Where::Stored(p) => {
                    let idx = plan.subs.get(&p).map_or(0, Vec::len);
                    plan.sources.insert(b, Source::Taken { partition: p, idx });
                    room.take(p);
                    (p, Op::Take(b))
                }
                Where::Cached(p) => {
                    plan.sources.insert(b, Source::Cache);
                    (p, Op::Dummy)
                }
                Where::Nowhere => {
                    plan.sources.insert(b, Source::Nowhere);
                    (fresh, Op::Dummy)
                }
            },
            // A dummy, or a block an earlier op of the round named.
            _ => (fresh, Op::Dummy),
        };
        plan.subs.entry(partition).or_default().push(access);
        evict_into(map, &mut plan, &room, partition, &named);
        if extra {
            plan.background += 1;
            plan.subs
                .entry(extra_partition)
                .or_default()
                .push(Op::Dummy);
            evict_into(map, &mut plan, &room, extra_partition, &named);
        }
    }
    Ok(plan)
}

/// The room left in partitions whose load is limited, as a round goes: a
/// partition's load is the blocks the map stores in it (evictions planned so
/// far included) less those the round takes from it before.
struct Room {
    limit: Option<u64>,
    taken: HashMap<u32, u64>,
}

impl Room {
    fn new(limit: Option<u64>) -> Self {
        Self {
            limit,
            taken: HashMap::new(),
        }
    }

    /// The round takes a block from `p` (before what follows in `p`).
    fn take(&mut self, p: u32) {
        *self.taken.entry(p).or_default() += 1;
    }

    /// Whether one more block fits in `p`.
    fn fits(&self, map: &PartitionMap, p: u32) -> bool {
        self.limit.is_none_or(|limit| {
            let load = map
                .stored(p)
                .saturating_sub(self.taken.get(&p).copied().unwrap_or(0));
            load < limit
        })
    }
}

/// One eviction into `partition`: a waiting block inserted, or nothing (none
/// waits, or the partition is full).
fn evict_into(
    map: &mut PartitionMap,
    plan: &mut Plan,
    room: &Room,
    partition: u32,
    named: &HashSet<u64>,
) {
    if !room.fits(map, partition) {
        if map.waits(partition, named) {
            plan.deferred += 1;
        } else {
            plan.empty_evictions += 1;
        }
        return;
    }
    match map.evict(partition, named) {
        Some((b, data)) => {
            plan.subs
                .entry(partition)
                .or_default()
                .push(Op::Insert(b, data));
            plan.evicted += 1;
        }
        None => plan.empty_evictions += 1,
    }
}

/// Serves `ops` once every partition answered (`answers`: each partition's, in
/// the order of its ops), and moves every block the round named: one still
/// stored goes to the eviction cache, assigned to the fresh uniformly random
/// partition drawn for it; one taken is forgotten. Returns one answer per op.
pub(crate) fn finish(
    map: &mut PartitionMap,
    plan: &Plan,
    ops: Vec<Op>,
    answers: &BTreeMap<u32, Vec<Bytes>>,
    block_size: usize,
) -> Vec<Bytes> {
    let zeros = Bytes::from(vec![0u8; block_size]);
    // Each named block's data as the round goes (None: stored nowhere).
    let mut now: BTreeMap<u64, Option<Bytes>> = BTreeMap::new();
    for (&b, source) in &plan.sources {
        let data = match *source {
            Source::Nowhere => None,
            Source::Cache => map.cached(b).cloned(),
            Source::Taken { partition, idx } => {
                answers.get(&partition).and_then(|a| a.get(idx)).cloned()
            }
        };
        now.insert(b, data);
    }
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        out.push(match op {
            Op::Read(b) => now
                .get(&b)
                .cloned()
                .flatten()
                .unwrap_or_else(|| zeros.clone()),
            Op::Write(b, d) | Op::Insert(b, d) => {
                now.insert(b, Some(d));
                Bytes::new()
            }
            Op::Take(b) => {
                let d = now.insert(b, None).flatten();
                d.unwrap_or_else(|| zeros.clone())
            }
            Op::Dummy => Bytes::new(),
        });
    }
    for (b, data) in now {
        match data {
            Some(d) => map.cache(b, d, plan.assign[&b]),
            None => map.forget(b),
        }
    }
    out
}

/// What a round's intent record keeps: each partition's sub-ORAM ops (inserts
/// by block; their data waits in the eviction cache) and every named block's
/// next partition — enough to repeat the round's accesses exactly, as reads,
/// after a failure or a crash interrupted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Intent {
    subs: Vec<(u32, Vec<SubOp>)>,
    assign: Vec<(u64, u32)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SubOp {
    Take(u64),
    Dummy,
    Insert(u64),
}

impl Plan {
    /// The round's intent record.
    pub(crate) fn intent(&self) -> Intent {
        let subs = self
            .subs
            .iter()
            .map(|(&p, ops)| {
                let ops = ops
                    .iter()
                    .map(|o| match o {
                        Op::Take(b) => SubOp::Take(*b),
                        Op::Insert(b, _) => SubOp::Insert(*b),
                        _ => SubOp::Dummy,
                    })
                    .collect();
                (p, ops)
            })
            .collect();
        let mut assign: Vec<(u64, u32)> = self.assign.iter().map(|(&b, &p)| (b, p)).collect();
        assign.sort_unstable();
        Intent { subs, assign }
    }

    /// The blocks the round names, as reads (for [`finish`] of a repeated round).
    pub(crate) fn reads(&self) -> Vec<Op> {
        let mut blocks: Vec<u64> = self.assign.keys().copied().collect();
        blocks.sort_unstable();
        blocks.into_iter().map(Op::Read).collect()
    }
}

impl Intent {
    /// Encodes the record.
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        out.put_u32(self.subs.len() as u32);
        for (p, ops) in &self.subs {
            out.put_u32(*p);
            out.put_u32(ops.len() as u32);
            for op in ops {
                let (tag, b) = match op {
                    SubOp::Take(b) => (1u8, *b),
                    SubOp::Dummy => (2, 0),
                    SubOp::Insert(b) => (3, *b),
                };
                out.put_u8(tag);
                out.put_u64(b);
            }
        }
        out.put_u32(self.assign.len() as u32);
        for (b, p) in &self.assign {
            out.put_u64(*b);
            out.put_u32(*p);
        }
        Bytes::from(out)
    }

    /// Decodes a record [`Intent::encode`] wrote.
    pub(crate) fn decode(mut buf: &[u8]) -> Result<Self> {
        let bad = || {
            OramError::State(StateError::Corrupt(
                "a partition framework's intent record".into(),
            ))
        };
        let need = |buf: &[u8], n: usize| {
            if buf.remaining() < n {
                Err(bad())
            } else {
                Ok(())
            }
        };
        need(buf, 4)?;
        let n = buf.get_u32() as usize;
        let mut subs = Vec::new();
        for _ in 0..n {
            need(buf, 8)?;
            let p = buf.get_u32();
            let k = buf.get_u32() as usize;
            need(buf, k.saturating_mul(9))?;
            let ops = (0..k)
                .map(|_| match (buf.get_u8(), buf.get_u64()) {
                    (1, b) => Ok(SubOp::Take(b)),
                    (2, _) => Ok(SubOp::Dummy),
                    (3, b) => Ok(SubOp::Insert(b)),
                    _ => Err(bad()),
                })
                .collect::<Result<Vec<_>>>()?;
            subs.push((p, ops));
        }
        need(buf, 4)?;
        let k = buf.get_u32() as usize;
        need(buf, k.saturating_mul(12))?;
        let assign = (0..k).map(|_| (buf.get_u64(), buf.get_u32())).collect();
        if buf.has_remaining() {
            return Err(bad());
        }
        Ok(Self { subs, assign })
    }

    /// The plan that repeats the recorded round on `map` as it was when the round
    /// began (its evictions redone; the blocks' data from the cache). A record
    /// that does not fit the map is a corrupt state. An insert into a partition
    /// at its `limit` is left out, as [`plan`] leaves it out: a round recorded
    /// without a limit (by an earlier release) that overflowed a partition
    /// then completes, the block waiting in the cache (an eviction with an
    /// insert and one without look the same).
    ///
    /// `lenient`: the round was planned after another that is repeated (as
    /// reads) before it, so a block that round created is stored nowhere now;
    /// an insert of it becomes an empty eviction (which looks the same).
    pub(crate) fn replan(
        &self,
        map: &mut PartitionMap,
        limit: Option<u64>,
        lenient: bool,
    ) -> Result<Plan> {
        let corrupt = |what: String| {
            OramError::State(StateError::Corrupt(format!(
                "partition framework intent: {what}"
            )))
        };
        let mut plan = Plan::default();
        let mut room = Room::new(limit);
        for (p, ops) in &self.subs {
            if *p >= map.partitions() {
                return Err(corrupt(format!("partition {p}")));
            }
            let mut out = Vec::with_capacity(ops.len());
            for op in ops {
                match *op {
                    SubOp::Take(b) => {
                        let idx = out.len();
                        plan.sources.insert(b, Source::Taken { partition: *p, idx });
                        room.take(*p);
                        out.push(Op::Take(b));
                    }
                    SubOp::Dummy => out.push(Op::Dummy),
                    SubOp::Insert(b) if lenient && map.locate(b) == Where::Nowhere => {
                        plan.empty_evictions += 1;
                    }
                    SubOp::Insert(b) if !room.fits(map, *p) => {
                        if map.locate(b) != Where::Cached(*p) {
                            return Err(corrupt(format!("block {b} is not cached for {p}")));
                        }
                        plan.deferred += 1;
                    }
                    SubOp::Insert(b) => {
                        let data = map
                            .evict_block(b, *p)
                            .ok_or_else(|| corrupt(format!("block {b} is not cached for {p}")))?;
                        plan.evicted += 1;
                        out.push(Op::Insert(b, data));
                    }
                }
            }
            plan.subs.insert(*p, out);
        }
        for &(b, p) in &self.assign {
            if p >= map.partitions() {
                return Err(corrupt(format!("partition {p}")));
            }
            plan.assign.insert(b, p);
            let cached = matches!(map.locate(b), Where::Cached(_));
            plan.sources.entry(b).or_insert(if cached {
                Source::Cache
            } else {
                Source::Nowhere
            });
        }
        Ok(plan)
    }
}

/// The error of a failed repeat of interrupted round `seq`, naming what it
/// means when it is not a backend failure (a transient one is tried again by
/// the next request): a damaged backend object or trusted state that makes the
/// repeat fail the same way every time, and with it every request, since no
/// new round is planned before the interrupted one is finished — dropping it
/// would let the next round's requests differ from what the failed attempt
/// showed for the same blocks.
pub(crate) fn stuck(seq: u64, e: OramError) -> OramError {
    let hint = |what: String| {
        format!(
            "{what} (repeating the interrupted round {seq}, which every request waits for: \
             see \"A round that cannot be repeated\" in docs/operating.md; `oram-proxy fsck` \
             lists what is damaged)"
        )
    };
    match e {
        OramError::Integrity { key, reason } => OramError::Integrity {
            key,
            reason: hint(reason),
        },
        OramError::State(oram_state::StateError::Corrupt(m)) => {
            OramError::State(oram_state::StateError::Corrupt(hint(m)))
        }
        OramError::Config(m) => OramError::Config(hint(m)),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intent_record_decodes_to_itself_and_refuses_garbage() {
        let i = Intent {
            subs: vec![
                (3, vec![SubOp::Take(7), SubOp::Insert(9)]),
                (5, vec![SubOp::Dummy]),
            ],
            assign: vec![(7, 1), (9, 4)],
        };
        assert_eq!(Intent::decode(&i.encode()).unwrap(), i);
        let bytes = i.encode();
        assert!(Intent::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Intent::decode(&[0xff; 9]).is_err());
    }
}
