//! The checks with a durable state: crashes (the runtime dropped with its tasks
//! and memory), a failed commit, a restore from a snapshot (a recover), and the
//! objects a checkpoint refers to. The fs store and the redb state database are
//! real, on disk.

use std::path::Path;
use std::sync::Arc;

use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey, Recording};
use oram_state::{Space, TrustedState};
use oram_statedb::Db;
use oram_store_fs::FsStore;

use super::*;
use crate::OramError;

const VOL: [u8; 16] = [3; 16];

fn durable_params() -> Params {
    Params {
        capacity: 512,
        block_size: 256,
        cached_levels: 3,
        ..Params::default()
    }
}

fn engine(s: &dyn Subject, p: &Params, store: Arc<dyn BlockStore>, db: &Arc<Db>) -> Arc<dyn Oram> {
    s.build(
        p,
        store,
        test_sealer(),
        Box::new(db.state(Space(0)).unwrap()),
    )
}

/// Ends a "process": drops the runtime with every task still in it.
pub(super) fn crash(rt: tokio::runtime::Runtime) {
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
}

/// A recorded, fault-injecting fs store and a redb state database, both in a
/// directory: what one "process" of a check with two rounds in flight runs on.
pub(super) struct DurableRig {
    pub(super) store: Arc<HoldStore<FsStore>>,
    pub(super) rec: Arc<Recording<Arc<HoldStore<FsStore>>>>,
    db: Arc<Db>,
}

impl DurableRig {
    /// Opens (again, after a crash) the store and state of volume `vol` in `dir`.
    pub(super) fn open(dir: &Path, vol: [u8; 16]) -> Self {
        let store = Arc::new(HoldStore::new(FsStore::open(dir.join("store")).unwrap()));
        let rec = Arc::new(Recording::new(store.clone()));
        let db = Db::open(&dir.join("state.redb"), vol).unwrap();
        Self { store, rec, db }
    }

    /// `s`'s engine for `p` over the recording, its state in space 0.
    pub(super) fn engine(&self, s: &dyn Subject, p: &Params) -> Arc<dyn Oram> {
        engine(s, p, self.rec.clone(), &self.db)
    }

    /// The intent records durable now.
    fn intents(&self) -> usize {
        self.db.state(Space(0)).unwrap().intents().len()
    }
}

/// The restart after a crash with two rounds in flight in `dir`: both intent
/// records are durable; a read of block `read` (its answer checked) repeats
/// both rounds first, which `check` judges from the fetches the provider saw;
/// then blocks `0..ids` read back as `model` holds them, and once flushed no
/// intent record is left.
pub(super) fn restart_repeats_both(
    s: &dyn Subject,
    p: &Params,
    dir: &Path,
    vol: [u8; 16],
    (model, ids): (&Model, u64),
    read: u64,
    check: impl FnOnce(&[oram_blockstore::TraceEvent], &dyn Oram),
) {
    runtime().block_on(async {
        let rig = DurableRig::open(dir, vol);
        assert_eq!(rig.intents(), 2, "both rounds' intent records are durable");
        let e = rig.engine(s, p);
        assert_eq!(
            e.access(vec![Op::Read(read)]).await.unwrap()[0],
            model[&read]
        );
        check(&fetch_events(&rig.rec.take_trace()), e.as_ref());
        read_back(e.as_ref(), model, ids, p.max_batch).await;
        e.flush().await.unwrap();
        assert_eq!(rig.intents(), 0, "an intent record is left");
    });
}

