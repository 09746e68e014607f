"""Writes a paddle.vision model (resnet18 or mobilenet_v2, 10 classes, 64x64 input,
random init) as a legacy inference model NAME.pdmodel + NAME.pdiparams in the current
directory, with a fixed input and the output Paddle computes for it (NAME.input.npy,
NAME.output.npy). Used by tests/paddle/zoo_check.sh; not part of cargo test.

    python zoo_models.py resnet|mobilenet
"""
import os, sys
os.environ["FLAGS_enable_pir_api"] = "0"
import numpy as np, paddle
paddle.enable_static()
from paddle.vision.models import resnet18, mobilenet_v2
name = sys.argv[1]
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    x = paddle.static.data("x", [-1, 3, 64, 64], "float32")
    m = resnet18(num_classes=10) if name == "resnet" else mobilenet_v2(num_classes=10)
    m.eval()
    y = m(x)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle.static.save_inference_model(name, [x], [y], exe, program=main.clone(for_test=True))
inp = np.random.RandomState(0).rand(2, 3, 64, 64).astype("float32")
prog, feeds, fetches = paddle.static.load_inference_model(name, exe)
out = exe.run(prog, feed={feeds[0]: inp}, fetch_list=fetches)[0]
np.save(name + ".input.npy", inp); np.save(name + ".output.npy", out)
print(name, out.shape)
