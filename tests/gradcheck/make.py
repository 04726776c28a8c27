#!/usr/bin/env python3
"""Writes tests/gradcheck/<op>/: one-op models (ExportedProgram JSON) with random float inputs, for
derivative rules of ops that PyTorch's exports rarely produce (test-golden --gradcheck runs them with
the exported cases). Committed; rerun only to change them. Needs NumPy."""
import json, os, struct
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)

def tm(sizes, dtype=7):
    return {"dtype": dtype, "sizes": [{"as_int": s} for s in sizes], "requires_grad": True, "device": {"type": "cpu", "index": None},
            "strides": [], "storage_offset": {"as_int": 0}, "layout": 7}

def save_st(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, t in tensors.items():
        b = t.astype(np.float32).tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]

def model(name, target, shape, args, outs, first="self", ret=0):
    """x of `shape` -> target(x, *args) -> outputs `outs` (name, sizes, dtype), the model returning outs[ret]; one user input."""
    inputs = [{"name": first, "arg": {"as_tensor": {"name": "x"}}, "kind": 1}] + [{"name": k, "arg": v, "kind": 1} for k, v in args]
    outputs = [{"as_tensor": {"name": o[0]}} for o in outs]
    tv = {"x": tm(shape)}
    for o in outs: tv[o[0]] = tm(o[1], o[2] if len(o) > 2 else 7)
    node = {"target": "torch.ops.aten." + target, "inputs": inputs, "outputs": outputs, "metadata": {}, "is_hop_single_tensor_return": None, "name": "op"}
    m = {"graph_module": {"graph": {"inputs": [{"as_tensor": {"name": "x"}}], "outputs": [{"as_tensor": {"name": outs[ret][0]}}], "nodes": [node],
                                    "tensor_values": tv, "sym_int_values": {}, "sym_bool_values": {}, "is_single_tensor_return": True,
                                    "custom_obj_values": {}, "sym_float_values": {}},
                          "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
                                        "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": outs[ret][0]}}}}]},
                          "module_call_graph": [], "metadata": {}, "treespec_namedtuple_fields": {}},
         "opset_version": {"aten": 10}, "range_constraints": {}, "schema_version": {"major": 8, "minor": 17},
         "verifiers": ["ATEN"], "torch_version": "2.11.0", "guards_code": []}
    d = os.path.join(here, name)
    os.makedirs(d, exist_ok=True)
    json.dump(m, open(os.path.join(d, "model.json"), "w"), indent=1)
    save_st(os.path.join(d, "io.safetensors"), {"in.0": rng.standard_normal(shape)})

model("sub.Scalar", "sub.Scalar", [3, 4], [("other", {"as_float": 2.5}), ("alpha", {"as_float": 1.5})], [("y", [3, 4])])
model("div.Scalar", "div.Scalar", [3, 4], [("other", {"as_float": -4.0})], [("y", [3, 4])])
model("native_dropout", "native_dropout.default", [3, 4], [("p", {"as_float": 0.0}), ("train", {"as_bool": True})], [("y", [3, 4]), ("mask", [3, 4], 12)], first="input")
model("std.dim", "std.dim", [3, 5], [("dim", {"as_ints": [1]}), ("unbiased", {"as_bool": True}), ("keepdim", {"as_bool": True})], [("y", [3, 1])])
model("std.correction", "std.correction", [3, 5], [("dim", {"as_ints": [0]}), ("correction", {"as_float": 0.0})], [("y", [5])])
model("upsample_nearest2d", "upsample_nearest2d.default", [1, 2, 3, 4], [("output_size", {"as_ints": [6, 12]})], [("y", [1, 2, 6, 12])])
model("_unsafe_view", "_unsafe_view.default", [3, 4], [("size", {"as_ints": [2, 6]})], [("y", [2, 6])])
# training-mode batch norm's statistics as the model's result: the gradients that reach save_mean and
# save_invstd themselves (grad_bn_train's terms beyond the output's)
bn = [("weight", {"as_none": True}), ("bias", {"as_none": True}), ("training", {"as_bool": True}), ("momentum", {"as_float": 0.1}), ("eps", {"as_float": 1e-5})]
bn_outs = [("y", [2, 3, 4]), ("save_mean", [3]), ("save_invstd", [3])]
model("batch_norm_save_mean", "_native_batch_norm_legit.no_stats", [2, 3, 4], bn, bn_outs, first="input", ret=1)
model("batch_norm_save_invstd", "_native_batch_norm_legit.no_stats", [2, 3, 4], bn, bn_outs, first="input", ret=2)
