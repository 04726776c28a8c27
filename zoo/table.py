#!/usr/bin/env python3
"""zoo/table.py EXPORTDIR WORKDIR: the zoo's results as Markdown (zoo/run.sh calls it): one row per
model (library, family, nodes, parameters, the CPU's and the GPU's verdicts, the failure shortened),
the totals, and the failures grouped by kind (an op gcc-graph does not have, wrong numbers, a crash,
another compile error). Reads EXPORTDIR/NAME/case.json and WORKDIR/{cpu,cuda}/NAME.result; needs
only Python's standard library. ZOO_TARGETS (default: the folders WORKDIR has) says which columns."""
import json
import os
import re
import sys


def models():
    """zoo/export.py's models in its order, name -> (library, family) (it imports without PyTorch)."""
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        sys.dont_write_bytecode = True
        import export
        return {n: (src, fam) for n, (src, fam, _) in export.MODELS.items()}
    except Exception:
        return {}


def classify(msg):
    """(kind, short message) of a compile_case.sh line: kind ok, missing op, compile error, run error,
    crash, wrong numbers, timeout."""
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    if first.startswith("ok "):
        return "ok", ""
    m = re.match(r"FAIL \S+?: (.*)", " ".join(msg.split()))
    body = m.group(1) if m else " ".join(msg.split())
    body = re.sub(r"gcc-graph: error: ", "", body)
    body = re.sub(r"(?<!\S)/\S+: ", "", body)   # the case's files' paths
    if body.startswith("timeout"):
        return "timeout", body
    if body.startswith("compile:"):
        body = body[8:].strip()
        op = re.search(r"op '?([\w.:]+)'? is not supported(: .*)?", body)
        if op:
            return "missing op", op.group(1).replace("torch.ops.", "") + (op.group(2) or "")
        if re.search(r"signal|Segmentation|Aborted|core dumped|status 13[49]", body):
            return "crash", body
        return "compile error", body
    if body.startswith("run:"):
        body = body[4:].strip()
        if not body or re.search(r"signal|Segmentation|Aborted|core dumped|illegal memory|CUDA error", body):
            return "crash", body or "no message (killed by a signal?)"
        return "run error", body
    if re.search(r"relative error|NaN or infinity|differs|shape|dtype|no out\.|extra output", body):
        return "wrong numbers", body
    return "error", body


def short(s, n=150):
    s = s.replace("|", "\\|")
    return s if len(s) <= n else s[: n - 3] + "..."


def main():
    exp, work = sys.argv[1], sys.argv[2]
    targets = os.environ.get("ZOO_TARGETS", "").split() or [t for t in ("cpu", "cuda") if os.path.isdir(os.path.join(work, t))]
    names = [n for n in os.listdir(exp) if os.path.isfile(os.path.join(exp, n, "case.json"))]
    asked = os.path.join(exp, "zoo_export.json")   # the models zoo/export.py was asked for: those without a case.json too
    if os.path.exists(asked):
        names += [n for n in json.load(open(asked)).get("models", []) if n not in names]
    known = models()
    rank = {n: i for i, n in enumerate(known)}
    names.sort(key=lambda n: (rank.get(n, len(rank)), n))
    rows, vers = [], {}
    for n in names:
        cj = os.path.join(exp, n, "case.json")
        meta = json.load(open(cj)) if os.path.exists(cj) else {
            "name": n, "source": known.get(n, ("", ""))[0], "family": known.get(n, ("", ""))[1], "status": "export failed",
            "error": "no case.json: its export did not finish (cut short?)"}
        if meta.get("status") == "ok":
            vers.update(meta.get("versions", {}))
        res = {}
        for t in targets:
            p = os.path.join(work, t, n + ".result")
            sec = os.path.join(work, t, n + ".seconds")
            if meta.get("status") != "ok":
                res[t] = ("export failed", meta.get("error", ""), None)
            elif os.path.exists(p):
                k, m = classify(open(p, errors="replace").read())
                u = os.path.join(work, t, n + ".unsupported")
                if k == "missing op" and os.path.exists(u):   # run.sh's list (gcc-graph explain): every op missing
                    ops = [x.strip().replace("torch.ops.", "") for x in open(u) if x.strip()]
                    if ops:
                        m = ", ".join(dict.fromkeys(ops))
                res[t] = (k, m, open(sec).read().strip() if os.path.exists(sec) else None)
            else:
                res[t] = ("not run", "", None)
        rows.append((n, meta, res))

    out = []
    out.append("| # | model | library | family | nodes | params | " + " | ".join(t.upper() for t in targets) + " | failure |")
    out.append("|---|---|---|---|---:|---:|" + "---|" * len(targets) + "---|")
    for i, (n, meta, res) in enumerate(rows, 1):
        cells, why = [], []
        for t in targets:
            k, m, sec = res[t]
            cells.append(("ok" if k == "ok" else "**" + k + "**" if k not in ("export failed", "not run") else k) + (f" ({sec} s)" if sec else ""))
            if k not in ("ok", "not run") and m and (k, m) not in [(a, b) for _, a, b in why]:
                why.append((t, k, m))
        if len(why) == 2 and why[0][1:] == why[1][1:]:
            why = why[:1]
        msg = "; ".join((f"{t.upper()}: " if len(why) > 1 else "") + (f"no {m}" if k == "missing op" else m) for t, k, m in why)
        p = meta.get("params")
        ps = (f"{p / 1e6:.1f}M" if p >= 1e6 else f"{p / 1e3:.0f}K") if p else ""
        out.append(f"| {i} | {n} | {meta.get('source', '')} | {meta.get('family', '')} | {meta.get('nodes', '')} | {ps} | "
                   + " | ".join(cells) + f" | {short(msg)} |")

    exported = [r for r in rows if r[1].get("status") == "ok"]
    out.append("")
    out.append(f"**{len(rows)} models**, {len(exported)} exported by PyTorch"
               + (f" ({len(rows) - len(exported)} failed in PyTorch or its library: not counted below)" if len(rows) > len(exported) else "") + ".")
    for t in targets:
        ok = sum(1 for r in exported if r[2][t][0] == "ok")
        out.append(f"- {t.upper()}: **{ok} of {len(exported)}** compile and match PyTorch ({100 * ok / max(1, len(exported)):.1f}%)")
    if len(targets) > 1:
        both = sum(1 for r in exported if all(r[2][t][0] == "ok" for t in targets))
        out.append(f"- all targets: **{both} of {len(exported)}** ({100 * both / max(1, len(exported)):.1f}%)")
    if vers:
        out.append("- versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))

    groups = {}   # (kind, op) -> model -> targets
    for n, meta, res in rows:
        for t in targets:
            k, m, _ = res[t]
            if k in ("ok", "not run"):
                continue
            for key in ([(k, op.split(":")[0].strip()) for op in m.split(", ")] if k == "missing op" else [(k, "")]):
                groups.setdefault(key, {}).setdefault(n, []).append(t)
    if groups:
        out.append("")
        out.append("Failures by kind" + (" (a model listed alone fails on every target)" if len(targets) > 1 else "") + ":")
        out.append("")
        for (k, m), ms in sorted(groups.items()):
            out.append(f"- {k}{' ' + m if m else ''}: " + ", ".join(n if len(ts) == len(targets) or k == "export failed" else f"{n} ({', '.join(ts)})"
                                                            for n, ts in ms.items()))
    print("\n".join(out))


if __name__ == "__main__":
    main()
