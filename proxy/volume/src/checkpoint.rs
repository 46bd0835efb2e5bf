//! Checkpoints of the trusted state on the backend.
//!
//! `<prefix>/meta/checkpoint`: `ORAMCKP2 ‖ epoch (u64 BE) ‖ sealed head ‖
//! sealed(snapshot)`: the whole state database, padded to a size fixed by the
//! volume's parameters ([`crate::params::checkpoint_size`]) and sealed as
//! (`Meta`, position 0, version = epoch); the head authenticates the epoch and
//! the size (see [`crate::header`]).
//!
//! It is written conditionally (`If-Match`): on the tag of the checkpoint this
//! process wrote last, or, at its first checkpoint, on the tag of the
//! checkpoint the backend holds then, read whole at the size its head names
//! (`If-None-Match: *` if there
//! is none). Only tags this process saw are used: a tag kept across restarts
//! would be wrong for a backend restored from a copy (an fs tag names the
//! file's inode and time). A proxy
//! whose checkpoint was replaced by another writer since — a proxy that took
//! the volume over — can therefore not replace it in turn, even with a PUT
//! that lands late: its PUT is refused (412) and the checkpoint fails.
//!
//! A cluster node checkpoints its own state database the same way
//! ([`Checkpointer`], shared), at `<prefix>/node/<i>/meta/checkpoint`, sealed as
//! its own ([`crate::header::Owner`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use oram_blockstore::{
    BlockStore, BlockStoreExt, ObjKey, ObjTag, PutCondition, SizeBound, StoreError,
};
use oram_engine::OramError;
use oram_seal::Sealer;
use oram_statedb::Db;

use crate::header::{checkpoint_object, open_checkpoint, parse_prefix, Owner, Prefix, HEAD_LEN};
use crate::logship::Shipper;
use crate::VolumeError;

/// The checkpoint's key of `owner` under the volume's `prefix`.
pub(crate) fn checkpoint_key(prefix: &str, owner: Owner) -> ObjKey {
    let k = match owner {
        Owner::Volume => format!("{prefix}/meta/checkpoint"),
        Owner::Node(i) => format!("{}/meta/checkpoint", node_prefix(prefix, i)),
    };
    ObjKey::new(k).expect("prefix validated")
}

/// Where cluster node `i` keeps its checkpoint and shipped log under the
/// volume's `prefix` (beside the partitions' `<prefix>/<letter>/<p>`).
pub(crate) fn node_prefix(prefix: &str, i: u32) -> String {
    format!("{prefix}/node/{i}")
}

/// What a checkpoint wrote.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointInfo {
    /// Its epoch.
    pub epoch: u64,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Bytes of state in it (before padding).
    pub state_bytes: u64,
    /// The number of the last shipped-log record landed when it completed (`None`:
    /// no log, or none landed yet): an anchor for `recover --expect-record`.
    pub log_record: Option<u64>,
}

/// Writes one owner's checkpoints (a volume's, or a cluster node's) of its
/// state database, and checks the backend's against the local epoch.
pub(crate) struct Checkpointer {
    store: Arc<dyn BlockStore>,
    sealer: Arc<Sealer>,
    db: Arc<Db>,
    owner: Owner,
    key: ObjKey,
    /// The padded plaintext size (a growth raises it: [`Checkpointer::set_size`]).
    size: AtomicU64,
    /// Whether checkpoints are written conditionally (see the module
    /// documentation): always on the fs back-end; on S3 unless `[backend]
    /// conditional_writes = false`.
    conditional: bool,
    /// The tag of the checkpoint this process last wrote (`None`: none yet);
    /// guards only this value, and is never held across an await.
    tag: std::sync::Mutex<Option<ObjTag>>,
}

impl Checkpointer {
    /// `owner`'s checkpointer under the volume's `prefix`, padding to `size`.
    pub(crate) fn new(
        store: Arc<dyn BlockStore>,
        sealer: Arc<Sealer>,
        db: Arc<Db>,
        prefix: &str,
        owner: Owner,
        size: u64,
        conditional: bool,
    ) -> Self {
        Self {
            store,
            sealer,
            db,
            owner,
            key: checkpoint_key(prefix, owner),
            size: AtomicU64::new(size),
            conditional,
            tag: std::sync::Mutex::new(None),
        }
    }

