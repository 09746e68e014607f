#!/usr/bin/env python3
"""Writes the safetensors fixtures of tests/fixtures/safetensors/ with the real producer.

Run with the venv of tests/safetensors/README.md (safetensors, numpy, ml_dtypes from
PyPI), from the repo root:

    /work/venvs/st/bin/python tests/safetensors/make_fixtures.py tests/fixtures/safetensors

Every file is written by `safetensors.numpy.save_file` (the Rust serializer of the
safetensors package), except the shards' index, which is written the way `transformers`
writes `model.safetensors.index.json` (json.dumps(indent=2, sort_keys=True) + newline).

manifest.json lists, for every file, its tensors (name, dtype, shape, sha256 of the
bytes handed to safetensors, computed from the numpy arrays, not from the files) and its
__metadata__, so the Rust tests check what modelzip reads against what was written.
Values come from a fixed seed, so two runs give the same tensors; the order of the
__metadata__ keys is the serializer's (a Rust HashMap: it varies between runs), which is
why modelzip keeps the order it finds rather than choosing one.
"""

import hashlib
import json
import os
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import save_file

RNG = np.random.default_rng(20261125)


def floats(shape, dtype):
    """Random normals with the special values a float dtype can hold at the front."""
    a = RNG.standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    specials = [0.0, -0.0, 1.0, -2.5]
    if np.dtype(dtype) != np.dtype(ml_dtypes.float8_e4m3fn):
        specials += [np.inf, -np.inf]
    specials += [np.nan]
    n = min(len(specials), flat.size)
    flat[:n] = specials[:n]
    return a.astype(dtype)


def ints(shape, dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    flat = a.reshape(-1)
    if flat.size >= 3:
        flat[:3] = [info.min, info.max, 0]
    return a


def tensor_record(name, a):
    data = np.ascontiguousarray(a).tobytes()
    return {
        "name": name,
        "numpy_dtype": a.dtype.name,
        "shape": list(a.shape),
        "data_sha256": hashlib.sha256(data).hexdigest(),
    }


MANIFEST = {"safetensors_version": safetensors.__version__, "numpy_version": np.__version__,
            "ml_dtypes_version": ml_dtypes.__version__, "files": []}


def save(out, rel, tensors, metadata=None, note=""):
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file(tensors, path, metadata=metadata)
    MANIFEST["files"].append({
        "path": rel,
        "note": note,
        "metadata": metadata,
        "tensors": [tensor_record(n, a) for n, a in sorted(tensors.items())],
    })


def all_dtypes(out):
    t = {}
    t["bool"] = RNG.integers(0, 2, size=(3, 5)).astype(np.bool_)
    for name, dt in [("u8", np.uint8), ("i8", np.int8), ("i16", np.int16), ("u16", np.uint16),
                     ("i32", np.int32), ("u32", np.uint32), ("i64", np.int64),
                     ("u64", np.uint64)]:
        t[name] = ints((4, 3), dt)
    for name, dt in [("f16", np.float16), ("f32", np.float32), ("f64", np.float64),
                     ("bf16", ml_dtypes.bfloat16), ("f8_e4m3", ml_dtypes.float8_e4m3fn),
                     ("f8_e5m2", ml_dtypes.float8_e5m2)]:
        t[name] = floats((2, 7), dt)
    c = RNG.standard_normal((3, 2)) + 1j * RNG.standard_normal((3, 2))
    t["c64"] = c.astype(np.complex64)
    # Shapes: 0-D, empty, rank 4; odd sizes that leave later tensors unaligned unless the
    # serializer orders by alignment; names as checkpoints spell them.
    t["scalar.f32"] = np.array(3.25, dtype=np.float32)
    t["empty.i64"] = np.zeros((0, 3), dtype=np.int64)
    t["model.layers.0.self_attn.q_proj.weight"] = floats((2, 1, 3, 2), np.float32)
    t["odd/u8"] = ints((5,), np.uint8)
    t["naïve-ünïcode name"] = floats((3,), np.float16)
    meta = {"format": "pt", "producer": "tests/safetensors/make_fixtures.py",
            "note": "quotes \" and backslash \\ and ünïcode", "empty": ""}
    save(out, "all_dtypes.safetensors", t, meta,
         "one tensor of every dtype modelzip holds, 0-D and empty shapes, metadata")


def small_ones(out):
    w = floats((2, 3), np.float32)
    save(out, "no_metadata.safetensors", {"w": w, "b": floats((3,), np.float32)}, None,
         "no __metadata__ at all")
    save(out, "empty_metadata.safetensors", {"w": w}, {}, "__metadata__ is {}")
    save(out, "no_tensors.safetensors", {}, {"format": "pt"}, "metadata only, no tensor")


def unsupported(out):
    save(out, "refused/f8_e8m0.safetensors",
         {"weight": floats((4, 4), np.float32),
          "weight_scale_e8m0": np.ones((4,), dtype=ml_dtypes.float8_e8m0fnu)},
         {"format": "pt"}, "F8_E8M0, which modelzip cannot hold")
    save(out, "refused/f8_e4m3fnuz.safetensors",
         {"x": np.zeros((2,), dtype=ml_dtypes.float8_e4m3fnuz)}, None,
         "F8_E4M3FNUZ, which modelzip cannot hold")


def model(shift=None):
    """A small transformer-like state dict (about 60 KiB of float32)."""
    m = {
        "embed_tokens.weight": floats((64, 48), np.float32),
        "norm.weight": np.ones((48,), dtype=np.float32),
        "lm_head.weight": floats((32, 48), np.float32),
    }
    for i in range(4):
        m[f"layers.{i}.attn.qkv.weight"] = floats((24, 48), np.float32)
        m[f"layers.{i}.mlp.up.weight"] = floats((16, 48), np.float32)
        m[f"layers.{i}.mlp.up.bias"] = floats((16,), np.float32)
        m[f"layers.{i}.step"] = np.array(i, dtype=np.int64)
    return m


def finetunes(out):
    base = model()
    save(out, "finetune/base.safetensors", base, {"format": "pt", "version": "base"},
         "a small model")
    tuned = {k: v.copy() for k, v in base.items()}
    # A fine-tune of the head and the last layer's MLP; everything else unchanged.
    tuned["lm_head.weight"] += floats((32, 48), np.float32) * np.float32(1e-3)
    tuned["layers.3.mlp.up.weight"] *= np.float32(1.01)
    tuned["layers.3.mlp.up.bias"] += np.float32(0.5)
    save(out, "finetune/tuned.safetensors", tuned, {"format": "pt", "version": "tuned"},
         "the model with lm_head and layers.3.mlp.up changed")


def sharded(out):
    m = model()
    names = sorted(m)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    total = 0
    for i, part in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save(out, f"sharded/{fname}", {n: m[n] for n in part}, {"format": "pt"},
             f"shard {i} of a sharded checkpoint")
        for n in part:
            weight_map[n] = fname
            total += m[n].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    all_dtypes(out)
    small_ones(out)
    unsupported(out)
    finetunes(out)
    sharded(out)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
