//! The engine conformance suite: every engine runs it, with one line in its
//! tests:
//!
//! ```ignore
//! oram_engine::engine_conformance!(MySubject);
//! ```
//!
//! where `MySubject` implements [`Subject`] (how to build the engine, and what it
//! claims). The macro makes one `#[test]` per check. Everything is real — the
//! memory and fs stores, real sealing, the redb state database on disk — except
//! [`HoldStore`], which produces the failures a real store cannot produce on
//! demand, and [`oram_blockstore::Recording`], which records what the provider
//! sees.
//!
//! The checks: a model test against a `HashMap` (batches with repeated blocks,
//! takes and dummies, wide block ids, concurrent callers, bad ops); crashes with
//! backend writes in flight (the journal, or the intent record) and between a
//! round's reads and its commit (the intent record); a failed commit; tampering (flipped, swapped, replayed,
//! deleted, truncated objects); replay of a lost timeline after a restore (the
//! generation); a block missing from where the state says; trace shape and
//! position uniformity over very different workloads, also with a failed request
//! in the middle, and the repetition of a failed round; quiesce, check, sweep and
//! checkpoint slots; format (only never-written positions, once); a failing
//! backend; bounded write-backs; staged accesses; callers sharing calls
//! through [`crate::Combined`] (their own answers, failures alone, shapes and
//! positions independent of the workload).
//! Engines that are not oblivious ([`Subject::oblivious`] false) must *fail* the
//! trace checks: the negative control that shows those checks can fail.
//!
//! Growth: [`GrownSubject`] runs every check on a grown volume (one line per engine
//! that grows), and [`crate::engine_growth!`] checks the growth itself (`grow.rs`).
//!
//! One file per concern: `model.rs`, `tamper.rs`, `crash.rs` (a durable state),
//! `traces.rs`, `ahead.rs` (reading ahead), `maintenance.rs`, `backend.rs` (a
//! failing or hanging backend), `staged.rs` (staged accesses and inserts) and
//! `shared.rs` (shared calls).

mod ahead;
mod backend;
mod crash;
mod grow;
mod hold;
mod inflight;
mod maintenance;
mod model;
mod shared;
mod staged;
mod tamper;
mod traces;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey, Recording, TraceEvent, Verb};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{MemState, TrustedState};
use oram_store_memory::MemoryStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use ahead::*;
pub use backend::*;
pub use crash::*;
pub use grow::*;
pub use hold::{HoldStore, Seen};
pub use inflight::*;
pub use maintenance::*;
pub use model::*;
pub use shared::*;
pub use staged::*;
pub use tamper::*;
pub use traces::*;

use crate::{Op, Oram, Parts};

/// The size and randomness of an engine under test.
#[derive(Clone, Debug)]
pub struct Params {
    /// Blocks the engine has room for.
    pub capacity: u64,
    /// Block ids are `0..id_limit` (`None`: the capacity).
    pub id_limit: Option<u64>,
    /// Bytes per block.
    pub block_size: usize,
    /// Most ops per round.
    pub max_batch: usize,
    /// Tree levels kept locally (engines without a tree ignore it).
    pub cached_levels: u32,
    /// Rounds of write-backs pending at once.
    pub max_inflight_writebacks: usize,
    /// The seed of the engine's random choices.
    pub seed: [u8; 32],
    /// Backend key prefix.
    pub prefix: String,
    /// Attempts of a round the backend interrupted within one access (engines
    /// without rounds ignore it). The suite's default is 1, so that a failure a
    /// check injects reaches the caller; `a_failed_round_is_finished_within_the_access`
    /// sets more.
    pub round_attempts: u32,
    /// Most superseded objects a round deletes (engines that collect them; see
    /// [`crate::Oram::collect`]).
    pub collect_batch: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            capacity: 256,
            id_limit: None,
            block_size: 64,
            max_batch: 16,
            cached_levels: 2,
            max_inflight_writebacks: 4,
            seed: [7; 32],
            prefix: "vol0".into(),
            round_attempts: 1,
            collect_batch: 1000,
        }
    }
}

