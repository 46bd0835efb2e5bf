"""A PUT that was on the wire when its node was paused past its lease lands
after a standby took the node's slot over and repeated the interrupted round:
real processes (etcd, MinIO, a front, two nodes, a standby), the paused node's
backend requests through an HTTP relay that holds one PUT of a level object and
sends it on later. The standby restored the slot from the backend and writes
in the next slot bank (docs/decisions/016), so the late PUT lands on a name it
does not read: every acknowledged object reads back and `fsck` is clean.
(Before slot banks, the standby rebuilt the same level under the same name and
the late PUT replaced it with an object it could not open.)
"""

import contextlib
import os
import re
import signal
import socket
import threading
import time
import types

import boto3
import pytest

from conftest import Proxy, free_port
from test_cluster import member_config, put_checked, put_until_accepted, read_back
from test_crash import MINIO_PASSWORD, MINIO_USER, minio_server
from test_failover import (Etcd, coordinated, fsck_clean, make_certs_and_key, standby,
                           start_members)

MEMBERS = ["front", "node0", "node1", "standby0"]
BUCKET = "oram-late"


class Reader:
    """Reads an HTTP/1.1 byte stream from a socket: up to a delimiter, or a count."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _more(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def until(self, delim):
        while delim not in self.buf:
            self._more()
        out, _, self.buf = self.buf.partition(delim)
        return out

    def exact(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def read_body(reader, headers):
    """The raw bytes of a request body: by Content-Length, or chunked."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        raw = b""
        while True:
            line = reader.until(b"\r\n")
            raw += line + b"\r\n"
            size = int(line.split(b";")[0], 16)
            if size == 0:
                while True:  # trailers, then an empty line
                    t = reader.until(b"\r\n")
                    raw += t + b"\r\n"
                    if not t:
                        return raw
            raw += reader.exact(size + 2)
    return reader.exact(int(headers.get("content-length", "0")))


