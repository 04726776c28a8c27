#!/usr/bin/env python3
"""torch_ref.py MODEL_DIR WEIGHTS INPUT THREADS ITERS OUT [ROUNDS [GCC_GRAPH_BENCH...]]: PyTorch eager
(and torch.compile with TORCH_REF_COMPILE=1) on the same weights and input as gcc-graph.

Builds the PyTorch module that the bench model was exported from (torchvision's, or the plain
definitions below, whose parameter names match the exported graph), loads WEIGHTS, runs INPUT with
THREADS threads and writes its output to OUT (raw float32) so that the harness can check the two
agree. Times eager, torch.compile and the gcc-graph bench command given (an argv) in ROUNDS rounds
that alternate between them (torch_ref_io.interleaved) and prints one JSON line:
{"eager_ms", "compile_ms", "gcc_graph_ms": medians over the rounds, "compile_s", "rounds": ...}."""
import json, os, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref_io import interleaved, load_st
from train_models import Block

model_dir, weights, inp, threads, iters, out_path = sys.argv[1:7]
torch.set_num_threads(int(threads))
name = os.path.basename(os.path.normpath(model_dir))

class Encoder(nn.Module):
    def __init__(s):
        super().__init__(); s.blocks = nn.ModuleList([Block(), Block()]); s.ln = nn.LayerNorm(256)
    def forward(s, x):
        for b in s.blocks: x = b(x)
        return s.ln(x)

if name.startswith("mlp_big"): m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
elif name.startswith("encoder"): m = Encoder()
else:
    import torchvision
    m = torchvision.models.resnet18() if name.startswith("resnet18") else torchvision.models.mobilenet_v3_small()
state = load_st(weights)
missing = m.load_state_dict(state, strict=False)
assert not missing.missing_keys, missing.missing_keys
m.eval()
x = load_st(inp)["in.0"]
dev = os.environ.get("TORCH_REF_DEVICE", "cpu")   # cuda: the GPU, each run timed to its end
torch.backends.cudnn.allow_tf32 = False            # float32 convolutions, as gcc-graph computes them
torch.backends.cuda.matmul.allow_tf32 = False
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
m = m.to(dev)
x = x.to(dev)
compile_s = 0.0
fns = {"eager": lambda: m(x)}
if os.environ.get("TORCH_REF_COMPILE") == "1":   # torch.compile (Inductor), compile time measured apart
    try:
        t0 = time.perf_counter()
        mc = torch.compile(m)
        with torch.no_grad(): mc(x)
        sync()
        compile_s = time.perf_counter() - t0
        fns["compile"] = lambda: mc(x)
    except Exception as e:   # the table says "failed" with this line
        print(f"torch.compile failed: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
rounds = int(sys.argv[7]) if len(sys.argv) > 7 else 1
with torch.no_grad():
    med, per = interleaved(fns, int(iters), rounds, sys.argv[8:], sync)
    y = m(x)
y.detach().cpu().numpy().astype(np.float32).tofile(out_path)
print(json.dumps({"eager_ms": med["eager"], "compile_ms": med.get("compile"), "gcc_graph_ms": med.get("gcc-graph"),
                  "compile_s": compile_s, "rounds": per, "torch": torch.__version__, "threads": torch.get_num_threads()}))
