"""The Swift API with real clients: python-swiftclient (library and CLI), rclone
(Debian's, auth v1), swift-bench, and S3 <-> Swift on the same objects."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest
import swiftclient
from swiftclient.exceptions import ClientException

from conftest import ACCESS, SECRET, Proxy

VENV_BIN = os.path.dirname(sys.executable)
SWIFT_CLI = shutil.which("swift", path=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
RCLONE = shutil.which("rclone")


def conn(proxy, user=f"{ACCESS}:{ACCESS}", key=SECRET, **kw):
    return swiftclient.Connection(authurl=proxy.swift_auth, user=user, key=key, retries=0, **kw)


def swift_cli(proxy, *args, check=True, cwd=None):
    env = dict(os.environ, ST_AUTH=proxy.swift_auth, ST_USER=f"{ACCESS}:{ACCESS}", ST_KEY=SECRET)
    r = subprocess.run([SWIFT_CLI, *args], env=env, capture_output=True, timeout=300, cwd=cwd)
    if check and r.returncode != 0:
        raise AssertionError(f"swift {' '.join(args)} failed:\n{r.stdout.decode()}\n{r.stderr.decode()}")
    return r


def make_tree(root, sizes):
    files = {}
    for i, (rel, size) in enumerate(sizes.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        p.write_bytes(data)
        files[rel] = data
    return files


def test_auth_tokens_and_accounts(swift_proxy):
    # Wrong key, unknown user, missing headers: 401.
    for user, key in [(f"{ACCESS}:{ACCESS}", "wrong-key-123"), ("nobody:nobody", SECRET)]:
        with pytest.raises(ClientException) as e:
            conn(swift_proxy, user, key).get_account()
        assert e.value.http_status == 401
    req = urllib.request.Request(swift_proxy.swift_auth)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 401
    url, token = swiftclient.get_auth(swift_proxy.swift_auth, f"{ACCESS}:{ACCESS}", SECRET)
    assert url == f"http://127.0.0.1:{swift_proxy.swift_port}/v1/AUTH_{ACCESS}"
    assert token.startswith("AUTH_tk")
    # A bogus token: 401; the token on another account's URL: 403.
    with pytest.raises(ClientException) as e:
        swiftclient.head_account(url, "AUTH_tkbogus")
    assert e.value.http_status == 401
    other = url.replace(f"AUTH_{ACCESS}", "AUTH_someone-else")
    with pytest.raises(ClientException) as e:
        swiftclient.head_account(other, token)
    assert e.value.http_status == 403
    # The token is not in the proxy's logs.
    assert token not in swift_proxy.logs()
    info = json.load(urllib.request.urlopen(f"http://127.0.0.1:{swift_proxy.swift_port}/info", timeout=30))
    assert "bulk_delete" in info and "dlo" in info
    assert info["slo"]["max_manifest_segments"] == 1000 and info["slo"]["max_manifest_size"] == 8 << 20


def test_library_containers_objects_metadata_ranges(swift_proxy):
    c = conn(swift_proxy)
    c.put_container("lib-ctr", headers={"X-Container-Meta-Color": "blue"})
    assert c.head_container("lib-ctr")["x-container-meta-color"] == "blue"
    c.post_container("lib-ctr", {"X-Remove-Container-Meta-Color": "x", "X-Container-Meta-Size": "L"})
    h = c.head_container("lib-ctr")
    assert "x-container-meta-color" not in h and h["x-container-meta-size"] == "L"
    data = os.urandom(100_000)
    etag = c.put_object("lib-ctr", "dir/ü ñ.bin", data, content_type="application/x-test",
                        headers={"X-Object-Meta-Owner": "zoë", "Content-Disposition": "attachment"})
    assert etag == hashlib.md5(data).hexdigest()
    h, body = c.get_object("lib-ctr", "dir/ü ñ.bin")
    assert body == data
    assert h["content-type"] == "application/x-test"
    assert h["x-object-meta-owner"] == "zoë"
    assert h["content-disposition"] == "attachment"
    # A wrong ETag is refused with 422 and stores nothing.
    with pytest.raises(ClientException) as e:
        c.put_object("lib-ctr", "bad", b"abc", etag="0" * 32)
    assert e.value.http_status == 422
    with pytest.raises(ClientException) as e:
        c.head_object("lib-ctr", "bad")
    assert e.value.http_status == 404
    # Chunked upload (a generator has no length).
    c.put_object("lib-ctr", "chunked", (data[i:i + 7000] for i in range(0, len(data), 7000)))
    assert c.get_object("lib-ctr", "chunked")[1] == data
    # Ranges: one, a suffix, several (multipart/byteranges), unsatisfiable.
    h, part = c.get_object("lib-ctr", "chunked", headers={"Range": "bytes=10-19"})
    assert part == data[10:20] and h["content-range"] == f"bytes 10-19/{len(data)}"
    assert c.get_object("lib-ctr", "chunked", headers={"Range": "bytes=-5"})[1] == data[-5:]
    h, multi = c.get_object("lib-ctr", "chunked", headers={"Range": "bytes=0-1,5-6"})
    assert h["content-type"].startswith("multipart/byteranges")
    assert data[0:2] in multi and data[5:7] in multi and b"Content-Range: bytes 5-6/" in multi
    with pytest.raises(ClientException) as e:
        c.get_object("lib-ctr", "chunked", headers={"Range": f"bytes={len(data)}-"})
    assert e.value.http_status == 416
    # Conditional requests.
    md5 = hashlib.md5(data).hexdigest()
    with pytest.raises(ClientException) as e:
        c.get_object("lib-ctr", "chunked", headers={"If-Match": "nope"})
    assert e.value.http_status == 412
    with pytest.raises(ClientException) as e:
        c.get_object("lib-ctr", "chunked", headers={"If-None-Match": md5})
    assert e.value.http_status == 304
    assert e.value.http_response_headers.get("etag") == md5  # 304 keeps the validators
    # POST replaces user metadata.
    c.post_object("lib-ctr", "chunked", {"X-Object-Meta-A": "1"})
    h = c.head_object("lib-ctr", "chunked")
    assert h["x-object-meta-a"] == "1" and h["etag"] == md5
    # COPY (Destination) and PUT with X-Copy-From; metadata carried and added.
    c.copy_object("lib-ctr", "chunked", "/lib-ctr/copy1", headers={"X-Object-Meta-B": "2"})
    h = c.head_object("lib-ctr", "copy1")
    assert (h["x-object-meta-a"], h["x-object-meta-b"], h["etag"]) == ("1", "2", md5)
    c.put_object("lib-ctr", "copy2", b"", headers={"X-Copy-From": "/lib-ctr/copy1"})
    assert c.get_object("lib-ctr", "copy2")[1] == data
    # Listings: json with prefix/delimiter, markers, reverse, limit.
    _, listing = c.get_container("lib-ctr", delimiter="/")
    assert [x.get("name", x.get("subdir")) for x in listing] == ["chunked", "copy1", "copy2", "dir/"]
    _, listing = c.get_container("lib-ctr", marker="chunked", end_marker="dir", limit=5)
    assert [x["name"] for x in listing] == ["copy1", "copy2"]
    _, listing = c.get_container("lib-ctr", prefix="c", headers={}, query_string="reverse=on")
    assert [x["name"] for x in listing] == ["copy2", "copy1", "chunked"]
    h = c.head_container("lib-ctr")
    assert int(h["x-container-object-count"]) == 4
    assert int(h["x-container-bytes-used"]) == 4 * len(data)
    # DELETE of a non-empty container: 409.
    with pytest.raises(ClientException) as e:
        c.delete_container("lib-ctr")
    assert e.value.http_status == 409
    for o in ["chunked", "copy1", "copy2", "dir/ü ñ.bin"]:
        c.delete_object("lib-ctr", o)
    with pytest.raises(ClientException) as e:
        c.delete_object("lib-ctr", "copy1")
    assert e.value.http_status == 404
    c.delete_container("lib-ctr")
    # Account metadata and counts.
    c.post_account({"X-Account-Meta-Team": "oram"})
    h = c.head_account()
    assert h["x-account-meta-team"] == "oram"


def test_cli_tree_segments_copy_stat_delete(swift_proxy, tmp_path):
    src = tmp_path / "src"
    files = make_tree(src, {"a.txt": 10, "sub/b.bin": 70_000, "sub/deep/c.dat": 0, "big.bin": 3_500_000})
    swift_cli(swift_proxy, "upload", "cli-ctr", "src", "--segment-size", "1000000", cwd=tmp_path)
    listed = swift_cli(swift_proxy, "list", "cli-ctr").stdout.decode().split()
    assert sorted(listed) == sorted(f"src/{k}" for k in files)
    # The large file is a manifest over segments in cli-ctr_segments: a static
    # large object, since /info announces `slo` (swiftclient's default then).
    segs = swift_cli(swift_proxy, "list", "cli-ctr_segments").stdout.decode().split()
    assert len(segs) == 4
    stat = swift_cli(swift_proxy, "stat", "cli-ctr", "src/big.bin").stdout.decode()
    assert "X-Static-Large-Object: True" in stat and "Content Length: 3500000" in stat
    out = tmp_path / "out"
    swift_cli(swift_proxy, "download", "cli-ctr", "-D", str(out))
    for rel, data in files.items():
        assert (out / "src" / rel).read_bytes() == data, rel
    swift_cli(swift_proxy, "copy", "cli-ctr", "src/a.txt", "-d", "/cli-ctr/copied.txt")
    c = conn(swift_proxy)
    assert c.get_object("cli-ctr", "copied.txt")[1] == files["a.txt"]
    # A range across segment boundaries of the large object.
    h, part = c.get_object("cli-ctr", "src/big.bin", headers={"Range": "bytes=999990-1000009"})
    assert part == files["big.bin"][999990:1000010]
    # --use-dlo still makes a dynamic large object.
    (tmp_path / "dlo.bin").write_bytes(files["big.bin"][:2_500_000])
    swift_cli(swift_proxy, "upload", "cli-ctr", "dlo.bin", "--use-dlo", "-S", "1000000", cwd=tmp_path)
    stat = swift_cli(swift_proxy, "stat", "cli-ctr", "dlo.bin").stdout.decode()
    assert "Manifest: cli-ctr_segments/" in stat and "Content Length: 2500000" in stat
    assert c.get_object("cli-ctr", "dlo.bin")[1] == files["big.bin"][:2_500_000]
    acct = swift_cli(swift_proxy, "stat").stdout.decode()
    assert "Containers:" in acct
    swift_cli(swift_proxy, "delete", "cli-ctr")
    swift_cli(swift_proxy, "delete", "cli-ctr_segments")
    names = [x["name"] for x in c.get_account()[1]]
    assert "cli-ctr" not in names and "cli-ctr_segments" not in names


def test_cli_static_large_objects(swift_proxy, tmp_path):
    """`swift upload --use-slo`: segments, a manifest checked against them,
    reads joined, the manifest itself, re-upload and delete with the segments."""
    big = os.urandom(2_600_000)
    (tmp_path / "big.bin").write_bytes(big)
    swift_cli(swift_proxy, "upload", "slo-ctr", "big.bin", "--use-slo", "-S", "1000000", cwd=tmp_path)
    c = conn(swift_proxy)
    segs = [x["name"] for x in c.get_container("slo-ctr_segments")[1]]
    assert len(segs) == 3
    h = c.head_object("slo-ctr", "big.bin")
    assert h["x-static-large-object"] == "True" and int(h["content-length"]) == len(big)
    seg_md5s = [hashlib.md5(big[i:i + 1_000_000]).hexdigest() for i in range(0, len(big), 1_000_000)]
    slo_etag = hashlib.md5("".join(seg_md5s).encode()).hexdigest()
    assert h["etag"] == f'"{slo_etag}"'
    assert not any(k.startswith("x-object-sysmeta") for k in h)
    _, body = c.get_object("slo-ctr", "big.bin")
    assert body == big
    _, part = c.get_object("slo-ctr", "big.bin", headers={"Range": "bytes=999990-2000009"})
    assert part == big[999990:2000010]
    # The listing shows the joined size and ETag.
    [entry] = c.get_container("slo-ctr")[1]
    assert entry["bytes"] == len(big) and entry["slo_etag"] == f'"{slo_etag}"'
    # The manifest itself, in Swift's stored form and in the form a PUT takes.
    _, raw = c.get_object("slo-ctr", "big.bin", query_string="multipart-manifest=get")
    manifest = json.loads(raw)
    assert [m["hash"] for m in manifest] == seg_md5s
    assert all(m["name"].startswith("/slo-ctr_segments/") for m in manifest)
    _, raw = c.get_object("slo-ctr", "big.bin", query_string="multipart-manifest=get&format=raw")
    put_form = json.loads(raw)
    assert [m["size_bytes"] for m in put_form] == [1_000_000, 1_000_000, 600_000]
    # A manifest whose ETag or size does not match its segment: 400, nothing stored.
    bad = [dict(put_form[0], etag="0" * 32), dict(put_form[1], size_bytes=5)]
    with pytest.raises(ClientException) as e:
        c.put_object("slo-ctr", "bad", json.dumps(bad), query_string="multipart-manifest=put")
    assert e.value.http_status == 400
    assert b"Etag Mismatch" in e.value.http_response_content
    assert b"Size Mismatch" in e.value.http_response_content
    with pytest.raises(ClientException) as e:
        c.head_object("slo-ctr", "bad")
    assert e.value.http_status == 404
    # A manifest over a missing segment: 400 naming it.
    with pytest.raises(ClientException) as e:
        c.put_object("slo-ctr", "bad", json.dumps([{"path": "/slo-ctr/none"}]),
                     query_string="multipart-manifest=put")
    assert e.value.http_status == 400 and b"404 Not Found" in e.value.http_response_content
    # A copy of the large object is a plain object with the joined content.
    c.copy_object("slo-ctr", "big.bin", "/slo-ctr/copy.bin")
    h = c.head_object("slo-ctr", "copy.bin")
    assert "x-static-large-object" not in h and h["etag"] == hashlib.md5(big).hexdigest()
    c.delete_object("slo-ctr", "copy.bin")
    # Re-upload: new segments, the old ones deleted by the client.
    big2 = os.urandom(1_500_000)
    (tmp_path / "big.bin").write_bytes(big2)
    swift_cli(swift_proxy, "upload", "slo-ctr", "big.bin", "--use-slo", "-S", "1000000", cwd=tmp_path)
    assert len(c.get_container("slo-ctr_segments")[1]) == 2
    out = tmp_path / "out"
    swift_cli(swift_proxy, "download", "slo-ctr", "big.bin", "-o", str(out))
    assert out.read_bytes() == big2
    # Delete removes the segments with the manifest (multipart-manifest=delete).
    swift_cli(swift_proxy, "delete", "slo-ctr", "big.bin")
    assert c.get_container("slo-ctr_segments")[1] == []
    assert c.get_container("slo-ctr")[1] == []
    c.delete_container("slo-ctr")
    c.delete_container("slo-ctr_segments")


def test_nested_static_large_objects_are_bounded(swift_proxy):
    """A manifest of manifests whose expansion passes the per-request bounds
    (10 000 segments) is refused when put, with a plain text 400; one within
    them reads whole, by range, and deletes with its segments."""
    c = conn(swift_proxy)
    c.put_container("nest")
    c.put_object("nest", "s", b"x")
    thousand = json.dumps([{"path": "/nest/s"}] * 1000)
    c.put_object("nest", "a", thousand, query_string="multipart-manifest=put")
    eleven = json.dumps([{"path": "/nest/a"}] * 11)
    with pytest.raises(ClientException) as e:
        c.put_object("nest", "t", eleven, query_string="multipart-manifest=put")
    assert e.value.http_status == 400
    assert "10000 segments" in e.value.http_response_content.decode()
    with pytest.raises(ClientException) as e:
        c.head_object("nest", "t")
    assert e.value.http_status == 404
    two = json.dumps([{"path": "/nest/a"}] * 2)
    c.put_object("nest", "t", two, query_string="multipart-manifest=put")
    _, body = c.get_object("nest", "t")
    assert body == b"x" * 2000
    _, part = c.get_object("nest", "t", headers={"Range": "bytes=1500-1501"})
    assert part == b"xx"
    r = c.delete_object("nest", "t", query_string="multipart-manifest=delete")
    assert c.get_container("nest")[1] == []
    c.delete_container("nest")


def test_cross_api(swift_proxy):
    s3 = swift_proxy.client()
    s3.create_bucket(Bucket="cross-bkt")
    s3.put_object(Bucket="cross-bkt", Key="from-s3.txt", Body=b"hello from s3",
                  ContentType="text/plain", Metadata={"origin": "s3"})
    c = conn(swift_proxy)
    h, body = c.get_object("cross-bkt", "from-s3.txt")
    assert body == b"hello from s3"
    assert h["x-object-meta-origin"] == "s3" and h["content-type"] == "text/plain"
    c.put_object("cross-bkt", "from-swift.bin", b"x" * 5000, headers={"X-Object-Meta-Origin": "swift"})
    got = s3.get_object(Bucket="cross-bkt", Key="from-swift.bin")
    assert got["Body"].read() == b"x" * 5000 and got["Metadata"] == {"origin": "swift"}
    assert got["ETag"].strip('"') == hashlib.md5(b"x" * 5000).hexdigest()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="cross-bkt")["Contents"]]
    assert keys == ["from-s3.txt", "from-swift.bin"]
    # A container made through Swift (S3-valid name) is an S3 bucket.
    c.put_container("swift-made")
    assert "swift-made" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    for k in keys:
        c.delete_object("cross-bkt", k)
    s3.delete_bucket(Bucket="cross-bkt")
    c.delete_container("swift-made")


def test_bulk_delete(swift_proxy):
    c = conn(swift_proxy)
    c.put_container("bulk-ctr")
    for i in range(5):
        c.put_object("bulk-ctr", f"o{i}", b"z")
    body = "\n".join([f"/bulk-ctr/o{i}" for i in range(5)] + ["/bulk-ctr/missing", "/bulk-ctr"])
    url, token = c.get_auth()
    req = urllib.request.Request(f"{url}?bulk-delete", data=body.encode(), method="POST",
                                 headers={"X-Auth-Token": token, "Accept": "application/json",
                                          "Content-Type": "text/plain"})
    r = json.load(urllib.request.urlopen(req, timeout=60))
    assert r["Number Deleted"] == 6 and r["Number Not Found"] == 1 and r["Errors"] == []
    assert "bulk-ctr" not in [x["name"] for x in c.get_account()[1]]


@pytest.mark.skipif(RCLONE is None, reason="rclone is not installed (scripts/test.sh installs it)")
def test_rclone_swift(swift_proxy, tmp_path):
    env = dict(os.environ, RCLONE_CONFIG=str(tmp_path / "rclone.conf"),
               RCLONE_CONFIG_SW_TYPE="swift", RCLONE_CONFIG_SW_AUTH=swift_proxy.swift_auth,
               RCLONE_CONFIG_SW_USER=f"{ACCESS}:{ACCESS}", RCLONE_CONFIG_SW_KEY=SECRET,
               RCLONE_CONFIG_SW_AUTH_VERSION="1", RCLONE_CONFIG_SW_CHUNK_SIZE="1M")

    def rclone(*args, check=True):
        r = subprocess.run([RCLONE, *args], env=env, capture_output=True, timeout=300)
        if check and r.returncode != 0:
            raise AssertionError(f"rclone {' '.join(args)}:\n{r.stdout.decode()}\n{r.stderr.decode()}")
        return r

    src = tmp_path / "src"
    files = make_tree(src, {"top.txt": 100, "x/a.bin": 33_333, "x/y/b.txt": 1, "z/empty": 0,
                            "big.bin": 2_500_000})
    rclone("sync", str(src), "sw:rc-ctr/data")
    rclone("check", str(src), "sw:rc-ctr/data")
    (src / "top.txt").write_bytes(b"changed")
    assert rclone("check", str(src), "sw:rc-ctr/data", check=False).returncode != 0
    rclone("sync", str(src), "sw:rc-ctr/data")
    rclone("check", str(src), "sw:rc-ctr/data")
    rclone("copyto", str(src / "x" / "a.bin"), "sw:rc-ctr/single/copy.bin")
    out = rclone("cat", "--offset", "1000", "--count", "500", "sw:rc-ctr/single/copy.bin").stdout
    assert out == files["x/a.bin"][1000:1500]
    back = tmp_path / "back"
    rclone("copy", "sw:rc-ctr/data", str(back))
    for rel in files:
        assert (back / rel).read_bytes() == (src / rel).read_bytes(), rel
    rclone("purge", "sw:rc-ctr")
    names = [x["name"] for x in conn(swift_proxy).get_account()[1]]
    assert "rc-ctr" not in names


def test_swift_bench_smoke(swift_proxy, tmp_path):
    bench = shutil.which("swift-bench", path=VENV_BIN)
    if bench is None:
        pytest.skip("swift-bench is not installed (tests/e2e/requirements.txt)")
    conf = tmp_path / "bench.conf"
    conf.write_text(
        "[bench]\n"
        f"auth = {swift_proxy.swift_auth}\nuser = {ACCESS}:{ACCESS}\nkey = {SECRET}\n"
        "auth_version = 1.0\nconcurrency = 4\nobject_size = 4096\nnum_objects = 40\n"
        "num_gets = 40\nnum_containers = 2\ndelete = yes\n"
    )
    r = subprocess.run([bench, str(conf)], capture_output=True, timeout=300)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out
    # Each phase reports its count and no failures.
    for phase in ["40 PUTS **FINAL**", "40 GETS **FINAL**", "40 DEL **FINAL**"]:
        assert phase in out, out
    finals = [line for line in out.splitlines() if "**FINAL**" in line]
    assert len(finals) >= 3, out
    for line in finals:
        assert "[0 failures]" in line, line


def test_a_small_body_refused_on_its_headers_keeps_the_connection(swift_proxy):
    """A PUT refused on its headers (a bad X-Delete-At) with a small body: the
    body is read before the 400, so the connection stays open for the next
    request (a server that answers with the body unread closes it, and the
    client may then lose the answer to a reset)."""
    import http.client
    from urllib.parse import urlsplit

    c = conn(swift_proxy)
    c.put_container("small-refused")
    url, token = c.get_auth()
    u = urlsplit(url)
    h = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        h.request("PUT", f"{u.path}/small-refused/bad", body=b"x",
                  headers={"X-Auth-Token": token, "X-Delete-At": "soon"})
        r = h.getresponse()
        assert r.status == 400 and b"Non-integer X-Delete-At" in r.read()
        assert (r.getheader("connection") or "").lower() != "close"
        sock = h.sock
        assert sock is not None, "the client closed the connection"
        h.request("HEAD", f"{u.path}/small-refused", headers={"X-Auth-Token": token})
        r = h.getresponse()
        r.read()
        assert r.status == 204
        assert h.sock is sock, "the second request needed a new connection"
    finally:
        h.close()


def test_expiring_objects(swift_proxy):
    import time

    c = conn(swift_proxy)
    c.put_container("expiring")
    now = int(time.time())
    # X-Delete-At is returned as given; X-Delete-After becomes an X-Delete-At.
    c.put_object("expiring", "at", b"a", headers={"X-Delete-At": str(now + 3600)})
    assert c.head_object("expiring", "at")["x-delete-at"] == str(now + 3600)
    c.put_object("expiring", "after", b"b", headers={"X-Delete-After": "7200"})
    at = int(c.get_object("expiring", "after")[0]["x-delete-at"])
    assert now + 7200 <= at <= int(time.time()) + 7200
    # A POST replaces it; a POST without one removes it (as Swift does).
    c.post_object("expiring", "at", headers={"X-Delete-At": str(now + 60)})
    assert c.head_object("expiring", "at")["x-delete-at"] == str(now + 60)
    c.post_object("expiring", "at", headers={"X-Object-Meta-K": "v"})
    assert "x-delete-at" not in c.head_object("expiring", "at")
    # Bad values: Swift's 400s, nothing stored.
    for h, msg in (
        ({"X-Delete-At": str(now - 10)}, b"X-Delete-At in past"),
        ({"X-Delete-At": "soon"}, b"Non-integer X-Delete-At"),
        ({"X-Delete-After": "-5"}, b"X-Delete-After in past"),
        ({"X-Delete-After": "1.5"}, b"Non-integer X-Delete-After"),
    ):
        with pytest.raises(ClientException) as e:
            c.put_object("expiring", "bad", b"x", headers=h)
        assert e.value.http_status == 400
        assert msg in e.value.http_response_content
    with pytest.raises(ClientException) as e:
        c.head_object("expiring", "bad")
    assert e.value.http_status == 404
    # Once its time has passed the object is gone from reads and listings
    # (polled, bounded: the expiry has one-second resolution).
    c.put_object("expiring", "short", b"s", headers={"X-Delete-After": "1"})
    for _ in range(100):
        try:
            c.head_object("expiring", "short")
        except ClientException as e:
            assert e.http_status == 404
            break
        time.sleep(0.1)
    else:
        raise AssertionError("an object with X-Delete-After: 1 still exists after 10 s")
    names = [o["name"] for o in c.get_container("expiring")[1]]
    assert names == ["after", "at"]
    # The name is free again.
    c.put_object("expiring", "short", b"again", headers={"If-None-Match": "*"})
    assert c.get_object("expiring", "short")[1] == b"again"


def test_connection_keep_alive_is_echoed(swift_proxy):
    # Swift answers an explicit Connection: keep-alive with the same header
    # (Swift's tests.py testGetResponseHeaders checks it), and sends none otherwise.
    c = conn(swift_proxy)
    c.put_container("keepalive")
    c.put_object("keepalive", "o", b"k")
    h, body = c.get_object("keepalive", "o", headers={"Connection": "keep-alive"})
    assert body == b"k"
    assert h["connection"].lower() == "keep-alive"
    h, _ = c.get_object("keepalive", "o")
    assert "connection" not in h


def test_container_acls_across_accounts_and_users(tmp_path):
    """Two accounts and a non-admin user of the first (configured in
    [[swift.users]]): only container ACLs let them in; .r:* makes objects public."""
    cfg = tmp_path / "proxy.toml"
    cfg.write_text(
        '[[users]]\naccess_key = "acl-a"\nsecret_key = "acl-a-secret-1"\n'
        '[[users]]\naccess_key = "acl-b"\nsecret_key = "acl-b-secret-1"\n'
        '[[swift.users]]\naccount = "acl-a"\nuser = "reader"\nkey = "reader-secret-1"\n')
    cfg.chmod(0o600)
    p = Proxy(tmp_path / "p", "--config", str(cfg), creds=False, swift=True)
    try:
        a = conn(p, "acl-a:acl-a", "acl-a-secret-1")
        url, _ = a.get_auth()
        _, b_tok = conn(p, "acl-b:acl-b", "acl-b-secret-1").get_auth()
        r_url, r_tok = conn(p, "acl-a:reader", "reader-secret-1").get_auth()
        assert r_url == url  # the reader belongs to account acl-a
        a.put_container("shared")
        a.put_object("shared", "doc", b"data")

        def status(fn, *args, **kw):
            try:
                fn(*args, **kw)
                return 200
            except ClientException as e:
                return e.http_status

        # No grant: 403 for the other account and for the non-admin user.
        for tok in (b_tok, r_tok):
            assert status(swiftclient.get_object, url, tok, "shared", "doc") == 403
            assert status(swiftclient.get_container, url, tok, "shared") == 403
            assert status(swiftclient.put_object, url, tok, "shared", "new", b"x") == 403
        assert status(swiftclient.get_account, url, r_tok) == 403
        # Read for account acl-b and user acl-a:reader.
        a.post_container("shared", {"X-Container-Read": "acl-b, acl-a:reader"})
        assert a.head_container("shared")["x-container-read"] == "acl-b,acl-a:reader"
        for tok in (b_tok, r_tok):
            assert swiftclient.get_object(url, tok, "shared", "doc")[1] == b"data"
            assert [o["name"] for o in swiftclient.get_container(url, tok, "shared")[1]] == ["doc"]
            assert "x-container-read" not in swiftclient.head_container(url, tok, "shared")
            assert status(swiftclient.put_object, url, tok, "shared", "new", b"x") == 403
            assert status(swiftclient.delete_object, url, tok, "shared", "doc") == 403
        # Write for acl-b only: it writes and deletes, the reader still cannot.
        a.post_container("shared", {"X-Container-Write": "acl-b"})
        swiftclient.put_object(url, b_tok, "shared", "from-b", b"bbb")
        assert a.get_object("shared", "from-b")[1] == b"bbb"
        assert status(swiftclient.put_object, url, r_tok, "shared", "new", b"x") == 403
        swiftclient.delete_object(url, b_tok, "shared", "from-b")
        # Referrer grants in a write ACL are refused.
        assert status(a.post_container, "shared", {"X-Container-Write": ".r:*"}) == 400
        # Public: objects readable without a token; the listing only with .rlistings.
        a.post_container("shared", {"X-Container-Read": ".r:*"})
        assert urllib.request.urlopen(f"{url}/shared/doc", timeout=30).read() == b"data"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{url}/shared", timeout=30)
        assert e.value.code == 401
        a.post_container("shared", {"X-Container-Read": ".r:*,.rlistings"})
        assert urllib.request.urlopen(f"{url}/shared", timeout=30).read() == b"doc\n"
        # Account ACLs are validated, then refused.
        assert status(a.post_account, {"X-Account-Access-Control": "not json"}) == 400
        assert status(a.post_account, {"X-Account-Access-Control": '{"admin": ["acl-b"]}'}) == 400
        a.post_container("shared", {"X-Remove-Container-Read": "x"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{url}/shared/doc", timeout=30)
        assert e.value.code == 401
    finally:
        code = p.stop()
    assert code == 0, p.logs()
