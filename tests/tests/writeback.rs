//! Write-back off the critical path, bounded memory, and a backend that fails.

use std::sync::Arc;
use std::time::Duration;

use oram_engine::{Op, Oram, OramError};
use oram_path::PathConfig;
use oram_store_memory::MemoryStore;
use oram_tests::{block_data, path_oram, FlakyStore, GatedStore};

const BS: usize = 64;

fn cfg() -> PathConfig {
    PathConfig {
        capacity: 256,
        block_size: BS,
        max_inflight_writebacks: 4,
        rng_seed: Some([21; 32]),
        ..PathConfig::default()
    }
}

/// Polls until no write-back is pending (bounded: 10 s).
async fn settle(oram: &dyn Oram) {
    for _ in 0..1000 {
        if oram.stats().pending_writebacks == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("write-backs did not settle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_come_before_the_write_back_and_pending_rounds_are_bounded() {
    let store = Arc::new(GatedStore::new(MemoryStore::new(), true));
    let oram = path_oram(store.clone(), cfg());
    oram.access(vec![Op::Write(1, block_data(1, 1, BS))])
        .await
        .unwrap();
    oram.flush().await.unwrap();

    // PUTs now hang until the gate opens, yet accesses are answered: reads come
    // from fetched paths, and buckets still being written back are served from memory.
    store.set_open(false);
    let guard = Duration::from_secs(10); // only guards against a hang
    tokio::time::timeout(guard, oram.access(vec![Op::Write(2, block_data(2, 1, BS))]))
        .await
        .expect("a write must not wait for its write-back")
        .unwrap();
    for b in [1u64, 2, 1] {
        let got = tokio::time::timeout(guard, oram.access(vec![Op::Read(b)]))
            .await
            .expect("a read must not wait for write-backs")
            .unwrap();
        assert_eq!(got[0], block_data(b, 1, BS), "block {b}");
    }
    assert_eq!(oram.stats().pending_writebacks, 4);

    // The fifth round finds no write-back slot: it waits (memory stays bounded).
    let fifth = {
        let oram = oram.clone();
        tokio::spawn(async move { oram.access(vec![Op::Read(2)]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !fifth.is_finished(),
        "a fifth round ran with four write-backs pending"
    );
    store.set_open(true);
    let got = tokio::time::timeout(guard, fifth)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got[0], block_data(2, 1, BS));
    oram.flush().await.unwrap();
    assert_eq!(oram.stats().pending_writebacks, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_backend_fails_requests_cleanly_and_loses_nothing() {
    let store = Arc::new(FlakyStore::new(MemoryStore::new()));
    let oram = path_oram(store.clone(), cfg());
    for b in 0..32 {
        oram.access(vec![Op::Write(b, block_data(b, 1, BS))])
            .await
            .unwrap();
    }
    oram.flush().await.unwrap();

    // Backend fully down: the access fails before changing anything.
    store.set_down(true);
    let err = oram
        .access(vec![Op::Write(3, block_data(3, 9, BS))])
        .await
        .unwrap_err();
    assert!(matches!(err, OramError::Store(_)), "{err}");
    assert!(oram.flush().await.is_ok(), "nothing was pending");
    store.set_down(false);
    let got = oram.access(vec![Op::Read(3)]).await.unwrap();
    assert_eq!(
        got[0],
        block_data(3, 1, BS),
        "the failed write must not have happened"
    );

    // Only PUTs failing: the access is answered, its write-back fails after retries
    // and stays in memory; later accesses fail until the backend takes it.
    store.set_puts_down(true);
    oram.access(vec![Op::Write(4, block_data(4, 2, BS))])
        .await
        .unwrap();
    settle(&oram).await;
    assert!(oram.stats().writeback_retries >= 3);
    let err = oram.access(vec![Op::Read(5)]).await.unwrap_err();
    assert!(matches!(err, OramError::Store(_)), "{err}");
    assert!(oram.flush().await.is_err());
    store.set_puts_down(false);
    oram.flush().await.unwrap();
    for b in 0..32 {
        let want = block_data(b, if b == 4 { 2 } else { 1 }, BS);
        assert_eq!(
            oram.access(vec![Op::Read(b)]).await.unwrap()[0],
            want,
            "block {b}"
        );
    }
}
