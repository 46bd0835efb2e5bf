//! The cost report: Markdown tables (bytes at rest, requests and bytes per
//! client GiB, the throughput S3's per-prefix request rates allow, dollars per
//! price table and cloud model, fixed costs per volume) and a CSV of every
//! figure, one row per price table × configuration.

use std::fmt::Write as _;

use super::prices::{CloudModel, PriceTable};
use super::{Measured, Plan};
use crate::report::fmt::bytes_h;
use crate::report::human;

const GIB: f64 = (1u64 << 30) as f64;
/// The proxy's defaults the fixed monthly costs are modeled from: the lease
/// (`[backend] lease_secs`, renewed every quarter of it) and the checkpoint
/// (`[state] checkpoint_interval_secs`).
const LEASE_SECS: f64 = 30.0;
const CHECKPOINT_SECS: f64 = 300.0;
const MONTH_SECS: f64 = 30.0 * 86400.0;

/// What the report's header says of the run.
pub struct Header {
    /// The command line.
    pub command: String,
    /// When it ran.
    pub date: String,
    /// The machine.
    pub machine: String,
}

/// `v` with three significant digits (`—` if not finite).
fn sig(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

/// Dollars with three significant digits.
fn usd(v: f64) -> String {
    format!("${}", sig(v))
}

/// `a ÷ b` as `(12.0×)`, empty if `b` is zero.
fn times(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!(" ({}×)", sig(a / b))
    } else {
        String::new()
    }
}

/// The rows in report order, each block size's plain copy first (computed
/// from `direct`'s counts if it ran, else from the first engine's).
fn ordered(rows: &[Measured]) -> Vec<Measured> {
    let mut sizes: Vec<u64> = rows.iter().map(|r| r.block_size).collect();
    sizes.dedup();
    let mut out = Vec::new();
    for bs in sizes {
        let of: Vec<&Measured> = rows.iter().filter(|r| r.block_size == bs).collect();
        let like = of.iter().find(|r| r.config == "direct").unwrap_or(&of[0]);
        out.push(Measured::plain_copy(like));
        out.extend(of.into_iter().cloned());
    }
    out
}

/// The dollar figures of one row at one table: $ per GiB-month stored (at
/// capacity, at the fill), $ per GiB written and read (public, private).
pub struct Dollars {
    /// $ per GiB of capacity per month.
    pub month_capacity: f64,
    /// $ per GiB stored per month.
    pub month_stored: f64,
    /// $ per client GiB written, public cloud.
    pub write_public: f64,
    /// $ per client GiB written, private cloud.
    pub write_private: f64,
    /// $ per client GiB read, public cloud.
    pub read_public: f64,
    /// $ per client GiB read, private cloud.
    pub read_private: f64,
}

impl Dollars {
    /// Prices `m` at `t`.
    pub fn of(m: &Measured, t: &PriceTable) -> Self {
        let (w, r) = (m.write.per_client_gib(), m.read.per_client_gib());
        Self {
            month_capacity: t.storage_usd_month(m.per_capacity() * GIB),
            month_stored: t.storage_usd_month(m.per_stored() * GIB),
            write_public: t.traffic_usd(&w, CloudModel::Public, 0.0),
            write_private: t.traffic_usd(&w, CloudModel::Private, 0.0),
            read_public: t.traffic_usd(&r, CloudModel::Public, GIB),
            read_private: t.traffic_usd(&r, CloudModel::Private, GIB),
        }
    }
}

