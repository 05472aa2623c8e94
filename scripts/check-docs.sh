#!/usr/bin/env bash
# Checks the documentation (CI runs it after clippy, before scripts/test.sh):
#   - README.md stays a manual: at most 300 lines;
#   - every link of README.md, DESIGN.md, FORMAT.md and docs/ resolves inside the
#     repository (scripts/check-links.py; http(s) URLs are not fetched);
#   - the book builds: `mdbook build docs` (scripts/setup.sh installs mdbook), with no
#     warning or error, and its pages link only to pages of the book;
#   - the API documentation builds without a warning:
#     RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps.
# The README's Rust examples are compiled and run by `cargo test` (cairn-bench's
# doctests include README.md), which scripts/test.sh runs.
set -euo pipefail
cd "$(dirname "$0")/.."

lines=$(wc -l <README.md)
if ((lines > 300)); then
  echo "check-docs: README.md has $lines lines; keep it at most 300 (details go to docs/)" >&2
  exit 1
fi
echo "check-docs: README.md has $lines lines (at most 300)"

python3 scripts/check-links.py

if ! command -v mdbook >/dev/null 2>&1; then
  echo "check-docs: mdbook not found; scripts/setup.sh installs it (cargo install mdbook --locked)" >&2
  exit 1
fi
book=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$book" "$log"' EXIT
if ! mdbook build docs -d "$book" >"$log" 2>&1; then
  cat "$log" >&2
  echo "check-docs: mdbook build docs failed" >&2
  exit 1
fi
if grep -E '\b(WARN|ERROR)\b' "$log" >&2; then
  echo "check-docs: mdbook build docs warned (above)" >&2
  exit 1
fi
python3 scripts/check-links.py --book "$book"
echo "check-docs: mdbook build docs: $(find "$book" -name '*.html' | wc -l) pages"

RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "check-docs: cargo doc --workspace --no-deps: no warnings"
