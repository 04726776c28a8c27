/* decompose.c: rewrite ops outside the core set into ops inside it (docs/decompositions.md).
 * Requires: a functional graph. Guarantees: every node left has a C emitter that generates it
 * directly. Each rule is a graph rewrite built from ordinary nodes of the op table, so the
 * interpreter runs the rewritten graph too, and tests compare it with the original. The last node of
 * a rule writes into the original output values, so nothing downstream changes. */
#include "gg.h"

#include <math.h>
#include <string.h>

#include "rewrite.h"

/* a op k (a number), a op b: NULL in, NULL out */
static Value *sc(Rw *r, const char *op, Value *a, double k) { return a ? CALL(r, NULL, op, "self", T(a), "other", FL(k)) : NULL; }
static Value *tt(Rw *r, const char *op, Value *a, Value *b) { return a && b ? CALL(r, NULL, op, "self", T(a), "other", T(b)) : NULL; }

/* the cubic convolution weights (Keys, A = -0.75): |x| <= 1 and 1 < |x| < 2 */
static Value *gs_cubic1(Rw *r, Value *x, double A) {   /* ((A + 2) x - (A + 3)) x x + 1 */
  return sc(r, "add.Tensor", tt(r, "mul.Tensor", tt(r, "mul.Tensor", sc(r, "sub.Tensor", sc(r, "mul.Tensor", x, A + 2), A + 3), x), x), 1);
}
static Value *gs_cubic2(Rw *r, Value *x, double A) {   /* ((A x - 5 A) x + 8 A) x - 4 A */
  return sc(r, "sub.Tensor", tt(r, "mul.Tensor", sc(r, "add.Tensor", tt(r, "mul.Tensor", sc(r, "sub.Tensor", sc(r, "mul.Tensor", x, A), 5 * A), x), 8 * A), x), 4 * A);
}

/* v viewed with size 1 everywhere but dim `at` of a rank-`rank` shape: per-channel parameters. */
static Value *per_channel(Rw *r, Value *v, int rank, int at) {
  if (!v) return NULL;
  const Expr *sizes[GG_MAX_RANK];
  for (int d = 0; d < rank; d++) sizes[d] = d == at ? v->sizes[0] : expr_const(r->g->ctx->arena, 1);
  return CALL(r, NULL, "reshape", "self", T(v), "shape", EXPRS(r, rank, sizes));
}

/* y = (x - mean) * rstd over the dims in `dims` (keepdim). x - mean is built once per reader and
 * squared by pow, so that each fuses into the kernel that reads it (bn_train_forward's form). */
static Value *normalize(Rw *r, Value *x, int nd, const int64_t *dims, double eps, Value **mean_out, Value **rstd_out) {
  Value *mean = CALL(r, NULL, "mean.dim", "self", T(x), "dim", INTS(r, nd, dims), "keepdim", BO(true));
  if (!mean) return NULL;
  Value *xc = CALL(r, NULL, "sub.Tensor", "self", T(x), "other", T(mean));
  Value *sq = xc ? CALL(r, NULL, "pow.Tensor_Scalar", "self", T(xc), "exponent", FL(2)) : NULL;
  Value *var = sq ? CALL(r, NULL, "mean.dim", "self", T(sq), "dim", INTS(r, nd, dims), "keepdim", BO(true)) : NULL;
  Value *ve = var ? CALL(r, NULL, "add.Tensor", "self", T(var), "other", FL(eps)) : NULL;
  Value *rstd = ve ? CALL(r, NULL, "rsqrt", "self", T(ve)) : NULL;
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
  Value *xc2 = rstd ? CALL(r, NULL, "sub.Tensor", "self", T(x), "other", T(mean)) : NULL;
  return xc2 ? CALL(r, NULL, "mul.Tensor", "self", T(xc2), "other", T(rstd)) : NULL;
}

/* y * w + b, the last step writing into `into` */
static Value *affine(Rw *r, Value *y, Value *w, Value *b, Value *into) {
  if (!y) return NULL;
  if (w) y = CALL(r, b ? NULL : into, "mul.Tensor", "self", T(y), "other", T(w));
  if (y && b) y = CALL(r, into, "add.Tensor", "self", T(y), "other", T(b));
  if (y && !w && !b) y = CALL(r, into, "alias", "self", T(y));
  return y;
}

/* Half-precision inputs are normalized in float32, as PyTorch's own decompositions do ("opmath"):
 * up() widens an input, and land() writes a float32 result into an output of the original dtype. */
static bool is_half(const Value *v) { return v && (v->dtype == DT_F16 || v->dtype == DT_BF16); }
static Value *up(Rw *r, Value *v) { return is_half(v) ? CALL(r, NULL, "_to_copy", "self", T(v), "dtype", DT(DT_F32)) : v; }
static Value *direct(Value *into, bool half) { return half ? NULL : into; }
static bool land(Rw *r, Value *y, Value *into, bool half) {
  if (!y) return false;
  if (!half || !into) return true;
  return CALL(r, into, "_to_copy", "self", T(y), "dtype", DT(into->dtype)) != NULL;
}

int decomp_group_norm(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x0 = rw_targ(n, "input");
  bool half = is_half(x0);
  Value *x = up(r, x0);
  int64_t G = (int64_t)(rw_arg(n, "num_groups") ? rw_farg(n, "num_groups", 1) : rw_farg(n, "group", 1));
  bool native = n->nouts == 3, instance = !strcmp(n->op->name, "instance_norm");
  if (instance && !rw_arg(n, "use_input_stats")->u.b) return gg_error(c, "%s: node %s: instance_norm with running statistics is not supported in compiled code", r->g->path, gg_quote(c, n->name));
  /* the group's elements counted, not -1: a batch of 0 images leaves -1 undetermined */
  const Expr *rest = expr_const(c->arena, 1);
  for (int d = instance ? 2 : 1; d < x->rank; d++) rest = expr_bin(c->arena, E_MUL, rest, x->sizes[d]);
  if (!instance) rest = expr_bin(c->arena, E_FLOORDIV, rest, expr_const(c->arena, G));
  const Expr *sz[3] = {x->sizes[0], instance ? x->sizes[1] : expr_const(c->arena, G), rest};
  Value *xg = CALL(r, NULL, "reshape", "self", T(x), "shape", EXPRS(r, 3, sz));
  if (!xg) return -1;
  int64_t dims[1] = {2};
  Value *mean, *rstd;
  Value *yg = normalize(r, xg, 1, dims, rw_farg(n, "eps", 1e-5), &mean, &rstd);
  if (!yg) return -1;
  Value *y = CALL(r, NULL, "reshape", "self", T(yg), "shape", EXPRS(r, x->rank, x->sizes));
  if (native) {
    const Expr *ng[2] = {x->sizes[0], expr_const(c->arena, G)};
    Value *m2 = CALL(r, direct(n->outs[1], half), "reshape", "self", T(mean), "shape", EXPRS(r, 2, ng));
    Value *r2 = CALL(r, direct(n->outs[2], half), "reshape", "self", T(rstd), "shape", EXPRS(r, 2, ng));
    if (!land(r, m2, n->outs[1], half) || !land(r, r2, n->outs[2], half)) return -1;
  }
  y = affine(r, y, per_channel(r, rw_targ(n, "weight"), x->rank, 1), per_channel(r, rw_targ(n, "bias"), x->rank, 1), direct(n->outs[0], half));
  return land(r, y, n->outs[0], half) ? 0 : -1;
}

static Value *empty_stat(Rw *r, Value *into, DType dt) {
  int64_t zero[1] = {0};
  return CALL(r, into, "zeros", "size", INTS(r, 1, zero), "dtype", DT(dt));
}

/* Training-mode batch norm's element count per channel (every dim but 1), which must be static. */
static int bn_count(Rw *r, Node *n, const Value *x, int64_t *cnt) {
  *cnt = 1;
  for (int d = 0; d < x->rank; d++) {
    int64_t s;
    if (d == 1) continue;
    if (!expr_is_const(x->sizes[d], &s)) return gg_error(r->g->ctx, "%s: node %s: training-mode batch norm needs static sizes", r->g->path, gg_quote(r->g->ctx, n->name));
    *cnt *= s;
  }
  return 0;
}

/* Training-mode batch norm's forward over every dim but the channels: the batch mean, the biased
 * variance as the mean of squared deviations (two passes, as PyTorch's CPU kernel), 1/std and
 * (x - mean) / std * weight + bias. x - mean is written once per reader, so that each fuses into
 * the kernel that reads it (stored, it would be a tensor written and read back). The into_ values
 * receive the results (NULL: fresh values); *mean_out and *var_out are the [C] statistics. */
static Value *bn_train_forward(Rw *r, Value *x, Value *w, Value *b, double eps, Value *into_y, Value *into_mean, Value *into_invstd, Value *into_var,
                               Value **mean_out, Value **var_out) {
  int64_t dims[GG_MAX_RANK], nd = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != 1) dims[nd++] = d;
  Value *mean = CALL(r, into_mean, "mean.dim", "self", T(x), "dim", INTS(r, (int)nd, dims));
  Value *mc = per_channel(r, mean, x->rank, 1);
  Value *xc = mc ? CALL(r, NULL, "sub.Tensor", "self", T(x), "other", T(mc)) : NULL;
  Value *sq = xc ? CALL(r, NULL, "pow.Tensor_Scalar", "self", T(xc), "exponent", FL(2)) : NULL;   /* xc read once: it fuses */
  Value *var = sq ? CALL(r, into_var, "mean.dim", "self", T(sq), "dim", INTS(r, (int)nd, dims)) : NULL;
  Value *ve = var ? CALL(r, NULL, "add.Tensor", "self", T(var), "other", FL(eps)) : NULL;
  Value *inv = ve ? CALL(r, into_invstd, "rsqrt", "self", T(ve)) : NULL;
  Value *xc2 = inv ? CALL(r, NULL, "sub.Tensor", "self", T(x), "other", T(mc)) : NULL;
  Value *y = xc2 ? CALL(r, NULL, "mul.Tensor", "self", T(xc2), "other", T(per_channel(r, inv, x->rank, 1))) : NULL;
  *mean_out = mean;
  *var_out = var;
  return affine(r, y, per_channel(r, w, x->rank, 1), per_channel(r, b, x->rank, 1), into_y);
}

int decomp_batch_norm(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias"), *rm = rw_targ(n, "running_mean"), *rv = rw_targ(n, "running_var");
  const Arg *tr = rw_arg(n, "training");
  bool training = !strcmp(n->op->name, "_native_batch_norm_legit.no_stats") || (tr && tr->u.b), half = is_half(x);
  if (half && training) return gg_error(c, "%s: node %s: half-precision batch norm in training mode is not supported in compiled code yet", r->g->path, gg_quote(c, n->name));
  /* float16/bfloat16 in evaluation: computed in float32 and rounded once, as PyTorch's kernels do;
   * with constant parameters, x * scale + shift with both computed now (a pass over x and no kernel
   * per parameter; a float32 rounding apart from PyTorch's order, far below the result's) */
  if (half && !training) {
    Value *sc = NULL, *sh = NULL;
    if (r->fold && fold_bn_affine(r->g, w, b, rm, rv, rw_farg(n, "eps", 1e-5), &sc, &sh)) return -1;
    if (sc) {
      Value *xs = CALL(r, NULL, "mul.Tensor", "self", T(up(r, x)), "other", T(per_channel(r, sc, x->rank, 1)));
      Value *y = xs ? CALL(r, NULL, "add.Tensor", "self", T(xs), "other", T(per_channel(r, sh, x->rank, 1))) : NULL;
      if (!land(r, y, n->outs[0], true)) return -1;
      for (int i = 1; i < n->nouts && i < 3; i++)
        if (!empty_stat(r, n->outs[i], n->outs[i]->dtype)) return -1;
      if (n->nouts == 5 && (!CALL(r, n->outs[3], "clone", "self", T(rm)) || !CALL(r, n->outs[4], "clone", "self", T(rv)))) return -1;
      return 0;
    }
  }
  if (half) x = up(r, x), w = up(r, w), b = up(r, b), rm = up(r, rm), rv = up(r, rv);
  double eps = rw_farg(n, "eps", 1e-5), mom = rw_farg(n, "momentum", 0.1);
  if (!training) {
    Value *wc = per_channel(r, w, x->rank, 1), *bc = per_channel(r, b, x->rank, 1);
    if (!rm || !rv) return gg_error(c, "%s: node %s: evaluation-mode batch norm needs running statistics", r->g->path, gg_quote(c, n->name));
    Value *m = per_channel(r, rm, x->rank, 1), *v = per_channel(r, rv, x->rank, 1);
    Value *ve = CALL(r, NULL, "add.Tensor", "self", T(v), "other", FL(eps));
    Value *inv = ve ? CALL(r, NULL, "rsqrt", "self", T(ve)) : NULL;
    Value *xc = inv ? CALL(r, NULL, "sub.Tensor", "self", T(x), "other", T(m)) : NULL;
    Value *y = xc ? CALL(r, NULL, "mul.Tensor", "self", T(xc), "other", T(inv)) : NULL;
    if (!land(r, affine(r, y, wc, bc, direct(n->outs[0], half)), n->outs[0], half)) return -1;
    if (n->nouts >= 3 && (!empty_stat(r, n->outs[1], n->outs[1]->dtype) || !empty_stat(r, n->outs[2], n->outs[2]->dtype))) return -1;
    if (n->nouts == 5 && (!CALL(r, n->outs[3], "clone", "self", T(rm)) || !CALL(r, n->outs[4], "clone", "self", T(rv)))) return -1;
    return 0;
  }
  int64_t cnt;
  if (bn_count(r, n, x, &cnt)) return -1;
  Value *mean, *var;
  if (r->training) {   /* whole, for autograd's two-sum backward (grad_bn_train); expanded after it */
    Value *y = CALL(r, n->outs[0], "_batch_norm_train", "input", T(x), "weight", T(w), "bias", T(b), "eps", FL(eps));
    if (!y) return -1;
    Node *bn = y->def;
    mean = bn->outs[1];
    var = bn->outs[3];
    if (n->nouts >= 3 && (!CALL(r, n->outs[1], "alias", "self", T(mean)) || !CALL(r, n->outs[2], "alias", "self", T(bn->outs[2])))) return -1;
  } else if (!bn_train_forward(r, x, w, b, eps, n->outs[0], n->nouts >= 3 ? n->outs[1] : NULL, n->nouts >= 3 ? n->outs[2] : NULL, NULL, &mean, &var))
    return -1;
  if (n->nouts == 5) {
    /* running statistics: (1 - momentum) * old + momentum * new, the variance unbiased */
    Value *vu = CALL(r, NULL, "mul.Tensor", "self", T(var), "other", FL(cnt > 1 ? (double)cnt / (double)(cnt - 1) : 1.0));
    Value *a = CALL(r, NULL, "mul.Tensor", "self", T(rm), "other", FL(1 - mom)), *bm = CALL(r, NULL, "mul.Tensor", "self", T(mean), "other", FL(mom));
    Value *a2 = CALL(r, NULL, "mul.Tensor", "self", T(rv), "other", FL(1 - mom)), *bv = vu ? CALL(r, NULL, "mul.Tensor", "self", T(vu), "other", FL(mom)) : NULL;
    if (!a || !bm || !a2 || !bv || !CALL(r, n->outs[3], "add.Tensor", "self", T(a), "other", T(bm)) || !CALL(r, n->outs[4], "add.Tensor", "self", T(a2), "other", T(bv))) return -1;
  }
  return 0;
}

/* _batch_norm_train after autograd: its forward as primitives */
int decomp_bn_train(Rw *r, Node *n) {
  Value *mean, *var;
  int64_t cnt;
  if (bn_count(r, n, rw_targ(n, "input"), &cnt)) return -1;
  return bn_train_forward(r, rw_targ(n, "input"), rw_targ(n, "weight"), rw_targ(n, "bias"), rw_farg(n, "eps", 1e-5), n->outs[0], n->outs[1], n->outs[2], n->outs[3], &mean, &var) ? 0 : -1;
}

static Value *softmax_of(Rw *r, Value *s) { return s ? CALL(r, NULL, "softmax.int", "self", T(s), "dim", INT(r, -1)) : NULL; }

/* The scores of attention, q k^T scale with the mask added (or its false positions and, causal, the
 * keys after each query left out as -inf), in float32 for 16-bit operands; *masked: whether some
 * position may be left out (a row of them all gives NaN probabilities, filled with zeros). */
static Value *att_scores(Rw *r, Value *q, Value *k, Value *mask, bool causal, double scale, bool *masked) {
  int rk = q->rank;
  q = up(r, q);
  k = up(r, k);
  if (mask && mask->dtype != DT_BOOL) mask = up(r, mask);
  Value *kt = q && k ? CALL(r, NULL, "transpose.int", "self", T(k), "dim0", INT(r, -2), "dim1", INT(r, -1)) : NULL;
  Value *s = kt ? CALL(r, NULL, "matmul", "self", T(q), "other", T(kt)) : NULL;
  s = s ? CALL(r, NULL, "mul.Tensor", "self", T(s), "other", FL(scale)) : NULL;
  *masked = false;
  if (!s) return NULL;
  if (mask && mask->dtype == DT_BOOL) {
    Value *nm = CALL(r, NULL, "logical_not", "self", T(mask));
    s = nm ? CALL(r, NULL, "masked_fill.Scalar", "self", T(s), "mask", T(nm), "value", FL(-INFINITY)) : NULL;
    *masked = true;
  } else if (mask) s = CALL(r, NULL, "add.Tensor", "self", T(s), "other", T(mask));
  if (s && causal) {
    const Expr *ls[2] = {q->sizes[rk - 2], k->sizes[rk - 2]};
    Value *ones = CALL(r, NULL, "ones", "size", EXPRS(r, 2, ls), "dtype", DT(DT_BOOL));
    Value *tri = ones ? CALL(r, NULL, "triu", "self", T(ones), "diagonal", INT(r, 1)) : NULL;
    s = tri ? CALL(r, NULL, "masked_fill.Scalar", "self", T(s), "mask", T(tri), "value", FL(-INFINITY)) : NULL;
    *masked = true;
  }
  return s;
}

/* NaN probabilities (rows with every key left out) as zeros, as PyTorch's math path gives */
static Value *att_unnan(Rw *r, Value *p, bool masked) {
  if (!p || !masked) return p;
  Value *bad = CALL(r, NULL, "isnan", "self", T(p));
  return bad ? CALL(r, NULL, "masked_fill.Scalar", "self", T(p), "mask", T(bad), "value", FL(0)) : NULL;
}

/* Whether --train keeps this attention whole for autograd (_attention_train, grad_attention_train):
 * everywhere but where the GPU would have to decompose it anyway (no fused backward there for its
 * dtype and head size), where the primitives' own rules keep today's form. */
static bool attention_kept(const Graph *g, const Node *n) {
  const Value *q = rw_targ(n, "query");
  int64_t D;
  return !g->ctx->cuda || (cuda_attention_fits(g, n) && expr_is_const(q->sizes[q->rank - 1], &D) && cuda_attention_backward_fits(q->dtype, D));
}

int decomp_sdpa(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *q = rw_targ(n, "query"), *k = rw_targ(n, "key"), *v = rw_targ(n, "value"), *mask = rw_targ(n, "attn_mask");
  if (rw_farg(n, "dropout_p", 0) > 0) return gg_error(c, "%s: node %s: attention dropout is random; export in eval mode", r->g->path, gg_quote(c, n->name));
  int rk = q->rank;
  const Arg *sa = rw_arg(n, "scale");
  int64_t E;
  if (!expr_is_const(q->sizes[rk - 1], &E)) return gg_error(c, "%s: node %s: attention needs a static head size", r->g->path, gg_quote(c, n->name));
  double scale = sa->k == AK_FLOAT ? sa->u.f : 1.0 / sqrt((double)E);
  bool causal = rw_arg(n, "is_causal")->u.b;
  if (rw_arg(n, "enable_gqa")->u.b && rk >= 3 && !expr_same(r->g, q->sizes[rk - 3], k->sizes[rk - 3])) {
    /* grouped-query attention: each key/value head serves hq/hk query heads */
    int64_t hq, hk;
    if (!expr_is_const(q->sizes[rk - 3], &hq) || !expr_is_const(k->sizes[rk - 3], &hk) || hk == 0) return gg_error(c, "%s: node %s: grouped attention needs static head counts", r->g->path, gg_quote(c, n->name));
    Value *kv[2] = {k, v};
    for (int i = 0; i < 2; i++) {
      const Expr *ex[GG_MAX_RANK + 1], *rs[GG_MAX_RANK];
      Value *u = CALL(r, NULL, "unsqueeze", "self", T(kv[i]), "dim", INT(r, rk - 2));
      if (!u) return -1;
      for (int d = 0; d < rk + 1; d++) ex[d] = d == rk - 2 ? expr_const(c->arena, hq / hk) : u->sizes[d];
      Value *e = CALL(r, NULL, "expand", "self", T(u), "size", EXPRS(r, rk + 1, ex));
      for (int d = 0; d < rk; d++) rs[d] = d == rk - 3 ? q->sizes[rk - 3] : kv[i]->sizes[d];
      kv[i] = e ? CALL(r, NULL, "reshape", "self", T(e), "shape", EXPRS(r, rk, rs)) : NULL;
      if (!kv[i]) return -1;
    }
    k = kv[0];
    v = kv[1];
  }
  if (r->training && attention_kept(r->g, n))
    return CALL(r, n->outs[0], "_attention_train", "query", T(q), "key", T(k), "value", T(v), "attn_mask", T(mask), "is_causal", BO(causal), "scale", FL(scale)) ? 0 : -1;
  /* half types in float32 (opmath), as the fused kernels accumulate, and the result rounded once */
  bool half = is_half(q), masked;
  Value *p = softmax_of(r, att_scores(r, q, k, mask, causal, scale, &masked));
  p = att_unnan(r, p, masked);
  return p && land(r, CALL(r, direct(n->outs[0], half), "matmul", "self", T(p), "other", T(up(r, v))), n->outs[0], half) ? 0 : -1;
}

