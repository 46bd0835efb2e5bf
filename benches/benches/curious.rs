//! CURIOUS beside Path and Ring ORAM on the memory back-end, in one run:
//! backend bytes per access (measured with the `Accounting` wrapper) against the
//! analytical figure, then accesses per second and CPU per access ÷ bare
//! AES-256-GCM over the same bytes.
//!
//! N = 2^14 blocks of 4 KiB (the Ring ORAM bench's volume; Path ORAM's bench has
//! 2^16), no tree-top cache anywhere (every level on the back-end, so that the
//! engines move what their trees are and nothing is hidden in memory), one op per
//! access call (`max_batch` 1 at the top):
//! * `path`: binary Path ORAM, Z = 4;
//! * `ring`: Ring ORAM `small` (Z = 4, S = 6, A = 3), buckets read whole to evict;
//! * `curious-path`: CURIOUS, P = ⌈√N⌉ = 128 partitions, each a ternary Path ORAM
//!   with Z = 5 (the paper's b = 3, z = 5), eviction rate ν = 1.25;
//! * `curious-ring`: CURIOUS, the same partitions, each a Ring ORAM `small`;
//! * `oblivistore`: ObliviStore, the same partitions, each a hierarchy of levels
//!   of `2^ℓ` real and `2^ℓ` dummy slots, ν = 1.25.
//!
//! Analytical bytes per access (sealed sizes: a Path bucket is `Z·(8 + B) + 45`,
//! a Ring slot `8 + B + 45`, a Ring bucket `16·(Z+S) + 45 + (Z+S)·slot`):
//! * Path: `2 · U · bucket`, `U` the uncached levels;
//! * Ring: per level `l` (with `2^l` buckets), one slot online (less the
//!   reshuffled and evicted ones' share) plus `2·(1 + ρ_l)/A` whole buckets,
//!   `ρ_l` the expected early reshuffles (as engines/ring's
//!   `bandwidth_per_access_matches_the_analytical_model`);
//! * ObliviStore: `ν ×` (slots read + slots written) per partition access ×
//!   the sealed slot (`8 + B + 45`), averaged over a partition's eviction counter
//!   once its top level is filled (`Geometry::expected_per_access`);
//! * CURIOUS: `ν ×` its sub-ORAM's figure (one sub-ORAM access per op, a
//!   background one with probability ν − 1; the evicted block rides on an access
//!   as an insert and moves no bytes of its own).
//!
//! Everything runs on one thread (a current-thread runtime), so the time per
//! access is its CPU time; `crypto_only` runs AES-256-GCM over the measured bytes
//! per access in chunks of one backend object, for the ratio "CPU per access ÷
//! pure AES-GCM for the same bytes".
//!
//! Run: `cargo bench -p oram-benches --bench curious`. Under `cargo test` (and
//! `-- --test`) a quick pass: N = 2^10, a few hundred accesses, one iteration.

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oram_blockstore::{Accounting, BlockStore};
use oram_curious::{Curious, CuriousConfig};
use oram_engine::{Op, Oram, Parts, Shape};
use oram_oblivistore::{oblivistore, ObliviStoreConfig};
use oram_path::{PathConfig, PathOram};
use oram_ring::{EvictRead, Layout, RingConfig, RingOram, RingPreset, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::MemState;
use oram_store_memory::MemoryStore;

const BS: usize = 4096;
const SEAL: f64 = 45.0;
const NU: f64 = 1.25;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Path,
    Ring,
    CuriousPath,
    CuriousRing,
    ObliviStore,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Path,
        Kind::Ring,
        Kind::CuriousPath,
        Kind::CuriousRing,
        Kind::ObliviStore,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Path => "path",
            Kind::Ring => "ring",
            Kind::CuriousPath => "curious-path",
            Kind::CuriousRing => "curious-ring",
            Kind::ObliviStore => "oblivistore",
        }
    }
}

/// The analytical cost of one access of a tree engine, and its backend object.
#[derive(Clone, Copy, Debug)]
struct Figure {
    /// Expected backend bytes per access.
    bytes: f64,
    /// Bytes of one backend object (a sealed bucket).
    object: usize,
    /// A description of the tree.
    levels: u32,
    arity: u64,
    z: usize,
}

fn path_figure(geo: &oram_path::Geometry, cached: u32) -> Figure {
    let u = geo.leaf_level + 1 - cached;
    let object = geo.z * (8 + geo.block_size) + SEAL as usize;
    Figure {
        bytes: 2.0 * f64::from(u) * object as f64,
        object,
        levels: u,
        arity: geo.arity,
        z: geo.z,
    }
}

fn ring_figure(lay: &Layout, cached: u32) -> Figure {
    let p = lay.params;
    let (ranged, whole) = lay.expected_per_access(cached);
    Figure {
        bytes: ranged * lay.slot_sealed() as f64 + 2.0 * whole * lay.object_len() as f64,
        object: lay.object_len(),
        levels: lay.geo.leaf_level + 1 - cached,
        arity: 2,
        z: p.z,
    }
}

fn sealer() -> Arc<Sealer> {
    Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random()))
}

