/* autograd.c: reverse-mode differentiation of the functional, decomposed graph (--train).
 * Requires: a verified graph after decompose(g, true). Guarantees: the same graph with the backward
 * appended: one cotangent input per differentiated output ("tangent.N", a user input after the
 * model's own), the backward nodes, built from ordinary op-table nodes through rewrite.h (so they
 * verify, interpret, fuse and compile like any other node), and one OUT_GRAD output per
 * differentiated input, named by its parameter (or input) name. Gradients of values used more than
 * once are summed; integer and bool values carry none; an op without a rule is an error naming the
 * node. The rules are in the table at the end (docs/ops.md lists which ops have one). */
#include "gg.h"

#include <math.h>
#include <string.h>

#include "rewrite.h"

typedef struct Ad {
  Rw r;
  Graph *g;
  Value **grad;             /* by value id: the gradient so far */
  bool *diff;               /* by value id: a float value that depends on a differentiated input */
} Ad;

/* ---------------------------------------------------------------- building blocks */

static Value *binop(Ad *a, const char *op, Value *x, Value *y) { return x && y ? CALL(&a->r, NULL, op, "self", T(x), "other", T(y)) : NULL; }
static Value *binf(Ad *a, const char *op, Value *x, double f) { return x ? CALL(&a->r, NULL, op, "self", T(x), "other", FL(f)) : NULL; }
static Value *unop(Ad *a, const char *op, Value *x) { return x ? CALL(&a->r, NULL, op, "self", T(x)) : NULL; }
static Value *mul(Ad *a, Value *x, Value *y) { return binop(a, "mul.Tensor", x, y); }
static Value *mulf(Ad *a, Value *x, double f) { return f == 1 ? x : binf(a, "mul.Tensor", x, f); }
static Value *as_float(Ad *a, Value *mask, DType dt) { return mask ? CALL(&a->r, NULL, "_to_copy", "self", T(mask), "dtype", DT(dt)) : NULL; }
/* g where cond holds, 0 elsewhere */
static Value *keep(Ad *a, Value *cond, Value *g) { return cond && g ? CALL(&a->r, NULL, "where.ScalarOther", "condition", T(cond), "self", T(g), "other", FL(0)) : NULL; }

static Value *zeros_like(Ad *a, const Value *v) {
  return CALL(&a->r, NULL, "zeros", "size", EXPRS(&a->r, v->rank, v->sizes), "dtype", DT(v->dtype));
}

static Value *reshape(Ad *a, Value *x, int rank, const Expr *const *sizes) {
  return x ? CALL(&a->r, NULL, "reshape", "self", T(x), "shape", EXPRS(&a->r, rank, sizes)) : NULL;
}

static int wrap_dim(const Arg *d, int i, int rank) {
  int64_t v = 0;
  expr_is_const(d->k == AK_INTS ? d->u.is[i] : d->u.i, &v);
  return (int)(v < 0 ? v + (rank ? rank : 1) : v);
}

/* g summed down to x's shape: over leading dims it lacks and dims where x has size 1 (broadcasting). */
static Value *sum_to(Ad *a, Value *g, const Value *x) {
  if (!g) return NULL;
  int lead = g->rank - x->rank;
  int64_t dims[GG_MAX_RANK], one;
  int nd = 0;
  for (int d = 0; d < g->rank; d++) {
    bool unit = d >= lead && expr_is_const(x->sizes[d - lead], &one) && one == 1 && !(expr_is_const(g->sizes[d], &one) && one == 1);
    if (d < lead || unit) dims[nd++] = d;
  }
  if (!nd) return g->rank == x->rank ? g : reshape(a, g, x->rank, x->sizes);
  Value *s = CALL(&a->r, NULL, "sum.dim_IntList", "self", T(g), "dim", INTS(&a->r, nd, dims), "keepdim", BO(true));
  return reshape(a, s, x->rank, x->sizes);
}

/* g (reduced over dims, kept or not) broadcast back to x's shape */
static Value *unreduce(Ad *a, Value *g, const Value *x, const bool *reduced, bool keepdim) {
  if (!g) return NULL;
  if (!keepdim) {
    const Expr *ks[GG_MAX_RANK];
    for (int d = 0; d < x->rank; d++) ks[d] = reduced[d] ? expr_const(a->g->ctx->arena, 1) : x->sizes[d];
    g = reshape(a, g, x->rank, ks);
  }
  return g ? CALL(&a->r, NULL, "expand", "self", T(g), "size", EXPRS(&a->r, x->rank, x->sizes)) : NULL;
}

/* which dims of x a reduction's dim argument names (none or empty: all) */
static int reduced_dims(const Arg *d, int rank, bool *reduced) {
  int n = 0;
  bool all = !d || d->k == AK_NONE || (d->k == AK_INTS && d->n == 0);
  for (int i = 0; i < rank; i++) reduced[i] = all;
  for (int i = 0; !all && i < d->n; i++) reduced[wrap_dim(d, i, rank)] = true;
  for (int i = 0; i < rank; i++) n += reduced[i];
  return n;
}

static Value *G(Ad *a, Node *n, int i) { return a->grad[n->outs[i]->id]; }

/* Add gx into x's gradient (summed to x's shape, in x's dtype). */
static int acc(Ad *a, Value *x, Value *gx) {
  if (!x || !a->diff[x->id]) return 0;
  if (!gx) return -1;
  gx = sum_to(a, gx, x);
  if (gx && gx->dtype != x->dtype) gx = as_float(a, gx, x->dtype);
  if (!gx) return -1;
  Value **slot = &a->grad[x->id];
  *slot = *slot ? binop(a, "add.Tensor", *slot, gx) : gx;
  return *slot ? 0 : -1;
}

/* ---------------------------------------------------------------- rules */

