#!/usr/bin/env python3
"""gpu_ceiling.py: what the GPU allows, measured through PyTorch: cuBLAS's float32 GEMM rate (TF32
off, as gcc-graph and PyTorch's default use) at 8192^3, and a device-to-device copy's bandwidth
(bytes read plus written). Prints one JSON line with sgemm_gflops and copy_gbs."""
import json, torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
def timed(f, n):
    for _ in range(3): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n / 1e3
t = timed(lambda: a @ b, 10)
x = torch.empty(1 << 28, device="cuda"); y = torch.empty_like(x)
tc = timed(lambda: y.copy_(x), 20)
print(json.dumps({"sgemm_gflops": round(2 * 8192 ** 3 / t / 1e9, 1), "copy_gbs": round(2 * x.numel() * 4 / tc / 1e9, 1), "gpu": torch.cuda.get_device_name()}))