/* _attention_train where no fused kernel takes it: the same primitives, and the log-sum-exp */
int decomp_attention_train(Rw *r, Node *n) {
  Value *q = rw_targ(n, "query"), *v = rw_targ(n, "value");
  bool half = is_half(q), masked;
  Value *s = att_scores(r, q, rw_targ(n, "key"), rw_targ(n, "attn_mask"), rw_arg(n, "is_causal")->u.b, rw_farg(n, "scale", 1), &masked);
  int64_t last[1] = {-1};
  if (!s || !CALL(r, n->outs[1], "logsumexp", "self", T(s), "dim", INTS(r, 1, last), "keepdim", BO(false))) return -1;
  Value *p = att_unnan(r, softmax_of(r, s), masked);
  return p && land(r, CALL(r, direct(n->outs[0], half), "matmul", "self", T(p), "other", T(up(r, v))), n->outs[0], half) ? 0 : -1;
}

/* Attention's backward from its inputs, output and log-sum-exp, as primitives: the probabilities
 * recomputed, P = exp(S - lse); dV = P^T dO; dS = P (dO V^T - rowsum(dO O)); dQ = dS K scale,
 * dK = dS^T Q scale. into: the three gradients' values (NULL: new ones); the scores' gradient dS,
 * float32 for 16-bit operands, is returned (a mask's gradient where one needs it), and the three in
 * grads when it is not NULL. */
Value *attention_backward_primitives(Rw *r, Value *go, Value *q, Value *k, Value *v, Value *mask, Value *out, Value *lse, bool causal, double scale, Value *const into[3],
                                     Value *grads[3]) {
  bool half = is_half(q), masked;
  Value *s = att_scores(r, q, k, mask, causal, scale, &masked);
  Value *ls = s ? CALL(r, NULL, "unsqueeze", "self", T(lse), "dim", INT(r, -1)) : NULL;
  Value *d = ls ? CALL(r, NULL, "sub.Tensor", "self", T(s), "other", T(ls)) : NULL;
  Value *p = att_unnan(r, d ? CALL(r, NULL, "exp", "self", T(d)) : NULL, masked);
  Value *g = up(r, go), *o = up(r, out), *q32 = up(r, q), *k32 = up(r, k), *v32 = up(r, v);
  if (!p || !g || !o || !q32 || !k32 || !v32) return NULL;
  Value *pt = CALL(r, NULL, "transpose.int", "self", T(p), "dim0", INT(r, -2), "dim1", INT(r, -1));
  Value *dv = pt ? CALL(r, into ? direct(into[2], half) : NULL, "matmul", "self", T(pt), "other", T(g)) : NULL;
  Value *vt = CALL(r, NULL, "transpose.int", "self", T(v32), "dim0", INT(r, -2), "dim1", INT(r, -1));
  Value *dp = vt ? CALL(r, NULL, "matmul", "self", T(g), "other", T(vt)) : NULL;
  int64_t last[1] = {-1};
  Value *go_o = CALL(r, NULL, "mul.Tensor", "self", T(g), "other", T(o));
  Value *dsum = go_o ? CALL(r, NULL, "sum.dim_IntList", "self", T(go_o), "dim", INTS(r, 1, last), "keepdim", BO(true)) : NULL;
  Value *dpc = dp && dsum ? CALL(r, NULL, "sub.Tensor", "self", T(dp), "other", T(dsum)) : NULL;
  Value *ds = dpc ? CALL(r, NULL, "mul.Tensor", "self", T(p), "other", T(dpc)) : NULL;
  Value *dsc = ds ? CALL(r, NULL, "mul.Tensor", "self", T(ds), "other", FL(scale)) : NULL;
  Value *dq = dsc ? CALL(r, into ? direct(into[0], half) : NULL, "matmul", "self", T(dsc), "other", T(k32)) : NULL;
  Value *dst = dsc ? CALL(r, NULL, "transpose.int", "self", T(dsc), "dim0", INT(r, -2), "dim1", INT(r, -1)) : NULL;
  Value *dk = dst ? CALL(r, into ? direct(into[1], half) : NULL, "matmul", "self", T(dst), "other", T(q32)) : NULL;
  if (!dv || !dq || !dk) return NULL;
  if (grads) grads[0] = dq, grads[1] = dk, grads[2] = dv;
  if (into && (!land(r, dq, into[0], half) || !land(r, dk, into[1], half) || !land(r, dv, into[2], half))) return NULL;
  return ds;
}

int decomp_attention_backward(Rw *r, Node *n) {
  return attention_backward_primitives(r, rw_targ(n, "grad_out"), rw_targ(n, "query"), rw_targ(n, "key"), rw_targ(n, "value"), rw_targ(n, "attn_mask"), rw_targ(n, "out"),
                                       rw_targ(n, "logsumexp"), rw_arg(n, "is_causal")->u.b, rw_farg(n, "scale", 1), n->outs, NULL)
             ? 0
             : -1;
}

/* n-th forward difference: concatenate prepend/self/append, then subtract neighbours n times */
int decomp_diff(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "self"), *pre = rw_targ(n, "prepend"), *app = rw_targ(n, "append");
  int64_t times = node_int_arg(n, "n", 1), d = node_int_arg(n, "dim", -1);
  if (d < 0) d += x->rank;
  if (pre || app) {
    Arg list = {.k = AK_TENSORS, .n = 0};
    list.u.ts = arena_array(c->arena, 4, sizeof *list.u.ts);
    if (pre) list.u.ts[list.n++] = pre;
    list.u.ts[list.n++] = x;
    if (app) list.u.ts[list.n++] = app;
    x = CALL(r, NULL, "cat", "tensors", list, "dim", INT(r, d));
    if (!x) return -1;
  }
  if (times == 0) return CALL(r, n->outs[0], "clone", "self", T(x)) ? 0 : -1;
  for (int64_t i = 0; i < times; i++) {
    Value *hi = CALL(r, NULL, "slice.Tensor", "self", T(x), "dim", INT(r, d), "start", INT(r, 1));
    Value *lo = hi ? CALL(r, NULL, "slice.Tensor", "self", T(x), "dim", INT(r, d), "start", INT(r, 0), "end", INT(r, -1)) : NULL;
    bool last = i == times - 1;
    if (!lo) return -1;
    if (x->dtype == DT_BOOL) x = CALL(r, last ? n->outs[0] : NULL, "logical_xor", "self", T(hi), "other", T(lo));
    else x = CALL(r, last ? n->outs[0] : NULL, "sub.Tensor", "self", T(hi), "other", T(lo));
    if (!x) return -1;
  }
  return 0;
}

/* glu: first half * sigmoid(second half) */
int decomp_glu(Rw *r, Node *n) {
  Value *x = rw_targ(n, "self");
  int64_t d = node_int_arg(n, "dim", -1), half;
  if (d < 0) d += x->rank;
  expr_is_const(x->sizes[d], &half);
  half /= 2;
  Value *a = CALL(r, NULL, "narrow", "self", T(x), "dim", INT(r, d), "start", INT(r, 0), "length", INT(r, half));
  Value *b = a ? CALL(r, NULL, "narrow", "self", T(x), "dim", INT(r, d), "start", INT(r, half), "length", INT(r, half)) : NULL;
  Value *s = b ? CALL(r, NULL, "sigmoid", "self", T(b)) : NULL;
  return s && CALL(r, n->outs[0], "mul.Tensor", "self", T(a), "other", T(s)) ? 0 : -1;
}

/* repeat: view as [1, s0, 1, s1, ...], expand to [r0, s0, r1, s1, ...], copy, view as the result */
int decomp_repeat(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "self");
  const Arg *rp = rw_arg(n, "repeats");
  int lead = rp->n - x->rank;
  if (2 * rp->n > GG_MAX_RANK) return gg_error(c, "%s: node %s: repeat over too many dims", r->g->path, gg_quote(c, n->name));
  const Expr *v[GG_MAX_RANK], *ex[GG_MAX_RANK];
  for (int i = 0; i < rp->n; i++) {
    v[2 * i] = expr_const(c->arena, 1);
    v[2 * i + 1] = i < lead ? expr_const(c->arena, 1) : x->sizes[i - lead];
    ex[2 * i] = rp->u.is[i];
    ex[2 * i + 1] = v[2 * i + 1];
  }
  Value *a = CALL(r, NULL, "reshape", "self", T(x), "shape", EXPRS(r, 2 * rp->n, v));
  Value *b = a ? CALL(r, NULL, "expand", "self", T(a), "size", EXPRS(r, 2 * rp->n, ex)) : NULL;
  Value *cl = b ? CALL(r, NULL, "clone", "self", T(b)) : NULL;
  return cl && CALL(r, n->outs[0], "reshape", "self", T(cl), "shape", EXPRS(r, n->outs[0]->rank, n->outs[0]->sizes)) ? 0 : -1;
}

int decomp_broadcast_tensors(Rw *r, Node *n) {
  const Arg *ts = rw_arg(n, "tensors");
  for (int i = 0; i < ts->n; i++)
    if (!CALL(r, n->outs[i], "expand", "self", T(ts->u.ts[i]), "size", EXPRS(r, n->outs[i]->rank, n->outs[i]->sizes))) return -1;
  return 0;
}

static Value *reduce_loss(Rw *r, Value *loss, Value *denom, int64_t reduction, Value *into) {
  if (reduction == 0) return CALL(r, into, "alias", "self", T(loss));
  if (!denom) return CALL(r, into, reduction == 1 ? "mean" : "sum", "self", T(loss));
  Value *s = CALL(r, NULL, "sum", "self", T(loss));
  return s ? CALL(r, into, "div.Tensor", "self", T(s), "other", T(denom)) : NULL;
}

int decomp_mse_loss(Rw *r, Node *n) {
  Value *d = CALL(r, NULL, "sub.Tensor", "self", T(rw_targ(n, "self")), "other", T(rw_targ(n, "target")));
  Value *sq = d ? CALL(r, NULL, "mul.Tensor", "self", T(d), "other", T(d)) : NULL;
  return sq && reduce_loss(r, sq, NULL, node_int_arg(n, "reduction", 1), n->outs[0]) ? 0 : -1;
}

/* l1, smooth l1, huber and binary cross entropy: the per-element loss from pointwise ops, weighted,
 * then reduced (PyTorch's formulas: smooth_l1 = 0.5 d^2 / beta below beta, d - beta/2 above; BCE
 * clamps its logs at -100; BCE on logits is (1 - t) x + (1 + (pw - 1) t) (log1p(e^-|x|) + max(-x, 0))). */
static Value *pw1(Rw *r, const char *op, Value *x) { return x ? CALL(r, NULL, op, "self", T(x)) : NULL; }
static Value *pw2(Rw *r, const char *op, Value *x, Value *y) { return x && y ? CALL(r, NULL, op, "self", T(x), "other", T(y)) : NULL; }
static Value *pwf(Rw *r, const char *op, Value *x, double f) { return x ? CALL(r, NULL, op, "self", T(x), "other", FL(f)) : NULL; }
static Value *cmin(Rw *r, Value *x, double lo) { return x ? CALL(r, NULL, "clamp_min", "self", T(x), "min", FL(lo)) : NULL; }
static Value *pick(Rw *r, Value *cond, Value *a, Value *b) {
  return cond && a && b ? CALL(r, NULL, "where.self", "condition", T(cond), "self", T(a), "other", T(b)) : NULL;
}

int decomp_elementwise_loss(Rw *r, Node *n) {
  const char *op = n->op->name;
  Value *x = rw_targ(n, "self"), *t = rw_targ(n, "target"), *w = rw_targ(n, "weight"), *l;
  if (!strcmp(op, "l1_loss")) l = pw1(r, "abs", pw2(r, "sub.Tensor", x, t));
  else if (!strcmp(op, "smooth_l1_loss") || !strcmp(op, "huber_loss")) {
    bool huber = op[0] == 'h';
    double b = huber ? rw_farg(n, "delta", 1) : rw_farg(n, "beta", 1);
    Value *d = pw1(r, "abs", pw2(r, "sub.Tensor", x, t));
    if (b == 0) l = d;
    else {
      Value *sq = pwf(r, "mul.Tensor", pw2(r, "mul.Tensor", d, d), huber ? 0.5 : 0.5 / b);
      Value *lin = huber ? pwf(r, "mul.Tensor", pwf(r, "sub.Tensor", d, 0.5 * b), b) : pwf(r, "sub.Tensor", d, 0.5 * b);
      l = pick(r, pwf(r, "lt.Scalar", d, b), sq, lin);
    }
  } else if (!strcmp(op, "binary_cross_entropy")) {   /* -(t log x + (1 - t) log(1 - x)) */
    Value *lx = cmin(r, pw1(r, "log", x), -100), *l1x = cmin(r, pw1(r, "log1p", pw1(r, "neg", x)), -100);
    Value *omt = t ? CALL(r, NULL, "rsub.Scalar", "self", T(t), "other", FL(1)) : NULL;
    l = pw1(r, "neg", pw2(r, "add.Tensor", pw2(r, "mul.Tensor", t, lx), pw2(r, "mul.Tensor", omt, l1x)));
  } else {   /* with logits */
    Value *pw = rw_targ(n, "pos_weight");
    Value *omt = t ? CALL(r, NULL, "rsub.Scalar", "self", T(t), "other", FL(1)) : NULL;
    Value *sp = pw2(r, "add.Tensor", pw1(r, "log1p", pw1(r, "exp", pw1(r, "neg", pw1(r, "abs", x)))), cmin(r, pw1(r, "neg", x), 0));
    Value *coef = pw ? pwf(r, "add.Tensor", pw2(r, "mul.Tensor", pwf(r, "sub.Tensor", pw, 1), t), 1) : NULL;
    l = pw2(r, "add.Tensor", pw2(r, "mul.Tensor", omt, x), coef ? pw2(r, "mul.Tensor", coef, sp) : sp);
  }
  if (w) l = pw2(r, "mul.Tensor", l, w);
  return l && reduce_loss(r, l, NULL, node_int_arg(n, "reduction", 1), n->outs[0]) ? 0 : -1;
}

/* cross entropy (and nll on log-probabilities) with class-index targets: the picked log-probability,
 * weighted, ignoring ignore_index, smoothed; the mean divides by the weights of the kept targets. */
int decomp_cross_entropy(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "self"), *t = rw_targ(n, "target"), *w = rw_targ(n, "weight");
  bool nll = !strncmp(n->op->name, "nll_loss", 8);
  if (dtype_is_float(t->dtype)) return gg_error(c, "%s: node %s: cross entropy with probability targets is not supported in compiled code yet", r->g->path, gg_quote(c, n->name));
  int64_t red = node_int_arg(n, "reduction", 1), ignore = node_int_arg(n, "ignore_index", -100), C = 0;
  double eps = rw_farg(n, "label_smoothing", 0);
  int cd = x->rank > 1 ? 1 : 0;
  if (!expr_is_const(x->sizes[cd], &C)) return gg_error(c, "%s: node %s: the class count must be static", r->g->path, gg_quote(c, n->name));
  Value *lp = nll ? x : CALL(r, NULL, "log_softmax.int", "self", T(x), "dim", INT(r, cd));
  Value *keep = lp ? CALL(r, NULL, "ne.Scalar", "self", T(t), "other", INT(r, ignore)) : NULL;
  Value *t0 = keep ? CALL(r, NULL, "where.ScalarOther", "condition", T(keep), "self", T(t), "other", INT(r, 0)) : NULL;
  Value *tu = t0 ? CALL(r, NULL, "unsqueeze", "self", T(t0), "dim", INT(r, cd)) : NULL;
  Value *g = tu ? CALL(r, NULL, "gather", "self", T(lp), "dim", INT(r, cd), "index", T(tu)) : NULL;
  Value *pick = g ? CALL(r, NULL, "squeeze.dim", "self", T(g), "dim", INT(r, cd)) : NULL;
  if (!pick) return -1;
  /* the weight of each kept target (0 for ignored ones) */
  Value *wt;
  if (w) {
    Arg idx = {.k = AK_TENSORS, .n = 1};
    idx.u.ts = arena_array(c->arena, 2, sizeof *idx.u.ts);
    idx.u.ts[0] = t0;
    Value *wi = CALL(r, NULL, "index.Tensor", "self", T(w), "indices", idx);
    wt = wi ? CALL(r, NULL, "where.ScalarOther", "condition", T(keep), "self", T(wi), "other", FL(0)) : NULL;
  } else wt = CALL(r, NULL, "_to_copy", "self", T(keep), "dtype", DT(x->dtype));
  Value *nl = wt ? CALL(r, NULL, "mul.Tensor", "self", T(pick), "other", T(wt)) : NULL;
  Value *loss = nl ? CALL(r, NULL, "neg", "self", T(nl)) : NULL;
  if (loss && eps > 0) {
    Value *lw = w ? CALL(r, NULL, "mul.Tensor", "self", T(lp), "other", T(per_channel(r, w, x->rank, cd))) : lp;
    int64_t dims[1] = {cd};
    Value *sm = lw ? CALL(r, NULL, "sum.dim_IntList", "self", T(lw), "dim", INTS(r, 1, dims)) : NULL;
    Value *keepf = sm ? CALL(r, NULL, "_to_copy", "self", T(keep), "dtype", DT(x->dtype)) : NULL;
    Value *smk = keepf ? CALL(r, NULL, "mul.Tensor", "self", T(sm), "other", T(keepf)) : NULL;
    Value *a = smk ? CALL(r, NULL, "mul.Tensor", "self", T(loss), "other", FL(1 - eps)) : NULL;
    Value *b = a ? CALL(r, NULL, "mul.Tensor", "self", T(smk), "other", FL(-eps / (double)C)) : NULL;
    loss = b ? CALL(r, NULL, "add.Tensor", "self", T(a), "other", T(b)) : NULL;
  }
  if (!loss) return -1;
  Value *den = red == 1 ? CALL(r, NULL, "sum", "self", T(wt)) : NULL;
  if (!reduce_loss(r, loss, den, red, n->outs[0])) return -1;
  if (n->nouts == 2) {
    Value *tw = CALL(r, n->outs[1], "sum", "self", T(wt));
    if (!tw) return -1;
  }
  return 0;
}

/* roll: along each dim, the last `shift` elements move to the front (cat of two narrows) */
int decomp_roll(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "self");
  const Arg *sh = rw_arg(n, "shifts"), *dm = rw_arg(n, "dims");
  bool flat = dm->n == 0;
  if (flat) {
    const Expr *all[1] = {expr_const(c->arena, -1)};
    x = CALL(r, NULL, "reshape", "self", T(x), "shape", EXPRS(r, 1, all));
    if (!x) return -1;
  }
  int nd = flat ? 1 : dm->n;
  for (int i = 0; i < nd; i++) {
    int64_t d = 0, s, size;
    if (!flat) { expr_is_const(dm->u.is[i], &d); if (d < 0) d += x->rank; }
    if (!expr_is_const(sh->u.is[i], &s) || !expr_is_const(x->sizes[d], &size)) return gg_error(c, "%s: node %s: roll needs static sizes", r->g->path, gg_quote(c, n->name));
    if (size == 0) continue;
    s = ((s % size) + size) % size;
    bool last = i == nd - 1 && !flat;
    if (s == 0) { if (last && !CALL(r, n->outs[0], "clone", "self", T(x))) return -1; if (last) return 0; continue; }
    Value *tail = CALL(r, NULL, "narrow", "self", T(x), "dim", INT(r, d), "start", INT(r, size - s), "length", INT(r, s));
    Value *head = tail ? CALL(r, NULL, "narrow", "self", T(x), "dim", INT(r, d), "start", INT(r, 0), "length", INT(r, size - s)) : NULL;
    if (!head) return -1;
    Arg list = {.k = AK_TENSORS, .n = 2};
    list.u.ts = arena_array(c->arena, 3, sizeof *list.u.ts);
    list.u.ts[0] = tail;
    list.u.ts[1] = head;
    x = CALL(r, last ? n->outs[0] : NULL, "cat", "tensors", list, "dim", INT(r, d));
    if (!x) return -1;
  }
  if (flat) return CALL(r, n->outs[0], "reshape", "self", T(x), "shape", EXPRS(r, n->outs[0]->rank, n->outs[0]->sizes)) ? 0 : -1;
  if (x != n->outs[0]) return CALL(r, n->outs[0], "clone", "self", T(x)) ? 0 : -1;
  return 0;
}

/* The padding mode of pad / reflection_padNd / replication_padNd: 0 constant, 1 reflect, 2 replicate,
 * 3 circular, -1 unknown. */
