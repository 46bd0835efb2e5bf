use super::*;

const VOL: [u8; 16] = [7; 16];

/// The result of a commit that must already be resolved (this `DbKv` writes
/// synchronously).
pub(crate) fn now(mut f: CommitFuture) -> Result<(), StateError> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => panic!("commit not resolved"),
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn state_survives_reopen_and_uncommitted_changes_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    {
        let db = Db::open(&path, VOL).unwrap();
        let mut s = db.state().unwrap();
        s.set_position(3, 9);
        s.advance(5);
        s.stash_insert(4, b("four"));
        s.set_local_bucket(1, vec![(8, b("eight"))]);
        s.pending_put(5, s.node(5), b("bucket"));
        s.commit().unwrap();
        let mut kv = db.kv().unwrap();
        kv.put(b"o/x", b"rec".to_vec());
        now(kv.commit()).unwrap();
        // Not committed: gone after the "crash" (drop without commit).
        s.set_position(3, 1);
        s.stash_insert(6, b("six"));
        kv.put(b"o/y", b"lost".to_vec());
    }
    let db = Db::open(&path, VOL).unwrap();
    let s = db.state().unwrap();
    assert_eq!(s.position(3), Some(9));
    assert_eq!(s.node(5).version, 1);
    assert_eq!(s.stash_blocks(), vec![4]);
    assert_eq!(s.stash_get(4).unwrap(), &b("four"));
    assert_eq!(s.local_bucket(1).unwrap(), &vec![(8, b("eight"))]);
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

#[test]
fn failed_commit_undoes_memory_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("s.redb"), VOL).unwrap();
    let mut s = db.state().unwrap();
    s.set_position(1, 10);
    s.stash_insert(1, b("one"));
    s.commit().unwrap();
    s.set_position(1, 11);
    s.set_position(2, 20);
    s.stash_remove(1);
    s.stash_insert(2, b("two"));
    s.advance(3);
    db.inject_commit_failure();
    assert!(matches!(s.commit(), Err(StateError::Storage(_))));
    assert_eq!(s.position(1), Some(10));
    assert_eq!(s.position(2), None);
    assert_eq!(s.stash_blocks(), vec![1]);
    assert_eq!(s.node(3).version, 0);
    // And the next commit works and writes only the new changes.
    s.set_position(4, 40);
    s.commit().unwrap();
    drop(s);
    let s = db.state().unwrap();
    assert_eq!(s.positions(), vec![(1, 10), (4, 40)]);
}

#[test]
fn a_failed_index_commit_fails_every_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let db = Db::open(&path, VOL).unwrap();
    let mut kv = db.kv().unwrap();
    kv.put(b"a", b"1".to_vec());
    now(kv.commit()).unwrap();
    kv.put(b"a", b"2".to_vec());
    kv.put(b"b", b"3".to_vec());
    db.inject_commit_failure();
    assert!(now(kv.commit()).is_err());
    // Fail-stop: memory keeps the changes, and no later commit succeeds.
    assert_eq!(kv.get(b"a"), Some(b"2".to_vec()));
    kv.put(b"c", b"4".to_vec());
    assert!(now(kv.commit()).is_err());
    drop((kv, db));
    // A restart reloads the last durable state.
    let db = Db::open(&path, VOL).unwrap();
    let kv = db.kv().unwrap();
    assert_eq!(kv.get(b"a"), Some(b"1".to_vec()));
    assert_eq!(kv.get(b"b"), None);
    assert_eq!(kv.get(b"c"), None);
}

#[test]
fn refuses_other_volume_and_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    drop(Db::open(&path, VOL).unwrap());
    assert!(matches!(
        Db::open(&path, [1; 16]),
        Err(DbError::OtherVolume)
    ));
    let db = Db::open(&path, VOL).unwrap();
    db.set_meta("format", &99u64.to_be_bytes()).unwrap();
    drop(db);
    assert!(matches!(
        Db::open(&path, VOL),
        Err(DbError::Format { found: 99 })
    ));
}

#[test]
fn snapshot_restores_everything_and_epoch_persists() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("a.redb"), VOL).unwrap();
    let mut s = db.state().unwrap();
    for i in 0..100u64 {
        s.set_position(i, i * 3);
        s.advance(i + 1000);
    }
    s.stash_insert(7, b("seven"));
    s.commit().unwrap();
    let mut kv = db.kv().unwrap();
    kv.put(b"b/bucket", b"{}".to_vec());
    now(kv.commit()).unwrap();
    db.set_epoch(4).unwrap();
    let snap = db.snapshot().unwrap();
    // Padding with zeros (as the checkpoint does) is accepted.
    let mut padded = snap.clone();
    padded.resize(snap.len() + 4096, 0);
    let path_b = dir.path().join("b.redb");
    let r = Db::restore(&path_b, VOL, &padded).unwrap();
    assert_eq!(r.epoch(), 4);
    let rs = r.state().unwrap();
    assert_eq!(rs.positions(), s.positions());
    assert_eq!(rs.nodes(), s.nodes());
    assert_eq!(rs.stash_get(7).unwrap(), &b("seven"));
    assert_eq!(r.kv().unwrap().get(b"b/bucket"), Some(b"{}".to_vec()));
    assert!(matches!(
        Db::restore(&path_b, VOL, &padded),
        Err(DbError::Exists(_))
    ));
    assert!(Db::restore(&dir.path().join("c.redb"), [2; 16], &snap).is_err());
    assert!(Db::restore(&dir.path().join("d.redb"), VOL, &snap[..snap.len() - 3]).is_err());
    // Slots written after the epoch moved flip once.
    drop(rs);
    let mut s2 = r.state().unwrap();
    let before = s2.node(1000);
    let after = s2.advance(1000);
    assert_ne!(before.slot, after.slot);
    assert_eq!(s2.advance(1000).slot, after.slot);
}

#[test]
fn position_metadata_is_durable_undone_on_failure_and_snapshotted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.redb");
    {
        let db = Db::open(&path, VOL).unwrap();
        let mut s = db.state().unwrap();
        s.set_pos_meta(5, b("five"));
        s.commit().unwrap();
        s.set_pos_meta(5, b("changed"));
        s.set_pos_meta(6, b("six"));
        db.inject_commit_failure();
        assert!(s.commit().is_err());
        assert_eq!(s.pos_meta(5), Some(&b("five")));
        assert_eq!(s.pos_meta(6), None);
        s.set_pos_meta(7, b("seven"));
        s.commit().unwrap();
    }
    let db = Db::open(&path, VOL).unwrap();
    let s = db.state().unwrap();
    assert_eq!(s.pos_meta(5), Some(&b("five")));
    assert_eq!(s.pos_meta(7), Some(&b("seven")));
    let snap = db.snapshot().unwrap();
    let r = Db::restore(&dir.path().join("r.redb"), VOL, &snap).unwrap();
    assert_eq!(r.state().unwrap().pos_meta(7), Some(&b("seven")));
}

#[test]
fn a_snapshot_from_before_the_metadata_table_still_restores() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("a.redb"), VOL).unwrap();
    let mut s = db.state().unwrap();
    s.set_position(1, 2);
    s.commit().unwrap();
    let snap = db.snapshot().unwrap();
    // The empty `posmeta` table is the last 1 + 7 + 8 bytes; an older build wrote
    // none, and the checkpoint pads with zeros.
    let mut old = snap[..snap.len() - 16].to_vec();
    old.resize(old.len() + 100, 0);
    let r = Db::restore(&dir.path().join("b.redb"), VOL, &old).unwrap();
    assert_eq!(r.state().unwrap().position(1), Some(2));
}
