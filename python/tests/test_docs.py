"""The examples of docs/PYTHON.md, README.md and python/README.md that run on their own do
run, and print what the docs say they print."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re

import numpy as np

import modelzip
from conftest import REPO


def python_blocks(doc: str, section: str | None = None) -> list[str]:
    text = (REPO / doc).read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.S)


def run_block(code: str, cwd) -> tuple[dict, str]:
    scope: dict = {"modelzip": modelzip}  # imported by the guide's first example
    out = io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<doc>", "exec"), scope)  # noqa: S102 - our own docs
    finally:
        os.chdir(old)
    return scope, out.getvalue()


def test_saving_example_runs_and_reports_what_it_says(tmp):
    [code] = python_blocks("docs/PYTHON.md", "Saving")
    scope, _ = run_block(code, tmp)
    # the "# {...}" line under the call is the report it returns
    want = ast.literal_eval(re.search(r"^# (\{.*\})$", code, re.M).group(1))
    got = scope["report"]
    assert set(got) == set(want)
    assert {k: got[k] for k in ("tag", "params", "shared")} == {
        k: want[k] for k in ("tag", "params", "shared")
    }
    # own_bytes: the tensors (3 x 256 KiB + 1 KiB) plus headers and tables
    assert abs(got["own_bytes"] - want["own_bytes"]) <= 64, (got, want)
    with modelzip.open(tmp / "model.zip") as ar:
        t = ar["step-10"]
        assert t.updater_keys() == ["fc.w"] and t.metadata["lr"] == 1e-3


def test_errors_example_prints_the_kind_and_message_shown(tmp):
    modelzip.save(tmp / "model.zip", "fp32", {"w": np.ones(1)})
    modelzip.save(tmp / "model.zip", "int8", {"w": np.ones(1, np.int8)})
    [code] = python_blocks("docs/PYTHON.md", "Errors")
    _, out = run_block(code, tmp)
    shown = re.search(r"# (tag_not_found .*)$", code, re.M).group(1)
    assert out.strip() == shown


def test_repository_readme_python_example_runs(tmp):
    [code] = python_blocks("README.md", "Python")
    scope, _ = run_block(code, tmp)
    assert scope["resumed"].step == 100 and scope["resumed"].metrics == {"loss": 0.3}
    assert np.array_equal(scope["resumed"].params["fc.w"], np.ones((4, 4)))


def test_package_readme_example_runs(tmp):
    [code] = python_blocks("python/README.md")
    scope, _ = run_block(code, tmp)
    assert scope["w"].shape == (4, 4) and not scope["w"].flags.writeable
