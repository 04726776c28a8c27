/* fold.c: inference rewrites that compute new weights at compile time (Inductor's "freezing").
 * Requires: a verified functional graph, before decompose, whose weights have their data (not with
 * --train, not with --weights external: the new weights live in the .so). Guarantees: the same
 * results up to float rounding, with
 *  - a batch norm in inference mode that alone reads a convolution's output (float32 or float64; on
 *    the GPU float16 and bfloat16 too) folded into that convolution: w' = w * s, b' = (b - mean) * s + beta, s = gamma / sqrt(var + eps) per channel,
 *    so the normalization costs no pass over the activations;
 *  - a constant scale of a linear layer's output features (ConvNeXt's layer scale, through the permute
 *    between them) folded into its weight and bias: w' = s * w by rows, b' = s * b;
 *  - sibling linear layers (one input, constant weights, all with or all without bias) computed as
 *    one product with their weights stacked, each output a slice of its result (horizontal fusion:
 *    attention's q, k, v projections read their input once, in one larger, faster product);
 *  - weights no node reads any more dropped, so the .so does not carry both versions.
 * Names of the replaced nodes' outputs are kept (check compares values by name). */
#include "gg.h"
#include "rewrite.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- constant weights */

bool graph_mutates(const Graph *g, const Value *v) {
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].kind == OUT_BUFFER_MUTATION && g->outputs[i].target_name && v->fqn && !strcmp(g->outputs[i].target_name, v->fqn)) return true;
  return false;
}

/* A weight whose bytes are known now: a float parameter, buffer or constant, contiguous, never
 * written by the model. */
static bool const_weight(const Graph *g, const Value *v) {
  if (!v || v->def || v->input == IN_USER || v->input == IN_NONE || !v->weight || !dtype_is_float(v->dtype) || graph_mutates(g, v)) return false;
  const Weight *w = v->weight;
  int64_t s = 1;
  for (int d = w->rank - 1; d >= 0; d--) {
    if (w->sizes[d] != 1 && w->strides[d] != s) return false;
    s *= w->sizes[d];
  }
  return w->dtype == v->dtype && (size_t)(w->offset + s) * (size_t)dtype_info(w->dtype)->size <= w->nbytes;
}

static int64_t numel(const Weight *w) {
  int64_t n = 1;
  for (int d = 0; d < w->rank; d++) n *= w->sizes[d];
  return n;
}

static double at(const Weight *w, int64_t i) { return dtype_load_f64(w->dtype, w->data + (size_t)(w->offset + i) * (size_t)dtype_info(w->dtype)->size); }

static int uses(const Graph *g, const Value *v) {
  int u = 0;
  for (int k = 0; k < g->nnodes; k++) {
    const Node *n = g->nodes[k];
    for (int i = 0; n->op && i < n->op->nargs; i++) {
      const Arg *a = &n->args[i];
      if (a->k == AK_TENSOR) u += a->u.t == v;
      else if (a->k == AK_TENSORS)
        for (int j = 0; j < a->n; j++) u += a->u.ts[j] == v;
    }
  }
  for (int i = 0; i < g->noutputs; i++) u += g->outputs[i].v == v;
  return u;
}

/* A new constant input of the graph (zeroed; the caller fills it), named `name`, or name.2, name.3, ...
 * where a weight shared by several nodes was made once already under it. */
static Value *new_weight(Graph *g, const char *name, DType dt, int rank, const int64_t *sizes) {
  Arena *a = g->ctx->arena;
  for (int k = 2; graph_find_value(g, name); k++) name = arena_printf(a, "%s.%d", name, k);
  Value *v = graph_new_value(g, name);
  if (!v) return NULL;
  Weight *w = arena_alloc(a, sizeof *w);
  w->fqn = v->name;
  w->dtype = dt;
  w->rank = rank;
  int64_t n = 1;
  for (int d = rank - 1; d >= 0; d--) { w->sizes[d] = sizes[d]; w->strides[d] = n; n *= sizes[d]; }
  w->nbytes = (size_t)n * (size_t)dtype_info(dt)->size;
  w->data = arena_alloc(a, w->nbytes + 1);
  v->kind = VK_TENSOR;
  v->dtype = dt;
  v->rank = rank;
  v->sizes = arena_array(a, (size_t)rank + 1, sizeof *v->sizes);
  for (int d = 0; d < rank; d++) v->sizes[d] = expr_const(a, sizes[d]);
  v->declared = true;
  v->input = IN_CONST;
  v->fqn = v->name;
  v->weight = w;
  Value **ins = arena_array(a, (size_t)g->ninputs + 1, sizeof *ins);
  memcpy(ins, g->inputs, sizeof *ins * (size_t)g->ninputs);
  v->input_index = g->ninputs;
  ins[g->ninputs++] = v;
  g->inputs = ins;
  return v;
}

