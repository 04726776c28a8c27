"""The gcc_graph package on the GPU (make test-cuda; needs torch 2.x with torch.export and a GPU):
compile from an nn.Module, torch CUDA tensors in and out with no copy, torch's current stream,
NumPy in and out through a CUDA model, bfloat16, clear errors, and a CUDA training model whose
weights go back and forth with the PyTorch module. Prints "python cuda ok" at the end.
Usage: PYTHONPATH=python GCC_GRAPH=build/gcc-graph python3 tests/python_cuda.py"""
import os

import numpy as np
import torch

import gcc_graph
from pytest_util import raises, rel   # tests/, the script's folder

torch.manual_seed(0)
dev = torch.device("cuda", torch.cuda.current_device())


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x, scale):
        return self.norm(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))) * scale)


net = Block().eval()
x, scale = torch.randn(16, 64), torch.tensor(0.5)
batch = torch.export.Dim("batch", min=1, max=64)
m = gcc_graph.compile(net, (x, scale), target="cuda", dynamic_shapes=({0: batch}, None))
assert m.cuda and m.input_names == ["x", "scale"], m
xc, sc = x.to(dev), scale.to(dev)
with torch.no_grad():
    ref = net.double()(x.double(), scale.double())
y = m(xc, sc)
assert isinstance(y, torch.Tensor) and y.device == dev and rel(y.cpu(), ref) < 1e-5, rel(y.cpu(), ref)
assert torch.equal(m(scale=sc, x=xc), y), "by name"
assert m(xc[:5], sc).shape == (5, 64), "the dynamic batch"
mx = gcc_graph.compile(net.float(), (x, scale), weights="external")   # CPU; the export's .pt2 kept beside the .so
assert os.path.isfile(mx.path[:-3] + ".pt2"), "the .pt2 beside the .so"
assert rel(mx(x, scale), ref) < 1e-5, "external weights from an ExportedProgram"
yn = m(x.numpy(), scale.numpy())
assert isinstance(yn, np.ndarray) and np.array_equal(yn, y.cpu().numpy()), "NumPy through a CUDA model"

# torch's current stream: the model is ordered after work queued on it, and before what follows
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    big = torch.randn(4096, 4096, device=dev)
    for _ in range(20):
        big = big @ big * 1e-3          # keep the stream busy
    xs = xc * 1.0 + big[:16, :64] * 0   # made on s, read by the model on s
    ys = m(xs, sc)
    zs = ys * 2
torch.cuda.synchronize()
assert torch.equal(zs, y * 2), "ordered on torch's current stream"

# ... and on the legacy default stream (torch's default), which the model's own stream waits for
big = torch.randn(4096, 4096, device=dev)
for _ in range(20):
    big = big @ big * 1e-3
xd = xc * 1.0 + big[:16, :64] * 0
assert torch.equal(m(xd, sc), y), "ordered after the default stream's work"

raises(gcc_graph.GuardError, "is on cpu", m, x, sc)
raises(gcc_graph.GuardError, "dtype mismatch", m, xc.double(), sc)
raises(gcc_graph.GuardError, "'x'", m, xc[:, :63], sc)

# bfloat16: a bf16 export; NumPy float32 refused with what the model expects
mb = gcc_graph.compile(Block().to(torch.bfloat16).eval(), (x.bfloat16(), scale.bfloat16()), target="cuda")
yb = mb(xc.bfloat16(), sc.bfloat16())
assert yb.dtype == torch.bfloat16 and yb.shape == (16, 64)
raises(gcc_graph.GuardError, "expected bfloat16", mb, x.float().numpy(), scale.numpy())   # NumPy has no bfloat16


# training on the GPU, weights back into PyTorch
class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.head(self.block(x, 1.0)), y)


tnet = WithLoss()
tx, ty = torch.randn(32, 64), torch.randint(0, 10, (32,))
tr = gcc_graph.compile(tnet, (tx, ty), target="cuda", train=True, optimizer="adamw", lr=1e-3)
txc, tyc = tx.to(dev), ty.to(dev)
sd = tr.state_dict()
assert set(sd) == set(tnet.state_dict()) and all(v.device.type == "cpu" for v in sd.values())
assert all(torch.equal(sd[k], v) for k, v in tnet.state_dict().items()), "the exported weights"
losses = [float(tr.train_step(txc, tyc)) for _ in range(20)]
assert losses[-1] < losses[0], losses
tnet.load_state_dict(tr.state_dict())
assert abs(float(tr.forward(txc, tyc)) - float(tnet(tx, ty))) < 1e-4, "trained weights in PyTorch"
fresh = WithLoss()
tr.load_state_dict(fresh.state_dict())
assert abs(float(tr.forward(txc, tyc)) - float(fresh(tx, ty))) < 1e-4, "PyTorch's weights in the CUDA model"
grads = tr.backward()
assert all(v.device == dev for v in grads.values()) and set(grads) == {k for k, _ in fresh.named_parameters()}
print("python cuda ok: losses %.4f -> %.4f" % (losses[0], losses[-1]))
