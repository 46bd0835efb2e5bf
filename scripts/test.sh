#!/usr/bin/env bash
# The whole test suite: formatting, lints, layering, every Rust test, the end-to-end
# tests with real clients (boto3, aws cli, rclone) against the real binary, and one
# pass of every benchmark. Installs what it needs: a fresh machine needs only Rust,
# Python 3 and apt (rclone comes from Debian, the Python clients go into a venv).
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

step "end-to-end clients: venv with boto3 + awscli + pytest, rclone from Debian"
venv="$(pwd)/target/e2e-venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt
if ! command -v rclone >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq rclone >/dev/null
fi
rclone version | head -1

step "end-to-end tests (pytest, real binary on 127.0.0.1)"
cargo build -p oram-proxy --locked
(cd tests/e2e && PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -p no:cacheprovider . 2>&1) | tee -a "$log"

step "benchmarks, one iteration each (criterion --test mode)"
cargo bench -p oram-benches --locked -- --test

# One closing line with the totals of every `cargo test` binary and of pytest.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     /^[0-9]+ (passed|failed|skipped)/ { for (k = 2; k <= NF; k++) { if ($(k) ~ /^passed/) p += $(k-1); if ($(k) ~ /^failed/) f += $(k-1); if ($(k) ~ /^skipped/) i += $(k-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' "$log"
