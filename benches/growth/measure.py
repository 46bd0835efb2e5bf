#!/usr/bin/env python3
"""The cost of growing a volume online (issue 35): time, backend objects and bytes
of each growth, and the throughput of a concurrent S3 load during it against the
same load before it, in one run per engine.

For each engine that grows: `init` a volume of `--start-mib` on the fs back-end
(real fsync), `format` it (every bucket written once, as on a volume in use),
serve it, start a load of `--clients` boto3 threads each overwriting and reading
back its own `--objects` objects of `--object-kib`, measure the load for
`--window` seconds, then grow the volume to 4x and then to 16x its starting size
(`--factors`) with `oram-proxy grow --to` (the operator endpoint, as an operator would) while the
load runs, measuring the load again after each growth. Each growth's objects
written and bytes are the volume's growth history (`GET /grow`: the engine's own
count of the objects it wrote, times their size); the backend's size on disk is
measured before and after as a check.

Terms: the tree engines' tree-top cache is scaled with the volume
(`--cache-mib`, default 1 MiB at 64 MiB: the 16 MiB default's share of a 1 GiB
volume), so that the levels on the backend are those of a volume 16x larger; the
growth's objects and bytes are exactly proportional to the capacity added (every
bucket of the new levels, one PUT each), so the figures at 64 MiB -> 256 MiB ->
1 GiB are those of 1 GiB -> 4 GiB -> 16 GiB divided by 16; time scales with them
on a back-end whose PUT rate does not change with the bucket's size.

Outside the test suite (several minutes per engine). Usage:

    cargo build --release -p oram-proxy
    target/e2e-venv/bin/python benches/growth/measure.py --bin target/release/oram-proxy \
        [--engines path,ring,direct] [--start-mib 64] > benches/growth/RESULTS.md
"""

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3
from botocore.config import Config

ACCESS = "growthuser"
SECRET = "growth-secret-key-123"
BLOCK = 16384


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_bytes(store):
    """Bytes and objects under the fs back-end's root (its temporary files left out)."""
    total, count = 0, 0
    for root, _dirs, files in os.walk(store):
        if ".tmp" in pathlib.Path(root).parts:
            continue
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
            count += 1
    return total, count


def run(cmd, env, timeout=3600):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


class Load:
    """`clients` threads, each overwriting and reading back its own objects in
    turn; counts the completed requests (PUT and GET) with their times."""

    def __init__(self, port, clients, objects, size):
        self.port, self.clients, self.objects, self.size = port, clients, objects, size
        self.stop = threading.Event()
        self.lock = threading.Lock()  # guards `done` and `errors`
        self.done = []  # completion times (monotonic) of every request
        self.errors = []
        self.threads = [threading.Thread(target=self.client, args=(c,), daemon=True)
                        for c in range(clients)]

    def client(self, c):
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.port}",
                          aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                          region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}, read_timeout=600))
        rng = random.Random(c)
        i = 0
        while not self.stop.is_set():
            key = f"c{c}/o{i % self.objects}"
            body = rng.randbytes(self.size)
            try:
                s3.put_object(Bucket="growth", Key=key, Body=body)
                self.mark()
                got = s3.get_object(Bucket="growth", Key=key)["Body"].read()
                if got != body:
                    raise AssertionError(f"{key} read back differs")
                self.mark()
            except Exception as e:  # recorded; the run fails at the end
                with self.lock:
                    self.errors.append(repr(e))
                time.sleep(0.5)
            i += 1

    def mark(self):
        with self.lock:
            self.done.append(time.monotonic())

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=600)

    def rate(self, t0, t1):
        """Requests per second completed in [t0, t1)."""
        with self.lock:
            n = sum(1 for t in self.done if t0 <= t < t1)
        return n / (t1 - t0) if t1 > t0 else 0.0


