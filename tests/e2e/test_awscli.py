"""The aws cli against the proxy: cp, sync of a nested tree, ls --recursive, s3api multipart."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

AWS = [sys.executable, "-m", "awscli"]


def aws(proxy, *args, check=True):
    r = subprocess.run(
        [*AWS, "--endpoint-url", proxy.endpoint, *args],
        env=proxy.client_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def make_tree(root):
    files = {}
    for d in ["", "a", "a/b", "a/b/c", "docs", "docs/empty-dir-sibling"]:
        (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(3):
            rel = os.path.join(d, f"file{i}.txt") if d else f"file{i}.txt"
            data = f"{rel}\n".encode() * (1 + 997 * i)
            (root / rel).write_bytes(data)
            files[rel] = data
    # Odd names: the aws cli lists with encoding-type=url and must decode them.
    for odd in ["space name.txt", "plus+sign.txt", "ünïcode-ß.txt", "percent%41.txt"]:
        (root / "docs" / odd).write_bytes(odd.encode())
        files[f"docs/{odd}"] = odd.encode()
    (root / "a" / "b" / "bin.dat").write_bytes(os.urandom(200_000))
    files["a/b/bin.dat"] = (root / "a" / "b" / "bin.dat").read_bytes()
    return files


def test_cp_sync_ls(proxy, tmp_path):
    aws(proxy, "s3", "mb", "s3://cli-bucket")
    src = tmp_path / "tree"
    files = make_tree(src)
    aws(proxy, "s3", "sync", str(src), "s3://cli-bucket/tree/")
    listing = aws(proxy, "s3", "ls", "--recursive", "s3://cli-bucket/").stdout
    keys = sorted(line.split(maxsplit=3)[-1] for line in listing.splitlines())
    assert keys == sorted(f"tree/{k}" for k in files)
    # A second sync uploads nothing; a changed file is uploaded again.
    again = aws(proxy, "s3", "sync", str(src), "s3://cli-bucket/tree/").stdout
    assert "upload:" not in again
    (src / "a" / "file1.txt").write_bytes(b"changed\n")
    files["a/file1.txt"] = b"changed\n"
    again = aws(proxy, "s3", "sync", str(src), "s3://cli-bucket/tree/").stdout
    assert again.count("upload:") == 1
    # Download everything and compare.
    dst = tmp_path / "back"
    aws(proxy, "s3", "sync", "s3://cli-bucket/tree/", str(dst))
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data, rel
    # cp of a single file both ways, and of a file large enough for multipart.
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 << 20))
    aws(proxy, "s3", "cp", str(big), "s3://cli-bucket/big.bin")
    aws(proxy, "s3", "cp", "s3://cli-bucket/big.bin", str(tmp_path / "big.out"))
    assert (tmp_path / "big.out").read_bytes() == big.read_bytes()
    # Delimited listing at the top level.
    top = aws(proxy, "s3", "ls", "s3://cli-bucket/").stdout
    assert "PRE tree/" in top and "big.bin" in top


def test_s3api_multipart(proxy, tmp_path):
    aws(proxy, "s3api", "create-bucket", "--bucket", "cli-mp")
    up = json.loads(aws(proxy, "s3api", "create-multipart-upload", "--bucket", "cli-mp", "--key", "mp.bin").stdout)
    upload_id = up["UploadId"]
    parts = [os.urandom(5 << 20), os.urandom(1234)]
    done = []
    for n, data in enumerate(parts, 1):
        f = tmp_path / f"part{n}"
        f.write_bytes(data)
        out = json.loads(
            aws(
                proxy, "s3api", "upload-part", "--bucket", "cli-mp", "--key", "mp.bin",
                "--upload-id", upload_id, "--part-number", str(n), "--body", str(f),
            ).stdout
        )
        assert out["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
        done.append({"PartNumber": n, "ETag": out["ETag"]})
    listed = json.loads(aws(proxy, "s3api", "list-parts", "--bucket", "cli-mp", "--key", "mp.bin", "--upload-id", upload_id).stdout)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2]
    uploads = json.loads(aws(proxy, "s3api", "list-multipart-uploads", "--bucket", "cli-mp").stdout)
    assert uploads["Uploads"][0]["UploadId"] == upload_id
    aws(
        proxy, "s3api", "complete-multipart-upload", "--bucket", "cli-mp", "--key", "mp.bin",
        "--upload-id", upload_id, "--multipart-upload", json.dumps({"Parts": done}),
    )
    aws(proxy, "s3api", "get-object", "--bucket", "cli-mp", "--key", "mp.bin", str(tmp_path / "mp.out"))
    assert (tmp_path / "mp.out").read_bytes() == b"".join(parts)
    # Aborting an upload: it disappears and its parts with it.
    up = json.loads(aws(proxy, "s3api", "create-multipart-upload", "--bucket", "cli-mp", "--key", "gone").stdout)
    aws(proxy, "s3api", "abort-multipart-upload", "--bucket", "cli-mp", "--key", "gone", "--upload-id", up["UploadId"])
    r = aws(proxy, "s3api", "list-parts", "--bucket", "cli-mp", "--key", "gone", "--upload-id", up["UploadId"], check=False)
    assert r.returncode != 0 and "NoSuchUpload" in r.stderr


def test_rb_refuses_non_empty_then_force(proxy):
    aws(proxy, "s3", "mb", "s3://cli-rb")
    aws(proxy, "s3", "cp", "-", "s3://cli-rb/x", check=False)  # empty stdin: empty object
    r = aws(proxy, "s3", "rb", "s3://cli-rb", check=False)
    assert r.returncode != 0 and "BucketNotEmpty" in r.stderr
    aws(proxy, "s3", "rb", "--force", "s3://cli-rb")
    r = aws(proxy, "s3", "ls", "s3://cli-rb", check=False)
    assert r.returncode != 0 and "NoSuchBucket" in r.stderr
