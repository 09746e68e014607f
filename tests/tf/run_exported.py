#!/usr/bin/env python3
"""Checks modelzip's TensorFlow exports in TensorFlow itself. For every fixture in
tests/fixtures/tf/manifest.json:

1. `modelzip import` NAME.pb as tag NAME, and NAME.pbtxt as tag NAME-text;
2. `modelzip verify` the archive;
3. `modelzip export` each tag as .pb and as .pbtxt;
4. every export parses (binary or text_format) to a GraphDef equal to the original;
5. TensorFlow imports the original NAME.pb and every export, runs each on the fixture's
   feeds in this process, and the export's outputs equal the original's bit for bit
   (the exported GraphDef equals the original message, so the same computation runs).
   The outputs recorded when the fixture was made (NAME.io.npz, on another CPU) are only
   a loose sanity check: within 1e-5 of the output's largest magnitude (exact for
   integers, booleans and strings), since oneDNN's summation order differs between CPUs.
Then the two fine-tuned versions: the second tag's own bytes (entries not shared with
the first) are at most 40% of the first's. Last, the SavedModel fixture
(tests/fixtures/tf/saved_model/mlp, made by make_saved_model.py): imported, exported as a
SavedModel directory, re-imported (every parameter shared with the first tag), and
`tf.saved_model.load` runs `serving_default` of the original directory and of the
export on the committed input: equal bit for bit, and near mlp.io.npz as above.

TensorFlow runs with one intra-op and one inter-op thread (set below, before any op
runs): a single thread fixes the order of every reduction, so the same graph gives the
same bits on each run in this process.

    cargo build && /work/venvs/tf/bin/python tests/tf/run_exported.py [--record]

--record writes the result to tests/tf/last_run.md.
"""
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtimes"))
from compare import bit_equal, near_recorded  # noqa: E402  (tests/runtimes/compare.py)
import tensorflow as tf

# One thread each: the same graph then reduces in the same order on every run.
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
SESSION_CONFIG = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "tf")
BIN = os.environ.get("MODELZIP", os.path.join(ROOT, "target", "debug", "modelzip"))


def mz(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("modelzip %s failed: %s" % (" ".join(args), r.stderr))
    return r.stdout


def load(path):
    g = graph_pb2.GraphDef()
    if path.endswith(".pbtxt"):
        text_format.Parse(open(path).read(), g)
    else:
        g.ParseFromString(open(path, "rb").read())
    return g


def run(gd, feeds, fetches):
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g, config=SESSION_CONFIG) as s:
        return s.run(fetches, feed_dict=feeds)


def plain(a):
    """As make_fixtures.py saves outputs: strings as bytes, bfloat16 as its bits."""
    a = np.asarray(a)
    if a.dtype == object:
        return a.astype("S")
    if a.dtype == tf.bfloat16.as_numpy_dtype:
        return a.view(np.uint16)
    return a


def own_bytes(archive, tag):
    with zipfile.ZipFile(archive) as z:
        return sum(i.compress_size for i in z.infolist() if i.filename.startswith(tag + "/"))


def saved_model(d, zp, lines):
    """The SavedModel round trip: import, export, re-import, TensorFlow runs the export."""
    sm_dir = os.path.join(FIX, "saved_model")
    mz("import", zp, "--tag", "sm", os.path.join(sm_dir, "mlp"), "-q")
    out = os.path.join(d, "sm_export")
    mz("export", zp, "--tag", "sm", "--out", out, "-q")
    back = json.loads(mz("import", zp, "--tag", "sm-again", out, "--json"))
    shared = all(p.get("shared_from") == "sm" for p in back["params"])
    io = np.load(os.path.join(sm_dir, "mlp.io.npz"))
    x = tf.constant(io["x"])
    want = tf.saved_model.load(os.path.join(sm_dir, "mlp")).signatures["serving_default"](x=x)
    got = tf.saved_model.load(out).signatures["serving_default"](x=x)
    match = all(bit_equal(got[k].numpy(), want[k].numpy()) for k in ("y", "h"))
    sane = all(near_recorded(want[k].numpy(), io[k]) for k in ("y", "h"))
    lines.append("- saved_model/mlp (%d variables): exported directory loads, serving_default outputs %s the original's "
                 "(same run), %s the recorded ones; re-import %s" % (
                     len(back["params"]), "bit-identical to" if match else "DIFFER from",
                     "near" if sane else "FAR FROM", "all shared" if shared else "NOT SHARED"))
    return match and sane and shared


def main():
    manifest = json.load(open(os.path.join(FIX, "manifest.json")))
    lines = []
    ok = True
    with tempfile.TemporaryDirectory() as d:
        zp = os.path.join(d, "tf.zip")
        for name, m in manifest["models"].items():
            original = load(os.path.join(FIX, name + ".pb"))
            mz("import", zp, "--tag", name, os.path.join(FIX, name + ".pb"), "-q")
            mz("import", zp, "--tag", name + "-text", os.path.join(FIX, name + ".pbtxt"), "-q")
            io = np.load(os.path.join(FIX, name + ".io.npz"))
            feeds = {k: io["in%d" % i] for i, k in enumerate(m["feeds"])}
            recorded = [io["out%d" % i] for i in range(len(m["fetches"]))]
            # The original, run here: what every export must reproduce bit for bit.
            raw = run(original, feeds, m["fetches"])
            bf16 = [np.asarray(o).dtype == tf.bfloat16.as_numpy_dtype for o in raw]
            ref = [plain(o) for o in raw]
            sane = all(near_recorded(a, b, f) for a, b, f in zip(ref, recorded, bf16))
            ok &= sane
            results = ["original: outputs %s the recorded ones" % ("near" if sane else "FAR FROM")]
            for tag in (name, name + "-text"):
                for ext in ("pb", "pbtxt"):
                    out = os.path.join(d, "%s.%s" % (tag, ext))
                    mz("export", zp, "--tag", tag, "--format", "tf", "--out", out, "-q")
                    exported = load(out)
                    same = exported == original
                    outs = [plain(o) for o in run(exported, feeds, m["fetches"])]
                    match = all(bit_equal(a, b) for a, b in zip(outs, ref))
                    results.append("%s.%s: message %s, outputs %s" % (
                        tag, ext, "equal" if same else "DIFFERS",
                        "bit-identical to the original's" if match else "DIFFER from the original's"))
                    ok &= same and match
            lines.append("- %s (%d nodes): %s" % (name, m["nodes"], "; ".join(results)))
        verify = mz("verify", zp).strip().splitlines()[-1].split(": ", 1)[-1]
        lines.append("- verify: %s" % verify)
        v1, v2 = own_bytes(zp, "finetune_v1"), own_bytes(zp, "finetune_v2")
        ratio = v2 / v1
        lines.append("- dedup: finetune_v1 owns %d bytes, finetune_v2 owns %d bytes (%.1f%%, limit 40%%)" % (v1, v2, 100 * ratio))
        ok &= ratio <= 0.40
        ok &= saved_model(d, zp, lines)
    report = "\n".join(lines)
    print(report)
    print("PASS" if ok else "FAIL")
    if "--record" in sys.argv:
        with open(os.path.join(HERE, "last_run.md"), "w") as f:
            f.write("# Last run of tests/tf/run_exported.py\n\n")
            f.write("TensorFlow %s (tensorflow-cpu from PyPI), modelzip built from this tree.\n\n" % tf.__version__)
            f.write(report + "\n\nResult: %s\n" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
