#!/usr/bin/env python3
"""Aggregate write throughput of a sharded save (issue 25), as ratios in one run.

    target/venv/bin/python bench/sharded_bench.py [--gib 4] [--ranks 8] [--reps 3] [--dir D]

Three ways to write the same `--gib` GiB (20 float32 tensors of equal size, their rows
split over `--ranks` processes), alternated in one run, each timed from the moment every
process holds its data in memory (a barrier) to the moment the last one returns:

- **sharded**: `--ranks` processes, `modelzip.sharded.save` of their rows into one tag of
  one archive (positioned writes, per-shard CRC-32 and SHA-256, fsync, markers, commit);
- **dcp-like**: `--ranks` processes, each `numpy.save` of its rows of each tensor into a
  file of its own, then fsync of its files (torch distributed checkpoint's layout: one
  file per rank; DCP fsyncs by default too);
- **single**: one process, `modelzip.save` of the 20 whole tensors into a new archive
  (the rows concatenated first, outside the timing).

The data is random bytes (made once per process before the barrier); the files are
deleted between runs. Prints every run, the medians and the ratios, the load average and
the machine's cores. Needs the Python package in the venv (./test.sh installs it in
target/venv). Nothing here asserts a duration.
"""
import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

TENSORS = 20
COLS = 1024


def rows_total(gib: float) -> int:
    per_tensor = int(gib * (1 << 30)) // TENSORS
    return per_tensor // (COLS * 4)


def shard(rank: int, world: int, rows: int) -> dict:
    """This rank's rows of every tensor (random float32 bits, made here)."""
    import modelzip.sharded as zs

    rng = np.random.default_rng(rank)
    out = {}
    for i in range(TENSORS):
        a, b = zs.row_range(rows, rank, world)
        data = rng.integers(0, 2**32, size=(b - a, COLS), dtype=np.uint32).view(np.float32)
        out[f"layer{i:02d}.w"] = (data, a)
    return out


def worker(mode: str, where: str, rank: int, world: int, rows: int, barrier, done) -> None:
    import modelzip.sharded as zs

    mine = shard(rank, world, rows)
    barrier.wait()
    if mode == "sharded":
        shards = {n: (d, a, (rows, COLS)) for n, (d, a) in mine.items()}
        zs.save(where, "step-1", rank, world, shards, timeout=600)
    else:
        d = Path(where)
        paths = []
        for n, (data, _) in mine.items():
            p = d / f"{n}.rank{rank}.npy"
            np.save(p, data)
            paths.append(p)
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    done.put(time.perf_counter())


def run_parallel(mode: str, where: Path, world: int, rows: int) -> float:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(world + 1)
    done = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(mode, str(where), r, world, rows, barrier, done))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    ends = [done.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
        assert p.exitcode == 0, (mode, p.exitcode)
    return max(ends) - start


def single_worker(where: str, world: int, rows: int, barrier, done) -> None:
    import modelzip

    parts = [shard(r, world, rows) for r in range(world)]
    arrays = {n: np.concatenate([p[n][0] for p in parts]) for n in parts[0]}
    del parts
    barrier.wait()
    modelzip.save(where, "step-1", arrays)
    done.put(time.perf_counter())


def run_single(where: Path, world: int, rows: int) -> float:
    ctx = mp.get_context("spawn")
    barrier, done = ctx.Barrier(2), ctx.Queue()
    p = ctx.Process(target=single_worker, args=(str(where), world, rows, barrier, done))
    p.start()
    barrier.wait()
    start = time.perf_counter()
    end = done.get(timeout=1800)
    p.join()
    assert p.exitcode == 0, p.exitcode
    return end - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default="/work/benchdata/sharded")
    args = ap.parse_args()
    base = Path(args.dir)
    rows = rows_total(args.gib)
    size = rows * COLS * 4 * TENSORS
    print(f"{size / (1 << 30):.2f} GiB in {TENSORS} tensors of {rows} x {COLS} float32; "
          f"{args.ranks} ranks; {os.cpu_count()} cores; {args.reps} runs each", flush=True)
    times = {"sharded": [], "dcp-like": [], "single": []}
    for rep in range(args.reps):
        for mode in times:
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir(parents=True)
            if mode == "sharded":
                t = run_parallel(mode, base / "run.zip", args.ranks, rows)
            elif mode == "dcp-like":
                t = run_parallel(mode, base, args.ranks, rows)
            else:
                t = run_single(base / "run.zip", args.ranks, rows)
            times[mode].append(t)
            print(f"run {rep + 1} {mode:9s} {t:7.2f} s  {size / t / 1e9:5.2f} GB/s", flush=True)
    shutil.rmtree(base, ignore_errors=True)
    med = {m: statistics.median(v) for m, v in times.items()}
    print()
    for m, t in med.items():
        print(f"median {m:9s} {t:7.2f} s  {size / t / 1e9:5.2f} GB/s")
    print(f"sharded / dcp-like: {med['sharded'] / med['dcp-like']:.2f}x")
    print(f"sharded / single:   {med['sharded'] / med['single']:.2f}x")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
