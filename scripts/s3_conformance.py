#!/usr/bin/env python3
"""Runs Versity Gateway's S3 integration tests against oram-proxy, one process per test.

Driven by scripts/s3-conformance.sh, which installs the pinned versitygw and writes the
adapter for the suite's `./versitygw admin` commands. Three commands:

  list GROUP_TESTS_GO [ROOT_GROUP]   the tests of versitygw's `full-flow` (or
      ROOT_GROUP), in its order, as `run|sync NAME GROUP` lines: the `ts.Run` and
      `ts.Sync` calls reached from `func TestFullFlow` in tests/integration/
      group-tests.go of the pinned module, with its `if ts.conf.X {` blocks decided
      as `full-flow --versioning-enabled` decides them (versioning on; not Azure,
      Windows or sidecar).
  run --list FILE --out FILE --versitygw BIN --proxy-bin BIN --work DIR [...]   starts
      an oram-proxy on a fresh data directory and runs each test as `versitygw test
      NAME --vs` (its own process, so that a test that panics, which the suite's
      full-flow command would die of, fails alone), one after the other (the suite
      names its buckets test-bucket-1, -2, ... per process: two at once would share
      them); after a failing test, deletes every bucket left (its teardown may not
      have run), and when that is refused (a compliance retention) starts a fresh
      proxy, so that the next test starts from no bucket. --host-style: virtual-
      hosted–style addressing under the proxy's `[s3] domain`.
  summary --known FILE --min MODE=N RESULTS...   per-feature pass/fail counts, the
      failures not in the known-failures file, and exit 1 when fewer than N passed in
      a mode (path-style, host-style).

Results are TSV lines: mode, name, group, PASS/FAIL, seconds, first failure message.
"""

import argparse
import collections
import fnmatch
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

# The flags `versitygw test full-flow --versioning-enabled` runs with.
FLAGS = {"versioningEnabled": True, "azureTests": False, "windowsTests": False, "sidecarTests": False}

# Features by test name, first match wins; "objects" for the rest.
FEATURES = [
    ("object lock", r"WORM|Retention|LegalHold|ObjectLock|object_lock|LockConfiguration|BucketLock|bucket_lock"),
    ("tagging", r"Tagging|tagging|_tags?\b|Tags"),
    ("versioning", r"^(Versioning|ListObjectVersions|PutBucketVersioning|GetBucketVersioning)"),
    ("bucket policy and access", r"Policy|AccessControl|PublicBucket|_public\b|IAM_"),
    ("ACLs and ownership controls", r"Acl|OwnershipControls|_acl\b|canned_acl|ownership"),
    ("CORS", r"Cors|PreflightOPTIONS"),
    ("website", r"Website"),
    ("POST object (browser upload)", r"^PostObject"),
    ("authentication and signing", r"^(Authentication|PresignedAuth|Unsigned|Signed)"),
    ("multipart", r"Multipart|UploadPart|ListParts|ListMultipartUploads|_mp_|CompleteMultipart"),
    ("object attributes", r"GetObjectAttributes"),
    ("checksums", r"[Cc]hecksum"),
    ("listings", r"^ListObjects"),
    ("buckets", r"Bucket|^Router|^Server"),
]


def feature(name, _group):
    for label, pattern in FEATURES:
        if re.search(pattern, name):
            return label
    return "objects"


def list_tests(source, root):
    """The (kind, name, group) of every test `root` runs, in order."""
    text = pathlib.Path(source).read_text()
    funcs = {
        m.group(1): m.group(2).splitlines()
        for m in re.finditer(r"^func (Test\w+)\(ts \*TestState\) \{\n(.*?)^\}", text, re.S | re.M)
    }

    def condition(expr):
        # Only `ts.conf.<flag>`, `!`, `&&`, `||` and parentheses occur.
        py = re.sub(r"ts\.conf\.(\w+)", lambda m: str(FLAGS[m.group(1)]), expr)
        py = py.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
        if not re.fullmatch(r"[\sA-Za-z()]*", py):
            raise SystemExit(f"cannot decide `if {expr}`")
        return eval(py, {"__builtins__": {}})  # noqa: S307 (True/False/and/or/not only)

    out = []

    def walk(name):
        active = [True]
        for line in funcs[name]:
            s = line.strip()
            if m := re.fullmatch(r"if (.*) \{", s):
                active.append(active[-1] and condition(m.group(1)))
            elif s == "}":
                active.pop()
            elif not active[-1] or not s or s.startswith("//"):
                continue
            elif m := re.fullmatch(r"ts\.(Run|Sync)\((\w+)\)", s):
                out.append((m.group(1).lower(), m.group(2), name))
            elif m := re.fullmatch(r"(Test\w+)\(ts\)", s):
                walk(m.group(1))
            else:
                raise SystemExit(f"{source}: {name}: a line this parser does not know: {s}")

    walk(root)
    if len(out) < 100:
        raise SystemExit(f"{source}: only {len(out)} tests under {root}")
    return out


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_failure(output):
    """The suite's first FAIL line, or the panic, or the last line."""
    text = ANSI.sub("", output)
    for line in text.splitlines():
        if line.startswith("FAIL "):
            return line[5:].split(": ", 1)[-1]
    if m := re.search(r"^panic: .*$", text, re.M):
        return m.group(0)
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else "(no output)"


