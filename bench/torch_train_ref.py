#!/usr/bin/env python3
"""torch_train_ref.py MODEL_DIR WEIGHTS INPUT THREADS ITERS OUT [ROUNDS [GCC_GRAPH_BENCH...]]: PyTorch
eager (and torch.compile with TORCH_REF_COMPILE=1) forward + backward of a training benchmark model
(bench/train_models.py) on the same weights, inputs and thread count as gcc-graph; times one step (the
loss and the gradients of every parameter) as torch_ref.py does, alternating with the gcc-graph bench
command given, prints the same JSON line and writes the loss to OUT (raw float32)."""
import json, os, sys, time
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_models import MODELS
from torch_ref_io import interleaved, load_st

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
fc = None
if os.environ.get("TORCH_REF_COMPILE") == "1":
    try:
        t0 = time.perf_counter()
        fc = torch.compile(m)
        fc(*args).backward()
        compile_s = time.perf_counter() - t0
    except Exception as e:   # the table says "failed" with this line
        fc = None
        print(f"torch.compile failed: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)

def step(f):
    for p in m.parameters(): p.grad = None
    loss = f(*args)
    loss.backward()
    return loss

fns = {"eager": lambda: step(m)}
if fc is not None: fns["compile"] = lambda: step(fc)
rounds = int(sys.argv[7]) if len(sys.argv) > 7 else 1
med, per = interleaved(fns, int(iters), rounds, sys.argv[8:])
np.array([step(m).item()], dtype=np.float32).tofile(out_path)
print(json.dumps({"eager_ms": med["eager"], "compile_ms": med.get("compile"), "gcc_graph_ms": med.get("gcc-graph"),
                  "compile_s": compile_s, "rounds": per, "torch": torch.__version__, "threads": torch.get_num_threads()}))
