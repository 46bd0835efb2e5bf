"""Operator commands: --version, stats (from a running proxy's endpoint, or from
the data directory when none runs), compact (shrinks state.redb, loses nothing),
and the progress display of init and compact on a terminal."""

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ACCESS, BIN, SECRET, Proxy, free_port, wait_port

SCRIPT = shutil.which("script")


def run(*args, env=None, timeout=120):
    full = dict(os.environ, **(env or {}))
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=full)


def on_terminal(args, env=None, timeout=300):
    """Runs the binary on a pseudo-terminal (util-linux `script`), where progress
    bars are drawn; returns exit status and everything it drew."""
    cmd = " ".join(["'" + a.replace("'", "'\\''") + "'" for a in [BIN, *args]])
    full = dict(os.environ, **(env or {}), TERM="xterm")
    r = subprocess.run([SCRIPT, "-qefc", cmd, "/dev/null"], capture_output=True, text=True,
                       timeout=timeout, env=full)
    return r.returncode, r.stdout + r.stderr


def test_version_names_the_build_and_the_formats():
    r = run("--version")
    assert r.returncode == 0
    first, second = r.stdout.strip().splitlines()
    assert re.match(r"oram-proxy \d+\.\d+\.\d+ \(commit [0-9a-f]{7,}(-dirty)?, (debug|release) build, ", first), first
    # Format 3 / state format 2 (issue 13): older data directories and their
    # checkpoints (ORAMCKP1 holds a format-1 state snapshot) are refused, not read.
    assert second == "data directory format 3, state database format 2, checkpoint format ORAMCKP2"


def test_stats_live_and_offline(tmp_path):
    mport = free_port()
    p = Proxy(tmp_path, "--no-fsync", "--metrics-listen", f"127.0.0.1:{mport}")
    data = p.data_dir
    try:
        wait_port(mport)
        s3 = p.client()
        s3.create_bucket(Bucket="stats-b")
        for i in range(3):
            s3.put_object(Bucket="stats-b", Key=f"k{i}", Body=os.urandom(10_000))
        r = run("stats", "--data-dir", str(data), "--metrics-listen", f"127.0.0.1:{mport}")
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert f"running proxy, http://127.0.0.1:{mport}" in out
        assert re.search(r"objects:\s+3 in 1 buckets", out), out
        # 3 objects of 10 000 bytes in 16 KiB blocks: 3 blocks.
        assert re.search(r"capacity used:\s+3 blocks", out), out
        assert re.search(r"engine:\s+path, 65536 blocks of 16384 bytes", out), out
        assert re.search(r"stash:\s+\d+ blocks now, max \d+, mean [\d.]+ \(bound 89\)", out), out
        assert "backlog:" in out and "checkpoint:" in out and re.search(r"lease:\s+held", out), out
        # Without an endpoint, a running proxy's directory is busy.
        r = run("stats", "--data-dir", str(data))
        assert r.returncode != 0 and "in use by another oram-proxy" in r.stderr, r.stderr
    finally:
        assert p.stop() == 0, p.logs()
    # Stopped: the endpoint refuses, the data directory answers.
    r = run("stats", "--data-dir", str(data), "--metrics-listen", f"127.0.0.1:{mport}")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "no proxy running" in out
    assert re.search(r"engine:\s+path, 65536 blocks of 16384 bytes", out), out
    # The blocks in use, from the index alone.
    assert re.search(r"capacity used:\s+3 blocks \(48.0 KiB, 0.0%\) by 3 objects and 0 unfinished uploads", out), out
    # The stop took a checkpoint.
    assert re.search(r"checkpoint:\s+epoch \d+, taken \d+ s ago", out), out
    assert re.search(r"backlog:\s+0 journaled buckets", out), out


