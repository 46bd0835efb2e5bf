"""Load: MinIO's warp (mixed workload) and swift-bench at 32 concurrent clients against the
proxy on MinIO, with MinIO alone as the baseline.

Each test starts its own MinIO on 127.0.0.1 and `oram-proxy init` + `serve` on it (capacity
4096 blocks of 16 KiB), puts a sample of known objects, runs the load, then checks:
- warp: its exit status; every operation it recorded (`--full`: one CSV row per request)
  succeeded, except 503s, which the proxy documents as its answer beyond
  `s3.max_concurrent_requests` (SlowDown) and while the backend fails (ServiceUnavailable);
  at least MIN_OPS operations of each type (GET, PUT, STAT, DELETE) completed; the proxy's
  own metrics show no answer of 500 or above other than 503 (and no 4xx);
- swift-bench: zero failures in every phase (PUT, GET, DELETE), with every count reached;
- afterwards: /health answers, the sample reads back byte-exact and lists exactly, the proxy
  logged no panic, stops on SIGTERM with exit 0, and `oram-proxy fsck` passes.
Throughput and p50/p99 per operation (from warp's per-request records) are printed, with
the ratios to MinIO alone (the same warp command against a bare MinIO, once per worker).
Nothing is timed against a threshold.

Environment: ORAM_TEST_WARP (the warp binary; scripts/test.sh builds it), ORAM_TEST_MINIO
(MinIO; without either the tests are skipped), ORAM_LOAD_SECS (warp's duration per run,
default 30), ORAM_LOAD_ENGINES (comma-separated engines, default "path"; "direct" needs no
more), ORAM_LOAD_OBJECTS (warp's object count, default 200), ORAM_LOAD_SWIFT_OBJECTS
(swift-bench's objects, default 200; twice as many GETs), ORAM_LOAD_CAPACITY_BLOCKS (the
volume's blocks, default 4096), ORAM_LOAD_BLOCK_SIZE (the volume's block size in bytes,
default the proxy's: 16 KiB), ORAM_LOAD_CONCURRENT (warp's clients, default 32),
ORAM_LOAD_OBJ_SIZE (warp's object size, default 64KiB) and ORAM_LOAD_FIXED_SIZE=1 (every
object of that size; by default sizes are random up to it). The engine's accesses and
rounds, its shared calls (requests and calls), the wall time of its rounds' steps
(microseconds: planning, reads, serving, sealing, writes, commit) and the backend requests
during the warp run are printed beside warp's figures, also per round. The long runs outside CI
(benches/load/RESULTS.md) use the same tests with larger values.
"""

import collections
import contextlib
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from conftest import ACCESS, BIN, SECRET, Proxy, free_port, wait_port

WARP = os.environ.get("ORAM_TEST_WARP")
MINIO = os.environ.get("ORAM_TEST_MINIO")
SECS = int(os.environ.get("ORAM_LOAD_SECS", "30"))
ENGINES = [e for e in os.environ.get("ORAM_LOAD_ENGINES", "path").split(",") if e]
OBJECTS = int(os.environ.get("ORAM_LOAD_OBJECTS", "200"))
SWIFT_OBJECTS = int(os.environ.get("ORAM_LOAD_SWIFT_OBJECTS", "200"))
CONCURRENCY = int(os.environ.get("ORAM_LOAD_CONCURRENT", "32"))
# warp: object sizes random up to 64 KiB (up to 4 blocks of 16 KiB); swift-bench: 16-64 KiB.
OBJ_SIZE = os.environ.get("ORAM_LOAD_OBJ_SIZE", "64KiB")
RANDSIZE = os.environ.get("ORAM_LOAD_FIXED_SIZE", "") != "1"
BLOCK_SIZE = os.environ.get("ORAM_LOAD_BLOCK_SIZE")
# A volume of 64 MiB by default (ORAM_LOAD_CAPACITY_BLOCKS; fsck reads all of it): warp's
# live set is about OBJECTS x 64 KiB at most (13 MiB by default), swift-bench's
# SWIFT_OBJECTS x 64 KiB (13 MiB by default), the sample's 1.1 MiB.
CAPACITY_BLOCKS = int(os.environ.get("ORAM_LOAD_CAPACITY_BLOCKS", "4096"))
OPS = ("GET", "PUT", "STAT", "DELETE")
# The proxy's operation names (its metrics) of the requests warp's workload sends.
WARP_DATA_OPS = {"GetObject", "PutObject", "HeadObject", "DeleteObject", "DeleteObjects", "ListObjectsV2"}
# At least this many of each operation must complete in a run (the proxy's debug build
# does several per second; the mix is 45 % GET, 30 % STAT, 15 % PUT, 10 % DELETE).
MIN_OPS = 20
MINIO_USER, MINIO_PASSWORD = "loadminio", "loadminio-secret"
SAMPLE_BUCKET = "load-sample"
VENV_BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.skipif(
    not (WARP and MINIO and os.path.isfile(WARP) and os.path.isfile(MINIO)),
    reason="needs warp and MinIO: ORAM_TEST_WARP and ORAM_TEST_MINIO (scripts/test.sh builds and exports both)")


