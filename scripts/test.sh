#!/usr/bin/env bash
# The whole test suite: formatting, lints, layering, every test, and one pass of
# every benchmark. Installs what it needs; a fresh machine needs only Rust.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain"
cargo --version
for comp in rustfmt clippy; do
    if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$comp"
    fi
done

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "layering check"
scripts/check-layering.sh

step "cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"

step "benchmarks, one iteration each (criterion --test mode)"
cargo bench -p oram-benches --locked -- --test

# One closing line with the totals of every `cargo test` binary above.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' "$log"
