#!/usr/bin/env python3
"""Checks modelzip's TensorFlow exports in TensorFlow itself. For every fixture in
tests/fixtures/tf/manifest.json:

1. `modelzip import` NAME.pb as tag NAME, and NAME.pbtxt as tag NAME-text;
2. `modelzip verify` the archive;
3. `modelzip export` each tag as .pb and as .pbtxt;
4. every export parses (binary or text_format) to a GraphDef equal to the original;
5. TensorFlow imports the exported .pb, runs it on the fixture's feeds and reproduces
   the reference outputs in NAME.io.npz exactly.
Then the two fine-tuned versions: the second tag's own bytes (entries not shared with
the first) are at most 40% of the first's. Last, the SavedModel fixture
(tests/fixtures/tf/saved_model/mlp, made by make_saved_model.py): imported, exported as a
SavedModel directory, re-imported (every parameter shared with the first tag), and
`tf.saved_model.load` of the export runs `serving_default` on the committed input and
reproduces the committed outputs in mlp.io.npz exactly.

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
import tensorflow as tf
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
    with tf.compat.v1.Session(graph=g) as s:
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
    loaded = tf.saved_model.load(out)
    got = loaded.signatures["serving_default"](x=tf.constant(io["x"]))
    match = all(np.array_equal(got[k].numpy(), io[k]) for k in ("y", "h"))
    lines.append("- saved_model/mlp (%d variables): exported directory loads, serving_default outputs %s; re-import %s" % (
        len(back["params"]), "reproduced" if match else "DIFFER", "all shared" if shared else "NOT SHARED"))
    return match and shared


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
            ref = [io["out%d" % i] for i in range(len(m["fetches"]))]
            results = []
            for tag in (name, name + "-text"):
                for ext in ("pb", "pbtxt"):
                    out = os.path.join(d, "%s.%s" % (tag, ext))
                    mz("export", zp, "--tag", tag, "--format", "tf", "--out", out, "-q")
                    exported = load(out)
                    same = exported == original
                    outs = [plain(o) for o in run(exported, feeds, m["fetches"])]
                    match = all(
                        np.array_equal(a, b) if a.dtype.kind not in "fc" else np.array_equal(a, b, equal_nan=True)
                        for a, b in zip(outs, ref)
                    )
                    results.append("%s.%s: message %s, outputs %s" % (
                        tag, ext, "equal" if same else "DIFFERS", "reproduced" if match else "DIFFER"))
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
