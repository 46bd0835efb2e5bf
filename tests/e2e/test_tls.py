"""TLS on the S3 and Swift listeners, with real clients that verify the server.

`oram-proxy init --tls-self-signed` makes a private CA and a server certificate;
aws cli, boto3 and python-swiftclient (library and CLI) trust only that CA file
(no verification is switched off anywhere, and the same clients without the CA
fail). SIGHUP swaps the certificate for new handshakes while an established
connection goes on; a broken reload keeps the old certificate. Plain HTTP on a
non-loopback address is refused without consent (checked before anything binds).
"""

import hashlib
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import botocore.exceptions
import pytest
import swiftclient

from conftest import ACCESS, BIN, SECRET, Proxy, free_port, wait_port

VENV_BIN = os.path.dirname(sys.executable)
AWS = shutil.which("aws", path=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
SWIFT_CLI = shutil.which("swift", path=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))


def init_tls(data_dir, *names):
    """`oram-proxy init --tls-self-signed` into data_dir; returns its stdout."""
    env = dict(os.environ, ORAM_PROXY_ROOT_USER=ACCESS, ORAM_PROXY_ROOT_PASSWORD=SECRET)
    args = [BIN, "init", "--data-dir", str(data_dir), "--no-fsync", "--tls-self-signed"]
    for n in names:
        args += ["--tls-name", n]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def peer_fingerprint(port, cafile):
    """SHA-256 of the certificate a new TLS connection to 127.0.0.1:port gets."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()


def banner_fingerprint(text):
    line = next(l for l in text.splitlines() if "SHA-256" in l)
    return line.split("SHA-256 ")[1].split(")")[0].replace(":", "").lower()


def test_clients_verify_the_generated_ca_on_s3_and_swift(tmp_path):
    out = init_tls(tmp_path / "data")
    assert "created a private CA and a TLS certificate for localhost, 127.0.0.1" in out
    tls_dir = tmp_path / "data" / "tls"
    ca = tls_dir / "ca.pem"
    assert oct((tls_dir / "key.pem").stat().st_mode & 0o777) == "0o600"
    p = Proxy(tmp_path, "--no-fsync", swift=True, tls=True)
    try:
        logs = p.logs()
        assert f"endpoint:   https://127.0.0.1:{p.port}" in logs
        assert f"swift auth: https://127.0.0.1:{p.swift_port}/auth/v1.0" in logs
        assert f"verify with the CA certificate {ca}" in logs
        # The certificate served is the one the banner names.
        assert peer_fingerprint(p.port, ca) == banner_fingerprint(logs)

        # boto3, verifying against the CA.
        s3 = p.client(verify=str(ca))
        s3.create_bucket(Bucket="tls-b")
        body = os.urandom(300_000)
        s3.put_object(Bucket="tls-b", Key="k", Body=body)
        assert s3.get_object(Bucket="tls-b", Key="k")["Body"].read() == body
        # Without the CA the same client refuses the server...
        with pytest.raises(botocore.exceptions.SSLError):
            p.client(verify=True).list_buckets()
        # ...and plain HTTP on the TLS port gets no HTTP answer at all.
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=30)
        with pytest.raises((OSError, http.client.HTTPException)):
            conn.request("GET", "/")
            conn.getresponse()
        conn.close()

        # aws cli, verifying against the CA (AWS_CA_BUNDLE).
        env = p.client_env()
        env["AWS_CA_BUNDLE"] = str(ca)
        src = tmp_path / "upload.bin"
        src.write_bytes(os.urandom(2_000_000))
        r = subprocess.run([AWS, "--endpoint-url", p.endpoint, "s3", "cp", str(src), "s3://tls-b/cli.bin"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        back = tmp_path / "back.bin"
        r = subprocess.run([AWS, "--endpoint-url", p.endpoint, "s3", "cp", "s3://tls-b/cli.bin", str(back)],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert back.read_bytes() == src.read_bytes()
        # The system's CA bundle does not vouch for the proxy.
        env["AWS_CA_BUNDLE"] = "/etc/ssl/certs/ca-certificates.crt"
        r = subprocess.run([AWS, "--endpoint-url", p.endpoint, "s3", "ls"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "SSL" in r.stderr, r.stderr

        # python-swiftclient, library and CLI, verifying against the CA.
        c = swiftclient.Connection(authurl=p.swift_auth, user=f"{ACCESS}:{ACCESS}", key=SECRET,
                                   cacert=str(ca), retries=0)
        c.put_container("tls-ctr")
        c.put_object("tls-ctr", "o", contents=body)
        assert c.get_object("tls-ctr", "o")[1] == body
        # The object written through S3 reads through Swift over TLS too.
        assert c.get_object("tls-b", "k")[1] == body
        env = dict(os.environ, ST_AUTH=p.swift_auth, ST_USER=f"{ACCESS}:{ACCESS}", ST_KEY=SECRET)
        r = subprocess.run([SWIFT_CLI, "--os-cacert", str(ca), "list", "tls-ctr"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.split() == ["o"], r.stderr
        r = subprocess.run([SWIFT_CLI, "list", "tls-ctr"], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "certificate verify failed" in (r.stdout + r.stderr).lower()
    finally:
        assert p.stop() == 0, p.logs()


def metric(p, port, name):
    _, _, body = p.operator_get(port, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def wait_log(p, text, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in p.logs():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged:\n{p.logs()}")


def test_sighup_swaps_the_certificate_without_dropping_connections(tmp_path):
    init_tls(tmp_path / "a")
    init_tls(tmp_path / "b")
    a, b = tmp_path / "a" / "tls", tmp_path / "b" / "tls"
    live = tmp_path / "live"
    live.mkdir()
    for f in ("cert.pem", "key.pem"):
        shutil.copy2(a / f, live / f)
    mport = free_port()
    p = Proxy(tmp_path / "p", "--no-fsync", "--tls-cert", str(live / "cert.pem"), "--tls-key",
              str(live / "key.pem"), "--metrics-listen", f"127.0.0.1:{mport}", tls=True)
    try:
        wait_port(mport)
        fa = peer_fingerprint(p.port, a / "ca.pem")
        # An established connection: keep-alive requests before and after the reload.
        ctx = ssl.create_default_context(cafile=str(a / "ca.pem"))
        conn = http.client.HTTPSConnection("127.0.0.1", p.port, context=ctx, timeout=30)
        conn.request("GET", "/")
        r = conn.getresponse()
        r.read()
        assert r.status == 403  # anonymous: AccessDenied, over TLS
        sock_before = conn.sock

        for f in ("cert.pem", "key.pem"):
            shutil.copy2(b / f, live / f)
        p.proc.send_signal(signal.SIGHUP)
        wait_log(p, "SIGHUP: TLS certificate reloaded")
        assert metric(p, mport, 'oram_tls_reloads_total{result="ok"}') == 1

        # The old connection goes on (same socket, same certificate)...
        conn.request("GET", "/")
        r = conn.getresponse()
        r.read()
        assert r.status == 403 and conn.sock is sock_before
        assert hashlib.sha256(conn.sock.getpeercert(binary_form=True)).hexdigest() == fa
        conn.close()
        # ...new handshakes get the new certificate, which only the new CA vouches for.
        assert peer_fingerprint(p.port, b / "ca.pem") != fa
        with pytest.raises(ssl.SSLCertVerificationError):
            peer_fingerprint(p.port, a / "ca.pem")
        s3 = p.client(verify=str(b / "ca.pem"))
        s3.create_bucket(Bucket="after-reload")

        # A broken reload (key of another certificate): refused, the old one stays.
        shutil.copy2(a / "key.pem", live / "key.pem")
        p.proc.send_signal(signal.SIGHUP)
        wait_log(p, "reload failed, still serving the old certificate")
        assert metric(p, mport, 'oram_tls_reloads_total{result="failed"}') == 1
        assert [x["Name"] for x in s3.list_buckets()["Buckets"]] == ["after-reload"]
    finally:
        assert p.stop() == 0, p.logs()


def test_plain_http_beyond_loopback_needs_consent(tmp_path):
    # Refused before anything binds or touches the data directory.
    port = free_port()
    r = subprocess.run([BIN, "serve", "--data-dir", str(tmp_path / "d"), "--s3-listen", f"0.0.0.0:{port}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "not a loopback address and TLS is off" in r.stderr and "--allow-plain-http" in r.stderr
    assert not (tmp_path / "d" / "volume.toml").exists()
    r = subprocess.run([BIN, "serve", "--data-dir", str(tmp_path / "d"), "--s3-listen", f"127.0.0.1:{port}",
                        "--swift-listen", f"0.0.0.0:{free_port()}"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "swift.listen" in r.stderr
    # A key file readable by others is refused like the master key.
    init_tls(tmp_path / "t")
    os.chmod(tmp_path / "t" / "tls" / "key.pem", 0o640)
    r = subprocess.run([BIN, "serve", "--data-dir", str(tmp_path / "t"), "--s3-listen", f"127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "chmod 600" in r.stderr