/* Unary pointwise ops: d = g * f'(x), written with x and the output y. */
int grad_unary(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *y = n->outs[0], *g = G(a, n, 0), *d = NULL;
  const char *op = n->op->name;
  if (!strcmp(op, "neg")) d = mulf(a, g, -1);
  else if (!strcmp(op, "exp")) d = mul(a, g, y);
  else if (!strcmp(op, "expm1")) d = mul(a, g, binf(a, "add.Tensor", y, 1));
  else if (!strcmp(op, "log")) d = binop(a, "div.Tensor", g, x);
  else if (!strcmp(op, "log1p")) d = binop(a, "div.Tensor", g, binf(a, "add.Tensor", x, 1));
  else if (!strcmp(op, "sqrt")) d = binop(a, "div.Tensor", mulf(a, g, 0.5), y);
  else if (!strcmp(op, "rsqrt")) d = mul(a, g, mulf(a, mul(a, y, mul(a, y, y)), -0.5));
  else if (!strcmp(op, "reciprocal")) d = mul(a, g, mulf(a, mul(a, y, y), -1));
  else if (!strcmp(op, "square")) d = mul(a, g, mulf(a, x, 2));
  else if (!strcmp(op, "tanh")) d = mul(a, g, CALL(&a->r, NULL, "rsub.Scalar", "self", T(mul(a, y, y)), "other", FL(1)));
  else if (!strcmp(op, "sigmoid")) d = mul(a, g, mul(a, y, CALL(&a->r, NULL, "rsub.Scalar", "self", T(y), "other", FL(1))));
  else if (!strcmp(op, "sin")) d = mul(a, g, unop(a, "cos", x));
  else if (!strcmp(op, "cos")) d = mul(a, g, mulf(a, unop(a, "sin", x), -1));
  else if (!strcmp(op, "abs")) d = mul(a, g, unop(a, "sign", x));
  else if (!strcmp(op, "erf")) d = mul(a, g, mulf(a, unop(a, "exp", mulf(a, mul(a, x, x), -1)), 2 / sqrt(M_PI)));
  else if (!strcmp(op, "relu")) d = keep(a, binf(a, "gt.Scalar", y, 0), g);
  else if (!strcmp(op, "silu")) {
    Value *s = unop(a, "sigmoid", x);
    Value *t = s ? CALL(&a->r, NULL, "rsub.Scalar", "self", T(s), "other", FL(1)) : NULL;   /* 1 - s */
    d = mul(a, g, mul(a, s, binf(a, "add.Tensor", mul(a, x, t), 1)));
  } else if (!strcmp(op, "gelu")) {
    const Arg *ap = rw_arg(n, "approximate");
    if (ap && ap->k == AK_STR && !strcmp(ap->u.s, "tanh")) {
      const double k = sqrt(2 / M_PI), c = 0.044715;
      Value *x2 = mul(a, x, x);
      Value *inner = mulf(a, mul(a, x, binf(a, "add.Tensor", mulf(a, x2, c), 1)), k);
      Value *t = unop(a, "tanh", inner);
      Value *dt1 = t ? CALL(&a->r, NULL, "rsub.Scalar", "self", T(mul(a, t, t)), "other", FL(1)) : NULL;    /* 1 - t^2 */
      Value *dinner = binf(a, "add.Tensor", mulf(a, x2, 3 * c * k), k);                                   /* k (1 + 3c x^2) */
      Value *left = mulf(a, binf(a, "add.Tensor", t, 1), 0.5);
      d = mul(a, g, binop(a, "add.Tensor", left, mul(a, mulf(a, x, 0.5), mul(a, dt1, dinner))));
    } else {
      Value *cdf = mulf(a, binf(a, "add.Tensor", unop(a, "erf", mulf(a, x, M_SQRT1_2)), 1), 0.5);
      Value *pdf = mulf(a, unop(a, "exp", mulf(a, mul(a, x, x), -0.5)), 1 / sqrt(2 * M_PI));
      d = mul(a, g, binop(a, "add.Tensor", cdf, mul(a, x, pdf)));
    }
  } else if (!strcmp(op, "leaky_relu")) {
    double s = rw_farg(n, "negative_slope", 0.01);
    Value *pos = binf(a, "gt.Scalar", x, 0);
    d = pos ? CALL(&a->r, NULL, "where.self", "condition", T(pos), "self", T(g), "other", T(mulf(a, g, s))) : NULL;
  } else if (!strcmp(op, "hardtanh") || !strcmp(op, "relu6")) {
    bool r6 = !strcmp(op, "relu6");
    double lo = r6 ? 0 : rw_farg(n, "min_val", -1), hi = r6 ? 6 : rw_farg(n, "max_val", 1);
    d = keep(a, binop(a, "logical_and", binf(a, "gt.Scalar", x, lo), binf(a, "lt.Scalar", x, hi)), g);
  } else if (!strcmp(op, "clamp") || !strcmp(op, "clamp_min") || !strcmp(op, "clamp_max")) {
    const Arg *lo = rw_arg(n, "min"), *hi = rw_arg(n, "max");
    d = g;
    if (lo && lo->k != AK_NONE) d = keep(a, binf(a, "ge.Scalar", x, rw_farg(n, "min", 0)), d);
    if (hi && hi->k != AK_NONE) d = keep(a, binf(a, "le.Scalar", x, rw_farg(n, "max", 0)), d);
  } else if (!strcmp(op, "hardswish")) {   /* x < -3: 0; x <= 3: g (x/3 + 1/2); else g */
    Value *mid = mul(a, g, binf(a, "add.Tensor", mulf(a, x, 1.0 / 3), 0.5));
    Value *hiv = binf(a, "le.Scalar", x, 3);
    d = hiv ? CALL(&a->r, NULL, "where.self", "condition", T(hiv), "self", T(mid), "other", T(g)) : NULL;
    d = keep(a, binf(a, "ge.Scalar", x, -3), d);
  } else if (!strcmp(op, "hardsigmoid")) {
    d = keep(a, binop(a, "logical_and", binf(a, "gt.Scalar", x, -3), binf(a, "lt.Scalar", x, 3)), mulf(a, g, 1.0 / 6));
  } else if (!strcmp(op, "softplus")) {
    double beta = rw_farg(n, "beta", 1), th = rw_farg(n, "threshold", 20);
    Value *s = mul(a, g, unop(a, "sigmoid", mulf(a, x, beta)));
    Value *lin = binf(a, "gt.Scalar", mulf(a, x, beta), th);
    d = lin ? CALL(&a->r, NULL, "where.self", "condition", T(lin), "self", T(g), "other", T(s)) : NULL;
  } else if (!strcmp(op, "elu")) {   /* x > 0: g scale; else g input_scale (y + alpha scale) */
    double al = rw_farg(n, "alpha", 1), sc = rw_farg(n, "scale", 1), is = rw_farg(n, "input_scale", 1);
    Value *neg = mul(a, mulf(a, g, is), binf(a, "add.Tensor", y, al * sc));
    Value *pos = binf(a, "gt.Scalar", x, 0);
    d = pos ? CALL(&a->r, NULL, "where.self", "condition", T(pos), "self", T(mulf(a, g, sc)), "other", T(neg)) : NULL;
  } else if (!strcmp(op, "pow.Tensor_Scalar")) {
    double e = rw_farg(n, "exponent", 1);
    if (e == 0) d = mulf(a, g, 0);
    else if (e == 1) d = g;
    else if (e == 2) d = mul(a, g, mulf(a, x, 2));
    else d = mul(a, g, mulf(a, CALL(&a->r, NULL, "pow.Tensor_Scalar", "self", T(x), "exponent", FL(e - 1)), e));
  } else if (!strcmp(op, "mul.Scalar")) d = mulf(a, g, rw_farg(n, "other", 1));
  else if (!strcmp(op, "add.Scalar") || !strcmp(op, "clone") || !strcmp(op, "alias") || !strcmp(op, "contiguous") ||
           !strcmp(op, "lift_fresh_copy") || !strcmp(op, "_to_copy") || !strcmp(op, "to.dtype") || !strcmp(op, "dropout") ||
           !strcmp(op, "native_dropout") || !strcmp(op, "detach"))
    d = g;   /* dropout reaches here only when it is the identity (eval, or p = 0) */
  else if (!strcmp(op, "rsub.Scalar")) d = mulf(a, g, -rw_farg(n, "alpha", 1));
  else if (!strcmp(op, "frac") || !strcmp(op, "remainder.Scalar") || !strcmp(op, "fmod.Scalar") || !strcmp(op, "type_as") || !strcmp(op, "to.device")) d = g;
  else if (!strcmp(op, "sub.Scalar")) d = g;
  else if (!strcmp(op, "div.Scalar")) d = mulf(a, g, 1 / rw_farg(n, "other", 1));
  else if (!strcmp(op, "sinh")) d = mul(a, g, unop(a, "cosh", x));
  else if (!strcmp(op, "cosh")) d = mul(a, g, unop(a, "sinh", x));
  else if (!strcmp(op, "tan")) d = mul(a, g, binf(a, "add.Tensor", mul(a, y, y), 1));
  else if (!strcmp(op, "atan")) d = binop(a, "div.Tensor", g, binf(a, "add.Tensor", mul(a, x, x), 1));
  else if (!strcmp(op, "asin")) d = mul(a, g, unop(a, "rsqrt", CALL(&a->r, NULL, "rsub.Scalar", "self", T(mul(a, x, x)), "other", FL(1))));
  else if (!strcmp(op, "acos")) d = mulf(a, mul(a, g, unop(a, "rsqrt", CALL(&a->r, NULL, "rsub.Scalar", "self", T(mul(a, x, x)), "other", FL(1)))), -1);
  else if (!strcmp(op, "asinh")) d = mul(a, g, unop(a, "rsqrt", binf(a, "add.Tensor", mul(a, x, x), 1)));
  else if (!strcmp(op, "acosh")) d = mul(a, g, unop(a, "rsqrt", binf(a, "add.Tensor", mul(a, x, x), -1)));
  else if (!strcmp(op, "atanh")) d = binop(a, "div.Tensor", g, CALL(&a->r, NULL, "rsub.Scalar", "self", T(mul(a, x, x)), "other", FL(1)));
  else if (!strcmp(op, "log2")) d = binop(a, "div.Tensor", g, mulf(a, x, M_LN2));
  else if (!strcmp(op, "log10")) d = binop(a, "div.Tensor", g, mulf(a, x, M_LN10));
  else if (!strcmp(op, "exp2")) d = mul(a, g, mulf(a, y, M_LN2));
  else if (!strcmp(op, "log_sigmoid")) d = mul(a, g, unop(a, "sigmoid", mulf(a, x, -1)));
  else if (!strcmp(op, "selu")) {   /* x > 0: g scale; else g (y + scale alpha) */
    const double sc = 1.0507009873554804934193349852946, al = 1.6732632423543772848170429916717;
    Value *pos = binf(a, "gt.Scalar", x, 0);
    Value *neg = mul(a, g, binf(a, "add.Tensor", y, sc * al));
    d = pos ? CALL(&a->r, NULL, "where.self", "condition", T(pos), "self", T(mulf(a, g, sc)), "other", T(neg)) : NULL;
  } else if (!strcmp(op, "mish")) {   /* tanh(sp) + x sech^2(sp) sigmoid(x), sp = softplus(x) */
    Value *t = unop(a, "tanh", unop(a, "softplus", x));
    Value *sech2 = t ? CALL(&a->r, NULL, "rsub.Scalar", "self", T(mul(a, t, t)), "other", FL(1)) : NULL;
    d = mul(a, g, binop(a, "add.Tensor", t, mul(a, mul(a, x, sech2), unop(a, "sigmoid", x))));
  } else if (!strcmp(op, "flip")) d = CALL(&a->r, NULL, "flip", "self", T(g), "dims", rw_arg(n, "dims")[0]);
  else if (!strcmp(op, "movedim.int")) d = CALL(&a->r, NULL, "movedim.int", "self", T(g), "source", rw_arg(n, "destination")[0], "destination", rw_arg(n, "source")[0]);
  else if (!strcmp(op, "erfinv")) d = mul(a, g, mulf(a, unop(a, "exp", mul(a, y, y)), sqrt(M_PI) / 2));
  else if (!strcmp(op, "celu")) {   /* x > 0: g; else g e^(x/alpha) = g (y/alpha + 1) */
    double al = rw_farg(n, "alpha", 1);
    Value *pos = binf(a, "gt.Scalar", x, 0);
    Value *neg = mul(a, g, binf(a, "add.Tensor", mulf(a, y, 1 / al), 1));
    d = pos ? CALL(&a->r, NULL, "where.self", "condition", T(pos), "self", T(g), "other", T(neg)) : NULL;
  } else if (!strcmp(op, "to.dtype_layout")) d = g;
  else if (!strcmp(op, "tril") || !strcmp(op, "triu")) d = CALL(&a->r, NULL, op, "self", T(g), "diagonal", rw_arg(n, "diagonal")[0]);
  else if (!strcmp(op, "cumsum")) {   /* the running sum from the other end */
    Arg dims = EXPRS(&a->r, 1, &rw_arg(n, "dim")->u.i);
    Value *f = CALL(&a->r, NULL, "flip", "self", T(g), "dims", dims);
    Value *cs = f ? CALL(&a->r, NULL, "cumsum", "self", T(f), "dim", rw_arg(n, "dim")[0]) : NULL;
    d = cs ? CALL(&a->r, NULL, "flip", "self", T(cs), "dims", dims) : NULL;
  }
  if (!strcmp(op, "detach")) return 0;
  return acc(a, x, d);
}

/* self op other, either of them a tensor (the other may be a Python number) */
int grad_binary(Ad *a, Node *n) {
  const char *op = n->op->name;
  Value *g = G(a, n, 0), *y = n->outs[0];
  Value *x = n->args[0].k == AK_TENSOR ? n->args[0].u.t : NULL, *o = n->args[1].k == AK_TENSOR ? n->args[1].u.t : NULL;
  double al = rw_farg(n, "alpha", 1);
  if (!strcmp(op, "add.Tensor")) return acc(a, x, g) || acc(a, o, mulf(a, g, al));
  if (!strcmp(op, "sub.Tensor")) return acc(a, x, g) || acc(a, o, mulf(a, g, -al));
  if (!strcmp(op, "rsub.Tensor")) return acc(a, x, mulf(a, g, -al)) || acc(a, o, g);
  if (!strcmp(op, "mul.Tensor")) {
    if (!o) return acc(a, x, mulf(a, g, rw_farg(n, "other", 1)));
    return (a->diff[x->id] && acc(a, x, mul(a, g, o))) || (a->diff[o->id] && acc(a, o, mul(a, g, x)));
  }
  if (!strcmp(op, "div.Tensor")) {
    if (!o) return acc(a, x, mulf(a, g, 1 / rw_farg(n, "other", 1)));
    return (a->diff[x->id] && acc(a, x, binop(a, "div.Tensor", g, o))) ||
           (a->diff[o->id] && acc(a, o, mulf(a, binop(a, "div.Tensor", mul(a, g, y), o), -1)));
  }
  if (!strcmp(op, "fmod.Tensor")) {   /* self - trunc(self / other) other: g, and -g trunc(self / other) */
    Value *q = o && a->diff[o->id] ? unop(a, "trunc", binop(a, "div.Tensor", x, o)) : NULL;
    return (a->diff[x->id] && acc(a, x, g)) || (q && acc(a, o, mulf(a, mul(a, g, q), -1)));
  }
  if (!strcmp(op, "maximum") || !strcmp(op, "minimum") || !strcmp(op, "max.other") || !strcmp(op, "min.other")) {   /* ties share the gradient, as in PyTorch */
    Value *win = binop(a, !strncmp(op, "max", 3) ? "gt.Tensor" : "lt.Tensor", x, o), *tie = binop(a, "eq.Tensor", x, o);
    Value *half = mulf(a, keep(a, tie, g), 0.5);
    Value *lose = win ? unop(a, "logical_not", binop(a, "logical_or", win, tie)) : NULL;
    return (a->diff[x->id] && acc(a, x, binop(a, "add.Tensor", keep(a, win, g), half))) ||
           (a->diff[o->id] && acc(a, o, binop(a, "add.Tensor", keep(a, lose, g), half)));
  }
  return gg_error(a->g->ctx, "internal error: binary rule for %s", op);
}