int pad_mode(const Node *n) {
  const char *name = n->op->name;
  if (!strncmp(name, "reflection_pad", 14)) return 1;
  if (!strncmp(name, "replication_pad", 15)) return 2;
  const Arg *m = rw_arg(n, "mode");
  const char *s = m && m->k == AK_STR ? m->u.s : "constant";
  return !strcmp(s, "constant") ? 0 : !strcmp(s, "reflect") ? 1 : !strcmp(s, "replicate") ? 2 : !strcmp(s, "circular") ? 3 : -1;
}

/* reflect, replicate and circular padding: along each padded dim an index_select of the positions
 * the output reads, made from an arange (reflect: m - |m - |s||, replicate: clamp(s, 0, m), circular:
 * s mod L, with s the output position less the front pad and m = L - 1), so that both targets and
 * the gradient come from ops that have them. Constant padding keeps its kernel. */
int decomp_pad(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  int mode = pad_mode(n);
  if (mode == 0) { rw_push(r, n); return 0; }
  Value *x = rw_targ(n, "self");
  const Arg *p = rw_arg(n, "pad") ? rw_arg(n, "pad") : rw_arg(n, "padding");
  int np = p->n / 2;
  for (int i = 0; i < np; i++) {
    int d = x->rank - 1 - i;
    int64_t lo, hi, L;
    if (!expr_is_const(p->u.is[2 * i], &lo) || !expr_is_const(p->u.is[2 * i + 1], &hi) || !expr_is_const(x->sizes[d], &L))
      return gg_error(c, "%s: node %s: reflect, replicate and circular padding need static sizes", r->g->path, gg_quote(c, n->name));
    Value *s = CALL(r, NULL, "arange.start", "start", INT(r, -lo), "end", INT(r, L + hi), "dtype", DT(DT_I64));
    if (s && mode == 1) {
      Value *a = CALL(r, NULL, "abs", "self", T(s));
      Value *b = a ? CALL(r, NULL, "sub.Tensor", "self", T(a), "other", INT(r, L - 1)) : NULL;
      Value *ab = b ? CALL(r, NULL, "abs", "self", T(b)) : NULL;
      s = ab ? CALL(r, NULL, "rsub.Scalar", "self", T(ab), "other", INT(r, L - 1)) : NULL;
    } else if (s && mode == 2)
      s = CALL(r, NULL, "clamp", "self", T(s), "min", INT(r, 0), "max", INT(r, L - 1));
    else if (s)
      s = CALL(r, NULL, "remainder.Scalar", "self", T(s), "other", INT(r, L));
    x = s ? CALL(r, i == np - 1 ? n->outs[0] : NULL, "index_select", "self", T(x), "dim", INT(r, d), "index", T(s)) : NULL;
    if (!x) return -1;
  }
  return np ? 0 : CALL(r, n->outs[0], "clone", "self", T(x)) ? 0 : -1;
}

/* masked_scatter: where the mask (broadcast to self) is true, source's elements in order: the k-th true
 * position takes source.flatten()[k], k from a running count of the mask */
int decomp_masked_scatter(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "self"), *m = rw_targ(n, "mask"), *src = rw_targ(n, "source");
  const Expr *all[1] = {expr_const(c->arena, -1)};
  Value *mb = CALL(r, NULL, "expand", "self", T(m), "size", EXPRS(r, x->rank, x->sizes));
  Value *mf = mb ? CALL(r, NULL, "reshape", "self", T(mb), "shape", EXPRS(r, 1, all)) : NULL;
  Value *cnt = mf ? CALL(r, NULL, "cumsum", "self", T(mf), "dim", INT(r, 0), "dtype", DT(DT_I64)) : NULL;
  Value *k = cnt ? CALL(r, NULL, "sub.Tensor", "self", T(cnt), "other", INT(r, 1)) : NULL;
  Value *k0 = k ? CALL(r, NULL, "clamp", "self", T(k), "min", INT(r, 0)) : NULL;   /* before the first true: any valid index, unused */
  Value *sf = k0 ? CALL(r, NULL, "reshape", "self", T(src), "shape", EXPRS(r, 1, all)) : NULL;
  Value *picked = sf ? CALL(r, NULL, "index_select", "self", T(sf), "dim", INT(r, 0), "index", T(k0)) : NULL;
  Value *shaped = picked ? CALL(r, NULL, "reshape", "self", T(picked), "shape", EXPRS(r, x->rank, x->sizes)) : NULL;
  return shaped && CALL(r, n->outs[0], "where.self", "condition", T(mb), "self", T(shaped), "other", T(x)) ? 0 : -1;
}

/* embedding_dense_backward: the rows of the gradient summed into their indices' rows (index_put with
 * accumulate into zeros), the padding row left at zero */
int decomp_embedding_backward(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *g = rw_targ(n, "grad_output"), *ix = rw_targ(n, "indices");
  const Arg *nw = rw_arg(n, "num_weights"), *pi = rw_arg(n, "padding_idx");
  if (rw_arg(n, "scale_grad_by_freq")->u.b) return gg_error(c, "%s: node %s: scale_grad_by_freq is not supported", r->g->path, gg_quote(c, n->name));
  int64_t pad = -1;
  if (pi && pi->k == AK_INT) expr_is_const(pi->u.i, &pad);
  const Expr *sz[2] = {nw->u.i, g->sizes[g->rank - 1]};
  if (pad >= 0) {
    Value *keep = CALL(r, NULL, "ne.Scalar", "self", T(ix), "other", INT(r, pad));
    const Expr *ks[GG_MAX_RANK];
    for (int d = 0; d < ix->rank; d++) ks[d] = ix->sizes[d];
    ks[ix->rank] = expr_const(c->arena, 1);
    Value *k1 = keep ? CALL(r, NULL, "reshape", "self", T(keep), "shape", EXPRS(r, ix->rank + 1, ks)) : NULL;
    Value *z = k1 ? CALL(r, NULL, "zeros_like", "self", T(g)) : NULL;
    if (!(g = z ? CALL(r, NULL, "where.self", "condition", T(k1), "self", T(g), "other", T(z)) : NULL)) return -1;
  }
  Value *z = CALL(r, NULL, "zeros", "size", EXPRS(r, 2, sz), "dtype", DT(g->dtype));
  Arg list = {.k = AK_TENSORS, .n = 1};
  list.u.ts = arena_array(c->arena, 2, sizeof *list.u.ts);
  list.u.ts[0] = ix;
  return z && CALL(r, n->outs[0], "index_put", "self", T(z), "indices", list, "values", T(g), "accumulate", BO(true)) ? 0 : -1;
}

/* max_pool2d_with_indices_backward: each gradient added into the input position its window took its
 * maximum from (scatter_add over the flattened planes), as the max-pool derivative rule does */
int decomp_max_pool_backward(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *g = rw_targ(n, "grad_output"), *x = rw_targ(n, "self"), *ix = rw_targ(n, "indices");
  const Expr *m1 = expr_const(c->arena, -1);
  const Expr *planes = x->rank == 4 ? expr_bin(c->arena, E_MUL, x->sizes[0], x->sizes[1]) : x->sizes[0];
  const Expr *fx[2] = {planes, expr_bin(c->arena, E_MUL, x->sizes[x->rank - 2], x->sizes[x->rank - 1])}, *fg[2] = {planes, m1};
  Value *z = CALL(r, NULL, "zeros", "size", EXPRS(r, 2, fx), "dtype", DT(g->dtype));
  Value *i2 = z ? CALL(r, NULL, "reshape", "self", T(ix), "shape", EXPRS(r, 2, fg)) : NULL;
  Value *g2 = i2 ? CALL(r, NULL, "reshape", "self", T(g), "shape", EXPRS(r, 2, fg)) : NULL;
  Value *s = g2 ? CALL(r, NULL, "scatter_add", "self", T(z), "dim", INT(r, 1), "index", T(i2), "src", T(g2)) : NULL;
  return s && CALL(r, n->outs[0], "reshape", "self", T(s), "shape", EXPRS(r, x->rank, x->sizes)) ? 0 : -1;
}

/* native_layer_norm_backward, with xh = (x - mean) rstd over the last k dims and gh = g * weight:
 * dx = rstd (gh - mean(gh) - xh mean(gh xh)), dweight = sum over the batch dims of g xh, dbias = sum of g.
 * xh and gh are built once per reader, so that each is computed inside the kernel that reads it (the
 * sums' own loops on the GPU, sched_takes_prologue) and no tensor but dx and the sums is written. */
static Value *ln_xh(Rw *r, Value *x, Value *m, Value *rs) {
  Value *xc = CALL(r, NULL, "sub.Tensor", "self", T(x), "other", T(m));
  return xc ? CALL(r, NULL, "mul.Tensor", "self", T(xc), "other", T(rs)) : NULL;
}
static Value *ln_gh(Rw *r, Value *g, Value *w) { return w ? CALL(r, NULL, "mul.Tensor", "self", T(g), "other", T(w)) : g; }

int decomp_layer_norm_backward(Rw *r, Node *n) {
  Value *g = rw_targ(n, "grad_out"), *x = rw_targ(n, "input"), *m = rw_targ(n, "mean"), *rs = rw_targ(n, "rstd"), *w = rw_targ(n, "weight");
  int k = rw_arg(n, "normalized_shape")->n, nb = x->rank - k;
  int64_t nd[GG_MAX_RANK], bd[GG_MAX_RANK];
  for (int i = 0; i < k; i++) nd[i] = nb + i;
  for (int i = 0; i < nb; i++) bd[i] = i;
  Value *a = CALL(r, NULL, "mean.dim", "self", T(ln_gh(r, g, w)), "dim", INTS(r, k, nd), "keepdim", BO(true));
  Value *ghx = a ? CALL(r, NULL, "mul.Tensor", "self", T(ln_gh(r, g, w)), "other", T(ln_xh(r, x, m, rs))) : NULL;
  Value *b = ghx ? CALL(r, NULL, "mean.dim", "self", T(ghx), "dim", INTS(r, k, nd), "keepdim", BO(true)) : NULL;
  Value *t1 = b ? CALL(r, NULL, "sub.Tensor", "self", T(ln_gh(r, g, w)), "other", T(a)) : NULL;
  Value *t2 = t1 ? CALL(r, NULL, "mul.Tensor", "self", T(ln_xh(r, x, m, rs)), "other", T(b)) : NULL;
  Value *t3 = t2 ? CALL(r, NULL, "sub.Tensor", "self", T(t1), "other", T(t2)) : NULL;
  if (!t3 || !CALL(r, n->outs[0], "mul.Tensor", "self", T(t3), "other", T(rs))) return -1;
  Value *gx = CALL(r, NULL, "mul.Tensor", "self", T(g), "other", T(ln_xh(r, x, m, rs)));
  if (!gx) return -1;
  if (nb == 0) return CALL(r, n->outs[1], "clone", "self", T(gx)) && CALL(r, n->outs[2], "clone", "self", T(g)) ? 0 : -1;
  return CALL(r, n->outs[1], "sum.dim_IntList", "self", T(gx), "dim", INTS(r, nb, bd)) && CALL(r, n->outs[2], "sum.dim_IntList", "self", T(g), "dim", INTS(r, nb, bd)) ? 0 : -1;
}

static void pool3(const Node *n, const char *name, const int64_t *dflt, int64_t *v);

/* native_group_norm_backward: layer norm's backward over each (sample, group), weight per channel */
int decomp_group_norm_backward(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *g = rw_targ(n, "grad_out"), *x = rw_targ(n, "input"), *w = rw_targ(n, "weight");
  int64_t G = node_int_arg(n, "group", 1);
  const Expr *N = x->sizes[0], *Cx = x->sizes[1], *m1 = expr_const(c->arena, -1), *one = expr_const(c->arena, 1);
  const Expr *c3[3] = {N, Cx, m1}, *g3[3] = {N, expr_const(c->arena, G), m1}, *gs[3] = {N, expr_const(c->arena, G), one}, *w3[3] = {one, Cx, one};
  Value *x3 = CALL(r, NULL, "reshape", "self", T(x), "shape", EXPRS(r, 3, c3));
  Value *gc = x3 ? CALL(r, NULL, "reshape", "self", T(g), "shape", EXPRS(r, 3, c3)) : NULL;
  Value *wc = gc && w ? CALL(r, NULL, "reshape", "self", T(w), "shape", EXPRS(r, 3, w3)) : NULL;
  Value *ghc = wc ? CALL(r, NULL, "mul.Tensor", "self", T(gc), "other", T(wc)) : gc;
  Value *xg = ghc ? CALL(r, NULL, "reshape", "self", T(x3), "shape", EXPRS(r, 3, g3)) : NULL;
  Value *gh = xg ? CALL(r, NULL, "reshape", "self", T(ghc), "shape", EXPRS(r, 3, g3)) : NULL;
  Value *m = gh ? CALL(r, NULL, "reshape", "self", T(rw_targ(n, "mean")), "shape", EXPRS(r, 3, gs)) : NULL;
  Value *rs = m ? CALL(r, NULL, "reshape", "self", T(rw_targ(n, "rstd")), "shape", EXPRS(r, 3, gs)) : NULL;
  if (!rs) return -1;
  int64_t last[1] = {2}, bd[2] = {0, 2};
  Value *a = CALL(r, NULL, "mean.dim", "self", T(gh), "dim", INTS(r, 1, last), "keepdim", BO(true));
  Value *ghx = a ? CALL(r, NULL, "mul.Tensor", "self", T(gh), "other", T(ln_xh(r, xg, m, rs))) : NULL;
  Value *b = ghx ? CALL(r, NULL, "mean.dim", "self", T(ghx), "dim", INTS(r, 1, last), "keepdim", BO(true)) : NULL;
  Value *t1 = b ? CALL(r, NULL, "sub.Tensor", "self", T(gh), "other", T(a)) : NULL;
  Value *t2 = t1 ? CALL(r, NULL, "mul.Tensor", "self", T(ln_xh(r, xg, m, rs)), "other", T(b)) : NULL;
  Value *t3 = t2 ? CALL(r, NULL, "sub.Tensor", "self", T(t1), "other", T(t2)) : NULL;
  Value *dx = t3 ? CALL(r, NULL, "mul.Tensor", "self", T(t3), "other", T(rs)) : NULL;
  if (!dx || !CALL(r, n->outs[0], "reshape", "self", T(dx), "shape", EXPRS(r, x->rank, x->sizes))) return -1;
  Value *xh = ln_xh(r, xg, m, rs);
  Value *xhc = xh ? CALL(r, NULL, "reshape", "self", T(xh), "shape", EXPRS(r, 3, c3)) : NULL;
  Value *gx = xhc ? CALL(r, NULL, "mul.Tensor", "self", T(gc), "other", T(xhc)) : NULL;
  return gx && CALL(r, n->outs[1], "sum.dim_IntList", "self", T(gx), "dim", INTS(r, 2, bd)) && CALL(r, n->outs[2], "sum.dim_IntList", "self", T(gc), "dim", INTS(r, 2, bd)) ? 0 : -1;
}

/* Average pooling's input gradient: the output gradient over each window's divisor (per dim, so an
 * outer product of two vectors), spread over its window by a transposed convolution with a kernel of
 * ones (every plane as one channel), then cropped (or zero-extended) from padded coordinates to the
 * input's. Any ceil mode, count_include_pad or divisor_override. Static spatial sizes. */
Value *avg_pool_grad(Rw *r, Value *g, Value *x, const int64_t *k, const int64_t *st, const int64_t *pd, bool cip, const Arg *dov, Value *into) {
  Ctx *c = r->g->ctx;
  int64_t in[2], on[2];
  for (int i = 0; i < 2; i++)
    if (!expr_is_const(x->sizes[x->rank - 2 + i], &in[i]) || !expr_is_const(g->sizes[g->rank - 2 + i], &on[i])) {
      gg_error(c, "%s: node %s: average pooling's gradient needs static spatial sizes", r->g->path, gg_quote(c, r->orig->name));
      return NULL;
    }
  Value *gs = g;
  if (dov && dov->k == AK_INT) {
    int64_t d;
    expr_is_const(dov->u.i, &d);
    gs = CALL(r, NULL, "div.Tensor", "self", T(g), "other", FL((double)d));
  } else {
    Value *e[2];
    for (int i = 0; i < 2; i++) {   /* the window's extent along dim i, for each output position */
      Value *o = CALL(r, NULL, "arange", "end", INT(r, on[i]), "dtype", DT(g->dtype));
      Value *lo = o ? CALL(r, NULL, "add.Tensor", "self", T(CALL(r, NULL, "mul.Tensor", "self", T(o), "other", FL((double)st[i]))), "other", FL((double)-pd[i])) : NULL;
      Value *hi = lo ? CALL(r, NULL, "add.Tensor", "self", T(lo), "other", FL((double)k[i])) : NULL;
      hi = hi ? CALL(r, NULL, "clamp_max", "self", T(hi), "max", FL((double)(in[i] + (cip ? pd[i] : 0)))) : NULL;
      if (!cip && lo) lo = CALL(r, NULL, "clamp_min", "self", T(lo), "min", FL(0));
      int64_t shape[2] = {i ? 1 : on[0], i ? on[1] : 1};
      Value *ext = hi && lo ? CALL(r, NULL, "sub.Tensor", "self", T(hi), "other", T(lo)) : NULL;
      if (!ext || !(e[i] = CALL(r, NULL, "reshape", "self", T(ext), "shape", INTS(r, 2, shape)))) return NULL;
    }
    Value *div = CALL(r, NULL, "mul.Tensor", "self", T(e[0]), "other", T(e[1]));
    gs = div ? CALL(r, NULL, "div.Tensor", "self", T(g), "other", T(div)) : NULL;
  }
  int64_t g4[4] = {-1, 1, on[0], on[1]}, k4[4] = {1, 1, k[0], k[1]}, zero[2] = {0, 0}, one[2] = {1, 1};
  Value *gv = gs ? CALL(r, NULL, "reshape", "self", T(gs), "shape", INTS(r, 4, g4)) : NULL;
  Value *ones = gv ? CALL(r, NULL, "full", "size", INTS(r, 4, k4), "fill_value", FL(1), "dtype", DT(g->dtype)) : NULL;
  Value *y = ones ? CALL(r, NULL, "convolution", "input", T(gv), "weight", T(ones), "bias", NONE(), "stride", INTS(r, 2, st), "padding", INTS(r, 2, zero),
                         "dilation", INTS(r, 2, one), "transposed", BO(true), "output_padding", INTS(r, 2, zero), "groups", INT(r, 1)) : NULL;
  if (!y) return NULL;
  int64_t L[2] = {(on[0] - 1) * st[0] + k[0], (on[1] - 1) * st[1] + k[1]};
  int64_t pads[4] = {-pd[1], in[1] + pd[1] - L[1], -pd[0], in[0] + pd[0] - L[0]};
  Value *crop = CALL(r, NULL, "constant_pad_nd", "self", T(y), "pad", INTS(r, 4, pads));
  return crop ? CALL(r, into, "reshape", "self", T(crop), "shape", EXPRS(r, x->rank, x->sizes)) : NULL;
}

/* [out, in]: row i averages input [floor(i in / out), ceil((i + 1) in / out)), adaptive pooling's windows */
static Value *adaptive_matrix(Rw *r, int64_t in, int64_t out, DType dt) {
  Value *i = CALL(r, NULL, "arange", "end", INT(r, out), "dtype", DT(DT_I64));
  Value *ii = i ? CALL(r, NULL, "mul.Tensor", "self", T(i), "other", INT(r, in)) : NULL;
  Value *lo = ii ? CALL(r, NULL, "floor_divide", "self", T(ii), "other", INT(r, out)) : NULL;
  Value *hn = lo ? CALL(r, NULL, "add.Tensor", "self", T(ii), "other", INT(r, in + out - 1)) : NULL;
  Value *hi = hn ? CALL(r, NULL, "floor_divide", "self", T(hn), "other", INT(r, out)) : NULL;
  int64_t col[2] = {out, 1}, row[2] = {1, in};
  Value *lo2 = hi ? CALL(r, NULL, "reshape", "self", T(lo), "shape", INTS(r, 2, col)) : NULL;
  Value *hi2 = lo2 ? CALL(r, NULL, "reshape", "self", T(hi), "shape", INTS(r, 2, col)) : NULL;
  Value *h = hi2 ? CALL(r, NULL, "arange", "end", INT(r, in), "dtype", DT(DT_I64)) : NULL;
  Value *h2 = h ? CALL(r, NULL, "reshape", "self", T(h), "shape", INTS(r, 2, row)) : NULL;
  Value *ge = h2 ? CALL(r, NULL, "ge.Tensor", "self", T(h2), "other", T(lo2)) : NULL;
  Value *lt = ge ? CALL(r, NULL, "lt.Tensor", "self", T(h2), "other", T(hi2)) : NULL;
  Value *m = lt ? CALL(r, NULL, "logical_and", "self", T(ge), "other", T(lt)) : NULL;
  Value *len = m ? CALL(r, NULL, "sub.Tensor", "self", T(hi2), "other", T(lo2)) : NULL;
  Value *mf = len ? CALL(r, NULL, "_to_copy", "self", T(m), "dtype", DT(dt)) : NULL;
  return mf ? CALL(r, NULL, "div.Tensor", "self", T(mf), "other", T(len)) : NULL;
}

/* Adaptive average pooling's input gradient: the pooling is A_h X A_w^T, so the gradient is
 * A_h^T G A_w, two products with the window matrices (any window overlap). */
