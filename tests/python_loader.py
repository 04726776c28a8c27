"""Checks the gcc_graph package (python/, from the source tree): a compiled model called from Python on NumPy arrays (and torch
tensors when torch is installed) gives PyTorch's stored outputs. Usage: python_loader.py MODEL.so IO"""
import json, os, sys
import numpy as np
sys.path.insert(0, "python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gcc_graph import Model
from pytest_util import read_st

def main():
    m = Model(sys.argv[1])
    schema = json.load(open("schemas/metadata.schema.json"))
    missing = [k for k in schema["required"] if k not in m.metadata]
    assert not missing, f"metadata lacks {missing}"
    for g in m.metadata["guards"]:
        assert all(k in g for k in schema["properties"]["guards"]["items"]["required"]), g
    io = read_st(sys.argv[2])
    xs = [io[f"in.{i}"] for i in range(len(m.metadata["inputs"]))]
    ys = m(*xs)
    for i, y in enumerate(ys if isinstance(ys, tuple) else (ys,)):
        ref = io[f"ref64.out.{i}"]
        err = np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref)
        assert err < 1e-5, f"out.{i}: relative error {err}"
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ys = m(*[torch.from_numpy(x.copy()) for x in xs])
        assert np.allclose((ys if isinstance(ys, tuple) else (ys,))[0], io["out.0"], rtol=1e-4, atol=1e-6), "torch input"
    try:
        m(*(xs + xs))
        raise AssertionError("extra input accepted")
    except TypeError:
        pass
    bad = [x.astype(np.float64) for x in xs]
    try:
        m(*bad)
        raise AssertionError("float64 input accepted")
    except ValueError as e:
        assert "dtype mismatch" in str(e), str(e)
    print("python loader ok" + (" (numpy and torch)" if torch is not None else " (numpy)"))


if __name__ == "__main__":
    main()
