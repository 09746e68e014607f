"""The package's surface: the documented names exist, are documented, and the stubs
declare each of them."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import modelzip

PKG = Path(modelzip.__file__).parent


def test_every_public_name_is_exported_documented_and_in_the_stubs():
    stubs = ast.parse((PKG / "__init__.pyi").read_text())
    declared = {n.name for n in stubs.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {a.asname for n in stubs.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert (PKG / "py.typed").exists()
    for name in modelzip.__all__:
        obj = getattr(modelzip, name)
        assert inspect.getdoc(obj), f"{name} has no docstring"
        assert name in declared, f"{name} is not in __init__.pyi"
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if callable(member) or isinstance(member, property):
                    assert inspect.getdoc(member), f"{name}.{attr} has no docstring"


def test_documented_api_names():
    for name in [
        "open", "save", "Checkpointer", "import_paddle", "export_paddle", "ModelzipError",
    ]:
        assert hasattr(modelzip, name)
    for attr in ["tags", "default_tag", "tag", "latest", "close", "__enter__", "__getitem__"]:
        assert hasattr(modelzip.Archive, attr)
    for attr in [
        "name", "keys", "__len__", "__contains__", "__getitem__", "get_tensor", "lod",
        "updater_keys", "updater", "metadata", "graph_encoding", "graph_bytes", "to_dict",
    ]:
        assert hasattr(modelzip.Tag, attr)
    for attr in ["save", "save_async", "wait", "latest", "restore", "checkpoints"]:
        assert hasattr(modelzip.Checkpointer, attr)
    assert issubclass(modelzip.ModelzipKeyError, KeyError)
    assert issubclass(modelzip.ModelzipKeyError, modelzip.ModelzipError)


def test_stubs_match_the_runtime(tmp_path):
    # mypy's stubtest compares every stub signature, default, keyword-only marker and
    # name with the installed package (run outside the checkout so it imports that).
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "modelzip"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
