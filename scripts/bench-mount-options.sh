#!/usr/bin/env bash
# What two of `cairn mount`'s kernel-cache options change, timed through the mount as a
# user starts it (background mode, FUSE over io_uring where the kernel offers it),
# each workload on a fresh store, the two settings of each pair interleaved, ROUNDS
# rounds:
#   - absent names: 100 passes of stat(2) over 1,000 names that do not exist (as a
#     search path or .gitignore probes do), negative entries kept (the local default)
#     against `negative_timeout=0`;
#   - small writes: dd of 10 MB in 100-byte writes, then `tar x` of 5,000 files of
#     4 KiB, each written through (the default) against `writeback_cache`.
# Usage (as root): scripts/bench-mount-options.sh CAIRN_BINARY [ROUNDS]
set -euo pipefail
B=$(realpath "$1"); ROUNDS=${2:-3}
W=$(mktemp -d /tmp/cairn-mount-options.XXXX)
trap 'umount "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/mnt" "$W/src"
for i in $(seq 5000); do head -c 4096 /dev/urandom > "$W/src/f$i"; done
tar cf "$W/src.tar" -C "$W/src" .
rm -rf "$W/src"

# mounted OPTIONS: a fresh store on $W/mnt with -o OPTIONS (may be empty).
mounted() {
  rm -rf "$W/store"
  "$B" mount --log "$W/mount.log" ${1:+-o "$1"} "$W/store" "$W/mnt"
}
unmounted() {
  umount "$W/mnt"
  while pgrep -f -- "$W/mnt --foreground" >/dev/null; do sleep 0.05; done
}
# secs CMD...: the seconds CMD takes.
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc -l | xargs printf '%.3f'; }

absent() {
  python3 - "$W/mnt" <<'EOF'
import os, sys
d = sys.argv[1]
names = [os.path.join(d, "absent%d" % i) for i in range(1000)]
for _ in range(100):
    for n in names:
        try:
            os.stat(n)
        except FileNotFoundError:
            pass
EOF
}
small_writes() { dd if=/dev/zero of="$W/mnt/f" bs=100 count=100000 status=none; }
untar() { mkdir "$W/mnt/t" && tar xf "$W/src.tar" -C "$W/mnt/t"; }

echo "| round | absent names, cached | absent names, negative_timeout=0 | dd 100 B × 100,000 | same, writeback_cache | tar x 5,000 × 4 KiB | same, writeback_cache |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  mounted ""; a1=$(secs absent); unmounted
  mounted "negative_timeout=0"; a2=$(secs absent); unmounted
  mounted ""; w1=$(secs small_writes); t1=$(secs untar); unmounted
  mounted "writeback_cache"; w2=$(secs small_writes); t2=$(secs untar); unmounted
  echo "| $r | $a1 | $a2 | $w1 | $w2 | $t1 | $t2 |"
done
