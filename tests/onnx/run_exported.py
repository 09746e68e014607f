#!/usr/bin/env python3
"""Checks modelzip's ONNX exports in ONNX Runtime. For every fixture in
tests/fixtures/onnx/ (manifest.json lists the runnable ones):

1. `modelzip import` NAME.onnx as tag NAME (external.onnx reads external.bin);
2. `modelzip verify` the archive;
3. `modelzip export` each tag as NAME.onnx (external.onnx writes external.bin back
   beside it), and with --external-data as NAME-ext.onnx + NAME-ext.onnx.data;
4. both exports load (onnx.load, external data included) to a ModelProto equal to the
   original loaded the same way, and pass onnx.checker;
5. ONNX Runtime runs the original NAME.onnx and both exports of the runnable models on
   the fixture's feeds in this process, and each export's outputs equal the original's
   bit for bit. The outputs recorded when the fixture was made (NAME.io.npz, on another
   CPU) are only a loose sanity check: within 1e-5 of the output's largest magnitude.
Then the two fine-tuned versions: the second tag's own bytes (entries not shared with
the first) are at most 40% of the first's. Last, the fixtures of make_reload_fixtures.py
(reloaded.onnx, nested_external/control.onnx and constant.onnx) export alone into another
directory and reproduce, bit for bit, the outputs of the fixture itself run beside its
data file in this process (and, loosely as above, the recorded outputs of the fixtures
they were made from).

Every session runs with one intra-op and one inter-op thread (`session()` below): one
thread fixes the order of every reduction, so a model and its export compute the same
bits in one run.

INT8 variants (issue 15): `modelzip quantize` the mlp and cnn tags (per channel and per
tensor), export them, and check that each export passes onnx.checker (full check), has
one DequantizeLinear per quantized weight, runs in ONNX Runtime within 3e-2 of the FP32
model (rel = max |int8 - fp32| / max |fp32|, on the fixture's inputs and on 32 seeded
random draws of them, the maxima taken over all 32), gives the same outputs as the FP32 model with the weights dequantized by
numpy (q x scale), and that the tag's own bytes (its parameters, and the whole tag:
graph.fb, params.txt, metadata included) are at most 30% of the FP32 tag's.
With MODELZIP_ONNX_EXPORT_DIR set (./test.sh sets it and runs cargo test first),
the exports tests/it/onnx_quantize.rs wrote there (the library's quantize) are checked the
same way, and a missing one fails the run.

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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtimes"))
from compare import bit_equal, near_recorded  # noqa: E402  (tests/runtimes/compare.py)
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


TOLERANCE = 3e-2
# The INT8 exports tests/it/onnx_quantize.rs writes to $MODELZIP_ONNX_EXPORT_DIR, and the
# fixture each one is an INT8 variant of.
CARGO_INT8 = {
    "mlp_int8": "mlp", "mlp_int8_tensor": "mlp",
    "cnn_int8": "cnn", "cnn_int8_tensor": "cnn",
    "finetune_v1_int8": "finetune_v1", "finetune_v1_int8_tensor": "finetune_v1",
}


def session(model, optimize=True):
    """An ONNX Runtime session on the CPU with one thread (reproducible reductions), with
    its default graph optimizations or none. `model` is a path (its external data is read
    beside it) or a ModelProto."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    what = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(what, so, providers=["CPUExecutionProvider"])


def run(model, feeds, optimize=True):
    """Runs in ONNX Runtime (see session())."""
    return session(model, optimize).run(None, feeds)


def rel_error(got, want):
    return max(float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(got, want))


def feed_sets(fixture):
    """The fixture's own inputs, then 32 seeded random draws of the same shape."""
    io = np.load(os.path.join(FIX, fixture + ".io.npz"))
    feeds = {k[3:]: io[k] for k in io.files if k.startswith("in:")}
    rng = np.random.default_rng(15)
    rand = [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
            for _ in range(32)]
    return [("fixture inputs", [feeds]), ("32 random draws", rand)]


def dequantized_fp32(int8, fp32):
    """The FP32 model with each quantized weight replaced by numpy's q x scale."""
    inits = {t.name: numpy_helper.to_array(t) for t in int8.graph.initializer}
    m = onnx.ModelProto()
    m.CopyFrom(fp32)
    for n in int8.graph.node:
        if n.op_type != "DequantizeLinear":
            continue
        q, s = inits[n.input[0]].astype(np.float32), inits[n.input[1]]
        axis = next((a.i for a in n.attribute if a.name == "axis"), None)
        if axis is not None:
            shape = [1] * q.ndim
            shape[axis] = -1
            s = s.reshape(shape)
        for t in m.graph.initializer:
            if t.name == n.output[0]:
                t.CopyFrom(numpy_helper.from_array((q * s).astype(np.float32), t.name))
    return m


