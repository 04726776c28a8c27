#!/usr/bin/env python3
"""Writes the hostile inputs of tests/bad/ (committed; rerun only to change them).

Each file is a model gcc-graph must refuse with exit status 1 and a message naming what is wrong;
expect.txt lists, per file, a piece of that message. Base: a minimal real-format program (add of
two 2x3 float tensors) and the corpus mlp archive."""
import copy, json, os, zipfile

here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "..", "corpus")

def tm(sizes, dtype=7):
    return {"dtype": dtype, "sizes": [{"as_int": s} if isinstance(s, int) else s for s in sizes],
            "requires_grad": False, "device": {"type": "cpu", "index": None},
            "strides": [], "storage_offset": {"as_int": 0}, "layout": 7}

def node(target, inputs, outputs, name):
    return {"target": target, "inputs": [{"name": n, "arg": a, "kind": 1} for n, a in inputs],
            "outputs": outputs, "metadata": {"stack_trace": 'File "model.py", line 3, in forward\n    return x + y'},
            "is_hop_single_tensor_return": None, "name": name}

def base():
    return {"graph_module": {"graph": {
        "inputs": [{"as_tensor": {"name": "x"}}, {"as_tensor": {"name": "y"}}],
        "outputs": [{"as_tensor": {"name": "add"}}],
        "nodes": [node("torch.ops.aten.add.Tensor", [("self", {"as_tensor": {"name": "x"}}), ("other", {"as_tensor": {"name": "y"}})],
                       [{"as_tensor": {"name": "add"}}], "add")],
        "tensor_values": {"x": tm([2, 3]), "y": tm([2, 3]), "add": tm([2, 3])},
        "sym_int_values": {}, "sym_bool_values": {}, "is_single_tensor_return": True, "custom_obj_values": {}, "sym_float_values": {}},
        "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}, {"user_input": {"arg": {"as_tensor": {"name": "y"}}}}],
                      "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "add"}}}}]},
        "module_call_graph": [], "metadata": {}, "treespec_namedtuple_fields": {}},
        "opset_version": {"aten": 10}, "range_constraints": {}, "schema_version": {"major": 8, "minor": 17},
        "verifiers": ["TRAINING"], "torch_version": "2.11.0", "guards_code": []}