fn ring_config(capacity: u64, id_limit: Option<u64>, max_batch: usize, prefix: &str) -> RingConfig {
    let params = RingPreset::Small.params();
    RingConfig {
        tree: TreeConfig {
            capacity,
            id_limit,
            block_size: BS,
            cached_levels: 0,
            max_batch,
            round_attempts: 1,
            prefix: prefix.to_string(),
            stash_bound: RingConfig::default_stash_bound(params, max_batch.max(64)),
            ..RingConfig::default().tree
        },
        params,
        evict_read: EvictRead::Whole,
    }
}

/// Builds engine `kind` of `n` blocks over `store`, with its analytical figure
/// (a CURIOUS figure is ν × its partitions').
fn build(kind: Kind, n: u64, store: Arc<dyn BlockStore>) -> (Arc<dyn Oram>, Figure, u32) {
    match kind {
        Kind::Path => {
            let oram = PathOram::new(
                PathConfig {
                    tree: TreeConfig {
                        capacity: n,
                        block_size: BS,
                        cached_levels: 0,
                        ..PathConfig::default().tree
                    },
                    z: 4,
                    arity: 2,
                },
                store,
                sealer(),
                Box::new(MemState::new()),
            )
            .unwrap();
            let f = path_figure(&oram.geometry(), oram.cached_levels());
            (Arc::new(oram), f, 0)
        }
        Kind::Ring => {
            let oram = RingOram::new(
                ring_config(n, None, 1, &RingConfig::default().tree.prefix),
                store,
                sealer(),
                Box::new(MemState::new()),
            )
            .unwrap();
            let f = ring_figure(&oram.scheme().layout(), oram.cached_levels());
            (Arc::new(oram), f, 0)
        }
        Kind::ObliviStore => {
            let partitions = (n as f64).sqrt().ceil() as u32;
            let mut cfg = ObliviStoreConfig::new(n, BS, partitions, 1);
            cfg.framework.eviction_rate = NU;
            cfg.framework.cache_bound = 1 << 20;
            let geo = cfg.geometry();
            let per = geo.expected_per_access(cfg.shuffle_read);
            let figure = Figure {
                bytes: NU * (per.read_slots + per.written_slots) * geo.slot_len() as f64,
                object: geo.slot_len(),
                levels: geo.top + 1,
                arity: 0,
                z: 0,
            };
            let oram = oblivistore(
                cfg,
                Parts {
                    store,
                    sealer: sealer(),
                    state: Box::new(MemState::new()),
                },
                "oram",
            )
            .unwrap();
            (Arc::new(oram), figure, partitions)
        }
        Kind::CuriousPath | Kind::CuriousRing => {
            let partitions = (n as f64).sqrt().ceil() as u32;
            let cfg = CuriousConfig {
                name: "curious",
                letter: 'c',
                capacity: n,
                block_size: BS,
                partitions,
                max_batch: 1,
                eviction_rate: NU,
                cache_bound: 1 << 20,
                partition_limit: None,
                round_attempts: 3,
                rng_seed: None,
            };
            let sub_shape = Shape {
                capacity: cfg.sub_capacity(),
                block_size: BS,
                max_batch: cfg.sub_batch(),
                prefix: "oram".into(),
                id_limit: Some(n),
            };
            let figure: Mutex<Option<Figure>> = Mutex::new(None);
            let ring = kind == Kind::CuriousRing;
            let build_sub = |_p: u32, shape: &Shape, parts: Parts| {
                let e: Arc<dyn Oram> = if ring {
                    let oram = RingOram::new(
                        ring_config(
                            shape.capacity,
                            shape.id_limit,
                            shape.max_batch,
                            &shape.prefix,
                        ),
                        parts.store,
                        parts.sealer,
                        parts.state,
                    )?;
                    *figure.lock().unwrap() =
                        Some(ring_figure(&oram.scheme().layout(), oram.cached_levels()));
                    Arc::new(oram)
                } else {
                    let oram = PathOram::new(
                        PathConfig {
                            tree: TreeConfig {
                                capacity: shape.capacity,
                                id_limit: shape.id_limit,
                                block_size: BS,
                                cached_levels: 0,
                                max_batch: shape.max_batch,
                                round_attempts: 1,
                                prefix: shape.prefix.clone(),
                                ..TreeConfig::default()
                            },
                            z: 5,
                            arity: 3,
                        },
                        parts.store,
                        parts.sealer,
                        parts.state,
                    )?;
                    *figure.lock().unwrap() =
                        Some(path_figure(&oram.geometry(), oram.cached_levels()));
                    Arc::new(oram)
                };
                Ok(e)
            };
            let oram = Curious::new(
                cfg,
                Parts {
                    store,
                    sealer: sealer(),
                    state: Box::new(MemState::new()),
                },
                &sub_shape,
                &build_sub,
            )
            .unwrap();
            let mut f = figure.into_inner().unwrap().expect("a partition was built");
            f.bytes *= NU;
            (Arc::new(oram), f, partitions)
        }
    }
}

