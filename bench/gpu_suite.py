#!/usr/bin/env python3
"""gpu_suite.py [MODEL...]: the GPU benchmark suite at the sizes people run (`make bench-gpu`, on a
machine with an NVIDIA GPU, PyTorch 2.x, torchvision and transformers; random weights, seed 0).

For each model: torch.export at its batch and dtype, `gcc-graph compile --target cuda` (timed), then
ROUNDS alternating rounds of gcc-graph (`gcc-graph bench`: gg_run on device tensors, the CUDA graph
replayed), PyTorch eager and torch.compile (mode reduce-overhead: Inductor with CUDA graphs; and
max-autotune where MAX_AUTOTUNE=1), each a median of ITERS runs timed to the GPU's end; the table
shows each side's median round. Outputs are compared with PyTorch in float64 (float32 models) or
with PyTorch in float32 (bfloat16 models): relative L2 error of each side. TF32 is off on every
side, except in the rows compiled with --precision: a float32 export compiled with --precision bf16
(or fp16) against PyTorch eager and torch.compile under torch.autocast, with --precision tf32 against
PyTorch with TF32 on; their errors are against float64, and ours should be at most 3x autocast's. The ceilings (bench/gpu_ceiling.py's method: cuBLAS GEMM at 8192^3 in float32 and bfloat16,
a device copy) give each model's fraction of the GEMM rate (FLOPs of its products and convolutions
/ time) and of the copy bandwidth (bytes of explain's schedule / time).

Environment: GG (the gcc-graph binary, default build/gcc-graph), ROUNDS (5), ITERS (50),
MAX_AUTOTUNE (0), PRODUCTS (0; 1: also the products' rate as the replayed graph runs them, bench/gpu_trace.py,
printed under the row: issue 18's 60% criterion), OUT (a folder for the exports; default a temporary one), AB ("VAR=VALUE ...": gcc-graph
is also timed with that environment in every round, an A/B of a runtime switch, shown in brackets after
ours), AB_FLAGS ("--no-channels-last ...": likewise a second .so compiled with those options added),
AB_GG (another gcc-graph binary: likewise the .so it compiles, with AB_FLAGS if given). Prints a Markdown table
and, last, one JSON line with every figure."""
import json, os, re, statistics, struct, subprocess, sys, tempfile, time, traceback

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
GG = os.environ.get("GG", "build/gcc-graph")
ROUNDS = int(os.environ.get("ROUNDS", "5"))
ITERS = int(os.environ.get("ITERS", "50"))
MAX_AUTOTUNE = os.environ.get("MAX_AUTOTUNE", "0") == "1"
PRODUCTS = os.environ.get("PRODUCTS", "0") == "1"   # also the products' rate as they run (bench/gpu_trace.py)
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="gg-gpu-suite-")
AB = os.environ.get("AB", "")   # "VAR=VALUE ...": also time gcc-graph with that environment (an A/B of a runtime switch), in the same rounds
AB_FLAGS = os.environ.get("AB_FLAGS", "").split()   # compile options: also time a .so compiled with them added (an A/B of a compile-time choice)
AB_GG = os.environ.get("AB_GG", "")   # another gcc-graph binary: also time the .so it compiles (an A/B of two builds)
ST = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
      torch.bool: "BOOL"}


