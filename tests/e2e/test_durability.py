"""Durable state through the real binary: restarts, keys, fsck, freshness, recovery.

Every proxy runs on the fs back-end in a temporary directory; the store is kept
outside the data directory where a test needs to lose the data directory (recover)
or to tamper with the backend (freshness).
"""

import hashlib
import os
import shutil
import subprocess

import botocore.exceptions
import pytest

from conftest import BIN, Proxy, free_port
from test_cluster import metric


def run(*args, env=None, timeout=300):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def fill(s3, bucket, n=12):
    """Puts n objects of assorted sizes (one multipart); returns key -> md5."""
    s3.create_bucket(Bucket=bucket)
    want = {}
    for i in range(n):
        body = os.urandom(1 + i * 7919)
        s3.put_object(Bucket=bucket, Key=f"dir/obj-{i}", Body=body)
        want[f"dir/obj-{i}"] = hashlib.md5(body).hexdigest()
    up = s3.create_multipart_upload(Bucket=bucket, Key="multi")["UploadId"]
    parts, h = [], b""
    for n_ in (1, 2):
        body = os.urandom(5 << 20 if n_ == 1 else 12345)
        h += body
        e = s3.upload_part(Bucket=bucket, Key="multi", UploadId=up, PartNumber=n_, Body=body)["ETag"]
        parts.append({"PartNumber": n_, "ETag": e})
    s3.complete_multipart_upload(Bucket=bucket, Key="multi", UploadId=up, MultipartUpload={"Parts": parts})
    want["multi"] = hashlib.md5(h).hexdigest()
    s3.copy_object(Bucket=bucket, Key="multi-copy", CopySource={"Bucket": bucket, "Key": "multi"})
    want["multi-copy"] = want["multi"]
    return want


def verify(s3, bucket, want):
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert listed == set(want), (listed ^ set(want))
    for k, md5 in want.items():
        got = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
        assert hashlib.md5(got).hexdigest() == md5, k


def fsck(*flags):
    return run("fsck", *flags)


