#!/usr/bin/env bash
# Runs an independent S3 conformance suite, Versity Gateway's integration tests
# (`versitygw test`, pinned below), against the real oram-proxy binary on 127.0.0.1,
# and checks a minimum pass count per addressing style.
#
#   scripts/s3-conformance.sh [VENV_PYTHON]
#   scripts/s3-conformance.sh --install     (only installs versitygw; scripts/test.sh
#                                            does it while cargo builds)
#
# - VENV_PYTHON: a Python with boto3 (default ${CARGO_TARGET_DIR:-target}/e2e-venv/bin/python,
#   created with tests/e2e/requirements.txt if missing): it runs the tests one by one
#   (scripts/s3_conformance.py) and deletes what a failed test left behind;
# - the binary is ${CARGO_TARGET_DIR:-target}/debug/oram-proxy (ORAM_PROXY_BIN
#   overrides); build it first (`cargo build -p oram-proxy`);
# - S3_CONF_MIN_PASS and S3_CONF_MIN_PASS_HOST override the minimum numbers of passing
#   tests path-style and virtual-hosted–style; S3_CONF_HOST_STYLE=0 skips the latter
#   pass (it needs root or unprivileged user namespaces) and its minimum;
#   S3_CONF_STRICT=1 also fails on a failure tests/e2e/s3_conformance_known.md does
#   not list; S3_CONF_ONLY=Name1,Name2 runs just those tests (while iterating);
#   S3_CONF_BUDGET bounds the seconds each pass may take.
#
# Installs versitygw with `go install` (Go's module proxy and checksum database) into
# ${CARGO_TARGET_DIR:-target}/versitygw/<version>, reused when present, with the list of
# the tests its `full-flow` command runs, read from the module's source. Each test then
# runs as its own `versitygw test NAME --vs` (versioning on) against a proxy on a fresh
# data directory, first path-style, then virtual-hosted–style (`--host-style`, the
# proxy's `[s3] domain` set). The suite's user management (`./versitygw admin
# create-user`) is answered by a small adapter around `oram-proxy user add`. Prints
# pass / fail per feature and per pass, and the failures the known-failures file does
# not list; results, each test's output and the proxies' logs of the last run:
# ${CARGO_TARGET_DIR:-target}/s3-conformance/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target="${CARGO_TARGET_DIR:-$root/target}"
VERSITYGW_VERSION=v1.8.0
# The fewest passing tests path-style and virtual-hosted–style; see
# tests/e2e/s3_conformance_known.md for what passes and why not more.
MIN_PASS="${S3_CONF_MIN_PASS:-210}"
MIN_PASS_HOST="${S3_CONF_MIN_PASS_HOST:-210}"
# Seconds each pass may take; tests not started by then count as failed.
BUDGET="${S3_CONF_BUDGET:-900}"
# The proxy's `[s3] domain` in the virtual-hosted–style pass.
domain=s3.conformance.test

# versitygw, built once per version into the target directory (2-4 minutes on two
# cores the first time). GOFLAGS from the environment could carry flags a module-less
# `go install pkg@version` refuses: only -trimpath is passed.
vgw_dir="$target/versitygw/$VERSITYGW_VERSION"
vgw="$vgw_dir/bin/versitygw"
tests_list="$vgw_dir/full-flow.list"
if [ ! -x "$vgw" ] || [ ! -s "$tests_list" ]; then
    echo "installing versitygw $VERSITYGW_VERSION (go install; minutes the first time)"
    mkdir -p "$vgw_dir"
    t=$SECONDS
    (cd "$vgw_dir" && GOFLAGS=-trimpath GOBIN="$vgw_dir/bin" nice -n 10 \
        go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
    # The module's source (in Go's module cache once installed) says which tests
    # `full-flow` runs: one process per test needs their names.
    mod_dir=$(cd "$vgw_dir" && GOFLAGS= go mod download -json \
        "github.com/versity/versitygw@$VERSITYGW_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    python3 scripts/s3_conformance.py list "$mod_dir/tests/integration/group-tests.go" >"$tests_list.tmp"
    mv "$tests_list.tmp" "$tests_list"
    echo "versitygw $VERSITYGW_VERSION installed ($((SECONDS - t)) s)"
fi
echo "versitygw $VERSITYGW_VERSION: $(wc -l <"$tests_list") tests in full-flow"
[ "${1:-}" != --install ] || exit 0

py="${1:-$target/e2e-venv/bin/python}"
if [ ! -x "$py" ]; then
    python3 -m venv "$target/e2e-venv"
    py="$target/e2e-venv/bin/python"
fi
"$py" -c "import boto3" 2>/dev/null ||
    "$py" -m pip install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt
bin="${ORAM_PROXY_BIN:-$target/debug/oram-proxy}"
[ -x "$bin" ] || { echo "no binary at $bin (cargo build -p oram-proxy)" >&2; exit 2; }

work=$(mktemp -d)
logs="$target/s3-conformance" # results-*.tsv, each test's output, the proxies' logs of the last run
rm -rf "$logs"
mkdir -p "$logs/tests" "$work/run"
runner_pid=""
cleanup() {
    # The runner stops its proxy on SIGTERM.
    if [ -n "$runner_pid" ] && kill -0 "$runner_pid" 2>/dev/null; then
        kill -TERM "$runner_pid"
        for _ in $(seq 1 400); do kill -0 "$runner_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# The suite creates its test users with `./versitygw admin create-user -a KEY -s
# SECRET -r ROLE` in its working directory: done here with `oram-proxy user add`
# through the operator endpoint (roles ignored: every proxy user may create buckets
# and reaches only its own buckets and those a bucket policy opens to it). Other
# admin commands (change-bucket-owner, list-buckets) have no counterpart: the suite
# then sees an `XAdmin` error, as from versitygw.
cat >"$work/run/versitygw" <<'EOF'
#!/usr/bin/env bash
set -u
[ "${1:-}" = admin ] || { echo "XAdminNotSupported: only 'versitygw admin' is adapted"; exit 1; }
shift
while [ $# -gt 0 ]; do
    case "$1" in -a | -s | -er) shift 2 ;; --allow-insecure) shift ;; *) break ;; esac
done
cmd=${1:-}
shift || true
[ "$cmd" = create-user ] || { echo "XAdminNotSupported: oram-proxy has no '$cmd'"; exit 0; }
access="" secret=""
while [ $# -gt 0 ]; do
    case "$1" in -a) access=$2; shift 2 ;; -s) secret=$2; shift 2 ;; *) shift ;; esac
