/* layout.c: channels-last convolutions, as PyTorch's channels_last memory format and Inductor's
 * layout optimization give them. cuDNN's tensor-core kernels work on NHWC: handed NCHW tensors it
 * transposes them around each convolution, or picks slower kernels; on the CPU, channels-last makes a
 * convolution one product over every image's positions (a 1x1 one a plain product).
 * Requires: a decomposed inference graph. Guarantees: the same values, each 2-d convolution that runs
 * faster channels-last (nhwc_conv: on tensor cores on the GPU, float32 of one group on the CPU) made
 * a _conv_nhwc of its input and weight permuted to [N, H, W, C] and [K, R, S, C/g] (a constant
 * weight permuted now, into a new weight; on the GPU a 1x1 one of stride 1, and any whose kernel is
 * its stride, in float32 too, a `linear` of its rows or patches), and the nodes after it carried over in that layout where
 * their meaning allows: pointwise ops and casts (a broadcast operand viewed in the same order), a
 * reduction over the channels or the plane with keepdim, adaptive average pooling to 1x1 (a mean over
 * the plane), max pooling on the CPU (_max_pool_nhwc), concatenation, permutes (composed with the
 * layout's), and from any [N, H, W, C] tensor viewed NCHW by a permute (a product's output in ConvNeXt). Each original value becomes a
 * permute view of its channels-last version under its own name, so the nodes that need NCHW read it
 * there (their kernels copy it contiguous) and `check` compares every value by name; views nothing
 * reads are dropped. */
#include "gg.h"
#include "rewrite.h"

#include <string.h>

int emit_view(struct Em *, struct Node *);
int emit_pointwise(struct Em *, struct Node *);
int emit_gelu(struct Em *, struct Node *);

static const int64_t TO_CL[4] = {0, 2, 3, 1}, TO_CF[4] = {0, 3, 1, 2};   /* NCHW -> NHWC and back */
static const int CL_PERM[4] = {0, 2, 3, 1};

/* a convolution's groups when they are a constant, else 0 */
static int64_t cpu_groups(const Node *n) {
  const Arg *gr = rw_arg(n, "groups");
  int64_t groups;
  return gr && gr->k == AK_INT && expr_is_const(gr->u.i, &groups) ? groups : 0;
}

/* groups == input channels == output channels (the weight [C, 1, R, S]) */
static bool depthwise(const Node *n, int64_t groups) {
  const Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight");
  int64_t cin, cout;
  return x && w && x->rank == 4 && w->rank == 4 && expr_is_const(x->sizes[1], &cin) && expr_is_const(w->sizes[0], &cout) && cin == groups && cout == groups;
}

static bool is_conv(const Node *n) { return n->op && (!strcmp(n->op->name, "convolution") || !strcmp(n->op->name, "conv2d")); }

/* The CPU's rule is for graphs whose grouped convolutions are all depthwise (the channels-last
 * kernels there are one product and a depthwise loop): any other would copy its input and output
 * between the layouts. */
static bool cpu_grouped_convs(const Graph *g) {
  if (g->ctx->cuda) return false;
  for (int k = 0; k < g->nnodes; k++) {
    const Node *n = g->nodes[k];
    int64_t groups;
    if (is_conv(n) && (groups = cpu_groups(n)) != 1 && !(groups > 1 && depthwise(n, groups))) return true;
  }
  return false;
}

/* A convolution that runs faster channels-last: 2-d, batched, not transposed, operands of one type;
 * on the GPU one cuDNN runs on tensor cores; on the CPU a float32 or bfloat16 one of one group, where
 * the product covers every image's positions at once (gg_rt_conv_nhwc_f32 and _bf16; per image, a
 * 7x7 plane gave 16 threads 56-row products; bfloat16 on AMX where it runs), or depthwise (a loop
 * over the channels); the stem too (its input copied channels-last once; the max pooling after
 * ResNet's stem has a channels-last kernel: resnet18's stem and pooling took half the time in NCHW). */
/* a 2-d convolution, batched, not transposed, its operands of one type */
static bool plain_conv2d(const Node *n) {
  if (!is_conv(n) || n->nouts != 1) return false;
  const Arg *t = rw_arg(n, "transposed");
  if (t && t->k == AK_BOOL && t->u.b) return false;
  const Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias"), *y = n->outs[0];
  return x && w && x->rank == 4 && w->rank == 4 && x->dtype == y->dtype && w->dtype == y->dtype && (!b || b->dtype == y->dtype);
}

