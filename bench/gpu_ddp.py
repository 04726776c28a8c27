#!/usr/bin/env python3
"""gpu_ddp.py [MODEL...]: data-parallel training on the GPUs of one host (`make bench-gpu-ddp`),
against PyTorch DDP (eager and torch.compile) in the same run. Models: those of bench/gpu_train.py
(random weights and data, dropout off), each rank on its own shard at the suite's batch per GPU.

For each model the parent exports it once and compiles it once with
`gcc-graph compile --train --target cuda --optimizer ...`, then starts the ranks (one process per GPU,
torch.distributed with NCCL; NCCL_NVLS_ENABLE=0) twice: with WORLD=1 and with WORLD=NGPUS. Each rank:
  1. checks: 50 steps (CHECK_STEPS) of gcc-graph data-parallel on its fixed shard; rank 0 saves the
     parameters, every rank a digest of them (they must be equal bit for bit across ranks);
  2. times, in alternating rounds (ROUNDS x ITERS steps, a barrier before each), whole steps of
     - ours: gg_train_step, gradients all-reduced bucket by bucket during the backward (NCCL);
     - ours_no_overlap: the same model with GCC_GRAPH_DP_OVERLAP=0 (all buckets after the backward);
     - ddp: PyTorch DDP eager, the same fused optimizer;
     - ddp_compile: torch.compile of the DDP module (its DDPOptimizer splits the graph at buckets).
     (With WORLD=1 the ours rows run without data-parallel, and PyTorch's without DDP.)
Then the parent runs one process with gradient accumulation over the NGPUS shards for CHECK_STEPS
updates (the mean of the shards' gradients, which the ranks all-reduce) and compares its parameters
with rank 0's. Prints a Markdown table (ms per step on rank 0, the scaling efficiency t(1)/t(N) at a
fixed batch per GPU) and, last, one JSON line.

Environment: GG, ROUNDS (3), ITERS (20), CHECK_STEPS (50), OUT, TORCH_COMPILE (1), NGPUS (all), TRACE_DIR
(each rank writes a Chrome trace of 3 of our steps there: kernels by stream, NCCL's included), VARIANTS
(more rows of ours timed in the same rounds on N GPUs, space-separated NAME:SETTING[,SETTING]: a setting
ENV=VALUE is set while the rank joins, one starting with -- is a compiler flag, "--bucket-mb=50";
for example VARIANTS="cta8:GCC_GRAPH_DP_CTAS=8 b50:--bucket-mb=50")."""
import hashlib, json, os, socket, statistics, subprocess, sys, tempfile, time, traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_train as T   # noqa: E402  (the suite's models, the compile flags, the ctypes runner)

ROUNDS = int(os.environ.get("ROUNDS", "3"))
ITERS = int(os.environ.get("ITERS", "20"))
CHECK_STEPS = int(os.environ.get("CHECK_STEPS", "50"))
TORCH_COMPILE = os.environ.get("TORCH_COMPILE", "1") == "1"
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="gg-gpu-ddp-")
TRACE_DIR = os.environ.get("TRACE_DIR", "")   # a Chrome trace of 3 of our steps per rank and world size goes there
VARIANTS = [(v.split(":", 1)[0], [x for x in v.split(":", 1)[1].split(",") if x]) for v in os.environ.get("VARIANTS", "").split() if ":" in v]


def variant_so(so, name):
    return so[:-3] + "_" + name + ".so"


os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # NVLink multicast stays off (the device's KINDS.md)


def shard(mkin, rank):
    torch.manual_seed(100 + rank)
    return tuple(t.cuda() for t in mkin())


