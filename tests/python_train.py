"""Checks the training side of the gcc_graph package (python/): forward and backward of a model compiled with
--train give PyTorch's loss and gradients (the corpus rule), and train_step (SGD) lowers the loss.
Usage: python_train.py TRAIN.so IO"""
import sys
import numpy as np
sys.path.insert(0, "python")
sys.path.insert(0, "tests")
from gcc_graph import Model
from pytest_util import read_st

m = Model(sys.argv[1])
io = read_st(sys.argv[2])
xs = [io[f"in.{i}"] for i in range(len(m.metadata["inputs"]))]
loss = m.forward(*xs)
def host(a): return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)   # a CUDA model answers with torch tensors
def rel(a, ref): return np.linalg.norm(host(a).astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-300)
assert rel(loss, io["ref64.out.0"]) <= max(1e-5, 10 * rel(io["out.0"], io["ref64.out.0"])), "loss"
grads = m.backward()
assert set(grads) == {k[5:] for k in io if k.startswith("grad.")}, sorted(grads)
for k, g in grads.items():
    assert rel(g, io["ref64.grad." + k]) <= max(1e-5, 10 * rel(io["grad." + k], io["ref64.grad." + k])), k
first = m.train_step(*xs)
for _ in range(20): last = m.train_step(*xs)
assert last < first, (first, last)
sd = m.state_dict()
for w in m.metadata["weights"]["tensors"]:   # a tied parameter is its twin's storage, trained as one
    if "tied" in w:
        assert np.array_equal(host(sd[w["name"]]), host(sd[w["tied"]])), w["name"]
        m.load_state_dict(sd)
print("python training ok:", len(grads), "gradients, loss", float(first), "->", float(last))
