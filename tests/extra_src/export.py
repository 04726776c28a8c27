#!/usr/bin/env python3
"""Exports the cases of tests/extra (run with PyTorch >= 2.9; it was run with 2.11 on the GPU host).

Each case: <out>/extra/<name>/ (training IR) and <out>/extra_aten/<name>/ (after run_decompositions),
each with model.pt2, io.safetensors (in.N, out.N, ref64.out.N computed in float64) and case.json,
the corpus's format. These are models and ops beyond ../corpus, to check that gcc-graph implements
ops in general. Usage: export.py OUTDIR [CASE...]"""
import copy, json, os, struct, sys, traceback
import torch, torch.nn as nn, torch.nn.functional as F

OUT = sys.argv[1]
ONLY = set(sys.argv[2:])   # optional: export only these cases
torch.manual_seed(0)
ST = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
      torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}

def save_st(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        hdr[k] = {"dtype": ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]

def flat(o):
    if isinstance(o, torch.Tensor): return [o]
    if isinstance(o, (tuple, list)): return [t for x in o for t in flat(x)]
    if hasattr(o, "values"): return [t for x in o.values() for t in flat(x)]
    return []

class Fn(nn.Module):
    def __init__(self, f, **mods):
        super().__init__(); self.f = f
        for k, m in mods.items(): setattr(self, k, m)
    def forward(self, *a): return self.f(self, *a)

CASES = []
def case(name, mod, *inputs, dynamic=None): CASES.append((name, mod, inputs, dynamic))
r = lambda *s: torch.randn(*s)

# float32 products the GPU takes as three TF32 products (M * N * K >= 2^26): a bias and ReLU, a bias
# and a residual, a transposed left operand and a row-major right one (tests/cuda.sh also runs it
# with a 2 MiB cap, K in 25 chunks, and with the split off)
case("products_tf32x3", Fn(lambda s, x: (lambda h: (lambda y: (y, h.t() @ y))(s.l2(h) + x))(torch.relu(s.l1(x))),
                           l1=nn.Linear(16, 2048), l2=nn.Linear(2048, 16)), r(2048, 16))
# convolutions
case("conv_transpose2d", nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), r(2, 4, 5, 5))
case("conv_transpose1d", nn.ConvTranspose1d(3, 4, 4, stride=2, padding=1), r(2, 3, 7))
case("conv3d", nn.Conv3d(2, 3, 3, padding=1, stride=(1, 2, 2)), r(1, 2, 4, 6, 6))
case("conv_dilated_groups", nn.Conv2d(4, 8, 3, dilation=2, groups=4, padding=2, bias=False), r(2, 4, 9, 9))
case("conv_unbatched", nn.Conv2d(3, 4, 3), r(3, 6, 6))
# strided, dilated and 1-d convolutions of one group (compiled: read from the image's phases in place)
case("conv_strides", Fn(lambda s, x: ((lambda y: (s.c2(y) + s.c3(y), s.c8(y)))(torch.relu(s.c1(x))), s.c4(x), s.c5(x), s.c6(x.flatten(2)), s.c7(x)),
                        c1=nn.Conv2d(3, 8, 7, stride=2, padding=3), c2=nn.Conv2d(8, 8, 3, stride=2, padding=1),
                        c3=nn.Conv2d(8, 8, 1, stride=2, bias=False), c4=nn.Conv2d(3, 6, 3, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
                        c5=nn.Conv2d(3, 5, 3, stride=3, padding=1, dilation=2), c6=nn.Conv1d(3, 4, 3, stride=2, padding=1),
                        c7=nn.Conv2d(3, 4, (1, 5), stride=(1, 2), padding=(0, 2)), c8=nn.Conv2d(8, 64, 3, stride=2, padding=2, dilation=2)),
     r(2, 3, 13, 11))
# depthwise convolutions (compiled: each tap one run over the channel's phase images): strided and
# dilated at once, a channel multiplier with unequal strides and kernel sides, 1-d, a 7x7 plane of
# 5x5 taps with hardswish and one with ReLU (the activation applied per plane)
case("conv_depthwise", Fn(lambda s, x: (s.d1(x), s.d2(x), s.d3(x.flatten(2)), F.hardswish(s.d4(s.p(x))), torch.relu(s.d5(x))),
                          d1=nn.Conv2d(4, 4, 3, stride=2, padding=2, dilation=2, groups=4),
                          d2=nn.Conv2d(4, 8, (3, 5), stride=(2, 1), padding=(1, 2), groups=4, bias=False),
                          d3=nn.Conv1d(4, 4, 5, stride=3, padding=2, groups=4),
                          d4=nn.Conv2d(4, 4, 5, padding=2, groups=4), p=nn.AdaptiveAvgPool2d(7),
                          d5=nn.Conv2d(4, 4, 3, stride=(1, 3), dilation=(3, 1), groups=4)),
     r(2, 4, 13, 11))
# epilogues (compiled: pointwise nodes after a product or convolution applied to its finished tiles):
# a residual computed before (the input), one computed after (the add then goes to the later
# convolution), scalars only after a strided convolution, two linear layers reading x (stacked into
# one product, so their adds are kernels of their own; one operand broadcasts), a batched product
# divided by a scalar, addmm with
# alpha and beta (the epilogue after the bias), a depthwise convolution's gate by a tensor, float64,
# a residual computed inside its add (not in the epilogue), and a sum that is also an output
case("epilogues", Fn(lambda s, x, y, c, m: (
        (lambda h: (lambda a: (h, a, F.leaky_relu(s.c4(a), 0.1) * 0.5 - 1, torch.sigmoid(s.dw(a)) * a))(F.relu(s.c2(h) + s.c3(h))))(F.relu6(s.c1(x) + x)),
        F.gelu(s.l1(x) + x, approximate="tanh"), s.l2(x) + m, torch.softmax((y @ y.transpose(-1, -2)) / 4, -1),
        torch.relu(torch.addmm(c, y[0, 0], y[1, 0].t(), beta=2, alpha=0.5)), F.relu(s.cd(x.double()) + 1),
        torch.relu(s.c5(x) + torch.tanh(x[:, :6])), (lambda p: (p, torch.relu(p)))(s.c6(x) + 1)),
                     c1=nn.Conv2d(8, 8, 3, padding=1), c2=nn.Conv2d(8, 8, 3, padding=1), c3=nn.Conv2d(8, 8, 1),
                     c4=nn.Conv2d(8, 16, 3, stride=2, padding=1), dw=nn.Conv2d(8, 8, 3, padding=1, groups=8), l1=nn.Linear(10, 10),
                     l2=nn.Linear(10, 7), cd=nn.Conv2d(8, 4, 3).double(), c5=nn.Conv2d(8, 6, 1), c6=nn.Conv2d(8, 5, 3, stride=(1, 2))),
     r(2, 8, 10, 10), r(2, 3, 5, 6), r(5, 5), r(7))
# in-place reuse (compiled: a pointwise kernel's output takes the memory of an input of its size that
# dies there, when it reads that input only at the index it writes): a + a.t() and c + c[:, :1] read
# their dying input at two indices (not in place), sin(b) * 2 at one (in place)
case("inplace_reuse", Fn(lambda s, x, w: (lambda a: (lambda b: (lambda c: c + c[:, :1])(torch.sin(b) * 2))(a + a.t()))(torch.relu(x @ w))),
     r(6, 5), r(5, 6))
# resampling and pooling
case("upsample_bilinear", Fn(lambda s, x: (F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
                                          F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True))), r(1, 3, 5, 6))
