"""Recovery that cannot go wrong, through the real binary: the data directory
records its backend (a command given none uses it, another one is refused), the
S3 users travel sealed in the checkpoint, `recover` prints the exact next
commands, and a start refused before it could serve leaves the backend lease
alone.

Every proxy runs on the fs back-end, with the store outside the data directory.
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tomllib

from conftest import BIN, Proxy, free_port
from test_durability import fill, verify


def run(*args, env=None, timeout=300):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def lease_record(store):
    return (store / "vol0" / "meta" / "lease").read_bytes()


def test_recovery_by_following_printed_commands_restores_objects_and_old_credentials(tmp_path):
    """The machine is lost (kill -9, data directory gone) after acknowledged
    writes. `recover` into a fresh directory, then exactly the commands it
    prints (no --backend): fsck is clean, serve uses the real backend, the old
    generated credentials work, and every object is byte-exact."""
    store = tmp_path / "store"
    cfg = tmp_path / "c.toml"
    # A short lease: `recover` waits out the killed proxy's.
    cfg.write_text("[state]\ncheckpoint_interval_secs = 3600\nlog_interval_ms = 20\n"
                   "log_record_kib = 256\n[backend]\nlease_secs = 3\n")
    flags = ["--config", str(cfg), "--backend", f"file://{store}"]
    env = {"ORAM_PROXY_MASTER_KEY": os.urandom(32).hex()}
    p = Proxy(tmp_path / "a", *flags, env=env, creds=False)
    creds = tomllib.loads((p.data_dir / "credentials.toml").read_text())["users"][0]
    old = {"access": creds["access_key"], "secret": creds["secret_key"]}
    try:
        want = fill(p.client(**old), "lost", n=3)
    finally:
        assert p.stop() == 0
    p = Proxy(tmp_path / "a", *flags, env=env, creds=False)
    s3 = p.client(**old)
    for i in range(3):
        body = os.urandom(1000 + i * 100_000)
        s3.put_object(Bucket="lost", Key=f"after-{i}", Body=body)
        want[f"after-{i}"] = hashlib.md5(body).hexdigest()
    p.kill()
    assert old["secret"] not in p.logs()
    shutil.rmtree(p.data_dir)

    new_dir = tmp_path / "b" / "data"
    r = run("recover", "--data-dir", str(new_dir), *flags, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert old["secret"] not in r.stdout + r.stderr
    assert "restored 1 S3 user(s)" in r.stdout, r.stdout
    assert "no acknowledged write is lost" in r.stdout, r.stdout
    cred_file = new_dir / "credentials.toml"
    assert cred_file.stat().st_mode & 0o777 == 0o600
    printed = [shlex.split(line.strip()) for line in r.stdout.splitlines()
               if line.startswith("  oram-proxy ")]
    assert [c[1] for c in printed] == ["fsck", "serve"], r.stdout
    for c in printed:
        assert "--backend" not in c, c
    fsck_cmd, serve_cmd = printed
    r = run(*fsck_cmd[1:], env=env)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr
    # The fsck used the recorded backend: no store was made in the data directory.
    assert not (new_dir / "store").exists()
    # The printed serve command, with a listener added.
    args = serve_cmd[2:]
    assert args[:2] == ["--data-dir", str(new_dir)], serve_cmd
    p = Proxy(tmp_path / "b", *args[2:], env=env, creds=False)
    try:
        verify(p.client(**old), "lost", want)
    finally:
        assert p.stop() == 0
    assert not (new_dir / "store").exists()
    # The record names the backend, never a secret.
    record = (new_dir / "backend.toml").read_text()
    assert str(store) in record and old["secret"] not in record, record


def test_a_data_directory_refuses_a_backend_other_than_its_own(tmp_path):
    """The backend is recorded; a command without one uses it; another one, or
    one without this volume's header, is refused and never initialised. A data
    directory of an earlier version (no record) records it at its next start."""
    store = tmp_path / "store"
    env = {"ORAM_PROXY_MASTER_KEY": os.urandom(32).hex()}
    p = Proxy(tmp_path / "a", "--backend", f"file://{store}", env=env)
    try:
        p.client().create_bucket(Bucket="mine")
    finally:
        assert p.stop() == 0
    d = str(p.data_dir)
    r = run("fsck", "--data-dir", d, env=env)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr
    other = tmp_path / "other"
    r = run("fsck", "--data-dir", d, "--backend", f"file://{other}", env=env)
    assert r.returncode == 2 and "belongs to the backend" in r.stderr, r.stderr
    assert not (other / "vol0" / "meta" / "volume").exists()
    # Without the record (an earlier version's directory), an empty backend is
    # refused, not initialised.
    (p.data_dir / "backend.toml").unlink()
    r = run("fsck", "--data-dir", d, env=env)
    assert r.returncode == 2 and "holds no volume header" in r.stderr, r.stderr
    assert not (p.data_dir / "store" / "vol0" / "meta" / "volume").exists()
    r = run("fsck", "--data-dir", d, "--backend", f"file://{store}", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(store) in (p.data_dir / "backend.toml").read_text()


def test_a_refused_start_does_not_take_the_backend_lease(tmp_path):
    """A wrong key, and a new data directory pointed at the volume's backend, are
    refused before the lease is taken: the lease record is unchanged and the
    owner starts again at once (no wait behind a lease nobody holds)."""
    store = tmp_path / "store"
    flags = ["--backend", f"file://{store}"]
    p = Proxy(tmp_path / "a", *flags)
    assert p.stop() == 0
    before = lease_record(store)
    key = p.data_dir / "master.key"
    good = key.read_text()
    key.write_text("ab" * 32 + "\n")
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", f"127.0.0.1:{free_port()}",
            *flags, timeout=120)
    assert r.returncode != 0 and "wrong key" in r.stderr, r.stderr
    assert lease_record(store) == before
    key.write_text(good)
    r = run("serve", "--data-dir", str(tmp_path / "stranger"), "--s3-listen",
            f"127.0.0.1:{free_port()}", *flags, timeout=120)
    assert r.returncode != 0 and "oram-proxy recover" in r.stderr, r.stderr
    assert lease_record(store) == before
    r = run("fsck", "--data-dir", str(p.data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "held by another proxy" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_recover_after_a_clean_stop_says_nothing_acknowledged_is_lost(tmp_path):
    """Without the shipped log, after a graceful stop (final checkpoint, lease
    released): the objects `recover` removes are stale slot copies and it says
    nothing is lost, which is true (every object is there)."""
    store = tmp_path / "store"
    flags = ["--backend", f"file://{store}"]
    env = {"ORAM_PROXY_MASTER_KEY": os.urandom(32).hex()}
    p = Proxy(tmp_path / "a", *flags, env=env)
    try:
        want = fill(p.client(), "kept", n=3)
    finally:
        assert p.stop() == 0
    shutil.rmtree(p.data_dir)
    r = run("recover", "--data-dir", str(tmp_path / "b" / "data"), *flags, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped cleanly" in r.stdout and "no acknowledged write is lost" in r.stdout, r.stdout
    assert "stale slot copies" in r.stdout and " are lost" not in r.stdout, r.stdout
    p = Proxy(tmp_path / "b", env=env)
    try:
        verify(p.client(), "kept", want)
    finally:
        assert p.stop() == 0
