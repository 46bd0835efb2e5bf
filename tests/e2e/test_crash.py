"""Crash torture: a concurrent mixed workload, kill -9 at a random instant, restart, verify.

For each engine (path, ring, curious, oblivistore, direct) and back-end (fs, and S3 on a MinIO started here on
127.0.0.1) one data directory and back-end go through ORAM_CRASH_ITERATIONS (default 30)
iterations of:

1. `oram-proxy fsck --data-dir DIR --capacity-blocks N --engine E [--config FILE]`, the flags of
   `serve`, while the proxy is down: it must exit 0 (skipped before the first start);
2. `oram-proxy serve`, then verify every key of the pool against the model: GET (sha256
   and size compared), and list_objects_v2 must list exactly the keys found, with their
   sizes; uploads left unfinished by the kill are then aborted;
3. 4 worker threads run random PUTs (mostly 1 KiB-256 KiB, some 1-4 MiB), overwrites,
   DELETEs, copies and multipart uploads (2-3 parts, 5 MiB but the last; some aborted)
   on a pool of 40 keys. Worker 0 starts with a 20 MiB PUT in iterations 1, 6, 11, 16, ...
   and with a multipart upload in 3, 8, 13, 18, ...; it then leaves that key alone;
4. SIGKILL after a random delay: 0.5-4 s, or (iterations 1, 3, 11, 13, ...; on MinIO
   iteration 11 and 21 not, to save time) 0.5-4 s after worker 0's first operation was
   answered; then the workers stop.
A last fsck, start and verification check the last kill; the proxy then gets SIGTERM.
Writes above 256 KiB go one at a time and none start while more than 8 MiB (MinIO: 4 MiB)
is stored, so that verifying stays quick; the volume is 64 MiB (MinIO: 32 MiB), as fsck
reads all of it.

The model. Operations on one key are serialised (a lock per key; a copy also holds its
source's), so a key has at most one operation in flight. Per key the model keeps the
set of states the key may be in (absent, or a sha256 and a size):
- an operation answered with 2xx is *acknowledged*: the set becomes its one new state,
  which must survive every later crash;
- an operation that failed (exception, non-2xx, or cut by the kill) has an unknown
  outcome: its new state joins the set, and the old and the new are both accepted;
- a multipart upload changes the key only by CompleteMultipartUpload: a failure before
  it, or an abort, leaves the set as it was.
After a restart each key must be in one of its allowed states, else it is *lost* (found
absent) or *corrupted* (other content, an error, or present where it must be absent);
it is then resolved to the state found. The bucket is created, acknowledged, before the
first workload and must exist after every restart.

Environment: ORAM_CRASH_ITERATIONS (per engine and back-end; ORAM_CRASH_ITERATIONS_FS and
ORAM_CRASH_ITERATIONS_MINIO override it for one back-end, ORAM_CRASH_ITERATIONS_RING_FS and
the like for one engine on one back-end; 0 skips that case), ORAM_CRASH_SEED (master seed,
printed; default random), ORAM_PROXY_BIN (see conftest.py), ORAM_TEST_MINIO (the MinIO binary;
without it the MinIO case is skipped), ORAM_CRASH_SKIP_FSCK=1 (development only: a failing
or missing `fsck` is printed and ignored instead of failing the test). `pytest -s` shows
a line per iteration and the closing summary (also in the failure message); the summary is
also appended, a line per engine and back-end, to $CARGO_TARGET_DIR/crash-torture-summary.txt.
"""

import collections
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from conftest import ACCESS, BIN, SECRET, TARGET, Proxy, free_port, wait_port

ENGINES = ("path", "ring", "curious", "oblivistore", "direct")