/// An engine under test: how to build it and what it claims.
pub trait Subject: Send + Sync + 'static {
    /// Builds the engine for `p` from `parts`.
    fn engine(&self, p: &Params, parts: Parts) -> Arc<dyn Oram>;

    /// Builds the engine for `p` over `store`, sealing with `sealer`, with its
    /// trusted state in `state`.
    fn build(
        &self,
        p: &Params,
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        state: Box<dyn TrustedState>,
    ) -> Arc<dyn Oram> {
        let parts = Parts {
            store,
            sealer,
            state,
        };
        self.engine(p, parts)
    }

    /// Whether the engine is oblivious: its traces must pass the trace checks
    /// (`true`) or fail them (`false`, a negative control).
    fn oblivious(&self) -> bool;

    /// What one access (of one op) reveals for the uniformity test: bin indices
    /// below [`Subject::bins`] (tree engines: the leaves read; `direct`: the
    /// block).
    fn positions(&self, p: &Params, access: &[TraceEvent]) -> Vec<u64>;

    /// Number of bins of [`Subject::positions`].
    fn bins(&self, p: &Params) -> u64;

    /// For a tree engine, its number of leaves (`None`: no tree, no positions).
    fn leaves(&self, p: &Params) -> Option<u64>;

    /// For a tree engine, the children per inner node (2 unless said).
    fn arity(&self) -> u64 {
        2
    }

    /// Whether [`a_block_missing_from_where_the_state_says_is_an_integrity_error`]
    /// applies: the engine's space 0 places blocks in its tree. (A partition
    /// framework's space 0 is its map of partitions; each partition's engine
    /// runs that check itself.)
    fn places_blocks_in_its_space(&self) -> bool {
        true
    }

    /// Whether every round of a write sends PUTs (a partition framework over
    /// Ring ORAM: a partition's round writes only when its eviction is due).
    fn every_write_puts(&self) -> bool {
        true
    }

    /// Whether a round of reads is answered before its PUTs land (an engine that
    /// does not, answers every round once its writes and commit are durable).
    fn answers_reads_early(&self) -> bool {
        true
    }

    /// Whether the engine offers [`crate::Oram::access_staged`] (a partition
    /// framework, which stages its partitions' accesses itself, need not).
    fn stages(&self) -> bool {
        true
    }

    /// For a tree engine, how many trees of [`Subject::leaves`] leaves it keeps
    /// under its prefix (a partition framework: one per partition).
    fn trees(&self) -> u64 {
        1
    }

    /// Whether writes go back to the backend in the background (answers first).
    fn writes_back(&self) -> bool;

    /// Whether the engine takes block ids beyond its capacity ([`Params::id_limit`]).
    fn wide_ids(&self) -> bool;

    /// Whether a round's requests go out in dependent phases (a hierarchical
    /// partition: an access's reads, then the level it builds, then the next
    /// access's reads of that level): a failed request ends its partition's part
    /// of the round before the later phases, and the repeat runs them all in
    /// order, so the failure checks compare what was fetched as multisets (the
    /// failed attempt's requests are all in the repeat), not as prefixes.
    fn rounds_run_in_phases(&self) -> bool {
        false
    }

    /// Whether a repeated round writes its objects again with the same contents
    /// under the same identity (ObliviStore: a level rebuilt from the same
    /// blocks under the same permutation, a function of the level's identity),
    /// so that an object of the interrupted attempt put back is as good as the
    /// repeat's: it must read correctly, not fail. Otherwise (tree engines: the
    /// repeat writes other contents) it must fail as an integrity error.
    fn repeats_write_the_same(&self) -> bool {
        false
    }

    /// Whether the engine deletes the objects it superseded once a checkpoint
    /// has landed ([`crate::Oram::collect`]): then a landed checkpoint and a
    /// collect leave nothing to sweep.
    fn collects(&self) -> bool {
        false
    }

    /// Whether a round may send its reads while the round before it — a round of
    /// reads, answered — is still writing and committing (the checks in
    /// `ahead.rs`).
    fn reads_ahead(&self) -> bool {
        false
    }

    /// Whether a round plans and reads while the round before it — of reads
    /// or writes — is still writing and committing (the partition framework;
    /// the checks in `inflight.rs`).
    fn rounds_in_flight(&self) -> bool {
        false
    }
}

