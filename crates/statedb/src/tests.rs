use bytes::Bytes;
use oram_state::{KvState, Staged, TrustedState};

use super::*;

const VOL: [u8; 16] = [7; 16];
const S0: Space = Space(0);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[tokio::test]
async fn state_survives_reopen_and_uncommitted_changes_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let generation;
    {
        let db = Db::open(&path, VOL).unwrap();
        generation = db.generation();
        assert_ne!(generation, 0);
        let mut s = db.state(S0).unwrap();
        s.set_position(3, 9);
        s.advance(5);
        s.stash_insert(4, b("four"));
        s.set_local_bucket(1, vec![(8, b("eight"))]);
        s.pending_put(5, s.node(5), b("bucket"));
        s.set_meta(b"m/1", b("meta"));
        s.set_intent(1, Some(b("plan")));
        s.commit().await.unwrap();
        let mut kv = db.kv().unwrap();
        kv.put(b"o/x", b"rec".to_vec());
        kv.commit().await.unwrap();
        // Not committed: gone after the "crash" (drop without commit).
        s.set_position(3, 1);
        s.stash_insert(6, b("six"));
        kv.put(b"o/y", b"lost".to_vec());
    }
    let db = Db::open(&path, VOL).unwrap();
    assert_eq!(db.generation(), generation, "a reopen keeps the generation");
    let s = db.state(S0).unwrap();
    assert_eq!(s.position(3), Some(9));
    assert_eq!(s.node(5).version, 1);
    assert_eq!(s.node(5).generation, generation);
    assert_eq!(s.stash_blocks(), vec![4]);
    assert_eq!(s.stash_get(4).unwrap(), &b("four"));
    assert_eq!(s.local_bucket(1).unwrap(), &vec![(8, b("eight"))]);
    assert_eq!(s.meta(b"m/1"), Some(&b("meta")));
    assert_eq!(s.intents(), vec![(1, b("plan"))]);
    let p = s.pending();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].0, p[0].1.version, p[0].2.clone()),
        (5, 1, b("bucket"))
    );
    let kv = db.kv().unwrap();
    assert_eq!(kv.get(b"o/x"), Some(b"rec".to_vec()));
    assert_eq!(kv.get(b"o/y"), None);
}

#[tokio::test]
async fn a_failed_commit_fails_the_database_and_acknowledged_data_survives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let db = Db::open(&path, VOL).unwrap();
        let mut s = db.state(S0).unwrap();
        let mut kv = db.kv().unwrap();
        s.set_position(1, 10);
        s.stash_insert(1, b("one"));
        s.commit().await.unwrap();
        kv.put(b"a", b"1".to_vec());
        kv.commit().await.unwrap();
        // The injected failure stands for an I/O error of the disk.
        db.inject_commit_failure();
        s.set_position(1, 11);
        s.stash_insert(2, b("two"));
        assert!(matches!(s.commit().await, Err(StateError::Storage(_))));
        assert!(db.failure().unwrap().contains("injected"));
        // Fail-stop: every later commit fails too, of any view, naming the cause.
        kv.put(b"a", b"2".to_vec());
        let err = kv.commit().await.unwrap_err();
        assert!(matches!(err, StateError::Failed(_)), "{err}");
        assert!(err.to_string().contains("restart"), "{err}");
        s.set_position(3, 30);
        assert!(s.commit().await.is_err());
        assert!(db.set_epoch(9).await.is_err());
        assert_eq!(db.epoch(), 0, "the epoch moves only once durable");
        // An engine holding its own lock may still undo what it did not commit.
        s.set_position(4, 40);
        s.rollback();
        assert_eq!(s.position(4), None);
    }
    // The restart reloads the last durable state: everything acknowledged, nothing else.
    let db = Db::open(&path, VOL).unwrap();
    assert!(db.failure().is_none());
    let s = db.state(S0).unwrap();
    assert_eq!(s.positions(), vec![(1, 10)]);
    assert_eq!(s.stash_blocks(), vec![1]);
    assert_eq!(db.kv().unwrap().get(b"a"), Some(b"1".to_vec()));
    let mut s = s;
    s.set_position(5, 50);
    s.commit().await.unwrap();
}

