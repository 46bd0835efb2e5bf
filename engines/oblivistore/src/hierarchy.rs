//! One hierarchical partition, as ObliviStore uses it (the partition ORAM of
//! "Towards Practical Oblivious RAM", summed up in §2.2 of "Multi-Cloud Oblivious
//! Storage"; see the crate doc): levels `0..=top`, level `ℓ` filled or empty, a
//! filled level one backend object `<prefix>/<ℓ>/<slot>` of `2^(ℓ+1)` sealed slots.
//!
//! It serves its framework's sub-accesses only: a batch is a sequence of
//! accesses (`Take` or `Dummy`), each followed by at most one `Insert`. Each
//! access is a **partition read** — one slot of every filled level: the block's
//! own slot at its level, the level's next unread dummy elsewhere — and then a
//! **partition write** (the eviction into this partition riding on the access):
//! the insert's block, or nothing, with the unread real blocks of the levels the
//! eviction counter empties, shuffled under a fresh permutation into the level
//! it fills, which is written whole, under a fresh version, to a slot that is
//! neither live nor the last checkpoint's ([`SlotPolicy::BeforeCommit`]). A
//! shuffle opens **exactly `2^ℓ` slots of each level it empties**: every unread
//! real block and the next unread dummies — never a count that depends on how
//! many real blocks the level still holds.
//!
//! **Reads.** A level the eviction leaves alone gives the partition read one
//! slot, by a ranged GET. A level the eviction empties is read by **one GET of
//! its whole object** (`2^(ℓ+1)` slots), which serves both the partition read's
//! slot and the shuffle's: one request instead of `2^ℓ + 1`, for twice the
//! shuffle's bytes. Over the eviction counter every level is emptied as often
//! as it is built, so per access this makes the GETs the number of filled
//! levels (a 4 KiB volume of 64 MiB: 13.8 requests per op became 7.5 by the
//! model, for 1.2× the bytes; `benches/cost/RESULTS.md`). A request costs an
//! object store more than its bytes (at S3's list prices a GET costs as much
//! as about 4.7 KB of internet egress, and S3 serves about 5,500 a second per
//! prefix).
//!
//! **What the storage server observes per access:** one ranged GET of one slot
//! of each filled level the eviction leaves alone and one GET of each level it
//! empties (which levels are filled, and which the eviction empties, are a
//! function of the number of evictions into the partition so far), all at
//! once, then one PUT of the level built (its size a function of the same
//! counter). The offsets read in a level are distinct, and under the level's
//! uniformly random permutation they are uniformly random among its unread slots
//! whichever block the access is for; a level read whole shows no offset. A
//! round repeated after a failure reads the same slots (dummies are read in an
//! order fixed at the shuffle).
//!
//! The trusted-state changes are staged for the framework's one commit. A level
//! built by an access that a later access of the same batch may read lands
//! before that access; the batch's last level is handed to the framework to land
//! before the commit ([`StagedAccess::landing`]), so a round of reads is answered
//! once read — within a landing budget taken without waiting; past it the level
//! lands before the access returns.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey};
use oram_engine::{
    detached, CheckReport, EngineStats, Op, Oram, OramError, Quiesced, Result, StagedAccess, Stat,
    StatKind, StepClock,
};

use crate::budget::SlotBudget;
use crate::steps::{ACCESS_STEPS, STEP_BUFFER, STEP_FETCH, STEP_SEAL, STEP_WRITE};
use oram_seal::{ObjectIdentity, Sealer};
use oram_state::{NodeVersion, SlotPolicy, StateError, TrustedState, SLOT_LIMIT};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::levels::{
    check_batch, counter_key, eviction_target, join, layout_key, permutation_rng, seal_level,
    slot_identity, split, Geometry, Layout, ShuffleRead, DUMMY, SECRET_KEY, SLOT_HEADER,
};

/// How one hierarchical partition is built.
#[derive(Clone, Debug)]
pub struct HierarchyConfig {
    /// The levels the partition was created with (a growth adds levels on
    /// top: `crate::grow`).
    pub geometry: Geometry,
    /// Block ids are `0..id_limit`.
    pub id_limit: u64,
    /// Backend key prefix of the partition (`<volume>/o/<p>`).
    pub prefix: String,
    /// Seed of the random permutations; `None` seeds from the OS.
    pub rng_seed: Option<[u8; 32]>,
    /// How an eviction reads the levels it empties.
    pub shuffle_read: ShuffleRead,
}

