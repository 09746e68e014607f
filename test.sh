#!/usr/bin/env bash
# The test command: every suite, Rust and Python, on a fresh clone.
#
#   1. cargo test                        (the Rust library, CLI, crash and hostile suites)
#   2. a venv under target/venv with python/requirements-test.txt (numpy, ml_dtypes,
#      pytest, paddlepaddle, safetensors, moto[server]), and the Python package installed from
#      ./python the way a user installs it (`pip install ./python`: maturin is fetched
#      as the PEP 517 build backend)
#   3. pytest python/tests               (pytest's "no tests ran", exit 5, fails too;
#      the S3 tests start moto_server on 127.0.0.1 themselves and stop it, the Azure
#      tests Azurite (installed with npm into target/azurite); the browser
#      tests of `modelzip view` start it on 127.0.0.1 and drive Debian's chromium, which
#      is installed here with apt-get when missing, through Playwright)
#
#   4. TensorFlow runs every TensorFlow export: tests/tf/run_exported.py in its own venv
#      target/venv-tf (tests/tf/requirements.txt: tensorflow-cpu, kept apart from
#      Paddle's protobuf), or in $MODELZIP_TF_PYTHON when that names a python that has
#      TensorFlow already
#   5. ONNX Runtime runs every ONNX export: tests/onnx/run_exported.py in its own venv
#      target/venv-onnx (tests/onnx/requirements.txt: onnx, onnxruntime), or in
#      $MODELZIP_ONNX_PYTHON when that names a python that has them already; it also
#      runs the INT8 exports cargo test left in target/onnx-exports
#
# Environment: MODELZIP_VENV overrides the venv's location, MODELZIP_TF_VENV the TF one's,
# MODELZIP_ONNX_VENV the ONNX one's.
set -euo pipefail
cd "$(dirname "$0")"

echo "== cargo test" >&2
# The safetensors suite keeps its exports here for python/tests/test_safetensors_export.py.
export MODELZIP_ST_EXPORT_DIR="$PWD/target/st-exports"
rm -rf "$MODELZIP_ST_EXPORT_DIR"
# The ONNX quantize suite keeps its INT8 exports here for tests/onnx/run_exported.py.
export MODELZIP_ONNX_EXPORT_DIR="$PWD/target/onnx-exports"
rm -rf "$MODELZIP_ONNX_EXPORT_DIR"
cargo test

echo "== Python venv" >&2
VENV="${MODELZIP_VENV:-target/venv}"
if ! [ -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
"${PIP[@]}" install -r python/requirements-test.txt

echo "== pip install ./python" >&2
"${PIP[@]}" install --force-reinstall --no-deps ./python

echo "== Azurite for the Azure tests (python/tests/test_remote_azure.py)" >&2
# Microsoft's Azure Storage emulator, from the npm registry into target/azurite (Node.js
# and npm from Debian when the machine has none).
AZURITE_VERSION=3.37.0
if ! [ -x target/azurite/node_modules/.bin/azurite-blob ] \
  || ! grep -q "\"version\": \"$AZURITE_VERSION\"" target/azurite/node_modules/azurite/package.json 2>/dev/null; then
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nodejs npm
  fi
  mkdir -p target/azurite
  npm install --prefix target/azurite --no-audit --no-fund --silent "azurite@$AZURITE_VERSION"
fi

echo "== chromium for the browser tests (python/tests/test_view.py)" >&2
# Playwright drives the distribution's chromium (no browser download); as root on a fresh
# machine, install it when it is missing.
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium
fi
# The browser tests fail instead of skipping when chromium or playwright is missing.
export MODELZIP_REQUIRE_BROWSER=1

echo "== pytest python/tests" >&2
# The CLI the interop tests compare with: the debug build `cargo test` made.
export MODELZIP_BIN="$PWD/target/debug/modelzip"
# Paddle and the safetensors exports are required here (tests skip them elsewhere).
export MODELZIP_REQUIRE_PADDLE=1
"$VENV/bin/python" -m pytest python/tests -q -p no:cacheprovider

echo "== TensorFlow runs the exports (tests/tf/run_exported.py)" >&2
TF_PYTHON="${MODELZIP_TF_PYTHON:-}"
if [ -z "$TF_PYTHON" ]; then
  TF_VENV="${MODELZIP_TF_VENV:-target/venv-tf}"
  if ! [ -x "$TF_VENV/bin/python" ]; then
    python3 -m venv "$TF_VENV"
  fi
  "$TF_VENV/bin/python" -m pip --disable-pip-version-check --quiet install -r tests/tf/requirements.txt
  TF_PYTHON="$TF_VENV/bin/python"
fi
MODELZIP="$PWD/target/debug/modelzip" TF_CPP_MIN_LOG_LEVEL=2 "$TF_PYTHON" tests/tf/run_exported.py

echo "== ONNX Runtime runs the exports (tests/onnx/run_exported.py)" >&2
ONNX_PYTHON="${MODELZIP_ONNX_PYTHON:-}"
if [ -z "$ONNX_PYTHON" ]; then
  ONNX_VENV="${MODELZIP_ONNX_VENV:-target/venv-onnx}"
  if ! [ -x "$ONNX_VENV/bin/python" ]; then
    python3 -m venv "$ONNX_VENV"
  fi
  "$ONNX_VENV/bin/python" -m pip --disable-pip-version-check --quiet install -r tests/onnx/requirements.txt
  ONNX_PYTHON="$ONNX_VENV/bin/python"
fi
MODELZIP="$PWD/target/debug/modelzip" "$ONNX_PYTHON" tests/onnx/run_exported.py
