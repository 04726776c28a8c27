#!/usr/bin/env python3
"""gpu_profile.py NCU_CSV MODEL_CU [TOP] [--explain EXPLAIN_JSON [--ceiling TFLOPS]]: where a compiled
model's GPU time goes, by kernel and by kind.

NCU_CSV is `GCC_GRAPH_PROFILER_REPLAYS=1 ncu --profile-from-start off --csv --graph-profiling node
--metrics gpu__time_duration.sum PROGRAM` over a program that runs the same call (a step, a forward)
several times, such as `gcc-graph bench MODEL.so --iters 2` (the environment variable and
--profile-from-start off leave the first, uncaptured run unprofiled: under ncu cuBLASLt's timing of
its candidates would choose at random); MODEL_CU is the
model.cu that `gcc-graph compile --debug-dir` wrote. Only the last call is summed: the shortest run of
kernel names at the end of the trace that repeats right before itself (the earlier calls, cuBLASLt's
timing of candidates and PyTorch's own kernels are left out). ncu runs each kernel alone, serialized:
their sum is over the graph's run (BERT-base bf16: 0.879 ms against 0.783), so for the time kernels
take in a replayed graph use bench/gpu_trace.py, which prints the same tables. Our kernels (k12, ...) are named by the
comment model.cu puts above them ("pointwise: node relu_3 (...)"); library kernels (cuBLAS, cuDNN) by
their own name. Prints the total, a table by kind and the TOP (default 25) kernels. With --explain
(`gcc-graph explain MODEL --target cuda --json [--precision P]` of the same model and options), also
the rate of its matrix products: their FLOPs over the time of the cuBLAS kernels (their own time,
without the gaps between kernels), and its share of --ceiling (the measured GEMM rate of the type,
bench/gpu_ceiling.py) - issue 18's criterion."""
import collections, csv, re, sys

UNIT = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def kernels(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]   # ncu's own "==PROF==" lines are not CSV
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        rows.append((r["Kernel Name"], v * UNIT.get(r["Metric Unit"], 1e-6)))
    return rows


def last_call(rows):
    """The last call: the shortest tail that repeats right before itself and holds the last kernel
    once (a call's last kernel, such as its output's copy, comes once a call; a shorter period, a
    transformer's layer, would hold it once but not repeat, and the longest, several calls, which
    an earlier version took, counted 3 calls as one). Else the longest tail that repeats."""
    names = [n for n, _ in rows]
    for k in range(1, len(names) // 2 + 1):
        if names[-k:] == names[-2 * k:-k] and names[-k:].count(names[-1]) == 1:
            return rows[-k:]
    for k in range(len(names) // 2, 0, -1):
        if names[-k:] == names[-2 * k:-k]:
            return rows[-k:]
    return rows


def node_names(cu):
    out, pending = {}, None
    for line in open(cu):
        m = re.match(r"/\* (.*?) \*/\s*$", line)
        if m:
            pending = m.group(1)
            continue
        m = re.match(r"(?:static|extern \"C\") __global__ void (k\d+)\(", line)
        if m and pending:
            out[m.group(1)] = pending
        if line.strip():
            pending = None
    return out


def product_flops(path):
    import json
    ks = json.load(open(path))["schedule"]["kernels"]
    return sum(k.get("flops") or 0 for k in ks if "matrix product" in k["kind"]), sum(1 for k in ks if "matrix product" in k["kind"])


def options(argv, doc):
    """positional arguments and --explain/--ceiling"""
    args, opt = [], {}
    it = iter(argv)
    for a in it:
        if a in ("--explain", "--ceiling"):
            opt[a] = next(it, None)
        else:
            args.append(a)
    if None in opt.values():
        sys.exit(doc)
    return args, opt


def main():
    args, opt = options(sys.argv[1:], __doc__)
    if len(args) < 2:
        sys.exit(__doc__)
    report(last_call(kernels(args[0])), node_names(args[1]), int(args[2]) if len(args) > 2 else 25, opt)


def report(rows, names, top, opt):
    """rows: (kernel name, ms) of one call; names: node_names of its model.cu"""
    total = sum(t for _, t in rows)
    by_kind, by_kernel = collections.Counter(), collections.Counter()
    count = collections.Counter()
    for n, t in rows:
        m = re.match(r"(k\d+)\b", n)
        if m and m.group(1) in names:
            what = names[m.group(1)]
            kind = what.split(":")[0]
            label = m.group(1) + " " + what[:90]
        else:
            kind = "library: " + ("cuDNN" if re.search(r"cudnn|conv|wgrad|dgrad|implicit|xmma_fprop|nhwc", n, re.I) else
                                  "cuBLAS" if re.search(r"gemm|cutlass|sm90|sm80|Kernel2|splitK", n, re.I) else "other")
            label = n[:100]
        by_kind[kind] += t
        by_kernel[label] += t
        count[kind] += 1
    print("%d kernels, %.3f ms of kernel time in the last call" % (len(rows), total))
    print("| kind | kernels | ms | share |\n|---|---|---|---|")
    for k, t in by_kind.most_common():
        print("| %s | %d | %.3f | %.1f%% |" % (k, count[k], t, 100 * t / total))
    print("\n| kernel | ms | share |\n|---|---|---|")
    for k, t in by_kernel.most_common(top):
        print("| %s | %.3f | %.1f%% |" % (k, t, 100 * t / total))
    if "--explain" in opt:
        fl, n = product_flops(opt["--explain"])
        t = by_kind["library: cuBLAS"]
        rate = fl / (t * 1e-3) / 1e12 if t else 0.0
        share = " = %.1f%% of %s TFLOP/s" % (100 * rate / float(opt["--ceiling"]), opt["--ceiling"]) if "--ceiling" in opt else ""
        print("\nproducts: %d in the schedule, %.1f GFLOP over %d cuBLAS kernels' %.3f ms: %.0f TFLOP/s%s"
              % (n, fl / 1e9, count["library: cuBLAS"], t, rate, share))


if __name__ == "__main__":
    main()