done
f=$(mktemp)
chmod 600 "$f"
printf '%s' "$secret" >"$f"
rc=0
out=$("$ORAM_PROXY_BIN" user add --access-key "$access" --secret-key-file "$f" \
    --url "$S3_CONF_OPERATOR_URL" --token-file "$S3_CONF_TOKEN_FILE" 2>&1) || rc=$?
rm -f "$f"
[ "$rc" -eq 0 ] || { echo "XAdminError: $out"; exit 0; }
printf '%s %s\n' "$access" "$secret" >>"$S3_CONF_USERS"
EOF
chmod 700 "$work/run/versitygw"

# Each pass: a proxy on a fresh data directory (Path ORAM on the fs back-end, 8192
# blocks of 64 KiB; the suite's largest objects are a few tens of MiB), started by
# the runner, which starts a fresh one after a test that left objects nobody may
# delete (a compliance retention).
# run_pass NAME [RUNNER FLAGS]; the command in ${wrap[@]} (if any) runs the runner.
wrap=()
run_pass() {
    local name=$1 t=$SECONDS rc=0
    shift
    "${wrap[@]}" "$py" scripts/s3_conformance.py run --list "$tests_list" --out "$logs/results-$name.tsv" \
        --mode "$name" --versitygw "$vgw" --proxy-bin "$bin" --work "$work" --cwd "$work/run" \
        --logs "$logs/tests" --budget "$BUDGET" ${S3_CONF_ONLY:+--only "$S3_CONF_ONLY"} "$@" &
    runner_pid=$!
    wait "$runner_pid" || rc=$?
    runner_pid=""
    echo "$name pass: $((SECONDS - t)) s (exit $rc)"
    [ "$rc" -eq 0 ] || exit 1
}

run_pass path-style
if [ "${S3_CONF_HOST_STYLE:-1}" = 0 ]; then
    MIN_PASS_HOST=0
else
    # Virtual-hosted–style: the proxy's `[s3] domain` is set and the suite's SDK
    # names hosts <bucket>.<domain>, which no DNS resolves (and the suite's HTTP
    # client ignores HTTP_PROXY). So this pass runs in a mount namespace of its own
    # where /etc/hosts (a bind mount no other process sees) names every bucket the
    # suite uses on 127.0.0.1: test-bucket-N (numbered per process, some with a
    # prefix) and the fixed names of its tests of missing buckets. It needs root or
    # unprivileged user namespaces (`unshare -r`); S3_CONF_HOST_STYLE=0 skips it.
    hosts="$work/hosts"
    {
        echo "127.0.0.1 localhost $domain"
        for b in $(seq -f "test-bucket-%g" 1 200) $(seq -f "my-prefix-test-bucket-%g" 1 20) \
            incorrect-bucket new-bucket non-existing-bucket bucket-no-exist bucket src dst; do
            echo "127.0.0.1 $b.$domain"
        done
    } >"$hosts"
    userns=()
    [ "$(id -u)" -eq 0 ] || userns=(-r)
    # unshare execs bash, which execs the runner: the PID waited for stays the runner's.
    # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
    wrap=(unshare "${userns[@]}" -m --propagation private -- bash -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$hosts")
    run_pass host-style --host-style --domain "$domain"
fi

"$py" scripts/s3_conformance.py summary --known tests/e2e/s3_conformance_known.md \
    --min "path-style=$MIN_PASS" --min "host-style=$MIN_PASS_HOST" \
    ${S3_CONF_STRICT:+--strict} "$logs"/results-*.tsv
