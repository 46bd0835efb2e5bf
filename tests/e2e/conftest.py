"""Fixtures of the end-to-end tests: the real oram-proxy binary on 127.0.0.1.

Every proxy started here listens on a free loopback port, lives in a temporary
data directory, and is stopped by PID (SIGTERM, then SIGKILL after a bounded
wait). The binary is $CARGO_TARGET_DIR (default target)/debug/oram-proxy unless
ORAM_PROXY_BIN says otherwise.
"""

import os
import pathlib
import random
import signal
import socket
import subprocess
import time
import urllib.request

import boto3
import pytest
from botocore.config import Config

def pytest_configure(config):
    config.addinivalue_line(
        "markers", "long(rank): a test of several minutes; run first, the highest rank first")


def pytest_collection_modifyitems(config, items):
    """Long tests first, so that scripts/test.sh's parallel workers (pytest-xdist,
    `--dist worksteal`) start them at once and share out the short ones meanwhile."""
    def rank(item):
        m = item.get_closest_marker("long")
        return -(m.args[0] if m and m.args else 0)
    items.sort(key=rank)  # stable: the others keep their order


ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
BIN = os.environ.get("ORAM_PROXY_BIN", str(TARGET / "debug" / "oram-proxy"))
ACCESS = "e2e-admin"
SECRET = "e2e-secret-key-0123"


# Ports handed out by this process: never handed out twice, since a test often
# picks several before the servers bind them (a port picked for a node's metrics,
# free until that node starts, must not be picked again for the front meanwhile).
_HANDED_OUT = set()


def _port_range():
    """This process's share of 20000-31999: each pytest-xdist worker (gw0, gw1,
    ...) its own sixth, so two workers never pick the same port between one's
    check and its server's bind (seen in CI: a front's S3 port already in use)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = 2000
    low = 20000 + (index % 6) * width
    return low, low + width - 1


def free_port():
    """A port free on 127.0.0.1 now and not handed out before by this process,
    below Linux's ephemeral range (32768 and up): the kernel hands ports of that
    range to every outgoing connection, which could take one between this check
    and the server's bind (seen: "Address already in use" with the tests running
    two at a time). Each xdist worker picks from a range of its own."""
    low, high = _port_range()
    if len(_HANDED_OUT) > (high - low) // 2:
        _HANDED_OUT.clear()  # a long session: the earliest tests' servers are long gone
    for _ in range(400):
        port = random.randint(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    """Waits until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on port {port} after {timeout} s")


