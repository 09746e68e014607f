#!/usr/bin/env python3
"""Run a variant with Paddle beside the FP32 model it was derived from, in one process.

Usage:
  run_variants.py MODEL ORIGINAL INPUT.npy RECORDED.npy TOLERANCE

MODEL is either a directory written by `modelzip extract` (`__model__` plus one
LoDTensor file per parameter; loaded the legacy way with model_filename='__model__'
and params_filename=None) or a `.pdmodel`/`.pdiparams` path prefix.
ORIGINAL is the `.pdmodel`/`.pdiparams` prefix of the FP32 fixture Paddle wrote; it runs
in the same process, on the same CPU, with one thread, and its output is the reference:
TOLERANCE bounds max |variant - original| / max |original|. RECORDED.npy, the output
computed when the fixture was made (maybe on another CPU), is a loose sanity check of the
original's output only: within 1e-5 of its largest magnitude.

Prints one JSON line {"model", "paddle", "max_abs", "max_rel", "range", "tolerance",
"recorded_rel", "pass"} and exits 0 when both checks pass, 1 when not, 2 on error.
Not part of `cargo test`; run by tests/paddle/variants_acceptance.sh.
"""
import json
import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"  # ProgramDesc, not PIR, in Paddle 3.x
os.environ.setdefault("GLOG_minloglevel", "2")
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"  # one thread: a fixed reduction order

import numpy as np  # noqa: E402
import paddle  # noqa: E402


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    model, original, inp, recorded, tol = sys.argv[1:5] + [float(sys.argv[5])]
    paddle.base.core.set_num_threads(1)
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    x = np.load(inp)

    def run(path):
        scope = paddle.base.core.Scope()  # fresh: nothing left from the other model
        with paddle.static.scope_guard(scope):
            if os.path.isdir(path):
                prog, feeds, fetches = paddle.static.load_inference_model(
                    path, exe, model_filename="__model__", params_filename=None)
            else:
                prog, feeds, fetches = paddle.static.load_inference_model(path, exe)
            (out,) = exe.run(prog, feed={feeds[0]: x}, fetch_list=fetches)
            return np.asarray(out).astype(np.float64)

    want = run(original)
    got = run(model)
    rec = np.load(recorded).astype(np.float64)
    if got.shape != want.shape or rec.shape != want.shape:
        print(f"shape {got.shape} != original {want.shape} (recorded {rec.shape})", file=sys.stderr)
        return 2
    rng = float(np.max(np.abs(want))) or 1.0
    max_abs = float(np.abs(got - want).max())
    recorded_rel = float(np.abs(want - rec).max()) / (float(np.max(np.abs(rec))) or 1.0)
    ok = bool(np.isfinite(max_abs) and max_abs / rng <= tol and recorded_rel <= 1e-5)
    print(json.dumps({"model": model, "paddle": paddle.__version__, "max_abs": max_abs,
                      "max_rel": max_abs / rng, "range": rng, "tolerance": tol,
                      "recorded_rel": recorded_rel, "pass": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