case("upsample_nearest_size", Fn(lambda s, x: F.interpolate(x, size=(7, 5), mode="nearest")), r(1, 2, 4, 3))
case("pool1d", Fn(lambda s, x: (F.max_pool1d(x, 3, 2, 1), F.avg_pool1d(x, 2), F.adaptive_avg_pool1d(x, 5))), r(2, 3, 11))
case("pool_ceil", Fn(lambda s, x: (F.max_pool2d(x, 3, 2, ceil_mode=True), F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
                                   F.max_pool2d(x, 2, dilation=2), F.adaptive_avg_pool2d(x, (3, 5)), F.adaptive_max_pool2d(x, 2))), r(1, 2, 8, 11))
# pointwise
case("activations", Fn(lambda s, x: (F.softplus(x), F.elu(x), F.mish(x), F.relu6(x * 4), F.gelu(x, approximate="tanh"), F.logsigmoid(x),
                                     F.hardtanh(x, -0.5, 0.5), F.selu(x), F.softsign(x), F.celu(x), torch.nn.functional.glu(x, -1))), r(3, 8))
case("math_unary", Fn(lambda s, x: (torch.expm1(x), torch.log1p(x.abs()), torch.log2(x.abs() + 1), torch.tan(x * 0.5), torch.atan(x),
                                    torch.round(x * 3), torch.trunc(x * 3), torch.square(x), torch.exp2(x), torch.atan2(x, x.flip(0)),
                                    torch.asin(x.clamp(-0.9, 0.9)), torch.cosh(x), torch.frac(x * 3), torch.erfinv(x.clamp(-0.9, 0.9)))), r(4, 5))
case("int_math", Fn(lambda s, a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor"),
                                     a * 3 - 1, a ^ b, torch.bitwise_not(a), a.abs().max(), torch.remainder(a, -3), a / b, a.sum(0), a.cumsum(1))),
     torch.randint(-20, 20, (4, 6)), torch.randint(1, 7, (4, 6)) * torch.tensor([1, -1] * 3))
case("logical", Fn(lambda s, x, y: (torch.logical_xor(x > 0, y > 0), (x > 0) | (y < 0), ~(x > y), torch.where(x > 0, x, 0.0),
                                    torch.where(y > 0, 1.0, y), x.masked_fill(x > y, float("-inf")).softmax(-1), torch.isnan(x / (x - x)),
                                    torch.clamp(x, min=y), torch.minimum(x, y), torch.maximum(x, y))), r(3, 4), r(3, 4))
# reductions
case("reductions", Fn(lambda s, x: (x.std(dim=1), *torch.var_mean(x, dim=(0, 2), correction=0), x.prod(dim=-1), x.amin(dim=(1,)),
                                    x.argmin(dim=0, keepdim=True), (x > 0).all(dim=1), *x.max(dim=1), x.logsumexp(dim=(1, 2)),
                                    x.cumprod(dim=1), x.norm(dim=-1), x.mean(), x.sum(dtype=torch.float64), F.normalize(x, dim=-1))), r(3, 4, 5))
# shapes and views
case("shapes", Fn(lambda s, x, y: (*torch.chunk(x, 3, dim=1), *x.unbind(0), x.narrow(2, 1, 2), x.repeat(2, 1, 3), x.flip(0, 2),
                                   torch.roll(x, (1, -2), (0, 2)), y.expand_as(x) + x, x.unflatten(1, (3, -1)), x.movedim(0, -1),
                                   x.transpose(0, 2).contiguous().view(-1, 2), torch.tril(x, -1), torch.triu(x, 1), x[..., 1:5:2], x[-1],
                                   x.permute(2, 0, 1).reshape(4, -1), torch.stack([x, x], -1), torch.cat([x, y.expand(2, 6, 4)], 0))),
     r(2, 6, 4), r(1, 6, 1))
case("indexing", Fn(lambda s, x, i, j: (x[i], x[:, j], x[i, :, j.clamp(max=2)], x[i, j], torch.gather(x, 1, j.view(1, -1, 1).expand(4, -1, 3)),
                                        torch.index_select(x, 2, j.clamp(max=2)), x[torch.tensor([0, -1])])),
     r(4, 5, 3), torch.tensor([[0, 3], [2, 1]]), torch.tensor([4, 0]))
case("index_put", Fn(lambda s, x, i, v: x.clone().index_put_((i,), v) * 2), r(5, 3), torch.tensor([4, 0]), r(2, 3))
case("scatter", Fn(lambda s, x, i: (torch.scatter(x, 1, i, 1.5), torch.zeros_like(x).scatter_add(1, i, x[:, :2]), x.scatter(0, i[:2].clamp(max=2), x[:2] * 2))),
     r(3, 5), torch.tensor([[0, 1], [4, 2], [3, 3]]))
# diagonal, a view: offsets either side of the main diagonal, dims in either order and negative, an
# empty diagonal, a diagonal of a transposed view, one read by a reduction
case("diagonal", Fn(lambda s, x, y: (torch.diagonal(x, 0, 0, 1) * 2, torch.diagonal(x, 1, 1, 2) + 1, torch.diagonal(x, -2, 2, 0).contiguous(),
                                     torch.diagonal(y, 3), torch.diagonal(x.transpose(0, 2), 1, -1, -2) - x.sum(), torch.diagonal(y, -1).exp(),
                                     torch.diagonal(x, 2, 0, 2).sum(-1))),
     r(4, 5, 6), r(3, 3))
# bfloat16 convolutions (plain, strided, depthwise, 1x1, with bias and without): --target cuda runs them
# on cuDNN; the CPU refuses them with a message
case("conv_bf16", nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, groups=8, padding=1, bias=False),
                                nn.Conv2d(8, 16, 1), nn.GELU()).to(torch.bfloat16), r(2, 3, 12, 12).to(torch.bfloat16))
