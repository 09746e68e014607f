#!/usr/bin/env bash
# Renders the library's public API (default features) and fails (exit 1, with a diff)
# when it differs from the committed listing docs/public-api.txt, so that every change to
# the surface shows in review and an unintended one fails CI. With --write, replaces the
# listing instead (commit the diff with the change that caused it).
#
# How: rustdoc's JSON output (unstable; RUSTC_BOOTSTRAP=1 lets the stable toolchain write
# it) rendered by the `public-api` crate in scripts/public-api/, pinned to the release that
# reads the JSON format version of the toolchain in use (0.52.1: format 57, Rust 1.95).
set -euo pipefail
cd "$(dirname "$0")/.."

LISTING=docs/public-api.txt
target="${CARGO_TARGET_DIR:-target}"

RUSTC_BOOTSTRAP=1 cargo rustdoc --lib --quiet -- -Z unstable-options --output-format json
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
{
  cat <<'HEADER'
# The public API of the modelzip library with its default features: one item a line, as
# the public-api crate renders rustdoc's JSON (blanket, auto-trait and derived impls left
# out). Generated and checked by scripts/check-public-api.sh (run by .ci/run): after an
# intended change, run `scripts/check-public-api.sh --write` and commit this file with it.
# The shape (what is at the root, which modules stay public) is described in src/lib.rs.
# No type of a dependency appears here except half's f16 and bf16, the element types of
# FP16 / BF16 tensors (`impl Element for half::...`).
HEADER
  cargo run --quiet -p modelzip-public-api -- "$target/doc/modelzip.json"
} >"$tmp"

if [ "${1:-}" = "--write" ]; then
  cp "$tmp" "$LISTING"
  echo "wrote $LISTING"
  exit 0
fi
if ! diff -u "$LISTING" "$tmp"; then
  echo "error: the public API differs from $LISTING (above: - committed, + now)." >&2
  echo "If the change is intended, run scripts/check-public-api.sh --write and commit it." >&2
  exit 1
fi
echo "public API matches $LISTING"