static bool nhwc_conv(const Graph *g, const Node *n) {
  if (!plain_conv2d(n)) return false;
  const Value *y = n->outs[0];
  if (g->ctx->cuda) return y->dtype == DT_BF16 || y->dtype == DT_F16 || (y->dtype == DT_F32 && g->ctx->precision == PREC_TF32);
  int64_t groups = cpu_groups(n);
  if (y->dtype == DT_BF16) return groups == 1 || (groups > 1 && depthwise(n, groups));
  return y->dtype == DT_F32 && groups >= 1 && (groups == 1 || depthwise(n, groups));
}

/* Whether the stage will make n a bfloat16 channels-last convolution on the CPU (the precision stage,
 * before it, leaves those in bfloat16 and computes the CPU's other 16-bit ones in float32). */
bool layout_cpu_bf16_conv(const Graph *g, const Node *n) {
  return !g->ctx->cuda && n->nouts == 1 && n->outs[0]->dtype == DT_BF16 && nhwc_conv(g, n);
}

/* every element of int-list argument `name` of n is v */
static bool ints_all(const Node *n, const char *name, int64_t v) {
  const Arg *a = rw_arg(n, name);
  int64_t k;
  if (!a || a->k != AK_INTS) return false;
  for (int i = 0; i < a->n; i++)
    if (!expr_is_const(a->u.is[i], &k) || k != v) return false;
  return true;
}

/* On the GPU a channels-last 1x1 convolution of stride 1, no padding and one group is a product: its
 * input [N, H, W, C] is the matrix [N * H * W, C] and its weight [K, C]. It becomes `linear`, on
 * cuBLASLt, whose epilogue adds the bias and can add a residual and apply a ReLU after it (ResNet's
 * bottlenecks: two convolutions of three, and their bias, residual and ReLU passes). */
static bool gpu_product_conv(const Graph *g, const Node *n) {
  if (!g->ctx->cuda || !nhwc_conv(g, n) || cpu_groups(n) != 1) return false;
  const Value *w = rw_targ(n, "weight");
  int64_t k;
  for (int d = 2; d < 4; d++)
    if (!expr_is_const(w->sizes[d], &k) || k != 1) return false;
  return ints_all(n, "stride", 1) && ints_all(n, "padding", 0);
}

/* On the GPU a convolution whose kernel is its stride (no padding, dilation 1, one group, the plane a
 * multiple of the kernel, float operands of one type) reads each input position once: its patches
 * are the rows of a product (ViT's and Swin's patch embedding, ConvNeXt's stem and downsampling).
 * cuDNN ran ViT-B/16's in bfloat16 at 24 TFLOP/s (155 us, and two passes padding 3 channels to 8);
 * as a product it is one copy of the input and a GEMM. In float32 too (the channels-last stage runs
 * it alone there). 1x1 ones of stride 1 are gpu_product_conv's. */
static bool gpu_patch_conv(const Graph *g, const Node *n) {
  if (!g->ctx->cuda || !plain_conv2d(n) || cpu_groups(n) != 1) return false;
  const Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *y = n->outs[0];
  if (y->dtype != DT_F32 && y->dtype != DT_BF16 && y->dtype != DT_F16) return false;
  const Arg *st = rw_arg(n, "stride");
  int64_t k, sd, in;
  if (!st || st->k != AK_INTS || st->n != 2 || !ints_all(n, "padding", 0) || !ints_all(n, "dilation", 1)) return false;
  bool one = true;
  for (int d = 0; d < 2; d++) {
    if (!expr_is_const(w->sizes[2 + d], &k) || !expr_is_const(st->u.is[d], &sd) || !expr_is_const(x->sizes[2 + d], &in) || k != sd || in % k) return false;
    one &= k == 1;
  }
  return !one;
}

/* The GPU's channels-last convolutions that add their bias themselves (decompose leaves it to them):
 * depthwise ones (the runtime's kernel adds it before rounding) and those made products (cuBLASLt's
 * epilogue) */