def iterations(engine, backend):
    """ORAM_CRASH_ITERATIONS_<ENGINE>_<BACKEND>, else ORAM_CRASH_ITERATIONS_<BACKEND>, else
    ORAM_CRASH_ITERATIONS, else 30. A MinIO cycle costs about 5x an fs one (fsck reads every
    bucket object over HTTP), so CI runs fewer of them, and fewer on the engines other than
    the default (scripts/test.sh); 0 skips the case."""
    for var in (f"ORAM_CRASH_ITERATIONS_{engine.upper()}_{backend.upper()}",
                f"ORAM_CRASH_ITERATIONS_{backend.upper()}", "ORAM_CRASH_ITERATIONS"):
        if os.environ.get(var):
            return int(os.environ[var])
    return 30


def engine_args(engine):
    """The flags that choose the engine (the volume is created by the first `serve`)."""
    return ["--engine", engine, *(["--insecure-direct"] if engine == "direct" else [])]

SKIP_FSCK = os.environ.get("ORAM_CRASH_SKIP_FSCK") == "1"
KiB, MiB = 1 << 10, 1 << 20
BUCKET = "torture"
KEYS = ([f"obj-{i:02d}" for i in range(24)] + [f"dir/a/{i}.bin" for i in range(8)]
        + [f"dir/sub dir/ü-{i}" for i in range(8)])
WORKERS = 4
PART = 5 * MiB  # S3's minimum size of a part but the last
HUGE = 20 * MiB
SMALL = 256 * KiB
# Above this many stored bytes, no new writes above SMALL (each verification reads everything):
# the debug build does about 2-4 MB/s on fs, 0.6 MB/s on MinIO.
BUDGET = {"fs": 8 * MiB, "minio": 4 * MiB}
# Volumes of 64 MiB and 32 MiB (the default is 1 GiB): fsck reads every ORAM bucket of the
# backend (about 15k and 7k objects), and the workload stores about BUDGET + one 20 MiB object.
CAPACITY_BLOCKS = {"fs": 16384, "minio": 8192}
# Worker 0's first operation by iteration number modulo 10, and whether the kill waits for
# its answer (then it must survive) or may come at any time.
SCRIPT = {1: ("huge", True), 3: ("multipart", True), 6: ("huge", False), 8: ("multipart", False)}
# How many 20 MiB PUTs the kill waits for (each costs about 2 minutes on MinIO: PUT, GET, fsck).
HUGE_ANSWERED = {"fs": 3, "minio": 1}
FSCK_TIMEOUT = 300
MINIO_USER, MINIO_PASSWORD = "crashminio", "crashminio-secret"


def describe(state):
    if state is None:
        return "absent"
    return state[0] if state[1] < 0 else f"{state[1]} bytes sha256 {state[0][:16]}…"


def state_of(data):
    return (hashlib.sha256(data).hexdigest(), len(data))


def client(endpoint, access=ACCESS, secret=SECRET):
    """boto3 without retries and with short timeouts: a killed proxy shows up as errors at once."""
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, connect_timeout=5,
                      read_timeout=120, retries={"total_max_attempts": 1, "mode": "standard"},
                      max_pool_connections=WORKERS + 2),
    )


