#!/usr/bin/env python3
"""cpu_suite.py [MODEL...]: the CPU benchmark suite at the sizes people serve (`make bench-cpu`, on a
machine with PyTorch 2.x, torchvision and transformers; random weights, seed 0; the models and their
export are bench/gpu_suite.py's, at CPU serving sizes).

For each model: torch.export at its batch and dtype (float32; the _bf16 rows bfloat16; the _amp_bf16
rows float32 compiled with --precision bf16 against PyTorch under torch.autocast("cpu", bfloat16)),
`gcc-graph compile` (timed), its output against
PyTorch in float64 (relative L2 error; eager's and torch.compile's too), then, for each thread count
of THREADS, ROUNDS alternating rounds of gcc-graph (`gcc-graph bench`, OMP_NUM_THREADS), PyTorch eager
(torch.set_num_threads) and torch.compile (Inductor with freezing on, as its CPU docs advise; compiled
again for each thread count, since Inductor's C++ kernels take the thread count at compile time), each
a median of ITERS runs; the table shows each side's median round. Each thread count runs in a process
of its own pinned to that many CPUs (taskset), so that "2 threads" is 2 cores: the last ones (CPU 0
takes the machine's interrupts; on the GPU host 2-thread runs on CPUs 0-1 swung by a third). The ceilings (the
better of PyTorch's sgemm at 2048^3 and an OpenMP copy, bench/cpu_ceiling.py, at each thread count)
give each model's fraction of the sgemm rate (bfloat16 rows: of PyTorch's bfloat16 product at 2048^3)
(FLOPs of its products and convolutions / time) and of
the copy bandwidth (bytes of explain's CPU schedule / time).

Environment: GG (default build/gcc-graph), THREADS ("2,N": N = the CPUs this process may use), ROUNDS
(3), ITERS (10), TC_THREADS (thread counts at which torch.compile is timed; default the largest of
THREADS), OUT (a folder kept for the exports; default a temporary one), AB_GG (another gcc-graph
binary: the .so it compiles is timed in the same rounds, in brackets after ours). Prints a Markdown
table per thread count and, last, one JSON line with every figure."""
import json, os, statistics, subprocess, sys, tempfile, time, traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch
import gpu_suite as S   # the model builders, safetensors I/O and explain's figures

GG = os.environ.get("GG", "build/gcc-graph")
AB_GG = os.environ.get("AB_GG", "")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
ITERS = int(os.environ.get("ITERS", "10"))
NCPU = len(os.sched_getaffinity(0))
THREADS = [int(t) for t in os.environ.get("THREADS", "2,%d" % NCPU).split(",") if t]
TC_THREADS = [int(t) for t in os.environ.get("TC_THREADS", str(max(THREADS))).split(",") if t]
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="gg-cpu-suite-")
F32, BF16 = torch.float32, torch.bfloat16
MODELS = {
    "resnet50_b8": S.tv("resnet50", 8, F32),
    "mobilenet_v3_large_b8": S.tv("mobilenet_v3_large", 8, F32),
    "vit_b_16_b8": S.tv("vit_b_16", 8, F32),
    "bert_base_b4_s128": S.hf("bert", 4, 128, F32, **S.BERT),
    "gpt2_b4_s256": S.hf("gpt2", 4, 256, F32),
    # bfloat16 exports (AMX where the CPU has it), and float32 exports compiled with --precision bf16
    # against PyTorch under torch.autocast("cpu", bfloat16)
    "resnet50_b8_bf16": S.tv("resnet50", 8, BF16),
    "mobilenet_v3_large_b8_bf16": S.tv("mobilenet_v3_large", 8, BF16),
    "vit_b_16_b8_bf16": S.tv("vit_b_16", 8, BF16),
    "bert_base_b4_s128_bf16": S.hf("bert", 4, 128, BF16, **S.BERT),
    "gpt2_b4_s256_bf16": S.hf("gpt2", 4, 256, BF16),
    "bert_base_b4_s128_amp_bf16": S.hf("bert", 4, 128, F32, "bf16", **S.BERT),
    "vit_b_16_b8_amp_bf16": S.tv("vit_b_16", 8, F32, "bf16"),
}
BF16_ROWS = {n for n, v in MODELS.items() if v[2] == BF16 or v[3]}   # held to the bfloat16 product ceiling


class CpuAmp(torch.nn.Module):   # the model under torch.autocast on the CPU, as people run mixed precision there
    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, *a):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return s.m(*a)


def model_of(name):
    """The model (random weights, seed 0, in its dtype; under autocast for a --precision row) and its inputs."""
    make, mkin, dtype, prec = MODELS[name]
    torch.manual_seed(0)
    m = make().eval().to(dtype)
    xs = tuple(t.to(dtype) if t.is_floating_point() else t for t in mkin())
    return m, xs, prec


