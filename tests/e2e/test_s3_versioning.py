"""S3 versioning with boto3: version ids, listing versions, reads by version,
delete markers, restoring an old version by copy, the space of deleted
versions given back, and versions surviving a restart (fsck clean)."""

import pytest
from botocore.exceptions import ClientError

from conftest import Proxy, fsck_clean


def free_bytes(s3, bucket):
    h = s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPHeaders"]
    return int(h["x-oram-volume-free-bytes"])


def test_versions_markers_restore_space_and_restart(tmp_path):
    # One test (not two sharing a fixture): pytest-xdist may run a module's
    # tests on different workers.
    vproxy = Proxy(tmp_path / "versioning")
    try:
        versions_markers_and_restore(vproxy)
    finally:
        vproxy.stop()
    restart_and_delete_every_version(vproxy)


def versions_markers_and_restore(vproxy):
    s3 = vproxy.client()
    b = "e2e-versions"
    s3.create_bucket(Bucket=b)
    assert "Status" not in s3.get_bucket_versioning(Bucket=b)
    empty = free_bytes(s3, b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"

    old, new = b"first version " * 5000, b"second version " * 3000
    v1 = s3.put_object(Bucket=b, Key="doc.txt", Body=old)["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="doc.txt", Body=new)["VersionId"]
    assert v1 != v2
    assert s3.get_object(Bucket=b, Key="doc.txt")["Body"].read() == new
    got = s3.get_object(Bucket=b, Key="doc.txt", VersionId=v1)
    assert got["Body"].read() == old and got["VersionId"] == v1
    assert free_bytes(s3, b) <= empty - len(old) - len(new)

    # Delete without a version id: a delete marker hides the key.
    d = s3.delete_object(Bucket=b, Key="doc.txt")
    assert d["DeleteMarker"] is True
    marker = d["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="doc.txt")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    h = e.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert h["x-amz-delete-marker"] == "true" and h["x-amz-version-id"] == marker
    assert "Contents" not in s3.list_objects_v2(Bucket=b)

    lv = s3.list_object_versions(Bucket=b)
    assert [(v["VersionId"], v["IsLatest"], v["Size"]) for v in lv["Versions"]] == [
        (v2, False, len(new)), (v1, False, len(old))]
    assert [(m["VersionId"], m["IsLatest"]) for m in lv["DeleteMarkers"]] == [(marker, True)]

    # Pages of one entry follow the markers through all three.
    seen, kw = [], {}
    for _ in range(10):
        page = s3.list_object_versions(Bucket=b, MaxKeys=1, **kw)
        seen += [v["VersionId"] for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        if not page["IsTruncated"]:
            break
        kw = {"KeyMarker": page["NextKeyMarker"], "VersionIdMarker": page["NextVersionIdMarker"]}
    assert seen == [marker, v2, v1]

    # Restore the first version by copying it onto its key.
    cp = s3.copy_object(Bucket=b, Key="doc.txt", CopySource={"Bucket": b, "Key": "doc.txt", "VersionId": v1})
    assert cp["CopySourceVersionId"] == v1
    assert s3.get_object(Bucket=b, Key="doc.txt")["Body"].read() == old
    assert len(s3.list_object_versions(Bucket=b)["Versions"]) == 3

    # Suspended: writes replace the null version.
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    # (the null version is not named in a PUT's answer, as AWS answers it)
    assert "VersionId" not in s3.put_object(Bucket=b, Key="other", Body=b"a" * 10_000)
    assert "VersionId" not in s3.put_object(Bucket=b, Key="other", Body=b"b" * 10_000)
    other = [v for v in s3.list_object_versions(Bucket=b, Prefix="other")["Versions"]]
    assert [(v["VersionId"], v["Size"]) for v in other] == [("null", 10_000)]


def restart_and_delete_every_version(vproxy):
    """Versions survive a restart (fsck clean), and deleting them frees the space."""
    b = "e2e-versions"
    fsck_clean(vproxy)
    p = Proxy(vproxy.workdir)  # the same data directory
    try:
        s3 = p.client()
        lv = s3.list_object_versions(Bucket=b)
        versions = lv["Versions"] + lv.get("DeleteMarkers", [])
        assert len(versions) == 5
        doc = [v for v in lv["Versions"] if v["Key"] == "doc.txt"]
        assert len(doc) == 3
        v1 = doc[-1]["VersionId"]
        assert s3.get_object(Bucket=b, Key="doc.txt", VersionId=v1)["Body"].read() == b"first version " * 5000
        before = free_bytes(s3, b)
        out = s3.delete_objects(Bucket=b, Delete={"Objects": [
            {"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions]})
        assert len(out["Deleted"]) == 5 and "Errors" not in out
        after = free_bytes(s3, b)
        assert after >= before + len(b"first version " * 5000) * 2 + len(b"second version " * 3000)
        lv = s3.list_object_versions(Bucket=b)
        assert "Versions" not in lv and "DeleteMarkers" not in lv
        s3.delete_bucket(Bucket=b)
    finally:
        assert p.stop() == 0
    fsck_clean(p)


def test_swift_writes_into_a_bucket_versioned_through_s3(tmp_path):
    from conftest import swift_connection
    from swiftclient.exceptions import ClientException

    p = Proxy(tmp_path / "swift", swift=True)
    try:
        s3, sw = p.client(), swift_connection(p)
        b = "e2e-versions-swift"
        s3.create_bucket(Bucket=b)
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
        v1 = s3.put_object(Bucket=b, Key="k", Body=b"from s3")["VersionId"]
        sw.put_object(b, "k", b"from swift")
        assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"from swift"
        sw.delete_object(b, "k")
        with pytest.raises(ClientException) as e:
            sw.get_object(b, "k")
        assert e.value.http_status == 404
        lv = s3.list_object_versions(Bucket=b)
        assert len(lv["Versions"]) == 2 and len(lv["DeleteMarkers"]) == 1
        assert s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == b"from s3"
        assert sw.head_container(b)["x-container-object-count"] == "0"
    finally:
        assert p.stop() == 0
