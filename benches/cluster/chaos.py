#!/usr/bin/env python3
"""The long chaos run of a cluster coordinated by etcd (outside CI; the bounded
version is tests/e2e/test_failover.py): a real 3-member etcd, a front, and five
node machines on 127.0.0.1 (three owning the slots, two standing by), all on
one fs backend with the shipped log on. Under a continuous S3 writer, `--faults`
times: a slot's node is killed with SIGKILL or paused with SIGSTOP past its
lease (then resumed: it must stop by itself); a standby takes the slot over;
the faulty machine's data directory is wiped and it comes back as a standby
under a new id. After each fault: the time until a write is accepted again,
and a sample of the acknowledged objects read back byte for byte; at the end,
every acknowledged object and `fsck`.

  target/e2e-venv/bin/python benches/cluster/chaos.py --faults 50
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
from test_cluster import Node, member_config, read_back  # noqa: E402
from test_failover import (LEASE_SECS, Etcd, StandbyNode, coordinated, fsck_clean,  # noqa: E402
                           make_certs_and_key)

CERTS = ["node0", "node1", "node2", "standby0", "standby1"]
KEYS = 300


class Machine:
    """One node machine: its certificate directory, its process incarnations."""

    def __init__(self, root, index, addrs, etcd):
        self.root, self.index, self.addrs, self.etcd = root, index, addrs, etcd
        self.gen = 0
        self.proc = None
        self.slot = None

    def start_slot(self, slot, port):
        cfg = coordinated(member_config(self.root, f"m{self.index}", self.addrs, "node", slot,
                                        log_ms=20), self.etcd)
        self.proc = Node(self.root / f"m{self.index}", cfg, port)
        self.slot = slot

    def start_standby(self):
        """Wipes the machine's data directory and starts it as a standby under
        a new id (its old id may still own a slot in etcd)."""
        self.gen += 1
        name = f"m{self.index}-{self.gen}"
        shutil.rmtree(self.root / f"m{self.index}" / "data", ignore_errors=True)
        port = free_port()
        cfg = member_config(self.root, f"m{self.index}", self.addrs, "node", 0, log_ms=20,
                            name=f"standby-{self.gen}.toml")
        coordinated(cfg, self.etcd, f'standby = true\nid = "{name}"\nlisten = "127.0.0.1:{port}"\n')
        self.proc = StandbyNode(self.root / f"m{self.index}", cfg, port)
        self.proc.wait_standing_by()
        self.slot = None

    def served_slot(self):
        for line in self.proc.logs().splitlines():
            if "serving cluster slot " in line:
                return int(line.split("serving cluster slot ", 1)[1].split()[0])
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = pathlib.Path(tempfile.mkdtemp(prefix="oram-chaos-"))
    etcd = Etcd(root)
    machines, front = [], None
    acked, lock = {}, threading.Lock()
    # Held by the writer around each write, and by the checks while they read.
    writing = threading.Lock()
    stop_writer = threading.Event()
    results = []
    try:
        make_certs_and_key(root)
        for i, c in enumerate(CERTS):  # each machine's identity, under its name
            shutil.copytree(root / "certs" / c, root / "certs" / f"m{i}")
        ports = [free_port() for _ in range(3)]
        addrs = [f"127.0.0.1:{p}" for p in ports]
        machines = [Machine(root, i, addrs, etcd) for i in range(5)]
        for i in range(3):
            machines[i].start_slot(i, ports[i])
        front_cfg = coordinated(member_config(root, "front", addrs, "front", log_ms=20), etcd)
        front = Proxy(root / "front", "--config", str(front_cfg))
        for i in range(3):
            machines[i].proc.wait_ready()
        for i in (3, 4):
            machines[i].start_standby()
        s3 = front.client()
        s3.create_bucket(Bucket="bkt")

        counter = [0]
        accepted = [0]
        errors = {}

        def writer():
            w = front.client()
            wrng = random.Random(args.seed + 1)
            while not stop_writer.is_set():
                counter[0] += 1
                # A bounded set of keys, overwritten: the volume (16 MiB) never fills.
                key = f"w-{counter[0] % KEYS}"
                body = os.urandom(wrng.randrange(500, 20000))
                with writing:  # the checks below read while no write is under way
                    try:
                        w.put_object(Bucket="bkt", Key=key, Body=body)
                    except Exception as e:  # any failure: not acknowledged, go on
                        errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                        # It may or may not have landed: the key is unknown until
                        # the next acknowledged write of it.
                        with lock:
                            acked.pop(key, None)
                        failed = True
                    else:
                        with lock:
                            acked[key] = body
                            accepted[0] += 1
                        failed = False
                if failed:
                    time.sleep(0.2)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        time.sleep(3)
        for fault in range(args.faults):
            owners = [m for m in machines if m.proc.proc.poll() is None and
                      (m.slot is not None or m.served_slot() is not None)]
            victim = rng.choice(owners)
            slot = victim.slot if victim.slot is not None else victim.served_slot()
            kind = rng.choice(["kill", "pause"])
            t0 = time.monotonic()
            if kind == "kill":
                victim.proc.proc.kill()
                victim.proc.proc.wait(timeout=10)
            else:
                victim.proc.proc.send_signal(signal.SIGSTOP)
            # Service is back once a standby serves the slot and the writer has
            # had writes accepted after that.
            deadline = t0 + 120
            while not any(m is not victim and m.proc.proc.poll() is None
                          and m.served_slot() == slot for m in machines):
                assert time.monotonic() < deadline, f"fault {fault}: slot {slot} not taken over"
                time.sleep(0.05)
            with lock:
                before = accepted[0]
            while True:
                with lock:
                    if accepted[0] > before + 1:
                        break
                assert time.monotonic() < deadline, (
                    f"fault {fault}: no write accepted in 120 s (writer alive: "
                    f"{thread.is_alive()}, errors {errors})\n{front.logs()[-4000:]}")
                time.sleep(0.05)
            back = time.monotonic() - t0
            if kind == "pause":
                victim.proc.proc.send_signal(signal.SIGCONT)
                rc = victim.proc.proc.wait(timeout=60)
                assert rc != 0 and "lost" in victim.proc.logs(), victim.proc.logs()[-2000:]
            # A standby serves the victim's slot; the victim comes back as a standby.
            victim.start_standby()
            with writing:
                sample = dict(rng.sample(sorted(acked.items()), min(20, len(acked))))
                read_back(s3, sample)
            results.append((kind, back))
            print(f"fault {fault + 1}: {kind} of machine m{victim.index} (slot {slot}): writes "
                  f"accepted again after {back:.1f} s; {accepted[0]} writes acknowledged; "
                  f"failed writes so far {errors}", flush=True)
        stop_writer.set()
        thread.join(timeout=120)
        read_back(s3, acked)
        assert front.stop() == 0
        fsck_clean(front_cfg)
        backs = sorted(b for _, b in results)
        print()
        print(f"{len(results)} faults ({sum(k == 'kill' for k, _ in results)} SIGKILL, "
              f"{sum(k == 'pause' for k, _ in results)} SIGSTOP past the {LEASE_SECS} s lease); "
              f"{accepted[0]} writes acknowledged ({len(acked)} objects, their last acknowledged "
              f"versions read back byte for byte at the end); fsck clean")
        print(f"writes accepted again after: median {statistics.median(backs):.1f} s, "
              f"p90 {backs[int(0.9 * (len(backs) - 1))]:.1f} s, max {backs[-1]:.1f} s")
    finally:
        stop_writer.set()
        if front is not None:
            front.kill()
        for m in machines:
            if m.proc is not None:
                if m.proc.proc.poll() is None:
                    m.proc.proc.send_signal(signal.SIGCONT)
                m.proc.kill()
        etcd.stop()
        if args.keep:
            print(f"work directory: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
