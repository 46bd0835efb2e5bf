#!/bin/bash
# Block size / cache sweep with the fs-in-place build (1 GiB ORAM, Path, fs).
W=/work/reports/s29; B=/work/wt/fs-inplace/target/bins/fsin
run() { L=$1; shift
  $B/oram-workload speed --engines path --backends fs --object-size 16M --max-seconds-per-phase 40 --requests 50 --warmup 5 --raw-bytes 64M --minio /root/go/bin/minio --proxy $B/oram-proxy-exp --out $W/$L.md --work-dir /work/speedwork-$L "$@" > $W/$L.log 2>&1
}
run bs16k-c8 --block-size 16384 --capacity-blocks 65536 --cached-levels 8
run bs64k-c6 --block-size 65536 --capacity-blocks 16384 --cached-levels 6
run bs64k-c8 --block-size 65536 --capacity-blocks 16384 --cached-levels 8
echo done > $W/sweep-done
