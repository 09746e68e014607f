"""ONNX through Python: an INT8 variant of an ONNX tag (modelzip.quantize runs the same
code as `modelzip quantize`), exported with DequantizeLinear nodes."""

from __future__ import annotations

import numpy as np
import pytest

import modelzip
from conftest import REPO, cli_json

ONNX_FIXTURES = REPO / "tests" / "fixtures" / "onnx"


def test_quantize_an_onnx_tag_and_export_it(tmp):
    path = tmp / "m.zip"
    modelzip.import_model(path, "fp32", ONNX_FIXTURES / "cnn.onnx")
    q = modelzip.quantize(path, "fp32", "int8")  # per channel
    quantized = sorted(p["name"] for p in q["params"] if p["change"] == "quantized")
    assert quantized == ["conv.w", "fc.w"]
    # conv.w [32, 3, 3, 3] along its output channels (axis 0); fc.w is Gemm's B with
    # transB, [10, 2048], also axis 0.
    with modelzip.open(path) as ar:
        for name, shape in [("conv.w", (32, 1, 1, 1)), ("fc.w", (10, 1))]:
            w, qw = ar["fp32"][name], ar["int8"][name]
            scale = ar["int8"][name + "@scale"].reshape(shape)
            assert qw.dtype == np.int8 and qw.shape == w.shape
            err = np.abs(qw.astype(np.float32) * scale - w)
            assert (err <= scale / 2 * 1.0001).all(), name
        assert ar["int8"].metadata["quantization"]["source_tag"] == "fp32"
    # The CLI sees the same tag: the biases and BatchNormalization are shared.
    d = cli_json("diff", path, "fp32", "int8")
    assert sorted(p["name"] for p in d["changed"]) == ["conv.w", "fc.w"]
    out = modelzip.export_model(path, "int8", tmp / "int8.onnx")
    assert out["format"] == "onnx"
    # NodeProto.op_type (field 4) "DequantizeLinear", once per weight.
    assert (tmp / "int8.onnx").read_bytes().count(b'"\x10DequantizeLinear') == 2
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.quantize(path, "int8", "again")
    assert "quantized already" in str(e.value)