/// A cheap, well-spread sequence of block numbers below `n` (a power of two).
fn next_block(counter: &AtomicU64, n: u64) -> u64 {
    counter
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> (64 - n.trailing_zeros())
}

/// Writes every block, runs `warm` reads, then measures backend traffic over
/// `count` reads: (requests, bytes) per access.
async fn traffic(
    oram: &dyn Oram,
    acc: &Accounting<MemoryStore>,
    n: u64,
    warm: u64,
    count: u64,
) -> (f64, f64) {
    let data = Bytes::from(vec![7u8; BS]);
    for b in 0..n {
        oram.access(vec![Op::Write(b, data.clone())]).await.unwrap();
    }
    let counter = AtomicU64::new(3);
    for _ in 0..warm {
        oram.access(vec![Op::Read(next_block(&counter, n))])
            .await
            .unwrap();
    }
    oram.flush().await.unwrap();
    let before = acc.snapshot();
    for _ in 0..count {
        oram.access(vec![Op::Read(next_block(&counter, n))])
            .await
            .unwrap();
    }
    oram.flush().await.unwrap();
    let d = acc.snapshot().since(&before);
    (
        d.total_requests() as f64 / count as f64,
        d.total_bytes() as f64 / count as f64,
    )
}

fn bench_access(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fast = oram_benches::quick_pass();
    let (n, warm, count) = if fast {
        (1u64 << 10, 200, 300)
    } else {
        (1u64 << 14, 1 << 14, 20_000)
    };

    // 1. Backend bytes per access against the analytical figure.
    println!(
        "backend traffic per access, N = {n}, block {BS} B, no tree-top cache, \
         {count} random reads after writing every block and {warm} reads:"
    );
    let mut measured = Vec::new();
    for kind in Kind::ALL {
        let acc = Arc::new(Accounting::new(MemoryStore::new()));
        let (oram, fig, parts) = build(kind, n, acc.clone());
        let (req, bytes) = rt.block_on(traffic(oram.as_ref(), &acc, n, warm, count));
        let sub = if parts > 0 {
            format!("P = {parts}, ν = {NU}, each ")
        } else {
            String::new()
        };
        let shape = if kind == Kind::ObliviStore {
            format!(
                "{} levels of 2^l real + 2^l dummy slots, slot {} B",
                fig.levels, fig.object
            )
        } else {
            format!(
                "{}-ary Z = {} tree, {} backend levels, object {} B",
                fig.arity, fig.z, fig.levels, fig.object
            )
        };
        println!(
            "  {:13} {sub}{shape}: measured {req:6.2} req {bytes:9.0} B | analytical {:9.0} B | measured/analytical {:.3}",
            kind.name(),
            fig.bytes,
            bytes / fig.bytes
        );
        measured.push((kind, bytes, fig.object));
    }

    // 2. Accesses per second, and the same bytes through AES-GCM alone.
    let mut group = c.benchmark_group("curious_access");
    group.throughput(Throughput::Elements(1));
    group.sample_size(if fast { 10 } else { 20 });
    group.measurement_time(Duration::from_secs(if fast { 1 } else { 8 }));
    group.warm_up_time(Duration::from_secs(1));
    let cipher = Aes256Gcm::new_from_slice(&[1u8; 32]).unwrap();
    for (kind, bytes, object) in measured {
        let (oram, _, _) = build(kind, n, Arc::new(MemoryStore::new()));
        let data = Bytes::from(vec![7u8; BS]);
        let counter = AtomicU64::new(0);
        // Every block written first: every bucket an access touches exists (and is
        // opened and sealed), as in the steady state of a full volume.
        rt.block_on(async {
            for blk in 0..n {
                oram.access(vec![Op::Write(blk, data.clone())])
                    .await
                    .unwrap();
            }
            oram.flush().await.unwrap();
        });
        let id = format!("{}/4KiB/N{n}", kind.name());
        group.bench_function(BenchmarkId::new("read", &id), |b| {
            b.to_async(&rt).iter(|| async {
                black_box(
                    oram.access(vec![Op::Read(next_block(&counter, n))])
                        .await
                        .unwrap(),
                );
            })
        });
        group.bench_function(BenchmarkId::new("write", &id), |b| {
            b.to_async(&rt).iter(|| async {
                oram.access(vec![Op::Write(next_block(&counter, n), data.clone())])
                    .await
                    .unwrap();
            })
        });
        rt.block_on(oram.flush()).unwrap();
        // AES-256-GCM over the measured bytes of one access, an object at a time.
        let objects = (bytes / object as f64).round().max(1.0) as usize;
        let mut buf = vec![0u8; object];
        group.bench_function(BenchmarkId::new("crypto_only", &id), |b| {
            let mut ctr = 0u64;
            b.iter(|| {
                for _ in 0..objects {
                    ctr += 1;
                    let mut nonce = [0u8; 12];
                    nonce[4..].copy_from_slice(&ctr.to_be_bytes());
                    let tag = cipher
                        .encrypt_in_place_detached(Nonce::from_slice(&nonce), b"ad", &mut buf)
                        .unwrap();
                    black_box(tag);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_access);
criterion_main!(benches);
