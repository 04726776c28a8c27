#!/usr/bin/env python3
"""gpu_train.py [MODEL...]: the GPU training suite (`make bench-gpu-train`, on a machine with an NVIDIA
GPU, PyTorch 2.x, torchvision and transformers; random weights and data, seed 0).

Each model is a module whose forward returns the loss (dropout off on every side: random ops are not
compiled). It is exported with torch.export in training mode, compiled with
`gcc-graph compile --train --target cuda --optimizer ...`, and a whole step (forward, backward,
optimizer update) is timed in this process, in alternating rounds, for:
  - gcc-graph: gg_train_step through ctypes on torch's CUDA tensors (the captured step replayed);
  - PyTorch eager: loss.backward() and the same optimizer, fused=True (its fastest CUDA kernels);
  - torch.compile (default mode) of the module, with the same fused optimizer.
The first STEPS_CHECK steps of gcc-graph and eager start from the same weights on the same batch:
their losses are compared (relative difference, the largest over those steps). Peak GPU memory: ours
is the device memory the model takes from gg_open to the end of its steps (cudaMemGetInfo), eager's and
compile's is torch.cuda.max_memory_allocated over their steps plus the module's weights, gradients and
optimizer state (which PyTorch also counts there). Models with "_amp_bf16" compile with --precision
bf16 and run PyTorch under torch.autocast(bfloat16); LOSS_CURVE=N (default 200 for them) also trains
gcc-graph in float32 and in bf16 for N steps on fresh batches and prints both loss curves.

Environment: GG (default build/gcc-graph), ROUNDS (3), ITERS (20), STEPS_CHECK (5), OUT (exports),
TORCH_COMPILE (1: time torch.compile too), AB ("VAR=VALUE ...": a second gcc-graph model opened and first
run with that environment, timed in the same rounds: an A/B of a runtime switch), AB_GG (another
gcc-graph, e.g. the last commit's build: the model compiled by it too, its steps timed in the same
rounds and its peak memory measured the same way: an A/B of the compiler). Prints a Markdown table and, last, one JSON line.
PROFILE=1: compile with --debug-dir OUT/MODEL/dbg, run 3 of our steps and nothing else (to run under
`ncu --graph-profiling node`; bench/gpu_profile.py sums the last step's kernels by node)."""
import ctypes, json, os, statistics, struct, subprocess, sys, tempfile, time, traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
GG = os.environ.get("GG", "build/gcc-graph")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
ITERS = int(os.environ.get("ITERS", "20"))
STEPS_CHECK = int(os.environ.get("STEPS_CHECK", "5"))
TORCH_COMPILE = os.environ.get("TORCH_COMPILE", "1") == "1"
PROFILE = os.environ.get("PROFILE", "0") == "1"
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="gg-gpu-train-")


# ---------------------------------------------------------------- the models: forward returns the loss

class Classify(nn.Module):   # a torchvision classifier under cross-entropy
    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, x, y):
        return F.cross_entropy(s.m(x), y)


class LM(nn.Module):   # a language model under cross-entropy: next token (causal) or the token itself (BERT)
    def __init__(s, m, causal):
        super().__init__()
        s.m, s.causal = m, causal

    def forward(s, ids):
        logits = s.m(input_ids=ids).logits
        if s.causal:
            logits, ids = logits[:, :-1], ids[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


def tv(name, batch, classes=1000):
    def make():
        import torchvision
        return Classify(getattr(torchvision.models, name)(weights=None, num_classes=classes))
    return make, lambda: (torch.randn(batch, 3, 224, 224), torch.randint(0, classes, (batch,))), ("sgd", 0.01, dict(momentum=0.9))


def hf(kind, batch, seq, **cfg):
    def make():
        import transformers as tf
        if kind == "bert":
            m = tf.BertForMaskedLM(tf.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **cfg))
        elif kind == "gpt2":
            m = tf.GPT2LMHeadModel(tf.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **cfg))
        else:
            m = tf.LlamaForCausalLM(tf.LlamaConfig(**cfg))
        m.config.use_cache = False
        return LM(m, kind != "bert")
    vocab = cfg.get("vocab_size", 30522 if kind == "bert" else 50257)
    return make, lambda: (torch.randint(0, vocab, (batch, seq)),), ("adamw", 1e-4, dict(weight_decay=0.01))


