"""Every hostile archive of tests/hostile/ through Python: the error expected.json gives
(as ModelzipError with its kind, and a ValueError), never an interpreter crash."""

from __future__ import annotations

import json
import re
import shutil

import pytest

import modelzip
from conftest import HOSTILE

ROWS = sorted(json.loads((HOSTILE / "expected.json").read_text()).items())


def snake(kind: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", kind).lower()


def read_everything(ar: modelzip.Archive, tags) -> None:
    for name in tags:
        t = ar[name]
        t.graph_bytes()
        t.metadata  # noqa: B018
        seen = set()
        for key in t.keys():
            t[key]
            seen.add(key)
        for key in t.updater_keys():
            t.updater(key)


def test_there_are_hostile_files():
    assert len(ROWS) >= 60


@pytest.mark.parametrize(("file", "row"), ROWS, ids=[f for f, _ in ROWS])
def test_hostile_archive(tmp, file, row):
    path = tmp / file
    shutil.copy(HOSTILE / file, path)
    for suffix in row.get("extra_files", []):
        shutil.copy(HOSTILE / f"{file}{suffix}", tmp / f"{file}{suffix}")
    command = row["command"].split()[0]
    exit_code = row["exit"]
    kind = row.get("kind")
    want = row.get("error_contains")

    def outcome():
        with modelzip.open(path) as ar:
            if command == "verify":
                return [m for _, m in ar.verify()]
            read_everything(ar, ar.tags if command == "tags" else [ar.latest().name])
            return []

    if exit_code == 2 and kind:
        with pytest.raises(modelzip.ModelzipError) as e:
            outcome()
        assert e.value.kind == snake(kind), str(e.value)
        assert want in str(e.value)
        # a malformed archive is also what Python code catches as bad data
        assert isinstance(e.value, ValueError), type(e.value).__mro__
    elif exit_code == 1:
        problems = outcome()
        assert any(want in p for p in problems), problems
    else:
        # accepted by the library (extract-only refusals, recovered journals)
        outcome()
