"""Checks `gcc-graph explain --json` output (stdin) against schemas/explain.schema.json's required keys, at
every level it defines. Usage: gcc-graph explain MODEL --json | python3 explain_json.py [training]"""
import json, sys
doc = json.load(sys.stdin)
schema = json.load(open("schemas/explain.schema.json"))
def need(obj, keys, where):
    missing = [k for k in keys if k not in obj]
    assert not missing, f"{where} lacks {missing}"
need(doc, schema["required"], "top level")
assert doc["format"] == "gcc-graph explain"
for i in doc["inputs"]: need(i, schema["$defs"]["value"]["required"], "an input")
for o in doc["ops"]: need(o, schema["properties"]["ops"]["items"]["required"], "an op")
s = doc.get("schedule")
assert s, "no schedule"
need(s, schema["properties"]["schedule"]["required"], "schedule")
for k in s["kernels"]: need(k, schema["properties"]["schedule"]["properties"]["kernels"]["items"]["required"], "a kernel")
for r in s["refused"]: need(r, schema["properties"]["schedule"]["properties"]["refused"]["items"]["required"], "a refused fusion")
assert all(k["bytes_written"] > 0 and k["flops"] > 0 for k in s["kernels"]), "a kernel without bytes or FLOPs"
if sys.argv[1:] == ["training"]:
    need(doc["training"], schema["properties"]["training"]["required"], "training")
    assert doc["training"]["saved_bytes"] <= doc["training"]["saved_bytes_default"]
print("ok", len(s["kernels"]), "kernels")
