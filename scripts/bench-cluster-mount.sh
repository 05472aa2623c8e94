#!/usr/bin/env bash
# Creates, stats and 4 KiB reads through a cluster mount, one process, as tools do: two
# `cairn serve` (TLS, --sync $SYNC, default always) on loopback, `cairn mount --cluster`,
# then N files of 4 KiB created, stat-ed and read back (the kernel caches dropped before
# each of the last two; needs root). Prints "LABEL create/s C stat/s S read4k/s R".
# Usage: scripts/bench-cluster-mount.sh CAIRN_BINARY LABEL N   (interleave two binaries
# in a loop to compare them, as docs/benchmarks/cluster.md does).
set -eu
BIN=$1; LABEL=$2; N=$3
W=$(mktemp -d /tmp/cairn-mount-bench.XXXX)
P0=$((20000 + RANDOM % 20000)); P1=$((P0+1))
$BIN cluster init-certs $W/certs --servers 2 --base 127.0.0.1:$P0 --clients 1 >/dev/null
$BIN serve --dir $W/s0 --listen 127.0.0.1:$P0 --cluster $W/certs/cluster.toml --sync ${SYNC:-always} >$W/s0.log 2>&1 &
S0=$!
$BIN serve --dir $W/s1 --listen 127.0.0.1:$P1 --cluster $W/certs/cluster.toml --sync ${SYNC:-always} >$W/s1.log 2>&1 &
S1=$!
sleep 1.5
mkdir $W/mnt
$BIN mount --foreground --cluster $W/certs/cluster.toml $W/mnt >$W/m.log 2>&1 &
M=$!
for i in $(seq 50); do mountpoint -q $W/mnt && break; sleep 0.1; done
python3 - "$W/mnt" "$N" "$LABEL" <<'PY'
import os, sys, time
mp, n, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
d = os.path.join(mp, "d"); os.mkdir(d)
data = b"x" * 4096
t = time.perf_counter()
for i in range(n):
    with open(f"{d}/f{i}", "wb") as f: f.write(data)
c = n / (time.perf_counter() - t)
def drop():
    os.sync(); open("/proc/sys/vm/drop_caches", "w").write("3\n")
drop(); t = time.perf_counter()
for i in range(n): os.stat(f"{d}/f{i}")
s = n / (time.perf_counter() - t)
drop(); t = time.perf_counter()
for i in range(n):
    with open(f"{d}/f{i}", "rb") as f: assert len(f.read()) == 4096
r = n / (time.perf_counter() - t)
print(f"{label} create/s {c:.0f} stat/s {s:.0f} read4k/s {r:.0f}")
PY
$BIN umount $W/mnt || fusermount3 -u $W/mnt || true
wait $M 2>/dev/null || true
kill $S0 $S1; wait $S0 $S1 2>/dev/null || true
rm -rf $W