/// Generates one `#[test]` per conformance check for a [`Subject`].
#[macro_export]
macro_rules! engine_conformance {
    ($subject:expr) => {
        mod engine_conformance {
            #[allow(unused_imports)]
            use super::*;
            fn subject() -> ::std::sync::Arc<dyn $crate::conformance::Subject> {
                ::std::sync::Arc::new($subject)
            }
            $crate::engine_conformance!(@tests
                model_matches_a_hashmap,
                concurrent_callers_see_their_own_writes,
                bad_ops_are_refused_without_effect,
                an_insert_is_no_access_of_its_own,
                loses_nothing_when_it_dies_with_write_backs_in_flight,
                a_crash_between_reads_and_commit_repeats_the_same_reads,
                a_failed_read_is_repeated_as_the_same_access,
                a_failed_round_is_finished_within_the_access,
                a_failed_commit_fails_cleanly_and_a_restart_loses_nothing,
                tampering_is_an_integrity_error_never_wrong_data,
                a_replay_from_a_lost_timeline_is_an_integrity_error,
                late_writes_of_a_replaced_process_overwrite_nothing,
                a_block_missing_from_where_the_state_says_is_an_integrity_error,
                traces_do_not_depend_on_the_workload,
                quiesce_check_and_sweep,
                format_writes_what_was_never_written_and_only_once,
                writes_after_a_checkpoint_spare_its_objects,
                superseded_objects_go_once_a_checkpoint_landed,
                superseded_deletes_follow_from_what_the_server_saw,
                a_failing_backend_fails_cleanly_and_loses_nothing,
                write_backs_are_bounded_and_answers_do_not_wait_for_them,
                an_interrupted_attempts_objects_never_open_as_current,
                staged_accesses_commit_together_or_not_at_all,
                a_round_reads_ahead_only_of_a_round_of_reads,
                a_failed_round_repeats_the_round_that_read_ahead_of_it,
                a_crash_while_reading_ahead_repeats_both_rounds,
                a_failed_round_fails_the_round_in_flight_after_it,
                a_crash_with_two_rounds_in_flight_repeats_both,
                reading_ahead_does_not_depend_on_the_blocks,
                a_caller_that_goes_away_leaves_no_round_half_done,
                callers_waiting_at_once_share_calls_and_get_their_own_answers,
                a_refused_request_in_a_shared_call_fails_alone,
                a_shared_call_the_backend_fails_fails_each_request_and_loses_nothing,
                callers_arriving_while_a_round_reads_share_the_next_call,
                shared_calls_do_not_depend_on_the_workload
            );
        }
    };
    (@tests $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::$name(subject());
            }
        )*
    };
}

/// A sealer with a fixed test key.
pub fn test_sealer() -> Arc<Sealer> {
    Arc::new(Sealer::new(
        &MasterKey::from_bytes([42u8; 32]),
        VolumeId([3u8; 16]),
    ))
}

/// A block of `size` bytes whose content identifies `(block, version)`.
pub fn block_data(block: u64, version: u64, size: usize) -> Bytes {
    let seed =
        block.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (0..size)
        .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// A multi-threaded runtime (two workers), as the proxy runs engines.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The engine's model: what each block holds.
pub type Model = HashMap<u64, Bytes>;

/// Runs `rounds` random batches (1..=`max_batch` ops over ids below `ids`, with
/// repeated blocks, takes and dummies) against `engine` and `model`, checking
/// every answer; returns the number of ops.
pub async fn run_model(
    engine: &dyn Oram,
    model: &mut Model,
    ids: u64,
    rounds: usize,
    max_batch: usize,
    seed: u64,
) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let bs = engine.block_size();
    let zeros = Bytes::from(vec![0; bs]);
    let mut version = seed << 32;
    let mut total = 0;
    for r in 0..rounds {
        let n = rng.gen_range(1..=max_batch);
        // A small hot set makes repeated blocks within a batch common.
        let hot = rng.gen_bool(0.3);
        let mut ops = Vec::with_capacity(n);
        // Which blocks are held after the ops so far (an insert needs one that is not).
        let mut held: std::collections::HashSet<u64> = model.keys().copied().collect();
        for _ in 0..n {
            let b = if hot {
                rng.gen_range(0..ids.min(4))
            } else {
                rng.gen_range(0..ids)
            };
            ops.push(match rng.gen_range(0..21) {
                0..=8 => Op::Read(b),
                9..=17 => {
                    version += 1;
                    held.insert(b);
                    Op::Write(b, block_data(b, version, bs))
                }
                18 => {
                    held.remove(&b);
                    Op::Take(b)
                }
                19 if !held.contains(&b) => {
                    version += 1;
                    held.insert(b);
                    Op::Insert(b, block_data(b, version, bs))
                }
                _ => Op::Dummy,
            });
        }
        let results = engine.access(ops.clone()).await.expect("access failed");
        assert_eq!(results.len(), ops.len());
        for (op, got) in ops.into_iter().zip(results) {
            match op {
                Op::Read(b) => {
                    let want = model.get(&b).unwrap_or(&zeros);
                    assert!(got == *want, "round {r}: block {b} read wrong data");
                }
                Op::Write(b, d) | Op::Insert(b, d) => {
                    assert!(got.is_empty());
                    model.insert(b, d);
                }
                Op::Take(b) => {
                    let want = model.remove(&b).unwrap_or_else(|| zeros.clone());
                    assert!(got == want, "round {r}: block {b} taken with wrong data");
                }
                Op::Dummy => assert!(got.is_empty()),
            }
        }
        total += n;
        if r % 97 == 0 {
            engine.flush().await.expect("flush");
        }
    }
    total
}