class Model:
    """What each key may hold, the per-key locks and the counters."""

    def __init__(self, budget):
        self.budget = budget
        self.lock = threading.Lock()
        self.allowed = {k: {None} for k in KEYS}
        self.key_locks = {k: threading.Lock() for k in KEYS}
        self.large = threading.Lock()  # held by the one write above SMALL in flight
        self.acked = collections.Counter()  # acknowledged operations of the current iteration
        self.unknown = 0  # operations with an unknown outcome in the current iteration
        self.harness_errors = []

    def stored(self):
        with self.lock:
            return sum(max((s[1] for s in a if s), default=0) for a in self.allowed.values())

    def definite(self, key):
        """The key's state if it has only one (None: absent), False if it may be in several."""
        with self.lock:
            allowed = self.allowed[key]
            return next(iter(allowed)) if len(allowed) == 1 else False

    def settle(self, key, new, acknowledged, kind):
        with self.lock:
            old = self.allowed[key]
            if acknowledged:
                self.acked[kind] += 1
                if kind != "delete" and any(old):
                    self.acked["overwrite"] += 1
                self.allowed[key] = {new}
            else:
                self.unknown += 1
                self.allowed[key] = old | {new}

    @contextlib.contextmanager
    def large_write(self, wait=None):
        """Yields whether a write above SMALL may go: one at a time, none while over the budget
        (worker 0's scripted first operation waits up to `wait` seconds and ignores the budget)."""
        if wait:
            ok = self.large.acquire(timeout=wait)
        else:
            ok = self.stored() <= self.budget and self.large.acquire(blocking=False)
        try:
            yield ok
        finally:
            if ok:
                self.large.release()

    def lock_key(self, rng, candidates):
        """Locks one of `candidates` that no other worker holds; None if there is none."""
        for key in rng.sample(candidates, len(candidates)):
            if self.key_locks[key].acquire(blocking=False):
                return key
        return None


def attempt(model, key, kind, new, request):
    """Sends one request that would bring `key` to state `new`, and records its outcome."""
    try:
        request()
    except (BotoCoreError, ClientError):
        return model.settle(key, new, False, kind)
    model.settle(key, new, True, kind)


def one_op(s3, model, rng, key, stop, forced=None):
    """One random operation on `key` (whose lock is held), or the `forced` one ("huge" or "multipart")."""
    r = rng.random() if forced is None else 0.3  # 0.27 <= r < 0.32: a multipart upload
    huge = forced == "huge"
    if r < 0.15:
        return attempt(model, key, "delete", None, lambda: s3.delete_object(Bucket=BUCKET, Key=key))
    if r < 0.27:
        src = rng.choice([k for k in KEYS if k != key])
        if not model.key_locks[src].acquire(blocking=False):
            return
        try:
            new = model.definite(src)
            with model.large_write() if new and new[1] > SMALL else contextlib.nullcontext(True) as ok:
                if new and ok:
                    attempt(model, key, "copy", new, lambda: s3.copy_object(
                        Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": src}))
        finally:
            model.key_locks[src].release()
        return
    wants_large = r < 0.32 or rng.random() < 0.08
    with model.large_write(wait=60 if forced else None) if wants_large else contextlib.nullcontext(False) as large:
        if large and not huge and r < 0.32:
            return multipart(s3, model, rng, key, stop, may_abort=forced is None)
        if large:
            size = HUGE if huge else rng.randint(MiB, 4 * MiB)
        else:
            size = int(2 ** rng.uniform(10, 18))  # 1 KiB-256 KiB, log-uniform
        data = random.Random(rng.getrandbits(64)).randbytes(size)
        attempt(model, key, "put", state_of(data), lambda: s3.put_object(Bucket=BUCKET, Key=key, Body=data))


def multipart(s3, model, rng, key, stop, may_abort):
    """2-3 parts, then complete or (sometimes, if `may_abort`) abort. Only CompleteMultipartUpload
    can change the key."""
    sizes = [PART] * rng.choice([1, 1, 2]) + [rng.randint(KiB, MiB)]
    whole, parts = hashlib.sha256(), []
    try:
        upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        for n, part_size in enumerate(sizes, 1):
            if stop.is_set():
                return
            data = random.Random(rng.getrandbits(64)).randbytes(part_size)
            whole.update(data)
            etag = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=n, Body=data)["ETag"]
            parts.append({"PartNumber": n, "ETag": etag})
        if may_abort and rng.random() < 0.2:
            s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload)
            with model.lock:
                model.acked["abort"] += 1
            return
    except (BotoCoreError, ClientError):
        return
    attempt(model, key, "multipart", (whole.hexdigest(), sum(sizes)), lambda: s3.complete_multipart_upload(
        Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}))


