//! Ring ORAM's round, step by step: draw leaves, schedule evictions, plan reads
//! (whole buckets and slots), open and check, serve, evict and reshuffle.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use oram_engine::{Op, Result};
use oram_state::{Bucket, StateError, TrustedState};
use oram_tree::{
    check_stored, draw_leaves, evict_stash, serve_ops, Applied, ApplyCx, Draws, OpenCx, PlanCx,
    Requests, RoundRandom, Sealing,
};

use crate::layout::{self, Meta, DUMMY};
use crate::{reads_key, Counters, EvictRead, RingScheme};

/// One ranged read planned for a round.
struct SlotRead {
    node: u64,
    slot: usize,
    /// The block expected in the slot ([`DUMMY`] for a dummy).
    id: u64,
    /// Part of reading a bucket to evict or reshuffle it (not an online read).
    evict: bool,
}

/// A planned Ring ORAM round.
pub struct RingPlan {
    /// Ops in the round.
    k: u64,
    read_leaves: Vec<u64>,
    /// Each named block's new leaf.
    remap: HashMap<u64, u64>,
    /// Blocks the ops name that are stored, with their leaf: each must be found.
    stored: Vec<(u64, u64)>,
    wanted: HashSet<u64>,
    counters: Counters,
    n_evict: u64,
    evict_nodes: BTreeSet<u64>,
    /// Uncached buckets rewritten this round (eviction paths and reshuffles).
    whole: BTreeSet<u64>,
    /// Of those, the buckets reshuffled early.
    reshuffled: BTreeSet<u64>,
    /// Online reads per uncached bucket of the read paths.
    reads_through: BTreeMap<u64, usize>,
    /// Metadata of the buckets involved, with this round's reads marked.
    metas: HashMap<u64, Meta>,
    slot_reads: Vec<SlotRead>,
    /// Buckets fetched with one whole-object GET, in this order.
    fetch_whole: Vec<u64>,
}

impl RingPlan {
    pub(crate) fn requests(&self) -> Requests {
        Requests {
            whole: self.fetch_whole.clone(),
            parts: self.slot_reads.iter().map(|r| (r.node, r.slot)).collect(),
        }
    }
}

/// What a round's open step found.
pub struct RingOpened {
    /// Blocks moving to the stash.
    found: Vec<(u64, Bytes)>,
    /// Blocks staying in their reshuffled bucket.
    keep: BTreeMap<u64, Vec<(u64, Bytes)>>,
    /// Cached buckets after the blocks moving to the stash left them.
    local_changed: BTreeMap<u64, Bucket>,
}

/// Statistics of a round.
pub struct RingNote {
    pub(crate) evictions: u64,
    pub(crate) reshuffles: u64,
    /// Online reads: `(slot, whether it fetched the wanted block)`.
    pub(crate) online_reads: Vec<(usize, bool)>,
}

/// A uniformly random unread dummy slot of `meta` (bucket `node`).
fn draw_dummy(draws: &mut Draws<'_>, meta: &Meta, node: u64) -> Result<usize> {
    let free = meta.unread_dummies();
    if free.is_empty() {
        return Err(StateError::Corrupt(format!("bucket {node} has no unread dummy left")).into());
    }
    Ok(free[draws.below(free.len() as u64)? as usize])
}

impl RingScheme {
    /// Plans a round: steps 1–3.
    pub(crate) fn plan_round(
        &self,
        cx: &mut PlanCx<'_, '_>,
        blocks: &[Option<u64>],
    ) -> Result<RingPlan> {
        let mut plan = self.draw_leaves(cx, blocks)?;
        self.schedule_evictions(cx.state, &mut plan)?;
        self.plan_reads(cx, blocks, &mut plan)?;
        Ok(plan)
    }

    /// Step 1: per op, two leaf draws (the leaf to read — the block's, or a fresh
    /// one — and the block's new leaf).
    fn draw_leaves(&self, cx: &mut PlanCx<'_, '_>, blocks: &[Option<u64>]) -> Result<RingPlan> {
        let d = draw_leaves(cx, blocks, self.lay.geo.leaves)?;
        Ok(RingPlan {
            k: blocks.len() as u64,
            read_leaves: d.read_leaves,
            remap: d.remap,
            stored: d.stored,
            wanted: blocks.iter().flatten().copied().collect(),
            counters: Counters::default(),
            n_evict: 0,
            evict_nodes: BTreeSet::new(),
            whole: BTreeSet::new(),
            reshuffled: BTreeSet::new(),
            reads_through: BTreeMap::new(),
            metas: HashMap::new(),
            slot_reads: Vec::new(),
            fetch_whole: Vec::new(),
        })
    }