def check_int8(path, fixture, weights):
    """Checks one INT8 export against its FP32 fixture; returns (ok, note)."""
    if not os.path.exists(path):
        return False, "%s: MISSING" % os.path.basename(path)
    int8 = onnx.load(path)
    fp32 = onnx.load(os.path.join(FIX, fixture + ".onnx"))
    onnx.checker.check_model(int8, full_check=True)
    dq = [n for n in int8.graph.node if n.op_type == "DequantizeLinear"]
    ok = len(dq) == weights
    notes = ["%d DequantizeLinear" % len(dq)]
    numpy_dq = dequantized_fp32(int8, fp32)
    for what, sets in feed_sets(fixture):
        same = True
        want, opt, got = [], [], []
        for feeds in sets:
            want.append(run(fp32, feeds, optimize=False))
            # What users get: ORT's defaults (which fuse DequantizeLinear + MatMul/Gemm
            # into MatMulNBits, quantizing the activations too).
            opt.append(run(int8, feeds))
            # The model as written: FP32 compute on the dequantized weights, equal to
            # the FP32 model with numpy's q x scale weights.
            got.append(run(int8, feeds, optimize=False))
            same &= all(np.allclose(g, d, rtol=1e-5, atol=1e-5 * np.abs(d).max())
                        for g, d in zip(got[-1], run(numpy_dq, feeds, optimize=False)))
        # The output scale is the largest |FP32 output| over the whole set: one random
        # draw's own largest output can be small (then its ratio measures the draw,
        # not the model). docs/ONNX.md has the per-draw figures too.
        stack = lambda runs: [np.stack(outs) for outs in zip(*runs)]
        rel = rel_error(stack(opt), stack(want))
        plain = rel_error(stack(got), stack(want))
        ok &= max(rel, plain) <= TOLERANCE and same
        notes.append("%s rel %.1e (unoptimized %.1e)%s" % (
            what, rel, plain, ", = numpy-dequantized FP32" if same else
            " (numpy-dequantized FP32 DIFFERS)"))
    return ok, "%s: %s" % (os.path.basename(path), ", ".join(notes))


def param_bytes(archive, tag):
    with zipfile.ZipFile(archive) as z:
        return sum(i.compress_size for i in z.infolist()
                   if i.filename.startswith(tag + "/params/"))


def int8_checks(archive, d):
    lines, ok = [], True
    for fixture, weights in [("mlp", 3), ("cnn", 2)]:
        for tag, extra in [(fixture + "_int8", ["--per-channel"]), (fixture + "_int8_tensor", [])]:
            mz("quantize", archive, "--from", fixture, "--tag", tag, "--quiet", *extra)
            out = os.path.join(d, tag + ".onnx")
            mz("export", archive, "--tag", tag, "--out", out, "--quiet")
            good, note = check_int8(out, fixture, weights)
            own, full = param_bytes(archive, tag), param_bytes(archive, fixture)
            share = 100.0 * own / full
            whole = 100.0 * own_bytes(archive, tag) / own_bytes(archive, fixture)
            good &= share <= 30 and whole <= 30
            note += ", parameter bytes %d of %d (%.1f%%), whole tag %.1f%% (limit 30%% each)" % (
                own, full, share, whole)
            ok &= good
            lines.append("- int8 (modelzip quantize%s): %s%s" % (
                " --per-channel" if extra else "", note, "" if good else " FAIL"))
    mz("verify", archive)
    exports = os.environ.get("MODELZIP_ONNX_EXPORT_DIR")
    if exports:
        for name, fixture in sorted(CARGO_INT8.items()):
            good, note = check_int8(os.path.join(exports, name + ".onnx"), fixture,
                                    3 if fixture != "cnn" else 2)
            ok &= good
            lines.append("- int8 (cargo test, library): %s%s" % (note, "" if good else " FAIL"))
        # A weight read only inside an If branch stays FP32; both branches run.
        good = True
        paths = [os.path.join(exports, n + ".onnx") for n in ("subgraph_int8", "subgraph")]
        if not all(os.path.exists(p) for p in paths):
            good, note = False, "subgraph_int8.onnx / subgraph.onnx MISSING"
        else:
            int8, fp32 = (onnx.load(p) for p in paths)
            onnx.checker.check_model(int8, full_check=True)
            rels = []
            for flag in (True, False):
                feeds = {"x": np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32),
                         "flag": np.array(flag)}
                rels.append(rel_error(run(int8, feeds), run(fp32, feeds)))
            good = max(rels) <= TOLERANCE
            note = "subgraph_int8.onnx: then rel %.1e, else rel %.1e" % tuple(rels)
        ok &= good
        lines.append("- int8 (cargo test, library): %s%s" % (note, "" if good else " FAIL"))
    else:
        lines.append("- int8 (cargo test exports): not checked, MODELZIP_ONNX_EXPORT_DIR is not set")
    return ok, lines


