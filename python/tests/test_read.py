"""Reading: every dtype, zero-copy views, lifetimes, tags, errors, Paddle-written data."""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import modelzip
from conftest import PADDLE_FIXTURES, cli_json, run_cli

RNG = np.random.default_rng(7)

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
]

SHAPES = [(), (5,), (3, 4), (2, 0), (0,), (2, 3, 4, 5)]


def sample(dtype, shape) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return RNG.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dt)
    return RNG.standard_normal(shape).astype(np.float32).astype(dt)


def owner(arr: np.ndarray):
    """The object at the end of an array's .base chain (through a memoryview)."""
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def write(path: Path, tag: str, params, **kw):
    return modelzip.save(path, tag, params, **kw)


def test_every_dtype_and_shape_round_trips_bit_for_bit(tmp):
    path = tmp / "m.zip"
    params = {
        f"{np.dtype(dt).name}/{len(shape)}d{i}": sample(dt, shape)
        for dt in DTYPES
        for i, shape in enumerate(SHAPES)
    }
    report = write(path, "all", params)
    assert report["params"] == len(params)
    with modelzip.open(path) as ar:
        t = ar["all"]
        assert t.keys() == list(params)
        for name, want in params.items():
            got = t[name]
            assert got.dtype == want.dtype, name
            assert got.shape == want.shape, name
            assert got.tobytes() == want.tobytes(), name


def test_big_endian_and_strided_inputs_are_stored_as_little_endian_row_major(tmp):
    path = tmp / "m.zip"
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    params = {
        "be": base.astype(">f8"),
        "strided": base[:, ::2],
        "fortran": np.asfortranarray(base),
        "list": [[1, 2], [3, 4]],
    }
    write(path, "t", params)
    with modelzip.open(path) as ar:
        t = ar["t"]
        assert t["be"].dtype == np.dtype("<f8")
        np.testing.assert_array_equal(t["be"], base)
        np.testing.assert_array_equal(t["strided"], base[:, ::2])
        np.testing.assert_array_equal(t["fortran"], base)
        np.testing.assert_array_equal(t["list"], np.array([[1, 2], [3, 4]]))


def test_stored_tensors_are_read_only_views_of_the_map(tmp):
    path = tmp / "m.zip"
    w = np.arange(1000, dtype=np.float32)
    write(path, "a", {"w": w, "b": np.ones(3, np.float32)})
    write(path, "b", {"w": w, "b": np.zeros(3, np.float32)})
    with modelzip.open(path) as ar:
        a, b = ar["a"]["w"], ar["b"]["w"]
        # no copy: not owning, read-only, backed by the native mapped buffer
        assert not a.flags.owndata and not a.flags.writeable
        assert type(owner(a)).__name__ == "TensorBuffer" and owner(a).mapped
        # stored 64-byte aligned in the file, so aligned in the map
        assert a.__array_interface__["data"][0] % 64 == 0
        # the two tags share one tensor file: one address
        assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        assert np.shares_memory(a, b)
        assert not np.shares_memory(ar["a"]["b"], ar["b"]["b"])
        with pytest.raises(ValueError):
            a[0] = 5


def test_arrays_stay_valid_after_close_and_after_the_archive_is_gone(tmp):
    path = tmp / "m.zip"
    w = RNG.standard_normal((256, 256)).astype(np.float32)
    write(path, "a", {"w": w})
    ar = modelzip.open(path)
    arr = ar["a"]["w"]
    tag = ar.latest()
    ar.close()
    assert ar.closed
    with pytest.raises(modelzip.ModelzipError, match="closed"):
        ar.tags  # noqa: B018
    del ar
    gc.collect()
    assert arr.tobytes() == w.tobytes()
    # a Tag keeps its own hold on the map too
    assert tag["w"].tobytes() == w.tobytes()
    path.unlink()  # even the file's name can go: the mapping holds the inode
    gc.collect()
    assert float(arr.sum()) == pytest.approx(float(w.sum()), rel=1e-5)


def far_params(n: int) -> dict:
    """`n` distinct tensors of 20 KB: their headers lie far apart in the file (each read
    with a `pread`, and read ahead after the first arrays of a tag)."""
    return {f"p{i}": np.full(5000, i, np.float32) for i in range(n)}


