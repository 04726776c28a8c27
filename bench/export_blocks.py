#!/usr/bin/env python3
"""export_blocks.py OUTDIR [DEVICE]: the transformer benchmarks of DESIGN.md's anchors, made on the
machine that has transformers (the GPU host): Hugging Face BertModel as BERT-base (2 layers, hidden
768, batch 4, sequence 128), LlamaModel as a Llama block stack (hidden 512, 4 layers, sequence 128)
and BERT-tiny (2 layers, hidden 128, batch 2, sequence 16), random weights (seed 0). For each:
OUTDIR/NAME/model.pt2 (torch.export.save), io.safetensors (in.0: the token ids), and torch.json with
PyTorch's own eager and torch.compile medians on DEVICE (default cuda), each run timed to its end."""
import json, os, statistics, struct, sys, time
import numpy as np
import torch
import transformers as tf

out, dev = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)

class Hidden(torch.nn.Module):   # the last hidden state only: one tensor out
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, ids): return s.m(input_ids=ids).last_hidden_state

def bert(h, layers, heads, inter):
    return tf.BertModel(tf.BertConfig(hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=inter), add_pooling_layer=False)
def llama(h, layers, heads, inter):
    return tf.LlamaModel(tf.LlamaConfig(hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                                        intermediate_size=inter, vocab_size=32000, use_cache=False))
models = {"bert_base_2l_s128_b4": (lambda: bert(768, 2, 12, 3072), 4, 128, 30522),
          "llama_512x4_s128": (lambda: llama(512, 4, 8, 1376), 1, 128, 32000),
          "bert_tiny_s16_b2": (lambda: bert(128, 2, 2, 512), 2, 16, 30522)}
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
def median_ms(f, x, n=100):
    with torch.no_grad():
        for _ in range(5): f(x)
        sync()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter(); f(x); sync(); ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)
for name, (make, b, s, vocab) in models.items():
    d = os.path.join(out, name); os.makedirs(d, exist_ok=True)
    m = Hidden(make()).eval()
    ids = torch.randint(0, vocab, (b, s), dtype=torch.int64)
    with torch.no_grad(): ep = torch.export.export(m, (ids,))
    torch.export.save(ep, os.path.join(d, "model.pt2"))
    h = json.dumps({"in.0": {"dtype": "I64", "shape": [b, s], "data_offsets": [0, 8 * b * s]}}).encode()
    h += b" " * (-len(h) % 8)
    open(os.path.join(d, "io.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + ids.numpy().tobytes())
    m = m.to(dev); x = ids.to(dev)
    eager = median_ms(m, x)
    t0 = time.perf_counter(); c = torch.compile(m)
    with torch.no_grad(): c(x)
    sync(); cs = time.perf_counter() - t0
    r = {"eager_ms": eager, "compile_ms": median_ms(c, x), "compile_s": cs}
    json.dump(r, open(os.path.join(d, "torch.json"), "w"))
    print(name, json.dumps(r), flush=True)
