"""Running under systemd: the unit file, sd_notify and credentials.

- `systemd-analyze verify` accepts deploy/oram-proxy.service (its ExecStart pointed
  at the binary under test), and `systemd-analyze security --offline` rates its
  hardening;
- the proxy talks the notification protocol to a real NOTIFY_SOCKET datagram
  listener: STATUS while starting, READY=1 once it serves, WATCHDOG=1 repeatedly
  (WATCHDOG_USEC), RELOADING=1/READY=1 around SIGHUP, STOPPING=1 at SIGTERM;
- secrets come from $CREDENTIALS_DIRECTORY (LoadCredential=) and nothing of them
  lands in the data directory.
"""

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import BIN, ROOT, Proxy, free_port, wait_port

UNIT = ROOT / "deploy" / "oram-proxy.service"
ANALYZE = shutil.which("systemd-analyze")


def unit_for_test(tmp_path):
    """The unit with ExecStart pointing at the binary under test (verify checks
    that the executable exists)."""
    text = UNIT.read_text().replace("/usr/local/bin/oram-proxy", str(pathlib.Path(BIN).resolve()))
    p = tmp_path / "oram-proxy.service"
    p.write_text(text)
    return p


def test_unit_file_verifies_and_is_hardened(tmp_path):
    assert ANALYZE, "systemd-analyze missing: scripts/test.sh installs Debian's systemd package"
    unit = unit_for_test(tmp_path)
    r = subprocess.run([ANALYZE, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=120)
    # verify prints problems of the unit on stderr and fails on errors. Lines about
    # other units of this container (no systemd runs here) are not the unit's.
    own = [l for l in r.stderr.splitlines() if "oram-proxy.service" in l]
    assert r.returncode == 0 and not own, r.stdout + r.stderr
    for needed in ["Type=notify", "WatchdogSec=", "User=oram-proxy", "StateDirectory=oram-proxy",
                   "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes",
                   "CapabilityBoundingSet=\n", "LoadCredential=master-key:", "TimeoutStopSec="]:
        assert needed in unit.read_text(), needed
    r = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    # systemd rates 0 (locked down) .. 10 (exposed); below 2 is "OK".
    assert float(m.group(1)) < 2.0, r.stdout


class NotifySocket:
    """A real notification socket, as systemd binds it."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.got = []

    def wait_for(self, pred, timeout=60):
        """Collects datagrams until one satisfies pred (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                msg = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            self.got.append(msg)
            if pred(msg):
                return msg
        raise AssertionError(f"no matching notification; got {self.got}")

    def close(self):
        self.sock.close()


def test_readiness_watchdog_reload_and_stopping_notifications(tmp_path):
    ns = NotifySocket(tmp_path / "notify.sock")
    try:
        p = Proxy(tmp_path / "p", "--no-fsync",
                  env={"NOTIFY_SOCKET": ns.path, "WATCHDOG_USEC": "300000"})
        try:
            ready = ns.wait_for(lambda m: "READY=1" in m.split("\n"))
            assert f"STATUS=serving S3 on 127.0.0.1:{p.port}" in ready
            # STATUS came before READY (the start is visible in `systemctl status`).
            assert any(m.startswith("STATUS=opening the volume") for m in ns.got[: ns.got.index(ready)])
            # Pings keep coming every half interval.
            for _ in range(3):
                ns.wait_for(lambda m: m == "WATCHDOG=1", timeout=30)
            p.proc.send_signal(signal.SIGHUP)
            ns.wait_for(lambda m: m == "RELOADING=1")
            ns.wait_for(lambda m: m.startswith("READY=1"))
            p.proc.send_signal(signal.SIGTERM)
            stopping = ns.wait_for(lambda m: m.startswith("STOPPING=1"))
            assert "STATUS=finishing in-flight requests" in stopping
            assert p.proc.wait(timeout=60) == 0, p.logs()
        finally:
            p.kill()
    finally:
        ns.close()


def test_secrets_come_from_the_credentials_directory(tmp_path):
    creds = tmp_path / "creds"
    creds.mkdir(mode=0o700)
    key = os.urandom(32).hex()
    token = os.urandom(20).hex()
    for name, value in [("master-key", key), ("metrics-token", token)]:
        f = creds / name
        f.write_text(value + "\n")
        os.chmod(f, 0o400)  # as systemd leaves them
    mport = free_port()
    env = {"CREDENTIALS_DIRECTORY": str(creds)}
    p = Proxy(tmp_path / "p", "--no-fsync", "--metrics-listen", f"127.0.0.1:{mport}", env=env)
    try:
        wait_port(mport)
        s3 = p.client()
        s3.create_bucket(Bucket="cred-b")
        s3.put_object(Bucket="cred-b", Key="k", Body=b"v")
        # The key is the credential: no key file appears in the data directory.
        assert not (p.data_dir / "master.key").exists()
        assert "master key: created" not in p.logs()
        # The configured token guards /metrics (also on loopback), not /health.
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10)
        assert e.value.code == 401
        req = urllib.request.Request(f"http://127.0.0.1:{mport}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
        assert b"oram_build_info" in urllib.request.urlopen(req, timeout=10).read()
        assert urllib.request.urlopen(f"http://127.0.0.1:{mport}/health", timeout=10).read() == b"ok\n"
        assert key not in p.logs() and token not in p.logs()
    finally:
        assert p.stop() == 0, p.logs()
    # Another key in the credential: refused as the wrong key.
    (creds / "master-key").chmod(0o600)
    (creds / "master-key").write_text(os.urandom(32).hex() + "\n")
    r = subprocess.run([BIN, "serve", "--data-dir", str(p.data_dir), "--s3-listen", f"127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
    assert r.returncode != 0 and "wrong key" in r.stderr, r.stderr
