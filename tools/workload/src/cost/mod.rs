//! `oram-workload cost`: the cloud bill of each engine. For every engine and
//! block size, in one run on the fs back-end (no MinIO needed), it measures
//!
//! 1. the backend's bytes at rest per GiB of capacity and per GiB stored (the
//!    sizes of the objects the volume left in its store once stopped: what an
//!    object store bills);
//! 2. backend requests by verb and bytes moved each way, per client GiB written
//!    and per client GiB read, and requests per client block access, from the
//!    proxy's own counters (`/metrics`: `oram_backend_requests_total` and
//!    `oram_backend_bytes_total`, kept by the volume's accounting wrapper of the
//!    block store between the engine and the back-end, so exact and the same on
//!    any back-end; `oram_engine_accesses_total` for the block accesses);
//!
//! beside a plain encrypted copy computed from the same workload's object
//! sizes (one PUT per object written, one GET per object read, 1× the bytes),
//! and prices them with provider price tables ([`prices`]) in the public and
//! the private cloud model ([`prices::CloudModel`]), and gives the client
//! throughput S3's documented request rates per key prefix allow at the
//! measured requests per byte. The workload: a volume
//! `--capacity` large filled to `--fill` in `--object-size` objects, then
//! `--passes` passes of overwriting every object and reading it back (checked),
//! one object at a time; the write and read halves are counted apart. Every
//! figure per GiB is a ratio measured on this small volume and extrapolated.
//! The report is Markdown with a CSV beside it ([`report`]).

pub mod prices;
mod report;

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;

use crate::harness::ProxyRun;
use crate::speed::s3_err;
use prices::{PriceTable, Traffic};

/// Command line of `oram-workload cost`.
#[derive(clap::Args, Debug, Clone)]
pub struct CostArgs {
    /// Engines (`curious:ring` is CURIOUS with that sub-ORAM).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "direct,path,ring,curious,oblivistore"
    )]
    pub engines: Vec<String>,
    /// Block sizes.
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_size, default_value = "16K,256K")]
    pub block_sizes: Vec<u64>,
    /// Capacity of every volume (default: 16 MiB, or 256 blocks if more).
    #[arg(long, value_parser = crate::parse_size)]
    pub capacity: Option<u64>,
    /// Share of the capacity the workload's objects fill.
    #[arg(long, default_value_t = 0.5)]
    pub fill: f64,
    /// Size of the workload's objects.
    #[arg(long, value_parser = crate::parse_size, default_value = "1M")]
    pub object_size: u64,
    /// Passes of overwriting and reading back every object.
    #[arg(long, default_value_t = 4)]
    pub passes: u32,
    /// Path and Ring ORAM keep locally (`engine.cached_levels`) the tree levels
    /// that leave on the backend as many levels as a volume of this capacity
    /// has at the default tree-top cache: the requests per access of that
    /// capacity, on a small volume.
    #[arg(long, value_parser = crate::parse_size, default_value = "1G")]
    pub levels_of: u64,
    /// `engine.cached_levels` of Path and Ring ORAM instead of --levels-of
    /// (0: the whole tree on the backend).
    #[arg(long)]
    pub cached_levels: Option<u32>,
    /// A price table (TOML or JSON; repeatable). Default: the two shipped,
    /// AWS S3 Standard us-east-1 and IBM COS Standard us-south.
    #[arg(long = "prices", value_name = "FILE")]
    pub prices: Vec<PathBuf>,
    /// Seed of the objects' bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// oram-proxy binary (default: next to this one).
    #[arg(long)]
    pub proxy: Option<PathBuf>,
    /// The Markdown report (a CSV is written beside it, `.csv`).
    #[arg(long, default_value = "target/cost.md")]
    pub out: PathBuf,
    /// Working directory (the volumes); default `cost-work` beside the
    /// report. Deleted at the end.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// One phase's counts: what the client did and what the backend saw.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phase {
    /// Client bytes written or read.
    pub client_bytes: u64,
    /// Client object requests.
    pub object_ops: u64,
    /// Logical block accesses the engine served.
    pub block_accesses: u64,
    /// Backend requests and bytes.
    pub traffic: Traffic,
}

impl Phase {
    /// The traffic per client GiB of this phase.
    pub fn per_client_gib(&self) -> Traffic {
        self.traffic
            .scaled((1u64 << 30) as f64 / self.client_bytes.max(1) as f64)
    }

    /// Backend requests per client block access.
    pub fn requests_per_access(&self) -> f64 {
        self.traffic.requests() / self.block_accesses.max(1) as f64
    }

