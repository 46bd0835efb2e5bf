"""The workload runner in quick mode: it runs the thesis's workloads A-E against
the no-ORAM baseline and every engine the proxy offers (MinIO and the link-shaping
relay on 127.0.0.1), and its report must be complete and internally consistent.

This re-checks the CSV independently of the runner's own consistency check: the
ratios are recomputed from the raw counts, and the client side of every
configuration must equal the baseline's (same seed, same operations). Nothing
here asserts that anything is fast.
"""

import csv
import os
import pathlib
import subprocess

import pytest

from conftest import TARGET

RUNNER = os.environ.get("ORAM_WORKLOAD_BIN", str(TARGET / "debug" / "oram-workload"))
MINIO = os.environ.get("ORAM_TEST_MINIO")

PRICES = {  # $/1000 GET, $/1000 PUT+LIST, $/GB egress
    "aws_s3": (0.0004, 0.005, 0.09),
    "google_cloud_storage": (0.0004, 0.005, 0.11),
    "rackspace_cloud_files": (0.0, 0.0, 0.12),
    "ibm_cloud_object_storage": (0.0004, 0.005, 0.09),
    "oracle_object_storage": (0.00034, 0.00034, 0.0),
}


def close(a, b, rel=2e-3, abs_=1e-6):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not MINIO or not pathlib.Path(MINIO).is_file():
        pytest.skip("ORAM_TEST_MINIO does not name a MinIO binary")
    out = tmp_path_factory.mktemp("workload")
    r = subprocess.run(
        [RUNNER, "--quick", "--minio", MINIO, "--out", str(out), "--seed", "7"],
        capture_output=True, text=True, timeout=1200,
    )
    assert r.returncode == 0, f"runner failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return out, rows


def test_every_workload_and_configuration_is_reported(report):
    out, rows = report
    configs = {(r["workload"], r["config"]) for r in rows}
    for w in "ABCDE":
        for c in ("baseline", "direct", "path"):
            assert (w, c) in configs, f"{w}/{c} missing"
    md = (out / "report.md").read_text()
    for w in "ABCDE":
        assert f"## {w} — " in md
        png = (out / f"{w}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "Every request succeeded" in md


def test_counts_and_ratios_are_consistent(report):
    _, rows = report
    base = {r["workload"]: r for r in rows if r["config"] == "baseline"}
    for r in rows:
        i = {k: float(v) for k, v in r.items() if k not in ("workload", "config")}
        b = {k: float(v) for k, v in base[r["workload"]].items() if k not in ("workload", "config")}
        what = f'{r["workload"]}/{r["config"]}/{r["block_size"]}'
        assert i["failures"] == 0, what
        # Same seed and operations: the client side is identical everywhere.
        for k in ("reads", "writes", "client_bytes_up", "client_bytes_down"):
            assert i[k] == b[k], f"{what}: {k}"
        assert i["reads"] > 0 and i["writes"] > 0 and i["client_bytes_up"] > 0, what
        client = i["client_bytes_up"] + i["client_bytes_down"]
        backend = i["backend_bytes_up"] + i["backend_bytes_down"]
        assert close(i["bandwidth_overhead"], backend / client), what
        assert close(i["slowdown"], i["runtime_s"] / b["runtime_s"]), what
        assert close(i["relative_response_time"], i["avg_rw_ms"] / b["avg_rw_ms"]), what
        for p, (get, put, egress) in PRICES.items():
            cost = (i["backend_get"] * get + (i["backend_put"] + i["backend_list"]) * put) / 1000 \
                + i["backend_bytes_down"] / 1e9 * egress
            assert close(i[f"cost_usd_{p}"], cost, abs_=1e-7), f"{what}: {p}"
            if b[f"cost_usd_{p}"] > 0:
                assert close(i[f"cost_multiplier_{p}"], cost / b[f"cost_usd_{p}"], rel=5e-3), f"{what}: {p}"
        if r["config"] == "baseline":
            # Without a proxy the storage server sees exactly the client's traffic.
            assert i["backend_bytes_up"] == i["client_bytes_up"], what
            assert i["backend_bytes_down"] == i["client_bytes_down"], what
            assert i["backend_get"] == i["reads"], what
        else:
            bs = i["block_size"]
            # Every written byte reached the backend, in objects of at least a block.
            assert i["backend_bytes_up"] >= i["client_bytes_up"], what
            assert i["backend_put"] > 0 and i["backend_bytes_up"] / i["backend_put"] >= bs, what
            if r["config"] == "direct":
                # Without ORAM every read fetches its blocks (an ORAM may serve a
                # small volume from its tree-top cache).
                assert i["backend_bytes_down"] > 0, what
            assert i["remote_bytes"] > 0 and i["local_bytes"] > 0, what
            assert i["proxy_peak_rss_bytes"] > 0, what
        if r["config"] == "path":
            # Path ORAM reads a whole path per access (its leaf level is never
            # cached) and moves more than the blocks the client touched.
            assert i["backend_get"] >= i["reads"], what
            assert i["bandwidth_overhead"] > 2, what


def test_the_runner_drives_the_swift_api(tmp_path):
    """`--api swift`: the proxies are driven through their Swift front-end (auth
    v1), the baseline through S3; the same operations, verified bytes, no failure."""
    if not MINIO or not pathlib.Path(MINIO).is_file():
        pytest.skip("ORAM_TEST_MINIO does not name a MinIO binary")
    r = subprocess.run(
        [RUNNER, "--quick", "--api", "swift", "--workloads", "D", "--engines", "direct,path",
         "--minio", MINIO, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, f"runner failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(tmp_path / "results.csv", newline="") as f:
        rows = {row["config"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"baseline", "direct", "path"}
    for c in ("direct", "path"):
        assert rows[c]["failures"] == "0"
        for k in ("reads", "writes", "client_bytes_up", "client_bytes_down"):
            assert rows[c][k] == rows["baseline"][k], f"{c}: {k}"
    assert "proxies driven through Swift" in (tmp_path / "report.md").read_text()
