#!/usr/bin/env python3
"""Latency and throughput over a shaped link: oram-proxy vs. the no-ORAM baseline.

Starts MinIO and an oram-linkshape relay in front of it (23.6 ms RTT, 510 Mbit/s by
default: the thesis's link), then measures with boto3:
  - baseline: client -> relay -> MinIO directly;
  - proxy:    client -> oram-proxy (same machine) -> relay -> MinIO.
Both see the same link. Every process is started on 127.0.0.1 free ports and
stopped by PID.

  python benches/shaped/measure.py --proxy target/release/oram-proxy \
      --linkshape target/release/oram-linkshape --minio ~/go/bin/minio
"""

import argparse
import hashlib
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

import boto3
from botocore.config import Config


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} never opened")


def client(endpoint, ak, sk):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                      max_pool_connections=4, read_timeout=600),
    )


def measure(s3, bucket, label, n_small, big_mb):
    s3.create_bucket(Bucket=bucket)
    small = os.urandom(4096)
    s3.put_object(Bucket=bucket, Key="small", Body=small)
    for _ in range(3):  # warm connections
        s3.get_object(Bucket=bucket, Key="small")["Body"].read()
    lat = []
    for _ in range(n_small):
        t = time.perf_counter()
        body = s3.get_object(Bucket=bucket, Key="small")["Body"].read()
        lat.append(time.perf_counter() - t)
        assert body == small
    big = os.urandom(big_mb << 20)
    t = time.perf_counter()
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    put_s = time.perf_counter() - t
    t = time.perf_counter()
    got = s3.get_object(Bucket=bucket, Key="big")["Body"].read()
    get_s = time.perf_counter() - t
    assert hashlib.md5(got).digest() == hashlib.md5(big).digest(), f"{label}: big object corrupted"
    res = {
        "get4k_median_ms": statistics.median(lat) * 1000,
        "get4k_p90_ms": sorted(lat)[int(0.9 * len(lat))] * 1000,
        "put_mb_s": big_mb * 1.048576 / put_s,
        "get_mb_s": big_mb * 1.048576 / get_s,
    }
    print(f"{label}: {res}", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--linkshape", required=True)
    ap.add_argument("--minio", required=True)
    ap.add_argument("--rtt-ms", default="23.6")
    ap.add_argument("--mbit", default="510")
    ap.add_argument("--small-gets", type=int, default=40)
    ap.add_argument("--big-mb", type=int, default=64)
    ap.add_argument("--max-in-flight", type=int, default=128)
    ap.add_argument("--proxy-arg", action="append", default=[],
                    help="an extra flag for the proxy's init and serve (repeatable), e.g. --proxy-arg=--block-size=4096")
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="oram-shaped-"))
    procs = []
    try:
        mport, rport, pport = free_port(), free_port(), free_port()
        env = dict(os.environ, MINIO_ROOT_USER="benchuser", MINIO_ROOT_PASSWORD="benchsecret123", MINIO_BROWSER="off")
        procs.append(subprocess.Popen([args.minio, "server", "--quiet", "--address", f"127.0.0.1:{mport}",
                                       "--console-address", f"127.0.0.1:{free_port()}", str(work / "minio")],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(mport)
        time.sleep(2)
        procs.append(subprocess.Popen([args.linkshape, "--listen", f"127.0.0.1:{rport}", "--target",
                                       f"127.0.0.1:{mport}", "--rtt-ms", args.rtt_ms, "--mbit", args.mbit],
                                      stdout=subprocess.DEVNULL))
        wait_port(rport)
        shaped = f"http://127.0.0.1:{rport}"
        base = measure(client(shaped, "benchuser", "benchsecret123"), "baseline", "no ORAM (client -> link -> MinIO)",
                       args.small_gets, args.big_mb)
        cfg = work / "proxy.toml"
        cfg.write_text(f"[backend]\nmax_in_flight = {args.max_in_flight}\n")
        penv = dict(os.environ, AWS_ACCESS_KEY_ID="benchuser", AWS_SECRET_ACCESS_KEY="benchsecret123",
                    ORAM_PROXY_ROOT_USER="bench", ORAM_PROXY_ROOT_PASSWORD="bench-secret-1")
        flags = ["--config", str(cfg), "--data-dir", str(work / "proxy"), "--backend", "s3://oram/vol",
                 "--backend-endpoint", shaped, *args.proxy_arg]
        subprocess.run([args.proxy, "init", *flags], env=penv, check=True, stdout=subprocess.DEVNULL)
        procs.append(subprocess.Popen([args.proxy, "serve", *flags, "--s3-listen", f"127.0.0.1:{pport}"],
                                      env=penv, stdout=subprocess.DEVNULL, stderr=open(work / "proxy.err", "w")))
        wait_port(pport)
        engine = next((a.split("=", 1)[1] for a in args.proxy_arg if a.startswith("--engine=")), "path")
        label = f"oram-proxy, engine {engine}"
        orm = measure(client(f"http://127.0.0.1:{pport}", "bench", "bench-secret-1"), "bucket",
                      f"{label} (client -> proxy -> link -> MinIO)", args.small_gets, args.big_mb)
        print()
        print(f"link: RTT {args.rtt_ms} ms, {args.mbit} Mbit/s per direction (oram-linkshape)")
        print(f"| metric | no ORAM | {label} | ratio |")
        print("|---|---|---|---|")
        for k, unit in [("get4k_median_ms", "ms"), ("get4k_p90_ms", "ms"), ("put_mb_s", "MB/s"), ("get_mb_s", "MB/s")]:
            print(f"| {k} | {base[k]:.1f} {unit} | {orm[k]:.1f} {unit} | {orm[k] / base[k]:.2f} |")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
