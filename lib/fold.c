/* fold.c: inference rewrites that compute new weights at compile time (Inductor's "freezing").
 * Requires: a verified functional graph, before decompose, whose weights have their data (not with
 * --train, not with --weights external: the new weights live in the .so). Guarantees: the same
 * results up to float rounding, with
 *  - a batch norm in inference mode that alone reads a convolution's output (float32 or float64; on
 *    the GPU float16 and bfloat16 too) folded into that convolution: w' = w * s, b' = (b - mean) * s + beta, s = gamma / sqrt(var + eps) per channel,
 *    so the normalization costs no pass over the activations;
 *  - sibling linear layers (one input, constant weights, all with or all without bias) computed as
 *    one product with their weights stacked, each output a slice of its result (horizontal fusion:
 *    attention's q, k, v projections read their input once, in one larger, faster product);
 *  - weights no node reads any more dropped, so the .so does not carry both versions.
 * Names of the replaced nodes' outputs are kept (check compares values by name). */
#include "gg.h"
#include "rewrite.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- constant weights */

static bool mutated(const Graph *g, const Value *v) {
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].kind == OUT_BUFFER_MUTATION && g->outputs[i].target_name && v->fqn && !strcmp(g->outputs[i].target_name, v->fqn)) return true;
  return false;
}

/* A weight whose bytes are known now: a float parameter, buffer or constant, contiguous, never
 * written by the model. */
static bool const_weight(const Graph *g, const Value *v) {
  if (!v || v->def || v->input == IN_USER || v->input == IN_NONE || !v->weight || !dtype_is_float(v->dtype) || mutated(g, v)) return false;
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

static bool plain_conv(const Graph *g, const Node *c) {
  if (!c || !c->op) return false;
  const char *o = c->op->name;
  bool conv = !strcmp(o, "conv1d") || !strcmp(o, "conv2d") || !strcmp(o, "conv3d") || (!strcmp(o, "convolution") && rw_arg(c, "transposed")->k == AK_BOOL && !rw_arg(c, "transposed")->u.b);
  Value *b = rw_targ(c, "bias"), *w = rw_targ(c, "weight");
  /* float16/bfloat16 on the GPU only, as Inductor's freezing folds them: w * s rounded to 16 bits is
   * a rounding PyTorch's convolution-then-batch-norm has not (0.4% on a bfloat16 CNN, error 4.0e-3
   * against eager's 3.6e-3 on ResNet-50), but the kernel after the convolution then reads a 16-bit
   * bias where it would read a float32 scale and shift: ResNet-50 bfloat16 2.06 against 2.33 ms on an
   * H200 (docs/BENCHMARKS.md). The CPU has no half-type convolution; there the norm stays exact. */
  return conv && w && (w->dtype == DT_F32 || w->dtype == DT_F64 || g->ctx->cuda) && const_weight(g, w) && (!b || const_weight(g, b)) && w->rank >= 3;
}

/* bn reads only a convolution's output, which nothing else reads: the convolution to fold into */
static Node *bn_conv(const Graph *g, const Node *bn) {
  const char *o = bn->op ? bn->op->name : "";
  bool eval = (!strcmp(o, "batch_norm") && rw_arg(bn, "training")->k == AK_BOOL && !rw_arg(bn, "training")->u.b) ||
              !strcmp(o, "_native_batch_norm_legit_no_training");
  if (!eval) return NULL;
  for (int i = 1; i < bn->nouts; i++) if (uses(g, bn->outs[i])) return NULL;
  Value *x = rw_targ(bn, "input"), *mean = rw_targ(bn, "running_mean"), *var = rw_targ(bn, "running_var");
  Value *gamma = rw_targ(bn, "weight"), *beta = rw_targ(bn, "bias");
  if (!x || !plain_conv(g, x->def) || uses(g, x) != 1 || !const_weight(g, mean) || !const_weight(g, var) || (gamma && !const_weight(g, gamma)) ||
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

int fold_weights(Graph *g) {
  Ctx *c = g->ctx;
  int n = g->nnodes;
  Node **conv_of = arena_array(c->arena, (size_t)n + 1, sizeof *conv_of);   /* bn node -> its convolution */
  bool *gone = arena_array(c->arena, (size_t)n + 1, sizeof *gone);
  Node **grp = arena_array(c->arena, (size_t)n + 1, sizeof *grp);
  for (int k = 0; k < n; k++)
    if ((conv_of[k] = bn_conv(g, g->nodes[k]))) gone[conv_of[k]->id] = true;
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