# bfloat16 depthwise convolutions, channels-last on the GPU: the 8-channel kernel (channels a multiple
# of 8: 7x7, strided, dilated, a block's channels partly used) and the scalar one (12 channels)
case("conv_dw_bf16", Fn(lambda s, a, b, c, d: (s.d1(a), torch.relu(s.d2(b)), s.d3(c), s.d4(d)),
                        d1=nn.Conv2d(24, 24, 7, padding=3, groups=24), d2=nn.Conv2d(40, 40, 3, stride=2, padding=1, groups=40, bias=False),
                        d3=nn.Conv2d(12, 12, 5, padding=2, groups=12), d4=nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)).to(torch.bfloat16),
     r(2, 24, 19, 19).to(torch.bfloat16), r(2, 40, 17, 17).to(torch.bfloat16), r(2, 12, 15, 15).to(torch.bfloat16), r(2, 16, 13, 13).to(torch.bfloat16))
# bfloat16 pooling (max with padding and ceil mode, average, adaptive average): on the GPU only
case("pool_bf16", Fn(lambda s, x: (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True), F.avg_pool2d(x, 3, 2, 1),
                                   F.adaptive_avg_pool2d(x, 1))), r(2, 4, 11, 11).to(torch.bfloat16))
# kernels that are the same code (compiled once): four products of one shape in a chain, each with a
# different epilogue, and two identical pointwise kernels; a kernel merged with another that calls a
# different epilogue would compute the wrong activation
case("same_code", Fn(lambda s, x: (lambda a: (lambda b: (lambda c: (a, b, c, torch.tanh(s.l4(c) + c), torch.exp(a) + 1, torch.exp(b) + 1))(
                         s.l3(b) * 2 + 1))(torch.sigmoid(s.l2(a))))(torch.relu(s.l1(x))),
                     l1=nn.Linear(16, 16), l2=nn.Linear(16, 16), l3=nn.Linear(16, 16), l4=nn.Linear(16, 16)), r(8, 16))
case("inplace_views", Fn(lambda s, x: (lambda y: (y[:, 1].mul_(2), y.t()[0].add_(1), y)[-1])(x.clone())), r(3, 4))
case("creation", Fn(lambda s, x: (torch.arange(2, 11, 3, dtype=torch.float32) * x[0, 0], torch.linspace(0, 1, 5) + x[0, 0], torch.full((2, 3), 7, dtype=torch.int32),
                                  torch.ones_like(x, dtype=torch.int64), torch.zeros(2, 2) + x.sum(), torch.eye(3) * x[0, 1], torch.empty_like(x).fill_(3.0))), r(2, 3))
# normalization and attention
case("norms", Fn(lambda s, x: (s.bn(x), s.gn(x), s.inorm(x), s.ln(x), F.rms_norm(x, (7,), eps=1e-6)),
                 bn=nn.BatchNorm2d(4), gn=nn.GroupNorm(2, 4), inorm=nn.InstanceNorm2d(4, affine=True), ln=nn.LayerNorm([5, 7])), r(2, 4, 5, 7))
# norms whose rows the GPU keeps in registers (a row's 16-byte vectors over 1-32 lanes): a bfloat16
# row of 96 (ConvNeXt's) with its mean and 1/std, 10 rows where a warp takes 8; float32 rows of 40 and
# 1000, whose vectors the row's lanes do not divide; a float16 RMS row of one lane; 2048 bfloat16;
# RMS over two dims; a row of 30 floats (not whole vectors: the generic kernel)
B16 = torch.bfloat16
case("norm_rows", Fn(lambda s, a, b, c, d, f: (torch.ops.aten.native_layer_norm(a * 2 + 1, [96], s.w96, s.b96, 1e-5),
                                             s.ln40(b - 0.5), F.rms_norm(c * 3, (24,), s.w24, eps=1e-6), F.layer_norm(d + 1, (1000,)),
                                             F.rms_norm((d * 2).view(2, 10, 100), (10, 100)), s.ln2048(f * 2), F.layer_norm(d[:, :30] * 2, (30,))),
                     w96=nn.Parameter(torch.randn(96).to(B16)), b96=nn.Parameter(torch.randn(96).to(B16)), ln40=nn.LayerNorm(40),
                     w24=nn.Parameter(torch.rand(24).to(torch.float16) + 0.5), ln2048=nn.LayerNorm(2048).to(B16)),
     r(2, 5, 96).to(B16), r(3, 7, 40), r(3, 24).to(torch.float16), r(2, 1000), r(3, 2048).to(B16))
case("attention", Fn(lambda s, q, k, v, m: (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                          F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                          F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True, scale=0.3))),
     r(2, 4, 6, 8), r(2, 4, 6, 8), r(2, 4, 6, 8), r(6, 6))
# attention in half types, which --target cuda runs as one fused kernel (tensor cores): lengths not a
# multiple of the kernel's 64-row tiles, L != S, causal, bool and additive masks broadcast, grouped
# heads, rank 3, head sizes 32, 64, 96 and 128, and operands that are strided views
def att_half(s, x, kv, m, mb):
    B, L, _ = x.shape
    q = x.view(B, L, 4, 64).transpose(1, 2)                     # [2, 4, 70, 64], row stride 256
    k, v = kv.view(B, 90, 4, 64).transpose(1, 2), (kv.view(B, 90, 4, 64) * 2 - 1).transpose(1, 2)   # [2, 4, 90, 64]
    return (F.scaled_dot_product_attention(q, q, q, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=m),                        # additive [2, 1, 1, 90]
            F.scaled_dot_product_attention(q[:, :, :20], k, v, is_causal=True),          # L < S, causal
            F.scaled_dot_product_attention(x.view(B, L, 8, 32).transpose(1, 2), k[:, :2, :, :32], v[:, :2, :, :32],
                                           enable_gqa=True, scale=0.3),                 # grouped heads, D 32
            F.scaled_dot_product_attention(x.view(B * 2, L, 128), kv[..., :128].reshape(B * 2, 45, 128), kv[..., :128].reshape(B * 2, 45, 128),
                                           attn_mask=mb),                                # rank 3, D 128, bool [70, 45]
            F.scaled_dot_product_attention(x[..., :192].reshape(B, L, 2, 96).transpose(1, 2), kv[:, :, :192].reshape(B, 90, 2, 96).transpose(1, 2),
                                           kv[:, :, 64:256].reshape(B, 90, 2, 96).transpose(1, 2)))   # D 96