/// One hierarchical partition (see the module documentation).
#[derive(Clone)]
pub struct Hierarchy {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) cfg: HierarchyConfig,
    /// The top level in effect (the configured one, or a growth's).
    pub(crate) top: AtomicU32,
    pub(crate) store: Arc<dyn BlockStore>,
    pub(crate) sealer: Arc<Sealer>,
    space: u32,
    /// The shuffle buffer, in slots, shared by every partition of the engine:
    /// the levels being read and built.
    pub(crate) shuffle: Arc<SlotBudget>,
    /// As much again for levels built whose PUT waits for their round's commit
    /// (taken without waiting).
    pub(crate) landing: Arc<SlotBudget>,
    /// The trusted state and the permutations' generator; held for a whole
    /// staged access, until the framework's commit is settled.
    pub(crate) core: Arc<tokio::sync::Mutex<Core>>,
    /// Counters (read by `stats`).
    stats: Mutex<Counters>,
    /// Wall time per step of the accesses ([`ACCESS_STEPS`]).
    steps: StepClock,
}

pub(crate) struct Core {
    pub(crate) state: Box<dyn TrustedState>,
    rng: ChaCha20Rng,
    /// For each level written by the access being staged, its version as last
    /// committed: a second write of the level in the same access spares the
    /// same slots as the first.
    committed: HashMap<u32, NodeVersion>,
}

#[derive(Clone, Default)]
struct Counters {
    accesses: u64,
    shuffles: u64,
    top_shuffles: u64,
    slots_read: u64,
    slots_written: u64,
}

/// A slot to read and what it must hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotRead {
    pub(crate) level: u32,
    pub(crate) offset: u32,
    /// The block it holds, or [`DUMMY`].
    pub(crate) holds: u64,
}

/// The PUT of a level built, still to land.
type Land = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hierarchy {
    /// A partition over `store`, with its trusted state in `state` (as last
    /// committed), sharing the shuffle buffer `shuffle` and the budget of
    /// levels waiting for their commit `landing` (permits in slots).
    pub fn new(
        cfg: HierarchyConfig,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
        shuffle: Arc<SlotBudget>,
        landing: Arc<SlotBudget>,
    ) -> Result<Self> {
        if cfg.geometry.top > 30 || cfg.geometry.block_size == 0 {
            return Err(OramError::Config(
                "a partition's top level must be at most 30, blocks non-empty".into(),
            ));
        }
        ObjKey::new(format!("{}/0/0", cfg.prefix))
            .map_err(|e| OramError::Config(format!("prefix: {e}")))?;
        let rng = match cfg.rng_seed {
            Some(seed) => ChaCha20Rng::from_seed(seed),
            None => ChaCha20Rng::from_entropy(),
        };
        let space = state.space().0;
        let top = crate::grow::open_top(state.as_ref(), cfg.geometry.top)?;
        shuffle.for_top(top);
        landing.for_top(top);
        let me = Self {
            inner: Arc::new(Inner {
                cfg,
                top: AtomicU32::new(top),
                store,
                sealer,
                space,
                shuffle,
                landing,
                core: Arc::new(tokio::sync::Mutex::new(Core {
                    state,
                    rng,
                    committed: HashMap::new(),
                })),
                stats: Mutex::new(Counters::default()),
                steps: StepClock::new(ACCESS_STEPS),
            }),
        };
        Ok(me)
    }
}

