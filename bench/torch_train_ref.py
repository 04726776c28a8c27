#!/usr/bin/env python3
"""torch_train_ref.py MODEL_DIR WEIGHTS INPUT THREADS ITERS OUT: PyTorch eager (or torch.compile with
TORCH_REF_COMPILE=1) forward + backward of a training benchmark model (bench/train_models.py) on the
same weights, inputs and thread count as gcc-graph; prints {"median_ms": ...} for one step (the loss
and the gradients of every parameter) and writes the loss to OUT (raw float32)."""
import json, os, statistics, sys, time
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_models import MODELS
from torch_ref_io import load_st

model_dir, weights, inp, threads, iters, out_path = sys.argv[1:7]
torch.set_num_threads(int(threads))
name = os.path.basename(os.path.normpath(model_dir))
m = MODELS[name][0]()
missing = m.load_state_dict(load_st(weights), strict=False)
assert not missing.missing_keys, missing.missing_keys
m.train()
st = load_st(inp)
args = [st[f"in.{i}"] for i in range(len(st))]
compile_s = 0.0
f = m
if os.environ.get("TORCH_REF_COMPILE") == "1":
    t0 = time.perf_counter()
    f = torch.compile(m)
    f(*args).backward()
    compile_s = time.perf_counter() - t0

def step():
    for p in m.parameters(): p.grad = None
    loss = f(*args)
    loss.backward()
    return loss

for _ in range(3): step()
ts = []
for _ in range(int(iters)):
    t0 = time.perf_counter(); loss = step(); ts.append((time.perf_counter() - t0) * 1e3)
np.array([loss.item()], dtype=np.float32).tofile(out_path)
print(json.dumps({"median_ms": statistics.median(ts), "torch": torch.__version__, "threads": torch.get_num_threads(), "compile_s": compile_s}))
