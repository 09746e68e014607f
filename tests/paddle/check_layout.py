#!/usr/bin/env python3
"""Independent parser for Paddle LoDTensor records; checks fixtures against manifest.json.

Needs only the Python standard library (numpy optional, used to check .npy shapes).

Usage: python3 tests/paddle/check_layout.py tests/fixtures/paddle/<ver> [more dirs...]
Exit status 0 iff every file agrees with the documented layout and the manifest.

Layout (little-endian):
  u32 version(=0) | u64 lod_level | lod_level x (u64 nbytes, nbytes/8 x u64) |
  u32 tensor_version(=0) | i32 desc_size | TensorDesc proto | numel*elem_size data
TensorDesc: field 1 data_type (varint), field 2 dims (int64, repeated).
"""
import hashlib
import json
import os
import struct
import sys

ELEM_SIZE = {0: 1, 1: 2, 2: 4, 3: 8, 4: 2, 5: 4, 6: 8, 19: 8, 20: 1, 21: 1, 22: 2,
             23: 8, 24: 16, 32: 1, 33: 1, 36: 2, 37: 4, 38: 8}


class LayoutError(Exception):
    pass


def varint(buf, i):
    shift = 0
    val = 0
    while True:
        if i >= len(buf):
            raise LayoutError("truncated varint")
        b = buf[i]
        i += 1
        val |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return val, i


