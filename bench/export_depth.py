#!/usr/bin/env python3
"""export_depth.py OUT [LAYERS...]: Hugging Face BertModel (BERT-base widths, sequence 128, batch 1)
at several depths (default 2 4 8 16 32 layers), exported with torch.export (PyTorch 2.x, on a machine
with transformers), each graph written as OUT/bert_L<N>/model.json (no weights: bench/make_weights.py
makes them). bench/depth.sh compiles them and prints how compile time grows with depth."""
import os, sys, tempfile, zipfile

import torch
import transformers as tf

out = sys.argv[1]
layers = [int(a) for a in sys.argv[2:]] or [2, 4, 8, 16, 32]
for n in layers:
    torch.manual_seed(0)
    m = tf.BertModel(tf.BertConfig(num_hidden_layers=n)).eval()
    ids = torch.randint(0, 30522, (1, 128))
    ep = torch.export.export(m, (ids,))
    d = os.path.join(out, "bert_L%d" % n)
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as t:
        p = os.path.join(t, "m.pt2")
        torch.export.save(ep, p)
        with zipfile.ZipFile(p) as z:
            name = next(x for x in z.namelist() if x.endswith("models/model.json"))
            with open(os.path.join(d, "model.json"), "wb") as f:
                f.write(z.read(name))
    print(n, "layers:", os.path.getsize(os.path.join(d, "model.json")), "bytes", flush=True)