class Proxy:
    """One oram-proxy on a fresh data directory under `work` (Path ORAM, fs back-end)."""

    def __init__(self, args, serial):
        self.args = args
        self.dir = pathlib.Path(args.work, f"{args.mode}-{serial}")
        self.dir.mkdir(parents=True)
        self.port, self.metrics_port = free_ports(2)
        self.users_file = self.dir / "users.txt"
        self.users_file.write_text("")
        config = self.dir / "proxy.toml"
        config.write_text(f'[s3]\ndomain = "{args.domain}"\n')
        env = dict(os.environ, ORAM_PROXY_ROOT_USER=args.access, ORAM_PROXY_ROOT_PASSWORD=args.secret,
                   RUST_LOG="warn")
        self.log = open(pathlib.Path(args.logs, f"proxy-{args.mode}-{serial}.log"), "w+")
        self.proc = subprocess.Popen(
            [args.proxy_bin, "serve", "--config", str(config), "--data-dir", str(self.dir / "data"),
             "--s3-listen", f"127.0.0.1:{self.port}", "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
             "--capacity-blocks", str(args.capacity_blocks), "--block-size", "65536", "--no-fsync",
             "--checkpoint-interval", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"oram-proxy exited with {self.proc.returncode}: {self.logs()}")
            # Serving once the banner's last line is out.
            if "  secret key: " in self.logs():
                break
            time.sleep(0.1)
        else:
            self.stop()
            raise SystemExit("oram-proxy did not start within 120 s")
        host = args.domain if args.host_style else "127.0.0.1"
        self.endpoint = f"http://{host}:{self.port}"
        # Virtual-hosted–style names <bucket>.<domain>, which no DNS resolves: every
        # request goes to the proxy as to an HTTP proxy, absolute-form.
        self.http_proxy = f"http://127.0.0.1:{self.port}" if args.host_style else None
        self.clients = {}

    def logs(self):
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self):
        """What the suite's `./versitygw admin` adapter needs to add users."""
        return {
            "ORAM_PROXY_BIN": self.args.proxy_bin,
            "S3_CONF_OPERATOR_URL": f"http://127.0.0.1:{self.metrics_port}",
            "S3_CONF_TOKEN_FILE": str(self.dir / "data" / "metrics.token"),
            "S3_CONF_USERS": str(self.users_file),
        }

    def client(self, access, secret):
        if access not in self.clients:
            import boto3
            from botocore.config import Config

            cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}, connect_timeout=10,
                         read_timeout=60, proxies={"http": self.http_proxy} if self.http_proxy else None)
            self.clients[access] = boto3.client(
                "s3", endpoint_url=self.endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
                region_name="us-east-1", config=cfg)
        return self.clients[access]

    def users(self):
        return [tuple(line.split()[:2]) for line in self.users_file.read_text().splitlines()
                if len(line.split()) >= 2]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def delete_buckets(s3):
    """Deletes every bucket the client's user owns, with what is in it; the names left."""
    left = []
    try:
        buckets = [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
    except Exception:  # a user the test removed
        return left
    for b in buckets:
        try:
            # A Deny binds the owner too: the policy goes first (its owner may always).
            s3.delete_bucket_policy(Bucket=b)
        except Exception:
            pass
        try:
            for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=b):
                for u in page.get("Uploads", []):
                    s3.abort_multipart_upload(Bucket=b, Key=u["Key"], UploadId=u["UploadId"])
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=b):
                for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                    try:
                        s3.put_object_legal_hold(Bucket=b, Key=v["Key"], VersionId=v["VersionId"],
                                                 LegalHold={"Status": "OFF"})
                    except Exception:
                        pass
                    s3.delete_object(Bucket=b, Key=v["Key"], VersionId=v["VersionId"],
                                     BypassGovernanceRetention=True)
            s3.delete_bucket(Bucket=b)
        except Exception as e:
            left.append(f"{b} ({type(e).__name__}: {e})")
    return left