static void put(Value *v, int64_t i, double x) {
  Weight *w = v->weight;
  dtype_store_f64(w->dtype, (uint8_t *)w->data + (size_t)i * (size_t)dtype_info(w->dtype)->size, x);
}

/* ---------------------------------------------------------------- batch norm into convolution */

static bool plain_conv(const Graph *g, const Node *c, bool exact, bool cl) {
  if (!c || !c->op) return false;
  const char *o = c->op->name;
  bool conv = !strcmp(o, "conv1d") || !strcmp(o, "conv2d") || !strcmp(o, "conv3d") || (!strcmp(o, "convolution") && rw_arg(c, "transposed")->k == AK_BOOL && !rw_arg(c, "transposed")->u.b);
  Value *b = rw_targ(c, "bias"), *w = rw_targ(c, "weight");
  /* float16/bfloat16 on the GPU, bfloat16 on the CPU, as Inductor's freezing folds them: w * s
   * rounded to 16 bits is a rounding PyTorch's convolution-then-batch-norm has not (0.4% on a bfloat16
   * CNN, error 4.0e-3 against eager's 3.6e-3 on ResNet-50), but the kernel after the convolution then
   * reads a 16-bit bias where it would read a float32 scale and shift: ResNet-50 bfloat16 2.06 against
   * 2.33 ms on an H200 (docs/BENCHMARKS.md); on the CPU the ReLU and residual after it join the
   * bfloat16 convolution's epilogue. The CPU's float16 convolutions, and its bfloat16 ones that run in
   * float32 between casts (not channels-last: `cl` false, or a layout_cpu_bf16_conv refusal), keep the
   * norm exact, as does `exact` (golden's check that every rewrite keeps values). */
  if (!conv || !w) return false;   /* (a batch norm after a cat: DenseNet's) */
  bool half_ok = !exact && (g->ctx->cuda || (w->dtype == DT_BF16 && cl && layout_cpu_bf16_conv(g, c)));
  return (w->dtype == DT_F32 || w->dtype == DT_F64 || half_ok) && const_weight(g, w) && (!b || const_weight(g, b)) && w->rank >= 3;
}

/* bn reads only a convolution's output, which nothing else reads: the convolution to fold into */
static Node *bn_conv(const Graph *g, const Node *bn, bool exact, bool cl) {
  const char *o = bn->op ? bn->op->name : "";
  bool eval = (!strcmp(o, "batch_norm") && rw_arg(bn, "training")->k == AK_BOOL && !rw_arg(bn, "training")->u.b) ||
              !strcmp(o, "_native_batch_norm_legit_no_training");
  if (!eval) return NULL;
  for (int i = 1; i < bn->nouts; i++) if (uses(g, bn->outs[i])) return NULL;
  Value *x = rw_targ(bn, "input"), *mean = rw_targ(bn, "running_mean"), *var = rw_targ(bn, "running_var");
  Value *gamma = rw_targ(bn, "weight"), *beta = rw_targ(bn, "bias");
  if (!x || !plain_conv(g, x->def, exact, cl) || uses(g, x) != 1 || !const_weight(g, mean) || !const_weight(g, var) || (gamma && !const_weight(g, gamma)) ||
      (beta && !const_weight(g, beta)))
    return NULL;
  int64_t cout = rw_targ(x->def, "weight")->weight->sizes[0];
  if (numel(mean->weight) != cout || numel(var->weight) != cout || (gamma && numel(gamma->weight) != cout) || (beta && numel(beta->weight) != cout))
    return NULL;
  return x->def;
}

