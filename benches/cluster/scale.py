#!/usr/bin/env python3
"""Does a cluster scale with its nodes' links? ObliviStore over MinIO, every
backend link shaped by its own oram-linkshape relay, in one run:

  - no ORAM:   client -> link -> MinIO (the bound of one link);
  - single:    client -> oram-proxy -> link -> MinIO (one machine, one link);
  - cluster k: client -> front -> k nodes, node i -> its own link -> MinIO,
               for k = 1, 2, 3 (the front's own backend traffic on a link too).

Each configuration gets the same workload: `--ops` PUTs of `--size` (4 KiB) objects from
`--threads` client threads, then a GET of each (checked byte for byte); the
rates are operations a second. Every process listens on 127.0.0.1 free ports
and is stopped by PID. The relay's cap is per direction and shared by the
connections through it, as on a real link, so k nodes have k times one link's
capacity; what a node's CPU, the front or this 2-core machine cost shows as
the distance from k times.

  target/e2e-venv/bin/python benches/cluster/scale.py --bin target/debug \\
      --minio "$(go env GOPATH)/bin/minio"
"""

import argparse
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import boto3
from botocore.config import Config

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"))
from conftest import free_port, wait_port  # noqa: E402

AK, SK = "benchuser", "benchsecret123"
ROOT_USER, ROOT_SECRET = "bench", "bench-secret-1"


def wait_text(path, text, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{path} : exited {proc.returncode}")
        time.sleep(0.1)
    raise RuntimeError(f"{text!r} not in {path} after {timeout} s")


def client(endpoint, ak, sk, threads):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      retries={"max_attempts": 3}, max_pool_connections=threads + 2,
                      read_timeout=600))


def workload(s3, bucket, ops, threads, size=4096):
    """PUTs then GETs `ops` objects of `size` bytes from `threads` threads:
    (put/s, get/s)."""
    s3.create_bucket(Bucket=bucket)
    bodies = {f"o{i}": os.urandom(size) for i in range(ops)}
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        t = time.perf_counter()
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                      bodies.items()))
        put_s = time.perf_counter() - t
        t = time.perf_counter()
        got = dict(pool.map(lambda k: (k, s3.get_object(Bucket=bucket, Key=k)["Body"].read()),
                            bodies))
        get_s = time.perf_counter() - t
    assert got == bodies, "an object read back differs"
    return ops / put_s, ops / get_s