class OursDP(T.Ours):
    """gpu_train's runner, joined to the other ranks through NCCL (the id from rank 0 via torch.distributed)."""
    def __init__(s, so, dp):
        super().__init__(so)
        import ctypes
        import torch.distributed as dist
        if not dp:
            return
        uid = ctypes.create_string_buffer(128)
        if dist.get_rank() == 0 and s.lib.gg_nccl_unique_id(uid, s.err, 1024):
            raise RuntimeError(s.err.value.decode())
        box = [uid.raw]
        dist.broadcast_object_list(box, src=0, device=torch.device("cuda", torch.cuda.current_device()))
        s.lib.gg_set_data_parallel_nccl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        if s.lib.gg_set_data_parallel_nccl(s.m, dist.get_world_size(), dist.get_rank(), box[0], s.err, 1024):
            raise RuntimeError(s.err.value.decode())

    def params(s):
        """{name: float32 NumPy copy} of the parameters with gradients."""
        import ctypes
        s.lib.gg_metadata.restype = ctypes.c_char_p
        names = set(json.loads(s.lib.gg_metadata().decode())["training"]["gradients"])
        out, name, data, nb = {}, ctypes.c_char_p(), ctypes.c_void_p(), ctypes.c_size_t()
        s.lib.gg_weight.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        for i in range(s.lib.gg_num_weights()):
            s.lib.gg_weight(s.m, i, ctypes.byref(name), ctypes.byref(data), ctypes.byref(nb))
            k = name.value.decode()
            if k in names:
                host = np.empty(nb.value // 4, np.float32)
                s.lib.gg_device_copy(ctypes.c_void_p(host.ctypes.data), data, ctypes.c_size_t(nb.value), 0)
                out[k] = host
        return out


def rank_main(name, so, world, rank, res):
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    make, mkin, opt = T.MODELS[name]
    amp = "_amp_bf16" in name
    dp = world > 1
    xs = shard(mkin, rank)
    row = {}
    # 1. the check: CHECK_STEPS steps on this rank's shard
    if dp and CHECK_STEPS:
        o = OursDP(so, True)
        for _ in range(CHECK_STEPS):
            o.step(*xs)
        torch.cuda.synchronize()
        p = o.params()
        h = hashlib.sha256(b"".join(p[k].tobytes() for k in sorted(p))).hexdigest()
        digests = [None] * world
        dist.all_gather_object(digests, h)
        row["ranks_equal"] = len(set(digests)) == 1
        if rank == 0:
            np.savez(os.path.join(os.path.dirname(so), "params_rank0.npz"), **p)
        o.close()
        del o
    # 2. timing
    fns = {}
    ours = OursDP(so, dp)
    fns["ours"] = lambda: ours.step(*xs)
    if TRACE_DIR:   # a timeline of our steps on this rank (torch.profiler's Chrome trace: kernels by stream)
        for _ in range(3):
            fns["ours"]()
        torch.cuda.synchronize()
        dist.barrier()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fns["ours"]()
            torch.cuda.synchronize()
        prof.export_chrome_trace(os.path.join(TRACE_DIR, "trace_%s_w%d_r%d.json" % (name, world, rank)))
    if dp:
        os.environ["GCC_GRAPH_DP_OVERLAP"] = "0"
        ours_b = OursDP(so, True)
        del os.environ["GCC_GRAPH_DP_OVERLAP"]
        fns["ours_no_overlap"] = lambda: ours_b.step(*xs)
        for vname, sets in VARIANTS:
            env = dict(x.split("=", 1) for x in sets if not x.startswith("--"))
            vso = variant_so(so, vname) if any(x.startswith("--") for x in sets) else so
            old = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            ov = OursDP(vso, True)
            for k, v in old.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
            fns["ours_" + vname] = (lambda o: lambda: o.step(*xs))(ov)
    torch.manual_seed(0)
    me = make().train().cuda()
    mdp = torch.nn.parallel.DistributedDataParallel(me, device_ids=[rank]) if dp else me
    oe = T.make_opt(me.parameters(), *opt)
    fns["ddp"] = T.torch_step(mdp, oe, xs, amp)
    if TORCH_COMPILE:
        torch.manual_seed(0)
        mc = make().train().cuda()
        mcd = torch.nn.parallel.DistributedDataParallel(mc, device_ids=[rank]) if dp else mc
        oc = T.make_opt(mc.parameters(), *opt)
        fc = T.torch_step(torch.compile(mcd), oc, xs, amp)
        t0 = time.perf_counter()
        fc()
        fc()
        row["tc_compile_s"] = time.perf_counter() - t0
        fns["ddp_compile"] = fc
    rounds = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, f in fns.items():
            f()
            dist.barrier()
            rounds[k].append(T.ms_per_step(f, ITERS))
    for k, v in rounds.items():
        row[k + "_ms"] = statistics.median(v)
        row[k + "_rounds"] = v
    if rank == 0:
        with open(res, "w") as f:
            json.dump(row, f)
    ours.close()
    dist.destroy_process_group()


def run_ranks(name, so, world):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = os.path.join(os.path.dirname(so), "rank0_w%d.json" % world)
    procs = []
    for r in range(world):
        env = dict(os.environ, GG_DDP_RANK=str(r), GG_DDP_WORLD=str(world), GG_DDP_SO=so, GG_DDP_RES=res, GG_DDP_MODEL=name,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env))
    rcs = [p.wait() for p in procs]
    if any(rcs):
        raise RuntimeError("a rank failed: exit statuses %s" % rcs)
    with open(res) as f:
        return json.load(f)


def reference(name, so, world):
    """One process, gradient accumulation over the world's shards: the mean of their gradients."""
    make, mkin, opt = T.MODELS[name]
    o = OursDP(so, False)
    o.lib.gg_set_grad_accumulation(o.m, world)
    xs = [shard(mkin, r) for r in range(world)]
    for _ in range(CHECK_STEPS):
        for r in range(world):
            o.step(*xs[r])
    torch.cuda.synchronize()
    p = o.params()
    o.close()
    return p


