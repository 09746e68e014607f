"""Writes the Paddle 3 PIR fixtures: programs as Paddle 3.x saves them by default.

    /work/venvs/paddle3/bin/python tests/paddle/make_pir_fixtures.py tests/fixtures/paddle/pir

FLAGS_enable_pir_api is left at Paddle 3's default (PIR on), so `paddle.jit.save`
writes `<prefix>.json` (a PIR program) + `<prefix>.pdiparams`. For each model it also
writes `<name>.input.npy` and `<name>.output.npy`: the output of Paddle running the
saved model loaded back with `paddle.jit.load`. `models.json` records the Paddle
version and, per model, the parameter names in the order of the .pdiparams records
(checked here against the layer's own parameter values, record by record).
"""

import json
import os
import struct
import sys

import numpy as np

assert os.environ.get("FLAGS_enable_pir_api", "1") not in ("0", "false", "False"), (
    "run with PIR on (Paddle 3's default)"
)
import paddle  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/paddle/pir"
os.makedirs(OUT, exist_ok=True)
paddle.seed(7)
rng = np.random.default_rng(7)


class Mlp(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(8, 16)
        self.fc2 = paddle.nn.Linear(16, 4)

    def forward(self, x):
        return paddle.nn.functional.softmax(self.fc2(paddle.nn.functional.relu(self.fc1(x))))


class Cnn(paddle.nn.Layer):
    """conv 3->4 (k3, p1), batch norm (running mean/var: persistable, not trained),
    relu, max pool 2x2, fc 64->5 with a frozen bias, times a float64 buffer."""

    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(4)
        self.fc = paddle.nn.Linear(64, 5)
        self.fc.bias.stop_gradient = True
        self.register_buffer("scale", paddle.to_tensor(np.array([0.5], dtype="float64")))

    def forward(self, x):
        y = paddle.nn.functional.relu(self.bn(self.conv(x)))
        y = paddle.nn.functional.max_pool2d(y, 2).flatten(1)
        return self.fc(y) * self.scale.astype("float32")


def records(path):
    """(dims, float64 values) of each record of a .pdiparams (dense, no LoD)."""
    b = open(path, "rb").read()
    o, out = 0, []
    while o < len(b):
        o += 4
        (lod,) = struct.unpack_from("<Q", b, o)
        o += 8
        assert lod == 0
        o += 4
        (n,) = struct.unpack_from("<i", b, o)
        o += 4
        desc = b[o : o + n]
        o += n
        i, dt, dims = 0, None, []

        def var(i):
            r = s = 0
            while True:
                c = desc[i]
                i += 1
                r |= (c & 0x7F) << s
                s += 7
                if c < 0x80:
                    return r, i

        while i < len(desc):
            k, i = var(i)
            if k == 0x08:
                dt, i = var(i)
            elif k == 0x10:
                v, i = var(i)
                dims.append(v)
            elif k == 0x12:
                ln, i = var(i)
                end = i + ln
                while i < end:
                    v, i = var(i)
                    dims.append(v)
        np_dt = {5: "<f4", 6: "<f8"}[dt]
        count = int(np.prod(dims)) if dims else 1
        size = count * np.dtype(np_dt).itemsize
        out.append((dims, np.frombuffer(b[o : o + size], np_dt).astype("f8")))
        o += size
    return out


manifest = {"paddle_version": paddle.__version__, "paddle_commit": paddle.version.commit,
            "models": {}}
for name, layer, shape in [("mlp", Mlp(), [3, 8]), ("cnn", Cnn(), [2, 3, 8, 8])]:
    # Distinct values everywhere, so a record in the wrong place shows.
    values = {}
    for p in list(layer.parameters()) + list(layer.buffers()):
        v = rng.standard_normal(p.shape).astype(p.numpy().dtype)
        if "w_2" in p.name:  # batch norm variance: positive
            v = np.abs(v) + 0.5
        p.set_value(v)
        values[p.name] = v
    layer.eval()
    prefix = os.path.join(OUT, name)
    spec = [paddle.static.InputSpec([None] + shape[1:], "float32", "x")]
    paddle.jit.save(layer, prefix, input_spec=spec)
    x = rng.standard_normal(shape).astype("float32")
    loaded = paddle.jit.load(prefix)
    loaded.eval()
    y = loaded(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(y, layer(paddle.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    np.save(prefix + ".input.npy", x)
    np.save(prefix + ".output.npy", y)
    order = sorted(values)
    recs = records(prefix + ".pdiparams")
    assert len(recs) == len(order), (len(recs), order)
    for n, (dims, got) in zip(order, recs):
        want = values[n]
        assert list(want.shape) == dims, (n, want.shape, dims)
        assert np.array_equal(want.astype("f8").ravel(), got), n
    manifest["models"][name] = {
        "params_in_record_order": order,
        "input_shape": shape,
        "output_shape": list(y.shape),
    }
    # The file itself is not read back for anything else; no ".pdiparams.info" is needed.
    for extra in (".pdiparams.info",):
        if os.path.exists(prefix + extra):
            os.remove(prefix + extra)

with open(os.path.join(OUT, "models.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
print("wrote", sorted(os.listdir(OUT)))
