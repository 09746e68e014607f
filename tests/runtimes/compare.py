"""How the runtime checks (tests/tf/run_exported.py, tests/onnx/run_exported.py) compare
outputs: an export's outputs with the original's, run in the same process, bit for bit;
the original's with the outputs recorded when the fixture was made (maybe on another CPU,
whose summation order differs) only loosely. Imported by both runners (each adds this
directory to sys.path); needs numpy alone."""

import numpy as np

# The loose check's tolerance, relative to the recorded output's largest finite magnitude.
RECORDED_TOLERANCE = 1e-5


def as_float(a):
    """A recorded bfloat16 output (saved as its uint16 bits) as float32; others as they are."""
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def bit_equal(a, b):
    """Same dtype, shape and bytes (NaN payloads included): the stronger claim."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "OSU":
        return a.tolist() == b.tolist()
    return a.tobytes() == b.tobytes()


def near_recorded(got, recorded, bf16=False):
    """The loose cross-CPU check against an output recorded when the fixture was made:
    floats within RECORDED_TOLERANCE of the recorded output's largest finite magnitude
    (NaNs and infinities where it has them), everything else exact. `bf16`: both are
    bfloat16 bits, compared as floats."""
    got, recorded = np.asarray(got), np.asarray(recorded)
    if got.shape != recorded.shape:
        return False
    if bf16:
        got, recorded = as_float(got), as_float(recorded)
    if got.dtype.kind not in "fc":
        return bit_equal(got, recorded)
    finite = np.abs(recorded[np.isfinite(recorded)])
    scale = float(finite.max()) if finite.size else 0.0
    return bool(np.allclose(got, recorded, rtol=0, atol=RECORDED_TOLERANCE * scale, equal_nan=True))