    /// Step 2: the round's EvictPaths, on the public schedule.
    fn schedule_evictions(&self, state: &dyn TrustedState, plan: &mut RingPlan) -> Result<()> {
        let counters = Counters::load(state)?;
        let a = self.lay.params.a as u64;
        plan.n_evict = (counters.accesses + plan.k) / a - counters.accesses / a;
        let geo = &self.lay.geo;
        plan.evict_nodes = (0..plan.n_evict)
            .flat_map(|j| geo.path(self.lay.evict_leaf(counters.evictions + j)))
            .collect();
        plan.counters = counters;
        Ok(())
    }

    /// Step 3: which buckets are fetched whole, which slots are read.
    fn plan_reads(
        &self,
        cx: &mut PlanCx<'_, '_>,
        blocks: &[Option<u64>],
        plan: &mut RingPlan,
    ) -> Result<()> {
        let geo = &self.lay.geo;
        let s = self.lay.params.s;
        for &leaf in &plan.read_leaves {
            for n in geo.path(leaf).filter(|&n| !self.cached(n)) {
                *plan.reads_through.entry(n).or_default() += 1;
            }
        }
        for &n in plan.reads_through.keys().chain(plan.evict_nodes.iter()) {
            if !self.cached(n) && !plan.metas.contains_key(&n) {
                plan.metas.insert(n, self.load_meta(cx.state, n)?);
            }
        }
        plan.whole = plan
            .evict_nodes
            .iter()
            .copied()
            .filter(|&n| !self.cached(n))
            .collect();
        for (&n, &r) in &plan.reads_through {
            if !plan.whole.contains(&n) && plan.metas[&n].count as usize + r >= s {
                plan.whole.insert(n);
                plan.reshuffled.insert(n);
            }
        }
        for (block, &leaf) in blocks.iter().zip(&plan.read_leaves) {
            for n in geo
                .path(leaf)
                .filter(|n| !self.cached(*n) && !plan.whole.contains(n))
            {
                let meta = plan.metas.get_mut(&n).expect("loaded");
                let (slot, id) = match block.and_then(|b| meta.find(b).map(|i| (i, b))) {
                    Some(found) => found,
                    None => (draw_dummy(cx.draws, meta, n)?, DUMMY),
                };
                meta.mark_read(slot);
                plan.slot_reads.push(SlotRead {
                    node: n,
                    slot,
                    id,
                    evict: false,
                });
            }
        }
        match self.evict_read {
            EvictRead::Whole => plan.fetch_whole = plan.whole.iter().copied().collect(),
            EvictRead::Slots => self.plan_evict_slot_reads(cx, plan)?,
        }
        Ok(())
    }

    /// Step 3 with [`EvictRead::Slots`]: a bucket to rewrite is read as Z slots —
    /// every unread real block and unread dummies to make up Z. At least Z + 1
    /// slots are unread (fewer than S reads so far), so the dummies suffice.
    fn plan_evict_slot_reads(&self, cx: &mut PlanCx<'_, '_>, plan: &mut RingPlan) -> Result<()> {
        let z = self.lay.params.z;
        for &n in &plan.whole {
            let meta = plan.metas.get_mut(&n).expect("loaded");
            let real = meta.valid_real();
            for _ in real.len()..z {
                let d = draw_dummy(cx.draws, meta, n)?;
                meta.mark_read(d);
                plan.slot_reads.push(SlotRead {
                    node: n,
                    slot: d,
                    id: DUMMY,
                    evict: true,
                });
            }
            for (i, b) in real {
                meta.mark_read(i);
                plan.slot_reads.push(SlotRead {
                    node: n,
                    slot: i,
                    id: b,
                    evict: true,
                });
            }
        }
        // Requests in slot order per bucket, not real blocks last.
        plan.slot_reads.sort_by_key(|r| (r.evict, r.node, r.slot));
        Ok(())
    }

