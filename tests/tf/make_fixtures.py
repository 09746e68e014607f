#!/usr/bin/env python3
"""Generates the TensorFlow fixtures under tests/fixtures/tf/ with real TensorFlow
(tensorflow-cpu in a venv outside the repository):

    python3 -m venv /work/venvs/tf && /work/venvs/tf/bin/pip install tensorflow-cpu
    /work/venvs/tf/bin/python tests/tf/make_fixtures.py

Each model is a frozen GraphDef written as NAME.pb (binary) and NAME.pbtxt (text), with
NAME.io.npz holding the feeds and TensorFlow's own outputs for them (run_exported.py
checks exports against those). manifest.json lists feeds and fetches per model.

- mlp: two dense layers, frozen from variables (tensor_content constants), names
  with '/'.
- cnn: Conv2D + FusedBatchNormV3 (inference) + MaxPool + dense.
- control: tf.cond and tf.while_loop (If/While ops with a function library), control
  inputs, a device, a string constant, node names with '-', '.', and a 200-character
  name.
- dtypes: a constant of every numeric dtype in each form TensorFlow writes
  (tensor_content, the typed field, the splat form with one value), a 0-D and an empty
  constant, and a string constant.
- finetune_v1 / finetune_v2: the same frozen graph twice, v2 with only the last layer
  changed (the dedup check).
Seeds are fixed; the files are small (a few hundred KB in all).
"""
import json
import os

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, tensor_pb2, types_pb2
from tensorflow.python.framework import tensor_util
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tf")
MANIFEST = {}


def frozen(fn, *specs, lower_control_flow=True):
    conc = tf.function(fn).get_concrete_function(*specs)
    f = convert_variables_to_constants_v2(conc, lower_control_flow=lower_control_flow)
    return f.graph.as_graph_def(), [t.name for t in f.inputs], [t.name for t in f.outputs]


def run(gd, feeds, fetches):
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run(fetches, feed_dict=feeds)


def plain(a):
    """An array np.load reads without pickle: strings as bytes, bfloat16 as its bits."""
    a = np.asarray(a)
    if a.dtype == object:
        return a.astype("S")
    if a.dtype == tf.bfloat16.as_numpy_dtype:
        return a.view(np.uint16)
    return a


def save(name, gd, feeds, fetches):
    with open(os.path.join(OUT, name + ".pb"), "wb") as f:
        f.write(gd.SerializeToString(deterministic=True))
    with open(os.path.join(OUT, name + ".pbtxt"), "w") as f:
        f.write(text_format.MessageToString(gd))
    outs = run(gd, feeds, fetches)
    arrays = {"in%d" % i: v for i, v in enumerate(feeds.values())}
    arrays.update({"out%d" % i: plain(v) for i, v in enumerate(outs)})
    np.savez(os.path.join(OUT, name + ".io.npz"), **arrays)
    MANIFEST[name] = {"feeds": list(feeds.keys()), "fetches": fetches, "nodes": len(gd.node)}


def mlp(rng, hidden=32, last=None, width=16):
    w1 = tf.Variable(rng.standard_normal((width, hidden)).astype("f"), name="dense_1/kernel")
    b1 = tf.Variable(rng.standard_normal(hidden).astype("f"), name="dense_1/bias")
    w2 = tf.Variable(last[0] if last else rng.standard_normal((hidden, 4)).astype("f"), name="dense_2/kernel")
    b2 = tf.Variable(last[1] if last else rng.standard_normal(4).astype("f"), name="dense_2/bias")

    def f(x):
        with tf.name_scope("dense_1"):
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
        with tf.name_scope("dense_2"):
            return tf.nn.softmax(tf.matmul(h, w2) + b2)

    return frozen(f, tf.TensorSpec([None, width], tf.float32, name="x"))


