#!/usr/bin/env python3
"""torch_ref.py MODEL_DIR WEIGHTS INPUT THREADS ITERS OUT: PyTorch eager on the same weights and input.

Builds the PyTorch module that the bench model was exported from (torchvision's, or the plain
definitions below, whose parameter names match the exported graph), loads WEIGHTS, runs INPUT with
THREADS threads, prints {"median_ms": ...} and writes its output to OUT (raw float32) so that the
harness can check the two agree."""
import json, os, statistics, struct, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

model_dir, weights, inp, threads, iters, out_path = sys.argv[1:7]
torch.set_num_threads(int(threads))
name = os.path.basename(os.path.normpath(model_dir))

def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    dt = {"F32": np.float32, "I64": np.int64, "F64": np.float64}
    return {k: torch.from_numpy(np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"]).copy())
            for k, v in h.items() if k != "__metadata__"}


class Block(nn.Module):
    def __init__(s, d=256, h=4, f=1024):
        super().__init__(); s.h = h
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.fc1 = nn.Linear(d, f); s.fc2 = nn.Linear(f, d)
    def forward(s, x):
        B, T, D = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(D, dim=-1)
        q, k, v = [t.view(B, T, s.h, D // s.h).transpose(1, 2) for t in (q, k, v)]
        a = (q @ k.transpose(-2, -1) / 8.0).softmax(-1) @ v
        x = x + s.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))

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
compile_s = 0.0
if os.environ.get("TORCH_REF_COMPILE") == "1":   # torch.compile (Inductor), compile time measured apart
    t0 = time.perf_counter()
    m = torch.compile(m)
    with torch.no_grad(): m(x)
    compile_s = time.perf_counter() - t0
with torch.no_grad():
    for _ in range(3): y = m(x)
    ts = []
    for _ in range(int(iters)):
        t0 = time.perf_counter(); y = m(x); ts.append((time.perf_counter() - t0) * 1e3)
y.detach().numpy().astype(np.float32).tofile(out_path)
print(json.dumps({"median_ms": statistics.median(ts), "torch": torch.__version__, "threads": torch.get_num_threads(), "compile_s": compile_s}))
