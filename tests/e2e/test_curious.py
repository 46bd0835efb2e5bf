"""The CURIOUS engine (`kind = "curious"`) through the real binary, with each of its
sub-ORAMs (a ternary Path ORAM tree, Z = 5; Ring ORAM): objects written through S3
(boto3) and Swift (python-swiftclient) read back byte for byte through both APIs,
then again after kill -9 and a restart on the same data directory, and `oram-proxy
fsck` finds every partition and the map of partitions consistent."""

import pytest

from conftest import Proxy, fsck_clean, read_back_both, write_mixed

SIZES = [0, 1, 4095, 4096, 4097, 100_000, 1_500_000]


@pytest.mark.parametrize("sub", ["path", "ring"])
def test_curious_serves_s3_and_swift_byte_exactly_across_kill_and_restart(tmp_path, sub):
    cfg = tmp_path / "oram.toml"
    cfg.write_text(
        "[engine]\n"
        'kind = "curious"\n'
        f'curious_sub = "{sub}"\n'
        "block_size = 4096\n"
        "capacity_blocks = 4096\n"
    )
    work = tmp_path / "proxy"
    args = ["--config", str(cfg)]
    p = Proxy(work, *args, swift=True)
    expected = {}
    try:
        expected = write_mixed(p, "cur", SIZES)
        read_back_both(p, "cur", expected)
    finally:
        # Acknowledged writes survive a kill -9.
        p.kill()
    again = Proxy(work, *args, swift=True)
    try:
        read_back_both(again, "cur", expected)
        volume = (work / "data" / "volume.toml").read_text()
        assert "curious" in volume and f'"{sub}"' in volume, volume
    finally:
        code = again.stop()
    assert code == 0, again.logs()
    fsck_clean(again, *args)