    fn add(&mut self, o: &Self) {
        self.client_bytes += o.client_bytes;
        self.object_ops += o.object_ops;
        self.block_accesses += o.block_accesses;
        self.traffic = self.traffic.plus(&o.traffic);
    }
}

/// One configuration's measurement (or the plain copy's computed figures).
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// The engine, or `plain copy`.
    pub config: String,
    /// Block size, bytes.
    pub block_size: u64,
    /// The volume's capacity, bytes (the plain copy: the live bytes).
    pub capacity_bytes: u64,
    /// Client bytes stored at the end.
    pub live_bytes: u64,
    /// Tree levels on the backend (tree engines; CURIOUS: its sub-ORAMs').
    pub uncached_levels: Option<u32>,
    /// The engine's objects on the backend at the end, bytes and count.
    pub at_rest_bytes: u64,
    /// Number of those objects.
    pub at_rest_objects: u64,
    /// The volume's own objects (header, lease, checkpoint), bytes.
    pub volume_bytes: u64,
    /// The write half of every pass.
    pub write: Phase,
    /// The read half of every pass.
    pub read: Phase,
    /// The engine's own model of its requests per block access (`None`: the
    /// plain copy).
    pub model: Option<ModelRequests>,
}

/// How far (a share of the measurement) an engine's modelled requests per
/// access at the measured volume may be from the measured ones for its
/// traffic to be projected to other sizes ([`Measured::projected`]).
pub const MODEL_CHECK: f64 = 0.1;

/// Requests per block access as the engine's model gives them
/// ([`oram_engine::EngineModel::round_requests_per_op`], from `oram-proxy
/// describe`), for rounds of as many ops as the workload's objects have blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelRequests {
    /// Ops per round the figures assume.
    pub ops_per_round: u64,
    /// At the measured volume's configuration: what the measurement checks.
    pub here: f64,
    /// A 1 GiB volume at the engine's defaults.
    pub gib: f64,
    /// A 1 TiB volume at the engine's defaults.
    pub tib: f64,
}

impl Measured {
    /// The engine's bytes at rest per byte of capacity (the volume's own
    /// objects are a fixed amount per volume, apart).
    pub fn per_capacity(&self) -> f64 {
        self.at_rest_bytes as f64 / self.capacity_bytes.max(1) as f64
    }

    /// The engine's bytes at rest per live client byte.
    pub fn per_stored(&self) -> f64 {
        self.at_rest_bytes as f64 / self.live_bytes.max(1) as f64
    }

    /// Backend requests per client block access, both phases.
    pub fn requests_per_access(&self) -> f64 {
        let mut all = self.write;
        all.add(&self.read);
        all.requests_per_access()
    }

    /// This measurement's traffic as a volume of another size would send it:
    /// every count and byte scaled by the engine's modelled requests per access
    /// there (`model_at`: [`ModelRequests::gib`] or [`ModelRequests::tib`]) over
    /// its modelled requests here; `None` for the plain copy, and where the
    /// model here is more than [`MODEL_CHECK`] off the measurement (its terms
    /// are not this workload's: the models of Ring ORAM and ObliviStore leave
    /// out what a round's ops share). A projection: bytes are taken to scale
    /// as requests do (exact for Path ORAM, whose every request moves one
    /// bucket).
    pub fn projected(&self, model_at: fn(&ModelRequests) -> f64) -> Option<Self> {
        let r = self.model?;
        let measured = self.requests_per_access();
        if r.here <= 0.0 || (r.here - measured).abs() > MODEL_CHECK * measured {
            return None;
        }
        let f = model_at(&r) / r.here;
        let scale = |p: &Phase| Phase {
            traffic: p.traffic.scaled(f),
            ..*p
        };
        Some(Self {
            write: scale(&self.write),
            read: scale(&self.read),
            ..self.clone()
        })
    }

    /// The plain encrypted copy of the same workload: one PUT per object
    /// written, one GET per object read, the client's bytes stored and moved
    /// (the few dozen bytes sealing adds to an object left out); block accesses
    /// as the engines count them, so that requests per access compare.
    pub fn plain_copy(like: &Self) -> Self {
        let phase = |p: &Phase, write: bool| Phase {
            traffic: Traffic {
                put: if write { p.object_ops as f64 } else { 0.0 },
                get: if write { 0.0 } else { p.object_ops as f64 },
                bytes_up: if write { p.client_bytes as f64 } else { 0.0 },
                bytes_down: if write { 0.0 } else { p.client_bytes as f64 },
                ..Traffic::default()
            },
            ..*p
        };
        Self {
            config: "plain copy".into(),
            block_size: like.block_size,
            capacity_bytes: like.live_bytes,
            live_bytes: like.live_bytes,
            uncached_levels: None,
            at_rest_bytes: like.live_bytes,
            at_rest_objects: 0,
            volume_bytes: 0,
            write: phase(&like.write, true),
            read: phase(&like.read, false),
            model: None,
        }
    }
}

