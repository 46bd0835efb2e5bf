//! `oram-fuzz`: runs the fuzz targets for longer than CI does.
//!
//! `oram-fuzz [--seconds N] [--iters N] [--seed N] [TARGET...]` runs each named
//! target (all without names) for N seconds (default 60) or N executions (default
//! unbounded), printing executions and findings per target; exits 1 if any input
//! failed (the inputs are written as hex under the target directory,
//! `fuzz-failures/`). `--list` prints the targets.

use std::time::Duration;

use oram_fuzz::driver::{run, Budget, Limits};
use oram_fuzz::targets::{by_name, ALL};

#[global_allocator]
static ALLOC: oram_fuzz::alloc::Counting = oram_fuzz::alloc::Counting;

fn main() {
    let mut seconds = 60u64;
    let mut iters = u64::MAX;
    let mut seed = 1u64;
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{what} needs a number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--seconds" => seconds = num("--seconds"),
            "--iters" => iters = num("--iters"),
            "--seed" => seed = num("--seed"),
            "--list" => {
                for t in ALL {
                    println!("{}", t.name);
                }
                return;
            }
            name => names.push(name.to_string()),
        }
    }
    let targets: Vec<_> = if names.is_empty() {
        ALL.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                by_name(n).unwrap_or_else(|| {
                    eprintln!("unknown target {n} (--list names them)");
                    std::process::exit(2)
                })
            })
            .collect()
    };
    let mut failed = false;
    for t in targets {
        let r = run(
            t,
            Budget {
                iters,
                time: Duration::from_secs(seconds),
                seed,
            },
            Limits::default(),
        );
        println!("{}", r.summary());
        for (f, path) in &r.failures {
            println!("  FAILURE {f:?}\n    input: {}", path.display());
        }
        failed |= !r.failures.is_empty() || r.seeds.1 < r.seeds.0;
    }
    if failed {
        std::process::exit(1);
    }
}