/// Reads every block below `ids` back, in batches, and compares with `model`.
pub async fn read_back(engine: &dyn Oram, model: &Model, ids: u64, batch: usize) {
    let zeros = Bytes::from(vec![0; engine.block_size()]);
    let all: Vec<u64> = (0..ids).collect();
    for chunk in all.chunks(batch.max(1)) {
        let got = engine
            .access(chunk.iter().map(|&b| Op::Read(b)).collect())
            .await
            .expect("read back");
        for (&b, g) in chunk.iter().zip(got) {
            assert!(
                g == *model.get(&b).unwrap_or(&zeros),
                "block {b} read back wrong"
            );
        }
    }
}

/// The model test over all of `engine`'s ids: [`run_model`], a flush, then
/// [`read_back`]; returns the number of ops.
pub async fn model_and_read_back(
    engine: &dyn Oram,
    rounds: usize,
    max_batch: usize,
    seed: u64,
) -> usize {
    let mut m = Model::new();
    let ids = engine.capacity();
    let n = run_model(engine, &mut m, ids, rounds, max_batch, seed).await;
    engine.flush().await.expect("flush");
    read_back(engine, &m, ids, max_batch).await;
    n
}

/// Writes 16 blocks 7 ids apart (blocks of 16 bytes) in one batch through
/// `engine`, flushes, and returns what `rec` saw meanwhile (its trace is emptied
/// first): the trace of one batch, for tests of its round trips.
pub async fn trace_of_one_batch<S>(
    engine: &dyn Oram,
    rec: &oram_blockstore::Recording<S>,
) -> Vec<TraceEvent> {
    rec.take_trace();
    let ops: Vec<Op> = (0..16)
        .map(|b| Op::Write(b * 7, block_data(b, 1, 16)))
        .collect();
    engine.access(ops).await.expect("access");
    engine.flush().await.expect("flush");
    rec.take_trace()
}

/// Makes `n` accesses of one op each, `w(i)` the `i`-th, through `engine`, each
/// flushed (a round of reads may be answered before its writes land), and
/// returns what `rec` saw of each (its trace is emptied first).
pub async fn trace_of_each_access<S>(
    engine: &dyn Oram,
    rec: &oram_blockstore::Recording<S>,
    w: &dyn Fn(usize) -> Op,
    n: usize,
) -> Vec<Vec<TraceEvent>> {
    rec.take_trace();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        engine.access(vec![w(i)]).await.expect("access");
        engine.flush().await.expect("flush");
        out.push(rec.take_trace());
    }
    out
}

/// The position a backend key names: the number in its last path segment
/// before any `.<slot>` (`vol0/n/17.1` → 17).
pub fn key_position(key: &str) -> Option<u64> {
    key.rsplit('/').next()?.split('.').next()?.parse().ok()
}

/// Writes `blocks` (version `version`), one access each, and flushes.
pub async fn fill(engine: &dyn Oram, model: &mut Model, blocks: Range<u64>, version: u64) {
    let bs = engine.block_size();
    for b in blocks {
        let d = block_data(b, version, bs);
        engine
            .access(vec![Op::Write(b, d.clone())])
            .await
            .expect("fill");
        model.insert(b, d);
    }
    engine.flush().await.expect("flush after fill");
}

/// The chi-square statistic of `counts` against a uniform distribution.
pub fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// The critical value of the chi-square distribution with `df` degrees of freedom
/// at significance 0.001 (Wilson–Hilferty approximation, within 1% for df ≥ 10).
pub fn chi_square_critical_001(df: u64) -> f64 {
    let df = df.max(1) as f64;
    let z = 3.090_232; // standard normal quantile of 0.999
    let t = 2.0 / (9.0 * df);
    df * (1.0 - t + z * t.sqrt()).powi(3)
}