/// The run's settings, defaults resolved.
#[derive(Clone, Debug)]
pub struct Plan {
    /// (engine, block size, capacity in bytes, objects), in order.
    pub configs: Vec<(String, u64, u64, u64)>,
    /// Object size.
    pub object_size: u64,
    /// Share of the capacity filled.
    pub fill: f64,
    /// Passes.
    pub passes: u32,
    /// Cached levels of Path and Ring: these, or (`None`) as many as leave
    /// the backend the levels of a volume of `levels_of` bytes.
    pub cached_levels: Option<u32>,
    /// See `cached_levels`.
    pub levels_of: u64,
}

impl Plan {
    /// Resolves `a`'s defaults; the capacity must hold at least one object.
    pub fn of(a: &CostArgs) -> Result<Self, String> {
        if !(a.fill > 0.0 && a.fill <= 1.0) {
            return Err(format!("--fill {}: must be in (0, 1]", a.fill));
        }
        if a.object_size == 0 || a.passes == 0 || a.block_sizes.contains(&0) {
            return Err("--object-size, --passes and block sizes must be positive".into());
        }
        let mut configs = Vec::new();
        for &bs in &a.block_sizes {
            let cap = a.capacity.unwrap_or((16u64 << 20).max(256 * bs));
            let n = (cap as f64 * a.fill / a.object_size as f64).floor() as u64;
            if n == 0 {
                return Err(format!(
                    "a capacity of {cap} B filled to {} holds no {} B object",
                    a.fill, a.object_size
                ));
            }
            for e in &a.engines {
                configs.push((e.clone(), bs, cap, n));
            }
        }
        Ok(Self {
            configs,
            object_size: a.object_size,
            fill: a.fill,
            passes: a.passes,
            cached_levels: a.cached_levels,
            levels_of: a.levels_of,
        })
    }

    /// The `[engine]` section of one configuration (`cached_levels` for Path
    /// and Ring; `None`: their default cache).
    pub fn engine_toml(
        engine: &str,
        block_size: u64,
        capacity: u64,
        cached_levels: Option<u32>,
    ) -> String {
        let (kind, sub) = match engine.split_once(':') {
            Some((k, s)) => (k, Some(s)),
            None => (engine, None),
        };
        let mut t = format!(
            "kind = {kind:?}\nblock_size = {block_size}\ncapacity_blocks = {}\n",
            capacity.div_ceil(block_size)
        );
        if kind == "direct" {
            t.push_str("insecure_direct = true\n");
        }
        if let Some(c) = cached_levels.filter(|_| kind == "path" || kind == "ring") {
            t.push_str(&format!("cached_levels = {c}\n"));
        }
        if let Some(s) = sub {
            t.push_str(&format!("curious_sub = {s:?}\n"));
        }
        t
    }
}

