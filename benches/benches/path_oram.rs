//! Path ORAM accesses per second on the memory back-end: N = 2^16 blocks, Z = 4,
//! 4 KiB and 64 KiB blocks, without and with a tree-top cache of 10 levels.
//!
//! Everything runs on one thread (a current-thread runtime, write-backs included),
//! so the time per access is also its CPU time. `crypto_only` seals and opens the
//! same buckets an access moves with bare AES-256-GCM, for the ratio
//! "CPU per access ÷ pure AES-GCM for the same bytes".
//!
//! Run: `cargo bench -p oram-benches --bench path_oram`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oram_engine::{Op, Oram};
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::MemState;
use oram_store_memory::MemoryStore;

const N: u64 = 1 << 16;

/// A cheap, well-spread sequence of block numbers.
fn next_block(counter: &AtomicU64) -> u64 {
    counter
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 48
}

fn bench_access(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("path_oram_access");
    group.throughput(Throughput::Elements(1));
    for (bs, warm, secs) in [(4096usize, 4096u64, 8u64), (65536, 512, 6)] {
        group.sample_size(if bs > 4096 { 10 } else { 30 });
        group.measurement_time(Duration::from_secs(secs));
        group.warm_up_time(Duration::from_secs(1));
        for cached in [0u32, 10] {
            let sealer = Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random()));
            let oram = PathOram::new(
                PathConfig {
                    tree: TreeConfig {
                        capacity: N,
                        block_size: bs,
                        cached_levels: cached,
                        ..PathConfig::default().tree
                    },
                    z: 4,
                    arity: 2,
                },
                Arc::new(MemoryStore::new()),
                sealer,
                Box::new(MemState::new()),
            )
            .unwrap();
            let counter = AtomicU64::new(0);
            let data = Bytes::from(vec![7u8; bs]);
            // Warm up: write blocks so that the buckets the bench touches exist.
            rt.block_on(async {
                for _ in 0..warm {
                    let b = next_block(&counter);
                    oram.access(vec![Op::Write(b, data.clone())]).await.unwrap();
                }
                oram.flush().await.unwrap();
            });
            let id = format!("{}KiB/cache{}", bs / 1024, cached);
            group.bench_function(BenchmarkId::new("read", &id), |b| {
                b.to_async(&rt).iter(|| async {
                    let blk = next_block(&counter);
                    black_box(oram.access(vec![Op::Read(blk)]).await.unwrap());
                })
            });
            group.bench_function(BenchmarkId::new("write", &id), |b| {
                b.to_async(&rt).iter(|| async {
                    let blk = next_block(&counter);
                    oram.access(vec![Op::Write(blk, data.clone())])
                        .await
                        .unwrap();
                })
            });
            rt.block_on(oram.flush()).unwrap();

            // The crypto of one access alone: open and seal each uncached bucket of a path.
            let remote = (oram.geometry().leaf_level + 1 - oram.cached_levels()) as usize;
            let bucket = oram_path::bucket::bucket_bytes(&oram.geometry());
            let cipher = Aes256Gcm::new_from_slice(&[1u8; 32]).unwrap();
            let mut buf = vec![0u8; bucket];
            group.bench_function(BenchmarkId::new("crypto_only", &id), |b| {
                let mut n = 0u64;
                b.iter(|| {
                    for _ in 0..remote {
                        for _ in 0..2 {
                            n += 1;
                            let mut nonce = [0u8; 12];
                            nonce[4..].copy_from_slice(&n.to_be_bytes());
                            let tag = cipher
                                .encrypt_in_place_detached(
                                    Nonce::from_slice(&nonce),
                                    b"ad",
                                    &mut buf,
                                )
                                .unwrap();
                            black_box(tag);
                        }
                    }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_access);
criterion_main!(benches);