def as_i64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def proto_fields(buf):
    """Yield (field, wire_type, value) for a protobuf message (value: int or bytes)."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v = bytes(buf[i:i + n])
            if len(v) != n:
                raise LayoutError("truncated length-delimited field")
            i += n
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise LayoutError("unsupported wire type %d" % wt)
        yield f, wt, v


def parse_tensor_desc(desc, obs):
    dtype = None
    dims = []
    for f, wt, v in proto_fields(desc):
        if f == 1 and wt == 0:
            if dtype is not None:
                raise LayoutError("data_type given twice")
            dtype = v
        elif f == 2 and wt == 0:
            dims.append(as_i64(v))
            obs.add("dims: unpacked (one tag 0x10 per dim)")
        elif f == 2 and wt == 2:
            j = 0
            while j < len(v):
                d, j = varint(v, j)
                dims.append(as_i64(d))
            obs.add("dims: PACKED (tag 0x12)")
        else:
            raise LayoutError("unexpected TensorDesc field %d wire %d" % (f, wt))
    if dtype is None:
        raise LayoutError("TensorDesc without data_type")
    return dtype, dims


def parse_record(buf, off, obs):
    start = off

    def take(fmt):
        nonlocal off
        n = struct.calcsize(fmt)
        if off + n > len(buf):
            raise LayoutError("truncated at offset %d reading %s" % (off, fmt))
        v = struct.unpack_from(fmt, buf, off)
        off += n
        return v[0]

    ver = take("<I")
    if ver != 0:
        raise LayoutError("record version %d != 0" % ver)
    lod_level = take("<Q")
    lod = []
    for _ in range(lod_level):
        nbytes = take("<Q")
        if nbytes % 8:
            raise LayoutError("lod nbytes %d not multiple of 8" % nbytes)
        lod.append([take("<Q") for _ in range(nbytes // 8)])
    tver = take("<I")
    if tver != 0:
        raise LayoutError("tensor version %d != 0" % tver)
    dsize = take("<i")
    if dsize < 0 or off + dsize > len(buf):
        raise LayoutError("bad desc size %d" % dsize)
    dtype, dims = parse_tensor_desc(buf[off:off + dsize], obs)
    off += dsize
    if dtype not in ELEM_SIZE:
        raise LayoutError("unknown/unsupported dtype code %d" % dtype)
    numel = 1
    for d in dims:
        if d < 0:
            raise LayoutError("negative dim %d" % d)
        numel *= d
    nbytes = numel * ELEM_SIZE[dtype]
    if off + nbytes > len(buf):
        raise LayoutError("data truncated: need %d bytes at %d, file has %d" % (nbytes, off, len(buf)))
    data = buf[off:off + nbytes]
    off += nbytes
    return {"dtype_code": dtype, "dims": dims, "lod": lod, "data_nbytes": nbytes,
            "data_sha256": hashlib.sha256(data).hexdigest(), "header_bytes": off - start - nbytes,
            "data": data}, off


def parse_file(path, obs):
    buf = open(path, "rb").read()
    recs = []
    off = 0
    while off < len(buf):
        r, off = parse_record(buf, off, obs)
        recs.append(r)
    if off != len(buf):
        raise LayoutError("trailing bytes")
    return recs, len(buf)


def parse_program(path):
    """Minimal ProgramDesc reader: version, op_version_map, block-0 ops and vars."""
    buf = open(path, "rb").read()
    info = {"blocks": 0, "version": None, "op_version_map": {}, "ops": [], "persistable_vars": []}
    for f, wt, v in proto_fields(buf):
        if f == 1:  # BlockDesc
            info["blocks"] += 1
            if info["blocks"] > 1:
                continue
            for bf, bwt, bv in proto_fields(v):
                if bf == 3:  # VarDesc
                    name, pers = None, False
                    for vf, _, vv in proto_fields(bv):
                        if vf == 1:
                            name = vv.decode()
                        elif vf == 3:
                            pers = bool(vv)
                    if pers:
                        info["persistable_vars"].append(name)
                elif bf == 4:  # OpDesc
                    for of, _, ov in proto_fields(bv):
                        if of == 3:
                            info["ops"].append(ov.decode())
        elif f == 4:  # Version { int64 version = 1 }
            for vf, _, vv in proto_fields(v):
                if vf == 1:
                    info["version"] = vv
        elif f == 5:  # OpVersionMap { repeated OpVersionPair pair = 1 }
            for pf, _, pv in proto_fields(v):
                if pf != 1:
                    continue
                name, ver = None, None
                for qf, _, qv in proto_fields(pv):
                    if qf == 1:
                        name = qv.decode()
                    elif qf == 2:
                        for rf, _, rv in proto_fields(qv):
                            if rf == 1:
                                ver = rv
                info["op_version_map"][name] = ver
    return info


def check_dir(root):
    man = json.load(open(os.path.join(root, "manifest.json")))
    errors = []
    obs = set()
    listed = set()
    for fe in man["files"]:
        path = os.path.join(root, fe["path"])
        listed.add(fe["path"])
        try:
            recs, size = parse_file(path, obs)
        except LayoutError as e:
            errors.append("%s: %s" % (fe["path"], e))
            continue
        want = fe["records"]
        if fe["kind"] == "single" and len(recs) != 1:
            errors.append("%s: single file has %d records" % (fe["path"], len(recs)))
        if len(recs) != len(want):
            errors.append("%s: %d records parsed, manifest has %d" % (fe["path"], len(recs), len(want)))
        for i, (got, exp) in enumerate(zip(recs, want)):
            for k in ("dtype_code", "dims", "lod", "data_nbytes", "data_sha256"):
                if got[k] != exp[k]:
                    errors.append("%s record %d (%s): %s file=%r manifest=%r"
                                  % (fe["path"], i, exp.get("name"), k, got[k], exp[k]))
        if sum(r["header_bytes"] + r["data_nbytes"] for r in recs) != size:
            errors.append("%s: length mismatch" % fe["path"])
        if size != fe["size"]:
            errors.append("%s: size %d != manifest %d" % (fe["path"], size, fe["size"]))
        for r in recs:
            if r["dtype_code"] == 0 and any(b not in (0, 1) for b in r["data"]):
                errors.append("%s: BOOL byte other than 0/1" % fe["path"])
    for m in man["models"]:
        info = parse_program(os.path.join(root, m["pdmodel"]))
        if info["ops"] != m["ops"]:
            errors.append("%s: ops %s != manifest %s" % (m["pdmodel"], info["ops"], m["ops"]))
        if info["version"] != m["program_version"]:
            errors.append("%s: version %s != manifest %s" % (m["pdmodel"], info["version"], m["program_version"]))
        pv = sorted(n for n in info["persistable_vars"] if n not in ("feed", "fetch"))
        if pv != sorted(m["params"]):
            errors.append("%s: persistable vars %s != params %s" % (m["pdmodel"], pv, m["params"]))
        m["_parsed"] = info
        try:
            import numpy as np
            a = np.load(os.path.join(root, m["input"]))
            b = np.load(os.path.join(root, m["output"]))
            if list(a.shape) != m["input_shape"] or list(b.shape) != m["output_shape"]:
                errors.append("%s: npy shapes differ" % m["name"])
        except ImportError:
            pass
    # every data file should be in the manifest (quirks/ are documented in notes)
    for dp, _, fns in os.walk(root):
        for fn in fns:
            rel = os.path.relpath(os.path.join(dp, fn), root).replace(os.sep, "/")
            if rel == "manifest.json" or rel.endswith(".npy") or rel.endswith(".pdmodel") \
                    or rel.startswith("quirks/"):
                continue
            if rel not in listed:
                errors.append("%s: not in manifest" % rel)
    quirks = []
    qd = os.path.join(root, "quirks")
    if os.path.isdir(qd):
        for fn in sorted(os.listdir(qd)):
            try:
                parse_file(os.path.join(qd, fn), set())
                quirks.append("%s: parsed?!" % fn)
            except LayoutError as e:
                quirks.append("quirks/%s: rejected as expected (%s)" % (fn, e))
    return man, errors, obs, quirks


def main():
    dirs = sys.argv[1:]
    if not dirs:
        print(__doc__)
        return 2
    bad = 0
    for d in dirs:
        man, errors, obs, quirks = check_dir(d)
        nrec = sum(len(f["records"]) for f in man["files"])
        print("== %s (paddle %s): %d files, %d records" % (d, man["paddle_version"], len(man["files"]), nrec))
        for o in sorted(obs):
            print("  observed:", o)
        for m in man["models"]:
            p = m["_parsed"]
            print("  model %s: ProgramDesc version=%s blocks=%d ops=%s op_version_map=%s"
                  % (m["name"], p["version"], p["blocks"], p["ops"],
                     {k: v for k, v in p["op_version_map"].items() if k in p["ops"]}))
        for q in quirks:
            print("  quirk:", q)
        for e in errors:
            print("  ERROR:", e)
        failed = {e.split(":")[0] for e in errors}
        print("  %d passed, %d failed" % (len(man["files"]) + len(man["models"]) - len(failed), len(failed)))
        bad += len(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
