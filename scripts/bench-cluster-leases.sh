#!/bin/bash
# The cluster mount with and without leases: three `cairn serve --lease-time L` on
# loopback (TLS, --sync always), two `cairn mount --cluster`, and
# scripts/cluster-leases-work.py. Results: docs/benchmarks/cluster-mount.md.
# usage: scripts/bench-cluster-leases.sh [LEASE_TIMES (default "5 0")] [ROUNDS (default 2)]
# Needs root or fusermount3, and a release build (cargo build --release -p cairn-cli).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
B=${CAIRN:-$here/target/release/cairn}
work=$(mktemp -d /tmp/cairn-leases.XXXXXX)
for round in $(seq 1 "${2:-2}"); do
  for L in ${1:-5 0}; do
    W=$work/$L-$round; mkdir -p "$W/ma" "$W/mb"; cd "$W"
    "$B" cluster init-certs certs --servers 3 --clients 1 >/dev/null
    for i in 0 1 2; do sed -i "s/127.0.0.1:710$i/127.0.0.1:$((7200 + i))/" certs/cluster.toml; done
    pids=()
    for p in 7200 7201 7202; do
      "$B" serve --dir "srv$p" --listen "127.0.0.1:$p" --cluster certs/cluster.toml --lease-time "$L" 2>"s$p.log" &
      pids+=($!)
    done
    sleep 2
    "$B" mount --cluster certs/cluster.toml ma 2>ma.log
    "$B" mount --cluster certs/cluster.toml mb 2>mb.log
    echo "== lease-time $L round $round (load $(cut -d' ' -f1-3 /proc/loadavg))"
    python3 "$here/scripts/cluster-leases-work.py" ma mb "${N:-8000}" || true
    "$B" umount ma; "$B" umount mb
    kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  done
done
rm -rf "$work"
