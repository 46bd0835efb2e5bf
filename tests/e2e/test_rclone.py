"""rclone (Debian's) against the proxy: sync, check, copyto, cat --offset, purge."""

import os
import shutil
import subprocess

import pytest

RCLONE = shutil.which("rclone")
pytestmark = pytest.mark.skipif(RCLONE is None, reason="rclone is not installed (scripts/test.sh installs it)")


def rclone(proxy, *args, check=True):
    r = subprocess.run([RCLONE, *args], env=proxy.client_env(), capture_output=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"rclone {' '.join(args)} failed:\n{r.stdout.decode()}\n{r.stderr.decode()}")
    return r


def test_sync_check_copyto_cat_purge(proxy, tmp_path):
    proxy.client().create_bucket(Bucket="rclone-bkt")
    src = tmp_path / "src"
    for d in ["x", "x/y", "z"]:
        (src / d).mkdir(parents=True)
    files = {}
    for i, rel in enumerate(["top.txt", "x/a.bin", "x/y/b.txt", "z/c.dat", "z/empty"]):
        data = os.urandom(i * 33_333)
        (src / rel).write_bytes(data)
        files[rel] = data
    rclone(proxy, "sync", str(src), "oram:rclone-bkt/data")
    rclone(proxy, "check", str(src), "oram:rclone-bkt/data")
    # check notices a difference.
    (src / "top.txt").write_bytes(b"changed locally")
    r = rclone(proxy, "check", str(src), "oram:rclone-bkt/data", check=False)
    assert r.returncode != 0
    rclone(proxy, "sync", str(src), "oram:rclone-bkt/data")
    rclone(proxy, "check", str(src), "oram:rclone-bkt/data")
    # copyto and cat with an offset and count (a ranged GET).
    rclone(proxy, "copyto", str(src / "x" / "a.bin"), "oram:rclone-bkt/single/copy.bin")
    out = rclone(proxy, "cat", "--offset", "1000", "--count", "500", "oram:rclone-bkt/single/copy.bin").stdout
    assert out == files["x/a.bin"][1000:1500]
    # Listing and download match.
    listed = rclone(proxy, "lsf", "-R", "oram:rclone-bkt/data").stdout.decode().split()
    assert sorted(f for f in listed if not f.endswith("/")) == sorted(files)
    back = tmp_path / "back"
    rclone(proxy, "copy", "oram:rclone-bkt/data", str(back))
    for rel in files:
        assert (back / rel).read_bytes() == (src / rel).read_bytes(), rel
    # purge removes everything, bucket included.
    rclone(proxy, "purge", "oram:rclone-bkt")
    names = [b["Name"] for b in proxy.client().list_buckets()["Buckets"]]
    assert "rclone-bkt" not in names
