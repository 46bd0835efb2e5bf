//! Every fuzz target for a bounded time and count (CI): no panic, no input over
//! the allocation limits, every seed accepted (so the targets reach their
//! decoders). `ORAM_FUZZ_SECONDS` (per target, default 7) and `ORAM_FUZZ_ITERS`
//! (per target, default 150 000) raise the bounds; `ORAM_FUZZ_SEED` changes the
//! mutations.
//!
//! One test: the driver's panic hook and allocation counters are process-wide, so
//! the targets run one after the other.

use std::time::Duration;

use oram_fuzz::driver::{env_or, none, run, Budget, Failure, Limits, Target};
use oram_fuzz::targets::ALL;

#[global_allocator]
static ALLOC: oram_fuzz::alloc::Counting = oram_fuzz::alloc::Counting;

fn panics(data: &[u8]) -> bool {
    assert!(data.len() < 3, "a planted panic");
    true
}

fn allocates(data: &[u8]) -> bool {
    let v = vec![1u8; 100 << 20];
    v.len() > data.len()
}

fn planted_seeds() -> Vec<Vec<u8>> {
    vec![vec![0], vec![1, 2, 3, 4]]
}

#[test]
fn every_target_within_bounds() {
    // The harness itself: a panic and an oversized allocation are caught and saved.
    let quick = Budget {
        iters: 50,
        time: Duration::from_secs(60),
        seed: 1,
    };
    let r = run(
        &Target {
            name: "planted_panic",
            run: panics,
            seeds: planted_seeds,
            extra: none,
        },
        quick,
        Limits::default(),
    );
    assert!(
        matches!(r.failures.first(), Some((Failure::Panic(m), p)) if m.contains("a planted panic") && p.is_file())
    );
    assert!(
        oram_fuzz::alloc::installed(),
        "the counting allocator is not installed"
    );
    let r = run(
        &Target {
            name: "planted_alloc",
            run: allocates,
            seeds: planted_seeds,
            extra: none,
        },
        quick,
        Limits::default(),
    );
    assert!(matches!(r.failures.first(), Some((Failure::Alloc(u), _)) if u.largest >= 100 << 20));

    let budget = Budget {
        iters: env_or("ORAM_FUZZ_ITERS", 150_000),
        time: Duration::from_secs(env_or("ORAM_FUZZ_SECONDS", 7)),
        seed: env_or("ORAM_FUZZ_SEED", 1),
    };
    let mut problems = Vec::new();
    for t in ALL {
        let r = run(t, budget, Limits::default());
        println!("{}", r.summary());
        if r.seeds.1 != r.seeds.0 || r.seeds.0 == 0 {
            problems.push(format!(
                "{}: {} of {} seeds accepted",
                t.name, r.seeds.1, r.seeds.0
            ));
        }
        for (f, path) in &r.failures {
            problems.push(format!("{}: {f:?} (input: {})", t.name, path.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "fuzzing found:\n{}",
        problems.join("\n")
    );
}
