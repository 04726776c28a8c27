/* precision.c: --precision bf16|fp16, a float32 model's heavy arithmetic in a 16-bit type, as
 * torch.autocast does on the GPU (and TensorRT's builder flags do for deployment).
 * Requires: a functional graph, weights already folded (inference), before decompose. Guarantees:
 * each matrix product (linear, addmm, mm, bmm, baddbmm, matmul), convolution and
 * scaled_dot_product_attention whose floating operands are all float32 reads them rounded to the lower
 * type (a constant weight rounded once, now, into a new weight; anything else by a cast the fusion
 * stage folds into its producer), runs in that type with float32 accumulation (the kernels' rule for
 * half types), and its result, rounded to the lower type as autocast's is, is widened back to float32
 * under the node's own output name: everything downstream (norms, softmax, reductions, losses,
 * pointwise work) stays float32, which autocast keeps in float32 or in the lower type, so the error is
 * at most autocast's. The list of ops is autocast's "lower precision" list restricted to the ops this
 * table has. Transposed convolutions stay float32 (cuDNN has no half-type path here); on the CPU every
 * convolution does. A bfloat16 or float16 model's convolutions on the CPU are computed in float32
 * between casts (precision_widen), but for the bfloat16 convolutions the channels-last stage runs in
 * bfloat16 (gg_rt_conv_nhwc_bf16). --precision tf32 changes no node: the
 * CUDA emitter gives float32 products and convolutions TF32 arithmetic (emit_cuda.c); nor does
 * --precision tf32x3, whose float32 products the runtime runs as three TF32 products on split
 * operands (gemm_x3 in gg_rt_cuda.cu). */
#include "gg.h"
#include "rewrite.h"

#include <string.h>

static const char *const names[] = {"fp32", "tf32", "bf16", "fp16", "tf32x3"};

int precision_parse(const char *s) {
  for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

const char *precision_name(int p) { return p >= 0 && p < (int)(sizeof names / sizeof *names) ? names[p] : "?"; }

static bool is_conv(const char *o) { return !strncmp(o, "conv", 4) && strcmp(o, "convolution_backward"); }

/* the node computes in the lower type: a product, convolution or attention of float32 operands */
static bool lowered(const Graph *g, const Node *n) {
  static const char *const ops[] = {"linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "conv1d", "conv2d", "conv3d", "convolution",
                                    "scaled_dot_product_attention", NULL};
  if (!n->op || n->nouts != 1 || n->outs[0]->dtype != DT_F32) return false;
  const char *o = n->op->name;
  int i = 0;
  while (ops[i] && strcmp(ops[i], o)) i++;
  if (!ops[i]) return false;
  if (is_conv(o)) {
    const Arg *t = rw_arg(n, "transposed");
    if (!g->ctx->cuda || (t && t->k == AK_BOOL && t->u.b)) return false;
  }
  for (int a = 0; a < n->op->nargs; a++)
    if (n->args[a].k == AK_TENSOR && dtype_is_float(n->args[a].u.t->dtype) && n->args[a].u.t->dtype != DT_F32) return false;
  return true;
}

int emit_view(struct Em *, struct Node *);

/* A view (or reshape) that keeps its input's dtype, whatever the dtype: it can be taken of the
 * rounded copy instead */
static bool dtype_free_view(const Node *n) {
  if (!n->op || n->op->emit != emit_view || n->args[0].k != AK_TENSOR || !strncmp(n->op->name, "to", 2) || !strcmp(n->op->name, "_to_copy") ||
      !strcmp(n->op->name, "type_as") || !strcmp(n->op->name, "view.dtype"))
    return false;
  for (int i = 0; i < n->nouts; i++)
    if (n->outs[i]->dtype != n->args[0].u.t->dtype) return false;
  int nt = 0;
  FOR_TENSOR_ARGS(n, v, { nt++; })
  return nt == 1;   /* not select_scatter / slice_scatter */
}

/* v's copy in the lower type without a new rounding, where there is one: the lowered result v was
 * widened from, or the same view of such a value (attention reads the heads of a product's output
 * through split/view/transpose; the next product reads attention's output through transpose and
 * reshape): the view is taken of the 16-bit value, and the float32 round trip goes */
static Value *exact_low(Rw *r, Value **low, int nv, const int *uses, Value *v, DType dt) {
  if (v->id < nv && low[v->id]) return low[v->id];
  Node *d = v->def;
  if (!d || !d->op) return NULL;
  if (!strcmp(d->op->name, "_to_copy") && d->args[0].k == AK_TENSOR && d->args[0].u.t->dtype == dt) return d->args[0].u.t;
  /* a ReLU of such a value, read by nothing else: the ReLU in dt (max(x, 0) of a value dt holds is one
   * it holds: the same bits), so a CNN's convolution reads the one before it through its ReLU in dt
   * (cuBLASLt's epilogue applies it to a 1x1 convolution made a product on the GPU) */
  if (!strcmp(d->op->name, "relu") && d->nouts == 1 && d->args[0].k == AK_TENSOR && v->id < nv && uses[v->id] == 1) {
    Value *x = exact_low(r, low, nv, uses, d->args[0].u.t, dt), *y = x ? CALL(r, NULL, "relu", "self", T(x)) : NULL;
    return y ? (low[v->id] = y) : NULL;
  }
  if (!dtype_free_view(d)) return NULL;
  Value *x = exact_low(r, low, nv, uses, d->args[0].u.t, dt);
  if (!x) return NULL;
  Arg *args = arena_array(r->g->ctx->arena, (size_t)d->op->nargs + 1, sizeof *args);
  memcpy(args, d->args, sizeof *args * (size_t)d->op->nargs);
  args[0] = T(x);
  /* view's strides may not fit the 16-bit value's (the float32 copy was compact): reshape, a view
   * where they do */
  bool strict = !strcmp(d->op->name, "view") || !strcmp(d->op->name, "_unsafe_view");
  if (!(strict ? CALL(r, NULL, "reshape", "self", T(x), "shape", d->args[1]) : rw_node(r, NULL, d->op, args))) return NULL;
  Node *nd = r->nodes[r->n - 1];
  for (int i = 0; i < d->nouts; i++)
    if (d->outs[i]->id < nv) low[d->outs[i]->id] = nd->outs[i];
  return v->id < nv ? low[v->id] : NULL;
}

/* Casts, views and ReLUs that nothing reads any more (the float32 side of a round trip) are dropped. */
static bool droppable(const Node *n) { return n->op && (dtype_free_view(n) || !strcmp(n->op->name, "_to_copy") || !strcmp(n->op->name, "relu")); }

/* Each node `pick` accepts computes in dt: its floating tensor operands of type `from` are read
 * converted to dt (a constant weight once, now, into a new weight where fold allows; anything else by a
 * cast the fusion stage folds into its producer), and its result, of type `from`, is converted back
 * under the node's own output name. Narrowing (from float32) reads a lowered node's narrow result
 * where a later one needs it (exact_low: widening it back was exact); widening does not, since the
 * wide result is not the rounded one that PyTorch's next op reads. */
static int retype(Graph *g, DType from, DType dt, bool (*pick)(const Graph *, const Node *, DType), bool fold, const char *why) {
  Ctx *c = g->ctx;
  bool narrow = from == DT_F32;
  int nv = g->nvalues, changed = 0;
  Value **low = arena_array(c->arena, (size_t)nv + 1, sizeof *low);   /* by value id: its copy in dt, made once */
  int *uses = graph_uses(g, NULL);
  Value **before = g->inputs;
  int nbefore = g->ninputs;
  Rw r = {.g = g, .tag = narrow ? "lowp" : "wide"};
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (!pick(g, n, from)) { rw_push(&r, n); continue; }
    r.orig = n;
    r.k = 0;
    Arg *args = arena_array(c->arena, (size_t)n->op->nargs + 1, sizeof *args);
    memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
    for (int a = 0; a < n->op->nargs; a++) {
      Value *v = args[a].k == AK_TENSOR ? args[a].u.t : NULL;
      if (!v || v->dtype != from || v->id >= nv) continue;
      if (!low[v->id] && narrow) {
        Value *x = exact_low(&r, low, nv, uses, v, dt);
        if (!x && c->has_err) return -1;
        low[v->id] = x;
      }
      if (!low[v->id]) {
        low[v->id] = fold ? fold_weight_cast(g, v, dt) : NULL;
        if (!low[v->id] && c->has_err) return -1;
        if (!low[v->id] && !(low[v->id] = CALL(&r, NULL, "_to_copy", "self", T(v), "dtype", DT(dt)))) return -1;
      }
      args[a] = T(low[v->id]);
    }
    Value *y = rw_node(&r, NULL, n->op, args);
    if (!y) return -1;
    Node *nn = r.nodes[r.n - 1];
    for (int i = 1; i < n->nouts; i++) {   /* the others (max pooling's indices) are the node's own */
      nn->outs[i] = n->outs[i];
      n->outs[i]->def = nn;
    }
    if (!CALL(&r, n->outs[0], "_to_copy", "self", T(y), "dtype", DT(from))) return -1;
    if (narrow) low[n->outs[0]->id] = y;
    gg_log(c, LOG_DECOMP, "%s %s computed in %s (%s)", n->op->name, gg_quote(c, n->name), dtype_name(dt), why);
    changed++;
  }
  if (!changed) return 0;
  g->nodes = r.nodes;
  g->nnodes = r.n;
  g->cap_nodes = r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  graph_drop_dead(g, droppable);
  fold_drop_unused(g, before, nbefore);
  return 0;
}

