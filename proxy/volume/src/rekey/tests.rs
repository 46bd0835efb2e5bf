//! Passphrase change and master-key rotation on real volumes (fs back-end,
//! real key and passphrase files).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use oram_engine::Op;

use super::*;
use crate::recover::{recover, RecoverOptions};

/// A small Path ORAM volume whose buckets all live on the backend (no tree-top
/// cache), so that every position counts.
fn config(dir: &Path, data: &str) -> VolumeConfig {
    let mut cfg = VolumeConfig {
        data_dir: dir.join(data),
        engine: toml::from_str("block_size = 4096\ncapacity_blocks = 64\ncached_levels = 0")
            .unwrap(),
        ..VolumeConfig::default()
    };
    cfg.backend.path = Some(dir.join("store"));
    cfg.state.log_interval_ms = 0;
    cfg.state.checkpoint_interval_secs = 0;
    if data.starts_with("fresh") {
        // Opened after `recover` in the same process, which holds the lease
        // it took until it would expire (a separate process, gone, would not).
        cfg.backend.lease_secs = 0;
    }
    cfg
}

fn with_key_file(mut cfg: VolumeConfig, key: &Path) -> VolumeConfig {
    cfg.key.key_file = Some(key.to_path_buf());
    cfg
}

fn with_passphrase(mut cfg: VolumeConfig, dir: &Path, name: &str, pass: &str) -> VolumeConfig {
    let path = dir.join(name);
    std::fs::write(&path, pass).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    cfg.key.passphrase_file = Some(path);
    cfg
}

fn block(i: u64, round: u8) -> Bytes {
    Bytes::from(vec![(i as u8) ^ round.wrapping_mul(37); 4096])
}

/// Opens the volume of `cfg` (taking the directory's lock, which the caller
/// keeps as long as the volume).
async fn open(cfg: &VolumeConfig) -> Result<(Volume, std::fs::File), VolumeError> {
    datadir::ensure_dir(&cfg.data_dir)?;
    let lock = datadir::lock(&cfg.data_dir)?;
    Ok((Volume::open(cfg, &VolumeHooks::default()).await?, lock))
}

async fn write_blocks(vol: &Volume, blocks: std::ops::Range<u64>, round: u8) {
    let ops = blocks.map(|i| Op::Write(i, block(i, round))).collect();
    vol.engine.access(ops).await.unwrap();
}

/// Reads `blocks` and checks each byte-exact against `round` (per block).
async fn check_blocks(vol: &Volume, expect: &[(u64, u8)]) {
    let got = vol
        .engine
        .access(expect.iter().map(|(i, _)| Op::Read(*i)).collect())
        .await
        .unwrap();
    for ((i, round), b) in expect.iter().zip(got) {
        assert_eq!(b, block(*i, *round), "block {i}");
    }
}

/// Closes a volume as a stopped proxy does: flushed, checkpointed, lease released.
async fn stop(vol: Volume) {
    vol.engine.flush().await.unwrap();
    vol.checkpoint().await.unwrap();
    close(vol).await;
}

/// A passphrase change keeps every object (nothing is re-sealed), the old
/// passphrase stops opening the volume, and `recover` on a fresh machine takes
/// the new one (and refuses the old one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_passphrase_opens_the_volume_and_recover_and_the_old_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let old = with_passphrase(
        config(dir.path(), "data"),
        dir.path(),
        "old",
        "correct horse battery",
    );
    let new = with_passphrase(
        config(dir.path(), "data"),
        dir.path(),
        "new",
        "staple battery horse",
    );
    {
        let (vol, _lock) = open(&old).await.unwrap();
        assert!(
            vol.params.wrapped_key.is_some(),
            "a new volume's key is wrapped"
        );
        write_blocks(&vol, 0..10, 1).await;
        stop(vol).await;
    }
    let before = std::fs::read(dir.path().join("store/vol0/meta/volume")).unwrap();
    change_passphrase(&old, &VolumeHooks::default(), b"staple battery horse")
        .await
        .unwrap();
    let after = std::fs::read(dir.path().join("store/vol0/meta/volume")).unwrap();
    assert_ne!(before, after, "the backend's header was rewritten");
    let err = match open(&old).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the old passphrase still opens the volume"),
    };
    assert!(err.contains("the passphrase does not unwrap"), "{err}");
    {
        let (vol, _lock) = open(&new).await.unwrap();
        let expect: Vec<_> = (0..10).map(|i| (i, 1)).collect();
        check_blocks(&vol, &expect).await;
        stop(vol).await;
    }
    // A fresh machine: only the backend and the new passphrase.
    let fresh_old = with_passphrase(
        config(dir.path(), "fresh"),
        dir.path(),
        "old",
        "correct horse battery",
    );
    let err = recover(
        &fresh_old,
        &VolumeHooks::default(),
        &RecoverOptions::default(),
        &|_| {},
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("the passphrase does not unwrap"), "{err}");
    let fresh = with_passphrase(
        config(dir.path(), "fresh2"),
        dir.path(),
        "new",
        "staple battery horse",
    );
    recover(
        &fresh,
        &VolumeHooks::default(),
        &RecoverOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    let (vol, _lock) = open(&fresh).await.unwrap();
    let expect: Vec<_> = (0..10).map(|i| (i, 1)).collect();
    check_blocks(&vol, &expect).await;
}