/// Half the writes land; the other half are answered while their write-backs
/// hang (engines that write back after answering), or hang unanswered in their
/// PUTs; the process dies. A restart resends the journal, or finishes the
/// interrupted round from its intent record, and loses nothing.
pub fn loses_nothing_when_it_dies_with_write_backs_in_flight(s: Arc<dyn Subject>) {
    let dir = tempfile::tempdir().unwrap();
    let (state_path, store_path) = (dir.path().join("state.redb"), dir.path().join("store"));
    let p = durable_params();
    let blocks = 96u64;
    let mut model = Model::new();
    let rt = runtime();
    rt.block_on(async {
        let store = Arc::new(HoldStore::new(FsStore::open(&store_path).unwrap()));
        let db = Db::open(&state_path, VOL).unwrap();
        let e = engine(s.as_ref(), &p, store.clone(), &db);
        fill(e.as_ref(), &mut model, 0..blocks / 2, 1).await;
        store.set_puts_open(false);
        for chunk in (blocks / 2..blocks).collect::<Vec<_>>().chunks(16) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|&b| Op::Write(b, block_data(b, 1, p.block_size)))
                .collect();
            if s.writes_back() {
                // Acknowledged: the round committed before answering.
                e.access(ops.clone()).await.unwrap();
                for op in ops {
                    if let Op::Write(b, d) = op {
                        model.insert(b, d);
                    }
                }
            } else {
                // The PUT hangs: journaled (or the round's intent recorded), never
                // acknowledged. Either outcome of such a write is fine after the
                // crash, but nothing else may change.
                let e2 = e.clone();
                let t = tokio::spawn(async move { e2.access(ops).await });
                // Wait (bounded) until the writes are at the backend's door.
                for _ in 0..1000 {
                    if store.puts_waiting() > 0 {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                assert!(store.puts_waiting() > 0, "no PUT was sent");
                assert!(!t.is_finished(), "a write was answered before its PUT");
                break;
            }
        }
        if s.writes_back() {
            assert!(e.stats().pending_writebacks > 0);
        }
    });
    crash(rt);
    runtime().block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(&store_path).unwrap());
        let db = Db::open(&state_path, VOL).unwrap();
        let left = db.state(Space(0)).unwrap();
        assert!(
            !left.pending().is_empty() || !left.intents().is_empty(),
            "neither the journal nor an intent record holds the writes that never landed"
        );
        drop(left);
        let e = engine(s.as_ref(), &p, fs, &db);
        let zeros = bytes::Bytes::from(vec![0; p.block_size]);
        let got = e.access((0..blocks).map(Op::Read).collect()).await.unwrap();
        for (b, data) in got.iter().enumerate() {
            let b = b as u64;
            match model.get(&b) {
                Some(want) => assert_eq!(data, want, "block {b}"),
                // An unacknowledged write: its new value or nothing.
                None => assert!(*data == zeros || *data == block_data(b, 1, p.block_size)),
            }
        }
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert!(rep.blocks_found >= model.len() as u64);
        let left = db.state(Space(0)).unwrap();
        assert!(left.pending().is_empty() && left.intents().is_empty());
    });
}

/// A round whose reads went out but that never committed (the process died while
/// the backend held its GETs) is repeated first after the restart: the same
/// requests, before anything new is drawn. Oblivious engines only.
pub fn a_crash_between_reads_and_commit_repeats_the_same_reads(s: Arc<dyn Subject>) {
    if !s.oblivious() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (state_path, store_path) = (dir.path().join("state.redb"), dir.path().join("store"));
    let p = durable_params();
    let mut model = Model::new();
    let rt = runtime();
    let held = rt.block_on(async {
        let store = Arc::new(HoldStore::new(FsStore::open(&store_path).unwrap()));
        let db = Db::open(&state_path, VOL).unwrap();
        let e = engine(s.as_ref(), &p, store.clone(), &db);
        fill(e.as_ref(), &mut model, 0..64, 1).await;
        store.set_gets_open(false);
        let e2 = e.clone();
        let t = tokio::spawn(async move { e2.access(vec![Op::Read(7), Op::Read(9)]).await });
        // The round's reads arrive at the (holding) backend (after its intent
        // record is durable: bounded wait); then the process dies.
        for _ in 0..1000 {
            if !store.held().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // An engine of several partitions sends their reads at about the same
        // time: until none has come for 100 ms (bounded).
        let mut seen = store.held().len();
        for _ in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let now = store.held().len();
            if now == seen {
                break;
            }
            seen = now;
        }
        assert!(!t.is_finished());
        sorted_seen(store.held())
    });
    crash(rt);
    assert!(!held.is_empty(), "the round's reads never went out");
    runtime().block_on(async {
        let rec = Arc::new(Recording::new(FsStore::open(&store_path).unwrap()));
        let db = Db::open(&state_path, VOL).unwrap();
        assert!(
            !db.state(Space(0)).unwrap().intents().is_empty(),
            "no intent record"
        );
        let e = engine(s.as_ref(), &p, rec.clone(), &db);
        // Something else entirely: the interrupted round comes first.
        e.access(vec![Op::Read(30)]).await.unwrap();
        // Rounds are sequential: the first fetches are the repeated round's.
        let fetches = fetch_events(&rec.take_trace());
        assert!(
            fetches.len() > held.len(),
            "the new access read nothing of its own"
        );
        assert_eq!(
            fetches_of(&fetches[..held.len()]),
            held,
            "the interrupted round was not repeated as it was"
        );
        assert_eq!(e.stats().extra("rounds_repeated_total"), Some(1));
        read_back(e.as_ref(), &model, 64, p.max_batch).await;
        e.flush().await.unwrap();
        assert!(db.state(Space(0)).unwrap().intents().is_empty());
    });
}

