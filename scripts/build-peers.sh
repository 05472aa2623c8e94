#!/usr/bin/env bash
# Builds `cairn` with the benchmark peers (`--features peers`) into its own target
# directory, so that the workspace's own builds and tests never compile them.
#   scripts/build-peers.sh                    RocksDB from Debian's librocksdb (7.8; that
#                                             build has assertions on), target/peers
#   scripts/build-peers.sh --release-rocksdb  RocksDB 7.9.2 compiled from the rocksdb
#                                             crate's bundled sources with NDEBUG in
#                                             release mode (about 12 min on 2 cores, once),
#                                             target/peers-release
# Then: target/peers[-release]/release/cairn bench ...   (the report names the build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/target/peers
if [[ ${1:-} == --release-rocksdb ]]; then
  # bindgen (librocksdb-sys' bindings) needs libclang; say so now, not after minutes of
  # compiling. LIBCLANG_PATH, when set, is where bindgen looks.
  if [[ -z ${LIBCLANG_PATH:-} ]] && ! compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null \
      && ! compgen -G "/usr/lib/*/libclang*.so*" >/dev/null; then
    echo "build-peers: libclang not found (bindgen needs it): run scripts/install-bench-deps.sh" >&2
    exit 1
  fi
  export ROCKSDB_COMPILE=1
  dir=$root/target/peers-release
fi
CARGO_TARGET_DIR=$dir cargo build --release --locked -p cairn-cli --features peers \
  --manifest-path "$root/Cargo.toml"
echo "built $dir/release/cairn"
