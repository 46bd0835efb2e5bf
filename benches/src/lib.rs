//! Benchmarks live in `benches/` (`cargo bench -p oram-benches`); this library is empty.