for dt, nm in ((torch.bfloat16, "attention_bf16"), (torch.float16, "attention_f16")):
    mb = torch.rand(70, 45) > 0.3
    mb[:, 0] = True   # no row left without keys
    case(nm, Fn(att_half), r(1, 70, 256).to(dt), r(1, 90, 256).to(dt), (torch.randn(1, 1, 1, 90) * 2).to(dt), mb)
# a causal mask passed as a bool mask (as HF Llama does), longer than a key tile: the fused kernel
# skips the tiles it leaves out whole
def att_mask_causal(s, q, k, v):
    L = q.shape[-2]
    m = torch.ones(L, L, dtype=torch.bool).tril() & (torch.arange(L) % 7 != 3)
    m = m | torch.eye(L, dtype=torch.bool)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
case("attention_mask_causal_bf16", Fn(att_mask_causal), r(1, 2, 150, 64).to(torch.bfloat16), r(1, 2, 150, 64).to(torch.bfloat16), r(1, 2, 150, 64).to(torch.bfloat16))
case("transformer_layer", nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True), r(2, 5, 16))
# weight folding's edges (lib/fold.c): q, k and `shared` stacked (same input, with bias; `shared`'s
# weight is also read by a sum, so it stays), `nb` apart (no bias); batch norm folded into c1 (no
# affine), not into c2 (its output is read twice); matrix @ vector and a batch that does not step
# over whole matrices (no row folding of the product)
def _bn(c, affine=True):
    b = nn.BatchNorm2d(c, affine=affine)
    b.running_mean.uniform_(-1, 1); b.running_var.uniform_(0.5, 2)
    if affine: b.weight.data.uniform_(0.5, 1.5); b.bias.data.uniform_(-1, 1)
    return b
case("fold_edges", Fn(lambda s, x, v, img: (x @ v, x.transpose(0, 1) @ s.w, s.q(x), s.k(x), s.nb(x), s.shared(x) + s.shared.weight.sum(),
                                           s.bn1(s.c1(img)), s.bn2(y := s.c2(img)), y.mean()),
                      w=nn.Parameter(torch.randn(8, 7)), q=nn.Linear(8, 6), k=nn.Linear(8, 4), nb=nn.Linear(8, 5, bias=False), shared=nn.Linear(8, 3),
                      c1=nn.Conv2d(3, 4, 3), bn1=_bn(4, False), c2=nn.Conv2d(3, 4, 3, bias=False), bn2=_bn(4)),
     r(2, 5, 8), r(8), r(1, 3, 6, 6))
# precision
case("mlp_bf16", nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8)).to(torch.bfloat16), r(4, 16).to(torch.bfloat16))
case("mlp_f16", nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 8), nn.Softmax(-1)).to(torch.float16), r(4, 16).to(torch.float16))
case("cnn_f64", nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)).double(), r(2, 3, 8, 8).double())
# dynamic sequence length
case("dynamic_seq", nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)), r(2, 6, 8),
     dynamic=({0: torch.export.Dim("b", min=1, max=16), 1: torch.export.Dim("s", min=2, max=32)},))
# architectures
try:
    import torchvision
    case("mobilenet_v2_w35", torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=10), r(1, 3, 64, 64))
    case("shufflenet_v2", torchvision.models.shufflenet_v2_x0_5(num_classes=10), r(1, 3, 64, 64))
    case("regnet_tiny", torchvision.models.regnet.RegNet(torchvision.models.regnet.BlockParams.from_init_params(depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8), num_classes=10), r(1, 3, 32, 32))
except Exception: traceback.print_exc()
try:
    from transformers import Qwen2Config, Qwen2ForCausalLM, T5Config, T5EncoderModel
    cfg = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    case("qwen2_tiny", Fn(lambda s, ids: s.m(input_ids=ids).logits, m=Qwen2ForCausalLM(cfg)), torch.randint(0, 128, (2, 10)))
    t5 = T5Config(vocab_size=100, d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, dropout_rate=0.0)
    case("t5_encoder_tiny", Fn(lambda s, ids: s.m(input_ids=ids).last_hidden_state, m=T5EncoderModel(t5)), torch.randint(0, 100, (2, 12)))
except Exception: traceback.print_exc()

# ops whose derivative rules no other case reaches (test-golden --gradcheck)
case("grad_unary", Fn(lambda s, x, y: (torch.square(x), torch.clamp_min(x, -0.3), torch.clamp_max(x, 0.4), 1 - x, torch.rsub(x, y), torch.sinh(x),
                                       torch.cosh(x), torch.tan(x * 0.5), torch.atan(x), torch.asin(x * 0.5), torch.log2(x.abs() + 1),
                                       torch.log10(x.abs() + 1), torch.exp2(x), torch.erfinv(x * 0.5), torch.frac(x * 3), torch.round(x) + x,
                                       torch.trunc(x) * x, x.detach() * x, torch.atan2(x, y + 2))), r(3, 4), r(3, 4))
case("grad_shapes", Fn(lambda s, x, y: (x.squeeze(), y.expand_as(x) * x, torch.cat([x, y.expand_as(x)], 1), torch.stack([x, x * 2]), *x.unbind(1),
                                        x.amin(1), torch.triu(x[0]), x.narrow(2, 1, 2), x.new_zeros(3) + x.sum(), x.new_ones(2) * x.mean(),
                                        x.new_full((2,), 3.0) * x.max(), torch.ones_like(x) * x, torch.empty_like(x).fill_(2) * x,
                                        torch.slice_scatter(x, y.expand(1, 4, 2) * 3, dim=2, start=1, end=3))), r(1, 4, 5), r(1, 4, 1))
case("grad_pool", Fn(lambda s, x: (F.adaptive_avg_pool2d(x, 2), F.interpolate(x, scale_factor=2, mode="nearest"), s.ct(x[:, :, :4, :4, None].repeat(1, 1, 1, 1, 3)),
                                   x.flatten(2) @ s.w), ct=nn.ConvTranspose3d(3, 2, 2, stride=2)), r(2, 3, 8, 8))
CASES[-1][1].w = nn.Parameter(torch.randn(64, 5))
case("grad_matmul3d", Fn(lambda s, x: s.l(x) @ x.transpose(1, 2), l=nn.Linear(6, 6)), r(2, 5, 6))
case("grad_reduce2", Fn(lambda s, x: (x.min(), *x.max(dim=1), *x.min(dim=0), x.norm(dim=-1), torch.linalg.vector_norm(x, 3, dim=0), x.std(dim=1),
                                      x.std(), *torch.var_mean(x, dim=1, correction=0), x.flatten() @ s.w)), r(4, 5))
