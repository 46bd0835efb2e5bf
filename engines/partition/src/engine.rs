//! The partition framework's engine: `P` partitions, each an ordinary engine
//! (a sub-engine) in its own space of the trusted state and under its own
//! backend prefix, served in rounds. CURIOUS plugs in Path or Ring ORAM trees,
//! ObliviStore its hierarchical partitions.
//!
//! The position map block → partition and the eviction cache live in this
//! engine's own space ([`PartitionMap`]).
//!
//! **A round** of up to `max_batch` ops (see `round.rs`): every op makes one
//! sub-engine access — a take of its block from the partition holding it, or a
//! dummy access of the partition its cached block is assigned to, or of a
//! uniformly random one; one block waiting in the eviction cache for that
//! partition rides on the access as an insert (no access of its own); with
//! probability ν − 1 a background eviction makes a dummy access of a uniformly
//! random partition carrying one more. Every block the round named goes to the
//! eviction cache assigned to a fresh random partition (or is forgotten if
//! taken). The partitions' accesses run **concurrently**, each staged, and (in
//! one process) each partition's writes start as soon as its access is
//! staged, beside the other partitions' reads ([`StagedAccess::start_landing`]:
//! they go to objects no committed state refers to; a partition on another
//! machine commits when it lands, so it lands at the commit); then **one
//! commit** covers them all
//! and the map, so a block moving from `p` to `p′` is never lost or stored
//! twice at any instant of a crash.
//!
//! **What the storage server observes per round of `k` ops:** `k` sub-engine
//! accesses to i.i.d. uniformly random partitions plus Binomial(k, ν − 1)
//! background ones, each partition's accesses as its engine shows them. Which
//! partitions are accessed is independent of the blocks: a block's partition
//! was drawn at its last access and is revealed once, when it is next accessed.
//! A round plans and reads only once the round before it has read and applied
//! (its writes and commit may still be under way: **two rounds in flight**,
//! `crate::drive`), whichever partitions either touches, so waiting never
//! reveals that two requests share a partition (the TaoStore attack on the
//! published CURIOUS code, which let a request for a block in transit proceed
//! while one for another block of a busy partition waited). One slow
//! partition delays the round it is in, and so every request after it, alike;
//! a partition the round in flight also accesses is accessed once that round
//! committed, which depends only on the two rounds' uniform draws.
//!
//! **Failures and crashes.** Before any access goes out, the round's **intent
//! record** — each partition's sub-ops (inserts by block: their data waits in
//! the cache) and each named block's next partition — is durable locally. A
//! round a partition failed is undone in memory (every partition's staged access
//! dropped; the tree engines keep their rounds to be finished) and **repeated
//! exactly** before anything else: the same sub-ops to the same partitions, each
//! sub-engine finishing its interrupted round as those ops, with the same draws,
//! as reads (the caller had an error). Then the access's own round is drawn
//! again, up to [`PartitionedConfig::round_attempts`] times in all; sub-engines
//! make one attempt each, so the framework repeats whole rounds, never one
//! partition. A crash leaves the intent record, and the next start repeats the
//! round first. The server sees what a client's retry shows it, for every
//! partition of the round alike. A round is never dropped: a repeat that fails
//! the same way every time (a damaged backend object or trusted state) fails
//! every request, with an error that says so. What could be checked before any
//! access goes out is: a partition whose sub-engine holds at most
//! [`PartitionedConfig::partition_limit`] blocks gets no insert once full (the
//! block waits in the cache; an eviction without an insert looks the same), and
//! a round the planner refuses fails alone, nothing sent or changed.
//!
//! **A round of reads is answered once read** — and once the round before it
//! is durable. The partitions' staged accesses return once read and applied;
//! the round's writes ([`StagedAccess::landing`], already under way) and its
//! one commit then go on in a task of their own while the next round plans and
//! reads; a round that only reads is answered at that point, and a round that
//! writes once its own commit is durable. If a commit fails, the round after it
//! fails too, and the next round repeats both first, in order.
//!
//! **Maintenance.** [`Oram::check`], [`Oram::sweep`], [`Oram::format`] and
//! [`Oram::quiesce`] run over every partition, one after the other; `check` also
//! cross-checks the map: every block it places in partition `p` is stored there
//! and nowhere else, no partition stores a block the map does not place there,
//! and no cached block is stored in a partition.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::counters::Counters;
use crate::round;
use crate::{PartitionMap, Where};
use async_trait::async_trait;
use bytes::Bytes;
use oram_engine::{
    detached, validate_op, Admit, CheckReport, EngineStats, Formatted, Grown, Local, Op, Oram,
    OramError, Parts, Placement, Quiesced, Result, Shape, Step, StepClock,
};
use oram_state::Space;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// Parameters of a partitioned engine.
#[derive(Clone, Debug)]
pub struct PartitionedConfig {
    /// The engine's name (`curious`, `oblivistore`): [`Oram::name`].
    pub name: &'static str,
    /// The letter of the partitions' backend prefixes, `<prefix>/<letter>/<p>`.
    pub letter: char,
    /// Logical blocks (ids `0..capacity`).
    pub capacity: u64,
    /// Bytes per block.
    pub block_size: usize,
    /// Partitions (`P`).
    pub partitions: u32,
    /// Most ops in one round; longer batches are split.
    pub max_batch: usize,
    /// Evictions per access (ν ≥ 1): one rides on the access, and a background
    /// one follows with probability ν − 1.
    pub eviction_rate: f64,
    /// Largest eviction cache allowed after a round, in blocks; above it an access
    /// fails with [`OramError::StashOverflow`] (applied, nothing lost).
    pub cache_bound: usize,
    /// The most blocks one partition may hold, for sub-engines that fail when
    /// asked to hold more (ObliviStore's top level); `None` for those that
    /// only get fuller (CURIOUS's trees). An eviction into a partition that
    /// holds this many inserts nothing — the block keeps waiting in the cache,
    /// and it looks the same as an eviction that found no block waiting — so a
    /// round never fails, after its requests went out, for a full partition.
    pub partition_limit: Option<u64>,
    /// Attempts of a round within one access: a round a transient backend
    /// failure interrupted is repeated exactly (as reads), then the access's own
    /// round drawn again, up to this many times in all.
    pub round_attempts: u32,
    /// Seed of the random choices; `None` (production) seeds from the OS.
    pub rng_seed: Option<[u8; 32]>,
}

