"""modelzip's safetensors exports read by the safetensors package itself.

`cargo test` (tests/it/safetensors_interop.rs) keeps its exports under
$MODELZIP_ST_EXPORT_DIR (./test.sh sets it); tests/safetensors/check_export.py then
compares each with its original through `safetensors.numpy.load_file` / `safe_open`
(names, dtypes, shapes, values bit for bit, __metadata__), and a Paddle-imported tag's
export with `modelzip show` / `cat`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, cli_path

EXPORTS = os.environ.get("MODELZIP_ST_EXPORT_DIR")
CHECK = REPO / "tests" / "safetensors" / "check_export.py"

pytestmark = pytest.mark.skipif(
    not EXPORTS and os.environ.get("MODELZIP_REQUIRE_PADDLE") != "1",
    reason="MODELZIP_ST_EXPORT_DIR is not set (./test.sh sets it and runs cargo test first)",
)


def check(*args: object) -> str:
    proc = subprocess.run(
        [sys.executable, str(CHECK), *map(str, args)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_every_export_equals_its_original():
    exports = Path(EXPORTS or "")
    assert exports.is_dir(), f"{exports} is missing: run cargo test with MODELZIP_ST_EXPORT_DIR"
    out = check("--dirs", REPO / "tests" / "fixtures" / "safetensors", exports)
    assert "all equal" in out and out.count("\nOK  ") >= 9, out


def test_a_paddle_tag_export_equals_what_the_cli_shows():
    paddle = Path(EXPORTS or "") / "paddle"
    assert (paddle / "mlp.zip").is_file(), f"{paddle} has no mlp.zip"
    out = check("--cat", cli_path(), paddle / "mlp.zip", "fp32", paddle / "mlp.safetensors")
    assert "\nOK  " in out and "compared with modelzip cat" in out, out