    /// Step 4: opens and checks every whole bucket and every slot, and collects the
    /// blocks: to the stash, or staying in a reshuffled bucket. Changes nothing.
    pub(crate) fn open_round(&self, cx: OpenCx<'_>, plan: &RingPlan) -> Result<RingOpened> {
        let (s, state) = (cx.sealing, cx.state);
        let mut whole_plain: BTreeMap<u64, Bytes> = BTreeMap::new();
        for (&n, obj) in plan.fetch_whole.iter().zip(cx.whole) {
            let nv = state.node(n);
            let plain = match cx.in_flight.get(&n) {
                Some(p) => p.clone(),
                None => self.open_bucket(s, n, &nv, obj)?,
            };
            if nv.version > 0 {
                self.verify_bucket(s, n, &nv, &self.load_meta(state, n)?, &plain)?;
            }
            whole_plain.insert(n, plain);
        }
        let (mut found, evict_found) = self.open_slots(s, state, plan, cx.parts, cx.in_flight)?;
        // Whole buckets: every unread real block; blocks of a reshuffled bucket stay
        // there unless an op of this round wants them.
        let mut seen: BTreeSet<u64> = found.iter().map(|(b, _)| *b).collect();
        let mut keep: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
        let mut place = |n: u64, b: u64, data: Bytes, found: &mut Vec<(u64, Bytes)>| {
            if plan.reshuffled.contains(&n) && !plan.wanted.contains(&b) {
                keep.entry(n).or_default().push((b, data));
            } else {
                found.push((b, data));
            }
        };
        for (n, b, data) in evict_found {
            self.check_block(s, state, n, b, &mut seen)?;
            place(n, b, data, &mut found);
        }
        for (&n, plain) in &whole_plain {
            let nv = state.node(n);
            let meta = self.load_meta(state, n)?;
            for (i, b) in meta.valid_real() {
                let (_, data) = layout::decode_slot(&self.lay, &self.lay.slot_of(plain, i))
                    .map_err(|e| s.integrity(n, &nv, e))?;
                self.check_block(s, state, n, b, &mut seen)?;
                place(n, b, data, &mut found);
            }
        }
        // Cached buckets: wanted blocks on the read paths, everything on eviction paths.
        let geo = &self.lay.geo;
        let cached_touched: BTreeSet<u64> = plan
            .read_leaves
            .iter()
            .flat_map(|&l| geo.path(l))
            .chain(plan.evict_nodes.iter().copied())
            .filter(|&n| self.cached(n))
            .collect();
        let mut local_changed = BTreeMap::new();
        for n in cached_touched {
            let bucket = state.local_bucket(n).cloned().unwrap_or_default();
            let (take, stay): (Bucket, Bucket) = bucket
                .into_iter()
                .partition(|(b, _)| plan.evict_nodes.contains(&n) || plan.wanted.contains(b));
            if !take.is_empty() {
                seen.extend(take.iter().map(|(b, _)| *b));
                found.extend(take);
                local_changed.insert(n, stay);
            }
        }
        // A stored block must be where the state says: never read as zeros.
        check_stored(s, geo, state, &plan.stored, &seen)?;
        Ok(RingOpened {
            found,
            keep,
            local_changed,
        })
    }

    /// Step 4 for the ranged reads: every slot opens at its version and holds the
    /// block the metadata names. Returns the online finds and, apart, the blocks
    /// read to evict or reshuffle (`node`, block, data).
    #[allow(clippy::type_complexity)]
    fn open_slots(
        &self,
        s: &Sealing,
        state: &dyn TrustedState,
        plan: &RingPlan,
        parts: Vec<Option<Bytes>>,
        in_flight: &HashMap<u64, Bytes>,
    ) -> Result<(Vec<(u64, Bytes)>, Vec<(u64, u64, Bytes)>)> {
        let lay = &self.lay;
        let mut found = Vec::new();
        let mut evict_found = Vec::new();
        for (r, obj) in plan.slot_reads.iter().zip(parts) {
            let nv = state.node(r.node);
            let slot_plain = match in_flight.get(&r.node) {
                Some(p) => lay.slot_of(p, r.slot),
                None => match s.expect_object(r.node, &nv, obj)? {
                    None => continue,
                    Some(sealed) => {
                        s.open(r.node, lay.seal_position(r.node, 1 + r.slot), &nv, &sealed)?
                    }
                },
            };
            let (id, data) =
                layout::decode_slot(lay, &slot_plain).map_err(|e| s.integrity(r.node, &nv, e))?;
            if id != r.id {
                return Err(s.integrity(
                    r.node,
                    &nv,
                    format!("slot {} does not hold the block the metadata names", r.slot),
                ));
            }
            if id != DUMMY {
                if r.evict {
                    evict_found.push((r.node, id, data));
                } else {
                    found.push((id, data));
                }
            }
        }
        Ok((found, evict_found))
    }

