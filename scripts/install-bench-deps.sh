#!/usr/bin/env bash
# Installs the Debian packages that `cairn bench` with its peers needs
# (`cargo run --release -p cairn-cli --features peers -- bench ...`):
#   librocksdb-dev   RocksDB 7.8 (the `rocksdb` crate 0.20 links it instead of building C++)
#   libleveldb-dev   LevelDB 1.23 (linked through its C API, leveldb/c.h)
#   libsnappy-dev liblz4-dev libzstd-dev libbz2-dev zlib1g-dev   RocksDB's link dependencies
#   libclang-dev clang   bindgen, which generates librocksdb-sys' bindings at build time
#   fio              the disk's own bandwidth and fsync latency (else a built-in measurement)
#   linux-perf       optional, for profiling a benchmark child (`perf record -g -p PID`)
#   xfsprogs btrfs-progs   `cairn fs-bench --targets xfs,btrfs` (fresh loop-mounted images)
#   bindfs           `cairn fs-bench --targets bindfs` (a FUSE passthrough over a fresh ext4)
# LMDB (heed), sled, fjall and redb are pure crates and need nothing from Debian.
# Idempotent: packages already installed are left as they are.
set -euo pipefail
pkgs=(librocksdb-dev libleveldb-dev libsnappy-dev liblz4-dev libzstd-dev libbz2-dev zlib1g-dev
      libclang-dev clang fio xfsprogs btrfs-progs bindfs)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "bench dependencies installed; run:"
echo "  cargo run --release -p cairn-cli --features peers -- bench --quick"