Value *adaptive_avg_pool_grad(Rw *r, Value *g, Value *x, Value *into) {
  int64_t in[2], on[2];
  for (int i = 0; i < 2; i++)
    if (!expr_is_const(x->sizes[x->rank - 2 + i], &in[i]) || !expr_is_const(g->sizes[g->rank - 2 + i], &on[i])) {
      gg_error(r->g->ctx, "%s: node %s: adaptive pooling's gradient needs static spatial sizes", r->g->path, gg_quote(r->g->ctx, r->orig->name));
      return NULL;
    }
  Value *ah = adaptive_matrix(r, in[0], on[0], g->dtype), *aw = ah ? adaptive_matrix(r, in[1], on[1], g->dtype) : NULL;
  Value *aht = aw ? CALL(r, NULL, "t", "self", T(ah)) : NULL;
  Value *t = aht ? CALL(r, NULL, "matmul", "self", T(aht), "other", T(g)) : NULL;
  return t ? CALL(r, into, "matmul", "self", T(t), "other", T(aw)) : NULL;
}

int decomp_avg_pool_backward(Rw *r, Node *n) {
  Value *g = rw_targ(n, "grad_output"), *x = rw_targ(n, "self");
  if (!rw_arg(n, "kernel_size")) return adaptive_avg_pool_grad(r, g, x, n->outs[0]) ? 0 : -1;
  int64_t zero[3] = {0, 0, 0}, k[3], st[3], pd[3];
  pool3(n, "kernel_size", zero, k);
  pool3(n, "stride", k, st);
  pool3(n, "padding", zero, pd);
  return avg_pool_grad(r, g, x, k, st, pd, rw_arg(n, "count_include_pad")->u.b, rw_arg(n, "divisor_override"), n->outs[0]) ? 0 : -1;
}

/* as_strided: of self flattened (a view where self is contiguous, else a copy in order), whose
 * layout the view rule then sets from size, stride and offset */
int decomp_as_strided(Rw *r, Node *n) {
  int64_t all[1] = {-1};
  Value *flat = CALL(r, NULL, "reshape", "self", T(rw_targ(n, "self")), "shape", INTS(r, 1, all));
  Arg *args = arena_array(r->g->ctx->arena, (size_t)n->op->nargs + 1, sizeof *args);
  memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
  args[0] = T(flat);
  return flat && rw_node(r, n->outs[0], n->op, args) ? 0 : -1;
}

/* [C*kh*kw, 1, kh, kw]: tap t of each channel's kh*kw is 1 at kernel position t (eq of two aranges),
 * the kernel of im2col (a convolution with C groups) and col2im (its transpose) */
static Value *onehot_taps(Rw *r, int64_t C, const int64_t *k, DType dt) {
  int64_t K = k[0] * k[1], kc[2] = {K, 1}, kr[2] = {1, K}, w5[5] = {1, K, 1, k[0], k[1]}, we[5] = {C, K, 1, k[0], k[1]}, w4[4] = {C * K, 1, k[0], k[1]};
  Value *ar = CALL(r, NULL, "arange", "end", INT(r, K), "dtype", DT(DT_I64));
  Value *col = ar ? CALL(r, NULL, "reshape", "self", T(ar), "shape", INTS(r, 2, kc)) : NULL;
  Value *row = col ? CALL(r, NULL, "reshape", "self", T(ar), "shape", INTS(r, 2, kr)) : NULL;
  Value *eye = row ? CALL(r, NULL, "eq.Tensor", "self", T(col), "other", T(row)) : NULL;
  Value *ef = eye ? CALL(r, NULL, "_to_copy", "self", T(eye), "dtype", DT(dt)) : NULL;
  Value *e5 = ef ? CALL(r, NULL, "reshape", "self", T(ef), "shape", INTS(r, 5, w5)) : NULL;
  Value *ex = e5 ? CALL(r, NULL, "expand", "self", T(e5), "size", INTS(r, 5, we)) : NULL;
  return ex ? CALL(r, NULL, "reshape", "self", T(ex), "shape", INTS(r, 4, w4)) : NULL;
}

/* im2col (unfold): a convolution with the one-hot kernel (C groups), its [N, C*K, Lh, Lw] output
 * viewed [N, C*K, L] */
int decomp_im2col(Rw *r, Node *n) {
  Value *x = rw_targ(n, "self"), *y = n->outs[0];
  int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0}, k[3], dl[3], pd[3], st[3], C;
  pool3(n, "kernel_size", one, k);
  pool3(n, "dilation", one, dl);
  pool3(n, "padding", zero, pd);
  pool3(n, "stride", one, st);
  expr_is_const(x->sizes[x->rank - 3], &C);
  Value *x4 = x->rank == 4 ? x : CALL(r, NULL, "unsqueeze", "self", T(x), "dim", INT(r, 0));
  Value *w = x4 ? onehot_taps(r, C, k, x->dtype) : NULL;
  Value *c = w ? CALL(r, NULL, "convolution", "input", T(x4), "weight", T(w), "bias", NONE(), "stride", INTS(r, 2, st), "padding", INTS(r, 2, pd),
                      "dilation", INTS(r, 2, dl), "transposed", BO(false), "output_padding", INTS(r, 2, zero), "groups", INT(r, C)) : NULL;
  return c && CALL(r, y, "reshape", "self", T(c), "shape", EXPRS(r, y->rank, y->sizes)) ? 0 : -1;
}

/* _weight_norm: v * (g / ||v||), the 2-norm over every dim but dim (all of them for -1) */
int decomp_weight_norm(Rw *r, Node *n) {
  Value *v = rw_targ(n, "v"), *g = rw_targ(n, "g");
  int64_t d = node_int_arg(n, "dim", 0), dims[GG_MAX_RANK];
  int nd = 0;
  for (int k = 0; k < v->rank; k++) if (k != d) dims[nd++] = k;
  Value *nv = CALL(r, NULL, "linalg_vector_norm", "self", T(v), "ord", FL(2), "dim", INTS(r, nd, dims), "keepdim", BO(true));
  const Expr *gs[GG_MAX_RANK];
  for (int k = 0; k < v->rank; k++) gs[k] = k == d ? v->sizes[k] : expr_const(r->g->ctx->arena, 1);
  Value *gr = nv ? CALL(r, NULL, "reshape", "self", T(g), "shape", EXPRS(r, v->rank, gs)) : NULL;
  if (d < 0 && nv) gr = CALL(r, NULL, "reshape", "self", T(g), "shape", EXPRS(r, v->rank, nv->sizes));
  Value *f = gr ? CALL(r, NULL, "div.Tensor", "self", T(gr), "other", T(nv)) : NULL;
  return f && CALL(r, n->outs[0], "mul.Tensor", "self", T(v), "other", T(f)) ? 0 : -1;
}

/* repeat_interleave.self_int: unsqueeze after dim, expand by repeats, merge the two (flattened first
 * when dim is None) */
int decomp_repeat_interleave(Rw *r, Node *n) {
  Arena *a = r->g->ctx->arena;
  Value *x = rw_targ(n, "self"), *y = n->outs[0];
  const Arg *da = rw_arg(n, "dim");
  int64_t d = 0, rep = node_int_arg(n, "repeats", 1), all[1] = {-1};
  if (!da || da->k != AK_INT) x = CALL(r, NULL, "reshape", "self", T(x), "shape", INTS(r, 1, all));
  else {
    expr_is_const(da->u.i, &d);
    if (d < 0) d += x->rank;
  }
  if (!x) return -1;
  Value *u = CALL(r, NULL, "unsqueeze", "self", T(x), "dim", INT(r, d + 1));
  const Expr *ex[GG_MAX_RANK + 1];
  for (int k = 0; k <= x->rank; k++) ex[k] = k <= d ? x->sizes[k] : k == d + 1 ? expr_const(a, rep) : x->sizes[k - 1];
  Value *e = u ? CALL(r, NULL, "expand", "self", T(u), "size", EXPRS(r, x->rank + 1, ex)) : NULL;
  Value *c = e ? CALL(r, NULL, "clone", "self", T(e)) : NULL;
  return c && CALL(r, y, "reshape", "self", T(c), "shape", EXPRS(r, y->rank, y->sizes)) ? 0 : -1;
}

/* meshgrid: tensor i reshaped to size 1 but at its dim, expanded to the grid */
int decomp_meshgrid(Rw *r, Node *n) {
  Arena *a = r->g->ctx->arena;
  const Arg *ta = rw_arg(n, "tensors"), *ix = rw_arg(n, "indexing");
  bool xy = ix && ix->k == AK_STR && !strcmp(ix->u.s, "xy") && ta->n >= 2;
  for (int i = 0; i < ta->n; i++) {
    Value *y = n->outs[i];
    int at = xy && i < 2 ? 1 - i : i;
    const Expr *sz[GG_MAX_RANK];
    for (int k = 0; k < y->rank; k++) sz[k] = k == at ? y->sizes[k] : expr_const(a, 1);
    Value *v = CALL(r, NULL, "reshape", "self", T(ta->u.ts[i]), "shape", EXPRS(r, y->rank, sz));
    if (!v || !CALL(r, y, "expand", "self", T(v), "size", EXPRS(r, y->rank, y->sizes))) return -1;
  }
  return 0;
}

/* bicubic upsampling is separable and linear: out = A_h X A_w^T, each [out, in] matrix the sum over
 * the 4 taps of a one-hot row (the tap clamped into the input) times its cubic weight (A = -0.75),
 * source indices as PyTorch's (align_corners, scale factors, no clamping of the source) */
static Value *cubic_matrix(Rw *r, int64_t in, int64_t out, double sf, bool align, DType dt) {
  double scale = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0) : sf > 0 ? 1.0 / sf : (double)in / (double)out;
  Value *o = CALL(r, NULL, "arange", "end", INT(r, out), "dtype", DT(DT_F64));
  Value *src = align ? sc(r, "mul.Tensor", o, scale) : sc(r, "sub.Tensor", sc(r, "mul.Tensor", sc(r, "add.Tensor", o, 0.5), scale), 0.5);
  Value *f = src ? CALL(r, NULL, "floor", "self", T(src)) : NULL;
  Value *t = tt(r, "sub.Tensor", src, f);
  double A = -0.75;
  Value *w[4] = {gs_cubic2(r, sc(r, "add.Tensor", t, 1), A), gs_cubic1(r, t, A), gs_cubic1(r, sc(r, "rsub.Scalar", t, 1), A), gs_cubic2(r, sc(r, "rsub.Scalar", t, 2), A)};
  int64_t col[2] = {out, 1}, row[2] = {1, in};
  Value *cols = CALL(r, NULL, "reshape", "self", T(CALL(r, NULL, "arange", "end", INT(r, in), "dtype", DT(DT_I64))), "shape", INTS(r, 2, row));
  Value *m = NULL;
  for (int k = 0; k < 4; k++) {
    Value *tap = f ? CALL(r, NULL, "clamp", "self", T(sc(r, "add.Tensor", f, k - 1)), "min", FL(0), "max", FL((double)(in - 1))) : NULL;
    Value *ti = tap ? CALL(r, NULL, "reshape", "self", T(CALL(r, NULL, "_to_copy", "self", T(tap), "dtype", DT(DT_I64))), "shape", INTS(r, 2, col)) : NULL;
    Value *oh = ti && cols ? CALL(r, NULL, "_to_copy", "self", T(tt(r, "eq.Tensor", ti, cols)), "dtype", DT(DT_F64)) : NULL;
    Value *term = oh && w[k] ? tt(r, "mul.Tensor", oh, CALL(r, NULL, "reshape", "self", T(w[k]), "shape", INTS(r, 2, col))) : NULL;
    m = m ? tt(r, "add.Tensor", m, term) : term;
  }
  return m ? CALL(r, NULL, "_to_copy", "self", T(m), "dtype", DT(dt)) : NULL;
}

int decomp_upsample_bicubic(Rw *r, Node *n) {
  Value *x = rw_targ(n, "input"), *y = n->outs[0];
  const Arg *sf = rw_arg(n, "scale_factors");
  bool align = rw_arg(n, "align_corners")->u.b;
  int64_t in[2], on[2];
  for (int i = 0; i < 2; i++)
    if (!expr_is_const(x->sizes[2 + i], &in[i]) || !expr_is_const(y->sizes[2 + i], &on[i]))
      return gg_error(r->g->ctx, "%s: node %s: bicubic upsampling needs static sizes", r->g->path, gg_quote(r->g->ctx, n->name));
  double s[2] = {0, 0};
  if (sf && sf->k == AK_FLOATS && sf->n == 2) s[0] = sf->u.fs[0], s[1] = sf->u.fs[1];
  Value *ah = cubic_matrix(r, in[0], on[0], s[0], align, x->dtype), *aw = ah ? cubic_matrix(r, in[1], on[1], s[1], align, x->dtype) : NULL;
  Value *t = aw ? CALL(r, NULL, "matmul", "self", T(ah), "other", T(x)) : NULL;
  Value *awt = t ? CALL(r, NULL, "t", "self", T(aw)) : NULL;
  return awt && CALL(r, y, "matmul", "self", T(t), "other", T(awt)) ? 0 : -1;
}

/* lstm.input, unrolled over the (static) sequence: per layer and direction, W_ih x + b_ih + b_hh
 * for every step at once (one linear), then per step the hidden state's linear, the four gates as
 * slices, c = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c); the steps stacked, the
 * directions concatenated */
int decomp_lstm(Rw *r, Node *n) {
  Arena *a = r->g->ctx->arena;
  Value *x = rw_targ(n, "input");
  const Arg *hx = rw_arg(n, "hx"), *pa = rw_arg(n, "params");
  int64_t L = node_int_arg(n, "num_layers", 1), Tn, H;
  bool bias = rw_arg(n, "has_biases")->u.b, bi = rw_arg(n, "bidirectional")->u.b, bf = rw_arg(n, "batch_first")->u.b, unb = x->rank == 2;
  int D = bi ? 2 : 1, per = bias ? 4 : 2;
  Value *h0 = hx->u.ts[0], *c0 = hx->u.ts[1];
  if (!expr_is_const(x->sizes[unb || !bf ? 0 : 1], &Tn) || !expr_is_const(h0->sizes[h0->rank - 1], &H) || Tn > 4096)
    return gg_error(r->g->ctx, "%s: node %s: lstm needs a static sequence length (at most 4096) and hidden size", r->g->path, gg_quote(r->g->ctx, n->name));
  Value *in = unb ? CALL(r, NULL, "unsqueeze", "self", T(x), "dim", INT(r, 1)) : bf ? CALL(r, NULL, "transpose.int", "self", T(x), "dim0", INT(r, 0), "dim1", INT(r, 1)) : x;
  if (unb && in) h0 = CALL(r, NULL, "unsqueeze", "self", T(h0), "dim", INT(r, 1)), c0 = CALL(r, NULL, "unsqueeze", "self", T(c0), "dim", INT(r, 1));
  if (!in || !h0 || !c0) return -1;
  Arg hl = {.k = AK_TENSORS, .n = (int)(L * D)}, cl = hl;
  hl.u.ts = arena_array(a, (size_t)(L * D) + 1, sizeof *hl.u.ts);
  cl.u.ts = arena_array(a, (size_t)(L * D) + 1, sizeof *cl.u.ts);
  for (int64_t l = 0; l < L; l++) {
    Arg dirs = {.k = AK_TENSORS, .n = D};
    dirs.u.ts = arena_array(a, 3, sizeof *dirs.u.ts);
    for (int d = 0; d < D; d++) {
      const int pi = (int)((l * D + d) * per);
      Value *wih = pa->u.ts[pi], *whh = pa->u.ts[pi + 1];
      Value *pre = CALL(r, NULL, "linear", "input", T(in), "weight", T(wih), "bias", bias ? T(pa->u.ts[pi + 2]) : NONE());
      if (pre && bias) pre = CALL(r, NULL, "add.Tensor", "self", T(pre), "other", T(pa->u.ts[pi + 3]));
      Value *h = pre ? CALL(r, NULL, "select.int", "self", T(h0), "dim", INT(r, 0), "index", INT(r, l * D + d)) : NULL;
      Value *c = h ? CALL(r, NULL, "select.int", "self", T(c0), "dim", INT(r, 0), "index", INT(r, l * D + d)) : NULL;
      Arg steps = {.k = AK_TENSORS, .n = (int)Tn};
      steps.u.ts = arena_array(a, (size_t)Tn + 1, sizeof *steps.u.ts);
      for (int64_t s = 0; s < Tn && c; s++) {
        int64_t t = d ? Tn - 1 - s : s;
        Value *xt = CALL(r, NULL, "select.int", "self", T(pre), "dim", INT(r, 0), "index", INT(r, t));
        Value *hh = xt ? CALL(r, NULL, "linear", "input", T(h), "weight", T(whh), "bias", NONE()) : NULL;
        Value *gt = tt(r, "add.Tensor", xt, hh), *q[4];
        for (int k = 0; k < 4; k++) {
          q[k] = gt ? CALL(r, NULL, "slice.Tensor", "self", T(gt), "dim", INT(r, -1), "start", INT(r, k * H), "end", INT(r, (k + 1) * H)) : NULL;
          q[k] = q[k] ? CALL(r, NULL, k == 2 ? "tanh" : "sigmoid", "self", T(q[k])) : NULL;
        }
        c = tt(r, "add.Tensor", tt(r, "mul.Tensor", q[1], c), tt(r, "mul.Tensor", q[0], q[2]));
        h = c ? tt(r, "mul.Tensor", q[3], CALL(r, NULL, "tanh", "self", T(c))) : NULL;
        steps.u.ts[t] = h;
        if (!h) return -1;
      }
      if (!c) return -1;
      hl.u.ts[l * D + d] = h;
      cl.u.ts[l * D + d] = c;
      if (!(dirs.u.ts[d] = CALL(r, NULL, "stack", "tensors", steps, "dim", INT(r, 0)))) return -1;
    }
    in = D == 1 ? dirs.u.ts[0] : CALL(r, NULL, "cat", "tensors", dirs, "dim", INT(r, -1));
    if (!in) return -1;
  }
  Value *out = unb ? CALL(r, NULL, "squeeze.dim", "self", T(in), "dim", INT(r, 1)) : bf ? CALL(r, NULL, "transpose.int", "self", T(in), "dim0", INT(r, 0), "dim1", INT(r, 1)) : in;
  Value *hs = out ? CALL(r, NULL, "stack", "tensors", hl, "dim", INT(r, 0)) : NULL, *cs = hs ? CALL(r, NULL, "stack", "tensors", cl, "dim", INT(r, 0)) : NULL;
  if (!cs || !CALL(r, n->outs[0], "alias", "self", T(out))) return -1;
  /* h_n and c_n in the shape the node has (unbatched, or with the unit dim of PyTorch's decomposition) */
  return CALL(r, n->outs[1], "reshape", "self", T(hs), "shape", EXPRS(r, n->outs[1]->rank, n->outs[1]->sizes)) &&
         CALL(r, n->outs[2], "reshape", "self", T(cs), "shape", EXPRS(r, n->outs[2]->rank, n->outs[2]->sizes)) ? 0 : -1;
}

/* col2im (fold): a transposed convolution of the columns, viewed [N, C*K, Lh, Lw], with a one-hot
 * kernel (tap t of each channel's K taps to kernel position t; C groups), over the padded output,
 * then cropped to it */
int decomp_col2im(Rw *r, Node *n) {
  Value *x = rw_targ(n, "self"), *y = n->outs[0];
  int64_t os[3], k[3], dl[3], pd[3], st[3], nb[2], one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};   /* pool3 fills 3 */
  pool3(n, "output_size", one, os);
  pool3(n, "kernel_size", one, k);
  pool3(n, "dilation", one, dl);
  pool3(n, "padding", zero, pd);
  pool3(n, "stride", one, st);
  int64_t K = k[0] * k[1], C;
  expr_is_const(y->sizes[y->rank - 3], &C);
  for (int i = 0; i < 2; i++) nb[i] = (os[i] + 2 * pd[i] - dl[i] * (k[i] - 1) - 1) / st[i] + 1;
  int64_t x4[4] = {-1, C * K, nb[0], nb[1]};
  Value *xv = CALL(r, NULL, "reshape", "self", T(x), "shape", INTS(r, 4, x4));
  Value *w = xv ? onehot_taps(r, C, k, x->dtype) : NULL;
  Value *t = w ? CALL(r, NULL, "convolution", "input", T(xv), "weight", T(w), "bias", NONE(), "stride", INTS(r, 2, st), "padding", INTS(r, 2, zero),
                      "dilation", INTS(r, 2, dl), "transposed", BO(true), "output_padding", INTS(r, 2, zero), "groups", INT(r, C)) : NULL;
  if (!t) return -1;
  int64_t L[2] = {(nb[0] - 1) * st[0] + dl[0] * (k[0] - 1) + 1, (nb[1] - 1) * st[1] + dl[1] * (k[1] - 1) + 1};
  int64_t pads[4] = {-pd[1], os[1] + pd[1] - L[1], -pd[0], os[0] + pd[0] - L[0]};
  Value *crop = CALL(r, NULL, "constant_pad_nd", "self", T(t), "pad", INTS(r, 4, pads));
  return crop && CALL(r, y, "reshape", "self", T(crop), "shape", EXPRS(r, y->rank, y->sizes)) ? 0 : -1;
}