impl Inner {
    /// An access staged, holding the partition until it commits or is
    /// dropped (see [`Oram::access_staged`]; run detached).
    async fn stage(self: Arc<Self>, ops: Vec<Op>) -> Result<StagedAccess> {
        let mut g = self.core.clone().lock_owned().await;
        check_batch(
            g.state.as_ref(),
            &ops,
            self.cfg.id_limit,
            self.geo().block_size,
        )?;
        if ops.iter().any(Op::accesses) {
            self.ensure_secret(&mut g).await?;
        }
        match self.serve(&mut g, &ops).await {
            Ok((answers, land)) => {
                let changes = g.state.stage();
                let finish = move |outcome: std::result::Result<(), String>| {
                    let mut g = g;
                    match outcome {
                        Ok(()) => g.state.settle(),
                        Err(_) => g.state.rollback(),
                    }
                };
                Ok(match land {
                    Some(land) => StagedAccess::landing(answers, changes, land, finish),
                    None => StagedAccess::new(answers, changes, finish),
                })
            }
            Err(e) => {
                g.state.rollback();
                Err(e)
            }
        }
    }

    pub(crate) fn geo(&self) -> Geometry {
        Geometry {
            top: self.top.load(Ordering::Acquire),
            ..self.cfg.geometry
        }
    }

    pub(crate) fn key(&self, l: u32, slot: u8) -> ObjKey {
        ObjKey::new(format!("{}/{l}/{slot}", self.cfg.prefix)).expect("prefix validated")
    }

    pub(crate) fn identity(&self, l: u32, offset: u32, nv: NodeVersion) -> ObjectIdentity {
        slot_identity(self.space, l, offset, nv)
    }

    fn layout(&self, st: &dyn TrustedState, l: u32) -> Result<Option<Layout>> {
        st.meta(&layout_key(l))
            .map(|b| Layout::decode(b, self.geo().slots(l)))
            .transpose()
    }

    /// The next unread dummy of level `l` (counted as read).
    fn next_dummy(&self, st: &mut dyn TrustedState, l: u32, layout: &Layout) -> Result<SlotRead> {
        let n = st
            .meta(&counter_key(l))
            .map(|b| u32::from_be_bytes(b[..4].try_into().unwrap_or([0; 4])))
            .unwrap_or(0);
        let offset = *layout.dummies.get(n as usize).ok_or_else(|| {
            OramError::State(StateError::Corrupt(format!(
                "level {l} of partition space {} has no unread dummy left",
                self.space
            )))
        })?;
        st.set_meta(
            &counter_key(l),
            Bytes::copy_from_slice(&(n + 1).to_be_bytes()),
        );
        Ok(SlotRead {
            level: l,
            offset,
            holds: DUMMY,
        })
    }

    /// Creates the partition's secret (the key of its levels' permutations) if
    /// it has none — a partition never shuffled, of a new volume or of one
    /// written before the secret was made this way — and commits it, on its
    /// own and durably, before the access sends anything: a round that fails,
    /// or a crash, cannot take it back, so a repeat of the partition's first
    /// shuffle permutes as the failed attempt did. Observed: nothing (a local
    /// commit of the trusted state; with the shipped log, part of its
    /// fixed-size records).
    async fn ensure_secret(&self, core: &mut Core) -> Result<()> {
        if core.state.meta(SECRET_KEY).is_some_and(|s| s.len() == 32) {
            return Ok(());
        }
        let mut fresh = [0u8; 32];
        core.rng.fill(&mut fresh);
        let st = core.state.as_mut();
        st.set_meta(SECRET_KEY, Bytes::copy_from_slice(&fresh));
        match st.stage().commit_local().await {
            Ok(()) => {
                st.settle();
                Ok(())
            }
            Err(e) => {
                st.rollback();
                Err(e.into())
            }
        }
    }

    /// Serves `ops` (checked), staging nothing yet; the caller stages or rolls
    /// back. The last access's level is returned to be landed (the earlier
    /// ones have landed: the next access may read them).
    async fn serve(&self, core: &mut Core, ops: &[Op]) -> Result<(Vec<Bytes>, Option<Land>)> {
        core.committed.clear();
        let mut out = vec![Bytes::new(); ops.len()];
        let mut land = None;
        let last = ops.iter().rposition(Op::accesses);
        let mut i = 0;
        while i < ops.len() {
            let take = match &ops[i] {
                Op::Take(b) => Some(*b),
                Op::Dummy => None,
                _ => unreachable!("checked by plan_batch"),
            };
            let insert = match ops.get(i + 1) {
                Some(Op::Insert(b, d)) => Some((*b, d.clone())),
                _ => None,
            };
            let defer = Some(i) == last;
            let (answer, put) = self.one(core, take, insert.clone(), defer).await?;
            if let Some(data) = answer {
                out[i] = data;
            }
            land = land.or(put);
            i += if insert.is_some() { 2 } else { 1 };
        }
        Ok((out, land))
    }