static int fold_bn(Rw *r, Node *conv, Node *bn) {
  Graph *g = r->g;
  Value *w = rw_targ(conv, "weight"), *b = rw_targ(conv, "bias");
  Value *mean = rw_targ(bn, "running_mean"), *var = rw_targ(bn, "running_var"), *gamma = rw_targ(bn, "weight"), *beta = rw_targ(bn, "bias");
  double eps = rw_farg(bn, "eps", 1e-5);
  const Weight *W = w->weight;
  int64_t cout = W->sizes[0], per = numel(W) / (cout ? cout : 1);
  Value *nw = new_weight(g, arena_printf(g->ctx->arena, "%s.folded_weight", bn->name), w->dtype, W->rank, W->sizes);
  Value *nb = nw ? new_weight(g, arena_printf(g->ctx->arena, "%s.folded_bias", bn->name), w->dtype, 1, &cout) : NULL;
  if (!nb) return -1;
  for (int64_t c = 0; c < cout; c++) {
    double s = (gamma ? at(gamma->weight, c) : 1) / sqrt(at(var->weight, c) + eps);
    for (int64_t i = 0; i < per; i++) put(nw, c * per + i, at(W, c * per + i) * s);
    put(nb, c, ((b ? at(b->weight, c) : 0) - at(mean->weight, c)) * s + (beta ? at(beta->weight, c) : 0));
  }
  Arg *args = arena_array(g->ctx->arena, (size_t)conv->op->nargs + 1, sizeof *args);
  memcpy(args, conv->args, sizeof *args * (size_t)conv->op->nargs);
  args[ops_arg_index(conv->op, "weight")] = T(nw);
  args[ops_arg_index(conv->op, "bias")] = T(nb);
  r->orig = bn;
  r->k = 0;
  r->tag = "fold";
  if (!rw_node(r, bn->outs[0], conv->op, args)) return -1;
  gg_log(g->ctx, LOG_FUSION, "batch norm %s folded into convolution %s", gg_quote(g->ctx, bn->name), gg_quote(g->ctx, conv->name));
  return 0;
}

/* ---------------------------------------------------------------- sibling linear layers */

static bool fusable_linear(const Graph *g, const Node *n) {
  if (!n->op || strcmp(n->op->name, "linear")) return false;
  Value *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias");
  return rw_targ(n, "input") && rw_targ(n, "input")->rank >= 1 && const_weight(g, w) && w->rank == 2 &&
         (!b || (const_weight(g, b) && b->rank == 1 && b->dtype == w->dtype && numel(b->weight) == w->weight->sizes[0]));
}

static bool siblings(const Node *a, const Node *b) {
  Value *wa = rw_targ(a, "weight"), *wb = rw_targ(b, "weight");
  return rw_targ(a, "input") == rw_targ(b, "input") && wa->dtype == wb->dtype && wa->weight->sizes[1] == wb->weight->sizes[1] &&
         !rw_targ(a, "bias") == !rw_targ(b, "bias");
}

/* one product for the group's linears, each output a slice of its last dim */
static int fuse_linears(Rw *r, Node **grp, int n) {
  Graph *g = r->g;
  Arena *a = g->ctx->arena;
  Value *w0 = rw_targ(grp[0], "weight");
  bool bias = rw_targ(grp[0], "bias") != NULL;
  int64_t K = w0->weight->sizes[1], N = 0;
  for (int i = 0; i < n; i++) N += rw_targ(grp[i], "weight")->weight->sizes[0];
  int64_t ws[2] = {N, K};
  Value *nw = new_weight(g, arena_printf(a, "%s.stacked_weight", grp[0]->name), w0->dtype, 2, ws);
  Value *nb = nw && bias ? new_weight(g, arena_printf(a, "%s.stacked_bias", grp[0]->name), w0->dtype, 1, &N) : NULL;
  if (!nw || (bias && !nb)) return -1;
  size_t es = (size_t)dtype_info(w0->dtype)->size;
  int64_t row = 0;
  for (int i = 0; i < n; i++) {
    const Weight *W = rw_targ(grp[i], "weight")->weight;
    memcpy((uint8_t *)nw->weight->data + (size_t)(row * K) * es, W->data + (size_t)W->offset * es, (size_t)(W->sizes[0] * K) * es);
    if (bias) {
      const Weight *B = rw_targ(grp[i], "bias")->weight;
      memcpy((uint8_t *)nb->weight->data + (size_t)row * es, B->data + (size_t)B->offset * es, (size_t)W->sizes[0] * es);
    }
    row += W->sizes[0];
  }
  r->orig = grp[0];
  r->k = 0;
  r->tag = "stacked";
  Value *x = rw_targ(grp[0], "input");
  Value *y = CALL(r, NULL, "linear", "input", T(x), "weight", T(nw), "bias", T(nb));
  if (!y) return -1;
  row = 0;
  for (int i = 0; i < n; i++) {
    int64_t rows = rw_targ(grp[i], "weight")->weight->sizes[0];
    if (!CALL(r, grp[i]->outs[0], "slice.Tensor", "self", T(y), "dim", INT(r, x->rank - 1), "start", INT(r, row), "end", INT(r, row + rows))) return -1;
    row += rows;
    gg_log(g->ctx, LOG_FUSION, "linear %s computed in the stacked product %s", gg_quote(g->ctx, grp[i]->name), gg_quote(g->ctx, y->name));
  }
  return 0;
}

