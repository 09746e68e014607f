#!/usr/bin/env bash
# Recreate the Paddle venvs (if missing) and regenerate + check the fixtures.
# Usage: bash tests/paddle/regen.sh        (from the repo root; needs PyPI access)
set -euo pipefail
cd "$(dirname "$0")/../.."
V=${VENVS:-/work/venvs}

if [ ! -x "$V/paddle3/bin/python" ]; then
  python3 -m venv "$V/paddle3"
  "$V/paddle3/bin/pip" install -q paddlepaddle==3.3.1 numpy==2.4.6
fi
if [ ! -x "$V/paddle26/bin/python" ]; then
  python3 -m venv "$V/paddle26"
  "$V/paddle26/bin/pip" install -q paddlepaddle==2.6.2 'numpy<2'
fi

for venv in paddle3 paddle26; do
  ver=$("$V/$venv/bin/python" -c 'import os; os.environ["FLAGS_enable_pir_api"]="0"; import paddle; print(paddle.__version__)' 2>/dev/null | tail -1)
  "$V/$venv/bin/python" tests/paddle/make_fixtures.py "tests/fixtures/paddle/$ver"
  python3 tests/paddle/check_layout.py "tests/fixtures/paddle/$ver"
done
