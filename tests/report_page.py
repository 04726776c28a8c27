"""Checks a page `gcc-graph explain MODEL --html PAGE` wrote, and, given one, the DOM headless Chromium
rendered from it (chromium --headless --dump-dom).
Usage: python3 report_page.py PAGE [DOM] [--evil] [--profile] [--stages N]
  --evil      the model's names are HTML and script (tests/bad/html_names.json): they must show as text
  --profile   the page was given a trace: per-node times present
  --stages N  at least N stages' graphs"""
import html, json, re, sys

args = sys.argv[1:]
flags = {a for a in args if a.startswith("--")}
nstages = 4
if "--stages" in args:
    nstages = int(args[args.index("--stages") + 1])
    args.remove(str(nstages))
paths = [a for a in args if not a.startswith("--")]
page = open(paths[0], encoding="utf-8").read()

# self-contained: no external script, style, image or font
assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page), "the page loads something from the network"
assert page.count("<script") == 2, "the page should hold exactly its data and its script"
m = re.search(r'<script type="application/json" id="gg-data">(.*?)</script>', page, re.S)
assert m, "no data element"
data = m.group(1)
assert "<" not in data and ">" not in data, "a '<' or '>' in the data: a name could close the element"
d = json.loads(data)
assert d["format"] == "gcc-graph explain"
assert len(d["stages"]) >= nstages, f'{len(d["stages"])} stages'
assert d["stages"][0]["stage"] == "loaded"
for st in d["stages"]:
    for n in st["nodes"]:
        assert n["text"] and isinstance(n["reads"], list) and isinstance(n["writes"], list)
kernels = d["schedule"]["kernels"]
assert kernels, "no kernels"
assert d["guards"] and all(g["input"] for g in d["guards"]), "no guards"
assert d["memory"], "no memory plan"
top = max(off + size for off, size, first, last in d["memory"])
assert all(0 <= off and first <= last for off, size, first, last in d["memory"])
if d["memory_at_examples"]:   # symbolic sizes: the plan at the example values, none in the code
    assert d["symbols"] and d["schedule"]["scratch_bytes_planned"] == 0
else:
    assert top == d["schedule"]["scratch_bytes_planned"], (top, d["schedule"]["scratch_bytes_planned"])
if "--evil" not in flags:
    with_module = [k for k in kernels if "module" in k]
    assert len(with_module) * 2 > len(kernels), "most kernels should name the module they came from"
    assert any("line" in k and k["line"] > 0 for k in kernels), "no kernel names a source line"
if "--profile" in flags:
    assert d["profile"]["nodes"] and d["profile"]["events"] > 0
    assert all(0 <= n["median_us"] <= n["us"] and n["count"] >= 1 for n in d["profile"]["nodes"])

if len(paths) > 1:
    dom = open(paths[1], encoding="utf-8", errors="replace").read()
    m = re.search(r'<p id="gg-status" data-ok="1">(.*?)</p>', dom)
    assert m, "the page did not finish rendering: " + (re.search(r'id="gg-errors"[^>]*>(.*?)</div>', dom, re.S) or [None, "?"])[1][:500]
    want = (f'rendered: {len(d["stages"])} stages, {len(kernels)} kernels, {len(d["memory"])} tensors in the memory plan, '
            f'{len(d["profile"]["nodes"]) if "profile" in d else 0} profiled nodes')
    status = html.unescape(m.group(1))
    assert status.startswith(want), f"status {status!r}, expected {want!r}"
    if "profile" in d:   # the modules' times add up to at most the nodes' (each node counted once)
        shown = float(re.search(r"\(([0-9.]+) ms of them in kernels by module\)", status).group(1))
        total = sum(n["median_us"] for n in d["profile"]["nodes"]) / 1000
        assert 0 < shown <= total + 0.002, (shown, total)
    assert re.search(r'<div id="gg-errors" class="err"></div>', dom), "the page reported an error"
    # every kernel is a row of the kernels table, every stage an option
    assert all(f'id="k{k["id"]}"' in dom for k in kernels), "a kernel row is missing"
    assert dom.count("<option") >= len(d["stages"])
    assert dom.count("<rect") >= len(d["memory"]), "the memory plan is not drawn"
    if "--evil" in flags:
        assert "<title>gcc-graph report</title>" in dom, "a script from the model ran"
        assert "<img" not in dom and "<b>a</b>" not in dom and "<i>x</i>" not in dom, "markup from the model became elements"
        assert dom.count("<script") == 2, "a script element from the model"
        assert "&lt;/script&gt;&lt;script&gt;document.title" in dom, "the hostile name is not shown as text"
    if "--profile" in flags:
        assert re.search(r"\d ms</span>", dom), "no time bars"
print("ok", len(d["stages"]), "stages", len(kernels), "kernels")
