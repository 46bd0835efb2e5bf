#!/usr/bin/env bash
# The quick check a contributor runs before sending a change (a few minutes once
# the build is warm; no external service): formatting, clippy with warnings
# denied, the layering rules, every unit test (libraries and binaries; the
# integration tests, which start servers, MinIO and real clients, are the full
# suite's: scripts/test.sh), and the documentation with broken intra-doc links
# denied.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "layering"
scripts/check-layering.sh

step "every test SECURITY.md names exists"
python3 scripts/security_refs.py

step "unit tests"
cargo test --workspace --lib --bins --locked

step "documentation (broken intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

printf '\nquick check passed\n'
