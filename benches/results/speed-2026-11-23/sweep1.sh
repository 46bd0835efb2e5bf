#!/bin/bash
# Block-size / cache sweep of Path ORAM on the fs back-end (main 803471f release binaries), alone on the VM.
B=target/bins/main-803471f
cd benches/results/speed-2026-11-23
for cfg in "4096 262144 10" "16384 65536 8" "65536 16384 6" "65536 16384 8"; do
  set -- $cfg
  echo "=== bs=$1 cap=$2 cached=$3 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  $B/oram-workload speed --engines path --backends fs --object-size 16M --max-seconds-per-phase 40 \
     --requests 50 --warmup 5 --raw-bytes 64M --raw-concurrency 64 --block-size $1 --capacity-blocks $2 --cached-levels $3 \
     --minio /root/go/bin/minio --out benches/results/speed-2026-11-23/bs$1-c$3.md --work-dir /work/sweepwork-$1-$3 > benches/results/speed-2026-11-23/bs$1-c$3.log 2>&1
  echo "rc=$? $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