@contextlib.contextmanager
def minio_server(directory):
    port = free_port()
    proc = subprocess.Popen(
        [MINIO, "server", "--quiet", "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{free_port()}", str(directory)],
        env=dict(os.environ, MINIO_ROOT_USER=MINIO_USER, MINIO_ROOT_PASSWORD=MINIO_PASSWORD, MINIO_BROWSER="off"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=30)


def engine_flags(engine):
    return ["--engine", engine, *(["--insecure-direct"] if engine == "direct" else [])]


@contextlib.contextmanager
def proxy_on_minio(tmp_path, engine, swift=False):
    """MinIO, then `oram-proxy init` and `serve` on it (S3, metrics and optionally Swift).
    Yields (proxy, metrics port, the flags for fsck); on leaving, SIGTERM (exit 0 asserted)
    and fsck."""
    with minio_server(tmp_path / "minio") as port:
        flags = ["--backend", "s3://oram-load/vol", "--backend-endpoint", f"http://127.0.0.1:{port}",
                 "--backend-region", "us-east-1"]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=MINIO_USER, AWS_SECRET_ACCESS_KEY=MINIO_PASSWORD)
        data_dir = tmp_path / "proxy" / "data"
        started = time.monotonic()
        for _ in range(60):  # MinIO may need a moment after opening its port
            r = subprocess.run([BIN, "init", "--data-dir", str(data_dir), *flags, *engine_flags(engine),
                                "--capacity-blocks", str(CAPACITY_BLOCKS),
                                *(["--block-size", BLOCK_SIZE] if BLOCK_SIZE else [])],
                               capture_output=True, text=True, timeout=300, env=env)
            if r.returncode == 0:
                break
            time.sleep(1)
        assert r.returncode == 0, r.stderr
        metrics_port = free_port()
        extra = ["--insecure-direct"] if engine == "direct" else []
        p = Proxy(tmp_path / "proxy", *flags, *extra, "--metrics-listen", f"127.0.0.1:{metrics_port}",
                  env={"AWS_ACCESS_KEY_ID": MINIO_USER, "AWS_SECRET_ACCESS_KEY": MINIO_PASSWORD}, swift=swift)
        try:
            wait_port(metrics_port)
            print(f"\n  init and start of the proxy ({engine}) on MinIO: {time.monotonic() - started:.1f} s")
            yield p, metrics_port
            started = time.monotonic()
            code = p.stop(timeout=120)
            assert code == 0, f"oram-proxy exited with {code} on SIGTERM:\n{p.logs()[-3000:]}"
            logs = p.logs()
            assert "panicked" not in logs, logs[-3000:]
            r = subprocess.run([BIN, "fsck", "--data-dir", str(data_dir), *flags, *extra],
                               capture_output=True, text=True, timeout=600, env=env)
            assert r.returncode == 0, f"fsck after the load:\n{r.stdout}{r.stderr}"
            print(f"  stop and fsck: {time.monotonic() - started:.1f} s")
        finally:
            p.kill()
    # MinIO's copy of the volume (GBs after a long run) is kept only when the test fails.
    shutil.rmtree(tmp_path / "minio", ignore_errors=True)


def s3_client(endpoint, access=ACCESS, secret=SECRET):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 3}))


def put_sample(s3):
    """Known objects of assorted sizes around the block size (16 KiB), 1.1 MiB in all (the debug
    build moves well under 1 MB/s through Path ORAM on MinIO); returns key -> sha256."""
    rng = random.Random(19)
    s3.create_bucket(Bucket=SAMPLE_BUCKET)
    want = {}
    for i, size in enumerate([0, 1, 4095, 16384, 16385, 100_000, 1_000_000]):
        body = rng.randbytes(size)
        s3.put_object(Bucket=SAMPLE_BUCKET, Key=f"sample/{i}", Body=body)
        want[f"sample/{i}"] = hashlib.sha256(body).hexdigest()
    return want