def worker(s3, model, rng, stop, first=None, first_done=None):
    """Random operations until `stop`. The first one is `first` if given; its key is then left
    alone until the kill (its outcome must survive it) and `first_done` set."""
    pinned = None
    try:
        while not stop.is_set():
            # Over the budget, half of the operations delete one of the large objects.
            with model.lock:
                large = [k for k in KEYS if max((s[1] for s in model.allowed[k] if s), default=0) > SMALL]
            shrink = not first and large and model.stored() > model.budget and rng.random() < 0.5
            key = model.lock_key(rng, large if shrink else KEYS)
            if key is None:
                time.sleep(0.01)
                continue
            try:
                if shrink:
                    attempt(model, key, "delete", None, lambda: s3.delete_object(Bucket=BUCKET, Key=key))
                else:
                    one_op(s3, model, rng, key, stop, first)
            finally:
                if first:
                    pinned, first = key, None
                    first_done.set()
                else:
                    model.key_locks[key].release()
    except Exception as e:  # noqa: BLE001 - a harness bug: reported by the main thread
        model.harness_errors.append(repr(e))
    finally:
        if pinned:
            model.key_locks[pinned].release()


def verify(s3, model, bucket_exists):
    """Checks every key and the listing; resolves matching keys. Returns (problems, lost, corrupted, reads)."""
    problems, lost, corrupted, reads, found = [], 0, 0, 0, {}
    for key in KEYS:
        allowed = model.allowed[key]
        try:
            got = state_of(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
            reads += 1
        except ClientError as e:
            code = e.response["Error"]["Code"]
            got = None if code in ("NoSuchKey", "NoSuchBucket") else ("GET failed: " + code, -1)
        except BotoCoreError as e:
            got = (f"GET failed: {e}", -1)
        found[key] = got
        if got in allowed:
            model.allowed[key] = {got}
            continue
        expected = " or ".join(sorted(describe(s) for s in allowed))
        if got is None:
            lost += 1
            problems.append(f"LOST {key!r}: expected {expected}, got absent")
        else:
            corrupted += 1
            problems.append(f"CORRUPTED {key!r}: expected {expected}, got {describe(got)}")
    if not bucket_exists:
        return problems, lost, corrupted, reads
    listed = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            listed.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    except ClientError as e:
        code = e.response["Error"]["Code"]
        problems.append(f"LISTING of bucket {BUCKET!r} failed: {code} (its creation was acknowledged)")
        return problems, lost, corrupted, reads
    expected = {k: s[1] for k, s in found.items() if s is not None and s[1] >= 0}
    for key in sorted(set(listed) | set(expected)):
        if listed.get(key) != expected.get(key):
            problems.append(f"LISTING {key!r}: listed with size {listed.get(key, '(absent)')},"
                            f" GET gave {expected.get(key, '(absent)')}")
    return problems, lost, corrupted, reads


def fsck(args, env):
    """`oram-proxy fsck` on the stopped proxy's data directory; returns its duration."""
    cmd = [BIN, "fsck", *args]
    started = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=FSCK_TIMEOUT, env=env)
    if r.returncode != 0:
        msg = f"`{' '.join(cmd)}` exited with {r.returncode}:\n{r.stdout}{r.stderr}"
        if not SKIP_FSCK:
            pytest.fail(msg, pytrace=False)
        print(f"    ORAM_CRASH_SKIP_FSCK=1, ignored: {msg.strip().splitlines()[:2]}")
    return time.monotonic() - started


def acked_ops(counter):
    return sum(v for k, v in counter.items() if k != "overwrite")


