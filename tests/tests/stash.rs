//! Stash bound: Z = 4, N = 2^14 blocks all written, then 10^5 random accesses; the
//! stash never exceeds the configured bound (89 blocks, the default).

use std::sync::Arc;

use oram_engine::{Op, Oram};
use oram_path::PathConfig;
use oram_store_memory::MemoryStore;
use oram_tests::{block_data, path_oram};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stash_stays_within_bound() {
    const N: u64 = 1 << 14;
    const ACCESSES: usize = 100_000;
    const BS: usize = 16;
    let cfg = PathConfig {
        capacity: N,
        block_size: BS,
        z: 4,
        // The stash does not depend on where the top buckets live; caching them
        // only makes the test faster.
        cached_levels: 7,
        rng_seed: Some([14; 32]),
        ..PathConfig::default()
    };
    let bound = cfg.stash_bound;
    let oram = path_oram(Arc::new(MemoryStore::new()), cfg);
    // Write every block once, one access at a time.
    for b in 0..N {
        oram.access(vec![Op::Write(b, block_data(b, 0, BS))])
            .await
            .expect("fill");
    }
    let fill = oram.stats();
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let mut max_seen = 0;
    for i in 0..ACCESSES {
        let b = rng.gen_range(0..N);
        let op = if i % 2 == 0 {
            Op::Read(b)
        } else {
            Op::Write(b, block_data(b, i as u64, BS))
        };
        let res = oram
            .access(vec![op])
            .await
            .expect("access (stash overflow?)");
        if i % 2 == 0 && i % 1000 == 0 {
            // Spot-check content: block b was last written at some version ≤ i.
            assert_eq!(res[0].len(), BS);
        }
        max_seen = max_seen.max(oram.stats().stash_len);
    }
    let s = oram.stats();
    let rounds = s.rounds - fill.rounds;
    let mean = (s.stash_sum - fill.stash_sum) as f64 / rounds as f64;
    println!(
        "stash after each of {ACCESSES} accesses (N = {N}, Z = 4, {} leaves): max {} mean {:.3} (bound {bound}); over the fill too: max {}",
        oram.geometry().leaves,
        max_seen,
        mean,
        s.stash_max
    );
    assert_eq!(s.accesses, N + ACCESSES as u64);
    assert!(
        s.stash_max as usize <= bound,
        "stash {} over bound {bound}",
        s.stash_max
    );
    // Fewer than one block on average: the tree is doing the storing.
    assert!(mean < 1.0, "mean stash {mean}");
}

#[tokio::test]
async fn overflow_is_a_clear_error_and_loses_nothing() {
    // Z = 1 with a tiny tree and a bound of 2 overflows quickly.
    let oram = path_oram(
        Arc::new(MemoryStore::new()),
        PathConfig {
            capacity: 64,
            block_size: 8,
            z: 1,
            leaves: Some(4),
            stash_bound: 2,
            rng_seed: Some([1; 32]),
            ..PathConfig::default()
        },
    );
    let mut overflowed = false;
    for b in 0..64 {
        match oram.access(vec![Op::Write(b, block_data(b, 1, 8))]).await {
            Ok(_) => {}
            Err(oram_engine::OramError::StashOverflow { size, bound }) => {
                assert!(size > bound && bound == 2);
                overflowed = true;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(
        overflowed,
        "7 buckets cannot hold 64 blocks without overflow"
    );
    assert!(oram.stats().stash_len > 2);
    // Reads fail too while the stash is over the bound: no answer rather than a wrong one.
    assert!(matches!(
        oram.access(vec![Op::Read(0)]).await,
        Err(oram_engine::OramError::StashOverflow { .. })
    ));
    // Every write took effect, though reported with an error: nothing was lost.
    oram.set_stash_bound(1000);
    for b in 0..64 {
        let got = oram.access(vec![Op::Read(b)]).await.unwrap();
        assert_eq!(got[0], block_data(b, 1, 8), "block {b}");
    }
}