def prepare(name):
    """Export, reference in float64, compile (ours and AB_GG's); once per model, kept in OUT/name."""
    d = os.path.join(OUT, name)
    done = os.path.join(d, "prepared.json")
    if os.path.exists(done):
        return json.load(open(done))
    os.makedirs(d, exist_ok=True)
    m, inputs, prec = model_of(name)
    with torch.no_grad():
        ep = torch.export.export(m, inputs)
    torch.export.save(ep, os.path.join(d, "model.pt2"))
    S.save_st(os.path.join(d, "io.safetensors"), {f"in.{i}": t for i, t in enumerate(inputs)})
    torch.save(m.state_dict(), os.path.join(d, "state.pt"))
    with torch.no_grad():
        ref = S.first(m.double()(*[t.double() if t.is_floating_point() else t for t in inputs]))
    S.save_st(os.path.join(d, "ref.safetensors"), {"out.0": ref.float()})
    row = {"model": name}
    for tag, gg in (("", GG), ("_b", AB_GG)):
        if not gg:
            continue
        so = os.path.join(d, "model%s.so" % tag)
        t0 = time.perf_counter()
        r = subprocess.run([gg, "compile", os.path.join(d, "model.pt2"), "-o", so] + (["--precision", prec] if prec else []), capture_output=True, text=True)
        row["compile%s_s" % tag] = time.perf_counter() - t0
        if r.returncode:
            row["refused%s" % tag] = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][:200]
            continue
        o = subprocess.run([GG, "run", so, "--inputs", os.path.join(d, "io.safetensors"), "-o", os.path.join(d, "out%s.safetensors" % tag)],
                           capture_output=True, text=True)
        if o.returncode:
            row["refused%s" % tag] = "run: " + o.stderr.strip()[-200:]
        else:
            row["err_ours%s" % tag] = S.rel(S.load_st(os.path.join(d, "out%s.safetensors" % tag))["out.0"], ref)
    r = subprocess.run([GG, "explain", os.path.join(d, "model.pt2"), "--json"], capture_output=True, text=True)
    if not r.returncode:
        j = json.loads(r.stdout)
        row["flops"] = j.get("matrix_flops")
        row["traffic"] = sum(k.get("bytes_read", 0) + k.get("bytes_written", 0) for k in j.get("schedule", {}).get("kernels", [])) or None
    json.dump(row, open(done, "w"))
    return row


NOTES = set()   # what gcc-graph bench said on stderr (a BLAS stand-in reporting a call, for one)


