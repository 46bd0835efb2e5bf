"""The binary itself: first start, restart, start-up errors, graceful SIGTERM."""

import os
import subprocess
import threading
import time

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
    assert r.returncode != 0 and "created with other parameters" in r.stderr and "block_size 16384" in r.stderr
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


def test_unreachable_backend_is_a_clear_startup_error(tmp_path):
    from conftest import free_port

    dead = free_port()  # nothing listens there
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y")
    r = run(
        "serve", "--data-dir", str(tmp_path / "d"), "--s3-listen", "127.0.0.1:0",
        "--backend", "s3://nowhere/p", "--backend-endpoint", f"http://127.0.0.1:{dead}",
        env=env, timeout=120,
    )
    assert r.returncode != 0
    assert "S3 back-end bucket" in r.stderr and "not usable" in r.stderr, r.stderr
    r = run("serve", "--backend", "ftp://x")
    assert r.returncode != 0 and "expected file:///path or s3://bucket/prefix" in r.stderr


@pytest.mark.skipif(not os.environ.get("ORAM_TEST_MINIO"), reason="needs MinIO (scripts/test.sh builds it)")
def test_init_and_serve_on_minio_from_flags(tmp_path):
    from conftest import free_port, wait_port

    port = free_port()
    minio = subprocess.Popen(
        [os.environ["ORAM_TEST_MINIO"], "server", "--quiet", "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{free_port()}", str(tmp_path / "minio")],
        env=dict(os.environ, MINIO_ROOT_USER="miniouser", MINIO_ROOT_PASSWORD="miniosecret123", MINIO_BROWSER="off"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        flags = ["--backend", "s3://oram-bkt/pre/fix", "--backend-endpoint", f"http://127.0.0.1:{port}", "--backend-region", "us-east-1"]
        aws_env = {"AWS_ACCESS_KEY_ID": "miniouser", "AWS_SECRET_ACCESS_KEY": "miniosecret123"}
        deadline = 60
        for _ in range(deadline):  # MinIO may need a moment after opening its port
            r = run("init", "--data-dir", str(tmp_path / "proxy" / "data"), *flags, env=dict(os.environ, **aws_env))
            if r.returncode == 0:
                break
            time.sleep(1)
        assert r.returncode == 0, r.stderr
        assert 'backend bucket "oram-bkt" ready' in r.stdout
        (tmp_path / "proxy").mkdir(exist_ok=True)
        p = Proxy(tmp_path / "proxy", *flags, env=aws_env)
        try:
            assert "backend:    s3://oram-bkt/pre/fix at http://127.0.0.1:" in p.logs()
            s3 = p.client()
            s3.create_bucket(Bucket="via-minio")
            s3.put_object(Bucket="via-minio", Key="k", Body=b"stored in MinIO, obliviously")
            assert s3.get_object(Bucket="via-minio", Key="k")["Body"].read() == b"stored in MinIO, obliviously"
        finally:
            assert p.stop() == 0
        # The sealed buckets are in MinIO under the prefix.
        stored = list((tmp_path / "minio" / "oram-bkt" / "pre" / "fix" / "vol0" / "n").iterdir())
        assert stored, "no ORAM buckets in MinIO"
    finally:
        minio.kill()
        minio.wait(timeout=30)


def test_second_proxy_on_the_same_data_dir_is_refused_and_harms_nothing(tmp_path):
    p = Proxy(tmp_path)
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="first-owner")
        s3.put_object(Bucket="first-owner", Key="k", Body=b"still here")
        r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0")
        assert r.returncode != 0 and "in use by another oram-proxy" in r.stderr, r.stderr
        assert s3.get_object(Bucket="first-owner", Key="k")["Body"].read() == b"still here"
    finally:
        assert p.stop() == 0


def test_a_damaged_state_database_names_recover_and_nothing_panics(tmp_path):
    p = Proxy(tmp_path)
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="damage")
        s3.put_object(Bucket="damage", Key="k", Body=b"x" * 100_000)
    finally:
        assert p.stop() == 0
    state = p.data_dir / "state.redb"
    good = state.read_bytes()
    # Every page after redb's header damaged: the tables and the allocator state.
    state.write_bytes(good[:4096] + bytes(b ^ 0x5A for b in good[4096:]))
    data = str(p.data_dir)
    for cmd, extra in [
        ("fsck", []),
        ("stats", []),
        ("compact", []),
        ("serve", ["--s3-listen", "127.0.0.1:0"]),
    ]:
        r = run(cmd, "--data-dir", data, *extra)
        assert r.returncode != 0 and r.returncode != 101, (cmd, r.returncode, r.stderr)
        assert "panicked" not in r.stderr, (cmd, r.stderr)
        assert "state.redb is damaged" in r.stderr and "oram-proxy recover" in r.stderr, (cmd, r.stderr)
        if cmd == "fsck":
            assert r.returncode == 2, "fsck exits 2 when it cannot run"
    # Reported, not repaired behind the operator's back: still refused.
    r = run("fsck", "--data-dir", data)
    assert r.returncode == 2 and "state.redb is damaged" in r.stderr, r.stderr


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    p = Proxy(tmp_path)
    assert p.stop() == 0
    for args in (["stats", "--data-dir", str(p.data_dir)], ["example-config"]):
        proc = subprocess.Popen([BIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader (`| head -0`) is gone before anything is written
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (args, proc.returncode, err)
        assert b"panicked" not in err, err
