#!/usr/bin/env python3
"""Generates two ONNX fixtures of the ways the `onnx` package writes external data that
make_fixtures.py's do not cover (same venv: onnx 1.23.2):

    /work/venvs/onnx/bin/python tests/onnx/make_reload_fixtures.py

- reloaded.onnx: external.onnx loaded with onnx.load (which reads the external data in
  and sets every such initializer's data_location to DEFAULT, explicitly) and saved
  again: inline raw_data with a data_location field present.
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
