"""`oram-proxy user add|list|remove|rotate` on a running proxy: a change is
served at once (no restart), survives a restart, needs the operator endpoint's
token, and no secret key shows in `user list` or in the proxy's logs."""

import re
import subprocess
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import ACCESS, BIN, SECRET, Proxy, free_port, wait_port


def user(p, port, *args, ok=True):
    """Runs `oram-proxy user ARGS` against `p`'s operator endpoint on `port`."""
    r = subprocess.run(
        [BIN, "user", *args, "--data-dir", str(p.data_dir), "--url", f"http://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, f"user {args}: {r.stdout}{r.stderr}"
    else:
        assert r.returncode != 0, f"user {args} succeeded: {r.stdout}"
    return r


def secret_of(out):
    m = re.search(r"^  secret key: (\S+)$", out, re.M)
    assert m, out
    return m.group(1)


def swift_login(p, user, key):
    """The status of a Swift v1 login as `user:user` with `key`."""
    req = urllib.request.Request(p.swift_auth, headers={"X-Auth-User": f"{user}:{user}", "X-Auth-Key": key})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def refused(client, code):
    with pytest.raises(ClientError) as e:
        client.list_buckets()
    assert e.value.response["Error"]["Code"] == code, e.value.response


def test_users_change_while_serving_and_persist(tmp_path):
    port = free_port()
    p = Proxy(tmp_path / "p", "--metrics-listen", f"127.0.0.1:{port}", "--no-fsync", swift=True)
    secrets = []
    try:
        wait_port(port)
        # Without the token, /users answers 401 and changes nothing.
        req = urllib.request.Request(f"http://127.0.0.1:{port}/users", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 401
        # With it, a body over 4 KiB is refused.
        req = urllib.request.Request(f"http://127.0.0.1:{port}/users", data=b" " * 5000, method="POST",
                                     headers={"Authorization": f"Bearer {p.metrics_token()}"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 413

        # Add a user with a generated secret: served at once.
        out = user(p, port, "add", "--access-key", "alice").stdout
        alice_old = secret_of(out)
        secrets.append(alice_old)
        a = p.client("alice", alice_old)
        a.create_bucket(Bucket="alice-b")
        a.put_object(Bucket="alice-b", Key="k", Body=b"alice's")
        assert swift_login(p, "alice", alice_old) == 200

        # A user with a secret of its own, from a 0600 file.
        key_file = tmp_path / "bob.key"
        key_file.write_text("bob-secret-key-0001\n")
        key_file.chmod(0o600)
        out = user(p, port, "add", "--access-key", "bob", "--secret-key-file", str(key_file)).stdout
        assert "bob-secret-key-0001" not in out
        secrets.append("bob-secret-key-0001")
        b = p.client("bob", "bob-secret-key-0001")
        assert b.list_buckets()["Buckets"] == []

        # Rotate: the old secret stops working, the new one works.
        alice_new = secret_of(user(p, port, "rotate", "alice").stdout)
        secrets.append(alice_new)
        assert alice_new != alice_old
        refused(p.client("alice", alice_old), "SignatureDoesNotMatch")
        a = p.client("alice", alice_new)
        assert a.get_object(Bucket="alice-b", Key="k")["Body"].read() == b"alice's"
        assert swift_login(p, "alice", alice_old) == 401
        assert swift_login(p, "alice", alice_new) == 200

        # Remove: refused for a bucket owner (named), for the environment's user.
        r = user(p, port, "remove", "alice", ok=False)
        assert "alice-b" in r.stderr and "--force" in r.stderr, r.stderr
        r = user(p, port, "remove", ACCESS, ok=False)
        assert "environment" in r.stderr, r.stderr
        assert swift_login(p, "bob", "bob-secret-key-0001") == 200
        user(p, port, "remove", "bob")
        refused(b, "InvalidAccessKeyId")
        assert swift_login(p, "bob", "bob-secret-key-0001") == 401

        # The list: access keys and sources, never a secret.
        out = user(p, port, "list").stdout
        assert re.search(rf"^{ACCESS}\s+environment$", out, re.M), out
        assert re.search(r"^alice\s+credentials$", out, re.M), out
        assert "bob" not in out
        for s in secrets + [SECRET]:
            assert s not in out
        logs = p.logs()
        assert "S3 user added" in logs and "S3 user rotated" in logs, logs
        for s in secrets:
            assert s not in logs
    finally:
        assert p.stop() == 0, p.logs()

    # With no proxy running, nothing is changed, and the command says why.
    r = user(p, port, "add", "--access-key", "carol", ok=False)
    assert "nothing listens" in r.stderr, r.stderr

    # After a restart: the users of the moment, from credentials.toml (0600).
    assert (p.data_dir / "credentials.toml").stat().st_mode & 0o077 == 0
    port2 = free_port()
    p2 = Proxy(tmp_path / "p", "--metrics-listen", f"127.0.0.1:{port2}", "--no-fsync")
    try:
        wait_port(port2)
        a = p2.client("alice", alice_new)
        assert a.get_object(Bucket="alice-b", Key="k")["Body"].read() == b"alice's"
        refused(p2.client("alice", alice_old), "SignatureDoesNotMatch")
        refused(p2.client("bob", "bob-secret-key-0001"), "InvalidAccessKeyId")
        out = user(p2, port2, "list").stdout
        assert "alice" in out and "bob" not in out, out
        for s in secrets:
            assert s not in p2.logs()
    finally:
        assert p2.stop() == 0, p2.logs()
