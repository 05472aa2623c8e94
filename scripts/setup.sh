#!/usr/bin/env bash
# Installs what building and testing cairn needs on a fresh Debian machine with rustup.
# Idempotent and quick when everything is already there.
set -euo pipefail
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
# mdbook for the book in docs/ (scripts/check-docs.sh builds it): once, from crates.io.
if ! command -v mdbook >/dev/null 2>&1; then
  echo "setup: installing mdbook (cargo install mdbook --locked; once, a few minutes)" >&2
  cargo install mdbook --locked --version '^0.5' --quiet
fi
# fuse3 (fusermount3) and rsync for the mounted file-system tests (`cairn mount`). As root,
# the mount works without fuse3 (mount(2) directly); without apt or permission this step
# only warns: the mounted tests then skip where FUSE can't be used, and their rsync part
# where rsync is missing, and scripts/test.sh lists what was skipped at its end.
fs_missing=()
command -v fusermount3 >/dev/null 2>&1 || fs_missing+=(fuse3)
command -v rsync >/dev/null 2>&1 || fs_missing+=(rsync)
if ((${#fs_missing[@]})) && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo -n"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends "${fs_missing[@]}"; } >/dev/null 2>&1 \
    || echo "setup: could not install ${fs_missing[*]} (some mounted tests may skip)" >&2
fi
# A Python venv for the Python package's tests (scripts/test-python.sh): maturin builds the
# wheel of crates/cairn-py, pytest runs its tests. Pinned; from PyPI, once.
venv=${CAIRN_PY_VENV:-${CARGO_TARGET_DIR:-target}/py-venv}
if ! "$venv/bin/python" -c 'import pytest, maturin' >/dev/null 2>&1 \
    || ! "$venv/bin/maturin" --version 2>/dev/null | grep -q '1\.16\.0'; then
  echo "setup: making the Python venv $venv (maturin, pytest)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 pytest==9.2.0
fi