def torture(name, engine, workdir, extra_args):
    ITERATIONS = iterations(engine, name)
    if ITERATIONS == 0:
        pytest.skip(f"ORAM_CRASH_ITERATIONS_{engine.upper()}_{name.upper()}=0")
    seed = int(os.environ.get("ORAM_CRASH_SEED", random.randrange(1 << 32)))
    print(f"\ncrash torture {name} ({engine}): {ITERATIONS} iterations, seed {seed} (ORAM_CRASH_SEED)")
    rng = random.Random(seed)
    model, totals = Model(BUDGET[name]), collections.Counter()
    done = unknown = lost = corrupted = verifications = reads = leftovers = huge_answered = 0
    data_dir = workdir / "data"
    extra_args = ["--capacity-blocks", str(CAPACITY_BLOCKS[name]), *engine_args(engine), *extra_args]
    args = ["--data-dir", str(data_dir), *extra_args]
    env = dict(os.environ, RUST_LOG="info", ORAM_PROXY_ROOT_USER=ACCESS, ORAM_PROXY_ROOT_PASSWORD=SECRET)

    def summary():
        t = totals
        return (f"crash torture {name} ({engine}, seed {seed}): {done} iterations, {acked_ops(t)} acknowledged ops ({t['put']} puts,"
                f" {t['multipart']} multipart, {t['copy']} copies, {t['delete']} deletes, {t['abort']} aborted"
                f" multipart; {t['overwrite']} overwrites), {unknown} with unknown outcome, {leftovers} unfinished"
                f" uploads aborted after restarts,"
                f" {verifications} object verifications ({reads} byte-exact reads), {lost} lost,"
                f" {corrupted} corrupted")

    for i in range(ITERATIONS + 1):
        started = time.monotonic()
        fsck_secs = fsck(args, env) if data_dir.exists() else 0.0
        if i > 0:  # the killed proxy's log (Proxy truncates stderr.log)
            (workdir / "stderr.log").replace(workdir / "stderr.previous.log")
        p = Proxy(workdir, *extra_args, env={})
        try:
            s3 = client(p.endpoint)
            problems, n_lost, n_corrupted, n_reads = verify(s3, model, bucket_exists=i > 0)
            lost, corrupted, reads = lost + n_lost, corrupted + n_corrupted, reads + n_reads
            verifications += len(KEYS)
            if problems:
                tail = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(p.logs().splitlines()[-15:]))
                pytest.fail(f"after kill {i} (seed {seed}): {len(problems)} problems:\n  " + "\n  ".join(problems)
                            + f"\n{summary()}\nproxy log after the restart (tail; the killed one's log is"
                            f" {workdir / 'stderr.previous.log'}):\n{tail}", pytrace=False)
            verified = time.monotonic()
            line = (f"  {name} ({engine}) {i}/{ITERATIONS}: fsck {fsck_secs:.1f}s,"
                    f" start+verify {verified - started - fsck_secs:.1f}s")
            if i == ITERATIONS:
                print(f"{line} ({n_reads} reads), final", flush=True)
                code = p.stop()
                assert code == 0, f"oram-proxy exited with {code} on SIGTERM:\n{p.logs()}"
                break
            if i == 0:
                s3.create_bucket(Bucket=BUCKET)
            # Uploads cut by the kill keep their parts: abort them (this works after a crash too).
            for up in s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []):
                s3.abort_multipart_upload(Bucket=BUCKET, Key=up["Key"], UploadId=up["UploadId"])
                leftovers += 1
            (first, after_answer), first_done = SCRIPT.get(i % 10, (None, False)), threading.Event()
            if first == "huge" and after_answer:
                huge_answered += 1
                after_answer = huge_answered <= HUGE_ANSWERED[name]
            stop = threading.Event()
            model.acked, model.unknown = collections.Counter(), 0
            threads = [threading.Thread(target=worker, daemon=True, args=(
                s3, model, random.Random(f"{seed}-{i}-{w}"), stop, first if w == 0 else None, first_done))
                for w in range(WORKERS)]
            for t in threads:
                t.start()
            if after_answer:
                first_done.wait(timeout=120)
                time.sleep(rng.uniform(0.5, 4.0))
            else:
                time.sleep(rng.uniform(1.0, 8.0) if first == "huge" else rng.uniform(0.5, 4.0))
            stop.set()
            os.kill(p.proc.pid, signal.SIGKILL)
            p.proc.wait(timeout=30)
            for t in threads:
                t.join(timeout=60)
            assert not any(t.is_alive() for t in threads), "a worker did not stop within 60 s of the kill"
            assert not model.harness_errors, f"harness errors: {model.harness_errors}"
            totals.update(model.acked)
            unknown += model.unknown
            done += 1
            print(f"{line} ({n_reads} reads), workload+kill {time.monotonic() - verified:.1f}s:"
                  f" {acked_ops(model.acked)} acknowledged {dict(model.acked)}, {model.unknown} unknown;"
                  f" {model.stored() / MiB:.1f} MiB stored", flush=True)
        finally:
            p.kill()
            p.stdout.close()
            p.stderr.close()
    line = summary()
    print(line)
    # Kept for the test script's closing report (pytest captures stdout).
    with open(TARGET / "crash-torture-summary.txt", "a") as f:
        f.write(line + "\n")
    assert lost == 0 and corrupted == 0, line
    assert acked_ops(totals) >= ITERATIONS, f"too little work: {line}"
    shutil.rmtree(data_dir, ignore_errors=True)  # kept only when the test fails