impl PartitionedConfig {
    /// Ops one partition's sub-ORAM may get in a round: an access and an insert
    /// per op, a dummy and an insert per background eviction.
    pub fn sub_batch(&self) -> usize {
        self.max_batch.saturating_mul(4)
    }

    /// The blocks a partition's sub-ORAM is sized for: the mean load
    /// `capacity / P` plus ten standard deviations (a partition holding more
    /// still works; its tree is fuller), at most the capacity.
    pub fn sub_capacity(&self) -> u64 {
        let mean = self.capacity.div_ceil(u64::from(self.partitions.max(1)));
        (mean + (10.0 * (mean as f64).sqrt()).ceil() as u64 + 4).min(self.capacity)
    }

    /// The space of partition `p`'s sub-ORAM, for an engine in space `base`:
    /// `(base + 1) · 2^16 + p`, apart from every other engine's.
    pub fn sub_space(base: Space, p: u32) -> Space {
        Space(((base.0 + 1) << 16) | p)
    }

    /// The backend prefix of partition `p`'s sub-engine under `prefix`.
    pub fn sub_prefix(&self, prefix: &str, p: u32) -> String {
        format!("{prefix}/{}/{p}", self.letter)
    }

    /// The capacity this configuration gives partitions at an engine capacity
    /// of `capacity` blocks, its partitions unchanged: what each partition
    /// grows to when the engine grows ([`Oram::grow`]).
    pub fn sub_capacity_at(&self, capacity: u64) -> u64 {
        Self {
            capacity,
            ..self.clone()
        }
        .sub_capacity()
    }

    /// The space of partition `p`'s ledger, for an engine in space `base`: where
    /// a process serving the partition for a front elsewhere (a cluster node)
    /// records the last round it committed — apart from the sub-engine's own
    /// space ([`PartitionedConfig::sub_space`]) and every engine's.
    pub fn ledger_space(base: Space, p: u32) -> Space {
        Space(0x8000_0000 | Self::sub_space(base, p).0)
    }
}