/* ---------------------------------------------------------------- a scale after a linear layer */

/* m multiplies a linear layer's output (through at most one permute, each read by nothing else) by a
 * constant s that scales its output features: s's sizes, right-aligned, 1 but along the dim the
 * linear's last maps to (ConvNeXt's layer scale, [C, 1, 1] on the NCHW permute of its second linear's
 * output; timm's LayerScale, [C]). Returns the linear (*perm: the permute or NULL, *scale: s). */
static Node *scaled_linear(const Graph *g, const Node *m, bool exact, Node **perm, Value **scale) {
  if (exact || !m->op || strcmp(m->op->name, "mul.Tensor") || m->nouts != 1 || m->args[0].k != AK_TENSOR || m->args[1].k != AK_TENSOR) return NULL;
  for (int i = 0; i < 2; i++) {
    Value *v = m->args[i].u.t, *sc = m->args[1 - i].u.t, *y = v;
    if (!const_weight(g, sc) || sc->dtype != v->dtype || sc->rank > v->rank || m->outs[0]->dtype != v->dtype || !v->def || uses(g, v) != 1) continue;
    Node *p = NULL;
    int ch = v->rank - 1;   /* v's dim that is the linear's last */
    if (v->def->op && !strcmp(v->def->op->name, "permute")) {
      const Arg *dims = rw_arg(v->def, "dims");
      int64_t dv;
      p = v->def, y = rw_targ(p, "self"), ch = -1;
      for (int d = 0; y && dims && dims->k == AK_INTS && d < dims->n; d++)
        if (expr_is_const(dims->u.is[d], &dv) && (dv == y->rank - 1 || dv == -1)) ch = d;
      if (!y || ch < 0 || uses(g, y) != 1) continue;
    }
    Node *l = y->def;
    if (!l || !fusable_linear(g, l) || y->dtype != v->dtype) continue;
    int64_t N = rw_targ(l, "weight")->weight->sizes[0];
    bool ok = true;
    for (int d = 0; d < v->rank && ok; d++) {
      int sd = d - (v->rank - sc->rank);
      int64_t sz = sd < 0 ? 1 : sc->weight->sizes[sd];
      ok = sz == 1 || (d == ch && sz == N);
    }
    if (ok) return *perm = p, *scale = sc, l;
  }
  return NULL;
}

/* the linear with its rows (and bias) scaled, then the permute, into m's output */
static int fold_scale(Rw *r, Node *l, Node *p, Value *sc, Node *m) {
  Graph *g = r->g;
  Arena *a = g->ctx->arena;
  Value *w = rw_targ(l, "weight"), *b = rw_targ(l, "bias");
  int64_t N = w->weight->sizes[0], K = w->weight->sizes[1], ns = numel(sc->weight);
  Value *nw = new_weight(g, arena_printf(a, "%s.scaled_weight", l->name), w->dtype, 2, w->weight->sizes);
  Value *nb = nw && b ? new_weight(g, arena_printf(a, "%s.scaled_bias", l->name), b->dtype, 1, &N) : NULL;
  if (!nw || (b && !nb)) return -1;
  for (int64_t n = 0; n < N; n++) {
    double s = at(sc->weight, ns == 1 ? 0 : n);
    for (int64_t k = 0; k < K; k++) put(nw, n * K + k, at(w->weight, n * K + k) * s);
    if (b) put(nb, n, at(b->weight, n) * s);
  }
  r->orig = m;
  r->k = 0;
  r->tag = "scaled";
  Value *y = CALL(r, p ? NULL : m->outs[0], "linear", "input", T(rw_targ(l, "input")), "weight", T(nw), "bias", T(nb));
  if (!y || (p && !CALL(r, m->outs[0], "permute", "self", T(y), "dims", *rw_arg(p, "dims")))) return -1;
  gg_log(g->ctx, LOG_FUSION, "the scale %s folded into linear %s", gg_quote(g->ctx, sc->name), gg_quote(g->ctx, l->name));
  return 0;
}

