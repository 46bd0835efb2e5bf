"""Rebalancing while serving (issue 34, decision 015): a cluster with more slots
than nodes (`[cluster] slots = 4` on two nodes), a real 3-member etcd, a front
under S3 load. A third member joins: the members hand it a slot (final
checkpoint, owner key released, the joiner rebuilds the slot from the backend)
while the clients go on writing. Then the joiner is killed with SIGKILL and its
slot is claimed by a live member. Every acknowledged object reads back byte for
byte, `fsck` is clean, and etcd saw coordination only.
"""

import base64
import json
import os
import re
import threading
import time
import urllib.request

import subprocess

import pytest

from conftest import BIN, free_port
from test_cluster import (Node, chi_square, chi_square_bound, member_config, metric,
                          node_metrics, partition_accesses, put_checked, read_back)
from test_failover import (Etcd, Relay, coordinated, etcd_saw_only_coordination, fsck_clean,
                           make_certs_and_key, start_members)

MEMBERS = ["front", "node0", "node1", "node2"]
SLOTS = 4


def owners(etcd_url, cluster="e2e", slots=SLOTS):
    """Each slot's owner id as etcd holds it (None: never claimed, "": released)."""
    body = json.dumps({"key": base64.b64encode(f"/{cluster}/owners/".encode()).decode(),
                       "range_end": base64.b64encode(f"/{cluster}/owners0".encode()).decode()})
    req = urllib.request.Request(etcd_url + "/v3/kv/range", data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    out = [None] * slots
    for kv in kvs:
        slot = int(base64.b64decode(kv["key"]).decode().rsplit("/", 1)[1])
        out[slot] = base64.b64decode(kv.get("value", "")).decode()
    return out


def owners_of(now, member):
    return [j for j, o in enumerate(now) if o == member]


def wait_owners(etcd_url, pred, what, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        now = owners(etcd_url)
        if pred(now):
            return now
        assert time.monotonic() < deadline, f"{what}: owners {now}"
        time.sleep(0.2)


class Load:
    """Writers putting fresh objects through the front until stopped: what was
    acknowledged, and when each PUT failed."""

    def __init__(self, s3, writers=3):
        self.s3 = s3
        self.acked = {}
        self.lock = threading.Lock()  # guards acked, failures, ok_times
        self.failures = []
        self.ok_times = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True)
                        for w in range(writers)]
        for t in self.threads:
            t.start()

    def _run(self, w):
        i = 0
        while not self.stopping.is_set() and i < 2000:
            key, body = f"load-{w}-{i}", os.urandom(500 + (i * 997) % 9000)
            got = {}
            ok = put_checked(self.s3, key, body, got)
            with self.lock:
                if ok:
                    self.acked.update(got)
                    self.ok_times.append(time.monotonic())
                else:
                    self.failures.append(time.monotonic())
            i += 1

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=120)
        return dict(self.acked)

    def ok_between(self, a, b):
        with self.lock:
            return sum(1 for t in self.ok_times if a <= t <= b)