def test_a_large_tag_read_name_by_name_gives_each_tensor_in_any_order(tmp):
    path = tmp / "m.zip"
    params = far_params(300)
    write(path, "t", params)
    names = list(params)
    for order in (names, names[::-1], [str(n) for n in RNG.permutation(names)]):
        with modelzip.open(path) as ar:
            t = ar.latest()
            got = {n: t[n] for n in order}
            again = {n: t[n] for n in order}  # the header cache's views
        for n, want in params.items():
            assert got[n].tobytes() == want.tobytes(), n
            assert again[n].tobytes() == want.tobytes(), n
            assert got[n].ctypes.data == again[n].ctypes.data, n
            assert not got[n].flags.writeable


def test_a_bad_header_met_by_the_read_ahead_is_reported_by_its_own_array(tmp):
    path = tmp / "m.zip"
    params = far_params(300)
    write(path, "t", params)
    with modelzip.open(path) as ar:
        entry = ar.latest()._native.location_of("p299")[0]
    with zipfile.ZipFile(path) as z:
        at = z.getinfo(entry).header_offset
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", raw, at + 26)
    raw[at + 30 + name_len + extra_len] = 9  # the record's version: 9, not 0
    path.write_bytes(bytes(raw))
    with modelzip.open(path) as ar:
        t = ar.latest()
        for i in range(299):  # the read-ahead starts at the 16th, from p299 back
            assert t[f"p{i}"].tobytes() == params[f"p{i}"].tobytes()
        with pytest.raises(modelzip.ModelzipError, match=entry):
            t["p299"]


def test_a_tag_dropped_or_closed_while_its_headers_are_read_ahead_is_safe(tmp):
    path = tmp / "m.zip"
    params = far_params(400)
    write(path, "t", params)
    kept = []
    for k in range(20):
        ar = modelzip.open(path)
        t = ar.latest()
        kept += [(n, t[n]) for n in list(params)[: 16 + k]]  # the read-ahead starts
        if k % 2:
            ar.close()
        del t, ar
        gc.collect()
    for n, arr in kept:
        assert arr.tobytes() == params[n].tobytes()


def test_tags_are_case_insensitive_and_listed_oldest_first(tmp):
    path = tmp / "m.zip"
    for tag in ["FP32", "int8", "Step-10"]:
        write(path, tag, {"w": np.ones(2, np.float32)})
    with modelzip.open(path) as ar:
        assert ar.tags == ["FP32", "int8", "Step-10"]
        assert ar.default_tag == "Step-10"
        assert ar.latest().name == "Step-10"
        assert ar["fp32"].name == "FP32"
        assert ar.tag("INT8").name == "int8"
        assert "step-10" in ar and "nope" not in ar
        assert list(ar) == ar.tags and len(ar) == 3
    assert [t["name"] for t in cli_json("tags", path)["tags"]] == ["FP32", "int8", "Step-10"]


def test_an_archive_whose_last_tag_was_removed_has_no_default_tag(tmp):
    path = tmp / "m.zip"
    write(path, "only", {"w": np.ones(2, np.float32)})
    run_cli("rm", path, "only")  # allowed: the archive stays, with no tags
    with modelzip.open(path) as ar:
        assert ar.tags == [] and len(ar) == 0 and list(ar) == []
        assert ar.default_tag is None  # as the Rust Archive::default_tag
        with pytest.raises(modelzip.ModelzipError) as e:
            ar.latest()  # as the Rust Archive::latest
        assert e.value.kind == "invalid_input"
        assert "the archive has no tags" in str(e.value) and "m.zip" in str(e.value)
        assert ar.verify() == []
    assert cli_json("tags", path)["tags"] == []


WAIT_AND_REPORT = """
import sys, traceback, numpy, modelzip
print("waiting", flush=True)
try:
    CALL
except KeyboardInterrupt as e:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    print("interrupted in", frame.name, frame.filename, flush=True)
    sys.exit(3)
except modelzip.ModelzipError as e:
    print("error", e.kind, e, flush=True)
    sys.exit(4)
print("done", flush=True)
"""

