#!/usr/bin/env python3
"""Generates the ONNX fixtures under tests/fixtures/onnx/ with the real `onnx` package
(and ONNX Runtime for the reference outputs), in a venv outside the repository:

    python3 -m venv /work/venvs/onnx && /work/venvs/onnx/bin/pip install onnx onnxruntime numpy
    /work/venvs/onnx/bin/python tests/onnx/make_fixtures.py

Each model is NAME.onnx, checked by onnx.checker; NAME.io.npz holds the feeds and ONNX
Runtime's outputs for them (run_exported.py checks exports against those).
manifest.json lists the runnable models with their inputs and outputs.

- mlp: MatMul + Add + Relu + Gemm, raw_data initializers, doc strings, metadata_props,
  value_info, names with '/' and ':'.
- cnn: Conv + BatchNormalization (inference) + Relu + MaxPool + Flatten + Gemm.
- control: an If whose branches hold their own initializers, and a Loop whose body
  holds one; a typed-field (float_data / int64_data) initializer at the top level; a
  local function (FunctionProto) called by a node.
- dtypes: an initializer of every dtype modelzip holds, each in raw_data and in the
  typed field, a 0-D and an empty one, a string initializer and an INT4 one (these two
  stay in the model); outputs are Identity of each (checked as messages, not run).
- external: the MLP with every initializer in external.bin beside it (onnx's
  save_as_external_data; offsets as onnx writes them).
- finetune_v1 / finetune_v2: one MLP twice, v2 with only the last layer changed.
Seeds are fixed; the files are small (mlp 128 wide and cnn 32 channels, so that INT8
variants are dominated by their weights).
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "onnx")
MANIFEST = {}
OPSET = [helper.make_opsetid("", 17)]


def model(graph, **kw):
    m = helper.make_model(graph, opset_imports=kw.pop("opsets", OPSET), producer_name="modelzip-fixtures",
                          producer_version="1", ir_version=kw.pop("ir_version", 8), **kw)
    onnx.checker.check_model(m)
    return m


def save(name, m, feeds=None, **kw):
    path = os.path.join(OUT, name + ".onnx")
    onnx.save_model(m, path, **kw)
    if feeds is not None:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        names = [o.name for o in sess.get_outputs()]
        np.savez(os.path.join(OUT, name + ".io.npz"), **{"in:" + k: v for k, v in feeds.items()},
                 **{"out:" + k: v for k, v in zip(names, outs)})
        MANIFEST[name] = {"inputs": sorted(feeds), "outputs": names}


def mlp(rng, hidden=32, last=None):
    w1 = rng.standard_normal((16, hidden)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32)
    w2 = rng.standard_normal((hidden, hidden)).astype(np.float32)
    b2 = rng.standard_normal(hidden).astype(np.float32)
    w3 = rng.standard_normal((hidden, 10)).astype(np.float32) if last is None else last[0]
    b3 = rng.standard_normal(10).astype(np.float32) if last is None else last[1]
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (w1, "dense/kernel:0"), (b1, "dense/bias:0"), (w2, "dense_1/kernel:0"), (b2, "dense_1/bias:0"),
        (w3, "head.weight"), (b3, "head.bias")]]
    inits[0].doc_string = "first layer"
    nodes = [
        helper.make_node("MatMul", ["x", "dense/kernel:0"], ["h0"], name="mm0"),
        helper.make_node("Add", ["h0", "dense/bias:0"], ["h1"], name="add0"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu0", doc_string="activation"),
        helper.make_node("MatMul", ["h2", "dense_1/kernel:0"], ["h3"], name="mm1"),
        helper.make_node("Add", ["h3", "dense_1/bias:0"], ["h4"], name="add1"),
        helper.make_node("Relu", ["h4"], ["h5"], name="relu1"),
        helper.make_node("Gemm", ["h5", "head.weight", "head.bias"], ["y"], name="head", alpha=1.0, beta=1.0),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits,
                          doc_string="a small MLP",
                          value_info=[helper.make_tensor_value_info("h2", TensorProto.FLOAT, ["batch", hidden])])
    m = model(g, doc_string="modelzip ONNX fixture")
    helper.set_model_props(m, {"author": "modelzip", "license": "Apache-2.0"})
    return m, (w3, b3)


def cnn(rng):
    # 32 channels on a 16x16 input and 10 classes: big enough that an INT8 variant's own
    # bytes are dominated by its weights (the INT8 acceptance is whole-tag bytes <= 30%).
    c = 32
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3, "conv.w"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "conv.b"),
        numpy_helper.from_array((rng.random(c) + 0.5).astype(np.float32), "bn.scale"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "bn.bias"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "bn.mean"),
        numpy_helper.from_array((rng.random(c) + 0.5).astype(np.float32), "bn.var"),
        numpy_helper.from_array(rng.standard_normal((10, c * 8 * 8)).astype(np.float32) * 0.05, "fc.w"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["n"],
                         epsilon=1e-5),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    return model(g)


def control(rng):
    # If: the branches add their own constants (initializers inside the subgraphs).
    def branch(name, value):
        k = numpy_helper.from_array(np.full(4, value, np.float32), name + ".k")
        return helper.make_graph([helper.make_node("Add", ["x", name + ".k"], [name + ".out"])], name, [],
                                 [helper.make_tensor_value_info(name + ".out", TensorProto.FLOAT, [4])], [k])
    # Loop: body multiplies the carried value by its own initializer.
    body_k = numpy_helper.from_array(np.full(4, 0.5, np.float32), "body.k")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["v_in", "body.k"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4])], [body_k])
    # A local function: scaled(a, s) = a * s.
    fn = helper.make_function("local", "Scaled", ["a", "s"], ["o"],
                              [helper.make_node("Mul", ["a", "s"], ["o"])], OPSET)
    inits = [
        helper.make_tensor("trips", TensorProto.INT64, [], [3]),                 # int64_data
        helper.make_tensor("scale", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0]),  # float_data
        helper.make_tensor("go", TensorProto.BOOL, [], [True]),                  # int32_data
    ]
    nodes = [
        helper.make_node("If", ["flag"], ["chosen"], then_branch=branch("then", 1.0),
                         else_branch=branch("else", -1.0)),
        helper.make_node("Loop", ["trips", "go", "chosen"], ["looped"], body=body),
        helper.make_node("Scaled", ["looped", "scale"], ["y"], domain="local"),
    ]
    g = helper.make_graph(nodes, "control",
                          [helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], inits)
    return model(g, opsets=OPSET + [helper.make_opsetid("local", 1)], functions=[fn])


def dtypes(rng):
    kinds = [
        (TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16),
        (TensorProto.INT8, np.int8), (TensorProto.INT16, np.int16), (TensorProto.INT32, np.int32),
        (TensorProto.INT64, np.int64), (TensorProto.UINT8, np.uint8), (TensorProto.UINT16, np.uint16),
        (TensorProto.UINT32, np.uint32), (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_),
        (TensorProto.COMPLEX64, np.complex64), (TensorProto.COMPLEX128, np.complex128),
    ]
    inits = []
    for dt, np_t in kinds:
        name = TensorProto.DataType.Name(dt).lower()
        if np_t == np.bool_:
            a = rng.random((2, 3)) > 0.5
        elif np.issubdtype(np_t, np.complexfloating):
            a = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(np_t)
        elif np.issubdtype(np_t, np.floating):
            a = rng.standard_normal((2, 3)).astype(np_t)
        else:
            info = np.iinfo(np_t)
            a = np.array([[info.min, info.max, 0], [1, 2, 3]], dtype=np_t)
        inits.append(numpy_helper.from_array(a, name + ".raw"))
        typed = helper.make_tensor(name + ".typed", dt, a.shape, a.flatten().tolist(), raw=False)
        inits.append(typed)
    # bfloat16 and the FP8 types, raw and typed (bit patterns).
    bits16 = np.array([0x3f80, 0xc000, 0x7f80, 0x0001], np.uint16)
    inits.append(helper.make_tensor("bfloat16.raw", TensorProto.BFLOAT16, [4], bits16.tobytes(), raw=True))
    t = TensorProto(name="bfloat16.typed", data_type=TensorProto.BFLOAT16, dims=[4])
    t.int32_data.extend(int(b) for b in bits16)
    inits.append(t)
    for dt in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2):
        name = TensorProto.DataType.Name(dt).lower()
        inits.append(helper.make_tensor(name + ".raw", dt, [3], bytes([0x38, 0xb8, 0x00]), raw=True))
        t = TensorProto(name=name + ".typed", data_type=dt, dims=[3])
        t.int32_data.extend([0x38, 0xb8, 0x00])
        inits.append(t)
    inits.append(numpy_helper.from_array(np.array(2.5, np.float32), "scalar"))
    inits.append(numpy_helper.from_array(np.zeros((0, 3), np.float32), "empty"))
    inits.append(helper.make_tensor("words", TensorProto.STRING, [2], [b"hello", b"world"]))
    inits.append(helper.make_tensor("int4", TensorProto.INT4, [4], [1, -2, 3, -4]))
    nodes = [helper.make_node("Identity", [t.name], ["out." + t.name]) for t in inits]
    outs = [helper.make_tensor_value_info("out." + t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "dtypes", [], outs, inits)
    # INT4 needs IR version 10 and opset 21.
    return model(g, opsets=[helper.make_opsetid("", 21)], ir_version=10)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(15)
    x16 = rng.standard_normal((3, 16)).astype(np.float32)
    # 128 wide: an INT8 variant's own bytes are then dominated by its weights.
    m, _ = mlp(rng, hidden=128)
    save("mlp", m, {"x": x16})
    save("cnn", cnn(rng), {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)})
    save("control", control(rng), {"flag": np.array(True), "x": np.arange(4, dtype=np.float32)})
    save("dtypes", dtypes(rng))
    m, _ = mlp(np.random.default_rng(1))
    # onnx appends to an existing data file: start from none, so every byte is an initializer's.
    if os.path.exists(os.path.join(OUT, "external.bin")):
        os.remove(os.path.join(OUT, "external.bin"))
    save("external", m, {"x": x16}, save_as_external_data=True, all_tensors_to_one_file=True,
         location="external.bin", size_threshold=0)
    v1, (w3, b3) = mlp(np.random.default_rng(2), hidden=128)
    save("finetune_v1", v1, {"x": x16})
    r = np.random.default_rng(3)
    v2, _ = mlp(np.random.default_rng(2), hidden=128,
                last=(w3 + 0.01 * r.standard_normal(w3.shape).astype(np.float32),
                      b3 + 0.01 * r.standard_normal(b3.shape).astype(np.float32)))
    save("finetune_v2", v2, {"x": x16})
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
