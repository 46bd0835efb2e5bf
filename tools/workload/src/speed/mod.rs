//! `oram-workload speed`: the speed benchmark. In one run on one machine (every
//! process on 127.0.0.1, no link shaping) it measures
//!
//! 1. the raw throughput of each back-end at the size of the engine's backend
//!    objects, at the proxy's concurrency: the fs back-end's ways of writing
//!    (creating — temporary file, fsync, rename, one directory fsync per batch —
//!    and rewriting in place — write, fdatasync — the rate the limit uses) in a
//!    directory under the lab, and MinIO with concurrent PUTs and GETs
//!    ([`raw`]);
//! 2. MinIO itself as the yardstick (client → MinIO), then oram-proxy with each
//!    engine on the fs back-end (the embedded default) and on MinIO;
//! 3. per configuration: small-object GET and PUT latency (p50, p99), single- and
//!    multi-stream PUT and GET throughput of large objects (every byte read is
//!    checked), the serving process's CPU seconds per GiB and peak RSS
//!    ([`mod@phases`]);
//! 4. per engine, the analytical bandwidth overhead at its parameters (the
//!    engine's own model of the volume, `oram-proxy describe`, as the volume
//!    fixed them), the limit it implies (raw back-end throughput ÷ overhead) and
//!    achieved ÷ limit, beside the overhead the proxy measured
//!    (`oram_bandwidth_overhead_ratio`).
//!
//! It prints and writes a Markdown report (`--out`) and a CSV beside it
//! ([`report`]).

mod args;
mod phases;
mod raw;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use rand::RngCore;

pub use args::SpeedArgs;
use args::{offered_engines, Plan};
pub use phases::s3_err;
use phases::{object_len_in_fs, object_len_in_s3, phases, Target};
use raw::{raw_fs, raw_minio, Raw, RAW_FS_BATCH};
use report::{csv, markdown, Header, Model, ProxyFacts, Row};

use crate::api;
use crate::describe;
use crate::harness::{Lab, ProxyBackend, ProxyRun};
use crate::report::fmt::bytes_h;

/// The time now, UTC (the reports' date).
pub fn utc_now() -> String {
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

/// What every configuration of a run shares.
struct Bench<'a> {
    args: &'a SpeedArgs,
    plan: Plan,
    proxy: PathBuf,
    work: PathBuf,
    lab: Lab,
    /// The throughput phases' object and the latency phases' object.
    data: Bytes,
    small: Bytes,
    /// `[engine]` lines every configuration shares (the command line's).
    engine_toml: String,
    bar: indicatif::ProgressBar,
    /// Raw throughput per (back-end, object size), measured once.
    raws: BTreeMap<(String, u64), Raw>,
}

/// Runs the benchmark; `Ok(false)` if some configuration had a problem (the
/// report says which).
pub async fn run(args: SpeedArgs) -> Result<bool, String> {
    let mut bench = Bench::start(&args)?;
    let configs: Vec<(String, String)> = bench
        .plan
        .backends
        .iter()
        .flat_map(|b| {
            bench
                .plan
                .engines
                .iter()
                .map(move |e| (e.clone(), b.clone()))
        })
        .collect();
    bench.bar.set_length(5 * (configs.len() as u64 + 1));
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    bench.yardstick(&mut rows, &mut problems).await?;
    for (i, (engine, backend)) in configs.iter().enumerate() {
        bench.bar.set_position(5 * (i as u64 + 1));
        bench
            .proxy_config(engine, backend, &mut rows, &mut problems)
            .await;
    }
    bench.bar.finish_and_clear();
    let header = Header {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: utc_now(),
        machine: crate::machine(),
        settings: bench.settings_text(),
    };
    let (plan, out, work) = (bench.plan.clone(), args.out.clone(), bench.work.clone());
    drop(bench);
    let md = markdown(&header, &plan, &rows, &problems);
    std::fs::write(&out, &md).map_err(|e| format!("{}: {e}", out.display()))?;
    let csv_path = out.with_extension("csv");
    std::fs::write(&csv_path, csv(&rows)).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    println!("{md}");
    println!("report: {} (and {})", out.display(), csv_path.display());
    let _ = std::fs::remove_dir_all(&work);
    Ok(problems.is_empty())
}