/* sort and topk: the values' gradient goes back to the positions they came from */
int grad_sort(Ad *a, Node *n) {
  Value *x = rw_targ(n, "self"), *g = G(a, n, 0);
  if (!g) return 0;
  Value *z = CALL(&a->r, NULL, "zeros_like", "self", T(x));
  return acc(a, x, z ? CALL(&a->r, NULL, "scatter_add", "self", T(z), "dim", rw_arg(n, "dim")[0], "index", T(n->outs[1]), "src", T(g)) : NULL);
}

/* copy: src broadcast into self's shape and dtype; self's values are all overwritten */
int grad_copy(Ad *a, Node *n) { return acc(a, rw_targ(n, "src"), G(a, n, 0)); }

/* division with a rounding mode: none is true division (the binary rule's); trunc and floor give no gradient */
int grad_div_mode(Ad *a, Node *n) {
  const Arg *m = rw_arg(n, "rounding_mode");
  if (m && m->k == AK_STR) return 0;
  Value *x = rw_targ(n, "self"), *o = rw_targ(n, "other"), *g = G(a, n, 0), *y = n->outs[0];
  if (!o) return acc(a, x, mulf(a, g, 1 / rw_farg(n, "other", 1)));
  return (a->diff[x->id] && acc(a, x, binop(a, "div.Tensor", g, o))) || (a->diff[o->id] && acc(a, o, mulf(a, binop(a, "div.Tensor", mul(a, g, y), o), -1)));
}

int grad_atan2(Ad *a, Node *n) {   /* d/dx = o / (x^2 + o^2), d/do = -x / (x^2 + o^2) */
  Value *x = rw_targ(n, "self"), *o = rw_targ(n, "other"), *g = G(a, n, 0);
  Value *den = binop(a, "add.Tensor", mul(a, x, x), mul(a, o, o)), *gd = binop(a, "div.Tensor", g, den);
  if (a->diff[x->id] && acc(a, x, mul(a, gd, o))) return -1;
  return a->diff[o->id] ? acc(a, o, mulf(a, mul(a, gd, x), -1)) : 0;
}

int grad_where(Ad *a, Node *n) {
  Value *c = rw_targ(n, "condition"), *g = G(a, n, 0);
  const char *op = n->op->name;
  if (!strcmp(op, "masked_fill.Tensor")) {
    Value *m = rw_targ(n, "mask"), *v = rw_targ(n, "value");
    if (acc(a, rw_targ(n, "self"), CALL(&a->r, NULL, "where.ScalarSelf", "condition", T(m), "self", FL(0), "other", T(g)))) return -1;
    return v && a->diff[v->id] ? acc(a, v, keep(a, m, g)) : 0;
  }
  if (!strcmp(op, "masked_fill.Scalar"))
    return acc(a, rw_targ(n, "self"), CALL(&a->r, NULL, "where.ScalarSelf", "condition", T(rw_targ(n, "mask")), "self", FL(0), "other", T(g)));
  Value *x = rw_targ(n, "self"), *o = rw_targ(n, "other");
  if (x && a->diff[x->id] && acc(a, x, keep(a, c, g))) return -1;
  if (o && a->diff[o->id] && acc(a, o, CALL(&a->r, NULL, "where.ScalarSelf", "condition", T(c), "self", FL(0), "other", T(g)))) return -1;
  return 0;
}

/* ---- views and data movement */

int grad_reshape(Ad *a, Node *n) {
  Value *x = n->args[0].u.t;
  return acc(a, x, reshape(a, G(a, n, 0), x->rank, x->sizes));
}

int grad_expand(Ad *a, Node *n) { return acc(a, n->args[0].u.t, G(a, n, 0)); }   /* acc sums to x's shape */

int grad_permute(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *g = G(a, n, 0);
  const char *op = n->op->name;
  if (!strcmp(op, "t") || !strcmp(op, "transpose.int")) {
    if (!strcmp(op, "t")) return acc(a, x, unop(a, "t", g));
    return acc(a, x, CALL(&a->r, NULL, "transpose.int", "self", T(g), "dim0", n->args[1], "dim1", n->args[2]));
  }
  const Arg *p = rw_arg(n, "dims");
  int64_t inv[GG_MAX_RANK];
  for (int i = 0; i < p->n; i++) inv[wrap_dim(p, i, x->rank)] = i;
  return acc(a, x, CALL(&a->r, NULL, "permute", "self", T(g), "dims", INTS(&a->r, p->n, inv)));
}

int grad_slice(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *g = G(a, n, 0), *z = zeros_like(a, x);
  const char *op = n->op->name;
  if (!z || !g) return -1;
  if (!strcmp(op, "select.int"))
    return acc(a, x, CALL(&a->r, NULL, "select_scatter", "self", T(z), "src", T(g), "dim", rw_arg(n, "dim")[0], "index", rw_arg(n, "index")[0]));
  if (!strcmp(op, "narrow")) {
    const Arg *st = rw_arg(n, "start"), *len = rw_arg(n, "length");
    Arg end = {.k = AK_INT, .u.i = expr_bin(a->g->ctx->arena, E_ADD, st->u.i, len->u.i)};
    return acc(a, x, CALL(&a->r, NULL, "slice_scatter", "self", T(z), "src", T(g), "dim", rw_arg(n, "dim")[0], "start", *st, "end", end));
  }
  return acc(a, x, CALL(&a->r, NULL, "slice_scatter", "self", T(z), "src", T(g), "dim", rw_arg(n, "dim")[0], "start", rw_arg(n, "start")[0], "end",
                        rw_arg(n, "end")[0], "step", rw_arg(n, "step")[0]));
}

/* cat / stack: each input's part of the gradient */
int grad_cat(Ad *a, Node *n) {
  const Arg *ts = &n->args[0];
  Value *g = G(a, n, 0);
  bool stack = !strcmp(n->op->name, "stack");
  int d = wrap_dim(&n->args[1], 0, stack ? g->rank : g->rank);
  const Expr *at = expr_const(a->g->ctx->arena, 0);
  for (int i = 0; i < ts->n; i++) {
    Value *x = ts->u.ts[i];
    if (!x) continue;
    if (stack) {
      if (acc(a, x, CALL(&a->r, NULL, "select.int", "self", T(g), "dim", INT(&a->r, d), "index", INT(&a->r, i)))) return -1;
      continue;
    }
    int64_t z0;
    if (x->rank == 1 && g->rank > 1 && expr_is_const(x->sizes[0], &z0) && z0 == 0) continue;   /* legacy empty input */
    const Expr *end = expr_bin(a->g->ctx->arena, E_ADD, at, x->sizes[d]);
    Arg s = {.k = AK_INT, .u.i = at}, e = {.k = AK_INT, .u.i = end};
    if (a->diff[x->id] && acc(a, x, CALL(&a->r, NULL, "slice.Tensor", "self", T(g), "dim", INT(&a->r, d), "start", s, "end", e))) return -1;
    at = end;
  }
  return 0;
}

/* split / chunk / unbind: the gradients of the pieces, side by side (zeros for unused pieces) */
int grad_split(Ad *a, Node *n) {
  Value *x = n->args[0].u.t;
  bool unbind = !strcmp(n->op->name, "unbind.int");
  int d = wrap_dim(rw_arg(n, "dim"), 0, x->rank);
  Arg list = {.k = AK_TENSORS, .n = n->nouts};
  list.u.ts = arena_array(a->g->ctx->arena, (size_t)n->nouts + 1, sizeof *list.u.ts);
  for (int i = 0; i < n->nouts; i++) {
    Value *gi = G(a, n, i);
    list.u.ts[i] = gi ? gi : zeros_like(a, n->outs[i]);
    if (!list.u.ts[i]) return -1;
  }
  return acc(a, x, CALL(&a->r, NULL, unbind ? "stack" : "cat", "tensors", list, "dim", INT(&a->r, d)));
}

int grad_gather(Ad *a, Node *n) {
  Value *x = rw_targ(n, "self");
  return acc(a, x, CALL(&a->r, NULL, "scatter_add", "self", T(zeros_like(a, x)), "dim", rw_arg(n, "dim")[0], "index", T(rw_targ(n, "index")), "src", T(G(a, n, 0))));
}

