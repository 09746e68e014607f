#!/usr/bin/env python3
"""The Python package against safetensors' Python API, on the same data, in one process.

    python bench/python_bench.py --st L.safetensors --dir DATA [--reps 5] [--rust-save SECS]

Run with a Python that has `modelzip` (pip install ./python), `safetensors` and numpy;
bench/compare.py runs it (the PY rows, on K) and adds the rows to its table. Reports
JSON on stdout: medians of --reps repetitions, modelzip and its peer alternating.

Reads (the tensors of --st, saved once by modelzip.save as one tag):
  mz_views      modelzip.open + every tensor as a numpy array (views of the map) + close
  st_load       safetensors.numpy.load_file (copies every tensor)
  st_open       safetensors.safe_open(framework="np") + get_tensor of each name
  *_sum         the same, then arr.sum() of every array (every byte read)
Saves (the same arrays, in memory):
  mz_save       modelzip.save of one tag (SHA-256 manifest, fsync, rename)
  st_save       safetensors.numpy.save_file + fsync of the file and its directory
  st_save_sha   the same, then SHA-256 of the file read back (hashlib, 1 MiB reads): what a
                safetensors user who wants integrity does; timed with st_save, in one pair
                with mz_save (pairs alternate which goes first)
Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import modelzip


def timed(fn):
    gc.collect()
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(path.parent, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def total(arrays) -> float:
    s = 0.0
    for a in arrays:
        s += float(a.sum(dtype=np.float64 if a.dtype.kind == "f" else None))
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--st", type=Path, required=True, help="a .safetensors file (the data)")
    ap.add_argument("--dir", type=Path, required=True, help="scratch directory")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    arrays = load_file(str(args.st))
    nbytes = sum(a.nbytes for a in arrays.values())
    mzp = args.dir / "py.mz"
    stp = args.dir / "py.safetensors"
    R = {"bytes": nbytes, "tensors": len(arrays)}
    for k in ("mz_save", "st_save", "st_save_sha", "mz_views", "st_load", "st_open",
              "mz_views_sum", "st_load_sum", "st_open_sum"):
        R[k] = []

    def st_save():
        save_file(arrays, str(stp))
        fsync_path(stp)

    def sha256_file(path: Path) -> str:
        h = hashlib.sha256()
        with open(path, "rb", buffering=0) as fh:
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            while n := fh.readinto(buf):
                h.update(view[:n])
        return h.hexdigest()

    def mz_one():
        os.sync()
        R["mz_save"].append(timed(lambda: modelzip.save(mzp, "t", arrays))[0])
        mzp.unlink()

    def st_one():
        os.sync()
        secs = timed(st_save)[0]
        secs_sha = timed(lambda: sha256_file(stp))[0]
        R["st_save"].append(secs)
        R["st_save_sha"].append(secs + secs_sha)
        stp.unlink()

    # As benches/peer.rs's save does it: sync, save, remove; pairs alternate which goes
    # first, so this VM's page-cache modes fall on both sides of a pair.
    for i in range(args.reps):
        for fn in ((mz_one, st_one) if i % 2 == 0 else (st_one, mz_one)):
            fn()
    # The files the reads below use.
    modelzip.save(mzp, "t", arrays)
    st_save()

    names = list(arrays)

    def mz_views():
        with modelzip.open(mzp) as ar:
            t = ar.latest()
            return [t[n] for n in names]

    def st_open():
        with safe_open(str(stp), framework="np") as f:
            return [f.get_tensor(n) for n in f.keys()]

    def st_load():
        return list(load_file(str(stp)).values())

    for _ in range(args.reps):
        for key, fn in (("mz_views", mz_views), ("st_load", st_load), ("st_open", st_open)):
            secs, got = timed(fn)
            assert len(got) == len(names)
            R[key].append(secs)
            del got
            secs, _ = timed(lambda fn=fn: total(fn()))
            R[key + "_sum"].append(secs)

    out = {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in R.items()}
    out["raw"] = {k: v for k, v in R.items() if isinstance(v, list)}
    # PY2 per pair: modelzip.save / (save_file + fsync + SHA-256), the same repetition.
    out["save_pair_ratios"] = [m / s for m, s in zip(R["mz_save"], R["st_save_sha"])]
    print(json.dumps(out))
    mzp.unlink()
    stp.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
