//! A subset of COSBench's workload XML: enough to run the thesis's appendix A files
//! as given, and users' own workloads of the same shape.
//!
//! Supported: `<workload>` → `<workflow>` → `<workstage>` → `<work>` (types `init`,
//! `prepare`, `normal`, `cleanup`, `dispose`, `delay`; attributes `workers`,
//! `totalOps`, `runtime`) → `<operation>` (types `read`, `write`, `filewrite`,
//! `delete`; attribute `ratio`). Config keys: `containers`, `objects`, `sizes`,
//! `cprefix`, `oprefix`, `fileselection`, `files`. Selectors: `c(n)`, `u(a,b)`,
//! `r(a,b)`, `s(a,b)`; sizes with a unit (`B`, `KB`, `MB`, `GB`: powers of 1000,
//! as COSBench). `<auth>` and `<storage>` are ignored: the runner's own options
//! say where to send requests. White space inside config values is removed (the
//! appendix wraps values across lines).
//!
//! Departures from COSBench: `dispose` first lists and deletes what `cleanup`
//! left (appendix A writes 60 objects and cleans up 50), so runs leave nothing
//! behind; `division` is ignored (workers share the work).

use std::collections::BTreeMap;

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

/// Errors of reading a workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// Not well-formed XML.
    #[error("workload XML: {0}")]
    Xml(String),
    /// Well-formed but not a workload this runner can run.
    #[error("workload {what}: {why}")]
    Invalid {
        /// The element or value concerned.
        what: String,
        /// What is wrong with it.
        why: String,
    },
}

fn invalid(what: impl Into<String>, why: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid {
        what: what.into(),
        why: why.into(),
    }
}

/// A selector of integers (containers, objects, sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selector {
    /// Always `n`.
    Constant(u64),
    /// Uniformly random in `a..=b`.
    Uniform(u64, u64),
    /// Every value of `a..=b` (init/prepare/cleanup/dispose); random in normal work.
    Range(u64, u64),
    /// `a, a+1, ..., b, a, ...` in turn.
    Sequential(u64, u64),
}

impl Selector {
    /// Parses `c(1)`, `u(1,10)`, `r(1,50)`, `s(1,5)`.
    pub fn parse(s: &str) -> Result<Self, WorkloadError> {
        let bad = || {
            invalid(
                format!("selector {s:?}"),
                "expected c(n), u(a,b), r(a,b) or s(a,b)",
            )
        };
        let (kind, rest) = s.split_once('(').ok_or_else(bad)?;
        let inner = rest.strip_suffix(')').ok_or_else(bad)?;
        let nums: Vec<u64> = inner
            .split(',')
            .map(|n| n.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let sel = match (kind, nums.as_slice()) {
            ("c", [n]) => Selector::Constant(*n),
            ("u", [a, b]) => Selector::Uniform(*a, *b),
            ("r", [a, b]) => Selector::Range(*a, *b),
            ("s", [a, b]) => Selector::Sequential(*a, *b),
            _ => return Err(bad()),
        };
        match sel {
            Selector::Uniform(a, b) | Selector::Range(a, b) | Selector::Sequential(a, b)
                if a > b =>
            {
                Err(invalid(format!("selector {s:?}"), "empty range"))
            }
            _ => Ok(sel),
        }
    }

    /// Every value the selector can produce, in order.
    pub fn all(&self) -> Vec<u64> {
        match *self {
            Selector::Constant(n) => vec![n],
            Selector::Uniform(a, b) | Selector::Range(a, b) | Selector::Sequential(a, b) => {
                (a..=b).collect()
            }
        }
    }

    /// The largest value the selector can produce.
    pub fn max(&self) -> u64 {
        match *self {
            Selector::Constant(n) => n,
            Selector::Uniform(_, b) | Selector::Range(_, b) | Selector::Sequential(_, b) => b,
        }
    }
}

/// Object sizes: a selector and its unit in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeSpec {
    /// The selector of the number of units.
    pub selector: Selector,
    /// Bytes per unit.
    pub unit: u64,
}

impl SizeSpec {
    /// Parses `c(64)KB`, `u(1,10)MB`, `c(512)B`.
    pub fn parse(s: &str) -> Result<Self, WorkloadError> {
        let close = s
            .rfind(')')
            .ok_or_else(|| invalid(format!("sizes {s:?}"), "expected e.g. c(64)KB"))?;
        let unit = match s[close + 1..].to_ascii_uppercase().as_str() {
            "" | "B" => 1,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            u => {
                return Err(invalid(
                    format!("sizes {s:?}"),
                    format!("unknown unit {u:?}"),
                ))
            }
        };
        Ok(SizeSpec {
            selector: Selector::parse(&s[..=close])?,
            unit,
        })
    }
}

