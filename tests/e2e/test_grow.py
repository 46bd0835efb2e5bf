"""A volume grows online (`oram-proxy grow`): a small default-engine volume is
filled past its starting size through S3, grown while it serves, killed with
SIGKILL during a second growth, restarted, and every acknowledged object is read
back byte for byte; `fsck` is clean and the capacity is the new one."""

import json
import os
import random
import subprocess
import time
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import BIN, Proxy, free_port

BLOCK = 16384
START_BLOCKS = 256  # 4 MiB
OBJ = 96 * 1024


def capacity_bytes(s3):
    h = s3.head_bucket(Bucket="grow")["ResponseMetadata"]["HTTPHeaders"]
    return int(h["x-oram-volume-capacity-bytes"])


def body(i):
    return random.Random(i).randbytes(OBJ)


def put_until_full(s3, acked, first, most):
    """PUTs objects from `first` until the volume is full (or `most` of them);
    records the acknowledged ones. Returns whether it got full."""
    for i in range(first, first + most):
        try:
            s3.put_object(Bucket="grow", Key=f"o{i}", Body=body(i))
        except ClientError as e:
            assert e.response["Error"]["Code"] == "XOramStorageFull", e.response
            return True
        acked.add(i)
    return False


def grow_status(p, port):
    _, _, b = p.operator_get(port, "/grow")
    return json.loads(b)


def run_grow(p, port, to, *extra):
    return subprocess.run(
        [BIN, "grow", "--to", to, "--data-dir", str(p.data_dir), "--url", f"http://127.0.0.1:{port}", *extra],
        capture_output=True, text=True, timeout=600)


def start(workdir, port):
    return Proxy(workdir, "--capacity-blocks", str(START_BLOCKS), "--block-size", str(BLOCK),
                 "--metrics-listen", f"127.0.0.1:{port}")


def test_grow_online_then_kill_during_a_growth(tmp_path):
    port = free_port()
    p = start(tmp_path / "p", port)
    acked = set()
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="grow")
        assert capacity_bytes(s3) == START_BLOCKS * BLOCK
        assert put_until_full(s3, acked, 0, 1000), "the starting size fills up"
        # Grown by hand while it serves: progress shown, the new capacity in effect.
        r = run_grow(p, port, "16MiB")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "the volume grew: 16 MiB" in r.stdout, r.stdout
        assert "new buckets written" in r.stdout, "progress is shown"
        assert capacity_bytes(s3) == 16 << 20
        assert not put_until_full(s3, acked, 1000, 60)
        assert len(acked) * OBJ > START_BLOCKS * BLOCK, "past the starting size"
        # A second growth in the background; client writes go on meanwhile; the
        # kill comes once it wrote some of its new buckets.
        r = run_grow(p, port, "64MiB", "--no-wait")
        assert r.returncode == 0, r.stdout + r.stderr
        i = 2000
        for _ in range(6000):
            s = grow_status(p, port)
            if not s["running"] or s["done"] > 0:
                break
            s3.put_object(Bucket="grow", Key=f"o{i}", Body=body(i))
            acked.add(i)
            i += 1
        s3.put_object(Bucket="grow", Key=f"o{i}", Body=body(i))
        acked.add(i)
        during = grow_status(p, port)
        p.proc.kill()
        p.proc.wait(timeout=10)
    finally:
        p.kill()
    assert during["running"] and during["done"] < during["total"], \
        f"the kill came during the growth: {during}"
    # Restarted: the old size or the new one, never between; the growth resumes.
    p = start(tmp_path / "p", port)
    try:
        s3 = p.client()
        assert capacity_bytes(s3) in (16 << 20, 64 << 20)
        for i in sorted(acked):
            got = s3.get_object(Bucket="grow", Key=f"o{i}")["Body"].read()
            assert got == body(i), f"object o{i}"
        for _ in range(1200):
            s = grow_status(p, port)
            if not s["running"] and s["capacity_blocks"] * BLOCK == 64 << 20:
                break
            time.sleep(0.1)
        assert s["capacity_blocks"] * BLOCK == 64 << 20, s
        assert capacity_bytes(s3) == 64 << 20
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()
    r = subprocess.run([BIN, "fsck", "--data-dir", str(p.data_dir)], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    # And once more with everything read back after fsck.
    p = start(tmp_path / "p", port)
    try:
        s3 = p.client()
        assert capacity_bytes(s3) == 64 << 20
        for i in sorted(acked):
            assert s3.get_object(Bucket="grow", Key=f"o{i}")["Body"].read() == body(i), f"o{i}"
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()


def test_grow_refused_for_an_engine_that_cannot(tmp_path):
    port = free_port()
    p = Proxy(tmp_path / "p", "--engine", "direct", "--insecure-direct", "--capacity-blocks", "64",
              "--metrics-listen", f"127.0.0.1:{port}")
    try:
        r = run_grow(p, port, "4MiB")
        assert r.returncode != 0
        assert "cannot grow" in r.stderr and "path and ring" in r.stderr, r.stderr
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()


def test_grow_at_doubles_the_volume_by_itself(tmp_path):
    """`[volume] grow_at`: past half full, the volume doubles by itself up to
    max_size; objects written past the starting size read back."""
    port = free_port()
    cfg = tmp_path / "oram-proxy.toml"
    cfg.write_text('[volume]\ngrow_at = 0.5\nmax_size = "8MiB"\n')
    cfg.chmod(0o600)
    p = Proxy(tmp_path / "p", "--config", str(cfg), "--capacity-blocks", str(START_BLOCKS),
              "--block-size", str(BLOCK), "--metrics-listen", f"127.0.0.1:{port}")
    acked = set()
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="grow")
        i = 0
        # Past half full (each object takes 6 of the 256 blocks).
        while (i + 1) * 6 <= START_BLOCKS * 0.6:
            s3.put_object(Bucket="grow", Key=f"o{i}", Body=body(i))
            acked.add(i)
            i += 1
        for _ in range(1200):
            if capacity_bytes(s3) == 8 << 20:
                break
            time.sleep(0.1)
        assert capacity_bytes(s3) == 8 << 20, p.logs()
        # At max_size it stays there: filling it up ends with "full".
        assert put_until_full(s3, acked, i, 1000)
        assert len(acked) * OBJ > START_BLOCKS * BLOCK
        for _ in range(30):
            time.sleep(0.1)
        assert capacity_bytes(s3) == 8 << 20, "never beyond max_size"
        for k in sorted(acked):
            assert s3.get_object(Bucket="grow", Key=f"o{k}")["Body"].read() == body(k), f"o{k}"
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()