/// A volume made before wrapping (its key is Argon2id's output itself) opens
/// with its passphrase; its first change wraps that same key.
#[test]
fn a_first_change_wraps_the_key_a_passphrase_derived() {
    let kdf = crate::key::Kdf::generate();
    let legacy = kdf.derive(b"an old passphrase").unwrap();
    let check = check_value(&legacy);
    let old = KeySource::Passphrase(zeroize::Zeroizing::new(b"an old passphrase".to_vec()));
    let k = old.load_parts(Some(&kdf), None, &check).unwrap();
    let (kdf2, wrapped) = wrap_for_passphrase(&k, b"a new passphrase").unwrap();
    let new = KeySource::Passphrase(zeroize::Zeroizing::new(b"a new passphrase".to_vec()));
    let k2 = new.load_parts(Some(&kdf2), Some(&wrapped), &check).unwrap();
    assert_eq!(k2.expose_bytes(), legacy.expose_bytes());
    let err = old
        .load_parts(Some(&kdf2), Some(&wrapped), &check)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the passphrase does not unwrap"), "{err}");
}

fn key_of(path: &Path) -> [u8; 32] {
    *crate::key::read_key_file(path).unwrap().expose_bytes()
}

/// Rotation with a key file: the file holds a new key afterwards; objects
/// written before (still under the old key) and after read back byte-exact
/// across a restart, and `recover` on an empty data directory given only the
/// new key reads them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rotation_every_object_reads_back_after_restart_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let key_path: PathBuf = dir.path().join("master.key");
    // A tree of 512 leaves: the 70 paths rewritten after the rotation can
    // never rewrite every bucket written before it (with 64 blocks, 32 leaves,
    // they did about once in thirty runs, and the last check found nothing
    // left under the old key).
    let large = |mut c: VolumeConfig| {
        c.engine.capacity_blocks = 1024;
        c
    };
    let cfg = large(with_key_file(config(dir.path(), "data"), &key_path));
    {
        let (vol, _lock) = open(&cfg).await.unwrap();
        write_blocks(&vol, 0..40, 1).await;
        stop(vol).await;
    }
    let old_key = key_of(&key_path);
    let r = rotate_key(&cfg, &VolumeHooks::default(), NewMasterKey::Generate)
        .await
        .unwrap();
    assert_eq!(r.earlier_keys, 1);
    assert_ne!(key_of(&key_path), old_key, "the key file holds the new key");
    assert!(!pending_key_file(&key_path).exists());
    let status = key_status(&cfg).await.unwrap();
    assert_eq!(status.earlier_keys, 1);
    let p = status.rotation.expect("a rotation in progress");
    assert!(p.resealed < p.positions && !p.complete, "{p:?}");
    assert_eq!(p.since_epoch, r.since_epoch, "as reported by the rotation");
    {
        let (vol, _lock) = open(&cfg).await.unwrap();
        write_blocks(&vol, 30..50, 2).await;
        stop(vol).await;
    }
    let expect: Vec<_> = (0..30)
        .map(|i| (i, 1))
        .chain((30..50).map(|i| (i, 2)))
        .collect();
    {
        // A restart.
        let (vol, _lock) = open(&cfg).await.unwrap();
        check_blocks(&vol, &expect).await;
        let p = vol.rotation_progress().await.unwrap().unwrap();
        assert!(
            p.resealed < p.positions,
            "some objects are still under the old key: {p:?}"
        );
        stop(vol).await;
    }
    // The old key alone no longer opens the volume.
    let old_path = dir.path().join("old.key");
    crate::key::write_key_file(&old_path, &MasterKey::from_bytes(old_key)).unwrap();
    let err = match open(&large(with_key_file(config(dir.path(), "data"), &old_path))).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the old key still opens the volume"),
    };
    assert!(err.contains("wrong key"), "{err}");
    // A lost machine: a fresh data directory, the backend and the new key.
    let fresh = large(with_key_file(config(dir.path(), "fresh"), &key_path));
    recover(
        &fresh,
        &VolumeHooks::default(),
        &RecoverOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    let (vol, _lock) = open(&fresh).await.unwrap();
    let p = vol.rotation_progress().await.unwrap().unwrap();
    assert!(
        p.resealed < p.positions,
        "objects under the old key were read: {p:?}"
    );
    check_blocks(&vol, &expect).await;
}