class HoldingRelay:
    """An HTTP/1.1 relay on a loopback port in front of one member's S3 backend.
    It passes requests on (answers flow back untouched) and keeps their request
    lines; once armed, it holds the next request for which `hold_if(method,
    path)` is true: read whole, never passed on, never answered -- its sender
    sees a request on the wire. `release` sends it on its own connection later."""

    def __init__(self, upstream, hold_if=lambda method, path: False):
        self.hold_if = hold_if
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", free_port()))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.lock = threading.Lock()  # guards lines, held, armed, open
        self.lines = []  # (method, path) of every request passed on
        self.armed = False
        self.armed_at = 0  # len(lines) when armed: the requests passed on since
        self.held = None  # (path, raw request) once one is held
        self.holding = threading.Event()
        self.open = []  # every socket, to close at the end
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self):
        with self.lock:
            self.armed = True
            self.armed_at = len(self.lines)

    def level_puts_since_armed(self):
        """The paths of the level-object PUTs passed on since `arm`."""
        with self.lock:
            return [p for m, p in self.lines[self.armed_at:] if m == "PUT" and "/o/" in p]

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        try:
            up = socket.create_connection(self.upstream, timeout=5)
            up.settimeout(None)
        except OSError:
            client.close()
            return
        with self.lock:
            self.open += [client, up]
        threading.Thread(target=self._answers, args=(up, client), daemon=True).start()
        reader = Reader(client)
        try:
            while True:
                head = reader.until(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip()
                           for k, _, v in (ln.partition(":") for ln in lines[1:])}
                with self.lock:
                    hold = self.armed and self.held is None and self.hold_if(method, path)
                if hold:
                    if headers.get("expect", "").lower() == "100-continue":
                        client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    body = read_body(reader, headers)
                    with self.lock:
                        self.held = (path, head + b"\r\n\r\n" + body)
                    self.holding.set()
                    return  # the connection stays open, silent
                with self.lock:
                    self.lines.append((method, path))
                up.sendall(head + b"\r\n\r\n")
                up.sendall(read_body(reader, headers))
        except (EOFError, OSError, ValueError):
            for s in (client, up):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @staticmethod
    def _answers(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def release(self):
        """Sends the held PUT to the backend; returns the HTTP status."""
        path, raw = self.held
        with socket.create_connection(self.upstream, timeout=30) as s:
            s.sendall(raw)
            reader = Reader(s)
            while True:  # a "100 Continue" first, if it asked for one
                status = int(reader.until(b"\r\n\r\n").split(b" ")[1])
                if status != 100:
                    return status

    def close(self):
        self.sock.close()
        with self.lock:
            for s in self.open:
                s.close()


def s3_backend(config, endpoint):
    """Puts `config` (member_config's file) on MinIO at `endpoint` instead of
    the fs backend."""
    text = config.read_text()
    fs = re.search(r'\[backend\]\nkind = "fs"\npath = "[^"]*"\n', text)
    assert fs, text
    text = text.replace(fs.group(0),
                        f'[backend]\nkind = "s3"\nbucket = "{BUCKET}"\nkey_prefix = "late"\n'
                        f'endpoint = "{endpoint}"\nregion = "us-east-1"\n'
                        f'access_key = "{MINIO_USER}"\nsecret_key = "{MINIO_PASSWORD}"\n')
    config.write_text(text)
    config.chmod(0o600)  # it holds a secret key
    return config


def level_of(path):
    """`(partition, level, slot)` of a level object's request path
    (`…/o/<partition>/<level>/<slot>`)."""
    p, l, s = path.split("?")[0].rsplit("/o/", 1)[1].split("/")
    return int(p), int(l), int(s)


@contextlib.contextmanager
def late_cluster(root, hold_if):
    """etcd (one member), MinIO, a front, two nodes and a standby (waiting), all
    shipping their logs; node 0's backend through the relay `paused` (holding
    by `hold_if` once armed), the standby's through `watched` (holding
    nothing); a bucket `bkt` holding 8 acknowledged objects (`acked`). Every
    process is stopped (resumed first) at the end."""
    etcd = Etcd(root, n=1)
    procs, relays = [], []
    with minio_server(root / "minio") as endpoint:
        try:
            backend = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=MINIO_USER,
                                   aws_secret_access_key=MINIO_PASSWORD, region_name="us-east-1")
            deadline = time.monotonic() + 60
            while True:  # MinIO may need a moment after opening its port
                try:
                    backend.create_bucket(Bucket=BUCKET)
                    break
                except Exception:
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
            make_certs_and_key(root, MEMBERS)
            ports = [free_port() for _ in range(2)]
            addrs = [f"127.0.0.1:{p}" for p in ports]
            paused, watched = HoldingRelay(endpoint, hold_if), HoldingRelay(endpoint)
            relays += [paused, watched]
            front_cfg = s3_backend(coordinated(
                member_config(root, "front", addrs, "front", log_ms=20), etcd), endpoint)
            node_cfgs = [s3_backend(coordinated(
                member_config(root, f"node{i}", addrs, "node", i, log_ms=20), etcd),
                paused.url if i == 0 else endpoint) for i in range(2)]
            nodes, front = start_members(root, front_cfg, node_cfgs, ports, procs)
            spare = standby(root, "standby0", addrs, etcd,
                            edit=lambda cfg: s3_backend(cfg, watched.url))
            procs.append(spare)
            spare.wait_standing_by()
            s3 = front.client()
            s3.create_bucket(Bucket="bkt")
            acked = {}
            for i in range(8):
                assert put_checked(s3, f"obj-{i}", os.urandom(2000 + 3001 * i), acked)
            yield types.SimpleNamespace(backend=backend, front_cfg=front_cfg, nodes=nodes,
                                        front=front, spare=spare, paused=paused,
                                        watched=watched, procs=procs, s3=s3, acked=acked)
        finally:
            for p in procs:
                if p.proc.poll() is None:
                    try:
                        p.proc.send_signal(signal.SIGCONT)
                    except OSError:
                        pass
                    p.kill()
            for r in relays:
                r.close()
            etcd.stop()


def level_put(min_level):
    """A relay's `hold_if`: a PUT of a level object of level `min_level` or above."""
    return lambda method, path: method == "PUT" and "/o/" in path and level_of(path)[1] >= min_level


@pytest.mark.long(2)
@pytest.mark.skipif(not os.environ.get("ORAM_TEST_MINIO"),
                    reason="needs MinIO: set ORAM_TEST_MINIO to its binary (scripts/test.sh exports it)")