def check_sample(s3, want):
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=SAMPLE_BUCKET).get("Contents", [])}
    assert listed == set(want), f"sample listing differs: {sorted(listed ^ set(want))}"
    for key, digest in want.items():
        got = s3.get_object(Bucket=SAMPLE_BUCKET, Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == digest, f"sample object {key} differs after the load"


def health(metrics_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health", timeout=30) as r:
        return r.status, r.read()


def metrics_text(p, metrics_port):
    """The proxy's /metrics, as text."""
    return p.operator_get(metrics_port, "/metrics")[2].decode()


def client_statuses(text, api):
    """The proxy's answers by (operation, HTTP status), from its /metrics `text`."""
    out = collections.Counter()
    for m in re.finditer(r'^oram_client_requests_total\{api="(\w+)",op="(\w+)",status="(\d+)"\} (\S+)$',
                         text, re.M):
        if m.group(1) == api:
            out[(m.group(2), int(m.group(3)))] += int(float(m.group(4)))
    return out


def engine_counters(text):
    """The engine's accesses and rounds, the requests and calls of its shared calls, the wall time
    of its rounds' steps (`*_microseconds_total`: where a round's time goes), and the backend
    requests sent (every verb), from the proxy's /metrics `text`."""
    out = {}
    for name in ("accesses_total", "rounds_total", "shared_requests_total", "shared_calls_total"):
        m = re.search(rf'^oram_engine_{name}(?:\{{[^}}]*\}})? (\S+)$', text, re.M)
        if m:
            out[name] = int(float(m.group(1)))
    for name, v in re.findall(r'^oram_engine_(\w+_microseconds_total)(?:\{[^}]*\})? (\S+)$', text, re.M):
        out[name] = int(float(v))
    out["backend_requests_total"] = sum(
        int(float(v)) for v in re.findall(r'^oram_backend_requests_total\{[^}]*\} (\S+)$', text, re.M))
    return out


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def documented_503(error):
    """Whether a warp error (minio-go's text of the S3 error: its message) is one of the proxy's
    503s: SlowDown beyond the concurrency limit, ServiceUnavailable while the backend fails,
    a bare 503 beyond the connection limit. (The proxy's /metrics are checked as well.)"""
    return bool(re.search(r"Too many requests in flight|slow ?down|The storage service is unavailable"
                          r"|Service ?Unavailable|\b503\b", error, re.I))


def percentile(sorted_values, q):
    """Nearest rank."""
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


def run_warp(host, access, secret, workdir, label):
    """`warp mixed` at CONCURRENCY clients for SECS seconds against host; returns the summary
    computed from warp's per-request records."""
    workdir.mkdir(parents=True, exist_ok=True)
    bench = workdir / ("warp-" + re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-"))
    cmd = [WARP, "mixed", "--host", host, "--access-key", access, "--secret-key", secret,
           "--concurrent", str(CONCURRENCY), "--objects", str(OBJECTS), "--obj.size", OBJ_SIZE,
           *(["--obj.randsize"] if RANDSIZE else []),
           "--duration", f"{SECS}s", "--no-color", "--full", "--benchdata", str(bench)]
    started = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=SECS + 600, cwd=workdir)
    wall = time.monotonic() - started
    bench.with_name(bench.name + ".out").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, f"warp against {label} exited with {r.returncode}:\n{(r.stdout + r.stderr)[-4000:]}"
    data = bench.with_name(bench.name + ".csv.zst")
    assert data.is_file(), f"warp wrote no {data}: {os.listdir(workdir)}"
    csv = subprocess.run(["zstd", "-dc", str(data)], capture_output=True, text=True, timeout=120, check=True).stdout
    lines = [ln for ln in csv.splitlines() if ln and not ln.startswith("#")]
    header = lines[0].split("\t")
    col = {name: i for i, name in enumerate(header)}
    durations, errors, counts = collections.defaultdict(list), collections.Counter(), collections.Counter()
    first_start = last_end = None
    for ln in lines[1:]:
        f = ln.split("\t")
        op, err = f[col["op"]], f[col["error"]]
        counts[op] += 1
        if err:
            errors[(op, err)] += 1
            continue
        durations[op].append(int(f[col["duration_ns"]]) / 1e6)
        start, end = f[col["start"]], f[col["end"]]
        first_start = start if first_start is None or start < first_start else first_start
        last_end = end if last_end is None or end > last_end else last_end
    span = (iso_seconds(last_end) - iso_seconds(first_start)) if first_start else float("nan")
    result = {"label": label, "command": " ".join(cmd).replace(secret, "SECRET"), "wall_s": wall,
              "span_s": span, "counts": dict(counts), "errors": dict(errors), "ops": {}}
    for op in sorted(durations):
        d = sorted(durations[op])
        result["ops"][op] = {"ok": len(d), "per_s": len(d) / span, "p50_ms": percentile(d, 50),
                             "p99_ms": percentile(d, 99)}
    result["total_per_s"] = sum(o["ok"] for o in result["ops"].values()) / span
    return result


def iso_seconds(stamp):
    """Seconds of an RFC 3339 UTC timestamp with nanoseconds (warp's), from the day's start."""
    m = re.match(r"\d{4}-\d\d-(\d\d)T(\d\d):(\d\d):(\d\d(?:\.\d+)?)Z$", stamp)
    assert m, stamp
    return int(m.group(1)) * 86400 + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))


