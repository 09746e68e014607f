"""Import memory figures (docs/RELIABILITY.md, "Import memory").

  python bench/import_memory.py make KIND PATH    # with the producer's Python
  python3 bench/import_memory.py peak CMD ARGS... # peak RssAnon / VmHWM of a command

KIND: onnx-ext (PATH.onnx + PATH.onnx.data), onnx-inline, st (one file), st-sharded
(PATH is a directory), tf (a frozen .pb), paddle (PATH.pdmodel + PATH.pdiparams, with
FLAGS_enable_pir_api=0). Inputs hold MIB (default 512) MiB of FP32 in 64 MiB tensors.
`peak` samples /proc/PID/status every 2 ms: RssAnon is the process's own memory (not the
file-backed pages of what it maps), VmHWM its peak resident size with those pages.
"""
import json
import os
import subprocess
import sys
import time


def make(kind, out):
    import numpy as np

    N = int(os.environ.get("MIB", "512")) // 64   # tensors of 64 MiB
    def arr(i):
        a = np.arange(4096*4096, dtype=np.float32).reshape(4096, 4096)
        a += i * 0.5
        return a
    if kind in ("onnx-ext", "onnx-inline"):
        import onnx
        from onnx import helper, numpy_helper, TensorProto
        inits = [numpy_helper.from_array(arr(i), f"w{i}") for i in range(N)]
        nodes = []; prev = "x"
        for i in range(N):
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"])); prev = f"h{i}"
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4096])], inits)
        m = helper.make_model(g)
        if kind == "onnx-ext":
            onnx.save_model(m, out, save_as_external_data=True, all_tensors_to_one_file=True, location=os.path.basename(out) + ".data", size_threshold=0)
        else:
            onnx.save_model(m, out)
    elif kind == "st":
        from safetensors.numpy import save_file
        save_file({f"w{i}": arr(i) for i in range(N)}, out)
    elif kind == "st-sharded":
        from safetensors.numpy import save_file
        os.makedirs(out, exist_ok=True)
        per = 2; shards = (N + per - 1) // per; wm = {}
        for s in range(shards):
            name = f"model-{s+1:05d}-of-{shards:05d}.safetensors"
            d = {f"w{i}": arr(i) for i in range(s*per, min(N, (s+1)*per))}
            save_file(d, os.path.join(out, name))
            for k in d: wm[k] = name
        json.dump({"metadata": {"total_size": N*64<<20}, "weight_map": wm}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
    elif kind == "tf":
        import tensorflow as tf
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [1, 4096], name="x")
            h = x
            for i in range(N):
                h = tf.matmul(h, tf.constant(arr(i), name=f"w{i}"))
            tf.identity(h, name="y")
        open(out, "wb").write(g.as_graph_def().SerializeToString())
    elif kind == "paddle":
        os.environ["FLAGS_enable_pir_api"] = "0"
        import paddle
        paddle.enable_static()
        main, start = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, start):
            x = paddle.static.data("x", [1, 4096], "float32")
            h = x
            for i in range(N):
                h = paddle.static.nn.fc(h, 4096, bias_attr=False)
        exe = paddle.static.Executor(paddle.CPUPlace()); exe.run(start)
        paddle.static.save_inference_model(out, [x], [h], exe, program=main)


def peak(cmd):
    def field(s, k):
        for line in s.splitlines():
            if line.startswith(k):
                return int(line.split()[1])
        return 0

    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    anon = hwm = 0
    t0 = time.time()
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                s = f.read()
            anon = max(anon, field(s, "RssAnon:"))
            hwm = max(hwm, field(s, "VmHWM:"))
        except OSError:
            pass
        time.sleep(0.002)
    err = p.stderr.read().decode()
    print(f"rc={p.returncode} peak_RssAnon={anon / 1024:.0f}MiB VmHWM={hwm / 1024:.0f}MiB "
          f"wall={time.time() - t0:.1f}s", err[-300:] if p.returncode else "")


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"] and len(sys.argv) == 4:
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["peak"] and len(sys.argv) > 2:
        peak(sys.argv[2:])
    else:
        sys.exit(__doc__)
