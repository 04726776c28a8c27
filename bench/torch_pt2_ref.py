#!/usr/bin/env python3
"""torch_pt2_ref.py MODEL.pt2 IO.safetensors DEVICE ITERS: PyTorch on an exported program's own
module (torch.export.load(...).module()), eager and torch.compile, on the inputs in.N of IO, timed to
the end of each run. Prints {"eager_ms", "compile_ms", "compile_s"}: a reference for any .pt2 (the
corpus's BERT tiny, GPT-2 and Llama blocks) without the Python class it was exported from."""
import json, os, statistics, sys, time
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref_io import load_st

path, io, dev, iters = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.backends.cuda.matmul.allow_tf32 = False
m = torch.export.load(path).module().to(dev)
t = load_st(io)
xs = [t[f"in.{i}"].to(dev) for i in range(len([k for k in t if k.startswith("in.")]))]
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
def bench(f):
    with torch.no_grad():
        for _ in range(3): f(*xs)
        sync()
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter(); f(*xs); sync(); ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)
eager = bench(m)
t0 = time.perf_counter()
c = torch.compile(m)
with torch.no_grad(): c(*xs)
sync()
cs = time.perf_counter() - t0
print(json.dumps({"eager_ms": eager, "compile_ms": bench(c), "compile_s": cs}))