def test_objects_survive_restart_and_fsck_is_clean(tmp_path):
    p = Proxy(tmp_path)
    try:
        want = fill(p.client(), "durable")
        p.client().delete_object(Bucket="durable", Key="dir/obj-3")
        del want["dir/obj-3"]
    finally:
        assert p.stop() == 0
    assert "final checkpoint written" in p.logs()
    r = fsck("--data-dir", str(p.data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout and f"{len(want)} objects" in r.stdout, r.stdout
    p = Proxy(tmp_path)
    try:
        assert f"volume:     {len(want)} objects" in p.logs()
        verify(p.client(), "durable", want)
    finally:
        assert p.stop() == 0
    # A lost state database is refused, not silently replaced by an empty one.
    state = p.data_dir / "state.redb"
    state.rename(tmp_path / "state.redb.bak")
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0")
    assert r.returncode != 0 and "state.redb is missing" in r.stderr, r.stderr
    (tmp_path / "state.redb.bak").rename(state)
    r = fsck("--data-dir", str(p.data_dir))
    assert r.returncode == 0, r.stdout + r.stderr


def test_kill_9_mid_upload_loses_no_acknowledged_object(tmp_path):
    p = Proxy(tmp_path)
    s3 = p.client()
    want = fill(s3, "crash", n=4)
    # Kill while a large upload is in flight: it was never acknowledged.
    import threading
    t = threading.Thread(target=lambda: _swallow(lambda: s3.put_object(
        Bucket="crash", Key="in-flight", Body=os.urandom(8 << 20))))
    t.start()
    import time
    time.sleep(0.8)
    p.kill()
    t.join(timeout=60)
    r = fsck("--data-dir", str(p.data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    p = Proxy(tmp_path)
    try:
        s3 = p.client()
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="crash").get("Contents", [])}
        keys.discard("in-flight")  # either outcome is allowed for an unacknowledged PUT
        assert keys == set(want)
        verify_subset = {k: v for k, v in want.items()}
        for k, md5 in verify_subset.items():
            assert hashlib.md5(s3.get_object(Bucket="crash", Key=k)["Body"].read()).hexdigest() == md5
    finally:
        assert p.stop() == 0


def _swallow(f):
    try:
        f()
    except Exception:  # noqa: BLE001 - the proxy is being killed
        pass


def test_wrong_key_is_refused_at_startup(tmp_path):
    p = Proxy(tmp_path)
    assert p.stop() == 0
    key = p.data_dir / "master.key"
    good = key.read_text()
    key.write_text("ab" * 32 + "\n")
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0")
    assert r.returncode != 0 and "wrong key" in r.stderr, r.stderr
    r = fsck("--data-dir", str(p.data_dir))
    assert r.returncode == 2 and "wrong key" in r.stderr
    key.write_text(good)
    r = fsck("--data-dir", str(p.data_dir))
    assert r.returncode == 0, r.stdout + r.stderr


def test_key_from_environment_and_from_passphrase(tmp_path):
    env_key = "5a" * 32
    p = Proxy(tmp_path / "env", env={"ORAM_PROXY_MASTER_KEY": env_key})
    try:
        p.client().create_bucket(Bucket="envkey")
    finally:
        assert p.stop() == 0
    assert not (p.data_dir / "master.key").exists(), "no key file when the key comes from the environment"
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0",
            env={"ORAM_PROXY_MASTER_KEY": "5b" * 32})
    assert r.returncode != 0 and "wrong key" in r.stderr, r.stderr
    assert env_key not in r.stderr

    pw = tmp_path / "pass"
    pw.write_text("a long and winding passphrase\n")
    os.chmod(pw, 0o600)
    p = Proxy(tmp_path / "pp", "--passphrase-file", str(pw))
    try:
        p.client().create_bucket(Bucket="passphrase")
        p.client().put_object(Bucket="passphrase", Key="k", Body=b"derived with Argon2id")
    finally:
        assert p.stop() == 0
    vol = (p.data_dir / "volume.toml").read_text()
    assert 'key_source = "passphrase"' in vol and "[kdf]" in vol
    assert "winding" not in vol and "winding" not in p.logs()
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0",
            env={"ORAM_PROXY_PASSPHRASE": "not the right passphrase"})
    assert r.returncode != 0 and "wrong key" in r.stderr, r.stderr
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0")
    assert r.returncode != 0 and "passphrase" in r.stderr, r.stderr
    os.chmod(pw, 0o644)
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0", "--passphrase-file", str(pw))
    assert r.returncode != 0 and "chmod 600" in r.stderr
    os.chmod(pw, 0o600)
    p = Proxy(tmp_path / "pp", env={"ORAM_PROXY_PASSPHRASE": "a long and winding passphrase"})
    try:
        assert p.client().get_object(Bucket="passphrase", Key="k")["Body"].read() == b"derived with Argon2id"
    finally:
        assert p.stop() == 0