def save_st(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        hdr[k] = {"dtype": ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    out = {}
    dt = {v: k for k, v in ST.items()}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = bytearray(b[8 + n + s:8 + n + e])
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[k] = t.view(dt[v["dtype"]]).reshape(v["shape"])
    return out


# ---------------------------------------------------------------- the models

class Hidden(torch.nn.Module):   # a transformer's last hidden state: one tensor out
    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, ids):
        return s.m(input_ids=ids).last_hidden_state


def tv(name, batch, dtype, prec=None):
    def make():
        import torchvision   # here, so that importing this file (bench/gpu_trace.py does) needs no torchvision
        m = getattr(torchvision.models, name)(weights=None)
        with torch.no_grad():   # zero-initialized layers (ViT's head) would make every output 0
            for p in m.parameters():
                if not p.any():
                    p.normal_(0, 0.02)
        return m
    side = 224
    return make, lambda: (torch.randn(batch, 3, side, side),), dtype, prec


def hf(kind, batch, seq, dtype, prec=None, **cfg):
    def make():
        import transformers as tf
        if kind == "bert":
            m = tf.BertModel(tf.BertConfig(**cfg), add_pooling_layer=False)
        elif kind == "gpt2":
            m = tf.GPT2Model(tf.GPT2Config(**cfg))
        else:
            m = tf.LlamaModel(tf.LlamaConfig(**cfg))
        m.config.use_cache = False
        return Hidden(m)
    vocab = cfg.get("vocab_size", 30522 if kind == "bert" else 50257)
    return make, lambda: (torch.randint(0, vocab, (batch, seq), dtype=torch.int64),), dtype, prec


BERT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
LLAMA = dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, intermediate_size=2816, vocab_size=32000)
MODELS = {
    "resnet50_b32": tv("resnet50", 32, torch.float32),
    "resnet50_b32_bf16": tv("resnet50", 32, torch.bfloat16),
    "mobilenet_v3_large_b32": tv("mobilenet_v3_large", 32, torch.float32),
    "mobilenet_v3_large_b32_bf16": tv("mobilenet_v3_large", 32, torch.bfloat16),
    "efficientnet_b0_b32_bf16": tv("efficientnet_b0", 32, torch.bfloat16),
    "convnext_tiny_b32_bf16": tv("convnext_tiny", 32, torch.bfloat16),
    "vit_b_16_b16": tv("vit_b_16", 16, torch.float32),
    "bert_base_b8_s128": hf("bert", 8, 128, torch.float32, **BERT),
    "bert_base_b8_s128_bf16": hf("bert", 8, 128, torch.bfloat16, **BERT),
    "gpt2_b4_s512": hf("gpt2", 4, 512, torch.float32),
    "llama_d1024_l8_b4_s512_bf16": hf("llama", 4, 512, torch.bfloat16, **LLAMA),
    # float32 exports compiled with --precision, PyTorch under torch.autocast (bf16) or with TF32 on
    "resnet50_b32_amp_bf16": tv("resnet50", 32, torch.float32, "bf16"),
    "vit_b_16_b16_amp_bf16": tv("vit_b_16", 16, torch.float32, "bf16"),
    "bert_base_b8_s128_amp_bf16": hf("bert", 8, 128, torch.float32, "bf16", **BERT),
    "gpt2_b4_s512_amp_bf16": hf("gpt2", 4, 512, torch.float32, "bf16"),
    "bert_base_b8_s128_tf32": hf("bert", 8, 128, torch.float32, "tf32", **BERT),
    "resnet50_b32_tf32": tv("resnet50", 32, torch.float32, "tf32"),
    # --precision tf32x3: float32 products as three TF32 products (PyTorch's side stays float32)
    "bert_base_b8_s128_tf32x3": hf("bert", 8, 128, torch.float32, "tf32x3", **BERT),
    "gpt2_b4_s512_tf32x3": hf("gpt2", 4, 512, torch.float32, "tf32x3"),
    "vit_b_16_b16_tf32x3": tv("vit_b_16", 16, torch.float32, "tf32x3"),
}


class Amp(torch.nn.Module):   # the model under torch.autocast, as people run mixed precision
    def __init__(s, m, dtype):
        super().__init__()
        s.m, s.dtype = m, dtype

    def forward(s, *a):
        with torch.autocast("cuda", dtype=s.dtype):
            return s.m(*a)


# ---------------------------------------------------------------- measuring