/// Runs the cost report; `Ok(false)` if some configuration failed (the report
/// says which).
pub async fn run(args: CostArgs) -> Result<bool, String> {
    // The price tables first: a bad one fails before anything runs.
    let tables = if args.prices.is_empty() {
        PriceTable::shipped()
    } else {
        args.prices
            .iter()
            .map(|p| PriceTable::load(p).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?
    };
    let plan = Plan::of(&args)?;
    let proxy = args
        .proxy
        .clone()
        .unwrap_or_else(|| crate::sibling("oram-proxy"));
    if !proxy.is_file() {
        return Err(format!(
            "oram-proxy not found at {} (build it, or pass --proxy)",
            proxy.display()
        ));
    }
    if let Some(d) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let work = args.work_dir.clone().unwrap_or_else(|| {
        args.out
            .parent()
            .unwrap_or(Path::new("."))
            .join("cost-work")
    });
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for (engine, bs, cap, objects) in &plan.configs {
        let name = format!("{engine} {}", crate::report::human(*bs));
        eprintln!("cost: {name}");
        let vol = Volume {
            engine,
            block_size: *bs,
            capacity: *cap,
            objects: *objects,
        };
        match measure(&proxy, &work, &plan, &vol, args.seed).await {
            Ok(m) => rows.push(m),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    let header = report::Header {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: crate::speed::utc_now(),
        machine: crate::machine(),
    };
    let md = report::markdown(&header, &plan, &rows, &tables, &problems);
    std::fs::write(&args.out, &md).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let csv_path = args.out.with_extension("csv");
    std::fs::write(&csv_path, report::csv(&rows, &tables))
        .map_err(|e| format!("{}: {e}", csv_path.display()))?;
    println!("{md}");
    println!(
        "report: {} (and {})",
        args.out.display(),
        csv_path.display()
    );
    Ok(problems.is_empty())
}

/// The proxy's backend counters and engine accesses now (after write-backs
/// drained).
fn counters(p: &ProxyRun) -> Result<(Traffic, u64), String> {
    let m = tokio::task::block_in_place(|| p.settle(Duration::from_secs(600)))?;
    let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
    let req = |v: &str| g(&format!("oram_backend_requests_total{{verb=\"{v}\"}}"));
    let by = |v: &str| g(&format!("oram_backend_bytes_total{{verb=\"{v}\"}}"));
    Ok((
        Traffic {
            get: req("get"),
            get_range: req("get_range"),
            put: req("put"),
            delete: req("delete"),
            list: req("list"),
            // The block store has no HEAD: the proxy never sends one.
            head: 0.0,
            bytes_down: by("get") + by("get_range"),
            bytes_up: by("put"),
        },
        g("oram_engine_accesses_total") as u64,
    ))
}

/// The counts of one phase between two readings of [`counters`].
fn phase_between(
    before: &(Traffic, u64),
    after: &(Traffic, u64),
    client_bytes: u64,
    object_ops: u64,
) -> Phase {
    Phase {
        client_bytes,
        object_ops,
        block_accesses: after.1 - before.1,
        traffic: after.0.plus(&before.0.scaled(-1.0)),
    }
}

/// One configuration of the plan.
struct Volume<'a> {
    engine: &'a str,
    block_size: u64,
    capacity: u64,
    objects: u64,
}

/// One configuration: a formatted volume on the fs back-end, the passes, then
/// its store's bytes once stopped.
async fn measure(
    proxy: &Path,
    work: &Path,
    plan: &Plan,
    vol: &Volume<'_>,
    seed: u64,
) -> Result<Measured, String> {
    let (engine, bs, cap) = (vol.engine, vol.block_size, vol.capacity);
    let run_name = format!(
        "cost-{}-{}",
        engine.replace(':', "-"),
        crate::report::human(bs).to_ascii_lowercase()
    );
    let cached = cached_levels(proxy, plan, engine, bs, cap)?;
    let toml = Plan::engine_toml(engine, bs, cap, cached);
    let mut p = ProxyRun::start_fs(work, proxy, &run_name, &toml, true)?;
    let result = drive(&p, plan, vol.objects, seed).await;
    let stopped = p.stop();
    let (write, read) = result?;
    stopped?;
    let model = crate::describe::of_config(proxy, &p.config)?;
    let store = p.data_dir.join("data").join("store");
    let (at_rest_bytes, at_rest_objects, volume_bytes) = store_size(&store);
    p.remove_data();
    let uncached_levels = model
        .tree()
        .map(|t| t.levels - t.cached_levels.min(t.levels));
    let requests = model_requests(proxy, plan, engine, (bs, cap, cached), model.ops_per_round)?;
    Ok(Measured {
        config: engine.to_string(),
        block_size: bs,
        capacity_bytes: model.capacity * model.block_size,
        live_bytes: vol.objects * plan.object_size,
        uncached_levels,
        at_rest_bytes,
        at_rest_objects,
        volume_bytes,
        write,
        read,
        model: Some(requests),
    })
}

/// The engine's model of its requests per block access: at the measured
/// configuration (`measured`: block size, capacity in bytes and the cached
/// levels it ran with), at 1 GiB and at 1 TiB at its defaults, for rounds of
/// one object's blocks (at most `ops_per_round`, the measured volume's).
fn model_requests(
    proxy: &Path,
    plan: &Plan,
    engine: &str,
    measured: (u64, u64, Option<u32>),
    ops_per_round: u64,
) -> Result<ModelRequests, String> {
    let (bs, cap, cached) = measured;
    let ops = (plan.object_size / bs).clamp(1, ops_per_round.max(1));
    let at = |cap: u64, cached: Option<u32>| -> Result<(u64, f64), String> {
        let toml = format!(
            "{}max_batch = {ops}\n",
            Plan::engine_toml(engine, bs, cap, cached)
        );
        let m = crate::describe::of_engine(proxy, &toml)?;
        Ok((m.ops_per_round, m.round_requests_per_op))
    };
    let (ops_per_round, here) = at(cap, cached)?;
    Ok(ModelRequests {
        ops_per_round,
        here,
        gib: at(1 << 30, None)?.1,
        tib: at(1 << 40, None)?.1,
    })
}

/// The cached levels of a Path or Ring volume of `cap` bytes: the plan's, or
/// as many as leave on the backend the levels a volume of `plan.levels_of`
/// has at the default tree-top cache (both from the engine's own model,
/// `oram-proxy describe`). `None` for the other engines.
fn cached_levels(
    proxy: &Path,
    plan: &Plan,
    engine: &str,
    bs: u64,
    cap: u64,
) -> Result<Option<u32>, String> {
    if engine != "path" && engine != "ring" {
        return Ok(None);
    }
    if let Some(c) = plan.cached_levels {
        return Ok(Some(c));
    }
    let tree = |toml: String| -> Result<(u32, u32), String> {
        let m = crate::describe::of_engine(proxy, &toml)?;
        let t = m
            .tree()
            .ok_or_else(|| format!("{engine}: no tree in its model"))?;
        Ok((t.levels, t.cached_levels))
    };
    let (big_levels, big_cached) = tree(Plan::engine_toml(engine, bs, plan.levels_of, None))?;
    let (levels, _) = tree(Plan::engine_toml(engine, bs, cap, Some(0)))?;
    Ok(Some(
        levels.saturating_sub(big_levels.saturating_sub(big_cached)),
    ))
}

/// The workload: create the bucket, then per pass overwrite every object and
/// read every one back; the write and the read halves summed apart.
async fn drive(p: &ProxyRun, plan: &Plan, n: u64, seed: u64) -> Result<(Phase, Phase), String> {
    let client = crate::api::s3_client(&p.endpoint);
    let bucket = "cost";
    client
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .map_err(|e| s3_err("create bucket", e))?;
    let (mut write, mut read) = (Phase::default(), Phase::default());
    let size = plan.object_size;
    for pass in 0..plan.passes {
        let c0 = counters(p)?;
        for i in 0..n {
            let body = crate::dist::content(seed, "cost", u64::from(pass) * n + i, size);
            client
                .put_object()
                .bucket(bucket)
                .key(format!("o{i}"))
                .body(ByteStream::from(body))
                .send()
                .await
                .map_err(|e| s3_err(&format!("PUT o{i}"), e))?;
        }
        let c1 = counters(p)?;
        for i in 0..n {
            let want = crate::dist::content(seed, "cost", u64::from(pass) * n + i, size);
            let got = client
                .get_object()
                .bucket(bucket)
                .key(format!("o{i}"))
                .send()
                .await
                .map_err(|e| s3_err(&format!("GET o{i}"), e))?
                .body
                .collect()
                .await
                .map_err(|e| format!("GET o{i}: {e}"))?
                .into_bytes();
            if got != want {
                return Err(format!("pass {pass}: object o{i} read back other bytes"));
            }
        }
        let c2 = counters(p)?;
        write.add(&phase_between(&c0, &c1, n * size, n));
        read.add(&phase_between(&c1, &c2, n * size, n));
    }
    Ok((write, read))
}

/// (engine bytes, engine objects, volume bytes) of an fs store: the engine's
/// objects, and the volume's own under `<prefix>/meta/` (header, lease,
/// checkpoint); temporary files left out.
pub fn store_size(store: &Path) -> (u64, u64, u64) {
    fn walk(dir: &Path, meta: bool, out: &mut (u64, u64, u64)) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            if name == ".tmp" {
                continue;
            }
            match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path(), meta, out),
                Ok(m) if meta => out.2 += m.len(),
                Ok(m) => {
                    out.0 += m.len();
                    out.1 += 1;
                }
                Err(_) => {}
            }
        }
    }
    let mut out = (0, 0, 0);
    // <store>/<prefix>/<meta or an engine directory>/...
    for prefix in std::fs::read_dir(store).into_iter().flatten().flatten() {
        for d in std::fs::read_dir(prefix.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let meta = d.file_name() == "meta";
            match d.metadata() {
                Ok(m) if m.is_dir() => walk(&d.path(), meta, &mut out),
                Ok(m) if meta => out.2 += m.len(),
                Ok(m) => {
                    out.0 += m.len();
                    out.1 += 1;
                }
                Err(_) => {}
            }
        }
    }
    out
}
