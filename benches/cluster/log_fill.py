#!/usr/bin/env python3
"""How full are a cluster's shipped-log records? (outside CI; it sizes
`[state] log_record_kib` for members.)

Every slot of a member ships its own log: one record of `log_record_kib` every
`log_interval_ms`, busy or idle. This starts a real 3-member etcd, a front and
two members serving 4 slots (`[cluster] slots = 4`) on 127.0.0.1 over one fs
backend (no link shaping: the backend is as fast as this machine allows, so the
state changes as fast as it can here), with the log every `--log-ms`, once per
record size in `--record-kib` (each size a fresh cluster, the same workload).
Each workload runs `--secs` seconds of PUTs and GETs (half each) from
`--threads` client threads: 4 KiB objects over 400 keys, then 256 KiB objects
over 32 keys. Every second it reads each member's and the front's /metrics:
per slot, the log's records and where its stream stands.

Reported per record size and workload: client operations a second, and for
the members' slots and the front the stream's rate (mean, and the largest
one-second window) and how full the records were (stream bytes over records
times a record's capacity: mean and largest window). Every acknowledged object
is read back at the end of each workload.

  target/e2e-venv/bin/python benches/cluster/log_fill.py --record-kib 1024,64
"""

import argparse
import concurrent.futures
import os
import pathlib
import random
import re
import statistics
import sys
import tempfile
import threading
import time

E2E = pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"
sys.path.insert(0, str(E2E))

from conftest import free_port  # noqa: E402
from test_cluster import member_config, node_metrics  # noqa: E402
from test_failover import Etcd, coordinated, make_certs_and_key, start_members  # noqa: E402

MEMBERS = ["front", "node0", "node1"]
SLOTS = 4
SERIES = re.compile(r'^(oram_log_records_total|oram_log_stream_bytes)(?:\{slot="(\d+)"\})? (\S+)$',
                    re.M)


def sample(root, ports):
    """{(member, slot or None): (records, stream bytes)} and the record capacity."""
    out, capacity = {}, None
    for member, port in ports.items():
        status, text = node_metrics(root, port, node=member)
        assert status == 200, text
        for name, slot, value in SERIES.findall(text):
            key = (member, int(slot) if slot else None)
            records, stream = out.get(key, (0.0, 0.0))
            if name == "oram_log_records_total":
                records = float(value)
            else:
                stream = float(value)
            out[key] = (records, stream)
        m = re.search(r"^oram_log_record_capacity_bytes (\S+)$", text, re.M)
        capacity = float(m.group(1)) if m else capacity
    return out, capacity


def load(s3, keys, size, secs, threads):
    """PUTs and GETs (alternately, per thread) of `size`-byte objects over `keys`
    keys for `secs` seconds; every GET of an acknowledged key checked. Returns
    operations done and the last body of each key."""
    last, lock, stop = {}, threading.Lock(), time.monotonic() + secs
    done = [0]

    def worker(t):
        rng = random.Random(t)
        n = 0
        while time.monotonic() < stop:
            k = f"{size}-{rng.randrange(keys)}"
            if n % 2 == 0:
                body = os.urandom(size)
                s3.put_object(Bucket="bkt", Key=k, Body=body)
                with lock:
                    last[k] = body
            else:
                with lock:
                    want = last.get(k)
                if want is not None:
                    got = s3.get_object(Bucket="bkt", Key=k)["Body"].read()
                    # Another thread may have written the key since: a body
                    # of the right size is all a racing read can promise.
                    assert len(got) == size, (k, len(got))
            n += 1
        with lock:
            done[0] += n

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return done[0], last


def windows(samples, capacity):
    """Per (member, slot) present throughout: one-second stream rates and fills."""
    out = {}
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        for key, (r1, s1) in b.items():
            if key not in a:
                continue
            r0, s0 = a[key]
            if r1 <= r0:
                continue
            rate = (s1 - s0) / (t1 - t0)
            fill = (s1 - s0) / ((r1 - r0) * capacity)
            out.setdefault(key, []).append((rate, fill))
    return out


def run_one(root, record_kib, args):
    etcd = Etcd(root)
    procs = []
    try:
        make_certs_and_key(root, MEMBERS)
        ports = [free_port() for _ in range(2)]
        addrs = [f"127.0.0.1:{p}" for p in ports]
        metrics = {m: free_port() for m in MEMBERS}
        extra = f"slots = {SLOTS}\n"

        def cfg(member, role, index=0):
            path = member_config(root, member, addrs, role, index, log_ms=args.log_ms,
                                 metrics_port=metrics[member])
            path.write_text(path.read_text().replace(
                f"log_interval_ms = {args.log_ms}\n",
                f"log_interval_ms = {args.log_ms}\nlog_record_kib = {record_kib}\n", 1))
            return coordinated(path, etcd, extra)

        front_cfg = cfg("front", "front")
        node_cfgs = [cfg(f"node{i}", "node", i) for i in range(2)]
        _, front = start_members(root, front_cfg, node_cfgs, ports, procs)
        s3 = front.client()
        s3.create_bucket(Bucket="bkt")
        results = []
        for size, keys in ((4096, 400), (256 << 10, 32)):
            samples, stop = [], threading.Event()

            def sampler():
                while not stop.is_set():
                    samples.append((time.monotonic(), sample(root, metrics)[0]))
                    stop.wait(1.0)

            capacity = sample(root, metrics)[1]
            th = threading.Thread(target=sampler)
            th.start()
            t = time.monotonic()
            ops, last = load(s3, keys, size, args.secs, args.threads)
            elapsed = time.monotonic() - t
            stop.set()
            th.join()
            for k, body in last.items():
                assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == body, k
            results.append((size, ops / elapsed, windows(samples, capacity), capacity))
        return results
    finally:
        for p in procs:
            p.kill()
        etcd.stop()


def report(record_kib, results, log_ms):
    for size, ops, per, capacity in results:
        print(f"\nrecords of {record_kib} KiB every {log_ms} ms (capacity {capacity:.0f} B), "
              f"{size // 1024} KiB objects: {ops:.1f} operations/s")
        members = [w for (m, _), w in per.items() if m != "front"]
        front = [w for (m, _), w in per.items() if m == "front"]
        for name, group in (("member slots", members), ("front", front)):
            every = [x for w in group for x in w]
            if not every:
                continue
            rates = [r for r, _ in every]
            fills = [f for _, f in every]
            print(f"  {name}: stream {statistics.mean(rates) / 1024:.1f} KiB/s mean, "
                  f"{max(rates) / 1024:.1f} KiB/s largest second; records "
                  f"{statistics.mean(fills):.2%} full mean, {max(fills):.2%} largest second "
                  f"({len(group)} logs, {len(every)} windows)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record-kib", default="1024,64",
                    help="record sizes to compare, comma-separated (KiB)")
    ap.add_argument("--log-ms", type=int, default=20)
    ap.add_argument("--secs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    for kib in [int(x) for x in args.record_kib.split(",")]:
        with tempfile.TemporaryDirectory(prefix="oram-log-fill-") as d:
            report(kib, run_one(pathlib.Path(d), kib, args), args.log_ms)


if __name__ == "__main__":
    main()
