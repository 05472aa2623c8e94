#!/usr/bin/env bash
# User-space instructions (valgrind --tool=callgrind) of three fixed workloads, the
# deterministic yardstick for changes that must not cost speed:
#   file put      a 16 MiB file streamed into a fresh store (`cairn file put`)
#   fs-bench lib  20,000 creates, stats and unlinks in one directory (`cairn fs-bench`)
#   quickbench    100,000 puts and gets of 1 KiB values on 2 threads (examples/quickbench)
# Usage: scripts/instructions.sh [CAIRN_BINARY] [QUICKBENCH_BINARY]
# (defaults: target/release/cairn and target/release/examples/quickbench; build them
# with `cargo build --release -p cairn-cli -p cairn --example quickbench`).
set -euo pipefail
cairn=$(realpath "${1:-target/release/cairn}")
quick=$(realpath "${2:-target/release/examples/quickbench}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c $((16 << 20)) /dev/urandom >"$work/input"
total() { # total instructions of every callgrind output file of one workload
  callgrind_annotate "$@" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); s += $1} END {printf "%.0f\n", s}'
}
run() { # NAME COMMAND...: run under callgrind, print the instruction total
  local name=$1
  shift
  rm -rf "$work/db" "$work"/callgrind.*
  valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p" "$@" >/dev/null 2>"$work/$name.err" ||
    { cat "$work/$name.err" >&2; exit 1; }
  printf '%-14s %15s\n' "$name" "$(total "$work"/callgrind.*)"
}
run file-put "$cairn" --db "$work/db" file put --key k "$work/input"
run fs-bench-lib "$cairn" fs-bench --files 20000 --targets lib --dir "$work/db"
(cd "$work" && run quickbench "$quick" 100000 1024 2)
