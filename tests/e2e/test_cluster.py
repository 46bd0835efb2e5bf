"""A volume served by a cluster of real processes on 127.0.0.1: a front
(S3, the object layer, the rounds) and three nodes (each serving its share of
the ObliviStore partitions over mutual TLS), all on one fs back-end directory,
with one configuration file each ([cluster] in `oram-proxy example-config`).

Each process is the real binary, killed with SIGKILL where the test says so:
a node dies and is restarted while the front keeps running, then the front
dies and is restarted; every acknowledged object reads back byte for byte and
`fsck` on the front (with the nodes up) finds nothing wrong.
"""

import collections
import hashlib
import os
import pathlib
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from conftest import BIN, Process, Proxy, free_port, wait_port

MEMBERS = ["front", "node0", "node1", "node2"]


def member_config(root, member, node_addrs, role, index=0, log_ms=0, name="oram-proxy.toml",
                  metrics_port=None, listen=None):
    """The configuration file of `member` (its data directory is root/member/data);
    `log_ms` > 0 ships its state log every that many milliseconds; `metrics_port`
    serves its operator endpoint on 127.0.0.1; `listen`: the address a node
    listens on when the others reach it at another (a relay's)."""
    data = root / member / "data"
    nodes = ", ".join(f'"{a}"' for a in node_addrs)
    text = f"""data_dir = "{data}"

[state]
log_interval_ms = {log_ms}

[engine]
kind = "oblivistore"
block_size = 4096
capacity_blocks = 4096

[backend]
kind = "fs"
path = "{root / 'store'}"
lease_secs = 3

[key]
key_file = "{root / 'cluster.key'}"

[cluster]
role = "{role}"
nodes = [{nodes}]
node = {index}
tls_dir = "{root / 'certs' / member}"
wait_secs = 90
"""
    if listen is not None:
        text += f'listen = "{listen}"\n'
    if metrics_port is not None:
        # Before [cluster]: callers append to that section at the file's end.
        text = text.replace("[cluster]\n", f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n\n[cluster]\n')
    (root / member).mkdir(parents=True, exist_ok=True)
    path = root / member / name
    path.write_text(text)
    return path


class Node(Process):
    """One node process: `oram-proxy serve --config <node's file>`."""

    def __init__(self, workdir, config, port):
        self.workdir = pathlib.Path(workdir)
        self.port = port
        self.config = config
        self.runs = 0
        self.start()

    def start(self):
        self.runs += 1
        self.stdout = open(self.workdir / f"stdout-{self.runs}.log", "w+")
        self.stderr = open(self.workdir / f"stderr-{self.runs}.log", "w+")
        env = dict(os.environ, RUST_LOG="info")
        self.proc = subprocess.Popen([BIN, "serve", "--config", str(self.config)],
                                     stdout=self.stdout, stderr=self.stderr, env=env,
                                     cwd=self.workdir)

    def wait_ready(self, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}: {self.logs()}")
            if "  partitions: " in (self.workdir / f"stdout-{self.runs}.log").read_text():
                wait_port(self.port, timeout=10)
                return
            time.sleep(0.1)
        raise RuntimeError(f"node not ready after {timeout} s: {self.logs()}")

    def logs(self):
        self.stdout.flush()
        self.stderr.flush()
        return ((self.workdir / f"stdout-{self.runs}.log").read_text()
                + (self.workdir / f"stderr-{self.runs}.log").read_text())

    def partitions(self):
        for line in (self.workdir / f"stdout-{self.runs}.log").read_text().splitlines():
            if line.startswith("  partitions: "):
                return [int(p) for p in line.split("[", 1)[1].rstrip("]").split(",") if p.strip()]
        raise AssertionError("no partitions line")



def put_checked(s3, key, body, acked):
    """PUTs `body`; remembers it as acknowledged only if the PUT succeeded."""
    try:
        s3.put_object(Bucket="bkt", Key=key, Body=body)
    except (ClientError, EndpointConnectionError, ReadTimeoutError):
        return False
    acked[key] = body
    return True


def read_back(s3, acked):
    for key, body in acked.items():
        got = s3.get_object(Bucket="bkt", Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest(), key


def make_certs_and_key(root):
    r = subprocess.run([BIN, "cluster", "certs", "--out", str(root / "certs"),
                        "--members", ",".join(MEMBERS)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    for m in MEMBERS:
        assert (root / "certs" / m / "member.key").stat().st_mode & 0o077 == 0
    key = root / "cluster.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)


class Cluster:
    """A front and three nodes with their certificates, key and configuration
    files under `root`, started and ready; `log_ms` as in `member_config`."""

    def __init__(self, root, log_ms=0):
        make_certs_and_key(root)
        ports = [free_port() for _ in range(3)]
        self.addrs = [f"127.0.0.1:{p}" for p in ports]
        self.front_cfg = member_config(root, "front", self.addrs, "front", log_ms=log_ms)
        # Node 0 serves its operator endpoint.
        self.metrics_port = free_port()
        self.node_cfgs = [member_config(root, f"node{i}", self.addrs, "node", i, log_ms=log_ms,
                                        metrics_port=self.metrics_port if i == 0 else None)
                          for i in range(3)]
        # The nodes start first and wait for the front to create the volume;
        # the front waits for its nodes.
        self.nodes = [Node(root / f"node{i}", self.node_cfgs[i], ports[i]) for i in range(3)]
        self.front = None
        try:
            self.front = Proxy(root / "front", "--config", str(self.front_cfg))
            for n in self.nodes:
                n.wait_ready()
        except BaseException:
            self.kill()
            raise

    def kill(self):
        if self.front is not None:
            self.front.kill()
        for n in self.nodes:
            n.kill()


def node_metrics(root, port, token=True, node="node0"):
    """GET /metrics of a node's operator endpoint (with the token the node generated
    into its data directory, or none): (status, text)."""
    headers = {}
    if token:
        t = (root / node / "data" / "metrics.token").read_text().strip()
        headers["Authorization"] = f"Bearer {t}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text, name):
    """The value of the sample line starting with `name` (name and labels)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in:\n{text}")


def put_until_accepted(s3, front, key, body, acked):
    """PUTs `body` until the cluster takes it (a node coming back), at most 60 s."""
    deadline = time.monotonic() + 60
    while not put_checked(s3, key, body, acked):
        assert time.monotonic() < deadline, front.logs()[-3000:]
        time.sleep(0.5)


@pytest.mark.long(3)
def test_a_cluster_of_processes_survives_a_node_and_the_front_killed(tmp_path):
    root = tmp_path
    cluster = Cluster(root)
    front_cfg, node_cfgs, nodes = cluster.front_cfg, cluster.node_cfgs, cluster.nodes
    front = cluster.front
    try:
        # Every partition has exactly one node.
        owned = sorted(p for n in nodes for p in n.partitions())
        assert owned == list(range(len(owned))) and len(owned) >= 3, owned
        # Each node joined from the backend's header: the front's volume.
        front_id = [l for l in (root / "front" / "data" / "volume.toml").read_text().splitlines()
                    if l.startswith("volume_id")]
        for i in range(3):
            node_id = [l for l in (root / f"node{i}" / "data" / "volume.toml").read_text().splitlines()
                       if l.startswith("volume_id")]
            assert node_id == front_id and front_id
        s3 = front.client()
        s3.create_bucket(Bucket="bkt")
        acked = {}
        for i in range(12):
            assert put_checked(s3, f"obj-{i}", os.urandom(1000 + 7919 * i), acked)
        read_back(s3, acked)
        # Node 0's operator endpoint: its slot, partitions, backend requests and
        # its partitions' accesses; the token required; /health without it.
        status, text = node_metrics(root, cluster.metrics_port)
        assert status == 200, text
        assert 'oram_node_info{slot="0",engine="oblivistore"} 1' in text.splitlines(), text
        assert metric(text, "oram_node_partitions") == len(nodes[0].partitions())
        assert metric(text, 'oram_backend_requests_total{verb="put"}') > 0
        assert metric(text, "oram_engine_accesses_total") > 0
        assert metric(text, 'oram_engine_step_fetch_microseconds_total{engine="oblivistore"}') > 0
        assert node_metrics(root, cluster.metrics_port, token=False)[0] == 401
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/health",
                                    timeout=30) as r:
            assert (r.status, r.read()) == (200, b"ok\n")

        # A node dies (SIGKILL) and comes back; the front keeps running.
        nodes[1].kill()
        for i in range(3):
            put_checked(s3, f"during-{i}", os.urandom(5000 + i), acked)
        nodes[1].start()
        nodes[1].wait_ready()
        put_until_accepted(s3, front, "after-node", os.urandom(20000), acked)
        read_back(s3, acked)

        # The front dies (SIGKILL) and comes back over the same nodes.
        front.kill()
        front = cluster.front = Proxy(root / "front", "--config", str(front_cfg))
        s3 = front.client()
        read_back(s3, acked)
        for i in range(4):
            assert put_checked(s3, f"after-front-{i}", os.urandom(3000 * (i + 1)), acked)
        read_back(s3, acked)
        listed = {o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]}
        assert set(acked) <= listed

        # A clean stop of the front; fsck over the nodes finds nothing wrong.
        assert front.stop() == 0
        r = subprocess.run([BIN, "fsck", "--config", str(front_cfg)], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        for n in nodes:
            assert n.stop() == 0, n.logs()
        # The volume's commands run on the front, not on a node; recover refuses a
        # cluster's volume (its state is split between the front and the nodes).
        r = subprocess.run([BIN, "fsck", "--config", str(node_cfgs[0])], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode != 0 and "run on the front" in r.stdout + r.stderr, r.stdout + r.stderr
        r = subprocess.run([BIN, "recover", "--config", str(front_cfg),
                            "--data-dir", str(root / "elsewhere")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "cluster" in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        cluster.kill()


@pytest.mark.long(3)
def test_a_node_and_a_front_whose_machines_are_lost_are_recovered_from_the_backend(tmp_path):
    """With the shipped log on every member, a node killed with SIGKILL whose
    data directory is then deleted (its machine lost) is rebuilt by `oram-proxy
    recover` from its own checkpoint and log on the backend; restarted, it
    serves its partitions again and every object acknowledged before, during
    and after reads back byte for byte. Then the same for the front. `fsck` on
    the front is clean."""
    root = tmp_path
    cluster = Cluster(root, log_ms=20)
    front_cfg, node_cfgs, nodes = cluster.front_cfg, cluster.node_cfgs, cluster.nodes
    front, addrs = cluster.front, cluster.addrs
    try:
        lost = nodes[2]
        lost_partitions = lost.partitions()
        # Each node keeps its checkpoint beside the volume's, sealed as its own.
        for i in range(3):
            assert (root / "store" / "vol0" / "node" / str(i) / "meta" / "checkpoint").is_file()
        s3 = front.client()
        s3.create_bucket(Bucket="bkt")
        acked = {}
        for i in range(16):
            assert put_checked(s3, f"obj-{i}", os.urandom(2000 + 4099 * i), acked)
        read_back(s3, acked)

        # Node 2's machine is lost: killed, its data directory gone.
        lost.kill()
        for i in range(3):
            put_checked(s3, f"during-{i}", os.urandom(3000 + i), acked)
        data = root / "node2" / "data"
        shutil.rmtree(data)
        # Not into a directory that holds a node, and not without the log.
        no_log = member_config(root, "node2", addrs, "node", 2, log_ms=0, name="no-log.toml")
        r = subprocess.run([BIN, "recover", "--config", str(no_log)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode != 0 and "shipped log" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not (data / "state.redb").exists()
        r = subprocess.run([BIN, "recover", "--config", str(node_cfgs[2])], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "recovered cluster node 2" in r.stdout, r.stdout
        assert "no acknowledged round is lost" in r.stdout, r.stdout
        r2 = subprocess.run([BIN, "recover", "--config", str(node_cfgs[2])], capture_output=True,
                            text=True, timeout=60)
        assert r2.returncode != 0 and "empty data directory" in r2.stdout + r2.stderr

        lost.start()
        lost.wait_ready()
        assert lost.partitions() == lost_partitions
        put_until_accepted(s3, front, "after-recover", os.urandom(20000), acked)
        for i in range(6):
            assert put_checked(s3, f"later-{i}", os.urandom(1500 * (i + 1)), acked)
        read_back(s3, acked)

        # Then the front's machine is lost: rebuilt from its checkpoint and
        # shipped log (every round's intent is on the backend before the round
        # goes out), it repeats what its nodes may have landed and goes on.
        front.kill()
        shutil.rmtree(root / "front" / "data")
        r = subprocess.run([BIN, "recover", "--config", str(front_cfg)], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no acknowledged write is lost" in r.stdout, r.stdout
        front = cluster.front = Proxy(root / "front", "--config", str(front_cfg))
        s3 = front.client()
        read_back(s3, acked)
        for i in range(4):
            assert put_checked(s3, f"after-front-{i}", os.urandom(2500 * (i + 1)), acked)
        read_back(s3, acked)

        assert front.stop() == 0
        r = subprocess.run([BIN, "fsck", "--config", str(front_cfg)], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        for n in nodes:
            assert n.stop() == 0, n.logs()
    finally:
        cluster.kill()


def partition_accesses(root, node, port):
    """Each partition's accesses from a node's /metrics: {partition: count}."""
    status, text = node_metrics(root, port, node=node)
    assert status == 200, text
    out = {}
    for line in text.splitlines():
        if line.startswith("oram_node_partition_accesses_total{partition="):
            out[int(line.split('"')[1])] = float(line.rsplit(" ", 1)[1])
    return out


def chi_square(counts):
    """The chi-square statistic of `counts` (a dict) against a uniform spread."""
    mean = sum(counts.values()) / len(counts)
    return sum((c - mean) ** 2 / mean for c in counts.values())


def chi_square_bound(df, z=4.75):
    """The chi-square statistic a uniform sample exceeds with probability about
    1e-6 (z = 4.75) at `df` degrees of freedom (Wilson and Hilferty). A wide
    margin: the partitions' access counts are a function of the rounds' draws
    but need not be exactly a multinomial sample (four runs of the slow-node
    test gave 50-91 at 63 degrees of freedom, where a multinomial averages 63),
    while a front that skewed its partitions would exceed it many times over."""
    a = 2 / (9 * df)
    return df * (1 - a + z * a ** 0.5) ** 3


@pytest.mark.long(2)
def test_a_slow_node_is_sent_what_every_other_node_is(tmp_path):
    """Node 2's link to the front delayed (an oram-linkshape relay, 60 ms round
    trip): under load from 8 clients the front still sends each partition as
    many accesses as any other, the slow node's as the fast nodes' (a
    chi-square over every partition's accesses, from each node's /metrics) --
    a front that served the fast partitions first or more often would show
    here. Every acknowledged object reads back byte for byte; fsck is clean."""
    import concurrent.futures

    root = tmp_path
    make_certs_and_key(root)
    ports = [free_port() for _ in range(3)]
    relay_port = free_port()
    routed = [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}", f"127.0.0.1:{relay_port}"]
    metrics = [free_port() for _ in range(3)]
    front_cfg = member_config(root, "front", routed, "front")
    node_cfgs = [member_config(root, f"node{i}", routed, "node", i, metrics_port=metrics[i],
                               listen=f"127.0.0.1:{ports[i]}" if i == 2 else None)
                 for i in range(3)]
    linkshape = pathlib.Path(BIN).parent / "oram-linkshape"
    relay_log = open(root / "relay.log", "w")
    relay = subprocess.Popen([str(linkshape), "--listen", routed[2], "--target",
                              f"127.0.0.1:{ports[2]}", "--rtt-ms", "60", "--mbit", "0"],
                             stdout=relay_log, stderr=subprocess.STDOUT)
    nodes, front = [], None
    try:
        nodes = [Node(root / f"node{i}", node_cfgs[i], ports[i]) for i in range(3)]
        front = Proxy(root / "front", "--config", str(front_cfg))
        for n in nodes:
            n.wait_ready()
        s3 = front.client()
        s3.create_bucket(Bucket="bkt")
        acked = {}
        bodies = {f"obj-{i}": os.urandom(500 + 97 * i) for i in range(200)}

        def put(key):
            s3.put_object(Bucket="bkt", Key=key, Body=bodies[key])
            return key

        def get(key):
            got = s3.get_object(Bucket="bkt", Key=key)["Body"].read()
            assert got == bodies[key], key

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for key in pool.map(put, bodies):
                acked[key] = bodies[key]
            for _ in range(2):
                list(pool.map(get, bodies))
        counts = {}
        for i in range(3):
            mine = partition_accesses(root, f"node{i}", metrics[i])
            assert sorted(mine) == nodes[i].partitions(), mine
            counts.update(mine)
        parts = sorted(counts)
        assert parts == list(range(len(parts))) and len(parts) >= 16, parts
        total = sum(counts.values())
        mean = total / len(parts)
        assert mean >= 20, f"too few accesses to test: {counts}"
        chi = chi_square(counts)
        assert chi < chi_square_bound(len(parts) - 1), (chi, counts)
        # The slow node's share is its partitions' share (within 5 standard
        # deviations of a binomial draw).
        slow = nodes[2].partitions()
        share = len(slow) / len(parts)
        got = sum(counts[p] for p in slow)
        sd = (total * share * (1 - share)) ** 0.5
        assert abs(got - total * share) < 5 * sd, (got, total * share, sd)
        print(f"{total:.0f} partition accesses over {len(parts)} partitions, chi-square "
              f"{chi:.1f} (bound {chi_square_bound(len(parts) - 1):.1f}); the slow node "
              f"{got:.0f} of {total * share:.0f} expected")
        read_back(s3, acked)
        assert front.stop() == 0
        r = subprocess.run([BIN, "fsck", "--config", str(front_cfg)], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        def level_objects():
            """Objects per (partition, level): `<prefix>/o/<p>/<level>/<slot>`."""
            levels = collections.Counter()
            for f in (root / "store").rglob("*"):
                parts = f.relative_to(root / "store").parts
                if f.is_file() and len(parts) >= 4 and parts[-4] == "o" and all(
                        x.isdigit() for x in parts[-3:]):
                    levels[parts[-3:-1]] += 1
            return levels

        serving = level_objects()
        for n in nodes:
            assert n.stop() == 0, n.logs()
        # A clean stop deletes nothing (what the slot's next owner restores
        # may still refer to it: NodeVolume::finish); every partition's
        # levels are still there.
        levels = level_objects()
        assert len(levels) >= len(counts), f"level objects not found: {sorted(levels)[:10]}"
        print(f"level objects: {sum(serving.values())} while serving, "
              f"{sum(levels.values())} after the nodes' clean stops")
    finally:
        if front is not None:
            front.kill()
        for n in nodes:
            n.kill()
        relay.kill()
        relay.wait(timeout=10)
        relay_log.close()