def describe(result, baseline=None):
    lines = [f"warp mixed, {CONCURRENCY} clients, {SECS} s, {OBJECTS} objects {'up to' if RANDSIZE else 'of'} {OBJ_SIZE}:"
             f" {result['label']}: {result['total_per_s']:.1f} ops/s over {result['span_s']:.1f} s,"
             f" errors {sum(result['errors'].values())}"]
    for op in OPS:
        o = result["ops"].get(op)
        if not o:
            lines.append(f"  {op:6} none")
            continue
        line = f"  {op:6} {o['ok']:6d} ok {o['per_s']:8.1f}/s  p50 {o['p50_ms']:8.1f} ms  p99 {o['p99_ms']:8.1f} ms"
        b = baseline and baseline["ops"].get(op)
        if b:
            line += (f"  | MinIO {b['per_s']:8.1f}/s p50 {b['p50_ms']:6.1f} ms p99 {b['p99_ms']:6.1f} ms"
                     f" | ratio throughput {o['per_s'] / b['per_s']:.3f}, p50 x{o['p50_ms'] / b['p50_ms']:.1f},"
                     f" p99 x{o['p99_ms'] / b['p99_ms']:.1f}")
        lines.append(line)
    if baseline:
        lines.append(f"  total: {result['total_per_s']:.1f} ops/s against MinIO's {baseline['total_per_s']:.1f}"
                     f" (ratio {result['total_per_s'] / baseline['total_per_s']:.3f})")
    return "\n".join(lines)


def check_warp(result):
    bad = {k: v for k, v in result["errors"].items() if not documented_503(k[1])}
    assert not bad, f"warp saw errors other than 503 against {result['label']}: {bad}"
    for op in OPS:
        done = result["ops"].get(op, {}).get("ok", 0)
        assert done >= MIN_OPS, f"only {done} {op} operations completed against {result['label']}: {result}"


@pytest.fixture(scope="module")
def minio_baseline(tmp_path_factory):
    """The same warp run against MinIO alone (once per worker)."""
    tmp = tmp_path_factory.mktemp("minio-baseline")
    with minio_server(tmp / "minio") as port:
        for _ in range(60):  # MinIO may need a moment after opening its port
            try:
                s3_client(f"http://127.0.0.1:{port}", MINIO_USER, MINIO_PASSWORD).list_buckets()
                break
            except (BotoCoreError, ClientError):
                time.sleep(1)
        result = run_warp(f"127.0.0.1:{port}", MINIO_USER, MINIO_PASSWORD, tmp, "minio")
    print("\n" + describe(result))
    check_warp(result)
    shutil.rmtree(tmp / "minio", ignore_errors=True)
    return result


