"""boto3 against the proxy: presigned URLs and bad input in S3's own error format."""

import hashlib
import time
import urllib.error
import urllib.request

import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS, SECRET


def http(method, url, data=None, headers=None):
    """Plain HTTP; returns (status, body bytes, headers)."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def signed(method, url, body=b"", headers=None, secret=SECRET):
    """A raw SigV4-signed request, for input boto3 would refuse to send."""
    req = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    S3SigV4Auth(Credentials(ACCESS, secret), "s3", "us-east-1").add_auth(req)
    return http(method, url, data=body if body else None, headers=dict(req.headers))


def error_code(body):
    text = body.decode()
    assert text.startswith("<?xml"), text
    return text.split("<Code>")[1].split("</Code>")[0]


@pytest.fixture(scope="module")
def bucket(proxy):
    s3 = proxy.client()
    s3.create_bucket(Bucket="e2e-boto")
    s3.put_object(Bucket="e2e-boto", Key="keep.txt", Body=b"precious data " * 1000)
    return "e2e-boto"


def assert_untouched(s3, bucket):
    got = s3.get_object(Bucket=bucket, Key="keep.txt")
    assert got["Body"].read() == b"precious data " * 1000
    assert got["ETag"] == '"%s"' % hashlib.md5(b"precious data " * 1000).hexdigest()


def test_round_trip_and_upload_file(s3, bucket, tmp_path):
    data = bytes(range(256)) * 40_000  # 10 MB: boto3 switches to multipart at 8 MB
    f = tmp_path / "big.bin"
    f.write_bytes(data)
    s3.upload_file(str(f), bucket, "big.bin")
    out = tmp_path / "out.bin"
    s3.download_file(bucket, "big.bin", str(out))
    assert out.read_bytes() == data
    head = s3.head_object(Bucket=bucket, Key="big.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-2"'), head["ETag"]


def test_presigned_get_and_put(s3, bucket):
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre.txt"}, ExpiresIn=300)
    status, _, _ = http("PUT", put_url, data=b"via presigned PUT")
    assert status == 200
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre.txt"}, ExpiresIn=300)
    status, body, _ = http("GET", get_url)
    assert (status, body) == (200, b"via presigned PUT")
    # Tampering with a presigned URL breaks its signature.
    status, body, _ = http("GET", get_url.replace("pre.txt", "keep.txt"))
    assert status == 403 and error_code(body) == "SignatureDoesNotMatch"


def test_x_amz_headers_the_signature_does_not_cover_are_refused(proxy, s3, bucket):
    """An x-amz-* header added to a signed request or a presigned URL, which the
    signature does not cover, is refused as AWS refuses it (403 AccessDenied), and
    nothing happens: not the PUT, not the copy it would have turned it into."""
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre-x.txt"},
                                    ExpiresIn=300)
    for header in ({"x-amz-copy-source": f"{bucket}/keep.txt"}, {"x-amz-meta-who": "mallory"},
                   {"X-Amz-Tagging": "a=b"}):
        status, body, _ = http("PUT", url, data=b"via presigned PUT", headers=header)
        assert status == 403 and error_code(body) == "AccessDenied", (header, body)
        assert b"not signed" in body, body
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="pre-x.txt")
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchKey")
    # Header-signed: an x-amz-* header added after signing.
    target = f"{proxy.endpoint}/{bucket}/signed-x.txt"
    req = AWSRequest(method="PUT", url=target, data=b"signed body")
    req.headers["x-amz-content-sha256"] = hashlib.sha256(b"signed body").hexdigest()
    S3SigV4Auth(Credentials(ACCESS, SECRET), "s3", "us-east-1").add_auth(req)
    headers = dict(req.headers)
    headers["x-amz-meta-added"] = "later"
    status, body, _ = http("PUT", target, data=b"signed body", headers=headers)
    assert status == 403 and error_code(body) == "AccessDenied", body
    # The same headers, all signed: accepted.
    status, _, _ = signed("PUT", target, b"signed body", headers={"x-amz-meta-added": "signed"})
    assert status == 200
    assert s3.head_object(Bucket=bucket, Key="signed-x.txt")["Metadata"] == {"added": "signed"}
    status, _, _ = http("PUT", url, data=b"via presigned PUT")
    assert status == 200
    assert_untouched(s3, bucket)


def test_a_body_that_does_not_hash_to_its_signed_sha256_is_refused_and_not_stored(proxy, s3, bucket):
    """A PUT whose body is not what its signed x-amz-content-sha256 says (altered
    on the way, or a client bug) is refused as AWS refuses it (400
    XAmzContentSHA256Mismatch) and stores nothing; the same body with its own
    hash is stored."""
    target = f"{proxy.endpoint}/{bucket}/hashed.txt"
    req = AWSRequest(method="PUT", url=target, data=b"the body sent")
    req.headers["x-amz-content-sha256"] = hashlib.sha256(b"the body signed").hexdigest()
    # SigV4Auth signs the header as given (S3SigV4Auth would put the body's hash).
    SigV4Auth(Credentials(ACCESS, SECRET), "s3", "us-east-1").add_auth(req)
    status, body, _ = http("PUT", target, data=b"the body sent", headers=dict(req.headers))
    assert status == 400 and error_code(body) == "XAmzContentSHA256Mismatch", body
    assert b"x-amz-content-sha256" in body, body
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="hashed.txt")
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchKey")
    status, _, _ = signed("PUT", target, b"the body sent")
    assert status == 200
    assert s3.get_object(Bucket=bucket, Key="hashed.txt")["Body"].read() == b"the body sent"
    assert_untouched(s3, bucket)


def test_expired_presigned_url(s3, bucket):
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "keep.txt"}, ExpiresIn=1)
    time.sleep(2.5)
    status, body, _ = http("GET", url)
    assert status == 403, body
    assert error_code(body) == "AccessDenied"
    assert_untouched(s3, bucket)


def test_wrong_secret_and_anonymous(proxy, bucket):
    bad = proxy.client(secret="wrong-secret-value")
    with pytest.raises(ClientError) as e:
        bad.put_object(Bucket=bucket, Key="keep.txt", Body=b"overwrite attempt")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    status, body, _ = signed("PUT", f"{proxy.endpoint}/{bucket}/keep.txt", b"forged", secret="nope-nope")
    assert status == 403 and error_code(body) == "SignatureDoesNotMatch"
    status, body, _ = http("GET", f"{proxy.endpoint}/{bucket}/keep.txt")
    assert status == 403 and error_code(body) == "AccessDenied"
    assert_untouched(proxy.client(), bucket)


def test_malformed_xml_bodies(proxy, bucket):
    body = b"<Delete><Object><Key>keep.txt</Key>"  # cut off
    md5 = __import__("base64").b64encode(hashlib.md5(body).digest()).decode()
    status, resp, _ = signed("POST", f"{proxy.endpoint}/{bucket}?delete", body, {"Content-MD5": md5})
    assert status == 400 and error_code(resp) == "MalformedXML", resp
    body = b"<CompleteMultipartUpload><Part>garbage"
    status, resp, _ = signed("POST", f"{proxy.endpoint}/{bucket}/x?uploadId=abc", body)
    assert status == 400 and error_code(resp) == "MalformedXML", resp
    assert_untouched(proxy.client(), bucket)


@pytest.mark.parametrize("name", ["UPPER", "ab", "bad_underscore", "-dash-start", "a" * 64, "10.0.0.1"])
def test_invalid_bucket_names(proxy, name):
    status, body, _ = signed("PUT", f"{proxy.endpoint}/{name}")
    assert status == 400, body
    assert error_code(body) == "InvalidBucketName"


def test_range_beyond_end_and_missing_things(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="keep.txt", Range="bytes=999999-")
    assert e.value.response["Error"]["Code"] == "InvalidRange"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="nope")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="no-such-bucket-here")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5", Body=b"abc", ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")
    assert e.value.response["Error"]["Code"] == "BadDigest"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="md5")
    assert_untouched(s3, bucket)


def test_empty_object_ranges_and_create_only_put(s3, bucket):
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    for rng in ["bytes=-5", "bytes=0-"]:
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key="empty", Range=rng)
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416, rng
    s3.put_object(Bucket=bucket, Key="once", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="once", Body=b"second", IfNoneMatch="*")
    assert e.value.response["Error"]["Code"] == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"first"
    assert_untouched(s3, bucket)


def test_lifecycle_rules_and_fullness_headers(s3, bucket):
    """docs/s3.md, "Lifecycle" and "Fullness", as boto3 users read them."""
    rules = [
        {
            "ID": "tmp",
            "Status": "Enabled",
            "Filter": {"Prefix": "tmp/"},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3},
        }
    ]
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": rules}
    )
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == rules
    # Expiration is applied from the index; a transition to another storage
    # class has no meaning here and is refused as a whole, leaving the
    # configuration as it was.
    with pytest.raises(ClientError) as e:
        s3.put_bucket_lifecycle_configuration(
            Bucket=bucket,
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": "old",
                        "Status": "Enabled",
                        "Filter": {"Prefix": ""},
                        "Expiration": {"Days": 30},
                        "Transitions": [{"Days": 40, "StorageClass": "GLACIER"}],
                    }
                ]
            },
        )
    assert e.value.response["Error"]["Code"] == "NotImplemented"
    assert "Transition" in e.value.response["Error"]["Message"]
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == rules
    expiring = rules + [
        {
            "ID": "old",
            "Status": "Enabled",
            "Filter": {"Prefix": "logs/"},
            "Expiration": {"Days": 30},
        }
    ]
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": expiring}
    )
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == expiring
    s3.delete_bucket_lifecycle(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"

    headers = s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPHeaders"]
    capacity = int(headers["x-oram-volume-capacity-bytes"])
    free = int(headers["x-oram-volume-free-bytes"])
    assert 0 < free <= capacity
    listed = s3.list_buckets()["ResponseMetadata"]["HTTPHeaders"]
    assert int(listed["x-oram-volume-capacity-bytes"]) == capacity
    assert_untouched(s3, bucket)
