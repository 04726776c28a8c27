"""Data-parallel training through the gcc_graph package (python/) and torch.distributed (gloo for a CPU model,
NCCL on rank r's GPU r for a CUDA model), checked against one process. Usage:
    data_parallel.py TRAIN.so IO.safetensors [STEPS [WORLD]]    (starts WORLD ranks itself, default 2)
Each step rank r trains on shard r: the inputs of IO with the float inputs scaled by (-0.7)^r and the
integer inputs rolled by r along dim 0, so the shards differ. The reference is one process with
gradient accumulation over the WORLD shards (the mean of their gradients: what the ranks all-reduce),
stepping once per WORLD micro-batches. Passes when every rank ends with the same parameters, bit for
bit, and they match the reference's (relative difference <= 1e-6 over each tensor)."""
import ctypes, os, socket, subprocess, sys
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gcc_graph import Model
from pytest_util import read_st

WORLD = int(sys.argv[4]) if len(sys.argv) > 4 else 2


def shards(m, path):
    io = read_st(path)
    xs = [io[f"in.{i}"] for i in range(len(m.metadata["inputs"]))]
    return [[(x * np.asarray((-0.7) ** r, x.dtype)) if x.dtype.kind == "f" else np.roll(x, r, axis=0) for x in xs] for r in range(WORLD)]


def params(m):
    """The parameters with gradients (buffers such as running statistics are each rank's own)."""
    ps = set(m.metadata["training"]["gradients"])
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in m.state_dict().items() if k in ps}


def rank_main(so, io, steps, rank, world, out):
    import torch.distributed as dist
    cuda = ctypes.CDLL(so).gg_device_type() == 2
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    m = Model(so, device=rank) if cuda else Model(so)
    m.data_parallel()
    x = shards(m, io)[rank]
    losses = [float(m.train_step(*x)) for _ in range(steps)]
    np.savez(out, losses=np.array(losses), **params(m))
    dist.destroy_process_group()


def main():
    so, io = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    if os.environ.get("GG_DP_RANK"):
        rank_main(so, io, steps, int(os.environ["GG_DP_RANK"]), WORLD, os.environ["GG_DP_OUT"])
        return
    tmp = os.environ.get("TMPDIR", "/tmp")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    outs = [os.path.join(tmp, f"gg_dp_{os.getpid()}_{r}.npz") for r in range(WORLD)]
    procs = []
    for r in range(WORLD):
        env = dict(os.environ, GG_DP_RANK=str(r), GG_DP_OUT=outs[r], MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, so, io, str(steps), str(WORLD)], env=env))
    rcs = [p.wait(timeout=300) for p in procs]
    assert rcs == [0] * WORLD, rcs
    ranks = [dict(np.load(o)) for o in outs]
    for o in outs:
        os.unlink(o)
    # the reference: one process, the mean of the two shards' gradients per update
    ref = Model(so)
    ref.set_grad_accumulation(WORLD)
    x = shards(ref, io)
    for _ in range(steps):
        for r in range(WORLD):
            ref.train_step(*x[r])
    want = params(ref)
    names = [k for k in want if k != "losses"]
    moved = 0
    for k in names:
        for r in range(1, WORLD):
            assert np.array_equal(ranks[0][k], ranks[r][k]), f"ranks 0 and {r} differ in {k}"
    worst = 0
    for k in names:
        a, r = ranks[0][k].astype(np.float64), want[k].astype(np.float64)
        d = np.linalg.norm(a - r) / max(np.linalg.norm(r), 1e-30)
        worst = max(worst, d)
        assert d <= 1e-6, f"{k}: relative difference {d:.2e} from one process with accumulation"
    ls = [r["losses"] for r in ranks]
    first = params(Model(so))
    for k in names:   # the weights changed from the file's: training happened
        moved += not np.array_equal(first[k], want[k])
    assert moved > 0, "no parameter changed"
    print(f"data parallel ok: {WORLD} ranks, {steps} steps, {len(names)} parameters identical on every rank and equal to one process "
          f"(largest relative difference {worst:.1e}; {moved} changed); losses " + ", ".join(f"rank {r} {l[0]:.4f} -> {l[-1]:.4f}" for r, l in enumerate(ls)))


if __name__ == "__main__":
    main()
