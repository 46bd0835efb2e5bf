#!/bin/bash
# Issue 14, stop 30: the new defaults (16 KiB blocks, 65536 blocks = 1 GiB, 16 MiB
# tree-top cache = 8 levels) against the old ones (4 KiB, 262144, 10 levels), same
# binary, order N O O N; N1 also measures ring and direct at the new defaults.
W=${W:-.}
BIN=${BIN:?the directory holding release oram-proxy and oram-workload}
run() { # label engines [flags]
  L=$1; E=$2; shift 2
  $BIN/oram-workload speed --engines $E --backends fs --object-size 64M --max-seconds-per-phase 40 \
    --requests 50 --warmup 5 --raw-bytes 64M "$@" --minio /root/go/bin/minio --proxy $BIN/oram-proxy \
    --out $W/$L.md --work-dir /work/speedwork-$L > $W/$L.log 2>&1
  rm -rf /work/speedwork-$L
}
OLD="--block-size 4096 --capacity-blocks 262144 --cached-levels 10"
run N1 path,ring,direct
run O1 path $OLD
run O2 path $OLD
run N2 path
echo done > $W/done