def run_model(name, ngpus):
    make, mkin, opt = T.MODELS[name]
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    m0 = make().train()
    ep = torch.export.export(m0, mkin())
    pt2 = os.path.join(d, "model.pt2")
    torch.export.save(ep, pt2)
    so = os.path.join(d, "train.so")
    row = {"model": name, "gpus": ngpus, "compile_s": T.compile_ours(pt2, so, opt, "_amp_bf16" in name)}
    for vname, sets in VARIANTS:
        flags = [x for f in sets if f.startswith("--") for x in f.split("=", 1)]
        if flags:
            T.compile_ours(pt2, variant_so(so, vname), opt, "_amp_bf16" in name, extra=flags)
    t0 = time.perf_counter()
    print("  %s: exported and compiled (%.1f s)" % (name, row["compile_s"]), flush=True)
    row["one"] = run_ranks(name, so, 1)
    print("  %s: 1 GPU done (%.0f s)" % (name, time.perf_counter() - t0), flush=True)
    row["many"] = run_ranks(name, so, ngpus)
    print("  %s: %d GPUs done (%.0f s)" % (name, ngpus, time.perf_counter() - t0), flush=True)
    if CHECK_STEPS:   # against one process, and that process against itself (the run-to-run noise of atomics)
        got = dict(np.load(os.path.join(d, "params_rank0.npz")))
        want, again = reference(name, so, ngpus), reference(name, so, ngpus)

        def rel(a, b):   # over all parameters at once (tensors that start at 0 make per-tensor ratios meaningless)
            num = sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in b)
            return (num / sum(float(np.sum(b[k].astype(np.float64) ** 2)) for k in b)) ** 0.5
        row["check_rel_diff"] = rel(got, want)
        row["check_noise"] = rel(again, want)
        row["check_steps"] = CHECK_STEPS
    for k in ["ours", "ours_no_overlap", "ddp", "ddp_compile"] + ["ours_" + v for v, _ in VARIANTS]:
        if k + "_ms" in row["many"]:
            row["scaling_" + k] = row["one"][(k if not k.startswith("ours") else "ours") + "_ms"] / row["many"][k + "_ms"]
    return row


def main():
    if os.environ.get("GG_DDP_RANK"):
        rank_main(os.environ["GG_DDP_MODEL"], os.environ["GG_DDP_SO"], int(os.environ["GG_DDP_WORLD"]), int(os.environ["GG_DDP_RANK"]), os.environ["GG_DDP_RES"])
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    ngpus = int(os.environ.get("NGPUS", torch.cuda.device_count()))
    names = sys.argv[1:] or ["resnet50_b32", "bert_base_b8_s128"]
    print("device: %d x %s | torch %s | rounds %d x %d steps | check %d steps" % (ngpus, torch.cuda.get_device_name(), torch.__version__, ROUNDS, ITERS, CHECK_STEPS), flush=True)
    print("| model (batch per GPU) | GPUs | gcc-graph ms/step | no overlap | DDP eager | DDP + torch.compile | scaling ours / DDP / DDP+compile | ours vs DDP+compile | ranks equal; vs one process |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n in names:
        try:
            r = run_model(n, ngpus)
        except Exception as e:
            traceback.print_exc()
            r = {"model": n, "failed": "%s: %s" % (type(e).__name__, str(e)[:300])}
        rows.append(r)
        if "failed" in r:
            print("| %s | failed: %s |" % (n, r["failed"]), flush=True)
            continue
        f = lambda d, k, fmt="%.2f": fmt % d[k] if k in d else "-"
        o, m = r["one"], r["many"]
        print("| %s | 1 | %s | - | %s | %s | - | %s | - |" % (n, f(o, "ours_ms"), f(o, "ddp_ms"), f(o, "ddp_compile_ms"),
              "%.2fx" % (o["ddp_compile_ms"] / o["ours_ms"]) if "ddp_compile_ms" in o else "-"))
        print("| %s | %d | %s | %s | %s | %s | %s / %s / %s | %s | %s; %s |" % (n, ngpus, f(m, "ours_ms"), f(m, "ours_no_overlap_ms"), f(m, "ddp_ms"), f(m, "ddp_compile_ms"),
              f(r, "scaling_ours", "%.3f"), f(r, "scaling_ddp", "%.3f"), f(r, "scaling_ddp_compile", "%.3f"),
              "%.2fx" % (m["ddp_compile_ms"] / m["ours_ms"]) if "ddp_compile_ms" in m else "-", m.get("ranks_equal", "-"), f(r, "check_rel_diff", "%.1e") + " (1 process twice: %s)" % f(r, "check_noise", "%.1e")), flush=True)
    for r in rows:   # the variants: ms per step on N GPUs, and scaling against ours on 1 GPU (whose .so may differ)
        for v, sets in VARIANTS:
            if "ours_%s_ms" % v in r.get("many", {}):
                print("  %s %s (%s): %.2f ms, scaling %.3f (ours %.2f ms, %.3f)" % (r["model"], v, ",".join(sets), r["many"]["ours_%s_ms" % v],
                      r["scaling_ours_" + v], r["many"]["ours_ms"], r["scaling_ours"]))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