bool layout_gpu_keeps_bias(const Graph *g, const Node *n) {
  int64_t groups = cpu_groups(n);
  return g->ctx->cuda && ((nhwc_conv(g, n) && ((groups > 1 && depthwise(n, groups)) || gpu_product_conv(g, n))) || gpu_patch_conv(g, n));
}

typedef struct L {
  Rw r;
  Value **cl;    /* by value id (of the graph before the pass): its channels-last version, or NULL */
  int nv;
  bool fold;     /* constant weights may be permuted now */
} L;

static Value *cl_of(L *l, const Value *v) { return v->id < l->nv ? l->cl[v->id] : NULL; }

/* v in channels-last order: its tracked version, else a view (a lower-rank operand first given the
 * leading 1s broadcasting gives it) */
static Value *to_cl(L *l, Value *v) {
  Value *c = cl_of(l, v);
  if (c) return c;
  Value *x = v;
  if (v->rank < 4) {
    const Expr *sz[4];
    for (int d = 0; d < 4; d++) sz[d] = d < 4 - v->rank ? expr_const(l->r.g->ctx->arena, 1) : v->sizes[d - (4 - v->rank)];
    if (!(x = CALL(&l->r, NULL, "reshape", "self", T(v), "shape", EXPRS(&l->r, 4, sz)))) return NULL;
  }
  c = CALL(&l->r, NULL, "permute", "self", T(x), "dims", INTS(&l->r, 4, TO_CL));
  /* on the CPU, copied once (a view is copied by each kernel that needs it contiguous: ResNet's
   * layer1 has two convolutions of the max pooling's output) */
  if (c && !l->r.g->ctx->cuda) c = CALL(&l->r, NULL, "clone", "self", T(c));
  if (c && v->id < l->nv) l->cl[v->id] = c;
  return c;
}

/* y, an output of the node being replaced, as the permute view of its channels-last version c */
static int track(L *l, Value *y, Value *c) {
  if (!c || !CALL(&l->r, y, "permute", "self", T(c), "dims", INTS(&l->r, 4, TO_CF))) return -1;
  if (y->id < l->nv) l->cl[y->id] = c;
  return 0;
}

/* gpu_patch_conv's product: the input [N, C, H, W] (or channels-last [N, H, W, C]) viewed as
 * [N, H/R, R, W/S, S, C] in some order, copied once as [N, H/R, W/S, R*S*C], times the weight
 * [K, R*S*C] (channels-last [K, R, S, C]), into [N, H/R, W/S, K]: the output channels-last */
static int patch_product(L *l, Node *n, Value *wp) {
  Ctx *c = l->r.g->ctx;
  Value *in = rw_targ(n, "input"), *cl = cl_of(l, in), *b = rw_targ(n, "bias");
  int64_t R, S, H, W;
  if (!expr_is_const(wp->sizes[1], &R) || !expr_is_const(wp->sizes[2], &S) || !expr_is_const(in->sizes[2], &H) || !expr_is_const(in->sizes[3], &W))
    return -1;   /* gpu_patch_conv saw constants */
  const Expr *N = in->sizes[0], *C = in->sizes[1], *Ho = expr_const(c->arena, H / R), *Wo = expr_const(c->arena, W / S), *r = expr_const(c->arena, R),
             *s = expr_const(c->arena, S);
  const Expr *cl6[6] = {N, Ho, r, Wo, s, C}, *cf6[6] = {N, C, Ho, r, Wo, s};
  static const int64_t from_cl[6] = {0, 1, 3, 2, 4, 5}, from_cf[6] = {0, 2, 4, 3, 5, 1};
  const Expr *rows[4] = {N, Ho, Wo, expr_bin(c->arena, E_MUL, expr_const(c->arena, R * S), C)}, *ws[2] = {wp->sizes[0], rows[3]};
  Value *v6 = CALL(&l->r, NULL, "reshape", "self", T(cl ? cl : in), "shape", EXPRS(&l->r, 6, cl ? cl6 : cf6));
  Value *p6 = v6 ? CALL(&l->r, NULL, "permute", "self", T(v6), "dims", INTS(&l->r, 6, cl ? from_cl : from_cf)) : NULL;
  Value *x = p6 ? CALL(&l->r, NULL, "reshape", "self", T(p6), "shape", EXPRS(&l->r, 4, rows)) : NULL;
  Value *w2 = x ? CALL(&l->r, NULL, "reshape", "self", T(wp), "shape", EXPRS(&l->r, 2, ws)) : NULL;
  return track(l, n->outs[0], w2 ? CALL(&l->r, NULL, "linear", "input", T(x), "weight", T(w2), "bias", T(b)) : NULL);
}