def test_replayed_object_and_rolled_back_backend_are_integrity_errors(tmp_path):
    store = tmp_path / "store"
    # A small tree with few cached levels, so that later rounds rewrite buckets
    # that earlier rounds wrote.
    cfg = tmp_path / "small.toml"
    cfg.write_text("[engine]\ncapacity_blocks = 512\ncached_levels = 2\n")
    flags = ["--config", str(cfg), "--backend", f"file://{store}"]
    p = Proxy(tmp_path, *flags)
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="fresh")
        s3.put_object(Bucket="fresh", Key="k", Body=b"version one" * 100)
    finally:
        assert p.stop() == 0
    snapshot = tmp_path / "store-snapshot"
    shutil.copytree(store, snapshot)
    p = Proxy(tmp_path, *flags)
    try:
        s3 = p.client()
        s3.put_object(Bucket="fresh", Key="k", Body=b"version two" * 100)
        for i in range(20):  # move many buckets on
            s3.get_object(Bucket="fresh", Key="k")["Body"].read()
    finally:
        assert p.stop() == 0

    # 1. An older copy of a bucket put back in place of the current one. A bucket
    # is written to another of its slots (`<node>`, `<node>.1`, `<node>.2`) each
    # time, and a clean stop deletes the slots its final checkpoint no longer
    # needs: the snapshot holds older versions of buckets rewritten since.
    # (`vol0/n/<shard>/<node>[.<slot>]`: a new volume's keys are sharded.)
    def objects(d):
        return [f for f in d.rglob("*") if f.is_file()]

    tree, old_tree = store / "vol0" / "n", snapshot / "vol0" / "n"
    current = {f.name.split(".")[0]: f for f in objects(tree)}
    assert len(current) == len(objects(tree)), "one object per bucket at rest"
    rewritten = sorted(
        (current[f.name.split(".")[0]], f) for f in objects(old_tree)
        if f.name.split(".")[0] in current
        and f.read_bytes() != current[f.name.split(".")[0]].read_bytes())
    assert rewritten, "buckets were rewritten since the checkpoint"
    victim, older = rewritten[0]
    saved = victim.read_bytes()
    shutil.copy(older, victim)
    r = fsck("--data-dir", str(p.data_dir), *flags)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "integrity" in r.stdout and victim.name in r.stdout, r.stdout
    victim.write_bytes(saved)

    # 2. The whole backend rolled back to the snapshot: never served as data.
    moved = tmp_path / "store-current"
    shutil.move(store, moved)
    shutil.copytree(snapshot, store)
    r = fsck("--data-dir", str(p.data_dir), *flags)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "rolled back" in r.stderr, r.stderr
    r = run("serve", "--data-dir", str(p.data_dir), "--s3-listen", "127.0.0.1:0", *flags)
    assert r.returncode != 0 and "rolled back" in r.stderr, r.stderr
    shutil.rmtree(store)
    shutil.move(moved, store)
    r = fsck("--data-dir", str(p.data_dir), *flags)
    assert r.returncode == 0, r.stdout + r.stderr

    # 3. Only the tree rolled back (the checkpoint kept current): reads fail and
    # fsck reports it; the old data is never returned.
    shutil.rmtree(store / "vol0" / "n")
    shutil.copytree(snapshot / "vol0" / "n", store / "vol0" / "n")
    r = fsck("--data-dir", str(p.data_dir), *flags)
    assert r.returncode == 1 and "integrity" in r.stdout, r.stdout + r.stderr
    p = Proxy(tmp_path, *flags)
    try:
        try:
            body = p.client().get_object(Bucket="fresh", Key="k")["Body"].read()
        except (botocore.exceptions.ClientError, botocore.exceptions.ResponseStreamingError):
            body = None
        assert body is None, "rolled-back data was served"
    finally:
        p.stop()


@pytest.mark.parametrize("shipped,engine",
                         [(True, "path"), (False, "path"), (True, "curious"), (True, "oblivistore")],
                         ids=["shipped-log", "checkpoint-only", "shipped-log-curious",
                              "shipped-log-oblivistore"])
