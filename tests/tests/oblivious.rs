//! Obliviousness: what the storage server sees must not depend on the logical
//! workload. Five workloads of equal length — one block read over and over, one
//! block written over and over, a sequential scan, sequential writes, uniform random
//! reads and writes — are recorded with the `Recording` wrapper. The traces must
//! have identical shape (calls, verbs, sizes, ranges) and the leaves they read must
//! pass a chi-square test for uniformity.
//!
//! Threshold: significance 0.001 (critical value from `chi_square_critical_001`,
//! df = leaves − 1). Seeds are fixed, so the outcome is reproducible; with a correct
//! engine a failure would be a 1-in-1000 event for each workload and seed.
//!
//! The same checks run on the `direct` engine must fail, showing the test can fail.

use std::collections::BTreeSet;
use std::sync::Arc;

use oram_blockstore::{Recording, TraceEvent, Verb};
use oram_direct::DirectConfig;
use oram_engine::{Op, Oram};
use oram_path::{Geometry, PathConfig, PathOram};
use oram_store_memory::MemoryStore;
use oram_tests::{
    block_data, chi_square, chi_square_critical_001, direct_engine, path_oram, shape_of, Shape,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CAP: u64 = 256;
const BS: usize = 32;
const ACCESSES: usize = 3000;
const BINS: u64 = 128;

type Workload = (&'static str, Box<dyn Fn(usize) -> Op>);

fn workloads() -> Vec<Workload> {
    let random: Vec<Op> = {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        (0..ACCESSES)
            .map(|i| {
                let b = rng.gen_range(0..CAP);
                if rng.gen_bool(0.5) {
                    Op::Read(b)
                } else {
                    Op::Write(b, block_data(b, i as u64, BS))
                }
            })
            .collect()
    };
    vec![
        ("same block, reads", Box::new(|_| Op::Read(5))),
        (
            "same block, writes",
            Box::new(|i| Op::Write(5, block_data(5, i as u64, BS))),
        ),
        ("sequential scan", Box::new(|i| Op::Read(i as u64 % CAP))),
        (
            "sequential writes",
            Box::new(|i| Op::Write(i as u64 % CAP, block_data(0, i as u64, BS))),
        ),
        ("uniform random", Box::new(move |i| random[i].clone())),
    ]
}

/// Fills every block, then records the trace of the workload alone.
async fn record(
    engine: &dyn Oram,
    rec: &Recording<MemoryStore>,
    w: &dyn Fn(usize) -> Op,
) -> Vec<TraceEvent> {
    for b in 0..CAP {
        engine
            .access(vec![Op::Write(b, block_data(b, 0, BS))])
            .await
            .unwrap();
        engine.flush().await.unwrap();
    }
    rec.take_trace();
    for i in 0..ACCESSES {
        engine.access(vec![w(i)]).await.unwrap();
        // Serialise write-backs so that the order of calls in the trace is stable.
        engine.flush().await.unwrap();
    }
    rec.take_trace()
}

struct Verdict {
    same_shape: bool,
    chi2: Vec<(&'static str, f64)>,
    critical: f64,
}

impl Verdict {
    fn uniform(&self) -> bool {
        self.chi2.iter().all(|(_, c)| *c < self.critical)
    }
    fn oblivious(&self) -> bool {
        self.same_shape && self.uniform()
    }
}

/// Compares the traces' shapes and tests the distribution of the positions
/// `position_of` extracts from each backend call (None: the call carries none).
fn judge(
    traces: &[(&'static str, Vec<TraceEvent>)],
    position_of: impl Fn(&[TraceEvent]) -> Option<u64>,
) -> Verdict {
    let shapes: Vec<Shape> = traces.iter().map(|(_, t)| shape_of(t)).collect();
    let same_shape = shapes.iter().all(|s| *s == shapes[0]);
    let chi2 = traces
        .iter()
        .map(|(name, t)| {
            let mut counts = vec![0u64; BINS as usize];
            for call in t.chunk_by(|a, b| a.call == b.call) {
                if let Some(p) = position_of(call) {
                    counts[(p % BINS) as usize] += 1;
                }
            }
            (*name, chi_square(&counts))
        })
        .collect();
    Verdict {
        same_shape,
        chi2,
        critical: chi_square_critical_001(BINS - 1),
    }
}

fn path_cfg() -> PathConfig {
    PathConfig {
        capacity: CAP,
        block_size: BS,
        cached_levels: 2,
        rng_seed: Some([77; 32]),
        ..PathConfig::default()
    }
}

fn node_of(e: &TraceEvent) -> u64 {
    e.key.rsplit('/').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_oram_traces_do_not_depend_on_the_workload() {
    let mut traces = Vec::new();
    let mut geo = None;
    for (name, w) in workloads() {
        let rec = Arc::new(Recording::new(MemoryStore::new()));
        let oram: PathOram = path_oram(rec.clone(), path_cfg());
        // Formatted: every GET finds a full-size bucket, so sizes are workload-free too.
        oram.format().await.unwrap();
        let trace = record(&oram, &rec, &*w).await;
        geo = Some((oram.geometry(), oram.cached_levels()));
        traces.push((name, trace));
    }
    let (geo, cached) = geo.unwrap();
    assert_eq!(geo.leaves, BINS);
    let per_path = (geo.leaf_level + 1 - cached) as usize;

    // Every access: one GET call of a whole uncached path, then one PUT call of the
    // same buckets, all of the same size.
    for (name, t) in &traces {
        let shape = shape_of(t);
        assert_eq!(shape.len(), 2 * ACCESSES, "{name}: calls");
        for (i, call) in shape.iter().enumerate() {
            let verb = if i % 2 == 0 { Verb::Get } else { Verb::Put };
            assert_eq!(call.len(), per_path, "{name}: call {i} size");
            assert!(call
                .iter()
                .all(|(v, size, r)| *v == verb && *size == shape[0][0].1 && r.is_none()));
        }
        let mut calls = t.chunk_by(|a, b| a.call == b.call);
        while let (Some(get), Some(put)) = (calls.next(), calls.next()) {
            let g: BTreeSet<u64> = get.iter().map(node_of).collect();
            let p: BTreeSet<u64> = put.iter().map(node_of).collect();
            assert_eq!(g, p, "{name}: wrote back other buckets than it read");
        }
    }

    let verdict = judge(&traces, |call| {
        (call[0].verb == Verb::Get).then(|| {
            let leaf_node = call.iter().map(node_of).max().unwrap();
            assert_eq!(Geometry::level_of(leaf_node), geo.leaf_level);
            leaf_node - geo.leaves
        })
    });
    for (name, c) in &verdict.chi2 {
        println!(
            "path ORAM, {name}: chi-square {c:.1} (critical {:.1}, df {})",
            verdict.critical,
            BINS - 1
        );
    }
    assert!(verdict.same_shape, "trace shapes differ between workloads");
    assert!(verdict.uniform(), "leaf distribution not uniform");
    assert!(verdict.oblivious());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_test_rejects_the_direct_engine() {
    let mut traces = Vec::new();
    for (name, w) in workloads() {
        let rec = Arc::new(Recording::new(MemoryStore::new()));
        let engine = direct_engine(
            rec.clone(),
            DirectConfig {
                capacity: CAP,
                block_size: BS,
                ..DirectConfig::default()
            },
        );
        traces.push((name, record(&engine, &rec, &*w).await));
    }
    let verdict = judge(&traces, |call| Some(node_of(&call[0])));
    for (name, c) in &verdict.chi2 {
        println!(
            "direct, {name}: chi-square {c:.1} (critical {:.1})",
            verdict.critical
        );
    }
    assert!(
        !verdict.same_shape,
        "reads and writes must look different without ORAM"
    );
    assert!(
        !verdict.uniform(),
        "one block over and over must not look uniform"
    );
    assert!(verdict.chi2[0].1 > 100.0 * verdict.critical);
    assert!(!verdict.oblivious());
}

#[tokio::test]
async fn a_batch_reads_the_union_of_its_paths_once_and_writes_back_once() {
    let rec = Arc::new(Recording::new(MemoryStore::new()));
    let oram = path_oram(
        rec.clone(),
        PathConfig {
            capacity: 1024,
            block_size: 16,
            rng_seed: Some([3; 32]),
            ..PathConfig::default()
        },
    );
    let geo = oram.geometry();
    let ops: Vec<Op> = (0..16)
        .map(|b| Op::Write(b * 7, block_data(b, 1, 16)))
        .collect();
    oram.access(ops).await.unwrap();
    oram.flush().await.unwrap();
    let t = rec.take_trace();
    let calls: Vec<&[TraceEvent]> = t.chunk_by(|a, b| a.call == b.call).collect();
    assert_eq!(calls.len(), 2, "one GET round trip and one PUT round");
    assert!(calls[0].iter().all(|e| e.verb == Verb::Get));
    assert!(calls[1].iter().all(|e| e.verb == Verb::Put));
    let got: BTreeSet<u64> = calls[0].iter().map(node_of).collect();
    let put: BTreeSet<u64> = calls[1].iter().map(node_of).collect();
    assert_eq!(got.len(), calls[0].len(), "a bucket fetched twice");
    assert_eq!(got, put);
    assert!(got.contains(&1), "the root is on every path");
    // 16 random paths share their top: the union is much smaller than 16 full paths.
    assert!(got.len() < 16 * (geo.leaf_level as usize + 1));
    let leaves = got
        .iter()
        .filter(|&&n| Geometry::level_of(n) == geo.leaf_level)
        .count();
    assert!((1..=16).contains(&leaves));
}
