//! The backend a volume lives on: the configured back-end (a local directory or
//! an S3 bucket), checked when opened, and the hooks that wrap it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use oram_blockstore::BlockStore;
use oram_store_fs::FsStore;
use oram_store_s3::{S3Store, S3StoreConfig};

use crate::config::{BackendConfig, BackendKind, VolumeConfig};
use crate::params::checkpoint_size;
use crate::VolumeError;

/// The fs back-end's file system: free and total bytes (`None` on an object
/// store, or when it cannot be read). A blocking call (one `statvfs`).
pub fn disk_space(backend: &BackendConfig, data_dir: &Path) -> Option<DiskSpace> {
    (backend.kind == BackendKind::Fs)
        .then(|| oram_store_fs::disk_space(&backend.store_path(data_dir)).ok())
        .flatten()
}

pub use oram_store_fs::DiskSpace;

/// Wraps a block store in another (one that observes or changes its requests).
pub type StoreHook = Arc<dyn Fn(Arc<dyn BlockStore>) -> Arc<dyn BlockStore> + Send + Sync>;

/// Wrappers a volume puts around its backend when it opens it: in-process
/// hooks of embedders and tests, not part of the configuration file.
#[derive(Clone, Default)]
pub struct VolumeHooks {
    /// Wraps the back-end as opened, beneath the lease (the fault-injecting and
    /// recording wrappers of the tests).
    pub wrap_backend: Option<StoreHook>,
    /// Wraps what the engine, the checkpoints and the shipped log send, above the
    /// lease and beneath the volume's request counters (the server's tap of
    /// recent requests). The volume header's check at open goes around it.
    pub observe: Option<StoreHook>,
}

impl std::fmt::Debug for VolumeHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeHooks")
            .field("wrap_backend", &self.wrap_backend.is_some())
            .field("observe", &self.observe.is_some())
            .finish()
    }
}

/// The S3 back-end's settings for this configuration.
fn s3_config(cfg: &VolumeConfig) -> S3StoreConfig {
    let b = &cfg.backend;
    S3StoreConfig {
        endpoint: b.endpoint.clone(),
        region: b.region.clone(),
        bucket: b.bucket.clone(),
        prefix: b.key_prefix.clone(),
        path_style: b.path_style.unwrap_or(b.endpoint.is_some()),
        credentials: b.access_key.clone().zip(b.secret_key.clone()),
        max_in_flight: b.max_in_flight,
        attempt_timeout: Duration::from_secs(b.attempt_timeout_secs.max(1)),
        max_attempts: b.max_attempts,
        // The largest legitimate object is a checkpoint (which may double a few
        // times as the index grows); every engine read is bounded more tightly.
        max_object_bytes: checkpoint_size(cfg).saturating_mul(8).max(64 << 20),
        // A cap on a listing (maintenance only): up to three slots per backend
        // position, at most two positions per block of capacity (a tree of
        // capacity/2 leaves rounded up to a power of two), plus the meta objects
        // and the shipped log. A grown tree (volume.toml's capacity in effect)
        // may have up to twice as many leaves per block (its levels are added
        // whole): four positions per block.
        max_list_keys: (cfg.engine.capacity_in_effect() as usize)
            .saturating_mul(if cfg.engine.grown_blocks.is_some() {
                12
            } else {
                6
            })
            .saturating_add(1 << 16),
        conditional_writes: b.conditional_writes,
        ..S3StoreConfig::default()
    }
}

/// Opens the configured back-end and checks that it can be used (an
/// unreachable S3 endpoint, a missing bucket or refused credentials are errors),
/// wrapped by [`VolumeHooks::wrap_backend`].
pub async fn open_store(
    cfg: &VolumeConfig,
    hooks: &VolumeHooks,
) -> Result<Arc<dyn BlockStore>, VolumeError> {
    let store = open_backend(cfg).await?;
    Ok(match &hooks.wrap_backend {
        Some(wrap) => wrap(store),
        None => store,
    })
}

async fn open_backend(cfg: &VolumeConfig) -> Result<Arc<dyn BlockStore>, VolumeError> {
    match cfg.backend.kind {
        BackendKind::Fs => Ok(Arc::new(FsStore::open_with_sync(
            cfg.store_path(),
            cfg.backend.fsync,
        )?)),
        BackendKind::S3 => {
            let s3 = S3Store::new(&s3_config(cfg)).await;
            s3.check().await.map_err(|e| {
                VolumeError::Config(format!(
                    "S3 back-end bucket {:?} at {} is not usable: {e}",
                    cfg.backend.bucket,
                    cfg.backend.endpoint.as_deref().unwrap_or("AWS")
                ))
            })?;
            Ok(Arc::new(s3))
        }
    }
}

/// Creates the S3 back-end's bucket (nothing for the fs back-end) and checks
/// that it can be used; returns what it did.
pub async fn create_bucket(cfg: &VolumeConfig) -> Result<Option<String>, VolumeError> {
    if cfg.backend.kind != BackendKind::S3 {
        return Ok(None);
    }
    let s3 = S3Store::new(&s3_config(cfg)).await;
    s3.create_bucket().await?;
    s3.check().await?;
    Ok(Some(format!(
        "backend bucket {:?} ready",
        cfg.backend.bucket
    )))
}

/// The configured backend as an operator writes it (`--backend` syntax, with
/// the S3 endpoint), for messages.
pub fn backend_url(cfg: &VolumeConfig) -> String {
    let b = &cfg.backend;
    match b.kind {
        BackendKind::Fs => format!("file://{}", cfg.store_path().display()),
        BackendKind::S3 => format!(
            "s3://{}/{} at {}",
            b.bucket,
            b.key_prefix,
            b.endpoint.as_deref().unwrap_or("AWS")
        ),
    }
}