@pytest.mark.long(1)
@pytest.mark.parametrize("engine", ENGINES)
def test_warp_mixed_32_clients(tmp_path, engine, minio_baseline):
    with proxy_on_minio(tmp_path, engine) as (p, metrics_port):
        s3 = p.client()
        started = time.monotonic()
        want = put_sample(s3)
        print(f"  sample put: {time.monotonic() - started:.1f} s")
        text = metrics_text(p, metrics_port)
        before, counters_before = client_statuses(text, "s3"), engine_counters(text)
        result = run_warp(f"127.0.0.1:{p.port}", ACCESS, SECRET, tmp_path, f"proxy ({engine}) on MinIO")
        rss = peak_rss_mib(p.proc.pid)
        text = metrics_text(p, metrics_port)
        after = client_statuses(text, "s3")
        counters = {k: v - counters_before.get(k, 0) for k, v in engine_counters(text).items()}
        answers = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        per_round = {k: round(v / counters["rounds_total"], 2) for k, v in counters.items()
                     if k != "rounds_total" and counters.get("rounds_total")}
        print(f"\n{describe(result, minio_baseline)}\n  proxy peak RSS {rss:.0f} MiB;"
              f" its answers during the run (operation, status): {dict(sorted(answers.items()))}"
              f"\n  engine during the run: {counters}; per round: {per_round}")
        with open(tmp_path / "result.json", "w") as f:
            json.dump({"proxy": result, "minio": minio_baseline, "peak_rss_mib": rss, "engine": counters,
                       "answers": {f"{k[0]} {k[1]}": v for k, v in answers.items()}}, f, indent=1)
        check_warp(result)
        if engine != "direct":
            # The round profile is exported and moved: the rounds read from the backend.
            fetch = [v for k, v in counters.items() if k.endswith("fetch_microseconds_total")]
            assert fetch and all(v > 0 for v in fetch), counters
        # Errors on the operations of the load itself (warp's set-up probes bucket features the
        # proxy does not implement, 501, and the bucket's location before creating it, 404).
        unexpected = {k: v for k, v in answers.items() if k[0] in WARP_DATA_OPS and k[1] >= 400 and k[1] != 503}
        assert not unexpected, f"the proxy answered errors during the load: {unexpected}"
        assert sum(v for k, v in answers.items() if k[0] in WARP_DATA_OPS and k[1] < 300) >= 4 * MIN_OPS
        assert health(metrics_port) == (200, b"ok\n")
        check_sample(s3, want)
        # The bucket warp used is emptied by warp itself at the end of its run.
        assert s3.list_objects_v2(Bucket="warp-benchmark-bucket").get("KeyCount", 0) == 0


@pytest.mark.long(1)
@pytest.mark.parametrize("engine", ENGINES)
def test_swift_bench_32_clients(tmp_path, engine):
    bench = shutil.which("swift-bench", path=VENV_BIN)
    assert bench, "swift-bench is not installed (tests/e2e/requirements.txt)"
    with proxy_on_minio(tmp_path, engine, swift=True) as (p, metrics_port):
        s3 = p.client()
        started = time.monotonic()
        want = put_sample(s3)
        print(f"  sample put: {time.monotonic() - started:.1f} s")
        conf = tmp_path / "bench.conf"
        conf.write_text(
            "[bench]\n"
            f"auth = {p.swift_auth}\nuser = {ACCESS}:{ACCESS}\nkey = {SECRET}\nauth_version = 1.0\n"
            f"concurrency = {CONCURRENCY}\nlower_object_size = 16384\nupper_object_size = 65536\n"
            f"object_size = 65536\nnum_objects = {SWIFT_OBJECTS}\nnum_gets = {2 * SWIFT_OBJECTS}\n"
            "num_containers = 4\ndelete = yes\n")
        started = time.monotonic()
        r = subprocess.run([bench, str(conf)], capture_output=True, timeout=3600)
        wall = time.monotonic() - started
        out = r.stdout.decode() + r.stderr.decode()
        (tmp_path / "swift-bench.out").write_text(out)
        rss = peak_rss_mib(p.proc.pid)
        answers = client_statuses(metrics_text(p, metrics_port), "swift")
        finals = re.findall(r"(\d+) (PUTS|GETS|DEL) \*\*FINAL\*\* \[(\d+) failures\], ([\d.]+)/s", out)
        print(f"\nswift-bench, {CONCURRENCY} clients, {SWIFT_OBJECTS} objects of 16-64 KiB, proxy ({engine}) on"
              f" MinIO, {wall:.1f} s: " + "; ".join(f"{n} {ph} {rate}/s ({f} failures)" for n, ph, f, rate in finals)
              + f"; proxy peak RSS {rss:.0f} MiB; its answers (operation, status): {dict(sorted(answers.items()))}")
        assert r.returncode == 0, out[-4000:]
        got = {ph: (int(n), int(f)) for n, ph, f, _ in finals}
        assert got == {"PUTS": (SWIFT_OBJECTS, 0), "GETS": (2 * SWIFT_OBJECTS, 0), "DEL": (SWIFT_OBJECTS, 0)}, out[-4000:]
        unexpected = {k: v for k, v in answers.items() if k[1] >= 400 and k[1] != 503}
        assert not unexpected, f"the proxy answered errors during swift-bench: {unexpected}"
        assert health(metrics_port) == (200, b"ok\n")
        check_sample(s3, want)
