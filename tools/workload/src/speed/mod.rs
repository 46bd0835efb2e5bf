//! `oram-workload speed`: the speed benchmark. In one run on one machine (every
//! process on 127.0.0.1, no link shaping) it measures
//!
//! 1. the raw throughput of each back-end at the size of the engine's backend
//!    objects, at the proxy's concurrency: the fs back-end's ways of writing
//!    (creating — temporary file, fsync, rename, one directory fsync per batch —
//!    and rewriting in place — write, fdatasync — the rate the limit uses) in a
//!    directory under the lab, and MinIO with concurrent PUTs and GETs;
//! 2. MinIO itself as the yardstick (client → MinIO), then oram-proxy with each
//!    engine on the fs back-end (the embedded default) and on MinIO;
//! 3. per configuration: small-object GET and PUT latency (p50, p99), single- and
//!    multi-stream PUT and GET throughput of large objects (every byte read is
//!    checked), the serving process's CPU seconds per GiB and peak RSS;
//! 4. per engine, the analytical bandwidth overhead at its parameters (read from
//!    the volume's `volume.toml`, as the engine fixed them), the limit it implies
//!    (raw back-end throughput ÷ overhead) and achieved ÷ limit, beside the
//!    overhead the proxy measured (`oram_bandwidth_overhead_ratio`).
//!
//! It prints and writes a Markdown report (`--out`) and a CSV beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use bytes::Bytes;
use rand::RngCore;

use crate::api::{self, Endpoint};
use crate::harness::{self, Lab, ProxyBackend, ProxyRun};
use crate::report::human;

/// Bytes sealing adds to an object's plaintext (`oram_seal::OVERHEAD`: version,
/// nonce and the AES-GCM tag). Checked against the objects the engines leave on
/// the back-end after each configuration.
pub const SEAL_OVERHEAD: u64 = 45;

/// Files written per batch by the raw fs measurement before the directory is
/// fsynced (the fs back-end fsyncs a directory once per `put_many`).
const RAW_FS_BATCH: u64 = 64;

/// Command line of `oram-workload speed`.
#[derive(clap::Args, Debug, Clone)]
pub struct SpeedArgs {
    /// Engines behind the proxy (default: direct and every ORAM engine the
    /// proxy's `example-config` offers; --quick: path). `curious:ring` (or
    /// `curious:path`) is CURIOUS with that sub-ORAM (`curious_sub`);
    /// `oblivistore` is ObliviStore.
    #[arg(long, value_delimiter = ',')]
    pub engines: Vec<String>,
    /// Back-ends of the proxy: fs (the embedded default) and minio (default
    /// both; --quick: fs). MinIO itself is always measured as the yardstick.
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Size of the objects of the throughput phases (default 64M; --quick: 512K).
    #[arg(long, value_parser = crate::parse_size)]
    pub object_size: Option<u64>,
    /// Part size of the throughput PUTs (multipart upload, parts one after
    /// another in a stream, as aws cli and boto3's upload_file do); an object of
    /// at most one part, or 0, is one PUT.
    #[arg(long, value_parser = crate::parse_size, default_value = "8M")]
    pub part_size: u64,
    /// Concurrent streams of the multi-stream phases (each its own object).
    #[arg(long, default_value_t = 8)]
    pub streams: usize,
    /// Timed requests per latency phase (default 200; --quick: 10).
    #[arg(long)]
    pub requests: Option<usize>,
    /// Untimed requests before each latency phase (default 20; --quick: 2).
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Object size of the latency phases.
    #[arg(long, value_parser = crate::parse_size, default_value = "4K")]
    pub small_size: u64,
    /// `engine.block_size` (default: the proxy's).
    #[arg(long, value_parser = crate::parse_size)]
    pub block_size: Option<u64>,
    /// `engine.capacity_blocks` (default: the proxy's).
    #[arg(long)]
    pub capacity_blocks: Option<u64>,
    /// `engine.cached_levels` of Path and Ring ORAM (default: the proxy's).
    #[arg(long)]
    pub cached_levels: Option<u32>,
    /// Another `[engine]` setting of every configuration, `KEY=VALUE` with a
    /// TOML value (e.g. `max_batch=16`); repeatable.
    #[arg(long = "engine-set", value_name = "KEY=VALUE")]
    pub engine_set: Vec<String>,
    /// Stop a throughput phase after this many seconds (parts and GET bodies in
    /// flight finish; bytes/s is over what completed); 0: no limit (default
    /// 120; --quick: 10).
    #[arg(long)]
    pub max_seconds_per_phase: Option<u64>,
    /// Bytes written and read by each raw back-end measurement (default 64M;
    /// --quick: 4M).
    #[arg(long, value_parser = crate::parse_size)]
    pub raw_bytes: Option<u64>,
    /// Concurrent requests (or threads, for fs) of the raw measurements; the
    /// default is the proxy's (the fs back-end runs 32 file operations at once,
    /// the S3 back-end keeps 32 requests in flight).
    #[arg(long, default_value_t = 32)]
    pub raw_concurrency: usize,
    /// Quick mode (CI): 512 KiB objects, 10 requests, Path ORAM on fs only.
    #[arg(long)]
    pub quick: bool,
    /// Seed of the generated bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// oram-proxy binary (default: next to this one).
    #[arg(long)]
    pub proxy: Option<PathBuf>,
    /// MinIO binary (default: $ORAM_TEST_MINIO, else ~/go/bin/minio).
    #[arg(long)]
    pub minio: Option<PathBuf>,
    /// The Markdown report (a CSV is written beside it, `.csv`).
    #[arg(long, default_value = "target/speed.md")]
    pub out: PathBuf,
    /// Working directory (MinIO data, proxy data dirs, raw files); default
    /// `speed-work` beside the report. Deleted at the end.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// The run's settings, defaults resolved.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Engines, in order.
    pub engines: Vec<String>,
    /// Proxy back-ends (`fs`, `minio`), in order.
    pub backends: Vec<String>,
    /// Object size of the throughput phases.
    pub object_size: u64,
    /// Multipart part size (0: single PUT).
    pub part_size: u64,
    /// Streams of the multi-stream phases.
    pub streams: usize,
    /// Timed requests per latency phase.
    pub requests: usize,
    /// Untimed requests first.
    pub warmup: usize,
    /// Object size of the latency phases.
    pub small_size: u64,
    /// Time limit of a throughput phase (None: none).
    pub max_phase: Option<Duration>,
    /// Bytes of each raw measurement.
    pub raw_bytes: u64,
    /// Concurrency of the raw measurements.
    pub raw_concurrency: usize,
}

impl Plan {
    /// Resolves `a`'s defaults (and `--quick`'s).
    pub fn of(a: &SpeedArgs) -> Result<Self, String> {
        let q = a.quick;
        let engines = if a.engines.is_empty() {
            if q {
                vec!["path".to_string()]
            } else {
                ["direct", "path", "ring"].map(String::from).to_vec()
            }
        } else {
            a.engines.clone()
        };
        let backends = if a.backends.is_empty() {
            if q {
                vec!["fs".to_string()]
            } else {
                vec!["fs".to_string(), "minio".to_string()]
            }
        } else {
            a.backends.clone()
        };
        if let Some(b) = backends.iter().find(|b| *b != "fs" && *b != "minio") {
            return Err(format!("unknown back-end {b:?} (fs, minio)"));
        }
        let secs = a.max_seconds_per_phase.unwrap_or(if q { 10 } else { 120 });
        let plan = Self {
            engines,
            backends,
            object_size: a
                .object_size
                .unwrap_or(if q { 512 << 10 } else { 64 << 20 }),
            part_size: a.part_size,
            streams: a.streams.max(1),
            requests: a.requests.unwrap_or(if q { 10 } else { 200 }).max(1),
            warmup: a.warmup.unwrap_or(if q { 2 } else { 20 }),
            small_size: a.small_size.max(1),
            max_phase: (secs > 0).then(|| Duration::from_secs(secs)),
            raw_bytes: a.raw_bytes.unwrap_or(if q { 4 << 20 } else { 64 << 20 }),
            raw_concurrency: a.raw_concurrency.max(1),
        };
        if plan.object_size == 0 {
            return Err("--object-size must be positive".into());
        }
        Ok(plan)
    }

    /// Whether a throughput PUT is a multipart upload (and can stop at a part
    /// boundary).
    pub fn multipart(&self) -> bool {
        self.part_size > 0 && self.part_size < self.object_size
    }
}

// ---------------------------------------------------------------------------
// The analytical model.

/// An engine's parameters as the volume fixed them (`volume.toml`).
#[derive(Clone, Debug, PartialEq)]
pub struct Terms {
    /// `direct`, `path`, `ring`, `curious` or `oblivistore`.
    pub engine: String,
    /// Bytes per block.
    pub block_size: u64,
    /// Logical blocks.
    pub capacity: u64,
    /// Leaves of the tree (0 for `direct` and `oblivistore`: no tree).
    pub leaves: u64,
    /// Levels cached locally (at most the tree's levels).
    pub cached_levels: u32,
    /// Real blocks per bucket (Z).
    pub z: u64,
    /// Ring ORAM's dummy slots per bucket (S; 0 otherwise).
    pub s: u64,
    /// Ring ORAM's accesses per eviction (A; 0 otherwise).
    pub a: u64,
    /// Children per inner node of the tree (2; CURIOUS's Path sub-ORAM: its
    /// arity).
    pub arity: u64,
    /// CURIOUS and ObliviStore: partitions (0 for the other engines). For
    /// CURIOUS the tree terms above are then those of one partition's sub-ORAM.
    pub partitions: u64,
    /// CURIOUS: the sub-ORAM (`path` or `ring`; empty for the other engines).
    pub sub: String,
    /// CURIOUS and ObliviStore: partition accesses per op, ν (1 for the other
    /// engines). Not recorded in `volume.toml`: the run's setting (default
    /// 1.25).
    pub eviction_rate: f64,
    /// ObliviStore: the top level of every partition (levels `0..=top`, level
    /// `l` an object of `2^(l+1)` slots; 0 for the other engines).
    pub top_level: u32,
}

