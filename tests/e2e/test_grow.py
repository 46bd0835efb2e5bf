"""A volume grows online (`oram-proxy grow`): a small default-engine volume is
filled past its starting size through S3, grown while it serves, killed with
SIGKILL during a second growth, restarted, and every acknowledged object is read
back byte for byte; `fsck` is clean and the capacity is the new one. The
partition engines (ObliviStore, CURIOUS) grow the same way. The growth
history (`GET /grow`, `oram-proxy stats`) and the growth metrics follow. With
`[volume] grow_at` the volume grows by itself, through S3 and through Swift."""

import json
import os
import random
import re
import subprocess
import time
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import ACCESS, BIN, SECRET, Proxy, free_port

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


def metrics(p, port):
    _, _, b = p.operator_get(port, "/metrics")
    out = {}
    for line in b.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def stats(*args):
    r = subprocess.run([BIN, "stats", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


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
        assert re.search(r"\d+/\d+ done", r.stdout), "progress is shown: " + r.stdout
        assert capacity_bytes(s3) == 16 << 20
        # The growth is in the history (GET /grow, stats) and the metrics.
        s = grow_status(p, port)
        assert [(h["from_blocks"], h["to_blocks"]) for h in s["history"]] == [(START_BLOCKS, 1024)], s
        h = s["history"][0]
        assert h["written"] == h["positions"] > 0 and h["backend_bytes"] > h["written"] * BLOCK, h
        assert h["block_size"] == BLOCK and 0 < h["started_unix"] <= h["finished_unix"], h
        assert s["used_blocks"] + s["free_blocks"] == s["capacity_blocks"] == 1024, s
        assert (s["grow_at"], s["max_size_bytes"]) == (0, 0), s
        m = metrics(p, port)
        assert m['oram_growths_total{result="ok"}'] == 1
        assert m['oram_growths_total{result="failed"}'] == 0
        assert m["oram_growth_in_progress"] == 0
        assert m['oram_growth_positions{state="done"}'] == m['oram_growth_positions{state="total"}'] \
            == h["positions"]
        assert m['oram_capacity_bytes{kind="total"}'] == 16 << 20
        assert m['oram_capacity_bytes{kind="used"}'] + m['oram_capacity_bytes{kind="free"}'] == 16 << 20
        assert m['oram_capacity_blocks{kind="free"}'] == s["free_blocks"]
        assert m["oram_capacity_max_bytes"] == 0 and m["oram_grow_at_ratio"] == 0
        assert m["oram_growth_last_timestamp_seconds"] == h["finished_unix"]
        out = stats("--data-dir", str(p.data_dir), "--metrics-listen", f"127.0.0.1:{port}")
        assert "running proxy" in out and "automatic growth off; 1 growths finished, 0 failed" in out, out
        assert "growth history (1 growths" in out and "4.0 MiB -> 16.0 MiB (256 -> 1024 blocks)" in out, out
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
    # The history, offline: the first growth and the one resumed after the kill
    # (from the old size: the kill came before its switch).
    out = stats("--data-dir", str(p.data_dir))
    assert "no proxy running" in out and "growth history (2 growths" in out, out
    assert "4.0 MiB -> 16.0 MiB" in out and "16.0 MiB -> 64.0 MiB" in out, out
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


@pytest.mark.parametrize("engine", ["oblivistore", "curious"])
def test_a_partitioned_volume_grows_while_it_serves_and_after_a_kill(tmp_path, engine):
    """The partition engines grow too: filled to full through S3, grown by hand
    while a client writes, filled past the old size, killed with SIGKILL,
    restarted at the new size with every acknowledged object; fsck clean."""
    port = free_port()
    args = ["--engine", engine, "--capacity-blocks", str(START_BLOCKS), "--block-size", str(BLOCK),
            "--metrics-listen", f"127.0.0.1:{port}"]
    p = Proxy(tmp_path / "p", *args)
    acked = set()
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="grow")
        assert put_until_full(s3, acked, 0, 1000), "the starting size fills up"
        r = run_grow(p, port, "16MiB", "--no-wait")
        assert r.returncode == 0, r.stdout + r.stderr
        i = 1000
        for _ in range(1200):
            if not grow_status(p, port)["running"]:
                break
            try:
                s3.put_object(Bucket="grow", Key=f"o{i}", Body=body(i))
                acked.add(i)
                i += 1
            except ClientError as e:
                # Still full until the growth switches.
                assert e.response["Error"]["Code"] == "XOramStorageFull", e.response
                time.sleep(0.05)
        s = grow_status(p, port)
        assert not s["running"] and s["capacity_blocks"] * BLOCK == 16 << 20, s
        assert [(h["from_blocks"], h["to_blocks"]) for h in s["history"]] == [(START_BLOCKS, 1024)], s
        assert not put_until_full(s3, acked, 2000, 40)
        assert len(acked) * OBJ > START_BLOCKS * BLOCK, "past the starting size"
        p.proc.kill()
        p.proc.wait(timeout=10)
    finally:
        p.kill()
    p = Proxy(tmp_path / "p", *args)
    try:
        s3 = p.client()
        assert capacity_bytes(s3) == 16 << 20
        for k in sorted(acked):
            assert s3.get_object(Bucket="grow", Key=f"o{k}")["Body"].read() == body(k), f"o{k}"
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()
    r = subprocess.run([BIN, "fsck", "--data-dir", str(p.data_dir)], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr


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


def test_grow_at_grows_a_volume_filled_through_swift(tmp_path):
    """A small default volume with `grow_at` filled through Swift past twice its
    starting size: it grows by itself (twice, to max_size), a write that finds
    it full before a growth switched is refused with 507 and succeeds once it
    grew, every object reads back byte for byte through Swift, the history and
    the metrics show both growths, and `fsck` is clean."""
    import swiftclient

    port = free_port()
    cfg = tmp_path / "oram-proxy.toml"
    cfg.write_text('[volume]\ngrow_at = 0.5\nmax_size = "16MiB"\n')
    cfg.chmod(0o600)
    p = Proxy(tmp_path / "p", "--config", str(cfg), "--capacity-blocks", str(START_BLOCKS),
              "--block-size", str(BLOCK), "--metrics-listen", f"127.0.0.1:{port}", swift=True)
    acked = set()
    try:
        sw = swiftclient.Connection(authurl=p.swift_auth, user=f"{ACCESS}:{ACCESS}", key=SECRET, retries=0)
        sw.put_container("grow")

        def capacity():
            return int(sw.head_account()["x-account-oram-volume-bytes-capacity"])

        assert capacity() == START_BLOCKS * BLOCK
        # Past twice the starting size (each object takes 6 blocks): a write
        # refused as full waits for the growth (bounded) and is tried again.
        i, refused = 0, 0
        while i * OBJ <= 2.2 * START_BLOCKS * BLOCK:
            try:
                sw.put_object("grow", f"o{i}", body(i))
            except swiftclient.ClientException as e:
                assert e.http_status == 507, e
                refused += 1
                assert refused < 600, "the volume never grew"
                time.sleep(0.2)
                continue
            acked.add(i)
            i += 1
        assert len(acked) * OBJ > 2 * START_BLOCKS * BLOCK
        for _ in range(1200):
            s = grow_status(p, port)
            if not s["running"] and len(s["history"]) == 2:
                break
            time.sleep(0.1)
        assert capacity() == 16 << 20, p.logs()
        assert [(h["from_blocks"], h["to_blocks"]) for h in s["history"]] == \
            [(START_BLOCKS, 2 * START_BLOCKS), (2 * START_BLOCKS, 4 * START_BLOCKS)], s
        assert (s["grow_at"], s["max_size_bytes"]) == (0.5, 16 << 20), s
        m = metrics(p, port)
        assert m['oram_growths_total{result="ok"}'] == 2
        assert m["oram_capacity_max_bytes"] == 16 << 20 and m["oram_grow_at_ratio"] == 0.5
        assert m['oram_capacity_blocks{kind="used"}'] >= len(acked) * 6
        for k in sorted(acked):
            assert sw.get_object("grow", f"o{k}")[1] == body(k), f"o{k}"
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()
    r = subprocess.run([BIN, "fsck", "--data-dir", str(p.data_dir)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "growth history (2 growths" in stats("--data-dir", str(p.data_dir))


def test_automatic_growth_through_s3_and_swift_survives_a_kill_during_a_growth(tmp_path):
    """The issue's whole case: a default volume with `grow_at`, filled past its
    starting size through S3 and Swift at once, killed with SIGKILL while an
    automatic growth is under way (its new buckets partly written), restarted:
    the growth resumes, every acknowledged object reads back byte for byte
    through the API that wrote it, and `fsck` is clean."""
    import swiftclient

    start = 1024  # 16 MiB of 16 KiB blocks: growths of thousands of buckets
    port = free_port()
    cfg = tmp_path / "oram-proxy.toml"
    cfg.write_text('[volume]\ngrow_at = 0.5\nmax_size = "64MiB"\n')
    cfg.chmod(0o600)
    args = ["--config", str(cfg), "--capacity-blocks", str(start), "--block-size", str(BLOCK),
            "--metrics-listen", f"127.0.0.1:{port}"]
    p = Proxy(tmp_path / "p", *args, swift=True)
    s3_acked, sw_acked, during = set(), set(), None
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="grow")
        sw = swiftclient.Connection(authurl=p.swift_auth, user=f"{ACCESS}:{ACCESS}", key=SECRET,
                                    retries=0)
        sw.put_container("grow-swift")
        for i in range(2000):
            s = grow_status(p, port)
            if s["running"] and 0 < s["done"] < s["total"]:
                during = s
                p.proc.kill()
                p.proc.wait(timeout=10)
                break
            try:
                s3.put_object(Bucket="grow", Key=f"o{i}", Body=body(i))
                s3_acked.add(i)
            except ClientError as e:
                # Full until the growth switches.
                assert e.response["Error"]["Code"] == "XOramStorageFull", e.response
                time.sleep(0.02)
            try:
                sw.put_object("grow-swift", f"o{i}", body(i))
                sw_acked.add(i)
            except swiftclient.ClientException as e:
                assert e.http_status == 507, e
                time.sleep(0.02)
    finally:
        p.kill()
    assert during is not None, "no automatic growth was caught under way"
    assert (len(s3_acked) + len(sw_acked)) * OBJ > start * BLOCK // 2, "past half the start"
    p = Proxy(tmp_path / "p", *args, swift=True)
    try:
        for _ in range(1200):
            s = grow_status(p, port)
            if not s["running"] and s["capacity_blocks"] >= during["to_blocks"]:
                break
            time.sleep(0.1)
        assert s["capacity_blocks"] >= during["to_blocks"], s
        s3 = p.client()
        sw = swiftclient.Connection(authurl=p.swift_auth, user=f"{ACCESS}:{ACCESS}", key=SECRET,
                                    retries=0)
        for k in sorted(s3_acked):
            assert s3.get_object(Bucket="grow", Key=f"o{k}")["Body"].read() == body(k), f"s3 o{k}"
        for k in sorted(sw_acked):
            assert sw.get_object("grow-swift", f"o{k}")[1] == body(k), f"swift o{k}"
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()
    r = subprocess.run([BIN, "fsck", "--data-dir", str(p.data_dir)], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
