"""Paddle side of bench/compare.py (run with the Paddle venv's python).

  paddle_params.py make PREFIX MIB     save_inference_model of an MLP with MIB MiB of FP32
                                       parameters: PREFIX.pdmodel + PREFIX.pdiparams
  paddle_params.py load PREFIX REPS    time paddle.static.load_inference_model (program +
                                       every parameter into a fresh scope); one JSON line
"""
import json
import os
import sys
import time

os.environ.setdefault("FLAGS_enable_pir_api", "0")
import numpy as np  # noqa: E402
import paddle  # noqa: E402

paddle.enable_static()


def make(prefix, mib):
    width = 1024  # each fc weight: 1024 x 1024 FP32 = 4 MiB, bias 4 KiB
    layers = max(1, mib // 4)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, width], "float32")
        h = x
        for _ in range(layers):
            h = paddle.static.nn.fc(h, width)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle.static.save_inference_model(prefix, [x], [h], exe, program=main)
    print(json.dumps({"cmd": "paddle-make", "bytes": os.path.getsize(prefix + ".pdiparams")}))


def load(prefix, reps):
    exe = paddle.static.Executor(paddle.CPUPlace())
    secs = []
    for _ in range(reps):
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            t = time.perf_counter()
            prog, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
            # Touch one parameter so the load is complete, not lazy.
            names = [v.name for v in prog.list_vars()
                     if v.persistable and v.name not in ("feed", "fetch")]
            nbytes = sum(np.array(scope.find_var(n).get_tensor()).nbytes for n in names[:1])
            assert nbytes > 0
            secs.append(time.perf_counter() - t)
        del scope
    print(json.dumps({"cmd": "paddle-load", "secs": secs}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]))
    elif cmd == "load":
        load(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {cmd}")
