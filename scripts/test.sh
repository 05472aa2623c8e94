#!/usr/bin/env bash
# Runs every test of the workspace (the README's test command; .ci/run runs it too).
# Installs what the tests need first, so a fresh machine passes from this script alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --release --locked