/* ---------------------------------------------------------------- the pass */

Value *fold_weight_cast(Graph *g, Value *v, DType dt) {
  if (!const_weight(g, v)) return NULL;
  const Weight *W = v->weight;
  Value *nw = new_weight(g, arena_printf(g->ctx->arena, "%s.%s", v->name, dtype_name(dt)), dt, W->rank, W->sizes);
  if (!nw) return NULL;
  for (int64_t i = 0, n = numel(W); i < n; i++) put(nw, i, at(W, i));
  return nw;
}

int fold_bn_affine(Graph *g, Value *w, Value *b, Value *mean, Value *var, double eps, Value **scale, Value **shift) {
  *scale = *shift = NULL;
  if (!const_weight(g, mean) || !const_weight(g, var) || (w && !const_weight(g, w)) || (b && !const_weight(g, b))) return 0;
  int64_t c = numel(mean->weight);
  if (numel(var->weight) != c || (w && numel(w->weight) != c) || (b && numel(b->weight) != c)) return 0;
  Value *sv = new_weight(g, arena_printf(g->ctx->arena, "%s.bn_scale", mean->name), DT_F32, 1, &c);
  Value *tv = sv ? new_weight(g, arena_printf(g->ctx->arena, "%s.bn_shift", mean->name), DT_F32, 1, &c) : NULL;
  if (!tv) return -1;
  for (int64_t i = 0; i < c; i++) {
    double sc = (w ? at(w->weight, i) : 1.0) / sqrt(at(var->weight, i) + eps);
    put(sv, i, sc);
    put(tv, i, (b ? at(b->weight, i) : 0.0) - at(mean->weight, i) * sc);
  }
  *scale = sv, *shift = tv;
  return 0;
}

Value *fold_weight_permute(Graph *g, Value *v, int rank, const int *perm) {
  if (!const_weight(g, v) || v->weight->rank != rank) return NULL;
  const Weight *W = v->weight;
  int64_t sizes[GG_MAX_RANK], src[GG_MAX_RANK], idx[GG_MAX_RANK] = {0}, st = 1;
  for (int d = rank - 1; d >= 0; d--) src[d] = st, st *= W->sizes[d];   /* contiguous (const_weight) */
  for (int d = 0; d < rank; d++) sizes[d] = W->sizes[perm[d]];
  Value *nw = new_weight(g, arena_printf(g->ctx->arena, "%s.permuted", v->name), W->dtype, rank, sizes);
  if (!nw) return NULL;
  for (int64_t i = 0, n = numel(W); i < n; i++) {
    int64_t o = 0;
    for (int d = 0; d < rank; d++) o += idx[d] * src[perm[d]];
    put(nw, i, at(W, o));
    for (int d = rank - 1; d >= 0 && ++idx[d] == sizes[d]; d--) idx[d] = 0;
  }
  return nw;
}

void fold_drop_unused(Graph *g, Value **before, int nbefore) {
  int k = 0;
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    bool old = false;
    for (int j = 0; j < nbefore && !old; j++) old = before[j] == v;
    if (v->input != IN_USER && old && !uses(g, v)) continue;
    v->input_index = k;
    g->inputs[k++] = v;
  }
  g->ninputs = k;
}

/* ---------------------------------------------------------------- attention masks known now */

/* What a mask says, read at compile time: 1 what is_causal says (key j attends to query i where
 * j <= i: bool true, or 0 added, there; bool false, or -inf or the dtype's lowest added, elsewhere),
 * 2 that every key attends everywhere, 0 anything else. t is the mask as computed, L and S the
 * query and key lengths it broadcasts to. */