/// A commit that fails (an I/O error of the state database) fails its access and
/// every later one; the data acknowledged before is intact after a restart.
pub fn a_failed_commit_fails_cleanly_and_a_restart_loses_nothing(s: Arc<dyn Subject>) {
    let dir = tempfile::tempdir().unwrap();
    let (state_path, store_path) = (dir.path().join("state.redb"), dir.path().join("store"));
    let p = durable_params();
    let mut model = Model::new();
    runtime().block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(&store_path).unwrap());
        let db = Db::open(&state_path, VOL).unwrap();
        let e = engine(s.as_ref(), &p, fs, &db);
        fill(e.as_ref(), &mut model, 0..40, 1).await;
        db.inject_commit_failure();
        for attempt in 0..3u64 {
            let err = e
                .access(vec![Op::Write(
                    attempt,
                    block_data(attempt, 2, p.block_size),
                )])
                .await
                .unwrap_err();
            assert!(matches!(err, OramError::State(_)), "{err}");
        }
        assert!(db.failure().is_some());
    });
    runtime().block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(&store_path).unwrap());
        let db = Db::open(&state_path, VOL).unwrap();
        let e = engine(s.as_ref(), &p, fs, &db);
        read_back(e.as_ref(), &model, 40, p.max_batch).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, 40);
    });
}

/// Every object under `prefix`, with its contents.
async fn objects(store: &dyn BlockStore, prefix: &str) -> Vec<(ObjKey, bytes::Bytes)> {
    let keys = store.list(prefix).await.unwrap();
    let vals = store.get_many(&keys).await.unwrap();
    keys.into_iter()
        .zip(vals)
        .map(|(k, v)| (k, v.unwrap()))
        .collect()
}

fn restore(dir: &Path, name: &str, snap: &[u8]) -> Arc<Db> {
    Db::restore(&dir.join(name), VOL, snap).unwrap()
}

/// A volume after a lost timeline: its engine restored from a checkpoint
/// and written since, the objects the lost timeline wrote after that
/// checkpoint, and the model of what the restored engine holds.
struct AfterLostTimeline {
    fs: Arc<dyn BlockStore>,
    engine: Arc<dyn Oram>,
    lost: Vec<(ObjKey, bytes::Bytes)>,
    model: Model,
    p: Params,
}

/// A checkpoint (snapshot), writes after it (a timeline that gets lost: the
/// process is replaced), a restore from the checkpoint (a recover, or another
/// machine taking a cluster node's partitions over), a sweep, and new writes.
/// (The engine may run tasks on the runtime it was built on: call it on the
/// runtime that uses it.)
async fn after_a_lost_timeline(s: &dyn Subject, dir: &Path) -> AfterLostTimeline {
    let p = Params {
        capacity: 64,
        block_size: 64,
        cached_levels: 1,
        ..Params::default()
    };
    let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.join("store")).unwrap());
    let prefix = format!("{}/", p.prefix);
    let (snap, lost) = {
        let db = Db::open(&dir.join("a.redb"), VOL).unwrap();
        let e = engine(s, &p, fs.clone(), &db);
        let mut old = Model::new();
        fill(e.as_ref(), &mut old, 0..p.capacity, 1).await;
        let quiet = e.quiesce().await.unwrap();
        let snap = db.snapshot().unwrap();
        db.set_epoch(db.epoch() + 1).await.unwrap();
        drop(quiet);
        let before = objects(fs.as_ref(), &prefix).await;
        fill(e.as_ref(), &mut old, 0..p.capacity, 2).await;
        let lost: Vec<_> = objects(fs.as_ref(), &prefix)
            .await
            .into_iter()
            .filter(|o| !before.contains(o))
            .collect();
        (snap, lost)
    };
    assert!(!lost.is_empty());
    // The recover: a state rebuilt from the checkpoint (its epoch complete),
    // post-checkpoint objects swept.
    let db = restore(dir, "b.redb", &snap);
    db.set_epoch(db.epoch() + 1).await.unwrap();
    let e = engine(s, &p, fs.clone(), &db);
    assert!(e.sweep().await.unwrap() > 0);
    let mut model = Model::new();
    fill(e.as_ref(), &mut model, 0..p.capacity, 3).await;
    AfterLostTimeline {
        fs,
        engine: e,
        lost,
        model,
        p,
    }
}

