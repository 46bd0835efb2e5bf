//! The parameters a volume was created with (`<data_dir>/volume.toml`, and the
//! backend's volume header, see [`crate::header`]), and the fixed size of its
//! checkpoints.

use std::collections::BTreeMap;
use std::path::Path;

use oram_seal::VolumeId;
use serde::{Deserialize, Serialize};

use crate::config::VolumeConfig;
use crate::engines::EngineConfig;
use crate::fsutil::unhex;
use crate::key::{Kdf, KeySource};
use crate::VolumeError;
use oram_seal::MasterKey;

/// Version of the data directory layout (2: durable state database, key check;
/// 3: sealed objects bind space and generation, intent records, the engine's
/// data-placing parameters recorded).
pub const FORMAT: u32 = 3;

/// What an operator can do with a data directory of an older format.
const OLDER_FORMAT_ADVICE: &str = "keep serving it with the oram-proxy release that \
created it, or move its objects: start this release on a new data directory and backend \
prefix, and copy the buckets across through the two proxies' S3 APIs (for example \
`rclone sync old:bucket new:bucket`); see docs/operating.md, \"Upgrading\"";

/// The fixed size of a checkpoint's plaintext for this configuration, at the
/// capacity in effect ([`EngineConfig::capacity_in_effect`]: a grown volume's
/// trusted state is that of its new size): the engine's own bound on its
/// trusted state (its crate computes it), the configured object-index budget,
/// and 64 KiB for everything else.
pub fn checkpoint_size(cfg: &VolumeConfig) -> u64 {
    checkpoint_size_at(cfg, cfg.engine.capacity_in_effect())
}

/// The fixed size of a cluster node's checkpoint plaintext, for a node owning
/// `owned` of the engine's partitions: the engine's bound on the state of
/// `owned` partitions on a node (`EngineSettings::node_state_bound`: without
/// the front's position map and eviction cache), one round's answers (a checkpoint keeps only the latest
/// round's: `oram_node::HostQuiet::drop_stale_answers`; a round of at most
/// [`crate::EngineConfig::round_ops`] ops takes at most one block per op and
/// makes at most four sub-accesses per op, each answer with a 4-byte length),
/// each partition's ledger record (its round number) and 64 KiB. Public
/// parameters only (which partitions a node owns is public).
///
/// (Until 2026-11 every partition's ledger kept its own last round's answers
/// and the size counted a round's blocks for each: ~33 MiB more for a node
/// of 128 partitions of 4 KiB blocks, whose upload held the node's rounds.)
pub fn node_checkpoint_size(cfg: &VolumeConfig, owned: u64) -> u64 {
    let share = cfg.engine.node_state_bound(&cfg.backend.prefix, owned);
    let round = (cfg.engine.round_ops() as u64).saturating_mul(cfg.engine.block_size as u64 + 16);
    let records = owned.saturating_mul(64);
    64 * 1024 + share + round + records
}

/// [`checkpoint_size`] of the volume of `cfg` at `capacity` blocks (a growth
/// changes it: the provider sees the new size, as it sees the growth).
pub fn checkpoint_size_at(cfg: &VolumeConfig, capacity: u64) -> u64 {
    let index = match cfg.state.checkpoint_index_bytes {
        0 => capacity.saturating_mul(64),
        n => n,
    };
    64 * 1024 + cfg.engine.state_bound_at(&cfg.backend.prefix, capacity) + index
}