/// What one operation does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// GET an object.
    Read,
    /// PUT an object of generated content and size.
    Write,
    /// PUT a file (or a file of a built-in synthetic file set).
    FileWrite,
    /// DELETE an object.
    Delete,
}

/// One `<operation>` of a `normal` work.
#[derive(Clone, Debug)]
pub struct Operation {
    /// Its type.
    pub kind: OpKind,
    /// Its share of the work's operations, in percent.
    pub ratio: u32,
    /// Its config.
    pub config: OpConfig,
}

/// The parsed `config` of a work or operation.
#[derive(Clone, Debug, Default)]
pub struct OpConfig {
    /// `containers=`.
    pub containers: Option<Selector>,
    /// `objects=`.
    pub objects: Option<Selector>,
    /// `sizes=`.
    pub sizes: Option<SizeSpec>,
    /// `cprefix=` (default `mycontainers`).
    pub cprefix: String,
    /// `oprefix=` (default `myobjects`).
    pub oprefix: String,
    /// `files=`: a directory of files, or the name of a built-in file set.
    pub files: Option<String>,
    /// `fileselection=`: `s` sequential (default) or `r` random.
    pub random_files: bool,
}

impl OpConfig {
    /// Parses `key=value;key=value` (white space removed first).
    pub fn parse(s: &str) -> Result<Self, WorkloadError> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let mut c = OpConfig {
            cprefix: "mycontainers".into(),
            oprefix: "myobjects".into(),
            ..OpConfig::default()
        };
        for kv in s.split(';').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| invalid(format!("config {kv:?}"), "expected key=value"))?;
            match k {
                "containers" => c.containers = Some(Selector::parse(v)?),
                "objects" => c.objects = Some(Selector::parse(v)?),
                "sizes" => c.sizes = Some(SizeSpec::parse(v)?),
                "cprefix" => c.cprefix = v.to_string(),
                "oprefix" => c.oprefix = v.to_string(),
                "files" => c.files = Some(v.to_string()),
                "fileselection" => c.random_files = v == "r",
                // COSBench storage/driver knobs that do not change the operations.
                "timeout" | "division" | "createContainer" | "deleteContainer" => {}
                _ => return Err(invalid(format!("config key {k:?}"), "not supported")),
            }
        }
        Ok(c)
    }
}

/// The type of a `<work>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkKind {
    /// Create containers.
    Init,
    /// Write every object of the ranges.
    Prepare,
    /// Mixed operations by ratio.
    Normal,
    /// Delete every object of the ranges.
    Cleanup,
    /// Delete containers.
    Dispose,
    /// Wait `runtime` seconds.
    Delay,
}

/// One `<work>`.
#[derive(Clone, Debug)]
pub struct Work {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: WorkKind,
    /// Concurrent workers.
    pub workers: usize,
    /// Operations in all (normal work); `None` with a `runtime`.
    pub total_ops: Option<u64>,
    /// Seconds to run (normal and delay work) when no `totalOps` is given.
    pub runtime_secs: Option<u64>,
    /// The work's own config.
    pub config: OpConfig,
    /// The operations (normal work).
    pub ops: Vec<Operation>,
}

/// One `<workstage>`.
#[derive(Clone, Debug)]
pub struct Stage {
    /// Its name.
    pub name: String,
    /// Its works, run one after another.
    pub works: Vec<Work>,
}

/// A whole workload.
#[derive(Clone, Debug)]
pub struct Workload {
    /// `name=`.
    pub name: String,
    /// `description=`.
    pub description: String,
    /// The stages in order.
    pub stages: Vec<Stage>,
}

fn attrs(e: &BytesStart<'_>) -> Result<BTreeMap<String, String>, WorkloadError> {
    let mut m = BTreeMap::new();
    for a in e.attributes() {
        let a = a.map_err(|e| WorkloadError::Xml(e.to_string()))?;
        let k = String::from_utf8_lossy(a.key.as_ref()).into_owned();
        let v = a
            .normalized_value(XmlVersion::default())
            .map_err(|e| WorkloadError::Xml(e.to_string()))?;
        m.insert(k, v.into_owned());
    }
    Ok(m)
}

fn num<T: std::str::FromStr>(
    m: &BTreeMap<String, String>,
    key: &str,
    what: &str,
) -> Result<Option<T>, WorkloadError> {
    m.get(key)
        .map(|v| {
            v.trim()
                .parse::<T>()
                .map_err(|_| invalid(format!("{what} {key}={v:?}"), "not a number"))
        })
        .transpose()
}