impl<'a> Bench<'a> {
    /// Resolves the plan, finds the binaries, makes the working directory and
    /// starts MinIO.
    fn start(args: &'a SpeedArgs) -> Result<Self, String> {
        let mut plan = Plan::of(args)?;
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
        let bytes = |len: u64, what: &str| {
            let mut v = vec![0u8; len as usize];
            crate::dist::rng_for(args.seed, what, 0).fill_bytes(&mut v);
            Bytes::from(v)
        };
        let (data, small) = (
            bytes(plan.object_size, "speed-object"),
            bytes(plan.small_size, "speed-small"),
        );
        if args.engines.is_empty() && !args.quick {
            plan.engines = offered_engines(&proxy)?;
        }
        let bar = indicatif::ProgressBar::new(5);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} phases  {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        Ok(Self {
            engine_toml: engine_toml(args)?,
            args,
            plan,
            proxy,
            work,
            lab,
            data,
            small,
            bar,
            raws: BTreeMap::new(),
        })
    }

    /// The yardstick: MinIO itself.
    async fn yardstick(
        &self,
        rows: &mut Vec<Row>,
        problems: &mut Vec<String>,
    ) -> Result<(), String> {
        self.bar.set_message("minio");
        let yard = Target {
            client: api::s3_client(&self.lab.root),
            bucket: "speed-yardstick".into(),
            pid: self.lab.minio_pid(),
        };
        yard.client
            .create_bucket()
            .bucket(&yard.bucket)
            .send()
            .await
            .map_err(|e| s3_err("create bucket speed-yardstick", e))?;
        match phases(
            &yard,
            &self.plan,
            &self.data,
            &self.small,
            &self.bar,
            &|| {},
        )
        .await
        {
            Ok(row) => rows.push(row),
            Err(e) => problems.push(format!("minio: {e}")),
        }
        if let Err(e) = crate::stored_bytes_then_delete(&self.lab.root, &yard.bucket).await {
            problems.push(format!("minio: {e}"));
        }
        Ok(())
    }

    /// The `[engine]` section of `engine` (`curious:<sub>` for CURIOUS with that
    /// sub-ORAM).
    fn config_toml(&self, engine: &str) -> String {
        let (kind, sub) = match engine.split_once(':') {
            Some((k, s)) => (k, Some(s)),
            None => (engine, None),
        };
        let mut toml = format!("kind = {kind:?}\n{}", self.engine_toml);
        if let Some(sub) = sub {
            toml.push_str(&format!("curious_sub = {sub:?}\n"));
        }
        if engine == "direct" {
            toml.push_str("insecure_direct = true\n");
        } else if kind == "oblivistore" {
            // No tree: nothing cached.
        } else if let Some(c) = self.args.cached_levels {
            toml.push_str(&format!("cached_levels = {c}\n"));
        }
        toml
    }