static int mask_says(const Tensor *t, int64_t L, int64_t S) {
  int r = t->rank;
  bool causal = r >= 2 && t->sizes[r - 2] == L && t->sizes[r - 1] == S, all = true;
  bool is_bool = t->dtype == DT_BOOL, fl = dtype_is_float(t->dtype);
  if (!is_bool && !fl) return 0;
  double lowest = t->dtype == DT_F16 ? -65504.0 : t->dtype == DT_BF16 ? -3.3895313892515355e38 : t->dtype == DT_F32 ? -FLT_MAX : -DBL_MAX;
  int64_t n = tensor_numel(t);
  for (int64_t e = 0; e < n && (causal || all); e++) {
    double v = tensor_f64_at(t, e);
    bool keep, drop;
    if (is_bool) keep = v != 0, drop = v == 0;
    else keep = v == 0, drop = v == -INFINITY || v <= lowest;
    if (!keep && !drop) return 0;
    all &= keep;
    if (causal) {
      int64_t j = e % S, i = e / S % L;
      causal = keep == (j <= i);
    }
  }
  return all ? 2 : causal ? 1 : 0;
}


/* key = reshape(expand(unsqueeze(x, 2), [B, Hk, R, S, D]), [B, Hk * R, S, D]): x, each of its heads
 * repeated for R query heads (Hugging Face's repeat_kv in Llama, Mistral, Qwen), *rep = R; else NULL */
static Value *repeated_heads(const Graph *g, Value *kv, int64_t *rep) {
  const Node *rs = kv->def, *ex = NULL, *un = NULL;
  if (!rs || !rs->op || (strcmp(rs->op->name, "reshape") && strcmp(rs->op->name, "view") && strcmp(rs->op->name, "_unsafe_view")) || kv->rank != 4) return NULL;
  Value *e = rs->args[0].u.t, *u = NULL, *x = NULL;
  if (e && (ex = e->def) && ex->op && !strncmp(ex->op->name, "expand", 6)) u = ex->args[0].u.t;
  if (u && (un = u->def) && un->op && !strcmp(un->op->name, "unsqueeze") && dim_wrap(node_int_arg(un, "dim", -1), 5) == 2) x = un->args[0].u.t;
  int64_t R, hk, h;
  if (!x || x->rank != 4 || e->rank != 5 || !expr_is_const(e->sizes[2], &R) || R < 1 || !expr_is_const(x->sizes[1], &hk) || !expr_is_const(kv->sizes[1], &h) ||
      h != hk * R)
    return NULL;
  static const int xd[5] = {0, 1, -1, 2, 3};
  for (int d = 0; d < 5; d++)
    if (xd[d] >= 0 && !expr_same(g, e->sizes[d], x->sizes[xd[d]])) return NULL;
  if (!expr_same(g, kv->sizes[0], x->sizes[0]) || !expr_same(g, kv->sizes[2], x->sizes[2]) || !expr_same(g, kv->sizes[3], x->sizes[3])) return NULL;
  *rep = R;
  return x;
}

/* Attention's inputs as the fused kernel reads them best: keys and values whose heads were repeated
 * for grouped-query attention (repeated_heads) read unrepeated (enable_gqa); an attention mask
 * computable now (interp_constant) that says what is_causal says becomes is_causal, one that masks
 * nothing is dropped; the nodes that built them go. torch.export traces a
 * Hugging Face model's mask creation (eager PyTorch skips it for plain causal attention), so its
 * exports carry a [batch, 1, L, S] mask built from aranges, which the fused attention kernel would
 * read element by element, unable to skip the key blocks above the diagonal. Returns the count. */
