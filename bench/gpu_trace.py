#!/usr/bin/env python3
"""gpu_trace.py MODEL.so INPUTS.safetensors MODEL_CU [TOP] [--explain EXPLAIN_JSON [--ceiling TFLOPS]]:
the GPU time of each kernel of a CUDA model's call as it runs in production: its captured graph
replayed, the kernels back to back, each timed by CUPTI through torch.profiler. ncu (bench/gpu_profile.py)
runs each kernel alone with the profiler's work between them: the sum of its times was 12% over the
graph's whole run for BERT-base bf16 (0.879 against 0.783 ms), and the products' rate it gives is low
by as much. Runs the model (the gcc_graph package of python/, on torch CUDA tensors) 5 times, traces 3
more, and prints gpu_profile.py's tables for the last call: by kind, the TOP (default 25) kernels, and
with --explain (`gcc-graph explain MODEL --target cuda --json`) the products' FLOPs over their cuBLAS
kernels' time, issue 18's criterion. INPUTS as `gcc-graph run --inputs` takes them (in.0, in.1, ...)."""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.autograd import DeviceType
from gcc_graph import Model
from gpu_profile import last_call, node_names, options, report
from gpu_suite import load_st


def main():
    args, opt = options(sys.argv[1:], __doc__)
    if len(args) < 3:
        sys.exit(__doc__)
    m = Model(args[0])
    if not m.cuda:
        sys.exit("%s: a CPU model; gpu_trace.py traces models compiled with --target cuda" % args[0])
    ins = load_st(args[1])
    xs = [ins["in.%d" % i].cuda() for i in range(sum(k.startswith("in.") for k in ins))]
    for _ in range(5):
        m(*xs)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            m(*xs)
        torch.cuda.synchronize()
    ev = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))),
                key=lambda e: e.time_range.start)
    rows = [(e.name, e.time_range.elapsed_us() / 1e3) for e in ev]
    if not rows:
        sys.exit("no kernel was traced (torch.profiler saw no CUDA activity)")
    call = last_call(rows)
    span = ev[-len(call):]
    print("graph run (first kernel's start to last kernel's end): %.3f ms" % ((span[-1].time_range.end - span[0].time_range.start) / 1e3))
    report(call, node_names(args[2]), int(args[3]) if len(args) > 3 else 25, opt)


if __name__ == "__main__":
    main()
