#!/usr/bin/env python3
"""gpu_ceiling.py [M,N,K[,bias] ...]: what the GPU allows, measured through PyTorch (float32, TF32
off, as gcc-graph and PyTorch's default use).
Without arguments: cuBLAS's GEMM rate at 8192^3 and a device-to-device copy's bandwidth (bytes read
plus written); one JSON line with sgemm_gflops and copy_gbs.
With products: cuBLAS's own time for each (addmm when ",bias"), timed alone, and their sum: the
ceiling of a GEMM-bound model (that sum / the model's time is the fraction of cuBLAS's throughput
it reaches); one JSON line with per-product ms and TFLOP/s and sum_ms."""
import json, sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
def timed(f, n):
    for _ in range(3): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n / 1e3
if len(sys.argv) > 1:
    out, total = [], 0.0
    for spec in sys.argv[1:]:
        p = spec.split(",")
        M, N, K = (int(v) for v in p[:3])
        a = torch.randn(M, K, device="cuda"); w = torch.randn(N, K, device="cuda"); b = torch.randn(N, device="cuda")
        ms = 1e3 * timed((lambda: torch.addmm(b, a, w.t())) if len(p) > 3 else (lambda: a @ w.t()), 200)
        total += ms
        out.append({"mnk": [M, N, K], "ms": round(ms, 4), "tflops": round(2 * M * N * K / ms / 1e9, 1)})
    print(json.dumps({"products": out, "sum_ms": round(total, 4)}))
    sys.exit(0)
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
t = timed(lambda: a @ b, 10)
x = torch.empty(1 << 28, device="cuda"); y = torch.empty_like(x)
tc = timed(lambda: y.copy_(x), 20)
print(json.dumps({"sgemm_gflops": round(2 * 8192 ** 3 / t / 1e9, 1), "copy_gbs": round(2 * x.numel() * 4 / tc / 1e9, 1), "gpu": torch.cuda.get_device_name()}))
