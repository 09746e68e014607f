"""Archive.extract / Tag.extract: the library's safe extraction (the code `modelzip
extract` runs), with the same files, limits, refusals and cleanup."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import modelzip
from conftest import HOSTILE, PADDLE_FIXTURES, cli_json, run_cli

MLP = (PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams")


def tree(root):
    """{relative path: bytes} of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def test_extract_writes_what_the_cli_writes_and_pack_reads_it_back(tmp):
    path = tmp / "m.zip"
    modelzip.import_paddle(path, "fp32", *MLP)
    with modelzip.open(path) as ar:
        r = ar.extract(None, tmp / "py" / "out")
        assert r["tag"] == "fp32" and r["graph_file"] == "__model__"
        assert r["paths"][0] == "__model__" and r["paths"][1:] == ar["fp32"].keys()
        assert r["files"] == len(r["paths"]) and r["links"] == 0 and r["bytes"] > 0
        # Tag.extract is the same call
        r2 = ar["FP32"].extract(tmp / "tag-out")
        assert r2["paths"] == r["paths"]
    run_cli("extract", path, "--out", tmp / "cli")
    assert tree(tmp / "py" / "out") == tree(tmp / "cli") == tree(tmp / "tag-out")
    assert sum(len(b) for b in tree(tmp / "cli").values()) == r["bytes"]
    # `pack` reads the directory back as the same tag: every tensor shared
    run_cli("pack", path, tmp / "py" / "out", "--tag", "again")
    d = cli_json("diff", path, "fp32", "again")
    assert d["changed"] == d["added"] == d["removed"] == [], d


def test_unsafe_names_are_refused_and_nothing_is_written(tmp):
    for name in ("extract-param-dotdot.zip", "extract-param-absolute.zip", "extract-param-nul.zip"):
        src = tmp / name
        shutil.copy(HOSTILE / name, src)
        out = tmp / ("out-" + name)
        with modelzip.open(src) as ar:
            with pytest.raises(ValueError) as e:
                ar.extract(None, out)
        assert isinstance(e.value, modelzip.ModelzipError)
        assert "refusing to extract parameter" in str(e.value), str(e.value)
        assert not out.exists()  # not even the directory
    shutil.copy(HOSTILE / "extract-param-collides-with-graph.zip", tmp / "c.zip")
    with modelzip.open(tmp / "c.zip") as ar, pytest.raises(ValueError) as e:
        ar.extract(None, tmp / "c")
    assert "collides with another file" in str(e.value)


def test_limits_are_checked_before_anything_is_written(tmp):
    path = tmp / "m.zip"
    w = np.ones((64, 64), np.float32)
    modelzip.save(path, "t", {f"p{i}": w for i in range(20)})
    with modelzip.open(path) as ar:
        with pytest.raises(ValueError) as e:
            ar.extract("t", tmp / "a", max_files=5)
        assert e.value.kind == "limit_exceeded" and "max_files=" in str(e.value), str(e.value)
        with pytest.raises(ValueError) as e:
            ar.extract("t", tmp / "b", max_output=1000)
        assert e.value.kind == "limit_exceeded" and "max_output=" in str(e.value), str(e.value)
        assert not (tmp / "a").exists() and not (tmp / "b").exists()
        with pytest.raises(ValueError):
            ar.extract("t", tmp / "c", max_files=-1)
        r = ar.extract("t", tmp / "ok", max_files=20)
        assert r["files"] == 20


def test_existing_files_need_force_and_link_makes_hard_links(tmp):
    path = tmp / "m.zip"
    w = np.arange(16, dtype=np.float32)
    modelzip.save(path, "t", {"a": w, "b": w, "c": w})  # one tensor file, three names
    with modelzip.open(path) as ar:
        ar.extract("t", tmp / "out")
        before = tree(tmp / "out")
        with pytest.raises(FileExistsError) as e:
            ar.extract("t", tmp / "out")
        assert e.value.kind == "io" and "force=True" in str(e.value), str(e.value)
        assert tree(tmp / "out") == before
        r = ar.extract("t", tmp / "out", force=True, link=True)
        assert r["links"] == 2 and r["files"] == 3
    inodes = {os.stat(tmp / "out" / n).st_ino for n in "abc"}
    assert len(inodes) == 1
    assert tree(tmp / "out") == before


def test_a_failed_extract_removes_what_it_wrote(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "t", {"a": np.ones(4, np.float32), "z/b": np.ones(4, np.float32)})
    out = tmp / "new" / "out"
    out.mkdir(parents=True)
    (out / "z").write_bytes(b"in the way")  # the directory z/ cannot be made
    with modelzip.open(path) as ar, pytest.raises(ValueError) as e:
        ar.extract("t", out)
    assert "not a directory is in the way" in str(e.value), str(e.value)
    assert sorted(os.listdir(out)) == ["z"] and (out / "z").read_bytes() == b"in the way"
