#!/usr/bin/env python3
"""Generates three ONNX fixtures of the ways the `onnx` package writes external data that
make_fixtures.py's do not cover (same venv: onnx 1.23.2):

    /work/venvs/onnx/bin/python tests/onnx/make_reload_fixtures.py

- reloaded.onnx: external.onnx loaded with onnx.load (which reads the external data in
  and sets every such initializer's data_location to DEFAULT, explicitly) and saved
  again: inline raw_data with a data_location field present.
- nested_external/constant.onnx + constant.bin: a Constant node saved with
  convert_attribute=True (its value tensor in the data file).
- nested_external/control.onnx + control.bin: control.onnx saved with
  save_as_external_data(size_threshold=0): onnx moves the initializers of the If / Loop
  subgraphs to the data file too (and leaves the typed-field top-level ones inline).
"""
import os

import onnx

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "onnx")

m = onnx.load(os.path.join(HERE, "external.onnx"))
assert all(t.HasField("data_location") for t in m.graph.initializer)
onnx.save_model(m, os.path.join(HERE, "reloaded.onnx"))

nested = os.path.join(HERE, "nested_external")
os.makedirs(nested, exist_ok=True)
data = os.path.join(nested, "control.bin")
if os.path.exists(data):
    os.remove(data)  # onnx appends to an existing data file
m = onnx.load(os.path.join(HERE, "control.onnx"))
onnx.save_model(m, os.path.join(nested, "control.onnx"), save_as_external_data=True,
                all_tensors_to_one_file=True, location="control.bin", size_threshold=0)
onnx.checker.check_model(os.path.join(nested, "control.onnx"))

# nested_external/constant.onnx + constant.bin: y = x + Constant(value), saved with
# convert_attribute=True, so the Constant node's value tensor is external data too.
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
import numpy as np  # noqa: E402

k = numpy_helper.from_array(np.arange(4, dtype=np.float32) / 8, "k")
g = helper.make_graph(
    [helper.make_node("Constant", [], ["c"], value=k), helper.make_node("Add", ["x", "c"], ["y"])],
    "constant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                      producer_name="modelzip-fixtures", producer_version="1")
onnx.checker.check_model(m)
data = os.path.join(nested, "constant.bin")
if os.path.exists(data):
    os.remove(data)
onnx.save_model(m, os.path.join(nested, "constant.onnx"), save_as_external_data=True,
                all_tensors_to_one_file=True, location="constant.bin", size_threshold=0,
                convert_attribute=True)
onnx.checker.check_model(os.path.join(nested, "constant.onnx"))