def cnn(rng):
    k = tf.Variable(rng.standard_normal((3, 3, 3, 8)).astype("f") * 0.3, name="conv/kernel")
    scale = tf.Variable(rng.uniform(0.5, 1.5, 8).astype("f"), name="bn/gamma")
    offset = tf.Variable(rng.standard_normal(8).astype("f") * 0.1, name="bn/beta")
    mean = tf.Variable(rng.standard_normal(8).astype("f") * 0.1, name="bn/moving_mean")
    var = tf.Variable(rng.uniform(0.5, 2.0, 8).astype("f"), name="bn/moving_variance")
    w = tf.Variable(rng.standard_normal((4 * 4 * 8, 5)).astype("f") * 0.1, name="fc/kernel")

    def f(x):
        y = tf.nn.conv2d(x, k, strides=1, padding="SAME", name="conv/Conv2D")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(y, scale, offset, mean, var, is_training=False, name="bn/FusedBatchNormV3")
        y = tf.nn.relu(y)
        y = tf.nn.max_pool2d(y, 2, 2, "VALID")
        y = tf.reshape(y, [-1, 4 * 4 * 8])
        return tf.matmul(y, w, name="fc/MatMul")

    return frozen(f, tf.TensorSpec([None, 8, 8, 3], tf.float32, name="image"))


def control(rng):
    w = tf.Variable(rng.standard_normal((4, 4)).astype("f") * 0.5, name="loop.w")

    def f(x, n):
        with tf.device("/device:CPU:0"):
            tag = tf.constant(b"modelzip-fixture", name="tag-string")
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.matmul(x, w), lambda: -x, name="branch-cond")
        i = tf.constant(0, name="i.start")
        _, y = tf.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tf.tanh(tf.matmul(y, w))), (i, y), name="loop.while")
        with tf.control_dependencies([tf.debugging.assert_positive(tf.strings.length(tag))]):
            y = tf.identity(y, name="L" * 200)
        return y, tf.strings.length(tag, name="tag.length")

    # Functional If / While kept (not lowered to Switch / Merge): their branches and
    # bodies are functions in the graph's library.
    return frozen(f, tf.TensorSpec([None, 4], tf.float32, name="x"), tf.TensorSpec([], tf.int32, name="n"),
                  lower_control_flow=False)


def const_node(name, tensor):
    n = node_def_pb2.NodeDef(name=name, op="Const")
    n.attr["dtype"].type = tensor.dtype
    n.attr["value"].tensor.CopyFrom(tensor)
    return n


