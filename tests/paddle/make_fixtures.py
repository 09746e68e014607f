#!/usr/bin/env python3
"""Write reference PaddlePaddle fixture files using Paddle's own writers.

Usage:
    /work/venvs/paddle3/bin/python  tests/paddle/make_fixtures.py tests/fixtures/paddle/<ver>/
    /work/venvs/paddle26/bin/python tests/paddle/make_fixtures.py tests/fixtures/paddle/<ver>/

Every data_sha256 in manifest.json is computed from the numpy arrays / raw
byte patterns handed to Paddle, never by parsing the files Paddle wrote.
tests/paddle/check_layout.py then parses the files independently.
"""
import os

# Must be set before `import paddle`: makes save_inference_model write a
# legacy ProgramDesc protobuf (.pdmodel) instead of PIR JSON.
os.environ["FLAGS_enable_pir_api"] = "0"

import ctypes
import hashlib
import json
import shutil
import sys
import tempfile
import traceback
import warnings

warnings.filterwarnings("ignore")

import numpy as np
import paddle
from paddle.base import core

paddle.enable_static()

PV = paddle.__version__
PLACE = core.CPUPlace()
VT = core.VarDesc.VarType
DenseTensor = getattr(core, "DenseTensor", None) or core.LoDTensor
if hasattr(core, "save_dense_tensor"):
    SAVE_DENSE = core.save_dense_tensor
    SAVE_DENSE_API = "paddle.base.core.save_dense_tensor"
else:
    SAVE_DENSE = core.save_lod_tensor
    SAVE_DENSE_API = "paddle.base.core.save_lod_tensor"

# name -> (code, numpy dtype of the raw bytes as laid out in the file)
DTYPES = {
    "BOOL": (0, "bool"),
    "INT16": (1, "<i2"),
    "INT32": (2, "<i4"),
    "INT64": (3, "<i8"),
    "FP16": (4, "<f2"),
    "FP32": (5, "<f4"),
    "FP64": (6, "<f8"),
    "SIZE_T": (19, "<u8"),
    "UINT8": (20, "u1"),
    "INT8": (21, "i1"),
    "BF16": (22, "<u2"),  # raw bfloat16 bit patterns
    "COMPLEX64": (23, "<c8"),
    "COMPLEX128": (24, "<c16"),
    "FP8_E4M3FN": (32, "u1"),  # raw fp8 bit patterns
    "FP8_E5M2": (33, "u1"),
    "UINT16": (36, "<u2"),
    "UINT32": (37, "<u4"),
    "UINT64": (38, "<u8"),
}
CODE2NAME = {c: n for n, (c, _) in DTYPES.items()}


def sample(name, shape=(2, 3)):
    """Deterministic sample data (raw layout) for a dtype, shape [2,3]."""
    n = int(np.prod(shape)) if len(shape) else 1
    if name == "BOOL":
        v = np.array([True, False, True, True, False, False] * 8)[:n]
    elif name == "INT16":
        v = np.array([0, 1, -1, 32767, -32768, 1234] * 8)[:n]
    elif name == "INT32":
        v = np.array([0, 1, -1, 2**31 - 1, -(2**31), 123456] * 8)[:n]
    elif name in ("INT64", "SIZE_T"):
        v = np.array([0, 1, -1, 2**63 - 1, -(2**63), 1234567890123] * 8)[:n]
        if name == "SIZE_T":
            v = v.astype("<i8").view("<u8")
    elif name == "FP16":
        v = np.array([0.0, 1.0, -2.5, 65504.0, 6.1e-5, np.inf] * 8)[:n]
    elif name == "FP32":
        v = np.array([0.0, 1.0, -2.5, 3.4028235e38, 1e-45, np.pi] * 8)[:n]
    elif name == "FP64":
        v = np.array([0.0, 1.0, -2.5, 1.7976931348623157e308, 5e-324, np.pi] * 8)[:n]
    elif name == "UINT8":
        v = np.array([0, 1, 127, 128, 255, 42] * 8)[:n]
    elif name == "INT8":
        v = np.array([0, 1, -1, 127, -128, 42] * 8)[:n]
    elif name == "BF16":  # 1.0, -2.0, +inf, 0, -0, qNaN
        v = np.array([0x3F80, 0xC000, 0x7F80, 0x0000, 0x8000, 0x7FC0] * 8)[:n]
    elif name == "COMPLEX64":
        v = np.array([0, 1 + 2j, -3.5 - 0.25j, 1j, -1, 1e30 + 1e-30j] * 8)[:n]
    elif name == "COMPLEX128":
        v = np.array([0, 1 + 2j, -3.5 - 0.25j, 1j, -1, 1e300 + 1e-300j] * 8)[:n]
    elif name == "FP8_E4M3FN":  # 0, 1.0, -2.0, 448 (max), 2^-9 (min subnormal), NaN
        v = np.array([0x00, 0x38, 0xC0, 0x7E, 0x01, 0x7F] * 8)[:n]
    elif name == "FP8_E5M2":  # 0, 1.0, -2.0, 57344 (max), +inf, 2^-16
        v = np.array([0x00, 0x3C, 0xC0, 0x7B, 0x7C, 0x01] * 8)[:n]
    elif name == "UINT16":
        v = np.array([0, 1, 0x7FFF, 0x8000, 0xFFFF, 4242] * 8)[:n]
    elif name == "UINT32":
        v = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 42424242] * 8)[:n]
    elif name == "UINT64":
        v = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1, 4242424242424242] * 8, dtype=object)[:n]
    else:
        raise KeyError(name)
    return np.ascontiguousarray(np.array(v).astype(DTYPES[name][1]).reshape(shape))