/// The parameters a volume was created with; they cannot change afterwards,
/// except its capacity, which grows ([`VolumeParams::grown_blocks`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeParams {
    /// Data directory format.
    pub format: u32,
    /// Random id bound into every sealed object.
    pub volume_id: String,
    /// Engine kind.
    pub engine: String,
    /// Bytes per block.
    pub block_size: usize,
    /// Logical blocks the volume was created with (its starting size; the
    /// engine is always opened with it and takes a grown shape from its own
    /// trusted state).
    pub capacity_blocks: u64,
    /// Logical blocks in effect once the volume grew (`oram-proxy grow`); absent
    /// while it has its starting size. Follows the engine's trusted state: a
    /// start that finds the engine at another size records the engine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grown_blocks: Option<u64>,
    /// A growth started and not known to be finished: the capacity it grows
    /// to. A start that finds the engine smaller resumes it (`serve`) or says
    /// so; one that finds the engine at least that large drops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growing_to: Option<u64>,
    /// Backend key prefix.
    pub prefix: String,
    /// Size of a checkpoint's plaintext when the volume was created or last grew
    /// (informative: a start with parameters that change it warns, since the
    /// provider sees it).
    pub checkpoint_bytes: u64,
    /// Where the key came from when the volume was created (`file`, `env`,
    /// `passphrase`); informative.
    pub key_source: String,
    /// Public check value of the master key (see `keys`).
    pub key_check: String,
    /// The engine's parameters that decide where data lives (its crate names
    /// them: Z, S, A, leaves, cached levels, ...); a start with other values is
    /// refused.
    pub fixed: BTreeMap<String, String>,
    /// Argon2id parameters, when the key is derived from a passphrase.
    pub kdf: Option<Kdf>,
    /// The master key wrapped under the passphrase's Argon2id output, hex
    /// (`nonce ‖ ciphertext ‖ tag`, see [`crate::key`]); absent for a key file or
    /// environment key, and for a passphrase volume made before wrapping existed
    /// whose passphrase never changed (its key is Argon2id's output itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapped_key: Option<String>,
    /// The master keys rotated out, newest first, wrapped under the current one,
    /// hex (see [`crate::key`]); absent until the first rotation, and once they are
    /// dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_keys: Option<String>,
    /// The backend header's MAC under the master key (see `meta_auth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl VolumeParams {
    /// The parameters of a new volume.
    pub fn new(
        c: &VolumeConfig,
        volume_id: &VolumeId,
        key_source: &str,
        key_check: String,
        kdf: Option<Kdf>,
    ) -> Self {
        Self {
            format: FORMAT,
            volume_id: hex::encode(volume_id.0),
            engine: c.engine.kind.name().to_string(),
            block_size: c.engine.block_size,
            capacity_blocks: c.engine.capacity_blocks,
            grown_blocks: None,
            growing_to: None,
            prefix: c.backend.prefix.clone(),
            checkpoint_bytes: checkpoint_size(c),
            key_source: key_source.into(),
            key_check,
            fixed: c.engine.fixed(&c.backend.prefix),
            kdf,
            wrapped_key: None,
            earlier_keys: None,
            mac: None,
        }
    }

    /// Writes these parameters to `<dir>/volume.toml`, replacing the file
    /// atomically (a new file, fsynced, renamed over it, the directory fsynced):
    /// a crash leaves the old or the new parameters, never a mix.
    pub fn replace_in(&self, dir: &Path) -> Result<(), VolumeError> {
        let path = dir.join("volume.toml");
        let tmp = dir.join("volume.toml.new");
        let _ = std::fs::remove_file(&tmp);
        crate::fsutil::write_private(&tmp, &self.to_toml())?;
        std::fs::rename(&tmp, &path).map_err(crate::fsutil::io(&path))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(crate::fsutil::io(dir))
    }

    /// The master key from `source`, checked against these parameters' key check
    /// (a passphrase unwraps `wrapped_key`, or derives the key of a volume made
    /// before wrapping).
    pub fn load_key(&self, source: &KeySource) -> Result<MasterKey, VolumeError> {
        source.load_parts(
            self.kdf.as_ref(),
            self.wrapped_key.as_deref(),
            &self.key_check,
        )
    }

    /// The parameters as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("parameters serialise")
    }

    /// Parses parameters written by [`VolumeParams::to_toml`]; refuses another format.
    pub fn from_toml(text: &str, whence: &str) -> Result<Self, VolumeError> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let f: Format =
            toml::from_str(text).map_err(|e| VolumeError::Params(format!("{whence}: {e}")))?;
        if f.format != FORMAT {
            let advice = match f.format {
                1 => "format 1 kept its state in memory: nothing in it survived a restart; move \
                      the directory away"
                    .to_string(),
                f if f < FORMAT => format!(
                    "it was created by an older oram-proxy, whose objects this release cannot \
                     open; {OLDER_FORMAT_ADVICE}"
                ),
                _ => "it was created by a newer oram-proxy; use that release".to_string(),
            };
            return Err(VolumeError::Params(format!(
                "{whence} has format {}, this build reads format {FORMAT}: {advice}",
                f.format
            )));
        }
        toml::from_str(text).map_err(|e| VolumeError::Params(format!("{whence}: {e}")))
    }

    /// Refuses a configuration that differs from these parameters.
    pub fn check_config(&self, cfg: &VolumeConfig, dir: &Path) -> Result<(), VolumeError> {
        let want = Self::new(cfg, &self.volume_id()?, "", String::new(), None);
        let p = self;
        let mut diffs = Vec::new();
        if p.engine != want.engine {
            diffs.push(format!("engine {} (configured: {})", p.engine, want.engine));
        }
        if p.block_size != want.block_size {
            diffs.push(format!(
                "block_size {} (configured: {})",
                p.block_size, want.block_size
            ));
        }
        if p.capacity_blocks != want.capacity_blocks {
            diffs.push(format!(
                "capacity_blocks {} (configured: {}; the configured value is the starting size, \
                 a volume grows with `oram-proxy grow`)",
                p.capacity_blocks, want.capacity_blocks
            ));
        }
        for name in p
            .fixed
            .keys()
            .chain(want.fixed.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let (had, now) = (p.fixed.get(name), want.fixed.get(name));
            if had != now {
                diffs.push(format!(
                    "{name} {} (configured: {})",
                    had.map_or("unset", |v| v.as_str()),
                    now.map_or("unset", |v| v.as_str())
                ));
            }
        }
        if p.prefix != want.prefix {
            diffs.push(format!("prefix {} (configured: {})", p.prefix, want.prefix));
        }
        if !diffs.is_empty() {
            return Err(VolumeError::Params(format!(
                "data directory {} was created with other parameters: {}. These decide where \
                 the data lives (on the backend or in the local state, in which object): set \
                 them back to the recorded values; to change them, copy the data to a new \
                 volume",
                dir.display(),
                diffs.join(", ")
            )));
        }
        Ok(())
    }

    /// What a start with `cfg` should warn about: parameters that may change but
    /// change what the provider sees (the checkpoint's size), and configuration
    /// keys ignored.
    pub fn notices(&self, cfg: &VolumeConfig) -> Vec<String> {
        let mut out = Vec::new();
        let now = checkpoint_size(cfg);
        if now != self.checkpoint_bytes {
            out.push(format!(
                "checkpoints are now padded to {now} bytes instead of {}: a setting that sizes \
                 the trusted state changed since the volume was created (stash_bound, max_batch, \
                 round_mib, the engine's cache or partitions, state.checkpoint_index_bytes), or this \
                 version of oram-proxy bounds that state differently; the backend sees the new size",
                self.checkpoint_bytes
            ));
        }
        for k in &cfg.engine.ignored {
            out.push(format!(
                "[engine] {k} does not apply to engine {:?}: ignored",
                cfg.engine.kind.name()
            ));
        }
        out
    }

    /// The capacity in effect, in blocks: the grown one, else the starting one.
    pub fn capacity_in_effect(&self) -> u64 {
        self.grown_blocks.unwrap_or(self.capacity_blocks)
    }

    /// Takes these parameters for every `[engine]` key `cfg` does not name (see
    /// [`EngineConfig::adopt`]): a volume keeps its shape when defaults change,
    /// and a configuration needs to name only what it wants to differ. A named
    /// `capacity_blocks` above the starting size and at most the capacity in
    /// effect (a configuration updated after a growth) is taken as the
    /// starting size, which the engine is opened with; the capacity in effect
    /// is recorded in [`EngineConfig::grown_blocks`].
    pub fn adopt_into(&self, engine: &mut EngineConfig) -> Result<(), VolumeError> {
        let c = engine.capacity_blocks;
        if c > self.capacity_blocks && c <= self.capacity_in_effect() {
            engine.adopted.push(format!(
                "capacity_blocks {} (configured: {c}; the volume started at {} blocks and grew \
                 to {}: the configured value is the starting size)",
                self.capacity_blocks,
                self.capacity_blocks,
                self.capacity_in_effect()
            ));
            engine.capacity_blocks = self.capacity_blocks;
        }
        engine.grown_blocks = self.grown_blocks;
        engine
            .adopt(
                &self.engine,
                self.block_size,
                self.capacity_blocks,
                &self.fixed,
                &self.prefix,
            )
            .map_err(|e| VolumeError::Params(format!("volume.toml: {e}")))
    }

    /// The volume id.
    pub fn volume_id(&self) -> Result<VolumeId, VolumeError> {
        unhex::<16>(&self.volume_id)
            .map(|b| VolumeId(*b))
            .ok_or_else(|| VolumeError::Params("volume.toml: bad volume_id".into()))
    }
}

