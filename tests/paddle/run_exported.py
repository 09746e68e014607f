#!/usr/bin/env python3
"""Run exported Paddle inference models beside the originals they came from, in one process.

    python run_exported.py [--tol 1e-5] PREFIX ORIGINAL INPUT.npy RECORDED.npy [...]

For each quadruple: loads PREFIX.pdmodel + PREFIX.pdiparams (the export) and
ORIGINAL.pdmodel + ORIGINAL.pdiparams (the files Paddle wrote) with
paddle.static.load_inference_model, each in a fresh scope, feeds INPUT.npy to the
program's single feed, runs both on the CPU and compares the first fetches:

- the export's output must equal the original's bit for bit (the same program and
  weights, run by the same Paddle on the same CPU with one thread);
- the original's output must be near RECORDED.npy, the output Paddle computed when the
  fixture was made (possibly on another CPU, whose summation order differs): a loose
  sanity check, max |original - recorded| <= --tol x max |recorded|.

Paddle runs with one thread (OMP_NUM_THREADS, MKL_NUM_THREADS and its math library's
thread count set to 1 below, before Paddle loads): a reduction's order is then fixed.
Prints one line per model:

    PREFIX max_abs_diff=<export vs original> recorded_rel=<original vs recorded> shape=<s> paddle=<version> ok|MISMATCH|ERROR ...

Exit status: 0 when every model loads, runs and passes both checks; 1 when some output
differs; 2 when some model cannot be loaded or run. Several models share one Python
process because importing Paddle takes seconds. Not part of `cargo test`:
tests/paddle/acceptance.sh and zoo_check.sh run it.
"""
import argparse
import os
import sys

# Before `import paddle`: Paddle 3.x loads legacy ProgramDesc .pdmodel files only with it.
os.environ.setdefault("FLAGS_enable_pir_api", "0")
os.environ.setdefault("GLOG_minloglevel", "2")
# One thread: the same program reduces in the same order on every run.
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import warnings

warnings.filterwarnings("ignore")


def run(paddle, np, exe, prefix, x):
    scope = paddle.base.core.Scope()  # fresh: nothing left from other models
    with paddle.static.scope_guard(scope):
        prog, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
        if len(feeds) != 1:
            raise ValueError("the program has %d feeds, expected 1: %s" % (len(feeds), feeds))
        return np.asarray(exe.run(prog, feed={feeds[0]: x}, fetch_list=fetches)[0])


def run_one(paddle, np, exe, prefix, original, input_path, recorded_path, tol):
    """Returns (status, line): status 0 ok, 1 mismatch, 2 error."""
    x = np.load(input_path)
    try:
        want = run(paddle, np, exe, original, x)
        got = run(paddle, np, exe, prefix, x)
    except Exception as e:  # report Paddle's own error in one line
        return 2, "%s ERROR cannot load or run: %s" % (prefix, str(e).replace("\n", " ")[:400])
    rec = np.load(recorded_path)
    if got.shape != want.shape or got.dtype != want.dtype or want.shape != rec.shape:
        return 1, "%s max_abs_diff=nan shape=%s paddle=%s MISMATCH original %s %s, recorded %s" % (
            prefix, list(got.shape), paddle.__version__, list(want.shape), want.dtype, list(rec.shape))
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    scale = float(np.max(np.abs(rec))) if rec.size else 0.0
    rel = float(np.max(np.abs(want.astype(np.float64) - rec.astype(np.float64)))) / (scale or 1.0) if rec.size else 0.0
    identical = got.tobytes() == want.tobytes()
    ok = identical and rel <= tol
    why = [] if ok else (["export differs from the original"] if not identical else []) + (
        ["original far from the recorded output (tol %g)" % tol] if rel > tol else [])
    return (0 if ok else 1), "%s max_abs_diff=%.3g recorded_rel=%.3g shape=%s paddle=%s %s" % (
        prefix, diff, rel, list(got.shape), paddle.__version__, "ok" if ok else "MISMATCH: " + ", ".join(why))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="max |original - recorded| / max |recorded| (default 1e-5)")
    ap.add_argument("cases", nargs="+", metavar="PREFIX ORIGINAL INPUT.npy RECORDED.npy",
                    help="one or more quadruples")
    args = ap.parse_args()
    if len(args.cases) % 4:
        ap.error("arguments come in fours: PREFIX ORIGINAL INPUT.npy RECORDED.npy")

    import numpy as np
    import paddle

    paddle.base.core.set_num_threads(1)
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    worst = 0
    for i in range(0, len(args.cases), 4):
        status, line = run_one(paddle, np, exe, *args.cases[i:i + 4], args.tol)
        print(line, flush=True)
        worst = max(worst, status)
    return worst


if __name__ == "__main__":
    sys.exit(main())