/// A named workload: the op of the `i`-th access.
pub type Workload = (&'static str, Box<dyn Fn(usize) -> Op>);

/// The five workloads the trace checks compare, over blocks `0..capacity` of
/// `block_size` bytes: one block read over and over, the same written, a scan
/// read, a scan written, and `accesses` uniformly random reads and writes (from
/// `seed`).
pub fn workloads(capacity: u64, block_size: usize, accesses: usize, seed: u64) -> Vec<Workload> {
    let (cap, bs) = (capacity, block_size);
    let random: Vec<Op> = {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..accesses)
            .map(|i| {
                let b = rng.gen_range(0..cap);
                if rng.gen_bool(0.5) {
                    Op::Read(b)
                } else {
                    Op::Write(b, block_data(b, i as u64, bs))
                }
            })
            .collect()
    };
    vec![
        ("same block, reads", Box::new(|_| Op::Read(5))),
        (
            "same block, writes",
            Box::new(move |i| Op::Write(5, block_data(5, i as u64, bs))),
        ),
        (
            "sequential scan",
            Box::new(move |i| Op::Read(i as u64 % cap)),
        ),
        (
            "sequential writes",
            Box::new(move |i| Op::Write(i as u64 % cap, block_data(0, i as u64, bs))),
        ),
        ("uniform random", Box::new(move |i| random[i].clone())),
    ]
}

/// What the provider sees of an access without keys: per request, verb, size
/// and range length, sorted.
pub fn shape_of(access: &[TraceEvent]) -> Vec<(Verb, u64, u64)> {
    let mut v: Vec<(Verb, u64, u64)> = access
        .iter()
        .map(|e| {
            let len = e.range.as_ref().map_or(0, |r| r.end - r.start);
            (e.verb, e.size, len)
        })
        .collect();
    v.sort_unstable();
    v
}

/// The fetch requests (GETs and ranged GETs) of a trace, in the order they
/// went out.
pub fn fetch_events(trace: &[TraceEvent]) -> Vec<TraceEvent> {
    trace
        .iter()
        .filter(|e| matches!(e.verb, Verb::Get | Verb::GetRange))
        .cloned()
        .collect()
}

/// The fetch requests of a trace (verb, key, range), sorted.
pub fn fetches_of(trace: &[TraceEvent]) -> Vec<Seen> {
    sorted_seen(
        fetch_events(trace)
            .into_iter()
            .map(|e| (e.verb, e.key, e.range))
            .collect(),
    )
}

/// Whether every request of `needles` is in `haystack`, as often (multisets).
pub fn contains_all(haystack: &[Seen], needles: &[Seen]) -> bool {
    let mut left: HashMap<&Seen, usize> = HashMap::new();
    for h in haystack {
        *left.entry(h).or_default() += 1;
    }
    needles.iter().all(|n| match left.get_mut(n) {
        Some(c) if *c > 0 => {
            *c -= 1;
            true
        }
        _ => false,
    })
}

/// A recording of a memory store that can fail or hold requests: what the
/// provider sees, with faults on demand.
pub type Recorded = Recording<Arc<HoldStore<MemoryStore>>>;

/// `s`'s engine for `p` over a [`Recorded`] store, its trusted state in memory;
/// with the fault injector and the recording.
pub fn recorded_engine(
    s: &dyn Subject,
    p: &Params,
) -> (Arc<HoldStore<MemoryStore>>, Arc<Recorded>, Arc<dyn Oram>) {
    let faults = Arc::new(HoldStore::new(MemoryStore::new()));
    let rec = Arc::new(Recording::new(faults.clone()));
    let e = s.build(p, rec.clone(), test_sealer(), Box::new(MemState::new()));
    (faults, rec, e)
}

/// `s`'s engine for `p` over `store`, its trusted state in memory.
fn mem_engine(s: &dyn Subject, p: &Params, store: Arc<dyn BlockStore>) -> Arc<dyn Oram> {
    s.build(p, store, test_sealer(), Box::new(MemState::new()))
}

/// Every object stored under `prefix`, with its contents, in key order.
async fn snapshot(store: &MemoryStore, prefix: &str) -> Vec<(ObjKey, Bytes)> {
    let keys = store.list(prefix).await.unwrap();
    let vals = store.get_many(&keys).await.unwrap();
    keys.into_iter()
        .zip(vals)
        .map(|(k, v)| (k, v.expect("listed")))
        .collect()
}

/// Fetch requests sorted by verb, key and range start.
pub fn sorted_seen(mut v: Vec<Seen>) -> Vec<Seen> {
    v.sort_by(|a, b| {
        (a.0, &a.1, a.2.as_ref().map(|r| r.start)).cmp(&(b.0, &b.1, b.2.as_ref().map(|r| r.start)))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi_square_helpers() {
        assert_eq!(chi_square(&[10, 10, 10, 10]), 0.0);
        assert_eq!(chi_square(&[20, 0, 10, 10]), 20.0);
        // Tabulated: df = 10 → 29.59, df = 100 → 149.45 at p = 0.001.
        assert!((chi_square_critical_001(10) - 29.59).abs() < 0.3);
        assert!((chi_square_critical_001(100) - 149.45).abs() < 0.5);
    }
}
