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
#   scripts/build-peers.sh --passthrough-hp   libfuse's example/passthrough_hp, the FUSE
#                                             passthrough of `cairn fs-bench --targets
#                                             passthrough_hp`, built in release mode from
#                                             Debian's fuse3 source package (unstable's:
#                                             3.18 or later, the first with FUSE over
#                                             io_uring), linked statically, installed as
#                                             $PREFIX/bin/passthrough_hp (PREFIX
#                                             default /usr/local); about 2 min, once
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${1:-} == --passthrough-hp ]]; then
  prefix=${PREFIX:-/usr/local}
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  # meson and ninja build libfuse; liburing and libnuma give it FUSE over io_uring.
  need=()
  for p in meson ninja-build pkgconf g++ liburing-dev libnuma-dev dpkg-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if ((${#need[@]})); then
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
  fi
  work=$root/target/peers/libfuse
  rm -rf "$work"
  mkdir -p "$work/lists/partial"
  # The source package from unstable, through a list of our own: the system's apt
  # sources stay as they are.
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" \
    >"$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only fuse3)
  tar -xzf "$work"/fuse3_*.orig.tar.gz -C "$work"
  src=$(find "$work" -maxdepth 1 -type d -name 'fuse-3.*' | head -n1)
  version=${src##*/fuse-}
  case $version in
    3.1[8-9]*|3.[2-9][0-9]*) ;;
    *) echo "build-peers: libfuse $version has no FUSE over io_uring (3.18 or later needed)" >&2
       exit 1 ;;
  esac
  meson setup "$work/build" "$src" --buildtype=release -Ddefault_library=static \
    -Dutils=false -Dtests=false -Dexamples=true -Denable-io-uring=true
  grep -q "HAVE_URING" "$work/build/fuse_config.h" \
    || { echo "build-peers: libfuse was configured without io_uring" >&2; exit 1; }
  ninja -C "$work/build" example/passthrough_hp
  $SUDO install -D -m 0755 "$work/build/example/passthrough_hp" "$prefix/bin/passthrough_hp"
  echo "built libfuse $version's passthrough_hp: $prefix/bin/passthrough_hp"
  exit 0
fi
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