/// The Markdown report.
pub fn markdown(
    h: &Header,
    plan: &Plan,
    rows: &[Measured],
    tables: &[PriceTable],
    problems: &[String],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# The cloud bill: backend storage, requests and transfer per engine\n"
    );
    let _ = writeln!(
        s,
        "Command: `{}`. Date: {}. Machine: {}.\n",
        h.command, h.date, h.machine
    );
    let caps: Vec<String> = {
        let mut c: Vec<(u64, u64, u64)> = plan
            .configs
            .iter()
            .map(|(_, b, c, n)| (*b, *c, *n))
            .collect();
        c.dedup();
        c.iter()
            .map(|(b, c, n)| {
                format!(
                    "{} at {} blocks holding {n} objects",
                    bytes_h(*c),
                    human(*b)
                )
            })
            .collect()
    };
    let _ = writeln!(
        s,
        "Workload, the same for every configuration: a volume on the fs back-end ({caps}), \
         formatted (every bucket written once, as on a volume in use), filled to {fill:.0} % of its \
         capacity with objects of {obj}, then {p} pass(es) of overwriting every object and reading it back \
         (checked), one object at a time. {cl}; the other engines run at their defaults \
         (CURIOUS's sub-ORAMs cache their own top levels). The write halves and the \
         read halves of the passes are counted apart. **Every figure per GiB is a ratio measured \
         on this small volume and extrapolated**: the engines' objects at rest grow in proportion \
         to the capacity; their requests and bytes per access grow with the levels on the \
         backend (one more per doubling of a tree, less what the tree-top cache keeps) and \
         shrink where a round's accesses share buckets, which they do more on a small tree \
         than on a large one. The engines' own models give the requests per access at 1 GiB \
         and 1 TiB beside the measured ones (\"Requests per block access: measured and \
         modelled\").\n",
        caps = caps.join(", "),
        fill = plan.fill * 100.0,
        obj = bytes_h(plan.object_size),
        p = plan.passes,
        cl = match plan.cached_levels {
            Some(c) => format!("Path and Ring ORAM keep {c} tree levels locally (`cached_levels`)"),
            None => format!(
                "Path and Ring ORAM keep locally the tree levels that leave on the backend as many \
                 as a {} volume has at the default 16 MiB tree-top cache (`levels on backend` \
                 below), so that their requests per access are that capacity's",
                bytes_h(plan.levels_of)
            ),
        },
    );
    terms(&mut s);
    let all = ordered(rows);
    at_rest(&mut s, &all);
    models(&mut s, &all);
    traffic(&mut s, &all);
    ceilings(&mut s, &all);
    if let Some(t) = tables.first() {
        projected(&mut s, &all, t);
    }
    for t in tables {
        dollars(&mut s, &all, t);
    }
    fixed(&mut s, &all, tables);
    if problems.is_empty() {
        let _ = writeln!(s, "Every configuration ran to the end.");
    } else {
        let _ = writeln!(s, "## Problems\n");
        for p in problems {
            let _ = writeln!(s, "- {p}");
        }
    }
    s
}

fn terms(s: &mut String) {
    s.push_str(
        "## Terms\n\n\
- **GiB** is 2³⁰ bytes; a provider's billing GB is what its price table's `gb_bytes` says.\n\
- **At rest**: the bytes of the engine's objects the stopped volume left on the backend, per \
GiB of the volume's **capacity** (what a customer provisions) and per GiB **stored** (the \
client's live bytes at the end). The volume's own objects (header, lease, checkpoint: padded \
to a size set by the block size and the engine, not by the capacity) are a fixed amount per \
volume, given apart and priced with the fixed costs.\n\
- **Per client GiB written / read**: the backend requests and bytes of the write (or read) \
halves of the passes, divided by the client bytes written (or read) in them, in GiB. A read \
also writes (an ORAM rewrites what it read), and that is counted with the read.\n\
- **Requests per block access**: backend requests of both halves ÷ the logical block accesses \
the engine served (`oram_engine_accesses_total`). **Levels on backend**: the tree levels an \
access reads from the backend (CURIOUS: each sub-ORAM's).\n\
- **Counts**: the proxy's own counters (`/metrics`: `oram_backend_requests_total`, \
`oram_backend_bytes_total`), kept by the volume's accounting wrapper of the block store \
between the engine and the back-end: every request the engine and the checkpoint send, failed \
ones included, exact, and the same whatever the back-end (the fs back-end here). Bytes are \
object bodies, without HTTP headers. Not in them: the lease's renewals (below the counters; \
see the fixed costs); the S3 back-end's paging (a LIST is one request per 1,000 keys there). \
DELETEs are counted as the S3 back-end sends them, one DeleteObjects request per call and per \
1,000 keys (the superseded objects a tree engine deletes after each checkpoint go a batch per \
round; both providers price deletes at 0). HEAD is 0 by construction: the block store has no HEAD, the proxy sends none.\n\
- **Plain copy**: not run but computed from the same workload's object sizes: each object \
stored once, sealed (1× the bytes; sealing adds a few dozen bytes an object, left out), one \
PUT per object written, one GET per object read. `direct` (the proxy without ORAM) is measured.\n\
- **Public cloud**: the proxy beside the client, outside the provider: every byte the proxy \
reads from the bucket is internet egress (`egress_internet_gb`), uploads are ingress.\n\
- **Private cloud**: the proxy on a VM in the bucket's region: its traffic with the bucket is \
in-region (`transfer_in_region_gb`), and the bytes the client reads leave the region as \
internet egress (so a GiB read costs at least one GiB of egress in every configuration). The \
VM itself is not priced.\n\n",
    );
}

