"""The cost report (`oram-workload cost`) on a tiny volume: `direct` and Path ORAM
at 16 KiB blocks, 2 MiB of capacity, two passes of 256 KiB objects, on the fs
back-end (no MinIO). The counts must be sane — direct sends one PUT per block
written and one GET per block read, Path ORAM more requests per access, reads
and rewrites its path, and keeps several times the capacity at rest — and the
dollars in the CSV must follow from the counts at the shipped price tables
(recomputed here from the TOML files, independently of the runner). A bad price
file must fail with an error naming the file and the field. Seconds, not minutes.
"""

import csv
import math
import os
import pathlib
import subprocess
import tomllib

import pytest

from conftest import ROOT, TARGET

RUNNER = os.environ.get("ORAM_WORKLOAD_BIN", str(TARGET / "debug" / "oram-workload"))
PROXY = os.environ.get("ORAM_PROXY_BIN", str(TARGET / "debug" / "oram-proxy"))
PRICES = ROOT / "tools" / "workload" / "prices"
GIB = 2 ** 30
BLOCK = 16384
OBJECT = 256 * 1024


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


@pytest.fixture(scope="module")
def cost(tmp_path_factory):
    out = tmp_path_factory.mktemp("cost") / "cost.md"
    r = subprocess.run(
        [RUNNER, "cost", "--engines", "direct,path", "--block-sizes", "16K", "--capacity", "2M",
         "--object-size", "256K", "--passes", "2", "--proxy", PROXY, "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, f"cost failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(out.with_suffix(".csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return out.read_text(), rows


def by_config(rows, table_prefix):
    return {r["config"]: r for r in rows if r["prices"].startswith(table_prefix)}


def test_the_counts_are_sane(cost):
    md, rows = cost
    r = by_config(rows, "AWS")
    assert set(r) == {"plain copy", "direct", "path"}
    n = {k: {f: float(v) for f, v in row.items() if f not in ("prices", "config", "levels_on_backend")}
         for k, row in r.items()}
    # 2 MiB at half fill: 4 objects of 256 KiB, written and read twice.
    for c in n.values():
        assert c["write_client_bytes"] == c["read_client_bytes"] == 2 * 4 * OBJECT
        assert c["write_object_ops"] == c["read_object_ops"] == 8
    d, p, plain = n["direct"], n["path"], n["plain copy"]
    blocks = 8 * OBJECT // BLOCK
    # The engines served every block of every object (the object layer may add
    # a few accesses of its own).
    assert blocks <= d["write_block_accesses"] <= 1.1 * blocks
    assert blocks <= p["write_block_accesses"] <= 1.1 * blocks
    # direct: one PUT per block written, one GET per block read, nothing else
    # but the DELETEs of blocks an overwrite replaced.
    assert d["write_put"] == d["write_block_accesses"]
    assert d["write_get"] + d["write_get_range"] == 0
    assert d["read_get"] == d["read_block_accesses"] and d["read_put"] == 0
    assert d["write_bytes_up"] >= 2 * 4 * OBJECT and d["read_bytes_down"] >= 2 * 4 * OBJECT
    assert d["write_head"] == d["read_head"] == p["write_head"] == p["read_head"] == 0
    # Path ORAM: more requests per access than direct, a read rewrites its path,
    # and the tree at rest is two slots per block of capacity (a new volume's
    # sizing; the stop deleted every superseded object): at most 2.5x.
    assert p["requests_per_block_access"] > 2 * d["requests_per_block_access"]
    assert p["read_put"] > 0 and p["read_get"] > p["read_block_accesses"]
    assert p["read_bytes_down"] > 4 * p["read_client_bytes"]
    assert 1.5 <= p["gib_per_gib_capacity"] <= 2.5, p["gib_per_gib_capacity"]
    assert close(p["gib_per_gib_capacity"], p["at_rest_bytes"] / p["capacity_bytes"])
    assert close(p["gib_per_gib_stored"], p["at_rest_bytes"] / p["live_bytes"])
    assert p["volume_bytes"] > 0
    # The plain copy: one request per object, 1x at rest.
    assert plain["write_put"] == 8 and plain["read_get"] == 8
    assert plain["gib_per_gib_capacity"] == plain["gib_per_gib_stored"] == 1.0
    assert int(r["path"]["levels_on_backend"]) > 0
    # S3's per-prefix request rates: one request per object lets the most through.
    for ph in ("write", "read"):
        k = f"s3_prefix_{ph}_bps"
        assert plain[k] > d[k] > p[k] > 0, ph
        assert close(plain[k], (3500 if ph == "write" else 5500) * OBJECT)
    for line in ("| plain copy | 16K |", "| direct | 16K |", "| path | 16K |",
                 "## Dollars at AWS S3 Standard", "## Dollars at IBM Cloud Object Storage",
                 "extrapolated", "## Throughput ceiling on one S3 key prefix",
                 "Every configuration ran to the end."):
        assert line in md, line


def test_the_dollars_follow_from_the_counts(cost):
    _, rows = cost
    for file in ("aws-s3-standard-us-east-1.toml", "ibm-cos-standard-us-south.toml"):
        t = tomllib.loads((PRICES / file).read_text())
        gb = t.get("gb_bytes", GIB)
        for row in by_config(rows, t["name"][:3]).values():
            c = {k: float(v) for k, v in row.items() if k not in ("prices", "config", "levels_on_backend")}
            what = f'{t["name"]} / {row["config"]}'
            assert close(float(row["usd_gib_month_capacity"]),
                         c["gib_per_gib_capacity"] * GIB / gb * t["storage_gb_month"]), what
            assert close(float(row["usd_gib_month_stored"]),
                         c["gib_per_gib_stored"] * GIB / gb * t["storage_gb_month"]), what
            for ph, col in (("write", "written"), ("read", "read")):
                k = GIB / c[f"{ph}_client_bytes"]
                req = (c[f"{ph}_get"] + c[f"{ph}_get_range"]) * t["get_per_1000"] \
                    + c[f"{ph}_put"] * t["put_per_1000"] + c[f"{ph}_list"] * t["list_per_1000"] \
                    + c[f"{ph}_head"] * t["head_per_1000"] + c[f"{ph}_delete"] * t["delete_per_1000"]
                req = req / 1000 * k
                down, up = c[f"{ph}_bytes_down"] * k / gb, c[f"{ph}_bytes_up"] * k / gb
                client_down = GIB / gb if ph == "read" else 0.0
                public = req + down * t["egress_internet_gb"] + up * t["ingress_gb"]
                private = req + (down + up) * t["transfer_in_region_gb"] \
                    + client_down * t["egress_internet_gb"]
                assert close(float(row[f"usd_gib_{col}_public"]), public), what
                assert close(float(row[f"usd_gib_{col}_private"]), private), what
                assert math.isfinite(public) and public > 0, what


def test_a_bad_price_file_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((PRICES / "aws-s3-standard-us-east-1.toml").read_text()
                   .replace("get_per_1000 = 0.0004\n", ""))
    r = subprocess.run(
        [RUNNER, "cost", "--engines", "direct", "--block-sizes", "16K", "--capacity", "1M",
         "--object-size", "256K", "--prices", str(bad),
         "--proxy", PROXY, "--out", str(tmp_path / "c.md")],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode != 0
    assert f"{bad}: field `get_per_1000` is missing" in r.stderr, r.stderr
    assert not (tmp_path / "c.md").exists()
