//! Ring ORAM on the memory back-end: backend requests and bytes per access
//! (measured with the `Accounting` wrapper, printed next to the paper's analytical
//! online and overall bandwidth), then accesses per second, for the `small`
//! (Z = 4, S = 6, A = 3) and `large` (Z = 33, S = 63, A = 48) presets, N = 2^14
//! blocks of 4 KiB, tree-top cache of 0 and 6 levels. Path ORAM with the same N,
//! block size and cache is measured alongside for comparison.
//!
//! The table's "blocks" are bytes ÷ one sealed slot (`block + 8 + 45` bytes) for
//! Ring, bytes ÷ (`block + 8 + 45/Z`) for Path; "paper" is the analytical
//! bandwidth of Ren et al. (online: one block per backend level; overall: plus
//! `(2Z+S)(1+ρ)/A` per level, ρ the expected early reshuffles). Ours reads the
//! whole bucket (Z + S slots, one request) to evict it where the paper reads Z
//! slots, hence the higher overall bytes; `EvictRead::Slots` reads Z slots like
//! the paper (Z requests per bucket instead of one).
//!
//! Run: `cargo bench -p oram-benches --bench ring_oram`
//! Fast check (one iteration each, fewer accesses for the table):
//! `cargo bench -p oram-benches --bench ring_oram -- --test`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oram_blockstore::{Accounting, BlockStore};
use oram_engine::{Op, Oram};
use oram_path::{PathConfig, PathOram};
use oram_ring::{paper_bandwidth, EvictRead, RingConfig, RingOram, RingPreset, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::MemState;
use oram_store_memory::MemoryStore;

const N: u64 = 1 << 14;
const BS: usize = 4096;

fn next_block(counter: &AtomicU64) -> u64 {
    counter
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 50
}

fn sealer() -> Arc<Sealer> {
    Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random()))
}

fn ring(
    store: Arc<dyn BlockStore>,
    preset: RingPreset,
    cached: u32,
    evict_read: EvictRead,
) -> RingOram {
    let params = preset.params();
    RingOram::new(
        RingConfig {
            tree: TreeConfig {
                capacity: N,
                block_size: BS,
                cached_levels: cached,
                max_batch: 1,
                stash_bound: RingConfig::default_stash_bound(params, 64),
                ..RingConfig::default().tree
            },
            params,
            evict_read,
        },
        store,
        sealer(),
        Box::new(MemState::new()),
    )
    .unwrap()
}

fn path(store: Arc<dyn BlockStore>, cached: u32) -> PathOram {
    PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity: N,
                block_size: BS,
                cached_levels: cached,
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
        store,
        sealer(),
        Box::new(MemState::new()),
    )
    .unwrap()
}

/// Fills every block, runs `warm` random reads, then measures `n` random reads.
async fn per_access(
    engine: &dyn Oram,
    acc: &Accounting<MemoryStore>,
    warm: u64,
    n: u64,
    fill: bool,
) -> (f64, f64, f64, f64) {
    let data = Bytes::from(vec![7u8; BS]);
    for b in 0..if fill { N } else { 0 } {
        engine
            .access(vec![Op::Write(b, data.clone())])
            .await
            .unwrap();
    }
    let counter = AtomicU64::new(1);
    for _ in 0..warm {
        engine
            .access(vec![Op::Read(next_block(&counter))])
            .await
            .unwrap();
    }
    engine.flush().await.unwrap();
    let before = acc.snapshot();
    for _ in 0..n {
        engine
            .access(vec![Op::Read(next_block(&counter))])
            .await
            .unwrap();
    }
    engine.flush().await.unwrap();
    let d = acc.snapshot().since(&before);
    let n = n as f64;
    (
        d.range_requests as f64 / n,
        d.range_bytes as f64 / n,
        d.total_requests() as f64 / n,
        d.total_bytes() as f64 / n,
    )
}

