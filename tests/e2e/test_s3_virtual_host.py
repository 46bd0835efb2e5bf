"""Virtual-hosted-style addressing with boto3: with `[s3] domain` set, a client
with addressing_style=virtual reaches bucket B at host B.<domain> (resolved to
127.0.0.1 by a resolver override), and path-style clients keep working."""

import socket

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import ACCESS, SECRET, Proxy

DOMAIN = "s3.example.test"


@pytest.fixture
def resolve_domain(monkeypatch):
    """Resolves DOMAIN and every name under it to 127.0.0.1 (in this process)."""
    real = socket.getaddrinfo
    names = []

    def fake(host, *args, **kwargs):
        if isinstance(host, str) and (host == DOMAIN or host.endswith("." + DOMAIN)):
            names.append(host)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return names


def virtual_client(port):
    return boto3.client(
        "s3", endpoint_url=f"http://{DOMAIN}:{port}", region_name="us-east-1",
        aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
        config=Config(signature_version="s3v4", s3={"addressing_style": "virtual"},
                      retries={"max_attempts": 1}))


def test_virtual_hosted_requests_address_the_bucket_by_host(tmp_path, resolve_domain):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[s3]\ndomain = "{DOMAIN}"\n')
    p = Proxy(tmp_path / "vh", "--config", str(cfg))
    try:
        v = virtual_client(p.port)
        v.create_bucket(Bucket="vbucket")
        v.put_object(Bucket="vbucket", Key="dir/hello.txt", Body=b"hello, virtual host")
        assert v.get_object(Bucket="vbucket", Key="dir/hello.txt")["Body"].read() == b"hello, virtual host"
        keys = [o["Key"] for o in v.list_objects_v2(Bucket="vbucket")["Contents"]]
        assert keys == ["dir/hello.txt"]
        # The requests went to the bucket's own host name.
        assert "vbucket." + DOMAIN in resolve_domain
        # A bucket with dots in its name.
        v.create_bucket(Bucket="with.dots")
        v.put_object(Bucket="with.dots", Key="k", Body=b"x")
        assert v.head_object(Bucket="with.dots", Key="k")["ContentLength"] == 1
        # Path-style clients, by IP address or the domain itself, see the same.
        path = p.client()
        assert path.get_object(Bucket="vbucket", Key="dir/hello.txt")["Body"].read() == b"hello, virtual host"
        by_domain = boto3.client(
            "s3", endpoint_url=f"http://{DOMAIN}:{p.port}", region_name="us-east-1",
            aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        names = sorted(b["Name"] for b in by_domain.list_buckets()["Buckets"])
        assert names == ["vbucket", "with.dots"]
        # A missing bucket by host is NoSuchBucket.
        with pytest.raises(ClientError) as e:
            v.get_object(Bucket="nobucket", Key="k")
        assert e.value.response["Error"]["Code"] == "NoSuchBucket"
    finally:
        assert p.stop() == 0


def test_a_bad_domain_stops_the_start(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[s3]\ndomain = "127.0.0.1"\n')
    with pytest.raises(RuntimeError) as e:
        Proxy(tmp_path / "bad", "--config", str(cfg))
    assert "s3.domain" in str(e.value)