CASES[-1][1].w = nn.Parameter(torch.randn(20, 3))
case("grad_scalar_ops", Fn(lambda s, x, y, m: (x - 2.5, x / 4, torch.remainder(x, 1.5), torch.fmod(x, 1.5), x.type_as(y), 2 ** x, x.masked_fill(m, y.sum()),
                                               torch.max(x, y), torch.min(x, y), torch.div(x, y.abs() + 3, rounding_mode="floor") * x, (x * 4) // 3 * x,
                                               F.dropout(x, 0.0, True), torch.baddbmm(x.new_ones(1, 4, 4), x[None], y.t()[None], beta=0.5, alpha=2),
                                               x.new_empty(3).fill_(1.5) * x.sum(), F.interpolate(x[None, None], size=(8, 10), mode="nearest"))),
     r(4, 5), r(4, 5), torch.rand(4, 5) > 0.5)

case("losses", Fn(lambda s, x, y, t, w: (F.l1_loss(x, y, reduction="none"), F.smooth_l1_loss(x, y, beta=0.5, reduction="sum"),
                                          F.huber_loss(x, y, delta=0.7), F.binary_cross_entropy(torch.sigmoid(x), t, weight=w, reduction="none"),
                                          F.binary_cross_entropy_with_logits(x, t, pos_weight=w[0], reduction="sum"), F.binary_cross_entropy_with_logits(x, t))),
     r(4, 6), r(4, 6), torch.rand(4, 6), torch.rand(4, 6) + 0.5)
# compile --precision cases: float32 models whose out.N are PyTorch's answers on the GPU under
# torch.autocast (bf16, fp16) or with TF32 on (tf32), each cast back to the model's dtype; case.json
# says the precision (tests/compile_case.sh compiles with it and allows 3x PyTorch's error)
PREC = []
# torch.autocast regions: turned off inside (timm's EfficientViT attention), inlined; turned on, refused
def _autocast_off(s, x):
    y = s.l(x)
    with torch.autocast(device_type="cpu", enabled=False):
        z = torch.softmax(y @ y.t(), -1)
    return z @ y
case("autocast_off", Fn(_autocast_off, l=nn.Linear(8, 8)), r(4, 8))
def _autocast_on(s, x):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        return s.l(x)
case("autocast_on", Fn(_autocast_on, l=nn.Linear(8, 8)), r(4, 8))

def pcase(name, prec, mod, *inputs): PREC.append((name, prec, mod, inputs))
class TinyBlock(nn.Module):   # pre-norm transformer block, causal attention, a matmul + softmax, a head
    def __init__(s, d=128, h=4):
        super().__init__()
        s.h, s.ln1, s.qkv, s.proj, s.ln2 = h, nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d)
        s.fc1, s.fc2, s.head = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.Linear(d, 10)
    def forward(s, x):
        B, L, D = x.shape
        q, k, v = s.qkv(s.ln1(x)).view(B, L, 3, s.h, D // s.h).permute(2, 0, 3, 1, 4)
        x = x + s.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, L, D))
        x = x + s.fc2(F.gelu(s.fc1(s.ln2(x))))
        return s.head(x.mean(1)), torch.softmax(x @ x.transpose(1, 2) / D ** 0.5, -1)
def _cnn():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), _bn(32), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), _bn(64), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
pcase("precision_block_bf16", "bf16", TinyBlock(), r(4, 64, 128))
pcase("precision_block_f16", "fp16", TinyBlock(), r(4, 64, 128))
pcase("precision_cnn_bf16", "bf16", _cnn(), r(4, 3, 32, 32))
pcase("precision_block_tf32", "tf32", TinyBlock(), r(4, 64, 128))
class LayoutCNN(nn.Module):   # every rule of the channels-last stage (layout.c) and the places it stops
    def __init__(s, c=16):
        super().__init__()
        s.stem, s.bn = nn.Conv2d(3, c, 3, padding=1), _bn(c)
        s.a, s.b = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1, groups=c)   # residual; depthwise
        s.se1, s.se2 = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)   # squeeze-excite on [N, C, 1, 1]
        s.dw, s.ln, s.pw = nn.Conv2d(2 * c, 2 * c, 7, padding=3, groups=2 * c), nn.LayerNorm(2 * c), nn.Linear(2 * c, 2 * c)   # ConvNeXt-style
        s.down, s.head = nn.Conv2d(2 * c, 2 * c, 2, stride=2), nn.Linear(2 * c, 10)
    def forward(s, x):
        x = F.relu(s.bn(s.stem(x)))
        x = F.max_pool2d(x, 3, 2, 1)
        x = x + F.hardswish(s.b(F.relu(s.a(x))))
        x = x * torch.sigmoid(s.se2(F.relu(s.se1(F.adaptive_avg_pool2d(x, 1)))))
        y = torch.cat([x, x.mean((2, 3), keepdim=True) - x], 1)   # channels concatenated, a plane mean
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)   # channel shuffle
        z = s.pw(s.ln(s.dw(y).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        z = F.gelu(s.down(y + z))
        return s.head(z.amax((2, 3))), z.sum(1)
pcase("precision_layout_cnn_tf32", "tf32", LayoutCNN(), r(4, 3, 32, 32))
class Conv1D(nn.Module):   # GPT-2's: addmm with an [in, out] weight, then a view
    def __init__(s, nin, nout):
        super().__init__()
        s.w, s.b = nn.Parameter(torch.randn(nin, nout) * 0.05), nn.Parameter(torch.randn(nout) * 0.05)
    def forward(s, x):
        return torch.addmm(s.b, x.view(-1, x.shape[-1]), s.w).view(x.shape[:-1] + (s.w.shape[1],))
class ViewsBlock(nn.Module):   # --precision's casts with views between them and the arithmetic: GPT-2's block, a ViT-style [L, N, E] branch
    def __init__(s, d=64, h=2):
        super().__init__()
        s.h, s.ln1, s.attn, s.proj, s.ln2, s.fc, s.out = h, nn.LayerNorm(d), Conv1D(d, 3 * d), Conv1D(d, d), nn.LayerNorm(d), Conv1D(d, 4 * d), Conv1D(4 * d, d)
        s.ln3, s.mix, s.lnf = nn.LayerNorm(d), nn.Linear(d, d), nn.LayerNorm(d)
    def forward(s, x):
        B, L, D = x.shape
        q, k, v = (t.view(B, L, s.h, D // s.h).transpose(1, 2) for t in s.attn(s.ln1(x)).split(D, 2))
        x = x + s.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, L, D))
        y = s.fc(s.ln2(x))
        x = x + s.out(0.5 * y * (1 + torch.tanh(0.7978845608028654 * (y + 0.044715 * torch.pow(y, 3)))))
        x = x + s.mix(s.ln3(x).transpose(0, 1)).transpose(0, 1)
        return s.lnf(x)
pcase("precision_views_bf16", "bf16", ViewsBlock(), r(4, 64, 64))
case("layout_cnn_bf16", LayoutCNN().to(torch.bfloat16), r(4, 3, 32, 32).to(torch.bfloat16))
class ResBlocks(nn.Module):   # a bfloat16 ResNet's blocks on the CPU: each norm folded into its convolution, ReLU and residuals in its epilogue
    def __init__(s, c=32):
        super().__init__()
        s.stem, s.bn = nn.Conv2d(3, c, 7, stride=2, padding=3, bias=False), _bn(c)
        s.c1, s.b1, s.c2, s.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), _bn(c), nn.Conv2d(c, c, 3, padding=1, bias=False), _bn(c)
        s.c3, s.b3 = nn.Conv2d(c, 2 * c, 1, stride=2, bias=False), _bn(2 * c)   # the downsampling shortcut
        s.c4, s.b4 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), _bn(2 * c)
        s.c5 = nn.Conv2d(2 * c, 40, 1)   # 40 channels: a last panel of 8 columns
        s.fc = nn.Linear(40, 10)
    def forward(s, x):
        x = F.max_pool2d(F.relu(s.bn(s.stem(x))), 3, 2, 1)
        y = F.relu(s.b2(s.c2(F.relu(s.b1(s.c1(x))))) + x)
        z = F.relu(s.b4(s.c4(y)) + s.b3(s.c3(y)))
        return s.fc(F.silu(s.c5(z)).mean((2, 3))), z