def test_a_late_put_of_a_paused_node_overwrites_nothing_its_successor_reads(tmp_path):
    root = tmp_path
    # A level of 2 or more stays live for several evictions into its partition:
    # still what the standby's state refers to when fsck runs.
    with late_cluster(root, level_put(2)) as c:
        backend, front_cfg, nodes, front = c.backend, c.front_cfg, c.nodes, c.front
        spare, paused, watched, procs = c.spare, c.paused, c.watched, c.procs
        s3, acked = c.s3, c.acked

        # Node 0's next PUT of a level object stays on the wire; node 0 is
        # paused at once, past its lease.
        paused.arm()

        def write_until_held():
            for i in range(300):
                put_until_accepted(s3, front, f"during-{i}", os.urandom(20000), acked)
                if paused.holding.is_set():
                    return

        writer = threading.Thread(target=write_until_held, daemon=True)
        writer.start()
        assert paused.holding.wait(timeout=60), "node 0 sent no level PUT"
        nodes[0].proc.send_signal(signal.SIGSTOP)
        held_path = paused.held[0]
        held = level_of(held_path)
        assert held[0] in nodes[0].partitions(), (held, nodes[0].partitions())

        # The standby takes slot 0 over and the front repeats the round,
        # which rebuilds the held PUT's level: the client's PUT completes.
        spare.wait_took_over()
        writer.join(timeout=90)
        assert not writer.is_alive()
        with watched.lock:
            rebuilt = [level_of(p) for m, p in watched.lines if m == "PUT" and "/o/" in p]
        same = [r for r in rebuilt if r[:2] == held[:2]]
        assert same, f"the standby did not rebuild level {held[:2]}: {rebuilt}"
        assert all(r[2] != held[2] for r in same), (held, same)

        # The paused node's PUT lands now, after the standby's; checked at
        # once, before later accesses rebuild the level: every object the
        # cluster's state refers to opens (fsck reads them all).
        assert paused.release() == 200
        key = held_path.split("?")[0].split(f"/{BUCKET}/", 1)[1]
        assert backend.head_object(Bucket=BUCKET, Key=key)["ContentLength"] > 0
        assert front.stop() == 0, front.logs()
        fsck_clean(front_cfg)

        # Resumed, node 0 finds its lease lost and stops.
        nodes[0].proc.send_signal(signal.SIGCONT)
        assert nodes[0].proc.wait(timeout=60) != 0
        front = Proxy(root / "front", "--config", str(front_cfg))
        procs.append(front)
        s3 = front.client()
        read_back(s3, acked)
        for i in range(6):
            assert put_checked(s3, f"after-{i}", os.urandom(1500 * (i + 1)), acked)
        read_back(s3, acked)
        assert front.stop() == 0, front.logs()
        fsck_clean(front_cfg)
        print(f"late PUT of level {held[:2]} slot {held[2]} landed after the standby "
              f"wrote it at slot {same[-1][2]}; {len(acked)} objects read back, fsck clean")


@pytest.mark.long(2)
@pytest.mark.skipif(not os.environ.get("ORAM_TEST_MINIO"),
                    reason="needs MinIO: set ORAM_TEST_MINIO to its binary (scripts/test.sh exports it)")
def test_what_a_node_wrote_after_its_last_shipped_commit_spoils_nothing_its_successor_restores(
        tmp_path):
    """What slot banks rest on (docs/decisions/016): the successor restores the
    state the replaced node's shipped log reached, so nothing the node wrote
    after that may replace an object that state refers to. Node 0's next log
    record is held on the wire (its shipper sends one record at a time, so none
    after it lands either): its commits stay unshipped and so unanswered, while
    the rounds under way write their objects. Node 0 must then write no object
    name twice (a partition's next round waits for its last one's commit). It is
    paused past its lease; the standby restores slot 0 from the checkpoint and
    the log that landed, the front repeats the interrupted rounds: every
    acknowledged object reads back and `fsck` is clean."""
    root = tmp_path
    with late_cluster(root, lambda method, path: method == "PUT" and "/log/" in path) as c:
        front_cfg, nodes, front, spare, paused = c.front_cfg, c.nodes, c.front, c.spare, c.paused
        s3, acked = c.s3, c.acked
        paused.arm()
        done = threading.Event()

        def write():
            for i in range(300):
                if done.is_set():
                    return
                put_until_accepted(s3, front, f"during-{i}", os.urandom(20000), acked)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        assert paused.holding.wait(timeout=60), "node 0 shipped no log record"
        # The writes under way when the record was held go on for a while
        # (their commits wait for it); then node 0 is paused past its lease.
        time.sleep(2)
        nodes[0].proc.send_signal(signal.SIGSTOP)
        written = paused.level_puts_since_armed()
        names = [p.split("?")[0] for p in written]
        assert len(names) == len(set(names)), f"an object written twice: {sorted(names)}"

        spare.wait_took_over()
        done.set()
        writer.join(timeout=90)
        assert not writer.is_alive()
        read_back(s3, acked)
        assert front.stop() == 0, front.logs()
        fsck_clean(front_cfg)
        # Resumed, node 0 finds its lease lost and stops; its held record lands
        # late in its own generation's log, which nothing reads any more.
        nodes[0].proc.send_signal(signal.SIGCONT)
        assert nodes[0].proc.wait(timeout=60) != 0
        assert paused.release() == 200
        front = Proxy(root / "front", "--config", str(front_cfg))
        c.procs.append(front)
        s3 = front.client()
        read_back(s3, acked)
        for i in range(4):
            assert put_checked(s3, f"after-{i}", os.urandom(1500 * (i + 1)), acked)
        assert front.stop() == 0, front.logs()
        fsck_clean(front_cfg)
        print(f"node 0 wrote {len(names)} level objects after its log stopped landing, none "
              f"twice; {len(acked)} objects read back, fsck clean")
