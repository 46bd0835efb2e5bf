"""Peak RSS of the proxy (default volume, fs back-end) across PUTs and GETs of growing
objects: does memory depend on object size? One proxy, objects of 16 MiB, 256 MiB and
768 MiB (each deleted after it is read back; the volume is 1 GiB) uploaded with boto3 (multipart, 8 MiB parts, 4 threads) and read back; VmHWM is read
from /proc after each object (a high-water mark: it only grows).

Usage: rss.py PROXY [SIZE_MIB ...]; RSS_ARGS adds flags to `serve` (e.g.
RSS_ARGS="--capacity-blocks 131072" for a 2 GiB volume that takes a 1 GiB object)."""
import os, socket, subprocess, sys, tempfile, time, hashlib, pathlib
import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

proxy = sys.argv[1]
work = pathlib.Path(tempfile.mkdtemp(prefix="rss-", dir="/work"))
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]
port = free_port()
env = dict(os.environ, ORAM_PROXY_ROOT_USER="rssuser", ORAM_PROXY_ROOT_PASSWORD="rss-secret-123")
sizes = [int(a) for a in sys.argv[2:]] or [16, 256, 768]
extra = os.environ.get("RSS_ARGS", "").split()
p = subprocess.Popen([proxy, "serve", "--data-dir", str(work / "d"), "--s3-listen", f"127.0.0.1:{port}", *extra],
                     env=env, stdout=subprocess.DEVNULL, stderr=open(work / "err", "w"))
def hwm():
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith(("VmHWM", "VmRSS")):
            yield line.split()[1]
try:
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close(); break
        except OSError:
            time.sleep(0.1)
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="rssuser",
                      aws_secret_access_key="rss-secret-123", region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, read_timeout=900))
    s3.create_bucket(Bucket="rss")
    tc = TransferConfig(multipart_chunksize=8 << 20, max_concurrency=4)
    print("start: VmHWM/VmRSS kB", list(hwm()), flush=True)
    for mib in sizes:
        f = work / f"obj{mib}"
        with open(f, "wb") as o:
            for _ in range(mib):
                o.write(os.urandom(1 << 20))
        t = time.monotonic()
        s3.upload_file(str(f), "rss", f"o{mib}", Config=tc)
        tp = time.monotonic() - t
        print(f"PUT {mib} MiB in {tp:.0f} s: VmHWM/VmRSS kB", list(hwm()), flush=True)
        t = time.monotonic()
        h = hashlib.sha256()
        body = s3.get_object(Bucket="rss", Key=f"o{mib}")["Body"]
        for chunk in iter(lambda: body.read(1 << 20), b""):
            h.update(chunk)
        want = hashlib.sha256(open(f, "rb").read()).hexdigest()
        print(f"GET {mib} MiB in {time.monotonic() - t:.0f} s, intact={h.hexdigest() == want}: VmHWM/VmRSS kB", list(hwm()), flush=True)
        f.unlink()
        s3.delete_object(Bucket="rss", Key=f"o{mib}")
finally:
    p.terminate(); p.wait(timeout=60)
    subprocess.run(["rm", "-rf", str(work)])