#[cfg(test)]
mod tests {
    use oram_path::PathSettings;

    use super::*;
    use crate::datadir::{adopt_recorded, load_volume, save_volume};

    /// A node's checkpoint pads to the state of the partitions it owns, not
    /// to a share of the whole engine's bound: for the partition engines the
    /// nodes of a cluster together need less than the volume's bound (the
    /// front keeps the position map and the eviction cache), a node owning
    /// more needs more, and a node owning every partition of the scaling
    /// benchmark's volume (16,384 blocks of 4 KiB) pads to less than the
    /// state bound (ObliviStore: 2.96 MB against 7.29; it padded to about 40
    /// MiB until 2026-11).
    #[test]
    fn a_node_checkpoint_pads_to_its_partitions_state_only() {
        for kind in ["oblivistore", "curious"] {
            let cfg = VolumeConfig {
                engine: toml::from_str(&format!(
                    "kind = '{kind}'\nblock_size = 4096\ncapacity_blocks = 16384"
                ))
                .unwrap(),
                ..VolumeConfig::default()
            };
            let prefix = cfg.backend.prefix.clone();
            let whole = cfg.engine.state_bound(&prefix);
            let shape = cfg.engine.shape(&prefix);
            let partitions = u64::from(cfg.engine.kind.settings().partitions(&shape).unwrap());
            let all = cfg.engine.node_state_bound(&prefix, partitions);
            let half = cfg.engine.node_state_bound(&prefix, partitions / 2);
            assert!(all < whole, "{kind}: {all} >= {whole}");
            assert!(half < all && 2 * half <= all + 1, "{kind}: {half} of {all}");
            assert!(node_checkpoint_size(&cfg, partitions) < whole, "{kind}");
        }
    }

