use std::sync::Arc;
use std::time::Duration;

use oram_blockstore::faults::{FaultPlan, FaultStore};
use oram_blockstore::{Recording, Verb};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{KvState, TrustedState};
use oram_statedb::Db;
use oram_store_fs::FsStore;

use super::*;

const VOL: [u8; 16] = [3; 16];
const SETTINGS: LogSettings = LogSettings {
    record_bytes: 64 << 10,
    interval: Duration::from_millis(5),
};

fn sealer() -> Arc<Sealer> {
    Arc::new(Sealer::new(&MasterKey::from_bytes([9; 32]), VolumeId(VOL)))
}

/// Starts shipping `db`'s log to `store` under prefix `v`.
async fn ship(
    db: &Db,
    store: Arc<dyn oram_blockstore::BlockStore>,
    sealer: Arc<Sealer>,
) -> Shipper {
    start(
        store,
        sealer,
        "v".into(),
        db.generation(),
        db.ship_log().unwrap(),
        SETTINGS,
    )
    .await
    .unwrap()
}

/// Waits (bounded: 20 s) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..4000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what}: not within 20 s");
}

/// What the storage server sees of the log: verb, record number, size, in order.
fn log_requests(trace: &[oram_blockstore::TraceEvent]) -> Vec<(Verb, String, u64)> {
    trace
        .iter()
        .filter(|e| e.key.contains("/log/"))
        .map(|e| {
            // The generation is random per database: keep the record number.
            let seq = e.key.rsplit('/').next().unwrap_or_default().to_string();
            (e.verb, seq, e.size)
        })
        .collect()
}

/// Ships a database's log to a recording fs store while `work` commits, until
/// `records` records have landed; returns what the server saw of the first
/// `records` and whether every commit of `work` resolved.
async fn ship_while(records: u64, work: u8) -> (Vec<(Verb, String, u64)>, bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let store = Arc::new(Recording::new(
        FsStore::open(dir.path().join("backend")).unwrap(),
    ));
    let shipper = ship(&db, store.clone(), sealer()).await;
    let committer = {
        let db = db.clone();
        tokio::spawn(async move {
            let mut s = db.state(oram_state::Space(0)).unwrap();
            let mut kv = db.kv().unwrap();
            for i in 0..match work {
                0 => 0u64,
                1 => 20,
                _ => 6,
            } {
                match work {
                    // Small commits: a position and an index entry.
                    1 => {
                        s.set_position(i, i + 1);
                        kv.put(format!("o/{i}").as_bytes(), vec![1; 100]);
                    }
                    // Large ones: 200 KiB of stash each, several records long.
                    _ => s.stash_insert(i, bytes::Bytes::from(vec![i as u8; 200 << 10])),
                }
                let (a, b) = (s.commit(), kv.commit());
                a.await.unwrap();
                b.await.unwrap();
            }
        })
    };
    let stats = shipper.stats.clone();
    until("records landed", || {
        stats.records.load(Ordering::Relaxed) >= records
    })
    .await;
    let done = committer.await.is_ok();
    let mut seen = log_requests(&store.trace());
    seen.truncate(records as usize);
    drop(shipper);
    (seen, done)
}

#[tokio::test]
async fn the_log_looks_the_same_whatever_is_committed() {
    const N: u64 = 40;
    let idle = ship_while(N, 0).await;
    let small = ship_while(N, 1).await;
    let large = ship_while(N, 2).await;
    assert!(idle.1 && small.1 && large.1, "every commit resolved");
    assert_eq!(idle.0.len(), N as usize);
    // One listing at start, then one PUT of one size per record, numbered 0, 1, 2...
    assert_eq!(idle.0[0].0, Verb::List);
    let size = (SETTINGS.record_bytes + OVERHEAD) as u64;
    for (i, (verb, seq, bytes)) in idle.0[1..].iter().enumerate() {
        assert_eq!((*verb, *bytes), (Verb::Put, size), "record {i}");
        assert_eq!(u64::from_str_radix(seq, 16).unwrap(), i as u64);
    }
    assert_eq!(
        idle.0, small.0,
        "small commits change nothing the server sees"
    );
    assert_eq!(
        idle.0, large.0,
        "large commits change nothing the server sees"
    );
}

