//! Reclaims the space of expired objects (Swift `X-Delete-At` /
//! `X-Delete-After`) and of abandoned multipart uploads.
//!
//! An expired object reads as absent from the moment it expires (the object
//! layer checks the time on every lookup and listing); this task only removes its
//! index entry and frees its blocks, a bounded batch at a time. Freeing blocks is
//! a change to trusted local state only: the storage server sees no request for
//! it, so expiry adds no backend traffic.
//!
//! Every [`UPLOADS_EVERY`] ticks the same task aborts the multipart uploads
//! due under their buckets' lifecycle rules (S3 `AbortIncompleteMultipartUpload`)
//! or, in a bucket without such a rule, after the operator's default
//! ([`oram_objects::ObjectLayer::abort_stale_uploads`]). Aborting too only frees
//! blocks in the trusted allocator: no backend request.
//!
//! At the same ticks it applies the buckets' lifecycle expiration rules (S3
//! `Expiration`, `NoncurrentVersionExpiration`, `ExpiredObjectDeleteMarker`;
//! [`oram_objects::ObjectLayer::expire_by_lifecycle`]): index changes and freed
//! blocks only, no backend request either.

use std::time::Duration;

use oram_objects::ObjectLayer;

/// How often the expiry queue is looked at.
pub const EVERY: Duration = Duration::from_secs(30);

/// Most objects purged (or uploads aborted) in one commit.
const BATCH: usize = 1000;

/// Stale uploads and objects due under lifecycle rules are looked for every
/// this many ticks (each scans every upload record, and the keys of the buckets
/// with expiration rules; their days need no finer grain).
pub const UPLOADS_EVERY: u64 = 20;

/// Purges expired objects every `every`, and aborts stale multipart uploads
/// and applies lifecycle expiration every [`UPLOADS_EVERY`]-th time (after `abort_default_days` in buckets
/// without their own rule; 0: never), until `stop` completes (a purge under way
/// finishes first).
pub async fn purge_loop(
    layer: ObjectLayer,
    every: Duration,
    abort_default_days: u32,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick: u64 = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => return,
        }
        if tick.is_multiple_of(UPLOADS_EVERY) {
            abort_stale(&layer, abort_default_days).await;
            expire_by_lifecycle(&layer).await;
        }
        tick = tick.wrapping_add(1);
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

/// Aborts the uploads due now, a bounded number of batches.
async fn abort_stale(layer: &ObjectLayer, default_days: u32) {
    for _ in 0..16 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        match layer.abort_stale_uploads(now, default_days, BATCH).await {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(uploads = n, "stale multipart uploads aborted");
                }
                if n < BATCH {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!("aborting stale multipart uploads failed: {e}");
                break;
            }
        }
    }
}

/// Applies the lifecycle expiration rules due now, a bounded number of batches.
async fn expire_by_lifecycle(layer: &ObjectLayer) {
    for _ in 0..16 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        match layer.expire_by_lifecycle(now, BATCH).await {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(keys = n, "objects expired by lifecycle rules");
                }
                if n < BATCH {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!("lifecycle expiration failed: {e}");
                break;
            }
        }
    }
}
