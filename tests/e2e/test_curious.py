"""The CURIOUS engine (`kind = "curious"`) through the real binary, with each of its
sub-ORAMs (a ternary Path ORAM tree, Z = 5; Ring ORAM): objects written through S3
(boto3) and Swift (python-swiftclient) read back byte for byte through both APIs,
then again after kill -9 and a restart on the same data directory, and `oram-proxy
fsck` finds every partition and the map of partitions consistent."""

import hashlib
import os
import subprocess

import pytest
import swiftclient

from conftest import ACCESS, BIN, SECRET, Proxy

SIZES = [0, 1, 4095, 4096, 4097, 100_000, 1_500_000]


def swift(proxy):
    return swiftclient.Connection(authurl=proxy.swift_auth, user=f"{ACCESS}:{ACCESS}",
                                  key=SECRET, retries=0)


def read_all(proxy, expected):
    s3, sw = proxy.client(), swift(proxy)
    for key, data in expected.items():
        got = s3.get_object(Bucket="cur", Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), f"S3 {key}"
        _, body = sw.get_object("cur", key)
        assert body == data, f"Swift {key}"
    listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="cur").get("Contents", []))
    assert listed == sorted(expected)


@pytest.mark.parametrize("sub", ["path", "ring"])
def test_curious_serves_s3_and_swift_byte_exactly_across_kill_and_restart(tmp_path, sub):
    cfg = tmp_path / "oram.toml"
    cfg.write_text(
        "[engine]\n"
        'kind = "curious"\n'
        f'curious_sub = "{sub}"\n'
        "block_size = 4096\n"
        "capacity_blocks = 4096\n"
    )
    work = tmp_path / "proxy"
    args = ["--config", str(cfg)]
    p = Proxy(work, *args, swift=True)
    expected = {}
    try:
        s3, sw = p.client(), swift(p)
        s3.create_bucket(Bucket="cur")
        for i, size in enumerate(SIZES):
            data = os.urandom(size)
            key = f"obj-{i}"
            if i % 2:
                sw.put_object("cur", key, data)
            else:
                s3.put_object(Bucket="cur", Key=key, Body=data)
            expected[key] = data
        # An overwrite through one API, a delete through the other.
        expected["obj-3"] = os.urandom(50_000)
        s3.put_object(Bucket="cur", Key="obj-3", Body=expected["obj-3"])
        sw.delete_object("cur", "obj-4")
        del expected["obj-4"]
        read_all(p, expected)
    finally:
        # Acknowledged writes survive a kill -9.
        p.kill()
    again = Proxy(work, *args, swift=True)
    try:
        read_all(again, expected)
        volume = (work / "data" / "volume.toml").read_text()
        assert "curious" in volume and f'"{sub}"' in volume, volume
    finally:
        code = again.stop()
    assert code == 0, again.logs()
    r = subprocess.run([BIN, "fsck", "--data-dir", str(work / "data"), *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
