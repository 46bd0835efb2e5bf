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
cargo test --workspace --locked

step "benchmarks, one iteration each (criterion --test mode)"
cargo bench -p oram-benches --locked -- --test