int grad_embedding(Ad *a, Node *n) {
  Value *w = rw_targ(n, "weight"), *ix = rw_targ(n, "indices"), *g = G(a, n, 0);
  const Arg *pi = rw_arg(n, "padding_idx");
  int64_t pad = -1;
  if (pi && pi->k == AK_INT) expr_is_const(pi->u.i, &pad);
  if (rw_arg(n, "scale_grad_by_freq")->u.b) return gg_error(a->g->ctx, "%s: node %s: embedding with scale_grad_by_freq has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name));
  if (pad >= 0) {   /* the padding row gets no gradient */
    Value *m = CALL(&a->r, NULL, "ne.Scalar", "self", T(ix), "other", FL((double)pad));
    const Expr *ks[GG_MAX_RANK];
    for (int d = 0; d < ix->rank; d++) ks[d] = ix->sizes[d];
    ks[ix->rank] = expr_const(a->g->ctx->arena, 1);
    g = keep(a, reshape(a, m, ix->rank + 1, ks), g);
  }
  Arg list = {.k = AK_TENSORS, .n = 1};
  list.u.ts = arena_array(a->g->ctx->arena, 2, sizeof *list.u.ts);
  list.u.ts[0] = ix;
  return acc(a, w, CALL(&a->r, NULL, "index_put", "self", T(zeros_like(a, w)), "indices", list, "values", T(g), "accumulate", BO(true)));
}

/* ---- reductions and rows */

int grad_reduce(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *g = G(a, n, 0), *y = n->outs[0];
  const int rk = n->op->red;
  bool all = ops_arg_index(n->op, "dim") < 0;   /* sum(), mean(), max(), min(): over every dim */
  if (rk == R_MAX_DIM || rk == R_MIN_DIM) {   /* the gradient goes to the index each row picked */
    const Arg *da = rw_arg(n, "dim"), *kda = rw_arg(n, "keepdim");
    Value *gv = g, *ix = n->outs[1];
    if (!kda->u.b) {
      gv = CALL(&a->r, NULL, "unsqueeze", "self", T(g), "dim", *da);
      ix = CALL(&a->r, NULL, "unsqueeze", "self", T(ix), "dim", *da);
    }
    return acc(a, x, gv && ix ? CALL(&a->r, NULL, "scatter.src", "self", T(zeros_like(a, x)), "dim", *da, "index", T(ix), "src", T(gv)) : NULL);
  }
  const Arg *kd = rw_arg(n, "keepdim");
  bool reduced[GG_MAX_RANK], keepdim = kd && kd->k == AK_BOOL && kd->u.b;
  reduced_dims(all ? NULL : rw_arg(n, "dim"), x->rank, reduced);
  if (rk == R_SUM) return acc(a, x, unreduce(a, g, x, reduced, keepdim));
  if (rk == R_MEAN) {
    const Expr *cnt = expr_const(a->g->ctx->arena, 1);
    for (int d = 0; d < x->rank; d++) if (reduced[d]) cnt = expr_bin(a->g->ctx->arena, E_MUL, cnt, x->sizes[d]);
    int64_t c;
    if (!expr_is_const(cnt, &c)) return gg_error(a->g->ctx, "%s: node %s: the gradient of a mean over symbolic sizes is not supported", a->g->path, gg_quote(a->g->ctx, n->name));
    return acc(a, x, unreduce(a, mulf(a, g, 1.0 / (double)c), x, reduced, keepdim));
  }
  Value *yk = unreduce(a, y, x, reduced, keepdim), *gk = unreduce(a, g, x, reduced, keepdim);
  if (rk == R_NORM) {   /* g sign(x) |x|^(p-1) / y^(p-1) */
    double p = rw_farg(n, "ord", 2);
    if (p == 0) return 0;   /* a count of nonzeros: no gradient */
    if (!(p > 0)) return gg_error(a->g->ctx, "%s: node %s: the gradient of a %g-norm is not supported", a->g->path, gg_quote(a->g->ctx, n->name), p);
    if (isinf(p)) {   /* amax of |x|: g sign(x) to the largest elements, shared among ties */
      int64_t dims[GG_MAX_RANK];
      int nd = 0;
      for (int d = 0; d < x->rank; d++) if (reduced[d]) dims[nd++] = d;
      Value *m = as_float(a, binop(a, "eq.Tensor", unop(a, "abs", x), yk), x->dtype);
      Value *cnt = m ? CALL(&a->r, NULL, "sum.dim_IntList", "self", T(m), "dim", INTS(&a->r, nd, dims), "keepdim", BO(true)) : NULL;
      return acc(a, x, binop(a, "div.Tensor", mul(a, mul(a, gk, unop(a, "sign", x)), m), cnt));
    }
    if (p == 1) return acc(a, x, mul(a, gk, unop(a, "sign", x)));
    if (p == 2) return acc(a, x, binop(a, "div.Tensor", mul(a, gk, x), yk));
    Value *ax = unop(a, "abs", x);
    Value *num = mul(a, unop(a, "sign", x), ax ? CALL(&a->r, NULL, "pow.Tensor_Scalar", "self", T(ax), "exponent", FL(p - 1)) : NULL);
    Value *den = yk ? CALL(&a->r, NULL, "pow.Tensor_Scalar", "self", T(yk), "exponent", FL(p - 1)) : NULL;
    return acc(a, x, mul(a, gk, binop(a, "div.Tensor", num, den)));
  }
  if (rk == R_LSE) return acc(a, x, mul(a, gk, unop(a, "exp", binop(a, "sub.Tensor", x, yk))));
  /* amax / amin: the gradient goes to the extreme elements, shared among ties */
  Value *m = as_float(a, binop(a, "eq.Tensor", x, yk), x->dtype);
  int64_t dims[GG_MAX_RANK];
  int nd = 0;
  for (int d = 0; d < x->rank; d++) if (reduced[d]) dims[nd++] = d;
  Value *cnt = m ? CALL(&a->r, NULL, "sum.dim_IntList", "self", T(m), "dim", INTS(&a->r, nd, dims), "keepdim", BO(true)) : NULL;
  return acc(a, x, binop(a, "div.Tensor", mul(a, gk, m), cnt));
}

int grad_softmax(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *y = n->outs[0], *g = G(a, n, 0);
  Arg dim = EXPRS(&a->r, 1, &n->args[1].u.i);
  if (y->dtype != x->dtype) return gg_error(a->g->ctx, "%s: node %s: softmax with a dtype change has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name));
  if (n->op->red == R_LOG_SOFTMAX) {   /* g - exp(y) sum(g) */
    Value *s = CALL(&a->r, NULL, "sum.dim_IntList", "self", T(g), "dim", dim, "keepdim", BO(true));
    return acc(a, x, binop(a, "sub.Tensor", g, mul(a, unop(a, "exp", y), s)));
  }
  Value *gy = mul(a, g, y);   /* y (g - sum(g y)) */
  Value *s = gy ? CALL(&a->r, NULL, "sum.dim_IntList", "self", T(gy), "dim", dim, "keepdim", BO(true)) : NULL;
  return acc(a, x, mul(a, y, binop(a, "sub.Tensor", g, s)));
}

/* ---- matrix products */

static Value *mT(Ad *a, Value *v) {   /* swap the last two dims */
  return v ? CALL(&a->r, NULL, "transpose.int", "self", T(v), "dim0", INT(&a->r, -2), "dim1", INT(&a->r, -1)) : NULL;
}

int grad_matmul(Ad *a, Node *n) {
  const char *op = n->op->name;
  Value *g = G(a, n, 0);
  if (!strcmp(op, "linear")) {   /* y = x w^T + b */
    Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias");
    if (x->rank < 1 || w->rank != 2) return gg_error(a->g->ctx, "%s: node %s: linear with a %d-d weight has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name), w->rank);
    if (a->diff[x->id] && acc(a, x, CALL(&a->r, NULL, "matmul", "self", T(g), "other", T(w)))) return -1;
    if (a->diff[w->id]) {
      /* the leading dims counted, not -1 (which 0 elements leave undetermined) */
      const Expr *lead = expr_const(a->g->ctx->arena, 1);
      for (int d = 0; d < g->rank - 1; d++) lead = expr_bin(a->g->ctx->arena, E_MUL, lead, g->sizes[d]);
      const Expr *m1[2] = {lead, g->sizes[g->rank - 1]}, *m2[2] = {lead, x->sizes[x->rank - 1]};
      Value *g2 = reshape(a, g, 2, m1), *x2 = reshape(a, x, 2, m2);
      if (acc(a, w, CALL(&a->r, NULL, "mm", "self", T(unop(a, "t", g2)), "mat2", T(x2)))) return -1;
    }
    return b ? acc(a, b, g) : 0;
  }
  if (!strcmp(op, "addmm") || !strcmp(op, "baddbmm")) {   /* y = beta self + alpha m1 m2 */
    bool b3 = op[0] == 'b';
    Value *s = rw_targ(n, "self"), *m1 = rw_targ(n, b3 ? "batch1" : "mat1"), *m2 = rw_targ(n, b3 ? "batch2" : "mat2");
    double beta = rw_farg(n, "beta", 1), alpha = rw_farg(n, "alpha", 1);
    Value *ga = mulf(a, g, alpha);
    if (s && acc(a, s, mulf(a, g, beta))) return -1;
    const char *mmop = b3 ? "bmm" : "mm";
    if (a->diff[m1->id] && acc(a, m1, CALL(&a->r, NULL, mmop, "self", T(ga), "mat2", T(mT(a, m2))))) return -1;
    return a->diff[m2->id] ? acc(a, m2, CALL(&a->r, NULL, mmop, "self", T(mT(a, m1)), "mat2", T(ga))) : 0;
  }
  Value *x = n->args[0].u.t, *w = n->args[1].u.t;
  if (!strcmp(op, "mm")) {
    if (a->diff[x->id] && acc(a, x, CALL(&a->r, NULL, "mm", "self", T(g), "mat2", T(unop(a, "t", w))))) return -1;
    return a->diff[w->id] ? acc(a, w, CALL(&a->r, NULL, "mm", "self", T(unop(a, "t", x)), "mat2", T(g))) : 0;
  }
  if (!strcmp(op, "bmm")) {
    if (a->diff[x->id] && acc(a, x, CALL(&a->r, NULL, "bmm", "self", T(g), "mat2", T(mT(a, w))))) return -1;
    return a->diff[w->id] ? acc(a, w, CALL(&a->r, NULL, "bmm", "self", T(mT(a, x)), "mat2", T(g))) : 0;
  }
  /* matmul with batch broadcasting (both operands at least 2-d); acc sums the batch dims away */
  if (x->rank < 2 || w->rank < 2) return gg_error(a->g->ctx, "%s: node %s: matmul of a 1-d operand has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name));
  if (a->diff[x->id] && acc(a, x, CALL(&a->r, NULL, "matmul", "self", T(g), "other", T(mT(a, w))))) return -1;
  return a->diff[w->id] ? acc(a, w, CALL(&a->r, NULL, "matmul", "self", T(mT(a, x)), "other", T(g))) : 0;
}

/* ---- convolution. The input's gradient is the transposed convolution of g with the weight (and a
 * plain one for a transposed convolution). The weight's is a convolution of the input with g, batch
 * and channels swapped, stride and dilation trading places, narrowed to the kernel: for in [N, G*ci,
 * *sp] and gout [N, G*co, *osp] it gives [G*co, ci, *K], the layout of a plain convolution's weight,
 * and with the roles of input and output exchanged, that of a transposed one's. */
static Value *conv_weight_grad(Ad *a, Value *in, Value *gout, int nsp, const int64_t *st, const int64_t *pd, const int64_t *dl, int64_t groups,
                               const int64_t *K) {
  Arena *ar = a->g->ctx->arena;
  int64_t cin, zero[3] = {0, 0, 0};
  expr_is_const(in->sizes[1], &cin);
  const Expr *N = in->sizes[0], *Gx = expr_const(ar, groups), *ci = expr_const(ar, cin / groups);
  const Expr *s5[6] = {N, Gx, ci}, *s4[5] = {ci, expr_bin(ar, E_MUL, Gx, N)};
  for (int i = 0; i < nsp; i++) s5[3 + i] = s4[2 + i] = in->sizes[2 + i];
  int64_t perm[6] = {2, 1, 0, 3, 4, 5}, sw[5] = {1, 0, 2, 3, 4};
  Value *x5 = reshape(a, in, 3 + nsp, s5);
  Value *xp = x5 ? CALL(&a->r, NULL, "permute", "self", T(x5), "dims", INTS(&a->r, 3 + nsp, perm)) : NULL;
  Value *xin = reshape(a, xp, 2 + nsp, s4);
  Value *gw = CALL(&a->r, NULL, "permute", "self", T(gout), "dims", INTS(&a->r, 2 + nsp, sw));
  Value *r = xin && gw ? CALL(&a->r, NULL, "convolution", "input", T(xin), "weight", T(gw), "bias", NONE(), "stride", INTS(&a->r, nsp, dl), "padding",
                              INTS(&a->r, nsp, pd), "dilation", INTS(&a->r, nsp, st), "transposed", BO(false), "output_padding", INTS(&a->r, nsp, zero),
                              "groups", INT(&a->r, groups)) : NULL;
  for (int i = 0; r && i < nsp; i++) {   /* [ci, G*co, K'...] -> the kernel -> [G*co, ci, K...] */
    int64_t have;
    expr_is_const(r->sizes[2 + i], &have);
    if (have != K[i]) r = CALL(&a->r, NULL, "narrow", "self", T(r), "dim", INT(&a->r, 2 + i), "start", INT(&a->r, 0), "length", INT(&a->r, K[i]));
  }
  return r ? CALL(&a->r, NULL, "permute", "self", T(r), "dims", INTS(&a->r, 2 + nsp, sw)) : NULL;
}

int grad_conv(Ad *a, Node *n) {
  Ctx *c = a->g->ctx;
  Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias"), *g = G(a, n, 0);
  const Arg *tra = rw_arg(n, "transposed");
  bool tr = (tra && tra->u.b) || !strncmp(n->op->name, "conv_transpose", 14);
  int nsp = w->rank - 2;
  Value *xb = x, *gb = g;
  if (x->rank == nsp + 1) {   /* unbatched: as a batch of one */
    xb = CALL(&a->r, NULL, "unsqueeze", "self", T(x), "dim", INT(&a->r, 0));
    gb = CALL(&a->r, NULL, "unsqueeze", "self", T(g), "dim", INT(&a->r, 0));
    if (!xb || !gb) return -1;
  }
  const Arg *sa = rw_arg(n, "stride"), *pa = rw_arg(n, "padding"), *da = rw_arg(n, "dilation"), *oa = rw_arg(n, "output_padding");
  int64_t st[3], pd[3], dl[3], opd[3] = {0, 0, 0}, groups = node_int_arg(n, "groups", 1), K[3], in[3], zero[3] = {0, 0, 0};
  for (int i = 0; i < nsp; i++) {
    bool ok = expr_is_const(sa->u.is[sa->n == 1 ? 0 : i], &st[i]) && expr_is_const(pa->u.is[pa->n == 1 ? 0 : i], &pd[i]) &&
              expr_is_const(da->u.is[da->n == 1 ? 0 : i], &dl[i]) && expr_is_const(w->sizes[2 + i], &K[i]) && expr_is_const(xb->sizes[2 + i], &in[i]) &&
              (!oa || oa->n == 0 || expr_is_const(oa->u.is[oa->n == 1 ? 0 : i], &opd[i]));
    if (!ok) return gg_error(c, "%s: node %s: convolution gradients need static spatial sizes", a->g->path, gg_quote(c, n->name));
  }
  Value *gx = NULL, *gw = NULL;
  if (!tr) {
    int64_t op[3], fpd[3];
    bool unit = true;
    for (int i = 0; i < nsp; i++) {
      op[i] = (in[i] + 2 * pd[i] - dl[i] * (K[i] - 1) - 1) % st[i];
      fpd[i] = dl[i] * (K[i] - 1) - pd[i];
      unit &= st[i] == 1 && fpd[i] >= 0;
    }
    if (a->diff[x->id] && unit) {
      /* stride 1: a plain convolution of g with the kernel flipped and its channels swapped (within
       * each group), which runs on the forward's fast path */
      Arena *ar = c->arena;
      int64_t co, cig;
      expr_is_const(w->sizes[0], &co);
      expr_is_const(w->sizes[1], &cig);
      const Expr *s5[6] = {expr_const(ar, groups), expr_const(ar, co / groups), w->sizes[1]}, *s4[5] = {expr_const(ar, groups * cig), expr_const(ar, co / groups)};
      for (int i = 0; i < nsp; i++) s5[3 + i] = s4[2 + i] = w->sizes[2 + i];
      int64_t perm[6] = {0, 2, 1, 3, 4, 5}, flip[3] = {2, 3, 4};
      Value *w5 = reshape(a, w, 3 + nsp, s5);
      Value *wp = w5 ? CALL(&a->r, NULL, "permute", "self", T(w5), "dims", INTS(&a->r, 3 + nsp, perm)) : NULL;
      Value *w4 = reshape(a, wp, 2 + nsp, s4);
      Value *wf = w4 ? CALL(&a->r, NULL, "flip", "self", T(w4), "dims", INTS(&a->r, nsp, flip)) : NULL;
      gx = wf ? CALL(&a->r, NULL, "convolution", "input", T(gb), "weight", T(wf), "bias", NONE(), "stride", INTS(&a->r, nsp, st), "padding",
                     INTS(&a->r, nsp, fpd), "dilation", INTS(&a->r, nsp, dl), "transposed", BO(false), "output_padding", INTS(&a->r, nsp, zero),
                     "groups", INT(&a->r, groups)) : NULL;
    } else if (a->diff[x->id])
      gx = CALL(&a->r, NULL, "convolution", "input", T(gb), "weight", T(w), "bias", NONE(), "stride", INTS(&a->r, nsp, st), "padding", INTS(&a->r, nsp, pd),
                "dilation", INTS(&a->r, nsp, dl), "transposed", BO(true), "output_padding", INTS(&a->r, nsp, op), "groups", INT(&a->r, groups));
    if (a->diff[w->id] || (b && a->diff[b->id])) {   /* weight and bias: one convolution_backward */
      Arg mask = {.k = AK_BOOLS, .n = 3};
      mask.u.bs = arena_array(c->arena, 4, sizeof *mask.u.bs);
      mask.u.bs[1] = a->diff[w->id];
      mask.u.bs[2] = b && a->diff[b->id];
      Value *o = CALL(&a->r, NULL, "convolution_backward", "grad_output", T(gb), "input", T(xb), "weight", T(w), "stride", INTS(&a->r, nsp, st), "padding",
                      INTS(&a->r, nsp, pd), "dilation", INTS(&a->r, nsp, dl), "transposed", BO(false), "output_padding", INTS(&a->r, nsp, zero), "groups",
                      INT(&a->r, groups), "output_mask", mask);
      if (!o) return -1;
      if (a->diff[w->id]) gw = o->def->outs[1];
      if (mask.u.bs[2] && acc(a, b, o->def->outs[2])) return -1;
      b = NULL;   /* done */
    }
  } else {   /* y = conv_transpose(x, w): x's gradient is conv(g, w); w's is the plain rule with g as the input */
    if (a->diff[x->id])
      gx = CALL(&a->r, NULL, "convolution", "input", T(gb), "weight", T(w), "bias", NONE(), "stride", INTS(&a->r, nsp, st), "padding", INTS(&a->r, nsp, pd),
                "dilation", INTS(&a->r, nsp, dl), "transposed", BO(false), "output_padding", INTS(&a->r, nsp, zero), "groups", INT(&a->r, groups));
    if (a->diff[w->id]) gw = conv_weight_grad(a, gb, xb, nsp, st, pd, dl, groups, K);
  }
  if (a->diff[x->id] && acc(a, x, gx)) return -1;
  if (a->diff[w->id] && acc(a, w, gw)) return -1;
  if (b && a->diff[b->id]) {
    int64_t dims[4] = {0, 2, 3, 4};
    return acc(a, b, CALL(&a->r, NULL, "sum.dim_IntList", "self", T(gb), "dim", INTS(&a->r, 1 + nsp, dims), "keepdim", BO(false)));
  }
  return 0;
}

/* average pooling (and adaptive pooling whose windows tile the input): each window spreads its
 * gradient evenly, a depthwise transposed convolution with a constant kernel */
/* average pooling, plain or adaptive, 2-d: decompose.c's gradients (any ceil mode, divisor, overlap) */
int grad_avg_pool(Ad *a, Node *n) {
  Ctx *c = a->g->ctx;
  Value *x = n->args[0].u.t, *g = G(a, n, 0);
  if (x->rank != 3 && x->rank != 4) return gg_error(c, "%s: node %s: average pooling gradients need a [N,] C, H, W input", a->g->path, gg_quote(c, n->name));
  if (strstr(n->op->name, "adaptive")) return acc(a, x, adaptive_avg_pool_grad(&a->r, g, x, NULL));
  const Arg *ka = rw_arg(n, "kernel_size"), *sa = rw_arg(n, "stride"), *pa = rw_arg(n, "padding");
  int64_t k[2], st[2], pd[2];
  for (int i = 0; i < 2; i++) {
    expr_is_const(ka->u.is[ka->n == 1 ? 0 : i], &k[i]);
    st[i] = k[i];
    if (sa->n) expr_is_const(sa->u.is[sa->n == 1 ? 0 : i], &st[i]);
    expr_is_const(pa->u.is[pa->n == 1 ? 0 : i], &pd[i]);
  }
  return acc(a, x, avg_pool_grad(&a->r, g, x, k, st, pd, rw_arg(n, "count_include_pad")->u.b, rw_arg(n, "divisor_override"), NULL));
}

/* nearest upsampling by whole factors: each input element's gradient sums its copies */
int grad_upsample(Ad *a, Node *n) {
  Ctx *c = a->g->ctx;
  Value *x = n->args[0].u.t, *g = G(a, n, 0);
  if (!strstr(n->op->name, "nearest") || x->rank != 4) return gg_error(c, "%s: node %s: %s has no derivative rule", a->g->path, gg_quote(c, n->name), n->op->name);
  int64_t in[2], out[2];
  for (int i = 0; i < 2; i++)
    if (!expr_is_const(x->sizes[2 + i], &in[i]) || !expr_is_const(g->sizes[2 + i], &out[i]) || out[i] % in[i])
      return gg_error(c, "%s: node %s: nearest upsampling by a fractional factor has no derivative rule", a->g->path, gg_quote(c, n->name));
  const Expr *s6[6] = {x->sizes[0], x->sizes[1], x->sizes[2], expr_const(c->arena, out[0] / in[0]), x->sizes[3], expr_const(c->arena, out[1] / in[1])};
  int64_t dims[2] = {3, 5};
  Value *g6 = reshape(a, g, 6, s6);
  return acc(a, x, g6 ? CALL(&a->r, NULL, "sum.dim_IntList", "self", T(g6), "dim", INTS(&a->r, 2, dims), "keepdim", BO(false)) : NULL);
}

/* clamp with tensor bounds: self where within, each bound where it wins */
int grad_clamp_tensor(Ad *a, Node *n) {
  Value *x = rw_targ(n, "self"), *lo = rw_targ(n, "min"), *hi = rw_targ(n, "max"), *g = G(a, n, 0), *gs = g;
  if (lo) gs = keep(a, binop(a, "ge.Tensor", x, lo), gs);
  if (hi) gs = keep(a, binop(a, "le.Tensor", x, hi), gs);
  if (acc(a, x, gs)) return -1;
  if (lo && a->diff[lo->id] && acc(a, lo, keep(a, binop(a, "lt.Tensor", x, lo), g))) return -1;
  if (hi && a->diff[hi->id] && acc(a, hi, keep(a, binop(a, "gt.Tensor", x, hi), g))) return -1;
  return 0;
}

/* max pooling: the gradient goes to the position each window took its maximum from */
int grad_max_pool(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *g = G(a, n, 0), *ix = n->outs[1];
  if (!g) return 0;
  const Expr *m = expr_bin(a->g->ctx->arena, E_MUL, g->sizes[g->rank - 2], g->sizes[g->rank - 1]);   /* not -1: 0 images leave it undetermined */
  const Expr *flat_x[3] = {x->rank == 4 ? x->sizes[0] : expr_const(a->g->ctx->arena, 1), x->sizes[x->rank - 3], m};
  const Expr *xs[3] = {flat_x[0], flat_x[1], expr_bin(a->g->ctx->arena, E_MUL, x->sizes[x->rank - 2], x->sizes[x->rank - 1])};
  Value *z = CALL(&a->r, NULL, "zeros", "size", EXPRS(&a->r, 3, xs), "dtype", DT(x->dtype));
  Value *s = z ? CALL(&a->r, NULL, "scatter_add", "self", T(z), "dim", INT(&a->r, 2), "index", T(reshape(a, ix, 3, flat_x)), "src", T(reshape(a, g, 3, flat_x))) : NULL;
  return acc(a, x, reshape(a, s, x->rank, x->sizes));
}

/* diagonal: g placed on the diagonal of zeros of x's shape: g zero-padded to the dim it runs along,
 * given that dim's position (the other dim size 1), times the 0/1 mask of the diagonal (eq of an
 * arange difference and the offset) */
int grad_diagonal(Ad *a, Node *n) {
  Ctx *c = a->g->ctx;
  Value *x = n->args[0].u.t, *g = G(a, n, 0);
  if (!g) return 0;
  int r = x->rank, d1 = (int)node_int_arg(n, "dim1", 0), d2 = (int)node_int_arg(n, "dim2", 1);
  if (d1 < 0) d1 += r;
  if (d2 < 0) d2 += r;
  int64_t off = node_int_arg(n, "offset", 0), n1, n2, L;
  if (!expr_is_const(x->sizes[d1], &n1) || !expr_is_const(x->sizes[d2], &n2) || !expr_is_const(g->sizes[g->rank - 1], &L))
    return gg_error(c, "%s: node %s: the gradient of a diagonal needs static sizes", a->g->path, gg_quote(c, n->name));
  int keep = off >= 0 ? d1 : d2, other = off >= 0 ? d2 : d1;
  int64_t nk = off >= 0 ? n1 : n2, pad[2] = {0, nk - L}, perm[GG_MAX_RANK], ms[GG_MAX_RANK];
  Value *gp = CALL(&a->r, NULL, "constant_pad_nd", "self", T(g), "pad", INTS(&a->r, 2, pad));
  Value *gu = gp ? CALL(&a->r, NULL, "unsqueeze", "self", T(gp), "dim", INT(&a->r, r - 1)) : NULL;
  for (int t = 0, o = 0; t < r; t++) perm[t] = t == keep ? r - 2 : t == other ? r - 1 : o++;
  Value *gt = gu ? CALL(&a->r, NULL, "permute", "self", T(gu), "dims", INTS(&a->r, r, perm)) : NULL;
  int64_t col[2] = {n1, 1}, row[2] = {1, n2};
  Value *i = gt ? CALL(&a->r, NULL, "reshape", "self", T(CALL(&a->r, NULL, "arange", "end", INT(&a->r, n1), "dtype", DT(DT_I64))), "shape", INTS(&a->r, 2, col)) : NULL;
  Value *j = i ? CALL(&a->r, NULL, "reshape", "self", T(CALL(&a->r, NULL, "arange", "end", INT(&a->r, n2), "dtype", DT(DT_I64))), "shape", INTS(&a->r, 2, row)) : NULL;
  Value *m = j ? as_float(a, CALL(&a->r, NULL, "eq.Scalar", "self", T(binop(a, "sub.Tensor", j, i)), "other", INT(&a->r, off)), g->dtype) : NULL;
  for (int t = 0; t < r; t++) ms[t] = t == d1 ? n1 : t == d2 ? n2 : 1;
  if (d1 > d2) m = m ? CALL(&a->r, NULL, "t", "self", T(m)) : NULL;
  Value *mr = m ? CALL(&a->r, NULL, "reshape", "self", T(m), "shape", INTS(&a->r, r, ms)) : NULL;
  return acc(a, x, mul(a, gt, mr));
}

/* as_strided: each output element's gradient added at the input element it read (offset + sum i_d
 * stride_d: index vectors from arange, summed by broadcasting), by index_put with accumulate */
int grad_as_strided(Ad *a, Node *n) {
  Value *x = n->args[0].u.t, *g = G(a, n, 0), *y = n->outs[0];
  if (!g) return 0;
  const Arg *st = rw_arg(n, "stride"), *so = rw_arg(n, "storage_offset");
  int64_t off = 0, all[1] = {-1};
  if (so && so->k == AK_INT) expr_is_const(so->u.i, &off);
  Value *idx = NULL;
  for (int d = 0; d < y->rank; d++) {
    int64_t sz, sd, shape[GG_MAX_RANK];
    expr_is_const(y->sizes[d], &sz);
    expr_is_const(st->u.is[d], &sd);
    for (int k = 0; k < y->rank; k++) shape[k] = k == d ? sz : 1;
    Value *ar = CALL(&a->r, NULL, "arange", "end", INT(&a->r, sz), "dtype", DT(DT_I64));
    Value *m = ar ? CALL(&a->r, NULL, "mul.Tensor", "self", T(ar), "other", INT(&a->r, sd)) : NULL;
    Value *v = m ? CALL(&a->r, NULL, "reshape", "self", T(m), "shape", INTS(&a->r, y->rank, shape)) : NULL;
    idx = v && idx ? CALL(&a->r, NULL, "add.Tensor", "self", T(idx), "other", T(v)) : v;
    if (!idx) return -1;
  }
  if (!idx) idx = CALL(&a->r, NULL, "full", "size", INTS(&a->r, 0, all), "fill_value", FL(0), "dtype", DT(DT_I64));
  Value *io = idx ? CALL(&a->r, NULL, "add.Tensor", "self", T(idx), "other", INT(&a->r, off)) : NULL;
  Value *ie = io ? CALL(&a->r, NULL, "expand", "self", T(io), "size", EXPRS(&a->r, y->rank, y->sizes)) : NULL;
  Value *fi = ie ? CALL(&a->r, NULL, "reshape", "self", T(ie), "shape", INTS(&a->r, 1, all)) : NULL;
  Value *fg = fi ? CALL(&a->r, NULL, "reshape", "self", T(g), "shape", INTS(&a->r, 1, all)) : NULL;
  const Expr *numel = expr_const(a->g->ctx->arena, 1);
  for (int d = 0; d < x->rank; d++) numel = expr_bin(a->g->ctx->arena, E_MUL, numel, x->sizes[d]);
  Value *z = fg ? CALL(&a->r, NULL, "zeros", "size", EXPRS(&a->r, 1, &numel), "dtype", DT(x->dtype)) : NULL;
  if (!z) return -1;
  Arg ix = {.k = AK_TENSORS, .n = 1};
  ix.u.ts = arena_array(a->g->ctx->arena, 2, sizeof *ix.u.ts);
  ix.u.ts[0] = fi;
  Value *s = CALL(&a->r, NULL, "index_put", "self", T(z), "indices", ix, "values", T(fg), "accumulate", BO(true));
  return acc(a, x, s ? CALL(&a->r, NULL, "reshape", "self", T(s), "shape", EXPRS(&a->r, x->rank, x->sizes)) : NULL);
}

/* ops whose outputs do not change with their inputs' values almost anywhere: no gradient (PyTorch's
 * rules give zeros: floor, sign, ...; creation ops like full_like read only the shape) */
int grad_nothing(Ad *a, Node *n) { (void)a; (void)n; return 0; }

int grad_pow_scalar(Ad *a, Node *n) {   /* base ** e: d/de = y ln(base) */
  double base = rw_farg(n, "self", 1);
  return acc(a, rw_targ(n, "exponent"), mul(a, G(a, n, 0), mulf(a, n->outs[0], log(base))));
}

int grad_pow_tensor(Ad *a, Node *n) {
  Value *x = rw_targ(n, "self"), *e = rw_targ(n, "exponent"), *y = n->outs[0], *g = G(a, n, 0);
  if (a->diff[x->id]) {   /* g e x^(e-1) */
    Value *em1 = binf(a, "sub.Tensor", e, 1);
    Value *p = em1 ? CALL(&a->r, NULL, "pow.Tensor_Tensor", "self", T(x), "exponent", T(em1)) : NULL;
    if (acc(a, x, mul(a, g, mul(a, e, p)))) return -1;
  }
  return a->diff[e->id] ? acc(a, e, mul(a, g, mul(a, y, unop(a, "log", x)))) : 0;
}

/* variance: g 2 (x - mean) / (N - correction) */
int grad_var(Ad *a, Node *n) {
  Value *x = rw_targ(n, "self"), *g = G(a, n, 0);
  const Arg *kd = rw_arg(n, "keepdim"), *co = rw_arg(n, "correction"), *ub = rw_arg(n, "unbiased");
  bool reduced[GG_MAX_RANK], keepdim = kd && kd->k == AK_BOOL && kd->u.b;
  reduced_dims(rw_arg(n, "dim"), x->rank, reduced);
  int64_t cnt = 1, dims[GG_MAX_RANK], nd = 0, v;
  for (int d = 0; d < x->rank; d++)
    if (reduced[d]) {
      if (!expr_is_const(x->sizes[d], &v)) return gg_error(a->g->ctx, "%s: node %s: the gradient of a variance over symbolic sizes is not supported", a->g->path, gg_quote(a->g->ctx, n->name));
      cnt *= v;
      dims[nd++] = d;
    }
  double corr = co && co->k != AK_NONE ? rw_farg(n, "correction", 1) : ub && ub->k == AK_BOOL ? (ub->u.b ? 1 : 0) : 1;
  Value *m = CALL(&a->r, NULL, "mean.dim", "self", T(x), "dim", INTS(&a->r, nd, dims), "keepdim", BO(true));
  Value *xc = binop(a, "sub.Tensor", x, m);
  bool std = n->op->red == R_STD;
  if (g) {   /* var: g 2 (x - mean) / (N - c); std = sqrt(var): g (x - mean) / ((N - c) std) */
    Value *gv = std ? binop(a, "div.Tensor", mulf(a, g, 0.5), n->outs[0]) : g;
    if (std) gv = keep(a, binf(a, "ne.Scalar", n->outs[0], 0), gv);   /* where std is 0, 0 (PyTorch's std_backward), not 0/0 */
    if (acc(a, x, mul(a, unreduce(a, gv, x, reduced, keepdim), mulf(a, xc, 2 / ((double)cnt - corr))))) return -1;
  }
  if (n->nouts == 2 && G(a, n, 1))   /* var_mean's mean */
    return acc(a, x, mulf(a, unreduce(a, G(a, n, 1), x, reduced, keepdim), 1.0 / (double)cnt));
  return 0;
}

/* Training-mode batch norm kept whole (_batch_norm_train, decompose.c): with m elements per channel,
 * xh = (x - mean) invstd and gy the output's gradient, PyTorch's native_batch_norm_backward:
 *   dbias = sum(gy), dweight = sum(gy xh), dx = weight invstd (gy - dbias / m - xh dweight / m)
 * over every dim but the channels: two sums and one pass for dx, where the primitives' own rules
 * would make a dozen passes. xh is built once per reader, so that each fuses into the kernel that
 * reads it. Gradients reaching the statistics themselves (a model that reads save_mean) add the
 * mean's 1/m and the biased variance's 2 (x - mean) / m. */
int grad_bn_train(Ad *a, Node *n) {
  Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias"), *mean = n->outs[1], *inv = n->outs[2];
  Value *gy = G(a, n, 0), *gm = G(a, n, 1), *gi = G(a, n, 2), *gv = G(a, n, 3);
  int rk = x->rank;
  int64_t dims[GG_MAX_RANK], nd = 0, m = 1, v;
  const Expr *cs[GG_MAX_RANK];
  for (int d = 0; d < rk; d++) {
    cs[d] = d == 1 ? x->sizes[1] : expr_const(a->g->ctx->arena, 1);
    if (d == 1) continue;
    if (!expr_is_const(x->sizes[d], &v)) return gg_error(a->g->ctx, "%s: node %s: training-mode batch norm needs static sizes", a->g->path, gg_quote(a->g->ctx, n->name));
    m *= v;
    dims[nd++] = d;
  }
  Value *mc = reshape(a, mean, rk, cs), *ic = reshape(a, inv, rk, cs);
  if (!mc || !ic) return -1;
  if (gy) {
    Value *sg = CALL(&a->r, NULL, "sum.dim_IntList", "self", T(gy), "dim", INTS(&a->r, (int)nd, dims));
    Value *sgx = CALL(&a->r, NULL, "sum.dim_IntList", "self", T(mul(a, gy, mul(a, binop(a, "sub.Tensor", x, mc), ic))), "dim", INTS(&a->r, (int)nd, dims));
    if (!sg || !sgx || acc(a, b, sg) || acc(a, w, sgx)) return -1;
    if (a->diff[x->id]) {
      Value *scale = w ? mul(a, inv, w) : inv;
      Value *xh = mul(a, binop(a, "sub.Tensor", x, mc), ic);
      Value *t = binop(a, "sub.Tensor", binop(a, "sub.Tensor", gy, reshape(a, mulf(a, sg, 1.0 / (double)m), rk, cs)), mul(a, xh, reshape(a, mulf(a, sgx, 1.0 / (double)m), rk, cs)));
      if (acc(a, x, mul(a, t, reshape(a, scale, rk, cs)))) return -1;
    }
  }
  if (gi) {   /* invstd = (var + eps)^-1/2: dvar = -1/2 invstd^3 dinvstd */
    Value *d = mul(a, gi, mulf(a, mul(a, inv, mul(a, inv, inv)), -0.5));
    gv = gv ? binop(a, "add.Tensor", gv, d) : d;
    if (!gv) return -1;
  }
  if (gm && acc(a, x, CALL(&a->r, NULL, "expand", "self", T(reshape(a, mulf(a, gm, 1.0 / (double)m), rk, cs)), "size", EXPRS(&a->r, rk, x->sizes)))) return -1;
  if (gv && acc(a, x, mul(a, binop(a, "sub.Tensor", x, mc), reshape(a, mulf(a, gv, 2.0 / (double)m), rk, cs)))) return -1;
  return 0;
}

/* Layer norm kept whole under --train (native_layer_norm, one row kernel): its gradients are
 * native_layer_norm_backward's, which decompose expands after autograd (decomp_layer_norm_backward);
 * gradients reaching the mean and rstd outputs themselves add their own terms. */
int grad_layer_norm(Ad *a, Node *n) {
  Value *x = rw_targ(n, "input"), *w = rw_targ(n, "weight"), *b = rw_targ(n, "bias"), *g = G(a, n, 0), *gm = G(a, n, 1), *gr = G(a, n, 2);
  if (gm || gr) {   /* the statistics' own: mean over the L normalized elements, rstd = (biased var + eps)^-1/2 */
    const Arg *ns = rw_arg(n, "normalized_shape");
    int64_t L = 1, v;
    for (int i = 0; i < ns->n; i++) {
      if (!expr_is_const(ns->u.is[i], &v)) return gg_error(a->g->ctx, "%s: node %s: the gradient of layer norm's statistics over symbolic sizes is not supported", a->g->path, gg_quote(a->g->ctx, n->name));
      L *= v;
    }
    Value *rs = n->outs[2];
    if (gm && acc(a, x, CALL(&a->r, NULL, "expand", "self", T(mulf(a, gm, 1.0 / (double)L)), "size", EXPRS(&a->r, x->rank, x->sizes)))) return -1;
    Value *gv = gr ? mul(a, gr, mulf(a, mul(a, rs, mul(a, rs, rs)), -1.0 / (double)L)) : NULL;   /* dvar 2 / L */
    if (gr && acc(a, x, mul(a, binop(a, "sub.Tensor", x, n->outs[1]), gv))) return -1;
  }
  if (!g) return 0;
  Arg mask = {.k = AK_BOOLS, .n = 3};
  mask.u.bs = arena_array(a->g->ctx->arena, 4, sizeof *mask.u.bs);
  mask.u.bs[0] = a->diff[x->id];
  mask.u.bs[1] = w && a->diff[w->id];
  mask.u.bs[2] = b && a->diff[b->id];
  Value *o = CALL(&a->r, NULL, "native_layer_norm_backward", "grad_out", T(g), "input", T(x), "normalized_shape", *rw_arg(n, "normalized_shape"), "mean",
                  T(n->outs[1]), "rstd", T(n->outs[2]), "weight", T(w), "bias", T(b), "output_mask", mask);
  if (!o) return -1;
  Node *bw = o->def;
  return acc(a, x, bw->outs[0]) || acc(a, w, bw->outs[1]) || acc(a, b, bw->outs[2]) ? -1 : 0;
}

/* --train's attention kept whole (_attention_train): FlashAttention-2's backward from the saved inputs,
 * output and log-sum-exp (_attention_train_backward: one fused kernel on the GPU, primitives
 * elsewhere), so that no L x S probabilities are kept between the passes. A float mask that needs a
 * gradient (a learned bias) gets the scores' gradient, all of it through the primitives. */
int grad_attention_train(Ad *a, Node *n) {
  Value *q = rw_targ(n, "query"), *k = rw_targ(n, "key"), *v = rw_targ(n, "value"), *m = rw_targ(n, "attn_mask"), *g = G(a, n, 0);
  bool causal = rw_arg(n, "is_causal")->u.b;
  double scale = rw_farg(n, "scale", 1);
  if (G(a, n, 1)) return gg_error(a->g->ctx, "%s: node %s: the log-sum-exp of attention has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name));
  if (!g) return 0;
  if (m && a->diff[m->id]) {
    Value *gr[3];
    Value *ds = attention_backward_primitives(&a->r, g, q, k, v, m, n->outs[0], n->outs[1], causal, scale, NULL, gr);
    return ds && !acc(a, q, gr[0]) && !acc(a, k, gr[1]) && !acc(a, v, gr[2]) && !acc(a, m, ds) ? 0 : -1;
  }
  Value *o = CALL(&a->r, NULL, "_attention_train_backward", "grad_out", T(g), "query", T(q), "key", T(k), "value", T(v), "attn_mask", T(m), "out", T(n->outs[0]),
                  "logsumexp", T(n->outs[1]), "is_causal", BO(causal), "scale", FL(scale));
  if (!o) return -1;
  Node *bw = o->def;
  return acc(a, q, bw->outs[0]) || acc(a, k, bw->outs[1]) || acc(a, v, bw->outs[2]) ? -1 : 0;
}

/* constant padding: the gradient is the unpadded part (pad lists the last dims, last first) */
int grad_pad(Ad *a, Node *n) {
  Value *x = rw_targ(n, "self"), *g = G(a, n, 0);
  const Arg *pd = rw_arg(n, "pad"), *mode = rw_arg(n, "mode");
  if (mode && mode->k == AK_STR && strcmp(mode->u.s, "constant"))
    return gg_error(a->g->ctx, "%s: node %s: %s padding has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name), mode->u.s);
  /* constant padding's gradient is the opposite padding of g: the pad cut off, a crop zero-filled back */
  const Expr *neg[2 * GG_MAX_RANK];
  for (int i = 0; i < pd->n && i < 2 * GG_MAX_RANK; i++) neg[i] = expr_bin(a->g->ctx->arena, E_MUL, expr_const(a->g->ctx->arena, -1), pd->u.is[i]);
  return acc(a, x, g ? CALL(&a->r, NULL, "constant_pad_nd", "self", T(g), "pad", EXPRS(&a->r, pd->n, neg)) : NULL);
}

/* indices for index_put: [None] * dim + [index] */
static Arg index_at(Ad *a, int dim, Value *ix) {
  Arg list = {.k = AK_TENSORS, .n = dim + 1};
  list.u.ts = arena_array(a->g->ctx->arena, (size_t)dim + 2, sizeof *list.u.ts);
  list.u.ts[dim] = ix;
  return list;
}

/* a scatter's src gradient: g gathered at the index, zero-padded to src's shape (src may be larger) */
static Value *gathered(Ad *a, Value *g, Node *n, Value *ix, Value *src) {
  Value *r = CALL(&a->r, NULL, "gather", "self", T(g), "dim", rw_arg(n, "dim")[0], "index", T(ix));
  const Expr *pad[2 * GG_MAX_RANK];
  bool same = true;
  for (int d = 0; d < src->rank; d++) {   /* pad lists the last dim first */
    pad[2 * (src->rank - 1 - d)] = expr_const(a->g->ctx->arena, 0);
    pad[2 * (src->rank - 1 - d) + 1] = expr_bin(a->g->ctx->arena, E_ADD, src->sizes[d], expr_bin(a->g->ctx->arena, E_MUL, expr_const(a->g->ctx->arena, -1), ix->sizes[d]));
    same &= expr_same(a->g, src->sizes[d], ix->sizes[d]);
  }
  return same || !r ? r : CALL(&a->r, NULL, "constant_pad_nd", "self", T(r), "pad", EXPRS(&a->r, 2 * src->rank, pad));
}

int grad_index(Ad *a, Node *n) {
  const char *op = n->op->name;
  Value *x = rw_targ(n, "self"), *g = G(a, n, 0);
  if (!strcmp(op, "index_select")) {
    int d = wrap_dim(rw_arg(n, "dim"), 0, x->rank);
    Value *ix = rw_targ(n, "index");
    if (!x->rank) return acc(a, x, g);   /* a 0-d self: its one value, picked once */
    /* a 0-d index keeps the dim (size 1), which x[..., index] would drop: index by it as [1] */
    if (!ix->rank) ix = CALL(&a->r, NULL, "unsqueeze", "self", T(ix), "dim", INT(&a->r, 0));
    return acc(a, x, CALL(&a->r, NULL, "index_put", "self", T(zeros_like(a, x)), "indices", index_at(a, d, ix), "values", T(g), "accumulate", BO(true)));
  }
  if (!strcmp(op, "index.Tensor"))
    return acc(a, x, CALL(&a->r, NULL, "index_put", "self", T(zeros_like(a, x)), "indices", rw_arg(n, "indices")[0], "values", T(g), "accumulate", BO(true)));
  if (!strcmp(op, "index_put")) {   /* self: g where not overwritten; values: g at the indices */
    Value *v = rw_targ(n, "values");
    const Arg *ix = rw_arg(n, "indices");
    if (a->diff[x->id]) {
      Value *gs = rw_arg(n, "accumulate")->u.b ? g : CALL(&a->r, NULL, "index_put", "self", T(g), "indices", *ix, "values", T(zeros_like(a, v)), "accumulate", BO(false));
      if (acc(a, x, gs)) return -1;
    }
    return a->diff[v->id] ? acc(a, v, CALL(&a->r, NULL, "index.Tensor", "self", T(g), "indices", *ix)) : 0;
  }
  if (!strcmp(op, "scatter.src") || !strcmp(op, "scatter.value")) {   /* self: g off the scattered places; src: g gathered there */
    Value *ix = rw_targ(n, "index"), *src = rw_targ(n, "src");
    if (a->diff[x->id] && acc(a, x, CALL(&a->r, NULL, "scatter.value", "self", T(g), "dim", rw_arg(n, "dim")[0], "index", T(ix), "value", FL(0)))) return -1;
    return src && a->diff[src->id] ? acc(a, src, gathered(a, g, n, ix, src)) : 0;
  }
  if (!strcmp(op, "scatter_add") || (!strcmp(op, "scatter_reduce.two") && !strcmp(rw_arg(n, "reduce")->u.s, "sum"))) {
    Value *ix = rw_targ(n, "index"), *src = rw_targ(n, "src");
    if (acc(a, x, g)) return -1;
    return a->diff[src->id] ? acc(a, src, gathered(a, g, n, ix, src)) : 0;
  }
  if (!strcmp(op, "scatter_reduce.two")) {   /* with self (decompose.c): sum above; amax, amin here */
    const char *red = rw_arg(n, "reduce")->u.s;
    if (strcmp(red, "amax") && strcmp(red, "amin"))
      return gg_error(a->g->ctx, "%s: node %s: scatter_reduce with reduce='%s' has no derivative rule", a->g->path, gg_quote(a->g->ctx, n->name), red);
    /* the gradient goes to every element equal to the result (self's and src's), shared among ties, as PyTorch's */
    Value *ix = rw_targ(n, "index"), *src = rw_targ(n, "src"), *y = n->outs[0];
    const Arg *dim = rw_arg(n, "dim");
    Value *ys = CALL(&a->r, NULL, "gather", "self", T(y), "dim", *dim, "index", T(ix));
    Value *self_hit = as_float(a, binop(a, "eq.Tensor", x, y), x->dtype), *src_hit = ys ? as_float(a, binop(a, "eq.Tensor", src, ys), x->dtype) : NULL;
    Value *cnt = self_hit && src_hit ? CALL(&a->r, NULL, "scatter_add", "self", T(self_hit), "dim", *dim, "index", T(ix), "src", T(src_hit)) : NULL;
    Value *share = cnt ? binop(a, "div.Tensor", g, cnt) : NULL;
    if (a->diff[x->id] && acc(a, x, mul(a, share, self_hit))) return -1;
    return a->diff[src->id] ? acc(a, src, mul(a, src_hit, share ? CALL(&a->r, NULL, "gather", "self", T(share), "dim", *dim, "index", T(ix)) : NULL)) : 0;
  }
  /* select_scatter / slice_scatter: self gets g with the written part zeroed; src gets that part */
  Value *src = rw_targ(n, "src");
  bool sel = !strcmp(op, "select_scatter");
  if (a->diff[x->id]) {
    Value *z = zeros_like(a, src);
    Value *gs = sel ? CALL(&a->r, NULL, "select_scatter", "self", T(g), "src", T(z), "dim", rw_arg(n, "dim")[0], "index", rw_arg(n, "index")[0])
                    : CALL(&a->r, NULL, "slice_scatter", "self", T(g), "src", T(z), "dim", rw_arg(n, "dim")[0], "start", rw_arg(n, "start")[0], "end",
                           rw_arg(n, "end")[0], "step", rw_arg(n, "step")[0]);
    if (acc(a, x, gs)) return -1;
  }
  if (!a->diff[src->id]) return 0;
  return acc(a, src, sel ? CALL(&a->r, NULL, "select.int", "self", T(g), "dim", rw_arg(n, "dim")[0], "index", rw_arg(n, "index")[0])
                         : CALL(&a->r, NULL, "slice.Tensor", "self", T(g), "dim", rw_arg(n, "dim")[0], "start", rw_arg(n, "start")[0], "end",
                                rw_arg(n, "end")[0], "step", rw_arg(n, "step")[0]));
}

/* ---------------------------------------------------------------- the table and the pass */


/* The op table's grad column: an op without a rule names grad_none. */
int grad_none(Ad *a, Node *n) { (void)a; (void)n; return -1; }

const char *const *autograd_rules(int *n) {
  static const char *names[1024];
  int k = 0;
  for (int i = 0; i < ops_count() && k < 1024; i++)
    if (autograd_has_rule(ops_at(i))) names[k++] = ops_at(i)->name;
  *n = k;
  return names;
}

bool autograd_has_rule(const OpDef *op) { return op->grad != grad_none; }

static bool is_float_tensor(const Value *v) { return v && v->kind == VK_TENSOR && dtype_is_float(v->dtype); }

int autograd(Graph *g, int loss, bool wrt_inputs) {
  Ctx *c = g->ctx;
  Ad A = {.g = g}, *a = &A;
  a->r.g = g;
  a->r.tag = "grad";
  for (int k = 0; k < g->nnodes; k++) rw_push(&a->r, g->nodes[k]);
  /* lookups are by the ids of the values there now and of the cotangents added below */
  int cap = g->nvalues + g->noutputs + 1;
  a->grad = arena_array(c->arena, (size_t)cap, sizeof *a->grad);
  a->diff = arena_array(c->arena, (size_t)cap, sizeof *a->diff);
  /* what is differentiated: parameters that require grad, and user inputs that do (all float ones
   * with wrt_inputs); a tied parameter's gradient is the one it is tied to (load.c) */
  int nwrt = 0;
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    bool want = v->input == IN_PARAM ? v->requires_grad && !v->tied : v->input == IN_USER && (wrt_inputs || v->requires_grad);
    if (want && is_float_tensor(v)) { a->diff[v->id] = true; nwrt++; }
  }
  if (!nwrt) return gg_error(c, "%s: nothing to differentiate: no parameter or input requires grad", g->path);
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    bool any = false;
    FOR_TENSOR_ARGS(n, v, any |= a->diff[v->id])
    for (int i = 0; i < n->nouts; i++) a->diff[n->outs[i]->id] = any && is_float_tensor(n->outs[i]);
  }
  /* seeds: a cotangent input for the loss (or for every float user output) */
  int nuser_in = 0, nseeds = 0;
  for (int i = 0; i < g->ninputs; i++) nuser_in += g->inputs[i]->input == IN_USER;
  Value **seeds = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *seeds);
  int nuser_out = 0;
  for (int i = 0; i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (o->kind != OUT_USER) continue;
    int idx = nuser_out++;
    if (loss >= 0 && idx != loss) continue;
    if (!is_float_tensor(o->v)) {
      if (loss >= 0) return gg_error(c, "%s: output %d (%s) is not a float tensor: it cannot be the loss (choose another with --loss N)", g->path, loss, gg_quote(c, o->v->name));
      continue;
    }
    if (loss >= 0) {
      int64_t ne = 1, s;
      for (int d = 0; d < o->v->rank; d++) ne *= expr_is_const(o->v->sizes[d], &s) ? s : 2;
      if (ne != 1) return gg_error(c, "%s: output %d (%s) is not a scalar: the loss must have one element (choose another with --loss N)", g->path, loss, gg_quote(c, o->v->name));
    }
    Value *t = graph_new_value(g, arena_printf(c->arena, "tangent.%d", idx));
    if (!t) return -1;
    t->kind = VK_TENSOR;
    t->dtype = o->v->dtype;
    t->rank = o->v->rank;
    t->sizes = o->v->sizes;
    t->declared = true;
    t->input = IN_USER;
    t->user_index = nuser_in++;
    t->input_index = g->ninputs;
    Value **ins = arena_array(c->arena, (size_t)g->ninputs + 2, sizeof *ins);
    memcpy(ins, g->inputs, sizeof *ins * (size_t)g->ninputs);
    ins[g->ninputs++] = t;
    g->inputs = ins;
    if (a->diff[o->v->id]) {
      Value **slot = &a->grad[o->v->id];
      *slot = *slot ? binop(a, "add.Tensor", *slot, t) : t;
    }
    nseeds++;
  }
  if (loss >= 0 && nseeds == 0) return gg_error(c, "%s: the model has no output %d to use as the loss", g->path, loss);
  /* the reverse sweep */
  for (int k = g->nnodes - 1; k >= 0; k--) {
    Node *n = g->nodes[k];
    bool has = false, needs = false;
    for (int i = 0; i < n->nouts; i++) has |= a->grad[n->outs[i]->id] != NULL;
    FOR_TENSOR_ARGS(n, v, needs |= a->diff[v->id])
    if (!has || !needs) continue;
    GradFn rule = n->op->grad != grad_none ? n->op->grad : NULL;
    if (!strcmp(n->op->name, "dropout") && rw_arg(n, "train")->u.b && rw_farg(n, "p", 0) > 0) rule = NULL;
    if (!rule) return gg_error(c, "%s: node %s: op %s has no derivative rule (gradients cannot flow through it)", g->path, gg_quote(c, n->name), n->op->name);
    a->r.orig = n;
    a->r.k = 0;
    if (rule(a, n)) {
      if (!c->has_err) gg_error(c, "%s: node %s: building the gradient of %s failed (internal error)", g->path, gg_quote(c, n->name), n->op->name);
      return -1;
    }
    gg_log(c, LOG_AUTOGRAD, "node %s (%s): %d backward nodes", gg_quote(c, n->name), n->op->name, a->r.k);
  }
  /* outputs: one gradient per differentiated input (zeros when the loss does not depend on it) */
  OutputSpec *outs = arena_array(c->arena, (size_t)(g->noutputs + g->ninputs) + 1, sizeof *outs);
  memcpy(outs, g->outputs, sizeof *outs * (size_t)g->noutputs);
  int no = g->noutputs;
  a->r.orig = &(Node){.name = "grad"};
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (!a->diff[v->id] || (v->input == IN_USER && !strncmp(v->name, "tangent.", 8))) continue;
    Value *gv = a->grad[v->id];
    if (!gv) gv = zeros_like(a, v);
    if (!gv) return -1;
    outs[no++] = (OutputSpec){OUT_GRAD, gv, v->input == IN_USER ? v->name : v->fqn};
  }
  g->outputs = outs;
  g->noutputs = no;
  g->nodes = a->r.nodes;
  g->nnodes = a->r.n;
  g->cap_nodes = a->r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  return 0;
}
