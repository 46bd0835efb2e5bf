#!/bin/bash
# Every engine on the fs back-end, main 535668f, the defaults (4 KiB blocks, 10 cached levels, 1 GiB).
W=/work/reports/s29; B=/work/wt/rel/target/bins/m535
$B/oram-workload speed --engines direct,path,ring --backends fs --object-size 16M --max-seconds-per-phase 40 --requests 50 --warmup 5 --raw-bytes 64M --minio /root/go/bin/minio --out $W/engines-fs.md --work-dir /work/speedwork-engines > $W/engines-fs.log 2>&1
echo done > $W/engines-done