/// The block ids every partition's sub-engine takes (`0..SUB_ID_LIMIT`),
/// whatever the engine's capacity: the framework checks ids against its own
/// capacity, which grows ([`Oram::grow`]), so that a partition built before a
/// growth takes the ids the growth adds. Also the largest capacity an engine
/// may have.
pub const SUB_ID_LIMIT: u64 = 1 << 48;

/// Builds partition `p`'s sub-engine of a shape over its parts (shared, for
/// [`Blueprint`]).
pub type SubBuilder = Arc<dyn Fn(u32, &Shape, Parts) -> Result<Arc<dyn Oram>> + Send + Sync>;

/// Everything needed to build a partitioned engine or some of its partitions:
/// the framework's parameters, the partitions' shape and how to build one.
/// A volume on one machine builds the whole engine ([`Blueprint::engine`] with
/// [`Local`]); a cluster's front builds it with its partitions placed on the
/// nodes, and each node builds its partitions alone ([`Blueprint::partitions`]).
#[derive(Clone)]
pub struct Blueprint {
    /// The framework's parameters.
    pub cfg: PartitionedConfig,
    /// The sub-engines' shape (its prefix is the volume's: each partition's
    /// is [`PartitionedConfig::sub_prefix`] of it).
    pub sub_shape: Shape,
    /// Builds a partition's sub-engine.
    pub build: SubBuilder,
}

impl Blueprint {
    /// The engine, its map in `parts.state` and partition `p` where `place`
    /// puts it (built locally in the sibling space
    /// [`PartitionedConfig::sub_space`], if there).
    pub fn engine(&self, parts: Parts, place: &dyn Placement) -> Result<Partitioned> {
        let build = self.build.clone();
        Partitioned::new_placed(
            self.cfg.clone(),
            parts,
            &self.sub_shape,
            &move |p, shape, parts| build(p, shape, parts),
            place,
        )
    }

    /// The sub-engines of partitions `which` alone, over `parts` (whose state
    /// is the engine's space; each partition's state is its sibling space, as
    /// in [`Blueprint::engine`]): a cluster node's share of the engine.
    pub fn partitions(&self, parts: Parts, which: &[u32]) -> Result<Vec<(u32, Arc<dyn Oram>)>> {
        check_config(&self.cfg)?;
        let base = parts.state.space();
        let mut out = Vec::with_capacity(which.len());
        for &p in which {
            if p >= self.cfg.partitions {
                return Err(OramError::Config(format!(
                    "partition {p} does not exist (the engine has {})",
                    self.cfg.partitions
                )));
            }
            let sub = build_one(&self.cfg, &parts, base, &self.sub_shape, &*self.build, p)?;
            out.push((p, sub));
        }
        Ok(out)
    }
}

/// The framework's parameters that no engine can work with.
fn check_config(cfg: &PartitionedConfig) -> Result<()> {
    if cfg.partitions == 0 || cfg.partitions > 1 << 16 {
        return Err(OramError::Config("partitions must be 1 to 65536".into()));
    }
    if !(1.0..=2.0).contains(&cfg.eviction_rate) {
        return Err(OramError::Config(
            "the eviction rate must be 1.0 to 2.0".into(),
        ));
    }
    if cfg.capacity == 0 || cfg.block_size == 0 || cfg.max_batch == 0 {
        return Err(OramError::Config(
            "capacity, block size and round size must be positive".into(),
        ));
    }
    if cfg.capacity > SUB_ID_LIMIT {
        return Err(OramError::Config(format!(
            "a partitioned engine holds at most {SUB_ID_LIMIT} blocks"
        )));
    }
    Ok(())
}

/// The parts and shape of partition `p` of an engine in space `base`.
fn sub_parts(
    cfg: &PartitionedConfig,
    parts: &Parts,
    base: Space,
    sub_shape: &Shape,
    p: u32,
) -> Result<(Shape, Parts)> {
    let state = parts.state.sibling(PartitionedConfig::sub_space(base, p))?;
    let shape = Shape {
        prefix: cfg.sub_prefix(&sub_shape.prefix, p),
        id_limit: Some(SUB_ID_LIMIT),
        ..sub_shape.clone()
    };
    let parts = Parts {
        store: parts.store.clone(),
        sealer: parts.sealer.clone(),
        state,
    };
    Ok((shape, parts))
}