/* p-norm of d along its last dim (linalg_vector_norm: every p, 0 and infinity included) */
static Value *pnorm_last(Rw *r, Value *d, double p, Value *into) {
  int64_t last[1] = {-1};
  return CALL(r, into, "linalg_vector_norm", "self", T(d), "ord", FL(p), "dim", INTS(r, 1, last));
}

/* _cdist_forward: the norm of x1[..., :, None, :] - x2[..., None, :, :] over the last dim */
int decomp_cdist(Rw *r, Node *n) {
  Value *a = rw_targ(n, "x1"), *b = rw_targ(n, "x2");
  Value *au = CALL(r, NULL, "unsqueeze", "self", T(a), "dim", INT(r, -2));
  Value *bu = au ? CALL(r, NULL, "unsqueeze", "self", T(b), "dim", INT(r, -3)) : NULL;
  Value *d = bu ? CALL(r, NULL, "sub.Tensor", "self", T(au), "other", T(bu)) : NULL;
  return d && pnorm_last(r, d, rw_farg(n, "p", 2), n->outs[0]) ? 0 : -1;
}

/* _pdist_forward: rows i and j of each pair k (row order of i < j) picked by index_select, with i
 * and j from k in closed form: i = N - 2 - floor((sqrt(4N(N-1) - 7 - 8k) - 1) / 2) (the square
 * root of an integer: exact where it is one, so the floor is too), j = k + i + 1 - N(N-1)/2 +
 * (N-i)(N-i-1)/2 */
int decomp_pdist(Rw *r, Node *n) {
  Value *x = rw_targ(n, "self");
  int64_t N;
  expr_is_const(x->sizes[0], &N);
  int64_t K = N * (N - 1) / 2;
  Value *k = CALL(r, NULL, "arange", "end", INT(r, K), "dtype", DT(DT_F64));
  Value *m = k ? CALL(r, NULL, "mul.Tensor", "self", T(k), "other", FL(-8)) : NULL;
  m = m ? CALL(r, NULL, "add.Tensor", "self", T(m), "other", FL((double)(4 * N * (N - 1) - 7))) : NULL;
  Value *sq = m ? CALL(r, NULL, "sqrt", "self", T(m)) : NULL;
  Value *h = sq ? CALL(r, NULL, "mul.Tensor", "self", T(CALL(r, NULL, "sub.Tensor", "self", T(sq), "other", FL(1))), "other", FL(0.5)) : NULL;
  Value *fl = h ? CALL(r, NULL, "floor", "self", T(h)) : NULL;
  Value *i = fl ? CALL(r, NULL, "rsub.Scalar", "self", T(fl), "other", FL((double)(N - 2))) : NULL;
  Value *ni = i ? CALL(r, NULL, "rsub.Scalar", "self", T(i), "other", FL((double)N)) : NULL;
  Value *tri = ni ? CALL(r, NULL, "mul.Tensor", "self", T(ni), "other", T(CALL(r, NULL, "sub.Tensor", "self", T(ni), "other", FL(1)))) : NULL;
  tri = tri ? CALL(r, NULL, "mul.Tensor", "self", T(tri), "other", FL(0.5)) : NULL;
  Value *j = tri ? CALL(r, NULL, "add.Tensor", "self", T(CALL(r, NULL, "add.Tensor", "self", T(k), "other", T(i))), "other", T(tri)) : NULL;
  j = j ? CALL(r, NULL, "add.Tensor", "self", T(j), "other", FL((double)(1 - K))) : NULL;
  Value *ii = j ? CALL(r, NULL, "_to_copy", "self", T(i), "dtype", DT(DT_I64)) : NULL;
  Value *jj = ii ? CALL(r, NULL, "_to_copy", "self", T(j), "dtype", DT(DT_I64)) : NULL;
  Value *xi = jj ? CALL(r, NULL, "index_select", "self", T(x), "dim", INT(r, 0), "index", T(ii)) : NULL;
  Value *xj = xi ? CALL(r, NULL, "index_select", "self", T(x), "dim", INT(r, 0), "index", T(jj)) : NULL;
  Value *d = xj ? CALL(r, NULL, "sub.Tensor", "self", T(xi), "other", T(xj)) : NULL;
  return d && pnorm_last(r, d, rw_farg(n, "p", 2), n->outs[0]) ? 0 : -1;
}

/* scatter_reduce.two: without include_self, self's written positions first set to the reduction's
 * identity (scatter.value); mean as the sum over a count of contributions (scatter_add of ones),
 * integer means rounded down as PyTorch's. What is left is scatter_reduce with include_self of sum,
 * prod, amax or amin, emit_scatter's kernel. */
int decomp_scatter_reduce(Rw *r, Node *n) {
  const char *red = rw_arg(n, "reduce")->u.s;
  bool self = rw_arg(n, "include_self")->u.b, mean = !strcmp(red, "mean");
  if (self && !mean) { rw_push(r, n); return 0; }
  Value *x = rw_targ(n, "self"), *ix = rw_targ(n, "index"), *src = rw_targ(n, "src");
  const Arg *dim = rw_arg(n, "dim");
  const DTypeInfo *di = dtype_info(x->dtype);
  bool fl = di->is_float;
  int bits = 8 * di->size;
  Arg ident = FL(0);
  if (!strcmp(red, "prod")) ident = FL(1);
  else if (!strcmp(red, "amax")) ident = fl ? FL(-INFINITY) : INT(r, x->dtype == DT_BOOL ? 0 : di->is_signed ? (bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1))) : 0);
  else if (!strcmp(red, "amin")) ident = fl ? FL(INFINITY) : INT(r, x->dtype == DT_BOOL ? 1 : di->is_signed ? (bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1) : (bits == 64 ? -1 : ((int64_t)1 << bits) - 1));
  Value *base = self ? x : CALL(r, NULL, "scatter.value", "self", T(x), "dim", *dim, "index", T(ix), "value", ident);
  if (!base) return -1;
  if (!mean) return CALL(r, n->outs[0], "scatter_reduce.two", "self", T(base), "dim", *dim, "index", T(ix), "src", T(src), "reduce", *rw_arg(n, "reduce"), "include_self", BO(true)) ? 0 : -1;
  Value *sum = CALL(r, NULL, "scatter_add", "self", T(base), "dim", *dim, "index", T(ix), "src", T(src));
  Value *c0 = sum ? CALL(r, NULL, "ones_like", "self", T(x)) : NULL;
  if (c0 && !self) c0 = CALL(r, NULL, "scatter.value", "self", T(c0), "dim", *dim, "index", T(ix), "value", FL(0));
  Value *one = c0 ? CALL(r, NULL, "ones_like", "self", T(src)) : NULL;
  Value *cnt = one ? CALL(r, NULL, "scatter_add", "self", T(c0), "dim", *dim, "index", T(ix), "src", T(one)) : NULL;
  if (!cnt) return -1;   /* >= 1 everywhere: positions no index reaches keep self over 1 */
  return CALL(r, n->outs[0], fl ? "div.Tensor" : "floor_divide", "self", T(sum), "other", T(cnt)) ? 0 : -1;
}

/* ---- grid_sampler_2d as gathers (interp.c's eval_grid_sampler is the same arithmetic) */


/* PyTorch's reflect_coordinates: x mirrored into [lo2 / 2, hi2 / 2] */
static Value *gs_reflect(Rw *r, Value *x, double lo2, double hi2) {
  if (lo2 == hi2) return sc(r, "mul.Tensor", x, 0);
  double mn = lo2 / 2, span = (hi2 - lo2) / 2;
  Value *in = x ? CALL(r, NULL, "abs", "self", T(sc(r, "sub.Tensor", x, mn))) : NULL;
  Value *extra = sc(r, "fmod.Scalar", in, span);
  Value *flips = in ? CALL(r, NULL, "floor", "self", T(sc(r, "div.Tensor", in, span))) : NULL;
  Value *even = sc(r, "eq.Scalar", sc(r, "remainder.Scalar", flips, 2), 0);
  Value *a = sc(r, "add.Tensor", extra, mn), *b = extra ? CALL(r, NULL, "rsub.Scalar", "self", T(extra), "other", FL(span + mn)) : NULL;
  return even && a && b ? CALL(r, NULL, "where.self", "condition", T(even), "self", T(a), "other", T(b)) : NULL;
}

/* PyTorch's compute_coordinates: border clips, reflection mirrors then clips */
static Value *gs_pad(Rw *r, Value *x, int64_t size, int pm, bool align) {
  if (pm == 2) x = align ? gs_reflect(r, x, 0, 2.0 * (double)(size - 1)) : gs_reflect(r, x, -1, 2.0 * (double)size - 1);
  if (pm >= 1 && x) x = CALL(r, NULL, "clamp", "self", T(x), "min", FL(0), "max", FL((double)(size - 1)));
  return x;
}

/* The pixels of flat [N, C, H*W] at integral coordinates tx, ty [N, Ho, Wo] times weight w (NULL: 1),
 * 0 outside the input: [N, C, Ho*Wo]. Coordinates outside (NaN too) are replaced before the cast. */
static Value *gs_tap(Rw *r, Value *flat, Value *tx, Value *ty, int64_t H, int64_t W, Value *w) {
  Value *v = tt(r, "logical_and", sc(r, "ge.Scalar", tx, 0), sc(r, "le.Scalar", tx, (double)(W - 1)));
  v = tt(r, "logical_and", v, tt(r, "logical_and", sc(r, "ge.Scalar", ty, 0), sc(r, "le.Scalar", ty, (double)(H - 1))));
  if (!v) return NULL;
  Value *cx = CALL(r, NULL, "where.self", "condition", T(v), "self", T(tx), "other", FL(0));
  Value *cy = cx ? CALL(r, NULL, "where.self", "condition", T(v), "self", T(ty), "other", FL(0)) : NULL;
  Value *lin = tt(r, "add.Tensor", sc(r, "mul.Tensor", cy, (double)W), cx);
  Value *li = lin ? CALL(r, NULL, "_to_copy", "self", T(lin), "dtype", DT(DT_I64)) : NULL;
  const Expr *N = flat->sizes[0], *Cc = flat->sizes[1], *one = expr_const(r->g->ctx->arena, 1), *m1 = expr_const(r->g->ctx->arena, -1);
  const Expr *i3[3] = {N, one, m1}, *e3[3] = {N, Cc, m1};
  Value *i = li ? CALL(r, NULL, "reshape", "self", T(li), "shape", EXPRS(r, 3, i3)) : NULL;
  Value *ie = i ? CALL(r, NULL, "expand", "self", T(i), "size", EXPRS(r, 3, e3)) : NULL;
  Value *px = ie ? CALL(r, NULL, "gather", "self", T(flat), "dim", INT(r, 2), "index", T(ie)) : NULL;
  Value *wm = px ? CALL(r, NULL, "where.self", "condition", T(v), "self", T(w ? w : sc(r, "add.Tensor", sc(r, "mul.Tensor", tx, 0), 1)), "other", FL(0)) : NULL;
  Value *wr = wm ? CALL(r, NULL, "reshape", "self", T(wm), "shape", EXPRS(r, 3, i3)) : NULL;
  return tt(r, "mul.Tensor", px, wr);
}

int decomp_grid_sampler(Rw *r, Node *n) {
  Value *x = rw_targ(n, "input"), *g = rw_targ(n, "grid");
  int im = (int)node_int_arg(n, "interpolation_mode", 0), pm = (int)node_int_arg(n, "padding_mode", 0);
  bool align = rw_arg(n, "align_corners")->u.b;
  int64_t H, W;
  expr_is_const(x->sizes[2], &H);
  expr_is_const(x->sizes[3], &W);
  const Expr *f3[3] = {x->sizes[0], x->sizes[1], expr_const(r->g->ctx->arena, H * W)};
  Value *flat = CALL(r, NULL, "reshape", "self", T(x), "shape", EXPRS(r, 3, f3));
  Value *gx = flat ? CALL(r, NULL, "select.int", "self", T(g), "dim", INT(r, 3), "index", INT(r, 0)) : NULL;
  Value *gy = gx ? CALL(r, NULL, "select.int", "self", T(g), "dim", INT(r, 3), "index", INT(r, 1)) : NULL;
  /* unnormalized as PyTorch's grid_sampler_unnormalize, in its order of operations */
  Value *ix = align ? sc(r, "mul.Tensor", sc(r, "div.Tensor", sc(r, "add.Tensor", gx, 1), 2), (double)(W - 1))
                    : sc(r, "div.Tensor", sc(r, "sub.Tensor", sc(r, "mul.Tensor", sc(r, "add.Tensor", gx, 1), (double)W), 1), 2);
  Value *iy = align ? sc(r, "mul.Tensor", sc(r, "div.Tensor", sc(r, "add.Tensor", gy, 1), 2), (double)(H - 1))
                    : sc(r, "div.Tensor", sc(r, "sub.Tensor", sc(r, "mul.Tensor", sc(r, "add.Tensor", gy, 1), (double)H), 1), 2);
  Value *acc = NULL;
  if (im == 2) {   /* bicubic: rows of 4 taps, each tap padded */
    Value *x0 = ix ? CALL(r, NULL, "floor", "self", T(ix)) : NULL, *y0 = iy ? CALL(r, NULL, "floor", "self", T(iy)) : NULL;
    Value *tx = tt(r, "sub.Tensor", ix, x0), *ty = tt(r, "sub.Tensor", iy, y0);
    double A = -0.75;
    Value *cx[4] = {gs_cubic2(r, sc(r, "add.Tensor", tx, 1), A), gs_cubic1(r, tx, A), gs_cubic1(r, sc(r, "rsub.Scalar", tx, 1), A), gs_cubic2(r, sc(r, "rsub.Scalar", tx, 2), A)};
    Value *cy[4] = {gs_cubic2(r, sc(r, "add.Tensor", ty, 1), A), gs_cubic1(r, ty, A), gs_cubic1(r, sc(r, "rsub.Scalar", ty, 1), A), gs_cubic2(r, sc(r, "rsub.Scalar", ty, 2), A)};
    for (int j = 0; j < 4; j++) {
      Value *py = gs_pad(r, sc(r, "add.Tensor", y0, j - 1), H, pm, align);
      py = py ? CALL(r, NULL, "trunc", "self", T(py)) : NULL;
      Value *row = NULL;
      for (int i = 0; i < 4; i++) {
        Value *px = gs_pad(r, sc(r, "add.Tensor", x0, i - 1), W, pm, align);
        px = px ? CALL(r, NULL, "trunc", "self", T(px)) : NULL;
        Value *t = gs_tap(r, flat, px, py, H, W, cx[i]);
        row = row ? tt(r, "add.Tensor", row, t) : t;
      }
      const Expr *i3[3] = {x->sizes[0], expr_const(r->g->ctx->arena, 1), expr_const(r->g->ctx->arena, -1)};
      Value *cyr = cy[j] ? CALL(r, NULL, "reshape", "self", T(cy[j]), "shape", EXPRS(r, 3, i3)) : NULL;
      Value *t = tt(r, "mul.Tensor", row, cyr);
      acc = acc ? tt(r, "add.Tensor", acc, t) : t;
    }
  } else {
    Value *px = gs_pad(r, ix, W, pm, align), *py = gs_pad(r, iy, H, pm, align);
    if (im == 1) acc = gs_tap(r, flat, px ? CALL(r, NULL, "round", "self", T(px)) : NULL, py ? CALL(r, NULL, "round", "self", T(py)) : NULL, H, W, NULL);
    else {
      Value *x0 = px ? CALL(r, NULL, "floor", "self", T(px)) : NULL, *y0 = py ? CALL(r, NULL, "floor", "self", T(py)) : NULL;
      Value *x1 = sc(r, "add.Tensor", x0, 1), *y1 = sc(r, "add.Tensor", y0, 1);
      Value *wx0 = tt(r, "sub.Tensor", x1, px), *wx1 = tt(r, "sub.Tensor", px, x0), *wy0 = tt(r, "sub.Tensor", y1, py), *wy1 = tt(r, "sub.Tensor", py, y0);
      Value *taps[4] = {gs_tap(r, flat, x0, y0, H, W, tt(r, "mul.Tensor", wx0, wy0)), gs_tap(r, flat, x1, y0, H, W, tt(r, "mul.Tensor", wx1, wy0)),
                        gs_tap(r, flat, x0, y1, H, W, tt(r, "mul.Tensor", wx0, wy1)), gs_tap(r, flat, x1, y1, H, W, tt(r, "mul.Tensor", wx1, wy1))};
      acc = tt(r, "add.Tensor", tt(r, "add.Tensor", taps[0], taps[1]), tt(r, "add.Tensor", taps[2], taps[3]));
    }
  }
  return acc && CALL(r, n->outs[0], "reshape", "self", T(acc), "shape", EXPRS(r, 4, n->outs[0]->sizes)) ? 0 : -1;
}

/* _embedding_bag: each position's bag is the count of bag starts at or before it, less one; rows
 * left out (padding_idx, or past offsets[B] with include_last_offset) become the reduction's identity;
 * sums and counts by index_put with accumulate, maxima by scatter_reduce (amax, then amin of the
 * positions reaching them for max_indices). Offsets are trusted to start at 0 and not decrease. */
