//! Reclaims the space of expired objects (Swift `X-Delete-At` /
//! `X-Delete-After`).
//!
//! An expired object reads as absent from the moment it expires (the object
//! layer checks the time on every lookup and listing); this task only removes its
//! index entry and frees its blocks, a bounded batch at a time. Freeing blocks is
//! a change to trusted local state only: the storage server sees no request for
//! it, so expiry adds no backend traffic.

use std::time::Duration;

use oram_objects::ObjectLayer;

/// How often the expiry queue is looked at.
pub const EVERY: Duration = Duration::from_secs(30);

/// Most objects purged in one commit.
const BATCH: usize = 1000;

/// Purges expired objects every `every` until `stop` completes (a purge under
/// way finishes first).
pub async fn purge_loop(
    layer: ObjectLayer,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => return,
        }
        // Bounded: at most 16 batches per tick, the rest waits for the next one.
        for _ in 0..16 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            match layer.purge_expired(now, BATCH).await {
                Ok(n) => {
                    if n > 0 {
                        tracing::debug!(objects = n, "expired objects purged");
                    }
                    if n < BATCH {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!("purging expired objects failed: {e}");
                    break;
                }
            }
        }
    }
}
