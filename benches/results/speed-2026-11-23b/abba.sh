#!/bin/bash
# Before (main 5fc5546: bucket plaintexts journaled in state.redb, written back after
# the commit) vs after (buckets written to a free slot before the commit, no journal),
# Path ORAM on the fs back-end, release binaries, ABBA order, nothing else running.
# Run from the repository root with the two builds in target/bins/{before,after}.
out=benches/results/speed-2026-11-23b
one() { # label bs cap cached
  echo "=== $1 bs=$2 cached=$4 $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  target/bins/$1/oram-workload speed --engines path --backends fs --object-size 16M --max-seconds-per-phase 40 \
     --requests 50 --warmup 5 --raw-bytes 64M --block-size $2 --capacity-blocks $3 --cached-levels $4 \
     --minio "${MINIO:-$(go env GOPATH)/bin/minio}" --out $out/$1-bs$2-c$4.md --work-dir /work/sweepwork-$1-$2 > $out/$1-bs$2-c$4.log 2>&1
  echo "rc=$? $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  rm -rf /work/sweepwork-$1-$2
}
one before 4096 262144 10
one after 4096 262144 10
one after 65536 16384 8
one before 65536 16384 8