def dtypes(rng):
    """Consts of every numeric dtype in every form, written directly as TensorProtos."""
    gd = graph_pb2.GraphDef()
    gd.versions.producer = tf.__version__ and 2021  # a fixed producer, like TF 2.x writes
    fetches = []
    kinds = [
        ("float16", np.float16), ("float32", np.float32), ("float64", np.float64),
        ("bfloat16", tf.bfloat16.as_numpy_dtype), ("int8", np.int8), ("int16", np.int16),
        ("int32", np.int32), ("int64", np.int64), ("uint8", np.uint8), ("uint16", np.uint16),
        ("uint32", np.uint32), ("uint64", np.uint64), ("bool", np.bool_),
        ("complex64", np.complex64), ("complex128", np.complex128),
    ]
    for name, npt in kinds:
        if npt is np.bool_:
            vals = rng.integers(0, 2, (2, 3)).astype(bool)
        elif np.issubdtype(npt, np.complexfloating):
            vals = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(npt)
        elif np.issubdtype(npt, np.integer):
            info = np.iinfo(npt)
            vals = rng.integers(max(info.min, -100), min(info.max, 100), (2, 3)).astype(npt)
            vals.flat[0] = info.max
            vals.flat[1] = info.min
        else:
            vals = rng.standard_normal((2, 3)).astype(npt)
        # tensor_content: what make_tensor_proto writes for most arrays (set by hand
        # for the dtypes it writes in the typed field).
        content = tensor_util.make_tensor_proto(vals)
        if not content.tensor_content:
            dtype, shape = content.dtype, content.tensor_shape
            content = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, tensor_content=vals.tobytes())
        # the typed field: every value written out.
        arr = tensor_util.MakeNdarray(content)
        typed = tensor_pb2.TensorProto(dtype=content.dtype, tensor_shape=content.tensor_shape)
        if name in ("float16", "bfloat16"):
            typed.half_val.extend(arr.view(np.uint16).flatten().tolist())
        elif name == "float32":
            typed.float_val.extend(arr.flatten().tolist())
        elif name == "float64":
            typed.double_val.extend(arr.flatten().tolist())
        elif name in ("int8", "int16", "int32", "uint8", "uint16"):
            typed.int_val.extend(arr.flatten().tolist())
        elif name == "int64":
            typed.int64_val.extend(arr.flatten().tolist())
        elif name == "uint32":
            typed.uint32_val.extend(arr.flatten().tolist())
        elif name == "uint64":
            typed.uint64_val.extend(arr.flatten().tolist())
        elif name == "bool":
            typed.bool_val.extend(arr.flatten().tolist())
        elif name == "complex64":
            typed.scomplex_val.extend(np.stack([arr.real, arr.imag], -1).flatten().tolist())
        elif name == "complex128":
            typed.dcomplex_val.extend(np.stack([arr.real, arr.imag], -1).flatten().tolist())
        # the splat form: one value for a [3, 4] shape (what tf.fill / tf.ones freeze to).
        splat = tensor_util.make_tensor_proto(vals.flat[2], dtype=tf.as_dtype(npt), shape=[3, 4])
        for form, t in (("content", content), ("typed", typed), ("splat", splat)):
            n = "const-%s.%s/%s" % (name, form, "value")
            gd.node.append(const_node(n, t))
            fetches.append(n + ":0")
    # a 0-D, an empty and a string constant.
    gd.node.append(const_node("scalar", tensor_util.make_tensor_proto(np.float32(3.5))))
    gd.node.append(const_node("empty", tensor_util.make_tensor_proto(np.zeros((0, 3), np.float32))))
    gd.node.append(const_node("words", tensor_util.make_tensor_proto(np.array([b"alpha", b"beta"]))))
    fetches += ["scalar:0", "empty:0", "words:0"]
    # TensorFlow decodes each form of each constant to the same values.
    outs = run(gd, {}, fetches)
    for i in range(0, 3 * len(kinds), 3):
        assert np.array_equal(outs[i], outs[i + 1]), fetches[i]
        assert outs[i + 2].shape == (3, 4) and (outs[i + 2] == outs[i].flat[2]).all(), fetches[i + 2]
    return gd, fetches


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(14)
    gd, ins, outs = mlp(rng)
    x = rng.standard_normal((3, 16)).astype("f")
    save("mlp", gd, {ins[0]: x}, outs)

    gd, ins, outs = cnn(rng)
    save("cnn", gd, {ins[0]: rng.standard_normal((2, 8, 8, 3)).astype("f")}, outs)

    gd, ins, outs = control(rng)
    save("control", gd, {ins[0]: rng.standard_normal((2, 4)).astype("f"), ins[1]: np.int32(3)}, outs)

    gd, fetches = dtypes(rng)
    save("dtypes", gd, {}, fetches)

    # Two fine-tuned versions of one graph: the 32x256 first layer shared, the last
    # layer changed.
    x = rng.standard_normal((3, 32)).astype("f")
    base = np.random.default_rng(7)
    gd1, ins, outs = mlp(base, hidden=256, width=32)
    save("finetune_v1", gd1, {ins[0]: x}, outs)
    base = np.random.default_rng(7)
    tuned = np.random.default_rng(8)
    last = (tuned.standard_normal((256, 4)).astype("f"), tuned.standard_normal(4).astype("f"))
    gd2, ins, outs = mlp(base, hidden=256, width=32, last=last)
    save("finetune_v2", gd2, {ins[0]: x}, outs)

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "models": MANIFEST}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