static int conv(L *l, Node *n) {
  Graph *g = l->r.g;
  Value *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias");
  Value *wp = cl_of(l, w);   /* a weight two convolutions share is permuted once */
  if (!wp && l->fold && (wp = fold_weight_permute(g, w, 4, CL_PERM)) && w->id < l->nv) l->cl[w->id] = wp;
  if (!wp && g->ctx->has_err) return -1;
  if (!wp) wp = CALL(&l->r, NULL, "permute", "self", T(w), "dims", INTS(&l->r, 4, TO_CL));
  if (!wp) return -1;
  if (gpu_patch_conv(g, n)) return patch_product(l, n, wp);
  bool view = !cl_of(l, rw_targ(n, "input"));   /* its input not channels-last yet: a permute view of it */
  Value *x = to_cl(l, rw_targ(n, "input"));
  if (!x) return -1;
  if (gpu_product_conv(g, n)) {   /* a view copied once, so that the product's rows are one matrix */
    if (view) {   /* kept as the input's channels-last version: another reader takes the copy too */
      Value *in = rw_targ(n, "input");
      if (!(x = CALL(&l->r, NULL, "clone", "self", T(x)))) return -1;
      if (in->id < l->nv) l->cl[in->id] = x;
    }
    const Expr *ws[2] = {wp->sizes[0], wp->sizes[3]};
    Value *w2 = CALL(&l->r, NULL, "reshape", "self", T(wp), "shape", EXPRS(&l->r, 2, ws));
    return track(l, n->outs[0], w2 ? CALL(&l->r, NULL, "linear", "input", T(x), "weight", T(w2), "bias", T(b)) : NULL);
  }
  Value *y = CALL(&l->r, NULL, "_conv_nhwc", "input", T(x), "weight", T(wp), "bias", T(b), "stride", *rw_arg(n, "stride"), "padding",
                  *rw_arg(n, "padding"), "dilation", *rw_arg(n, "dilation"), "groups", *rw_arg(n, "groups"));
  return track(l, n->outs[0], y);
}

/* a pointwise op or cast of rank-4 result, one of whose operands of its shape is channels-last */
static bool carries(L *l, const Node *n) {
  if (!n->op || n->nouts != 1 || n->outs[0]->rank != 4) return false;
  /* elementwise only: tril, triu, flip and roll share the pointwise shape rule but read positions */
  if (n->op->emit != emit_pointwise && n->op->emit != emit_gelu && strcmp(n->op->name, "_to_copy")) return false;
  bool any = false;
  for (int a = 0; a < n->op->nargs; a++) {
    if (n->op->args[a].mutated || n->args[a].k == AK_TENSORS) return false;
    if (n->args[a].k != AK_TENSOR) continue;
    const Value *v = n->args[a].u.t;
    if (v->rank > 4) return false;
    any |= cl_of(l, v) && value_same_shape(l->r.g, v, n->outs[0]);
  }
  return any;
}

static int pointwise(L *l, Node *n) {
  Arg *args = arena_array(l->r.g->ctx->arena, (size_t)n->op->nargs + 1, sizeof *args);
  memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
  for (int a = 0; a < n->op->nargs; a++)
    if (args[a].k == AK_TENSOR && args[a].u.t->rank > 0 && !(args[a] = T(to_cl(l, args[a].u.t))).u.t) return -1;
  return track(l, n->outs[0], rw_node(&l->r, NULL, n->op, args));
}

/* adaptive average pooling to 1x1: a mean over the plane, which channels-last keeps contiguous per
 * channel */
static bool pool_1x1(L *l, const Node *n) {
  if (!n->op || (strcmp(n->op->name, "adaptive_avg_pool2d") && strcmp(n->op->name, "_adaptive_avg_pool2d"))) return false;
  const Value *x = rw_targ(n, "self");
  const Arg *os = rw_arg(n, "output_size");
  int64_t a, b;
  return x->rank == 4 && cl_of(l, x) && os->k == AK_INTS && expr_is_const(os->u.is[0], &a) && expr_is_const(os->u.is[os->n - 1], &b) && a == 1 && b == 1;
}