/// Partition `p`'s sub-engine, built here, checked against the framework's
/// block size and ids.
fn build_one(
    cfg: &PartitionedConfig,
    parts: &Parts,
    base: Space,
    sub_shape: &Shape,
    build_sub: BuildSub<'_>,
    p: u32,
) -> Result<Arc<dyn Oram>> {
    let (shape, sub_parts) = sub_parts(cfg, parts, base, sub_shape, p)?;
    let sub = build_sub(p, &shape, sub_parts)?;
    check_sub(cfg, p, &*sub)?;
    Ok(sub)
}

/// A partition's engine must take the framework's blocks and ids.
fn check_sub(cfg: &PartitionedConfig, p: u32, sub: &dyn Oram) -> Result<()> {
    if sub.block_size() != cfg.block_size || sub.id_limit() < cfg.capacity {
        return Err(OramError::Config(format!(
            "partition {p}'s engine takes blocks of {} bytes with ids below {}, \
             not {} bytes below {}",
            sub.block_size(),
            sub.id_limit(),
            cfg.block_size,
            cfg.capacity
        )));
    }
    Ok(())
}

/// The partitions of a volume of `capacity` blocks whose setting is `setting`:
/// the setting, or ⌈√capacity⌉ (at most 65 536) when it is 0.
pub fn partitions_for(setting: u32, capacity: u64) -> u32 {
    match setting {
        0 => ((capacity as f64).sqrt().ceil() as u64).clamp(1, 1 << 16) as u32,
        n => n,
    }
}

/// The smallest eviction rate ν a configuration may set. At ν = 1 an access
/// evicts only into the partition it read, so each partition's share of the
/// eviction cache is a symmetric random walk: the cache grows like √(accesses ×
/// partitions) without bound, overflows its bound after some 10⁴–10⁵ accesses
/// (every later write round fails), and the checkpoint grows with it, which the
/// provider sees. Background evictions at ν − 1 ≥ 0.1 per access give the walk
/// a drift back towards an empty cache.
pub const MIN_EVICTION_RATE: f64 = 1.1;

/// Checks the settings every partitioned engine has, named
/// `<engine>_partitions` and `<engine>_eviction_rate` in the configuration:
/// ν from [`MIN_EVICTION_RATE`] to 2.0.
pub fn validate_partitioning(
    engine: &str,
    setting: u32,
    capacity: u64,
    eviction_rate: f64,
) -> std::result::Result<(), String> {
    if setting > 1 << 16 {
        return Err(format!("{engine}_partitions must be at most 65536"));
    }
    if u64::from(partitions_for(setting, capacity)) > capacity {
        return Err(format!(
            "{engine}_partitions must not exceed the capacity in blocks"
        ));
    }
    if !(MIN_EVICTION_RATE..=2.0).contains(&eviction_rate) {
        return Err(format!(
            "{engine}_eviction_rate must be {MIN_EVICTION_RATE} to 2.0 (at 1.0 the eviction \
             cache grows without bound)"
        ));
    }
    Ok(())
}

/// Builds partition `p`'s sub-engine of `shape` from `parts`.
pub type BuildSub<'a> = &'a (dyn Fn(u32, &Shape, Parts) -> Result<Arc<dyn Oram>> + Sync);

/// A partitioned engine. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Partitioned {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The parameters the engine was created with (its capacity and
    /// partition limit before any growth: those in effect are below).
    pub(crate) cfg: PartitionedConfig,
    pub(crate) subs: Vec<Arc<dyn Oram>>,
    /// The capacity in effect, in blocks (grows: `crate::grow`).
    pub(crate) capacity: AtomicU64,
    /// The partition limit in effect ([`PartitionedConfig::partition_limit`];
    /// `u64::MAX`: none); grows with the capacity.
    pub(crate) partition_limit: AtomicU64,
    /// Whether a round's intent record waits for the full commit (shipped
    /// too) before its sub-accesses go out: [`Placement::remote`].
    pub(crate) ship_intents: bool,
    /// How long a round is repeated while a partition is unavailable:
    /// [`Placement::ride_out`].
    pub(crate) ride_out: std::time::Duration,
    /// The position map, the eviction cache, the random generator and the
    /// round in flight; held while a round plans, reads and applies (its
    /// writes and commit go on without it: `crate::drive`).
    pub(crate) round: Arc<tokio::sync::Mutex<Framework>>,
    /// Counters (read by `stats`; a round in flight's task adds its own).
    pub(crate) stats: Arc<Mutex<Counters>>,
    /// Wall time per step of the rounds ([`ROUND_STEPS`]).
    pub(crate) steps: Arc<StepClock>,
}

