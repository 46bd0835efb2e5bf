//! The cost of durable trusted state: Path ORAM over the memory back-end with the
//! state in memory (`MemState`) vs in the redb database on disk (`DbState`, one
//! fsynced transaction per round, write-back journal included), measured in the same
//! run. N = 2^16 blocks of 4 KiB, Z = 4, 10 cached levels; single reads and batches of
//! 64 writes (one object's streaming step).
//!
//! Run: `cargo bench -p oram-benches --bench durable`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oram_engine::{Op, Oram};
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{MemState, TrustedState};
use oram_statedb::Db;
use oram_store_memory::MemoryStore;

const N: u64 = 1 << 16;
const BS: usize = 4096;

fn next_block(counter: &AtomicU64) -> u64 {
    counter
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 48
}

fn engine(state: Box<dyn TrustedState>) -> PathOram {
    let sealer = Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random()));
    PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity: N,
                block_size: BS,
                cached_levels: 10,
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
        Arc::new(MemoryStore::new()),
        sealer,
        state,
    )
    .unwrap()
}

fn bench_durable(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), [9; 16]).unwrap();
    let mut group = c.benchmark_group("durable_state");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(6));
    group.warm_up_time(Duration::from_secs(1));
    let data = Bytes::from(vec![7u8; BS]);
    for (name, oram) in [
        ("memory", engine(Box::new(MemState::new()))),
        (
            "redb",
            engine(Box::new(db.state(oram_state::Space(0)).unwrap())),
        ),
    ] {
        let counter = AtomicU64::new(0);
        rt.block_on(async {
            for _ in 0..32 {
                let ops = (0..64)
                    .map(|_| Op::Write(next_block(&counter), data.clone()))
                    .collect();
                oram.access(ops).await.unwrap();
            }
            oram.flush().await.unwrap();
        });
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("read", name), |b| {
            b.to_async(&rt).iter(|| async {
                let blk = next_block(&counter);
                black_box(oram.access(vec![Op::Read(blk)]).await.unwrap());
            })
        });
        group.throughput(Throughput::Bytes((64 * BS) as u64));
        group.bench_function(BenchmarkId::new("write64", name), |b| {
            b.to_async(&rt).iter(|| async {
                let ops = (0..64)
                    .map(|_| Op::Write(next_block(&counter), data.clone()))
                    .collect();
                oram.access(ops).await.unwrap();
            })
        });
        rt.block_on(oram.flush()).unwrap();
    }
    group.finish();
}

criterion_group!(benches, bench_durable);
criterion_main!(benches);
