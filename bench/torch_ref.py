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

class Conv1D(nn.Module):   # Hugging Face GPT-2's linear layer: weight [in, out], y = x @ w + b
    def __init__(s, i, o):
        super().__init__(); s.weight = nn.Parameter(torch.empty(i, o)); s.bias = nn.Parameter(torch.empty(o))
    def forward(s, x):
        return torch.addmm(s.bias, x.reshape(-1, x.shape[-1]), s.weight).view(*x.shape[:-1], -1)

def heads(x, h):   # [B, T, D] -> [B, h, T, D/h]
    return x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)

def attention(q, k, v, causal=False):   # scaled dot-product attention (PyTorch 1.13 has no F.scaled_dot_product_attention)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v

class GPT2(nn.Module):   # transformers' GPT2Model (default configuration), its parameter names; output: last_hidden_state
    def __init__(s, L=12, d=768, nh=12, vocab=50257, npos=1024):
        super().__init__(); s.nh = nh
        s.wte, s.wpe = nn.Embedding(vocab, d), nn.Embedding(npos, d)
        s.h = nn.ModuleList([nn.ModuleDict(dict(ln_1=nn.LayerNorm(d), attn=nn.ModuleDict(dict(c_attn=Conv1D(d, 3 * d), c_proj=Conv1D(d, d))),
                                                ln_2=nn.LayerNorm(d), mlp=nn.ModuleDict(dict(c_fc=Conv1D(d, 4 * d), c_proj=Conv1D(4 * d, d)))))
                             for _ in range(L)])
        s.ln_f = nn.LayerNorm(d)
    def forward(s, ids):
        x = s.wte(ids) + s.wpe(torch.arange(ids.shape[1]))
        for b in s.h:
            q, k, v = b["attn"]["c_attn"](b["ln_1"](x)).split(x.shape[-1], dim=2)
            a = attention(heads(q, s.nh), heads(k, s.nh), heads(v, s.nh), causal=True)
            x = x + b["attn"]["c_proj"](a.transpose(1, 2).reshape(x.shape))
            x = x + b["mlp"]["c_proj"](F.gelu(b["mlp"]["c_fc"](b["ln_2"](x)), approximate="tanh"))
        return s.ln_f(x)

class Bert(nn.Module):   # transformers' BertModel (default configuration), its parameter names; output: last_hidden_state
    def __init__(s, L=12, d=768, nh=12, vocab=30522):
        super().__init__(); s.nh = nh
        s.embeddings = nn.ModuleDict(dict(word_embeddings=nn.Embedding(vocab, d), position_embeddings=nn.Embedding(512, d),
                                          token_type_embeddings=nn.Embedding(2, d), LayerNorm=nn.LayerNorm(d, eps=1e-12)))
        def layer():
            return nn.ModuleDict(dict(attention=nn.ModuleDict(dict(self=nn.ModuleDict(dict(query=nn.Linear(d, d), key=nn.Linear(d, d), value=nn.Linear(d, d))),
                                                                  output=nn.ModuleDict(dict(dense=nn.Linear(d, d), LayerNorm=nn.LayerNorm(d, eps=1e-12))))),
                                      intermediate=nn.ModuleDict(dict(dense=nn.Linear(d, 4 * d))),
                                      output=nn.ModuleDict(dict(dense=nn.Linear(4 * d, d), LayerNorm=nn.LayerNorm(d, eps=1e-12)))))
        s.encoder = nn.ModuleDict(dict(layer=nn.ModuleList([layer() for _ in range(L)])))
    def forward(s, ids):
        e = s.embeddings
        x = e["LayerNorm"](e["word_embeddings"](ids) + e["position_embeddings"](torch.arange(ids.shape[1])) + e["token_type_embeddings"].weight[0])
        for b in s.encoder["layer"]:
            at = b["attention"]
            q, k, v = (heads(at["self"][n](x), s.nh) for n in ("query", "key", "value"))
            a = attention(q, k, v).transpose(1, 2).reshape(x.shape)
            x = at["output"]["LayerNorm"](x + at["output"]["dense"](a))
            x = b["output"]["LayerNorm"](x + b["output"]["dense"](F.gelu(b["intermediate"]["dense"](x))))
        return x

if name.startswith("mlp_big"): m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
elif name.startswith("encoder"): m = Encoder()
elif name.startswith("gpt2"): m = GPT2()
elif name.startswith("bert"): m = Bert()
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