int decomp_embedding_bag(Rw *r, Node *n) {
  Arena *a = r->g->ctx->arena;
  Value *w = rw_targ(n, "weight"), *ix = rw_targ(n, "indices"), *of = rw_targ(n, "offsets"), *psw = rw_targ(n, "per_sample_weights");
  int64_t mode = node_int_arg(n, "mode", 0), pad = node_int_arg(n, "padding_idx", -1), L, B, D, nof;
  bool last = rw_arg(n, "include_last_offset")->u.b;
  if (!expr_is_const(ix->sizes[0], &L) || !expr_is_const(w->sizes[1], &D)) return gg_error(r->g->ctx, "%s: node %s: _embedding_bag needs static sizes", r->g->path, gg_quote(r->g->ctx, n->name));
  expr_is_const(of->sizes[0], &nof);
  B = nof - last;
  int64_t col[2] = {L, 1}, row[2] = {1, B}, one_d[1] = {1}, bd[2] = {B, D}, ld[2] = {L, D}, bb[1] = {B};
  Value *pos = CALL(r, NULL, "arange", "end", INT(r, L), "dtype", DT(DT_I64));
  Value *o64 = pos ? CALL(r, NULL, "_to_copy", "self", T(of), "dtype", DT(DT_I64)) : NULL;
  Value *starts = o64 ? CALL(r, NULL, "slice.Tensor", "self", T(o64), "dim", INT(r, 0), "start", INT(r, 0), "end", INT(r, B)) : NULL;
  Value *ge = starts ? CALL(r, NULL, "ge.Tensor", "self", T(CALL(r, NULL, "reshape", "self", T(pos), "shape", INTS(r, 2, col))),
                            "other", T(CALL(r, NULL, "reshape", "self", T(starts), "shape", INTS(r, 2, row)))) : NULL;
  Value *cnt = ge ? CALL(r, NULL, "sum.dim_IntList", "self", T(ge), "dim", INTS(r, 1, one_d), "dtype", DT(DT_I64)) : NULL;
  Value *c1 = cnt ? CALL(r, NULL, "sub.Tensor", "self", T(cnt), "other", INT(r, 1)) : NULL;
  Value *bag = c1 ? CALL(r, NULL, "clamp_min", "self", T(c1), "min", INT(r, 0)) : NULL;
  if (!bag) return -1;
  Value *valid = pad >= 0 ? CALL(r, NULL, "ne.Scalar", "self", T(ix), "other", INT(r, pad)) : NULL;
  if (last) {
    Value *end = CALL(r, NULL, "select.int", "self", T(o64), "dim", INT(r, 0), "index", INT(r, B));
    Value *in = end ? CALL(r, NULL, "lt.Tensor", "self", T(pos), "other", T(end)) : NULL;
    valid = valid ? tt(r, "logical_and", valid, in) : in;
  }
  Value *rows = CALL(r, NULL, "embedding", "weight", T(w), "indices", T(ix));
  if (rows && psw) rows = tt(r, "mul.Tensor", rows, CALL(r, NULL, "reshape", "self", T(psw), "shape", INTS(r, 2, col)));
  Value *vcol = valid ? CALL(r, NULL, "reshape", "self", T(valid), "shape", INTS(r, 2, col)) : NULL;
  Value *vf = valid ? CALL(r, NULL, "_to_copy", "self", T(valid), "dtype", DT(w->dtype)) : CALL(r, NULL, "ones", "size", INTS(r, 1, &L), "dtype", DT(w->dtype));
  Arg bix = {.k = AK_TENSORS, .n = 1};
  bix.u.ts = arena_array(a, 2, sizeof *bix.u.ts);
  bix.u.ts[0] = bag;
  Value *zb = vf ? CALL(r, NULL, "zeros", "size", INTS(r, 1, bb), "dtype", DT(w->dtype)) : NULL;
  Value *count = zb ? CALL(r, NULL, "index_put", "self", T(zb), "indices", bix, "values", T(vf), "accumulate", BO(true)) : NULL;
  if (!rows || !count) return -1;
  Value *res;
  if (mode != 2) {
    Value *cr = vcol ? CALL(r, NULL, "where.self", "condition", T(vcol), "self", T(rows), "other", FL(0)) : rows;
    Value *z = cr ? CALL(r, NULL, "zeros", "size", INTS(r, 2, bd), "dtype", DT(w->dtype)) : NULL;
    res = z ? CALL(r, NULL, "index_put", "self", T(z), "indices", bix, "values", T(cr), "accumulate", BO(true)) : NULL;
    if (res && mode == 1) {
      Value *cm = CALL(r, NULL, "reshape", "self", T(CALL(r, NULL, "clamp_min", "self", T(count), "min", FL(1))), "shape", INTS(r, 2, (int64_t[]){B, 1}));
      res = tt(r, "div.Tensor", res, cm);
    }
    if (!res || !CALL(r, n->outs[0], "alias", "self", T(res))) return -1;
    if (!CALL(r, n->outs[3], "zeros", "size", EXPRS(r, 1, n->outs[3]->sizes), "dtype", DT(n->outs[3]->dtype))) return -1;
  } else {
    Value *cr = vcol ? CALL(r, NULL, "where.self", "condition", T(vcol), "self", T(rows), "other", FL(-INFINITY)) : rows;
    Value *bcol = CALL(r, NULL, "reshape", "self", T(bag), "shape", INTS(r, 2, col));
    Value *bidx = bcol ? CALL(r, NULL, "expand", "self", T(bcol), "size", INTS(r, 2, ld)) : NULL;
    Value *z = bidx ? CALL(r, NULL, "full", "size", INTS(r, 2, bd), "fill_value", FL(-INFINITY), "dtype", DT(w->dtype)) : NULL;
    Value *mx = z && cr ? CALL(r, NULL, "scatter_reduce.two", "self", T(z), "dim", INT(r, 0), "index", T(bidx), "src", T(cr), "reduce", (Arg){.k = AK_STR, .u.s = "amax"},
                               "include_self", BO(true)) : NULL;
    Value *has = mx ? CALL(r, NULL, "gt.Scalar", "self", T(CALL(r, NULL, "reshape", "self", T(count), "shape", INTS(r, 2, (int64_t[]){B, 1}))), "other", FL(0)) : NULL;
    res = has ? CALL(r, n->outs[0], "where.self", "condition", T(has), "self", T(mx), "other", FL(0)) : NULL;
    /* max_indices: the weight row at the first position (amin) whose value is its bag's maximum */
    Value *hit = res ? tt(r, "eq.Tensor", cr, CALL(r, NULL, "gather", "self", T(mx), "dim", INT(r, 0), "index", T(bidx))) : NULL;
    Value *pe = hit ? CALL(r, NULL, "expand", "self", T(CALL(r, NULL, "reshape", "self", T(pos), "shape", INTS(r, 2, col))), "size", INTS(r, 2, ld)) : NULL;
    Value *pm = pe ? CALL(r, NULL, "where.self", "condition", T(hit), "self", T(pe), "other", INT(r, L)) : NULL;
    Value *fL = pm ? CALL(r, NULL, "full", "size", INTS(r, 2, bd), "fill_value", INT(r, L), "dtype", DT(DT_I64)) : NULL;
    Value *first = fL ? CALL(r, NULL, "scatter_reduce.two", "self", T(fL), "dim", INT(r, 0), "index", T(bidx), "src", T(pm), "reduce", (Arg){.k = AK_STR, .u.s = "amin"},
                             "include_self", BO(true)) : NULL;
    Value *fc = first ? CALL(r, NULL, "clamp_max", "self", T(first), "max", INT(r, L - 1)) : NULL;
    Value *i64 = fc ? CALL(r, NULL, "_to_copy", "self", T(ix), "dtype", DT(n->outs[3]->dtype)) : NULL;
    Value *q = i64 && L > 0 ? CALL(r, NULL, "index_select", "self", T(i64), "dim", INT(r, 0), "index", T(CALL(r, NULL, "reshape", "self", T(fc), "shape", INTS(r, 1, (int64_t[]){-1})))) : NULL;
    Value *q2 = q ? CALL(r, NULL, "reshape", "self", T(q), "shape", INTS(r, 2, bd)) : NULL;
    if (!q2 || !CALL(r, n->outs[3], "where.self", "condition", T(has), "self", T(q2), "other", INT(r, 0))) return -1;
  }
  /* offset2bag (where PyTorch returns it) and bag_size: each position's bag, the rows each bag counted */
  if (n->outs[1]->rank == 1 && !(expr_is_const(n->outs[1]->sizes[0], &nof) && nof == 0)) {
    if (!CALL(r, n->outs[1], "_to_copy", "self", T(bag), "dtype", DT(n->outs[1]->dtype))) return -1;
  } else if (!CALL(r, n->outs[1], "zeros", "size", INTS(r, 1, (int64_t[]){0}), "dtype", DT(n->outs[1]->dtype))) return -1;
  return CALL(r, n->outs[2], "_to_copy", "self", T(count), "dtype", DT(n->outs[2]->dtype)) ? 0 : -1;
}

/* dropout in training: each element kept where a uniform draw is >= p, scaled by 1 / (1 - p);
 * native_dropout's mask is that comparison. In evaluation (or p = 0) the node stays: the identity. */
static bool dropout_draws(const Node *n) {   /* training with p > 0: not the identity */
  const Arg *tr = rw_arg(n, "train");
  return tr && tr->k == AK_BOOL && tr->u.b && rw_farg(n, "p", 0) > 0;
}

int decomp_dropout(Rw *r, Node *n) {
  double p = rw_farg(n, "p", 0);
  if (!dropout_draws(n)) { rw_push(r, n); return 0; }
  Value *x = rw_targ(n, "input") ? rw_targ(n, "input") : rw_targ(n, "self");
  Value *u = CALL(r, NULL, "rand_like", "self", T(x));
  Value *keep = u ? CALL(r, n->nouts == 2 ? n->outs[1] : NULL, "ge.Scalar", "self", T(u), "other", FL(p)) : NULL;
  Value *xs = keep ? CALL(r, NULL, "mul.Tensor", "self", T(x), "other", FL(p < 1 ? 1 / (1 - p) : 0)) : NULL;
  return xs && CALL(r, n->outs[0], "where.self", "condition", T(keep), "self", T(xs), "other", FL(0)) ? 0 : -1;
}

/* randperm: the indices that sort n uniform keys (53 bits; a stable sort) */
int decomp_randperm(Rw *r, Node *n) {
  Value *y = n->outs[0];
  Value *k = CALL(r, NULL, "rand", "size", EXPRS(r, 1, y->sizes), "dtype", DT(DT_F64));
  Value *s = k ? CALL(r, NULL, "sort", "self", T(k)) : NULL;
  return s && CALL(r, y, "_to_copy", "self", T(s->def->outs[1]), "dtype", DT(y->dtype)) ? 0 : -1;
}

/* ---- einsum: diagonals, sums and batched products, the operands taken from the left */

typedef struct ETerm { Value *v; int n; int l[GG_MAX_RANK]; } ETerm;

static bool e_has(const ETerm *t, int x) {
  for (int d = 0; d < t->n; d++) if (t->l[d] == x) return true;
  return false;
}

/* t with repeated subscripts taken on their diagonal (which diagonal() puts last) and the
 * subscripts keep[] does not want summed out */
static int e_prep(Rw *r, ETerm *t, const bool *keep) {
  for (bool again = true; again;) {
    again = false;
    for (int i = 0; i < t->n && !again; i++)
      for (int j = i + 1; j < t->n && !again; j++) {
        if (t->l[i] != t->l[j]) continue;
        int x = t->l[i], k = 0;
        if (!(t->v = CALL(r, NULL, "diagonal", "self", T(t->v), "offset", INT(r, 0), "dim1", INT(r, i), "dim2", INT(r, j)))) return -1;
        for (int d = 0; d < t->n; d++) if (d != i && d != j) t->l[k++] = t->l[d];
        t->l[k++] = x;
        t->n = k;
        again = true;
      }
  }
  int64_t dims[GG_MAX_RANK];
  int nd = 0, k = 0;
  for (int d = 0; d < t->n; d++) if (!keep[t->l[d]]) dims[nd++] = d;
  if (!nd) return 0;
  if (!(t->v = CALL(r, NULL, "sum.dim_IntList", "self", T(t->v), "dim", INTS(r, nd, dims)))) return -1;
  for (int d = 0; d < t->n; d++) if (keep[t->l[d]]) t->l[k++] = t->l[d];
  t->n = k;
  return 0;
}

/* t permuted to the subscripts `order` (all of t's), each broadcast to size[], then viewed with the
 * groups of n0, n1, n2 subscripts merged: [prod, prod, prod] */
static Value *e_group(Rw *r, const ETerm *t, const int *order, int n0, int n1, int n2, const Expr *const *size) {
  Arena *a = r->g->ctx->arena;
  int64_t perm[GG_MAX_RANK];
  const Expr *ex[GG_MAX_RANK], *g3[3] = {expr_const(a, 1), expr_const(a, 1), expr_const(a, 1)};
  for (int i = 0; i < t->n; i++) {
    for (int d = 0; d < t->n; d++) if (t->l[d] == order[i]) perm[i] = d;
    ex[i] = size[order[i]];
    int grp = i < n0 ? 0 : i < n0 + n1 ? 1 : 2;
    g3[grp] = expr_bin(a, E_MUL, g3[grp], ex[i]);
  }
  (void)n2;
  Value *p = CALL(r, NULL, "permute", "self", T(t->v), "dims", INTS(r, t->n, perm));
  Value *e = p ? CALL(r, NULL, "expand", "self", T(p), "size", EXPRS(r, t->n, ex)) : NULL;
  return e ? CALL(r, NULL, "reshape", "self", T(e), "shape", EXPRS(r, 3, g3)) : NULL;
}

int decomp_einsum(Rw *r, Node *n) {
  Arena *a = r->g->ctx->arena;
  const Arg *ta = rw_arg(n, "tensors");
  int ranks[GG_EINSUM_MAX_OPS];
  for (int k = 0; k < ta->n && k < GG_EINSUM_MAX_OPS; k++) ranks[k] = ta->u.ts[k]->rank;
  Einsum es;
  einsum_parse(rw_arg(n, "equation")->u.s, ta->n, ranks, &es);   /* the shape rule accepted it */
  const Expr *size[GG_EINSUM_MAX_LETTERS];
  for (int l = 0; l < es.nletters; l++) size[l] = expr_const(a, 1);
  for (int k = 0; k < es.nops; k++)
    for (int d = 0; d < ranks[k]; d++) {
      int64_t one;
      if (!(expr_is_const(ta->u.ts[k]->sizes[d], &one) && one == 1)) size[es.letters[k][d]] = ta->u.ts[k]->sizes[d];
    }
  bool in_out[GG_EINSUM_MAX_LETTERS] = {0};
  for (int i = 0; i < es.nout; i++) in_out[es.out[i]] = true;
  ETerm acc = {ta->u.ts[0], ranks[0], {0}};
  memcpy(acc.l, es.letters[0], sizeof(int) * (size_t)ranks[0]);
  for (int k = 1; k <= es.nops; k++) {
    /* what is needed after this step: the output's subscripts and the later operands' */
    bool keep[GG_EINSUM_MAX_LETTERS];
    memcpy(keep, in_out, sizeof keep);
    for (int j = k; j < es.nops; j++) for (int d = 0; d < ranks[j]; d++) keep[es.letters[j][d]] = true;
    if (k == es.nops) { if (e_prep(r, &acc, keep)) return -1; break; }
    ETerm b = {ta->u.ts[k], ranks[k], {0}};
    memcpy(b.l, es.letters[k], sizeof(int) * (size_t)ranks[k]);
    bool keep_a[GG_EINSUM_MAX_LETTERS], keep_b[GG_EINSUM_MAX_LETTERS];
    memcpy(keep_a, keep, sizeof keep);
    memcpy(keep_b, keep, sizeof keep);
    for (int d = 0; d < b.n; d++) keep_a[b.l[d]] = true;
    for (int d = 0; d < acc.n; d++) keep_b[acc.l[d]] = true;
    if (e_prep(r, &acc, keep_a) || e_prep(r, &b, keep_b)) return -1;
    int bat[GG_MAX_RANK], con[GG_MAX_RANK], lef[GG_MAX_RANK], rig[GG_MAX_RANK], nb = 0, nc = 0, nl = 0, nr = 0;
    for (int d = 0; d < acc.n; d++) {
      int x = acc.l[d];
      if (!e_has(&b, x)) lef[nl++] = x;
      else if (keep[x]) bat[nb++] = x;
      else con[nc++] = x;
    }
    for (int d = 0; d < b.n; d++) if (!e_has(&acc, b.l[d])) rig[nr++] = b.l[d];
    int oa[GG_MAX_RANK], ob[GG_MAX_RANK], o = 0;
    for (int i = 0; i < nb; i++) oa[o++] = bat[i];
    for (int i = 0; i < nl; i++) oa[o++] = lef[i];
    for (int i = 0; i < nc; i++) oa[o++] = con[i];
    o = 0;
    for (int i = 0; i < nb; i++) ob[o++] = bat[i];
    for (int i = 0; i < nc; i++) ob[o++] = con[i];
    for (int i = 0; i < nr; i++) ob[o++] = rig[i];
    Value *A3 = e_group(r, &acc, oa, nb, nl, nc, size), *B3 = A3 ? e_group(r, &b, ob, nb, nc, nr, size) : NULL;
    Value *y = B3 ? CALL(r, NULL, "bmm", "self", T(A3), "mat2", T(B3)) : NULL;
    if (!y) return -1;
    ETerm res = {NULL, nb + nl + nr, {0}};
    const Expr *rs[GG_MAX_RANK];
    for (int i = 0; i < res.n; i++) {
      res.l[i] = i < nb ? bat[i] : i < nb + nl ? lef[i - nb] : rig[i - nb - nl];
      rs[i] = size[res.l[i]];
    }
    if (!(res.v = CALL(r, NULL, "reshape", "self", T(y), "shape", EXPRS(r, res.n, rs)))) return -1;
    acc = res;
  }
  /* the output's order (its subscripts, each a dim of acc now); broadcast where an operand was 1 */
  int64_t perm[GG_MAX_RANK];
  const Expr *ex[GG_MAX_RANK];
  for (int i = 0; i < es.nout; i++) {
    for (int d = 0; d < acc.n; d++) if (acc.l[d] == es.out[i]) perm[i] = d;
    ex[i] = size[es.out[i]];
  }
  Value *p = CALL(r, NULL, "permute", "self", T(acc.v), "dims", INTS(r, es.nout, perm));
  return p && CALL(r, n->outs[0], "expand", "self", T(p), "size", EXPRS(r, es.nout, ex)) ? 0 : -1;
}

/* addcmul, addcdiv: self + value * (tensor1 op tensor2), as ops with derivative rules (one fused kernel) */
int decomp_addc(Rw *r, Node *n) {
  bool div = !strcmp(n->op->name, "addcdiv");
  Value *t = CALL(r, NULL, div ? "div.Tensor" : "mul.Tensor", "self", T(rw_targ(n, "tensor1")), "other", T(rw_targ(n, "tensor2")));
  Value *s = t ? CALL(r, NULL, "mul.Tensor", "self", T(t), "other", *rw_arg(n, "value")) : NULL;
  return s && CALL(r, n->outs[0], "add.Tensor", "self", T(rw_targ(n, "self")), "other", T(s)) ? 0 : -1;
}

/* to.dtype and friends: _to_copy when the dtype changes (a cast, which the schedule fuses as a
 * pointwise node), else the same tensor (alias) */
int decomp_to(Rw *r, Node *n) {
  Value *x = rw_targ(n, "self"), *y = n->outs[0];
  if (x->dtype == y->dtype) return CALL(r, y, "alias", "self", T(x)) ? 0 : -1;
  return CALL(r, y, "_to_copy", "self", T(x), "dtype", DT(y->dtype)) ? 0 : -1;
}

/* fill.Tensor: self's shape and dtype, every element the one-element value's (a copy of it) */
int decomp_fill_tensor(Rw *r, Node *n) {
  return CALL(r, n->outs[0], "copy", "self", T(rw_targ(n, "self")), "src", T(rw_targ(n, "value"))) ? 0 : -1;
}

/* ---- rules used only when training (--train): the backward is built from primitives */

/* --train: layer norm becomes native_layer_norm, its row kernel, whose derivative rule is
 * native_layer_norm_backward (expanded after autograd); rms_norm becomes pointwise ops and a mean over
 * the normalized dims, which have rules. */
int decomp_norm_primitives(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Value *x = rw_targ(n, "input");
  if (is_half(x)) return gg_error(c, "%s: node %s: half-precision normalization is not supported with --train", r->g->path, gg_quote(c, n->name));
  const Arg *ns = rw_arg(n, "normalized_shape");
  int64_t dims[GG_MAX_RANK];
  for (int i = 0; i < ns->n; i++) dims[i] = x->rank - ns->n + i;
  Value *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias");
  if (strcmp(n->op->name, "rms_norm")) {   /* layer norm: its row kernel, kept whole with its own derivative rule (grad_layer_norm) */
    if (n->nouts == 3) { rw_push(r, n); return 0; }
    return CALL(r, n->outs[0], "native_layer_norm", "input", T(x), "normalized_shape", *ns, "weight", T(w), "bias", T(b), "eps", FL(rw_farg(n, "eps", 1e-5))) ? 0 : -1;
  }
  {
    const Arg *ea = rw_arg(n, "eps");
    double eps = ea->k == AK_FLOAT ? ea->u.f : x->dtype == DT_F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    Value *sq = CALL(r, NULL, "mul.Tensor", "self", T(x), "other", T(x));
    Value *ms = sq ? CALL(r, NULL, "mean.dim", "self", T(sq), "dim", INTS(r, ns->n, dims), "keepdim", BO(true)) : NULL;
    Value *ve = ms ? CALL(r, NULL, "add.Tensor", "self", T(ms), "other", FL(eps)) : NULL;
    Value *rs = ve ? CALL(r, NULL, "rsqrt", "self", T(ve)) : NULL;
    Value *y = rs ? CALL(r, w ? NULL : n->outs[0], "mul.Tensor", "self", T(x), "other", T(rs)) : NULL;
    return y && (!w || affine(r, y, w, NULL, n->outs[0])) ? 0 : -1;
  }
}

/* max pooling through its indices, whose derivative rule scatters the gradient back */
int decomp_max_pool_indices(Rw *r, Node *n) {
  const OpDef *op = ops_find("max_pool2d_with_indices");
  Arg *args = arena_array(r->g->ctx->arena, (size_t)op->nargs + 1, sizeof *args);
  memcpy(args, n->args, sizeof *args * (size_t)op->nargs);   /* the same schema up to ceil_mode */
  return rw_node(r, n->outs[0], op, args) ? 0 : -1;
}

/* global average pooling is a mean over the plane */
int decomp_adaptive_avg_pool(Rw *r, Node *n) {
  Value *x = rw_targ(n, "self");
  const Arg *os = rw_arg(n, "output_size");
  int64_t a, b;
  if (!(expr_is_const(os->u.is[0], &a) && expr_is_const(os->u.is[os->n - 1], &b) && a == 1 && b == 1)) { rw_push(r, n); return 0; }
  int64_t dims[2] = {x->rank - 2, x->rank - 1};
  return CALL(r, n->outs[0], "mean.dim", "self", T(x), "dim", INTS(r, 2, dims), "keepdim", BO(true)) ? 0 : -1;
}


/* a pooling argument's values, up to 3 (one given: all; none, or fewer than 3: dflt's) */
static void pool3(const Node *n, const char *name, const int64_t *dflt, int64_t *v) {
  const Arg *a = rw_arg(n, name);
  for (int i = 0; i < 3; i++) {
    v[i] = dflt[i];
    if (a && a->k == AK_INTS && (a->n == 1 || i < a->n)) expr_is_const(a->u.is[a->n == 1 ? 0 : i], &v[i]);
  }
}

/* 3-d pooling as 2-d pooling over (H, W) with the depth as channels, then over (D, 1) of the result
 * viewed [M, 1, D, Ho*Wo]: windows, padding, ceil mode and both divisors are per dim, so the two
 * passes give the same windows (sums first, divided once, under divisor_override); max pooling's
 * flat indices d*H*W + h*W + w put together from the two passes' indices. */
