#!/usr/bin/env bash
# cairn from Python against plyvel (LevelDB), lmdb and rocksdict (RocksDB), and the cost
# of the binding against the Rust API (docs/benchmarks/python.md). Installs the peers
# (pinned, from PyPI) in a venv of their own with the release wheel of crates/cairn-py,
# builds the engine's keylist example, then runs crates/cairn-py/bench/peers.py with
# the arguments given (default: 1M records, 3 repetitions, in the current directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
venv=${CAIRN_PY_BENCH_VENV:-$target/py-bench-venv}
if ! "$venv/bin/python" -c 'import plyvel, lmdb, rocksdict, maturin' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 plyvel==1.5.1 \
    lmdb==3.0.0 rocksdict==0.3.29
fi
rm -f "$target"/wheels/cairn_store-*.whl
(cd "$root" && "$venv/bin/maturin" build --release --locked -q -m crates/cairn-py/Cargo.toml)
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$target"/wheels/cairn_store-*.whl
(cd "$root" && cargo build --release --locked -q -p cairn --example keylist)
"$venv/bin/python" "$root/crates/cairn-py/bench/peers.py" \
  --rust-bin "$target/release/examples/keylist" "$@"