static int pool(L *l, Node *n) {
  int64_t dims[2] = {1, 2};
  return track(l, n->outs[0], CALL(&l->r, NULL, "mean.dim", "self", T(cl_of(l, rw_targ(n, "self"))), "dim", INTS(&l->r, 2, dims), "keepdim", BO(true)));
}

/* max pooling of a channels-last float32 or 16-bit value: _max_pool_nhwc (ResNet's after
 * its stem) */
static bool max_pool(L *l, const Node *n) {
  if (!n->op || strcmp(n->op->name, "max_pool2d") || n->nouts != 1) return false;
  const Value *x = rw_targ(n, "self");
  return x && x->rank == 4 && (x->dtype == DT_F32 || x->dtype == DT_BF16 || x->dtype == DT_F16) && cl_of(l, x);
}

/* readers of v in g (graph outputs count) */
static int uses_of(const Graph *g, const Value *v) {
  int u = 0;
  for (int i = 0; i < g->noutputs; i++) u += g->outputs[i].v == v;
  for (int k = 0; k < g->nnodes; k++) FOR_TENSOR_ARGS(g->nodes[k], t, { u += t == v; })
  return u;
}

/* the node of the graph being rewritten that writes v (v->def is its replacement once rewritten) */
static const Node *old_def(const Graph *g, const Value *v) {
  for (int k = 0; k < g->nnodes; k++)
    for (int i = 0; i < g->nodes[k]->nouts; i++)
      if (g->nodes[k]->outs[i] == v) return g->nodes[k];
  return NULL;
}

/* A step of the chain max pooling can run after (max_pool_cl): a ReLU, a cast between float types,
 * or an addition of a value that is one per channel (a convolution's bias: its NCHW sizes 1 along H
 * and W) to the chain's value, in its dtype; its output read by nothing else. Returns the step's
 * input on the chain. */
static Value *pool_chain_step(const Graph *g, const Node *d, int *link) {
  if (!d || !d->op || d->nouts != 1 || d->args[0].k != AK_TENSOR || uses_of(g, d->outs[0]) != 1) return NULL;
  DType in = d->args[0].u.t->dtype, out = d->outs[0]->dtype;
  if (!strcmp(d->op->name, "_to_copy"))   /* a cast between float types (--precision's): rounding is monotone */
    return dtype_is_float(in) && dtype_is_float(out) ? (*link = 0, d->args[0].u.t) : NULL;
  if ((strcmp(d->op->name, "relu") && strcmp(d->op->name, "add.Tensor")) || in != out) return NULL;
  if (!strcmp(d->op->name, "relu")) return *link = 0, d->args[0].u.t;
  Value *full = NULL;
  for (int a = 0; a < d->op->nargs; a++) {
    if (d->args[a].k != AK_TENSOR) continue;
    Value *t = d->args[a].u.t;
    int64_t one;
    bool per_channel = true;
    for (int k = t->rank - 1; k >= 0 && k >= t->rank - 2; k--) per_channel &= expr_is_const(t->sizes[k], &one) && one == 1;
    if (per_channel) continue;
    if (full || t->rank != 4 || t->dtype != d->outs[0]->dtype) return NULL;
    full = t, *link = a;
  }
  const Arg *al = rw_arg(d, "alpha");   /* self + alpha * other: non-decreasing in other only for alpha >= 0 */
  int64_t ai;
  if (full && *link != 0 && al && !(al->k == AK_FLOAT ? al->u.f >= 0 : al->k == AK_INT && expr_is_const(al->u.i, &ai) && ai >= 0)) return NULL;
  return full;
}

/* On the GPU, max pooling of relu(z + b), b one value per channel, is relu(max(z) + b): each step is
 * non-decreasing in z and the same across a window (rounding and casts too; NaN wins either way), so
 * the pooling reads z and the steps run on its output, a quarter of the size (ResNet's stem: its
 * convolution's bias and ReLU, a pass over 100 MB at batch 32 in bfloat16). The steps the pooling
 * skips are left without readers. (On the CPU they are the convolution's epilogue: no pass.) */