impl Terms {
    /// Reads the parameters a proxy fixed for its volume from `volume.toml`'s
    /// text: `engine`, `block_size`, `capacity_blocks` and the `[fixed]` table.
    pub fn from_volume_toml(text: &str) -> Result<Self, String> {
        let mut top = BTreeMap::new();
        let mut fixed = BTreeMap::new();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.trim_matches(['[', ']']).trim().to_string();
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"').to_string();
            match section.as_str() {
                "" => top.insert(k.trim().to_string(), v),
                "fixed" => fixed.insert(k.trim().to_string(), v),
                _ => None,
            };
        }
        let num = |m: &BTreeMap<String, String>, k: &str| -> Result<u64, String> {
            m.get(k)
                .ok_or_else(|| format!("volume.toml has no {k}"))?
                .parse::<u64>()
                .map_err(|e| format!("volume.toml {k}: {e}"))
        };
        let engine = top
            .get("engine")
            .cloned()
            .ok_or("volume.toml has no engine")?;
        // ObliviStore has no tree: its partitions' levels are in `top_level`.
        let oblivistore = engine == "oblivistore";
        let tree = engine != "direct" && !oblivistore;
        // CURIOUS records its sub-ORAM's terms as `sub_<key>`.
        let curious = engine == "curious";
        let key = |k: &str| {
            if curious {
                format!("sub_{k}")
            } else {
                k.to_string()
            }
        };
        let opt = |k: &str| -> Result<u64, String> {
            if tree && fixed.contains_key(&key(k)) {
                num(&fixed, &key(k))
            } else {
                Ok(0)
            }
        };
        let arity = match opt("arity")? {
            0 => 2,
            k => k,
        };
        Ok(Self {
            block_size: num(&top, "block_size")?,
            capacity: num(&top, "capacity_blocks")?,
            leaves: if tree {
                num(&fixed, &key("leaves"))?
            } else {
                0
            },
            cached_levels: opt("cached_levels")? as u32,
            z: if tree { num(&fixed, &key("z"))? } else { 0 },
            s: opt("s")?,
            a: opt("a")?,
            arity,
            partitions: if curious || oblivistore {
                num(&fixed, "partitions")?
            } else {
                0
            },
            sub: if curious {
                fixed.get("sub").cloned().unwrap_or_default()
            } else {
                String::new()
            },
            eviction_rate: if curious || oblivistore { 1.25 } else { 1.0 },
            top_level: if oblivistore {
                num(&fixed, "top_level")? as u32
            } else {
                0
            },
            engine,
        })
    }

    /// The engine whose tree the terms describe: CURIOUS's sub-ORAM, else the
    /// engine.
    pub fn tree_engine(&self) -> &str {
        if self.engine == "curious" {
            &self.sub
        } else {
            &self.engine
        }
    }

    /// Levels of the tree, `L + 1` for `arity^L` leaves (0 for `direct`).
    pub fn levels(&self) -> u32 {
        if self.leaves == 0 {
            return 0;
        }
        let k = self.arity.max(2);
        let (mut n, mut levels) = (1u64, 1u32);
        while n < self.leaves {
            n = n.saturating_mul(k);
            levels += 1;
        }
        levels
    }

    /// Levels stored on the back-end (not cached).
    pub fn uncached(&self) -> u32 {
        self.levels().saturating_sub(self.cached_levels)
    }

    /// Logical bytes of the volume (capacity × block size).
    pub fn oram_bytes(&self) -> u64 {
        self.capacity * self.block_size
    }
}

/// Leaves of Path ORAM's tree for `capacity` blocks, as `oram_tree::Geometry::new`
/// makes it: the smallest power of two ≥ ⌈capacity / 2⌉.
pub fn path_leaves(capacity: u64) -> u64 {
    capacity.div_ceil(2).max(1).next_power_of_two()
}

/// Leaves of Ring ORAM's tree, as `RingConfig::leaves_for`: the smallest power
/// of two ≥ ⌈2·capacity / Z⌉.
pub fn ring_leaves(capacity: u64, z: u64) -> u64 {
    (2 * capacity).div_ceil(z.max(1)).max(1).next_power_of_two()
}

/// `E[⌊R / S⌋]` for `R ~ Poisson(A)`: Ring ORAM's expected early reshuffles of
/// a bucket between two of its evictions (the paper's model, as
/// `oram_ring::expected_reshuffles_poisson`).
pub fn expected_reshuffles(a: u64, s: u64) -> f64 {
    let a = a as f64;
    let s = s.max(1);
    let mut total = 0.0;
    let mut ln_fact = 0.0;
    for k in 0..(a as u64 * 6 + 100) {
        if k > 0 {
            ln_fact += (k as f64).ln();
        }
        let pmf = (-a + k as f64 * a.ln() - ln_fact).exp();
        total += pmf * (k / s) as f64;
    }
    total
}

/// Slots one access of an ObliviStore partition with levels `0..=top` reads and
/// writes, on average over a cycle of its eviction counter (`2^top`
/// evictions) once its top level is filled: the access reads one slot of every
/// filled level; its eviction builds the lowest empty level `j` (the top when
/// all are filled) from every level below it (all of them when the top is
/// rebuilt), reading `2^l` slots of each and writing the `2^(j+1)` slots of
/// level `j`.
pub fn hierarchy_slots(top: u32) -> (f64, f64) {
    let top = top.min(24) as usize;
    let mut filled = vec![false; top + 1];
    filled[top] = true;
    let cycle = 1u64 << top;
    let (mut read, mut written) = (0u64, 0u64);
    for _ in 0..cycle {
        read += filled.iter().filter(|&&f| f).count() as u64;
        let j = filled.iter().position(|f| !f).unwrap_or(top);
        let sources = if filled[j] { top + 1 } else { j };
        read += (0..sources).map(|l| 1u64 << l).sum::<u64>();
        written += 2u64 << j;
        for f in &mut filled[..sources] {
            *f = false;
        }
        filled[j] = true;
    }
    (read as f64 / cycle as f64, written as f64 / cycle as f64)
}

/// Back-end bytes moved per client byte, one way each.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Bytes read from the back-end per client byte.
    pub read: f64,
    /// Bytes written to the back-end per client byte.
    pub write: f64,
}

impl Traffic {
    /// The bandwidth overhead: back-end bytes per client byte.
    pub fn overhead(&self) -> f64 {
        self.read + self.write
    }

    /// The throughput limit (client bytes/s) on a back-end that reads at
    /// `raw.read` and writes at `raw.write` bytes/s: `1 / (read/R + write/W)`,
    /// i.e. the raw throughput of this read/write mix ÷ the overhead.
    pub fn limit(&self, raw: &Raw) -> f64 {
        let t = self.read / raw.read + self.write / raw.write;
        if t > 0.0 {
            1.0 / t
        } else {
            f64::INFINITY
        }
    }

    /// The raw back-end throughput for this mix of reads and writes (weighted
    /// harmonic mean), so that `limit = mix_raw ÷ overhead`.
    pub fn mix_raw(&self, raw: &Raw) -> f64 {
        self.overhead() * self.limit(raw)
    }
}

/// An engine's analytical cost per access.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Bytes of one backend object (a bucket; a block for `direct`).
    pub object_len: u64,
    /// What a client GET moves.
    pub get: Traffic,
    /// What a client PUT moves.
    pub put: Traffic,
    /// Overhead in blocks per block accessed (the papers' unit, without ids and
    /// sealing).
    pub blocks: f64,
}