int decomp_pool3d(Rw *r, Node *n) {
  Ctx *c = r->g->ctx;
  Arena *a = c->arena;
  Value *x = rw_targ(n, "self");
  int lead = x->rank - 3;
  const Expr *M = expr_const(a, 1);
  for (int d = 0; d < lead; d++) M = expr_bin(a, E_MUL, M, x->sizes[d]);
  const Expr *D = x->sizes[lead], *H = x->sizes[lead + 1], *W = x->sizes[lead + 2];
  const Expr *s4[4] = {M, D, H, W};
  Value *x4 = CALL(r, NULL, "reshape", "self", T(x), "shape", EXPRS(r, 4, s4));
  if (!x4) return -1;
  const char *name = n->op->name;
  Value *y1, *y2, *i1 = NULL, *i2 = NULL;
  if (strstr(name, "adaptive")) {
    const Arg *os = rw_arg(n, "output_size");
    const Expr *hw[2] = {os->u.is[1], os->u.is[2]};
    y1 = CALL(r, NULL, "_adaptive_avg_pool2d", "self", T(x4), "output_size", EXPRS(r, 2, hw));
    if (!y1) return -1;
    const Expr *v4[4] = {M, expr_const(a, 1), D, expr_bin(a, E_MUL, y1->sizes[2], y1->sizes[3])};
    Value *v = CALL(r, NULL, "reshape", "self", T(y1), "shape", EXPRS(r, 4, v4));
    const Expr *dd[2] = {os->u.is[0], v4[3]};
    y2 = v ? CALL(r, NULL, "_adaptive_avg_pool2d", "self", T(v), "output_size", EXPRS(r, 2, dd)) : NULL;
  } else {
    int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0}, k[3], st[3], pd[3], dl[3];
    pool3(n, "kernel_size", one, k);
    pool3(n, "stride", k, st);
    pool3(n, "padding", zero, pd);
    pool3(n, "dilation", one, dl);
    bool ceil = rw_arg(n, "ceil_mode")->u.b, max = !strncmp(name, "max", 3);
    int64_t k2[2] = {k[1], k[2]}, s2[2] = {st[1], st[2]}, p2[2] = {pd[1], pd[2]}, d2[2] = {dl[1], dl[2]};
    int64_t kd[2] = {k[0], 1}, sd[2] = {st[0], 1}, pdd[2] = {pd[0], 0}, dd[2] = {dl[0], 1};
    if (max) {
      y1 = CALL(r, NULL, "max_pool2d_with_indices", "self", T(x4), "kernel_size", INTS(r, 2, k2), "stride", INTS(r, 2, s2), "padding", INTS(r, 2, p2),
                "dilation", INTS(r, 2, d2), "ceil_mode", BO(ceil));
      if (!y1) return -1;
      i1 = y1->def->outs[1];
    } else {
      const Arg *dv = rw_arg(n, "divisor_override");
      bool cip = rw_arg(n, "count_include_pad")->u.b, over = dv && dv->k == AK_INT;
      y1 = CALL(r, NULL, "avg_pool2d", "self", T(x4), "kernel_size", INTS(r, 2, k2), "stride", INTS(r, 2, s2), "padding", INTS(r, 2, p2),
                "ceil_mode", BO(ceil), "count_include_pad", BO(cip), "divisor_override", over ? INT(r, 1) : NONE());
      if (!y1) return -1;
      const Expr *v4[4] = {M, expr_const(a, 1), D, expr_bin(a, E_MUL, y1->sizes[2], y1->sizes[3])};
      Value *v = CALL(r, NULL, "reshape", "self", T(y1), "shape", EXPRS(r, 4, v4));
      y2 = v ? CALL(r, NULL, "avg_pool2d", "self", T(v), "kernel_size", INTS(r, 2, kd), "stride", INTS(r, 2, sd), "padding", INTS(r, 2, pdd),
                    "ceil_mode", BO(ceil), "count_include_pad", BO(cip), "divisor_override", over ? dv[0] : NONE()) : NULL;
      return y2 && CALL(r, n->outs[0], "reshape", "self", T(y2), "shape", EXPRS(r, n->outs[0]->rank, n->outs[0]->sizes)) ? 0 : -1;
    }
    const Expr *v4[4] = {M, expr_const(a, 1), D, expr_bin(a, E_MUL, y1->sizes[2], y1->sizes[3])};
    Value *v = CALL(r, NULL, "reshape", "self", T(y1), "shape", EXPRS(r, 4, v4));
    y2 = v ? CALL(r, NULL, "max_pool2d_with_indices", "self", T(v), "kernel_size", INTS(r, 2, kd), "stride", INTS(r, 2, sd), "padding", INTS(r, 2, pdd),
                  "dilation", INTS(r, 2, dd), "ceil_mode", BO(ceil)) : NULL;
    if (!y2) return -1;
    i2 = y2->def->outs[1];
    if (n->nouts < 2) goto values;   /* d * Ho*Wo + q over [D, Ho*Wo]; i1 at (d, q) gives h*W + w */
    const Expr *f3[3] = {M, expr_const(a, 1), expr_bin(a, E_MUL, D, v4[3])}, *g3[3] = {M, expr_const(a, 1), expr_const(a, -1)};
    Value *i1f = CALL(r, NULL, "reshape", "self", T(i1), "shape", EXPRS(r, 3, f3));
    Value *i2f = i1f ? CALL(r, NULL, "reshape", "self", T(i2), "shape", EXPRS(r, 3, g3)) : NULL;
    Value *hw = i2f ? CALL(r, NULL, "gather", "self", T(i1f), "dim", INT(r, 2), "index", T(i2f)) : NULL;
    Value *dsel = hw ? CALL(r, NULL, "floor_divide", "self", T(i2f), "other", (Arg){.k = AK_INT, .u.i = v4[3]}) : NULL;
    Value *dofs = dsel ? CALL(r, NULL, "mul.Tensor", "self", T(dsel), "other", (Arg){.k = AK_INT, .u.i = expr_bin(a, E_MUL, H, W)}) : NULL;
    Value *flat = dofs ? CALL(r, NULL, "add.Tensor", "self", T(dofs), "other", T(hw)) : NULL;
    if (!flat || !CALL(r, n->outs[1], "reshape", "self", T(flat), "shape", EXPRS(r, n->outs[1]->rank, n->outs[1]->sizes))) return -1;
  }
values:
  return y2 && CALL(r, n->outs[0], "reshape", "self", T(y2), "shape", EXPRS(r, n->outs[0]->rank, n->outs[0]->sizes)) ? 0 : -1;
}

/* The rules, by op name. */

/* The op table's decomp column: an op that is not rewritten names decomp_none. */
int decomp_none(Rw *r, Node *n) { (void)r; (void)n; return 0; }

/* Rules that apply only with --train (into ops with derivative rules); without it the op has a kernel. */
bool decompose_has_training_rule(const OpDef *op) {
  return op->decomp == decomp_norm_primitives || op->decomp == decomp_max_pool_indices || op->decomp == decomp_adaptive_avg_pool;
}

bool decompose_has_rule(const OpDef *op) { return op->decomp != decomp_none && !decompose_has_training_rule(op); }

/* Ops the target runs whole: attention as one fused kernel (inference; on the GPU also --train's pair,
 * forward and backward, where kernels for its dtype exist). */
static bool target_keeps(const Graph *g, const Node *n, bool training) {
  if (n->op->decomp == decomp_sdpa) return !training && attention_fits(g, n);
  if (!g->ctx->cuda) return false;
  return (n->op->decomp == decomp_attention_train || n->op->decomp == decomp_attention_backward) && cuda_attention_fits(g, n);
}

int emit_conv(struct Em *, struct Node *);

/* On the GPU a convolution's bias is added by the pointwise kernel that reads the convolution's
 * output (an add the schedule fuses with the cast, activation or residual after it), not by cuDNN's
 * AddTensor, a pass of its own over the output (16% of ResNet-50's time under --precision bf16, 32%
 * under --precision tf32, where batch norm folded into every convolution gives it a bias). The same
 * roundings: cuDNN rounds the convolution, then the sum. float16/bfloat16 in training too; float32
 * and float64 for inference (training's weight gradient pass computes the bias's gradient with it). */
static bool conv_bias_apart(const Graph *g, const Node *n, bool training, bool cl) {
  if (!g->ctx->cuda || !n->op || n->op->emit != emit_conv || !rw_targ(n, "bias")) return false;
  if (!training && cl && layout_gpu_keeps_bias(g, n)) return false;   /* the runtime's depthwise kernel or cuBLASLt adds it before rounding, in no pass of its own */
  DType dt = n->outs[0]->dtype;
  if (!is_half(n->outs[0]) && (training || (dt != DT_F32 && dt != DT_F64))) return false;
  const Arg *t = rw_arg(n, "transposed");
  return strncmp(n->op->name, "conv_transpose", 14) && !(t && t->k == AK_BOOL && t->u.b) && rw_targ(n, "bias")->rank == 1;
}

static int bias_apart(Rw *r, Node *n) {
  Arg *args = arena_array(r->g->ctx->arena, (size_t)n->op->nargs + 1, sizeof *args);
  memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
  args[ops_arg_index(n->op, "bias")] = NONE();
  Value *y = rw_node(r, NULL, n->op, args), *b = rw_targ(n, "bias");
  int64_t shape[GG_MAX_RANK];   /* [C, 1, ...]: one 1 per spatial dim (the weight's rank - 2), batched or not */
  int rk = rw_targ(n, "weight")->rank - 1;
  shape[0] = -1;
  for (int d = 1; d < rk; d++) shape[d] = 1;
  Value *bv = y ? CALL(r, NULL, "reshape", "self", T(b), "shape", INTS(r, rk, shape)) : NULL;
  return bv && CALL(r, n->outs[0], "add.Tensor", "self", T(y), "other", T(bv)) ? 0 : -1;
}

/* Ops kept whole through autograd under --train, whose derivative rule is a better backward than the
 * one their primitives would get; decompose_after_autograd expands them, and the backward ops that
 * derivative rules write (native_layer_norm_backward). */
static bool kept_for_autograd(const OpDef *op) { return op->decomp == decomp_bn_train || op->decomp == decomp_attention_train; }

enum { D_INFERENCE, D_TRAINING, D_AFTER_AUTOGRAD };

static DecompFn rule_for(Graph *g, Node *n, int mode, bool cl) {
  if (!n->op) return NULL;
  if (mode == D_AFTER_AUTOGRAD) return decompose_has_rule(n->op) && !target_keeps(g, n, false) ? n->op->decomp : NULL;   /* kept ones, and the backward ops of derivative rules */
  bool training = mode == D_TRAINING;
  if (training && kept_for_autograd(n->op)) return NULL;
  if ((decompose_has_rule(n->op) || (training && decompose_has_training_rule(n->op))) && !target_keeps(g, n, training)) return n->op->decomp;
  return conv_bias_apart(g, n, training, cl) ? bias_apart : NULL;
}

static int run_rules(Graph *g, int mode, bool fold, bool cl) {
  Rw r = {.g = g, .fold = fold, .training = mode == D_TRAINING};
  Value **before = g->inputs;
  int nbefore = g->ninputs;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    DecompFn rule = rule_for(g, n, mode, cl);
    if (!rule) { rw_push(&r, n); continue; }
    r.orig = n;
    r.k = 0;
    int before = r.n;
    if (rule(&r, n)) {
      if (!g->ctx->has_err) GG_INTERNAL(g->ctx);
      return -1;
    }
    gg_log(g->ctx, LOG_DECOMP, "node %s: %s -> %d nodes", gg_quote(g->ctx, n->name), n->op->name, r.n - before);
  }
  g->nodes = r.nodes;
  g->nnodes = r.n;
  g->cap_nodes = r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  if (g->ninputs != nbefore) fold_drop_unused(g, before, nbefore);   /* parameters replaced by ones computed now (fold_bn_affine) */
  return 0;
}

/* dropout in evaluation (or p = 0): the identity */
static bool identity_dropout(const Node *n) {
  return n->op && !strcmp(n->op->name, "dropout") && n->nouts == 1 && n->args[0].k == AK_TENSOR && !dropout_draws(n);
}

/* The identities' readers read their input instead (a graph output stays), and the identities go: no
 * view stands between a product and the residual added to it (BERT's and GPT-2's, whose addition then
 * joins the product's epilogue on the GPU). */
static void skip_identities(Graph *g) {
  Value **to = arena_array(g->ctx->arena, (size_t)g->nvalues + 1, sizeof *to);
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    for (int i = 0; n->op && i < n->op->nargs; i++) {
      Arg *a = &n->args[i];
      if (a->k == AK_TENSOR && a->u.t && to[a->u.t->id]) a->u.t = to[a->u.t->id];
      for (int j = 0; a->k == AK_TENSORS && j < a->n; j++)
        if (a->u.ts[j] && to[a->u.ts[j]->id]) a->u.ts[j] = to[a->u.ts[j]->id];
    }
    bool out = false;
    for (int i = 0; i < g->noutputs; i++) out |= g->outputs[i].v == n->outs[0];
    if (identity_dropout(n) && !out) to[n->outs[0]->id] = n->args[0].u.t;
  }
  graph_drop_dead(g, identity_dropout);
}

int emit_matmul(struct Em *, struct Node *);
int emit_linear(struct Em *, struct Node *);
int emit_addmm(struct Em *, struct Node *);

static bool is_view_node(const Node *n) { return n->op && view_is_reshape(n->op); }

static bool is_product(const Node *n) { return n && n->op && (n->op->emit == emit_matmul || n->op->emit == emit_linear || n->op->emit == emit_addmm); }

/* u adds to a reshape view of a product's output, each read by nothing else, a tensor of the view's
 * shape: that view's node, else NULL */
static const Node *viewed_product_add(const Graph *g, const Node *u, const int *uses) {
  if (!u->op || strcmp(u->op->name, "add.Tensor") || u->nouts != 1) return NULL;
  for (int i = 0; i < 2; i++) {
    const Value *w = u->args[i].k == AK_TENSOR ? u->args[i].u.t : NULL, *r = u->args[1 - i].k == AK_TENSOR ? u->args[1 - i].u.t : NULL;
    const Node *v = w ? w->def : NULL;
    if (!r || !v || !v->op || !view_is_reshape(v->op) || v->nouts != 1 || v->args[0].k != AK_TENSOR || uses[w->id] != 1) continue;
    const Value *p = v->args[0].u.t;
    if (is_product(p->def) && uses[p->id] == 1 && r != w && r->rank == w->rank && r->dtype == p->dtype && w->dtype == p->dtype && u->outs[0]->dtype == p->dtype &&
        value_same_shape(g, r, w) && value_same_shape(g, u->outs[0], w))
      return v;
  }
  return NULL;
}

/* add(reshape(product), r) is reshape(add(product, reshape(r))): the addition then has the
 * product's shape and joins its epilogue (cuBLASLt's C on the GPU, the finished tile in L1 on the
 * CPU; a pass of its own before: 5-7% of GPT-2 small on 1-2 cores). GPT-2's Conv1D is addmm on [B * L, E]
 * viewed [B, L, E] before its residual; r, a contiguous tensor there, is viewed, not copied, right
 * before the product (an epilogue reads what is computed before it). */
static int sink_product_views(Graph *g) {
  Arena *a = g->ctx->arena;
  int *uses = graph_uses(g, NULL);
  const Node **view = arena_array(a, (size_t)g->nnodes + 1, sizeof *view);   /* by the addition's index: the view it reads */
  Node **adds = arena_array(a, (size_t)g->nnodes + 1, sizeof *adds);         /* by the product's index: the addition */
  Value **res = arena_array(a, (size_t)g->nnodes + 1, sizeof *res);          /* by the addition's index: r viewed */
  for (int k = 0; k < g->nnodes; k++) {
    Node *u = g->nodes[k];
    const Node *v = viewed_product_add(g, u, uses);
    if (!v) continue;
    const Value *w = v->outs[0], *r = u->args[0].u.t == w ? u->args[1].u.t : u->args[0].u.t;
    const Node *p = v->args[0].u.t->def;
    if (r->def && r->def->id > p->id) continue;
    view[k] = v;
    adds[p->id] = u;
  }
  Rw r = {.g = g};
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    Node *u = adds[k];
    if (u) {   /* the addend viewed in the product's shape, before the product */
      const Value *w = view[u->id]->outs[0], *p = n->outs[0];
      r.orig = u;
      r.k = 0;
      if (!(res[u->id] = CALL(&r, NULL, "reshape", "self", T(u->args[0].u.t == w ? u->args[1].u.t : u->args[0].u.t), "shape", EXPRS(&r, p->rank, p->sizes))))
        return -1;
    }
    if (!view[k]) { rw_push(&r, n); continue; }
    r.orig = n;
    Value *w = view[k]->outs[0], *p = view[k]->args[0].u.t;
    Arg *args = arena_array(a, (size_t)n->op->nargs + 1, sizeof *args);
    memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
    for (int i = 0; i < 2; i++) args[i] = T(args[i].u.t == w ? p : res[k]);
    Value *y = rw_node(&r, NULL, n->op, args);
    if (!y || !CALL(&r, n->outs[0], "reshape", "self", T(y), "shape", EXPRS(&r, w->rank, w->sizes))) return -1;
    gg_log(g->ctx, LOG_DECOMP, "node %s: the addition moved before the view of product %s", gg_quote(g->ctx, n->name), gg_quote(g->ctx, p->name));
  }
  g->nodes = r.nodes;
  g->nnodes = r.n;
  g->cap_nodes = r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  graph_drop_dead(g, is_view_node);
  return 0;
}

int emit_norm(struct Em *, struct Node *);

/* a view that keeps every element once, in another shape or order: a reshape, a permutation
 * (view_perm), a squeeze or unsqueeze */
static bool view_of_all(const Node *n) {
  static const char *const shapes[] = {"squeeze", "squeeze.dim", "squeeze.dims", "unsqueeze"};
  int perm[GG_MAX_RANK];
  if (!n || !n->op || n->op->emit != emit_view || n->nouts != 1 || n->args[0].k != AK_TENSOR || !n->args[0].u.t) return false;
  if (view_is_reshape(n->op) || view_perm(n, n->args[0].u.t->rank, perm)) return true;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    if (!strcmp(n->op->name, shapes[i])) return true;
  return false;
}

/* a view of view_of_all's that keeps its input's last dim last (a product can read a 16-bit
 * operand through it: one of its two last strides stays 1) */
static bool keeps_last_dim(const Node *n) {
  const Value *x = n->args[0].u.t;
  int perm[GG_MAX_RANK];
  return !view_perm(n, x->rank, perm) || x->rank < 1 || perm[x->rank - 1] == x->rank - 1;
}

/* view n taken of x instead (into: its output), a reshape for the reshapes (x's strides may not fit) */
static Value *view_again(Rw *r, Value *into, const Node *n, Value *x, const Value *shape) {
  if (view_is_reshape(n->op)) return CALL(r, into, "reshape", "self", T(x), "shape", EXPRS(r, shape->rank, shape->sizes));
  Arg *args = arena_array(r->g->ctx->arena, (size_t)n->op->nargs + 1, sizeof *args);
  memcpy(args, n->args, sizeof *args * (size_t)n->op->nargs);
  args[0] = T(x);
  return rw_node(r, into, n->op, args);
}

/* computed by a kernel a cast after it joins: a pointwise node's, or a norm's (its store) */
static bool cast_joins(const Node *d) { return d && d->op && d->nouts == 1 && (sched_is_pointwise(d) || d->op->emit == emit_norm); }

/* On the GPU, a float cast next to the arithmetic whose result it rounds or reads. A cast is
 * pointwise and fuses with a pointwise producer or reader, but not through a reshape between them
 * (--precision bf16 puts casts around every product: GPT-2's Conv1D is addmm, then a view):
 * - a cast of a view of x (a reshape or a permutation that keeps the last dim last: a 16-bit product
 *   reads it in place), x computed by a pointwise node or a norm, and the cast not computed by a
 *   pointwise reader anyway, becomes that view of x's cast, which x's kernel then writes (the GELU before a
 *   product writes bfloat16 directly; a norm stores it, schedule.c's norm_cast);
 * - a cast read only by such a view, of a value computed otherwise (a product), becomes the cast of
 *   x's view, which its readers then compute (the residual addition reads the product's bfloat16).
 * The same values: a cast commutes with a view that keeps each element once. Repeated, for views of views. */
static int casts_by_their_arithmetic(Graph *g) {
  Arena *a = g->ctx->arena;
  for (int pass = 0; pass < 4; pass++) {
    Node **reader;
    int *uses = graph_uses(g, &reader);
    bool *gone = arena_array(a, (size_t)g->nnodes + 1, sizeof *gone);
    Rw r = {.g = g, .tag = "cast"};
    int moved = 0;
    for (int k = 0; k < g->nnodes; k++) {
      Node *n = g->nodes[k];
      if (gone[k]) continue;
      if (!sched_is_float_cast(n)) { rw_push(&r, n); continue; }
      Value *x = n->args[0].u.t, *y = n->outs[0];
      Node *v = x->def, *u = uses[y->id] == 1 ? reader[y->id] : NULL;
      r.orig = n;
      r.k = 0;
      bool fused = u && sched_is_pointwise(u) && value_same_shape(g, y, u->outs[0]);   /* its reader computes it: through the view too */
      if (view_of_all(v) && keeps_last_dim(v) && uses[x->id] == 1 && !fused && cast_joins(v->args[0].u.t->def)) {
        Value *c = CALL(&r, NULL, "_to_copy", "self", T(v->args[0].u.t), "dtype", DT(y->dtype));
        if (!c || !view_again(&r, y, v, c, y)) return -1;
        gg_log(g->ctx, LOG_DECOMP, "node %s: the cast moved before the reshape %s", gg_quote(g->ctx, n->name), gg_quote(g->ctx, v->name));
      } else if (view_of_all(u) && !cast_joins(x->def)) {
        Value *w = u->outs[0], *xv = view_again(&r, NULL, u, x, w);
        if (!xv || !CALL(&r, w, "_to_copy", "self", T(xv), "dtype", DT(y->dtype))) return -1;
        gone[u->id] = true;
        gg_log(g->ctx, LOG_DECOMP, "node %s: the cast moved after the reshape %s", gg_quote(g->ctx, n->name), gg_quote(g->ctx, u->name));
      } else {
        rw_push(&r, n);
        continue;
      }
      moved++;
    }
    g->nodes = r.nodes;
    g->nnodes = r.n;
    g->cap_nodes = r.cap;
    for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
    graph_drop_dead(g, view_of_all);
    if (!moved) break;
  }
  return 0;
}

