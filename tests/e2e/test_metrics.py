"""The operator endpoint (`--metrics-listen`): /health answers, /metrics counts
what the proxy sent to its backend and what the engine did, and it is off unless
asked for."""

import re
import time
import urllib.error
import urllib.request

from conftest import Proxy, free_port, wait_port


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
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
        text, before = scrape(port)
        assert "# TYPE oram_backend_requests_total counter" in text
        s3 = p.client()
        s3.create_bucket(Bucket="metrics-b")
        body = b"x" * 100_000
        s3.put_object(Bucket="metrics-b", Key="k", Body=body)
        assert s3.get_object(Bucket="metrics-b", Key="k")["Body"].read() == body
        _, after = scrape(port)
        put = 'oram_backend_requests_total{verb="put"}'
        put_bytes = 'oram_backend_bytes_total{verb="put"}'
        assert after[put] > before[put]
        # 100 kB of object data went out sealed, in whole buckets: more bytes than that.
        assert after[put_bytes] - before[put_bytes] > len(body)
        # Every access reads a path (buckets never written yet come back empty).
        get = 'oram_backend_requests_total{verb="get"}'
        assert after[get] > before[get]
        # 25 blocks of 4 KiB written and read at least.
        assert after["oram_engine_accesses_total"] - before["oram_engine_accesses_total"] >= 50
        assert after['oram_objects{kind="objects"}'] == 1
        assert after['oram_objects{kind="buckets"}'] == 1
        assert after["oram_state_file_bytes"] > 0
        assert not re.search(r"secret|e2e-secret-key", text, re.I)
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=10)
            raise AssertionError("unknown path answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404
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
