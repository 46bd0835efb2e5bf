"""The speed benchmark in quick mode (`oram-workload speed --quick`): MinIO as the
yardstick and Path ORAM on the fs back-end (the embedded default), 512 KiB objects,
10 timed requests per latency phase. The report must hold every configuration with
every figure, and the analytical columns must follow from the volume's own
parameters (recomputed here from the CSV, independently of the runner). Nothing
here asserts that anything is fast.
"""

import csv
import math
import os
import pathlib
import subprocess

import pytest

from conftest import TARGET

RUNNER = os.environ.get("ORAM_WORKLOAD_BIN", str(TARGET / "debug" / "oram-workload"))
MINIO = os.environ.get("ORAM_TEST_MINIO")
SEAL = 45  # bytes sealing adds to an object (oram_seal::OVERHEAD)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b))


@pytest.fixture(scope="module")
def speed(tmp_path_factory):
    if not MINIO or not pathlib.Path(MINIO).is_file():
        pytest.skip("ORAM_TEST_MINIO does not name a MinIO binary")
    out = tmp_path_factory.mktemp("speed") / "speed.md"
    r = subprocess.run(
        [RUNNER, "speed", "--quick", "--minio", MINIO, "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, f"speed failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(out.with_suffix(".csv"), newline="") as f:
        rows = {row["config"]: row for row in csv.DictReader(f)}
    return out.read_text(), rows


def test_every_configuration_has_every_figure(speed):
    md, rows = speed
    assert set(rows) == {"minio", "path / fs"}
    for name, r in rows.items():
        for op in ("get", "put"):
            p50, p99 = float(r[f"{op}_p50_ms"]), float(r[f"{op}_p99_ms"])
            assert 0 < p50 <= p99, f"{name} {op}: {p50} {p99}"
        for k in ("put1_bps", "putn_bps", "get1_bps", "getn_bps"):
            assert float(r[k]) > 0, f"{name}: {k}"
        assert int(r["peak_rss_bytes"]) > 0, name
    assert float(rows["path / fs"]["cpu_s_per_gib"]) > 0
    for line in ("| minio |", "| path / fs |", "Command: `", "Link model: same machine, loopback",
                 "### Against the analytical limit", "### Terms", "Every request succeeded"):
        assert line in md, line


def test_the_analytical_columns_follow_from_the_volume(speed):
    _, rows = speed
    r = rows["path / fs"]
    bs, cap, z = int(r["block_size"]), int(r["capacity_blocks"]), int(r["z"])
    leaves, cached = int(r["leaves"]), int(r["cached_levels"])
    # The tree as a new Path volume's settings build it: 2^L ≥ ⌈capacity / 4⌉
    # leaves (two slots per block; `PathSettings::leaf_divisor`).
    assert leaves == 1 << max(0, math.ceil(cap / 4) - 1).bit_length()
    levels = leaves.bit_length()
    assert int(r["levels"]) == levels
    uncached = levels - min(cached, levels)
    assert int(r["uncached_levels"]) == uncached and uncached > 0
    # Path ORAM reads and writes every uncached bucket of a path per access.
    assert float(r["overhead_blocks"]) == 2 * z * uncached
    obj = z * (8 + bs) + SEAL
    assert int(r["object_len_model"]) == obj
    assert int(r["object_len_seen"]) == obj, "the buckets on disk have another size"
    overhead = 2 * uncached * obj / bs
    assert close(float(r["overhead_get"]), overhead) and close(float(r["overhead_put"]), overhead)
    # As many bytes read as written: the limit uses both raw rates.
    raw_r, raw_w = float(r["raw_read_bps"]), float(r["raw_write_bps"])
    assert raw_r > 0 and raw_w > 0
    limit = 1 / (overhead / 2 / raw_r + overhead / 2 / raw_w)
    assert close(float(r["limit_put_bps"]), limit) and close(float(r["limit_get_bps"]), limit)
    for k in ("put1", "putn", "get1", "getn"):
        assert close(float(r[f"achieved_{k}"]), float(r[f"{k}_bps"]) / limit), k
    # The proxy's own measurement (every phase) against the model: every access
    # writes its whole path (a round's paths share a few top buckets), but on a fresh
    # volume a read of a never-written bucket moves nothing, so the measured figure
    # lies between the write half and the whole.
    measured = float(r["overhead_measured"])
    assert 0.45 * overhead < measured < 1.05 * overhead, (measured, overhead)
    local, backend = int(r["local_bytes"]), int(r["backend_bytes"])
    assert local > 0 and backend > 0
    assert close(float(r["outsource_ratio"]), backend / local)