@contextlib.contextmanager
def minio_server(directory):
    port = free_port()
    proc = subprocess.Popen(
        [os.environ["ORAM_TEST_MINIO"], "server", "--quiet", "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{free_port()}", str(directory)],
        env=dict(os.environ, MINIO_ROOT_USER=MINIO_USER, MINIO_ROOT_PASSWORD=MINIO_PASSWORD, MINIO_BROWSER="off"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


# The long tests start first, the longest first (conftest.py): in CI the MinIO one, then
# the fs ones by their cycle counts (scripts/test.sh).
@pytest.mark.parametrize("engine", [pytest.param("path", marks=pytest.mark.long(3)),
                                    pytest.param("ring", marks=pytest.mark.long(2)),
                                    pytest.param("curious", marks=pytest.mark.long(2)),
                                    pytest.param("oblivistore", marks=pytest.mark.long(2)),
                                    pytest.param("direct", marks=pytest.mark.long(1))])
def test_crash_torture_fs(tmp_path, engine):
    torture("fs", engine, tmp_path, [])


@pytest.mark.parametrize("engine", [pytest.param("path", marks=pytest.mark.long(4)),
                                    pytest.param("ring", marks=pytest.mark.long(4)),
                                    pytest.param("curious", marks=pytest.mark.long(4)),
                                    pytest.param("oblivistore", marks=pytest.mark.long(4)),
                                    pytest.param("direct", marks=pytest.mark.long(4))])
@pytest.mark.skipif(not os.environ.get("ORAM_TEST_MINIO"),
                    reason="needs MinIO: set ORAM_TEST_MINIO to its binary (scripts/test.sh exports it)")
def test_crash_torture_minio(tmp_path, engine):
    with minio_server(tmp_path / "minio") as endpoint:
        backend = client(endpoint, MINIO_USER, MINIO_PASSWORD)
        deadline = time.monotonic() + 60
        while True:  # MinIO may need a moment after opening its port
            try:
                backend.create_bucket(Bucket="oram-crash")
                break
            except (BotoCoreError, ClientError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        config = tmp_path / "proxy.toml"
        config.write_text(
            f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n\n[backend]\nkind = \"s3\"\n"
            f"bucket = \"oram-crash\"\nkey_prefix = \"crash\"\nendpoint = {json.dumps(endpoint)}\n"
            f"region = \"us-east-1\"\naccess_key = \"{MINIO_USER}\"\nsecret_key = \"{MINIO_PASSWORD}\"\n")
        config.chmod(0o600)  # it holds a secret key: the proxy refuses it readable by others
        torture("minio", engine, tmp_path, ["--config", str(config)])
    shutil.rmtree(tmp_path / "minio")  # kept only when the test fails
