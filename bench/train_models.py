#!/usr/bin/env python3
"""Training benchmark models: a module per model whose forward returns the loss, written with plain
ops so that the same definition runs on old PyTorch (Debian's 1.13) and new (2.x, which exported
bench/train/*/model.json with torch.export in training mode). Parameter names match the exported
graphs, so weights from make_weights.py load into them with load_state_dict."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(s, d=256, h=4, f=1024):
        super().__init__(); s.h = h
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.fc1 = nn.Linear(d, f); s.fc2 = nn.Linear(f, d)

    def forward(s, x):
        B, T, D = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(D, dim=-1)
        q, k, v = [t.view(B, T, s.h, D // s.h).transpose(1, 2) for t in (q, k, v)]
        a = (q @ k.transpose(-2, -1) / 8.0).softmax(-1) @ v
        x = x + s.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))


class EncoderTrain(nn.Module):   # two pre-norm blocks, d=256, batch 4 x 128 tokens; MSE to a target
    def __init__(s):
        super().__init__(); s.blocks = nn.ModuleList([Block(), Block()]); s.ln = nn.LayerNorm(256)

    def forward(s, x, y):
        for b in s.blocks: x = b(x)
        return F.mse_loss(s.ln(x), y)


class MLPTrain(nn.Module):       # mlp_big with a cross-entropy loss over 1024 classes, batch 256
    def __init__(s):
        super().__init__(); s.net = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))

    def forward(s, x, y):
        return F.cross_entropy(s.net(x), y)


class Res(nn.Module):
    def __init__(s, cin, cout, stride):
        super().__init__()
        s.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.b1 = nn.BatchNorm2d(cout)
        s.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(cout)
        s.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else nn.Identity()

    def forward(s, x):
        return F.relu(s.b2(s.c2(F.relu(s.b1(s.c1(x))))) + s.down(x))


class ResNetTrain(nn.Module):    # a small CIFAR-style residual net, batch 32 x 3 x 32 x 32, batch norm in training mode
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        s.layers = nn.Sequential(Res(32, 32, 1), Res(32, 64, 2), Res(64, 128, 2))
        s.fc = nn.Linear(128, 10)

    def forward(s, x, y):
        h = s.layers(s.stem(x)).mean((2, 3))
        return F.cross_entropy(s.fc(h), y)


MODELS = {  # name: (module, example inputs)
    "encoder_train": (EncoderTrain, lambda: (torch.randn(4, 128, 256), torch.randn(4, 128, 256))),
    "mlp_big_train": (MLPTrain, lambda: (torch.randn(256, 1024), torch.randint(0, 1024, (256,)))),
    "resnet_small_train": (ResNetTrain, lambda: (torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)))),
}
