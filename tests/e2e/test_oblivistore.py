"""The ObliviStore engine (`--engine oblivistore`, `kind = "oblivistore"`) through the
real binary: objects written through S3 (boto3) and Swift (python-swiftclient) read
back byte for byte through both APIs, then again after kill -9 and a restart on the
same data directory that names nothing of the volume (its engine, shape and
partitions are taken from the volume), and `oram-proxy fsck` finds every partition
and the map of partitions consistent."""

import random

from conftest import Proxy, fsck_clean, read_back_both, write_mixed

SIZES = [0, 1, 4095, 4096, 4097, 100_000, 1_500_000]
PARTITIONS = 48  # not the default (⌈√4096⌉ = 64): the key reaches the engine


def test_oblivistore_serves_s3_and_swift_byte_exactly_across_kill_and_restart(tmp_path):
    cfg = tmp_path / "oram.toml"
    # No `kind`: `--engine oblivistore` picks the engine, and its keys in the file
    # (ignored by the file's default engine) with it.
    cfg.write_text(
        "[engine]\n"
        "block_size = 4096\n"
        "capacity_blocks = 4096\n"
        f"oblivistore_partitions = {PARTITIONS}\n"
    )
    work = tmp_path / "proxy"
    args = ["--engine", "oblivistore", "--config", str(cfg)]
    p = Proxy(work, *args, swift=True)
    expected = {}
    try:
        expected = write_mixed(p, "obl", SIZES)
        s3 = p.client()
        s3.copy_object(Bucket="obl", Key="copy-5", CopySource={"Bucket": "obl", "Key": "obj-5"})
        expected["copy-5"] = expected["obj-5"]
        read_back_both(p, "obl", expected)
    finally:
        # Acknowledged writes survive a kill -9.
        p.kill()
    volume = (work / "data" / "volume.toml").read_text()
    assert '"oblivistore"' in volume and f'partitions = "{PARTITIONS}"' in volume, volume
    # A start naming nothing of the volume takes its engine, shape and partitions.
    again = Proxy(work, swift=True)
    try:
        read_back_both(again, "obl", expected)
    finally:
        code = again.stop()
    assert code == 0, again.logs()
    assert "oblivistore" in again.logs(), again.logs()
    fsck_clean(again, *args)


def test_every_partition_rebuilds_its_top_level_and_survives_kill(tmp_path):
    """A small volume (256 blocks of 512 bytes: 16 partitions, levels 0..=6) churned
    with overwrites and reads until every partition has rebuilt its top level from
    all of its levels (the eviction counter wrapping round), each read checked byte
    for byte; then kill -9, a restart, every object again, and a clean fsck."""
    cfg = tmp_path / "oram.toml"
    cfg.write_text('[engine]\nkind = "oblivistore"\nblock_size = 512\ncapacity_blocks = 256\n')
    work = tmp_path / "proxy"
    args = ["--config", str(cfg)]
    p = Proxy(work, *args)
    volume = (work / "data" / "volume.toml").read_text()
    assert 'partitions = "16"' in volume, volume
    top = int(volume.split('top_level = "')[1].split('"')[0])
    rng = random.Random(15)
    keys = [f"churn-{i}" for i in range(3)]
    expected = {}
    try:
        s3 = p.client()
        s3.create_bucket(Bucket="obl")
        for i in range(60):
            key = rng.choice(keys)
            expected[key] = rng.randbytes(rng.randrange(8_000, 24_000))
            s3.put_object(Bucket="obl", Key=key, Body=expected[key])
            key = rng.choice(sorted(expected))
            got = s3.get_object(Bucket="obl", Key=key)["Body"].read()
            assert got == expected[key], f"round {i}: {key}"
        # A partition's top level is built at its 2^top-th eviction from the
        # levels below, and rebuilt from all of them at the 2^(top+1)-th: a second
        # object of the top level (another slot) shows the rebuild.
        store = work / "data" / "store" / "vol0" / "o"
        for part in range(16):
            slots = sorted(f.name for f in (store / str(part) / str(top)).iterdir())
            assert len(slots) >= 2, f"partition {part}: top level objects {slots}"
    finally:
        p.kill()
    again = Proxy(work, *args)
    try:
        s3 = again.client()
        for key, data in expected.items():
            assert s3.get_object(Bucket="obl", Key=key)["Body"].read() == data, key
    finally:
        code = again.stop()
    assert code == 0, again.logs()
    fsck_clean(again, *args)