/// The analytical model of the engine `t` names (None for an unknown engine).
///
/// With `B` the block size, `U` the uncached levels and `seal = 45`:
/// * direct: one object of `B + seal` read per block read, written per block
///   written; overhead 1 block.
/// * path: every access reads and writes the `U` uncached buckets of a path,
///   `Z·(8 + B) + seal` bytes each; overhead `2·Z·U` blocks.
/// * ring: online, one slot (`8 + B + seal`) per uncached level; every `A`
///   accesses an EvictPath reads and writes each uncached bucket of a path
///   whole (`ring_evict_read = "whole"`, the default: header `16·(Z+S) + seal`
///   and `Z+S` slots), and each bucket is also reshuffled early
///   `ρ = E⌊Poisson(A)/S⌋` times per eviction period (read and written whole);
///   overhead `U·(1 + 2·(Z+S)·(1+ρ)/A)` blocks.
///
/// * curious: `ν ×` its sub-ORAM's model (one sub-ORAM access per op, and a
///   background one with probability ν − 1; the evicted block rides on an access
///   as an insert, moving no bytes of its own).
/// * oblivistore: `ν` partition accesses per op, each reading `r` and writing
///   `w` slots of `8 + B + seal` bytes on average ([`hierarchy_slots`] of the
///   partitions' top level: the steady state, once a partition's top level is
///   filled — a young volume moves less); overhead `ν·(r + w)` blocks. Reads
///   are single slots (ranged GETs), writes whole levels: the model's object
///   is a slot.
pub fn model(t: &Terms) -> Option<Model> {
    if t.engine == "oblivistore" {
        let slot = 8 + t.block_size + SEAL_OVERHEAD;
        let (r, w) = hierarchy_slots(t.top_level);
        let nu = t.eviction_rate;
        let per = |slots: f64| nu * slots * slot as f64 / t.block_size as f64;
        let tr = Traffic {
            read: per(r),
            write: per(w),
        };
        return Some(Model {
            object_len: slot,
            get: tr,
            put: tr,
            blocks: nu * (r + w),
        });
    }
    if t.engine == "curious" {
        let sub = Terms {
            engine: t.sub.clone(),
            partitions: 0,
            sub: String::new(),
            eviction_rate: 1.0,
            ..t.clone()
        };
        if !matches!(sub.engine.as_str(), "path" | "ring") {
            return None;
        }
        let m = model(&sub)?;
        let nu = t.eviction_rate;
        let scale = |x: Traffic| Traffic {
            read: x.read * nu,
            write: x.write * nu,
        };
        return Some(Model {
            object_len: m.object_len,
            get: scale(m.get),
            put: scale(m.put),
            blocks: m.blocks * nu,
        });
    }
    let b = t.block_size as f64;
    let u = f64::from(t.uncached());
    Some(match t.engine.as_str() {
        "direct" => {
            let obj = t.block_size + SEAL_OVERHEAD;
            let x = obj as f64 / b;
            Model {
                object_len: obj,
                get: Traffic {
                    read: x,
                    write: 0.0,
                },
                put: Traffic {
                    read: 0.0,
                    write: x,
                },
                blocks: 1.0,
            }
        }
        "path" => {
            let obj = t.z * (8 + t.block_size) + SEAL_OVERHEAD;
            let x = u * obj as f64 / b;
            let tr = Traffic { read: x, write: x };
            Model {
                object_len: obj,
                get: tr,
                put: tr,
                blocks: 2.0 * t.z as f64 * u,
            }
        }
        "ring" => {
            let slots = t.z + t.s;
            let slot = 8 + t.block_size + SEAL_OVERHEAD;
            let obj = 16 * slots + SEAL_OVERHEAD + slots * slot;
            let rho = expected_reshuffles(t.a, t.s);
            let evict = u * (1.0 + rho) / t.a.max(1) as f64 * obj as f64;
            let tr = Traffic {
                read: (u * slot as f64 + evict) / b,
                write: evict / b,
            };
            Model {
                object_len: obj,
                get: tr,
                put: tr,
                blocks: u * (1.0 + 2.0 * slots as f64 * (1.0 + rho) / t.a.max(1) as f64),
            }
        }
        _ => return None,
    })
}

/// The value of `key` among `--engine-set KEY=VALUE`s (the last one).
fn setting<'a>(sets: &'a [String], key: &str) -> Option<&'a str> {
    sets.iter()
        .rev()
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().trim_matches('"'))
}

/// The engines the proxy offers (its `example-config` names them), direct first.
fn offered_engines(proxy: &Path) -> Result<Vec<String>, String> {
    let out = std::process::Command::new(proxy)
        .arg("example-config")
        .output()
        .map_err(|e| format!("{}: {e}", proxy.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let engines: Vec<String> = ["direct", "path", "ring", "oblivistore", "curious"]
        .iter()
        .filter(|e| text.contains(&format!("\"{e}\"")))
        .map(|e| e.to_string())
        .collect();
    if engines.is_empty() {
        return Err(format!(
            "{} example-config names no engine",
            proxy.display()
        ));
    }
    Ok(engines)
}

/// Raw throughput of a back-end at one object size, bytes/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Raw {
    /// Reading objects back.
    pub read: f64,
    /// Writing objects that exist (fs: in place, as the fs back-end rewrites a
    /// bucket; MinIO: a PUT): the rate the limit uses, since an engine's
    /// steady state rewrites objects that exist.
    pub write: f64,
    /// Creating objects (fs: temporary file, fsync, rename, directory fsync per
    /// batch, as the fs back-end writes a bucket the first time; MinIO: a PUT).
    pub create: f64,
}

/// The value at quantile `p` (0..=1) of `sorted` (nearest rank); NaN if empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------
// Results.

/// One throughput phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Flow {
    /// Client body bytes completed.
    pub bytes: u64,
    /// Seconds from the first request to the last completion.
    pub secs: f64,
    /// Whether the phase stopped at its time limit before every object was done.
    pub cut: bool,
}

impl Flow {
    /// Bytes/s (NaN if nothing ran).
    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 && self.bytes > 0 {
            self.bytes as f64 / self.secs
        } else {
            f64::NAN
        }
    }
}

/// What the analysis needs about a proxy configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ProxyFacts {
    /// The volume's parameters.
    pub terms: Terms,
    /// The analytical model.
    pub model: Model,
    /// The back-end's raw throughput at the model's object size.
    pub raw: Raw,
    /// `oram_bandwidth_overhead_ratio` at the end (back-end bytes per client
    /// byte since start: every phase).
    pub measured_overhead: f64,
    /// Local state on disk after a clean stop (data dir without the fs store).
    pub local_bytes: u64,
    /// Bytes the volume occupies on the back-end after a clean stop.
    pub backend_bytes: u64,
    /// Size of a bucket (block) object found on the back-end.
    pub object_len_seen: Option<u64>,
}

/// One configuration's measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// `minio`, or `<engine> / <back-end>`.
    pub name: String,
    /// Small GET latencies, ms, sorted.
    pub get_ms: Vec<f64>,
    /// Small PUT latencies, ms, sorted.
    pub put_ms: Vec<f64>,
    /// PUT, one stream.
    pub put1: Flow,
    /// PUT, several streams.
    pub putn: Flow,
    /// GET, one stream.
    pub get1: Flow,
    /// GET, several streams.
    pub getn: Flow,
    /// CPU seconds of the serving process over the throughput phases.
    pub cpu_s: f64,
    /// Peak RSS of the serving process, bytes.
    pub peak_rss: u64,
    /// The proxy's terms (None for the yardstick).
    pub proxy: Option<ProxyFacts>,
}

impl Row {
    /// CPU seconds per GiB of client bytes in the throughput phases.
    pub fn cpu_per_gib(&self) -> f64 {
        let bytes = self.put1.bytes + self.putn.bytes + self.get1.bytes + self.getn.bytes;
        if bytes == 0 {
            f64::NAN
        } else {
            self.cpu_s / (bytes as f64 / (1u64 << 30) as f64)
        }
    }

    /// The throughput limits (PUT, GET), bytes/s.
    pub fn limits(&self) -> Option<(f64, f64)> {
        self.proxy
            .as_ref()
            .map(|p| (p.model.put.limit(&p.raw), p.model.get.limit(&p.raw)))
    }

    /// Achieved ÷ limit for PUT ×1, PUT ×n, GET ×1, GET ×n.
    pub fn achieved(&self) -> Option<[f64; 4]> {
        let (lp, lg) = self.limits()?;
        Some([
            self.put1.rate() / lp,
            self.putn.rate() / lp,
            self.get1.rate() / lg,
            self.getn.rate() / lg,
        ])
    }

    /// Outsource ratio: back-end bytes ÷ local bytes.
    pub fn outsource_ratio(&self) -> f64 {
        match &self.proxy {
            Some(p) if p.local_bytes > 0 => p.backend_bytes as f64 / p.local_bytes as f64,
            _ => f64::NAN,
        }
    }
}

/// The report's header.
#[derive(Clone, Debug, Default)]
pub struct Header {
    /// The command line.
    pub command: String,
    /// When (UTC).
    pub date: String,
    /// The machine.
    pub machine: String,
    /// The plan's settings, as one sentence.
    pub settings: String,
}

fn ms(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// Bytes/s as MB/s (10⁶ bytes).
fn mbs(v: f64) -> String {
    let m = v / 1e6;
    if !m.is_finite() {
        "—".into()
    } else if m < 10.0 {
        format!("{m:.2}")
    } else {
        format!("{m:.1}")
    }
}

/// `a / b` as a ratio to the yardstick: `12.6×`, or `1/98` below one half.
fn ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if !r.is_finite() || r <= 0.0 {
        "—".into()
    } else if r < 0.5 {
        format!("1/{:.0}", 1.0 / r)
    } else {
        format!("{r:.2}×")
    }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.0} %", v * 100.0)
    } else {
        "—".into()
    }
}

