//! The framework's counters and the statistics it reports.

use oram_engine::{EngineStats, Stat, StatKind};

use crate::engine::{lock, Inner};

/// What the framework counts, summed over the rounds committed.
#[derive(Default, Clone)]
pub(crate) struct Counters {
    pub(crate) repeated: u64,
    pub(crate) accesses: u64,
    pub(crate) rounds: u64,
    pub(crate) sub_accesses: u64,
    pub(crate) background: u64,
    pub(crate) evicted: u64,
    pub(crate) empty_evictions: u64,
    pub(crate) deferred: u64,
    pub(crate) cache_len: u64,
    pub(crate) cache_max: u64,
    pub(crate) cache_sum: u64,
    pub(crate) overlapped: u64,
}

/// The engine's statistics: the framework's counters, the partitions' own
/// (summed by name) and the rounds' step times.
pub(crate) fn engine_stats(inner: &Inner) -> EngineStats {
    let c = lock(&inner.stats).clone();
    let mut s = EngineStats {
        accesses: c.accesses,
        rounds: c.rounds,
        stash_len: c.cache_len,
        stash_max: c.cache_max,
        stash_sum: c.cache_sum,
        ..EngineStats::default()
    };
    let mut sub_stash = 0;
    let mut sub_stash_max = 0;
    // The partitions' own counters (ObliviStore's shuffles and slots, Ring's
    // evictions), summed over every partition by name, in first-seen order.
    let mut sub_counters: Vec<Stat> = Vec::new();
    for sub in &inner.subs {
        let st = sub.stats();
        s.pending_writebacks += st.pending_writebacks;
        s.writeback_retries += st.writeback_retries;
        sub_stash += st.stash_len;
        sub_stash_max = sub_stash_max.max(st.stash_max);
        for x in st.extra.into_iter().filter(|x| x.kind == StatKind::Counter) {
            oram_engine::add_stat_by_name(&mut sub_counters, x);
        }
    }
    let stat = |name, help, kind, value| Stat {
        name,
        help,
        kind,
        value,
    };
    s.extra = vec![
        stat(
            "rounds_repeated_total",
            "Rounds repeated as the same accesses after a failure or crash interrupted them.",
            StatKind::Counter,
            c.repeated,
        ),
        stat(
            "sub_accesses_total",
            "Sub-ORAM accesses made (one per op, one per background eviction).",
            StatKind::Counter,
            c.sub_accesses,
        ),
        stat(
            "rounds_overlapped_total",
            "Rounds that planned and read while the round before them was still writing \
             and committing (two rounds in flight).",
            StatKind::Counter,
            c.overlapped,
        ),
        stat(
            "background_evictions_total",
            "Background evictions (a dummy access of a random partition each).",
            StatKind::Counter,
            c.background,
        ),
        stat(
            "evicted_blocks_total",
            "Blocks written from the eviction cache into their partition.",
            StatKind::Counter,
            c.evicted,
        ),
        stat(
            "empty_evictions_total",
            "Evictions that found no block waiting for their partition.",
            StatKind::Counter,
            c.empty_evictions,
        ),
        stat(
            "deferred_evictions_total",
            "Evictions that left their block waiting in the eviction cache because its \
             partition held as many blocks as it may.",
            StatKind::Counter,
            c.deferred,
        ),
        stat(
            "partition_stash_blocks",
            "Blocks in the partitions' own stashes now, all partitions.",
            StatKind::Gauge,
            sub_stash,
        ),
        stat(
            "partition_stash_max_blocks",
            "Largest stash of any one partition seen.",
            StatKind::Gauge,
            sub_stash_max,
        ),
    ];
    // A partition's counter named like one of the framework's (a tree
    // engine's `rounds_repeated_total`) stays out: one name, one meaning.
    sub_counters.retain(|c| !s.extra.iter().any(|x| x.name == c.name));
    s.extra.extend(sub_counters);
    s.extra.extend(inner.steps.stats());
    s
}