int fold_attention_inputs(Graph *g) {
  Ctx *c = g->ctx;
  Interp *I = NULL;
  int changed = 0;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (!n->op || strcmp(n->op->name, "scaled_dot_product_attention")) continue;
    int mi = ops_arg_index(n->op, "attn_mask"), ci = ops_arg_index(n->op, "is_causal");
    Value *m = n->args[mi].k == AK_TENSOR ? n->args[mi].u.t : NULL, *q = n->args[0].u.t, *kv = n->args[1].u.t;
    int64_t L, S;
    if (q->rank < 2 || !expr_is_const(q->sizes[q->rank - 2], &L) || !expr_is_const(kv->sizes[kv->rank - 2], &S)) continue;
    int gi = ops_arg_index(n->op, "enable_gqa");
    int64_t rk, rv;
    Value *xk = repeated_heads(g, kv, &rk), *xv = repeated_heads(g, n->args[2].u.t, &rv);
    if (xk && xv && rk == rv && rk > 1 && !(n->args[gi].k == AK_BOOL && n->args[gi].u.b)) {
      n->args[1] = T(xk);
      n->args[2] = T(xv);
      n->args[gi] = BO(true);
      gg_log(c, LOG_DECOMP, "node %s: keys and values read with their heads shared by %lld query heads each (enable_gqa), not repeated", gg_quote(c, n->name),
             (long long)rk);
      changed++;
    }
    if (!m || (n->args[ci].k == AK_BOOL && n->args[ci].u.b)) continue;
    if (!I) I = interp_new(c, g);
    Tensor *t = interp_constant(I, m, (int64_t)1 << 25);   /* a [1, 1, 4096, 4096] mask and the two it is made of */
    int says = t ? mask_says(t, L, S) : 0;
    if (!says) continue;
    n->args[mi] = NONE();
    if (says == 1) n->args[ci] = BO(true);
    gg_log(c, LOG_DECOMP, "node %s: its attention mask %s, computed now, %s", gg_quote(c, n->name), gg_quote(c, m->name),
           says == 1 ? "is causal: is_causal instead" : "masks nothing: dropped");
    changed++;
  }
  interp_free(I);
  if (!changed) return 0;
  /* the nodes that built the masks go, and the checks (_assert_tensor_metadata) of values that only
   * checks read */
  for (int before = -1; before != g->nnodes;) {
    before = g->nnodes;
    graph_drop_dead(g, rw_pure);
    int *reads = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *reads), m = 0;
    for (int k = 0; k < g->nnodes; k++)
      if (g->nodes[k]->nouts) FOR_TENSOR_ARGS(g->nodes[k], v, { reads[v->id]++; })
    for (int i = 0; i < g->noutputs; i++) reads[g->outputs[i].v->id]++;
    for (int k = 0; k < g->nnodes; k++) {
      Node *n = g->nodes[k];
      bool idle = !n->nouts && n->op && !strcmp(n->op->name, "_assert_tensor_metadata");
      FOR_TENSOR_ARGS(n, v, { idle &= !reads[v->id]; })
      if (!idle) g->nodes[m++] = n;
    }
    g->nnodes = m;
    for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  }
  return changed;
}

int fold_weights(Graph *g, bool exact, bool cl) {
  Ctx *c = g->ctx;
  fold_attention_inputs(g);
  int n = g->nnodes;
  Node **conv_of = arena_array(c->arena, (size_t)n + 1, sizeof *conv_of);   /* bn node -> its convolution */
  bool *gone = arena_array(c->arena, (size_t)n + 1, sizeof *gone);
  Node **grp = arena_array(c->arena, (size_t)n + 1, sizeof *grp);
  Node **lin_of = arena_array(c->arena, (size_t)n + 1, sizeof *lin_of), **perm_of = arena_array(c->arena, (size_t)n + 1, sizeof *perm_of);   /* mul node -> */
  Value **scale_of = arena_array(c->arena, (size_t)n + 1, sizeof *scale_of);
  for (int k = 0; k < n; k++)
    if ((conv_of[k] = bn_conv(g, g->nodes[k], exact, cl))) gone[conv_of[k]->id] = true;
    else if ((lin_of[k] = scaled_linear(g, g->nodes[k], exact, &perm_of[k], &scale_of[k]))) {
      gone[lin_of[k]->id] = true;
      if (perm_of[k]) gone[perm_of[k]->id] = true;
    }
  Value **before = g->inputs;
  int nbefore = g->ninputs, changed = 0;
  Rw r = {.g = g};
  for (int k = 0; k < n; k++) {
    Node *nd = g->nodes[k];
    if (gone[k]) continue;
    if (conv_of[k]) {
      if (fold_bn(&r, conv_of[k], nd)) return -1;
      changed++;
      continue;
    }
    if (lin_of[k]) {
      if (fold_scale(&r, lin_of[k], perm_of[k], scale_of[k], nd)) return -1;
      changed++;
      continue;
    }
    int m = 0;
    if (fusable_linear(g, nd))
      for (int j = k; j < n; j++)
        if (!gone[j] && fusable_linear(g, g->nodes[j]) && siblings(nd, g->nodes[j])) grp[m++] = g->nodes[j];
    if (m < 2) { rw_push(&r, nd); continue; }
    if (fuse_linears(&r, grp, m)) return -1;
    for (int i = 0; i < m; i++) gone[grp[i]->id] = true;
    changed++;
  }
  if (!changed) return 0;
  g->nodes = r.nodes;
  g->nnodes = r.n;
  g->cap_nodes = r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  fold_drop_unused(g, before, nbefore);
  return 0;
}
