//! Growing real volumes (Path ORAM on the fs back-end, a key file) while
//! objects are written through the object layer, and restarting them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use oram_objects::{ByteStream, ObjectError, ObjectLayer, PutOptions};

use crate::header::{header_is_authentic, read_header};
use crate::{datadir, Volume, VolumeConfig, VolumeError, VolumeHooks};

const BS: usize = 4096;
/// The starting size: 64 blocks of 4 KiB.
const START: u64 = 64;
/// Each object takes three blocks.
const OBJ: usize = 3 * BS - 100;

fn config(dir: &Path, engine: &str) -> VolumeConfig {
    let mut cfg = VolumeConfig {
        data_dir: dir.join("data"),
        engine: toml::from_str(engine).unwrap(),
        ..VolumeConfig::default()
    };
    cfg.backend.path = Some(dir.join("store"));
    // Reopened in the same process, which would still hold the lease it took.
    cfg.backend.lease_secs = 0;
    cfg.state.log_interval_ms = 0;
    cfg.state.checkpoint_interval_secs = 0;
    cfg.key.key_file = Some(dir.join("master.key"));
    cfg
}

fn path_config(dir: &Path) -> VolumeConfig {
    config(
        dir,
        &format!("block_size = {BS}\ncapacity_blocks = {START}\ncached_levels = 0"),
    )
}

/// Opens the volume of `cfg` as a start does: the recorded parameters adopted,
/// the directory's lock taken (kept by the caller as long as the volume).
async fn open(cfg: &VolumeConfig) -> (Volume, std::fs::File) {
    let mut cfg = cfg.clone();
    datadir::ensure_dir(&cfg.data_dir).unwrap();
    datadir::adopt_recorded(&cfg.data_dir.clone(), &mut cfg.engine).unwrap();
    let lock = datadir::lock(&cfg.data_dir).unwrap();
    let hooks = VolumeHooks::default();
    let vol = once_free(|| Volume::open(&cfg, &hooks)).await;
    (vol, lock)
}

/// `open()`'s value once the state database it opens is free: a task of a
/// volume just dropped in this process (one finishing a read of an object)
/// may hold the database a moment longer. Retried for at most 5 s.
async fn once_free<T, F: std::future::Future<Output = Result<T, VolumeError>>>(
    open: impl Fn() -> F,
) -> T {
    for _ in 0..50 {
        match open().await {
            Err(e) if format!("{e:?}").contains("DatabaseAlreadyOpen") => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            out => return out.unwrap(),
        }
    }
    panic!("the database stayed open after its volume was dropped");
}

fn data(i: usize) -> Bytes {
    (0..OBJ)
        .map(|j| (j as u8).wrapping_mul(13) ^ (i as u8).wrapping_mul(101))
        .collect::<Vec<_>>()
        .into()
}

async fn put(layer: &ObjectLayer, i: usize) -> Result<(), ObjectError> {
    let d = data(i);
    let body: ByteStream = Box::pin(futures::stream::iter([Ok(d)]));
    let opts = PutOptions {
        expected_len: Some(OBJ as u64),
        ..PutOptions::default()
    };
    layer
        .put_object("alice", "bkt", &format!("o{i}"), body, opts)
        .await
        .map(|_| ())
}

async fn read_back(layer: &ObjectLayer, stored: &BTreeMap<usize, Bytes>) {
    for (i, d) in stored {
        let (_, s) = layer
            .get_object("alice", "bkt", &format!("o{i}"), None)
            .unwrap();
        let parts: Vec<Bytes> = s.map(|r| r.unwrap()).collect().await;
        assert_eq!(Bytes::from(parts.concat()), *d, "object {i}");
    }
}

/// Puts objects until the layer is full; returns the stored ones.
async fn fill(layer: &ObjectLayer, from: usize, stored: &mut BTreeMap<usize, Bytes>) {
    for i in from..from + 10_000 {
        match put(layer, i).await {
            Ok(()) => {
                stored.insert(i, data(i));
            }
            Err(ObjectError::Full { .. }) => return,
            Err(e) => panic!("put {i}: {e}"),
        }
    }
    panic!("never full");
}

