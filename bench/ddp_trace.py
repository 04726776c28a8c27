#!/usr/bin/env python3
"""ddp_trace.py TRACE.json[.gz]...: the timeline of one training step from the Chrome traces that
bench/gpu_ddp.py writes with TRACE_DIR (torch.profiler, kernels of 3 of our steps per rank): when
the backward's last kernel ends, each NCCL all-reduce (start, end, whether it ends after the
backward), and the optimizer's update, relative to the step's first kernel."""
import gzip, json, sys

for path in sys.argv[1:]:
    d = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
    ev = sorted([e for e in d["traceEvents"] if e.get("cat") == "kernel"], key=lambda e: e["ts"])
    # steps end with their update (opt_step, one launch or one per bucket): a gap of 2 ms or more
    # between update kernels starts a new step
    upd = [e for e in ev if "opt_step" in e["name"]]
    groups = []
    for e in upd:
        if groups and e["ts"] - (groups[-1][-1]["ts"] + groups[-1][-1]["dur"]) < 2000:
            groups[-1].append(e)
        else:
            groups.append([e])
    if len(groups) < 2:
        print(path, ": fewer than two steps")
        continue
    a = max(x["ts"] + x["dur"] for x in groups[-2])
    b = max(x["ts"] + x["dur"] for x in groups[-1])
    step = [e for e in ev if a <= e["ts"] < b]
    nccl = [e for e in step if "nccl" in e["name"].lower()]
    comp = [e for e in step if "nccl" not in e["name"].lower() and "opt_step" not in e["name"]]
    t0 = min(e["ts"] for e in step)
    bwd_end = max(e["ts"] + e["dur"] for e in comp)
    u0 = min(e["ts"] for e in groups[-1])
    print("%s: step %.3f ms from its first kernel to its update's end; %d kernels busy %.3f ms; backward ends at %.3f ms; "
          "update %.3f .. %.3f ms (%.3f ms of kernels)" % (path.split("/")[-1], (b - t0) / 1e3, len(comp), sum(e["dur"] for e in comp) / 1e3,
                                                         (bwd_end - t0) / 1e3, (u0 - t0) / 1e3, (b - t0) / 1e3, sum(e["dur"] for e in groups[-1]) / 1e3))
    for i, e in enumerate(nccl):
        print("   all-reduce %2d: %8.3f .. %8.3f ms (%.3f ms)%s" % (i, (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3, e["dur"] / 1e3,
                                                              "  ends after the backward" if e["ts"] + e["dur"] > bwd_end else ""))