    /// Checks that a block found in bucket `node` is in range, on its path and
    /// stored nowhere else seen so far (nor in the stash).
    fn check_block(
        &self,
        s: &Sealing,
        state: &dyn TrustedState,
        node: u64,
        b: u64,
        seen: &mut BTreeSet<u64>,
    ) -> Result<()> {
        let nv = state.node(node);
        if !seen.insert(b) || state.stash_get(b).is_some() {
            return Err(s.integrity(node, &nv, format!("block {b} stored twice")));
        }
        if b >= self.id_limit {
            return Err(s.integrity(node, &nv, format!("block {b} beyond the id limit")));
        }
        match state.position(b) {
            Some(leaf) if self.lay.geo.on_path(node, leaf) => Ok(()),
            _ => Err(s.integrity(node, &nv, format!("block {b} off its path"))),
        }
    }

    /// Steps 5 and 6.
    pub(crate) fn apply_round(
        &self,
        cx: ApplyCx<'_>,
        plan: RingPlan,
        opened: RingOpened,
        ops: Vec<Op>,
    ) -> Result<Applied<crate::RingNote>> {
        let ApplyCx { state, random } = cx;
        let answers = self.serve(
            state,
            &random,
            &plan,
            opened.found,
            opened.local_changed,
            ops,
        );
        let writes = self.evict_and_reshuffle(state, &random, &plan, opened.keep)?;
        let online_reads = plan
            .slot_reads
            .iter()
            .filter(|r| !r.evict)
            .map(|r| (r.slot, r.id != DUMMY))
            .collect();
        Ok(Applied {
            answers,
            writes,
            note: RingNote {
                evictions: plan.n_evict,
                reshuffles: plan.reshuffled.len() as u64,
                online_reads,
            },
        })
    }

    /// Step 5: blocks to the stash, the ops in order, positions remapped (an
    /// inserted block's leaf from the round's randomness).
    fn serve(
        &self,
        state: &mut dyn TrustedState,
        random: &RoundRandom,
        plan: &RingPlan,
        found: Vec<(u64, Bytes)>,
        local_changed: BTreeMap<u64, Bucket>,
        ops: Vec<Op>,
    ) -> Vec<Bytes> {
        for (n, b) in local_changed {
            state.set_local_bucket(n, b);
        }
        let leaves = self.lay.geo.leaves;
        let mut rng = random.rest();
        serve_ops(
            state,
            found,
            ops,
            &plan.remap,
            self.lay.block_size,
            &mut || rand::Rng::gen_range(&mut rng, 0..leaves),
        )
    }

    /// Step 6: EvictPath into the eviction paths, reshuffle the buckets read S
    /// times; every rewritten bucket gets a fresh random permutation, from the
    /// round's randomness keyed by the bucket's node ([`RoundRandom::node`]): the
    /// same on every attempt of the round, so a round that read ahead of this
    /// one reads the same slots when both are repeated. Returns the backend
    /// buckets to write.
    fn evict_and_reshuffle(
        &self,
        state: &mut dyn TrustedState,
        random: &RoundRandom,
        plan: &RingPlan,
        mut keep: BTreeMap<u64, Vec<(u64, Bytes)>>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let evicted = evict_stash(&self.lay.geo, state, &plan.evict_nodes, |n| self.cached(n))?;
        let mut writes = Vec::with_capacity(plan.whole.len());
        let mut rewrite = |state: &mut dyn TrustedState, n: u64, blocks: Vec<(u64, Bytes)>| {
            let with_leaves: Vec<(u64, u64, Bytes)> = blocks
                .into_iter()
                .map(|(b, d)| (b, state.position(b).unwrap_or(0), d))
                .collect();
            let (meta, plain) =
                layout::shuffle_bucket(&self.lay, &with_leaves, &mut random.node(n));
            self.store_new_meta(state, n, &meta);
            writes.push((n, plain));
        };
        for (n, bucket) in evicted {
            rewrite(state, n, bucket);
        }
        for &n in &plan.reshuffled {
            rewrite(state, n, keep.remove(&n).unwrap_or_default());
        }
        // Buckets only read: their read state.
        for (n, meta) in &plan.metas {
            if !plan.whole.contains(n) && plan.reads_through.contains_key(n) {
                state.set_meta(&reads_key(*n), meta.encode_reads());
            }
        }
        let mut counters = plan.counters;
        counters.accesses += plan.k;
        counters.evictions += plan.n_evict;
        counters.store(state);
        Ok(writes)
    }
}
