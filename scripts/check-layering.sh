#!/usr/bin/env bash
# Keeps the one-way data flow: the engine, sealing, state and block-store crates must
# not depend (normally, transitively) on HTTP or S3 crates. Only proxy/ may.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='^(hyper|hyper-util|s3s|aws-sdk-[a-z0-9-]+|aws-smithy-[a-z0-9-]+|axum|reqwest|http)$'
status=0
for crate in oram-blockstore oram-seal oram-state oram-statedb oram-engine oram-objects oram-linkshape oram-store-memory oram-store-fs oram-tree oram-partition oram-path oram-ring oram-curious oram-oblivistore oram-direct; do
    deps=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
    bad=$(echo "$deps" | grep -E "$forbidden" || true)
    if [ -n "$bad" ]; then
        echo "layering violation: $crate depends on: $bad" >&2
        status=1
    fi
done
# No engine imports another (engines/tree and engines/partition are shared cores,
# not engines), in normal or test builds: each one is a peer that only the binary
# wires in. CURIOUS's own tests run it over its sub-ORAMs (Path and Ring): its
# test build may use them, its normal build uses none. The partition framework
# uses no engine.
peers='oram-path oram-ring oram-direct oram-curious oram-oblivistore'
for crate in $peers oram-partition; do
    edges=normal,dev
    if [ "$crate" = oram-curious ]; then edges=normal; fi
    deps=$(cargo tree -p "$crate" -e "$edges" --prefix none --format '{p}' | awk 'NR > 1 {print $1}' | sort -u)
    for other in $peers; do
        if [ "$other" != "$crate" ] && echo "$deps" | grep -qx "$other"; then
            echo "layering violation: engine $crate depends on engine $other" >&2
            status=1
        fi
    done
done
# The front-ends speak to the object layer only: no concrete engine, back-end or
# state database, and neither front-end depends on the other's protocol crates.
engines='^(oram-tree|oram-partition|oram-path|oram-ring|oram-curious|oram-oblivistore|oram-direct|oram-store-memory|oram-store-fs|oram-store-s3|oram-statedb)$'
for crate in oram-s3 oram-swift; do
    deps=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
    bad=$(echo "$deps" | grep -E "$engines" || true)
    # Nor do they name the engine or state contracts: errors reach them as the
    # object layer's classes.
    direct=$(cargo tree -p "$crate" -e normal --depth 1 --prefix none --format '{p}' | awk 'NR > 1 {print $1}')
    bad="$bad$(echo "$direct" | grep -E '^(oram-engine|oram-state|oram-ring)$' || true)"
    if [ "$crate" = oram-swift ]; then
        bad="$bad$(echo "$deps" | grep -E '^(s3s|aws-sdk-[a-z0-9-]+|aws-smithy-[a-z0-9-]+|oram-s3)$' || true)"
    fi
    if [ -n "$bad" ]; then
        echo "layering violation: front-end $crate depends on: $bad" >&2
        status=1
    fi
done
[ $status -eq 0 ] && echo "layering: engine, object layer, sealing, state and store crates are free of HTTP/S3 crates; no engine depends on another; front-ends use only the object layer"
exit $status
