#!/bin/bash
# Before (39e49da: redb cache 1 GiB, RustCrypto AES-GCM) vs after (cache 64 MiB, AWS-LC AES-GCM), ABBA order.
cd benches/results/speed-2026-11-23
one() { # bin label bs cap cached
  echo "=== $2 bs=$3 cached=$5 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  target/bins/$1/oram-workload speed --engines path --backends fs --object-size 16M --max-seconds-per-phase 40 \
     --requests 50 --warmup 5 --raw-bytes 64M --block-size $3 --capacity-blocks $4 --cached-levels $5 \
     --minio /root/go/bin/minio --out benches/results/speed-2026-11-23/r2-$2-bs$3-c$5.md --work-dir /work/sweepwork-$2-$3 > benches/results/speed-2026-11-23/r2-$2-bs$3-c$5.log 2>&1
  echo "rc=$? $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg)"
}
one main-39e49da before 4096 262144 10
one main-new after 4096 262144 10
one main-new after 65536 16384 8
one main-39e49da before 65536 16384 8