/// A Path volume grows while objects are written through the object layer:
/// the writes during the growth succeed, the new room takes objects the old
/// size could not hold, the records (volume.toml, the authenticated header)
/// carry the new capacity, and a restart with the starting size still
/// configured opens at the new size with every object byte for byte and a
/// clean fsck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_volume_grows_while_objects_are_written_and_restarts_grown() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = path_config(dir.path());
    let mut stored = BTreeMap::new();
    {
        let (vol, _lock) = open(&cfg).await;
        let vol = Arc::new(vol);
        vol.layer.create_bucket("alice", "bkt").await.unwrap();
        // Half full, then the growth runs while more objects are written.
        for i in 0..10 {
            put(&vol.layer, i).await.unwrap();
            stored.insert(i, data(i));
        }
        let progress = Arc::new(std::sync::Mutex::new((0u64, 0u64)));
        let p = progress.clone();
        let growing = {
            let vol = vol.clone();
            tokio::spawn(async move {
                vol.grow(4 * START, &move |d, t| *p.lock().unwrap() = (d, t))
                    .await
            })
        };
        let mut i = 10;
        while !growing.is_finished() && i < 18 {
            put(&vol.layer, i).await.unwrap();
            stored.insert(i, data(i));
            i += 1;
        }
        let grown = growing.await.unwrap().unwrap();
        assert_eq!(grown.capacity, 4 * START);
        assert!(grown.written > 0 && grown.written == grown.positions);
        let (done, total) = *progress.lock().unwrap();
        assert_eq!((done, total), (grown.positions, grown.positions));
        assert_eq!(vol.capacity_blocks(), 4 * START);
        let usage = vol.layer.usage();
        assert_eq!(usage.capacity_blocks, 4 * START);
        // Beyond the starting size.
        fill(&vol.layer, 100, &mut stored).await;
        assert!(stored.len() as u64 * 3 > START, "{}", stored.len());
        read_back(&vol.layer, &stored).await;
        // The records carry it, the header authenticated.
        let p = datadir::read_volume(&cfg.data_dir).unwrap();
        assert_eq!(
            (p.capacity_blocks, p.grown_blocks, p.growing_to),
            (START, Some(4 * START), None)
        );
        let key = p.load_key(&crate::key::KeySource::File(dir.path().join("master.key")));
        let h = read_header(vol.store.as_ref(), "vol0")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(h.grown_blocks, Some(4 * START));
        assert!(header_is_authentic(&key.unwrap(), &h));
        // The growth history records it: sizes, the positions written and
        // their bytes; growing to the size in effect adds nothing.
        let hist = vol.growth_history().await.unwrap();
        assert_eq!(hist.len(), 1, "{hist:?}");
        let g = &hist[0];
        assert_eq!(
            (g.from_blocks, g.to_blocks, g.block_size),
            (START, 4 * START, BS as u64)
        );
        assert_eq!((g.positions, g.written), (grown.positions, grown.written));
        assert!(g.backend_bytes > grown.written * BS as u64, "{g:?}");
        assert!(
            g.started_unix > 0 && g.started_unix <= g.finished_unix,
            "{g:?}"
        );
        vol.grow(4 * START, &|_, _| {}).await.unwrap();
        assert_eq!(vol.growth_history().await.unwrap(), hist);
        vol.checkpoint().await.unwrap();
    }
    // The configuration still names the starting size.
    let (vol, lock) = open(&cfg).await;
    assert_eq!(vol.capacity_blocks(), 4 * START);
    assert_eq!(vol.layer.usage().capacity_blocks, 4 * START);
    read_back(&vol.layer, &stored).await;
    assert!(matches!(
        put(&vol.layer, 9999).await,
        Err(ObjectError::Full { .. })
    ));
    // Write-backs of the reads above land before the database is let go.
    vol.engine.flush().await.unwrap();
    drop((vol, lock));
    // A configuration updated to the grown size is taken as the starting size.
    let mut updated = cfg.clone();
    updated.engine.capacity_blocks = 4 * START;
    updated.engine.named.insert("capacity_blocks".into());
    reopen_and_check(&updated, 4 * START, &stored).await;
}

/// Opens the volume of `cfg` again: `capacity` blocks, every object of `stored`
/// byte for byte; then closes it and finds fsck clean with exactly those objects.
async fn reopen_and_check(cfg: &VolumeConfig, capacity: u64, stored: &BTreeMap<usize, Bytes>) {
    let (vol, lock) = open(cfg).await;
    assert_eq!(vol.capacity_blocks(), capacity);
    read_back(&vol.layer, stored).await;
    // Write-backs of the reads land before the database is let go.
    vol.engine.flush().await.unwrap();
    drop((vol, lock));
    // As `oram-proxy fsck` does: the recorded parameters adopted first.
    let mut cfg = cfg.clone();
    datadir::adopt_recorded(&cfg.data_dir.clone(), &mut cfg.engine).unwrap();
    let hooks = VolumeHooks::default();
    let rep = once_free(|| crate::fsck(&cfg, &hooks, &|_, _, _| {})).await;
    assert!(rep.is_clean(), "{:?}", rep.problems);
    assert_eq!(rep.objects, stored.len() as u64);
}

/// A crash after the engine's switch and before volume.toml and the header
/// were rewritten (the engine grown, nothing else): the restart opens at the
/// new size, records it, and the layer takes the new blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_the_engine_grew_and_before_the_records_opens_grown() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = path_config(dir.path());
    let mut stored = BTreeMap::new();
    {
        let (vol, _lock) = open(&cfg).await;
        vol.layer.create_bucket("alice", "bkt").await.unwrap();
        fill(&vol.layer, 0, &mut stored).await;
        // The engine's step only, as Volume::grow takes it; then "the crash".
        vol.engine.grow(2 * START, &|_, _| {}).await.unwrap();
        assert_eq!(vol.layer.usage().capacity_blocks, START);
        let p = datadir::read_volume(&cfg.data_dir).unwrap();
        assert_eq!(p.grown_blocks, None);
    }
    let (vol, _lock) = open(&cfg).await;
    assert_eq!(vol.capacity_blocks(), 2 * START);
    assert_eq!(vol.layer.usage().capacity_blocks, 2 * START);
    assert_eq!(vol.params.grown_blocks, Some(2 * START));
    let p = datadir::read_volume(&cfg.data_dir).unwrap();
    assert_eq!(p.grown_blocks, Some(2 * START));
    let h = read_header(vol.store.as_ref(), "vol0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.grown_blocks, Some(2 * START));
    let before = stored.len();
    fill(&vol.layer, 1000, &mut stored).await;
    assert!(stored.len() > before, "the new room takes objects");
    read_back(&vol.layer, &stored).await;
}