def reload_checks(d):
    """The fixtures of make_reload_fixtures.py: each imports, exports into another
    directory (nothing of the source's directory is needed) and ONNX Runtime reproduces
    the outputs of the fixture it was made from."""
    lines, ok = [], True
    archive = os.path.join(d, "reload.zip")
    out_dir = os.path.join(d, "reload-out")
    os.makedirs(out_dir)
    cases = [("reloaded.onnx", "external"), ("nested_external/control.onnx", "control"),
             ("nested_external/constant.onnx", None)]
    for rel, source in cases:
        tag = (source or "constant") + "-reload"
        mz("import", archive, "--tag", tag, os.path.join(FIX, rel), "--quiet")
        out = os.path.join(out_dir, tag + ".onnx")
        mz("export", archive, "--tag", tag, "--out", out, "--quiet")
        got = loaded(out)
        onnx.checker.check_model(got)
        sane = True
        if source:
            io = np.load(os.path.join(FIX, source + ".io.npz"))
            feeds = {k[3:]: io[k] for k in io.files if k.startswith("in:")}
        else:
            feeds = {"x": np.arange(4, dtype=np.float32)}
        # The fixture itself, run beside its data file in this process.
        original = session(os.path.join(FIX, rel))
        want = original.run(None, feeds)
        if source:
            sane = all(near_recorded(w, io["out:" + n.name])
                       for w, n in zip(want, original.get_outputs()))
        same = all(bit_equal(o, w) for o, w in zip(run(out, feeds), want))
        alone = os.listdir(out_dir) == [tag + ".onnx"]
        ok &= same and sane and alone
        lines.append("- %s (exported alone into another directory: %s): outputs %s the fixture's "
                     "(same run)%s" % (
                         rel, "yes" if alone else "NO, " + ", ".join(sorted(os.listdir(out_dir))),
                         "bit-identical to" if same else "DIFFER from",
                         "" if not source else ", near the recorded %s.io.npz" % source if sane
                         else ", FAR FROM the recorded %s.io.npz" % source))
        os.remove(out)
    return ok, lines


def commit():
    r = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h (%s)"], capture_output=True, text=True)
    return r.stdout.strip() or "an unknown commit"


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
            if name in manifest:
                io = np.load(os.path.join(FIX, name + ".io.npz"))
                feeds = {k[3:]: io[k] for k in io.files if k.startswith("in:")}
                # The original, run here: what each export must reproduce bit for bit.
                original = session(os.path.join(FIX, name + ".onnx"))
                reference = original.run(None, feeds)
                sane = all(near_recorded(r, io["out:" + n.name])
                           for r, n in zip(reference, original.get_outputs()))
                ok &= sane
                notes.append("original: outputs %s the recorded ones" % ("near" if sane else "FAR FROM"))
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
                if name == "external" and not suffix:
                    # A plain export writes the external data back where it came from:
                    # external.bin beside the model, both byte for byte.
                    got_bin = open(os.path.join(d, "external.bin"), "rb").read()
                    want_bin = open(os.path.join(FIX, "external.bin"), "rb").read()
                    back = got_bin == want_bin
                    ok &= back and open(out, "rb").read() == open(os.path.join(FIX, name + ".onnx"), "rb").read()
                    note += ", model byte for byte, external.bin %s" % (
                        "byte for byte" if back else "DIFFERS")
                if suffix:
                    offs = [int(kv.value) for t in onnx.load(out, load_external_data=False).graph.initializer
                            for kv in t.external_data if kv.key == "offset"]
                    aligned = all(o % 64 == 0 for o in offs)
                    ok &= aligned and len(offs) > 0
                    note += ", %d offsets %s" % (len(offs), "64-byte aligned" if aligned else "NOT aligned")
                if name in manifest:
                    outs = run(out, feeds)
                    same = len(outs) == len(reference) and all(
                        bit_equal(o, r) for o, r in zip(outs, reference))
                    ok &= same
                    note += ", outputs %s" % (
                        "bit-identical to the original's" if same else "DIFFER from the original's")
                notes.append(note)
            lines.append("- %s (%d nodes, %d initializers): %s" % (
                name, len(want.graph.node), len(want.graph.initializer), "; ".join(notes)))
        lines.append("- verify: ok (%d tags)" % len(MODELS))
        v1, v2 = own_bytes(archive, "finetune_v1"), own_bytes(archive, "finetune_v2")
        share = 100.0 * v2 / v1
        ok &= share <= 40
        lines.append("- dedup: finetune_v1 owns %d bytes, finetune_v2 owns %d bytes (%.1f%%, limit 40%%)"
                     % (v1, v2, share))
        good, more = int8_checks(archive, d)
        ok &= good
        lines.extend(more)
        good, more = reload_checks(d)
        ok &= good
        lines.extend(more)
    result = "PASS" if ok else "FAIL"
    text = "\n".join(lines) + "\n\nResult: " + result + "\n"
    print(text)
    if "--record" in sys.argv:
        head = ("# Last run of tests/onnx/run_exported.py\n\nonnx %s, onnxruntime %s (from PyPI), "
                "modelzip debug build at %s.\n\n" % (onnx.__version__, ort.__version__, commit()))
        open(os.path.join(HERE, "last_run.md"), "w").write(head + text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
