"""torch_ref_io.py: read a safetensors file into torch tensors (NumPy only, no safetensors package)."""
import json, struct
import numpy as np
import torch


def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    dt = {"F32": np.float32, "I64": np.int64, "F64": np.float64, "I32": np.int32, "F16": np.float16, "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8}
    return {k: torch.from_numpy(np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"]).copy())
            for k, v in h.items() if k != "__metadata__" and v["dtype"] in dt}