/// A growth recorded as started whose engine never switched (a crash before
/// the switch) is reported pending at the next open, at the old size, and
/// growing again to it finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growth_interrupted_before_its_switch_is_pending_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = path_config(dir.path());
    {
        let (vol, _lock) = open(&cfg).await;
        // As Volume::grow records it before the engine's growth; "the crash"
        // comes before the engine switched.
        vol.rewrite_record(|p| {
            p.growing_to = Some(2 * START);
            Ok(())
        })
        .await
        .unwrap();
    }
    let (vol, _lock) = open(&cfg).await;
    assert_eq!(vol.capacity_blocks(), START);
    assert_eq!(vol.growth_pending(), Some(2 * START));
    // Another size is refused while it is pending.
    let e = vol.grow(3 * START, &|_, _| {}).await.unwrap_err();
    assert!(e.to_string().contains("grow to 128"), "{e}");
    vol.grow(2 * START, &|_, _| {}).await.unwrap();
    assert_eq!(vol.layer.usage().capacity_blocks, 2 * START);
    let p = datadir::read_volume(&cfg.data_dir).unwrap();
    assert_eq!((p.grown_blocks, p.growing_to), (Some(2 * START), None));
    // The resumed growth is in the history, from the old size.
    let hist = crate::read_history(&cfg.data_dir).unwrap();
    assert_eq!(hist.len(), 1, "{hist:?}");
    assert_eq!((hist[0].from_blocks, hist[0].to_blocks), (START, 2 * START));
}

/// A volume of `engine` (its `[engine]` table without the size) grows
/// from full: grown, filled further, and reopened at the new size with every
/// object and a clean fsck, its checkpoint within the grown volume's fixed
/// size. Returns what the engine's growth wrote.
async fn grows_and_restarts_grown(engine: &str) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!("{engine}\nblock_size = {BS}\ncapacity_blocks = {START}"),
    );
    let mut stored = BTreeMap::new();
    let written = {
        let (vol, _lock) = open(&cfg).await;
        assert!(vol.grows());
        vol.layer.create_bucket("alice", "bkt").await.unwrap();
        fill(&vol.layer, 0, &mut stored).await;
        let grown = vol.grow(2 * START, &|_, _| {}).await.unwrap();
        assert_eq!(grown.capacity, 2 * START);
        assert_eq!(grown.written, grown.positions);
        let before = stored.len();
        fill(&vol.layer, 100, &mut stored).await;
        assert!(stored.len() > before, "no room after the growth");
        let p = datadir::read_volume(&cfg.data_dir).unwrap();
        assert_eq!((p.grown_blocks, p.growing_to), (Some(2 * START), None));
        assert_eq!(vol.growth_history().await.unwrap().len(), 1);
        // The grown state fits the checkpoint size of the grown volume (a
        // tree grown by whole levels has more room than one created there).
        let info = vol.checkpoint().await.unwrap();
        let fixed = crate::params::checkpoint_size_at(&vol.sizing, 2 * START);
        assert!(info.state_bytes <= fixed, "{} > {fixed}", info.state_bytes);
        vol.engine.flush().await.unwrap();
        grown.written
    };
    reopen_and_check(&cfg, 2 * START, &stored).await;
    written
}

/// A `direct` volume grows by one commit: nothing written to the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_volume_grows_and_restarts_grown() {
    assert_eq!(
        grows_and_restarts_grown("kind = 'direct'\ninsecure_direct = true").await,
        0
    );
}

/// An ObliviStore volume grows by raising its partitions' top levels:
/// nothing written at the growth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oblivistore_volume_grows_and_restarts_grown() {
    assert_eq!(grows_and_restarts_grown("kind = 'oblivistore'").await, 0);
}

/// A CURIOUS volume grows by deepening its partitions' trees: their new
/// buckets written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curious_volume_grows_and_restarts_grown() {
    assert!(grows_and_restarts_grown("kind = 'curious'").await > 0);
}

/// A smaller size is refused, nothing recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_to_a_smaller_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (vol, _lock) = open(&path_config(dir.path())).await;
    let before = std::fs::read_to_string(dir.path().join("data/volume.toml")).unwrap();
    let e = vol.grow(START / 2, &|_, _| {}).await.unwrap_err();
    assert!(e.to_string().contains("cannot shrink"), "{e}");
    let after = std::fs::read_to_string(dir.path().join("data/volume.toml")).unwrap();
    assert_eq!(before, after);
}