fn bandwidth_table(rt: &tokio::runtime::Runtime, fast: bool) {
    let (warm, n) = if fast { (2_000, 2_000) } else { (N, 20_000) };
    println!("backend traffic per access, N = {N}, block {BS} B, {n} random reads after {warm}:");
    for cached in [0u32, 6] {
        for (preset, evict_read) in [
            (RingPreset::Small, EvictRead::Whole),
            (RingPreset::Large, EvictRead::Whole),
            (RingPreset::Small, EvictRead::Slots),
            (RingPreset::Large, EvictRead::Slots),
        ] {
            let acc = Arc::new(Accounting::new(MemoryStore::new()));
            let oram = ring(acc.clone(), preset, cached, evict_read);
            // Every bucket written up front: no 404s of never-written buckets in
            // the numbers (a large-Z tree is mostly unwritten after the fill).
            rt.block_on(oram.format(&|_, _| {})).unwrap();
            let lay = oram.scheme().layout();
            let (mut or, mut ob, r, b, evict_buckets) = rt.block_on(async {
                let data = Bytes::from(vec![7u8; BS]);
                for blk in 0..N {
                    oram.access(vec![Op::Write(blk, data.clone())])
                        .await
                        .unwrap();
                }
                // The warm-up here, so that the counters below cover the measured
                // accesses only.
                let counter = AtomicU64::new(7);
                for _ in 0..warm {
                    oram.access(vec![Op::Read(next_block(&counter))])
                        .await
                        .unwrap();
                }
                let before = oram.scheme().ring_stats();
                let (or, ob, r, b) = per_access(&oram, &acc, 0, n, false).await;
                let after = oram.scheme().ring_stats();
                let levels = u64::from(lay.geo.leaf_level + 1 - oram.cached_levels());
                let buckets = (after.evictions - before.evictions) * levels
                    + (after.early_reshuffles - before.early_reshuffles);
                (or, ob, r, b, buckets as f64 / n as f64)
            });
            if evict_read == EvictRead::Slots {
                // Eviction reads are ranged GETs too: Z per bucket read; not online.
                let z = lay.params.z as f64;
                or -= z * evict_buckets;
                ob -= z * evict_buckets * lay.slot_sealed() as f64;
            }
            let levels = lay.geo.leaf_level + 1 - oram.cached_levels();
            let paper = paper_bandwidth(lay.params, levels);
            let slot = lay.slot_sealed() as f64;
            let p = lay.params;
            println!(
                "  ring {:5} {evict_read:5?} Z={:2} S={:2} A={:2} cache {cached}: online {or:5.2} req {:8.0} B ({:5.2} blocks; paper {:5.2}) | overall {r:5.2} req {:9.0} B ({:6.2} blocks; paper {:6.2})",
                preset.name(), p.z, p.s, p.a, ob, ob / slot, paper.online_blocks, b, b / slot, paper.overall_blocks
            );
        }
        let acc = Arc::new(Accounting::new(MemoryStore::new()));
        let oram = path(acc.clone(), cached);
        let (_, _, r, b) = rt.block_on(per_access(&oram, &acc, warm, n, true));
        let levels = oram.geometry().leaf_level + 1 - oram.cached_levels();
        println!(
            "  path              Z= 4             cache {cached}: online = overall {r:5.2} req {b:9.0} B ({:6.2} blocks of {BS} B; analytical {} blocks)",
            b / (BS as f64 + 8.0 + 45.0 / 4.0),
            2 * 4 * levels
        );
    }
}

fn bench_access(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fast = oram_benches::quick_pass();
    bandwidth_table(&rt, fast);
    let mut group = c.benchmark_group("ring_oram_access");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(6));
    group.warm_up_time(Duration::from_secs(1));
    for preset in [RingPreset::Small, RingPreset::Large] {
        let oram = ring(Arc::new(MemoryStore::new()), preset, 6, EvictRead::Whole);
        let data = Bytes::from(vec![7u8; BS]);
        let counter = AtomicU64::new(0);
        rt.block_on(async {
            for _ in 0..if fast { 256 } else { 4096 } {
                oram.access(vec![Op::Write(next_block(&counter), data.clone())])
                    .await
                    .unwrap();
            }
            oram.flush().await.unwrap();
        });
        let id = format!("{}/4KiB/cache6", preset.name());
        group.bench_function(BenchmarkId::new("read", &id), |b| {
            b.to_async(&rt).iter(|| async {
                black_box(
                    oram.access(vec![Op::Read(next_block(&counter))])
                        .await
                        .unwrap(),
                );
            })
        });
        group.bench_function(BenchmarkId::new("write", &id), |b| {
            b.to_async(&rt).iter(|| async {
                oram.access(vec![Op::Write(next_block(&counter), data.clone())])
                    .await
                    .unwrap();
            })
        });
        rt.block_on(oram.flush()).unwrap();
    }
    group.finish();
}

criterion_group!(benches, bench_access);
criterion_main!(benches);