def operator_get(port, token, path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def measure(binary, engine, a, workdir):
    data = workdir / "data"
    start_blocks = a.start_mib * 1024 * 1024 // BLOCK
    env = dict(os.environ, ORAM_PROXY_ROOT_USER=ACCESS, ORAM_PROXY_ROOT_PASSWORD=SECRET,
               RUST_LOG="warn")
    direct = ["--insecure-direct"] if engine == "direct" else []
    shape = ["--data-dir", str(data), "--engine", engine, "--block-size", str(BLOCK),
             "--capacity-blocks", str(start_blocks)] + direct
    if engine in ("path", "ring"):
        shape += ["--tree-cache-mib", str(a.cache_mib)]
    run([binary, "init", *shape], env)
    run([binary, "format", "--data-dir", str(data)] + direct, env)
    store = data / "store"
    s3_port, op_port = free_port(), free_port()
    log = open(workdir / "serve.log", "w")
    proc = subprocess.Popen(
        [binary, "serve", "--data-dir", str(data), "--s3-listen", f"127.0.0.1:{s3_port}",
         "--metrics-listen", f"127.0.0.1:{op_port}"] + direct,
        stdout=log, stderr=subprocess.STDOUT, env=env)
    rows = []
    load = None
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                sys.exit(f"serve exited: {(workdir / 'serve.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", s3_port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("serve did not listen")
                time.sleep(0.2)
        token = (data / "metrics.token").read_text().strip()
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}",
                          aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                          region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
        s3.create_bucket(Bucket="growth")
        load = Load(s3_port, a.clients, a.objects, a.object_kib * 1024)
        load.start()
        time.sleep(a.warmup)
        t = time.monotonic()
        time.sleep(a.window)
        before = load.rate(t, time.monotonic())
        prev = a.start_mib
        for factor in [int(f) for f in a.factors.split(",")]:
            to = a.start_mib * factor
            size0 = store_bytes(store)
            t0 = time.monotonic()
            run([binary, "grow", "--to", f"{to}MiB", "--data-dir", str(data),
                 "--url", f"http://127.0.0.1:{op_port}"], env)
            t1 = time.monotonic()
            during = load.rate(t0, t1)
            hist = json.loads(operator_get(op_port, token, "/grow"))["history"][-1]
            size1 = store_bytes(store)
            t = time.monotonic()
            time.sleep(a.window)
            after = load.rate(t, time.monotonic())
            rows.append({
                "engine": engine, "from_mib": prev,
                "to_mib": to, "seconds": t1 - t0, "written": hist["written"],
                "bytes": hist["backend_bytes"], "disk_delta": size1[0] - size0[0],
                "objects_delta": size1[1] - size0[1], "before": before, "during": during,
                "after": after,
            })
            before, prev = after, to
        load.finish()
        if load.errors:
            sys.exit(f"{engine}: {len(load.errors)} load errors, first: {load.errors[0]}")
    finally:
        if load is not None:
            load.stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--engines", default="path,ring,direct")
    ap.add_argument("--start-mib", type=int, default=64)
    ap.add_argument("--factors", default="4,16",
                    help="the sizes grown to, in turn, as multiples of the starting size")
    ap.add_argument("--cache-mib", type=int, default=1)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--objects", type=int, default=8, help="objects per client")
    ap.add_argument("--object-kib", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--window", type=float, default=20)
    a = ap.parse_args()
    binary = str(pathlib.Path(a.bin).resolve())
    print(f"Command: `{' '.join(sys.argv)}`. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n")
    print("| engine | growth | seconds | objects written | bytes written (GiB) | "
          "bytes per GiB added | on disk, change (GiB) | load before (req/s) | during | "
          "after | during ÷ before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for engine in a.engines.split(","):
        wd = pathlib.Path(tempfile.mkdtemp(prefix=f"growth-{engine}-"))
        try:
            rows = measure(binary, engine, a, wd)
        finally:
            shutil.rmtree(wd, ignore_errors=True)
        for r in rows:
            added_gib = (r["to_mib"] - r["from_mib"]) / 1024
            ratio = r["during"] / r["before"] if r["before"] else float("nan")
            print(f"| {engine} | {r['from_mib']} → {r['to_mib']} MiB | {r['seconds']:.1f} | "
                  f"{r['written']} | {r['bytes'] / 2**30:.3f} | "
                  f"{r['bytes'] / 2**30 / added_gib:.2f} | {r['disk_delta'] / 2**30:.3f} | "
                  f"{r['before']:.1f} | {r['during']:.1f} | {r['after']:.1f} | {ratio:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
