#!/usr/bin/env bash
# Issue 40's goals in one session (benches/SPEED.md, "Issue 40's goals in one run"):
# the speed benchmark (64 MiB objects, 4 KiB latency, achieved ÷ analytical limit)
# of path, oblivistore and curious over MinIO, then warp mixed with 4 KiB objects
# (16 clients) and with objects up to 64 KiB (32 clients) for the same engines, MinIO
# alone measured in each. Needs the build and the tools of scripts/test.sh (MinIO,
# warp, the e2e venv). Usage: benches/perf/goals.sh [OUT_DIR] (default
# target/goals); BIN=release to use target/release instead of target/debug.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
target="${CARGO_TARGET_DIR:-$root/target}"
out="$(realpath -m "${1:-$target/goals}")"
mkdir -p "$out"
gobin="$(go env GOPATH)/bin"
date -u +"start %FT%TZ"
git log -1 --format='commit %H'
"$target/${BIN:-debug}/oram-workload" speed --engines path,oblivistore,curious \
    --backends minio --max-seconds-per-phase 40 --minio "$gobin/minio" \
    --out "$out/speed.md" > "$out/speed.log" 2>&1
echo "speed rc=$?"
cd tests/e2e
export PATH="$target/e2e-venv/bin:$PATH" ORAM_PROXY_BIN="$target/${BIN:-debug}/oram-proxy"
export ORAM_TEST_MINIO="$gobin/minio" ORAM_TEST_WARP="$gobin/warp" ORAM_LOAD_SECS=60
export ORAM_LOAD_ENGINES=path,oblivistore,curious
ORAM_LOAD_CONCURRENT=16 ORAM_LOAD_OBJ_SIZE=4KiB ORAM_LOAD_FIXED_SIZE=1 \
ORAM_LOAD_BLOCK_SIZE=4096 ORAM_LOAD_CAPACITY_BLOCKS=16384 \
    python -m pytest -q -s -p no:cacheprovider test_load.py -k test_warp_mixed \
    > "$out/load-4k.log" 2>&1
echo "load 4 KiB rc=$?"
ORAM_LOAD_OBJ_SIZE=64KiB python -m pytest -q -s -p no:cacheprovider test_load.py \
    -k test_warp_mixed > "$out/load-64k.log" 2>&1
echo "load 64 KiB rc=$?"
date -u +"end %FT%TZ"
