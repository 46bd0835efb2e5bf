//! Growing the served volume in the background ([`Growth`]): asked for through
//! the operator endpoint (`POST /grow`, `oram-proxy grow`), by the automatic
//! policy (`[volume] grow_at`, checked every [`CHECK_EVERY`]), or at start to
//! resume a growth an unclean stop interrupted. One growth runs at a time; the
//! S3 and Swift listeners keep serving meanwhile ([`oram_volume::Volume::grow`]
//! says what the storage server sees). A stop abandons a growth under way: it
//! is crash-safe at every point, and the next start resumes it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use oram_volume::{GrowthConfig, GrowthRecord, Volume};

use crate::tasks::Shutdown;

/// How often the automatic policy looks at how full the volume is.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks the automatic policy skips after a failed growth.
pub const RETRY_AFTER: u32 = 60;

/// What a growth is doing, as `GET /grow` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrowStatus {
    /// Whether a growth runs now.
    pub running: bool,
    /// The capacity (blocks) the last growth started from.
    pub from_blocks: u64,
    /// The capacity (blocks) it grows, or grew, to.
    pub to_blocks: u64,
    /// New backend objects gone through, of `total`.
    pub done: u64,
    /// New backend objects of the growth (0 until known).
    pub total: u64,
    /// Why the last growth failed, if it did.
    pub error: Option<String>,
    /// Growths finished since the start.
    pub finished: u64,
    /// Growths failed since the start.
    pub failed: u64,
}

/// How full the volume is and how far it may grow by itself, as `/metrics`,
/// `GET /grow` and the dashboard show it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Room {
    /// Bytes per block.
    pub block_size: u64,
    /// The capacity in effect (blocks).
    pub capacity_blocks: u64,
    /// Blocks in use by objects and unfinished uploads.
    pub used_blocks: u64,
    /// Blocks free.
    pub free_blocks: u64,
    /// `volume.max_size` in bytes (0: unset).
    pub max_size_bytes: u64,
    /// `volume.grow_at` (0: no automatic growth).
    pub grow_at: f64,
}

/// The served volume's growths (see the module).
pub struct Growth {
    vol: Arc<Volume>,
    /// The automatic policy (`[volume]`), shown even when off.
    policy: GrowthConfig,
    /// The status; guards only it, never held across an await.
    status: Mutex<GrowStatus>,
    /// The growth history ([`oram_volume::read_history`]), as last read.
    history: Mutex<Vec<GrowthRecord>>,
    stop: Shutdown,
}