    /// One access: the partition read of `take` (or a dummy read), then the
    /// eviction of `insert` (or of nothing) into this partition. With `defer`,
    /// the PUT of the level built is returned to be landed before the commit
    /// (the access's answer is known, and nothing it read is overwritten);
    /// otherwise it has landed.
    async fn one(
        &self,
        core: &mut Core,
        take: Option<u64>,
        insert: Option<(u64, Bytes)>,
        defer: bool,
    ) -> Result<(Option<Bytes>, Option<Land>)> {
        let geo = self.geo();
        let st = core.state.as_mut();
        let mut layouts: Vec<Option<Layout>> = Vec::with_capacity(geo.top as usize + 1);
        for l in 0..=geo.top {
            layouts.push(self.layout(st, l)?);
        }
        let filled: Vec<bool> = layouts.iter().map(Option::is_some).collect();
        // The partition read.
        let target = match take {
            Some(b) => Some(
                st.position(b)
                    .map(split)
                    .ok_or_else(|| OramError::Integrity {
                        key: self.cfg.prefix.clone(),
                        reason: format!("block {b} is not in this partition"),
                    })?,
            ),
            None => None,
        };
        let mut reads = Vec::new();
        for (l, layout) in layouts.iter().enumerate() {
            let Some(layout) = layout else { continue };
            let l = l as u32;
            match (take, target) {
                (Some(b), Some((tl, off))) if tl == l => reads.push(SlotRead {
                    level: l,
                    offset: off,
                    holds: b,
                }),
                _ => reads.push(self.next_dummy(st, l, layout)?),
            }
        }
        if let (Some(b), Some((tl, _))) = (take, target) {
            if !filled.get(tl as usize).copied().unwrap_or(false) {
                return Err(OramError::State(StateError::Corrupt(format!(
                    "block {b} is recorded at empty level {tl}"
                ))));
            }
            st.remove_position(b);
        }
        // The eviction: which level it builds from which.
        let (j, sources) = eviction_target(&filled);
        let mut merge = Vec::new();
        for &l in &sources {
            let layout = layouts[l as usize].as_ref().expect("sources are filled");
            let mut taken = 0;
            for &(off, b) in &layout.reals {
                if st.position(b) == Some(join(l, off)) {
                    merge.push(SlotRead {
                        level: l,
                        offset: off,
                        holds: b,
                    });
                    taken += 1;
                }
            }
            for _ in taken..geo.reals(l) {
                merge.push(self.next_dummy(st, l, layout)?);
            }
        }
        let reals = merge.iter().filter(|r| r.holds != DUMMY).count() as u64;
        let total = reals + u64::from(insert.is_some());
        if total > geo.reals(j) {
            // The framework keeps a partition within its top level
            // (`partition_limit`): only a partition filled past it some other
            // way gets here.
            return Err(OramError::Config(format!(
                "partition {} is full: {total} blocks exceed its top level's {}; nothing \
                 was changed (the volume needs more partitions)",
                self.cfg.prefix,
                geo.reals(j)
            )));
        }
        let t = std::time::Instant::now();
        let buffer = self
            .shuffle
            .acquire(geo.slots(j) as u32)
            .await
            .ok_or_else(|| OramError::Config("the shuffle buffer is closed".into()))?;
        let t = self.steps.lap(STEP_BUFFER, t);
        // Every slot of the read and of the shuffle, at once.
        let all: Vec<SlotRead> = reads.iter().chain(&merge).copied().collect();
        let versions: Vec<NodeVersion> = all.iter().map(|r| st.node(u64::from(r.level))).collect();
        let (got, fetched) = self.fetch(&all, &versions).await?;
        self.steps.lap(STEP_FETCH, t);
        let answer = take
            .map(|_| got[..reads.len()].iter().find(|(b, _)| Some(*b) == take))
            .map(|found| found.map(|(_, d)| d.clone()).unwrap_or_default());
        // The level built: the merged real blocks and the insert, permuted.
        let mut items: Vec<(u64, Bytes)> = got[reads.len()..]
            .iter()
            .filter(|(b, _)| *b != DUMMY)
            .cloned()
            .collect();
        if let Some((b, d)) = insert {
            items.push((b, d));
        }
        let slots = geo.slots(j) as u32;
        let st = core.state.as_mut();
        let committed = *core
            .committed
            .entry(j)
            .or_insert_with(|| st.node(u64::from(j)));
        let mut nv = committed.next(st.epoch(), st.generation(), SlotPolicy::BeforeCommit);
        nv.version = st.node(u64::from(j)).version + 1;
        st.set_node(u64::from(j), nv);
        // The permutation is a function of the partition's secret and the
        // level's identity: a round repeated after a failure writes the same
        // level again, so a PUT of the failed attempt that lands late (after
        // the repeat's) leaves the level as the state describes it. The secret
        // was committed before the access sent anything (`ensure_secret`), so
        // a repeat of the partition's first shuffle uses it too.
        let secret = st
            .meta(SECRET_KEY)
            .filter(|s| s.len() == 32)
            .cloned()
            .ok_or_else(|| {
                OramError::State(StateError::Corrupt(format!(
                    "partition space {} has no permutation secret",
                    self.space
                )))
            })?;
        let mut order: Vec<u32> = (0..slots).collect();
        order.shuffle(&mut permutation_rng(&secret, j, nv));
        let layout = Layout {
            reals: items
                .iter()
                .zip(&order)
                .map(|((b, _), &off)| (off, *b))
                .collect(),
            dummies: order[items.len()..].to_vec(),
        };
        // Sealing a level is CPU work proportional to its size: off the
        // runtime's worker threads.
        let mut contents: Vec<Option<(u64, Bytes)>> = vec![None; slots as usize];
        for (item, &off) in items.into_iter().zip(&order) {
            contents[off as usize] = Some(item);
        }
        let sealer = self.sealer.clone();
        let space = self.space;
        let t = std::time::Instant::now();
        let object = tokio::task::spawn_blocking(move || {
            seal_level(&sealer, space, j, nv, geo.block_size, &contents)
        })
        .await
        .map_err(|e| OramError::Config(format!("sealing a level failed: {e}")))??;
        self.steps.lap(STEP_SEAL, t);
        let key = self.key(j, nv.slot);
        let store = self.store.clone();
        drop(buffer);
        let put = async move {
            store.put_many_redoable(vec![(key, object)]).await?;
            Ok(())
        };
        // A level whose PUT waits for the round's commit holds a permit of the
        // landing budget, taken without waiting (a wait there could be for the
        // round's own commit); when the budget is spent the level is written now.
        let waiting = if defer {
            self.landing.try_acquire(slots).ok()
        } else {
            None
        };
        let land: Option<Land> = match waiting {
            Some(waiting) => Some(Box::pin(async move {
                let _waiting = waiting;
                put.await
            })),
            None => {
                let t = std::time::Instant::now();
                put.await?;
                self.steps.lap(STEP_WRITE, t);
                None
            }
        };
        for &l in &sources {
            st.remove_meta(&layout_key(l));
            st.remove_meta(&counter_key(l));
        }
        for &(off, b) in &layout.reals {
            st.set_position(b, join(j, off));
        }
        st.set_meta(&layout_key(j), layout.encode());
        st.remove_meta(&counter_key(j));
        let mut c = lock(&self.stats);
        c.accesses += 1;
        c.shuffles += 1;
        if j == geo.top {
            c.top_shuffles += 1;
        }
        c.slots_read += fetched;
        c.slots_written += u64::from(slots);
        Ok((answer, land))
    }
}

