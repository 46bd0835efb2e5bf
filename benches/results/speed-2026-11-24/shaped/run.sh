#!/bin/bash
# The 4 KiB GET over the thesis's link (23.6 ms RTT, 510 Mbit/s), old defaults (O)
# then new (N), 16 MiB bulk objects; same binary.
B=${B:?the directory holding release oram-proxy and oram-linkshape}
PY=${PY:-python3}
M="$PY benches/shaped/measure.py --proxy $B/oram-proxy --linkshape $B/oram-linkshape --minio /root/go/bin/minio --big-mb 16"
$M --proxy-arg=--block-size=4096 --proxy-arg=--capacity-blocks=262144 --proxy-arg=--tree-cache-mib=16 > O.txt 2> O.err
$M > N.txt 2> N.err
echo done > done