WAITING_CALLS = {
    # waits up to a minute for the writer, then raises locked
    "open": ("modelzip.open(sys.argv[1])", "__init__"),
    # waits for the lock as long as it takes
    "save": ("modelzip.save(sys.argv[1], 'b', {'w': numpy.zeros(2)}, wait=True)", "save"),
    # these open the archive too, and wait up to a minute like `open`
    "checkpoints": ("modelzip.Checkpointer(sys.argv[1]).checkpoints()", "checkpoints"),
    "restore": ("modelzip.Checkpointer(sys.argv[1]).restore('a')", "restore"),
    "export_model": (
        "modelzip.export_model(sys.argv[1], 'a', sys.argv[1] + '.st', format='safetensors')",
        "export_model",
    ),
    "export_paddle": ("modelzip.export_paddle(sys.argv[1], 'a', sys.argv[1] + '.pd')", "export_paddle"),
}


@pytest.mark.parametrize("call", sorted(WAITING_CALLS))
def test_ctrl_c_interrupts_a_call_that_waits_for_a_writer(tmp, call):
    """While another process appends in place (a journal, the write lock held: here by
    this process, for as long as the test runs), `open` waits for the writer and
    `save(wait=True)` for the lock; Ctrl-C (SIGINT) ends either wait with
    KeyboardInterrupt, raised inside that call (not after the wait, not as an io error)."""
    code, frame = WAITING_CALLS[call]
    path = tmp / "m.zip"
    write(path, "a", {"w": np.ones(2, np.float32)})
    with open(f"{path}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (tmp / "m.zip.journal").write_bytes(b"an append in flight")
        child = subprocess.Popen(
            [sys.executable, "-c", WAIT_AND_REPORT.replace("CALL", code), str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C's default: a shell's background job (`cmd &` without job control,
            # as some CI runners start the suite) inherits SIGINT ignored, and a Python
            # started so never raises KeyboardInterrupt.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            assert child.stdout.readline() == "waiting\n"
            time.sleep(0.5)  # into the wait (checked below: where the interrupt lands)
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=120)  # a hang guard, far above the wait
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 3, (out, err)
    assert out.startswith(f"interrupted in {frame} "), out
    assert out.rstrip().endswith("modelzip/__init__.py"), out


def test_missing_tag_and_param_raise_key_errors_naming_them(tmp):
    path = tmp / "m.zip"
    write(path, "fp32", {"w": np.ones(2, np.float32)})
    with modelzip.open(path) as ar:
        with pytest.raises(KeyError) as e:
            ar["nope"]
        assert isinstance(e.value, modelzip.ModelzipError)
        assert e.value.kind == "tag_not_found"
        assert '"nope"' in str(e.value) and "m.zip" in str(e.value)
        t = ar["fp32"]
        with pytest.raises(modelzip.ModelzipKeyError) as e:
            t["missing.w"]
        assert e.value.kind == "param_not_found"
        assert '"missing.w"' in str(e.value) and '"fp32"' in str(e.value)
        with pytest.raises(KeyError):
            t.updater("w")
        with pytest.raises(KeyError):
            t.lod("missing.w")
        assert "missing.w" not in t and "w" in t and 3 not in t


def test_open_errors_say_what_and_where(tmp):
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.open(tmp / "absent.zip")
    assert e.value.kind == "io" and "absent.zip" in str(e.value)
    bad = tmp / "bad.zip"
    bad.write_bytes(b"PK\x05\x06" + b"\0" * 10)
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.open(bad)
    assert e.value.kind == "zip" and "bad.zip" in str(e.value)


def test_updater_metadata_and_order(tmp):
    path = tmp / "m.zip"
    params = {"z": np.ones(2, np.float32), "a": np.zeros(3, np.float64)}
    upd = {"z": [np.full(2, 1, np.float32), np.full(2, 2, np.float32)], "a": [np.ones(3)]}
    write(path, "t", params, updater=upd, metadata={"lr": 0.1, "note": "x"})
    with modelzip.open(path) as ar:
        t = ar["t"]
        assert t.keys() == ["z", "a"] and list(t) == ["z", "a"] and len(t) == 2
        assert t.updater_keys() == ["z", "a"]
        m, v = t.updater("z")
        np.testing.assert_array_equal(m, [1, 1])
        np.testing.assert_array_equal(v, [2, 2])
        assert t.metadata["lr"] == 0.1 and t.metadata["note"] == "x"
        assert "created" in t.metadata
        assert t.graph_encoding is None and t.graph_bytes() is None
        d = t.to_dict()
        assert list(d) == ["z", "a"]
        assert [k for k, _ in t.items()] == ["z", "a"]
        assert t.lod("z") == []


def test_deflated_entries_from_other_tools_are_inflated_into_owned_arrays(tmp):
    src = tmp / "m.zip"
    w = np.arange(64, dtype=np.float32)
    write(src, "t", {"w": w})
    # Python's zipfile rewrites every entry deflated, and drops metadata.json
    dst = tmp / "deflated.zip"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if not info.filename.endswith("metadata.json"):
                zout.writestr(info.filename, zin.read(info))
    with modelzip.open(dst) as ar:
        t = ar["t"]
        got = t["w"]
        np.testing.assert_array_equal(got, w)
        assert not owner(got).mapped and got.flags.writeable
        assert t.metadata == {}


@pytest.mark.parametrize(
    "method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"]
)
def test_arrays_are_what_numpy_makes_of_the_same_buffer(tmp, method):
    """`tag[name]` makes its arrays through numpy's C API: the same array as
    `np.ndarray(shape, dtype, buffer)` over the same bytes (dtype, shape, strides, data,
    flags, base), for every dtype numpy has, mapped and owned; a zipfile-written archive
    puts stored data at odd offsets, so some mapped arrays are not aligned."""
    src = tmp / "m.zip"
    params = {
        f"{np.dtype(dt).name}/{i}": sample(dt, shape)
        for dt in DTYPES
        for i, shape in enumerate(SHAPES)
    }
    write(src, "t", params)
    dst = tmp / "other.zip"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", method) as zout:
        for info in zin.infolist():
            if not info.filename.endswith("metadata.json"):
                zout.writestr(info.filename, zin.read(info))
    aligned = []
    with modelzip.open(dst) as ar:
        t = ar["t"]
        for name, want in params.items():
            got = t[name]
            buf, dtype, dims = t._native.get(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert got.tobytes() == want.tobytes(), name
            if want.size == 0 or got.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
                continue  # made by the package's _array, as before
            assert type(owner(got)).__name__ == "TensorBuffer", name
            assert owner(got).mapped == (method == zipfile.ZIP_STORED), name
            ref = np.ndarray(tuple(dims), got.dtype, buf)
            assert got.strides == ref.strides, name
            for flag in ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA", "WRITEABLE", "ALIGNED"):
                assert got.flags[flag] == ref.flags[flag], (name, flag)
            aligned.append(got.flags.aligned)
            if got.flags.writeable:
                got.flat[0] = got.flat[-1]  # owned bytes take writes
            else:
                with pytest.raises(ValueError):
                    got.flat[0] = got.flat[-1]
    if method == zipfile.ZIP_STORED:
        assert False in aligned and True in aligned  # both cases met


def test_graph_bytes_are_the_stored_entry(tmp):
    path = tmp / "m.zip"
    modelzip.import_paddle(
        path, "fp32", PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams"
    )
    with modelzip.open(path) as ar:
        t = ar["fp32"]
        assert t.graph_encoding == "programdesc"
        assert t.graph_bytes() == (PADDLE_FIXTURES / "mlp.pdmodel").read_bytes()
    run_cli("convert", path, "--tag", "fp32", "--to", "flatbuffers")
    with modelzip.open(path) as ar:
        t = ar["fp32"]
        assert t.graph_encoding == "flatbuffers"
        assert t.graph_bytes()[4:8] == b"MZGF"


def test_paddle_written_tensors_read_as_paddle_wrote_them(tmp):
    """Every file Paddle 3.3.1's save_dense_tensor wrote (17 dtypes, 0-D to 4-D, empty
    shapes, LoD of 1 and 2 levels), packed by the CLI, read through Python: dtype, dims,
    LoD and the SHA-256 of the data bytes equal Paddle's manifest."""
    manifest = json.loads((PADDLE_FIXTURES / "manifest.json").read_text())
    files = [f for f in manifest["files"] if f["path"].startswith("save_dense_tensor/")]
    assert len(files) >= 30
    path = tmp / "p.zip"
    run_cli("pack", path, PADDLE_FIXTURES / "save_dense_tensor", "--tag", "paddle")
    np_names = {"BF16": "bfloat16", "FP8_E4M3FN": "float8_e4m3fn", "FP8_E5M2": "float8_e5m2"}
    seen_lod = 0
    with modelzip.open(path) as ar:
        t = ar["paddle"]
        for f in files:
            rec = f["records"][0]
            name = f["path"].split("/", 1)[1]
            arr = t[name]
            assert list(arr.shape) == rec["dims"], name
            assert t.lod(name) == rec["lod"], name
            seen_lod += bool(rec["lod"])
            assert hashlib.sha256(arr.tobytes()).hexdigest() == rec["data_sha256"], name
            want = np_names.get(rec["dtype"])
            if want:
                assert arr.dtype == np.dtype(getattr(ml_dtypes, want)), name
            elif rec["dtype"] == "BOOL":
                assert arr.dtype == np.bool_
            else:
                assert arr.dtype.itemsize * 8 >= 8, name
    assert seen_lod >= 3


def test_bfloat16_without_ml_dtypes_says_to_install_it(tmp, monkeypatch):
    path = tmp / "m.zip"
    write(path, "t", {"bf": np.ones(4, ml_dtypes.bfloat16), "f": np.ones(4, np.float32)})
    monkeypatch.setattr(modelzip, "_ml_dtypes", lambda: None)  # as if not installed
    with modelzip.open(path) as ar:
        t = ar["t"]
        np.testing.assert_array_equal(t["f"], np.ones(4, np.float32))
        with pytest.raises(modelzip.ModelzipError) as e:
            t["bf"]
        assert "ml_dtypes" in str(e.value) and "BF16" in str(e.value)


def test_membership_is_ascii_case_insensitive_like_lookup(tmp):
    path = tmp / "m.zip"
    write(path, "k", {"w": np.ones(1)})
    with modelzip.open(path) as ar:
        assert "K" in ar and "k" in ar
        # the Kelvin sign lowers to "k" in Python, but is no tag: `in` agrees with []
        assert "\u212a" not in ar
        with pytest.raises(KeyError):
            ar["\u212a"]


def test_a_tag_is_a_read_only_mapping(tmp):
    """A Tag behaves as the read-only mapping its docs call it: get() with a default,
    values() and items() in params.txt order, isinstance(Mapping), dict(tag)."""
    from collections.abc import ItemsView, Mapping, ValuesView

    path = tmp / "m.zip"
    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7, 8], np.int64)
    write(path, "t", {"w": w, "b": b})
    with modelzip.open(path) as ar:
        t = ar["t"]
        assert isinstance(t, Mapping)
        np.testing.assert_array_equal(t.get("w"), w)
        assert t.get("missing") is None
        assert t.get("missing", 5) == 5
        assert [a.tolist() for a in t.values()] == [w.tolist(), b.tolist()]
        assert [n for n, _ in t.items()] == ["w", "b"]
        # Views, as a mapping's are: a length, and a second iteration gives them all
        # again (they were generators: len() raised, the second pass was empty).
        values, items = t.values(), t.items()
        assert len(values) == 2 and len(items) == 2
        assert [a.tolist() for a in values] == [a.tolist() for a in values]
        assert [n for n, _ in items] == [n for n, _ in items] == ["w", "b"]
        assert isinstance(values, ValuesView) and isinstance(items, ItemsView)
        d = dict(t)
        assert list(d) == ["w", "b"] and d["b"].tolist() == [7, 8]
        assert t == t and t != ar["t"]  # identity, not an elementwise array comparison


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"[1, 2]", "is a JSON list, not an object"),
        (b'"text"', "is a JSON str, not an object"),
        (b"{not json", "is not valid JSON"),
    ],
)
def test_metadata_that_is_not_a_json_object_raises_naming_the_entry(tmp, raw, says):
    """Another tool's archive (written here from FORMAT.md alone) with a metadata.json that
    is no JSON object: Tag.metadata raises ModelzipError naming the entry (it returned
    the list, or raised json's own error), and the tensors still read."""
    from spec_writer import SpecWriter

    path = tmp / "other.zip"
    w = SpecWriter(path)
    w.tensor("t", "params", 0, np.arange(3, dtype=np.float32))
    w.table("t", "params.txt", [("w", ["0"])])
    w.file("t", "metadata.json", raw)
    w.close(["t"])
    with modelzip.open(path) as ar:
        t = ar["t"]
        np.testing.assert_array_equal(t["w"], np.arange(3, dtype=np.float32))
        with pytest.raises(modelzip.ModelzipError) as e:
            t.metadata
        assert e.value.kind == "syntax"
        assert "t/metadata.json" in str(e.value) and says in str(e.value), str(e.value)


