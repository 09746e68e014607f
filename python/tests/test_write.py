"""Writing: create and append, dedup, atomicity, locks, the GIL, CLI interop."""

from __future__ import annotations

import fcntl
import os
import threading
import time
import zipfile

import numpy as np
import pytest

import modelzip
from conftest import cli_json, run_cli

RNG = np.random.default_rng(11)


def test_save_creates_then_appends_and_stores_identical_tensors_once(tmp):
    path = tmp / "m.zip"
    w = RNG.standard_normal((256, 256)).astype(np.float32)
    b = np.zeros(256, np.float32)
    r1 = modelzip.save(path, "step-1", {"fc.w": w, "fc.b": b})
    assert r1 == {"tag": "step-1", "params": 2, "shared": 0, "own_bytes": r1["own_bytes"]}
    assert r1["own_bytes"] > w.nbytes
    r2 = modelzip.save(path, "step-2", {"fc.w": w, "fc.b": b + 1})
    assert r2["tag"] == "step-2" and r2["params"] == 2 and r2["shared"] == 1
    assert r2["own_bytes"] < 4096  # only fc.b's 1 KiB and the tag's tables
    r3 = modelzip.save(path, "step-3", {"fc.w": w, "fc.b": b + 1})
    assert r3["shared"] == 2 and r3["own_bytes"] < 1500
    with modelzip.open(path) as ar:
        assert ar.tags == ["step-1", "step-2", "step-3"]
        np.testing.assert_array_equal(ar["step-3"]["fc.b"], b + 1)
    assert run_cli("verify", path).returncode == 0


def test_an_existing_tag_any_case_is_refused_and_the_archive_is_unchanged(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "fp32", {"w": np.ones(2, np.float32)})
    before = path.read_bytes()
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(path, "FP32", {"w": np.zeros(2, np.float32)})
    assert e.value.kind == "tag_exists" and '"fp32"' in str(e.value)
    assert path.read_bytes() == before


def test_bad_input_is_refused_before_anything_is_written(tmp):
    path = tmp / "m.zip"
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(path, "t", {"w": np.array(["a", "b"])})
    assert e.value.kind == "invalid_input" and "'w'" in str(e.value)
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(path, "bad/name", {"w": np.ones(1)})
    assert e.value.kind == "invalid_tag_name"
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(path, "t", {"w": np.ones(1)}, updater={"w": np.ones(1)})
    assert "sequence of arrays" in str(e.value)
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(path, "t", {"": np.ones(1)})
    assert "empty" in str(e.value)
    # nothing left behind: no archive, no temp file
    assert sorted(p.name for p in tmp.iterdir() if not p.name.endswith(".lock")) == []


def test_a_failed_append_leaves_the_archive_as_it_was(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "a", {"w": np.ones(8, np.float32)})
    before = path.read_bytes()
    with pytest.raises(modelzip.ModelzipError):
        # the second param fails after the first was written into the append
        modelzip.save(path, "b", {"x": np.ones(8, np.float32), "": np.ones(1)})
    assert path.read_bytes() == before
    assert not os.path.exists(f"{path}.journal")
    with modelzip.open(path) as ar:
        assert ar.tags == ["a"]


def test_a_second_writer_gets_locked_or_waits(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "a", {"w": np.ones(2, np.float32)})
    lock = open(f"{path}.lock", "a+b")  # noqa: SIM115 - held across the test
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with pytest.raises(modelzip.ModelzipError) as e:
            modelzip.save(path, "b", {"w": np.zeros(2, np.float32)})
        assert e.value.kind == "locked"
        assert "locked by another process" in str(e.value)
        result = {}

        def waiter():
            result["report"] = modelzip.save(path, "c", {"w": np.zeros(2)}, wait=True)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "wait=True returned while the lock was held"
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    t.join(30)
    assert result["report"]["tag"] == "c"


def test_the_gil_is_released_while_saving(tmp):
    """Another Python thread runs during the native part of a save: it logs times that
    fall inside the middle half of the save call (impossible if the GIL were held)."""
    path = tmp / "m.zip"
    params = {f"w{i}": RNG.standard_normal(4 << 20).astype(np.float32) for i in range(8)}
    stamps = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    modelzip.save(path, "big", params)
    t1 = time.perf_counter()
    stop.set()
    t.join()
    lo, hi = t0 + 0.25 * (t1 - t0), t0 + 0.75 * (t1 - t0)
    inside = [s for s in stamps if lo < s < hi]
    assert len(inside) >= 3, (t1 - t0, len(stamps))


def test_appending_while_arrays_are_alive_keeps_them_valid(tmp):
    path = tmp / "m.zip"
    w = RNG.standard_normal(100_000).astype(np.float32)
    modelzip.save(path, "a", {"w": w})
    ar = modelzip.open(path)
    arr = ar["a"]["w"]
    for i in range(5):  # in-place appends, each rewriting the central directory
        modelzip.save(path, f"s{i}", {"w": w + i + 1, "v": np.full(1000, i, np.float32)})
    assert arr.tobytes() == w.tobytes()
    assert ar.tags == ["a"]  # the open archive keeps its snapshot
    with modelzip.open(path) as fresh:
        assert fresh.tags == ["a", "s0", "s1", "s2", "s3", "s4"]
        np.testing.assert_array_equal(fresh["s4"]["w"], w + 4 + 1)
    ar.close()
    assert arr.tobytes() == w.tobytes()


