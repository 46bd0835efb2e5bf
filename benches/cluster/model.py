#!/usr/bin/env python3
"""A model of a cluster's throughput, calibrated on the costs `scale.py` and
`cluster_cpu` measure (see RESULTS.md beside this file): where one front
saturates, and how many nodes a target rate (1 GB/s by default) needs, with
S3's request-rate limits per key prefix.

Terms. An *access* is one op of the ORAM (one 4 KiB block); a client's 4 KiB
PUT is about one. Each access costs:
* the front: CPU (`--front-us`, the whole process: S3, object layer, rounds,
  TLS to the nodes), and a share of a round;
* its partition's node: CPU (`--node-us`) and backend traffic (`--up-kib`,
  `--down-kib` per direction) and requests (`--puts`, `--gets`).
Rounds carry at most `--max-batch` ops; with two rounds in flight a round
starts once the one before has read (`--read-ms`) and commits after the one
before committed (`--commit-ms`), so rounds start at most every
max(read, commit). A round waits for its most loaded node: `n` sub-accesses
drawn uniformly over `k` nodes finish when the fullest of `k` bins does, so
nodes run at `n / (k × E[max bin])` of their capacity (simulated here; with
`--shuffle-levels`, sub-accesses' work varies as ObliviStore's shuffles make it).

The required figures are measured ones: RESULTS.md ("A model of the
cluster") gives the command with the figures of a `scale.py` run; change them
to model another deployment. The defaults are a deployment's choices (block,
round size, partitions, links, cores) and S3's documented rates. Nothing here
is measured by this script: it is arithmetic on those figures plus a
balls-into-bins simulation.
"""

import argparse
import math
import random

GB = 1e9


