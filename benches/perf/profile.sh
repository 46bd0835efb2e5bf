#!/bin/bash
# perf profile of the proxy during one PUT then GET of a MB-MiB object (boto3, one
# request each), recorded for SECS seconds from 3 s into the PUT.
# usage: MB=64 SECS=25 OUT=dir benches/perf/profile.sh BIN LABEL [init/serve flags...]
#   BIN    the oram-proxy binary (release);  LABEL  names the report: $OUT/$LABEL.txt
#   PY     a Python with boto3 (default: python3);  KEEP=1 keeps $WORK (perf.data)
#   WORK   scratch directory (default: /tmp/perfwork-$LABEL)
# Used for benches/SPEED.md: 2026-11-23 with MB=64 SECS=25, 2026-11-24 with MB=16 SECS=20.
BIN=$1; LABEL=$2; shift 2
D=${WORK:-/tmp/perfwork-$LABEL}; rm -rf "$D"; mkdir -p "$D"
OUT=${OUT:-.}; mkdir -p "$OUT"
export ORAM_PROXY_ROOT_USER=perfuser ORAM_PROXY_ROOT_PASSWORD=perfsecret1234567890
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
$BIN init --data-dir "$D/data" "$@" > "$D/init.log" 2>&1 || { cat "$D/init.log"; exit 1; }
$BIN serve --data-dir "$D/data" --s3-listen 127.0.0.1:$PORT "$@" > "$D/serve.log" 2>&1 &
PID=$!
for i in $(seq 100); do grep -q "secret key:" "$D/serve.log" && break; sleep 0.2; done
${PY:-python3} - $PORT <<'PY' &
import sys, os, boto3, time
from botocore.config import Config
s3 = boto3.client('s3', endpoint_url=f'http://127.0.0.1:{sys.argv[1]}', aws_access_key_id='perfuser', aws_secret_access_key='perfsecret1234567890', region_name='us-east-1', config=Config(s3={'addressing_style':'path'}, read_timeout=900, retries={'max_attempts':1}))
s3.create_bucket(Bucket='perfb')
body = os.urandom(int(os.environ.get("MB","64"))<<20)
t=time.time(); s3.put_object(Bucket='perfb', Key='big', Body=body); put=time.time()-t
t=time.time(); got=s3.get_object(Bucket='perfb', Key='big')['Body'].read(); get=time.time()-t
assert got==body
print(f"PUT {len(body)/1048576/put:.2f} MiB/s GET {len(body)/1048576/get:.2f} MiB/s", flush=True)
PY
CL=$!
sleep 3
perf record -F 499 -g -p $PID -o "$D/perf.data" -- sleep ${SECS:-25} > /dev/null 2>&1
wait $CL
kill $PID; wait $PID
perf report -i "$D/perf.data" --no-children --sort comm,dso,symbol --stdio 2>/dev/null | grep -v "^#" | grep "%" | head -60 > "$OUT/$LABEL.txt"
perf report -i "$D/perf.data" --no-children --sort comm --stdio 2>/dev/null | grep "%" | head -20 >> "$OUT/$LABEL.txt"
[ "${KEEP:-0}" = 1 ] || rm -rf "$D"