/// The keys of `key`'s position in slot bank `bank` (`oram_state::BANKS`): a
/// level object `<prefix>/o/<p>/<level>/<slot>` has its slot last, a tree
/// node or block `<…>/<position>` or `<…>/<position>.<slot>` after a dot.
fn in_bank(key: &str, bank: u8) -> Vec<String> {
    let (stem, last) = key.rsplit_once('/').expect("keys have a prefix");
    let slots = bank * oram_state::SLOTS..(bank + 1) * oram_state::SLOTS;
    if key.contains("/o/") {
        return slots.map(|s| format!("{stem}/{s}")).collect();
    }
    let position = last.split_once('.').map_or(last, |(p, _)| p);
    slots
        .map(|s| match s {
            0 => format!("{stem}/{position}"),
            s => format!("{stem}/{position}.{s}"),
        })
        .collect()
}

/// Writes of a replaced process landing late — after the state it was
/// replaced by (restored from its checkpoint) wrote its own — overwrite
/// nothing the new state reads: the restored state writes in another slot
/// bank (`oram_state::BANKS`), and the objects of the old bank it still reads
/// are those live at the checkpoint, which no write after it goes to. Every
/// block reads back as the new state wrote it and the engine's check is clean.
/// (Before banks, the replaced process's late writes landed on the names its
/// successor wrote and made them unreadable.)
pub fn late_writes_of_a_replaced_process_overwrite_nothing(s: Arc<dyn Subject>) {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let t = after_a_lost_timeline(s.as_ref(), dir.path()).await;
        let now = objects(t.fs.as_ref(), &format!("{}/", t.p.prefix)).await;
        let shared = t
            .lost
            .iter()
            .filter(|(k, _)| now.iter().any(|(k2, _)| k2 == k))
            .count();
        assert_eq!(shared, 0, "the new timeline wrote where the old one did");
        // The replaced process's writes land now.
        t.fs.put_many(t.lost.clone()).await.unwrap();
        read_back(t.engine.as_ref(), &t.model, t.p.capacity, t.p.max_batch).await;
        let rep = t.engine.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// After a lost timeline and new writes, the provider copies the lost
/// timeline's objects to the names the new one uses (its slot bank). Reading
/// them is an integrity error, never their data — although their positions and
/// versions repeat the new timeline's.
pub fn a_replay_from_a_lost_timeline_is_an_integrity_error(s: Arc<dyn Subject>) {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let t = after_a_lost_timeline(s.as_ref(), dir.path()).await;
        let now = objects(t.fs.as_ref(), &format!("{}/", t.p.prefix)).await;
        let replayed: Vec<(ObjKey, bytes::Bytes)> = t
            .lost
            .iter()
            .flat_map(|(k, v)| {
                in_bank(k.as_str(), 1)
                    .into_iter()
                    .map(|k| (ObjKey::new(k).unwrap(), v.clone()))
            })
            .filter(|(k, _)| now.iter().any(|(k2, _)| k2 == k))
            .collect();
        assert!(
            !replayed.is_empty(),
            "no object of the lost timeline maps to a name the new one wrote"
        );
        t.fs.put_many(replayed).await.unwrap();
        let zeros = bytes::Bytes::from(vec![0; t.p.block_size]);
        let mut reasons = Vec::new();
        for b in 0..t.p.capacity {
            match t.engine.access(vec![Op::Read(b)]).await {
                Ok(v) => assert!(
                    v[0] == t.model[&b] && v[0] != zeros,
                    "block {b}: data of a lost timeline, or zeros"
                ),
                Err(OramError::Integrity { reason, .. }) => reasons.push(reason),
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        // Caught when the object is opened: it was sealed in another generation.
        assert!(
            reasons.iter().any(|r| r.contains("authentication failed")),
            "the replayed objects went unnoticed: {reasons:?}"
        );
    });
}

/// A checkpoint's objects stay untouched by later writes; a state restored from
/// it reads the checkpoint's data after a sweep.
pub fn writes_after_a_checkpoint_spare_its_objects(s: Arc<dyn Subject>) {
    let dir = tempfile::tempdir().unwrap();
    let p = durable_params();
    runtime().block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.path().join("store")).unwrap());
        let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
        let e = engine(s.as_ref(), &p, fs.clone(), &db);
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..64, 1).await;
        // Only what the state refers to (engines that write ahead of their commit
        // leave previous objects, free to be overwritten).
        e.sweep().await.unwrap();
        let quiet = e.quiesce().await.unwrap();
        let before = objects(fs.as_ref(), &format!("{}/", p.prefix)).await;
        let snap = db.snapshot().unwrap();
        db.set_epoch(db.epoch() + 1).await.unwrap();
        drop(quiet);
        let mut later = Model::new();
        for v in 2..6 {
            fill(e.as_ref(), &mut later, 0..64, v).await;
        }
        for (k, v) in &before {
            let got = fs.get_many(std::slice::from_ref(k)).await.unwrap();
            assert_eq!(
                got[0].as_ref(),
                Some(v),
                "{k}, which the checkpoint refers to, was overwritten"
            );
        }
        drop(e);
        let restored = restore(dir.path(), "restored.redb", &snap);
        let old = engine(s.as_ref(), &p, fs.clone(), &restored);
        assert!(
            old.sweep().await.unwrap() > 0,
            "post-checkpoint objects removed"
        );
        read_back(old.as_ref(), &model, 64, p.max_batch).await;
        let rep = old.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// What a volume's checkpoint does to its state database, with `e` quiesced:
