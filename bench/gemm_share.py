#!/usr/bin/env python3
"""gemm_share.py M,N,K[,bias] ...: cuBLAS's own time for a model's matrix products (float32, TF32
off), each timed alone through PyTorch (addmm when ",bias"), as the GPU ceiling of a GEMM-bound model:
ceiling / our time is the fraction of cuBLAS's throughput the whole model reaches. Prints one JSON
line: per-product ms and TFLOP/s, and their sum."""
import json, sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
def timed(f, n=200):
    for _ in range(10): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
out, total = [], 0.0
for spec in sys.argv[1:]:
    p = spec.split(",")
    M, N, K = (int(v) for v in p[:3])
    a = torch.randn(M, K, device="cuda"); w = torch.randn(N, K, device="cuda"); b = torch.randn(N, device="cuda")
    ms = timed((lambda: torch.addmm(b, a, w.t())) if len(p) > 3 else (lambda: a @ w.t()))
    total += ms
    out.append({"mnk": [M, N, K], "ms": round(ms, 4), "tflops": round(2 * M * N * K / ms / 1e9, 1)})
print(json.dumps({"products": out, "sum_ms": round(total, 4)}))