#[tokio::test]
async fn recover_replays_the_log_after_a_checkpoint_and_pruning_keeps_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let store = Arc::new(FsStore::open(dir.path().join("backend")).unwrap());
    let sealer = sealer();
    let shipper = ship(&db, store.clone(), sealer.clone()).await;
    let mut s = db.state(oram_state::Space(0)).unwrap();
    for i in 0..5u64 {
        s.set_position(i, 100 + i);
        s.commit().await.unwrap();
    }
    // The checkpoint: where the log stands, then the snapshot.
    let at = db.log_end().unwrap();
    let snap = db.snapshot().unwrap();
    assert_eq!(
        oram_statedb::snapshot_position(&snap).unwrap(),
        (db.generation(), at)
    );
    for i in 0..5u64 {
        s.set_position(i, 200 + i);
        s.stash_insert(i, bytes::Bytes::from(vec![7; 100 << 10]));
        s.commit().await.unwrap();
    }
    let pruned = shipper.prune(at).await.unwrap();
    assert!(pruned > 0, "records before the checkpoint are deleted");

    // The machine is lost: snapshot + log.
    let log = read_log(store.as_ref(), &sealer, "v", db.generation(), at)
        .await
        .unwrap();
    assert!(log.gap.is_none());
    let (groups, used) = oram_statedb::decode_groups(&log.stream).unwrap();
    assert_eq!(used, log.stream.len(), "every acknowledged commit is whole");
    assert_eq!(groups.len(), 5);
    let r = Db::restore_replaying(&dir.path().join("r.redb"), VOL, &snap, &groups).unwrap();
    let rs = r.state(oram_state::Space(0)).unwrap();
    for i in 0..5u64 {
        assert_eq!(rs.position(i), Some(200 + i));
        assert_eq!(rs.stash_get(i).map(|b| b.len()), Some(100 << 10));
    }

    // A record that does not open (tampered, or of another volume) is refused.
    let victim = store
        .list("v/log/")
        .await
        .unwrap()
        .into_iter()
        .next_back()
        .unwrap();
    let other = Sealer::new(&MasterKey::from_bytes([8; 32]), VolumeId(VOL));
    let forged = seal_record(&other, db.generation(), 0, at, b"x", 1024, 0).unwrap();
    drop(shipper);
    store.put_many(vec![(victim, forged)]).await.unwrap();
    let err = read_log(store.as_ref(), &sealer, "v", db.generation(), at)
        .await
        .unwrap_err();
    assert!(matches!(err, VolumeError::Integrity(_)), "{err}");
}

#[tokio::test]
async fn a_record_that_does_not_land_is_sent_again_and_its_commits_wait() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let fs = Arc::new(FsStore::open(dir.path().join("backend")).unwrap());
    let faults = Arc::new(FaultStore::new(
        fs.clone(),
        FaultPlan {
            server_error: 1.0,
            ..FaultPlan::default()
        },
    ));
    faults.set_enabled(false);
    let store = Arc::new(Recording::new(faults.clone()));
    let shipper = ship(&db, store.clone(), sealer()).await;
    let stats = shipper.stats.clone();
    until("a first record", || {
        stats.records.load(Ordering::Relaxed) > 0
    })
    .await;
    faults.set_enabled(true);
    until("failures", || stats.failures.load(Ordering::Relaxed) > 0).await;
    let mut s = db.state(oram_state::Space(0)).unwrap();
    s.set_position(1, 2);
    let commit = tokio::spawn(s.commit());
    until("several failures", || {
        stats.failures.load(Ordering::Relaxed) >= 5
    })
    .await;
    assert!(
        !commit.is_finished(),
        "a commit waits while its record fails"
    );
    faults.set_enabled(false);
    commit.await.unwrap().unwrap();
    drop(shipper);
    // Every record number once on the backend, none skipped; the failed record
    // was sent again under its own number.
    let puts: Vec<String> = store
        .trace()
        .iter()
        .filter(|e| e.verb == Verb::Put)
        .map(|e| e.key.clone())
        .collect();
    let mut distinct = puts.clone();
    distinct.dedup();
    assert!(distinct.len() < puts.len(), "a failed record is sent again");
    let mut landed: Vec<u64> = fs
        .list("v/log/")
        .await
        .unwrap()
        .iter()
        .filter_map(|k| parse_key("v", k).map(|(_, s)| s))
        .collect();
    landed.sort_unstable();
    let want: Vec<u64> = (0..landed.len() as u64).collect();
    assert_eq!(landed, want);
}
