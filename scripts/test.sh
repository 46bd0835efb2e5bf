#!/usr/bin/env bash
# The whole test suite: formatting, lints, layering, every Rust test (including the
# S3 back-end against MinIO and moto, and aws-sdk-s3 against the proxy), the
# end-to-end tests with real clients (boto3, aws cli, rclone, python-swiftclient,
# swift-bench) against the real binary, Swift's own functional tests
# (scripts/swift-functional.sh) and Versity Gateway's S3 integration tests
# (scripts/s3-conformance.sh), both beside pytest, and one pass of every benchmark
# (in the cargo test step).
#
# Installs what it needs; a fresh machine needs only Rust, Go, Python 3 and apt:
# - MinIO: `go install` of a pinned version into $(go env GOPATH)/bin (first build
#   takes several minutes);
# - boto3, awscli, moto[server], pytest, python-swiftclient, swift-bench: a venv in
#   ${CARGO_TARGET_DIR:-target}/e2e-venv;
# - Swift 2.30.1's functional tests: the PyPI sdist, its test imports, and Debian's
#   liberasurecode-dev (scripts/swift-functional.sh);
# - rclone, git and a TrueType font (for the workload runner's charts): Debian packages;
# - git-remote-s3 (git's S3 remote helper, for the Git workload's test): the venv;
# - Chromium (the dashboard test, driven by Playwright's Python driver from the venv)
#   and systemd (systemd-analyze, for the unit file): Debian packages;
# - promtool (checks and unit-tests deploy/oram-proxy.rules.yml): built from the
#   Prometheus module at a pinned version with `go build` (a few minutes the first
#   time, then kept in $(go env GOPATH)/bin).
# - warp (MinIO's S3 benchmark, for the load test tests/e2e/test_load.py): built from
#   its module at a pinned version and checksum with `go build` (about a minute once
#   MinIO's modules are in the cache), kept in $(go env GOPATH)/bin; zstd (Debian's)
#   unpacks its per-request records.
# - versitygw (Versity Gateway, whose `versitygw test` is the S3 conformance suite):
#   `go install` at a pinned version into ${CARGO_TARGET_DIR:-target}/versitygw
#   (scripts/s3-conformance.sh --install; 2-4 minutes the first time).
set -euo pipefail
cd "$(dirname "$0")/.."

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
# Prometheus 2.54.1's promtool.
PROMETHEUS_VERSION=v0.54.1
# MinIO's warp 1.3.1, and the module's checksum (go.sum's h1: form). The module proxy
# serves only some of warp's releases and none later than this one with all of its
# dependencies (1.4.1 and up need madmin-go v4.6.7, which it refuses), and the checksum
# database has no entry for 1.3.1: the checksum is pinned here instead.
WARP_VERSION=v1.3.1
WARP_SUM="h1:EHNax13sUn7YUR4bYpUrgXW+ldtMKoELPYzN4rrtH6U="

# Seconds since the start, per step: printed at each step and summed up at the end
# (CI shows the tail of the output).
t0=$SECONDS
t_last=$SECONDS
t_name="start"
timings=""
step() {
    timings="$timings$(printf '%6ds  %s' $((SECONDS - t_last)) "$t_name")"$'\n'
    t_last=$SECONDS
    t_name="$*"
    printf '\n==> %s (at %dm%02ds)\n' "$*" $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60))
}
print_timings() {
    step "done"
    printf '\nstep durations (total %dm%02ds):\n%s' $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)) "$timings"
}