static int max_pool_cl(L *l, Node *n) {
  Graph *g = l->r.g;
  Value *x = rw_targ(n, "self"), *z = x;
  const Node *steps[8];
  int links[8], ns = 0;
  /* every window holds a pixel of the image (not all padding, whose maximum is -inf): with dilation 1,
   * PyTorch's bound on the padding (half the window) and its ceil mode's last window see to it */
  if (g->ctx->cuda && ints_all(n, "dilation", 1))
    for (Value *v; ns < 8 && cl_of(l, z) && (steps[ns] = old_def(g, z)) && (v = pool_chain_step(g, steps[ns], &links[ns])) && cl_of(l, v); z = v) ns++;
  Value *y = CALL(&l->r, NULL, "_max_pool_nhwc", "self", T(cl_of(l, z)), "kernel_size", *rw_arg(n, "kernel_size"), "stride", *rw_arg(n, "stride"),
                  "padding", *rw_arg(n, "padding"), "dilation", *rw_arg(n, "dilation"), "ceil_mode", *rw_arg(n, "ceil_mode"));
  for (int i = ns - 1; i >= 0 && y; i--) {   /* the steps again, innermost first, on the pooled value */
    const Node *d = steps[i];
    Arg *args = arena_array(g->ctx->arena, (size_t)d->op->nargs + 1, sizeof *args);
    memcpy(args, d->args, sizeof *args * (size_t)d->op->nargs);
    for (int a = 0; a < d->op->nargs; a++)
      if (a == links[i]) args[a] = T(y);
      else if (args[a].k == AK_TENSOR && args[a].u.t->rank > 0 && !(args[a] = T(to_cl(l, args[a].u.t))).u.t) return -1;
    y = rw_node(&l->r, NULL, d->op, args);
  }
  return track(l, n->outs[0], y);
}

/* a reduction with keepdim over given dims, a concatenation or a permute of a channels-last value */
static bool remaps(L *l, const Node *n) {
  if (!n->op || n->nouts != 1 || n->args[0].k == AK_NONE) return false;
  const char *o = n->op->name;
  if (!strcmp(o, "cat")) {
    const Arg *ts = &n->args[0];
    bool any = false;
    for (int i = 0; i < ts->n; i++) {
      if (!ts->u.ts[i] || ts->u.ts[i]->rank != 4) return false;
      any |= cl_of(l, ts->u.ts[i]) != NULL;
    }
    return any && rw_arg(n, "dim")->k == AK_INT;
  }
  if (n->args[0].k != AK_TENSOR || !cl_of(l, n->args[0].u.t)) return false;
  if (!strcmp(o, "permute")) return rw_arg(n, "dims")->n == 4;
  if (n->op->red == R_NONE || n->outs[0]->rank != 4) return false;   /* keepdim */
  const Arg *d = rw_arg(n, "dim");
  return d && d->k == AK_INTS && d->n > 0 && n->outs[0]->dtype == n->args[0].u.t->dtype;
}

static int remap(L *l, Node *n) {
  Arena *a = l->r.g->ctx->arena;
  Arg *args = arena_array(a, (size_t)n->op->nargs + 1, sizeof *args);
  memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
  const char *o = n->op->name;
  int64_t v;
  if (!strcmp(o, "cat")) {
    Arg *ts = &args[0], *dim = &args[ops_arg_index(n->op, "dim")];
    Value **vs = arena_array(a, (size_t)ts->n + 1, sizeof *vs);
    for (int i = 0; i < ts->n; i++)
      if (!(vs[i] = to_cl(l, ts->u.ts[i]))) return -1;
    ts->u.ts = vs;
    if (!expr_is_const(dim->u.i, &v)) return -1;
    *dim = INT(&l->r, TO_CF[(v % 4 + 4) % 4]);
  } else if (!strcmp(o, "permute")) {   /* x = x'.permute(TO_CF): x.permute(p) = x'.permute(TO_CF[p[d]]) */
    int64_t p[4];
    for (int d = 0; d < 4; d++) {
      if (!expr_is_const(args[1].u.is[d], &v)) return -1;
      p[d] = TO_CF[(v % 4 + 4) % 4];
    }
    args[0] = T(cl_of(l, n->args[0].u.t));
    args[1] = INTS(&l->r, 4, p);
    return rw_node(&l->r, n->outs[0], n->op, args) ? 0 : -1;   /* its result is not channels-last */
  } else {
    Arg *d = &args[ops_arg_index(n->op, "dim")];
    int64_t dims[4];
    for (int i = 0; i < d->n && i < 4; i++) {
      if (!expr_is_const(d->u.is[i], &v)) return -1;
      dims[i] = TO_CF[(v % 4 + 4) % 4];
    }
    args[0] = T(cl_of(l, n->args[0].u.t));
    *d = INTS(&l->r, d->n < 4 ? d->n : 4, dims);
  }
  return track(l, n->outs[0], rw_node(&l->r, NULL, n->op, args));
}