def run(args):
    tests = [line.split() for line in open(args.list) if line.strip()]
    if args.only:
        wanted = set(args.only.split(","))
        tests = [t for t in tests if t[1] in wanted]
    env = dict(os.environ)
    for k in ("AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
              "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy"):
        env.pop(k, None)
    # The suite reads its credentials from flags; nothing from a home directory.
    env["AWS_CONFIG_FILE"] = os.devnull
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    extra = ["--host-style"] if args.host_style else []
    deadline = time.monotonic() + args.budget
    # SIGTERM (the script's trap, its timeout) stops the proxy on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    restarts = 0
    proxy = Proxy(args, restarts)
    try:
        with open(args.out, "w") as out:
            for i, (kind, name, group) in enumerate(tests):
                if time.monotonic() > deadline:
                    status, secs, msg = "FAIL", 0.0, f"not run: the {args.budget} s budget was spent"
                else:
                    status, secs, msg = run_one(args, proxy, env, extra, name)
                    if status == "FAIL" and not cleaned(proxy, name):
                        # What a test left could not be deleted (a compliance retention):
                        # the next test would find its bucket; a fresh volume instead.
                        proxy.stop()
                        restarts += 1
                        proxy = Proxy(args, restarts)
                msg = re.sub(r"\s+", " ", msg)[:400]
                out.write(f"{args.mode}\t{name}\t{group}\t{status}\t{secs:.1f}\t{msg}\n")
                out.flush()
                if args.progress and (i + 1) % args.progress == 0:
                    print(f"{args.mode}: {i + 1}/{len(tests)} tests run", flush=True)
    finally:
        proxy.stop()
    print(f"{args.mode}: {len(tests)} tests, the proxy restarted on a fresh volume {restarts} times "
          "(after tests that left undeletable objects)", flush=True)


def run_one(args, proxy, env, extra, name):
    """Runs one test in its own process: (status, seconds, first failure message)."""
    t = time.monotonic()
    cmd = [args.versitygw, "test", "-a", args.access, "-s", args.secret, "-e", proxy.endpoint, *extra,
           name, "--vs"]
    penv = dict(env, **proxy.env())
    if proxy.http_proxy:
        penv["HTTP_PROXY"] = proxy.http_proxy
    try:
        p = subprocess.run(cmd, cwd=args.cwd, env=penv, capture_output=True, text=True, errors="replace",
                           timeout=args.timeout)
        output, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        output = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        output += f"\ntimed out after {args.timeout} s"
        rc = -1
    secs = time.monotonic() - t
    passed = rc == 0 and re.search(r"^PASS ", ANSI.sub("", output), re.M)
    pathlib.Path(args.logs, f"{args.mode}-{name}.log").write_text(output)
    if passed:
        return "PASS", secs, ""
    return "FAIL", secs, first_failure(output)


def cleaned(proxy, name):
    """After a failed test: deletes the buckets left (its teardown may not have run) by the
    root user and the users the test created; False when some could not be deleted."""
    users = [(proxy.args.access, proxy.args.secret)] + proxy.users()
    left = []
    for access, secret in users:
        left += delete_buckets(proxy.client(access, secret))
    # Users of earlier tests were cleaned then: only this test's are checked next time.
    proxy.users_file.write_text("")
    if left:
        print(f"after {name}: buckets left: {'; '.join(left)[:300]}", flush=True)
    return not left


def load_known(path):
    """(pattern, class, reason) rows of the known-failures tables: `| `NAME`, `NAME` | class | reason |`,
    class a, b, c or u (not yet looked at); a name may be a pattern (`PostObject_*`) or
    be prefixed by a mode (`host-style:NAME`)."""
    rows = []
    for line in open(path):
        m = re.match(r"\|\s*((?:`[^`]+`[,\s]*)+)\|\s*([abcu])\s*\|(.*)\|\s*$", line)
        if m:
            for pat in re.findall(r"`([^`]+)`", m.group(1)):
                rows.append((pat.strip(), m.group(2), m.group(3).strip()))
    return rows


