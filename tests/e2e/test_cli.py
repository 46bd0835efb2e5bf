"""The binary itself: first start, restart, start-up errors, graceful SIGTERM."""

import os
import subprocess
import threading

import pytest

from conftest import BIN, Proxy


def run(*args, env=None, timeout=60):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_first_start_creates_key_and_credentials(tmp_path):
    p = Proxy(tmp_path, creds=False)
    try:
        out = p.logs()
        assert "endpoint:   " + p.endpoint in out
        assert "secret key: " in out and "(not shown)" not in out
        key = p.data_dir / "master.key"
        assert oct(key.stat().st_mode & 0o777) == "0o600"
        assert oct((p.data_dir / "credentials.toml").stat().st_mode & 0o777) == "0o600"
        secret = out.split("secret key: ")[1].split()[0]
        access = out.split("access key: ")[1].split()[0]
        s3 = p.client(access, secret)
        s3.create_bucket(Bucket="first")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["first"]
    finally:
        assert p.stop() == 0
    # Second start: same credentials, not printed again.
    p = Proxy(tmp_path, creds=False)
    try:
        out = p.logs()
        assert "(not shown)" in out
        assert secret not in out
        p.client(access, secret).list_buckets()
    finally:
        assert p.stop() == 0
    # The secret never reaches the log (stderr).
    assert secret not in (tmp_path / "stderr.log").read_text()


def test_startup_errors(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('data_dir = "x"\nno_such_field = 1\n')
    r = run("serve", "--config", str(cfg))
    assert r.returncode != 0 and "no_such_field" in r.stderr
    data = tmp_path / "d"
    p = Proxy(tmp_path)
    assert p.stop() == 0
    data = p.data_dir
    r = run("serve", "--data-dir", str(data), "--s3-listen", "127.0.0.1:0", "--block-size", "8192")
    assert r.returncode != 0 and "created with other parameters" in r.stderr and "block_size 4096" in r.stderr
    os.chmod(data / "master.key", 0o644)
    r = run("serve", "--data-dir", str(data), "--s3-listen", "127.0.0.1:0")
    assert r.returncode != 0 and "chmod 600" in r.stderr
    (data / "master.key").unlink()
    r = run("serve", "--data-dir", str(data), "--s3-listen", "127.0.0.1:0")
    assert r.returncode != 0 and "master.key is missing" in r.stderr
    r = run("serve", "--engine", "nonsense")
    assert r.returncode != 0


def test_sigterm_finishes_in_flight_requests(tmp_path):
    p = Proxy(tmp_path)
    s3 = p.client()
    s3.create_bucket(Bucket="grace")
    data = os.urandom(6 << 20)
    result = {}

    def upload():
        try:
            result["etag"] = s3.put_object(Bucket="grace", Key="inflight", Body=data)["ETag"]
        except Exception as e:  # noqa: BLE001 - reported below
            result["error"] = e

    t = threading.Thread(target=upload)
    t.start()
    # Wait until the upload is being processed, then ask the proxy to stop.
    import time

    time.sleep(0.5)
    code = p.stop()
    t.join(timeout=120)
    assert code == 0, p.logs()
    assert "error" not in result, result.get("error")
    assert result["etag"].strip('"') == __import__("hashlib").md5(data).hexdigest()
    assert "stopped" in p.logs()


def test_example_config_parses():
    r = run("example-config")
    assert r.returncode == 0 and "[engine]" in r.stdout and "capacity_blocks" in r.stdout