    /// Writes a checkpoint of the database as it is now (the caller has
    /// quiesced its engines and hands that hold over as `hold`): snapshots it,
    /// pads it to the fixed size, seals and uploads it, and starts a new epoch
    /// (so the objects it refers to stay untouched until the next checkpoint);
    /// then prunes what `shipper` shipped before it.
    ///
    /// `hold` is let go once the snapshot is taken and the epoch moved if the
    /// log is shipped (`shipper`), else once the upload landed or failed.
    /// Writes made during the upload avoid the slots of the checkpoint being
    /// uploaded and the live ones, not those of the checkpoint before it (three
    /// slots a bank: [`oram_state::NodeVersion`]). Without a log, losing the
    /// machine during the upload leaves only that earlier checkpoint, whose
    /// objects such writes may have replaced: the engines stay held. With the
    /// log, recovery replays it from that earlier checkpoint (its records are
    /// pruned only after this upload lands) to the last commit shipped, and
    /// the shipped state never refers to an object a later write replaced
    /// (`crate::logship`): nothing a recovery reads was overwritten, and the
    /// engines serve on during the upload — minutes, for a large checkpoint
    /// on a slow link.
    ///
    /// Observed by the storage server: one PUT of the checkpoint's key, always
    /// of the same size (conditional: see the module documentation), preceded
    /// by a ranged GET of its head and a GET of it at the first checkpoint of
    /// this process.
    pub(crate) async fn write<H: Send>(
        &self,
        shipper: Option<&Shipper>,
        hold: H,
    ) -> Result<CheckpointInfo, VolumeError> {
        let mut hold = Some(hold);
        let epoch = self.db.epoch();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        self.db
            .set_meta("checkpoint_ms", &now_ms.to_be_bytes())
            .await
            .map_err(OramError::State)?;
        // Where the shipped log stands, read before the snapshot: at most the
        // snapshot's own position (commits of the object index may still run).
        let log_end = self.db.log_end()?;
        // Reading the whole database: off the async workers.
        let db = self.db.clone();
        let mut snap = tokio::task::spawn_blocking(move || db.snapshot())
            .await
            .map_err(|e| VolumeError::Config(format!("state snapshot: {e}")))??;
        let state_bytes = snap.len() as u64;
        let fixed = self.size();
        let mut size = fixed;
        while size < state_bytes {
            size *= 2;
        }
        if size != fixed {
            tracing::warn!(
                state_bytes,
                padded = size,
                "the trusted state outgrew the checkpoint size: the checkpoint is larger, \
                 which shows the backend that the index grew (raise state.checkpoint_index_bytes)"
            );
        }
        snap.resize(size as usize, 0);
        let sealed = self
            .sealer
            .seal(&self.owner.snapshot_identity(epoch), &snap)
            .map_err(OramError::Seal)?;
        zeroize::Zeroize::zeroize(&mut snap);
        drop(snap);
        let obj = checkpoint_object(&self.sealer, self.owner, epoch, size, &sealed)?;
        drop(sealed);
        let bytes = obj.len() as u64;
        let obj = Bytes::from(obj);
        // The epoch moves first: once the upload may have landed, writes must
        // already avoid the slots it refers to. A start that finds the backend's
        // checkpoint behind the local epoch takes a new one before serving.
        self.db.set_epoch(epoch + 1).await?;
        if shipper.is_some() {
            drop(hold.take());
        }
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            match self.upload(&obj).await {
                Ok(()) => {
                    // Not needed for consistency (a start compares epochs): lets a
                    // start tell a roll-back from an interrupted checkpoint.
                    self.db
                        .set_meta("checkpoint_uploaded", &epoch.to_be_bytes())
                        .await
                        .map_err(OramError::State)?;
                    self.db.set_landed(epoch + 1);
                    if let Some(s) = shipper {
                        // Records the checkpoint covers; one that stays is
                        // deleted after the next checkpoint.
                        match s.prune(log_end).await {
                            Ok(n) => tracing::debug!(records = n, "shipped log pruned"),
                            Err(e) => tracing::warn!("shipped log: pruning failed: {e}"),
                        }
                    }
                    break;
                }
                // Another writer replaced the checkpoint: trying again cannot help.
                Err(e @ VolumeError::Integrity(_)) => {
                    tracing::error!("checkpoint refused: {e}");
                    return Err(e);
                }
                Err(e) if attempt >= 5 => {
                    tracing::error!(
                        "checkpoint upload failed ({e}); until one succeeds, `recover` may be \
                         unable to use the previous checkpoint"
                    );
                    return Err(e);
                }
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
            }
        }
        drop(hold);
        Ok(CheckpointInfo {
            epoch,
            bytes,
            state_bytes,
            log_record: shipper.and_then(|s| s.stats.last_record()),
        })
    }

    /// The padded plaintext size now.
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Pads later checkpoints to `size` (a volume that grew: the provider sees
    /// the new size, as it sees the growth).
    pub(crate) fn set_size(&self, size: u64) {
        self.size.store(size, Ordering::Release);
    }

    fn lock_tag(&self) -> std::sync::MutexGuard<'_, Option<ObjTag>> {
        self.tag.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One attempt to upload checkpoint `obj`: a conditional PUT (see
    /// the module documentation) that records the new tag, or a plain one
    /// without conditional writes. A refused condition is resolved by reading
    /// the checkpoint: if it holds exactly `obj`, an earlier attempt landed;
    /// otherwise another writer replaced it ([`VolumeError::Integrity`]).
    async fn upload(&self, obj: &Bytes) -> Result<(), VolumeError> {
        let key = &self.key;
        if !self.conditional {
            self.store
                .put_many(vec![(key.clone(), obj.clone())])
                .await?;
            return Ok(());
        }
        let cond = self.condition().await?;
        let tag = match self.store.put_if(key, obj.clone(), cond).await {
            Ok(tag) => tag,
            Err(StoreError::PreconditionFailed { .. }) => {
                let now = self
                    .store
                    .get_tagged(key, SizeBound::Exact(obj.len() as u64))
                    .await;
                match now {
                    Ok(Some((b, tag))) if b == *obj => tag,
                    Ok(_) | Err(StoreError::WrongSize { .. }) => {
                        return Err(VolumeError::Integrity(format!(
                            "{key}: the backend's checkpoint was replaced by another writer \
                             since this process last wrote or read it (another process took \
                             this volume or node over?): not overwriting it"
                        )))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        *self.lock_tag() = Some(tag);
        Ok(())
    }

    /// The largest checkpoint object read from the backend.
    fn read_bound(&self) -> SizeBound {
        SizeBound::AtMost(self.size().saturating_mul(8).saturating_add(1 << 20))
    }

    /// The condition of the next checkpoint's PUT: `If-Match` on the tag of the
    /// checkpoint this process wrote last; at its first checkpoint, on the tag
    /// of the checkpoint the backend holds now (a ranged GET of its head, then
    /// a GET of it), or `If-None-Match: *` if it holds none.
    ///
    /// The checkpoint is read at the exact size its authenticated head names,
    /// so one written under a larger fixed size (a node's, before its
    /// checkpoints held one round's answers: 40 MiB where they now pad to 3 MB)
    /// is still read; a head that does not open (an earlier format, or
    /// damaged) bounds the read by this checkpointer's own size.
    async fn condition(&self) -> Result<PutCondition, VolumeError> {
        if let Some(tag) = self.lock_tag().clone() {
            return Ok(PutCondition::IfMatch(tag));
        }
        let Some(head) = self.store.get_range(&self.key, 0..HEAD_LEN as u64).await? else {
            return Ok(PutCondition::IfAbsent);
        };
        let bound = match parse_prefix(&self.sealer, self.owner, &head) {
            Ok(Prefix::V2(h)) => SizeBound::Exact(h.total),
            Ok(Prefix::V1(_)) | Err(_) => self.read_bound(),
        };
        Ok(match self.store.get_tagged(&self.key, bound).await? {
            Some((_, tag)) => PutCondition::IfMatch(tag),
            None => PutCondition::IfAbsent,
        })
    }

    /// The epoch of the checkpoint on the backend, if any, authenticated as
    /// this owner's: reads and opens the checkpoint's sealed head (a checkpoint
    /// of the earlier format is downloaded and opened whole).
    pub(crate) async fn backend_epoch(&self) -> Result<Option<u64>, VolumeError> {
        let key = &self.key;
        let Some(head) = self.store.get_range(key, 0..HEAD_LEN as u64).await? else {
            return Ok(None);
        };
        match parse_prefix(&self.sealer, self.owner, &head)? {
            Prefix::V2(h) => Ok(Some(h.epoch)),
            Prefix::V1(_) => {
                let obj = self
                    .store
                    .get_many_bounded(std::slice::from_ref(key), self.read_bound())
                    .await?
                    .into_iter()
                    .next()
                    .flatten()
                    .ok_or_else(|| {
                        VolumeError::Integrity("the backend checkpoint vanished".into())
                    })?;
                Ok(Some(open_checkpoint(&self.sealer, self.owner, &obj)?.0))
            }
        }
    }

    /// Compares the backend's checkpoint with the local epoch. Normally the
    /// backend holds checkpoint `epoch - 1`. After a crash in the middle of a
    /// checkpoint it holds `epoch - 2` (or none at epoch 1): then the caller
    /// must take a new one now, before anything is written in the new epoch
    /// (`Ok(true)`) — unless the upload is recorded as landed. Anything else
    /// means the backend was rolled back (or is written by another process): an
    /// integrity error.
    pub(crate) async fn check_backend(&self) -> Result<bool, VolumeError> {
        let local = self.db.epoch();
        let backend = self.backend_epoch().await?;
        let behind = match backend {
            None => local,
            Some(e) => local.wrapping_sub(e + 1),
        };
        // Whether the upload of checkpoint `local - 1` is known to have landed: then
        // a backend one checkpoint behind was rolled back, not interrupted.
        let landed = self
            .db
            .meta("checkpoint_uploaded")?
            .and_then(|b| b.try_into().ok().map(u64::from_be_bytes))
            .is_some_and(|e| e + 1 == local);
        match behind {
            0 => Ok(false),
            1 if !landed => {
                tracing::warn!(
                    local_epoch = local,
                    backend_epoch = ?backend,
                    "the last checkpoint did not complete: taking one now"
                );
                Ok(true)
            }
            _ => Err(VolumeError::Integrity(format!(
                "the backend's checkpoint ({}) is {} but this data directory is at epoch \
                 {local}: the backend was rolled back, or another process writes to it",
                self.key,
                backend.map_or("missing".to_string(), |e| format!("at epoch {e}"))
            ))),
        }
    }
}

/// When the newest checkpoint known to be on the backend was taken (ms since the
/// Unix epoch): the last checkpoint, if its upload is recorded as landed.
pub fn last_checkpoint_ms(db: &Db) -> Option<u64> {
    let u64_meta = |name: &str| {
        db.meta(name)
            .ok()
            .flatten()
            .and_then(|b| b.try_into().ok().map(u64::from_be_bytes))
    };
    let uploaded = u64_meta("checkpoint_uploaded")?;
    (uploaded + 1 == db.epoch())
        .then(|| u64_meta("checkpoint_ms"))
        .flatten()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{datadir, Volume, VolumeConfig, VolumeError, VolumeHooks};

    fn config(dir: &Path, data: &str) -> VolumeConfig {
        let mut cfg = VolumeConfig {
            data_dir: dir.join(data),
            ..VolumeConfig::default()
        };
        cfg.engine.capacity_blocks = 1024;
        cfg.backend.path = Some(dir.join("store"));
        // No lease: two proxies write the one volume here, which the lease would
        // prevent; what is tested is the checkpoint's own condition, the defence
        // left when a fenced proxy's PUT lands late.
        cfg.backend.lease_secs = 0;
        cfg.state.log_interval_ms = 0;
        cfg.state.checkpoint_interval_secs = 0;
        cfg.key.key_file = Some(dir.join("master.key"));
        cfg
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let dest = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &dest);
            } else {
                std::fs::copy(e.path(), dest).unwrap();
            }
        }
    }

    /// Proxy B (a copy of A's data directory, standing for a proxy that took the
    /// volume over) writes a checkpoint; A's next checkpoint was to replace the
    /// one A wrote, whose tag it kept: it is refused (the fs back-end's
    /// compare-and-swap, S3's `If-Match`), and B's checkpoint stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_over_another_proxy_s_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (a_cfg, b_cfg) = (config(dir.path(), "a"), config(dir.path(), "b"));
        let stored = dir.path().join("store/vol0/meta/checkpoint");
        datadir::ensure_dir(&a_cfg.data_dir).unwrap();
        let _la = datadir::lock(&a_cfg.data_dir).unwrap();
        let a = Volume::open(&a_cfg, &VolumeHooks::default()).await.unwrap();
        a.checkpoint().await.unwrap();
        // Copied while A is idle (every commit durable): B starts where A is.
        copy_dir(&a_cfg.data_dir, &b_cfg.data_dir);
        let _lb = datadir::lock(&b_cfg.data_dir).unwrap();
        let b = Volume::open(&b_cfg, &VolumeHooks::default()).await.unwrap();
        a.layer.create_bucket("alice", "a-only").await.unwrap();
        b.checkpoint().await.unwrap();
        let b_checkpoint = std::fs::read(&stored).unwrap();
        let err = a.checkpoint().await.unwrap_err();
        assert!(
            matches!(&err, VolumeError::Integrity(m) if m.contains("replaced by another writer")),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&stored).unwrap(),
            b_checkpoint,
            "A's checkpoint replaced B's"
        );
        // B's next checkpoint replaces its own as usual.
        b.checkpoint().await.unwrap();
        assert_ne!(std::fs::read(&stored).unwrap(), b_checkpoint);
    }

    /// A store that holds every checkpoint upload (`put_if` of a
    /// `…/meta/checkpoint` key) until opened, passing everything else on.
    struct CheckpointGate {
        inner: oram_store_fs::FsStore,
        open: tokio::sync::watch::Sender<bool>,
        waiting: std::sync::atomic::AtomicU64,
    }

    #[async_trait::async_trait]
    impl oram_blockstore::BlockStore for CheckpointGate {
        async fn get_opts(
            &self,
            keys: &[oram_blockstore::ObjKey],
            opts: oram_blockstore::GetOpts,
        ) -> oram_blockstore::Result<Vec<Option<bytes::Bytes>>> {
            self.inner.get_opts(keys, opts).await
        }
        async fn get_range(
            &self,
            key: &oram_blockstore::ObjKey,
            range: std::ops::Range<u64>,
        ) -> oram_blockstore::Result<Option<bytes::Bytes>> {
            self.inner.get_range(key, range).await
        }
        async fn put_opts(
            &self,
            items: Vec<(oram_blockstore::ObjKey, bytes::Bytes)>,
            opts: oram_blockstore::PutOpts,
        ) -> oram_blockstore::Result<()> {
            self.inner.put_opts(items, opts).await
        }
        async fn delete_many(
            &self,
            keys: &[oram_blockstore::ObjKey],
        ) -> oram_blockstore::Result<()> {
            self.inner.delete_many(keys).await
        }
        async fn list_opts(
            &self,
            prefix: &str,
            opts: oram_blockstore::ListOpts,
        ) -> oram_blockstore::Result<Vec<oram_blockstore::ObjKey>> {
            self.inner.list_opts(prefix, opts).await
        }
        async fn get_tagged(
            &self,
            key: &oram_blockstore::ObjKey,
            bound: oram_blockstore::SizeBound,
        ) -> oram_blockstore::Result<Option<(bytes::Bytes, oram_blockstore::ObjTag)>> {
            self.inner.get_tagged(key, bound).await
        }
        async fn put_if(
            &self,
            key: &oram_blockstore::ObjKey,
            data: bytes::Bytes,
            cond: oram_blockstore::PutCondition,
        ) -> oram_blockstore::Result<oram_blockstore::ObjTag> {
            if key.as_str().ends_with("meta/checkpoint") {
                use std::sync::atomic::Ordering;
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let _ = self.open.subscribe().wait_for(|o| *o).await;
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
            self.inner.put_if(key, data, cond).await
        }
    }

    /// Sets its flag when dropped: the engines' hold handed to a checkpoint.
    struct Hold(std::sync::Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Hold {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Whether a checkpoint lets go of the engines' hold while its upload is
    /// still held in transit, with the shipped log on (`log`) or off; the
    /// upload then lands, and the hold is let go in either case.
    async fn let_go_during_upload(log: bool) -> bool {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;

        let dir = tempfile::tempdir().unwrap();
        let db = oram_statedb::Db::open(&dir.path().join("state.redb"), [4; 16]).unwrap();
        let sealer = Arc::new(oram_seal::Sealer::new(
            &oram_seal::MasterKey::from_bytes([7; 32]),
            oram_seal::VolumeId([4; 16]),
        ));
        let gate = Arc::new(CheckpointGate {
            inner: oram_store_fs::FsStore::open(dir.path().join("store")).unwrap(),
            open: tokio::sync::watch::channel(false).0,
            waiting: AtomicU64::new(0),
        });
        let store: Arc<dyn oram_blockstore::BlockStore> = gate.clone();
        let shipper = if log {
            let settings = crate::logship::LogSettings {
                record_bytes: 64 << 10,
                interval: std::time::Duration::from_millis(5),
            };
            let log = db.ship_log().unwrap();
            Some(
                crate::logship::start(
                    store.clone(),
                    sealer.clone(),
                    "v/node/0".into(),
                    db.generation(),
                    log,
                    settings,
                )
                .await
                .unwrap(),
            )
        } else {
            None
        };
        let checkpointer = Arc::new(super::Checkpointer::new(
            store,
            sealer,
            db.clone(),
            "v",
            crate::header::Owner::Node(0),
            64 << 10,
            true,
        ));
        let dropped = Arc::new(AtomicBool::new(false));
        let hold = Hold(dropped.clone());
        let shipper = Arc::new(shipper);
        let writing = {
            let (c, s) = (checkpointer.clone(), shipper.clone());
            tokio::spawn(async move { c.write(s.as_ref().as_ref(), hold).await })
        };
        let mut waited = 0;
        while gate.waiting.load(Ordering::SeqCst) == 0 {
            assert!(waited < 2000, "the checkpoint's upload never started");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            waited += 1;
        }
        let let_go = dropped.load(Ordering::SeqCst);
        let _ = gate.open.send(true);
        let info = writing.await.unwrap().unwrap();
        assert_eq!(info.epoch, 0);
        assert!(
            dropped.load(Ordering::SeqCst),
            "the hold outlived the checkpoint"
        );
        assert!(
            dir.path().join("store/v/node/0/meta/checkpoint").is_file(),
            "the checkpoint landed"
        );
        let_go
    }

    /// A checkpointer whose fixed size shrank (a node's, once its checkpoint
    /// held one round's answers instead of one per partition) still writes
    /// over the larger checkpoint its predecessor left: its first checkpoint
    /// reads that one at the size the head names. (It read it bounded by eight
    /// times its own size and failed on a 40 MiB node checkpoint.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_smaller_checkpoint_replaces_a_larger_one_written_before() {
        use std::sync::Arc;

        let dir = tempfile::tempdir().unwrap();
        let db = oram_statedb::Db::open(&dir.path().join("state.redb"), [4; 16]).unwrap();
        let sealer = Arc::new(oram_seal::Sealer::new(
            &oram_seal::MasterKey::from_bytes([7; 32]),
            oram_seal::VolumeId([4; 16]),
        ));
        let store: Arc<dyn oram_blockstore::BlockStore> =
            Arc::new(oram_store_fs::FsStore::open(dir.path().join("store")).unwrap());
        let checkpointer = |size| {
            super::Checkpointer::new(
                store.clone(),
                sealer.clone(),
                db.clone(),
                "v",
                crate::header::Owner::Node(0),
                size,
                true,
            )
        };
        let stored = dir.path().join("store/v/node/0/meta/checkpoint");
        checkpointer(4 << 20).write(None, ()).await.unwrap();
        let large = std::fs::metadata(&stored).unwrap().len();
        // A new process, with the smaller size: 8 x 64 KiB + 1 MiB < 4 MiB.
        let info = checkpointer(64 << 10).write(None, ()).await.unwrap();
        assert_eq!(info.epoch, 1);
        let small = std::fs::metadata(&stored).unwrap().len();
        assert!(small < large / 8, "{small} of {large}");
    }

    /// With the shipped log on, a checkpoint lets its engines serve again
    /// once the snapshot is taken, while the upload is still under way (a
    /// node's checkpoint held its partitions for minutes on a slow link);
    /// without the log it holds them until the upload landed (the checkpoint
    /// before it is then all a lost machine could be rebuilt from).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_engines_serve_during_the_upload_only_with_the_shipped_log() {
        assert!(
            let_go_during_upload(true).await,
            "held through the upload with the log on"
        );
        assert!(
            !let_go_during_upload(false).await,
            "let go before the upload without a log"
        );
    }
}