impl Growth {
    /// The growths of `vol` under the automatic `policy` (started by
    /// [`Growth::auto_loop`]), abandoned when `stop` fires. The history is
    /// empty until [`Growth::load_history`].
    pub fn new(vol: Arc<Volume>, policy: GrowthConfig, stop: Shutdown) -> Arc<Self> {
        Arc::new(Self {
            vol,
            policy,
            status: Mutex::new(GrowStatus::default()),
            history: Mutex::new(Vec::new()),
            stop,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GrowStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the growth history from the data directory (off the workers); a
    /// damaged file is a warning and leaves the history shown empty.
    pub async fn load_history(&self) {
        match self.vol.growth_history().await {
            Ok(h) => *self.history.lock().unwrap_or_else(|e| e.into_inner()) = h,
            Err(e) => tracing::warn!("the growth history cannot be read: {e}"),
        }
    }

    /// The growth history, oldest first.
    pub fn history(&self) -> Vec<GrowthRecord> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How full the volume is now, and the automatic policy's limits.
    pub fn room(&self) -> Room {
        let u = self.vol.layer.usage();
        Room {
            block_size: u.block_size as u64,
            capacity_blocks: u.capacity_blocks,
            used_blocks: u.capacity_blocks.saturating_sub(u.free_blocks),
            free_blocks: u.free_blocks,
            max_size_bytes: match self.policy.max_size.as_str() {
                "" => 0,
                s => oram_volume::parse_size(s).unwrap_or(0),
            },
            grow_at: self.policy.grow_at,
        }
    }

    /// The status now, with the capacity in effect and the block size.
    pub fn status(&self) -> (GrowStatus, u64, usize) {
        (
            self.lock().clone(),
            self.vol.capacity_blocks(),
            self.vol.engine.block_size(),
        )
    }

    /// The status as JSON (`GET /grow`): the growth under way or the last
    /// one, how full the volume is (`used_blocks`, `free_blocks`), the
    /// automatic policy (`grow_at`, `max_size_bytes`: 0 when unset) and the
    /// growth history (`history`, oldest first).
    pub fn status_json(&self) -> String {
        let (s, capacity, bs) = self.status();
        let room = self.room();
        let history: Vec<_> = self
            .history()
            .iter()
            .map(|g| {
                serde_json::json!({
                    "from_blocks": g.from_blocks,
                    "to_blocks": g.to_blocks,
                    "block_size": g.block_size,
                    "started_unix": g.started_unix,
                    "finished_unix": g.finished_unix,
                    "positions": g.positions,
                    "written": g.written,
                    "backend_bytes": g.backend_bytes,
                })
            })
            .collect();
        serde_json::json!({
            "running": s.running,
            "from_blocks": s.from_blocks,
            "to_blocks": s.to_blocks,
            "done": s.done,
            "total": s.total,
            "error": s.error,
            "finished": s.finished,
            "failed": s.failed,
            "capacity_blocks": capacity,
            "block_size": bs,
            "engine": self.vol.engine.name(),
            "used_blocks": room.used_blocks,
            "free_blocks": room.free_blocks,
            "grow_at": room.grow_at,
            "max_size_bytes": room.max_size_bytes,
            "history": history,
        })
        .to_string()
    }

    /// Starts growing to `to_bytes` (rounded up to whole blocks) in the
    /// background; refused while a growth runs, for a size not above the
    /// capacity in effect, and for an engine that cannot grow.
    pub fn start_bytes(self: &Arc<Self>, to_bytes: u64, why: &'static str) -> Result<(), String> {
        let bs = self.vol.engine.block_size() as u64;
        self.start(to_bytes.div_ceil(bs.max(1)), why)
    }

    /// Starts growing to `to_blocks` in the background (see
    /// [`Growth::start_bytes`]).
    pub fn start(self: &Arc<Self>, to_blocks: u64, why: &'static str) -> Result<(), String> {
        if !self.vol.grows() {
            return Err(oram_volume::CLUSTER_DOES_NOT_GROW.into());
        }
        let from = self.vol.capacity_blocks();
        if to_blocks <= from {
            return Err(format!(
                "the volume has {from} blocks ({} bytes) already: grow to more",
                from * self.vol.engine.block_size() as u64
            ));
        }
        {
            let mut s = self.lock();
            if s.running {
                return Err(format!(
                    "a growth to {} blocks is under way ({} of {} new objects written)",
                    s.to_blocks, s.done, s.total
                ));
            }
            *s = GrowStatus {
                running: true,
                from_blocks: from,
                to_blocks,
                finished: s.finished,
                failed: s.failed,
                ..GrowStatus::default()
            };
        }
        tracing::info!(from, to = to_blocks, "growing the volume ({why})");
        let me = self.clone();
        tokio::spawn(async move {
            let mut stop = me.stop.clone();
            let progress = {
                let me = me.clone();
                move |done, total| {
                    let mut s = me.lock();
                    (s.done, s.total) = (done, total);
                }
            };
            let out = tokio::select! {
                r = me.vol.grow(to_blocks, &progress) => Some(r),
                _ = stop.wait() => None,
            };
            if matches!(out, Some(Ok(_))) {
                me.load_history().await;
            }
            let mut s = me.lock();
            s.running = false;
            match out {
                Some(Ok(g)) => {
                    s.finished += 1;
                    tracing::info!(
                        capacity = g.capacity,
                        written = g.written,
                        "the volume grew"
                    );
                }
                Some(Err(e)) => {
                    tracing::error!("growing the volume failed: {e}");
                    s.error = Some(e.to_string());
                    s.failed += 1;
                }
                None => {
                    tracing::warn!("growth stopped with the server: it resumes at the next start")
                }
            }
        });
        Ok(())
    }

    /// At start: resumes a growth an unclean stop interrupted, if any.
    pub fn resume(self: &Arc<Self>) {
        if let Some(to) = self.vol.growth_pending() {
            if let Err(e) = self.start(to, "resuming the growth an unclean stop interrupted") {
                tracing::error!("not resuming the interrupted growth: {e}");
            }
        }
    }

    /// The automatic policy: every `CHECK_EVERY` (1 s), grows the volume when
    /// the policy given to [`Growth::new`] says it is due, until `stop`.
    /// After a failed growth it waits `RETRY_AFTER` (60) checks before trying again.
    pub async fn auto_loop(self: Arc<Self>, mut stop: Shutdown) {
        let policy = self.policy.clone();
        if !self.vol.grows() {
            tracing::warn!(
                "volume.grow_at is set but {}: no automatic growth",
                oram_volume::CLUSTER_DOES_NOT_GROW
            );
            return;
        }
        let (mut skip, mut seen_failures) = (0u32, 0u64);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(CHECK_EVERY) => {}
                _ = stop.wait() => return,
            }
            let (running, failed) = {
                let s = self.lock();
                (s.running, s.failed)
            };
            if failed > seen_failures {
                seen_failures = failed;
                skip = RETRY_AFTER;
            }
            if running || skip > 0 {
                skip = skip.saturating_sub(1);
                continue;
            }
            if let Some(to) = self.vol.growth_due(&policy) {
                if let Err(e) = self.start(to, "volume.grow_at reached") {
                    tracing::warn!("automatic growth: {e}");
                    skip = RETRY_AFTER;
                }
            }
        }
    }
}
