#!/usr/bin/env bash
# The layering check (scripts/layering.py): rules by folder, from `cargo metadata`
# and `cargo tree`, and no module cycle inside the proxy's crates.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/layering.py