def median_ms(f, args, n):
    with torch.no_grad():
        for _ in range(3):
            f(*args)
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            f(*args)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def ours_ms(so, inputs, n, env=None):
    r = subprocess.run([GG, "bench", so, "--inputs", inputs, "--iters", str(n)], capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    if r.returncode:
        raise RuntimeError("gcc-graph bench: " + r.stderr[-300:])
    return json.loads(r.stdout.strip().splitlines()[-1])["median_ms"]


def first(o):
    while isinstance(o, (tuple, list)):
        o = o[0]
    return o


def rel(a, ref):
    a, ref = a.double().cpu(), ref.double().cpu()
    return float((a - ref).norm() / ref.norm().clamp_min(1e-30))


def ceilings():
    def gemm(dt, n=8192):
        a, b = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
        ms = median_ms(lambda: a @ b, (), 10)
        return 2 * n ** 3 / ms / 1e9   # TFLOP/s
    x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), (), 20)
    f32 = gemm(torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = True
    tf32 = gemm(torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"gemm_f32_tflops": f32, "gemm_tf32_tflops": tf32, "gemm_bf16_tflops": gemm(torch.bfloat16), "copy_tbs": 2 * x.numel() / ms / 1e9}


def explain_figures(pt2, prec=None, keep=None):
    """FLOPs of the products and convolutions, and the bytes of the GPU schedule (gcc-graph explain --json --target cuda);
    keep: a file the JSON is also written to"""
    r = subprocess.run([GG, "explain", pt2, "--json", "--target", "cuda"] + (["--precision", prec] if prec else []), capture_output=True, text=True)
    if r.returncode:
        return None, None
    if keep:
        with open(keep, "w") as f:
            f.write(r.stdout)
    j = json.loads(r.stdout)
    flops = j.get("matrix_flops")
    ks = j.get("schedule", {}).get("kernels", [])
    traffic = sum(k.get("bytes_read", 0) + k.get("bytes_written", 0) for k in ks) or None
    return flops, traffic


PRODUCTS_LINE = re.compile(r"^products: (\d+) in the schedule, ([0-9.]+) GFLOP over (\d+) cuBLAS kernels' ([0-9.]+) ms: ([0-9.]+) TFLOP/s", re.M)


def products_rate(text):
    """(products' kernels ms, their TFLOP/s) from bench/gpu_trace.py's output, or None"""
    m = PRODUCTS_LINE.search(text)
    return (float(m.group(4)), float(m.group(5))) if m and int(m.group(3)) else None


def run_model(name, make, mkin, dtype, prec, ceil):
    torch.manual_seed(0)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    row = {"model": name, "dtype": str(dtype).replace("torch.", ""), "precision": prec or "fp32"}
    m = make().eval().to(dtype if dtype != torch.float32 else torch.float32)
    inputs = mkin()
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
    with torch.no_grad():
        ep = torch.export.export(m, inputs)
    pt2 = os.path.join(d, "model.pt2")
    torch.export.save(ep, pt2)
    st = os.path.join(d, "io.safetensors")
    save_st(st, {f"in.{i}": t for i, t in enumerate(inputs)})
    # the reference: float64 for float32 models, float32 for bfloat16 ones, on the GPU
    refdt = torch.float64 if dtype == torch.float32 else torch.float32
    mref = make().eval()
    mref.load_state_dict({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in m.state_dict().items()})
    mref = mref.to(refdt).cuda()
    with torch.no_grad():
        ref = first(mref(*[t.to(refdt).cuda() if t.is_floating_point() else t.cuda() for t in inputs]))
    del mref
    so = os.path.join(d, "model.so")
    t0 = time.perf_counter()
    r = subprocess.run([GG, "compile", pt2, "--target", "cuda", "-o", so] + (["--precision", prec] if prec else []), capture_output=True, text=True)
    row["compile_s"] = time.perf_counter() - t0
    if r.returncode:
        row["refused"] = r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else "exit %d" % r.returncode
    else:
        o = subprocess.run([GG, "run", so, "--inputs", st, "-o", os.path.join(d, "out.safetensors")], capture_output=True, text=True)
        if o.returncode:
            row["refused"] = "run: " + o.stderr.strip()[-200:]
        else:
            row["err_ours"] = rel(load_st(os.path.join(d, "out.safetensors"))["out.0"], ref)
    so_b = os.path.join(d, "model_b.so")
    if (AB_FLAGS or AB_GG) and "refused" not in row:
        r = subprocess.run([AB_GG or GG, "compile", pt2, "--target", "cuda", "-o", so_b] + (["--precision", prec] if prec else []) + AB_FLAGS, capture_output=True, text=True)
        o = r.returncode or subprocess.run([GG, "run", so_b, "--inputs", st, "-o", os.path.join(d, "out_b.safetensors")], capture_output=True, text=True).returncode
        if r.returncode or o:
            raise RuntimeError("AB_FLAGS build or run failed: " + r.stderr[-300:])
        row["err_ours_b"] = rel(load_st(os.path.join(d, "out_b.safetensors"))["out.0"], ref)
    mc = m.cuda()
    if prec in ("bf16", "fp16"):
        mc = Amp(mc, torch.bfloat16 if prec == "bf16" else torch.float16)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = prec == "tf32"
    xc = tuple(t.cuda() for t in inputs)
    with torch.no_grad():
        row["err_eager"] = rel(first(mc(*xc)), ref)
    t0 = time.perf_counter()
    cm = torch.compile(mc, mode="reduce-overhead")
    with torch.no_grad():
        row["err_compile"] = rel(first(cm(*xc)), ref)
        cm(*xc)
    row["tc_compile_s"] = time.perf_counter() - t0
    am = None
    if MAX_AUTOTUNE:
        t0 = time.perf_counter()
        am = torch.compile(mc, mode="max-autotune")
        with torch.no_grad():
            am(*xc)
            am(*xc)
        row["tc_autotune_compile_s"] = time.perf_counter() - t0
    rounds = {"ours": [], "ours_b": [], "eager": [], "compile": [], "autotune": []}
    for _ in range(ROUNDS):
        if "refused" not in row:
            rounds["ours"].append(ours_ms(so, st, ITERS))
            if AB:
                rounds["ours_b"].append(ours_ms(so, st, ITERS, dict(kv.split("=", 1) for kv in AB.split())))
            elif AB_FLAGS or AB_GG:
                rounds["ours_b"].append(ours_ms(so_b, st, ITERS))
        rounds["eager"].append(median_ms(mc, xc, ITERS))
        rounds["compile"].append(median_ms(cm, xc, ITERS))
        if am is not None:
            rounds["autotune"].append(median_ms(am, xc, ITERS))
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for k, v in rounds.items():
        if v:
            row[k + "_ms"] = statistics.median(v)
            row[k + "_rounds"] = v
    ej = os.path.join(d, "explain.json")
    flops, traffic = explain_figures(pt2, prec, ej)
    best = min(row.get("compile_ms", 1e30), row.get("autotune_ms", 1e30))
    if "ours_ms" in row:
        row["vs_best_torch_compile"] = best / row["ours_ms"]
        rate = ceil["gemm_bf16_tflops"] if dtype == torch.bfloat16 or prec in ("bf16", "fp16") else ceil["gemm_tf32_tflops"] if prec == "tf32" else ceil["gemm_f32_tflops"]
        if PRODUCTS and flops:   # each kernel's time in the replayed graph, in a process of its own
            t = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_trace.py"), so, st, os.devnull, "1",
                                "--explain", ej], capture_output=True, text=True)
            pr = products_rate(t.stdout)
            if pr:
                row["products_ms"], row["products_tflops"] = pr
                row["products_of_gemm"] = pr[1] / rate
            else:
                row["products_trace"] = (t.stderr or t.stdout).strip()[-200:]
        if flops:
            row["tflops"] = flops / row["ours_ms"] / 1e9
            row["of_gemm"] = row["tflops"] / rate
        if traffic:
            row["of_copy"] = traffic / row["ours_ms"] / 1e9 / ceil["copy_tbs"]
    del mc, cm, am
    torch.cuda.empty_cache()
    return row