case("resblock_bf16", ResBlocks().to(torch.bfloat16), r(2, 3, 40, 40).to(torch.bfloat16))
class LayerScale(nn.Module):   # ConvNeXt's block (torchvision's CNBlock: its layer scale [C, 1, 1] on the NCHW permute of its second linear's
    # output) and timm's LayerScale ([C] on a linear's output): weight folding scales the linear's rows and bias, and the residual then joins
    # the product's epilogue on the GPU; a scale of another shape ([1, C, 1] on a [B, C, L] output: not the features) stays a multiplication
    def __init__(s, c=32):
        super().__init__()
        s.dw, s.ln, s.pw1, s.pw2 = nn.Conv2d(c, c, 7, padding=3, groups=c), nn.LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        s.gamma = nn.Parameter(torch.rand(c, 1, 1) + 0.5)
        s.fc, s.g2 = nn.Linear(c, c), nn.Parameter(torch.rand(c) + 0.5)
        s.fc3, s.g3 = nn.Linear(c, 6), nn.Parameter(torch.rand(1, 5, 1) + 0.5)
    def forward(s, x):
        y = s.pw2(F.gelu(s.pw1(s.ln(s.dw(x).permute(0, 2, 3, 1))))).permute(0, 3, 1, 2)
        x = x + s.gamma * y
        t = x.flatten(2).transpose(1, 2)
        t = t + s.fc(t) * s.g2
        return x, t, s.fc3(t[:, :5]) * s.g3
case("layer_scale", LayerScale(), r(2, 32, 8, 8))
case("layer_scale_bf16", LayerScale().to(torch.bfloat16), r(2, 32, 8, 8).to(torch.bfloat16))
class Patches(nn.Module):   # convolutions whose kernel is their stride (the GPU makes each a copy of its patches and a product): ViT's
    # patch embedding from the NCHW image then flattened to tokens, a kernel of unequal sides, ConvNeXt's stem and its downsampling
    # (2x2, stride 2) of a channels-last value (after a 3x3 convolution, which bfloat16 runs channels-last), ReLU and a residual after
    def __init__(s, c=16):
        super().__init__()
        s.vit, s.head = nn.Conv2d(3, 2 * c, 4, stride=4), nn.Linear(2 * c, 10)
        s.rect = nn.Conv2d(3, c, (2, 3), stride=(2, 3), bias=False)
        s.stem, s.mid, s.down = nn.Conv2d(3, c, 4, stride=4), nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, 2 * c, 2, stride=2)
    def forward(s, x):
        t = s.vit(x).flatten(2).transpose(1, 2)
        y = s.stem(x)
        y = F.relu(s.mid(y)) + y
        return s.head(t), s.rect(x), F.relu(s.down(y))
case("patch_convs", Patches(), r(2, 3, 16, 24))
case("patch_convs_bf16", Patches().to(torch.bfloat16), r(2, 3, 16, 24).to(torch.bfloat16))
# cases whose rewritten graph may depart from the loaded one by more than golden's rewrite rule allows
# (a sixteenth of a unit): case.json says why, and test-golden --rewrite skips them
INEXACT = {"resblock_bf16": "five bfloat16 convolutions deep: one float32-against-float64 rounding in a decomposed "
                            "batch norm (PyTorch's own float arithmetic) cascades past a sixteenth of a unit; the "
                            "compiled tests hold it to PyTorch's error against float64"}

# training cases: the loss is output 0; io adds grad.<param>, ref64.grad.<param> and buffer_after.<buffer>
TRAIN = []
def tcase(name, mod, *inputs): TRAIN.append((name, mod, inputs))

class TinyLM(nn.Module):   # embedding, two pre-norm blocks with causal attention and a GELU MLP, tied head
    def __init__(s, v=50, d=32, h=4):
        super().__init__(); s.h = h; s.emb = nn.Embedding(v, d); s.pos = nn.Parameter(torch.randn(12, d) * 0.1)
        s.blocks = nn.ModuleList([nn.ModuleDict(dict(ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d), ln2=nn.LayerNorm(d),
                                                     fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d))) for _ in range(2)])
        s.ln = nn.LayerNorm(d)
    def forward(s, ids, tgt):
        x = s.emb(ids) + s.pos[: ids.shape[1]]
        B, T, D = x.shape
        for b in s.blocks:
            q, k, v = b["qkv"](b["ln1"](x)).split(D, -1)
            q, k, v = [t.view(B, T, s.h, D // s.h).transpose(1, 2) for t in (q, k, v)]
            x = x + b["proj"](F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D))
            x = x + b["fc2"](F.gelu(b["fc1"](b["ln2"](x))))
        logits = s.ln(x) @ s.emb.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), label_smoothing=0.1)