/// The steps of a round whose wall time the framework sums
/// ([`oram_engine::StepClock`]); indices [`STEP_PLAN`], [`STEP_PARTITIONS`],
/// [`STEP_COMMIT`].
pub(crate) const ROUND_STEPS: &[Step] = &[
    Step {
        name: "round_plan_microseconds_total",
        help: "Wall time of the rounds' planning and intent records (written locally, or \
               shipped for partitions on other machines), in microseconds.",
    },
    Step {
        name: "round_partitions_microseconds_total",
        help: "Wall time of the rounds' partition accesses, all partitions at once (reads, \
               shuffles and the writes not left for the commit), in microseconds.",
    },
    Step {
        name: "round_commit_microseconds_total",
        help: "Wall time of the rounds' commits: the partitions' remaining writes, then one \
               commit of every state, in microseconds.",
    },
];
pub(crate) const STEP_PLAN: usize = 0;
pub(crate) const STEP_PARTITIONS: usize = 1;
pub(crate) const STEP_COMMIT: usize = 2;

pub(crate) struct Framework {
    pub(crate) map: PartitionMap,
    pub(crate) rng: ChaCha20Rng,
    /// The next intent record's number.
    pub(crate) seq: u64,
    /// Rounds whose accesses went out but that did not commit (a failure, or
    /// a crash before this start): repeated exactly, as reads, in order,
    /// before any other.
    pub(crate) sticky: VecDeque<crate::drive::Sticky>,
    /// The round whose writes and commit are under way, if any.
    pub(crate) landing: Option<crate::drive::InFlight>,
}

impl Inner {
    /// The capacity in effect, in blocks.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// The partition limit in effect.
    pub(crate) fn partition_limit(&self) -> Option<u64> {
        Some(self.partition_limit.load(Ordering::Acquire)).filter(|&l| l != u64::MAX)
    }
}

/// Partitions collected at once by [`Oram::collect_while_serving`].
const COLLECT_AT_ONCE: usize = 8;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Partitioned {
    /// An engine whose map lives in `parts.state` and whose partition `p`
    /// is built by `build_sub` over the same store and sealer, with the sibling
    /// space [`PartitionedConfig::sub_space`] and prefix
    /// [`PartitionedConfig::sub_prefix`] of `sub_shape.prefix`.
    pub fn new(
        cfg: PartitionedConfig,
        parts: Parts,
        sub_shape: &Shape,
        build_sub: BuildSub<'_>,
    ) -> Result<Self> {
        Self::new_placed(cfg, parts, sub_shape, build_sub, &Local)
    }

    /// As [`Partitioned::new`], with partition `p` where `place` puts it (a
    /// cluster's front: on the node that owns it).
    pub fn new_placed(
        cfg: PartitionedConfig,
        parts: Parts,
        sub_shape: &Shape,
        build_sub: BuildSub<'_>,
        place: &dyn Placement,
    ) -> Result<Self> {
        check_config(&cfg)?;
        let base = parts.state.space();
        let mut subs = Vec::with_capacity(cfg.partitions as usize);
        for p in 0..cfg.partitions {
            let (shape, sub_parts) = sub_parts(&cfg, &parts, base, sub_shape, p)?;
            let shape_here = shape.clone();
            let sub = place.place(
                p,
                &shape,
                Box::new(move || build_sub(p, &shape_here, sub_parts)),
            )?;
            check_sub(&cfg, p, &*sub)?;
            subs.push(sub);
        }
        let map = PartitionMap::load(parts.state, cfg.partitions)?;
        let (capacity, partition_limit) = crate::grow::in_effect(&cfg, &map)?;
        let seq = map.next_round();
        // Two records after a crash with a round in flight and one after it:
        // both repeated, in order, the second planned after the first.
        let mut sticky = VecDeque::new();
        for (i, (s, bytes)) in map.intents().into_iter().enumerate() {
            sticky.push_back(crate::drive::Sticky {
                seq: s,
                intent: round::Intent::decode(&bytes)?,
                lenient: i > 0,
            });
        }
        let rng = match cfg.rng_seed {
            Some(seed) => ChaCha20Rng::from_seed(seed),
            None => ChaCha20Rng::from_entropy(),
        };
        let cache = map.cache_len() as u64;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                subs,
                capacity: AtomicU64::new(capacity),
                partition_limit: AtomicU64::new(partition_limit.unwrap_or(u64::MAX)),
                ship_intents: place.remote(),
                ride_out: place.ride_out(),
                round: Arc::new(tokio::sync::Mutex::new(Framework {
                    map,
                    rng,
                    seq,
                    sticky,
                    landing: None,
                })),
                stats: Arc::new(Mutex::new(Counters {
                    cache_len: cache,
                    cache_max: cache,
                    ..Counters::default()
                })),
                steps: Arc::new(StepClock::new(ROUND_STEPS)),
            }),
        })
    }

    /// The sub-engine of partition `p` (tests, statistics).
    pub fn partition(&self, p: u32) -> &Arc<dyn Oram> {
        &self.inner.subs[p as usize]
    }
}

