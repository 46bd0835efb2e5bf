"""Quick probe of one proxy configuration (and MinIO beside it): 4 KiB GET/PUT p50/p99,
one large object PUT/GET MiB/s, proxy CPU seconds. `oram-workload speed` is the full benchmark."""
import os, sys, time, socket, subprocess, tempfile, statistics, shutil, argparse
import boto3
from botocore.config import Config
ap = argparse.ArgumentParser()
ap.add_argument('--proxy', default='target/debug/oram-proxy')
ap.add_argument('--minio', default=os.path.expanduser('~/go/bin/minio'))
ap.add_argument('--big-mb', type=int, default=64)
ap.add_argument('--n', type=int, default=100)
ap.add_argument('--skip-minio', action='store_true')
ap.add_argument('flags', nargs='*')
a = ap.parse_args()
def free_port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p
def wait(port, t=60):
    end = time.time() + t
    while time.time() < end:
        try: socket.create_connection(('127.0.0.1', port), 0.5).close(); return
        except OSError: time.sleep(0.1)
    raise SystemExit(f'port {port} never opened')
def cli(ep, ak, sk):
    return boto3.client('s3', endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk, region_name='us-east-1',
        config=Config(signature_version='s3v4', s3={'addressing_style': 'path'}, retries={'max_attempts': 1}, read_timeout=900))
def cpu(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100
def measure(label, s3, pid):
    from boto3.s3.transfer import TransferConfig
    s3.create_bucket(Bucket='probe')
    small = os.urandom(4096)
    s3.put_object(Bucket='probe', Key='s', Body=small)
    for _ in range(5): s3.get_object(Bucket='probe', Key='s')['Body'].read()
    g = []; p = []
    for i in range(a.n):
        t = time.perf_counter(); s3.get_object(Bucket='probe', Key='s')['Body'].read(); g.append(time.perf_counter() - t)
    for i in range(a.n // 2):
        t = time.perf_counter(); s3.put_object(Bucket='probe', Key=f'p{i}', Body=small); p.append(time.perf_counter() - t)
    q = lambda v, f: sorted(v)[min(len(v) - 1, int(len(v) * f))] * 1000
    big = os.urandom(a.big_mb << 20)
    c0 = cpu(pid) if pid else 0
    t = time.perf_counter(); s3.put_object(Bucket='probe', Key='big', Body=big); put = time.perf_counter() - t
    t = time.perf_counter(); got = s3.get_object(Bucket='probe', Key='big')['Body'].read(); get = time.perf_counter() - t
    c1 = cpu(pid) if pid else 0
    assert got == big
    print(f'{label:40s} GET p50 {q(g,.5):6.1f} p99 {q(g,.99):6.1f} ms | PUT p50 {q(p,.5):6.1f} p99 {q(p,.99):6.1f} ms | '
          f'{a.big_mb} MiB PUT {a.big_mb/put:7.2f} MiB/s GET {a.big_mb/get:7.2f} MiB/s | proxy CPU {c1-c0:.1f} s', flush=True)
tmp = tempfile.mkdtemp(prefix='probe-', dir='.')
procs = []
try:
    if not a.skip_minio:
        mp = free_port(); cp = free_port()
        env = dict(os.environ, MINIO_ROOT_USER='minioadmin', MINIO_ROOT_PASSWORD='minioadmin')
        m = subprocess.Popen([a.minio, 'server', '--address', f'127.0.0.1:{mp}', '--console-address', f'127.0.0.1:{cp}', f'{tmp}/minio'],
                             stdout=open(f'{tmp}/minio.log', 'w'), stderr=subprocess.STDOUT, env=env); procs.append(m)
        wait(mp); time.sleep(1)
        measure('minio', cli(f'http://127.0.0.1:{mp}', 'minioadmin', 'minioadmin'), m.pid)
    port = free_port()
    env = dict(os.environ, ORAM_PROXY_ROOT_USER='probeuser', ORAM_PROXY_ROOT_PASSWORD='probesecret1234567890')
    r = subprocess.run([a.proxy, 'init', '--data-dir', f'{tmp}/oram', *a.flags], env=env, capture_output=True, text=True)
    if r.returncode: raise SystemExit(r.stderr)
    px = subprocess.Popen([a.proxy, 'serve', '--data-dir', f'{tmp}/oram', '--s3-listen', f'127.0.0.1:{port}', *a.flags],
                          stdout=open(f'{tmp}/proxy.log', 'w'), stderr=subprocess.STDOUT, env=env); procs.append(px)
    wait(port)
    measure('proxy ' + ' '.join(a.flags), cli(f'http://127.0.0.1:{port}', 'probeuser', 'probesecret1234567890'), px.pid)
finally:
    for pr in procs:
        pr.terminate()
        try: pr.wait(120)
        except subprocess.TimeoutExpired: pr.kill()
    shutil.rmtree(tmp, ignore_errors=True)