def test_names_sharing_a_deflated_tensor_get_equal_arrays_of_their_own(tmp):
    """A deflated tensor file (another tool wrote it) that 50 names share: to_dict() reads
    it once (docs/RELIABILITY.md, "Cost follows files") and hands each name its own
    writable copy, so writing to one name's array changes no other."""
    from spec_writer import SpecWriter, lodtensor

    arr = np.arange(1000, dtype=np.float32)
    w = SpecWriter(tmp / "d.zip")
    w.file("t", "params/0.lodtensor", lodtensor(arr)[0], deflate=True)
    w.table("t", "params.txt", [(f"p{i}", ["0"]) for i in range(50)])
    w.close(["t"])
    with modelzip.open(tmp / "d.zip") as ar:
        d = ar["t"].to_dict()
    assert list(d) == [f"p{i}" for i in range(50)]
    for a in d.values():
        np.testing.assert_array_equal(a, arr)
        assert a.flags.writeable
    assert not np.shares_memory(d["p0"], d["p1"])
    d["p0"][0] = 42
    assert d["p1"][0] == 0 and d["p49"][0] == 0


def test_an_empty_tensor_with_dims_numpy_cannot_hold_raises_size_overflow_naming_it(tmp):
    """FP32 [0, 2**62] holds no bytes, so the library accepts it, but numpy cannot describe
    such an array: every read raises ModelzipError (size_overflow) naming the tensor, not
    numpy's plain ValueError (docs/PYTHON.md: every hostile archive raises ModelzipError)."""
    import struct

    from spec_writer import NUMPY_TO_CODE, SpecWriter, _varint

    desc = b"\x08" + _varint(NUMPY_TO_CODE["float32"]) + b"\x10" + _varint(0) + b"\x10" + _varint(1 << 62)
    record = struct.pack("<IQ", 0, 0) + struct.pack("<Ii", 0, len(desc)) + desc  # no data
    w = SpecWriter(tmp / "huge.zip")
    w.record("t", "params", 0, record, len(record))
    w.record("t", "updater", 0, record, len(record))
    w.table("t", "params.txt", [("e", ["0"])])
    w.table("t", "updater.txt", [("e", ["0"])])
    w.close(["t"])
    with modelzip.open(tmp / "huge.zip") as ar:
        t = ar["t"]
        assert t.get_slice("e").get_shape() == [0, 1 << 62]  # the header alone reads
        reads = [
            (lambda: t["e"], 'parameter "e"'),
            (lambda: t.to_dict(), 'parameter "e"'),
            (lambda: list(t.values()), 'parameter "e"'),
            (lambda: t.updater("e"), 'updater state 0 of "e"'),
            (lambda: t.get_slice("e")[:], "slice of param 'e'"),
        ]
        for read, named in reads:
            with pytest.raises(modelzip.ModelzipValueError) as e:
                read()
            assert e.value.kind == "size_overflow", str(e.value)
            assert named in str(e.value) and "[0, 4611686018427387904]" in str(e.value), str(e.value)
