#!/usr/bin/env python3
"""Writes tests/cases/mlp_json: the corpus mlp as a bare model.json plus weights.safetensors keyed
by parameter name (as Hugging Face ships weights), to test `--weights`. Committed; rerun to change."""
import json, os, struct, zipfile
here = os.path.dirname(os.path.abspath(__file__))
z = zipfile.ZipFile(os.path.join(here, "..", "corpus", "models", "mlp", "model.pt2"))
top = z.namelist()[0].split("/")[0]
out = os.path.join(here, "mlp_json")
open(os.path.join(out, "model.json"), "wb").write(z.read(f"{top}/models/model.json"))
cfg = json.loads(z.read(f"{top}/data/weights/model_weights_config.json"))["config"]
header, blobs, off = {}, [], 0
for fqn, meta in cfg.items():
    body = z.read(f"{top}/data/weights/{meta['path_name']}")
    sizes = [s["as_int"] for s in meta["tensor_meta"]["sizes"]]
    header[fqn] = {"dtype": "F32", "shape": sizes, "data_offsets": [off, off + len(body)]}
    blobs.append(body); off += len(body)
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
with open(os.path.join(out, "weights.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]