class Process:
    """Stopping a process started as `self.proc` (SIGTERM, or SIGKILL)."""

    def stop(self, timeout=60):
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return self.proc.returncode

    def kill(self):
        """SIGKILL and wait."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Proxy(Process):
    """One oram-proxy process."""

    def __init__(self, workdir, *args, env=None, creds=True, swift=False, tls=False, wait=True):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.port = free_port()
        # With tls=True the listeners speak HTTPS (a certificate is configured).
        scheme = "https" if tls else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{self.port}"
        # The Swift API, on its own free port when asked for.
        self.swift_port = free_port() if swift else None
        self.swift_auth = f"{scheme}://127.0.0.1:{self.swift_port}/auth/v1.0" if swift else None
        swift_args = ["--swift-listen", f"127.0.0.1:{self.swift_port}"] if swift else []
        full_env = dict(os.environ)
        full_env["RUST_LOG"] = "info"
        if creds:
            full_env["ORAM_PROXY_ROOT_USER"] = ACCESS
            full_env["ORAM_PROXY_ROOT_PASSWORD"] = SECRET
        full_env.update(env or {})
        self.stdout = open(self.workdir / "stdout.log", "w+")
        self.stderr = open(self.workdir / "stderr.log", "w+")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--data-dir", str(self.data_dir), "--s3-listen", f"127.0.0.1:{self.port}", *swift_args, *args],
            stdout=self.stdout,
            stderr=self.stderr,
            env=full_env,
            cwd=self.workdir,
        )
        if wait:
            self.wait_listening()

    def wait_listening(self, timeout=60):
        """Waits until the proxy serves (its banner out, its ports accepting)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"oram-proxy exited with {self.proc.returncode}: {self.logs()}")
            # Ready once the banner's last line is out (it is printed after every
            # listener is bound and before the proxy waits for signals): a connection
            # alone could reach another process that took the port, or the socket
            # itself (a self-connect on an ephemeral port).
            if "  secret key: " not in (self.workdir / "stdout.log").read_text():
                time.sleep(0.1)
                continue
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                if self.swift_port:
                    with socket.create_connection(("127.0.0.1", self.swift_port), timeout=0.5):
                        pass
                return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"oram-proxy did not start listening within {timeout} s")

    def logs(self):
        self.stdout.flush()
        self.stderr.flush()
        return (self.workdir / "stdout.log").read_text() + (self.workdir / "stderr.log").read_text()

    def metrics_token(self):
        """The operator endpoint's token the proxy generated into its data directory."""
        return (self.data_dir / "metrics.token").read_text().strip()

    def operator_get(self, port, path, token=None, timeout=30):
        """GET `path` from this proxy's operator endpoint on `port` (plain HTTP on
        loopback) with its bearer token; the response, read: (status, headers, body)."""
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {token or self.metrics_token()}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()

    def client(self, access=ACCESS, secret=SECRET, verify=None):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            verify=verify,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                retries={"max_attempts": 2, "mode": "standard"},
            ),
        )

    def client_env(self):
        """Environment for aws cli and rclone subprocesses."""
        env = dict(os.environ)
        env.pop("AWS_CA_BUNDLE", None)
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=str(self.workdir / "no-aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(self.workdir / "no-aws-credentials"),
            RCLONE_CONFIG=str(self.workdir / "rclone.conf"),
            RCLONE_CONFIG_ORAM_TYPE="s3",
            RCLONE_CONFIG_ORAM_PROVIDER="Other",
            RCLONE_CONFIG_ORAM_ACCESS_KEY_ID=ACCESS,
            RCLONE_CONFIG_ORAM_SECRET_ACCESS_KEY=SECRET,
            RCLONE_CONFIG_ORAM_ENDPOINT=self.endpoint,
            RCLONE_CONFIG_ORAM_REGION="us-east-1",
            RCLONE_CONFIG_ORAM_FORCE_PATH_STYLE="true",
        )
        return env


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    p = Proxy(tmp_path_factory.mktemp("proxy"))
    yield p
    code = p.stop()
    assert code == 0, f"oram-proxy exited with {code} on SIGTERM:\n{p.logs()}"


@pytest.fixture(scope="module")
def swift_proxy(tmp_path_factory):
    """A proxy serving both S3 and Swift."""
    p = Proxy(tmp_path_factory.mktemp("swift-proxy"), swift=True)
    yield p
    code = p.stop()
    assert code == 0, f"oram-proxy exited with {code} on SIGTERM:\n{p.logs()}"


@pytest.fixture
def s3(proxy):
    return proxy.client()


def swift_connection(proxy):
    """A python-swiftclient connection to `proxy`'s Swift API (no retries)."""
    import swiftclient
    return swiftclient.Connection(authurl=proxy.swift_auth, user=f"{ACCESS}:{ACCESS}",
                                  key=SECRET, retries=0)


def write_mixed(proxy, bucket, sizes):
    """Creates `bucket` and writes an object of each size, alternately through S3
    and Swift; overwrites obj-3 through S3 and deletes obj-4 through Swift.
    Returns what the bucket must hold."""
    import os
    s3, sw = proxy.client(), swift_connection(proxy)
    s3.create_bucket(Bucket=bucket)
    expected = {}
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        key = f"obj-{i}"
        if i % 2:
            sw.put_object(bucket, key, data)
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=data)
        expected[key] = data
    expected["obj-3"] = os.urandom(50_000)
    s3.put_object(Bucket=bucket, Key="obj-3", Body=expected["obj-3"])
    sw.delete_object(bucket, "obj-4")
    del expected["obj-4"]
    return expected


def read_back_both(proxy, bucket, expected):
    """Every object of `expected` reads back byte for byte through S3 and Swift,
    and the S3 listing is exactly its keys."""
    import hashlib
    s3, sw = proxy.client(), swift_connection(proxy)
    for key, data in expected.items():
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), f"S3 {key}"
        _, body = sw.get_object(bucket, key)
        assert body == data, f"Swift {key}"
    listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert listed == sorted(expected)


def fsck_clean(proxy, *flags):
    """`oram-proxy fsck` on the stopped `proxy`'s data directory finds nothing wrong."""
    r = subprocess.run([BIN, "fsck", "--data-dir", str(proxy.data_dir), *flags],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
