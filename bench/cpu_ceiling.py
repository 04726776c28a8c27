#!/usr/bin/env python3
"""cpu_ceiling.py THREADS: what the CPU allows, measured through PyTorch (its sgemm is MKL's or
oneDNN's): a 2048^3 product in float32 and in bfloat16 (oneDNN, on AMX where the CPU has it) and a
256 MiB tensor copy (bytes read plus written), each the best of five at THREADS threads. One JSON line
with sgemm_gflops, bgemm_gflops and copy_gbs; bench/run.sh takes
the better of these and bench/ceiling.c's (OpenBLAS, an OpenMP memcpy)."""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
def best(f, n=5):
    f()
    t = []
    for _ in range(n):
        s = time.perf_counter(); f(); t.append(time.perf_counter() - s)
    return min(t)
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
tg = best(lambda: a @ b)
ah, bh = a.bfloat16(), b.bfloat16()
th = best(lambda: ah @ bh)
x = torch.ones(1 << 26); y = torch.empty_like(x)
tc = best(lambda: y.copy_(x))
print(json.dumps({"sgemm_gflops": round(2 * 2048 ** 3 / tg / 1e9, 1), "bgemm_gflops": round(2 * 2048 ** 3 / th / 1e9, 1), "copy_gbs": round(2 * x.numel() * 4 / tc / 1e9, 2), "by": "torch " + torch.__version__}))
