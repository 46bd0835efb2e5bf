//! Benchmarks live in `benches/` (`cargo bench -p oram-benches`); this library holds
//! what several of them share.

/// Whether the bench runs a quick pass: under `cargo bench -- --test`, or under
/// `cargo test` (which runs a bench target without `--bench`). Full tables and
/// long measurements are for `cargo bench` only.
pub fn quick_pass() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}
