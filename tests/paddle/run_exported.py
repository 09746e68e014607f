#!/usr/bin/env python3
"""Run exported Paddle inference models and compare their outputs with expected ones.

    python run_exported.py [--tol 1e-6] PREFIX INPUT.npy EXPECTED.npy [PREFIX INPUT.npy EXPECTED.npy ...]

For each triple: loads PREFIX.pdmodel + PREFIX.pdiparams with
paddle.static.load_inference_model (in a fresh scope), feeds INPUT.npy to the program's
single feed, runs it on the CPU and compares the first fetch with EXPECTED.npy. Prints one
line per model:

    PREFIX max_abs_diff=<x> shape=<s> paddle=<version> ok|MISMATCH|ERROR ...

Exit status: 0 when every model loads, runs, has the expected shape and a max abs
difference <= --tol; 1 when some output differs; 2 when some model cannot be loaded or run.
Several triples share one Python process because importing Paddle takes seconds.
Not part of `cargo test`: tests/paddle/acceptance.sh runs it.
"""
import argparse
import os
import sys

# Before `import paddle`: Paddle 3.x loads legacy ProgramDesc .pdmodel files only with it.
os.environ.setdefault("FLAGS_enable_pir_api", "0")
os.environ.setdefault("GLOG_minloglevel", "2")

import warnings

warnings.filterwarnings("ignore")


def run_one(paddle, np, exe, prefix, input_path, expected_path, tol):
    """Returns (status, line): status 0 ok, 1 mismatch, 2 error."""
    try:
        scope = paddle.base.core.Scope()  # fresh: nothing left from other models
        with paddle.static.scope_guard(scope):
            prog, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
            if len(feeds) != 1:
                return 2, "%s ERROR the program has %d feeds, expected 1: %s" % (prefix, len(feeds), feeds)
            out = exe.run(prog, feed={feeds[0]: np.load(input_path)}, fetch_list=fetches)[0]
    except Exception as e:  # report Paddle's own error in one line
        return 2, "%s ERROR cannot load or run: %s" % (prefix, str(e).replace("\n", " ")[:400])
    got = np.asarray(out)
    want = np.load(expected_path)
    if got.shape != want.shape:
        return 1, "%s max_abs_diff=nan shape=%s paddle=%s MISMATCH expected shape %s" % (
            prefix, list(got.shape), paddle.__version__, list(want.shape))
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    ok = diff <= tol
    return (0 if ok else 1), "%s max_abs_diff=%.3g shape=%s paddle=%s %s" % (
        prefix, diff, list(got.shape), paddle.__version__, "ok" if ok else "MISMATCH (tol %g)" % tol)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tol", type=float, default=1e-6, help="max abs difference allowed (default 1e-6)")
    ap.add_argument("cases", nargs="+", metavar="PREFIX INPUT.npy EXPECTED.npy",
                    help="one or more triples")
    args = ap.parse_args()
    if len(args.cases) % 3:
        ap.error("arguments come in triples: PREFIX INPUT.npy EXPECTED.npy")

    import numpy as np
    import paddle

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    worst = 0
    for i in range(0, len(args.cases), 3):
        status, line = run_one(paddle, np, exe, *args.cases[i:i + 3], args.tol)
        print(line, flush=True)
        worst = max(worst, status)
    return worst


if __name__ == "__main__":
    sys.exit(main())