class TinyRes(nn.Module):   # conv, batch norm in training mode, residual blocks with a strided downsample, global pooling
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        s.c1 = nn.Conv2d(8, 16, 3, 2, 1, bias=False); s.b1 = nn.BatchNorm2d(16); s.c2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(16)
        s.down = nn.Conv2d(8, 16, 1, 2); s.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16); s.fc = nn.Linear(16, 5)
    def forward(s, x, y):
        h = s.stem(x)
        h = F.relu(s.b2(s.c2(F.relu(s.b1(s.c1(h))))) + s.down(h))
        h = F.hardswish(s.dw(F.avg_pool2d(h, 2) + F.max_pool2d(h, 2)))
        return F.cross_entropy(s.fc(F.adaptive_avg_pool2d(h, 1).flatten(1)), y)

class TinyLlamaMLP(nn.Module):   # RMSNorm, a SiLU-gated MLP, a residual; mean squared error
    def __init__(s, d=24):
        super().__init__(); s.norm = nn.RMSNorm(d, eps=1e-6); s.g = nn.Linear(d, 64, bias=False); s.u = nn.Linear(d, 64, bias=False); s.dn = nn.Linear(64, d, bias=False)
    def forward(s, x, y):
        h = s.norm(x)
        return F.mse_loss(x + s.dn(F.silu(s.g(h)) * s.u(h)), y)

class TinyMisc(nn.Module):   # losses and odd ends: NLL with ignore_index, log_softmax, masked attention, padding embedding
    def __init__(s):
        super().__init__(); s.e = nn.Embedding(20, 8, padding_idx=0); s.l = nn.Linear(8, 6); s.ln = nn.LayerNorm(8, elementwise_affine=False)
    def forward(s, ids, y, mask):
        x = s.ln(s.e(ids))
        att = torch.softmax((x @ x.transpose(1, 2)).masked_fill(mask, -1e9) / 3, -1) @ x
        lp = F.log_softmax(s.l(att + torch.tanh(x)), -1)
        return F.nll_loss(lp.reshape(-1, 6), y.reshape(-1), ignore_index=2) + lp.exp().pow(2).mean() * 0.1

class LossMix(nn.Module):   # the elementwise losses on one small MLP's outputs
    def __init__(s):
        super().__init__(); s.net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 10)); s.register_buffer("pw", torch.rand(2) + 0.5)
    def forward(s, x, y, t):
        o = s.net(x)
        return (F.l1_loss(o[:, :2], y[:, :2]) + F.smooth_l1_loss(o[:, 2:4], y[:, 2:4], beta=0.5) + F.huber_loss(o[:, 4:6], y[:, 4:6], delta=0.7)
                + F.binary_cross_entropy(torch.sigmoid(o[:, 6:8]), t[:, :2], weight=t[:, 2:4] + 0.5)
                + F.binary_cross_entropy_with_logits(o[:, 8:10], t[:, :2], pos_weight=s.pw))

class TinyAttn(nn.Module):   # attention under --train: grouped-query causal by a constant mask (head size 32), a padding mask (64), a learned additive bias (its gradient)
    def __init__(s, d=64):
        super().__init__(); s.q1 = nn.Linear(d, d); s.kv1 = nn.Linear(d, 64); s.q2 = nn.Linear(d, d); s.kv2 = nn.Linear(d, 2 * d); s.o = nn.Linear(d, d)
        s.bias = nn.Parameter(torch.randn(40, 40) * 0.5)
    def forward(s, x, keep, y):
        B, L, D = x.shape
        q = s.q1(x).view(B, L, 2, 32).transpose(1, 2)
        k, v = [t.view(B, L, 1, 32).transpose(1, 2) for t in s.kv1(x).split(32, -1)]
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()   # a mask made of constants, as Hugging Face's: is_causal under --train too
        x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=causal, enable_gqa=True).transpose(1, 2).reshape(B, L, D)
        q = s.q2(x).view(B, L, 1, 64).transpose(1, 2)
        k, v = [t.view(B, L, 1, 64).transpose(1, 2) for t in s.kv2(x).split(D, -1)]
        x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :]).transpose(1, 2).reshape(B, L, D)
        x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=s.bias, scale=0.1).transpose(1, 2).reshape(B, L, D)
        return F.mse_loss(s.o(x), y)

class TinyTied(nn.Module):   # the output projection is the token embedding's weight: one Parameter under two names, as Hugging Face ties them
    def __init__(s, v=40, d=16):
        super().__init__(); s.emb = nn.Embedding(v, d); s.ln = nn.LayerNorm(d); s.fc = nn.Linear(d, d); s.head = nn.Linear(d, v, bias=False)
        s.head.weight = s.emb.weight
    def forward(s, ids, tgt):
        x = s.emb(ids)
        x = x + torch.tanh(s.fc(s.ln(x)))
        return F.cross_entropy(s.head(x).reshape(-1, s.head.weight.shape[0]), tgt.reshape(-1))

ATTN_IN = (r(2, 40, 64), torch.arange(40)[None, :] < torch.tensor([[40], [29]]), r(2, 40, 64))
tcase("train_attention", TinyAttn(), *ATTN_IN)
# training cases whose loss and gradients are PyTorch's under torch.autocast (CUDA), compiled with --precision
TRAIN_PREC = [("train_attention_bf16", "bf16", TinyAttn(), ATTN_IN)]
tcase("train_losses", LossMix(), r(8, 5), r(8, 6), torch.rand(8, 4))
tcase("train_tied", TinyTied(), torch.randint(0, 40, (2, 6)), torch.randint(0, 40, (2, 6)))
tcase("train_tiny_lm", TinyLM(), torch.randint(0, 50, (2, 12)), torch.randint(0, 50, (2, 12)))
tcase("train_tiny_resnet", TinyRes(), r(4, 3, 16, 16), torch.randint(0, 5, (4,)))
tcase("train_llama_mlp", TinyLlamaMLP(), r(3, 7, 24), r(3, 7, 24))
tcase("train_misc", TinyMisc(), torch.randint(0, 20, (2, 5)), torch.randint(0, 6, (2, 5)), torch.rand(2, 5, 5) > 0.7)

def ops_of(ep):
    return sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})

for name, mod, inputs, dyn in CASES:
    if ONLY and name not in ONLY: continue
    try:
        mod = mod.eval()
        with torch.no_grad():
            outs = flat(mod(*inputs))
            m64 = copy.deepcopy(mod).to(torch.float64)
            in64 = [t.double() if t.is_floating_point() else t for t in inputs]
            ref = flat(m64(*in64))
        ep = torch.export.export(mod, inputs, dynamic_shapes=dyn)
        io = {f"in.{i}": t for i, t in enumerate(inputs)}
        io.update({f"out.{i}": t for i, t in enumerate(outs)})
        io.update({f"ref64.out.{i}": t.double() if t.is_floating_point() else t for i, t in enumerate(ref)})
        for group, prog in (("extra", ep), ("extra_aten", ep.run_decompositions())):
            d = os.path.join(OUT, group, name)
            os.makedirs(d, exist_ok=True)
            torch.export.save(prog, os.path.join(d, "model.pt2"))
            save_st(os.path.join(d, "io.safetensors"), io)
            json.dump({"name": name, "group": group, "kind": "inference", "ops": ops_of(prog), "torch_version": torch.__version__,
                       **({"rewrite_inexact": INEXACT[name]} if name in INEXACT else {})},
                      open(os.path.join(d, "case.json"), "w"), indent=1)
        print("ok", name, flush=True)
    except Exception as e:
        print("FAILED", name, type(e).__name__, str(e)[:300], flush=True)