def test_machine_lost_after_acknowledged_writes(tmp_path, shipped, engine):
    """The proxy's machine is lost (kill -9, then its data directory gone) after
    writes acknowledged since the last checkpoint. With the shipped log
    ([state] log_interval_ms) `recover` restores every one of them; without it
    they are lost, the recovery point being the checkpoint (the control). CURIOUS
    and ObliviStore too: the map of partitions and every partition's state come
    back together."""
    store = tmp_path / "store"
    cfg = tmp_path / "c.toml"
    cfg.write_text("[state]\ncheckpoint_interval_secs = 3600\n"
                   + ("log_interval_ms = 20\nlog_record_kib = 256\n" if shipped else "")
                   # ObliviStore's case keeps within CI's time: a short backend lease
                   # (`recover` waits out the killed proxy's: 30 s by default).
                   + ("[backend]\nlease_secs = 3\n" if engine == "oblivistore" else "")
                   + (f'[engine]\nkind = "{engine}"\n' if engine != "path" else ""))
    flags = ["--config", str(cfg), "--backend", f"file://{store}"]
    env = {"ORAM_PROXY_MASTER_KEY": os.urandom(32).hex()}
    p = Proxy(tmp_path / "a", *flags, env=env)
    try:
        before = fill(p.client(), "lost", n=3)
    finally:
        assert p.stop() == 0  # the final checkpoint
    mport = free_port()
    p = Proxy(tmp_path / "a", *flags, "--metrics-listen", f"127.0.0.1:{mport}", env=env)
    s3 = p.client()
    after = dict(before)
    for i in range(6):
        body = os.urandom(1000 + i * 300_000)
        s3.put_object(Bucket="lost", Key=f"after-{i}", Body=body)
        after[f"after-{i}"] = hashlib.md5(body).hexdigest()
    body = os.urandom(4321)
    s3.put_object(Bucket="lost", Key="dir/obj-1", Body=body)
    after["dir/obj-1"] = hashlib.md5(body).hexdigest()
    s3.delete_object(Bucket="lost", Key="dir/obj-2")
    del after["dir/obj-2"]
    _, _, text = p.operator_get(mport, "/metrics")
    text = text.decode()
    if shipped:
        # The log's load in /metrics: records landed, the stream they carried
        # (the state changes of the writes above, each acknowledged only once
        # shipped), and a record's capacity: 256 KiB less its 44-byte header.
        records, stream = (metric(text, "oram_log_records_total"),
                           metric(text, "oram_log_stream_bytes"))
        assert records > 0 and stream > 0, text
        assert metric(text, "oram_log_record_capacity_bytes") == 256 * 1024 - 44, text
        assert metric(text, "oram_log_failures_total") == 0, text
        print(f"{engine}: {records:.0f} records landed, the stream at {stream:.0f} bytes")
    else:
        assert "oram_log_" not in text, text
    p.kill()
    shutil.rmtree(p.data_dir)

    new_dir = tmp_path / "b" / "data"
    r = run("recover", "--data-dir", str(new_dir), *flags, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    if shipped:
        assert "replayed" in r.stdout and "records of the shipped log" in r.stdout, r.stdout
    else:
        assert "the recovery point is the checkpoint" in r.stdout, r.stdout
        assert "writes acknowledged after" in r.stdout, r.stdout
    p = Proxy(tmp_path / "b", *flags, env=env)
    try:
        verify(p.client(), "lost", after if shipped else before)
    finally:
        assert p.stop() == 0
    if shipped:
        # A checkpoint at start and at stop: the log before them is deleted.
        assert "checkpoint taken at start" in p.logs()
    r = run("fsck", "--data-dir", str(new_dir), *flags, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_copied_data_directory_never_takes_over_its_original(tmp_path):
    """A copy of a serving proxy's data directory (a VM clone, a restored backup)
    started on the same backend: it carries the directory's lease holder id, and
    used to take the lease at once and fence the original. Now it is refused
    while the original runs (which keeps serving), and refused for good once the
    original wrote more and stopped: the copy is behind."""
    store = tmp_path / "store"
    cfg = tmp_path / "c.toml"
    # A short lease: the original renews every second, so the copy sees it soon.
    cfg.write_text("[backend]\nlease_secs = 4\n")
    flags = ["--config", str(cfg), "--backend", f"file://{store}"]
    env = {"ORAM_PROXY_MASTER_KEY": os.urandom(32).hex(),
           "ORAM_PROXY_ROOT_USER": "copyadmin", "ORAM_PROXY_ROOT_PASSWORD": "copyadmin-secret"}
    p = Proxy(tmp_path / "a", *flags, env=env)
    copy = tmp_path / "copy" / "data"

    def start_copy():
        return run("serve", "--data-dir", str(copy), "--s3-listen", f"127.0.0.1:{free_port()}",
                   *flags, env=env, timeout=120)

    try:
        s3 = p.client(access="copyadmin", secret="copyadmin-secret")
        s3.create_bucket(Bucket="orig")
        s3.put_object(Bucket="orig", Key="k1", Body=b"one")
        shutil.copytree(p.data_dir, copy)
        r = start_copy()
        assert r.returncode != 0, r.stdout + r.stderr
        assert "copy of this data directory" in r.stdout + r.stderr, r.stdout + r.stderr
        # The original was not fenced: it still writes and reads.
        s3.put_object(Bucket="orig", Key="k2", Body=b"two")
        assert s3.get_object(Bucket="orig", Key="k1")["Body"].read() == b"one"
    finally:
        assert p.stop() == 0
    # The original wrote more and is gone: the copy is behind its lease.
    r = start_copy()
    assert r.returncode != 0, r.stdout + r.stderr
    assert "behind" in r.stdout + r.stderr and "oram-proxy recover" in r.stdout + r.stderr, \
        r.stdout + r.stderr
    # The original directory itself starts again at once, with everything.
    p = Proxy(tmp_path / "a", *flags, env=env)
    try:
        s3 = p.client(access="copyadmin", secret="copyadmin-secret")
        assert s3.get_object(Bucket="orig", Key="k2")["Body"].read() == b"two"
    finally:
        assert p.stop() == 0
