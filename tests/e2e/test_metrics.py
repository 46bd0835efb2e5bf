"""The operator endpoint (`--metrics-listen`): /health answers, /metrics counts
what the proxy sent to its backend and what the engine did, and it is off unless
asked for."""

import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from conftest import Proxy, free_port, wait_port


def scrape(p, port):
    status, headers, body = p.operator_get(port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            samples[k] = float(v)
    return text, samples


def test_metrics_count_backend_traffic_and_engine_work(tmp_path):
    port = free_port()
    p = Proxy(tmp_path / "p", "--metrics-listen", f"127.0.0.1:{port}", "--no-fsync")
    try:
        wait_port(port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200 and r.read() == b"ok\n"
        # /metrics wants the token on loopback too (generated into the data directory).
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert e.value.code == 401
        assert (p.data_dir / "metrics.token").stat().st_mode & 0o077 == 0
        text, before = scrape(p, port)
        assert "# TYPE oram_backend_requests_total counter" in text
        s3 = p.client()
        s3.create_bucket(Bucket="metrics-b")
        body = b"x" * 100_000
        s3.put_object(Bucket="metrics-b", Key="k", Body=body)
        assert s3.get_object(Bucket="metrics-b", Key="k")["Body"].read() == body
        _, after = scrape(p, port)
        put = 'oram_backend_requests_total{verb="put"}'
        put_bytes = 'oram_backend_bytes_total{verb="put"}'
        assert after[put] > before[put]
        # 100 kB of object data went out sealed, in whole buckets: more bytes than that.
        assert after[put_bytes] - before[put_bytes] > len(body)
        # Every access reads a path (buckets never written yet come back empty).
        get = 'oram_backend_requests_total{verb="get"}'
        assert after[get] > before[get]
        # 7 blocks of 16 KiB written and read at least.
        assert after["oram_engine_accesses_total"] - before["oram_engine_accesses_total"] >= 14
        assert after['oram_objects{kind="objects"}'] == 1
        assert after['oram_objects{kind="buckets"}'] == 1
        assert after["oram_state_file_bytes"] > 0
        assert not re.search(r"secret|e2e-secret-key", text, re.I)
        with pytest.raises(urllib.error.HTTPError) as e:
            p.operator_get(port, "/nothing")
        assert e.value.code == 404
    finally:
        assert p.stop() == 0, p.logs()


def test_metrics_endpoint_is_off_by_default(tmp_path):
    p = Proxy(tmp_path / "p")
    try:
        deadline = time.monotonic() + 30
        while "endpoint:" not in p.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        out = p.logs()
        assert "endpoint:" in out and "metrics:" not in out
    finally:
        assert p.stop() == 0


def test_client_requests_latency_overhead_and_state_gauges(tmp_path):
    """Metrics worth alerting on: per-operation counts by status and latency
    histograms on both APIs, client bytes and bandwidth overhead, backend errors
    and latencies, checkpoint age, journal, lease and TLS gauges."""
    import swiftclient

    from conftest import ACCESS, SECRET

    port = free_port()
    p = Proxy(tmp_path / "p", "--metrics-listen", f"127.0.0.1:{port}", "--no-fsync", swift=True)
    try:
        wait_port(port)
        s3 = p.client()
        s3.create_bucket(Bucket="mtr")
        body = b"y" * 50_000
        s3.put_object(Bucket="mtr", Key="a", Body=body)
        assert s3.get_object(Bucket="mtr", Key="a")["Body"].read() == body
        try:
            s3.get_object(Bucket="mtr", Key="missing")
            raise AssertionError("missing key answered")
        except s3.exceptions.NoSuchKey:
            pass
        s3.list_objects_v2(Bucket="mtr")
        c = swiftclient.Connection(authurl=p.swift_auth, user=f"{ACCESS}:{ACCESS}", key=SECRET, retries=0)
        assert c.get_object("mtr", "a")[1] == body
        text, m = scrape(p, port)

        def req(api, op, status):
            return m.get(f'oram_client_requests_total{{api="{api}",op="{op}",status="{status}"}}', 0)

        assert req("s3", "CreateBucket", 200) == 1
        assert req("s3", "PutObject", 200) == 1
        assert req("s3", "GetObject", 200) == 1
        assert req("s3", "GetObject", 404) == 1
        assert req("s3", "ListObjectsV2", 200) == 1
        assert req("swift", "Auth", 200) == 1
        assert req("swift", "GetObject", 200) == 1
        assert "# TYPE oram_client_request_duration_seconds histogram" in text
        assert m['oram_client_request_duration_seconds_count{api="s3",op="GetObject"}'] == 2
        assert m['oram_client_request_duration_seconds_bucket{api="s3",op="GetObject",le="+Inf"}'] == 2
        assert m['oram_client_request_duration_seconds_sum{api="s3",op="GetObject"}'] > 0
        # Bodies in and out on both APIs (the 50 kB object at least once each way).
        assert m['oram_client_bytes_total{api="s3",direction="in"}'] >= len(body)
        assert m['oram_client_bytes_total{api="s3",direction="out"}'] >= len(body)
        assert m['oram_client_bytes_total{api="swift",direction="out"}'] >= len(body)
        assert m['oram_client_requests_in_flight{api="s3"}'] == 0
        # Path ORAM moves whole paths: many backend bytes per client byte.
        assert m["oram_bandwidth_overhead_ratio"] > 2
        assert m['oram_backend_errors_total{verb="put"}'] == 0
        assert m['oram_backend_request_duration_seconds_count{verb="put"}'] > 0
        assert m['oram_engine_info{engine="path"}'] == 1
        # The engine's own statistics, with their engine: no round was interrupted.
        assert "# TYPE oram_engine_rounds_repeated_total counter" in text
        assert m['oram_engine_rounds_repeated_total{engine="path"}'] == 0
        assert m["oram_engine_stash_bound_blocks"] == 89
        assert m['oram_capacity_blocks{kind="used"}'] == 4  # ceil(50 000 / 16384)
        assert m['oram_capacity_blocks{kind="total"}'] == 65536
        assert m['oram_capacity_blocks{kind="free"}'] == 65536 - 4
        assert m['oram_capacity_bytes{kind="total"}'] == 65536 * 16384
        assert m['oram_capacity_bytes{kind="used"}'] == 4 * 16384
        assert m['oram_capacity_bytes{kind="free"}'] == (65536 - 4) * 16384
        # No automatic growth configured, none under way or finished
        # (test_grow checks them on a growing volume).
        assert m["oram_capacity_max_bytes"] == 0 and m["oram_grow_at_ratio"] == 0
        assert m["oram_growth_in_progress"] == 0
        assert m['oram_growth_positions{state="total"}'] == 0
        assert m['oram_growths_total{result="ok"}'] == 0
        assert "# TYPE oram_growths_total counter" in text
        assert m["oram_growth_last_timestamp_seconds"] == 0
        # The engine's objects at most: (2^15 - 1) - 255 cached buckets (2^14
        # leaves for 2^16 blocks) of 65 613 bytes in 3 slots (what `oram-proxy
        # describe` prints), and the fs back-end's disk.
        assert m["oram_backend_bytes_bound"] == 32512 * 3 * 65613
        assert 0 < m['oram_backend_disk_bytes{kind="free"}'] <= m['oram_backend_disk_bytes{kind="total"}']
        assert "oram_backend_budget_bytes" not in m
        # Journal entries are dropped lazily (at the next round's commit once their
        # write-back landed), so the live value depends on timing; it must be what
        # the state database's journal table holds. The drain at a graceful stop is
        # checked by test_ops (offline stats: 0 journaled buckets).
        assert m["oram_journal_entries"] == m['oram_state_table_entries{table="pending"}']
        assert m['oram_state_table_entries{table="positions"}'] > 0
        assert m["oram_checkpoint_interval_seconds"] == 300
        assert 0 <= m["oram_checkpoint_age_seconds"] < 3600
        # The lease is on by default ([backend] lease_secs = 30), also on the fs back-end.
        assert m['oram_lease_state{state="held"}'] == 1 and m['oram_lease_state{state="lost"}'] == 0
        assert m["oram_tls_enabled"] == 0
        assert any(k.startswith("oram_build_info{version=") for k in m)
        # Object names and secrets never appear.
        assert '"a"' not in text and "missing" not in text and SECRET not in text
    finally:
        assert p.stop() == 0, p.logs()


def test_one_client_cannot_hold_every_operator_connection(tmp_path):
    """The endpoint serves 16 connections at once, at most 4 per client address:
    a client holding its 4 idle gets 503 for a fifth (closed at once) and the
    endpoint keeps answering once one of them is gone."""
    port = free_port()
    p = Proxy(tmp_path / "p", "--metrics-listen", f"127.0.0.1:{port}", "--no-fsync")
    held = []
    try:
        wait_port(port)
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            held.append(s)
        # The fifth connection is answered 503 and closed without a request.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.settimeout(10)
            got = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        assert got.startswith(b"HTTP/1.1 503"), got
        held.pop().close()
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
                    assert r.status == 200
                break
            except (urllib.error.HTTPError, urllib.error.URLError, ConnectionError):
                # The closed slot is released when the server sees the close.
                assert time.monotonic() < deadline, "the endpoint never answered again"
                time.sleep(0.1)
    finally:
        for s in held:
            s.close()
        assert p.stop() == 0, p.logs()
