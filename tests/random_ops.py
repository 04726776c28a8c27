"""Random ops (rand, randn, randn_like, randperm, dropout in training; tests/random/random_ops) checked by
their statistics, since their numbers are not PyTorch's: a compiled model run in-process through the
gcc_graph package twice (different draws), after manual_seed (the same draws again), and the
interpreter's and the compiled model's outputs written by `gcc-graph run` under one GCC_GRAPH_SEED
(the same generator: the same uniforms bit for bit). Usage: random_ops.py MODEL.so IO COMPILED.st INTERPRETED.st"""
import math, os, sys
import numpy as np
sys.path.insert(0, "python")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gcc_graph import Model
from pytest_util import read_st


def ks(sample, cdf):
    """Kolmogorov-Smirnov statistic of a sample against a CDF."""
    x = np.sort(np.asarray(sample, np.float64).ravel())
    n = len(x)
    f = cdf(x)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


def check(outs, x, who):
    u, z, u64, zl, perm, dout, mask, dout2 = outs
    for a, n in ((u, "rand"), (u64, "rand float64")):
        assert a.min() >= 0 and a.max() < 1, f"{who}: {n} outside [0, 1)"
        k = ks(a, lambda t: np.clip(t, 0, 1))
        assert k < 1.63 / math.sqrt(a.size) * 1.2, f"{who}: {n} KS {k}"   # alpha about 0.01
        assert abs(a.mean() - 0.5) < 5 * math.sqrt(1 / 12 / a.size), f"{who}: {n} mean {a.mean()}"
    phi = np.vectorize(lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2))))
    for a, n in ((z, "randn"), (zl, "randn_like")):
        assert a.shape == ((240, 250) if n == "randn" else x.shape) and a.dtype == np.float32, f"{who}: {n} shape/dtype"
        k = ks(a, phi)
        assert k < 1.63 / math.sqrt(a.size) * 1.2, f"{who}: {n} KS {k}"
        assert abs(a.mean()) < 5 / math.sqrt(a.size) and abs(a.var() - 1) < 5 * math.sqrt(2 / a.size), f"{who}: {n} moments {a.mean()} {a.var()}"
    assert perm.dtype == np.int64 and np.array_equal(np.sort(perm), np.arange(1000)) and not np.array_equal(perm, np.arange(1000)), f"{who}: randperm"
    for out, m, p in ((dout, mask, 0.3), (dout2, dout2 != 0, 0.75)):
        keep = m.mean()
        assert abs(keep - (1 - p)) < 5 * math.sqrt(p * (1 - p) / m.size), f"{who}: dropout kept {keep}, expected {1 - p}"
        assert np.allclose(out, np.where(m, x / (1 - p), 0), rtol=1e-6, atol=0), f"{who}: dropout values"


def main():
    so, io, comp, interp = sys.argv[1:5]
    x = read_st(io)["in.0"]
    co, io_ = read_st(comp), read_st(interp)
    outs = lambda st: [st[f"out.{i}"] for i in range(8)]
    check(outs(io_), x, "interpreter")
    check(outs(co), x, "gcc-graph run")
    assert np.array_equal(co["out.0"], io_["out.0"]), "the interpreter's first uniforms are not the compiled model's"
    if so == "-":   # a CUDA model (make test-cuda): its outputs only
        print("random ops ok")
        return
    m = Model(so)
    a = m(x)
    b = m(x)
    check(a, x, "run 1")
    check(b, x, "run 2")
    assert not np.array_equal(a[0], b[0]) and not np.array_equal(a[5], b[5]), "two runs drew the same numbers"
    m.manual_seed(11)
    c = m(x)
    m.manual_seed(11)
    d = m(x)
    assert all(np.array_equal(p, q) for p, q in zip(c, d)), "manual_seed did not repeat the draws"
    assert not np.array_equal(a[0], c[0]), "seed 11 drew seed 0's numbers"
    print("random ops ok")


main()
