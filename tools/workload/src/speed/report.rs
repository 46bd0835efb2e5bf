//! The speed benchmark's results: the measurements of each configuration, the
//! limit the engine's model implies, and the Markdown and CSV reports.

use oram_engine::TreeLayout;

use super::args::Plan;
use super::raw::Raw;
use crate::describe::EngineModel;
use crate::report::fmt::{bytes_h, mbs, ms, pct, ratio};
use crate::report::human;

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

/// What a configuration's limit is computed from: the engine's model
/// (`oram-proxy describe`) per client byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Bytes of one backend object (a bucket; a slot for ObliviStore's ranged
    /// reads; a block for `direct`): the raw throughput's object size.
    pub object_len: u64,
    /// What a client GET moves.
    pub get: Traffic,
    /// What a client PUT moves.
    pub put: Traffic,
    /// Overhead in blocks per block accessed (the papers' unit, without ids and
    /// sealing).
    pub blocks: f64,
}

impl Model {
    /// The engine's figures per client byte: a GET reads blocks, a PUT writes
    /// whole blocks.
    pub fn of(m: &EngineModel) -> Self {
        let per_byte = |t: &oram_engine::Traffic| Traffic {
            read: t.read_bytes / m.block_size.max(1) as f64,
            write: t.written_bytes / m.block_size.max(1) as f64,
        };
        Self {
            object_len: m.object_bytes,
            get: per_byte(&m.read_op),
            put: per_byte(&m.write_op),
            blocks: m.overhead_blocks(),
        }
    }
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
    /// The engine's model of the volume (`oram-proxy describe`).
    pub engine: EngineModel,
    /// What the limit is computed from.
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
        let t = &p.engine;
        let tree = t.tree().map_or("—".to_string(), |tr| {
            format!(
                "{} / {} / {} / {}",
                tr.leaves,
                tr.levels,
                tr.cached_levels,
                tr.uncached_levels()
            )
        });
        let zsa = match t.tree() {
            Some(tr) if tr.s > 0 => format!("{}, {}, {}", tr.z, tr.s, tr.a),
            Some(tr) => format!("{}, —, —", tr.z),
            None => "—".into(),
        };
        let zsa = match (t.partitions(), t.tree(), t.hierarchy()) {
            (Some(p), Some(tr), _) => format!(
                "P = {}, ν = {}, each {}: {}-ary, {zsa}",
                p.partitions, p.eviction_rate, p.sub_kind, tr.arity
            ),
            (Some(p), None, Some(h)) => format!(
                "P = {}, ν = {}, each levels 0..={}",
                p.partitions, p.eviction_rate, h.top_level
            ),
            _ => zsa,
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
                let t = &p.engine;
                let tr = t.tree();
                let tree = |f: fn(&TreeLayout) -> u64| tr.map_or(0, f).to_string();
                cells.extend([
                    t.kind.clone(),
                    t.block_size.to_string(),
                    t.capacity.to_string(),
                    tree(|t| t.leaves),
                    tree(|t| u64::from(t.levels)),
                    tree(|t| u64::from(t.cached_levels)),
                    tree(|t| u64::from(t.uncached_levels())),
                    tree(|t| t.z),
                    tree(|t| t.s),
                    tree(|t| t.a),
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

#[cfg(test)]
mod tests {
    use super::*;

    use oram_engine::{EngineModel, Layout, Traffic, TreeLayout};

    /// A fixture: Path ORAM's model of 262 144 blocks of 4 KiB, 10 cached
    /// levels (2^17 leaves, 18 levels, 8 on the back-end, 16 461-byte buckets).
    fn path_model() -> EngineModel {
        let bucket = 16_461.0;
        let op = Traffic {
            read_bytes: 8.0 * bucket,
            written_bytes: 8.0 * bucket,
            blocks: 64.0,
            requests: 16.0,
        };
        EngineModel {
            kind: "path".into(),
            oblivious: true,
            capacity: 262_144,
            block_size: 4096,
            layout: Layout::Tree(TreeLayout {
                arity: 2,
                levels: 18,
                cached_levels: 10,
                leaves: 131_072,
                z: 4,
                s: 0,
                a: 0,
                bucket_bytes: 16_461,
            }),
            object_bytes: 16_461,
            read_op: op,
            write_op: op,
            overhead: EngineModel::overhead_of(&op, &op, 4096),
            assumes: String::new(),
            state_bound: 0,
            state_base_bytes: 0,
            cache_bytes: 0,
            stash_bound: 89,
            round_bytes_per_op: 8 * 4 * 4096,
            ops_per_round: 64,
            round_requests_per_op: 16.0,
        }
    }

    /// A fixture: `direct`'s model, 4 KiB blocks (4141-byte objects).
    fn direct_model() -> EngineModel {
        EngineModel {
            kind: "direct".into(),
            oblivious: false,
            layout: Layout::Blocks,
            object_bytes: 4141,
            read_op: Traffic {
                read_bytes: 4141.0,
                written_bytes: 0.0,
                blocks: 1.0,
                requests: 1.0,
            },
            write_op: Traffic {
                read_bytes: 0.0,
                written_bytes: 4141.0,
                blocks: 1.0,
                requests: 1.0,
            },
            ..path_model()
        }
    }

    #[test]
    fn the_model_is_the_engines_per_client_byte() {
        let m = Model::of(&path_model());
        assert_eq!((m.blocks, m.object_len), (64.0, 16_461));
        let want = 2.0 * 8.0 * 16_461.0 / 4096.0;
        assert!((m.get.overhead() - want).abs() < 1e-9);
        assert_eq!(m.get, m.put, "an oblivious engine moves the same for both");
        let d = Model::of(&direct_model());
        assert_eq!((d.blocks, d.object_len), (1.0, 4141));
        assert_eq!((d.get.write, d.put.read), (0.0, 0.0));
    }

    #[test]
    fn the_limit_is_the_mix_raw_throughput_over_the_overhead() {
        let raw = Raw {
            read: 400e6,
            write: 100e6,
            create: 50e6,
        };
        let m = Model::of(&path_model());
        let l = m.put.limit(&raw);
        assert!((l - m.put.mix_raw(&raw) / m.put.overhead()).abs() / l < 1e-12);
        // Equal reads and writes: the harmonic mean of the two rates (160 MB/s).
        assert!((m.put.mix_raw(&raw) - 160e6).abs() < 1.0);
        // Direct GET reads only.
        let d = Model::of(&direct_model());
        assert!((d.get.limit(&raw) - 400e6 * 4096.0 / 4141.0).abs() < 1.0);
        // Nothing on the back-end: no limit.
        let mut none = path_model();
        none.read_op = oram_engine::Traffic::default();
        none.write_op = none.read_op;
        let all = Model::of(&none);
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

    fn flow(mb: u64, secs: f64) -> Flow {
        Flow {
            bytes: mb * 1_000_000,
            secs,
            cut: false,
        }
    }

    #[test]
    fn the_report_has_a_row_per_configuration_and_ratios_to_minio() {
        let plan = Plan::of(&super::super::SpeedArgs {
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
        let t = path_model();
        let m = Model::of(&t);
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
            engine: t,
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
