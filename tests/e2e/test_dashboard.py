"""The dashboard in a real browser (Debian's chromium, driven by Playwright).

Under a load where one hot object gets most of the reads, the page must load,
update as requests flow, and show the client-side distribution as a spike — and
the backend-side distribution as uniform noise with Path ORAM, but as a spike with
the `direct` engine (no ORAM). Screenshots go to $CARGO_TARGET_DIR/artifacts
(dashboard.png: Path ORAM; dashboard-direct.png: direct). The `direct` run also
checks the bearer token: without it the data is refused and the page says so.
"""

import json
import os
import pathlib
import random
import shutil
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import TARGET, Proxy, free_port, wait_port

CHROMIUM = os.environ.get("ORAM_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = pathlib.Path(os.environ.get("ORAM_TEST_ARTIFACTS") or TARGET / "artifacts")
# The flags this machine's Chromium needs besides Playwright's own headless mode (no
# background connections on a closed network, no sandbox as root).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Load(threading.Thread):
    """Reads objects, 80% of them one hot object, until stopped (bounded)."""

    def __init__(self, s3, keys):
        super().__init__(daemon=True)
        self.s3, self.keys, self.stop, self.done, self.error = s3, keys, threading.Event(), 0, None

    def run(self):
        rng = random.Random(7)
        try:
            while not self.stop.is_set() and self.done < 20_000:
                key = "hot" if rng.random() < 0.8 else rng.choice(self.keys)
                self.s3.get_object(Bucket="dash", Key=key)["Body"].read()
                self.done += 1
        except Exception as e:  # reported by the test
            self.error = e


def number(page, sel, attr=None):
    el = page.locator(sel)
    v = el.get_attribute(attr) if attr else el.text_content()
    return float(v) if v not in (None, "") else None


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def run_dashboard(tmp_path, engine, shot, token=None):
    from playwright.sync_api import sync_playwright

    mport = free_port()
    args = ["--no-fsync", "--engine", engine, "--capacity-blocks", "16384",
            "--metrics-listen", f"127.0.0.1:{mport}"]
    if engine == "direct":
        args.append("--insecure-direct")
    if token:
        tf = tmp_path / "token"
        tf.write_text(token)
        tf.chmod(0o600)
        cfg = tmp_path / "cfg.toml"
        cfg.write_text(f'[metrics]\ntoken_file = "{tf}"\n')
        args += ["--config", str(cfg)]
    p = Proxy(tmp_path / engine, *args)
    load = None
    try:
        wait_port(mport)
        s3 = p.client()
        s3.create_bucket(Bucket="dash")
        keys = [f"obj-{i}" for i in range(15)]
        for k in keys + ["hot"]:
            s3.put_object(Bucket="dash", Key=k, Body=os.urandom(16 * 1024))
        load = Load(p.client(), keys)
        load.start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                url = f"http://127.0.0.1:{mport}/dashboard"
                # Without the token (configured, or generated into the data
                # directory) the data is refused, on loopback too, and the page says so.
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(url + "/data", timeout=10)
                assert e.value.code == 401
                page.goto(url)
                wait_until(lambda: "token required" in (page.text_content("#status") or ""), 30,
                           "the page to ask for the token")
                url += f"#token={token or p.metrics_token()}"
                page.goto(url)
                wait_until(lambda: (number(page, "#updates", "data-count") or 0) >= 1, 60, "a first update")
                assert page.title().startswith("oram-proxy")
                u1, b1 = number(page, "#updates", "data-count"), number(page, "#backend-count")
                # It updates under load: more polls, more backend requests in view.
                wait_until(lambda: number(page, "#updates", "data-count") >= u1 + 3
                           and number(page, "#backend-count") > b1, 60, "updates under load")
                # Enough requests in the window for the distributions to mean something.
                wait_until(lambda: (number(page, "#backend-hist-n") or 0) >= 600
                           and (number(page, "#client-count") or 0) >= 300, 240, "enough requests")
                assert load.error is None, load.error
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
                client_chi = number(page, "#client-chi", "data-value")
                backend_chi = number(page, "#backend-chi", "data-value")
                body = page.locator("body")
                assert body.get_attribute("data-engine") == engine
                # The capacity panel: in effect, used and free; nothing grew.
                cap = [number(page, f"#cap-{k}", "data-blocks") for k in ("total", "used", "free")]
                assert cap[0] == 16384 and cap[1] > 0 and cap[1] + cap[2] == cap[0], cap
                assert page.locator("#grow-state").get_attribute("data-running") == "0"
                assert page.locator("#grow-history tbody tr").count() == 0
                top = page.locator("#client-top tbody tr").first.locator("td").first.text_content()
                return client_chi, backend_chi, top
            finally:
                browser.close()
    finally:
        if load:
            load.stop.set()
            load.join(timeout=60)
        assert p.stop() == 0, p.logs()


def test_a_hot_object_is_noise_to_the_cloud_with_path_oram(tmp_path):
    client_chi, backend_chi, top = run_dashboard(tmp_path, "path", "dashboard.png")
    # 80% of the reads on one object: the client side is one spike.
    assert client_chi > 20, client_chi
    # The provider sees uniform positions (chi-square / df near 1; 3 is far out in
    # the tail of a uniform sample of this size: p < 1e-6 over 31 degrees of freedom).
    assert backend_chi < 3, backend_chi
    # Names are digests unless the operator asks for them.
    assert top.startswith("object "), top


def test_without_oram_the_cloud_sees_the_hot_object(tmp_path):
    client_chi, backend_chi, _ = run_dashboard(tmp_path, "direct", "dashboard-direct.png",
                                               token=os.urandom(16).hex())
    assert client_chi > 20, client_chi
    # direct: every request names its block; the hot blocks stand out.
    assert backend_chi > 20, backend_chi


def test_the_dashboard_shows_capacity_and_the_growth_history(tmp_path):
    """A small volume grown online (POST /grow) and half filled: the capacity
    panel shows the capacity in effect, used and free, automatic growth's
    policy, and the growth in the history table (screenshot: dashboard-grown.png)."""
    from playwright.sync_api import sync_playwright

    mport = free_port()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[volume]\ngrow_at = 0.9\nmax_size = "64MiB"\n')
    cfg.chmod(0o600)
    p = Proxy(tmp_path / "p", "--no-fsync", "--capacity-blocks", "256", "--config", str(cfg),
              "--metrics-listen", f"127.0.0.1:{mport}")
    try:
        wait_port(mport)
        req = urllib.request.Request(f"http://127.0.0.1:{mport}/grow", method="POST",
                                     data=json.dumps({"to_bytes": 16 << 20}).encode(),
                                     headers={"Authorization": f"Bearer {p.metrics_token()}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 202
        wait_until(lambda: json.loads(p.operator_get(mport, "/grow")[2])["history"], 600, "the growth")
        s3 = p.client()
        s3.create_bucket(Bucket="dash")
        for i in range(8):
            s3.put_object(Bucket="dash", Key=f"o{i}", Body=os.urandom(64 * 1024))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                page.goto(f"http://127.0.0.1:{mport}/dashboard#token={p.metrics_token()}")
                wait_until(lambda: (number(page, "#updates", "data-count") or 0) >= 1, 60, "a first update")
                cap = [number(page, f"#cap-{k}", "data-blocks") for k in ("total", "used", "free")]
                # 8 objects of 64 KiB in blocks of 16 KiB.
                assert cap == [1024, 32, 992], cap
                assert "at 90% used, up to 64.0 MiB" in page.text_content("#cap-policy")
                st = page.locator("#grow-state")
                assert st.get_attribute("data-running") == "0" and st.get_attribute("data-finished") == "1"
                rows = page.locator("#grow-history tbody tr")
                assert rows.count() == 1
                cells = rows.first.locator("td").all_text_contents()
                assert cells[1:3] == ["4.0 MiB", "16.0 MiB"], cells
                assert cells[3].endswith(" of " + cells[3].split(" of ")[0]), cells
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "dashboard-grown.png"), full_page=True)
            finally:
                browser.close()
        assert p.stop() == 0, p.logs()
    finally:
        p.kill()