step "toolchain"
cargo --version
# The suite builds about 10 GiB under the target directory, and MinIO refuses
# writes ("XMinioStorageFull") on a disk nearly full, which shows up as setup
# errors deep in the e2e tests: say so first.
probe="${CARGO_TARGET_DIR:-.}"
while [ ! -e "$probe" ]; do probe="$(dirname "$probe")"; done
free_gib=$(df -Pk "$probe" | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${free_gib:-0}" -lt 6 ]; then
    echo "only ${free_gib} GiB free where the build goes: MinIO refuses writes on a" \
        "nearly full disk; free some, or set CARGO_TARGET_DIR to a larger disk" >&2
    exit 1
elif [ "${free_gib:-0}" -lt 15 ]; then
    echo "warning: only ${free_gib} GiB free where the build goes; the suite may need" \
        "about 15 (MinIO refuses writes on a nearly full disk)" >&2
fi
for comp in rustfmt clippy; do
    if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$comp"
    fi
done

step "cargo fmt --check"
cargo fmt --all --check

step "layering check"
scripts/check-layering.sh

step "every test SECURITY.md names exists"
python3 scripts/security_refs.py

target="${CARGO_TARGET_DIR:-$(pwd)/target}"
venv="$target/e2e-venv"
minio_bin="$(go env GOPATH)/bin/minio"
promtool_bin="$(go env GOPATH)/bin/promtool"
warp_bin="$(go env GOPATH)/bin/warp"
export ORAM_TEST_MINIO="$minio_bin"
export ORAM_TEST_WARP="$warp_bin"
export ORAM_TEST_MOTO="$venv/bin/moto_server"

# What the tests need besides the Rust build; it runs in the background while cargo
# builds (Go's builds and the downloads overlap the Rust compilation's serial parts).
install_test_dependencies() {
    local t=$SECONDS
    # rclone for the e2e tests; a TrueType font for the workload runner's chart text;
    # Chromium for the dashboard test; systemd-analyze for the unit file test.
    local apt_pkgs=""
    command -v rclone >/dev/null 2>&1 || apt_pkgs="$apt_pkgs rclone"
    [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || apt_pkgs="$apt_pkgs fonts-dejavu-core"
    [ -x /usr/bin/chromium ] || apt_pkgs="$apt_pkgs chromium"
    # PyECLib (imported by Swift's functional tests) links against liberasurecode.
    dpkg -s liberasurecode-dev >/dev/null 2>&1 || apt_pkgs="$apt_pkgs liberasurecode-dev"
    command -v systemd-analyze >/dev/null 2>&1 || apt_pkgs="$apt_pkgs systemd"
    # zstd unpacks warp's per-request records (the load test).
    command -v zstd >/dev/null 2>&1 || apt_pkgs="$apt_pkgs zstd"
    # git: the Git workload's test (tests/e2e/test_git.py, with git-remote-s3 from the venv).
    command -v git >/dev/null 2>&1 || apt_pkgs="$apt_pkgs git"
    # etcd for the cluster coordination tests (proxy/cluster/tests: a 3-member cluster).
    command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || apt_pkgs="$apt_pkgs etcd-server"
    if [ -n "$apt_pkgs" ]; then
        local sudo_cmd=""
        [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
        $sudo_cmd apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq $apt_pkgs >/dev/null
    fi
    echo "apt:$apt_pkgs ($((SECONDS - t)) s)"
    t=$SECONDS
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    # Both sets at once (as scripts/swift-functional.sh resolves them), so that nothing
    # is reinstalled while the Swift functional tests and pytest run side by side.
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt \
        -r tests/e2e/swift-functional-requirements.txt
    echo "Python venv $venv ($((SECONDS - t)) s)"
    # sed reads all of its input: `head` would close the pipe early and, under pipefail,
    # rclone's SIGPIPE (exit 141) would fail the run.
    rclone version | sed -n 1p
    t=$SECONDS
    local minio_stamp
    minio_stamp="$(go env GOPATH)/bin/.minio-version"
    if [ ! -x "$minio_bin" ] || [ "$(cat "$minio_stamp" 2>/dev/null)" != "$MINIO_VERSION" ]; then
        echo "building MinIO $MINIO_VERSION (several minutes the first time)"
        go install "github.com/minio/minio@$MINIO_VERSION"
        echo "$MINIO_VERSION" > "$minio_stamp"
    fi
    echo "MinIO $MINIO_VERSION ($((SECONDS - t)) s)"
    t=$SECONDS
    local promtool_stamp
    promtool_stamp="$(go env GOPATH)/bin/.promtool-version"
    if [ ! -x "$promtool_bin" ] || [ "$(cat "$promtool_stamp" 2>/dev/null)" != "$PROMETHEUS_VERSION" ]; then
        echo "building promtool $PROMETHEUS_VERSION (a few minutes the first time)"
        # The Prometheus module has replace directives, so `go install pkg@version`
        # refuses it: build it from a throw-away module instead.
        local promtool_mod
        promtool_mod=$(mktemp -d)
        (cd "$promtool_mod" && go mod init promtool-build >/dev/null 2>&1 \
            && go get "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION" \
            && go build -o "$promtool_bin" github.com/prometheus/prometheus/cmd/promtool)
        rm -rf "$promtool_mod"
        echo "$PROMETHEUS_VERSION" > "$promtool_stamp"
    fi
    echo "promtool $PROMETHEUS_VERSION ($((SECONDS - t)) s)"
    t=$SECONDS
    local warp_stamp
    warp_stamp="$(go env GOPATH)/bin/.warp-version"
    if [ ! -x "$warp_bin" ] || [ "$(cat "$warp_stamp" 2>/dev/null)" != "$WARP_VERSION $WARP_SUM" ]; then
        echo "building warp $WARP_VERSION (about a minute)"
        # `go install warp@version` would look up the module's version list (refused by
        # the module proxy) and the checksum database (no entry): download the one
        # version without the database, check the pinned checksum, and build in the
        # module's own directory, where its go.sum checks every dependency.
        local warp_json warp_dir warp_tmp
        warp_tmp=$(mktemp -d)
        warp_json=$(cd "$warp_tmp" && GONOSUMDB=github.com/minio/warp GOFLAGS=-mod=mod \
            go mod download -json "github.com/minio/warp@$WARP_VERSION")
        rmdir "$warp_tmp"
        if ! grep -q "\"Sum\": \"$WARP_SUM\"" <<<"$warp_json"; then
            echo "warp $WARP_VERSION: the module's checksum is not $WARP_SUM:" >&2
            echo "$warp_json" >&2
            return 1
        fi
        warp_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$warp_json")
        (cd "$warp_dir" && go build -trimpath -o "$warp_bin" .)
        echo "$WARP_VERSION $WARP_SUM" > "$warp_stamp"
    fi
    echo "warp $WARP_VERSION ($((SECONDS - t)) s)"
    t=$SECONDS
    scripts/s3-conformance.sh --install
    echo "versitygw ($((SECONDS - t)) s)"
}

log=$(mktemp)
swift_log=$(mktemp)
s3conf_log=$(mktemp)
deps_log=$(mktemp)
deps_pid=""
cleanup() {
    if [ -n "$deps_pid" ]; then kill "$deps_pid" 2>/dev/null || true; fi
    rm -f "$log" "$swift_log" "$s3conf_log" "$deps_log"
    print_timings
}
trap cleanup EXIT
step "test dependencies, in the background: apt (rclone, chromium, ...), Python venv, MinIO, promtool, warp and versitygw (go)"
install_test_dependencies > "$deps_log" 2>&1 &
deps_pid=$!

# Clippy runs as the compiler of the workspace's own crates in the test build itself
# (what `cargo clippy` does, on `cargo check`): one compilation of the workspace
# instead of a check build and a test build of every dependency. Every cargo command
# below keeps this environment, so that nothing is rebuilt between them.
step "build every target with clippy's lints (warnings are errors)"
# One build from scratch gains nothing from incremental compilation, which would keep
# several GB of session data beside the build (disk a CI machine may not have).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER
# clippy-driver's own argument passing, as cargo-clippy sets it for `-- -D warnings`.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The lint gate must not vanish silently: a crate with a lint warning must fail.
lint_probe=$(mktemp -d)
mkdir "$lint_probe/src"
printf '[package]\nname = "lint-probe"\nversion = "0.0.0"\nedition = "2021"\n[workspace]\n' > "$lint_probe/Cargo.toml"
printf 'fn main() {\n    let v: Vec<u8> = Vec::new();\n    println!("{}", v.len() == 0);\n}\n' > "$lint_probe/src/main.rs"
if (cd "$lint_probe" && CARGO_TARGET_DIR="$lint_probe/target" cargo build --quiet 2>/dev/null); then
    echo "clippy-driver as RUSTC_WORKSPACE_WRAPPER did not deny a lint warning: the lint gate is broken" >&2
    exit 1
fi
rm -rf "$lint_probe"
cargo test --workspace --all-targets --locked --no-run
# The binaries for the end-to-end tests, with the feature set `cargo test --workspace
# --all-targets` resolved (building only these packages would resolve a different one
# and rebuild their dependencies: minutes on two cores).
cargo build --workspace --all-targets --locked

# The documentation, where detail lives once: a broken intra-doc link (or any
# other rustdoc warning) fails the run. Its own check build of every crate runs
# while the test dependencies still install.
step "cargo doc (rustdoc warnings, broken intra-doc links among them, are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "waiting for the test dependencies"
deps_rc=0
wait "$deps_pid" || deps_rc=$?
deps_pid=""
cat "$deps_log"
if [ "$deps_rc" -ne 0 ]; then
    echo "FAILED: installing the test dependencies (exit $deps_rc)" >&2
    exit 1
fi

step "alert rules: promtool check and unit tests (deploy/oram-proxy.rules*.yml)"
"$promtool_bin" check rules deploy/oram-proxy.rules.yml
(cd deploy && "$promtool_bin" test rules oram-proxy.rules.test.yml)

step "cargo test (every target: the benchmarks run once each, in criterion's test mode, on the same build)"
# The coordination tests start a 3-member etcd cluster from this binary (Debian's
# etcd-server, installed above); they fail rather than skip when it is missing.
ORAM_TEST_ETCD="${ORAM_TEST_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}"
export ORAM_TEST_ETCD
cargo test --workspace --all-targets --locked 2>&1 | tee "$log"
cargo test --workspace --doc --locked 2>&1 | tee -a "$log"

step "end-to-end tests (pytest, real binaries on 127.0.0.1; includes the workload runner's and the speed benchmark's quick modes)"
rm -f "$target/crash-torture-summary.txt"
# Swift's own functional tests run beside pytest (independent proxies and ports;
# both mostly wait on the network and fsync): their output is printed after.
scripts/swift-functional.sh "$venv/bin/python" > "$swift_log" 2>&1 &
swift_pid=$!
# So does the S3 conformance suite (versitygw's tests, one proxy at a time, each test
# in its own process; about 8 minutes for its two passes beside pytest), bounded
# here as a whole.
timeout 2400 scripts/s3-conformance.sh "$venv/bin/python" > "$s3conf_log" 2>&1 &
s3conf_pid=$!
# The crash torture's kill -9 cycles per engine and back-end; CI runs a bounded number,
# the long runs (100 cycles per engine on fs) are outside CI, with their results in
# benches/crash/RESULTS.md. The default engine (path) on fs and MinIO:
export ORAM_CRASH_ITERATIONS="${ORAM_CRASH_ITERATIONS:-12}"
# A MinIO cycle takes about 5x an fs one (fsck reads every bucket object over HTTP).
export ORAM_CRASH_ITERATIONS_MINIO="${ORAM_CRASH_ITERATIONS_MINIO:-4}"
# Ring ORAM and the direct engine on fs (about 9 s and 3 s a cycle on two cores); on MinIO
# only the default engine runs in CI (0 skips a case).
export ORAM_CRASH_ITERATIONS_RING_FS="${ORAM_CRASH_ITERATIONS_RING_FS:-8}"
export ORAM_CRASH_ITERATIONS_DIRECT_FS="${ORAM_CRASH_ITERATIONS_DIRECT_FS:-8}"
export ORAM_CRASH_ITERATIONS_RING_MINIO="${ORAM_CRASH_ITERATIONS_RING_MINIO:-0}"
export ORAM_CRASH_ITERATIONS_DIRECT_MINIO="${ORAM_CRASH_ITERATIONS_DIRECT_MINIO:-0}"
# CURIOUS (a Path ORAM tree per partition) on fs.
export ORAM_CRASH_ITERATIONS_CURIOUS_FS="${ORAM_CRASH_ITERATIONS_CURIOUS_FS:-6}"
export ORAM_CRASH_ITERATIONS_CURIOUS_MINIO="${ORAM_CRASH_ITERATIONS_CURIOUS_MINIO:-0}"
# ObliviStore (a hierarchy of shuffled levels per partition) on fs.
export ORAM_CRASH_ITERATIONS_OBLIVISTORE_FS="${ORAM_CRASH_ITERATIONS_OBLIVISTORE_FS:-4}"
export ORAM_CRASH_ITERATIONS_OBLIVISTORE_MINIO="${ORAM_CRASH_ITERATIONS_OBLIVISTORE_MINIO:-0}"
pytest_rc=0
# Two workers (pytest-xdist): the long crash torture tests start first (conftest.py),
# each on its own worker, and an idle worker takes tests queued on the other. The
# temporary directories go under the target dir, emptied at each run, instead of
# accumulating in /tmp (pytest keeps three runs there); a passing test's tmp_path is
# removed when it ends (the crash and machine-loss tests each leave ~1 GB otherwise,
# and a CI run once filled its disk), a failing test's is kept for a look.
(cd tests/e2e && PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    -o tmp_path_retention_policy=failed \
    -n 2 --dist worksteal --basetemp="$target/pytest-tmp" --durations=15 . 2>&1) | tee -a "$log" || pytest_rc=$?
swift_rc=0
wait "$swift_pid" || swift_rc=$?
s3conf_rc=0
wait "$s3conf_pid" || s3conf_rc=$?

step "Swift 2.30.1 functional tests against the proxy (minimum pass count; ran beside pytest)"
# Its per-file counts are printed; they are not added to the closing total.
cat "$swift_log"
# The crash torture test's totals, a line per engine and back-end (iterations,
# acknowledged operations, lost, corrupted).
cat "$target/crash-torture-summary.txt" 2>/dev/null || true
step "S3 conformance: versitygw's integration tests against the proxy (minimum pass counts; ran beside pytest)"
# Its per-feature counts are printed; they are not added to the closing total.
cat "$s3conf_log"
if [ "$pytest_rc" -ne 0 ] || [ "$swift_rc" -ne 0 ] || [ "$s3conf_rc" -ne 0 ]; then
    echo "FAILED: end-to-end tests (exit $pytest_rc), Swift functional tests (exit $swift_rc)," \
        "S3 conformance (exit $s3conf_rc)" >&2
    exit 1
fi

# What CI keeps for people to look at.
for a in "$target"/artifacts/dashboard.png "$target"/artifacts/dashboard-direct.png; do
    if [ -f "$a" ]; then echo "artifact: $a"; fi
done

# One closing line with the totals of every `cargo test` binary and of pytest.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     /^[0-9]+ (passed|failed|skipped)/ { for (k = 2; k <= NF; k++) { if ($(k) ~ /^passed/) p += $(k-1); if ($(k) ~ /^failed/) f += $(k-1); if ($(k) ~ /^skipped/) i += $(k-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' "$log"