def sha(arr):
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes(order="C")).hexdigest()


def exc_text(e):
    s = str(e).strip()
    lines = [l for l in s.splitlines() if l.strip()]
    # Paddle errors carry a C++ traceback; keep the summary lines.
    keep = [l.strip() for l in lines if "Error" in l or "Hint" in l or "(at " in l]
    return "%s: %s" % (type(e).__name__, " | ".join(keep[-3:] if keep else lines[-2:]))


_KEEPALIVE = []


def fill(t, name, raw):
    """Put `raw` (numpy array of raw layout) into DenseTensor `t` as dtype `name`.
    Returns the fill method used (a string for the manifest)."""
    code = DTYPES[name][0]
    if name in ("FP8_E4M3FN", "FP8_E5M2", "SIZE_T"):
        vt = getattr(VT, name, None)
        if vt is None:
            raise RuntimeError(
                "paddle.base.core.VarDesc.VarType has no member %s (Paddle %s)" % (name, PV)
            )
        t._set_dims(list(raw.shape))
        ptr = t._mutable_data(PLACE, vt)
        if not ptr and raw.size:
            raise RuntimeError("DenseTensor._mutable_data(CPUPlace, VarType.%s) returned a null "
                               "pointer (dtype became %s)" % (name, t._dtype()))
        if raw.size:
            ctypes.memmove(ptr, raw.ctypes.data, raw.nbytes)
        method = "DenseTensor._mutable_data(VarType.%s)+memmove of raw bytes" % name
    elif name in ("UINT16", "UINT32", "UINT64"):
        vt = getattr(VT, name, None)
        if vt is None:
            raise RuntimeError(
                "paddle.base.core.VarDesc.VarType has no member %s (Paddle %s)" % (name, PV)
            )
        # numpy uint16 means BF16 to Tensor.set(); uint32/uint64 are refused by
        # Tensor.set(). DLPack imports the true unsigned dtype.
        paddle.disable_static()
        try:
            src = paddle.utils.dlpack.from_dlpack(raw.__dlpack__())
            st = src.get_tensor()
        finally:
            paddle.enable_static()
        _KEEPALIVE.append(src)
        t._share_data_with(st)
        method = "paddle.utils.dlpack.from_dlpack(numpy %s) shared into DenseTensor" % raw.dtype
    else:
        t.set(raw, PLACE)  # numpy uint16 -> BF16 here (Paddle convention)
        method = "DenseTensor.set(numpy %s)" % raw.dtype
    got = int(t._dtype())
    if got != code:
        raise RuntimeError("tensor dtype after fill is %s (code %d), wanted %s (%d)"
                           % (t._dtype(), got, name, code))
    if list(t.shape()) != list(raw.shape):
        raise RuntimeError("tensor dims %s != %s" % (t.shape(), list(raw.shape)))
    return method