#[async_trait]
impl Oram for Partitioned {
    fn name(&self) -> &'static str {
        self.inner.cfg.name
    }

    fn block_size(&self) -> usize {
        self.inner.cfg.block_size
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    /// Observed: see the crate documentation — per op one sub-ORAM access of a
    /// uniformly random partition, plus background evictions at rate ν − 1.
    async fn access(&self, ops: Vec<Op>) -> Result<Vec<Bytes>> {
        self.access_admitting(ops, Admit::none()).await
    }

    /// As [`Oram::access`], admitted once its (last) round has let the
    /// framework go (planned, recorded, read): the next call's round plans
    /// after this one's and reads while this one's writes and commit are under
    /// way (`crate::drive`).
    async fn access_admitting(&self, ops: Vec<Op>, admitted: Admit) -> Result<Vec<Bytes>> {
        for op in &ops {
            validate_op(op, self.inner.capacity(), self.inner.cfg.block_size)?;
        }
        let inner = self.inner.clone();
        detached(inner.access(ops, admitted)).await
    }

    /// Grows every partition alike, one after the other, then records the
    /// new capacity in one commit (see `crate::grow`).
    ///
    /// Observed: each partition's own growth in turn (a tree's new buckets; a
    /// hierarchical partition's nothing), with rounds between them.
    async fn grow(
        &self,
        capacity: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<Grown> {
        self.inner.clone().grow(capacity, progress).await
    }

    /// On one machine; a cluster's front does not grow.
    fn grows(&self) -> bool {
        !self.inner.ship_intents
    }

    /// Every partition's write-backs are on the backend.
    async fn flush(&self) -> Result<()> {
        let mut g = self.inner.round.lock().await;
        self.inner.reap(&mut g).await?;
        for sub in &self.inner.subs {
            sub.flush().await?;
        }
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        crate::counters::engine_stats(&self.inner)
    }

    /// Holds off rounds, then quiesces every partition.
    async fn quiesce(&self) -> Result<Quiesced> {
        let mut g = self.inner.round.clone().lock_owned().await;
        self.inner.reap(&mut g).await?;
        let mut held = Vec::with_capacity(self.inner.subs.len());
        for sub in &self.inner.subs {
            held.push(sub.quiesce().await?);
        }
        Ok(Quiesced::new((g, held)))
    }

    /// Checks every partition, then that the map and the partitions agree: every
    /// block the map places in partition `p` is stored there and nowhere else,
    /// and no partition stores a block the map does not place there.
    ///
    /// Observed: each partition's check, one after the other.
    async fn check(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<CheckReport> {
        let mut g = self.inner.round.lock().await;
        self.inner.reap(&mut g).await?;
        let subs = &self.inner.subs;
        let total = subs.len() as u64;
        let mut report = CheckReport::default();
        let mut found: HashMap<u64, u32> = HashMap::new();
        progress(0, total);
        for (p, sub) in subs.iter().enumerate() {
            let r = sub.check(&|_, _| {}).await?;
            report.objects_read += r.objects_read;
            report.objects_bad += r.objects_bad;
            report.stash_len += r.stash_len;
            let unlisted = r.problems_total.saturating_sub(r.problems.len() as u64);
            for line in r.problems {
                report.problem(format!("partition {p}: {line}"));
            }
            report.problems_total += unlisted;
            for b in r.written_blocks {
                if let Some(q) = found.insert(b, p as u32) {
                    report.problem(format!("block {b} stored in partitions {q} and {p}"));
                }
            }
            progress(p as u64 + 1, total);
        }
        let map = &g.map;
        let mut placed = BTreeSet::new();
        for (b, at) in map.all() {
            match at {
                Where::Stored(p) => {
                    placed.insert(b);
                    match found.get(&b) {
                        Some(&q) if q == p => {}
                        Some(&q) => report.problem(format!(
                            "block {b} belongs in partition {p} but is stored in {q}"
                        )),
                        None if report.objects_bad == 0 => report.problem(format!(
                            "block {b} belongs in partition {p} but is stored nowhere"
                        )),
                        None => {}
                    }
                }
                Where::Cached(_) => {
                    if let Some(q) = found.get(&b) {
                        report.problem(format!(
                            "block {b} is in the eviction cache and stored in partition {q}"
                        ));
                    }
                    found.insert(b, u32::MAX);
                }
                Where::Nowhere => {}
            }
        }
        for (&b, &p) in &found {
            if p != u32::MAX && !placed.contains(&b) {
                report.problem(format!(
                    "partition {p} stores block {b}, which the map does not place there"
                ));
            }
        }
        report.stash_len += map.cache_len() as u64;
        report.finish(std::iter::empty(), found, 0);
        Ok(report)
    }

    /// Every partition's unreferenced objects. Observed: each partition's LIST
    /// and DELETEs.
    async fn sweep(&self) -> Result<u64> {
        let mut g = self.inner.round.lock().await;
        self.inner.reap(&mut g).await?;
        let mut n = 0;
        for sub in &self.inner.subs {
            n += sub.sweep().await?;
        }
        Ok(n)
    }

    /// Every partition's superseded objects, one partition after the other
    /// (a remote partition's node does its own). Observed: each partition's
    /// DELETEs.
    async fn collect(&self) -> Result<u64> {
        let mut g = self.inner.round.lock().await;
        self.inner.reap(&mut g).await?;
        let mut n = 0;
        for sub in &self.inner.subs {
            n += sub.collect().await?;
        }
        Ok(n)
    }

    /// Each partition's [`Oram::collect_while_serving`], a few partitions at
    /// once (every one of a batch runs to its end), without holding rounds off: a round that reaches a partition being
    /// collected waits for that partition's deletes.
    ///
    /// Observed: each partition's DELETEs, right after a checkpoint landed.
    async fn collect_while_serving(&self) -> Result<u64> {
        let mut n = 0;
        for chunk in self.inner.subs.chunks(COLLECT_AT_ONCE) {
            let subs: Vec<Arc<dyn Oram>> = chunk.to_vec();
            let done = futures::future::join_all(
                subs.into_iter()
                    .map(|s| async move { s.collect_while_serving().await }),
            )
            .await;
            for d in done {
                n += d?;
            }
        }
        Ok(n)
    }

    /// The partitions' counts, summed ([`oram_engine::Superseded::sum`]; `None`
    /// if no partition counts).
    fn superseded(&self) -> Option<oram_engine::Superseded> {
        oram_engine::Superseded::sum(self.inner.subs.iter().filter_map(|s| s.superseded()))
    }

    /// Formats every partition, one after the other; `progress` counts the
    /// positions of all partitions (every partition has as many). Observed: each
    /// partition's format in turn.
    async fn format(&self, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<Formatted> {
        let mut g = self.inner.round.lock().await;
        self.inner.reap(&mut g).await?;
        let mut done = Formatted::default();
        let subs = &self.inner.subs;
        let count = subs.len() as u64;
        for sub in subs {
            let offset = done.positions;
            let f = sub.format(&|d, t| progress(offset + d, t * count)).await?;
            done.positions += f.positions;
            done.written += f.written;
        }
        if subs.is_empty() || done.positions == 0 {
            progress(0, 0);
        }
        Ok(done)
    }
}

impl std::fmt::Debug for Partitioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitioned")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}