class Run:
    """The processes of one benchmark run, stopped by PID at the end."""

    def __init__(self, args):
        self.args = args
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="oram-scale-"))
        self.procs = []
        self.bin = pathlib.Path(args.bin)

    def start(self, argv, log, env=None):
        out = open(self.work / log, "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def link(self, mbit=None):
        """A new shaped link to MinIO: the relay's address."""
        port = free_port()
        self.start([str(self.bin / "oram-linkshape"), "--listen", f"127.0.0.1:{port}",
                    "--target", f"127.0.0.1:{self.minio_port}", "--rtt-ms", self.args.rtt_ms,
                    "--mbit", mbit or self.args.mbit], f"relay-{port}.log")
        wait_port(port)
        return f"http://127.0.0.1:{port}"

    def minio(self):
        self.minio_port = free_port()
        env = dict(os.environ, MINIO_ROOT_USER=AK, MINIO_ROOT_PASSWORD=SK, MINIO_BROWSER="off")
        self.start([self.args.minio, "server", "--quiet", "--address", f"127.0.0.1:{self.minio_port}",
                    "--console-address", f"127.0.0.1:{free_port()}", str(self.work / "minio")],
                   "minio.log", env)
        wait_port(self.minio_port)
        direct = client(f"http://127.0.0.1:{self.minio_port}", AK, SK, 2)
        deadline = time.monotonic() + 30
        while True:
            try:
                direct.create_bucket(Bucket="oram")
                return
            except Exception:  # MinIO still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def config(self, name, prefix, endpoint, cluster=""):
        path = self.work / f"{name}.toml"
        path.write_text(f"""data_dir = "{self.work / name}"

[engine]
kind = "oblivistore"
block_size = 4096
capacity_blocks = {self.args.blocks}
max_batch = {self.args.max_batch}

[backend]
kind = "s3"
bucket = "oram"
prefix = "{prefix}"
endpoint = "{endpoint}"
access_key = "{AK}"
secret_key = "{SK}"

[key]
key_file = "{self.work / 'master.key'}"

[state]
checkpoint_interval_secs = {self.args.checkpoint_secs}

[s3]
# Every client thread in flight at once (beyond it the front answers 503 SlowDown).
max_concurrent_requests = {max(256, 2 * self.args.threads)}
{cluster}""")
        path.chmod(0o600)  # it holds the backend's secret key
        return path

    def serve_front(self, name, cfg):
        port = free_port()
        env = dict(os.environ, ORAM_PROXY_ROOT_USER=ROOT_USER, ORAM_PROXY_ROOT_PASSWORD=ROOT_SECRET)
        p = self.start([str(self.bin / "oram-proxy"), "serve", "--config", str(cfg),
                        "--s3-listen", f"127.0.0.1:{port}"], f"{name}.log", env)
        wait_text(self.work / f"{name}.log", "  secret key: ", p, timeout=300)
        wait_port(port)
        return f"http://127.0.0.1:{port}"

    def single(self):
        cfg = self.config("single", "single", self.link())
        return self.serve_front("single", cfg)

    def cluster(self, k):
        members = ["front"] + [f"node{i}" for i in range(k)]
        certs = self.work / f"certs-{k}"
        subprocess.run([str(self.bin / "oram-proxy"), "cluster", "certs", "--out", str(certs),
                        "--members", ",".join(members)], check=True, stdout=subprocess.DEVNULL)
        addrs = [f"127.0.0.1:{free_port()}" for _ in range(k)]
        nodes = ", ".join(f'"{a}"' for a in addrs)
        prefix = f"cluster{k}"

        def section(role, member, i=0):
            return (f'\n[cluster]\nrole = "{role}"\nnodes = [{nodes}]\nnode = {i}\n'
                    f'tls_dir = "{certs / member}"\nwait_secs = 300\n')

        # Each node serves /metrics too: its backend requests and bytes.
        self.node_metrics = []
        for i in range(k):
            port = free_port()
            self.node_metrics.append((port, self.work / f"c{k}-node{i}" / "metrics.token"))
            metrics = f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n'
            cfg = self.config(f"c{k}-node{i}", prefix, self.link(),
                              metrics + section("node", f"node{i}", i))
            p = self.start([str(self.bin / "oram-proxy"), "serve", "--config", str(cfg)],
                           f"c{k}-node{i}.log")
            self.pending = getattr(self, "pending", []) + [(f"c{k}-node{i}.log", p)]
        # The front serves /metrics: the rounds' size (ops and sub-accesses
        # a round), read before and after the workload.
        self.metrics_port = free_port()
        metrics = f'\n[metrics]\nlisten = "127.0.0.1:{self.metrics_port}"\n'
        self.metrics_token = self.work / f"c{k}-front" / "metrics.token"
        front = self.config(f"c{k}-front", prefix, self.link(self.args.front_mbit),
                            metrics + section("front", "front"))
        url = self.serve_front(f"c{k}-front", front)
        self.front_pid = self.procs[-1].pid
        for log, p in self.pending:
            wait_text(self.work / log, "  partitions: ", p)
        self.pending = []
        return url

    @staticmethod
    def scrape(port, token):
        """Every sample of a member's /metrics: {name with labels: value}."""
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"Authorization": f"Bearer {token.read_text().strip()}"})
        text = urllib.request.urlopen(req, timeout=30).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def engine_counters(self):
        """The cluster front's rounds, accesses and sub-accesses so far, its
        CPU seconds (from /proc), and each node's backend requests and bytes
        by verb (summed over the nodes) and each node's bytes."""
        front = self.scrape(self.metrics_port, self.metrics_token)
        out = {}
        for name in ("rounds_total", "accesses_total", "sub_accesses_total"):
            for key, v in front.items():
                if key == f"oram_engine_{name}" or key.startswith(f"oram_engine_{name}{{"):
                    out[name] = v
        for step in ("plan", "partitions", "commit"):
            out[f"step_{step}_us"] = sum(v for key, v in front.items()
                                         if f"round_{step}_microseconds_total" in key)
        fields = pathlib.Path(f"/proc/{self.front_pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["front_cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for port, token in self.node_metrics:
            node_bytes = 0.0
            for key, v in self.scrape(port, token).items():
                for short in ("requests", "bytes"):
                    if key.startswith(f"oram_backend_{short}_total{{"):
                        verb = key.split('verb="', 1)[1].split('"', 1)[0]
                        out[f"node_{short}_{verb}"] = out.get(f"node_{short}_{verb}", 0) + v
                        if short == "bytes":
                            node_bytes += v
            out.setdefault("node_bytes", []).append(node_bytes)
        return out

    def stop(self):
        """Stops the proxies first (their final checkpoints need the links and
        MinIO), then the relays and MinIO, each by PID."""
        def rank(p):
            name = pathlib.Path(p.args[0]).name
            return 0 if name == "oram-proxy" else 1 if name == "oram-linkshape" else 2
        for r in range(3):
            group = [p for p in self.procs if rank(p) == r]
            for p in group:
                p.terminate()
            for p in group:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug", help="the directory of oram-proxy and oram-linkshape")
    ap.add_argument("--minio", required=True)
    ap.add_argument("--rtt-ms", default="20")
    ap.add_argument("--mbit", default="16", help="each link's cap per direction")
    ap.add_argument("--front-mbit", default=None, help="the front's own link's cap (default: --mbit)")
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--size", type=int, default=4096, help="each object's size in bytes")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=8192, help="the volume's capacity in 4 KiB blocks")
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--max-batch", type=int, default=64,
                    help="[engine] max_batch: ops a round at most (the default's)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--checkpoint-secs", type=int, default=300,
                    help="[state] checkpoint_interval_secs of every proxy (the default's)")
    ap.add_argument("--no-single", action="store_true",
                    help="skip the single proxy's row (long with large objects on slow links)")
    args = ap.parse_args()
    run = Run(args)
    (run.work / "master.key").write_text(os.urandom(32).hex() + "\n")
    (run.work / "master.key").chmod(0o600)
    rows, sizes = [], []
    try:
        run.minio()
        base = workload(client(run.link(), AK, SK, args.threads), "baseline", args.ops, args.threads,
                        args.size)
        rows.append(("no ORAM (one link)", 1, base))
        print(rows[-1], flush=True)
        single = None
        if not args.no_single:
            single = workload(client(run.single(), ROOT_USER, ROOT_SECRET, args.threads), "bkt",
                              args.ops, args.threads, args.size)
            rows.append(("single proxy (one link)", 1, single))
            print(rows[-1], flush=True)
        for k in [int(x) for x in args.nodes.split(",")]:
            url = run.cluster(k)
            before = run.engine_counters()
            r = workload(client(url, ROOT_USER, ROOT_SECRET, args.threads), "bkt",
                         args.ops, args.threads, args.size)
            after = run.engine_counters()
            d = {n: after.get(n, 0) - before.get(n, 0) for n in after if n != "node_bytes"}
            rounds = max(d.get("rounds_total", 0), 1)
            accesses = max(d.get("accesses_total", 0), 1)
            per_node = [a - b for a, b in zip(after["node_bytes"], before["node_bytes"])]
            mean = sum(per_node) / len(per_node)
            costs = ", ".join(f"{n[5:]} {v / accesses:.2f}" if "requests" in n
                              else f"{n[5:]} {v / accesses / 1024:.1f} KiB"
                              for n, v in sorted(d.items()) if n.startswith("node_") and v)
            sizes.append(f"{k} node{'s' if k > 1 else ''}: {d.get('rounds_total', 0):.0f} rounds, "
                         f"{d.get('accesses_total', 0) / rounds:.1f} ops and "
                         f"{d.get('sub_accesses_total', 0) / rounds:.1f} sub-accesses a round; "
                         f"a round's plan {d['step_plan_us'] / rounds / 1000:.0f} ms, "
                         f"partitions (reads) {d['step_partitions_us'] / rounds / 1000:.0f} ms, "
                         f"commit {d['step_commit_us'] / rounds / 1000:.0f} ms; "
                         f"the front's CPU {d['front_cpu_s'] * 1e6 / accesses:.0f} µs an access; "
                         f"the nodes' backend, an access: {costs}; "
                         f"busiest node's bytes ÷ mean {max(per_node) / max(mean, 1):.2f}")
            rows.append((f"cluster, {k} node{'s' if k > 1 else ''} ({k} links)", k, r))
            print(rows[-1], sizes[-1], flush=True)
    finally:
        run.stop()
        if not args.keep:
            shutil.rmtree(run.work, ignore_errors=True)
        else:
            print(f"work directory: {run.work}")
    print()
    print(f"links: RTT {args.rtt_ms} ms, {args.mbit} Mbit/s per direction each (oram-linkshape); "
          f"ObliviStore, {args.blocks} blocks of 4 KiB, rounds of {args.max_batch} ops at most; {args.ops} objects of {args.size} bytes from "
          f"{args.threads} threads")
    s_put, s_get = single or base
    versus = "single" if single else "no ORAM"
    print(f"| configuration | PUT/s | GET/s | PUT ÷ {versus} | GET ÷ {versus} |")
    print("|---|---|---|---|---|")
    for name, _, (put, get) in rows:
        print(f"| {name} | {put:.3g} | {get:.3g} | {put / s_put:.2f} | {get / s_get:.2f} |")
    for line in sizes:
        print(f"rounds of the cluster, {line}")
    # Scaling efficiency: k nodes' rate ÷ (k × one node's), where one node ran.
    clusters = [r for r in rows if r[0].startswith("cluster")]
    one = next((r for _, k, r in clusters if k == 1), None)
    if one:
        for name, k, (put, get) in clusters:
            if k > 1:
                print(f"scaling efficiency, {name}: PUT {put / (k * one[0]):.2f}, "
                      f"GET {get / (k * one[1]):.2f}")


if __name__ == "__main__":
    main()
