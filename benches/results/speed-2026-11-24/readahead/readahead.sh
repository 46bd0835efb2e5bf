#!/bin/bash
# Issue 14, stop 31: rounds that read ahead of a landing round of reads (NEW)
# against the same defaults without it (OLD: the release build of stop 30), order
# N O O N, MinIO measured in every run; N1 also measures ring. Then the shaped
# link (23.6 ms / 510 Mbit/s), OLD then NEW then OLD then NEW.
W=${W:-.}
NEW=${NEW:?directory of the new release oram-proxy, oram-workload, oram-linkshape}
OLD=${OLD:?directory of the old release oram-proxy}
PY=${PY:-python3}
run() { # label bindir engines
  L=$1; B=$2; E=$3
  $NEW/oram-workload speed --engines $E --backends fs --object-size 64M --max-seconds-per-phase 40 \
    --requests 50 --warmup 5 --raw-bytes 64M --minio /root/go/bin/minio --proxy $B/oram-proxy \
    --out $W/$L.md --work-dir /work/speedwork-$L > $W/$L.log 2>&1
  rm -rf /work/speedwork-$L
}
shaped() { # label bindir
  $PY "$(dirname "$0")/../../../shaped/measure.py" --proxy $2/oram-proxy \
    --linkshape $NEW/oram-linkshape --minio /root/go/bin/minio --big-mb 16 > $W/$1.txt 2>&1
}
run N1 $NEW path,ring
run O1 $OLD path,ring
run O2 $OLD path
run N2 $NEW path
shaped SO1 $OLD
shaped SN1 $NEW
shaped SO2 $OLD
shaped SN2 $NEW
echo done > $W/done