def pct(r, k):
    return "%.0f%%" % (100 * r[k]) if k in r else "-"


def main():
    names = sys.argv[1:] or list(MODELS)
    print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| rounds", ROUNDS, "x", ITERS, "runs", flush=True)
    ceil = ceilings()
    print("ceilings: GEMM float32 %.1f TFLOP/s, TF32 %.1f, bfloat16 %.1f, copy %.2f TB/s" % (ceil["gemm_f32_tflops"], ceil["gemm_tf32_tflops"], ceil["gemm_bf16_tflops"], ceil["copy_tbs"]),
          flush=True)
    rows = []
    print("| model | gcc-graph ms | eager | torch.compile | ours vs best torch.compile | compile s (ours / Inductor) | error ours / eager / compile | "
          "of GEMM ceiling | of copy ceiling |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in names:
        if n not in MODELS:
            print("unknown model", n, "; models:", " ".join(MODELS))
            continue
        try:
            r = run_model(n, *MODELS[n], ceil)
        except Exception as e:
            traceback.print_exc()
            r = {"model": n, "failed": "%s: %s" % (type(e).__name__, str(e)[:200])}
        rows.append(r)
        f = lambda k, fmt="%.3f": fmt % r[k] if k in r else "-"
        ours = f("ours_ms") if "ours_ms" in r else "refused: " + r.get("refused", r.get("failed", "?"))
        if "ours_b_ms" in r:
            ours += " (%s: %s)" % (AB or " ".join(([os.path.basename(os.path.dirname(AB_GG)) or AB_GG] if AB_GG else []) + AB_FLAGS), f("ours_b_ms"))
        tc = f("compile_ms") + (" / %s (max-autotune)" % f("autotune_ms") if "autotune_ms" in r else "")
        print("| %s | %s | %s | %s | %s | %s / %s | %s / %s / %s | %s | %s |" % (
            n, ours, f("eager_ms"), tc, f("vs_best_torch_compile", "%.2fx"), f("compile_s", "%.1f"), f("tc_compile_s", "%.1f"),
            f("err_ours", "%.1e"), f("err_eager", "%.1e"), f("err_compile", "%.1e"), pct(r, "of_gemm"), pct(r, "of_copy")),
            flush=True)
        if "products_tflops" in r:
            print("  %s: products (cuBLAS kernels, as the graph runs them) %.3f ms, %.0f TFLOP/s = %s of the GEMM ceiling"
                  % (n, r["products_ms"], r["products_tflops"], pct(r, "products_of_gemm")), flush=True)
        elif "products_trace" in r:
            print("  %s: bench/gpu_trace.py failed: %s" % (n, r["products_trace"]), flush=True)
    print(json.dumps({"ceilings": ceil, "rows": rows}))


if __name__ == "__main__":
    main()