@pytest.mark.long(2)
def test_a_joining_member_is_handed_slots_while_clients_write(tmp_path):
    root = tmp_path
    etcd = Etcd(root)
    relays = [Relay(c) for c in etcd.clients]
    etcd.relayed = [r.url for r in relays]
    procs = []
    try:
        make_certs_and_key(root, MEMBERS)
        ports = [free_port() for _ in range(2)]
        addrs = [f"127.0.0.1:{p}" for p in ports]
        slots = f"slots = {SLOTS}\n"
        front_cfg = coordinated(member_config(root, "front", addrs, "front", log_ms=20), etcd, slots)
        metrics = [free_port() for _ in range(3)]
        node_cfgs = [coordinated(member_config(root, f"node{i}", addrs, "node", i, log_ms=20,
                                               metrics_port=metrics[i]), etcd, slots)
                     for i in range(2)]
        nodes, front = start_members(root, front_cfg, node_cfgs, ports, procs)
        # Slot j starts on node j % 2.
        assert owners(etcd.clients[0]) == ["node0", "node1", "node0", "node1"]
        assert "slots:      [0, 2]" in nodes[0].logs(), nodes[0].logs()
        # The banner states what the members' logs cost: 4 slots, a record every
        # 20 ms each, of a node's default 64 KiB (`log_record_kib` unset).
        assert ("log:        one per slot; serving all 4: 200 record PUTs/s and 12.5 MiB/s "
                "uploaded, busy or idle") in nodes[0].logs(), nodes[0].logs()

        s3 = front.client()
        s3.create_bucket(Bucket="bkt")
        acked = {}
        for i in range(8):
            assert put_checked(s3, f"before-{i}", os.urandom(1000 + 2500 * i), acked)

        # A member with a different slot count is refused before it serves.
        bad_port = free_port()
        bad_cfg = coordinated(member_config(root, "node2", addrs, "node", 0, log_ms=20,
                                            name="bad.toml"), etcd,
                              f'slots = 6\nstandby = true\nid = "node2"\n'
                              f'listen = "127.0.0.1:{bad_port}"\n')
        bad = Node(root / "node2", bad_cfg, bad_port)
        assert bad.proc.wait(timeout=60) != 0
        assert "cluster was started with 4" in bad.logs(), bad.logs()

        # 3. A third member joins under load: one slot is handed to it.
        load = Load(s3)
        time.sleep(3)
        port = free_port()
        cfg = coordinated(member_config(root, "node2", addrs, "node", 0, log_ms=20,
                                        metrics_port=metrics[2]), etcd,
                          f'{slots}standby = true\nid = "node2"\nlisten = "127.0.0.1:{port}"\n')
        joined = time.monotonic()
        joiner = Node(root / "node2", cfg, port)
        procs.append(joiner)
        now = wait_owners(etcd.clients[0], lambda o: o.count("node2") == 1, "a slot handed to node2")
        moved = time.monotonic() - joined
        assert sorted(now.count(n) for n in ("node0", "node1", "node2")) == [1, 1, 2], now
        slot = now.index("node2")
        donor = nodes[slot % 2]
        deadline = time.monotonic() + 60
        while "took the slot over" not in joiner.logs():
            assert time.monotonic() < deadline, joiner.logs()
            time.sleep(0.2)
        assert "slot handed off" in donor.logs(), donor.logs()
        time.sleep(3)
        ok_after = load.ok_between(joined + moved, time.monotonic())
        acked.update(load.stop())
        assert ok_after > 0, "no PUT succeeded after the hand-off"
        assert not (donor.workdir / "data" / "slots" / str(slot)).exists(), "the donor kept the slot"
        failed = len(load.failures)
        # The front rides a moving slot out: no client saw an error.
        assert failed == 0, f"{failed} PUTs failed during the hand-off"
        print(f"slot {slot} handed from {donor.workdir.name} to node2 {moved:.1f} s after it "
              f"started; {len(load.acked)} PUTs acknowledged under load, {failed} failed")
        read_back(s3, acked)

        # After the move, every partition is sent its share, whichever member
        # serves it: a burst of reads, then a chi-square of each partition's
        # accesses during it (from the members' /metrics), over all 64 and
        # over each member's own.
        names = ["node0", "node1", "node2"]
        before = {n: partition_accesses(root, n, metrics[i]) for i, n in enumerate(names)}
        keys = list(acked)
        for i in range(300):
            k = keys[(i * 7) % len(keys)]
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == acked[k]
        every = {}
        for i, n in enumerate(names):
            after = partition_accesses(root, n, metrics[i])
            delta = {p: after[p] - before[n].get(p, 0) for p in after}
            assert delta and sum(delta.values()) >= 5 * len(delta), (n, delta)
            chi = chi_square(delta)
            assert chi < chi_square_bound(len(delta) - 1), (n, chi, delta)
            assert not set(delta) & set(every), "a partition served by two members"
            every.update(delta)
            print(f"{n}: slots {owners_of(now, n)}, {sum(delta.values()):.0f} accesses over "
                  f"{len(delta)} partitions, chi-square {chi:.1f}")
        assert len(every) == 64, sorted(every)
        chi = chi_square(every)
        assert chi < chi_square_bound(len(every) - 1), (chi, every)
        print(f"all members: chi-square {chi:.1f} over 64 partitions")
        # Each member's /metrics shows the shipped log of each slot it serves, and
        # only those (the donor's handed-off slot gone): records landed, where the
        # stream stands, and what one record carries.
        for i, n in enumerate(names):
            status, text = node_metrics(root, metrics[i], node=n)
            assert status == 200, text
            logged = sorted(int(m) for m in re.findall(
                r'^oram_log_records_total\{slot="(\d+)"\} [1-9]', text, re.M))
            assert logged == owners_of(now, n), (n, now, text)
            # A node's default record: 64 KiB less its 44-byte header.
            assert metric(text, "oram_log_record_capacity_bytes") == 64 * 1024 - 44, text
            streams = re.findall(r'^oram_log_stream_bytes\{slot="\d+"\} (\d+)', text, re.M)
            assert len(streams) == len(logged) and all(int(b) > 0 for b in streams), text

        # The joiner is killed: its slot is claimed by a live member once its
        # lease lapses, rebuilt from the backend, and served.
        joiner.kill()
        killed = time.monotonic()
        now = wait_owners(etcd.clients[0], lambda o: "node2" not in o and "" not in o,
                          "node2's slot claimed by a live member")
        print(f"node2's slot claimed {time.monotonic() - killed:.1f} s after its SIGKILL: {now}")
        deadline = time.monotonic() + 60
        while True:
            if put_checked(s3, "after-kill", os.urandom(20000), acked):
                break
            assert time.monotonic() < deadline, front.logs()[-3000:]
            time.sleep(0.5)
        read_back(s3, acked)
        # What an operator sees: every slot owned by a live member.
        r = subprocess.run([BIN, "cluster", "status", "--config", str(front_cfg)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        print(r.stdout)
        assert "4 slots" in r.stdout and "node2" not in r.stdout.split("members:")[1], r.stdout
        assert r.stdout.count(" live ") >= 4, r.stdout

        assert front.stop() == 0
        fsck_clean(front_cfg)
        for n in nodes:
            assert n.stop() == 0, n.logs()
        seen = etcd_saw_only_coordination(relays, MEMBERS + addrs + [f"127.0.0.1:{port}"])
        assert seen > 50, seen
    finally:
        for p in procs:
            p.kill()
        etcd.stop()
        for r in relays:
            r.close()
