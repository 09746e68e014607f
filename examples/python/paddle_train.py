"""A real Paddle 3 dygraph training loop that checkpoints into modelzip, resumes after a
kill bit-identical, and ends with FP32 and INT8 variants of the model in the archive.

A small MLP is trained with Adam on synthetic data. Every --every steps,
``model.state_dict()`` and the optimizer state (Adam's moment1, moment2 and beta-power
accumulators, grouped per parameter) become a checkpoint tag; the Checkpointer keeps the
last 3. Killed and restarted, the loop resumes from the newest checkpoint and ends with
parameters bit-identical to an uninterrupted run (each step's batch is seeded by the
step number). At the end the model is exported with ``paddle.jit.save``, imported as tag
``fp32``, quantized into tag ``int8`` (per-channel INT8 weights; biases shared), and the
INT8 variant is exported with ``modelzip.export_paddle`` and run by Paddle's inference
loader next to the FP32 one.

    python examples/python/paddle_train.py --archive run.zip --workdir out/
"""

from __future__ import annotations

import os

# The .pdmodel (ProgramDesc) files this example exports and loads need the legacy IR.
os.environ.setdefault("FLAGS_enable_pir_api", "0")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")
import paddle  # noqa: E402

import modelzip  # noqa: E402

IN, HIDDEN, OUT, BATCH = 16, 64, 4, 32
ACCUMULATORS = ("moment1_0", "moment2_0", "beta1_pow_acc_0", "beta2_pow_acc_0")


def build():
    paddle.seed(0)
    model = paddle.nn.Sequential(
        paddle.nn.Linear(IN, HIDDEN), paddle.nn.ReLU(), paddle.nn.Linear(HIDDEN, OUT)
    )
    opt = paddle.optimizer.Adam(learning_rate=1e-2, parameters=model.parameters())
    return model, opt


def batch(step: int):
    rng = np.random.default_rng(step)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    w = np.random.default_rng(0).standard_normal((IN, OUT)).astype(np.float32)
    return x, np.tanh(x @ w)


def snapshot(model, opt):
    """The checkpoint's params and updater state as numpy arrays."""
    params = {k: v.numpy() for k, v in model.state_dict().items()}
    state = opt.state_dict()
    updater = {}
    for key, p in model.state_dict().items():
        names = [f"{p.name}_{acc}" for acc in ACCUMULATORS]
        if all(n in state for n in names):
            updater[key] = [state[n].numpy() for n in names]
    return params, updater


def restore(model, opt, ckpt) -> None:
    model.set_state_dict({k: paddle.to_tensor(v) for k, v in ckpt.params.items()})
    sd = model.state_dict()
    state = {}
    for key, arrays in ckpt.updater.items():
        for acc, arr in zip(ACCUMULATORS, arrays):
            state[f"{sd[key].name}_{acc}"] = paddle.to_tensor(arr)
    opt.set_state_dict(state)


def export_and_compare(model, archive: Path, workdir: Path) -> float:
    """FP32 and INT8 tags in the archive; Paddle runs both exports; max |INT8 - FP32|."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = [paddle.static.InputSpec([None, IN], "float32", "x")]
    paddle.jit.save(model, str(workdir / "mlp"), input_spec=spec)
    with modelzip.open(archive) as ar:
        have = {t.lower() for t in ar.tags}
    if "fp32" not in have:
        modelzip.import_paddle(archive, "fp32", workdir / "mlp.pdmodel", workdir / "mlp.pdiparams")
    if "int8" not in have:
        modelzip.quantize(archive, "fp32", "int8", per_channel=True)
    outputs = {}
    x = batch(10**6)[0]
    paddle.enable_static()
    try:
        exe = paddle.static.Executor(paddle.CPUPlace())
        for tag in ("fp32", "int8"):
            prefix = workdir / f"export_{tag}"
            modelzip.export_paddle(archive, tag, prefix, overwrite=True)
            program, feeds, fetches = paddle.static.load_inference_model(str(prefix), exe)
            (outputs[tag],) = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches)
    finally:
        paddle.disable_static()
    return float(np.max(np.abs(outputs["int8"] - outputs["fp32"])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archive", required=True, type=Path)
    ap.add_argument("--workdir", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds per step (for kill tests)")
    args = ap.parse_args(argv)

    model, opt = build()
    ck = modelzip.Checkpointer(args.archive, keep_last=3)
    start = 0
    latest = ck.latest()
    if latest is not None:
        restore(model, opt, latest)
        start = latest.step
        print(f"resumed from {latest.tag} (step {start})", flush=True)

    loss_value = float("nan")
    for step in range(start + 1, args.steps + 1):
        x, y = batch(step)
        loss = paddle.nn.functional.mse_loss(model(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        opt.step()
        opt.clear_grad()
        loss_value = float(loss)
        if step % args.every == 0 or step == args.steps:
            params, updater = snapshot(model, opt)
            ck.save(step, params, updater, metrics={"loss": loss_value})
            print(f"step {step} saved loss={loss_value:.6f}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)

    params, _ = snapshot(model, opt)
    digest = hashlib.sha256(b"".join(params[k].tobytes() for k in sorted(params))).hexdigest()
    diff = export_and_compare(model, args.archive, args.workdir / args.archive.stem)
    print(
        f"done step={args.steps} params-sha256={digest} int8-max-abs-diff={diff:.3e}", flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
