#!/usr/bin/env python3
"""The long chaos run of a rebalancing cluster (outside CI; the bounded version
is tests/e2e/test_rebalance.py): a real 3-member etcd, a front, and three
members serving 8 slots (`[cluster] slots = 8`) on 127.0.0.1, one fs backend,
the shipped log on. Under a continuous S3 writer, `--faults` times a live member
is killed with SIGKILL, paused with SIGSTOP until its slots are claimed by the
others (then resumed: it must exit by itself, its lease lost), or stopped
cleanly; its slots are spread over the live members. The machine then comes
back under a new id with its data directory wiped and is handed its share while
serving -- every third time behind a relay delaying its link to the front (60
ms round trip, `oram-linkshape`).

After each fault: the time until a write is accepted again and until the slots
are even again, a sample of the acknowledged objects read back byte for byte,
and a burst of reads whose per-partition accesses (every member's /metrics)
must pass a chi-square test of uniformity over all partitions and over each
member's own -- the slow member's included. At the end, every acknowledged
object, and `fsck`.

  target/e2e-venv/bin/python benches/cluster/chaos_slots.py --faults 50
"""

import argparse
import os
import pathlib
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

E2E = pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"
sys.path.insert(0, str(E2E))

from conftest import BIN, Proxy, free_port  # noqa: E402
from test_cluster import (Node, chi_square, chi_square_bound, member_config,  # noqa: E402
                          partition_accesses, read_back)
from test_failover import (LEASE_SECS, Etcd, coordinated, fsck_clean,  # noqa: E402
                           make_certs_and_key)
from test_rebalance import owners  # noqa: E402

SLOTS = 8
MACHINES = 3
KEYS = 300
READS = 200


class Machine:
    """One member machine: its certificate directory, its process incarnations."""

    def __init__(self, root, index, addrs, etcd):
        self.root, self.index, self.addrs, self.etcd = root, index, addrs, etcd
        self.gen = 0
        self.proc = None
        self.relay = None
        self.slow = False
        self.metrics = free_port()
        self.id = f"node{index}"

    @property
    def name(self):
        return f"m{self.index}"

    def start_node(self, port):
        cfg = coordinated(frequent_checkpoints(
            member_config(self.root, self.name, self.addrs, "node", self.index, log_ms=20,
                          metrics_port=self.metrics)), self.etcd,
            f"slots = {SLOTS}\nid = \"{self.id}\"\n")
        self.proc = Node(self.rundir(), cfg, port)

    def rundir(self):
        """Where this incarnation's output goes (kept across incarnations)."""
        d = self.root / self.name / f"run-{self.gen}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def join(self, slow):
        """Wipes the data directory and joins under a new id (its old id may
        still own slots in etcd); `slow`: behind a 60 ms relay."""
        self.stop_relay()
        self.gen += 1
        self.id = f"m{self.index}-{self.gen}"
        shutil.rmtree(self.root / self.name / "data", ignore_errors=True)
        port = free_port()
        extra = f'slots = {SLOTS}\nstandby = true\nid = "{self.id}"\nlisten = "127.0.0.1:{port}"\n'
        self.slow = slow
        if slow:
            relay_port = free_port()
            linkshape = pathlib.Path(BIN).parent / "oram-linkshape"
            log = open(self.root / f"relay-{self.id}.log", "w")
            self.relay = subprocess.Popen(
                [str(linkshape), "--listen", f"127.0.0.1:{relay_port}", "--target",
                 f"127.0.0.1:{port}", "--rtt-ms", "60", "--mbit", "0"],
                stdout=log, stderr=subprocess.STDOUT)
            extra += f'advertise = "127.0.0.1:{relay_port}"\n'
        cfg = coordinated(frequent_checkpoints(
            member_config(self.root, self.name, self.addrs, "node", 0, log_ms=20,
                          metrics_port=self.metrics, name=f"join-{self.gen}.toml")),
            self.etcd, extra)
        self.proc = Node(self.rundir(), cfg, port)
        self.proc.wait_ready()

    def alive(self):
        return self.proc is not None and self.proc.proc.poll() is None

    def stop_relay(self):
        if self.relay is not None:
            self.relay.kill()
            self.relay.wait(timeout=10)
            self.relay = None