def test_python_archives_are_read_by_the_cli_and_other_zip_readers(tmp):
    path = tmp / "py.zip"
    w = RNG.standard_normal((3, 5)).astype(np.float32)
    modelzip.save(path, "t", {"fc.w": w, "step": np.array(7, np.int64)}, metadata={"k": 1})
    assert run_cli("verify", path).returncode == 0
    shown = cli_json("show", path, "--tag", "t")
    assert [p["name"] for p in shown["params"]] == ["fc.w", "step"]
    assert shown["params"][0]["dims"] == [3, 5] and shown["params"][1]["dims"] == []
    raw = run_cli_bytes("cat", path, "fc.w", "--tag", "t", "--raw")
    assert raw == w.tobytes()
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None


def run_cli_bytes(*args) -> bytes:
    import subprocess

    from conftest import cli_path

    return subprocess.run([str(cli_path()), *map(str, args)], capture_output=True, check=True).stdout


def test_cli_archives_are_read_by_python_and_the_bytes_match(tmp):
    """A tag saved from Python, extracted and packed again by the CLI, stores the same
    tensor bytes; Python reads the CLI's archive with identical values."""
    path = tmp / "py.zip"
    params = {"a.w": RNG.standard_normal((4, 4)), "b.b": np.arange(6, dtype=np.int32)}
    modelzip.save(path, "t", params)
    out = tmp / "dir"
    run_cli("extract", path, "--tag", "t", "--out", out)
    packed = tmp / "cli.zip"
    run_cli("pack", packed, out, "--tag", "t")
    with zipfile.ZipFile(path) as zp, zipfile.ZipFile(packed) as zc:
        py_tensors = {n: zp.read(n) for n in zp.namelist() if n.endswith(".lodtensor")}
        cli_tensors = {n: zc.read(n) for n in zc.namelist() if n.endswith(".lodtensor")}
    assert sorted(py_tensors.values()) == sorted(cli_tensors.values())
    with modelzip.open(packed) as ar:
        for name, want in params.items():
            np.testing.assert_array_equal(ar["t"][name], want)


def test_graph_round_trips_through_save(tmp):
    src = tmp / "src.zip"
    from conftest import PADDLE_FIXTURES

    modelzip.import_paddle(src, "fp32", PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams")
    with modelzip.open(src) as ar:
        t = ar["fp32"]
        graph, params = t.graph_bytes(), t.to_dict()
    dst = tmp / "dst.zip"
    modelzip.save(dst, "copy", params, graph=graph)
    with modelzip.open(dst) as ar:
        assert ar["copy"].graph_encoding == "programdesc"
        assert ar["copy"].graph_bytes() == graph
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(dst, "bad", params, graph=b"not a program")
    assert e.value.kind == "graph"


def test_archive_verify_reports_problems(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "t", {"w": np.arange(64, dtype=np.float32)})
    with modelzip.open(path) as ar:
        assert ar.verify() == []
    data = bytearray(path.read_bytes())
    i = data.find(np.arange(64, dtype=np.float32).tobytes())
    data[i + 8] ^= 0xFF  # flip a byte of the stored tensor
    path.write_bytes(bytes(data))
    with modelzip.open(path) as ar:
        problems = ar.verify()
    assert problems and any("CRC-32" in m for _, m in problems)


def test_metadata_that_is_not_json_is_refused_clearly_and_numpy_scalars_are_numbers(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "a", {"w": np.ones(2, np.float32)})
    before = path.read_bytes()
    for bad in [{"loss": float("nan")}, {"loss": np.float32("inf")}, {"x": object()}]:
        with pytest.raises(modelzip.ModelzipError) as e:
            modelzip.save(path, "b", {"w": np.ones(2)}, metadata=bad)
        assert e.value.kind == "invalid_input" and "metadata" in str(e.value), e.value
    assert "NaN" in str(
        pytest.raises(modelzip.ModelzipError, modelzip.save, path, "b", {}, metadata={"l": np.nan})
        .value
    )
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.save(path, "b", {"w": np.ones(2)}, metadata=[("lr", 1)])
    assert "mapping" in str(e.value)
    assert path.read_bytes() == before
    # a training loop's numbers are numpy scalars: stored as JSON numbers and lists
    meta = {"loss": np.float32(0.5), "step": np.int64(7), "hist": np.arange(3)}
    modelzip.save(path, "b", {"w": np.ones(2)}, metadata=meta)
    with modelzip.open(path) as ar:
        got = ar["b"].metadata
    assert (got["loss"], got["step"], got["hist"]) == (0.5, 7, [0, 1, 2])


def test_an_exception_while_the_arrays_are_read_leaves_the_archive_as_it_was(tmp):
    class Interrupted:  # as if Ctrl-C arrived while np.asarray converted this param
        def __array__(self, *args, **kwargs):
            raise KeyboardInterrupt

    path = tmp / "m.zip"
    with pytest.raises(KeyboardInterrupt):
        modelzip.save(path, "a", {"w": np.ones(1000), "x": Interrupted()})
    assert not path.exists()
    modelzip.save(path, "a", {"w": np.ones(2, np.float32)})
    before = path.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        modelzip.save(path, "b", {"w": np.ones(1000), "x": Interrupted()})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp.iterdir()) == ["m.zip", "m.zip.lock"]