#[tokio::test]
async fn concurrent_commits_share_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("g.redb"), VOL).unwrap();
    let mut states: Vec<_> = (0..16).map(|i| db.state(Space(i)).unwrap()).collect();
    let mut kv = db.kv().unwrap();
    let (groups_before, _) = db.committer().counts();
    let mut waits = Vec::new();
    {
        // Everything submitted while the committer is held forms one group.
        let _hold = db.committer().hold();
        for (i, s) in states.iter_mut().enumerate() {
            s.set_position(i as u64, 100 + i as u64);
            waits.push(s.commit());
        }
        kv.put(b"k", b"v".to_vec());
        waits.push(kv.commit());
    }
    for w in waits {
        w.await.unwrap();
    }
    let (groups, commits) = db.committer().counts();
    assert_eq!(groups - groups_before, 1, "17 commits, one transaction");
    assert!(commits >= 17);
    for (i, s) in states.iter().enumerate() {
        assert_eq!(
            db.state(Space(i as u32)).unwrap().position(i as u64),
            Some(100 + i as u64)
        );
        assert_eq!(s.positions_len(), 1, "spaces do not see each other");
    }
}

#[tokio::test]
async fn spaces_commit_together_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sp.redb");
    {
        let db = Db::open(&path, VOL).unwrap();
        let mut a = db.state(Space(1)).unwrap();
        let mut c = db.state(Space(2)).unwrap();
        a.stash_insert(7, b("block"));
        a.commit().await.unwrap();
        // A move of block 7 from space 1 to space 2, staged on both, committed once.
        a.stash_remove(7);
        c.stash_insert(7, b("block"));
        let mut staged = a.stage();
        staged.merge(c.stage()).unwrap();
        staged.commit().await.unwrap();
        a.settle();
        c.settle();
        // A second move, staged but never committed (a crash).
        c.stash_remove(7);
        a.stash_insert(7, b("block"));
        let mut lost = c.stage();
        lost.merge(a.stage()).unwrap();
        drop(lost);
        c.rollback();
        a.rollback();
        assert_eq!(c.stash_blocks(), vec![7], "undone in memory too");
        // Changes of another database cannot join.
        let other = Db::open(&dir.path().join("other.redb"), VOL).unwrap();
        let mut o = other.state(Space(1)).unwrap();
        o.set_position(1, 1);
        let mut mixed = a.stage();
        assert!(mixed.merge(o.stage()).is_err());
        assert!(Staged::default().merge(Staged::default()).is_ok());
    }
    let db = Db::open(&path, VOL).unwrap();
    assert_eq!(db.state(Space(1)).unwrap().stash_len(), 0);
    assert_eq!(db.state(Space(2)).unwrap().stash_blocks(), vec![7]);
}

#[tokio::test]
async fn refuses_other_volume_and_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    drop(Db::open(&path, VOL).unwrap());
    assert!(matches!(
        Db::open(&path, [1; 16]),
        Err(DbError::OtherVolume)
    ));
    let db = Db::open(&path, VOL).unwrap();
    db.set_meta("format", &99u64.to_be_bytes()).await.unwrap();
    drop(db);
    assert!(matches!(
        Db::open(&path, VOL),
        Err(DbError::Format { found: 99 })
    ));
}