fn at_rest(s: &mut String, rows: &[Measured]) {
    let _ = writeln!(s, "## Bytes at rest and requests per access\n");
    let _ = writeln!(
        s,
        "| config | block | levels on backend | engine objects | GiB per GiB of capacity | GiB per GiB stored | volume's own objects | requests per block access (write / read / both) | backend bytes per client byte (write / read) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for m in rows {
        let bpc = |p: &super::Phase| {
            (p.traffic.bytes_down + p.traffic.bytes_up) / p.client_bytes.max(1) as f64
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} / {} |",
            m.config,
            human(m.block_size),
            m.uncached_levels.map_or("—".into(), |l| l.to_string()),
            if m.config == "plain copy" {
                "—".into()
            } else {
                m.at_rest_objects.to_string()
            },
            sig(m.per_capacity()),
            sig(m.per_stored()),
            bytes_h(m.volume_bytes),
            sig(m.write.requests_per_access()),
            sig(m.read.requests_per_access()),
            sig(m.requests_per_access()),
            sig(bpc(&m.write)),
            sig(bpc(&m.read)),
        );
    }
    s.push('\n');
}

fn models(s: &mut String, rows: &[Measured]) {
    let _ = writeln!(
        s,
        "## Requests per block access: measured and modelled\n\n\
         The engine's own model (`oram-proxy describe`: `round_requests_per_op`) at the measured \
         volume's configuration, which the measurement checks, and at 1 GiB and 1 TiB at the \
         engine's defaults (16 MiB tree-top cache), for rounds of one object's blocks. Path ORAM's \
         round reads the union of its paths once, so its figure falls with the ops a round shares \
         a level among; the other models assume no sharing (an upper bound for CURIOUS, whose \
         sub-ORAM rounds share too). Deletes (at most one request a round) are in the measured \
         figure only.\n"
    );
    let _ = writeln!(
        s,
        "| config | block | ops per round | measured | model, this volume | model, 1 GiB | model, 1 TiB |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for m in rows {
        let Some(r) = m.model else { continue };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            m.config,
            human(m.block_size),
            r.ops_per_round,
            sig(m.requests_per_access()),
            sig(r.here),
            sig(r.gib),
            sig(r.tib),
        );
    }
    s.push('\n');
}

