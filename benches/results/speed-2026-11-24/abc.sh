#!/bin/bash
# A = main 77009ff, B = fs in place (per-file fdatasync), C = fs in place + syncfs. Order A B C C B A.
W=/work/reports/s29
run() { # label bin env
  L=$1; BIN=$2; shift 2
  env "$@" $BIN/oram-workload speed --engines path --backends fs --object-size 16M --max-seconds-per-phase 40 --requests 50 --warmup 5 --raw-bytes 64M --minio /root/go/bin/minio --proxy $BIN/$PROXY --out $W/$L.md --work-dir /work/speedwork-$L > $W/$L.log 2>&1
}
A=/work/wt/rel/target/bins/r29; B=/work/wt/fs-inplace/target/bins/fsin
PROXY=oram-proxy run A1 $A X=1
PROXY=oram-proxy-exp run B1 $B X=1
PROXY=oram-proxy-exp run C1 $B ORAM_FS_SYNCFS=1
PROXY=oram-proxy-exp run C2 $B ORAM_FS_SYNCFS=1
PROXY=oram-proxy-exp run B2 $B X=1
PROXY=oram-proxy run A2 $A X=1
echo done > $W/done
