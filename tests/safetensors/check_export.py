#!/usr/bin/env python3
"""Checks modelzip's safetensors exports with the safetensors package itself.

    check_export.py ORIGINAL EXPORT [ORIGINAL EXPORT ...]
    check_export.py --dirs ORIGINALS_DIR EXPORTS_DIR
    check_export.py --cat MODELZIP ARCHIVE TAG EXPORT

ORIGINAL is a .safetensors file or a sharded checkpoint's model.safetensors.index.json
(its shards together are the original). With --dirs, every *.safetensors under
EXPORTS_DIR is compared with the file of the same relative path under ORIGINALS_DIR, and
EXPORTS_DIR/sharded.safetensors with ORIGINALS_DIR/sharded/model.safetensors.index.json
(EXPORTS_DIR/paddle/ is skipped: it is for --cat), and every other directory of
EXPORTS_DIR holding a model.safetensors.index.json (a sharded export) with the original
sharded checkpoint, shards together; "byte-identical" then covers the index and shards.

For each pair: `safetensors.numpy.load_file` reads the export; the same tensor names,
dtypes, shapes and values (compared bit for bit, so NaNs and -0.0 count) as the original,
and the same __metadata__ (`safe_open(...).metadata()`). safetensors.numpy looks up
float8 types as `np.float8_e4m3fn`, which numpy does not have, so `load_file` refuses
files holding F8_E4M3 / F8_E5M2 tensors (a limitation of safetensors.numpy, not of the
file; BF16 works once ml_dtypes is imported); those files are read tensor by tensor with
`safe_open(framework="np")`, and the float8 tensors as the raw bytes
`safetensors.deserialize` hands out; the output says which.
Also prints whether the export is byte-identical to a single-file original.

With --cat, EXPORT is an export of tag TAG of ARCHIVE (for example a Paddle-imported
tag), checked against the modelzip CLI (MODELZIP is the binary): the export holds exactly
the parameters `MODELZIP show ARCHIVE --tag TAG --json` lists, with their dtypes and dims,
and every tensor `load_file` reads equals `MODELZIP cat ARCHIVE NAME --tag TAG`: its
`--raw` bytes, and its `--json` values (numbers; NaN and infinities as strings).

Needs the venv of tests/safetensors/README.md (safetensors, numpy, ml_dtypes).
"""

import json
import os
import sys

import ml_dtypes  # noqa: F401  registers bfloat16 with numpy, which load_file needs for BF16
import numpy as np
import safetensors
from safetensors import deserialize, safe_open
from safetensors.numpy import load_file


def read_one(path):
    """(tensors {name: (dtype, shape, bytes)}, metadata, how it was read)."""
    with safe_open(path, framework="np") as f:
        metadata = f.metadata()
    with open(path, "rb") as f:
        raw = f.read()
    views = {name: (v["dtype"], list(v["shape"]), bytes(v["data"])) for name, v in deserialize(raw)}
    how = "safetensors.numpy.load_file"
    try:
        arrays = load_file(path)
    except (AttributeError, KeyError, TypeError) as e:
        # Every tensor numpy can hold through safe_open, the rest as raw bytes only.
        arrays, raw_only = {}, []
        with safe_open(path, framework="np") as f:
            for name in f.keys():
                try:
                    arrays[name] = f.get_tensor(name)
                except (AttributeError, KeyError, TypeError):
                    raw_only.append(name)
        how = (f"safe_open(framework='np') for {len(arrays)}, safetensors.deserialize's raw "
               f"bytes for {sorted(raw_only)} (load_file refused: {e!r})")
    for name, a in arrays.items():
        dtype, shape, data = views[name]
        assert list(a.shape) == shape, (path, name, a.shape, shape)
        assert np.ascontiguousarray(a).tobytes() == data, (path, name, "numpy bytes")
    return views, metadata, how


def read_original(path):
    if not path.endswith(".json"):
        t, m, _ = read_one(path)
        return t, m
    with open(path) as f:
        index = json.load(f)
    tensors, metadata = {}, None
    for shard in sorted(set(index["weight_map"].values())):
        t, m, _ = read_one(os.path.join(os.path.dirname(path), shard))
        tensors.update(t)
        metadata = m
    return tensors, metadata


