#!/usr/bin/env python3
"""Checks modelzip's ONNX exports in ONNX Runtime. For every fixture in
tests/fixtures/onnx/ (manifest.json lists the runnable ones):

1. `modelzip import` NAME.onnx as tag NAME (external.onnx reads external.bin);
2. `modelzip verify` the archive;
3. `modelzip export` each tag as NAME.onnx, and with --external-data as NAME-ext.onnx
   + NAME-ext.onnx.data;
4. both exports load (onnx.load, external data included) to a ModelProto equal to the
   original loaded the same way, and pass onnx.checker;
5. ONNX Runtime runs both exports of the runnable models on the fixture's feeds and
   reproduces the reference outputs in NAME.io.npz exactly.
Then the two fine-tuned versions: the second tag's own bytes (entries not shared with
the first) are at most 40% of the first's.

    cargo build && /work/venvs/onnx/bin/python tests/onnx/run_exported.py [--record]

--record writes the result to tests/onnx/last_run.md.
"""
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "onnx")
BIN = os.environ.get("MODELZIP", os.path.join(ROOT, "target", "debug", "modelzip"))
MODELS = ["mlp", "cnn", "control", "dtypes", "external", "finetune_v1", "finetune_v2"]


def mz(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("modelzip %s failed: %s" % (" ".join(args), r.stderr))
    return r.stdout


def loaded(path):
    """The model with external data read in, in the form onnx.load gives."""
    m = onnx.load(path, load_external_data=True)
    for t in m.graph.initializer:
        # onnx.load marks inlined tensors DEFAULT explicitly; an inline export leaves
        # the field unset. Both mean the same.
        if t.HasField("data_location") and t.data_location == onnx.TensorProto.DEFAULT:
            t.ClearField("data_location")
    return m


def same_values(got, want):
    a, b = onnx.ModelProto(), onnx.ModelProto()
    a.CopyFrom(got)
    b.CopyFrom(want)
    ia, ib = list(a.graph.initializer), list(b.graph.initializer)
    if len(ia) != len(ib):
        return False
    for x, y in zip(ia, ib):
        if (x.name, list(x.dims), x.data_type) != (y.name, list(y.dims), y.data_type):
            return False
        vx, vy = numpy_helper.to_array(x), numpy_helper.to_array(y)
        if vx.dtype != vy.dtype:
            return False
        if vx.dtype == object:
            if vx.tolist() != vy.tolist():  # strings
                return False
        elif vx.tobytes() != vy.tobytes():  # bit for bit, NaNs included
            return False
    del a.graph.initializer[:]
    del b.graph.initializer[:]
    return a == b


def own_bytes(archive, tag):
    with zipfile.ZipFile(archive) as z:
        return sum(i.compress_size for i in z.infolist() if i.filename.startswith(tag + "/"))


def main():
    manifest = json.load(open(os.path.join(FIX, "manifest.json")))
    lines, ok = [], True
    with tempfile.TemporaryDirectory() as d:
        archive = os.path.join(d, "onnx.zip")
        for name in MODELS:
            mz("import", archive, "--tag", name, os.path.join(FIX, name + ".onnx"), "--quiet")
        mz("verify", archive)
        for name in MODELS:
            want = loaded(os.path.join(FIX, name + ".onnx"))
            notes = []
            for suffix, extra in [("", []), ("-ext", ["--external-data"])]:
                out = os.path.join(d, name + suffix + ".onnx")
                mz("export", archive, "--tag", name, "--out", out, "--quiet", *extra)
                got = loaded(out)
                onnx.checker.check_model(got)
                if suffix:
                    # External data is raw bytes: initializers that were in a typed field
                    # come back in raw_data, so values are compared, and the rest as a message.
                    equal = same_values(got, want)
                    what = "values equal, rest of the message equal"
                else:
                    equal = got == want
                    what = "message equal"
                ok &= equal
                note = "%s: %s" % (os.path.basename(out), what if equal else "DIFFERS")
                if suffix:
                    offs = [int(kv.value) for t in onnx.load(out, load_external_data=False).graph.initializer
                            for kv in t.external_data if kv.key == "offset"]
                    aligned = all(o % 64 == 0 for o in offs)
                    ok &= aligned and len(offs) > 0
                    note += ", %d offsets %s" % (len(offs), "64-byte aligned" if aligned else "NOT aligned")
                if name in manifest:
                    io = np.load(os.path.join(FIX, name + ".io.npz"))
                    feeds = {k[3:]: io[k] for k in io.files if k.startswith("in:")}
                    sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
                    outs = sess.run(None, feeds)
                    same = all(np.array_equal(o, io["out:" + n.name])
                               for o, n in zip(outs, sess.get_outputs()))
                    ok &= same
                    note += ", outputs %s" % ("reproduced" if same else "DIFFER")
                notes.append(note)
            lines.append("- %s (%d nodes, %d initializers): %s" % (
                name, len(want.graph.node), len(want.graph.initializer), "; ".join(notes)))
        lines.append("- verify: ok (%d tags)" % len(MODELS))
        v1, v2 = own_bytes(archive, "finetune_v1"), own_bytes(archive, "finetune_v2")
        share = 100.0 * v2 / v1
        ok &= share <= 40
        lines.append("- dedup: finetune_v1 owns %d bytes, finetune_v2 owns %d bytes (%.1f%%, limit 40%%)"
                     % (v1, v2, share))
    result = "PASS" if ok else "FAIL"
    text = "\n".join(lines) + "\n\nResult: " + result + "\n"
    print(text)
    if "--record" in sys.argv:
        head = ("# Last run of tests/onnx/run_exported.py\n\nonnx %s, onnxruntime %s (from PyPI), "
                "modelzip debug build of branch onnx.\n\n" % (onnx.__version__, ort.__version__))
        open(os.path.join(HERE, "last_run.md"), "w").write(head + text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