/// a snapshot (returned), the next epoch begun and that checkpoint marked
/// landed (`Db::set_landed`, which lets `e` collect what it superseded).
pub async fn landed_checkpoint(e: &dyn Oram, db: &Db) -> Vec<u8> {
    let quiet = e.quiesce().await.unwrap();
    let snap = db.snapshot().unwrap();
    let epoch = db.epoch() + 1;
    db.set_epoch(epoch).await.unwrap();
    db.set_landed(epoch);
    drop(quiet);
    snap
}

/// A checkpoint that landed (`Db::set_landed`) frees what only earlier states
/// referred to: later rounds and [`crate::Oram::collect`] delete it — never an
/// object that checkpoint refers to (a state restored from it checks clean
/// after later writes and a collect), and, for an engine that collects
/// ([`Subject::collects`]), after the next landed checkpoint and a collect
/// nothing is left to sweep: one object per position.
pub fn superseded_objects_go_once_a_checkpoint_landed(s: Arc<dyn Subject>) {
    let dir = tempfile::tempdir().unwrap();
    // Small batches: positions still queued are written again before their
    // turn (their objects then include the checkpoint's).
    let p = Params {
        collect_batch: 8,
        ..durable_params()
    };
    let prefix = format!("{}/", p.prefix);
    runtime().block_on(async {
        let fs: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.path().join("store")).unwrap());
        let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
        let e = engine(s.as_ref(), &p, fs.clone(), &db);
        let mut model = Model::new();
        for v in 1..4 {
            fill(e.as_ref(), &mut model, 0..64, v).await;
        }
        let first = landed_checkpoint(e.as_ref(), &db).await;
        // Half the blocks written again: their positions keep the checkpoint's
        // objects, the others lose their superseded ones.
        fill(e.as_ref(), &mut model, 0..32, 4).await;
        if s.collects() {
            // What that cost is counted, in the epoch the state is in.
            let c = e.superseded().expect("an engine that collects counts");
            assert_eq!(c.epoch, db.epoch());
            assert!(c.objects > 0 && c.objects <= 2 * c.positions, "{c:?}");
        }
        e.collect().await.unwrap();
        {
            // A recover from it, on a copy of the store (its sweep deletes what
            // was written since, which this timeline still uses).
            let copy = dir.path().join("copy");
            copy_dir(&dir.path().join("store"), &copy);
            let fs_copy: Arc<dyn BlockStore> = Arc::new(FsStore::open(&copy).unwrap());
            let restored = restore(dir.path(), "first.redb", &first);
            let old = engine(s.as_ref(), &p, fs_copy, &restored);
            old.sweep().await.unwrap();
            let rep = old.check(&|_, _| {}).await.unwrap();
            assert!(
                rep.problems.is_empty(),
                "an object the landed checkpoint refers to went: {:?}",
                rep.problems
            );
        }
        landed_checkpoint(e.as_ref(), &db).await;
        let collected = e.collect().await.unwrap();
        if s.collects() {
            assert!(
                collected > 0,
                "nothing was collected at the second checkpoint"
            );
            assert_eq!(e.sweep().await.unwrap(), 0, "superseded objects stayed");
            // One object per position (a slot is a key's `.<slot>` suffix).
            let after = objects(fs.as_ref(), &prefix).await;
            let positions: std::collections::BTreeSet<&str> = after
                .iter()
                .map(|(k, _)| k.as_str())
                .map(|k| match k.rsplit_once('.') {
                    Some((stem, slot)) if slot.parse::<u8>().is_ok() => stem,
                    _ => k,
                })
                .collect();
            assert_eq!(positions.len(), after.len(), "a position kept two objects");
        }
        read_back(e.as_ref(), &model, 64, p.max_batch).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// Copies the directory tree `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// What the DELETEs of superseded objects show the provider follows from what
/// it saw before them: after a landed checkpoint, every deleted key is another
/// slot of a position PUT at least twice before the checkpoint, never the
/// slot last PUT, and never of a position PUT again since the checkpoint before
/// the DELETE; and every position PUT twice or more before and not since has
/// all its other slots deleted once the engine collects. So a predictor that
/// knows only the trace and when the checkpoint landed names exactly the keys
/// deleted (the order within rounds is position order, batch by batch).
pub fn superseded_deletes_follow_from_what_the_server_saw(s: Arc<dyn Subject>) {
    if !s.collects() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        collect_batch: 8,
        ..durable_params()
    };
    runtime().block_on(async {
        let rec = Arc::new(Recording::new(
            FsStore::open(dir.path().join("store")).unwrap(),
        ));
        let db = Db::open(&dir.path().join("state.redb"), VOL).unwrap();
        let e = engine(s.as_ref(), &p, rec.clone(), &db);
        let mut model = Model::new();
        for v in 1..4 {
            fill(e.as_ref(), &mut model, 0..64, v).await;
        }
        landed_checkpoint(e.as_ref(), &db).await;
        let cut = rec.trace().len();
        fill(e.as_ref(), &mut model, 0..32, 4).await;
        e.collect().await.unwrap();
        let trace = rec.trace();
        // A key's position: the key without its slot suffix (`.<slot>`).
        let stem = |k: &str| -> String {
            match k.rsplit_once('.') {
                Some((s, slot)) if slot.parse::<u8>().is_ok() => s.to_string(),
                _ => k.to_string(),
            }
        };
        let mut puts: HashMap<String, (u32, String)> = HashMap::new();
        for ev in trace[..cut].iter().filter(|e| e.verb == Verb::Put) {
            let entry = puts.entry(stem(&ev.key)).or_default();
            entry.0 += 1;
            entry.1 = ev.key.clone();
        }
        assert!(
            trace[..cut].iter().all(|e| e.verb != Verb::Delete),
            "nothing is deleted before a checkpoint landed"
        );
        let mut rewritten = std::collections::HashSet::new();
        let mut deleted = std::collections::HashSet::new();
        for ev in &trace[cut..] {
            let st = stem(&ev.key);
            match ev.verb {
                Verb::Put => {
                    rewritten.insert(st);
                }
                Verb::Delete => {
                    let (n, last) = puts.get(&st).cloned().unwrap_or_default();
                    assert!(n >= 2, "{} deleted: its position was PUT {n} times", ev.key);
                    assert_ne!(ev.key, last, "the object last PUT was deleted");
                    assert!(
                        !rewritten.contains(&st),
                        "{} deleted after its position was written again",
                        ev.key
                    );
                    deleted.insert(ev.key.clone());
                }
                _ => {}
            }
        }
        for (st, (n, last)) in &puts {
            if *n < 2 || rewritten.contains(st) {
                continue;
            }
            for slot in [st.clone(), format!("{st}.1"), format!("{st}.2")] {
                assert!(
                    slot == *last || deleted.contains(&slot),
                    "{slot} was not deleted"
                );
            }
        }
        assert!(!deleted.is_empty());
        read_back(e.as_ref(), &model, 64, p.max_batch).await;
    });
}