def check(original, export):
    want, want_meta = read_original(original)
    if export.endswith(".json"):
        got, got_meta = read_original(export)
        how = "each shard through read_one"
    else:
        got, got_meta, how = read_one(export)
    problems = []
    if sorted(want) != sorted(got):
        problems.append(f"names differ: {sorted(set(want) ^ set(got))}")
    for name in sorted(set(want) & set(got)):
        if want[name] != got[name]:
            w, g = want[name], got[name]
            problems.append(f"{name}: original {w[0]} {w[1]}, export {g[0]} {g[1]}"
                            f"{'' if w[2] == g[2] else ', values differ'}")
    if want_meta != got_meta:
        problems.append(f"metadata: original {want_meta}, export {got_meta}")
    identical = None
    if original.endswith(".json") == export.endswith(".json"):
        with open(original, "rb") as a, open(export, "rb") as b:
            identical = a.read() == b.read()
        if export.endswith(".json"):
            # and every shard the index names
            with open(export) as f:
                for shard in sorted(set(json.load(f)["weight_map"].values())):
                    a_path = os.path.join(os.path.dirname(original), shard)
                    b_path = os.path.join(os.path.dirname(export), shard)
                    if not os.path.exists(a_path):
                        identical = False
                        continue
                    with open(a_path, "rb") as a, open(b_path, "rb") as b:
                        identical = identical and a.read() == b.read()
    status = "OK " if not problems else "BAD"
    print(f"{status} {export}: {len(got)} tensors, metadata {got_meta}, read with {how}"
          + ("" if identical is None else f", byte-identical: {'yes' if identical else 'no'}"))
    for p in problems:
        print(f"    {p}")
    return not problems


ST_DTYPES = {"BOOL": "BOOL", "U8": "UINT8", "I8": "INT8", "I16": "INT16", "U16": "UINT16",
             "I32": "INT32", "U32": "UINT32", "I64": "INT64", "U64": "UINT64", "F16": "FP16",
             "BF16": "BF16", "F32": "FP32", "F64": "FP64", "C64": "COMPLEX64",
             "F8_E4M3": "FP8_E4M3FN", "F8_E5M2": "FP8_E5M2"}


def cat_value(v):
    if isinstance(v, str):
        return float(v.lower().replace("infinity", "inf"))
    if isinstance(v, list):
        return complex(cat_value(v[0]), cat_value(v[1]))
    return v


def check_cat(modelzip, archive, tag, export):
    import subprocess

    def run(*args):
        return subprocess.run([modelzip, *args], check=True, capture_output=True).stdout

    shown = json.loads(run("show", archive, "--tag", tag, "--json"))
    got, _, how = read_one(export)
    arrays = load_file(export)
    problems = []
    params = {p["name"]: p for p in shown["params"]}
    if sorted(params) != sorted(got):
        problems.append(f"names differ: {sorted(set(params) ^ set(got))}")
    for name in sorted(set(params) & set(got)):
        dtype, shape, data = got[name]
        p = params[name]
        if (ST_DTYPES.get(dtype), shape) != (p["dtype"], p["dims"]):
            problems.append(f"{name}: show says {p['dtype']} {p['dims']}, export {dtype} {shape}")
        if run("cat", archive, name, "--tag", tag, "--raw") != data:
            problems.append(f"{name}: cat --raw bytes differ")
        values = json.loads(run("cat", archive, name, "--tag", tag, "--json"))["values"]
        want = np.array([cat_value(v) for v in values]).reshape(arrays[name].shape)
        if not np.array_equal(want.astype(arrays[name].dtype), arrays[name], equal_nan=True):
            problems.append(f"{name}: cat --json values differ from load_file's")
    print(f"{'OK ' if not problems else 'BAD'} {export}: {len(got)} tensors of tag {tag} of "
          f"{archive}, read with {how}, compared with modelzip cat --raw and --json")
    for p in problems:
        print(f"    {p}")
    return not problems


def main(argv):
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    if argv[:1] == ["--cat"]:
        return 0 if check_cat(*argv[1:5]) else 1
    pairs = []
    if argv[:1] == ["--dirs"]:
        orig_dir, exp_dir = argv[1], argv[2]
        sharded_index = os.path.join(orig_dir, "sharded", "model.safetensors.index.json")
        for root, _, files in os.walk(exp_dir):
            if root != exp_dir and "model.safetensors.index.json" in files:
                # A sharded export (an export to a directory): its index and shards
                # together against the original sharded checkpoint.
                pairs.append((sharded_index, os.path.join(root, "model.safetensors.index.json")))
                continue
            for f in sorted(files):
                exp = os.path.join(root, f)
                rel = os.path.relpath(exp, exp_dir)
                if rel.startswith("paddle" + os.sep):
                    continue  # exports of a Paddle tag: for --cat, no original file
                if rel == "sharded.safetensors":
                    pairs.append((os.path.join(orig_dir, "sharded", "model.safetensors.index.json"), exp))
                elif f.endswith(".safetensors"):
                    pairs.append((os.path.join(orig_dir, rel), exp))
    else:
        pairs = list(zip(argv[0::2], argv[1::2]))
    if not pairs:
        print("nothing to check")
        return 1
    ok = all([check(o, e) for o, e in sorted(pairs)])
    print(f"{len(pairs)} export(s) checked: {'all equal' if ok else 'DIFFERENCES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