#[tokio::test]
async fn snapshot_restores_everything_in_a_new_generation() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("a.redb"), VOL).unwrap();
    let mut s = db.state(Space(3)).unwrap();
    for i in 0..100u64 {
        s.set_position(i, i * 3);
        s.advance(i + 1000);
    }
    s.stash_insert(7, b("seven"));
    s.set_meta(b"x", b("meta"));
    s.commit().await.unwrap();
    let mut kv = db.kv().unwrap();
    kv.put(b"b/bucket", b"{}".to_vec());
    kv.commit().await.unwrap();
    db.set_epoch(4).await.unwrap();
    let snap = db.snapshot().unwrap();
    // Padding with zeros (as the checkpoint does) is accepted.
    let mut padded = snap.clone();
    padded.resize(snap.len() + 4096, 0);
    let path_b = dir.path().join("b.redb");
    let r = Db::restore(&path_b, VOL, &padded).unwrap();
    assert_eq!(r.epoch(), 4);
    assert_ne!(
        r.generation(),
        db.generation(),
        "a restore draws a new generation"
    );
    assert_eq!(
        oram_state::bank_of(db.generation()),
        0,
        "a new database writes in bank 0"
    );
    assert_eq!(
        oram_state::bank_of(r.generation()),
        1,
        "a restore writes in the next bank"
    );
    // Restores of restores go round the banks.
    let (mut from, mut bank) = (snap.clone(), 0);
    for i in 0..=oram_state::BANKS {
        let d = Db::restore(&dir.path().join(format!("r{i}.redb")), VOL, &from).unwrap();
        bank = (bank + 1) % oram_state::BANKS;
        assert_eq!(oram_state::bank_of(d.generation()), bank, "restore {i}");
        from = d.snapshot().unwrap();
    }
    let rs = r.state(Space(3)).unwrap();
    assert_eq!(rs.positions(), s.positions());
    assert_eq!(
        rs.nodes(),
        s.nodes(),
        "restored objects keep their generation"
    );
    assert_eq!(rs.stash_get(7).unwrap(), &b("seven"));
    assert_eq!(rs.meta(b"x"), Some(&b("meta")));
    assert_eq!(r.kv().unwrap().get(b"b/bucket"), Some(b"{}".to_vec()));
    assert!(matches!(
        Db::restore(&path_b, VOL, &padded),
        Err(DbError::Exists(_))
    ));
    assert!(Db::restore(&dir.path().join("c.redb"), [2; 16], &snap).is_err());
    assert!(Db::restore(&dir.path().join("d.redb"), VOL, &snap[..snap.len() - 3]).is_err());
    let mut old = snap.clone();
    old[..8].copy_from_slice(b"ORAMSNP1");
    let err = Db::restore(&dir.path().join("e.redb"), VOL, &old).unwrap_err();
    assert!(err.to_string().contains("older"), "{err}");
    // Slots written after the epoch moved flip once; new writes carry the new
    // generation.
    drop(rs);
    let mut s2 = r.state(Space(3)).unwrap();
    let before = s2.node(1000);
    let after = s2.advance(1000);
    assert_ne!(before.slot, after.slot);
    assert_eq!(after.generation, r.generation());
    assert_eq!(s2.advance(1000).slot, after.slot);
}

/// Ships everything `log` has to a `Vec` (the backend of this test) and reports it
/// landed, as the proxy's shipper does one record at a time.
fn ship_all(log: &ShipLog, shipped: &mut Vec<u8>, record: usize) {
    loop {
        let (start, bytes) = log.take(record);
        assert_eq!(start as usize, shipped.len(), "records continue the stream");
        if bytes.is_empty() {
            return;
        }
        shipped.extend_from_slice(&bytes);
        log.landed(shipped.len() as u64);
    }
}

