"""Swift header names in Title-Case on the wire, and CORS: an OPTIONS
preflight without a token, and Access-Control-Allow-Origin on the answers of
a container that allows the origin."""

import http.client

from conftest import Proxy, swift_connection


def raw(proxy, method, path, headers):
    c = http.client.HTTPConnection("127.0.0.1", proxy.swift_port, timeout=30)
    try:
        c.request(method, path, b"", headers)
        r = c.getresponse()
        r.read()
        return r.status, r.getheaders()
    finally:
        c.close()


def test_title_case_headers_and_cors(tmp_path):
    p = Proxy(tmp_path / "swift-cors", swift=True)
    try:
        sw = swift_connection(p)
        url, token = sw.get_auth()
        path = url.split(str(p.swift_port), 1)[1]
        sw.put_container("web", headers={
            "X-Container-Meta-Access-Control-Allow-Origin": "http://ok.example"})
        sw.put_object("web", "page", b"hello", headers={"X-Object-Meta-Color": "blue"})

        status, headers = raw(p, "HEAD", f"{path}/web/page", {"X-Auth-Token": token})
        assert status == 200
        names = [n for n, _ in headers]
        # Compared case-sensitively, as some Swift clients do.
        assert "X-Object-Meta-Color" in names and "Content-Length" in names, names

        status, headers = raw(p, "OPTIONS", f"{path}/web/page", {
            "Origin": "http://ok.example", "Access-Control-Request-Method": "GET"})
        assert status == 200
        assert dict(headers)["Access-Control-Allow-Origin"] == "http://ok.example"
        status, _ = raw(p, "OPTIONS", f"{path}/web/page", {
            "Origin": "http://other.example", "Access-Control-Request-Method": "GET"})
        assert status == 401

        status, headers = raw(p, "GET", f"{path}/web/page", {
            "X-Auth-Token": token, "Origin": "http://ok.example"})
        h = dict(headers)
        assert status == 200 and h["Access-Control-Allow-Origin"] == "http://ok.example"
        assert "x-object-meta-color" in h["Access-Control-Expose-Headers"]
        status, headers = raw(p, "GET", f"{path}/web/page", {
            "X-Auth-Token": token, "Origin": "http://other.example"})
        assert status == 200 and "Access-Control-Allow-Origin" not in dict(headers)
    finally:
        assert p.stop() == 0