def record(name, dtype, raw, lod=None, extra=None):
    r = {
        "name": name,
        "dtype": dtype,
        "dtype_code": DTYPES[dtype][0],
        "dims": [int(d) for d in raw.shape],
        "lod": lod or [],
        "numel": int(raw.size),
        "data_nbytes": int(raw.nbytes),
        "data_sha256": sha(raw),
    }
    if extra:
        r.update(extra)
    return r


def decoded_f32(dtype, raw):
    """Ask Paddle itself to decode BF16/FP8 bit patterns to float32 (documentation)."""
    t = DenseTensor()
    fill(t, dtype, raw)
    paddle.disable_static()
    try:
        x = paddle.Tensor(t).astype("float32").numpy()
    finally:
        paddle.enable_static()
    return [None if np.isnan(f) else (str(f) if np.isinf(f) else float(f)) for f in x.ravel()]


class Fixtures:
    def __init__(self, out):
        self.out = out
        self.files = []
        self.models = []
        self.skipped = []
        self.notes = []
        self.exe = paddle.static.Executor(PLACE)
        self.params = {}

    def rel(self, p):
        return os.path.relpath(p, self.out).replace(os.sep, "/")

    # ---------- writers ----------
    def save_op(self, var_name, dtype, raw, lod=None, subdir="save_op"):
        """paddle.static.save_vars without filename -> one `save` op per var."""
        d = os.path.join(self.out, subdir)
        os.makedirs(d, exist_ok=True)
        scope = core.Scope()
        prog = paddle.static.Program()
        with paddle.static.scope_guard(scope):
            vt = getattr(VT, dtype, None)
            if vt is None:
                raise RuntimeError("paddle.base.core.VarDesc.VarType has no member %s (Paddle %s)" % (dtype, PV))
            v = prog.global_block().create_var(
                name=var_name, shape=list(raw.shape), dtype=vt, persistable=True,
                lod_level=len(lod or []))
            t = scope.var(var_name).get_tensor()
            method = fill(t, dtype, raw)
            if lod:
                t.set_lod(lod)
            paddle.static.save_vars(self.exe, dirname=d, main_program=prog, vars=[v])
        path = os.path.join(d, var_name)
        if not os.path.exists(path):
            raise RuntimeError("save op produced no file")
        return path, method

    def save_dense(self, fname, dtype, raw, lod=None, subdir="save_dense_tensor"):
        d = os.path.join(self.out, subdir)
        os.makedirs(d, exist_ok=True)
        t = DenseTensor()
        method = fill(t, dtype, raw)
        if lod:
            t.set_lod(lod)
        path = os.path.join(d, fname)
        SAVE_DENSE(t, path)
        return path, method

    def single(self, writer, label, dtype, raw, lod=None, extra=None, subdir=None):
        """Write one single-record file with `writer`; record in manifest or skipped."""
        try:
            if writer == "save_op":
                path, method = self.save_op(label, dtype, raw, lod, subdir or "save_op")
                api = "paddle.static.save_vars(exe, dirname, prog, vars=[v]) (legacy `save` op)"
                name = label
            else:
                path, method = self.save_dense(label, dtype, raw, lod, subdir or "save_dense_tensor")
                api = SAVE_DENSE_API
                name = None
        except Exception as e:  # noqa: BLE001
            self.skipped.append({"what": "%s %s dims=%s lod=%s" % (writer, dtype, list(raw.shape), lod or []),
                                 "dtype": dtype, "dtype_code": DTYPES[dtype][0], "writer": writer,
                                 "exception": exc_text(e)})
            print("  SKIP %-17s %-11s %s" % (writer, dtype, exc_text(e)[:150]))
            return None
        rec = record(name, dtype, raw, lod, extra)
        entry = {"path": self.rel(path), "kind": "single", "writer": writer, "writer_api": api,
                 "fill": method, "size": os.path.getsize(path), "records": [rec]}
        self.files.append(entry)
        print("  ok   %-17s %-11s %s" % (writer, dtype, entry["path"]))
        return entry

    # ---------- sections ----------
    def dtypes(self):
        print("== dtypes")
        for dtype in DTYPES:
            raw = sample(dtype)
            extra = None
            if dtype in ("BF16", "FP8_E4M3FN", "FP8_E5M2"):
                try:
                    extra = {"paddle_decoded_f32": decoded_f32(dtype, raw)}
                except Exception:  # noqa: BLE001
                    extra = None
            a = self.single("save_op", "dtype_" + dtype.lower(), dtype, raw, extra=extra)
            b = self.single("save_dense_tensor", "dtype_%s.bin" % dtype.lower(), dtype, raw, extra=extra)
            if a and b:
                same = open(os.path.join(self.out, a["path"]), "rb").read() == \
                    open(os.path.join(self.out, b["path"]), "rb").read()
                a["byte_identical_to"] = b["path"] if same else None
                b["byte_identical_to"] = a["path"] if same else None

    def shapes(self):
        print("== shapes")
        cases = [
            ("shape_0d_fp32", "FP32", np.array(3.5, dtype="<f4")),
            ("shape_0d_int64", "INT64", np.array(-7, dtype="<i8")),
            ("shape_0d_bool", "BOOL", np.array(True)),
            ("shape_empty_0_fp32", "FP32", np.zeros((0,), dtype="<f4")),
            ("shape_empty_3x0_fp32", "FP32", np.zeros((3, 0), dtype="<f4")),
            ("shape_empty_0x4_int32", "INT32", np.zeros((0, 4), dtype="<i4")),
            ("shape_1d_fp32", "FP32", np.arange(7, dtype="<f4") * 0.5),
            ("shape_2d_fp32", "FP32", (np.arange(12, dtype="<f4") - 6).reshape(3, 4)),
            ("shape_4d_fp32", "FP32", (np.arange(48, dtype="<f4") / 7).reshape(2, 3, 2, 4)),
            ("shape_4d_fp16", "FP16", (np.arange(48, dtype="<f2") / 8).reshape(2, 3, 2, 4)),
            ("shape_big_dim_uint8", "UINT8", (np.arange(300) % 256).astype("u1").reshape(300)),
        ]
        for label, dtype, raw in cases:
            self.single("save_op", label, dtype, raw)
            self.single("save_dense_tensor", label + ".bin", dtype, raw)

    def lods(self):
        print("== lod")
        cases = [
            ("lod1_fp32", "FP32", (np.arange(10, dtype="<f4") * 1.5).reshape(5, 2), [[0, 2, 5]]),
            ("lod2_int64", "INT64", np.arange(5, dtype="<i8").reshape(5, 1) * 1000,
             [[0, 1, 3], [0, 2, 3, 5]]),
            ("lod1_empty_seq_int32", "INT32", np.arange(4, dtype="<i4"), [[0, 0, 4, 4]]),
        ]
        for label, dtype, raw, lod in cases:
            self.single("save_op", label, dtype, raw, lod=lod)
            self.single("save_dense_tensor", label + ".bin", dtype, raw, lod=lod)

    def combined(self):
        print("== combined (save_combine)")
        vars_ = [
            ("fc.w_0", "FP32", (np.arange(6, dtype="<f4") - 2.5).reshape(2, 3), None),
            ("a_2", "INT64", np.array([2, 20, 200], dtype="<i8"), None),
            ("Beta", "FP64", np.array([[1.25, -0.5]], dtype="<f8"), None),
            ("a_10", "FP16", np.array([1.0, -0.5, 0.25, 100.0], dtype="<f2").reshape(2, 2), None),
            ("fc.b_0", "FP32", np.array(0.125, dtype="<f4"), None),  # 0-D
            ("a.b", "INT8", np.array([-1, 2, -3], dtype="i1"), None),
            ("_under", "BOOL", np.array([True, False, True]), None),
            ("Zeta", "BF16", np.array([0x3F80, 0x4000], dtype="<u2"), None),
            ("a_1", "INT32", np.arange(6, dtype="<i4").reshape(3, 2), [[0, 1, 3]]),
            ("empty_0", "FP32", np.zeros((0, 3), dtype="<f4"), None),
        ]
        self._combined("combined.pdiparams", vars_)
        # one variable per dtype (names d00_<dtype>...), to find save_combine's dtype coverage
        vars2 = [("d%02d_%s" % (DTYPES[dt][0], dt.lower()), dt, sample(dt, (3,)), None) for dt in DTYPES]
        self._combined("combined_dtypes.pdiparams", vars2)

    def _combined(self, fname, vars_, drop_on_fail=True):
        ok = []
        for name, dtype, raw, lod in vars_:
            try:
                getattr(VT, dtype)
                fill(DenseTensor(), dtype, raw)
                ok.append((name, dtype, raw, lod))
            except Exception as e:  # noqa: BLE001
                self.skipped.append({"what": "save_combine var %s %s dims=%s (%s)" % (name, dtype, list(raw.shape), fname),
                                     "dtype": dtype, "dtype_code": DTYPES[dtype][0],
                                     "writer": "save_combine", "exception": exc_text(e)})
        vars_ = ok
        scope = core.Scope()
        prog = paddle.static.Program()
        with paddle.static.scope_guard(scope):
            vs, recs = [], {}
            for name, dtype, raw, lod in vars_:
                v = prog.global_block().create_var(name=name, shape=list(raw.shape), dtype=getattr(VT, dtype),
                                                   persistable=True, lod_level=len(lod or []))
                t = scope.var(name).get_tensor()
                fill(t, dtype, raw)
                if lod:
                    t.set_lod(lod)
                vs.append(v)
                recs[name] = record(name, dtype, raw, lod)
            path = os.path.join(self.out, fname)
            try:
                paddle.static.save_vars(self.exe, dirname=self.out, main_program=prog, vars=vs, filename=fname)
            except Exception as e:  # noqa: BLE001
                if not drop_on_fail:
                    raise
                # find the offending variable(s) by trying each alone
                bad = []
                for name, dtype, raw, lod in vars_:
                    try:
                        paddle.static.save_vars(self.exe, dirname=tempfile.mkdtemp(), main_program=prog,
                                                vars=[prog.global_block().var(name)], filename="_probe_combine")
                    except Exception as e2:  # noqa: BLE001
                        bad.append(name)
                        self.skipped.append({"what": "save_combine var %s %s dims=%s (%s)" % (name, dtype, list(raw.shape), fname),
                                             "dtype": dtype, "dtype_code": DTYPES[dtype][0],
                                             "writer": "save_combine", "exception": exc_text(e2)})
                print("  combined failed (%s); dropping %s" % (exc_text(e)[:120], bad))
                return self._combined(fname, [v for v in vars_ if v[0] not in bad], drop_on_fail=False)
        order = sorted(recs, key=lambda s: s.encode("utf-8"))
        self.files.append({
            "path": fname, "kind": "combined", "writer": "save_combine",
            "writer_api": "paddle.static.save_vars(exe, dirname, prog, vars, filename=...) (legacy `save_combine` op)",
            "size": os.path.getsize(path),
            "records": [recs[n] for n in order]})
        print("  ok   combined %s order=%s" % (fname, order))

    # ---------- models ----------
    def _set_params(self, prog, scope, seed):
        rng = np.random.RandomState(seed)
        recs = {}
        for v in prog.list_vars():
            dense_vt = getattr(VT, "DENSE_TENSOR", None) or VT.LOD_TENSOR
            if not v.persistable or v.type != dense_vt:
                continue
            if v.name in ("feed", "fetch"):
                continue
            shape = list(v.shape)
            lname = v.name.lower()
            if "variance" in lname:
                arr = rng.uniform(0.5, 2.0, size=shape)
            elif "mean" in lname:
                arr = rng.uniform(-0.5, 0.5, size=shape)
            elif lname.startswith("batch_norm") and lname.endswith(".w_0"):
                arr = rng.uniform(0.5, 1.5, size=shape)
            else:
                arr = rng.normal(0, 0.5, size=shape)
            arr = np.ascontiguousarray(arr.astype("<f4"))
            scope.var(v.name).get_tensor().set(arr, PLACE)
            recs[v.name] = record(v.name, "FP32", arr)
            self.params[v.name] = arr
        return recs

    def _program_info(self, path):
        desc = core.ProgramDesc(open(path, "rb").read())
        blk = desc.block(0)
        ops = [blk.op(i).type() for i in range(blk.op_size())]
        return {"program_version": int(desc._version()), "num_blocks": desc.num_blocks(),
                "ops": ops,
                "feed_target_names": list(desc.get_feed_target_names()),
                "fetch_target_names": list(desc.get_fetch_target_names())}

    def model(self, name, build, feed_shape, seed, persist_dir=None):
        print("== model", name)
        scope = core.Scope()
        main, startup = paddle.static.Program(), paddle.static.Program()
        main.random_seed = startup.random_seed = seed
        with paddle.static.scope_guard(scope):
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data(name="x", shape=[None] + feed_shape[1:], dtype="float32")
                out = build(x)
            self.exe.run(startup)
            test_prog = main.clone(for_test=True)
            recs = self._set_params(main, scope, seed)
            prefix = os.path.join(self.out, name)
            paddle.static.save_inference_model(prefix, [x], [out], self.exe, program=test_prog)
            pfiles = []
            if persist_dir:
                d = os.path.join(self.out, persist_dir)
                # (paddle.static has no save_persistables in 2.6/3.x; this is what the
                # old fluid.io.save_persistables did: one `save` op per persistable var)
                paddle.static.save_vars(self.exe, dirname=d, main_program=test_prog,
                                        predicate=paddle.static.is_persistable)
                for f in sorted(os.listdir(d)):
                    p = os.path.join(d, f)
                    if f not in recs:
                        raise RuntimeError("unexpected persistable file %s" % f)
                    e = {"path": self.rel(p), "kind": "single", "writer": "save_op",
                         "writer_api": "paddle.static.save_vars(predicate=is_persistable) (legacy `save` op per var)",
                         "size": os.path.getsize(p), "records": [recs[f]]}
                    self.files.append(e)
                    pfiles.append(e["path"])
        # run the saved model back through Paddle
        rng = np.random.RandomState(seed + 1000)
        inp = rng.uniform(-1, 1, size=feed_shape).astype("<f4")
        scope2 = core.Scope()
        with paddle.static.scope_guard(scope2):
            prog, feeds, fetches = paddle.static.load_inference_model(prefix, self.exe)
            res = self.exe.run(prog, feed={feeds[0]: inp}, fetch_list=fetches)[0]
        res = np.ascontiguousarray(np.asarray(res))
        np.save(prefix + ".input.npy", inp)
        np.save(prefix + ".output.npy", res)
        order = sorted(recs, key=lambda s: s.encode("utf-8"))
        self.files.append({
            "path": name + ".pdiparams", "kind": "combined", "writer": "save_inference_model",
            "writer_api": "paddle.static.save_inference_model (legacy; save_combine of sorted persistables)",
            "size": os.path.getsize(prefix + ".pdiparams"),
            "records": [recs[n] for n in order]})
        info = self._program_info(prefix + ".pdmodel")
        self.models.append({
            "name": name, "pdmodel": name + ".pdmodel", "pdiparams": name + ".pdiparams",
            "pdmodel_sha256": hashlib.sha256(open(prefix + ".pdmodel", "rb").read()).hexdigest(),
            "input": name + ".input.npy", "output": name + ".output.npy",
            "input_shape": list(inp.shape), "output_shape": list(res.shape), "output_dtype": str(res.dtype),
            "feed_names": list(feeds), "fetch_names": [getattr(f, "name", str(f)) for f in fetches],
            "params": order, "persistables_dir": persist_dir, "persistables_files": pfiles,
            **info})
        print("  ok  ", name, info["ops"], "out", res.shape)
        return recs, inp, res

    def mlp(self):
        def build(x):
            h = paddle.static.nn.fc(x, 16, activation="relu")
            o = paddle.static.nn.fc(h, 4)
            return paddle.nn.functional.softmax(o)
        recs, inp, res = self.model("mlp", build, [3, 8], seed=1234, persist_dir="mlp_persistables")
        # numpy reference (independent of Paddle's executor)
        P = self.params
        ws = sorted((n for n in recs if n.endswith(".w_0")), key=lambda n: int(n.split("_")[1].split(".")[0]))
        bs = sorted((n for n in recs if n.endswith(".b_0")), key=lambda n: int(n.split("_")[1].split(".")[0]))
        h = np.maximum(inp.astype("f8") @ P[ws[0]] + P[bs[0]], 0)
        o = h @ P[ws[1]] + P[bs[1]]
        e = np.exp(o - o.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        self.models[-1]["numpy_reference_max_abs_diff"] = float(np.abs(ref - res).max())
        self.models[-1]["note"] = "fc 8->16 relu, fc 16->4, softmax; params set from numpy RandomState(1234)"

    def conv(self):
        def build(x):
            c = paddle.static.nn.conv2d(x, num_filters=4, filter_size=3, padding=1)
            b = paddle.static.nn.batch_norm(c, is_test=True)
            r = paddle.nn.functional.relu(b)
            p = paddle.nn.functional.max_pool2d(r, kernel_size=2, stride=2)
            return paddle.static.nn.fc(p, 5)
        self.model("conv", build, [2, 3, 8, 8], seed=4321)
        self.models[-1]["note"] = ("conv2d 3->4 k3 p1 (+bias), batch_norm (inference stats), relu, "
                                   "max_pool2d 2x2, fc 64->5; params set from numpy RandomState(4321)")

    def quirks(self):
        """Dtypes with no mapping: record what Paddle does (no exception, garbage file)."""
        print("== quirks")
        for name in ("SIZE_T", "UINT16", "UINT32", "UINT64", "FP8_E4M3FN", "FP8_E5M2"):
            code = DTYPES[name][0]
            if getattr(VT, name, None) is not None and name != "SIZE_T":
                if self._writable(name):
                    continue
            t = DenseTensor()
            t._set_dims([2, 3])
            try:
                vt = VT(code)
                ptr = t._mutable_data(PLACE, vt)
            except Exception as e:  # noqa: BLE001
                self.notes.append("VarType(%d) (%s): %s" % (code, name, exc_text(e)))
                continue
            d = os.path.join(self.out, "quirks")
            os.makedirs(d, exist_ok=True)
            p = os.path.join(d, "unmapped_%s.bin" % name.lower())
            SAVE_DENSE(t, p)
            self.notes.append(
                "VarType(%d) (%s) via DenseTensor._mutable_data: no exception; ptr=%s, tensor dtype became %s; "
                "%s then wrote %s (%d bytes: header claims dtype RAW=17, dims [2,3], and NO data bytes). "
                "A strict decoder must reject dtype 17." % (code, name, hex(ptr), t._dtype(), SAVE_DENSE_API,
                                                             self.rel(p), os.path.getsize(p)))
            print("  quirk", self.rel(p))

    def _writable(self, name):
        return any(f for f in self.files if f["records"][0]["dtype"] == name and f["kind"] == "single")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    paddle.seed(0)
    np.random.seed(0)
    fx = Fixtures(out)
    fx.dtypes()
    fx.shapes()
    fx.lods()
    fx.combined()
    fx.mlp()
    fx.conv()
    fx.quirks()
    written = sorted({f["records"][0]["dtype"] for f in fx.files if f["kind"] == "single"
                      for _ in [0]} | {r["dtype"] for f in fx.files for r in f["records"]})
    coverage = {}
    for dt in DTYPES:
        ws = sorted({f["writer"] for f in fx.files for r in f["records"] if r["dtype"] == dt})
        coverage[dt] = {"code": DTYPES[dt][0], "written_by": ws,
                        "skipped": [s["writer"] + ": " + s["exception"] for s in fx.skipped
                                    if s.get("dtype") == dt]}
    manifest = {
        "paddle_version": PV,
        "paddle_commit": getattr(paddle.version, "commit", None),
        "numpy_version": np.__version__,
        "python": sys.version.split()[0],
        "env": {"FLAGS_enable_pir_api": os.environ["FLAGS_enable_pir_api"]},
        "layout_note": "u32 version=0; u64 lod_level; per level u64 nbytes + offsets(u64); u32 tensor "
                       "version=0; i32 desc_size; TensorDesc proto; raw data. Combined = records back to "
                       "back in byte-order of names.",
        "dtype_coverage": coverage,
        "files": fx.files,
        "models": fx.models,
        "skipped": fx.skipped,
        "notes": fx.notes,
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print("wrote %d files (+%d models), %d skipped, %d bytes total" % (len(fx.files), len(fx.models),
                                                                     len(fx.skipped), total))


if __name__ == "__main__":
    main()