def summary(args):
    results = []
    for f in args.results:
        for line in open(f):
            mode, name, group, status, secs, msg = line.rstrip("\n").split("\t", 5)
            results.append((mode, name, group, status, float(secs), msg))
    known = load_known(args.known)

    def known_row(mode, name):
        """The first row naming the test (`NAME`, `PATTERN*` or `MODE:NAME`)."""
        for pat, cls, _ in known:
            m, _, p = pat.rpartition(":")
            if (not m or m == mode) and fnmatch.fnmatchcase(name, p):
                return pat, cls
        return None, None

    per = collections.defaultdict(collections.Counter)
    per_mode = collections.defaultdict(collections.Counter)
    classes = collections.Counter()
    unexpected, now_passing = [], []
    for mode, name, group, status, _, msg in results:
        per[feature(name, group)][status] += 1
        per_mode[mode][status] += 1
        pat, cls = known_row(mode, name)
        if status == "FAIL":
            classes[cls or "unclassified"] += 1
            if cls is None:
                unexpected.append(f"{mode}:{name}: {msg}")
        elif pat is not None and "*" not in pat:
            now_passing.append(f"{mode}:{name}")
    total = collections.Counter()
    print(f"{'feature':<32} {'passed':>6} {'failed':>6}")
    for feat in sorted(per, key=lambda k: -sum(per[k].values())):
        c = per[feat]
        total.update(c)
        print(f"{feat:<32} {c['PASS']:>6} {c['FAIL']:>6}")
    for mode in sorted(per_mode):
        print(f"s3 conformance ({mode}): {per_mode[mode]['PASS']} passed, {per_mode[mode]['FAIL']} failed")
    print(f"s3 conformance total: {total['PASS']} passed, {total['FAIL']} failed "
          f"(known failures by class: a {classes['a']}, b {classes['b']}, c {classes['c']}, "
          f"u {classes['u']}; not listed {classes['unclassified']}); {sum(r[4] for r in results):.0f} s in the tests")
    if unexpected:
        print(f"failures not in {args.known} ({len(unexpected)}):")
        for u in unexpected:
            print("  " + u[:300])
    if now_passing:
        print(f"listed as known failures in {args.known} but passing ({len(now_passing)}):")
        for u in now_passing:
            print("  " + u)
    low = False
    for spec in args.min:
        mode, _, n = spec.partition("=")
        if per_mode[mode]["PASS"] < int(n):
            print(f"FAIL: {per_mode[mode]['PASS']} tests passed {mode}, fewer than the minimum {n}",
                  file=sys.stderr)
            low = True
    if low:
        return 1
    if args.strict and unexpected:
        print("FAIL: failures not in the known-failures file", file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("list")
    lp.add_argument("source")
    lp.add_argument("root", nargs="?", default="TestFullFlow")
    rp = sub.add_parser("run")
    rp.add_argument("--list", required=True)
    rp.add_argument("--out", required=True)
    rp.add_argument("--mode", default="path-style")
    rp.add_argument("--host-style", action="store_true", help="virtual-hosted–style addressing")
    rp.add_argument("--versitygw", required=True)
    rp.add_argument("--proxy-bin", required=True, help="the oram-proxy binary")
    rp.add_argument("--work", required=True, help="a directory for the proxies' data directories")
    rp.add_argument("--domain", default="s3.conformance.test", help="the proxy's `[s3] domain`")
    rp.add_argument("--capacity-blocks", type=int, default=8192, help="of 64 KiB")
    rp.add_argument("--access", default="s3-conformance")
    rp.add_argument("--secret", default="s3-conformance-secret-0123456789")
    rp.add_argument("--cwd", required=True, help="where the suite runs ./versitygw for its admin commands")
    rp.add_argument("--logs", required=True, help="a directory for each test's output and the proxies' logs")
    rp.add_argument("--only", help="comma-separated test names (while iterating)")
    rp.add_argument("--timeout", type=int, default=180, help="seconds per test")
    rp.add_argument("--budget", type=int, default=1500, help="seconds for the whole run")
    rp.add_argument("--progress", type=int, default=100)
    sp = sub.add_parser("summary")
    sp.add_argument("--known", required=True)
    sp.add_argument("--min", action="append", default=[], metavar="MODE=N",
                    help="the fewest tests that must pass in a mode (path-style, host-style)")
    sp.add_argument("--strict", action="store_true", help="also fail on a failure not in the known file")
    sp.add_argument("results", nargs="+")
    args = ap.parse_args()
    if args.cmd == "list":
        for kind, name, group in list_tests(args.source, args.root):
            print(kind, name, group)
        return 0
    if args.cmd == "run":
        run(args)
        return 0
    return summary(args)


if __name__ == "__main__":
    sys.exit(main())
