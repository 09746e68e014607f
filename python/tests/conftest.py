"""Shared fixtures: the repository, the `modelzip` binary, a scratch directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PADDLE_FIXTURES = REPO / "tests" / "fixtures" / "paddle" / "3.3.1"
HOSTILE = REPO / "tests" / "hostile"


def cli_path() -> Path:
    """The CLI binary: $MODELZIP_BIN, else target/debug/modelzip (built by `cargo test`)."""
    env = os.environ.get("MODELZIP_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "modelzip"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it with `cargo build` or set MODELZIP_BIN")
    return path


def run_cli(*args: object, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(cli_path()), *map(str, args)], capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"modelzip {args} exited {proc.returncode}: {proc.stderr}")
    return proc


def cli_json(*args: object):
    return json.loads(run_cli(*args, "--json").stdout)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
