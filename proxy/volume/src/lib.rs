//! A volume's life cycle, without HTTP: the data directory and its lock, the
//! master key, the volume's parameters and its authenticated header on the
//! backend, the engine registry, opening a volume (backend → lease → sealing →
//! engine → object layer), checkpoints of the trusted state, recovery from the
//! backend alone, the backend lease, the shipped log, expiry, and the offline
//! commands (`init`, `fsck`, `recover`, `compact`, `format`).
//!
//! This is the only crate that names concrete engines and back-ends (the
//! registry, [`engines::ENGINES`], and the back-end opener); the server above it sees a
//! [`Volume`] and the engine through [`oram_engine`]'s traits.
//!
//! Map (modules other crates use are public; the rest is re-exported here):
//! - configuration: [`VolumeConfig`] and its sections, [`engines`] (`[engine]`
//!   and the registry), [`users`], [`cluster`] (`[cluster]`: a front's nodes, a
//!   node's partitions), [`node`] (a cluster node's volume, the cluster's
//!   certificates);
//! - on the local disk: [`datadir`] (mode, lock, `volume.toml`, `state.redb`),
//!   [`backend_record`] (`backend.toml`: which backend the directory belongs to),
//!   [`key`] (the master key's sources), [`VolumeParams`] (what a volume was
//!   created with), [`fsutil`] (secret files);
//! - on the backend: [`header`] (the volume header and checkpoint heads),
//!   [`Volume::checkpoint`], [`lease`], the shipped log ([`Shipper`]);
//! - life cycle: [`Volume::open`], [`Volume::grow`] (online growth), [`recover()`], [`init()`], [`fsck()`],
//!   [`compact()`], [`format()`], [`expiry`];
//! - keys: [`change_passphrase()`], [`rotate_key()`], [`key_status()`],
//!   [`forget_earlier_keys()`].

mod backend;
pub mod backend_record;
mod checkpoint;
pub mod cluster;
mod config;
pub mod coord;
pub mod datadir;
pub mod engines;
mod error;
pub mod expiry;
pub mod fence;
pub mod fsutil;
mod grow;
pub mod header;
pub mod key;
pub mod lease;
mod logship;
mod maintenance;
pub mod node;
mod params;
mod recover;
mod rekey;
mod rotation;
pub mod users;
mod volume;

pub use backend::{disk_space, DiskSpace, StoreHook, VolumeHooks};
pub use checkpoint::{last_checkpoint_ms, CheckpointInfo};
pub use config::{
    parse_size, BackendConfig, BackendKind, GrowthConfig, KeyConfig, StateConfig, VolumeConfig,
    DEFAULT_LOG_RECORD_KIB, EARLY_CHECKPOINT_GAIN, NODE_LOG_RECORD_KIB,
};
pub use engines::{Engine, EngineConfig};
pub use error::VolumeError;
pub use grow::{read_history, GrowthRecord, CLUSTER_DOES_NOT_GROW, HISTORY_FILE, HISTORY_KEEP};
pub use logship::{LogSettings, RecordMark, ShipStats, Shipper};
pub use maintenance::{compact, format, fsck, init, FormatDone};
pub use params::{checkpoint_size, checkpoint_size_at, VolumeParams};
pub use recover::{recover, RecoverOptions, Recovered};
pub use rekey::{
    change_passphrase, forget_earlier_keys, key_status, rotate_key, KeyStatus, NewMasterKey,
    Rotated, RotationProgress,
};
pub use users::UserConfig;
pub use volume::{Volume, ENGINE_SPACE};