/* On the GPU a 16-bit product whose result only its widening to float32 reads, then added to a
 * float32 tensor of its shape (--precision bf16's residual stream), is one cuBLASLt call that writes
 * float32 (schedule.c's sched_lt_epilogue: the widening, the bias, the addition as its C). cuBLASLt's
 * bias must then be float32 too, so a constant bias moves after the widening as a float32 weight of
 * the same values: cast(linear(x, w, b)) + r -> (cast(linear(x, w)) + b) + r, addmm likewise. The
 * product, rounded to 16 bits before, now is not: the bias and the residual are added to its float32
 * value, rounded once (closer to the float32 model than autocast, never farther). */
static int wide_product_bias(Graph *g) {
  Arena *a = g->ctx->arena;
  Node **reader;
  int *uses = graph_uses(g, &reader);
  bool *gone = arena_array(a, (size_t)g->nnodes + 1, sizeof *gone);
  Value **before = g->inputs;
  int nbefore = g->ninputs, moved = 0;
  Rw r = {.g = g, .tag = "wide"};
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (gone[k]) continue;
    bool lin = n->op && !strcmp(n->op->name, "linear"), mm = n->op && !strcmp(n->op->name, "addmm") && rw_arg_one(n, "beta") && rw_arg_one(n, "alpha");
    Value *y = n->nouts == 1 ? n->outs[0] : NULL, *b = lin ? rw_targ(n, "bias") : mm ? rw_targ(n, "self") : NULL;
#define ONLY_READER(v) ((v) && uses[(v)->id] == 1 ? reader[(v)->id] : NULL)
    Node *v = ONLY_READER(y), *c = view_of_all(v) && view_is_reshape(v->op) ? ONLY_READER(v->outs[0]) : v;   /* GPT-2's Conv1D: a view first */
    Node *u = c ? ONLY_READER(c->outs[0]) : NULL;
#undef ONLY_READER
    if (c == v) v = NULL;
    Value *w = c ? c->outs[0] : NULL, *o = u ? sched_added_to(u, w) : NULL;
    if (!b || b->rank != 1 || (y->dtype != DT_BF16 && y->dtype != DT_F16) || !sched_is_float_cast(c) || w->dtype != DT_F32 || !o || o->dtype != DT_F32 ||
        !value_same_shape(g, o, w) || (v && o->def && o->def->id > n->id)) {
      rw_push(&r, n);
      continue;
    }
    Value *b32 = fold_weight_cast(g, b, DT_F32);
    if (!b32) {
      if (g->ctx->has_err) return -1;
      rw_push(&r, n);
      continue;
    }
    r.orig = n;
    r.k = 0;
    /* with the view: the residual viewed in the product's shape, before it (an epilogue reads what is computed before it) */
    Value *o2 = v ? CALL(&r, NULL, "reshape", "self", T(o), "shape", EXPRS(&r, y->rank, y->sizes)) : NULL;
    Value *p = lin ? CALL(&r, NULL, "linear", "input", T(rw_targ(n, "input")), "weight", T(rw_targ(n, "weight")))
                   : CALL(&r, NULL, "mm", "self", T(rw_targ(n, "mat1")), "mat2", T(rw_targ(n, "mat2")));
    Value *pw = p ? CALL(&r, NULL, "_to_copy", "self", T(p), "dtype", DT(DT_F32)) : NULL;
    Value *pb = pw ? CALL(&r, v ? NULL : w, "add.Tensor", "self", T(pw), "other", T(b32)) : NULL;
    if (!pb) return -1;
    if (v) {   /* the residual addition in the product's shape, then the view */
      Value *s2 = o2 ? CALL(&r, NULL, "add.Tensor", "self", T(pb), "other", T(o2)) : NULL;
      if (!s2 || !CALL(&r, u->outs[0], "reshape", "self", T(s2), "shape", EXPRS(&r, u->outs[0]->rank, u->outs[0]->sizes))) return -1;
      gone[v->id] = gone[u->id] = true;
    }
    gone[c->id] = true;
    moved++;
    gg_log(g->ctx, LOG_DECOMP, "node %s: its bias added in float32 after its widening %s", gg_quote(g->ctx, n->name), gg_quote(g->ctx, c->name));
  }
  g->nodes = r.nodes;
  g->nnodes = r.n;
  g->cap_nodes = r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  if (moved) fold_drop_unused(g, before, nbefore);
  return 0;
}

static bool node_is(const Node *n, const char *op) { return n && n->op && !strcmp(n->op->name, op); }

/* Attention written out (as Inductor's fuse_attention patterns find it): matmul(q, k.transpose(-2,
 * -1)), divided or multiplied by a number or neither, a float mask added or not, softmax over the last
 * dim, matmul with v, each intermediate read by the next alone. The last matmul becomes
 * scaled_dot_product_attention (scale: the number's, the mask as attn_mask) where the target's fused
 * kernel takes it (attention_fits; float32 only, so that no 16-bit rounding between the steps is
 * skipped), and the pieces go. Inference only. */
static int attention_from_primitives(Graph *g) {
  Ctx *c = g->ctx;
  const OpDef *sdpa = ops_find("scaled_dot_product_attention.default");
  int *uses = graph_uses(g, NULL), changed = 0;
  for (int k = 0; sdpa && k < g->nnodes; k++) {
    Node *pv = g->nodes[k];
    if (!node_is(pv, "matmul") || pv->nouts != 1 || pv->outs[0]->dtype != DT_F32) continue;
    Value *p = rw_targ(pv, "self"), *v = rw_targ(pv, "other"), *s, *mask = NULL, *q, *kt, *key;
    Node *sm = p ? p->def : NULL, *sn;
    if (!v || !sm || uses[p->id] != 1 || !(node_is(sm, "softmax.int") ? rw_arg(sm, "dtype")->k == AK_NONE : node_is(sm, "_softmax") && !rw_arg(sm, "half_to_float")->u.b))
      continue;
    if (!(s = rw_targ(sm, "self")) || dim_wrap(node_int_arg(sm, "dim", 0), s->rank) != s->rank - 1 || uses[s->id] != 1) continue;
    sn = s->def;
    if (node_is(sn, "add.Tensor") && rw_arg_one(sn, "alpha")) {   /* scores + mask, either way round */
      Value *a = rw_targ(sn, "self"), *b = rw_targ(sn, "other");
      bool first = a && a->def && (node_is(a->def, "matmul") || node_is(a->def, "div.Tensor") || node_is(a->def, "mul.Tensor"));
      mask = first ? b : a;
      s = first ? a : b;
      if (!s || !mask || uses[s->id] != 1 || mask->dtype != DT_F32) continue;
      sn = s->def;
    }
    double scale = 1, f = NAN;   /* a number given for the Tensor `other` (a wrapped scalar: div(scores, 8.0)); NaN for a tensor */
    if ((node_is(sn, "div.Tensor") || node_is(sn, "mul.Tensor")) && rw_arg(sn, "other")->k != AK_TENSOR) f = rw_farg(sn, "other", NAN);
    if (f == f && (f != 0 || node_is(sn, "mul.Tensor"))) {
      scale = node_is(sn, "div.Tensor") ? 1 / f : f;
      if (!(s = rw_targ(sn, "self")) || uses[s->id] != 1) continue;
      sn = s->def;
    }
    if (!node_is(sn, "matmul") || !(q = rw_targ(sn, "self")) || !(kt = rw_targ(sn, "other")) || !node_is(kt->def, "transpose.int") || uses[kt->id] != 1) continue;
    key = rw_targ(kt->def, "self");
    int r = q->rank, d0 = dim_wrap(node_int_arg(kt->def, "dim0", 0), kt->rank), d1 = dim_wrap(node_int_arg(kt->def, "dim1", 0), kt->rank);
    if (!key || (r != 3 && r != 4) || key->rank != r || v->rank != r || !((d0 == r - 2 && d1 == r - 1) || (d0 == r - 1 && d1 == r - 2))) continue;
    bool same = true;   /* no broadcasting between the products' batch dims */
    for (int d = 0; d < r - 2; d++) same &= expr_same(g, q->sizes[d], key->sizes[d]) && expr_same(g, q->sizes[d], v->sizes[d]);
    if (!same) continue;
    const OpDef *was_op = pv->op;
    Arg *was_args = pv->args, *a = arena_array(c->arena, (size_t)sdpa->nargs + 1, sizeof *a);
    for (int i = 0; i < sdpa->nargs; i++) a[i] = sdpa->args[i].has_default ? sdpa->args[i].def : NONE();
    a[ops_arg_index(sdpa, "query")] = T(q), a[ops_arg_index(sdpa, "key")] = T(key), a[ops_arg_index(sdpa, "value")] = T(v);
    a[ops_arg_index(sdpa, "attn_mask")] = T(mask), a[ops_arg_index(sdpa, "scale")] = FL(scale);
    pv->op = sdpa, pv->args = a;
    if (!attention_fits(g, pv)) {
      pv->op = was_op, pv->args = was_args;
      continue;
    }
    pv->target = "torch.ops.aten.scaled_dot_product_attention.default";
    gg_log(c, LOG_DECOMP, "node %s: attention written out (matmul, %s, softmax, matmul) as one scaled_dot_product_attention, scale %.9g", gg_quote(c, pv->name),
           mask ? "a mask added" : "no mask", scale);
    changed++;
  }
  if (changed) graph_drop_dead(g, rw_pure);   /* the pieces */
  return changed;
}

/* A step of a chain of views (compose_view_chains), of static sizes: view_of_all's, contiguous or
 * alias (the same values), or a select of a number */
static bool chain_step(const Node *n) {
  if (view_of_all(n)) return const_numel(n->outs[0]) > 0;
  if (!n || !n->op || n->op->emit != emit_view || n->nouts != 1 || n->args[0].k != AK_TENSOR || !n->args[0].u.t || const_numel(n->outs[0]) <= 0) return false;
  int64_t v;
  const char *o = n->op->name;
  return !strcmp(o, "contiguous") || !strcmp(o, "alias") || (!strcmp(o, "select.int") && expr_is_const(rw_arg(n, "index")->u.i, &v));
}

/* The atoms of a chain: its source's dims split into the pieces every reshape of the chain keeps
 * whole. src lists them in the source's order (major first); the chain's current dims each hold a
 * run of them (dim[d][0 .. dn[d])); a selected atom is in no dim and holds its index. */
#define CH_ATOMS 32
typedef struct Atoms {
  int64_t size[CH_ATOMS], at[CH_ATOMS];   /* at: the selected index, -1 for a free atom */
  int src[CH_ATOMS], ns, na;
  int dim[GG_MAX_RANK][CH_ATOMS], dn[GG_MAX_RANK], rank;
} Atoms;

static void ins_after(int *list, int *n, int after, int x) {
  int i = 0;
  while (i < *n && list[i] != after) i++;
  memmove(list + i + 2, list + i + 1, sizeof *list * (size_t)(*n - i - 1));
  list[i + 1] = x;
  (*n)++;
}

/* atom a split in two, f its major part's size; the minor part follows it everywhere */
static int atom_split(Atoms *s, int a, int64_t f) {
  if (s->na == CH_ATOMS) return -1;
  int b = s->na++;
  s->size[b] = s->size[a] / f, s->at[b] = -1, s->size[a] = f;
  ins_after(s->src, &s->ns, a, b);
  for (int d = 0; d < s->rank; d++)
    for (int i = 0; i < s->dn[d]; i++)
      if (s->dim[d][i] == a) { ins_after(s->dim[d], &s->dn[d], a, b); return b; }
  return b;
}

/* the chain's tensor reshaped to sizes (each of its atoms kept, or split where a new dim ends inside it) */
static bool atoms_reshape(Atoms *s, int rank, const int64_t *sizes) {
  int seq[CH_ATOMS], n = 0, pos = 0;
  for (int d = 0; d < s->rank; d++)
    for (int i = 0; i < s->dn[d]; i++) seq[n++] = s->dim[d][i];
  int nd[GG_MAX_RANK][CH_ATOMS], nn[GG_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    int64_t want = sizes[d], prod = 1;
    nn[d] = 0;
    while (prod < want) {
      if (pos == n) return false;
      int a = seq[pos];
      if (want % (prod * s->size[a]) == 0) prod *= s->size[a];
      else {   /* the dim ends inside atom a: a splits there */
        int64_t f = want / prod;
        if (want % prod || s->size[a] % f || f < 2) return false;
        int b = atom_split(s, a, f);
        if (b < 0) return false;
        memmove(seq + pos + 2, seq + pos + 1, sizeof *seq * (size_t)(n - pos - 1));
        seq[pos + 1] = b;
        n++;
        prod = want;
      }
      nd[d][nn[d]++] = a;
      pos++;
    }
    if (prod != want) return false;
  }
  if (pos != n) return false;
  s->rank = rank;
  for (int d = 0; d < rank; d++) {
    s->dn[d] = nn[d];
    memcpy(s->dim[d], nd[d], sizeof *nd[d] * (size_t)nn[d]);
  }
  return true;
}

/* step n applied to the chain's atoms */
static bool atoms_step(Atoms *s, const Node *n) {
  const Value *y = n->outs[0];
  int perm[GG_MAX_RANK];
  if (!strcmp(n->op->name, "contiguous") || !strcmp(n->op->name, "alias")) return true;
  if (view_perm(n, s->rank, perm)) {
    Atoms t = *s;
    for (int d = 0; d < s->rank; d++) {
      s->dn[d] = t.dn[perm[d]];
      memcpy(s->dim[d], t.dim[perm[d]], sizeof *t.dim[d] * (size_t)t.dn[perm[d]]);
    }
    return true;
  }
  if (!strcmp(n->op->name, "select.int")) {
    int d = dim_wrap(node_int_arg(n, "dim", 0), s->rank);
    int64_t ix, len = 1;
    expr_is_const(rw_arg(n, "index")->u.i, &ix);
    for (int i = 0; i < s->dn[d]; i++) len *= s->size[s->dim[d][i]];
    if (ix < 0) ix += len;
    if (ix < 0 || ix >= len) return false;
    for (int i = s->dn[d] - 1; i >= 0; i--) {   /* the index in the dim's atoms, minor first */
      int a = s->dim[d][i];
      s->at[a] = ix % s->size[a];
      ix /= s->size[a];
    }
    for (int k = d; k < s->rank - 1; k++) {
      s->dn[k] = s->dn[k + 1];
      memcpy(s->dim[k], s->dim[k + 1], sizeof *s->dim[k] * (size_t)s->dn[k + 1]);
    }
    s->rank--;
    return true;
  }
  int64_t sizes[GG_MAX_RANK];
  for (int d = 0; d < y->rank; d++) expr_is_const(y->sizes[d], &sizes[d]);
  return atoms_reshape(s, y->rank, sizes);
}

/* Chains of views composed (inference). The views between a computed value S and a value E that
 * something else reads may copy on the way where a view of S gives E: torchvision's
 * nn.MultiheadAttention copies its [L, N, 3 * E] in-projection to [3, L, N, E] (contiguous), selects
 * each of q, k and v and views it [L, N * H, D] (no strides of the projection describe that), then
 * [N, H, L, D] (some do). E is then derived from S directly: S's dims split into the pieces every
 * reshape of the chain keeps whole ("atoms"), S viewed as its atoms, the selected atoms selected, the
 * rest permuted into E's order and reshaped to E's sizes. Done where that is a view, with E's last
 * dim S's last (each of E's dims atoms next to each other in S, in S's order), and the chain as
 * written copies (view_layouts from S contiguous): one copy less, and E's readers read S in place. */
static int compose_view_chains(Graph *g) {
  Arena *a = g->ctx->arena;
  bool *other = arena_array(a, (size_t)g->nvalues + 1, sizeof *other);   /* read by a node that is no chain step, or an output */
  for (int k = 0; k < g->nnodes; k++)
    if (!chain_step(g->nodes[k])) FOR_TENSOR_ARGS(g->nodes[k], v, { other[v->id] = true; })
  for (int i = 0; i < g->noutputs; i++) other[g->outputs[i].v->id] = true;
  Rw r = {.g = g, .tag = "chain"};
  int composed = 0;
  for (int k = 0; k < g->nnodes; k++) {
    Node *e = g->nodes[k], *steps[64];
    int ns = 0;
    if (!chain_step(e) || !other[e->outs[0]->id]) { rw_push(&r, e); continue; }
    Value *S = e->outs[0];
    while (ns < 64 && chain_step(S->def)) steps[ns++] = S->def, S = S->def->args[0].u.t;
    bool copies = false, ok = ns >= 2 && !chain_step(S->def) && (!S->def || S->def->op->emit != emit_view) && const_numel(S) > 0;
    Layout l;
    if (ok) layout_contiguous(a, &l, S->rank, S->sizes);
    for (int i = ns - 1; ok && i >= 0; i--) {   /* the chain as written */
      Layout o;
      int rc = view_layouts(g, steps[i], &l, &o);
      if (rc < 0) return -1;
      if (rc == VIEW_COPY) layout_contiguous(a, &o, steps[i]->outs[0]->rank, steps[i]->outs[0]->sizes), copies = true;
      l = o;
    }
    Atoms s = {.rank = 0};
    for (int d = 0; ok && copies && d < S->rank; d++) {   /* S's atoms: its dims (those of size 1 left out) */
      int64_t v;
      expr_is_const(S->sizes[d], &v);
      s.dn[s.rank] = 0;
      if (v != 1) s.size[s.na] = v, s.at[s.na] = -1, s.src[s.ns++] = s.na, s.dim[s.rank][s.dn[s.rank]++] = s.na, s.na++;
      s.rank++;
    }
    for (int i = ns - 1; ok && copies && i >= 0; i--) ok = atoms_step(&s, steps[i]);
    /* E a view of S: each dim's atoms next to each other in S, in order, and E's last dim ends with S's last atom */
    int pos[CH_ATOMS];
    for (int i = 0; i < s.ns; i++) pos[s.src[i]] = i;
    ok = ok && copies && s.rank > 0 && s.dn[s.rank - 1] > 0 && s.ns <= GG_MAX_RANK &&
         s.dim[s.rank - 1][s.dn[s.rank - 1] - 1] == s.src[s.ns - 1];
    for (int d = 0; ok && d < s.rank; d++)
      for (int i = 1; i < s.dn[d]; i++) ok &= pos[s.dim[d][i]] == pos[s.dim[d][i - 1]] + 1;
    if (!ok) { rw_push(&r, e); continue; }
    r.orig = e;
    r.k = 0;
    int64_t sz[GG_MAX_RANK], pm[GG_MAX_RANK];
    for (int i = 0; i < s.ns; i++) sz[i] = s.size[s.src[i]];
    bool same = s.ns == S->rank;   /* S already of the atoms' sizes */
    for (int i = 0; same && i < s.ns; i++) {
      int64_t v;
      same = expr_is_const(S->sizes[i], &v) && v == sz[i];
    }
    int free[CH_ATOMS], nf = 0, m = 0, nsel = 0;
    for (int i = 0; i < s.ns; i++)
      if (s.at[s.src[i]] < 0) free[nf++] = s.src[i];
      else nsel++;
    for (int d = 0; d < s.rank; d++)
      for (int i = 0; i < s.dn[d]; i++)
        for (int j = 0; j < nf; j++)
          if (free[j] == s.dim[d][i]) pm[m++] = j;
    bool ident = true, direct = s.rank == nf;   /* direct: E's dims are the free atoms, one each (the last step writes E) */
    for (int j = 0; j < nf; j++) ident &= pm[j] == j;
    for (int d = 0; d < s.rank; d++) direct &= s.dn[d] == 1;
    Value *y = e->outs[0], *x = same ? S : CALL(&r, direct && ident && !nsel ? y : NULL, "reshape", "self", T(S), "shape", INTS(&r, s.ns, sz));
    for (int i = s.ns - 1; x && i >= 0; i--)
      if (s.at[s.src[i]] >= 0)
        x = CALL(&r, direct && ident && !--nsel ? y : NULL, "select.int", "self", T(x), "dim", INT(&r, i), "index", INT(&r, s.at[s.src[i]]));
    if (x && !ident) x = CALL(&r, direct ? y : NULL, "permute", "self", T(x), "dims", INTS(&r, nf, pm));
    if (x && x != y) x = CALL(&r, y, "reshape", "self", T(x), "shape", EXPRS(&r, y->rank, y->sizes));
    if (!x) return -1;
    gg_log(g->ctx, LOG_DECOMP, "node %s: its %d views from %s composed into one without a copy", gg_quote(g->ctx, e->name), ns, gg_quote(g->ctx, S->name));
    composed++;
  }
  g->nodes = r.nodes;
  g->nnodes = r.n;
  g->cap_nodes = r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  if (composed) graph_drop_dead(g, chain_step);
  return 0;
}

int decompose(Graph *g, bool training, bool fold, bool cl) {
  if (!fold) fold_attention_inputs(g);   /* where weight folding did not run it (--train, weights kept outside): masks are constants, not weights */
  if (!training) attention_from_primitives(g);
  if (run_rules(g, training ? D_TRAINING : D_INFERENCE, fold, cl)) return -1;
  if (!training) skip_identities(g);
  if (training) return 0;
  return sink_product_views(g) || (g->ctx->cuda && (casts_by_their_arithmetic(g) || (fold && wide_product_bias(g)))) || compose_view_chains(g);
}
int decompose_after_autograd(Graph *g) { return run_rules(g, D_AFTER_AUTOGRAD, false, false); }