def ours_ms(so, st, threads):
    r = subprocess.run([GG, "bench", so, "--inputs", st, "--iters", str(ITERS), "--warmup", "2"], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if r.returncode:
        raise RuntimeError("gcc-graph bench: " + r.stderr[-300:])
    NOTES.update(l for l in r.stderr.splitlines() if l.strip())
    return json.loads(r.stdout.strip().splitlines()[-1])["median_ms"]


def torch_ms(f, xs):
    with torch.no_grad():
        for _ in range(2):
            f(*xs)
        ts = []
        for _ in range(ITERS):
            t0 = time.perf_counter()
            f(*xs)
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def measure(name, threads):
    """One thread count (this process is pinned to that many CPUs): the rounds of every side."""
    row = dict(prepare(name), threads=threads)
    d = os.path.join(OUT, name)
    st = os.path.join(d, "io.safetensors")
    torch.set_num_threads(threads)
    m, _, prec = model_of(name)
    m.load_state_dict(torch.load(os.path.join(d, "state.pt")))
    if prec:
        m = CpuAmp(m)
    io = S.load_st(st)
    xs = tuple(io[f"in.{i}"] for i in range(len(io)))
    ref = S.load_st(os.path.join(d, "ref.safetensors"))["out.0"]
    with torch.no_grad():
        row["err_eager"] = S.rel(S.first(m(*xs)), ref)
    cm = None
    if threads in TC_THREADS:
        import torch._inductor.config as ic
        ic.freezing = True
        torch._dynamo.reset()
        t0 = time.perf_counter()
        cm = torch.compile(m)
        with torch.no_grad():
            row["err_compile"] = S.rel(S.first(cm(*xs)), ref)
            cm(*xs)
        row["tc_compile_s"] = time.perf_counter() - t0
    rounds = {"ours": [], "ours_b": [], "eager": [], "compile": []}
    for _ in range(ROUNDS):
        if "refused" not in row:
            rounds["ours"].append(ours_ms(os.path.join(d, "model.so"), st, threads))
        if AB_GG and "refused_b" not in row:
            rounds["ours_b"].append(ours_ms(os.path.join(d, "model_b.so"), st, threads))
        rounds["eager"].append(torch_ms(m, xs))
        if cm is not None:
            rounds["compile"].append(torch_ms(cm, xs))
    for k, v in rounds.items():
        if v:
            row[k + "_ms"] = statistics.median(v)
            row[k + "_rounds"] = v
    return row


def ceilings(threads):
    r = subprocess.run([sys.executable, os.path.join(HERE, "cpu_ceiling.py"), str(threads)], capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}


def table(rows, ceil, threads):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("\n%d threads (%s); ceilings: sgemm %.0f GFLOP/s, bfloat16 GEMM %.0f GFLOP/s, copy %.1f GB/s" % (
        threads, cpu, ceil.get("sgemm_gflops", 0), ceil.get("bgemm_gflops", 0), ceil.get("copy_gbs", 0)))
    print("| model | gcc-graph ms | eager | torch.compile | vs eager | vs torch.compile | compile s (ours / Inductor) | error ours / eager / compile "
          "| of GEMM ceiling (sgemm; bf16 rows: bf16) | of copy ceiling |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        f = lambda k, fmt="%.2f": fmt % r[k] if k in r else "-"
        ours = f("ours_ms") if "ours_ms" in r else "refused: " + r.get("refused", r.get("failed", "?"))
        if "ours_b_ms" in r:
            ours += " (%s: %s)" % (os.path.basename(os.path.dirname(AB_GG)) or AB_GG, f("ours_b_ms"))
        ve = "%.2fx" % (r["eager_ms"] / r["ours_ms"]) if "ours_ms" in r and "eager_ms" in r else "-"
        vc = "%.2fx" % (r["compile_ms"] / r["ours_ms"]) if "ours_ms" in r and "compile_ms" in r else "-"
        ck = "bgemm_gflops" if r["model"] in BF16_ROWS else "sgemm_gflops"
        gf = "%.0f%%" % (100 * r["flops"] / r["ours_ms"] / 1e6 / ceil[ck]) if r.get("flops") and "ours_ms" in r and ceil.get(ck) else "-"
        bw = "%.0f%%" % (100 * r["traffic"] / r["ours_ms"] / 1e6 / ceil["copy_gbs"]) if r.get("traffic") and "ours_ms" in r and ceil.get("copy_gbs") else "-"
        print("| %s | %s | %s | %s | %s | %s | %s / %s | %s / %s / %s | %s | %s |" % (
            r["model"], ours, f("eager_ms"), f("compile_ms"), ve, vc, f("compile_s", "%.1f"), f("tc_compile_s", "%.1f"),
            f("err_ours", "%.1e"), f("err_eager", "%.1e"), f("err_compile", "%.1e"), gf, bw), flush=True)


def main():
    names = sys.argv[1:] or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit("unknown model %s; models: %s" % (n, " ".join(MODELS)))
    if os.environ.get("CPU_SUITE_CHILD"):   # one thread count, pinned: print its JSON
        t = THREADS[0]
        rows = []
        for n in names:
            try:
                rows.append(measure(n, t))
            except Exception as e:
                traceback.print_exc()
                rows.append({"model": n, "threads": t, "failed": "%s: %s" % (type(e).__name__, str(e)[:200])})
            print("row:", json.dumps(rows[-1]), file=sys.stderr, flush=True)   # as it comes (a run cut short keeps them)
        print(json.dumps({"threads": t, "ceilings": ceilings(t), "rows": rows, "notes": sorted(NOTES)[:20]}))
        return
    print("torch", torch.__version__, "| CPUs", NCPU, "| threads", THREADS, "| rounds", ROUNDS, "x", ITERS, "runs", flush=True)
    for n in names:   # export and compile once, with every CPU
        try:
            prepare(n)
            print("prepared", n, flush=True)
        except Exception:
            traceback.print_exc()
    cpus = sorted(os.sched_getaffinity(0))
    results = []
    for t in THREADS:
        env = dict(os.environ, CPU_SUITE_CHILD="1", THREADS=str(t), OUT=OUT, OMP_NUM_THREADS=str(t))
        r = subprocess.run(["taskset", "-c", ",".join(map(str, cpus[-t:])), sys.executable, os.path.abspath(__file__)] + names,
                           env=env, stdout=subprocess.PIPE, text=True)   # its stderr (each row as it comes) passes through
        if r.returncode:
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        results.append(res)
        table(res["rows"], res["ceilings"], t)
        for l in res.get("notes", []):
            print("gcc-graph bench said:", l)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