/// The measured traffic projected to 1 GiB and 1 TiB volumes
/// ([`Measured::projected`]) and priced at `t`.
fn projected(s: &mut String, rows: &[Measured], t: &PriceTable) {
    let _ = writeln!(
        s,
        "## At 1 GiB and 1 TiB: projected\n\n\
         The measured requests and bytes of each configuration scaled by its model's requests \
         per access at 1 GiB (or 1 TiB) over the model's at the measured volume (table above), \
         and priced at {} (the bytes taken to scale as the requests do: exact for Path ORAM). \
         What a customer's volume of that size would send, within the models' terms; only where \
         the model at the measured volume is within {:.0} % of the measurement (the models of \
         Ring ORAM and ObliviStore leave out what a round's ops share, and a young \
         ObliviStore partition moves less than their steady state: not projected).\n",
        t.name,
        super::MODEL_CHECK * 100.0
    );
    let _ = writeln!(
        s,
        "| config | block | requests per block access, 1 GiB / 1 TiB | backend bytes per client byte, 1 GiB | $/GiB written, public / private, 1 GiB | $/GiB read, public / private, 1 GiB | $/GiB read, public / private, 1 TiB |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for m in rows {
        let (Some(g), Some(tb)) = (m.projected(|r| r.gib), m.projected(|r| r.tib)) else {
            if m.model.is_some() {
                let _ = writeln!(
                    s,
                    "| {} | {} | — | — | — | — | — |",
                    m.config,
                    human(m.block_size)
                );
            }
            continue;
        };
        let (dg, dt) = (Dollars::of(&g, t), Dollars::of(&tb, t));
        let bytes = (g.write.traffic.bytes_down
            + g.write.traffic.bytes_up
            + g.read.traffic.bytes_down
            + g.read.traffic.bytes_up)
            / (g.write.client_bytes + g.read.client_bytes).max(1) as f64;
        let _ = writeln!(
            s,
            "| {} | {} | {} / {} | {} | {} / {} | {} / {} | {} / {} |",
            m.config,
            human(m.block_size),
            sig(g.requests_per_access()),
            sig(tb.requests_per_access()),
            sig(bytes),
            usd(dg.write_public),
            usd(dg.write_private),
            usd(dg.read_public),
            usd(dg.read_private),
            usd(dt.read_public),
            usd(dt.read_private),
        );
    }
    s.push('\n');
}

/// S3's documented request rates per key prefix and second: PUT, COPY, POST
/// and DELETE; GET and HEAD.
const S3_PUTS_PER_PREFIX: f64 = 3500.0;
const S3_GETS_PER_PREFIX: f64 = 5500.0;

/// The client bytes per second `p` allows within S3's request rates of one key
/// prefix (the engines keep a volume's objects under one).
pub fn prefix_ceiling(p: &super::Phase) -> f64 {
    let per_byte = |n: f64| n / p.client_bytes.max(1) as f64;
    let puts = per_byte(p.traffic.put + p.traffic.delete);
    let gets = per_byte(p.traffic.get + p.traffic.get_range + p.traffic.head);
    let limit = |rate: f64, per: f64| if per > 0.0 { rate / per } else { f64::INFINITY };
    limit(S3_PUTS_PER_PREFIX, puts).min(limit(S3_GETS_PER_PREFIX, gets))
}

fn ceilings(s: &mut String, rows: &[Measured]) {
    let _ = writeln!(
        s,
        "## Throughput ceiling on one S3 key prefix\n\n\
         S3 serves about {S3_PUTS_PER_PREFIX:.0} PUT/COPY/POST/DELETE and \
         {S3_GETS_PER_PREFIX:.0} GET/HEAD requests per second per key prefix (AWS's \
         documented rates, per prefix once S3 has split a busy key range): the client MiB/s \
         those rates allow at the requests measured above, whatever the link, if every \
         request went to one prefix. A Path or Ring volume created now spreads its tree over \
         16 prefixes (`<prefix>/n/<shard>/`, `key_shards` in its record), up to 16× these \
         figures; CURIOUS and ObliviStore spread theirs over their partitions' prefixes.\n"
    );
    let _ = writeln!(s, "| config | block | MiB/s written | MiB/s read |");
    let _ = writeln!(s, "|---|---|---|---|");
    for m in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            m.config,
            human(m.block_size),
            sig(prefix_ceiling(&m.write) / (1u64 << 20) as f64),
            sig(prefix_ceiling(&m.read) / (1u64 << 20) as f64),
        );
    }
    s.push('\n');
}