    /// One proxy configuration: start it, take the engine's model of its
    /// volume, measure the raw back-end at the model's object size, run the
    /// phases, stop it and take its footprint.
    async fn proxy_config(
        &mut self,
        engine: &str,
        backend: &str,
        rows: &mut Vec<Row>,
        problems: &mut Vec<String>,
    ) {
        let name = format!("{engine} / {backend}");
        self.bar.set_message(name.clone());
        let pb = if backend == "fs" {
            ProxyBackend::Fs
        } else {
            ProxyBackend::LabS3Defaults
        };
        let run_name = format!("speed-{}-{backend}", engine.replace(':', "-"));
        let toml = self.config_toml(engine);
        let mut p = match ProxyRun::start_with(
            &self.lab,
            &self.proxy,
            &run_name,
            &toml,
            pb,
            false,
            false,
        ) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{name}: proxy did not start: {e}"));
                return;
            }
        };
        let result = self.measure(&p, &name, backend).await;
        let stopped = p.stop();
        match result {
            Ok(mut row) => {
                if let Err(e) = stopped {
                    problems.push(format!("{name}: {e}"));
                }
                let facts = row.proxy.as_mut().expect("set by measure");
                facts.local_bytes = p.local_bytes();
                if backend == "fs" {
                    facts.backend_bytes = p.fs_store_bytes();
                    facts.object_len_seen =
                        object_len_in_fs(&p.data_dir.join("data").join("store"));
                } else {
                    facts.object_len_seen = object_len_in_s3(&self.lab.root, &p.bucket).await;
                    match crate::stored_bytes_then_delete(&self.lab.root, &p.bucket).await {
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
                    let _ = crate::stored_bytes_then_delete(&self.lab.root, &p.bucket).await;
                }
            }
        }
        p.remove_data();
    }

    /// The engine's model and the phases of a running proxy.
    async fn measure(&mut self, p: &ProxyRun, name: &str, backend: &str) -> Result<Row, String> {
        let engine = describe::of_config(&self.proxy, &p.config)?;
        let model = Model::of(&engine);
        let raw = self.raw(name, backend, model.object_len).await?;
        self.bar.set_message(name.to_string());
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
        let mut row = phases(&t, &self.plan, &self.data, &self.small, &self.bar, &settle).await?;
        let m = tokio::task::block_in_place(|| p.settle(Duration::from_secs(600)))?;
        let measured_overhead = m
            .get("oram_bandwidth_overhead_ratio")
            .copied()
            .unwrap_or(f64::NAN);
        row.proxy = Some(ProxyFacts {
            engine,
            model,
            raw,
            measured_overhead,
            local_bytes: 0,
            backend_bytes: 0,
            object_len_seen: None,
        });
        Ok(row)
    }

    /// The raw throughput of `backend` at objects of `len` bytes (measured
    /// once per run).
    async fn raw(&mut self, name: &str, backend: &str, len: u64) -> Result<Raw, String> {
        let key = (backend.to_string(), len);
        if let Some(r) = self.raws.get(&key) {
            return Ok(*r);
        }
        self.bar
            .set_message(format!("{name}: raw {backend} at {len} B objects"));
        let (total, conc, seed) = (
            self.plan.raw_bytes,
            self.plan.raw_concurrency,
            self.args.seed,
        );
        let r = if backend == "fs" {
            let dir = self.work.join(format!("raw-fs-{len}"));
            tokio::task::spawn_blocking(move || raw_fs(&dir, len, total, conc, seed))
                .await
                .map_err(|e| e.to_string())??
        } else {
            raw_minio(&self.lab.root, len, total, conc, seed).await?
        };
        self.raws.insert(key, r);
        Ok(r)
    }

    /// The run's settings, as one sentence of the report's header.
    fn settings_text(&self) -> String {
        let (plan, args) = (&self.plan, self.args);
        format!(
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
                format!(
                    "PUT as multipart uploads of {} parts, one part after another per stream",
                    bytes_h(plan.part_size)
                )
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
            over = if self.engine_toml.is_empty() && args.cached_levels.is_none() {
                String::new()
            } else {
                format!(
                    " except {}",
                    [
                        args.block_size.map(|b| format!("block_size = {b}")),
                        args.capacity_blocks
                            .map(|c| format!("capacity_blocks = {c}")),
                        args.cached_levels.map(|c| format!("cached_levels = {c}")),
                    ]
                    .into_iter()
                    .flatten()
                    .chain(args.engine_set.iter().map(|kv| kv.replacen('=', " = ", 1)))
                    .collect::<Vec<_>>()
                    .join(", ")
                )
            },
        )
    }
}

/// The `[engine]` lines the command line sets for every configuration.
fn engine_toml(args: &SpeedArgs) -> Result<String, String> {
    let mut toml = String::new();
    if let Some(b) = args.block_size {
        toml.push_str(&format!("block_size = {b}\n"));
    }
    if let Some(c) = args.capacity_blocks {
        toml.push_str(&format!("capacity_blocks = {c}\n"));
    }
    for kv in &args.engine_set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--engine-set {kv:?}: expected KEY=VALUE"))?;
        toml.push_str(&format!("{} = {}\n", k.trim(), v.trim()));
    }
    Ok(toml)
}
