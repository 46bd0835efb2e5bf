//! Obliviousness: what the provider sees must not depend on the logical
//! workload, also when a request fails.

use std::collections::BTreeMap;
use std::sync::Arc;

use oram_blockstore::{Recording, TraceEvent};
use oram_state::MemState;
use oram_store_memory::MemoryStore;

use super::*;

const ACCESSES: usize = 2000;

/// Formats, fills every block, then records the workload one access at a time
/// (each flushed, so the order of requests is stable). In the middle, one
/// access's first request fails; the access is then tried again, as a client
/// would.
async fn record(s: &dyn Subject, p: &Params, w: &dyn Fn(usize) -> Op) -> Vec<Vec<TraceEvent>> {
    let (faults, rec, e) = recorded_engine(s, p);
    e.format(&|_, _| {}).await.unwrap();
    let mut model = Model::new();
    fill(e.as_ref(), &mut model, 0..p.capacity, 0).await;
    rec.take_trace();
    let mut accesses = Vec::with_capacity(ACCESSES + 1);
    for i in 0..ACCESSES {
        if i == ACCESSES / 2 {
            faults.fail_next_fetches(1);
            assert!(
                e.access(vec![w(i)]).await.is_err(),
                "the failure was not seen"
            );
            accesses.push(rec.take_trace());
        }
        e.access(vec![w(i)]).await.unwrap();
        e.flush().await.unwrap();
        accesses.push(rec.take_trace());
    }
    accesses
}

/// A verdict on a set of traces.
pub(super) struct Verdict {
    /// Chi-square of the access shapes' homogeneity across workloads, and its
    /// critical value.
    pub(super) shapes: (f64, f64),
    /// Per workload, chi-square of the positions' uniformity.
    pub(super) positions: Vec<(&'static str, f64)>,
    /// The critical value of the positions' chi-square.
    pub(super) critical: f64,
}

impl Verdict {
    fn oblivious(&self) -> bool {
        self.shapes.0 <= self.shapes.1 && self.positions.iter().all(|(_, c)| *c < self.critical)
    }
}

/// Chi-square test of homogeneity of the shape histograms (rows: workloads),
/// shapes rarer than 5 per workload pooled; `(statistic, critical value)`.
/// How often each access shape occurred in one workload.
type ShapeCounts = BTreeMap<Vec<(oram_blockstore::Verb, u64, u64)>, u64>;

fn homogeneity(rows: &[ShapeCounts]) -> (f64, f64) {
    let mut totals: BTreeMap<&Vec<_>, u64> = BTreeMap::new();
    for r in rows {
        for (k, v) in r {
            *totals.entry(k).or_default() += v;
        }
    }
    let common: Vec<&Vec<_>> = totals
        .iter()
        .filter(|(_, &n)| n >= 5 * rows.len() as u64)
        .map(|(k, _)| *k)
        .collect();
    // Columns: the common shapes, then everything else pooled.
    let table: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| {
            let mut row: Vec<f64> = common
                .iter()
                .map(|k| *r.get(*k).unwrap_or(&0) as f64)
                .collect();
            let rest: u64 = r
                .iter()
                .filter(|(k, _)| !common.contains(k))
                .map(|(_, v)| v)
                .sum();
            row.push(rest as f64);
            row
        })
        .collect();
    let cols = table[0].len();
    let col_sum: Vec<f64> = (0..cols)
        .map(|c| table.iter().map(|r| r[c]).sum())
        .collect();
    let grand: f64 = col_sum.iter().sum();
    let mut chi = 0.0;
    let mut used = 0usize;
    for (c, &cs) in col_sum.iter().enumerate() {
        if cs == 0.0 {
            continue;
        }
        used += 1;
        for r in &table {
            let row_sum: f64 = r.iter().sum();
            let e = row_sum * cs / grand;
            chi += (r[c] - e).powi(2) / e;
        }
    }
    let df = ((rows.len() - 1) * used.max(1).saturating_sub(1)) as u64;
    if df == 0 {
        return (chi, 0.0);
    }
    (chi, chi_square_critical_001(df))
}