/// Ships until `commit` resolves (the committer appends on its own thread),
/// within a bounded time.
async fn ship_until(
    log: &ShipLog,
    shipped: &mut Vec<u8>,
    mut commit: oram_state::CommitFuture,
) -> Result<(), oram_state::StateError> {
    use futures::FutureExt;
    for _ in 0..5000 {
        ship_all(log, shipped, 7);
        if let Some(r) = (&mut commit).now_or_never() {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("the commit did not resolve within 5 s of shipping");
}

#[tokio::test]
async fn a_shipped_commit_resolves_only_once_landed_and_replays_onto_a_snapshot() {
    use futures::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let mut s = db.state(S0).unwrap();
    s.set_position(1, 10);
    s.commit().await.unwrap();
    // The checkpoint's snapshot, before the log is shipped from.
    let snap = db.snapshot().unwrap();
    assert_eq!(snapshot_position(&snap).unwrap(), (db.generation(), 0));
    let log = db.ship_log().unwrap();
    assert!(db.ship_log().is_err(), "the log is shipped once");
    let mut shipped = Vec::new();

    s.set_position(1, 11);
    s.stash_insert(4, b("four"));
    let mut first = s.commit();
    let mut kv = db.kv().unwrap();
    kv.put(b"o/x", b"rec".to_vec());
    let mut second = kv.commit();
    // Durable locally is not enough: neither resolves before its bytes landed.
    for _ in 0..50 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!((&mut first).now_or_never().is_none());
    assert!((&mut second).now_or_never().is_none());
    let (end, landed) = log.position();
    assert!(end > 0 && landed == 0);
    // Landing part of the stream resolves nothing past it.
    let (_, part) = log.take(3);
    shipped.extend_from_slice(&part);
    log.landed(3);
    assert!((&mut first).now_or_never().is_none());
    ship_until(&log, &mut shipped, first).await.unwrap();
    ship_until(&log, &mut shipped, second).await.unwrap();
    assert_eq!(log.position(), (shipped.len() as u64, shipped.len() as u64));

    // An empty commit waits for nothing new.
    s.commit().await.unwrap();
    // A local commit (an intent record) resolves once durable here, unshipped...
    s.set_intent(7, Some(b("plan")));
    let staged = s.stage();
    s.settle();
    staged.commit_local().await.unwrap();
    let (end, landed) = log.position();
    assert!(end > landed, "its bytes wait in the stream");
    // ...and is shipped all the same, before what follows it.
    s.set_intent(7, None);
    ship_until(&log, &mut shipped, s.commit()).await.unwrap();
    // A deletion is shipped too.
    s.stash_remove(4);
    ship_until(&log, &mut shipped, s.commit()).await.unwrap();
    let local_end = u64_of(&db.meta("log_end").unwrap().unwrap()).unwrap();
    assert_eq!(
        local_end,
        shipped.len() as u64,
        "each transaction records its end"
    );

    // The machine is lost: the snapshot plus the shipped groups give the state.
    let (groups, used) = decode_groups(&shipped).unwrap();
    assert_eq!(used, shipped.len());
    assert!(groups.len() >= 2);
    let restored = dir.path().join("restored.redb");
    let r = Db::restore_replaying(&restored, VOL, &snap, &groups).unwrap();
    assert_ne!(r.generation(), db.generation());
    let rs = r.state(S0).unwrap();
    assert_eq!(rs.position(1), Some(11));
    assert!(rs.stash_blocks().is_empty());
    assert_eq!(r.kv().unwrap().get(b"o/x"), Some(b"rec".to_vec()));
    assert_eq!(
        snapshot_position(&r.snapshot().unwrap()).unwrap(),
        (r.generation(), 0),
        "a restore starts a new stream in its new generation"
    );
    // Without the log the same snapshot lacks every later commit.
    let bare = Db::restore(&dir.path().join("bare.redb"), VOL, &snap).unwrap();
    assert_eq!(bare.state(S0).unwrap().position(1), Some(10));
    assert_eq!(bare.kv().unwrap().get(b"o/x"), None);
}

#[test]
fn the_shipped_stream_decodes_whole_groups_only() {
    let mut a = oram_state::ChangeSet::default();
    a.push(Table::Positions, vec![1, 2], Some(vec![3; 40]));
    a.push(Table::Kv, b"k".to_vec(), None);
    let mut b2 = oram_state::ChangeSet::default();
    b2.push(Table::Meta, b"epoch".to_vec(), Some(vec![0; 8]));
    let mut stream = encode_group(&[&a]);
    let first = stream.len();
    stream.extend(encode_group(&[&b2]));
    let (g, used) = decode_groups(&stream).unwrap();
    assert_eq!((g, used), (vec![a.clone(), b2], stream.len()));
    // A group whose end never landed is left out, whatever is cut.
    for cut in first..stream.len() {
        let (g, used) = decode_groups(&stream[..cut]).unwrap();
        assert_eq!((g, used), (vec![a.clone()], first), "cut at {cut}");
    }
    // Malformed groups are errors, not panics.
    let mut bad = stream.clone();
    bad[4 + 4] = 200; // table index
    assert!(decode_groups(&bad).is_err());
    let mut bad = stream.clone();
    bad[3] -= 1; // length one short: trailing value bytes missing inside
    assert!(decode_groups(&bad).is_err());
    let huge = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
    assert!(decode_groups(&huge).is_err());
}

#[test]
fn a_large_commit_group_is_split_between_change_sets_and_an_oversized_one_refused() {
    let set = |n: u8, len: usize| {
        let mut c = oram_state::ChangeSet::default();
        c.push(Table::Kv, vec![n], Some(vec![n; len]));
        c
    };
    let (a, b, c) = (set(1, 300), set(2, 300), set(3, 300));
    // Each set's body is 1 + 4 + 1 + 1 + 4 + 300 = 311 bytes: two fit 700, three do not.
    let stream = crate::log::encode_groups_within(&[&a, &b, &c], 700).unwrap();
    let (groups, used) = decode_groups(&stream).unwrap();
    assert_eq!(used, stream.len());
    let merge = |sets: &[&oram_state::ChangeSet]| oram_state::ChangeSet {
        writes: sets.iter().flat_map(|s| s.writes.clone()).collect(),
    };
    assert_eq!(groups, vec![merge(&[&a, &b]), merge(&[&c])]);
    // Every group within the bound, so that decode_groups never refuses one.
    let mut at = 0;
    while at < stream.len() {
        let len = u32::from_be_bytes(stream[at..at + 4].try_into().unwrap()) as usize;
        assert!(len <= 700);
        at += 4 + len;
    }
    // One change set alone over the bound: refused, not shipped unreadable.
    let big = set(4, 800);
    assert!(matches!(
        crate::log::encode_groups_within(&[&a, &big], 700),
        Err(DbError::LogGroup { max: 700, .. })
    ));
    // Within the default bound it is one group, as encode_group writes it.
    assert_eq!(encode_groups(&[&a, &b]).unwrap(), encode_group(&[&a, &b]));
}

/// A volume's state with enough keys for several pages, closed cleanly.
async fn filled_db(path: &Path) {
    let db = Db::open(path, VOL).unwrap();
    let mut s = db.state(S0).unwrap();
    for i in 0..2_000u64 {
        s.set_position(i, i * 7 + 1);
    }
    s.commit().await.unwrap();
    let mut kv = db.kv().unwrap();
    for i in 0..500u32 {
        kv.put(format!("o/{i:05}").as_bytes(), vec![i as u8; 40]);
    }
    kv.commit().await.unwrap();
}

/// Opens `path` and reads everything a command would; `Err` carries the error's
/// text. Panics are caught and returned as `None`.
fn open_and_read(path: &Path) -> Option<Result<(), String>> {
    let path = path.to_path_buf();
    std::panic::catch_unwind(move || match Db::open(&path, VOL) {
        Ok(db) => {
            let s = db.state(S0).map_err(|e| e.to_string())?;
            for i in 0..2_000u64 {
                let _ = s.position(i);
            }
            let kv = db.kv().map_err(|e| e.to_string())?;
            let _ = kv.get(b"o/00042");
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    })
    .ok()
}

#[tokio::test]
async fn a_damaged_database_is_refused_by_name_and_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.redb");
    filled_db(&good).await;
    let bytes = std::fs::read(&good).unwrap();
    let damaged_path = dir.path().join("state.redb");
    let (mut refused, mut opened) = (0, 0);
    // 64 damaged bytes at 40 places spread over the file, the header among them.
    let step = (bytes.len() / 40).max(1);
    let offsets = [0, 100, 4096].into_iter().chain((1..40).map(|i| i * step));
    for off in offsets {
        let mut copy = bytes.clone();
        for b in copy.iter_mut().skip(off).take(64) {
            *b ^= 0x5a;
        }
        std::fs::write(&damaged_path, &copy).unwrap();
        match open_and_read(&damaged_path) {
            None => panic!("a database damaged at offset {off} made the open or a read panic"),
            Some(Ok(())) => opened += 1,
            Some(Err(e)) => {
                assert!(
                    e.contains("is damaged") && e.contains("oram-proxy recover"),
                    "offset {off}: {e}"
                );
                // Refused, not repaired: it stays refused (a rollback to the
                // previous commit could lose acknowledged writes).
                assert!(
                    matches!(open_and_read(&damaged_path), Some(Err(_))),
                    "offset {off}: a second open accepted it"
                );
                refused += 1;
            }
        }
        // Compaction refuses it the same way (or compacts an undamaged file).
        std::fs::write(&damaged_path, &copy).unwrap();
        let compacted = std::panic::catch_unwind(|| crate::compact(&damaged_path, |_| {}));
        match compacted {
            Err(_) => panic!("compacting a database damaged at offset {off} panicked"),
            Ok(Err(DbError::Damaged { .. })) | Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("offset {off}: compact failed with {e}, not as damaged"),
        }
    }
    eprintln!(
        "{} bytes: {refused} damaged copies refused, {opened} opened",
        bytes.len()
    );
    // The file has live pages (refused) and free space (harmless).
    assert!(refused > 0, "no damage was detected");
    assert!(opened > 0, "damage to free pages should not matter");
}

#[tokio::test]
async fn a_crash_image_opens_without_being_taken_for_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let image = dir.path().join("image.redb");
    let db = Db::open(&path, VOL).unwrap();
    let mut s = db.state(S0).unwrap();
    s.set_position(1, 2);
    s.commit().await.unwrap();
    // The file as a kill -9 leaves it: open, last commit durable, no clean close.
    std::fs::copy(&path, &image).unwrap();
    drop(s);
    drop(db);
    let reopened = Db::open(&image, VOL).unwrap();
    assert_eq!(reopened.state(S0).unwrap().position(1), Some(2));
}

#[tokio::test]
async fn a_prefix_of_the_object_index_is_read_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("p.redb"), VOL).unwrap();
    let mut kv = db.kv().unwrap();
    for k in [&b"a/1"[..], b"b/x", b"b/y", b"b0", b"c/1"] {
        kv.put(k, k.to_vec());
    }
    kv.commit().await.unwrap();
    let got = db.kv_prefix(b"b/").unwrap();
    assert_eq!(
        got,
        vec![
            (b"b/x".to_vec(), b"b/x".to_vec()),
            (b"b/y".to_vec(), b"b/y".to_vec())
        ]
    );
    assert!(db.kv_prefix(b"z/").unwrap().is_empty());
}

/// The key rotation's count: positions written, and those written in an epoch
/// at or after a given one, over every space; a later write moves a position.
#[tokio::test]
async fn nodes_written_since_counts_positions_by_their_last_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
    let mut s = db.state(S0).unwrap();
    let mut other = db.state(Space(3)).unwrap();
    for p in 0..4 {
        s.advance(p);
    }
    other.advance(7);
    s.commit().await.unwrap();
    other.commit().await.unwrap();
    db.set_epoch(db.epoch() + 1).await.unwrap();
    let since = db.epoch();
    assert_eq!(db.nodes_written_since(since).unwrap(), (5, 0));
    let mut s = db.state(S0).unwrap();
    s.advance(1);
    s.advance(9);
    s.commit().await.unwrap();
    assert_eq!(db.nodes_written_since(since).unwrap(), (6, 2));
    assert_eq!(db.nodes_written_since(0).unwrap(), (6, 6));
}