fn bytes_h(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

/// The Markdown report: header, the speed table, the limits table, the terms
/// table, notes and problems.
pub fn markdown(h: &Header, plan: &Plan, rows: &[Row], problems: &[String]) -> String {
    let mut s = String::new();
    s.push_str("## Speed: oram-proxy against MinIO and against each engine's analytical limit\n\n");
    s.push_str(&format!("Command: `{}`  \n", h.command));
    s.push_str(&format!("Date: {}  \nMachine: {}  \n", h.date, h.machine));
    s.push_str(
        "Link model: same machine, loopback, no shaping (client, proxy and MinIO on 127.0.0.1).  \n",
    );
    s.push_str(&format!("Settings: {}\n\n", h.settings));
    let base = rows.iter().find(|r| r.proxy.is_none());
    let bget = |f: fn(&Row) -> f64| base.map_or(f64::NAN, f);
    let n = plan.streams;
    let cut_mark = |f: &Flow| if f.cut { " †" } else { "" };
    s.push_str(&format!(
        "| configuration | {sz} GET p50 ms | {sz} GET p99 ms | {sz} PUT p50 ms | {sz} PUT p99 ms | PUT ×1 MB/s | PUT ×{n} MB/s | GET ×1 MB/s | GET ×{n} MB/s | CPU s/GiB | peak RSS |\n",
        sz = human(plan.small_size).replace('K', " KiB").replace('M', " MiB")
    ));
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let lat = |v: f64, b: f64| {
            if r.proxy.is_some() {
                format!("{} ({})", ms(v), ratio(v, b))
            } else {
                ms(v)
            }
        };
        let tp = |f: &Flow, b: f64| {
            if r.proxy.is_some() {
                format!("{}{} ({})", mbs(f.rate()), cut_mark(f), ratio(f.rate(), b))
            } else {
                format!("{}{}", mbs(f.rate()), cut_mark(f))
            }
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |\n",
            r.name,
            lat(
                percentile(&r.get_ms, 0.5),
                bget(|b| percentile(&b.get_ms, 0.5))
            ),
            lat(
                percentile(&r.get_ms, 0.99),
                bget(|b| percentile(&b.get_ms, 0.99))
            ),
            lat(
                percentile(&r.put_ms, 0.5),
                bget(|b| percentile(&b.put_ms, 0.5))
            ),
            lat(
                percentile(&r.put_ms, 0.99),
                bget(|b| percentile(&b.put_ms, 0.99))
            ),
            tp(&r.put1, bget(|b| b.put1.rate())),
            tp(&r.putn, bget(|b| b.putn.rate())),
            tp(&r.get1, bget(|b| b.get1.rate())),
            tp(&r.getn, bget(|b| b.getn.rate())),
            r.cpu_per_gib(),
            bytes_h(r.peak_rss),
        ));
    }
    s.push_str(
        "\nIn brackets: the ratio to MinIO in the same run (latency: × slower; throughput: the \
         fraction of MinIO's). MB/s = 10⁶ bytes/s of object bodies. CPU s/GiB: the serving \
         process's (MinIO's, or the proxy's without MinIO's) user + system CPU seconds over the four \
         throughput phases ÷ GiB of object bodies moved.",
    );
    if rows
        .iter()
        .any(|r| [r.put1, r.putn, r.get1, r.getn].iter().any(|f| f.cut))
    {
        s.push_str(&format!(
            " † The phase stopped at its time limit ({} s; parts and bodies in flight finished): \
             bytes/s over what completed.",
            plan.max_phase.map_or(0, |d| d.as_secs())
        ));
    }
    s.push_str("\n\n### Against the analytical limit\n\n");
    s.push_str(&format!(
        "| configuration | bucket object | raw write / read MB/s | overhead, blocks | overhead, bytes (analytical / measured) | limit PUT / GET MB/s | achieved ÷ limit: PUT ×1 | PUT ×{n} | GET ×1 | GET ×{n} |\n"
    ));
    s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let (Some(p), Some((lp, lg)), Some(a)) = (&r.proxy, r.limits(), r.achieved()) else {
            continue;
        };
        s.push_str(&format!(
            "| {} | {} B | {} / {} | {:.1} | {:.1} / {:.1} | {} / {} | {} | {} | {} | {} |\n",
            r.name,
            p.model.object_len,
            mbs(p.raw.write),
            mbs(p.raw.read),
            p.model.blocks,
            p.model.get.overhead().max(p.model.put.overhead()),
            p.measured_overhead,
            mbs(lp),
            mbs(lg),
            pct(a[0]),
            pct(a[1]),
            pct(a[2]),
            pct(a[3]),
        ));
    }
    s.push_str(
        "\nlimit = raw back-end throughput ÷ overhead, with the raw throughput of the engine's \
         own read/write mix at its bucket size: `1 / (r/R + w/W)` for `r`, `w` back-end bytes \
         read and written per client byte and `R`, `W` the raw read and write rates. The \
         measured overhead is the proxy's `oram_bandwidth_overhead_ratio` at the end of the \
         configuration (every phase, latency ones included).\n\n",
    );
    s.push_str("### Terms\n\n");
    s.push_str("| configuration | ORAM size | block | leaves / levels / cached / on back-end (CURIOUS: of one partition) | Z, S, A | local footprint | back-end bytes | outsource ratio |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let Some(p) = &r.proxy else { continue };
        let t = &p.terms;
        let tree = if t.leaves == 0 {
            "—".to_string()
        } else {
            format!(
                "{} / {} / {} / {}",
                t.leaves,
                t.levels(),
                t.cached_levels.min(t.levels()),
                t.uncached()
            )
        };
        let zsa = match t.tree_engine() {
            "ring" => format!("{}, {}, {}", t.z, t.s, t.a),
            "path" => format!("{}, —, —", t.z),
            _ => "—".into(),
        };
        let zsa = if t.engine == "curious" {
            format!(
                "P = {}, ν = {}, each {}: {}-ary, {zsa}",
                t.partitions, t.eviction_rate, t.sub, t.arity
            )
        } else if t.engine == "oblivistore" {
            format!(
                "P = {}, ν = {}, each levels 0..={}",
                t.partitions, t.eviction_rate, t.top_level
            )
        } else {
            zsa
        };
        s.push_str(&format!(
            "| {} | {} ({} blocks) | {} | {} | {} | {} | {} | {:.1} |\n",
            r.name,
            bytes_h(t.oram_bytes()),
            t.capacity,
            bytes_h(t.block_size),
            tree,
            zsa,
            bytes_h(p.local_bytes),
            bytes_h(p.backend_bytes),
            r.outsource_ratio(),
        ));
    }
    s.push('\n');
    if problems.is_empty() {
        s.push_str("Every request succeeded and every byte read matched what was written.\n");
    } else {
        s.push_str("Problems:\n\n");
        for p in problems {
            s.push_str(&format!("- {p}\n"));
        }
    }
    s
}

/// The rows as CSV (one line per configuration).
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "config,get_p50_ms,get_p99_ms,put_p50_ms,put_p99_ms,put1_bps,putn_bps,get1_bps,getn_bps,\
         put1_cut,putn_cut,get1_cut,getn_cut,cpu_s_per_gib,peak_rss_bytes,engine,block_size,\
         capacity_blocks,leaves,levels,cached_levels,uncached_levels,z,s,a,object_len_model,\
         object_len_seen,overhead_blocks,overhead_get,overhead_put,overhead_measured,raw_read_bps,\
         raw_write_bps,raw_mix_put_bps,raw_mix_get_bps,limit_put_bps,limit_get_bps,achieved_put1,achieved_putn,achieved_get1,\
         achieved_getn,local_bytes,backend_bytes,outsource_ratio,raw_create_bps\n",
    );
    for r in rows {
        let f = |v: f64| {
            if v.is_nan() {
                String::new()
            } else {
                format!("{v}")
            }
        };
        let mut cells = vec![
            r.name.clone(),
            f(percentile(&r.get_ms, 0.5)),
            f(percentile(&r.get_ms, 0.99)),
            f(percentile(&r.put_ms, 0.5)),
            f(percentile(&r.put_ms, 0.99)),
            f(r.put1.rate()),
            f(r.putn.rate()),
            f(r.get1.rate()),
            f(r.getn.rate()),
            r.put1.cut.to_string(),
            r.putn.cut.to_string(),
            r.get1.cut.to_string(),
            r.getn.cut.to_string(),
            f(r.cpu_per_gib()),
            r.peak_rss.to_string(),
        ];
        match (&r.proxy, r.limits(), r.achieved()) {
            (Some(p), Some((lp, lg)), Some(a)) => {
                let t = &p.terms;
                cells.extend([
                    t.engine.clone(),
                    t.block_size.to_string(),
                    t.capacity.to_string(),
                    t.leaves.to_string(),
                    t.levels().to_string(),
                    t.cached_levels.to_string(),
                    t.uncached().to_string(),
                    t.z.to_string(),
                    t.s.to_string(),
                    t.a.to_string(),
                    p.model.object_len.to_string(),
                    p.object_len_seen.map_or(String::new(), |v| v.to_string()),
                    f(p.model.blocks),
                    f(p.model.get.overhead()),
                    f(p.model.put.overhead()),
                    f(p.measured_overhead),
                    f(p.raw.read),
                    f(p.raw.write),
                    f(p.model.put.mix_raw(&p.raw)),
                    f(p.model.get.mix_raw(&p.raw)),
                    f(lp),
                    f(lg),
                    f(a[0]),
                    f(a[1]),
                    f(a[2]),
                    f(a[3]),
                    p.local_bytes.to_string(),
                    p.backend_bytes.to_string(),
                    f(r.outsource_ratio()),
                    f(p.raw.create),
                ]);
            }
            _ => {
                cells.push("minio".into());
                cells.extend(std::iter::repeat_n(String::new(), 29));
            }
        }
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

// ---------------------------------------------------------------------------
// Raw back-end throughput.

/// Writes `total` bytes as files of `len` bytes under `dir` the way the fs
/// back-end does, with `threads` threads: first created (each into a temporary
/// file, written, fsynced, renamed into place; the directory fsynced once per
/// batch of [`RAW_FS_BATCH`]), then rewritten in place (opened, written at
/// offset 0, `fdatasync`, as the fs back-end rewrites a bucket that exists); then
/// reads them all back; deletes them. Blocking.
pub fn raw_fs(dir: &Path, len: u64, total: u64, threads: usize, seed: u64) -> Result<Raw, String> {
    use std::io::Write;
    let tmp = dir.join("tmp");
    let data_dir = dir.join("data");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let n = total.div_ceil(len).max(1);
    let mut body = vec![0u8; len as usize];
    crate::dist::rng_for(seed, "raw-fs", len).fill_bytes(&mut body);
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    let start = Instant::now();
    let mut first = 0;
    while first < n {
        let end = (first + RAW_FS_BATCH).min(n);
        on_threads(first..end, threads, |i| {
            let t = tmp.join(format!("{i}.tmp"));
            let mut f = std::fs::File::create(&t).map_err(|e| io("create", &t, e))?;
            f.write_all(&body).map_err(|e| io("write", &t, e))?;
            f.sync_all().map_err(|e| io("fsync", &t, e))?;
            let d = data_dir.join(i.to_string());
            std::fs::rename(&t, &d).map_err(|e| io("rename", &d, e))
        })?;
        std::fs::File::open(&data_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("fsync", &data_dir, e))?;
        first = end;
    }
    let create = (n * len) as f64 / start.elapsed().as_secs_f64();
    // The rewrite: other bytes, so that nothing can be skipped.
    for b in body.iter_mut() {
        *b = !*b;
    }
    let start = Instant::now();
    on_threads(0..n, threads, |i| {
        use std::os::unix::fs::FileExt;
        let p = data_dir.join(i.to_string());
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(|e| io("open", &p, e))?;
        f.write_all_at(&body, 0).map_err(|e| io("write", &p, e))?;
        f.sync_data().map_err(|e| io("fdatasync", &p, e))
    })?;
    let write = (n * len) as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    on_threads(0..n, threads, |i| {
        let p = data_dir.join(i.to_string());
        let got = std::fs::read(&p).map_err(|e| io("read", &p, e))?;
        if got != body {
            return Err(format!("{}: read back other bytes", p.display()));
        }
        Ok(())
    })?;
    let read = (n * len) as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(dir);
    Ok(Raw {
        read,
        write,
        create,
    })
}

/// Runs `f` on every index of `range` with `threads` threads, each taking the
/// next index until none is left; the first error (or a panic) is returned.
fn on_threads(
    range: std::ops::Range<u64>,
    threads: usize,
    f: impl Fn(u64) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let next = AtomicU64::new(range.start);
    let res: Vec<Result<(), String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| -> Result<(), String> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= range.end {
                            return Ok(());
                        }
                        f(i)?;
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("raw fs thread panicked".into()))
            })
            .collect()
    });
    res.into_iter().collect()
}

