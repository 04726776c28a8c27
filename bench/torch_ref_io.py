"""torch_ref_io.py: helpers of the PyTorch side of the harness: read a safetensors file into torch
tensors (NumPy only, no safetensors package), and time PyTorch's variants and gcc-graph's in
alternating rounds."""
import json, statistics, struct, subprocess, time
import numpy as np
import torch


def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    dt = {"F32": np.float32, "I64": np.int64, "F64": np.float64, "I32": np.int32, "F16": np.float16, "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8}
    return {k: torch.from_numpy(np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"]).copy())
            for k, v in h.items() if k != "__metadata__" and v["dtype"] in dt}


def interleaved(fns, iters, rounds, ours_cmd, sync=lambda: None):
    """Times each callable of fns (name -> f) and, when ours_cmd (an argv list: `gcc-graph bench ...`)
    is given, gcc-graph under the name "gcc-graph", in `rounds` rounds that alternate between them, so
    that a slow stretch of a noisy machine hits every side alike. Each round takes the median of
    `iters` runs after 3 warm-up runs. Returns (name -> median of the round medians, name -> the list
    of round medians)."""
    per = {k: [] for k in (["gcc-graph"] if ours_cmd else []) + list(fns)}
    for _ in range(rounds):
        if ours_cmd:
            out = subprocess.run(ours_cmd, capture_output=True, text=True, check=True).stdout
            per["gcc-graph"].append(json.loads(out.strip().splitlines()[-1])["median_ms"])
        for k, f in fns.items():
            for _ in range(3): f()
            sync()
            ts = []
            for _ in range(iters):
                t0 = time.perf_counter(); f(); sync(); ts.append((time.perf_counter() - t0) * 1e3)
            per[k].append(round(statistics.median(ts), 3))
    return {k: round(statistics.median(v), 3) for k, v in per.items()}, per
