#!/usr/bin/env python3
"""The shipped log's cost: the proxy on the fs back-end with [state] log_interval_ms
off and on, measured in the same run, in alternating order (A B C A B C ...).

Per configuration: 4 KiB PUT and GET latency (p50, p99 of --small requests), one
16 MiB PUT and GET (MB/s, --big repeats), and the backend bytes the log writes
while idle (--idle seconds). Usage:

    python benches/log/measure.py --proxy target/release/oram-proxy --out RESULTS.csv

Needs boto3. Everything runs on 127.0.0.1 in a temporary directory.
"""
import argparse
import csv
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import boto3
from botocore.config import Config

ACCESS, SECRET = "logbench", "logbench-secret-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def run_one(proxy, work, label, interval_ms, record_kib, args):
    d = tempfile.mkdtemp(dir=work)
    store = os.path.join(d, "store")
    cfg = os.path.join(d, "c.toml")
    with open(cfg, "w") as f:
        f.write("[state]\ncheckpoint_interval_secs = 3600\n")
        f.write(f"log_interval_ms = {interval_ms}\nlog_record_kib = {record_kib}\n")
    port = free_port()
    env = dict(os.environ, ORAM_PROXY_ROOT_USER=ACCESS, ORAM_PROXY_ROOT_PASSWORD=SECRET,
               RUST_LOG="warn")
    out = open(os.path.join(d, "proxy.log"), "w")
    p = subprocess.Popen([proxy, "serve", "--data-dir", os.path.join(d, "data"), "--config", cfg,
                          "--backend", f"file://{store}", "--s3-listen", f"127.0.0.1:{port}"],
                         stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(open(os.path.join(d, "proxy.log")).read())
                time.sleep(0.2)
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id=ACCESS,
                          aws_secret_access_key=SECRET, region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}, read_timeout=600))
        s3.create_bucket(Bucket="logbench")
        small = os.urandom(4096)
        put_lat, get_lat = [], []
        for i in range(args.small):
            t = time.perf_counter()
            s3.put_object(Bucket="logbench", Key=f"s{i}", Body=small)
            put_lat.append(time.perf_counter() - t)
        for i in range(args.small):
            t = time.perf_counter()
            assert s3.get_object(Bucket="logbench", Key=f"s{i}")["Body"].read() == small
            get_lat.append(time.perf_counter() - t)
        big = os.urandom(16 << 20)
        put_bps, get_bps = [], []
        for i in range(args.big):
            t = time.perf_counter()
            s3.put_object(Bucket="logbench", Key=f"big{i}", Body=big)
            put_bps.append(len(big) / (time.perf_counter() - t))
            t = time.perf_counter()
            assert s3.get_object(Bucket="logbench", Key=f"big{i}")["Body"].read() == big
            get_bps.append(len(big) / (time.perf_counter() - t))
        log_dir = os.path.join(store, "vol0", "log")
        before = tree_bytes(store)
        files_before = sum(len(f) for _, _, f in os.walk(log_dir)) if os.path.isdir(log_dir) else 0
        time.sleep(args.idle)
        idle_bytes = tree_bytes(store) - before
        files_after = sum(len(f) for _, _, f in os.walk(log_dir)) if os.path.isdir(log_dir) else 0
        q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1000
        return {
            "config": label,
            "put4k_p50_ms": round(q(put_lat, 0.5), 2), "put4k_p99_ms": round(q(put_lat, 0.99), 2),
            "get4k_p50_ms": round(q(get_lat, 0.5), 2), "get4k_p99_ms": round(q(get_lat, 0.99), 2),
            "put16m_MBps": round(statistics.mean(put_bps) / 1e6, 2),
            "get16m_MBps": round(statistics.mean(get_bps) / 1e6, 2),
            "idle_log_MBps": round(idle_bytes / args.idle / 1e6, 2),
            "idle_records_per_s": round((files_after - files_before) / args.idle, 1),
        }
    finally:
        p.terminate()
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        out.close()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--small", type=int, default=50)
    ap.add_argument("--big", type=int, default=2)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args()
    configs = [("off", 0, 1024), ("100ms x 1MiB", 100, 1024), ("25ms x 1MiB", 25, 1024)]
    work = args.work_dir or tempfile.mkdtemp(prefix="logbench-")
    os.makedirs(work, exist_ok=True)
    rows = []
    for r in range(args.rounds):
        for label, ms, kib in configs:
            row = run_one(args.proxy, work, label, ms, kib, args)
            row["round"] = r + 1
            print(row, flush=True)
            rows.append(row)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