def test_compact_shrinks_the_state_and_keeps_every_object(tmp_path):
    def key(i):
        return f"{i:04d}-" + "k" * 200

    p = Proxy(tmp_path, "--no-fsync")
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="compact-b")
        # Many small objects with long keys and metadata, most deleted again (every
        # 20th kept, so the index's pages stay partly live): the state database
        # keeps the pages they and the engine's churn used until it is compacted.
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: s3.put_object(Bucket="compact-b", Key=key(i), Body=b"x" * 100,
                                                  Metadata={"m": "v" * 1500}), range(1200)))
        gone = [key(i) for i in range(1200) if i % 20]
        for c in range(0, len(gone), 1000):
            r = s3.delete_objects(Bucket="compact-b", Delete={
                "Objects": [{"Key": k} for k in gone[c:c + 1000]], "Quiet": True})
            assert not r.get("Errors"), r["Errors"]
        r = run("compact", "--data-dir", str(p.data_dir))
        assert r.returncode != 0 and "in use" in r.stderr, "compact must refuse a running proxy"
    finally:
        assert p.stop() == 0, p.logs()
    r = run("stats", "--data-dir", str(p.data_dir))
    assert r.returncode == 0, r.stderr
    live = int(re.search(r"live state:\s+(\d+) bytes", r.stdout).group(1))
    code, drawn = on_terminal(["compact", "--data-dir", str(p.data_dir)])
    assert code == 0, drawn
    assert "compacting state.redb" in drawn  # the progress display
    m = re.search(r"compacted \S+: (\d+) -> (\d+) bytes \((\d+) entries copied\)", drawn)
    assert m, drawn
    before, after = int(m.group(1)), int(m.group(2))
    assert after < before, drawn
    # The copy holds the live pages (redb rounds a large value's pages up to a
    # power of two: the tree-top buckets take up to twice their bytes).
    assert after <= 2.5 * live + (1 << 20), (live, drawn)
    assert os.path.getsize(p.data_dir / "state.redb") == after
    p = Proxy(tmp_path, "--no-fsync")
    try:
        s3 = p.client()
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="compact-b")["Contents"]]
        assert keys == [key(i) for i in range(0, 1200, 20)]
        for k in keys:
            o = s3.get_object(Bucket="compact-b", Key=k)
            assert o["Body"].read() == b"x" * 100 and o["Metadata"] == {"m": "v" * 1500}
    finally:
        assert p.stop() == 0, p.logs()


def test_init_shows_progress_on_a_terminal(tmp_path):
    env = {"ORAM_PROXY_ROOT_USER": ACCESS, "ORAM_PROXY_ROOT_PASSWORD": SECRET}
    code, drawn = on_terminal(["init", "--data-dir", str(tmp_path / "d"), "--no-fsync"], env=env)
    assert code == 0, drawn
    assert "init: creating the volume" in drawn, drawn
    assert "data directory" in drawn and "ready" in drawn
    # Without a terminal nothing but the result is printed.
    r = run("init", "--data-dir", str(tmp_path / "e"), "--no-fsync", env=env)
    assert r.returncode == 0 and "init:" not in r.stdout + r.stderr


# A small Path ORAM volume for `format`: 2048 blocks of 1 KiB with the default Z = 4
# (512 leaves, 10 levels) and a 2 MiB tree-top cache: 9 levels of 4 KiB buckets
# (511 × 4 KiB) fit, 10 (the whole tree) would not.
FORMAT_FLAGS = ["--capacity-blocks", "2048", "--block-size", "1024", "--tree-cache-mib", "2"]


def uncached_buckets(capacity=2048, cached_levels=9):
    """The backend buckets of a Path ORAM of `capacity` blocks, as its geometry
    makes them for a new volume: leaves = the smallest power of two >= capacity / 4,
    nodes numbered 1.. level by level, the first `cached_levels` levels kept locally."""
    leaves = 1
    while leaves < -(-capacity // 4):
        leaves *= 2
    levels = leaves.bit_length()  # L + 1
    cached = 2 ** min(cached_levels, levels) - 1
    return set(range(cached + 1, 2 * leaves))


def stored_buckets(data_dir):
    """Node number -> {file name: contents} of the fs store's Path ORAM buckets
    (`<store>/vol0/n/<shard>/<node>[.<slot>]`)."""
    out = {}
    d = data_dir / "store" / "vol0" / "n"
    if d.is_dir():
        for f in (f for f in d.rglob("*") if f.is_file()):
            out.setdefault(int(f.name.split(".")[0]), {})[f.name] = f.read_bytes()
    return out


FORMAT_LINE = re.compile(r"(\d+) buckets on the backend: (\d+) written now, (\d+) already written")


def test_format_writes_every_never_written_bucket_once_and_keeps_the_data(tmp_path):
    expected = uncached_buckets()
    assert len(expected) == 512  # the leaf level: 1023 nodes, 511 cached
    bodies = {"a/one": os.urandom(3000), "b/two": os.urandom(5000)}
    p = Proxy(tmp_path, *FORMAT_FLAGS)
    data = p.data_dir
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="fmt-b")
        for k, v in bodies.items():
            s3.put_object(Bucket="fmt-b", Key=k, Body=v)
        r = run("format", "--data-dir", str(data), *FORMAT_FLAGS)
        assert r.returncode != 0 and "in use by another oram-proxy" in r.stderr, \
            (r.returncode, r.stdout, r.stderr)
    finally:
        assert p.stop() == 0, p.logs()
    before = stored_buckets(data)
    # The writes reached some leaves, not all: the lazy-initialisation pattern.
    assert before and set(before) < expected, sorted(before)
    code, drawn = on_terminal(["format", "--data-dir", str(data), *FORMAT_FLAGS])
    assert code == 0, drawn
    assert "format   [" in drawn and "buckets" in drawn, drawn  # the progress bar
    m = FORMAT_LINE.search(drawn)
    assert m, drawn
    total, written, already = map(int, m.groups())
    assert total == len(expected), drawn
    assert already == len(before) and written == total - len(before), drawn
    assert "checkpoint epoch" in drawn, drawn
    after = stored_buckets(data)
    assert set(after) == expected
    # What was stored before is untouched.
    for node, files in before.items():
        assert after[node] == files, f"bucket {node} was rewritten"
    # A second run writes nothing and changes nothing.
    r = run("format", "--data-dir", str(data), *FORMAT_FLAGS)
    assert r.returncode == 0, r.stdout + r.stderr
    m = FORMAT_LINE.search(r.stdout)
    assert m and tuple(map(int, m.groups())) == (total, 0, total), r.stdout
    assert "nothing written" in r.stdout, r.stdout
    assert stored_buckets(data) == after
    # The proxy serves every object byte-exact afterwards.
    p = Proxy(tmp_path, *FORMAT_FLAGS)
    try:
        s3 = p.client()
        for k, v in bodies.items():
            assert s3.get_object(Bucket="fmt-b", Key=k)["Body"].read() == v, k
    finally:
        assert p.stop() == 0, p.logs()
    r = run("fsck", "--data-dir", str(data), *FORMAT_FLAGS)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr


def test_format_of_a_direct_volume_has_nothing_to_do(tmp_path):
    env = {"ORAM_PROXY_ROOT_USER": ACCESS, "ORAM_PROXY_ROOT_PASSWORD": SECRET}
    flags = ["--data-dir", str(tmp_path / "d"), "--engine", "direct", "--insecure-direct",
             *FORMAT_FLAGS]
    r = run("init", *flags, env=env)
    assert r.returncode == 0, r.stderr
    # The tree-top cache's flag does not apply to `direct`: a notice, not a refusal.
    assert 'tree_cache_mib does not apply to engine "direct"' in r.stderr, r.stderr
    assert "\x1b[" not in r.stderr, "no colour codes in logs that are not a terminal"
    store = tmp_path / "d" / "store"
    files = sorted(str(f.relative_to(store)) for f in store.rglob("*") if f.is_file())
    r = run("format", *flags)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing to format: the direct engine" in r.stdout, r.stdout
    assert sorted(str(f.relative_to(store)) for f in store.rglob("*") if f.is_file()) == files
    # No data directory, no volume: a clear refusal.
    r = run("format", "--data-dir", str(tmp_path / "none"))
    assert r.returncode != 0 and "holds no volume" in r.stderr, r.stderr


def test_a_volume_keeps_the_parameters_it_was_created_with(tmp_path):
    """A volume made with another engine, block size and capacity than the
    defaults is opened by commands that name none of them: they are taken from
    its volume.toml (so a change of the defaults in a later release leaves
    existing volumes alone). A flag that contradicts the volume is refused,
    naming the parameter."""
    env = {"ORAM_PROXY_ROOT_USER": ACCESS, "ORAM_PROXY_ROOT_PASSWORD": SECRET}
    d = str(tmp_path / "data")
    r = run("init", "--data-dir", d, "--engine", "ring", "--block-size", "8192",
            "--capacity-blocks", "2048", "--no-fsync", env=env)
    assert r.returncode == 0, r.stderr
    body = os.urandom(20000)
    p = Proxy(tmp_path, "--no-fsync")
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="keep")
        s3.put_object(Bucket="keep", Key="k", Body=body)
    finally:
        assert p.stop() == 0, p.logs()
    assert "block_size 8192 (default: 16384)" in p.logs(), p.logs()
    r = run("fsck", "--data-dir", d, "--no-fsync")
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr
    assert "1 objects" in r.stdout, r.stdout
    r = run("fsck", "--data-dir", d, "--block-size", "4096")
    assert r.returncode != 0 and "block_size 8192 (configured: 4096)" in r.stderr, r.stderr
    r = run("fsck", "--data-dir", d, "--engine", "path")
    assert r.returncode != 0 and "engine ring (configured: path)" in r.stderr, r.stderr
