#!/bin/bash
# Issue 14, stop 31: the round budget in bytes. Path ORAM on fs with 64 KiB blocks
# (16384 of them = 1 GiB, 16 MiB tree-top cache = 6 of 14 levels): U = no budget in
# effect (round_mib = 1024: 64 paths per round, as before), B = the default budget
# (round_mib = 64: 32 paths per round); order U B B U, one release build, MinIO in
# every run. Peak RSS is the column to read.
W=${W:-.}
BIN=${BIN:?directory of the release oram-proxy and oram-workload}
run() { # label [flags]
  L=$1; shift
  $BIN/oram-workload speed --engines path --backends fs --object-size 64M --max-seconds-per-phase 30 \
    --requests 30 --warmup 3 --raw-bytes 64M --block-size 64K --capacity-blocks 16384 "$@" \
    --minio /root/go/bin/minio --proxy $BIN/oram-proxy --out $W/$L.md --work-dir /work/speedwork-$L \
    > $W/$L.log 2>&1
  rm -rf /work/speedwork-$L
}
run U1 --engine-set round_mib=1024
run B1
run B2
run U2 --engine-set round_mib=1024
echo done > $W/done