/// The shapes' homogeneity and each workload's positions' uniformity.
pub(super) fn judge(
    s: &dyn Subject,
    p: &Params,
    traces: &[(&'static str, Vec<Vec<TraceEvent>>)],
) -> Verdict {
    let rows: Vec<ShapeCounts> = traces
        .iter()
        .map(|(_, t)| {
            let mut h = BTreeMap::new();
            for a in t {
                *h.entry(shape_of(a)).or_default() += 1;
            }
            h
        })
        .collect();
    let bins = s.bins(p);
    let positions = traces
        .iter()
        .map(|(name, t)| {
            let mut counts = vec![0u64; bins as usize];
            for a in t {
                for x in s.positions(p, a) {
                    counts[x as usize] += 1;
                }
            }
            (*name, chi_square(&counts))
        })
        .collect();
    Verdict {
        shapes: homogeneity(&rows),
        positions,
        critical: chi_square_critical_001(bins - 1),
    }
}

/// Five workloads of equal length — one block read over and over, one block
/// written over and over, a sequential scan, sequential writes, uniform random
/// reads and writes — with one failed request in the middle: the shapes of the
/// accesses (verbs, sizes, range lengths) must be distributed alike (chi-square
/// test of homogeneity) and the positions read uniform (chi-square, significance
/// 0.001; seeds are fixed, so the outcome is reproducible). An engine that is not
/// oblivious must fail.
pub fn traces_do_not_depend_on_the_workload(s: Arc<dyn Subject>) {
    let p = Params {
        capacity: 256,
        block_size: 32,
        max_batch: 1,
        seed: [77; 32],
        ..Params::default()
    };
    runtime().block_on(async {
        let mut traces = Vec::new();
        for (name, w) in workloads(p.capacity, p.block_size, ACCESSES, 5) {
            traces.push((name, record(s.as_ref(), &p, &*w).await));
        }
        let v = judge(s.as_ref(), &p, &traces);
        println!(
            "shapes: chi-square {:.1} (critical {:.1}); positions (critical {:.1}): {:?}",
            v.shapes.0, v.shapes.1, v.critical, v.positions
        );
        if s.oblivious() {
            assert!(
                v.shapes.0 <= v.shapes.1,
                "access shapes depend on the workload"
            );
            for (name, c) in &v.positions {
                assert!(*c < v.critical, "{name}: positions not uniform ({c:.1})");
            }
        } else {
            assert!(
                !v.oblivious(),
                "the negative control passed: the check cannot fail"
            );
            assert!(
                v.positions[0].1 > 100.0 * v.critical,
                "one block over and over looks uniform"
            );
        }
    });
}

/// A round whose request fails is repeated first, exactly (the same requests,
/// whatever the next access asks for); the next access's own round reads fresh
/// positions. Oblivious engines only.
pub fn a_failed_read_is_repeated_as_the_same_access(s: Arc<dyn Subject>) {
    if !s.oblivious() {
        return;
    }
    const TRIALS: u64 = 16;
    runtime().block_on(async {
        let mut same_path = 0;
        for t in 0..TRIALS {
            let p = Params {
                capacity: 128,
                block_size: 32,
                max_batch: 4,
                cached_levels: 1,
                seed: [t as u8 + 1; 32],
                ..Params::default()
            };
            let (faults, rec, e) = recorded_engine(s.as_ref(), &p);
            let mut model = Model::new();
            fill(e.as_ref(), &mut model, 0..64, 1).await;
            rec.take_trace();
            // One stored block and one never written, in one round.
            let (x, y) = (t % 64, 100 + t);
            faults.fail_next_fetches(1);
            let err = e.access(vec![Op::Read(x), Op::Read(y)]).await.unwrap_err();
            assert!(matches!(err, crate::OramError::Store(_)), "{err}");
            let failed = fetches_of(&rec.take_trace());
            assert!(!failed.is_empty());
            // Retried as it was (even trials), or something else entirely.
            let next = if t % 2 == 0 {
                vec![Op::Read(x), Op::Read(y)]
            } else {
                vec![
                    Op::Read((x + 32) % 64),
                    Op::Write(110, block_data(110, 1, 32)),
                ]
            };
            let got = e.access(next.clone()).await.unwrap();
            if let Op::Read(b) = next[0] {
                assert_eq!(got[0], model[&b]);
            }
            e.flush().await.unwrap();
            let trace = rec.take_trace();
            let fetches: Vec<&TraceEvent> = trace
                .iter()
                .filter(|e| {
                    matches!(
                        e.verb,
                        oram_blockstore::Verb::Get | oram_blockstore::Verb::GetRange
                    )
                })
                .collect();
            assert!(
                fetches.len() > failed.len(),
                "trial {t}: the access read nothing of its own"
            );
            if s.rounds_run_in_phases() {
                // The failed attempt stopped its partition at the failed
                // request; the repeat sends every one of its requests again.
                let all: Vec<TraceEvent> = fetches.iter().map(|e| (*e).clone()).collect();
                assert!(
                    contains_all(&fetches_of(&all), &failed),
                    "trial {t}: the failed round was not repeated: {failed:?} not all in {:?}",
                    fetches_of(&all)
                );
                assert_eq!(e.stats().extra("rounds_repeated_total"), Some(1));
                continue;
            }
            let (repeat, own) = fetches.split_at(failed.len());
            let repeat: Vec<TraceEvent> = repeat.iter().map(|e| (*e).clone()).collect();
            assert_eq!(
                fetches_of(&repeat),
                failed,
                "trial {t}: the failed round was not repeated exactly"
            );
            assert_eq!(e.stats().extra("rounds_repeated_total"), Some(1));
            let keys = |v: &[Seen]| {
                v.iter()
                    .map(|r| r.1.clone())
                    .collect::<std::collections::BTreeSet<_>>()
            };
            let own: Vec<TraceEvent> = own.iter().map(|e| (*e).clone()).collect();
            if keys(&fetches_of(&own)) == keys(&failed) {
                same_path += 1;
            }
        }
        // The access's own round, after the repeat, reads the failed paths again
        // only by chance (both leaves drawn again), never because of the failure.
        assert!(
            same_path <= TRIALS / 4,
            "{same_path} of {TRIALS} retries read the failed paths again"
        );
    });
}

/// With `round_attempts` above one, an access whose round the backend
/// interrupts still succeeds: the interrupted round is finished as the same
/// access (the same requests again), then the access's own round is drawn
/// afresh — what a client's retry of the request would show the server.
/// Checked against a twin engine (same seed, same history) that sees no failure:
/// its round is the one the failed attempt sent, twice.
pub fn a_failed_round_is_finished_within_the_access(s: Arc<dyn Subject>) {
    if !s.oblivious() {
        return;
    }
    runtime().block_on(async {
        for t in 0..4u64 {
            let p = Params {
                capacity: 128,
                block_size: 32,
                max_batch: 4,
                cached_levels: 1,
                seed: [t as u8 + 40; 32],
                round_attempts: 3,
                ..Params::default()
            };
            // One stored block and one never written, in one round.
            let (x, y) = (t % 64, 100 + t);
            let ops = vec![Op::Read(x), Op::Read(y)];

            let twin_rec = Arc::new(Recording::new(MemoryStore::new()));
            let twin = s.build(
                &p,
                twin_rec.clone(),
                test_sealer(),
                Box::new(MemState::new()),
            );
            fill(twin.as_ref(), &mut Model::new(), 0..64, 1).await;
            twin_rec.take_trace();
            twin.access(ops.clone()).await.unwrap();
            let drawn = fetches_of(&twin_rec.take_trace());
            assert!(!drawn.is_empty());

            let (faults, rec, e) = recorded_engine(s.as_ref(), &p);
            let mut model = Model::new();
            fill(e.as_ref(), &mut model, 0..64, 1).await;
            rec.take_trace();
            faults.fail_next_fetches(1);
            let got = e
                .access(ops.clone())
                .await
                .unwrap_or_else(|err| panic!("trial {t}: the access failed: {err}"));
            assert_eq!(got[0], model[&x], "trial {t}: wrong data");
            let fetched: Vec<TraceEvent> = rec
                .take_trace()
                .into_iter()
                .filter(|e| {
                    matches!(
                        e.verb,
                        oram_blockstore::Verb::Get | oram_blockstore::Verb::GetRange
                    )
                })
                .collect();
            let n = drawn.len();
            if s.rounds_run_in_phases() {
                // The failed attempt is part of the round drawn, then the
                // round drawn is sent whole (and then the access's own).
                let all = fetches_of(&fetched);
                assert!(
                    fetched.len() > n && contains_all(&all, &drawn),
                    "trial {t}: the round drawn {drawn:?} was not sent again whole: {all:?}"
                );
                assert_eq!(e.stats().extra("rounds_repeated_total"), Some(1));
                continue;
            }
            assert!(
                fetched.len() > 2 * n,
                "trial {t}: {} fetches, expected the failed round and its repeat ({n} each) \
                 and the access's own round: {:?} (the round drawn: {drawn:?})",
                fetched.len(),
                fetches_of(&fetched)
            );
            assert_eq!(
                fetches_of(&fetched[..n]),
                drawn,
                "trial {t}: the failed attempt is not the round the twin drew"
            );
            assert_eq!(
                fetches_of(&fetched[n..2 * n]),
                drawn,
                "trial {t}: the interrupted round was not finished as the same access"
            );
            assert_eq!(e.stats().extra("rounds_repeated_total"), Some(1));
        }
    });
}