static bool lowered_from(const Graph *g, const Node *n, DType from) { return from == DT_F32 && lowered(g, n); }

int precision_lower(Graph *g, int precision, bool fold) {
  if (precision != PREC_BF16 && precision != PREC_FP16) return 0;
  return retype(g, DT_F32, precision == PREC_BF16 ? DT_BF16 : DT_F16, lowered_from, fold,
                precision == PREC_BF16 ? "--precision bf16" : "--precision fp16");
}

int emit_conv(struct Em *, struct Node *);

/* a convolution whose result is in `from`, a 16-bit type: the CPU computes it in float32 (it pools
 * in 16-bit types itself) */
static bool widened(const Graph *g, const Node *n, DType from) {
  (void)g;
  return n->op && n->nouts == 1 && n->outs[0]->dtype == from && n->op->emit == emit_conv;
}

/* ... but for the bfloat16 convolutions the channels-last stage will take (it runs after this one):
 * those stay bfloat16 (gg_rt_conv_nhwc_bf16) */
static bool widened_cl(const Graph *g, const Node *n, DType from) { return widened(g, n, from) && !layout_cpu_bf16_conv(g, n); }

bool precision_widen_needed(const Graph *g, bool cl) {
  for (int k = 0; k < g->nnodes; k++)
    if ((cl ? widened_cl : widened)(g, g->nodes[k], DT_BF16) || widened(g, g->nodes[k], DT_F16)) return true;
  return false;
}

/* cl: the channels-last stage runs after this one */
int precision_widen(Graph *g, bool fold, bool cl) {
  return retype(g, DT_BF16, DT_F32, cl ? widened_cl : widened, fold, "the CPU's convolutions in this type are float32 kernels") ||
                 retype(g, DT_F16, DT_F32, widened, fold, "the CPU's convolutions in this type are float32 kernels")
             ? -1
             : 0;
}