def write(name, obj):
    with open(os.path.join(here, name), "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj))

def g(m): return m["graph_module"]["graph"]

write("good.json", base())
write("truncated.json", json.dumps(base())[:300])
write("not_json.json", "{this is not json")
write("array.json", "[1, 2, 3]")
m = base(); m["schema_version"]["major"] = 9; write("schema_major.json", m)
m = base(); del m["schema_version"]; write("no_schema.json", m)
m = base(); g(m)["nodes"] = "nodes"; write("wrong_type_nodes.json", m)
m = base(); g(m)["nodes"][0]["inputs"][0]["arg"] = {"as_tensor": {"name": 5}}; write("wrong_type_name.json", m)
m = base(); g(m)["nodes"][0]["target"] = "torch.ops.aten.frobnicate.default"; write("unknown_op.json", m)
m = base(); g(m)["nodes"][0]["inputs"][1]["arg"] = {"as_tensor": {"name": "ghost"}}; write("undefined_value.json", m)
m = base()
n2 = node("torch.ops.aten.mul.Tensor", [("self", {"as_tensor": {"name": "add"}}), ("other", {"as_tensor": {"name": "y"}})], [{"as_tensor": {"name": "mul"}}], "mul")
g(m)["nodes"][0]["inputs"][1]["arg"] = {"as_tensor": {"name": "mul"}}   # add uses mul, mul uses add: a cycle
g(m)["nodes"].append(n2); g(m)["tensor_values"]["mul"] = tm([2, 3]); write("cycle.json", m)
m = base(); g(m)["nodes"].append(copy.deepcopy(g(m)["nodes"][0])); write("defined_twice.json", m)
m = base(); g(m)["tensor_values"]["x"] = tm([-2, 3]); write("negative_size.json", m)
m = base(); g(m)["tensor_values"]["x"] = tm([2**31, 2**31, 2**31]); write("size_overflow.json", m)
m = base(); g(m)["tensor_values"]["x"] = tm([2, 3], dtype=99); write("unknown_dtype.json", m)
m = base(); g(m)["tensor_values"]["add"] = tm([3, 2]); write("shape_mismatch.json", m)
m = base(); g(m)["tensor_values"]["y"] = tm([4, 5]); g(m)["tensor_values"]["add"] = tm([4, 5]); write("bad_broadcast.json", m)
m = base(); g(m)["nodes"][0]["inputs"].pop(); write("missing_arg.json", m)
m = base(); g(m)["nodes"][0]["inputs"][1]["name"] = "bogus"; write("unknown_arg.json", m)
m = base(); g(m)["tensor_values"]["x"]["sizes"][0] = {"as_expr": {"expr_str": "Mul(Symbol('s0'", "hint": None}}; write("bad_sympy.json", m)
write("deep.json", '{"a": ' * 100000 + "1" + "}" * 100000)
# names that would be dangerous if pasted into generated code: they must be carried, escaped, never run
m = base()
evil = 'x"; system("rm -rf /"); /* \n */ //'
s = json.dumps(m).replace('"x"', json.dumps(evil))
write("evil_names.json", s)

# an in-place write into an output of split: the interpreter runs it, the compiler must refuse it
m = base()
g(m)["nodes"] = [
    node("torch.ops.aten.clone.default", [("self", {"as_tensor": {"name": "x"}})], [{"as_tensor": {"name": "c"}}], "c"),
    node("torch.ops.aten.split.Tensor", [("self", {"as_tensor": {"name": "c"}}), ("split_size", {"as_int": 1})], [{"as_tensors": [{"name": "s0"}, {"name": "s1"}]}], "split"),
    node("torch.ops.aten.add_.Tensor", [("self", {"as_tensor": {"name": "s0"}}), ("other", {"as_tensor": {"name": "y"}})], [{"as_tensor": {"name": "a"}}], "add_")]
g(m)["tensor_values"] = {"x": tm([2, 3]), "y": tm([1, 3]), "c": tm([2, 3]), "s0": tm([1, 3]), "s1": tm([1, 3]), "a": tm([1, 3])}
m["graph_module"]["signature"]["output_specs"] = [{"user_output": {"arg": {"as_tensor": {"name": "c"}}}}]
g(m)["outputs"] = [{"as_tensor": {"name": "c"}}]
write("write_through_split.json", m)

# archives
src = os.path.join(corpus, "models", "mlp", "model.pt2")
data = open(src, "rb").read()
open(os.path.join(here, "truncated.pt2"), "wb").write(data[: len(data) // 2])
corrupt = bytearray(data); corrupt[-40:] = b"\xff" * 40
open(os.path.join(here, "corrupt_directory.pt2"), "wb").write(bytes(corrupt))
zin = zipfile.ZipFile(src)
def rezip(out, change):
    with zipfile.ZipFile(os.path.join(here, out), "w", zipfile.ZIP_STORED) as zo:
        for info in zin.infolist():
            body = change(info.filename, zin.read(info.filename))
            if body is not None: zo.writestr(info.filename, body)
def short_weights(name, body):
    return body[:100] if name.endswith("weights/weight_0") else body
rezip("short_weights.pt2", short_weights)
def legacy(name, body):
    if name.endswith("models/model.json"): return None
    return body
with zipfile.ZipFile(os.path.join(here, "legacy.pt2"), "w", zipfile.ZIP_STORED) as zo:
    zo.writestr("legacy/serialized_exported_program.json", "{}")
    zo.writestr("legacy/serialized_state_dict.pt", b"\x80\x02")
open(os.path.join(here, "not_a_model.bin"), "wb").write(b"\x00\x01\x02garbage" * 10)

# training: an op with no derivative rule on the gradient path, and nothing that requires grad
def scalar_tm(): return tm([])
m = base()
g(m)["tensor_values"]["x"]["requires_grad"] = True
g(m)["nodes"] = [node("torch.ops.aten.cumprod.default", [("self", {"as_tensor": {"name": "x"}}), ("dim", {"as_int": 0})], [{"as_tensor": {"name": "cp"}}], "cp"),
                 node("torch.ops.aten.sum.default", [("self", {"as_tensor": {"name": "cp"}})], [{"as_tensor": {"name": "add"}}], "add")]
g(m)["tensor_values"]["cp"] = tm([2, 3]); g(m)["tensor_values"]["add"] = scalar_tm()
write("no_derivative.json", m)
m = base()
g(m)["nodes"].append(node("torch.ops.aten.sum.default", [("self", {"as_tensor": {"name": "add"}})], [{"as_tensor": {"name": "s"}}], "s"))
g(m)["tensor_values"]["s"] = scalar_tm()
g(m)["outputs"] = [{"as_tensor": {"name": "s"}}]
m["graph_module"]["signature"]["output_specs"] = [{"user_output": {"arg": {"as_tensor": {"name": "s"}}}}]
write("nothing_requires_grad.json", m)