/// PUTs `total` bytes to MinIO as objects of `len` bytes with `conc` requests
/// in flight, then GETs them back (checked); deletes them and the bucket.
pub async fn raw_minio(
    ep: &Endpoint,
    len: u64,
    total: u64,
    conc: usize,
    seed: u64,
) -> Result<Raw, String> {
    let c = api::s3_client(ep);
    let bucket = format!("raw-{len}");
    c.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| format!("create bucket {bucket}: {e}"))?;
    let n = total.div_ceil(len).max(1);
    let mut body = vec![0u8; len as usize];
    crate::dist::rng_for(seed, "raw-minio", len).fill_bytes(&mut body);
    let body = Bytes::from(body);
    let run = |write: bool| {
        let (c, bucket, body) = (c.clone(), bucket.clone(), body.clone());
        async move {
            let next = Arc::new(AtomicU64::new(0));
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..conc {
                let (c, bucket, body, next) =
                    (c.clone(), bucket.clone(), body.clone(), next.clone());
                set.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok::<(), String>(());
                        }
                        let key = format!("o/{i}");
                        if write {
                            c.put_object()
                                .bucket(&bucket)
                                .key(&key)
                                .body(ByteStream::from(body.clone()))
                                .send()
                                .await
                                .map_err(|e| format!("raw PUT {key}: {e}"))?;
                        } else {
                            let got = c
                                .get_object()
                                .bucket(&bucket)
                                .key(&key)
                                .send()
                                .await
                                .map_err(|e| format!("raw GET {key}: {e}"))?
                                .body
                                .collect()
                                .await
                                .map_err(|e| format!("raw GET {key} body: {e}"))?
                                .into_bytes();
                            if got != body {
                                return Err(format!("raw GET {key}: other bytes"));
                            }
                        }
                    }
                });
            }
            let start = Instant::now();
            while let Some(r) = set.join_next().await {
                r.map_err(|e| e.to_string())??;
            }
            Ok::<f64, String>((n * len) as f64 / start.elapsed().as_secs_f64())
        }
    };
    let write = run(true).await?;
    let read = run(false).await?;
    crate::stored_bytes_then_delete(ep, &bucket).await?;
    Ok(Raw {
        read,
        write,
        create: write,
    })
}

// ---------------------------------------------------------------------------
// The phases.

/// What one configuration is driven through.
struct Target {
    client: Client,
    bucket: String,
    /// The serving process (MinIO or the proxy).
    pid: u32,
}

fn s3_err<E: std::error::Error + 'static>(what: &str, e: aws_sdk_s3::error::SdkError<E>) -> String {
    use std::error::Error;
    let mut s = format!("{what}: {e}");
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// Small-object latency: `warmup` untimed GETs and PUTs, then `n` timed PUTs,
/// then `n` timed GETs (checked), one at a time. Returns (GET ms, PUT ms), sorted.
async fn latency(t: &Target, plan: &Plan, small: &Bytes) -> Result<(Vec<f64>, Vec<f64>), String> {
    const KEYS: usize = 8;
    for k in 0..KEYS {
        put_small(t, &format!("lat/get-{k}"), small).await?;
    }
    for i in 0..plan.warmup {
        put_small(t, &format!("lat/put-{}", i % KEYS), small).await?;
        get_small(t, &format!("lat/get-{}", i % KEYS), small).await?;
    }
    let mut put_ms = Vec::with_capacity(plan.requests);
    for i in 0..plan.requests {
        let t0 = Instant::now();
        put_small(t, &format!("lat/put-{}", i % KEYS), small).await?;
        put_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let mut get_ms = Vec::with_capacity(plan.requests);
    for i in 0..plan.requests {
        let t0 = Instant::now();
        get_small(t, &format!("lat/get-{}", i % KEYS), small).await?;
        get_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    put_ms.sort_by(f64::total_cmp);
    get_ms.sort_by(f64::total_cmp);
    Ok((get_ms, put_ms))
}

async fn put_small(t: &Target, key: &str, body: &Bytes) -> Result<(), String> {
    t.client
        .put_object()
        .bucket(&t.bucket)
        .key(key)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .map_err(|e| s3_err(&format!("PUT {key}"), e))?;
    Ok(())
}

async fn get_small(t: &Target, key: &str, want: &Bytes) -> Result<(), String> {
    let got = t
        .client
        .get_object()
        .bucket(&t.bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| s3_err(&format!("GET {key}"), e))?
        .body
        .collect()
        .await
        .map_err(|e| format!("GET {key} body: {e}"))?
        .into_bytes();
    if got != *want {
        return Err(format!(
            "GET {key}: {} bytes, not what was written",
            got.len()
        ));
    }
    Ok(())
}

/// PUTs `data` as each of `keys` concurrently (one stream per key); a multipart
/// upload stops starting parts after `deadline` and completes with the parts
/// done. Returns the flow and the length stored per key.
async fn put_objects(
    t: &Target,
    keys: &[String],
    data: &Bytes,
    plan: &Plan,
    deadline: Option<Instant>,
    progress: &Arc<AtomicU64>,
) -> Result<(Flow, Vec<u64>), String> {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, key) in keys.iter().enumerate() {
        let (c, bucket, key, data, progress) = (
            t.client.clone(),
            t.bucket.clone(),
            key.clone(),
            data.clone(),
            progress.clone(),
        );
        let (multipart, part) = (plan.multipart(), plan.part_size);
        set.spawn(async move {
            if !multipart {
                let len = data.len() as u64;
                c.put_object()
                    .bucket(&bucket)
                    .key(&key)
                    .body(ByteStream::from(data))
                    .send()
                    .await
                    .map_err(|e| s3_err(&format!("PUT {key}"), e))?;
                progress.fetch_add(len, Ordering::Relaxed);
                return Ok::<_, String>((i, len, false));
            }
            let up = c
                .create_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .send()
                .await
                .map_err(|e| s3_err(&format!("create upload {key}"), e))?;
            let id = up.upload_id().unwrap_or_default().to_string();
            let mut parts = Vec::new();
            let mut off = 0u64;
            let mut cut = false;
            while off < data.len() as u64 {
                if off > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                    cut = true;
                    break;
                }
                let end = (off + part).min(data.len() as u64);
                let num = parts.len() as i32 + 1;
                let r = c
                    .upload_part()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&id)
                    .part_number(num)
                    .body(ByteStream::from(data.slice(off as usize..end as usize)))
                    .send()
                    .await
                    .map_err(|e| s3_err(&format!("upload part {num} of {key}"), e))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(num)
                        .set_e_tag(r.e_tag().map(str::to_string))
                        .build(),
                );
                progress.fetch_add(end - off, Ordering::Relaxed);
                off = end;
            }
            c.complete_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| s3_err(&format!("complete upload {key}"), e))?;
            Ok((i, off, cut))
        });
    }
    let mut lens = vec![0; keys.len()];
    let mut flow = Flow::default();
    while let Some(r) = set.join_next().await {
        let (i, len, cut) = r.map_err(|e| e.to_string())??;
        lens[i] = len;
        flow.bytes += len;
        flow.cut |= cut;
    }
    flow.secs = start.elapsed().as_secs_f64();
    Ok((flow, lens))
}

/// GETs each of `objects` (key, stored length) concurrently, streaming and
/// checking the body against `data`; a stream stops reading after `deadline`.
async fn get_objects(
    t: &Target,
    objects: &[(String, u64)],
    data: &Bytes,
    deadline: Option<Instant>,
    progress: &Arc<AtomicU64>,
) -> Result<Flow, String> {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (key, len) in objects {
        let (c, bucket, key, len, data, progress) = (
            t.client.clone(),
            t.bucket.clone(),
            key.clone(),
            *len,
            data.clone(),
            progress.clone(),
        );
        set.spawn(async move {
            let mut body = c
                .get_object()
                .bucket(&bucket)
                .key(&key)
                .send()
                .await
                .map_err(|e| s3_err(&format!("GET {key}"), e))?
                .body;
            let mut off = 0usize;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| format!("GET {key} body: {e}"))?;
                let end = off + chunk.len();
                if end as u64 > len || chunk[..] != data[off..end] {
                    return Err(format!(
                        "GET {key}: bytes {off}..{end} differ from what was written"
                    ));
                }
                progress.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                off = end;
                if (off as u64) < len && deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok::<_, String>((off as u64, true));
                }
            }
            if off as u64 != len {
                return Err(format!("GET {key}: {off} bytes, {len} were written"));
            }
            Ok((off as u64, false))
        });
    }
    let mut flow = Flow::default();
    while let Some(r) = set.join_next().await {
        let (n, cut) = r.map_err(|e| e.to_string())??;
        flow.bytes += n;
        flow.cut |= cut;
    }
    flow.secs = start.elapsed().as_secs_f64();
    Ok(flow)
}