for name, prec, mod, inputs in PREC:
    if ONLY and name not in ONLY: continue
    try:
        mod = mod.eval()
        with torch.no_grad():
            m64 = copy.deepcopy(mod).to(torch.float64)
            ref = flat(m64(*[t.double() for t in inputs]))
            mc, xc = copy.deepcopy(mod).cuda(), [t.cuda() for t in inputs]
            if prec == "tf32":
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
                outs = flat(mc(*xc))
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16 if prec == "bf16" else torch.float16):
                    outs = flat(mc(*xc))
            outs = [o.float().cpu() for o in outs]
        ep = torch.export.export(mod, inputs)
        io = {f"in.{i}": t for i, t in enumerate(inputs)}
        io.update({f"out.{i}": t for i, t in enumerate(outs)})
        io.update({f"ref64.out.{i}": t for i, t in enumerate(ref)})
        d = os.path.join(OUT, "extra", name)
        os.makedirs(d, exist_ok=True)
        torch.export.save(ep, os.path.join(d, "model.pt2"))
        save_st(os.path.join(d, "io.safetensors"), io)
        json.dump({"name": name, "group": "extra", "kind": "inference", "precision": prec, "ops": ops_of(ep), "torch_version": torch.__version__},
                  open(os.path.join(d, "case.json"), "w"), indent=1)
        print("ok", name, [float((o.double() - f).norm() / f.norm()) for o, f in zip(outs, ref)], flush=True)
    except Exception as e:
        traceback.print_exc()
        print("FAILED", name, type(e).__name__, str(e)[:300], flush=True)

for name, mod, inputs in TRAIN:
    if ONLY and name not in ONLY: continue
    try:
        mod = mod.train()
        m32, m64 = copy.deepcopy(mod), copy.deepcopy(mod).to(torch.float64)
        loss = m32(*inputs); loss.backward()
        in64 = [t.double() if t.is_floating_point() else t for t in inputs]
        loss64 = m64(*in64); loss64.backward()
        ep = torch.export.export(copy.deepcopy(mod), inputs)
        io = {f"in.{i}": t for i, t in enumerate(inputs)}
        io["out.0"], io["ref64.out.0"] = loss.detach(), loss64.detach()
        for (k, p), (_, p64) in zip(m32.named_parameters(), m64.named_parameters()):
            io[f"grad.{k}"], io[f"ref64.grad.{k}"] = p.grad, p64.grad
        before = dict(mod.named_buffers())
        for k, b in m32.named_buffers():   # the buffers the step changed (running statistics), as the corpus does
            if not torch.equal(b, before[k]): io[f"buffer_after.{k}"] = b
        for group, prog in (("extra", ep), ("extra_aten", ep.run_decompositions())):
            d = os.path.join(OUT, group, name)
            os.makedirs(d, exist_ok=True)
            torch.export.save(prog, os.path.join(d, "model.pt2"))
            save_st(os.path.join(d, "io.safetensors"), io)
            json.dump({"name": name, "group": group, "kind": "train", "ops": ops_of(prog), "torch_version": torch.__version__},
                      open(os.path.join(d, "case.json"), "w"), indent=1)
        print("ok", name, flush=True)
    except Exception as e:
        traceback.print_exc()
        print("FAILED", name, type(e).__name__, str(e)[:300], flush=True)

for name, prec, mod, inputs in TRAIN_PREC:
    if ONLY and name not in ONLY: continue
    try:
        torch.manual_seed(0)
        mod = mod.train()
        mc, m64 = copy.deepcopy(mod).cuda(), copy.deepcopy(mod).to(torch.float64)
        with torch.autocast("cuda", dtype=torch.bfloat16 if prec == "bf16" else torch.float16):
            loss = mc(*[t.cuda() for t in inputs])
        loss.backward()
        loss64 = m64(*[t.double() if t.is_floating_point() else t for t in inputs]); loss64.backward()
        ep = torch.export.export(copy.deepcopy(mod), inputs)
        io = {f"in.{i}": t for i, t in enumerate(inputs)}
        io["out.0"], io["ref64.out.0"] = loss.detach().float().cpu(), loss64.detach()
        for (k, p), (_, p64) in zip(mc.named_parameters(), m64.named_parameters()):
            io[f"grad.{k}"], io[f"ref64.grad.{k}"] = p.grad.float().cpu(), p64.grad
        d = os.path.join(OUT, "extra", name)
        os.makedirs(d, exist_ok=True)
        torch.export.save(ep, os.path.join(d, "model.pt2"))
        save_st(os.path.join(d, "io.safetensors"), io)
        json.dump({"name": name, "group": "extra", "kind": "train", "precision": prec, "ops": ops_of(ep), "torch_version": torch.__version__},
                  open(os.path.join(d, "case.json"), "w"), indent=1)
        print("ok", name, flush=True)
    except Exception as e:
        traceback.print_exc()
        print("FAILED", name, type(e).__name__, str(e)[:300], flush=True)

# the training benchmarks: graphs only (bench/train/<name>/model.json); make_weights.py makes weights
if not ONLY or "bench" in ONLY:
    import zipfile
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from train_models import MODELS
    for name, (M, mk) in MODELS.items():
        try:
            ep = torch.export.export(M().train(), mk())
            d = os.path.join(OUT, "bench_train", name)
            os.makedirs(d, exist_ok=True)
            torch.export.save(ep, os.path.join(d, "model.pt2"))
            z = zipfile.ZipFile(os.path.join(d, "model.pt2"))
            js = [n for n in z.namelist() if n.endswith("models/model.json")][0]
            open(os.path.join(d, "model.json"), "wb").write(z.read(js))
            os.remove(os.path.join(d, "model.pt2"))
            json.dump({"name": name, "kind": "train", "ops": ops_of(ep), "torch_version": torch.__version__}, open(os.path.join(d, "case.json"), "w"), indent=1)
            print("ok bench", name, flush=True)
        except Exception as e:
            traceback.print_exc()
            print("FAILED bench", name, type(e).__name__, str(e)[:300], flush=True)