impl Workload {
    /// Parses a workload XML document.
    pub fn parse(xml: &str) -> Result<Self, WorkloadError> {
        let mut r = Reader::from_str(xml);
        let mut wl: Option<Workload> = None;
        let mut stage: Option<Stage> = None;
        let mut work: Option<Work> = None;
        loop {
            let ev = r
                .read_event()
                .map_err(|e| WorkloadError::Xml(format!("at byte {}: {e}", r.buffer_position())))?;
            let (e, empty) = match &ev {
                Event::Start(e) => (e, false),
                Event::Empty(e) => (e, true),
                Event::End(e) => {
                    match e.name().as_ref() {
                        b"work" => {
                            let w = work
                                .take()
                                .ok_or_else(|| invalid("</work>", "unbalanced"))?;
                            stage
                                .as_mut()
                                .ok_or_else(|| invalid("<work>", "outside a workstage"))?
                                .works
                                .push(w);
                        }
                        b"workstage" => {
                            let s = stage
                                .take()
                                .ok_or_else(|| invalid("</workstage>", "unbalanced"))?;
                            wl.as_mut()
                                .ok_or_else(|| invalid("<workstage>", "outside a workload"))?
                                .stages
                                .push(s);
                        }
                        _ => {}
                    }
                    continue;
                }
                Event::Eof => break,
                _ => continue,
            };
            let a = attrs(e)?;
            let name = a.get("name").cloned().unwrap_or_default();
            match e.name().as_ref() {
                b"workload" => {
                    wl = Some(Workload {
                        name,
                        description: a.get("description").cloned().unwrap_or_default(),
                        stages: Vec::new(),
                    })
                }
                b"workstage" => {
                    stage = Some(Stage {
                        name,
                        works: Vec::new(),
                    });
                    if empty {
                        return Err(invalid(
                            format!("workstage {:?}", a.get("name")),
                            "has no work",
                        ));
                    }
                }
                b"work" => {
                    let what = format!("work {name:?}");
                    let kind = match a.get("type").map(String::as_str).unwrap_or("normal") {
                        "init" => WorkKind::Init,
                        "prepare" => WorkKind::Prepare,
                        "normal" => WorkKind::Normal,
                        "cleanup" => WorkKind::Cleanup,
                        "dispose" => WorkKind::Dispose,
                        "delay" => WorkKind::Delay,
                        t => return Err(invalid(what, format!("type {t:?} not supported"))),
                    };
                    let w = Work {
                        kind,
                        workers: num(&a, "workers", &what)?.unwrap_or(1).max(1),
                        total_ops: num(&a, "totalOps", &what)?,
                        runtime_secs: num(&a, "runtime", &what)?,
                        config: OpConfig::parse(a.get("config").map(String::as_str).unwrap_or(""))?,
                        ops: Vec::new(),
                        name,
                    };
                    if empty {
                        stage
                            .as_mut()
                            .ok_or_else(|| invalid("<work>", "outside a workstage"))?
                            .works
                            .push(w);
                    } else {
                        work = Some(w);
                    }
                }
                b"operation" => {
                    let w = work
                        .as_mut()
                        .ok_or_else(|| invalid("<operation>", "outside a work"))?;
                    let kind = match a.get("type").map(String::as_str).unwrap_or("") {
                        "read" => OpKind::Read,
                        "write" => OpKind::Write,
                        "filewrite" => OpKind::FileWrite,
                        "delete" => OpKind::Delete,
                        t => {
                            return Err(invalid(
                                format!("operation in {:?}", w.name),
                                format!("type {t:?} not supported"),
                            ))
                        }
                    };
                    w.ops.push(Operation {
                        kind,
                        ratio: num(&a, "ratio", "operation")?.unwrap_or(100),
                        config: OpConfig::parse(a.get("config").map(String::as_str).unwrap_or(""))?,
                    });
                }
                _ => {}
            }
        }
        let wl = wl.ok_or_else(|| invalid("document", "no <workload> element"))?;
        wl.validate()?;
        Ok(wl)
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        if self.stages.is_empty() {
            return Err(invalid(format!("{:?}", self.name), "has no workstage"));
        }
        for w in self.stages.iter().flat_map(|s| &s.works) {
            let what = || format!("work {:?}", w.name);
            match w.kind {
                WorkKind::Normal => {
                    if w.ops.is_empty() {
                        return Err(invalid(what(), "has no operation"));
                    }
                    if w.ops.iter().map(|o| o.ratio).sum::<u32>() != 100 {
                        return Err(invalid(what(), "operation ratios do not add up to 100"));
                    }
                    if w.total_ops.is_none() && w.runtime_secs.is_none() {
                        return Err(invalid(what(), "needs totalOps or runtime"));
                    }
                    for o in &w.ops {
                        let c = &o.config;
                        if c.containers.is_none() {
                            return Err(invalid(what(), "an operation has no containers="));
                        }
                        match o.kind {
                            OpKind::Read | OpKind::Delete if c.objects.is_none() => {
                                return Err(invalid(what(), "read/delete needs objects="))
                            }
                            OpKind::Write if c.objects.is_none() || c.sizes.is_none() => {
                                return Err(invalid(what(), "write needs objects= and sizes="))
                            }
                            OpKind::FileWrite if c.files.is_none() => {
                                return Err(invalid(what(), "filewrite needs files="))
                            }
                            _ => {}
                        }
                    }
                }
                WorkKind::Init | WorkKind::Dispose if w.config.containers.is_none() => {
                    return Err(invalid(what(), "needs containers="))
                }
                WorkKind::Prepare
                    if w.config.containers.is_none()
                        || w.config.objects.is_none()
                        || w.config.sizes.is_none() =>
                {
                    return Err(invalid(what(), "needs containers=, objects= and sizes="))
                }
                WorkKind::Cleanup
                    if w.config.containers.is_none() || w.config.objects.is_none() =>
                {
                    return Err(invalid(what(), "needs containers= and objects="))
                }
                WorkKind::Delay if w.runtime_secs.is_none() => {
                    return Err(invalid(what(), "needs runtime"))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appendix_a_files_parse_as_given() {
        for (name, xml) in crate::BUILTIN {
            let wl = Workload::parse(xml).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(wl.stages.first().unwrap().name, "init");
            assert_eq!(wl.stages.last().unwrap().name, "dispose");
            let normal: Vec<&Work> = wl
                .stages
                .iter()
                .flat_map(|s| &s.works)
                .filter(|w| w.kind == WorkKind::Normal)
                .collect();
            // prepare (a normal work of 10 filewrites) + the main stage(s).
            assert_eq!(normal[0].total_ops, Some(10), "{name}");
            let main_ops: u64 = normal[1..].iter().map(|w| w.total_ops.unwrap()).sum();
            assert_eq!(main_ops, 100, "{name}");
            // Values wrapped across lines in the appendix come out whole.
            let files = normal[1].ops[1].config.files.as_deref().unwrap();
            assert_eq!(files, format!("/tmp/testfiles/{name}"));
        }
        let a = Workload::parse(crate::BUILTIN[0].1).unwrap();
        let main = &a.stages[2].works[0];
        assert_eq!(
            (main.ops[0].kind.clone(), main.ops[0].ratio),
            (OpKind::Read, 40)
        );
        assert_eq!(main.ops[0].config.objects, Some(Selector::Uniform(1, 10)));
        assert_eq!(main.ops[1].config.containers, Some(Selector::Constant(2)));
        let e = Workload::parse(crate::BUILTIN[4].1).unwrap();
        assert_eq!(e.stages.len(), 9);
    }

    #[test]
    fn selectors_and_sizes() {
        assert_eq!(Selector::parse("r(1,50)").unwrap().all().len(), 50);
        assert!(Selector::parse("u(5,1)").is_err());
        assert!(Selector::parse("x(1)").is_err());
        let s = SizeSpec::parse("u(1,10)MB").unwrap();
        assert_eq!((s.selector, s.unit), (Selector::Uniform(1, 10), 1_000_000));
        assert!(SizeSpec::parse("c(1)PB").is_err());
    }

    #[test]
    fn bad_workloads_are_refused_with_a_reason() {
        let bad = |xml: &str| Workload::parse(xml).unwrap_err().to_string();
        assert!(bad("<workload name='x'><workflow>").contains("no workstage"));
        let ratios =
            "<workload name='x'><workflow><workstage name='m'><work type='normal' totalOps='5'>\
            <operation type='read' ratio='40' config='containers=c(1);objects=u(1,2)'/>\
            </work></workstage></workflow></workload>";
        assert!(bad(ratios).contains("add up to 100"));
        let op = ratios.replace("read", "list").replace("40", "100");
        assert!(bad(&op).contains("not supported"));
        assert!(bad("<workload><a></b></workload>").contains("XML"));
    }
}
