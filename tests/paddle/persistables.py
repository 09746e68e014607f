#!/usr/bin/env python3
"""Write a model's parameters as a persistables directory, with Paddle itself.

Usage: persistables.py PREFIX OUTDIR

Loads PREFIX.pdmodel + PREFIX.pdiparams with paddle.static.load_inference_model and
saves every persistable variable as its own LoDTensor file (the `save` op) under
OUTDIR, as `modelzip pack` reads them. Used by variants_acceptance.sh.
"""
import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"
os.environ.setdefault("GLOG_minloglevel", "2")

import paddle  # noqa: E402


def main():
    prefix, out = sys.argv[1], sys.argv[2]
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    prog, _, _ = paddle.static.load_inference_model(prefix, exe)
    paddle.static.save_vars(exe, out, prog, predicate=paddle.static.io.is_persistable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
