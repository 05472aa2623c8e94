#!/usr/bin/env bash
# Installs what building and testing cairn needs on a fresh Debian machine with rustup.
# Idempotent and quick when everything is already there.
set -euo pipefail
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
