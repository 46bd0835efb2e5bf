#!/usr/bin/env python3
"""Backend footprint per engine: bytes the storage provider keeps per GiB of capacity.

For each engine and block size: `init` a volume on the fs back-end, `format` it
(every bucket written once: the footprint at rest before any use), then serve it and
run a workload of overwrites and reads that rewrites every backend position several
times (checkpoints taken as configured), stop it cleanly and measure again. Each
figure is the sum of the backend's file sizes (what an object store bills) and the
number of objects, beside the design bound from the engine's model (positions x
slots x object size, the `backend at rest` line of `oram-proxy describe`).

Outside the test suite (a few minutes per configuration). Usage:

    CARGO_TARGET_DIR=/work/target cargo build -p oram-proxy
    python3 benches/footprint/measure.py --bin target/debug/oram-proxy \
        [--capacity-mib 16] [--engines path,ring,...] [--block-sizes 16384,262144] \
        [--passes 6] > benches/footprint/RESULTS.md

Needs boto3 (the e2e venv has it: target/e2e-venv/bin/python).
"""

import argparse
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import boto3
from botocore.config import Config

ACCESS = "footprintuser"
SECRET = "footprint-secret-key"
OBJECT_MIB = 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_size(store):
    """(engine bytes, engine objects, volume bytes) under the fs back-end's root:
    the engine's objects, and the volume's own (`<prefix>/meta/`: header, lease,
    checkpoints)."""
    engine, count, meta = 0, 0, 0
    for root, _dirs, files in os.walk(store):
        if ".tmp" in pathlib.Path(root).parts:
            continue
        for f in files:
            size = os.path.getsize(os.path.join(root, f))
            if "meta" in pathlib.Path(root).relative_to(store).parts[1:2]:
                meta += size
            else:
                engine += size
                count += 1
    return engine, count, meta


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def measure(binary, engine, block_size, capacity_mib, passes, workdir, tree_cache_mib=0,
            state_toml=""):
    data = workdir / "data"
    blocks = capacity_mib * 1024 * 1024 // block_size
    env = dict(os.environ)
    env["ORAM_PROXY_ROOT_USER"] = ACCESS
    env["ORAM_PROXY_ROOT_PASSWORD"] = SECRET
    env["RUST_LOG"] = "warn"
    shape = ["--data-dir", str(data), "--engine", engine, "--block-size", str(block_size),
             "--capacity-blocks", str(blocks)]
    if engine == "direct":
        shape.append("--insecure-direct")
    if engine in ("path", "ring"):
        # No tree-top cache by default (`--tree-cache-mib`): its levels never reach the backend, and at a small
        # capacity they would be a large share of the tree (at the default 16 MiB
        # cache and 1 GiB capacity they are under 1 %).
        shape += ["--tree-cache-mib", str(tree_cache_mib)]
    text = run([binary, "describe", *shape], env)
    model = int(text.split("backend at rest: at most ")[1].split(" ")[0])
    run([binary, "init", *shape], env)
    store = data / "store"
    run([binary, "format", "--data-dir", str(data)] + (["--insecure-direct"] if engine == "direct" else []), env)
    formatted = store_size(store)

    port = free_port()
    log = open(workdir / "serve.log", "w")
    config = []
    if state_toml:
        (workdir / "serve.toml").write_text(f"[state]\n{state_toml}\n")
        config = ["--config", str(workdir / "serve.toml")]
    proc = subprocess.Popen(
        [binary, "serve", *config, "--data-dir", str(data), "--s3-listen", f"127.0.0.1:{port}",
         "--no-fsync"]
        + (["--insecure-direct"] if engine == "direct" else []),
        stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                sys.exit(f"serve exited: {(workdir / 'serve.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("serve did not listen")
                time.sleep(0.2)
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id=ACCESS,
                          aws_secret_access_key=SECRET, region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}))
        s3.create_bucket(Bucket="footprint")
        # Half the capacity in 1 MiB objects, overwritten `passes` times and read
        # back once per pass: every pass touches `capacity / 2` blocks twice.
        n = max(1, capacity_mib // 2 // OBJECT_MIB)
        body = os.urandom(OBJECT_MIB * 1024 * 1024)
        accesses = 0
        # The largest footprint seen while serving (sampled after every object).
        peak = 0
        started = time.monotonic()
        for p in range(passes):
            for i in range(n):
                s3.put_object(Bucket="footprint", Key=f"o{i}", Body=body)
                got = s3.get_object(Bucket="footprint", Key=f"o{i}")["Body"].read()
                assert got == body, f"object o{i} differs after pass {p}"
                accesses += 2 * OBJECT_MIB * 1024 * 1024 // block_size
                peak = max(peak, store_size(store)[0])
        seconds = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
    used = store_size(store)
    return model, formatted, used, accesses, peak, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--capacity-mib", type=int, default=16)
    ap.add_argument("--engines", default="path,ring,curious,oblivistore,direct")
    ap.add_argument("--block-sizes", default="16384,262144")
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--state-toml", default="",
                    help="lines of `[state]` for serve, e.g. 'superseded_max_percent = 0'")
    ap.add_argument("--tree-cache-mib", type=int, default=0,
                    help="Path and Ring's tree-top cache (0: the whole tree on the backend)")
    a = ap.parse_args()
    binary = str(pathlib.Path(a.bin).resolve())
    gib = 1024 ** 3
    cap = a.capacity_mib * 1024 * 1024
    print(f"Backend footprint, fs back-end, capacity {a.capacity_mib} MiB, {a.passes} passes of "
          f"overwriting and reading half the capacity in {OBJECT_MIB} MiB objects "
          f"(`{' '.join(sys.argv)}`).\n")
    print("GiB per GiB of capacity: the engine's objects' bytes over the capacity; the volume's "
          "own objects (header, lease, checkpoints) are given apart, in MiB.\n")
    print("| engine | block | engine objects after format | GiB per GiB after format "
          "| largest GiB per GiB while serving "
          "| engine objects after the workload | GiB per GiB after the workload "
          "| bound (`describe`), GiB per GiB | volume's own objects, MiB | block accesses "
          "| workload seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for engine in a.engines.split(","):
        for bs in [int(b) for b in a.block_sizes.split(",")]:
            wd = pathlib.Path(tempfile.mkdtemp(prefix=f"fp-{engine}-{bs}-"))
            try:
                model, fmt, used, acc, peak, secs = measure(binary, engine, bs, a.capacity_mib,
                                                            a.passes, wd, a.tree_cache_mib,
                                                            a.state_toml)
            finally:
                shutil.rmtree(wd, ignore_errors=True)
            if used[0] > model:
                print(f"<!-- {engine} {bs}: measured {used[0]} bytes over the bound {model} -->")
            print(f"| {engine} | {bs // 1024} KiB | {fmt[1]} | {fmt[0] / cap:.2f} | "
                  f"{peak / cap:.2f} | {used[1]} | "
                  f"{used[0] / cap:.2f} | {model / cap:.2f} | {used[2] / 2**20:.1f} | {acc} | "
                  f"{secs:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