fn traffic(s: &mut String, rows: &[Measured]) {
    for (title, write) in [("written", true), ("read", false)] {
        let _ = writeln!(s, "## Backend requests and bytes per client GiB {title}\n");
        let _ = writeln!(
            s,
            "| config | block | GET | ranged GET | PUT | DELETE | LIST | HEAD | all requests | GiB down | GiB up |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        for m in rows {
            let t = if write { &m.write } else { &m.read }.per_client_gib();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.config,
                human(m.block_size),
                sig(t.get),
                sig(t.get_range),
                sig(t.put),
                sig(t.delete),
                sig(t.list),
                sig(t.head),
                sig(t.requests()),
                sig(t.bytes_down / GIB),
                sig(t.bytes_up / GIB),
            );
        }
        s.push('\n');
    }
}

fn dollars(s: &mut String, rows: &[Measured], t: &PriceTable) {
    let _ = writeln!(s, "## Dollars at {}\n", t.name);
    let _ = writeln!(
        s,
        "Prices from {} (taken {}): storage ${}/GB-month, PUT/COPY/POST ${}, LIST ${}, GET ${}, \
         HEAD ${}, DELETE ${} per 1,000; internet egress ${}/GB, in-region ${}/GB, ingress \
         ${}/GB; a GB is {} bytes. {}\n",
        t.source,
        t.date,
        t.storage_gb_month,
        t.put_per_1000,
        t.list_per_1000,
        t.get_per_1000,
        t.head_per_1000,
        t.delete_per_1000,
        t.egress_internet_gb,
        t.transfer_in_region_gb,
        t.ingress_gb,
        t.gb_bytes,
        t.notes.trim()
    );
    let _ = writeln!(
        s,
        "In brackets: × the plain copy of the same block size.\n\n\
         | config | block | $/GiB-month at capacity | $/GiB-month stored | $/GiB written, public | $/GiB written, private | $/GiB read, public | $/GiB read, private |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    let mut plain: Option<Dollars> = None;
    for m in rows {
        let d = Dollars::of(m, t);
        if m.config == "plain copy" {
            plain = Some(Dollars::of(m, t));
        }
        let p = plain.as_ref().expect("a plain copy leads each block size");
        let _ = writeln!(
            s,
            "| {} | {} | {}{} | {}{} | {}{} | {}{} | {}{} | {}{} |",
            m.config,
            human(m.block_size),
            usd(d.month_capacity),
            times(d.month_capacity, p.month_capacity),
            usd(d.month_stored),
            times(d.month_stored, p.month_stored),
            usd(d.write_public),
            times(d.write_public, p.write_public),
            usd(d.write_private),
            times(d.write_private, p.write_private),
            usd(d.read_public),
            times(d.read_public, p.read_public),
            usd(d.read_private),
            times(d.read_private, p.read_private),
        );
    }
    s.push('\n');
}

/// The lease's renewals (conditional PUTs) a month at the defaults, and the
/// checkpoints' PUTs at the default interval.
fn fixed_requests() -> (f64, f64) {
    (
        MONTH_SECS / (LEASE_SECS / 4.0),
        MONTH_SECS / CHECKPOINT_SECS,
    )
}

fn fixed(s: &mut String, rows: &[Measured], tables: &[PriceTable]) {
    let (lease, ckpt) = fixed_requests();
    let own = |f: fn(u64, u64) -> u64| {
        rows.iter()
            .filter(|m| m.config != "plain copy")
            .map(|m| m.volume_bytes)
            .reduce(f)
            .unwrap_or(0)
    };
    let (least, most) = (own(u64::min), own(u64::max));
    let _ = writeln!(
        s,
        "## Fixed costs per volume and month (modeled, not measured)\n"
    );
    let _ = writeln!(
        s,
        "Whatever the capacity and the traffic, a serving volume renews its backend lease every \
         quarter of `[backend] lease_secs` (default {LEASE_SECS:.0} s): {lease:.0} conditional \
         PUTs in a 30-day month, uncounted by the counters above; and it writes a checkpoint \
         every `[state] checkpoint_interval_secs` (default {CHECKPOINT_SECS:.0} s): {ckpt:.0} \
         PUTs a month (this run's counters saw none: its proxies checkpoint at shutdown only), \
         each of the checkpoint's fixed size (in the volume's own objects above; an upload, \
         free of transfer charges in both models)."
    );
    let _ = writeln!(
        s,
        "The volume's own objects at rest, from {} to {} in this run, are stored besides.\n",
        bytes_h(least),
        bytes_h(most)
    );
    for t in tables {
        let _ = writeln!(
            s,
            "- {}: {} a month for the lease, {} for the checkpoints' requests, {} to {} for \
             storing the volume's own objects.",
            t.name,
            usd(lease * t.put_per_1000 / 1000.0),
            usd(ckpt * t.put_per_1000 / 1000.0),
            usd(t.storage_usd_month(least as f64)),
            usd(t.storage_usd_month(most as f64)),
        );
    }
    s.push('\n');
}

/// The CSV: one row per price table × configuration (plain copies included).
pub fn csv(rows: &[Measured], tables: &[PriceTable]) -> String {
    let mut s = String::from(
        "prices,config,block_size,capacity_bytes,live_bytes,levels_on_backend,at_rest_bytes,\
         at_rest_objects,volume_bytes,gib_per_gib_capacity,gib_per_gib_stored",
    );
    for ph in ["write", "read"] {
        let _ = write!(
            s,
            ",{ph}_client_bytes,{ph}_object_ops,{ph}_block_accesses,{ph}_get,{ph}_get_range,\
             {ph}_put,{ph}_delete,{ph}_list,{ph}_head,{ph}_bytes_down,{ph}_bytes_up"
        );
    }
    s.push_str(
        ",requests_per_block_access,s3_prefix_write_bps,s3_prefix_read_bps,usd_gib_month_capacity,\
         usd_gib_month_stored,usd_gib_written_public,usd_gib_written_private,usd_gib_read_public,\
         usd_gib_read_private,model_ops_per_round,model_requests_per_access,\
         model_requests_per_access_1gib,model_requests_per_access_1tib\n",
    );
    for t in tables {
        for m in ordered(rows) {
            let d = Dollars::of(&m, t);
            let _ = write!(
                s,
                "\"{}\",{},{},{},{},{},{},{},{},{},{}",
                t.name.replace('"', "'"),
                m.config,
                m.block_size,
                m.capacity_bytes,
                m.live_bytes,
                m.uncached_levels.map_or(String::new(), |l| l.to_string()),
                m.at_rest_bytes,
                m.at_rest_objects,
                m.volume_bytes,
                m.per_capacity(),
                m.per_stored(),
            );
            for p in [&m.write, &m.read] {
                let c = &p.traffic;
                let _ = write!(
                    s,
                    ",{},{},{},{},{},{},{},{},{},{},{}",
                    p.client_bytes,
                    p.object_ops,
                    p.block_accesses,
                    c.get,
                    c.get_range,
                    c.put,
                    c.delete,
                    c.list,
                    c.head,
                    c.bytes_down,
                    c.bytes_up
                );
            }
            let r = m.model.unwrap_or_default();
            let _ = writeln!(
                s,
                ",{},{},{},{},{},{},{},{},{},{},{},{},{}",
                m.requests_per_access(),
                prefix_ceiling(&m.write),
                prefix_ceiling(&m.read),
                d.month_capacity,
                d.month_stored,
                d.write_public,
                d.write_private,
                d.read_public,
                d.read_private,
                r.ops_per_round,
                r.here,
                r.gib,
                r.tib
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::prices::Traffic;
    use super::super::Phase;
    use super::*;

    #[test]
    fn the_prefix_ceiling_is_the_scarcer_request_rate() {
        let p = |put: f64, get: f64| Phase {
            client_bytes: 1 << 20,
            traffic: Traffic {
                put,
                get_range: get,
                ..Traffic::default()
            },
            ..Phase::default()
        };
        // 1 PUT per MiB: 3,500 MiB/s; 10 PUTs and 10 GETs: the PUTs bind.
        assert_eq!(prefix_ceiling(&p(1.0, 0.0)), 3500.0 * (1u64 << 20) as f64);
        assert_eq!(prefix_ceiling(&p(10.0, 10.0)), 350.0 * (1u64 << 20) as f64);
        // 1 PUT and 100 GETs per MiB: the GETs bind (55 MiB/s).
        assert_eq!(prefix_ceiling(&p(1.0, 100.0)), 55.0 * (1u64 << 20) as f64);
    }

    #[test]
    fn sig_keeps_three_digits() {
        assert_eq!(sig(12.345), "12.3");
        assert_eq!(sig(0.0012345), "0.00123");
        assert_eq!(sig(1234.5), "1234");
        assert_eq!(sig(0.0), "0");
    }

    #[test]
    fn dollars_follow_from_the_counts() {
        let t = PriceTable::shipped().remove(0);
        let phase = |put: f64, get: f64, down: f64, up: f64| Phase {
            client_bytes: 1 << 30,
            object_ops: 1024,
            block_accesses: 65536,
            traffic: Traffic {
                put,
                get,
                bytes_down: down,
                bytes_up: up,
                ..Traffic::default()
            },
        };
        let m = Measured {
            config: "x".into(),
            block_size: 16384,
            capacity_bytes: 2 << 30,
            live_bytes: 1 << 30,
            at_rest_bytes: 6 << 30,
            write: phase(2000.0, 1000.0, GIB, 2.0 * GIB),
            read: phase(1000.0, 3000.0, 3.0 * GIB, GIB),
            ..Measured::default()
        };
        let d = Dollars::of(&m, &t);
        let st = t.storage_gb_month;
        assert!((d.month_capacity - 3.0 * st).abs() < 1e-12);
        assert!((d.month_stored - 6.0 * st).abs() < 1e-12);
        let req_w = (2.0 * t.put_per_1000) + t.get_per_1000;
        assert!((d.write_public - (req_w + t.egress_internet_gb)).abs() < 1e-12);
        assert!((d.write_private - (req_w + 3.0 * t.transfer_in_region_gb)).abs() < 1e-12);
        let req_r = t.put_per_1000 + 3.0 * t.get_per_1000;
        assert!((d.read_public - (req_r + 3.0 * t.egress_internet_gb)).abs() < 1e-12);
        let private = req_r + 4.0 * t.transfer_in_region_gb + t.egress_internet_gb;
        assert!((d.read_private - private).abs() < 1e-12);
        // The plain copy: one PUT per object written, one GET per object read, 1×.
        let p = Measured::plain_copy(&m);
        assert_eq!((p.per_capacity(), p.per_stored()), (1.0, 1.0));
        assert_eq!(p.write.traffic.put, 1024.0);
        assert_eq!(p.read.traffic.get, 1024.0);
        assert_eq!(p.read.traffic.bytes_down, GIB);
        assert!((p.requests_per_access() - 2048.0 / 131072.0).abs() < 1e-12);
        assert!(
            p.projected(|r| r.gib).is_none(),
            "the plain copy has no model"
        );
        // Projected: every count and byte times the model's ratio, the block
        // accesses and client bytes as measured.
        let here = m.requests_per_access();
        let m = Measured {
            model: Some(super::super::ModelRequests {
                ops_per_round: 64,
                here,
                gib: 2.5 * here,
                tib: 5.0 * here,
            }),
            ..m
        };
        let g = m.projected(|r| r.gib).unwrap();
        assert_eq!(g.write.traffic, m.write.traffic.scaled(2.5));
        assert_eq!(g.read.client_bytes, m.read.client_bytes);
        assert!((g.requests_per_access() - 2.5 * m.requests_per_access()).abs() < 1e-9);
        let t = m.projected(|r| r.tib).unwrap();
        assert_eq!(t.read.traffic, m.read.traffic.scaled(5.0));
        // A model more than 10 % off the measurement here projects nothing.
        let off = Measured {
            model: Some(super::super::ModelRequests {
                here: 1.2 * m.requests_per_access(),
                ..m.model.unwrap()
            }),
            ..m.clone()
        };
        assert!(off.projected(|r| r.gib).is_none());
    }
}