/* x.permute(0, 3, 1, 2) of a 4-d x not in the layout (a product's [N, H, W, C] output made NCHW, as
 * ConvNeXt's blocks do): x is its channels-last version already, so the pointwise nodes after it are
 * carried (a layer scale, a residual add) and read x in its order; the node stays */
static bool nchw_view(L *l, const Node *n) {
  if (!n->op || strcmp(n->op->name, "permute") || n->args[0].k != AK_TENSOR || n->args[0].u.t->rank != 4 || cl_of(l, n->args[0].u.t)) return false;
  const Arg *d = rw_arg(n, "dims");
  int64_t v;
  for (int i = 0; i < 4; i++)
    if (!d || d->k != AK_INTS || d->n != 4 || !expr_is_const(d->u.is[i], &v) || (v % 4 + 4) % 4 != TO_CF[i]) return false;
  return true;
}

static int adopt(L *l, Node *n) {
  rw_push(&l->r, n);
  if (n->outs[0]->id < l->nv) l->cl[n->outs[0]->id] = n->args[0].u.t;
  return 0;
}

/* a view of a value now held as a permute view: a reshape, which copies where strides do not allow
 * a view (what the code generator does for either; the interpreter's view keeps PyTorch's rule) */
static bool strict_view(L *l, const Node *n) {
  return n->op && (!strcmp(n->op->name, "view") || !strcmp(n->op->name, "_unsafe_view")) && n->args[0].k == AK_TENSOR && cl_of(l, n->args[0].u.t);
}

static int view(L *l, Node *n) { return CALL(&l->r, n->outs[0], "reshape", "self", T(n->args[0].u.t), "shape", n->args[1]) ? 0 : -1; }

static bool droppable(const Node *n) { return n->op && (n->op->emit == emit_view || n->op->emit == emit_pointwise || !strcmp(n->op->name, "_to_copy")); }

int channels_last(Graph *g, bool fold) {
  Ctx *c = g->ctx;
  /* a graph with other grouped convolutions (decompose makes unfold one) keeps its float32 ones NCHW;
   * its bfloat16 ones go channels-last regardless: the CPU has no other bfloat16 convolution, and the
   * precision stage (before decompose) left them bfloat16 on that promise (layout_cpu_bf16_conv) */
  bool grouped = cpu_grouped_convs(g);
  L l = {.r = {.g = g, .tag = "cl"}, .nv = g->nvalues, .fold = fold};
  l.cl = arena_array(c->arena, (size_t)l.nv + 1, sizeof *l.cl);
  Value **before = g->inputs;
  int nbefore = g->ninputs, changed = 0;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    int (*rule)(L *, Node *) = (nhwc_conv(g, n) && (!grouped || n->outs[0]->dtype == DT_BF16)) || gpu_patch_conv(g, n) ? conv : !changed ? NULL : carries(&l, n) ? pointwise : pool_1x1(&l, n) ? pool : max_pool(&l, n) ? max_pool_cl : remaps(&l, n) ? remap : strict_view(&l, n) ? view : nchw_view(&l, n) ? adopt : NULL;
    if (!rule) { rw_push(&l.r, n); continue; }
    l.r.orig = n;
    l.r.k = 0;
    if (rule(&l, n)) {
      if (!c->has_err) GG_INTERNAL(c);
      return -1;
    }
    gg_log(c, LOG_DECOMP, "node %s: %s channels-last", gg_quote(c, n->name), n->op->name);
    changed++;
  }
  if (!changed) return 0;
  g->nodes = l.r.nodes;
  g->nnodes = l.r.n;
  g->cap_nodes = l.r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  graph_drop_dead(g, droppable);
  fold_drop_unused(g, before, nbefore);
  return 0;
}