BERT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
LLAMA = dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, intermediate_size=2816, vocab_size=32000)
MODELS = {
    "resnet18_b32": tv("resnet18", 32),
    "resnet50_b32": tv("resnet50", 32),
    "bert_base_b8_s128": hf("bert", 8, 128, **BERT),
    "gpt2_b4_s512": hf("gpt2", 4, 512),
    "llama_d1024_l8_b4_s512_amp_bf16": hf("llama", 4, 512, **LLAMA),
}


# ---------------------------------------------------------------- gcc-graph through ctypes, on torch's tensors

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from gcc_graph import DLDataType, DLDevice, DLTensor   # noqa: E402  (the package's DLPack structures)


DL = {torch.float32: (2, 32), torch.float64: (2, 64), torch.bfloat16: (4, 16), torch.float16: (2, 16), torch.int64: (0, 64), torch.int32: (0, 32)}


def dl(ts):
    arr = (DLTensor * len(ts))()
    keep = []
    for i, t in enumerate(ts):
        shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
        keep.append(shape)
        code, bits = DL[t.dtype]
        arr[i] = DLTensor(t.data_ptr(), DLDevice(2, t.device.index or 0), t.dim(), DLDataType(code, bits, 1), shape, None, 0)
    return arr, keep


class Ours:
    def __init__(s, so):
        s.lib = ctypes.CDLL(so)
        P, V = ctypes.POINTER(DLTensor), ctypes.c_void_p
        s.lib.gg_open.argtypes = [ctypes.POINTER(V), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        s.lib.gg_train_state_new.argtypes = [V, ctypes.POINTER(V), ctypes.c_char_p, ctypes.c_size_t]
        s.lib.gg_train_step.argtypes = [V, V, P, ctypes.c_int, P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        s.lib.gg_train_state_free.argtypes = [V]
        s.lib.gg_close.argtypes = [V]
        s.err = ctypes.create_string_buffer(1024)
        s.m, s.st = ctypes.c_void_p(), ctypes.c_void_p()
        if s.lib.gg_open(ctypes.byref(s.m), None, s.err, 1024) or s.lib.gg_train_state_new(s.m, ctypes.byref(s.st), s.err, 1024):
            raise RuntimeError(s.err.value.decode())
        s.loss = torch.zeros((), device="cuda")

    def step(s, *xs):
        ins, k1 = dl(xs)
        outs, k2 = dl([s.loss])
        if s.lib.gg_train_step(s.m, s.st, ins, len(xs), outs, 1, s.err, 1024):
            raise RuntimeError(s.err.value.decode())
        return s.loss

    def close(s):
        s.lib.gg_train_state_free(s.st)
        s.lib.gg_close(s.m)


# ---------------------------------------------------------------- measuring

def ms_per_step(f, n):
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def torch_step(m, opt, xs, amp):
    def f():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = m(*xs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return f


def make_opt(params, kind, lr, kw):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, fused=True, **kw)
    return torch.optim.AdamW(params, lr=lr, fused=True, **kw)


def compile_ours(pt2, so, opt, amp, gg=None, extra=()):
    kind, lr, kw = opt
    flags = ["--train", "--target", "cuda", "--optimizer", kind, "--lr", repr(lr)] + list(extra)
    if "momentum" in kw:
        flags += ["--momentum", repr(kw["momentum"])]
    if "weight_decay" in kw:
        flags += ["--weight-decay", repr(kw["weight_decay"])]
    if amp:
        flags += ["--precision", "bf16"]
    if PROFILE:
        flags += ["--debug-dir", os.path.join(os.path.dirname(so), "dbg")]
    t0 = time.perf_counter()
    r = subprocess.run([gg or GG, "compile", pt2, "-o", so] + flags, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("gcc-graph compile: " + r.stderr.strip()[-300:])
    return time.perf_counter() - t0


def run_model(name, make, mkin, opt):
    torch.manual_seed(0)
    amp = "_amp_bf16" in name
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    row = {"model": name, "optimizer": opt[0]}
    m0 = make().train()
    xs = mkin()
    t0 = time.perf_counter()
    ep = torch.export.export(m0, xs)
    pt2 = os.path.join(d, "model.pt2")
    torch.export.save(ep, pt2)
    row["export_s"] = time.perf_counter() - t0
    state = {k: v.clone() for k, v in m0.state_dict().items()}
    so = os.path.join(d, "train.so")
    row["compile_s"] = compile_ours(pt2, so, opt, amp)
    xc = tuple(t.cuda() for t in xs)
    # gcc-graph: memory from open to the end of its steps, and its first losses
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    ours = Ours(so)
    if PROFILE:
        for _ in range(3):
            ours.step(*xc)
        torch.cuda.synchronize()
        ours.close()
        print("PROFILE", name, os.path.join(d, "dbg", "model.cu"), flush=True)
        return row
    ours_losses = [float(ours.step(*xc)) for _ in range(STEPS_CHECK)]
    torch.cuda.synchronize()
    row["ours_mem_gib"] = (free0 - torch.cuda.mem_get_info()[0]) / 2 ** 30
    ab_gg = os.environ.get("AB_GG", "")
    if ab_gg:   # the same model compiled by another gcc-graph: memory measured the same way, before the others
        so_b = os.path.join(d, "train_ab.so")
        compile_ours(pt2, so_b, opt, amp, gg=ab_gg)
        free_b = torch.cuda.mem_get_info()[0]
        ours_ab = Ours(so_b)
        for _ in range(STEPS_CHECK):
            ours_ab.step(*xc)
        torch.cuda.synchronize()
        row["ours_ab_mem_gib"] = (free_b - torch.cuda.mem_get_info()[0]) / 2 ** 30
    # eager from the same weights
    me = make().train()
    me.load_state_dict(state)
    me = me.cuda()
    oe = make_opt(me.parameters(), *opt)
    fe = torch_step(me, oe, xc, amp)
    torch.cuda.reset_peak_memory_stats()
    eager_losses = [float(fe()) for _ in range(STEPS_CHECK)]
    torch.cuda.synchronize()
    row["eager_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    row["losses_ours"], row["losses_eager"] = ours_losses, eager_losses
    row["loss_rel_diff"] = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(ours_losses, eager_losses))
    fns = {"ours": lambda: ours.step(*xc), "eager": fe}
    if ab_gg:
        fns["ours_ab"] = lambda: ours_ab.step(*xc)
    ab = os.environ.get("AB", "")
    if ab:   # the switch is read while the model first runs
        env = dict(kv.split("=", 1) for kv in ab.split())
        os.environ.update(env)
        ours_b = Ours(so)
        ours_b.step(*xc)
        torch.cuda.synchronize()
        for k in env:
            del os.environ[k]
        fns["ours_b"] = lambda: ours_b.step(*xc)
    if TORCH_COMPILE:
        mc = make().train()
        mc.load_state_dict(state)
        mc = mc.cuda()
        oc = make_opt(mc.parameters(), *opt)
        t0 = time.perf_counter()
        fc = torch_step(torch.compile(mc), oc, xc, amp)
        fc()
        fc()
        row["tc_compile_s"] = time.perf_counter() - t0
        torch.cuda.reset_peak_memory_stats()
        fc()
        torch.cuda.synchronize()
        row["compile_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        fns["compile"] = fc
    rounds = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, f in fns.items():
            f()
            rounds[k].append(ms_per_step(f, ITERS))
    for k, v in rounds.items():
        row[k + "_ms"] = statistics.median(v)
        row[k + "_rounds"] = v
    if "compile_ms" in row:
        row["vs_torch_compile"] = row["compile_ms"] / row["ours_ms"]
    curve = int(os.environ.get("LOSS_CURVE", "200" if amp else "0"))
    if curve:   # bf16 against float32 over fresh batches (gcc-graph both)
        so32 = os.path.join(d, "train_f32.so")
        compile_ours(pt2, so32, opt, False)
        curves = {}
        for tag, path in (("bf16", so), ("fp32", so32)):
            o = Ours(path)
            ls = []
            for i in range(curve):
                torch.manual_seed(1000 + i)   # the same fresh batches for both
                ls.append(float(o.step(*(t.cuda() for t in mkin()))))
            o.close()
            curves[tag] = ls
        row["curves"] = curves
        row["curve_max_rel_diff"] = max(abs(a - b) / abs(b) for a, b in zip(curves["bf16"], curves["fp32"]))
    ours.close()
    if ab:
        ours_b.close()
    if ab_gg:
        ours_ab.close()
    del me, oe, fns
    torch.cuda.empty_cache()
    return row


def main():
    names = sys.argv[1:] or list(MODELS)
    print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| rounds", ROUNDS, "x", ITERS, "steps", flush=True)
    rows = []
    print("| model | optimizer | gcc-graph ms/step | eager | torch.compile | ours vs torch.compile | peak GiB ours / eager / compile | "
          "compile s ours / Inductor | loss diff (first %d steps) |" % STEPS_CHECK)
    print("|---|---|---|---|---|---|---|---|---|")
    for n in names:
        if n not in MODELS:
            print("unknown model", n, "; models:", " ".join(MODELS))
            continue
        try:
            r = run_model(n, *MODELS[n])
        except Exception as e:
            traceback.print_exc()
            r = {"model": n, "failed": "%s: %s" % (type(e).__name__, str(e)[:300])}
        rows.append(r)
        f = lambda k, fmt="%.3f": fmt % r[k] if k in r else "-"
        if "failed" in r:
            print("| %s | failed: %s |" % (n, r["failed"]), flush=True)
            continue
        print("| %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s | %s |" % (
            n, r["optimizer"], f("ours_ms") + (" (%s: %s)" % (os.environ.get("AB"), f("ours_b_ms")) if "ours_b_ms" in r else ""), f("eager_ms"), f("compile_ms"), f("vs_torch_compile", "%.2fx"), f("ours_mem_gib", "%.2f"),
            f("eager_mem_gib", "%.2f"), f("compile_mem_gib", "%.2f"), f("compile_s", "%.1f"), f("tc_compile_s", "%.1f"), f("loss_rel_diff", "%.1e")),
            flush=True)
        if "ours_ab_ms" in r:
            print("  AB_GG=%s: %.3f ms/step, peak %.2f GiB (rounds %s; ours %s)" % (os.environ["AB_GG"], r["ours_ab_ms"], r["ours_ab_mem_gib"],
                  " ".join("%.3f" % x for x in r["ours_ab_rounds"]), " ".join("%.3f" % x for x in r["ours_rounds"])), flush=True)
        if "curves" in r:
            c = r["curves"]
            pts = [0, len(c["fp32"]) // 4, len(c["fp32"]) // 2, 3 * len(c["fp32"]) // 4, len(c["fp32"]) - 1]
            print("  loss curve (step: fp32 / bf16): " + ", ".join("%d: %.4f / %.4f" % (i, c["fp32"][i], c["bf16"][i]) for i in pts) +
                  "; largest relative difference %.2e" % r["curve_max_rel_diff"], flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
