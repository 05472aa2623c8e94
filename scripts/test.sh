#!/usr/bin/env bash
# Runs every test of the workspace (the README's test command; .ci/run runs it too).
# Installs what the tests need first, so a fresh machine passes from this script alone.
# Parts of tests that can't run on this machine (no FUSE, a missing tool) pass after
# reporting themselves; they are listed at the end. CAIRN_TEST_NO_SKIP=1 makes them fail.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
skips=$(mktemp)
list_skips() {
  if [[ -s $skips ]]; then
    echo "skipped on this machine:"
    sort -u "$skips" | sed 's/^/  /'
  fi
  rm -f "$skips"
}
# The tests that mount run twice: through FUSE over io_uring (the kernel's switch is
# turned on for the run where it exists and may be written, as root; set back at the end)
# and through /dev/fuse reads (`cairn mount --transport classic`, which every mount of
# these tests is given under CAIRN_TEST_FUSE_TRANSPORT): a local store's mounts (mount,
# mount_crash, mount_helper: `mount -t cairn`, fstab, options) and a cluster's (`cairn
# mount --cluster`, cluster). fs_bench mounts both
# transports itself (its fuse and fuse-classic targets).
switch=/sys/module/fuse/parameters/enable_uring
was=""
if [[ -w $switch ]]; then
  was=$(cat "$switch")
  echo Y >"$switch"
fi
finish() {
  if [[ -n $was ]]; then echo "$was" >"$switch"; fi
  list_skips
}
trap finish EXIT
CAIRN_TEST_SKIPS=$skips cargo test --workspace --release --locked
# The dependencies carried with a fix of ours: their own unit tests (third_party/README.md).
cargo test --locked --manifest-path third_party/openraft/Cargo.toml --target-dir target/third_party --lib
CAIRN_TEST_SKIPS=$skips CAIRN_TEST_FUSE_TRANSPORT=classic \
  cargo test --release --locked -p cairn-cli --test mount --test mount_crash --test mount_helper \
  --test cluster
# The Python package: its wheel built and installed in a venv, then its pytest suite.
scripts/test-python.sh
