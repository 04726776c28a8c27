"""Helpers the Python tests share (no gcc_graph import here: tests/python_package.py must use the
installed package): safetensors reading, the relative error, and an expected exception."""
import json
import struct

import numpy as np


def read_st(path):
    """{name: NumPy array} of a safetensors file (the dtypes the corpus uses)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "BOOL": np.bool_}
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__"}


def rel(a, ref):
    """Relative L2 distance of a from ref (NumPy arrays, torch tensors or numbers)."""
    a = np.asarray(a.detach().cpu() if hasattr(a, "detach") else a, np.float64)
    ref = np.asarray(ref.detach().cpu() if hasattr(ref, "detach") else ref, np.float64)
    return float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-300))


def raises(exc, text, f, *a, **k):
    """f(*a, **k) must raise exc with text in its message."""
    try:
        f(*a, **k)
    except exc as e:
        assert text in str(e), f"{exc.__name__} without {text!r}: {e}"
        return
    raise AssertionError(f"no {exc.__name__} ({text})")
