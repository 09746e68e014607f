"""Paddle in and out through Python: byte-identical round trips, variants, errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modelzip
from conftest import PADDLE_FIXTURES, cli_json

MLP = (PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams")


def test_import_then_export_is_byte_identical(tmp):
    path = tmp / "m.zip"
    r = modelzip.import_paddle(path, "fp32", *MLP)
    assert r["tag"] == "fp32" and r["created"] is True and r["params"]
    assert r["graph_bytes"] == MLP[0].stat().st_size
    # a failed export removes the directories it made for the prefix
    with pytest.raises(KeyError):
        modelzip.export_paddle(path, "nope", tmp / "a" / "b" / "mlp")
    assert not (tmp / "a").exists()
    out = modelzip.export_paddle(path, "FP32", tmp / "out" / "mlp")
    assert out["tag"] == "fp32"
    assert (tmp / "out" / "mlp.pdmodel").read_bytes() == MLP[0].read_bytes()
    assert (tmp / "out" / "mlp.pdiparams").read_bytes() == MLP[1].read_bytes()
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.export_paddle(path, None, tmp / "out" / "mlp")
    assert "exists" in str(e.value)
    modelzip.export_paddle(path, None, tmp / "out" / "mlp", overwrite=True)


def test_persistables_dir_and_second_import_shares_everything(tmp):
    path = tmp / "m.zip"
    modelzip.import_paddle(path, "a", dir=PADDLE_FIXTURES / "mlp_persistables")
    r = modelzip.import_paddle(path, "b", dir=PADDLE_FIXTURES / "mlp_persistables")
    assert r["created"] is False
    assert r["shared"] == len(r["params"]) > 0
    with modelzip.open(path) as ar:
        for name in ar["a"].keys():
            assert np.shares_memory(ar["a"][name], ar["b"][name])


@pytest.mark.parametrize("program", ["3.3.1/mlp.pdmodel", "pir/mlp.json"])
def test_a_directory_holding_one_inference_model_imports_as_that_model(tmp, program):
    """What paddle.jit.save / save_inference_model("DIR/model") leave: DIR/model.pdmodel
    (or Paddle 3's PIR model.json) + DIR/model.pdiparams. Given the directory, both
    import_model and import_paddle(dir=) import that model, as the files would be."""
    model = PADDLE_FIXTURES.parent / program
    params = model.with_suffix(".pdiparams")
    d = tmp / "saved"
    d.mkdir()
    ext = model.suffix
    (d / f"model{ext}").write_bytes(model.read_bytes())
    (d / "model.pdiparams").write_bytes(params.read_bytes())
    path = tmp / "m.zip"
    files = modelzip.import_model(path, "files", model, params)
    whole = modelzip.import_model(path, "dir", d)
    by_dir = modelzip.import_paddle(path, "dir2", dir=d)
    assert whole["format"] == "paddle"
    assert [p["name"] for p in whole["params"]] == [p["name"] for p in files["params"]]
    assert whole["shared"] == by_dir["shared"] == len(files["params"])
    with modelzip.open(path) as ar:
        assert ar["dir"].graph_bytes() == ar["files"].graph_bytes()
    # a second program in the directory is ambiguous: refused, naming both
    (d / f"other{ext}").write_bytes(model.read_bytes())
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.import_model(path, "again", d)
    assert f"model{ext}" in str(e.value) and f"other{ext}" in str(e.value), str(e.value)


def test_quantize_and_cast_make_variants_the_cli_lists(tmp):
    path = tmp / "m.zip"
    modelzip.import_paddle(path, "fp32", *MLP)
    q = modelzip.quantize(path, "fp32", "int8")
    assert q["tag"] == "int8" and q["source_tag"] == "fp32"
    assert any(p["dtype"] == "INT8" for p in q["params"])
    c = modelzip.cast(path, "fp32", "fp16", "FP16")
    assert all(p["dtype"] in ("FP16", "INT64", "INT32") for p in c["params"])
    assert [t["name"] for t in cli_json("tags", path)["tags"]] == ["fp32", "int8", "fp16"]
    with modelzip.open(path) as ar:
        assert ar["fp16"].metadata["cast"]
    # Each parameter's change as the CLI's --json names it (it was Rust's Debug text,
    # "Cast { from: Fp32 }").
    def changes(report):
        keep = ("name", "change", "axis", "scale", "of", "from")
        return [{k: p[k] for k in keep if k in p} for p in report["params"]]

    cli_q = cli_json("quantize", path, "--from", "fp32", "--tag", "int8b", "--per-channel")
    assert changes(q) == changes(cli_q)
    cli_c = cli_json("cast", path, "--from", "fp32", "--tag", "fp16b", "--dtype", "fp16")
    assert changes(c) == changes(cli_c)
    assert {p["change"] for p in q["params"]} == {"quantized", "scale", "unchanged"}
    fp16 = [p for p in c["params"] if p["dtype"] == "FP16"]
    assert fp16 and all(p["change"] == "cast" and p["from"] == "FP32" for p in fp16)


def test_import_errors_name_the_file(tmp):
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.import_paddle(tmp / "m.zip", "t", tmp / "absent.pdmodel", MLP[1])
    assert e.value.kind == "io" and "absent.pdmodel" in str(e.value)
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.import_paddle(tmp / "m.zip", "t", MLP[1], MLP[1])
    assert "mlp.pdiparams" in str(e.value)
    with pytest.raises(modelzip.ModelzipError):
        modelzip.import_paddle(tmp / "m.zip", "t")
    # arguments that cannot go together say so
    with pytest.raises(modelzip.ModelzipValueError, match="dir= and params= cannot be combined"):
        modelzip.import_paddle(tmp / "m.zip", "t", params=MLP[1], dir=tmp)
    with pytest.raises(modelzip.ModelzipValueError, match="params= needs model="):
        modelzip.import_paddle(tmp / "m.zip", "t", params=MLP[1])
    assert not (tmp / "m.zip").exists()


def test_export_model_refuses_a_shard_size_that_is_not_a_whole_number(tmp):
    """max_shard_bytes is a u64: a float is refused, not truncated, and a negative or
    too large one is named (they were pyo3's TypeError and OverflowError)."""
    path = tmp / "m.zip"
    modelzip.import_paddle(path, "t", *MLP)
    (tmp / "shards").mkdir()
    for size, says in [
        (4096.0, "max_shard_bytes=4096.0 is invalid: it must be an integer >= 0, not a float"),
        (-1, "max_shard_bytes=-1 is invalid: it must be an integer >= 0"),
        (1 << 64, "max_shard_bytes=18446744073709551616 is invalid: it must be below 2**64"),
    ]:
        with pytest.raises(modelzip.ModelzipValueError) as e:
            modelzip.export_model(path, "t", tmp / "shards", format="safetensors", max_shard_bytes=size)
        assert e.value.kind == "invalid_input" and says in str(e.value), str(e.value)
    assert list((tmp / "shards").iterdir()) == []


def test_every_format_goes_in_and_out_through_import_model(tmp):
    """safetensors, TensorFlow (GraphDef and SavedModel) and ONNX fixtures through modelzip.import_model /
    export_model: detected, stored, and written back equal to the original bytes (or
    message); the arrays read through Python equal the files' own values."""
    from conftest import REPO

    fx = REPO / "tests" / "fixtures"
    path = tmp / "m.zip"
    st = fx / "safetensors" / "finetune" / "base.safetensors"
    r = modelzip.import_model(path, "st", st)
    assert r["format"] == "safetensors" and r["created"]
    out = modelzip.export_model(path, "st", tmp / "st.safetensors")
    assert out["format"] == "safetensors"
    assert (tmp / "st.safetensors").read_bytes() == st.read_bytes()
    # A sharded checkpoint cut to a shard size: the shards, then the index, with sizes.
    (tmp / "shards").mkdir()
    out = modelzip.export_model(path, "st", tmp / "shards", max_shard_bytes=4096)
    files = [Path(p) for p, _ in out["files"]]
    n = len(files) - 1
    assert n > 1 and files[-1] == tmp / "shards" / "model.safetensors.index.json", out
    assert files[:-1] == [tmp / "shards" / f"model-{i:05}-of-{n:05}.safetensors" for i in range(1, n + 1)]
    assert all(Path(p).stat().st_size == size for p, size in out["files"])
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.export_model(path, "st", tmp / "st2.safetensors", max_shard_bytes=4096)
    assert "no existing directory" in str(e.value) and not (tmp / "st2.safetensors").exists()
    r = modelzip.import_model(path, "tf", fx / "tf" / "mlp.pb")
    assert r["format"] == "tf" and r["graph"] == "graph.fb"
    modelzip.export_model(path, "tf", tmp / "mlp.pbtxt")
    assert (tmp / "mlp.pbtxt").read_text().lstrip().startswith("node")
    sm = fx / "tf" / "saved_model" / "mlp"
    r = modelzip.import_model(path, "sm", sm)
    assert r["format"] == "tf" and r["graph"] is None and len(r["params"]) == 6
    modelzip.export_model(path, "sm", tmp / "sm")
    for kept in ("saved_model.pb", "fingerprint.pb"):
        assert (tmp / "sm" / kept).read_bytes() == (sm / kept).read_bytes()
    onnx = sorted((fx / "onnx").glob("*.onnx"))[0]
    r = modelzip.import_model(path, "onnx", onnx)
    assert r["format"] == "onnx"
    modelzip.export_model(path, "onnx", tmp / "back.onnx")
    assert (tmp / "back.onnx").stat().st_size > 0
    r = modelzip.import_model(path, "pd", *MLP, format="paddle")
    assert r["format"] == "paddle"
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.import_model(path, "x", tmp / "st.safetensors", format="caffe")
    assert "unknown format" in str(e.value)
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.export_model(path, "st", tmp / "x.pb", format="tf")
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.export_model(path, "tf", tmp / "y.pb", max_shard_bytes=4096)
    assert "is for safetensors exports" in str(e.value) and not (tmp / "y.pb").exists()
    with modelzip.open(path) as ar:
        assert ar.tags == ["st", "tf", "sm", "onnx", "pd"]
        from safetensors.numpy import load_file

        want = load_file(str(st))
        for name, arr in want.items():
            np.testing.assert_array_equal(ar["st"][name], arr)


def test_exports_read_archives_at_urls_and_refuse_to_write_to_urls(tmp, monkeypatch):
    path = tmp / "m.zip"
    modelzip.import_paddle(path, "fp32", *MLP)
    # the archive may be a URL, as for modelzip.open (and the CLI's export-paddle)
    out = modelzip.export_paddle(path.as_uri(), "fp32", tmp / "out" / "mlp")
    assert out["tag"] == "fp32"
    assert (tmp / "out" / "mlp.pdiparams").read_bytes() == MLP[1].read_bytes()
    r = modelzip.export_model(path.as_uri(), None, tmp / "w.safetensors", format="safetensors")
    assert r["params"] and (tmp / "w.safetensors").stat().st_size > 0
    # an output URL was taken for a local path: files went to ./s3:/bucket/...
    monkeypatch.chdir(tmp)
    for export in [
        lambda: modelzip.export_paddle(path, None, "s3://bucket/out/mlp"),
        lambda: modelzip.export_model(path, None, "s3://bucket/w.safetensors", format="safetensors"),
        lambda: modelzip.download("s3://bucket/m.zip", "s3://bucket/copy.zip"),
    ]:
        with pytest.raises(modelzip.ModelzipError) as e:
            export()
        assert e.value.kind == "invalid_input" and "s3://bucket/" in str(e.value)
    assert not (tmp / "s3:").exists()


def test_unrepresentable_values_are_refused_unless_allowed(tmp):
    path = tmp / "m.zip"
    w = np.array([[1.0, 1e6, -2.0], [np.nan, 0.5, np.inf]], np.float32)
    modelzip.save(path, "fp32", {"w": w, "b": np.ones(3, np.float32)})
    before = path.read_bytes()
    for call in (
        lambda: modelzip.quantize(path, "fp32", "int8"),
        lambda: modelzip.cast(path, "fp32", "fp16", "FP16"),
        lambda: modelzip.cast(path, "fp32", "fp16", "FP16", allow_non_finite=True),
    ):
        with pytest.raises(modelzip.ModelzipError) as e:
            call()
        assert e.value.kind == "unrepresentable_values" and '"w"' in str(e.value), e.value
        assert "pass allow_" in str(e.value) and "=True" in str(e.value), e.value
        assert path.read_bytes() == before  # nothing written
    q = modelzip.quantize(path, "fp32", "int8", allow_non_finite=True)
    qw = next(p for p in q["params"] if p["name"] == "w")
    assert qw["dtype"] == "INT8" and qw["non_finite"] == 2
    c = modelzip.cast(path, "fp32", "fp16", "FP16", allow_non_finite=True, allow_overflow=True)
    cw = next(p for p in c["params"] if p["name"] == "w")
    assert (cw["non_finite"], cw["overflowed"], cw["underflowed"]) == (2, 1, 0)
    with modelzip.open(path) as ar:
        h = ar["fp16"]["w"]
        assert h.dtype == np.float16 and np.isposinf(h[0, 1]) and np.isnan(h[1, 0])
        assert np.isposinf(h[1, 2]) and h[0, 0] == 1.0


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32/int64 as protobuf writes them
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _program_two_matmuls_disagreeing_on_w() -> bytes:
    """A ProgramDesc (schemas/paddle/framework.proto): w [4, 3] read by a matmul_v2 as is
    (channel axis 1) and by one with trans_y (axis 0)."""
    tensor = _field(1, 5) + _field(2, 4) + _field(2, 3)  # FP32, dims [4, 3]
    vtype = _field(1, 7) + _field(3, _field(1, tensor))  # LOD_TENSOR
    var = _field(1, "w") + _field(2, vtype) + _field(3, 1)  # persistable

    def matmul(x: str, out: str, trans_y: bool) -> bytes:
        attr = _field(1, "trans_y") + _field(2, 6) + _field(10, int(trans_y))  # BOOLEAN
        return (
            _field(1, _field(1, "X") + _field(2, x))
            + _field(1, _field(1, "Y") + _field(2, "w"))
            + _field(2, _field(1, "Out") + _field(2, out))
            + _field(3, "matmul_v2")
            + _field(4, attr)
        )

    block = (
        _field(1, 0)
        + _field(2, -1)
        + _field(3, var)
        + _field(4, matmul("x", "y1", False))
        + _field(4, matmul("x2", "y2", True))
    )
    return _field(1, block)


def test_quantize_report_says_why_a_weight_is_not_per_channel(tmp):
    path = tmp / "m.zip"
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5
    graph = ("programdesc", _program_two_matmuls_disagreeing_on_w())
    modelzip.save(path, "fp32", {"w": w}, graph=graph)
    q = modelzip.quantize(path, "fp32", "int8")  # per channel
    qw = next(p for p in q["params"] if p["name"] == "w")
    assert qw["dtype"] == "INT8"
    assert qw["per_tensor_reason"] == (
        "the ops that read it disagree on its output-channel axis "
        "(matmul_v2 along axis 1, matmul_v2 along axis 0)"
    )
    assert next(p for p in q["params"] if p["name"] == "w@scale")["per_tensor_reason"] is None
    # Per tensor as asked, and per channel where it can be: no reason.
    t = modelzip.quantize(path, "fp32", "int8t", per_channel=False)
    assert all(p["per_tensor_reason"] is None for p in t["params"])
    modelzip.import_paddle(path, "mlp", *MLP)
    m = modelzip.quantize(path, "mlp", "mlp8")
    assert [p["per_tensor_reason"] for p in m["params"] if p["dtype"] == "INT8"] == [None, None]


PIR_FIXTURES = PADDLE_FIXTURES.parent / "pir"


def _paddle_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("paddle") is not None


@pytest.mark.skipif(
    not _paddle_available() and os.environ.get("MODELZIP_REQUIRE_PADDLE") != "1",
    reason="paddlepaddle is not installed (./test.sh installs it)",
)
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_pir_program_exported_runs_in_paddle_with_paddles_outputs(tmp, model):
    """Paddle 3's default save (PIR `.json` + `.pdiparams`) imported, exported, and run
    by Paddle itself (in a subprocess, PIR on as Paddle 3 defaults). The export's files
    are byte-identical to the fixture's, so Paddle runs the original and the export in
    the same process and their outputs must be equal bit for bit. The output recorded
    when the fixture was made (on another CPU, whose summation order may differ) is only
    a loose sanity check: within 1e-5 of its largest magnitude. Paddle runs with one
    thread (OMP/MKL/OpenBLAS and its own math library), so a reduction's order is the
    same on every run."""
    path = tmp / "m.zip"
    original = PIR_FIXTURES / model
    r = modelzip.import_paddle(
        path, "pir", PIR_FIXTURES / f"{model}.json", PIR_FIXTURES / f"{model}.pdiparams"
    )
    assert r["params"]
    out = modelzip.export_paddle(path, "pir", tmp / "out" / model)
    assert out["model_path"].endswith(f"{model}.json")
    for ext in ("json", "pdiparams"):
        assert (tmp / "out" / f"{model}.{ext}").read_bytes() == (
            PIR_FIXTURES / f"{model}.{ext}"
        ).read_bytes(), ext
    script = (
        "import sys, numpy as np, paddle\n"
        "paddle.base.core.set_num_threads(1)\n"
        "original, exported, x, recorded = sys.argv[1:]\n"
        "def run(prefix):\n"
        "    layer = paddle.jit.load(prefix)\n"
        "    layer.eval()\n"
        "    return layer(paddle.to_tensor(np.load(x))).numpy()\n"
        "want, got = run(original), run(exported)\n"
        "assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)\n"
        "assert got.tobytes() == want.tobytes(), np.abs(got - want).max()\n"
        "rec = np.load(recorded)\n"
        "np.testing.assert_allclose(want, rec, rtol=0, atol=1e-5 * np.abs(rec).max())\n"
        "print('ok', got.shape)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "FLAGS_enable_pir_api"}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(original),
            str(tmp / "out" / model),
            str(PIR_FIXTURES / f"{model}.input.npy"),
            str(PIR_FIXTURES / f"{model}.output.npy"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("ok"), proc.stdout
