"""Checks the gcc_graph Python package (python/) as a user gets it: pip-installed into a fresh venv,
run from another folder. Usage: python_package.py DIR, where DIR holds mlp.pt2 and mlp.st (the
corpus mlp and its io.safetensors), train.pt2 and train.st (mlp_train), bad.pt2 (a file gcc-graph
refuses), with $GCC_GRAPH the compiler. Prints "python package ok" at the end."""
import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np

import gcc_graph
from pytest_util import raises, read_st, rel   # tests/, the script's folder

os.chdir(sys.argv[1])
assert not os.path.exists("gcc_graph"), "run from a folder without the package's sources"
assert "site-packages" in gcc_graph.__file__ or "dist-packages" in gcc_graph.__file__, gcc_graph.__file__
cli = subprocess.run([gcc_graph.compiler(), "--version"], stdout=subprocess.PIPE, text=True).stdout.split()[-1]
assert gcc_graph.__version__ == cli, f"the package is {gcc_graph.__version__}, gcc-graph {cli}"


# ---- compile from a .pt2 path (through $GCC_GRAPH), cached; load by a bare relative name
assert not os.path.exists(gcc_graph.cache_dir()), "start with an empty cache ($XDG_CACHE_HOME)"
m = gcc_graph.compile("mlp.pt2", target="cpu")
made = os.stat(m.path).st_mtime_ns
time.sleep(0.01)
again = gcc_graph.compile("mlp.pt2", target="cpu", load=False)
assert again == m.path and again.startswith(gcc_graph.cache_dir()), (again, m.path)
assert os.stat(again).st_mtime_ns == made, "the same program compiled again: not taken from the cache"
gcc_graph.compile("mlp.pt2", target="cpu", cache=False, load=False)
assert os.stat(again).st_mtime_ns != made, "cache=False did not compile"
assert gcc_graph.compile("mlp.pt2", target="cpu", cflags="-O2", load=False) != again, "other options, same file"
assert gcc_graph.compile("mlp.pt2", output="mlp.so", load=False) == os.path.abspath("mlp.so")
ext = gcc_graph.compile("mlp.pt2", weights="external")   # the weights stay in mlp.pt2, mapped when opened
assert os.path.getsize(ext.path) < os.path.getsize(m.path) - 30000, "the 37.5 KB of weights inside the .so"
m = gcc_graph.load("mlp.so")   # a bare name: relative to the working directory, not the library path
assert m.metadata["device"] == "cpu" and len(m.input_names) == 1 and len(m.output_names) == 1, m
raises(gcc_graph.CompileError, "bad.pt2", gcc_graph.compile, "bad.pt2")
raises(FileNotFoundError, "no such file", gcc_graph.load, "missing.so")

# ---- NumPy in, NumPy out; one output comes back bare; by name
io = read_st("mlp.st")
x = io["in.0"]
y = m(x)
assert isinstance(y, np.ndarray) and rel(y, io["ref64.out.0"]) < 1e-5, rel(y, io["ref64.out.0"])
assert np.array_equal(m(**{m.input_names[0]: x}), y)
assert np.array_equal(m(np.asfortranarray(x)), y), "a column-major array"
assert np.array_equal(ext(x), y), "external weights"

# ---- clear errors that name the input
raises(gcc_graph.GuardError, "dtype mismatch", m, x.astype(np.float64))
raises(gcc_graph.GuardError, f"'{m.input_names[0]}'", m, x[:, :-1])
raises(gcc_graph.GuardError, "complex128", m, x.astype(np.complex128))
raises(TypeError, "takes 1 input", m, x, x)
raises(TypeError, "no input named 'nope'", m, nope=x)
raises(TypeError, "missing input", m)
raises(gcc_graph.ModelError, "not compiled for training", m.train_step, x)
raises(gcc_graph.ModelError, "compile --train", m.load_state_dict, {})

import torch  # noqa: E402  (after the NumPy checks: the package must work without torch loaded)

# ---- torch in, torch out (requires_grad, a strided view, bfloat16 refused by name)
xt = torch.from_numpy(x.copy()).requires_grad_()
yt = m(xt)
assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32 and torch.equal(yt, torch.from_numpy(y))
assert torch.equal(m(torch.from_numpy(np.asfortranarray(x)).t().contiguous().t()), yt), "a transposed view"
raises(gcc_graph.GuardError, "bfloat16", m, xt.detach().bfloat16())
raises(gcc_graph.GuardError, "complex64", m, torch.zeros(x.shape, dtype=torch.complex64))

# ---- many threads on one model: each its own DLTensors
xs = [torch.randn(*x.shape) for _ in range(8)]
want = [m(v) for v in xs]
got = [None] * 8


def worker(i):
    for _ in range(50):
        got[i] = m(xs[i])


ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
assert all(torch.equal(a, b) for a, b in zip(got, want)), "threads"

# ---- training: weights by the module's names, in and out; the learning rate
tr = gcc_graph.compile("train.pt2", train=True, optimizer="sgd", lr=0.05)
assert tr.training and tr.learning_rate == 0.05, tr.learning_rate


class Net(torch.nn.Module):   # mlp_train's module (tests/corpus: linear, tanh, linear, gelu, linear; cross entropy)
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                       torch.nn.Linear(64, 5))

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.net(x), y)


io = read_st("train.st")
tx, ty = torch.from_numpy(io["in.0"].copy()), torch.from_numpy(io["in.1"].copy())
net = Net()
sd = tr.state_dict()
assert set(sd) == set(net.state_dict()), sorted(sd)
net.load_state_dict(sd)   # the exported weights, as the compiled model holds them
assert rel(net(tx, ty).detach(), io["ref64.out.0"]) < 1e-5, "the module is mlp_train's"
loss0 = tr.forward(tx, ty)
assert loss0.shape == () and rel(loss0, io["ref64.out.0"]) < 1e-5, float(loss0)
grads = tr.backward()
assert set(grads) == set(sd) and rel(grads["net.0.weight"], io["ref64.grad.net.0.weight"]) < 1e-5
losses = [float(tr.train_step(tx, ty)) for _ in range(10)]
assert losses[-1] < losses[0], losses
trained = tr.state_dict()
assert not torch.equal(trained["net.0.weight"], sd["net.0.weight"]), "train_step changed nothing"
net.load_state_dict(trained)   # trained weights back into PyTorch: the same loss
assert rel(tr.forward(tx, ty), net(tx, ty).detach()) < 1e-5
tr.learning_rate = 0.0
tr.train_step(tx, ty)
assert all(torch.equal(a, tr.state_dict()[k]) for k, a in trained.items()), "learning rate 0 moved the weights"
fresh = Net()
tr.load_state_dict(fresh.state_dict())   # PyTorch's weights into the compiled model
assert all(torch.equal(a, tr.state_dict()[k]) for k, a in fresh.state_dict().items())
assert rel(tr.forward(tx, ty), fresh(tx, ty).detach()) < 1e-5
raises(KeyError, "missing: net.0.bias", tr.load_state_dict, {"net.0.weight": fresh.net[0].weight})
raises(KeyError, "unexpected: extra", tr.load_state_dict, dict(fresh.state_dict(), extra=torch.zeros(1)))
raises(ValueError, "'net.0.weight' is float32 (64, 31)", tr.load_state_dict, {"net.0.weight": torch.zeros(64, 31)}, strict=False)

# ---- the raw entry points are there for callers who build DLTensors themselves
assert ctypes.sizeof(gcc_graph.DLTensor) == 48
print("python package ok")
