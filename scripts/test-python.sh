#!/usr/bin/env bash
# The Python package's tests (scripts/test.sh runs this): builds the wheel of
# crates/cairn-py with maturin (release), installs it in the venv scripts/setup.sh made, and
# runs its pytest suite. The interoperability tests use the release `cairn` tool, which
# `cargo test --workspace --release` builds.
set -euo pipefail
cd "$(dirname "$0")/.."
# Absolute paths: the tests run from their own folder below.
venv=$(realpath -m "${CAIRN_PY_VENV:-${CARGO_TARGET_DIR:-target}/py-venv}")
wheels=$(realpath -m "${CARGO_TARGET_DIR:-target}/wheels")
rm -f "$wheels"/cairn_store-*.whl
"$venv/bin/maturin" build --release --locked -q -m crates/cairn-py/Cargo.toml
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$wheels"/cairn_store-*.whl
# From the tests' folder, so `import cairn` is the installed wheel.
cd crates/cairn-py/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" .
