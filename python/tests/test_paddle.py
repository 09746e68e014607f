"""Paddle in and out through Python: byte-identical round trips, variants, errors."""

from __future__ import annotations

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


def test_import_errors_name_the_file(tmp):
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.import_paddle(tmp / "m.zip", "t", tmp / "absent.pdmodel", MLP[1])
    assert e.value.kind == "io" and "absent.pdmodel" in str(e.value)
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.import_paddle(tmp / "m.zip", "t", MLP[1], MLP[1])
    assert "mlp.pdiparams" in str(e.value)
    with pytest.raises(modelzip.ModelzipError):
        modelzip.import_paddle(tmp / "m.zip", "t")
    assert not (tmp / "m.zip").exists()


def test_every_format_goes_in_and_out_through_import_model(tmp):
    """safetensors, TensorFlow and ONNX fixtures through modelzip.import_model /
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
    r = modelzip.import_model(path, "tf", fx / "tf" / "mlp.pb")
    assert r["format"] == "tf" and r["graph"] == "graph.fb"
    modelzip.export_model(path, "tf", tmp / "mlp.pbtxt")
    assert (tmp / "mlp.pbtxt").read_text().lstrip().startswith("node")
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
    with modelzip.open(path) as ar:
        assert ar.tags == ["st", "tf", "onnx", "pd"]
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