#[async_trait]
impl Oram for Hierarchy {
    fn name(&self) -> &'static str {
        "hierarchy"
    }

    fn block_size(&self) -> usize {
        self.inner.geo().block_size
    }

    fn capacity(&self) -> u64 {
        self.inner.geo().reals(self.inner.geo().top)
    }

    fn id_limit(&self) -> u64 {
        self.inner.cfg.id_limit
    }

    /// As [`Oram::access_staged`], committed alone, on a task of its own (a
    /// caller that goes away mid-commit leaves the state as committed).
    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        let inner = self.inner.clone();
        detached(async move { inner.stage(ops).await?.commit().await }).await
    }

    /// Observed: see the module documentation — per access one slot of every
    /// filled level the eviction leaves alone, each level it empties whole,
    /// one PUT.
    ///
    /// The access runs on a task of its own ([`detached`]): a caller that goes
    /// away (a cluster node stopping while a front's round is staged on it)
    /// never leaves its changes half applied in the partition's state, where
    /// the next commit would take them in and a collection would delete the
    /// objects the committed state refers to. Detached, the access finishes
    /// and, its result dropped, is undone.
    async fn access_staged(&self, ops: Vec<Op>) -> Result<StagedAccess> {
        let inner = self.inner.clone();
        detached(async move { inner.stage(ops).await }).await
    }

    fn grows(&self) -> bool {
        true
    }

    /// A new, empty top level (see `crate::grow`). Observed: nothing.
    async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<oram_engine::Grown> {
        crate::grow::grow(&self.inner, capacity, progress).await
    }

    /// Nothing is written after an access returns.
    async fn flush(&self) -> Result<()> {
        let _g = self.inner.core.lock().await;
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        let c = lock(&self.inner.stats).clone();
        let stat = |name, help, value| Stat {
            name,
            help,
            kind: StatKind::Counter,
            value,
        };
        EngineStats {
            accesses: c.accesses,
            rounds: c.accesses,
            extra: vec![
                stat("shuffles_total", "Levels built by evictions.", c.shuffles),
                stat(
                    "top_shuffles_total",
                    "Top levels rebuilt from every level.",
                    c.top_shuffles,
                ),
                stat(
                    "slots_read_total",
                    "Level slots fetched from the backend (a level read whole counts all its \
                     slots).",
                    c.slots_read,
                ),
                stat(
                    "slots_written_total",
                    "Level slots written.",
                    c.slots_written,
                ),
            ]
            .into_iter()
            .chain(self.inner.steps.stats())
            .collect(),
            ..EngineStats::default()
        }
    }

    async fn quiesce(&self) -> Result<Quiesced> {
        let g = self.inner.core.clone().lock_owned().await;
        Ok(Quiesced::new(g))
    }

    /// Reads every filled level whole and checks every slot: each opens with
    /// the level's version, holds the block its layout says (or a dummy), and
    /// every block whose position is in the partition is at that slot.
    ///
    /// Observed: one GET per filled level, in level order.
    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let inner = &self.inner;
        let g = inner.core.lock().await;
        let geo = inner.geo();
        let mut report = CheckReport::default();
        let mut found: HashMap<u64, u64> = HashMap::new();
        let levels = u64::from(geo.top) + 1;
        progress(0, levels);
        let positions: HashMap<u64, u64> = g.state.positions().into_iter().collect();
        let mut filled = Vec::new();
        for l in 0..=geo.top {
            match inner.layout(g.state.as_ref(), l) {
                Ok(Some(layout)) => filled.push((l, layout, g.state.node(u64::from(l)))),
                Ok(None) => {}
                Err(e) => report.problem(format!("level {l}: {e}")),
            }
        }
        let layouts: HashMap<u32, Layout> =
            filled.iter().map(|(l, lay, _)| (*l, lay.clone())).collect();
        for (l, layout, nv) in filled {
            let key = inner.key(l, nv.slot);
            let object = inner.store.get_many(std::slice::from_ref(&key)).await?;
            report.objects_read += 1;
            let Some(object) = object.into_iter().next().flatten() else {
                report.objects_bad += 1;
                report.problem(format!("level {l}: object {} is missing", key.as_str()));
                continue;
            };
            if object.len() as u64 != geo.level_bytes(l) {
                report.objects_bad += 1;
                report.problem(format!("level {l}: {} bytes", object.len()));
                continue;
            }
            let real: HashMap<u32, u64> = layout.reals.iter().copied().collect();
            let len = geo.slot_len();
            let mut bad = false;
            for off in 0..geo.slots(l) as u32 {
                let bytes = &object[off as usize * len..(off as usize + 1) * len];
                let plain = match inner.sealer.open(&inner.identity(l, off, nv), bytes) {
                    Ok(p) => p,
                    Err(e) => {
                        bad = true;
                        report.problem(format!("level {l} slot {off}: {e}"));
                        continue;
                    }
                };
                let block = u64::from_be_bytes(plain[..SLOT_HEADER].try_into().expect("8 bytes"));
                let want = real.get(&off).copied().unwrap_or(DUMMY);
                if block != want {
                    bad = true;
                    report.problem(format!(
                        "level {l} slot {off} holds {block}, its layout says {want}"
                    ));
                } else if want != DUMMY && positions.get(&block) == Some(&join(l, off)) {
                    found.insert(block, join(l, off));
                }
            }
            if bad {
                report.objects_bad += 1;
            }
            progress(u64::from(l) + 1, levels);
        }
        for (&b, &pos) in &positions {
            let (l, off) = split(pos);
            let ok = layouts
                .get(&l)
                .is_some_and(|lay| lay.reals.contains(&(off, b)));
            if !ok {
                report.problem(format!(
                    "block {b} is recorded at level {l} slot {off}, which does not hold it"
                ));
            }
        }
        let placed: Vec<u64> = positions.keys().copied().collect();
        report.finish(&placed, found, 0);
        Ok(report)
    }

    /// Deletes this partition's objects no level refers to, now or in the last
    /// checkpoint. Observed: a LIST of `<prefix>/` and DELETEs.
    async fn sweep(&self) -> Result<u64> {
        let inner = &self.inner;
        let g = inner.core.lock().await;
        let keep = kept(inner, g.state.as_ref());
        Ok(oram_blockstore::delete_unreferenced(
            inner.store.as_ref(),
            &format!("{}/", inner.cfg.prefix),
            &keep,
        )
        .await?)
    }

    /// [`Oram::collect`]'s deletes: they hold off only this partition's
    /// accesses (a round that reaches it waits for them). Observed: as
    /// `collect`.
    async fn collect_while_serving(&self) -> Result<u64> {
        self.collect().await
    }

    /// Deletes the level objects nothing can need once a checkpoint has landed
    /// (for a clean stop, after its checkpoint): a level's other slots when it
    /// was last written before that checkpoint began
    /// ([`NodeVersion::superseded`]), and — when the partition has not been
    /// accessed since (its state is the checkpoint's) — every slot of a level
    /// the partition no longer fills. So a stopped partition keeps one object
    /// per filled level.
    ///
    /// Observed: DELETEs of those keys (some may not exist), a set decided by
    /// the partition's eviction counter and which levels were written when.
    async fn collect(&self) -> Result<u64> {
        let inner = &self.inner;
        let g = inner.core.lock().await;
        let st = g.state.as_ref();
        let landed = st.landed();
        let top = u64::from(inner.geo().top);
        let levels: Vec<(u64, NodeVersion)> = st
            .nodes()
            .into_iter()
            .filter(|(l, nv)| *l <= top && nv.version > 0)
            .collect();
        let quiet = levels.iter().all(|(_, nv)| nv.epoch < landed);
        let mut keys = Vec::new();
        for (l, nv) in levels {
            let l = l as u32;
            if quiet && inner.layout(st, l)?.is_none() {
                keys.extend(nv.slots().map(|s| inner.key(l, s)));
            } else {
                keys.extend(nv.superseded(landed).map(|s| inner.key(l, s)));
            }
        }
        if !keys.is_empty() {
            inner.store.delete_many(&keys).await?;
        }
        Ok(keys.len() as u64)
    }
}

/// The level objects the state or the last checkpoint may refer to: each
/// written level's current slot and the checkpoint's (what `sweep` keeps).
fn kept(inner: &Inner, st: &dyn TrustedState) -> BTreeSet<ObjKey> {
    let mut keep = BTreeSet::new();
    for (pos, nv) in st.nodes() {
        if nv.version == 0 || pos > u64::from(inner.geo().top) {
            continue;
        }
        keep.insert(inner.key(pos as u32, nv.slot));
        if nv.base < SLOT_LIMIT {
            keep.insert(inner.key(pos as u32, nv.base));
        }
    }
    keep
}
