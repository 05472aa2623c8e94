#!/bin/bash
# Large-file I/O as a user runs it, each cairn path next to the kernel's own on the same
# disk, interleaved, ROUNDS times (default 3); the page cache is dropped before every
# cold read and every write:
#   - 1 GiB read cold and warm through `cairn mount` (dd bs=1M) vs `dd` from a fresh
#     loop-mounted ext4 image (journal on, default options);
#   - 1 GiB `cairn file get` cold and warm vs `dd iflag=direct` of the same bytes;
#   - 512 MiB `cairn file put` into a new store (the whole process, its durable close
#     included) vs `dd oflag=direct` of the same file.
# Needs root (drop_caches, the loop mount) and fusermount3. Usage:
#   cargo build --release -p cairn-cli
#   sudo scripts/bench-disk-path.sh [WORKDIR] [ROUNDS]
# WORKDIR (default /tmp/cairn-disk-path) must be on the disk to measure; it needs ~6 GiB.
set -euo pipefail
B=${CAIRN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/cairn}
W=${1:-/tmp/cairn-disk-path}
ROUNDS=${2:-3}
[ "$(id -u)" = 0 ] || { echo "run as root (drop_caches, loop mount)" >&2; exit 2; }
[ -x "$B" ] || { echo "build first: cargo build --release -p cairn-cli" >&2; exit 2; }
cleanup() {
  mountpoint -q "$W/mnt" && { fusermount3 -u "$W/mnt" || umount -l "$W/mnt"; }
  mountpoint -q "$W/ext" && umount "$W/ext"
  rm -rf "$W"
}
trap cleanup EXIT
rm -rf "$W"; mkdir -p "$W/mnt" "$W/ext"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# mb BYTES SECONDS
mb() { echo "$1 / $2 / 1000000" | bc -l | xargs printf '%.0f'; }
# timed CMD...: runs it, prints the seconds it took
timed() { local s e; s=$(date +%s.%N); "$@" > /dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
mount_cairn() {
  "$B" mount --foreground "$W/db-fs" "$W/mnt" 2>> "$W/mount.log" & MP=$!
  for _ in $(seq 100); do mountpoint -q "$W/mnt" && return; sleep 0.1; done
  echo "the mount did not come up" >&2; exit 1
}
umount_cairn() { fusermount3 -u "$W/mnt" || umount "$W/mnt"; wait "$MP" || true; }

GIB=$((1 << 30)); HALF=$((512 << 20))
dd if=/dev/urandom of="$W/src" bs=1M count=1024 status=none
dd if="$W/src" of="$W/src-half" bs=1M count=512 status=none
mount_cairn; dd if="$W/src" of="$W/mnt/big" bs=1M status=none conv=fsync; umount_cairn
truncate -s 3G "$W/ext.img"; mkfs.ext4 -q -F "$W/ext.img"; mount -o loop "$W/ext.img" "$W/ext"
cp "$W/src" "$W/ext/big"; sync
"$B" file put --db "$W/db-files" --key big "$W/src" > /dev/null

echo "| round | mount cold | ext4 cold | mount warm | file get cold | dd iflag=direct | file get warm | file put 512 MiB | dd oflag=direct |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  mount_cairn; drop
  mc=$(timed dd if="$W/mnt/big" of=/dev/null bs=1M status=none)
  mw=$(timed dd if="$W/mnt/big" of=/dev/null bs=1M status=none)
  umount_cairn; drop
  ec=$(timed dd if="$W/ext/big" of=/dev/null bs=1M status=none)
  drop
  gc=$(timed "$B" file get --db "$W/db-files" big)
  gw=$(timed "$B" file get --db "$W/db-files" big)
  drop
  dr=$(timed dd if="$W/src" of=/dev/null bs=1M iflag=direct status=none)
  rm -rf "$W/db-put"; drop
  pt=$(timed "$B" file put --db "$W/db-put" --key k "$W/src-half")
  rm -f "$W/out"; drop
  dw=$(timed dd if="$W/src-half" of="$W/out" bs=1M oflag=direct status=none)
  rm -f "$W/out"
  echo "| $r | $(mb $GIB "$mc") | $(mb $GIB "$ec") | $(mb $GIB "$mw") | $(mb $GIB "$gc") | $(mb $GIB "$dr") | $(mb $GIB "$gw") | $(mb $HALF "$pt") | $(mb $HALF "$dw") |"
done
echo
echo "MB/s (10^6 bytes per second); cairn: $("$B" --version 2>/dev/null || echo "$B")"
