#!/usr/bin/env python3
"""Run a model with Paddle and compare its output with an expected .npy.

Usage:
  run_variants.py MODEL INPUT.npy EXPECTED.npy TOLERANCE

MODEL is either a directory written by `modelzip extract` (`__model__` plus one
LoDTensor file per parameter; loaded the legacy way with model_filename='__model__'
and params_filename=None) or a `.pdmodel`/`.pdiparams` path prefix.
TOLERANCE bounds the max abs diff divided by the expected output's max |value|.

Prints one JSON line {"model", "paddle", "max_abs", "max_rel", "range", "tolerance",
"pass"} and exits 0 when within tolerance, 1 when not, 2 on error.
Not part of `cargo test`; run by tests/paddle/variants_acceptance.sh.
"""
import json
import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"  # ProgramDesc, not PIR, in Paddle 3.x
os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    model, inp, expected, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    if os.path.isdir(model):
        prog, feeds, fetches = paddle.static.load_inference_model(
            model, exe, model_filename="__model__", params_filename=None)
    else:
        prog, feeds, fetches = paddle.static.load_inference_model(model, exe)
    x = np.load(inp)
    want = np.load(expected)
    (got,) = exe.run(prog, feed={feeds[0]: x}, fetch_list=fetches)
    got = np.asarray(got)
    if got.shape != want.shape:
        print(f"shape {got.shape} != expected {want.shape}", file=sys.stderr)
        return 2
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    rng = float(np.max(np.abs(want))) or 1.0
    max_abs = float(diff.max())
    ok = bool(np.isfinite(max_abs) and max_abs / rng <= tol)
    print(json.dumps({"model": model, "paddle": paddle.__version__, "max_abs": max_abs,
                      "max_rel": max_abs / rng, "range": rng, "tolerance": tol, "pass": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
