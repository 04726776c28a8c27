#!/usr/bin/env python3
"""The gcc_graph package's cost per call: MODEL.so called through gcc_graph.Model with torch tensors
and with NumPy arrays, against the floor, the model's gg_run called through ctypes with DLTensors
built once (what a C caller pays, plus one ctypes call). Alternating rounds, medians of each round's
mean. Usage: bench/python_overhead.py MODEL.so [ROUNDS [CALLS]]   (a small model shows the overhead)"""
import ctypes
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gcc_graph  # noqa: E402

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
m = gcc_graph.load(path)
dev = str(m.device)
names, back = gcc_graph._dlpack.torch_names(torch)
xs = []
for i in m.metadata["inputs"]:
    shape = [d if isinstance(d, int) else 2 for d in i["shape"]]
    dt = back[i["dtype"]]
    xs.append(torch.randn(shape).to(dt).to(dev) if dt.is_floating_point else torch.zeros(shape, dtype=dt, device=dev))
nps = [x.cpu().numpy() for x in xs] if not m.cuda else None

# the floor: DLTensors made once, outputs allocated once, gg_run through ctypes
outs = m(*xs)
outs = outs if isinstance(outs, tuple) else (outs,)
D = gcc_graph._dlpack
kind = D.KDL_CUDA if m.cuda else D.KDL_CPU
keep = []
din = (D.DLTensor * len(xs))()
for i, x in enumerate(xs):
    din[i], s = D.tensor(x.data_ptr(), kind, m.device_index, names[x.dtype], tuple(x.shape))
    keep.append(s)
dout = (D.DLTensor * len(outs))()
for i, o in enumerate(outs):
    dout[i], s = D.tensor(o.data_ptr(), kind, m.device_index, names[o.dtype], tuple(o.shape))
    keep.append(s)
err = ctypes.create_string_buffer(1024)
run, argv = m._fast.gg_run, (m._handle, din, ctypes.c_int(len(xs)), dout, ctypes.c_int(len(outs)), err, ctypes.c_size_t(1024))
if m.cuda:
    torch.cuda.synchronize()


def floor():
    for _ in range(calls):
        if run(*argv):
            raise RuntimeError(err.value)


def torch_call():
    for _ in range(calls):
        m(*xs)


def numpy_call():
    for _ in range(calls):
        m(*nps)


ways = {"floor (ctypes gg_run)": floor, "gcc_graph torch": torch_call}
if nps is not None:
    ways["gcc_graph numpy"] = numpy_call
for f in ways.values():
    f()
us = {k: [] for k in ways}
for _ in range(rounds):
    for k, f in ways.items():
        t = time.perf_counter()
        f()
        us[k].append((time.perf_counter() - t) / calls * 1e6)
base = statistics.median(us["floor (ctypes gg_run)"])
print(f"{path} ({m.metadata['device']}, {torch.get_num_threads()} threads, torch {torch.__version__}): microseconds per call, "
      f"median of {rounds} rounds of {calls}")
for k, v in us.items():
    med = statistics.median(v)
    print(f"  {k:24s} {med:8.2f} us" + ("" if k.startswith("floor") else f"   (+{med - base:.2f} us over the floor)"))
