//! Seal and open throughput of `oram-seal` against bare AES-256-GCM on the same sizes
//! (a 4 KiB block, a Z = 4 bucket of 4 KiB blocks, a 64 KiB block, a Z = 4 bucket of
//! 64 KiB blocks).
//!
//! Run: `cargo bench -p oram-benches --bench seal`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::hint::black_box;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oram_seal::{MasterKey, ObjectIdentity, ObjectKind, Sealer, VolumeId};

fn bench_seal(c: &mut Criterion) {
    let sealer = Sealer::new(&MasterKey::generate(), VolumeId::random());
    let id = ObjectIdentity::plain(ObjectKind::TreeBucket, 17, 3);
    let cipher = Aes256Gcm::new_from_slice(&[1u8; 32]).unwrap();
    let mut group = c.benchmark_group("seal");
    for size in [4096usize, 4 * (4096 + 8), 65536, 4 * (65536 + 8)] {
        group.throughput(Throughput::Bytes(size as u64));
        let plain = vec![0x5Au8; size];
        group.bench_with_input(BenchmarkId::new("seal", size), &plain, |b, p| {
            b.iter(|| black_box(sealer.seal(&id, p).unwrap()))
        });
        let sealed = sealer.seal(&id, &plain).unwrap();
        group.bench_with_input(BenchmarkId::new("open", size), &sealed, |b, s| {
            b.iter(|| black_box(sealer.open(&id, s).unwrap()))
        });
        let mut buf = plain.clone();
        let mut n = 0u64;
        group.bench_function(BenchmarkId::new("bare_aes_gcm", size), |b| {
            b.iter(|| {
                n += 1;
                let mut nonce = [0u8; 12];
                nonce[4..].copy_from_slice(&n.to_be_bytes());
                black_box(
                    cipher
                        .encrypt_in_place_detached(Nonce::from_slice(&nonce), b"ad", &mut buf)
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_seal);
criterion_main!(benches);
