"""S3 object lock with boto3: the lock configuration and where it is refused,
governance retention and its bypass, compliance retention that nothing lifts
or shortens, legal hold on and off, the default retention of new objects,
and locks surviving a restart (fsck clean)."""

import datetime

import pytest
from botocore.exceptions import ClientError

from conftest import Proxy, fsck_clean


def code(e):
    return e.value.response["Error"]["Code"]


def in_days(days):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days)


def test_object_lock_rules_and_restart(tmp_path):
    # One test (not two sharing a fixture): pytest-xdist may run a module's
    # tests on different workers.
    p = Proxy(tmp_path / "objectlock")
    try:
        comp = lock_rules(p.client())
    finally:
        assert p.stop() == 0
    fsck_clean(p)
    p = Proxy(p.workdir)  # the same data directory
    try:
        s3 = p.client()
        # The compliance retention and the default survived the restart.
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket="e2e-locked", Key="c", VersionId=comp,
                             BypassGovernanceRetention=True)
        assert code(e) == "AccessDenied"
        r = s3.get_object_retention(Bucket="e2e-locked", Key="c", VersionId=comp)
        assert r["Retention"]["Mode"] == "COMPLIANCE"
        cfg = s3.get_object_lock_configuration(Bucket="e2e-locked")
        assert cfg["ObjectLockConfiguration"]["Rule"]["DefaultRetention"] == {
            "Mode": "GOVERNANCE", "Days": 1}
    finally:
        assert p.stop() == 0


def lock_rules(s3):
    # A bucket created without lock, not versioned: refused as AWS does.
    s3.create_bucket(Bucket="e2e-plain")
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(
            Bucket="e2e-plain", ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert code(e) == "InvalidBucketState"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="e2e-plain", Key="k", Body=b"x", ObjectLockLegalHoldStatus="ON")
    assert code(e) == "InvalidRequest"

    b = "e2e-locked"
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    assert code(e) == "InvalidBucketState"

    # Governance: a retained version cannot be deleted, except with the bypass.
    gov = s3.put_object(Bucket=b, Key="g", Body=b"governed", ObjectLockMode="GOVERNANCE",
                        ObjectLockRetainUntilDate=in_days(1))["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="g", VersionId=gov)
    assert code(e) == "AccessDenied"
    # A DELETE without a version id still adds a delete marker.
    assert s3.delete_object(Bucket=b, Key="g")["DeleteMarker"] is True
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=b, Key="g", VersionId=gov, Retention={
            "Mode": "GOVERNANCE", "RetainUntilDate": in_days(0.5)})
    assert code(e) == "AccessDenied"
    out = s3.delete_objects(Bucket=b, BypassGovernanceRetention=True,
                            Delete={"Objects": [{"Key": "g", "VersionId": gov}]})
    assert "Errors" not in out and len(out["Deleted"]) == 1

    # Compliance: no bypass, no shortening, no change to governance.
    comp = s3.put_object(Bucket=b, Key="c", Body=b"complied")["VersionId"]
    s3.put_object_retention(Bucket=b, Key="c", VersionId=comp, Retention={
        "Mode": "COMPLIANCE", "RetainUntilDate": in_days(2)})
    h = s3.head_object(Bucket=b, Key="c")
    assert h["ObjectLockMode"] == "COMPLIANCE"
    assert h["ObjectLockRetainUntilDate"] > in_days(1.9)
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="c", VersionId=comp, BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    for mode, days in (("COMPLIANCE", 1), ("GOVERNANCE", 3)):
        with pytest.raises(ClientError) as e:
            s3.put_object_retention(Bucket=b, Key="c", VersionId=comp,
                                    BypassGovernanceRetention=True,
                                    Retention={"Mode": mode, "RetainUntilDate": in_days(days)})
        assert code(e) == "AccessDenied"

    # Legal hold: on, the version stays; off, it can go.
    held = s3.put_object(Bucket=b, Key="h", Body=b"held")["VersionId"]
    s3.put_object_legal_hold(Bucket=b, Key="h", LegalHold={"Status": "ON"})
    assert s3.get_object_legal_hold(Bucket=b, Key="h")["LegalHold"]["Status"] == "ON"
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="h", VersionId=held, BypassGovernanceRetention=True)
    assert code(e) == "AccessDenied"
    s3.put_object_legal_hold(Bucket=b, Key="h", VersionId=held, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=b, Key="h", VersionId=held)

    # Default retention applies to new objects, multipart ones too.
    s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    d = s3.put_object(Bucket=b, Key="d", Body=b"defaulted")["VersionId"]
    r = s3.get_object_retention(Bucket=b, Key="d", VersionId=d)["Retention"]
    assert r["Mode"] == "GOVERNANCE" and in_days(0.99) < r["RetainUntilDate"] <= in_days(1)
    up = s3.create_multipart_upload(Bucket=b, Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"part")["ETag"]
    mp = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag}]})["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="mp", VersionId=mp)
    assert code(e) == "AccessDenied"
    return comp