/// An interrupted rotation (volume.toml names the new key, the key file still
/// holds the old one) completes at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_interrupted_before_the_key_file_moved_completes_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("master.key");
    let cfg = with_key_file(config(dir.path(), "data"), &key_path);
    {
        let (vol, _lock) = open(&cfg).await.unwrap();
        write_blocks(&vol, 0..5, 1).await;
        stop(vol).await;
    }
    let old = std::fs::read(&key_path).unwrap();
    rotate_key(&cfg, &VolumeHooks::default(), NewMasterKey::Generate)
        .await
        .unwrap();
    // As if the rename had not happened.
    std::fs::rename(&key_path, pending_key_file(&key_path)).unwrap();
    std::fs::write(&key_path, &old).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (vol, _lock) = open(&cfg).await.unwrap();
    check_blocks(&vol, &(0..5).map(|i| (i, 1)).collect::<Vec<_>>()).await;
    assert!(!pending_key_file(&key_path).exists());
    assert_ne!(std::fs::read(&key_path).unwrap(), old);
}

/// The re-sealed share grows as accesses rewrite positions, reaches every
/// position, and after the next checkpoint the rotation is complete: the
/// earlier key is dropped and the volume still reads (and recovers) with the
/// new key alone. Before, dropping it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_grows_with_accesses_and_the_old_key_is_dropped_when_complete() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("master.key");
    let cfg = with_key_file(config(dir.path(), "data"), &key_path);
    {
        let (vol, _lock) = open(&cfg).await.unwrap();
        write_blocks(&vol, 0..64, 1).await;
        stop(vol).await;
    }
    rotate_key(&cfg, &VolumeHooks::default(), NewMasterKey::Generate)
        .await
        .unwrap();
    let err = forget_earlier_keys(&cfg, &VolumeHooks::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not complete"), "{err}");
    let (vol, lock) = open(&cfg).await.unwrap();
    let start = vol.rotation_progress().await.unwrap().unwrap();
    let mut last = start;
    // Reads of random-looking blocks; each rewrites the path it reads. 64
    // leaves at most: a few hundred accesses cover them all (bounded).
    let mut i = 0u64;
    while last.resealed < last.positions {
        assert!(
            i < 5000,
            "not every position rewritten after {i} accesses: {last:?}"
        );
        let ops = (0..8).map(|k| Op::Read((i * 8 + k) * 7 % 64)).collect();
        vol.engine.access(ops).await.unwrap();
        vol.engine.flush().await.unwrap();
        i += 1;
        let now = vol.rotation_progress().await.unwrap().unwrap();
        assert!(now.resealed >= last.resealed, "{now:?} after {last:?}");
        last = now;
    }
    assert!(last.resealed > start.resealed);
    assert!(!last.complete, "no checkpoint yet: {last:?}");
    assert_eq!(vol.last_rotation_progress(), Some(start), "counted at open");
    vol.checkpoint().await.unwrap();
    assert!(vol.rotation_progress().await.unwrap().unwrap().complete);
    assert!(
        vol.last_rotation_progress().unwrap().complete,
        "counted again after the checkpoint, for /metrics"
    );
    close(vol).await;
    drop(lock);
    assert_eq!(
        forget_earlier_keys(&cfg, &VolumeHooks::default())
            .await
            .unwrap(),
        1
    );
    let status = key_status(&cfg).await.unwrap();
    assert_eq!((status.earlier_keys, status.rotation), (0, None));
    let expect: Vec<_> = (0..64).map(|i| (i, 1)).collect();
    {
        let (vol, _lock) = open(&cfg).await.unwrap();
        check_blocks(&vol, &expect).await;
        stop(vol).await;
    }
    let fresh = with_key_file(config(dir.path(), "fresh"), &key_path);
    recover(
        &fresh,
        &VolumeHooks::default(),
        &RecoverOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    let (vol, _lock) = open(&fresh).await.unwrap();
    check_blocks(&vol, &expect).await;
}