/// The latency and throughput phases of one configuration. `settle` runs after
/// each PUT phase (a proxy's write-backs drain before its CPU is read).
async fn phases(
    t: &Target,
    plan: &Plan,
    data: &Bytes,
    small: &Bytes,
    bar: &indicatif::ProgressBar,
    settle: &dyn Fn(),
) -> Result<Row, String> {
    let name = bar.message();
    let progress = Arc::new(AtomicU64::new(0));
    let ticker = {
        let (bar, progress) = (bar.clone(), progress.clone());
        let name = name.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let b = progress.load(Ordering::Relaxed);
                bar.set_message(format!("{name}: {}", bytes_h(b)));
            }
        })
    };
    let result = async {
        bar.set_message(format!("{name}: latency"));
        let (get_ms, put_ms) = latency(t, plan, small).await?;
        bar.inc(1);
        let deadline = || plan.max_phase.map(|d| Instant::now() + d);
        let mut cpu = 0.0;
        let measure = |r: &mut f64, c0: f64| *r += harness::cpu_seconds_of(t.pid) - c0;

        let one = vec!["big/single".to_string()];
        let c0 = harness::cpu_seconds_of(t.pid);
        let (put1, lens1) = put_objects(t, &one, data, plan, deadline(), &progress).await?;
        tokio::task::block_in_place(settle);
        measure(&mut cpu, c0);
        bar.inc(1);
        let objs1: Vec<(String, u64)> = one.iter().cloned().zip(lens1).collect();
        let c0 = harness::cpu_seconds_of(t.pid);
        let get1 = get_objects(t, &objs1, data, deadline(), &progress).await?;
        measure(&mut cpu, c0);
        bar.inc(1);
        t.client
            .delete_object()
            .bucket(&t.bucket)
            .key(&one[0])
            .send()
            .await
            .map_err(|e| s3_err("DELETE big/single", e))?;

        let many: Vec<String> = (0..plan.streams)
            .map(|i| format!("big/multi-{i}"))
            .collect();
        let c0 = harness::cpu_seconds_of(t.pid);
        let (putn, lensn) = put_objects(t, &many, data, plan, deadline(), &progress).await?;
        tokio::task::block_in_place(settle);
        measure(&mut cpu, c0);
        bar.inc(1);
        let objsn: Vec<(String, u64)> = many.iter().cloned().zip(lensn).collect();
        let c0 = harness::cpu_seconds_of(t.pid);
        let getn = get_objects(t, &objsn, data, deadline(), &progress).await?;
        measure(&mut cpu, c0);
        bar.inc(1);
        for k in &many {
            t.client
                .delete_object()
                .bucket(&t.bucket)
                .key(k)
                .send()
                .await
                .map_err(|e| s3_err(&format!("DELETE {k}"), e))?;
        }
        Ok(Row {
            name: name.clone(),
            get_ms,
            put_ms,
            put1,
            putn,
            get1,
            getn,
            cpu_s: cpu,
            peak_rss: harness::peak_rss_of(t.pid),
            proxy: None,
        })
    }
    .await;
    ticker.abort();
    result
}

/// The size of a bucket (block) object on an fs store: the first file in a
/// `n`, `r` or `b` directory under `store`.
fn object_len_in_fs(store: &Path) -> Option<u64> {
    let vols = std::fs::read_dir(store).ok()?;
    for v in vols.flatten() {
        for d in ["n", "r", "b"] {
            if let Ok(rd) = std::fs::read_dir(v.path().join(d)) {
                if let Some(f) = rd.flatten().find(|f| f.path().is_file()) {
                    return f.metadata().ok().map(|m| m.len());
                }
            }
        }
    }
    None
}

/// The size of a bucket (block) object in a MinIO bucket (first page).
async fn object_len_in_s3(ep: &Endpoint, bucket: &str) -> Option<u64> {
    let out = api::s3_client(ep)
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .ok()?;
    out.contents()
        .iter()
        .find(|o| {
            o.key()
                .is_some_and(|k| ["/n/", "/r/", "/b/"].iter().any(|d| k.contains(d)))
        })
        .and_then(|o| o.size())
        .map(|s| s as u64)
}

fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            format!("{secs} s after the Unix epoch")
        })
}