def frequent_checkpoints(cfg):
    """Each member checkpoints every 20 s, which deletes the log records the
    checkpoint covers: 8 slots each shipping a record every 20 ms under a
    constant writer would otherwise keep gigabytes of log between the default
    5-minute checkpoints."""
    text = cfg.read_text().replace("log_interval_ms = 20\n",
                                   "log_interval_ms = 20\ncheckpoint_interval_secs = 20\n", 1)
    cfg.write_text(text)
    return cfg


def check_disk(root):
    free = shutil.disk_usage(root).free
    assert free > 8 << 30, f"only {free >> 20} MiB free under {root}: stopping"


def even(now, ids):
    counts = sorted(now.count(i) for i in ids)
    return None not in now and "" not in now and sum(counts) == SLOTS and \
        counts[-1] - counts[0] <= 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (a failed run always keeps it)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = pathlib.Path(tempfile.mkdtemp(prefix="oram-chaos-slots-"))
    etcd = Etcd(root)
    machines, front = [], None
    acked, lock = {}, threading.Lock()  # lock guards acked and accepted
    writing = threading.Lock()  # held by the writer around each write
    stop_writer = threading.Event()
    results = []
    finished = False  # a failed run keeps its work directory (every process's log)
    try:
        make_certs_and_key(root, ["front"] + [f"m{i}" for i in range(MACHINES)])
        ports = [free_port() for _ in range(MACHINES)]
        addrs = [f"127.0.0.1:{p}" for p in ports]
        machines = [Machine(root, i, addrs, etcd) for i in range(MACHINES)]
        for i, m in enumerate(machines):
            m.start_node(ports[i])
        front_cfg = coordinated(frequent_checkpoints(member_config(root, "front", addrs, "front",
                                                                   log_ms=20)), etcd,
                                f"slots = {SLOTS}\n")
        # The front logs each request to a node that fails or answers
        # slowly (debug): where a failover's wait goes.
        front = Proxy(root / "front", "--config", str(front_cfg),
                      env={"RUST_LOG": "info,oram_node=debug"})
        for m in machines:
            m.proc.wait_ready()
        s3 = front.client()
        s3.create_bucket(Bucket="bkt")

        counter, accepted, errors = [0], [0], {}

        def writer():
            w = front.client()
            wrng = random.Random(args.seed + 1)
            while not stop_writer.is_set():
                counter[0] += 1
                key = f"w-{counter[0] % KEYS}"  # a bounded set, overwritten
                body = os.urandom(wrng.randrange(500, 20000))
                with writing:
                    started, t = time.strftime('%H:%M:%S', time.gmtime()), time.monotonic()
                    try:
                        w.put_object(Bucket="bkt", Key=key, Body=body)
                    except Exception as e:  # not acknowledged; its outcome unknown
                        print(f"  write from {started} failed after {time.monotonic() - t:.1f} s: "
                              f"{type(e).__name__}: {e}", flush=True)
                        errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                        with lock:
                            acked.pop(key, None)
                        failed = True
                    else:
                        took = time.monotonic() - t
                        if took > 2:
                            print(f"  write from {started} took {took:.1f} s", flush=True)
                        with lock:
                            acked[key] = body
                            accepted[0] += 1
                        failed = False
                if failed:
                    time.sleep(0.2)

        def accepted_after(t0, deadline, what):
            with lock:
                before = accepted[0]
            while True:
                with lock:
                    if accepted[0] > before + 1:
                        return time.monotonic() - t0
                assert time.monotonic() < deadline, f"{what}: no write accepted ({errors})"
                time.sleep(0.05)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        time.sleep(3)
        chis = []
        for fault in range(args.faults):
            check_disk(root)
            victim = rng.choice([m for m in machines if m.alive()])
            kind = rng.choice(["kill", "pause", "stop"])
            # The wall-clock time (UTC, as the processes' logs) to find the
            # fault in the members' and the front's logs.
            print(f"fault {fault + 1}: {kind} of {victim.name} ({victim.id}) at "
                  f"{time.strftime('%H:%M:%S', time.gmtime())}", flush=True)
            others = [m.id for m in machines if m is not victim]
            t0 = time.monotonic()
            deadline = t0 + 180
            if kind == "kill":
                victim.proc.proc.kill()
                victim.proc.proc.wait(timeout=10)
            elif kind == "pause":
                victim.proc.proc.send_signal(signal.SIGSTOP)
            else:
                assert victim.proc.stop() == 0, victim.proc.logs()[-3000:]
            # Its slots spread over the live members.
            while not even(owners(etcd.clients[0], slots=SLOTS), others):
                assert time.monotonic() < deadline, f"fault {fault}: {owners(etcd.clients[0], slots=SLOTS)}"
                time.sleep(0.1)
            spread = time.monotonic() - t0
            back = accepted_after(t0, deadline, f"fault {fault}")
            if kind == "pause":
                victim.proc.proc.send_signal(signal.SIGCONT)
                rc = victim.proc.proc.wait(timeout=60)
                assert rc != 0 and "lost" in victim.proc.logs(), victim.proc.logs()[-2000:]
            victim.stop_relay()
            # The machine comes back empty, every third time behind a slow link.
            slow = fault % 3 == 2
            t1 = time.monotonic()
            victim.join(slow)
            ids = [m.id for m in machines]
            while not even(owners(etcd.clients[0], slots=SLOTS), ids):
                assert time.monotonic() < t1 + 180, f"fault {fault}: not even after the join"
                time.sleep(0.1)
            rejoined = time.monotonic() - t1
            with writing:
                with lock:
                    sample = dict(rng.sample(sorted(acked.items()), min(20, len(acked))))
                read_back(s3, sample)
            # A burst of reads: each partition's accesses during it, uniform.
            with lock:
                keys = sorted(acked)
            before = {m.name: partition_accesses(root, m.name, m.metrics) for m in machines}
            for i in range(READS):
                k = keys[rng.randrange(len(keys))]
                s3.get_object(Bucket="bkt", Key=k)["Body"].read()
            every, per = {}, []
            for m in machines:
                after = partition_accesses(root, m.name, m.metrics)
                delta = {p: after[p] - before[m.name].get(p, 0) for p in after}
                assert not set(delta) & set(every)
                every.update(delta)
                chi = chi_square(delta)
                assert chi < chi_square_bound(len(delta) - 1), (fault, m.id, chi, delta)
                per.append(f"{m.id}{' (slow)' if m.slow else ''} {chi:.1f}/{len(delta) - 1}")
            chi = chi_square(every)
            assert chi < chi_square_bound(len(every) - 1), (fault, chi, every)
            chis.append(chi)
            results.append((kind, back, spread, rejoined, slow))
            print(f"fault {fault + 1}: {kind} of {victim.name}: writes accepted again after "
                  f"{back:.1f} s, its slots spread in {spread:.1f} s; rejoined"
                  f"{' behind a 60 ms link' if slow else ''}, even again in {rejoined:.1f} s; "
                  f"chi-square {chi:.1f} over {len(every)} partitions (per member: "
                  f"{', '.join(per)}); {accepted[0]} writes acknowledged, failed {errors}",
                  flush=True)
        stop_writer.set()
        thread.join(timeout=120)
        read_back(s3, acked)
        assert front.stop() == 0
        fsck_clean(front_cfg)
        backs = sorted(b for _, b, _, _, _ in results)
        rejoins = sorted(r for _, _, _, r, _ in results)
        print()
        print(f"{len(results)} faults ({sum(k == 'kill' for k, *_ in results)} SIGKILL, "
              f"{sum(k == 'pause' for k, *_ in results)} SIGSTOP past the {LEASE_SECS} s lease, "
              f"{sum(k == 'stop' for k, *_ in results)} clean stops), each followed by a join "
              f"({sum(s for *_, s in results)} behind a 60 ms link); {accepted[0]} writes "
              f"acknowledged ({len(acked)} objects, their last acknowledged versions read back "
              f"byte for byte at the end); fsck clean; failed writes {errors}")
        print(f"writes accepted again after a fault: median {statistics.median(backs):.1f} s, "
              f"p90 {backs[int(0.9 * (len(backs) - 1))]:.1f} s, max {backs[-1]:.1f} s")
        print(f"slots even again after a join: median {statistics.median(rejoins):.1f} s, "
              f"max {rejoins[-1]:.1f} s")
        print(f"chi-square over all partitions after each fault: median "
              f"{statistics.median(chis):.1f}, max {max(chis):.1f} (bound "
              f"{chi_square_bound(63):.1f} at 63 degrees of freedom)")
        finished = True
    finally:
        stop_writer.set()
        if front is not None:
            front.kill()
        for m in machines:
            if m.proc is not None:
                if m.proc.proc.poll() is None:
                    m.proc.proc.send_signal(signal.SIGCONT)
                m.proc.kill()
            m.stop_relay()
        etcd.stop()
        if args.keep or not finished:
            print(f"work directory (kept): {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
