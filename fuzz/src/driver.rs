//! The stable-Rust driver: runs a [`Target`] on its seeds and then on mutants of
//! them for a bounded number of executions and a bounded time, and fails an input
//! that panics (on any thread: a panic hook records it) or allocates beyond
//! [`Limits`] (measured by [`crate::alloc::Counting`], when it is the global
//! allocator). A failing input is written as hex to
//! `<target dir>/fuzz-failures/<target>-<n>.hex` and named in the report.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use crate::alloc;
use crate::mutate::{mutant, Rng};

/// A fuzz target: a plain `fn(&[u8])` (as libFuzzer's) that also says whether the
/// input was accepted (decoded, or answered with a success status), and the valid
/// encodings it starts from.
#[derive(Clone, Copy)]
pub struct Target {
    /// Its name (`[a-z_]`).
    pub name: &'static str,
    /// Runs one input; `true` when the code under test accepted it.
    pub run: fn(&[u8]) -> bool,
    /// Valid inputs, produced by the real encoders; every one must be accepted.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Invalid inputs worth mutating too (error paths); run after the seeds, not
    /// required to be accepted.
    pub extra: fn() -> Vec<Vec<u8>>,
}

/// No extra inputs.
pub fn none() -> Vec<Vec<u8>> {
    Vec::new()
}

/// How far one input may allocate.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest single allocation.
    pub max_single: usize,
    /// The largest growth of the live bytes during one input.
    pub max_growth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_single: 64 << 20,
            max_growth: 256 << 20,
        }
    }
}

/// How long a target runs: whichever of the two bounds comes first.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Executions (seeds included).
    pub iters: u64,
    /// Wall-clock time.
    pub time: Duration,
    /// The mutation generator's seed.
    pub seed: u64,
}

/// Why an input failed.
#[derive(Clone, Debug)]
pub enum Failure {
    /// It panicked (the message and location).
    Panic(String),
    /// It allocated beyond the limits.
    Alloc(alloc::Usage),
}

/// What one run of a target did.
#[derive(Debug)]
pub struct Report {
    /// The target.
    pub name: &'static str,
    /// Inputs run (seeds included).
    pub execs: u64,
    /// Inputs the code under test accepted.
    pub accepted: u64,
    /// Seeds, and how many of them were accepted.
    pub seeds: (usize, usize),
    /// The largest single allocation of any input.
    pub largest_alloc: usize,
    /// The largest live-byte growth of any input.
    pub peak_growth: usize,
    /// Wall-clock time.
    pub elapsed: Duration,
    /// Failing inputs (at most 10, the first of each message) and their files.
    pub failures: Vec<(Failure, PathBuf)>,
}

impl Report {
    /// One line for logs.
    pub fn summary(&self) -> String {
        format!(
            "{:<16} {:>8} execs in {:>6.1}s ({:>7.0}/s), {:>8} accepted, seeds {}/{}, largest alloc {} KiB, peak growth {} KiB, {} failures",
            self.name,
            self.execs,
            self.elapsed.as_secs_f64(),
            self.execs as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.accepted,
            self.seeds.1,
            self.seeds.0,
            self.largest_alloc >> 10,
            self.peak_growth >> 10,
            self.failures.len()
        )
    }
}

static FUZZING: AtomicBool = AtomicBool::new(false);
static PANICS: AtomicUsize = AtomicUsize::new(0);
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);
static HOOK: Once = Once::new();

/// Installs the panic hook that records panics (on any thread) while an input
/// runs, instead of printing them; outside inputs it defers to the previous hook.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if FUZZING.load(Ordering::SeqCst) {
                PANICS.fetch_add(1, Ordering::SeqCst);
                let mut last = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
                if last.is_none() {
                    *last = Some(info.to_string());
                }
            } else {
                previous(info);
            }
        }));
    });
}

/// The directory failing inputs go to: `$CARGO_TARGET_DIR/fuzz-failures`, else
/// `fuzz-failures` beside the `debug`/`release` directory of this executable.
pub fn failure_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            exe.ancestors()
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n == "debug" || n == "release")
                })
                .and_then(Path::parent)
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(std::env::temp_dir);
    target.join("fuzz-failures")
}

/// Runs one input under the panic hook and the allocation measurement.
fn one(target: &Target, input: &[u8], limits: &Limits) -> (bool, alloc::Usage, Option<Failure>) {
    PANICS.store(0, Ordering::SeqCst);
    FUZZING.store(true, Ordering::SeqCst);
    let base = alloc::reset();
    let result = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    let usage = alloc::usage(base);
    FUZZING.store(false, Ordering::SeqCst);
    let panicked = result.is_err() || PANICS.load(Ordering::SeqCst) > 0;
    let failure = if panicked {
        let msg = LAST_PANIC
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_else(|| "a panic".into());
        Some(Failure::Panic(msg))
    } else if usage.largest > limits.max_single || usage.peak_growth > limits.max_growth {
        Some(Failure::Alloc(usage))
    } else {
        None
    };
    (result.unwrap_or(false), usage, failure)
}

fn save(dir: &Path, name: &str, n: usize, input: &[u8]) -> PathBuf {
    let path = dir.join(format!("{name}-{n}.hex"));
    let _ = std::fs::create_dir_all(dir);
    if let Err(e) = std::fs::write(&path, hex::encode(input)) {
        eprintln!("could not write {}: {e}", path.display());
    }
    path
}

/// Runs `target` on its seeds, then on mutants until `budget` is spent.
pub fn run(target: &Target, budget: Budget, limits: Limits) -> Report {
    install_hook();
    let dir = failure_dir();
    let seeds = (target.seeds)();
    let valid = seeds.len();
    let seeds: Vec<Vec<u8>> = seeds.into_iter().chain((target.extra)()).collect();
    let start = Instant::now();
    let mut report = Report {
        name: target.name,
        execs: 0,
        accepted: 0,
        seeds: (valid, 0),
        largest_alloc: 0,
        peak_growth: 0,
        elapsed: Duration::ZERO,
        failures: Vec::new(),
    };
    let mut messages = std::collections::BTreeSet::new();
    let mut rng = Rng::new(budget.seed);
    let mut i = 0usize;
    while (report.execs < budget.iters && start.elapsed() < budget.time) || i < seeds.len() {
        let input = match seeds.get(i) {
            Some(s) => s.clone(),
            None => mutant(&mut rng, &seeds),
        };
        let (ok, usage, failure) = one(target, &input, &limits);
        report.execs += 1;
        report.accepted += u64::from(ok);
        if i < valid && ok {
            report.seeds.1 += 1;
        }
        i += 1;
        report.largest_alloc = report.largest_alloc.max(usage.largest);
        report.peak_growth = report.peak_growth.max(usage.peak_growth);
        if let Some(f) = failure {
            let key = match &f {
                Failure::Panic(m) => m.clone(),
                Failure::Alloc(_) => "allocation".to_string(),
            };
            if report.failures.len() < 10 && messages.insert(key) {
                let path = save(&dir, target.name, report.failures.len(), &input);
                report.failures.push((f, path));
            }
        }
    }
    report.elapsed = start.elapsed();
    report
}

/// Reads a bound from the environment (`name`), else `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}
