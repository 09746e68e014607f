"""The training-loop examples run, get killed with SIGKILL, resume, and end bit-identical."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest

from conftest import REPO, run_cli

EXAMPLES = REPO / "examples" / "python"


def run(script: str, *args: object, timeout: float = 600) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def final_line(out: str) -> str:
    lines = [l for l in out.splitlines() if l.startswith("done ")]
    assert lines, out
    return lines[-1]


def run_and_kill(script: str, args: list, after_saves: int, jitter: float) -> None:
    """Starts the script, waits for `after_saves` "saved" lines plus a random delay, and
    kills it with SIGKILL (possibly in the middle of a save)."""
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = 0
    try:
        for line in proc.stdout:
            if " saved" in line:
                seen += 1
                if seen >= after_saves:
                    break
            if line.startswith("done "):
                pytest.fail("the run finished before it could be killed")
        import time

        time.sleep(jitter)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_numpy_checkpoint_loop_survives_sigkill_bit_identical(tmp):
    args = ["--steps", 240, "--every", 10]
    reference = final_line(run("checkpoint_loop.py", "--archive", tmp / "ref.zip", *args))
    killed = tmp / "killed.zip"
    rng = random.Random(5)
    for kills, after in enumerate((3, 2, 4), start=1):
        run_and_kill(
            "checkpoint_loop.py",
            ["--archive", killed, *args, "--sleep", 0.002],
            after_saves=after,
            jitter=rng.uniform(0, 0.02),
        )
        assert run_cli("verify", killed).returncode == 0, f"after kill {kills}"
    out = run("checkpoint_loop.py", "--archive", killed, *args)
    assert "resumed from step-" in out
    assert final_line(out) == reference
    # the retention policy held throughout: last 3 + best 1 (here the same tags)
    tags = [t["name"] for t in __import__("json").loads(run_cli("tags", killed, "--json").stdout)["tags"]]
    assert tags[-1] == "step-000000240" and 3 <= len(tags) <= 4


def test_async_saves_resume_bit_identical(tmp):
    args = ["--steps", 120, "--every", 7, "--async-save"]
    reference = final_line(run("checkpoint_loop.py", "--archive", tmp / "ref.zip", *args))
    killed = tmp / "killed.zip"
    run_and_kill("checkpoint_loop.py", ["--archive", killed, *args, "--sleep", 0.002], 5, 0.005)
    out = run("checkpoint_loop.py", "--archive", killed, *args)
    assert final_line(out) == reference


def paddle_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("paddle") is not None


@pytest.mark.skipif(
    not paddle_available() and os.environ.get("MODELZIP_REQUIRE_PADDLE") != "1",
    reason="paddlepaddle is not installed (./test.sh installs it)",
)
def test_paddle_training_example(tmp):
    args = ["--workdir", tmp / "work", "--steps", 60, "--every", 10]
    reference = final_line(run("paddle_train.py", *args, "--archive", tmp / "ref.zip"))
    killed = tmp / "killed.zip"
    run_and_kill("paddle_train.py", [*args, "--archive", killed, "--sleep", 0.01], 2, 0.01)
    out = run("paddle_train.py", *args, "--archive", killed)
    assert "resumed from step-" in out
    last = final_line(out)
    assert last.split(" int8")[0] == reference.split(" int8")[0]
    # the INT8 variant exported and run by Paddle within 3e-2 of FP32
    assert "int8-max-abs-diff=" in last
    diff = float(last.split("int8-max-abs-diff=")[1].split()[0])
    assert diff <= 3e-2, last