def bins_efficiency(n, k, levels=0, trials=2000, seed=7):
    """E[work] ÷ (k × E[most loaded node's work]) for a round of n sub-accesses
    drawn uniformly over k nodes: the share of the nodes' capacity the round
    uses. With `levels` > 0 a sub-access's work is not 1 but 1 plus the
    shuffles it sets off, as in ObliviStore: level i (1..levels) of its
    partition is shuffled, 2^(i+1) blocks, once in 2^i accesses."""
    if k == 1:
        return 1.0
    rng = random.Random(seed)
    total, work = 0.0, 0.0
    for _ in range(trials):
        loads = [0.0] * k
        for _ in range(n):
            w = 1.0
            for i in range(1, levels + 1):
                if rng.random() < 2.0 ** -i:
                    w += 2.0 ** (i + 1)
            loads[rng.randrange(k)] += w
            work += w
        total += max(loads)
    return work / (k * total)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target-gbs", type=float, default=1.0, help="client payload, GB/s")
    ap.add_argument("--block", type=int, default=4096, help="bytes an access carries")
    ap.add_argument("--front-us", type=float, required=True, help="front CPU µs an access")
    ap.add_argument("--node-us", type=float, required=True, help="node CPU µs an access")
    ap.add_argument("--up-kib", type=float, required=True, help="node→backend KiB an access")
    ap.add_argument("--down-kib", type=float, required=True, help="backend→node KiB an access")
    ap.add_argument("--puts", type=float, required=True, help="backend PUTs an access")
    ap.add_argument("--gets", type=float, required=True, help="backend GETs an access")
    ap.add_argument("--sub-per-op", type=float, required=True,
                    help="sub-accesses an op (1 + background evictions)")
    ap.add_argument("--read-ms", type=float, required=True, help="a round's plan and reads")
    ap.add_argument("--commit-ms", type=float, required=True, help="a round's writes and commit")
    ap.add_argument("--max-batch", type=int, default=64, help="ops a round at most")
    ap.add_argument("--shuffle-levels", type=int, default=0,
                    help="levels whose shuffles a sub-access may set off (0: equal work)")
    ap.add_argument("--partitions", type=int, default=128,
                    help="key prefixes (one a partition: √capacity; 128 for 16,384 blocks)")
    ap.add_argument("--node-gbit", type=float, default=10.0,
                    help="each node's link to the object store, Gbit/s per direction")
    ap.add_argument("--cores", type=int, default=16, help="cores of each machine")
    ap.add_argument("--prefix-puts", type=float, default=3500, help="S3: PUTs/s a prefix")
    ap.add_argument("--prefix-gets", type=float, default=5500, help="S3: GETs/s a prefix")
    a = ap.parse_args()

    need = a.target_gbs * GB / a.block  # accesses a second
    print(f"target: {a.target_gbs:g} GB/s of {a.block}-byte accesses = {need:,.0f} accesses/s")

    print("\none front:")
    cpu_cap = a.cores * 1e6 / a.front_us
    interval = max(a.read_ms, a.commit_ms) / 1000
    round_cap = a.max_batch / interval
    print(f"  CPU: {a.cores} cores ÷ {a.front_us:g} µs = {cpu_cap:,.0f} accesses/s "
          f"({cpu_cap * a.block / 1e6:,.1f} MB/s); 1 core: {1e6 / a.front_us:,.0f}")
    print(f"  rounds: one starts every max(read {a.read_ms:g}, commit {a.commit_ms:g}) ms, "
          f"{a.max_batch} ops at most: {round_cap:,.0f} accesses/s "
          f"({round_cap * a.block / 1e6:,.1f} MB/s)")
    front_cap = min(cpu_cap, round_cap)
    bound = "its rounds" if round_cap < cpu_cap else "its CPU"
    print(f"  saturates at {front_cap:,.0f} accesses/s ({front_cap * a.block / 1e6:,.1f} MB/s), "
          f"bound by {bound}")
    batch_needed = need * interval
    print(f"  for the target: {need * a.front_us / 1e6:,.0f} cores, and rounds of "
          f"{batch_needed:,.0f} ops ({batch_needed / a.max_batch:,.0f}× max_batch)")
    fronts = math.ceil(need / front_cap)
    print(f"  or {fronts} fronts of today's, each its own volume")

    print("\nnodes:")
    link = a.node_gbit * 1e9 / 8
    per_dir = max(a.up_kib, a.down_kib) * 1024
    link_cap = link / per_dir
    node_cpu = a.cores * 1e6 / a.node_us
    node_cap = min(link_cap, node_cpu)
    which = "link" if link_cap < node_cpu else "CPU"
    print(f"  one node: link {a.node_gbit:g} Gbit/s ÷ {per_dir / 1024:.1f} KiB "
          f"(the busier direction) = {link_cap:,.0f} accesses/s; CPU {a.cores} cores ÷ "
          f"{a.node_us:g} µs = {node_cpu:,.0f}; bound by its {which}: {node_cap:,.0f}")
    n = max(1, round(min(need * interval, a.max_batch) * a.sub_per_op))
    # With today's rounds the front bounds first (above); with rounds of the
    # size the target needs, how many nodes carry it:
    wide = max(n, round(batch_needed * a.sub_per_op))
    k = 1
    while k < 10000:
        eff = bins_efficiency(min(wide, 2048), k, a.shuffle_levels, trials=300)
        if k * node_cap * eff >= need:
            break
        k += 1
    print(f"  for the target, with rounds of {wide:,} sub-accesses: {k} nodes, each used at "
          f"{eff:.2f} of its capacity (simulated with rounds of {min(wide, 2048):,})")
    for k in (2, 4, 8, 16):
        eff = [bins_efficiency(m, k, a.shuffle_levels) for m in (8, n, 1024)]
        print(f"  efficiency at {k} nodes: rounds of 8 sub-accesses {eff[0]:.2f}; "
              f"of {n}: {eff[1]:.2f}; of 1024: {eff[2]:.2f}")

    print("\nS3's request rates (per key prefix; one prefix a partition):")
    puts, gets = need * a.puts, need * a.gets
    print(f"  PUTs {puts:,.0f}/s: {math.ceil(puts / a.prefix_puts)} prefixes at least "
          f"({a.partitions} partitions allow {a.partitions * a.prefix_puts:,.0f}/s)")
    print(f"  GETs {gets:,.0f}/s: {math.ceil(gets / a.prefix_gets)} prefixes at least "
          f"({a.partitions} partitions allow {a.partitions * a.prefix_gets:,.0f}/s)")
    print(f"  one front at saturation: {front_cap * a.puts:,.0f} PUTs/s, "
          f"{front_cap * a.gets:,.0f} GETs/s")


if __name__ == "__main__":
    main()
