#!/usr/bin/env python3
"""Export a PyTorch model for gcc-graph: the .pt2 (torch.export.save, with a dynamic batch), example
inputs and PyTorch's own outputs for them, as safetensors files that gcc-graph run and compare read.

    python3 samples/export.py resnet18                   # any torchvision model name
    python3 samples/export.py hf:bert --batch 4 --seq 128  # transformers: bert, gpt2, llama (random weights)
    python3 samples/export.py my_model.py:make           # your own: make() returns (module, example_inputs)

then (the README's quickstart):

    gcc-graph compile exports/resnet18.pt2 -o resnet18.so          # --target cuda for the GPU
    gcc-graph run resnet18.so --inputs exports/resnet18_inputs.safetensors -o out.safetensors
    gcc-graph compare out.safetensors exports/resnet18_expected.safetensors

Writes DIR/NAME.pt2, DIR/NAME_inputs.safetensors (in.0, in.1, ... in the order the model takes them)
and DIR/NAME_expected.safetensors (out.0, ... : PyTorch's outputs, flattened as torch.export does).
Needs PyTorch 2.x with torch.export (and torchvision or transformers for their models); no network:
weights are random unless the module already has them."""
import argparse
import importlib.util
import json
import os
import struct
import sys

ST = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
      "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def save_safetensors(path, tensors):
    """tensors: {name: torch tensor} -> a safetensors file (the format's header, then the bytes)."""
    import torch
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        dt = str(t.dtype).replace("torch.", "")
        if dt not in ST:
            raise SystemExit(f"export.py: {name} is {dt}, which safetensors files for gcc-graph do not hold")
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST[dt], "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def torchvision_model(name, a):
    import torch
    import torchvision
    m = torchvision.models.get_model(name, weights=None)
    size = 299 if name.startswith("inception") else 224
    return m, (torch.randn(a.batch, 3, size, size),)


def hf_model(name, a):
    import torch
    import transformers as tf
    configs = {"bert": (tf.BertConfig, tf.BertModel), "gpt2": (tf.GPT2Config, tf.GPT2Model), "llama": (tf.LlamaConfig, tf.LlamaModel)}
    if name not in configs:
        raise SystemExit(f"export.py: hf:{name}: this script knows hf:bert, hf:gpt2 and hf:llama (or write a make() of your own)")
    cfg_cls, model_cls = configs[name]
    small = {"llama": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4)}
    cfg = cfg_cls(**small.get(name, {}))
    m = model_cls(cfg)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq))
    return m, (ids,)


def user_model(spec, a):
    path, fn = spec.rsplit(":", 1)
    s = importlib.util.spec_from_file_location("user_model", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    m, x = getattr(mod, fn)()
    return m, tuple(x) if isinstance(x, (list, tuple)) else (x,)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("model", help="a torchvision name (resnet18), hf:bert|hf:gpt2|hf:llama, or FILE.py:FUNCTION")
    p.add_argument("-o", "--out", default="exports", help="the folder to write into (default: exports)")
    p.add_argument("--name", help="the files' name (default: from the model)")
    p.add_argument("--batch", type=int, default=8, help="the example batch (default 8; at least 2, so that it stays dynamic)")
    p.add_argument("--seq", type=int, default=128, help="the sequence length of hf: models (default 128)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32", help="the model's dtype (default float32)")
    p.add_argument("--static", action="store_true", help="no dynamic batch: every size fixed at the example's")
    p.add_argument("--max-batch", type=int, default=1024, help="the largest batch the compiled model accepts (default 1024)")
    a = p.parse_args()

    import torch
    torch.manual_seed(0)
    if a.model.startswith("hf:"):
        m, x = hf_model(a.model[3:], a)
    elif ".py:" in a.model:
        m, x = user_model(a.model, a)
    else:
        m, x = torchvision_model(a.model, a)
    dt = getattr(torch, a.dtype)
    m = m.eval().to(dt)
    x = tuple(v.to(dt) if v.is_floating_point() else v for v in x)
    name = a.name or a.model.replace("hf:", "").replace(".py:", "_").replace("/", "_")
    dynamic = None
    if not a.static:
        batch = torch.export.Dim("batch", min=1, max=a.max_batch)
        dynamic = tuple({0: batch} if v.dim() > 0 and v.shape[0] == a.batch else None for v in x)
    with torch.no_grad():
        ep = torch.export.export(m, x, dynamic_shapes=dynamic)
        out = torch.utils._pytree.tree_leaves(ep.module()(*x))
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, name)
    torch.export.save(ep, base + ".pt2")
    save_safetensors(base + "_inputs.safetensors", {f"in.{i}": v for i, v in enumerate(x)})
    save_safetensors(base + "_expected.safetensors", {f"out.{i}": v for i, v in enumerate(out) if isinstance(v, torch.Tensor)})
    print(f"wrote {base}.pt2 ({'batch 1-%d' % a.max_batch if dynamic else 'static shapes'}), "
          f"{base}_inputs.safetensors ({len(x)} input{'s' if len(x) > 1 else ''}), {base}_expected.safetensors ({len(out)} output{'s' if len(out) > 1 else ''})")


if __name__ == "__main__":
    sys.exit(main())