/// Runs the benchmark; `Ok(false)` if some configuration had a problem (the
/// report says which).
pub async fn run(args: SpeedArgs) -> Result<bool, String> {
    let plan = Plan::of(&args)?;
    let proxy = args
        .proxy
        .clone()
        .unwrap_or_else(|| crate::sibling("oram-proxy"));
    let minio = crate::minio_path(args.minio.clone())?;
    for (what, p) in [("oram-proxy", &proxy), ("minio", &minio)] {
        if !p.is_file() {
            return Err(format!(
                "{what} not found at {} (build it, or pass its path)",
                p.display()
            ));
        }
    }
    if let Some(d) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let work = args.work_dir.clone().unwrap_or_else(|| {
        args.out
            .parent()
            .unwrap_or(Path::new("."))
            .join("speed-work")
    });
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let work = work
        .canonicalize()
        .map_err(|e| format!("{}: {e}", work.display()))?;
    let lab = Lab::start_unshaped(&work.join("lab"), &minio)?;

    let mut data = vec![0u8; plan.object_size as usize];
    crate::dist::rng_for(args.seed, "speed-object", 0).fill_bytes(&mut data);
    let data = Bytes::from(data);
    let mut small = vec![0u8; plan.small_size as usize];
    crate::dist::rng_for(args.seed, "speed-small", 0).fill_bytes(&mut small);
    let small = Bytes::from(small);

    let mut plan = plan;
    if args.engines.is_empty() && !args.quick {
        plan.engines = offered_engines(&proxy)?;
    }
    let mut engine_toml = String::new();
    if let Some(b) = args.block_size {
        engine_toml.push_str(&format!("block_size = {b}\n"));
    }
    if let Some(c) = args.capacity_blocks {
        engine_toml.push_str(&format!("capacity_blocks = {c}\n"));
    }
    for kv in &args.engine_set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--engine-set {kv:?}: expected KEY=VALUE"))?;
        engine_toml.push_str(&format!("{} = {}\n", k.trim(), v.trim()));
    }
    let configs: Vec<(String, String)> = plan
        .backends
        .iter()
        .flat_map(|b| plan.engines.iter().map(move |e| (e.clone(), b.clone())))
        .collect();
    let bar = indicatif::ProgressBar::new(5 * (configs.len() as u64 + 1));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} phases  {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    let mut rows = Vec::new();
    let mut problems = Vec::new();

    // The yardstick: MinIO itself.
    bar.set_message("minio");
    let yard = Target {
        client: api::s3_client(&lab.root),
        bucket: "speed-yardstick".into(),
        pid: lab.minio_pid(),
    };
    yard.client
        .create_bucket()
        .bucket(&yard.bucket)
        .send()
        .await
        .map_err(|e| s3_err("create bucket speed-yardstick", e))?;
    match phases(&yard, &plan, &data, &small, &bar, &|| {}).await {
        Ok(row) => rows.push(row),
        Err(e) => problems.push(format!("minio: {e}")),
    }
    if let Err(e) = crate::stored_bytes_then_delete(&lab.root, &yard.bucket).await {
        problems.push(format!("minio: {e}"));
    }

    let mut raws: BTreeMap<(String, u64), Raw> = BTreeMap::new();
    for (i, (engine, backend)) in configs.iter().enumerate() {
        bar.set_position(5 * (i as u64 + 1));
        let name = format!("{engine} / {backend}");
        bar.set_message(name.clone());
        let (kind, sub) = match engine.split_once(':') {
            Some((k, s)) => (k, Some(s)),
            None => (engine.as_str(), None),
        };
        let mut toml = format!("kind = {kind:?}\n{engine_toml}");
        if let Some(sub) = sub {
            toml.push_str(&format!("curious_sub = {sub:?}\n"));
        }
        if engine == "direct" {
            toml.push_str("insecure_direct = true\n");
        } else if kind == "oblivistore" {
            // No tree: nothing cached.
        } else if let Some(c) = args.cached_levels {
            toml.push_str(&format!("cached_levels = {c}\n"));
        }
        let pb = if backend == "fs" {
            ProxyBackend::Fs
        } else {
            ProxyBackend::LabS3Defaults
        };
        let run_name = format!("speed-{}-{backend}", engine.replace(':', "-"));
        let mut p = match ProxyRun::start_with(&lab, &proxy, &run_name, &toml, pb, false, false) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{name}: proxy did not start: {e}"));
                continue;
            }
        };
        let result = async {
            let vt = p.data_dir.join("data").join("volume.toml");
            let mut terms = Terms::from_volume_toml(
                &std::fs::read_to_string(&vt).map_err(|e| format!("{}: {e}", vt.display()))?,
            )?;
            if matches!(terms.engine.as_str(), "curious" | "oblivistore") {
                let key = format!("{}_eviction_rate", terms.engine);
                if let Some(nu) = setting(&args.engine_set, &key) {
                    terms.eviction_rate = nu.parse().map_err(|e| format!("{key} {nu:?}: {e}"))?;
                }
            }
            let want_leaves = match kind {
                "path" => path_leaves(terms.capacity),
                "ring" => ring_leaves(terms.capacity, terms.z),
                // A partition's tree: as the volume recorded it.
                "curious" => terms.leaves,
                _ => 0,
            };
            if terms.leaves != want_leaves {
                problems.push(format!(
                    "{name}: the volume has {} leaves, the bench's geometry says {want_leaves}",
                    terms.leaves
                ));
            }
            let model = model(&terms).ok_or(format!("no analytical model of engine {engine}"))?;
            let key = (backend.clone(), model.object_len);
            let raw = match raws.get(&key) {
                Some(r) => *r,
                None => {
                    bar.set_message(format!(
                        "{name}: raw {backend} at {} B objects",
                        model.object_len
                    ));
                    let r = if backend == "fs" {
                        let dir = work.join(format!("raw-fs-{}", model.object_len));
                        let (len, total, conc, seed) = (
                            model.object_len,
                            plan.raw_bytes,
                            plan.raw_concurrency,
                            args.seed,
                        );
                        tokio::task::spawn_blocking(move || raw_fs(&dir, len, total, conc, seed))
                            .await
                            .map_err(|e| e.to_string())??
                    } else {
                        raw_minio(
                            &lab.root,
                            model.object_len,
                            plan.raw_bytes,
                            plan.raw_concurrency,
                            args.seed,
                        )
                        .await?
                    };
                    raws.insert(key, r);
                    r
                }
            };
            bar.set_message(name.clone());
            let t = Target {
                client: api::s3_client(&p.endpoint),
                bucket: "speed".into(),
                pid: p.pid(),
            };
            t.client
                .create_bucket()
                .bucket(&t.bucket)
                .send()
                .await
                .map_err(|e| s3_err("create bucket speed", e))?;
            let settle = || {
                let _ = p.settle(Duration::from_secs(600));
            };
            let mut row = phases(&t, &plan, &data, &small, &bar, &settle).await?;
            let m = tokio::task::block_in_place(|| p.settle(Duration::from_secs(600)))?;
            let measured_overhead = m
                .get("oram_bandwidth_overhead_ratio")
                .copied()
                .unwrap_or(f64::NAN);
            row.proxy = Some(ProxyFacts {
                terms,
                model,
                raw,
                measured_overhead,
                local_bytes: 0,
                backend_bytes: 0,
                object_len_seen: None,
            });
            Ok::<Row, String>(row)
        }
        .await;
        let stopped = p.stop();
        match result {
            Ok(mut row) => {
                if let Err(e) = stopped {
                    problems.push(format!("{name}: {e}"));
                }
                let facts = row.proxy.as_mut().expect("set above");
                facts.local_bytes = p.local_bytes();
                if backend == "fs" {
                    facts.backend_bytes = p.fs_store_bytes();
                    facts.object_len_seen =
                        object_len_in_fs(&p.data_dir.join("data").join("store"));
                } else {
                    facts.object_len_seen = object_len_in_s3(&lab.root, &p.bucket).await;
                    match crate::stored_bytes_then_delete(&lab.root, &p.bucket).await {
                        Ok(b) => facts.backend_bytes = b,
                        Err(e) => problems.push(format!("{name}: {e}")),
                    }
                }
                if let Some(seen) = facts.object_len_seen {
                    if seen != facts.model.object_len {
                        problems.push(format!(
                            "{name}: back-end objects of {seen} B, the model says {} B",
                            facts.model.object_len
                        ));
                    }
                }
                rows.push(row);
            }
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                if backend == "minio" {
                    let _ = crate::stored_bytes_then_delete(&lab.root, &p.bucket).await;
                }
            }
        }
        p.remove_data();
    }
    bar.finish_and_clear();
    drop(lab);

    let header = Header {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: utc_now(),
        machine: crate::machine(),
        settings: format!(
            "{obj} objects for throughput ({put}), {n} streams for the multi-stream phases (each its \
             own object); {req} timed {small} GETs and PUTs after {warm} untimed of each, one at a \
             time; throughput phases limited to {lim}; raw back-end throughput from {raw} written \
             and read back with {conc} threads (fs) or requests (MinIO) in flight, at the size of \
             each engine's back-end objects (fs: the write rate is of rewrites in place — open, write, \
             fdatasync — as the fs back-end rewrites a bucket that exists; creating them first — \
             temporary file, write, fsync, rename, one directory fsync per {batch} files — is in the \
             CSV as raw_create_bps; reads come from the page cache, as the proxy's do). Proxy: the engine's defaults{over} (see Terms), `[backend] kind = \"fs\"` \
             (the embedded default, fsync on, store under the data directory) or MinIO at the \
             proxy's default request limits; checkpoints at shutdown only.",
            obj = bytes_h(plan.object_size),
            put = if plan.multipart() {
                format!("PUT as multipart uploads of {} parts, one part after another per stream", bytes_h(plan.part_size))
            } else {
                "one PUT per object".into()
            },
            n = plan.streams,
            req = plan.requests,
            small = bytes_h(plan.small_size),
            warm = plan.warmup,
            lim = plan
                .max_phase
                .map_or("no time".into(), |d| format!("{} s", d.as_secs())),
            raw = bytes_h(plan.raw_bytes),
            conc = plan.raw_concurrency,
            batch = RAW_FS_BATCH,
            over = if engine_toml.is_empty() && args.cached_levels.is_none() {
                String::new()
            } else {
                format!(
                    " except {}",
                    [
                        args.block_size.map(|b| format!("block_size = {b}")),
                        args.capacity_blocks.map(|c| format!("capacity_blocks = {c}")),
                        args.cached_levels.map(|c| format!("cached_levels = {c}")),
                    ]
                    .into_iter()
                    .flatten()
                    .chain(args.engine_set.iter().map(|kv| kv.replacen('=', " = ", 1)))
                    .collect::<Vec<_>>()
                    .join(", ")
                )
            },
        ),
    };
    let md = markdown(&header, &plan, &rows, &problems);
    std::fs::write(&args.out, &md).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let csv_path = args.out.with_extension("csv");
    std::fs::write(&csv_path, csv(&rows)).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    println!("{md}");
    println!(
        "report: {} (and {})",
        args.out.display(),
        csv_path.display()
    );
    let _ = std::fs::remove_dir_all(&work);
    Ok(problems.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(engine: &str, capacity: u64, cached: u32) -> Terms {
        let (z, s, a) = match engine {
            "ring" => (4, 6, 3),
            "path" => (4, 0, 0),
            _ => (0, 0, 0),
        };
        let leaves = match engine {
            "path" => path_leaves(capacity),
            "ring" => ring_leaves(capacity, z),
            _ => 0,
        };
        Terms {
            engine: engine.into(),
            block_size: 4096,
            capacity,
            leaves,
            cached_levels: cached,
            z,
            s,
            a,
            arity: 2,
            partitions: 0,
            sub: String::new(),
            eviction_rate: 1.0,
            top_level: 0,
        }
    }

    #[test]
    fn geometry_follows_the_engines() {
        // Path: leaves = next power of two of ⌈capacity / 2⌉ (oram_tree::Geometry).
        assert_eq!(path_leaves(2048), 1024);
        assert_eq!(path_leaves(2049), 2048);
        assert_eq!(path_leaves(1), 1);
        // The default of earlier releases: 262144 blocks, 10 cached levels → 2^17 leaves,
        // 18 levels, 8 on the back-end.
        let t = terms("path", 262_144, 10);
        assert_eq!((t.leaves, t.levels(), t.uncached()), (131_072, 18, 8));
        // Capacity 2048 with 10 cached levels: 1024 leaves, 11 levels, 1 uncached.
        let t = terms("path", 2048, 10);
        assert_eq!((t.leaves, t.levels(), t.uncached()), (1024, 11, 1));
        // Everything cached: nothing on the back-end.
        assert_eq!(terms("path", 2048, 30).uncached(), 0);
        // Ring: leaves = next power of two of ⌈2·capacity / Z⌉.
        assert_eq!(ring_leaves(262_144, 4), 131_072);
        assert_eq!(ring_leaves(100, 33), 8);
    }

    #[test]
    fn overheads_follow_the_formulas() {
        // Path, default volume: 2·Z·U = 64 blocks; bytes add ids and sealing.
        let m = model(&terms("path", 262_144, 10)).unwrap();
        assert_eq!(m.blocks, 64.0);
        assert_eq!(m.object_len, 4 * (8 + 4096) + 45);
        let want = 2.0 * 8.0 * m.object_len as f64 / 4096.0;
        assert!((m.get.overhead() - want).abs() < 1e-9);
        assert_eq!(m.get, m.put, "an oblivious engine moves the same for both");
        assert!(m.get.overhead() > 64.0 && m.get.overhead() < 65.0);
        // Capacity 2048, 10 cached levels: one level on the back-end, 8 blocks.
        assert_eq!(model(&terms("path", 2048, 10)).unwrap().blocks, 8.0);
        // Ring, small preset: ρ = E⌊Poisson(3)/6⌋ = P(R ≥ 6) + P(R ≥ 12) + …
        let rho = expected_reshuffles(3, 6);
        assert!((rho - 0.0839).abs() < 5e-4, "ρ = {rho}");
        let r = model(&terms("ring", 262_144, 10)).unwrap();
        let per_level = 1.0 + 2.0 * 10.0 * (1.0 + rho) / 3.0;
        assert!((r.blocks - 8.0 * per_level).abs() < 1e-9);
        assert_eq!(r.object_len, 16 * 10 + 45 + 10 * (8 + 4096 + 45));
        // Online reads one slot per level; reads exceed writes by exactly that.
        let slot = (8 + 4096 + 45) as f64 / 4096.0;
        assert!((r.get.read - r.get.write - 8.0 * slot).abs() < 1e-9);
        // Direct: one sealed block, read for a GET, written for a PUT.
        let d = model(&terms("direct", 262_144, 0)).unwrap();
        assert_eq!((d.blocks, d.object_len), (1.0, 4096 + 45));
        assert_eq!((d.get.write, d.put.read), (0.0, 0.0));
        assert!(model(&terms("nope", 1, 0)).is_none());
        // ObliviStore, levels 0 and 1 (2 and 4 slots), from {1} filled: an
        // eviction into level 0 (reads: level 1's slot), then the top rebuilt
        // from both (reads: 2 slots + 1 + 2 merged) — 3 slots read and 3
        // written per access; the steady state of a deeper hierarchy reads
        // about one slot per level plus its shuffles.
        assert_eq!(hierarchy_slots(1), (3.0, 3.0));
        assert_eq!(hierarchy_slots(0), (2.0, 2.0));
        let (r, w) = hierarchy_slots(10);
        assert!(r > 10.0 && r < 20.0 && w > 10.0 && w < 20.0, "{r} {w}");
        let o = model(&Terms {
            engine: "oblivistore".into(),
            partitions: 64,
            eviction_rate: 1.25,
            top_level: 1,
            ..terms("direct", 4096, 0)
        })
        .unwrap();
        let slot = (8 + 4096 + 45) as f64 / 4096.0;
        assert_eq!(o.blocks, 1.25 * 6.0);
        assert!((o.get.read - 1.25 * 3.0 * slot).abs() < 1e-9 && o.get == o.put);
    }

    #[test]
    fn the_limit_is_the_mix_raw_throughput_over_the_overhead() {
        let raw = Raw {
            read: 400e6,
            write: 100e6,
            create: 50e6,
        };
        let m = model(&terms("path", 262_144, 10)).unwrap();
        let l = m.put.limit(&raw);
        assert!((l - m.put.mix_raw(&raw) / m.put.overhead()).abs() / l < 1e-12);
        // Equal reads and writes: the harmonic mean of the two rates (160 MB/s).
        assert!((m.put.mix_raw(&raw) - 160e6).abs() < 1.0);
        // Direct GET reads only.
        let d = model(&terms("direct", 8, 0)).unwrap();
        assert!((d.get.limit(&raw) - 400e6 * 4096.0 / 4141.0).abs() < 1.0);
        // Nothing on the back-end: no limit.
        let all = model(&terms("path", 2048, 30)).unwrap();
        assert!(all.get.limit(&raw).is_infinite());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 100.0);
        assert_eq!(percentile(&v, 0.99), 198.0);
        assert_eq!(percentile(&v, 1.0), 200.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn volume_toml_is_read() {
        let text = "format = 3\nvolume_id = \"ab\"\nengine = \"ring\"\nblock_size = 4096\n\
                    capacity_blocks = 262144\nprefix = \"vol0\"\n\n[fixed]\na = \"3\"\n\
                    cached_levels = \"10\"\nleaves = \"131072\"\ns = \"6\"\nz = \"4\"\n\n[kdf]\nm = 1\n";
        assert_eq!(
            Terms::from_volume_toml(text).unwrap(),
            terms("ring", 262_144, 10)
        );
        // CURIOUS records its partitions' tree as `sub_<key>`; the model is ν ×
        // the sub-ORAM's (a ternary Path ORAM, Z = 5: 81 leaves, 5 levels).
        let curious = "engine = \"curious\"\nblock_size = 16384\ncapacity_blocks = 65536\n\
                       [fixed]\narity = \"3\"\npartitions = \"256\"\nsub = \"path\"\n\
                       sub_arity = \"3\"\nsub_cached_levels = \"1\"\nsub_leaves = \"81\"\n\
                       sub_z = \"5\"\nz = \"5\"\n";
        let t = Terms::from_volume_toml(curious).unwrap();
        assert_eq!(
            (
                t.partitions,
                t.sub.as_str(),
                t.arity,
                t.levels(),
                t.uncached(),
                t.z
            ),
            (256, "path", 3, 5, 4, 5)
        );
        let m = model(&t).unwrap();
        let bucket = 5 * (8 + 16384) + SEAL_OVERHEAD;
        assert_eq!(m.object_len, bucket);
        let want = 1.25 * 4.0 * bucket as f64 / 16384.0;
        assert!((m.get.read - want).abs() < 1e-9 && (m.put.write - want).abs() < 1e-9);
        assert!((m.blocks - 1.25 * 2.0 * 5.0 * 4.0).abs() < 1e-9);
        let ring = "engine = \"curious\"\nblock_size = 4096\ncapacity_blocks = 1024\n\
                    [fixed]\npartitions = \"32\"\nsub = \"ring\"\nsub_a = \"3\"\n\
                    sub_cached_levels = \"0\"\nsub_leaves = \"128\"\nsub_s = \"6\"\n\
                    sub_z = \"4\"\n";
        let t = Terms::from_volume_toml(ring).unwrap();
        let sub = model(&Terms {
            engine: "ring".into(),
            partitions: 0,
            sub: String::new(),
            eviction_rate: 1.0,
            ..t.clone()
        })
        .unwrap();
        assert!((model(&t).unwrap().blocks - 1.25 * sub.blocks).abs() < 1e-9);
        assert_eq!((t.arity, t.levels()), (2, 8));
        // ObliviStore records its partitions and their top level; no tree.
        let obl = "engine = \"oblivistore\"\nblock_size = 4096\ncapacity_blocks = 4096\n\
                   [fixed]\npartitions = \"64\"\ntop_level = \"8\"\n";
        let t = Terms::from_volume_toml(obl).unwrap();
        assert_eq!(
            (
                t.partitions,
                t.top_level,
                t.leaves,
                t.levels(),
                t.eviction_rate
            ),
            (64, 8, 0, 0, 1.25)
        );
        let m = model(&t).unwrap();
        assert_eq!(m.object_len, 8 + 4096 + SEAL_OVERHEAD);
        let (r, w) = hierarchy_slots(8);
        assert!((m.blocks - 1.25 * (r + w)).abs() < 1e-9);
        assert!(Terms::from_volume_toml(&obl.replace("top_level", "top")).is_err());
        let direct = "engine = \"direct\"\nblock_size = 4096\ncapacity_blocks = 8\n[fixed]\n";
        assert_eq!(
            Terms::from_volume_toml(direct).unwrap(),
            terms("direct", 8, 0)
        );
        assert!(Terms::from_volume_toml("engine = \"path\"\nblock_size = 1\n").is_err());
    }

    fn flow(mb: u64, secs: f64) -> Flow {
        Flow {
            bytes: mb * 1_000_000,
            secs,
            cut: false,
        }
    }

    #[test]
    fn the_report_has_a_row_per_configuration_and_ratios_to_minio() {
        let plan = Plan::of(&SpeedArgs {
            engines: vec![],
            backends: vec![],
            object_size: None,
            part_size: 8 << 20,
            streams: 8,
            requests: None,
            warmup: None,
            small_size: 4096,
            block_size: None,
            capacity_blocks: None,
            cached_levels: None,
            engine_set: vec![],
            max_seconds_per_phase: None,
            raw_bytes: None,
            raw_concurrency: 32,
            quick: false,
            seed: 1,
            proxy: None,
            minio: None,
            out: "x.md".into(),
            work_dir: None,
        })
        .unwrap();
        assert_eq!(plan.engines, ["direct", "path", "ring"]);
        assert_eq!((plan.object_size, plan.requests), (64 << 20, 200));
        assert!(plan.multipart());
        let minio = Row {
            name: "minio".into(),
            get_ms: vec![2.0; 10],
            put_ms: vec![4.0; 10],
            put1: flow(100, 1.0),
            putn: flow(200, 1.0),
            get1: flow(300, 1.0),
            getn: flow(400, 1.0),
            cpu_s: 1.0,
            peak_rss: 100 << 20,
            proxy: None,
        };
        let t = terms("path", 262_144, 10);
        let m = model(&t).unwrap();
        let raw = Raw {
            read: 1000e6,
            write: 1000e6,
            create: 1000e6,
        };
        let mut path = minio.clone();
        path.name = "path / fs".into();
        path.get_ms = vec![20.0; 10];
        path.put1 = flow(5, 1.0);
        path.putn = Flow {
            cut: true,
            ..flow(8, 2.0)
        };
        path.proxy = Some(ProxyFacts {
            terms: t,
            model: m,
            raw,
            measured_overhead: 63.0,
            local_bytes: 1 << 20,
            backend_bytes: 100 << 20,
            object_len_seen: Some(m.object_len),
        });
        let a = path.achieved().unwrap();
        let limit = raw.read / m.put.overhead();
        assert!((a[0] - 5e6 / limit).abs() < 1e-12);
        assert!((path.outsource_ratio() - 100.0).abs() < 1e-12);
        let rows = [minio, path];
        let md = markdown(&Header::default(), &plan, &rows, &[]);
        assert!(
            md.contains("| minio | 2.00 | 2.00 | 4.00 | 4.00 | 100.0 | 200.0 | 300.0 | 400.0 |"),
            "{md}"
        );
        // 10× slower GET; 1/20 of MinIO's PUT; the cut phase is marked.
        assert!(md.contains("| path / fs | 20.0 (10.00×) |"), "{md}");
        assert!(md.contains("5.00 (1/20)"), "{md}");
        assert!(md.contains("4.00 † (1/50)"), "{md}");
        assert!(
            md.contains("† The phase stopped at its time limit (120 s"),
            "{md}"
        );
        assert!(md.contains("| path / fs | 16461 B |"), "{md}");
        assert!(md.contains("Every request succeeded"));
        let c = csv(&rows);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 3);
        let cols = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols), "{c}");
        let bad = markdown(&Header::default(), &plan, &rows, &["x broke".into()]);
        assert!(bad.contains("- x broke") && !bad.contains("Every request succeeded"));
    }
}