    #[test]
    fn volume_parameters_are_fixed() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = VolumeConfig::default();
        let p = VolumeParams::new(&cfg, &VolumeId::random(), "file", "ab".repeat(16), None);
        save_volume(d.path(), &p).unwrap();
        assert_eq!(load_volume(d.path(), &cfg).unwrap(), p);
        cfg.engine.block_size = 8192;
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("block_size 16384 (configured: 8192)"), "{err}");
        let old = "format = 1\nvolume_id = \"00\"\n";
        let err = VolumeParams::from_toml(old, "x").unwrap_err().to_string();
        assert!(err.contains("format 1"), "{err}");
        let old = "format = 2\nvolume_id = \"00\"\n";
        let err = VolumeParams::from_toml(old, "x").unwrap_err().to_string();
        assert!(
            err.contains("older oram-proxy") && err.contains("rclone"),
            "{err}"
        );
    }

    /// The tree-top cache keeps buckets in the local state instead of the
    /// backend: a start with another depth would look for them in the wrong
    /// place (and read blocks as missing). Refused, naming the parameter.
    #[test]
    fn a_changed_cache_depth_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = VolumeConfig::default();
        let p = VolumeParams::new(&cfg, &VolumeId::random(), "file", "ab".repeat(16), None);
        // The default: 16 KiB blocks, 1 GiB, a 16 MiB tree-top cache = 8 levels.
        assert_eq!(p.fixed.get("cached_levels").map(String::as_str), Some("8"));
        save_volume(d.path(), &p).unwrap();
        let s = cfg.engine.kind.get_mut::<PathSettings>().expect("path");
        s.cached_levels = Some(12);
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("cached_levels 8 (configured: 12)"), "{err}");
        // So is another cache budget that gives another depth, unless the
        // configuration leaves the depth to the volume (below).
        let s = cfg.engine.kind.get_mut::<PathSettings>().expect("path");
        (s.cached_levels, s.tree_cache_mib) = (None, 64);
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("cached_levels 8 (configured: 10)"), "{err}");
        // A parameter that only changes the checkpoint's size is a warning.
        let mut cfg = VolumeConfig::default();
        let s = cfg.engine.kind.get_mut::<PathSettings>().expect("path");
        s.stash_bound = 200;
        assert!(load_volume(d.path(), &cfg).is_ok());
        assert!(p.notices(&cfg)[0].contains("padded"));
        // Ring ORAM records its own parameters.
        let mut cfg = VolumeConfig::default();
        cfg.engine.set_kind("ring").unwrap();
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(
            err.contains("engine path (configured: ring)") && err.contains("s unset"),
            "{err}"
        );
    }

    /// A volume created with other values than today's defaults starts with a
    /// configuration that names none of them; named values must still match.
    #[test]
    fn unnamed_parameters_are_taken_from_the_volume() {
        let d = tempfile::tempdir().unwrap();
        let at = |dir: &Path| VolumeConfig {
            data_dir: dir.to_path_buf(),
            ..VolumeConfig::default()
        };
        let mut made = at(d.path());
        made.engine.block_size = 4096;
        made.engine.capacity_blocks = 4096;
        let s = made.engine.kind.get_mut::<PathSettings>().expect("path");
        s.cached_levels = Some(6);
        let p = VolumeParams::new(&made, &VolumeId::random(), "file", "ab".repeat(16), None);
        save_volume(d.path(), &p).unwrap();
        let mut cfg = at(d.path());
        assert!(load_volume(d.path(), &cfg).is_err(), "defaults differ");
        adopt_recorded(&cfg.data_dir, &mut cfg.engine).unwrap();
        assert_eq!(load_volume(d.path(), &cfg).unwrap(), p);
        assert_eq!(cfg.engine.block_size, 4096);
        let taken = cfg.engine.adopted.join(", ");
        assert!(
            taken.contains("block_size 4096 (default: 16384)")
                && taken.contains("cached_levels 6 (default: 8)"),
            "{taken}"
        );
        // A named value is not replaced: the start is refused, naming it.
        let mut cfg = VolumeConfig {
            engine: toml::from_str("block_size = 16384").unwrap(),
            ..at(d.path())
        };
        adopt_recorded(&cfg.data_dir, &mut cfg.engine).unwrap();
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("block_size 4096 (configured: 16384)"), "{err}");
        // A volume made with 4 KiB blocks and the old default depth (10 levels)
        // starts with today's defaults and keeps its depth: the cache budget only
        // sizes a new volume's cache.
        let old = tempfile::tempdir().unwrap();
        let mut made = at(old.path());
        (made.engine.block_size, made.engine.capacity_blocks) = (4096, 262_144);
        if let Some(s) = made.engine.kind.get_mut::<PathSettings>() {
            s.cached_levels = Some(10);
        }
        let p = VolumeParams::new(&made, &VolumeId::random(), "file", "ab".repeat(16), None);
        save_volume(old.path(), &p).unwrap();
        let mut cfg = VolumeConfig {
            engine: toml::from_str("tree_cache_mib = 1").unwrap(),
            ..at(old.path())
        };
        adopt_recorded(&cfg.data_dir, &mut cfg.engine).unwrap();
        assert_eq!(load_volume(old.path(), &cfg).unwrap(), p);
        assert_eq!(cfg.engine.fixed("vol0")["cached_levels"], "10");
        // A directory without a volume keeps the configuration as it is.
        let empty = tempfile::tempdir().unwrap();
        let mut cfg = at(empty.path());
        adopt_recorded(&cfg.data_dir, &mut cfg.engine).unwrap();
        assert_eq!(cfg.engine, VolumeConfig::default().engine);
    }

    /// An ObliviStore volume records its partitions: a configuration that names
    /// nothing takes the engine and them; other named partitions are refused.
    #[test]
    fn an_oblivistore_volume_keeps_its_partitions() {
        let d = tempfile::tempdir().unwrap();
        let at = |dir: &Path, engine: &str| VolumeConfig {
            data_dir: dir.to_path_buf(),
            engine: toml::from_str(engine).unwrap(),
            ..VolumeConfig::default()
        };
        let made = at(
            d.path(),
            "kind = 'oblivistore'\noblivistore_partitions = 16\ncapacity_blocks = 4096",
        );
        let p = VolumeParams::new(&made, &VolumeId::random(), "file", "ab".repeat(16), None);
        assert_eq!(p.engine, "oblivistore");
        assert_eq!(p.fixed.get("partitions").map(String::as_str), Some("16"));
        save_volume(d.path(), &p).unwrap();
        let mut cfg = at(d.path(), "");
        adopt_recorded(&cfg.data_dir, &mut cfg.engine).unwrap();
        assert_eq!(load_volume(d.path(), &cfg).unwrap(), p);
        assert_eq!(cfg.engine.kind.name(), "oblivistore");
        let mut cfg = at(d.path(), "kind = 'oblivistore'\noblivistore_partitions = 8");
        adopt_recorded(&cfg.data_dir, &mut cfg.engine).unwrap();
        let err = load_volume(d.path(), &cfg).unwrap_err().to_string();
        assert!(err.contains("partitions 16 (configured: 8)"), "{err}");
    }
}
