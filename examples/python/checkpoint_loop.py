"""A numpy-only training loop that checkpoints into one modelzip archive and resumes.

Linear regression trained with Adam on synthetic data. Every --every steps the
parameters, the Adam state (m, v per parameter, and the step counter) and the loss go
into a new tag of --archive; the Checkpointer keeps the last 3 and the best one by loss.
Run it, kill it at any instant (even with SIGKILL during a save), run it again: it
resumes from the newest checkpoint and ends with parameters bit-identical to a run that
was never interrupted, because every step's batch is drawn from a generator seeded by
the step number.

    python examples/python/checkpoint_loop.py --archive run.zip --steps 300

--archive may be an s3:// URL (credentials and endpoint from the environment, as for
every modelzip command): each checkpoint is then appended to the object where it lies,
and each "saved" line says how many bytes that save uploaded.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import numpy as np

import modelzip

FEATURES = 32
BATCH = 64
LR, BETA1, BETA2, EPS = 1e-2, 0.9, 0.999, 1e-8


def true_weights() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(FEATURES)


def batch(step: int):
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((BATCH, FEATURES))
    y = x @ true_weights() + 0.5 + 0.01 * rng.standard_normal(BATCH)
    return x, y


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archive", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds per step (for kill tests)")
    ap.add_argument("--async-save", action="store_true", help="use save_async")
    args = ap.parse_args(argv)

    ck = modelzip.Checkpointer(args.archive, keep_last=3, keep_best=("loss", "min", 1))
    resumed = ck.latest()
    if resumed is None:
        start = 0
        params = {"w": np.zeros(FEATURES), "b": np.zeros(1)}
        state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in params.items()}
    else:
        start = resumed.step
        params = {k: v.copy() for k, v in resumed.params.items()}
        state = {k: [a.copy() for a in arrays] for k, arrays in resumed.updater.items()}
        print(f"resumed from {resumed.tag} (step {start})", flush=True)

    for step in range(start + 1, args.steps + 1):
        x, y = batch(step)
        err = x @ params["w"] + params["b"][0] - y
        loss = float(np.mean(err**2))
        grads = {"w": 2 * x.T @ err / BATCH, "b": np.array([2 * err.mean()])}
        for k, g in grads.items():
            m, v = state[k]
            m[:] = BETA1 * m + (1 - BETA1) * g
            v[:] = BETA2 * v + (1 - BETA2) * g * g
            m_hat = m / (1 - BETA1**step)
            v_hat = v / (1 - BETA2**step)
            params[k] -= LR * m_hat / (np.sqrt(v_hat) + EPS)
        if step % args.every == 0 or step == args.steps:
            if args.async_save:
                ck.save_async(step, params, state, metrics={"loss": loss})
                print(f"step {step} saved loss={loss:.6f}", flush=True)
            else:
                report = ck.save(step, params, state, metrics={"loss": loss})
                # An s3:// archive: what this save sent (the rest was copied by the store).
                sent = f" uploaded={report['bytes_uploaded']}" if "bytes_uploaded" in report else ""
                print(f"step {step} saved loss={loss:.6f}{sent}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    ck.wait()
    digest = hashlib.sha256(params["w"].tobytes() + params["b"].tobytes()).hexdigest()
    print(f"done step={args.steps} loss={loss:.6f} params-sha256={digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
