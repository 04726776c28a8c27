/* shape.c: shape and dtype rules, one per family of ops (the op table names them).
 * Requires: a loaded node whose input values have dtype, rank and sizes. Guarantees: the rule fills
 * ShapeCtx.out with each output's dtype and symbolic sizes, or fails with a message naming the node.
 * Sizes are Exprs, so a symbolic batch stays symbolic; dims, kernel sizes and the like must be static.
 * verify.c compares the result with what torch.export recorded in tensor_values. */
#include "gg.h"

#include <math.h>
#include <string.h>

typedef ShapeCtx S;

static int fail(S *s, const char *fmt, const char *detail) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, detail);
  Ctx *c = s->g->ctx;
  return gg_error(c, "%s: node %s (%s): %s", s->g->path, gg_quote(c, s->n->name), gg_quote(c, s->n->target), msg);
}

static const Arg *arg(S *s, const char *name) {
  int i = ops_arg_index(s->n->op, name);
  return i < 0 ? NULL : &s->n->args[i];
}

static Value *tensor(S *s, const char *name) {
  const Arg *a = arg(s, name);
  return a && a->k == AK_TENSOR ? a->u.t : NULL;
}

static bool is_none(S *s, const char *name) {
  const Arg *a = arg(s, name);
  return !a || a->k == AK_NONE;
}

/* A static int argument; symbolic values are refused where the rule needs a number. */
static int int_arg(S *s, const char *name, int64_t *out) {
  const Arg *a = arg(s, name);
  if (!a || a->k != AK_INT) return fail(s, "argument '%s' must be an integer", name);
  if (!expr_is_const(a->u.i, out)) return fail(s, "argument '%s' must not be symbolic", name);
  return 0;
}

static bool bool_arg(S *s, const char *name) {
  const Arg *a = arg(s, name);
  return a && a->k == AK_BOOL && a->u.b;
}

/* A list of static integers into out[cap]: a longer list is refused (the caller's array is its bound). */
static int ints_arg(S *s, const char *name, int64_t *out, int cap, int *n) {
  const Arg *a = arg(s, name);
  if (!a || a->k == AK_NONE) { *n = 0; return 0; }
  if (a->k != AK_INTS) return fail(s, "argument '%s' must be a list of integers", name);
  if (a->n > cap) return fail(s, "argument '%s' has too many values", name);
  for (int i = 0; i < a->n; i++)
    if (!expr_is_const(a->u.is[i], &out[i])) return fail(s, "argument '%s' must not be symbolic", name);
  *n = a->n;
  return 0;
}

static int norm_dim(S *s, int64_t d, int rank, int64_t *out) {
  int r = rank ? rank : 1;   /* a 0-d tensor accepts dim 0 and -1 */
  if (d < -r || d >= r) {
    char buf[64];
    snprintf(buf, sizeof buf, "%lld", (long long)d);
    return fail(s, "dim %s out of range", buf);
  }
  *out = d < 0 ? d + r : d;
  return 0;
}

/* norm_dim for a rule that reads the size along the dim: a 0-d tensor has none (norm_dim takes its
 * dim 0, whose size a 0-d value does not hold: cat of a 0-d tensor read it, found by fuzz_model) */
static int size_dim(S *s, int64_t d, int rank, int64_t *out) {
  if (rank == 0) return fail(s, "%s", "needs a tensor of at least one dim (this one is 0-d)");
  return norm_dim(s, d, rank, out);
}

static const Expr *C(S *s, int64_t v) { return expr_const(s->a, v); }
static const Expr *ADD(S *s, const Expr *x, const Expr *y) { return expr_bin(s->a, E_ADD, x, y); }
static const Expr *MUL(S *s, const Expr *x, const Expr *y) { return expr_bin(s->a, E_MUL, x, y); }
static const Expr *DIV(S *s, const Expr *x, const Expr *y) { return expr_bin(s->a, E_FLOORDIV, x, y); }

static void set_out(S *s, int i, DType dt, int rank, const Expr *const *sizes) {
  if (i < 0 || i >= GG_MAX_OUTS) return;   /* the rules refuse more outputs (split's 256) before */
  s->out[i].dtype = dt;
  s->out[i].rank = rank;
  for (int d = 0; d < rank; d++) s->out[i].sizes[d] = sizes[d];
  if (s->nouts <= i) s->nouts = i + 1;
}

static void like(S *s, int i, const Value *v, DType dt) { set_out(s, i, dt, v->rank, v->sizes); }

static bool is_one(const Expr *e) { int64_t v; return expr_is_const(e, &v) && v == 1; }

/* Broadcast b into acc (rank *r). */
static int broadcast_into(S *s, const Expr **acc, int *r, const Value *b) {
  int rank = *r > b->rank ? *r : b->rank;
  const Expr *out[GG_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int ia = i - (rank - *r), ib = i - (rank - b->rank);
    const Expr *x = ia >= 0 ? acc[ia] : NULL, *y = ib >= 0 ? b->sizes[ib] : NULL;
    if (!x || (y && is_one(x))) out[i] = y;
    else if (!y || is_one(y)) out[i] = x;
    else if (expr_same(s->g, x, y)) out[i] = x;
    else {
      char buf[128];
      snprintf(buf, sizeof buf, "%s vs %s at dim %d", expr_str(s->a, s->g, x), expr_str(s->a, s->g, y), i);
      return fail(s, "shapes cannot broadcast: %s", buf);
    }
  }
  memcpy(acc, out, sizeof *out * (size_t)rank);
  *r = rank;
  return 0;
}

/* ---------------------------------------------------------------- type promotion */

static DType combine(DType higher, DType lower) {
  if (higher == DT_UNKNOWN) return lower;
  if (lower == DT_UNKNOWN) return higher;
  if (dtype_is_float(higher)) return higher;
  if (higher == DT_BOOL || dtype_is_float(lower)) return dtype_promote(higher, lower);
  return higher;
}

static DType acc(DType a, DType b) { return a == DT_UNKNOWN ? b : dtype_promote(a, b); }

/* Arguments that do not take part in promotion: they follow self's dtype or are conditions. */
static bool promotes(const char *name) {
  static const char *no[] = {"alpha", "value", "negative_slope", "min_val", "max_val", "condition", "mask", "beta"};
  for (size_t i = 0; i < sizeof no / sizeof *no; i++) if (!strcmp(name, no[i])) return false;
  return true;
}

/* torch.result_type over the numeric operands: dimensioned tensors, then 0-d tensors, then Python numbers. */
DType shape_promote(const Node *n) {
  DType dim = DT_UNKNOWN, zero = DT_UNKNOWN, wrapped = DT_UNKNOWN;
  for (int i = 0; i < n->op->nargs; i++) {
    const ArgSpec *as = &n->op->args[i];
    const Arg *a = &n->args[i];
    if ((as->type != T_TENSOR && as->type != T_SCALAR) || !promotes(as->name)) continue;
    if (a->k == AK_TENSOR) {
      if (a->u.t->rank > 0) dim = acc(dim, a->u.t->dtype);
      else zero = acc(zero, a->u.t->dtype);
    } else if (a->k == AK_INT) wrapped = acc(wrapped, DT_I64);
    else if (a->k == AK_FLOAT) wrapped = acc(wrapped, DT_F32);
    else if (a->k == AK_BOOL) wrapped = acc(wrapped, DT_BOOL);
  }
  DType r = combine(dim, combine(zero, wrapped));
  return r == DT_UNKNOWN ? DT_F32 : r;
}

static DType pw_result(const Node *n, DType promoted) {
  switch (n->op->pwout) {
  case PW_FLOAT: return dtype_is_float(promoted) ? promoted : DT_F32;
  case PW_CMP: case PW_BOOL: return DT_BOOL;
  default: return promoted;
  }
}

/* ---------------------------------------------------------------- pointwise and friends */

int shape_pointwise(S *s) {
  const Expr *sizes[GG_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < s->n->op->nargs; i++) {
    const Arg *a = &s->n->args[i];
    if (a->k == AK_TENSOR && broadcast_into(s, sizes, &rank, a->u.t)) return -1;
  }
  if (s->n->op->inplace || s->n->op->outarg >= 0) {
    const Value *self = s->n->args[s->n->op->inplace ? 0 : s->n->op->outarg].u.t;
    if (!self || rank != self->rank) return fail(s, "%s", "in-place result would not fit self");
    for (int d = 0; d < rank; d++)
      if (!expr_same(s->g, sizes[d], self->sizes[d])) return fail(s, "%s", "the result's shape is not out's");
    like(s, 0, self, self->dtype);
    return 0;
  }
  set_out(s, 0, pw_result(s->n, shape_promote(s->n)), rank, sizes);
  return 0;
}

/* The result has self's shape and dtype (index_put, scatter). */
int shape_pointwise_self(S *s) {
  Value *x = tensor(s, "self");
  like(s, 0, x, x->dtype);
  return 0;
}

/* roll: shifts and dims pair up (or one shift of the flattened tensor); a rolled dim has a size, which
 * a 0-d tensor lacks (PyTorch refuses it; the decomposition read it: found by fuzzing 0-d operands) */
int shape_roll(S *s) {
  Value *x = tensor(s, "self");
  int64_t dims[GG_MAX_RANK], d;
  int ns, nd;
  const Arg *sa = arg(s, "shifts");
  if (sa && sa->k == AK_INTS && sa->n > GG_MAX_RANK) return fail(s, "%s", "argument 'shifts' has too many values");
  if (ints_arg(s, "dims", dims, GG_MAX_RANK, &nd)) return -1;
  ns = sa && sa->k == AK_INTS ? sa->n : 0;
  if (nd ? ns != nd : ns != 1) return fail(s, "%s", nd ? "shifts and dims must have the same length" : "roll without dims takes one shift");
  for (int i = 0; i < nd; i++)
    if (size_dim(s, dims[i], x->rank, &d)) return -1;
  like(s, 0, x, x->dtype);
  return 0;
}

int shape_glu(S *s) {
  Value *x = tensor(s, "self");
  int64_t d, n;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (x->rank == 0 || !expr_is_const(x->sizes[d], &n) || n % 2) return fail(s, "%s", "glu needs an even, static size along dim");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  sizes[d] = C(s, n / 2);
  set_out(s, 0, x->dtype, x->rank, sizes);
  return 0;
}

int shape_native_dropout(S *s) {
  Value *x = tensor(s, "input");
  like(s, 0, x, x->dtype);
  like(s, 1, x, DT_BOOL);
  return 0;
}

int shape_div_mode(S *s) {
  if (shape_pointwise(s)) return -1;
  DType p = shape_promote(s->n);
  s->out[0].dtype = is_none(s, "rounding_mode") && !dtype_is_float(p) ? DT_F32 : p;
  return 0;
}

int shape_copy(S *s) {
  Value *x = tensor(s, "self"), *src = tensor(s, "src");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  int rank = x->rank;
  if (broadcast_into(s, sizes, &rank, src)) return -1;
  if (rank != x->rank) return fail(s, "%s", "src does not broadcast to self");
  like(s, 0, x, x->dtype);
  return 0;
}

/* fill.Tensor: self's shape and dtype from a value of one element */
int shape_fill_tensor(S *s) {
  Value *x = tensor(s, "self"), *v = tensor(s, "value");
  for (int d = 0; d < v->rank; d++) {
    int64_t one;
    if (!expr_is_const(v->sizes[d], &one) || one != 1) return fail(s, "%s", "the fill value must be a tensor of one element");
  }
  like(s, 0, x, x->dtype);
  return 0;
}

/* ---------------------------------------------------------------- reductions */

/* Which dims a reduction covers: mask[d] set. dim None, absent or [] means all. */
static int reduce_dims(S *s, const Value *x, bool *mask) {
  memset(mask, 0, sizeof(bool) * GG_MAX_RANK);
  const Arg *a = arg(s, "dim");
  int64_t dims[GG_MAX_RANK * 2];
  int n = 0;
  if (a && a->k == AK_INT) {
    if (int_arg(s, "dim", &dims[0])) return -1;
    n = 1;
  } else if (a && a->k == AK_INTS) {
    if (ints_arg(s, "dim", dims, (int)(sizeof dims / sizeof *dims), &n)) return -1;
  }
  if (n == 0) {
    for (int d = 0; d < x->rank; d++) mask[d] = true;
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int64_t d;
    if (norm_dim(s, dims[i], x->rank, &d)) return -1;
    if (x->rank) mask[d] = true;
  }
  return 0;
}

int shape_reduce(S *s) {
  Value *x = tensor(s, "self");
  const char *name = s->n->op->name;
  bool mask[GG_MAX_RANK];
  if (reduce_dims(s, x, mask)) return -1;
  bool keep = bool_arg(s, "keepdim");
  /* argmax(dim=None, keepdim=True) keeps every dim as 1 */
  const Expr *sizes[GG_MAX_RANK];
  int rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!mask[d]) sizes[rank++] = x->sizes[d];
    else if (keep) sizes[rank++] = C(s, 1);
  }
  DType dt = x->dtype;
  const Arg *dta = arg(s, "dtype");
  const int rk = s->n->op->red;
  if (dta && dta->k == AK_DTYPE) dt = (DType)dta->u.code;
  else if ((rk == R_SUM || rk == R_PROD) && !dtype_is_float(dt)) dt = DT_I64;
  else if (rk == R_ARGMAX || rk == R_ARGMIN) dt = DT_I64;
  else if (rk == R_ANY || rk == R_ALL) dt = x->dtype == DT_U8 ? DT_U8 : DT_BOOL;
  else if ((rk == R_LSE || rk == R_NORM) && !dtype_is_float(dt)) dt = DT_F32;
  else if ((rk == R_MEAN || red_is_var(rk)) && !dtype_is_float(dt))
    return fail(s, "%s needs a floating-point input", name);
  set_out(s, 0, dt, rank, sizes);
  if (rk == R_MAX_DIM || rk == R_MIN_DIM) set_out(s, 1, DT_I64, rank, sizes);
  if (rk == R_VAR_MEAN) set_out(s, 1, dt, rank, sizes);
  return 0;
}

int shape_scan(S *s) {
  Value *x = tensor(s, "self");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  DType dt = x->dtype;
  const Arg *dta = arg(s, "dtype");
  bool cum = s->n->op->red == R_CUMSUM || s->n->op->red == R_CUMPROD;
  if (dta && dta->k == AK_DTYPE) dt = (DType)dta->u.code;
  else if (cum && !dtype_is_float(dt)) dt = DT_I64;
  else if (bool_arg(s, "half_to_float") && dt == DT_F16) dt = DT_F32;
  else if (!dtype_is_float(dt) && !cum) return fail(s, "%s", "softmax needs a floating-point input");
  like(s, 0, x, dt);
  return 0;
}

/* sort and topk: values and int64 indices, the sorted dim of length k for topk */
int shape_sort(S *s) {
  Value *x = tensor(s, "self");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  const Arg *k = arg(s, "k");
  if (k) {
    int64_t kv, len;
    if (int_arg(s, "k", &kv)) return -1;
    if (kv < 0 || (x->rank && expr_is_const(x->sizes[d], &len) && kv > len) || (!x->rank && kv > 1)) return fail(s, "%s", "k out of range for the dim");
    if (x->rank) sizes[d] = k->u.i;
  }
  if (x->dtype == DT_BOOL || x->dtype == DT_F16 || x->dtype == DT_BF16) return fail(s, "sorting %s tensors is not supported", dtype_name(x->dtype));
  set_out(s, 0, x->dtype, x->rank, sizes);
  set_out(s, 1, DT_I64, x->rank, sizes);
  return 0;
}

/* ---------------------------------------------------------------- matrix products */

static int check_same(S *s, const Expr *x, const Expr *y, const char *what) {
  if (expr_same(s->g, x, y)) return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s: %s vs %s", what, expr_str(s->a, s->g, x), expr_str(s->a, s->g, y));
  return fail(s, "sizes disagree: %s", buf);
}

int shape_linear(S *s) {
  Value *x = tensor(s, "input"), *w = tensor(s, "weight");
  if (x->rank < 1 || w->rank < 1 || w->rank > 2) return fail(s, "%s", "linear needs input of rank >= 1 and weight of rank 1 or 2");
  if (check_same(s, x->sizes[x->rank - 1], w->sizes[w->rank - 1], "input features vs weight")) return -1;
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  for (int d = 0; d < x->rank - 1; d++) sizes[r++] = x->sizes[d];
  if (w->rank == 2) sizes[r++] = w->sizes[0];
  set_out(s, 0, dtype_promote(x->dtype, w->dtype), r, sizes);
  return 0;
}

int shape_addmm(S *s) {
  bool batched = !strcmp(s->n->op->name, "baddbmm");
  Value *self = tensor(s, "self"), *a = tensor(s, batched ? "batch1" : "mat1"), *b = tensor(s, batched ? "batch2" : "mat2");
  int r = batched ? 3 : 2;
  if (a->rank != r || b->rank != r) return fail(s, "%s", "operands have the wrong rank");
  if (check_same(s, a->sizes[r - 1], b->sizes[r - 2], "inner dimension")) return -1;
  if (batched && check_same(s, a->sizes[0], b->sizes[0], "batch")) return -1;
  const Expr *sizes[3] = {a->sizes[0], a->sizes[r - 2], b->sizes[r - 1]};
  if (!batched) { sizes[0] = a->sizes[0]; sizes[1] = b->sizes[1]; }
  Value out = {.rank = r, .sizes = sizes};
  const Expr *bs[GG_MAX_RANK];
  memcpy(bs, self->sizes, sizeof *bs * (size_t)self->rank);
  int br = self->rank;
  if (broadcast_into(s, bs, &br, &out)) return -1;
  if (br != r) return fail(s, "%s", "self does not broadcast to the product");
  set_out(s, 0, dtype_promote(self->dtype, dtype_promote(a->dtype, b->dtype)), r, sizes);
  return 0;
}

int shape_matmul(S *s) {
  Value *a = tensor(s, "self"), *b = tensor(s, "mat2") ? tensor(s, "mat2") : tensor(s, "other");
  const char *name = s->n->op->name;
  if (!strcmp(name, "mm") && (a->rank != 2 || b->rank != 2)) return fail(s, "%s", "mm needs two matrices");
  if (!strcmp(name, "bmm") && (a->rank != 3 || b->rank != 3)) return fail(s, "%s", "bmm needs two rank-3 tensors");
  if (a->rank < 1 || b->rank < 1) return fail(s, "%s", "matmul needs tensors of rank >= 1");
  DType dt = dtype_promote(a->dtype, b->dtype);
  const Expr *ka = a->sizes[a->rank - 1], *kb = b->sizes[b->rank >= 2 ? b->rank - 2 : 0];
  if (check_same(s, ka, kb, "inner dimension")) return -1;
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  if (a->rank == 1 && b->rank == 1) { set_out(s, 0, dt, 0, sizes); return 0; }
  /* batch dims broadcast */
  Value ba = {.rank = a->rank > 2 ? a->rank - 2 : 0, .sizes = a->sizes};
  Value bb = {.rank = b->rank > 2 ? b->rank - 2 : 0, .sizes = b->sizes};
  if (!strcmp(name, "bmm") && check_same(s, a->sizes[0], b->sizes[0], "batch")) return -1;
  if (broadcast_into(s, sizes, &r, &ba) || broadcast_into(s, sizes, &r, &bb)) return -1;
  if (a->rank >= 2) sizes[r++] = a->sizes[a->rank - 2];
  if (b->rank >= 2) sizes[r++] = b->sizes[b->rank - 1];
  set_out(s, 0, dt, r, sizes);
  return 0;
}

/* ---------------------------------------------------------------- convolution and pooling */

static int spatial_list(S *s, const char *name, int nsp, int64_t *out) {   /* out holds nsp values */
  int n;
  if (ints_arg(s, name, out, nsp, &n)) return -1;
  if (n == 1) for (int i = 1; i < nsp; i++) out[i] = out[0];
  else if (n != nsp) return fail(s, "argument '%s' has the wrong length", name);
  /* kernels, strides, paddings and dilations within 2^31: the rules' arithmetic stays in int64 */
  for (int i = 0; i < n; i++)
    if (out[i] > INT32_MAX || out[i] < -INT32_MAX) return fail(s, "argument '%s' out of range", name);
  return 0;
}

int shape_conv(S *s) {
  Value *x = tensor(s, "input"), *w = tensor(s, "weight");
  int nsp = w->rank - 2;
  if (nsp < 1 || nsp > 3) return fail(s, "%s", "weight must have rank 3 to 5");
  bool batched = x->rank == nsp + 2;
  if (!batched && x->rank != nsp + 1) return fail(s, "%s", "input rank does not match the weight");
  int64_t st[3], pd[3], dl[3], op[3] = {0, 0, 0}, groups;
  bool transposed = bool_arg(s, "transposed") || !strncmp(s->n->op->name, "conv_transpose", 14);
  if (spatial_list(s, "stride", nsp, st) || spatial_list(s, "padding", nsp, pd) || spatial_list(s, "dilation", nsp, dl) || int_arg(s, "groups", &groups)) return -1;
  if (transposed && spatial_list(s, "output_padding", nsp, op)) return -1;
  if (groups < 1) return fail(s, "%s", "groups must be positive");
  for (int i = 0; i < nsp; i++) if (st[i] < 1 || dl[i] < 1 || pd[i] < 0) return fail(s, "%s", "stride and dilation must be positive, padding non-negative");
  const Expr *cin = x->sizes[batched ? 1 : 0];
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  if (batched) sizes[r++] = x->sizes[0];
  if (transposed) {
    if (check_same(s, cin, w->sizes[0], "input channels vs weight")) return -1;
    sizes[r++] = MUL(s, w->sizes[1], C(s, groups));
  } else {
    if (check_same(s, cin, MUL(s, w->sizes[1], C(s, groups)), "input channels vs weight*groups")) return -1;
    sizes[r++] = w->sizes[0];
  }
  for (int i = 0; i < nsp; i++) {
    const Expr *in = x->sizes[x->rank - nsp + i];
    int64_t k;
    if (!expr_is_const(w->sizes[2 + i], &k)) return fail(s, "%s", "kernel size must be static");
    if (k > INT32_MAX) return fail(s, "%s", "kernel size out of range");
    const Expr *o;
    if (transposed) o = ADD(s, MUL(s, ADD(s, in, C(s, -1)), C(s, st[i])), C(s, -2 * pd[i] + dl[i] * (k - 1) + op[i] + 1));
    else o = ADD(s, DIV(s, ADD(s, in, C(s, 2 * pd[i] - dl[i] * (k - 1) - 1)), C(s, st[i])), C(s, 1));
    if (expr_hint(s->g, o) <= 0) return fail(s, "%s", "output size would be empty: kernel larger than padded input");
    sizes[r++] = o;
  }
  DType dt = dtype_promote(x->dtype, w->dtype);
  set_out(s, 0, dt, r, sizes);
  return 0;
}

/* _conv_nhwc: the rule of the convolution it is, on NCHW views of its input [N, H, W, C] and weight
 * [K, R, S, C/groups], the result [N, OH, OW, K] */
int shape_conv_nhwc(S *s) {
  Value *x = tensor(s, "input"), *w = tensor(s, "weight");
  if (x->rank != 4 || w->rank != 4) return fail(s, "%s", "input and weight must have rank 4 (a batched 2-d convolution in channels-last layout)");
  static const int to_cf[4] = {0, 3, 1, 2};
  Value xs = *x, ws = *w;
  const Expr *xsz[4], *wsz[4];
  for (int d = 0; d < 4; d++) xsz[d] = x->sizes[to_cf[d]], wsz[d] = w->sizes[to_cf[d]];
  xs.sizes = xsz;
  ws.sizes = wsz;
  Arg *xa = &s->n->args[ops_arg_index(s->n->op, "input")], *wa = &s->n->args[ops_arg_index(s->n->op, "weight")];
  xa->u.t = &xs, wa->u.t = &ws;
  int rc = shape_conv(s);
  xa->u.t = x, wa->u.t = w;
  if (rc) return rc;
  const Expr *o[4];
  for (int d = 0; d < 4; d++) o[d] = s->out[0].sizes[d];
  for (int d = 0; d < 4; d++) s->out[0].sizes[d] = o[(int[]){0, 2, 3, 1}[d]];
  return 0;
}

/* the gradients of a plain convolution: the input's, the weight's and the bias's shapes */
int shape_conv_backward(S *s) {
  Value *gy = tensor(s, "grad_output"), *x = tensor(s, "input"), *w = tensor(s, "weight");
  if (bool_arg(s, "transposed")) return fail(s, "%s", "gradients of a transposed convolution are not supported by this op");
  if (x->rank != w->rank || gy->rank != x->rank) return fail(s, "%s", "grad_output, input and weight must have the same rank (batched)");
  set_out(s, 0, gy->dtype, x->rank, x->sizes);
  set_out(s, 1, gy->dtype, w->rank, w->sizes);
  set_out(s, 2, gy->dtype, 1, w->sizes);
  return 0;
}

static const Expr *pool_out(S *s, const Expr *in, int64_t k, int64_t st, int64_t pd, int64_t dl, bool ceil_mode) {
  int64_t iv;
  if (expr_is_const(in, &iv)) {
    int64_t num = iv + 2 * pd - dl * (k - 1) - 1 + (ceil_mode ? st - 1 : 0);
    int64_t o = (num >= 0 ? num / st : -((-num + st - 1) / st)) + 1;
    if (ceil_mode && (o - 1) * st >= iv + pd) o--;
    return C(s, o);
  }
  /* symbolic input: ceil_mode's correction needs a comparison, so only floor mode stays symbolic */
  return ADD(s, DIV(s, ADD(s, in, C(s, 2 * pd - dl * (k - 1) - 1 + (ceil_mode ? st - 1 : 0))), C(s, st)), C(s, 1));
}

/* Pooling over the last 1, 2 or 3 dims (kernel_size's length says which). */
int shape_pool(S *s) {
  Value *x = tensor(s, "self");
  int nsp = s->n->op->args[ops_arg_index(s->n->op, "kernel_size")].fixed_len;
  if (x->rank != nsp + 1 && x->rank != nsp + 2) return fail(s, "%s", "pooling input has the wrong rank");
  int64_t k[3], st[3], pd[3], dl[3] = {1, 1, 1};
  int n;
  if (spatial_list(s, "kernel_size", nsp, k) || ints_arg(s, "stride", st, nsp, &n)) return -1;
  if (n == 0) memcpy(st, k, sizeof k);
  else if (spatial_list(s, "stride", nsp, st)) return -1;
  if (spatial_list(s, "padding", nsp, pd)) return -1;
  if (arg(s, "dilation") && spatial_list(s, "dilation", nsp, dl)) return -1;
  for (int i = 0; i < nsp; i++) {
    if (k[i] < 1 || st[i] < 1 || dl[i] < 1 || pd[i] < 0) return fail(s, "%s", "kernel, stride and dilation must be positive");
    if (pd[i] * 2 > k[i]) return fail(s, "%s", "padding should be at most half the kernel size");
  }
  bool ceil_mode = bool_arg(s, "ceil_mode");
  const Expr *sizes[GG_MAX_RANK];
  for (int d = 0; d < x->rank - nsp; d++) sizes[d] = x->sizes[d];
  for (int i = 0; i < nsp; i++) {
    int d = x->rank - nsp + i;
    sizes[d] = pool_out(s, x->sizes[d], k[i], st[i], pd[i], dl[i], ceil_mode);
    if (expr_hint(s->g, sizes[d]) <= 0) return fail(s, "%s", "output size would be empty");
  }
  set_out(s, 0, x->dtype, x->rank, sizes);
  if (s->n->op->nrets == 2) set_out(s, 1, DT_I64, x->rank, sizes);
  return 0;
}

/* _max_pool_nhwc: max_pool2d's rule on the NCHW view of its input [N, H, W, C], the result [N, OH, OW, C] */
int shape_pool_nhwc(S *s) {
  Value *x = tensor(s, "self");
  if (x->rank != 4) return fail(s, "%s", "input must have rank 4 (a batched 2-d pooling in channels-last layout)");
  Value xs = *x;
  const Expr *xsz[4];
  for (int d = 0; d < 4; d++) xsz[d] = x->sizes[(int[]){0, 3, 1, 2}[d]];
  xs.sizes = xsz;
  Arg *xa = &s->n->args[ops_arg_index(s->n->op, "self")];
  xa->u.t = &xs;
  int rc = shape_pool(s);
  xa->u.t = x;
  if (rc) return rc;
  const Expr *o[4];
  for (int d = 0; d < 4; d++) o[d] = s->out[0].sizes[d];
  for (int d = 0; d < 4; d++) s->out[0].sizes[d] = o[(int[]){0, 2, 3, 1}[d]];
  return 0;
}

int shape_adaptive_pool(S *s) {
  Value *x = tensor(s, "self");
  const Arg *a = arg(s, "output_size");
  int nsp = s->n->op->args[ops_arg_index(s->n->op, "output_size")].fixed_len;
  if (x->rank != nsp + 1 && x->rank != nsp + 2) return fail(s, "%s", "adaptive pooling input has the wrong rank");
  if (a->k != AK_INTS || a->n != nsp) return fail(s, "%s", "output_size has the wrong length");
  const Expr *sizes[GG_MAX_RANK];
  for (int d = 0; d < x->rank - nsp; d++) sizes[d] = x->sizes[d];
  for (int i = 0; i < nsp; i++) sizes[x->rank - nsp + i] = a->u.is[i];
  set_out(s, 0, x->dtype, x->rank, sizes);
  if (s->n->op->nrets == 2) set_out(s, 1, DT_I64, x->rank, sizes);
  return 0;
}

int shape_upsample(S *s) {
  Value *x = tensor(s, "input") ? tensor(s, "input") : tensor(s, "self");
  if (x->rank != 4) return fail(s, "%s", "2-d upsampling needs a rank-4 input");
  if (strstr(s->n->op->name, "bicubic") && !dtype_is_float(x->dtype)) return fail(s, "%s", "bicubic upsampling needs a float input");
  const Arg *os = arg(s, "output_size"), *sf = arg(s, "scale_factors");
  const Expr *sizes[4] = {x->sizes[0], x->sizes[1], NULL, NULL};
  if (os && os->k == AK_INTS && os->n == 2) { sizes[2] = os->u.is[0]; sizes[3] = os->u.is[1]; }
  else if (sf && sf->k == AK_FLOATS && sf->n == 2) {
    for (int i = 0; i < 2; i++) {
      int64_t in;
      if (!expr_is_const(x->sizes[2 + i], &in)) return fail(s, "%s", "scale_factors need static input sizes");
      double o = floor((double)in * sf->u.fs[i]);
      if (!(sf->u.fs[i] > 0 && o >= 0 && o <= (double)GG_MAX_ELEMS)) return fail(s, "%s", "scale_factors must be positive and finite, and give a size in range");
      sizes[2 + i] = C(s, (int64_t)o);
    }
  } else return fail(s, "%s", "give output_size or two scale_factors");
  set_out(s, 0, x->dtype, 4, sizes);
  return 0;
}

/* ---------------------------------------------------------------- normalization */

int shape_norm(S *s) {
  const char *name = s->n->op->name;
  Value *x = tensor(s, "input");
  if (!dtype_is_float(x->dtype)) return fail(s, "%s", "normalization needs a floating-point input");
  const Arg *nsa = arg(s, "normalized_shape");
  if (nsa && nsa->k == AK_INTS) {   /* layer and RMS norm: the input's last dims, and weight and bias of that shape */
    if (nsa->n > x->rank) return fail(s, "%s", "normalized_shape longer than the input's rank");
    for (int i = 0; i < nsa->n; i++)
      if (!expr_same(s->g, nsa->u.is[i], x->sizes[x->rank - nsa->n + i])) return fail(s, "%s", "normalized_shape differs from the input's last dims");
    const char *wb[] = {"weight", "bias"};
    for (int j = 0; j < 2; j++) {
      Value *t = tensor(s, wb[j]);
      bool ok = !t || t->rank == nsa->n;
      for (int i = 0; t && ok && i < nsa->n; i++) ok = expr_same(s->g, t->sizes[i], nsa->u.is[i]);
      if (!ok) return fail(s, "%s has a shape other than normalized_shape", wb[j]);
    }
  }
  if (!strncmp(name, "batch_norm", 10) || !strncmp(name, "_native_batch_norm", 18) || !strcmp(name, "_batch_norm_train") || !strcmp(name, "group_norm") ||
      !strcmp(name, "native_group_norm")) {
    /* per-channel parameters and statistics: 1-d of the channel count; the statistics both or neither */
    if (x->rank < 2) return fail(s, "%s", "normalization needs a rank >= 2 input");
    const char *per[] = {"weight", "bias", "running_mean", "running_var"};
    for (int j = 0; j < 4; j++) {
      Value *t = tensor(s, per[j]);
      if (t && (t->rank != 1 || !expr_same(s->g, t->sizes[0], x->sizes[1]))) return fail(s, "%s must have one value per channel", per[j]);
    }
    if (arg(s, "running_mean") && (tensor(s, "running_mean") == NULL) != (tensor(s, "running_var") == NULL))
      return fail(s, "%s", "running_mean and running_var must be given together");
  }
  like(s, 0, x, x->dtype);
  const Expr *st[GG_MAX_RANK];
  if (!strcmp(name, "native_layer_norm")) {
    const Arg *ns = arg(s, "normalized_shape");
    int k = ns->k == AK_INTS ? ns->n : 0;
    if (k > x->rank) return fail(s, "%s", "normalized_shape longer than the input's rank");
    for (int d = 0; d < x->rank; d++) st[d] = d < x->rank - k ? x->sizes[d] : C(s, 1);
    set_out(s, 1, x->dtype, x->rank, st);
    set_out(s, 2, x->dtype, x->rank, st);
  } else if (!strcmp(name, "native_group_norm")) {
    const Arg *na = arg(s, "N");
    int64_t g;
    if (int_arg(s, "group", &g)) return -1;
    st[0] = na->u.i;
    st[1] = C(s, g);
    set_out(s, 1, x->dtype, 2, st);
    set_out(s, 2, x->dtype, 2, st);
  } else if (!strcmp(name, "_batch_norm_train")) {   /* mean, 1/std and the biased variance per channel */
    st[0] = x->sizes[1];
    for (int i = 1; i < 4; i++) set_out(s, i, x->dtype, 1, st);
  } else if (!strncmp(name, "_native_batch_norm", 18)) {
    if (x->rank < 2) return fail(s, "%s", "batch norm needs a rank >= 2 input");
    bool stats = strcmp(name, "_native_batch_norm_legit_no_training") && (bool_arg(s, "training") || !arg(s, "training") || !strcmp(name, "_native_batch_norm_legit.no_stats"));
    st[0] = stats ? x->sizes[1] : C(s, 0);
    set_out(s, 1, x->dtype, 1, st);
    set_out(s, 2, x->dtype, 1, st);
    if (s->n->op->nrets == 5) {
      st[0] = x->sizes[1];
      Value *rm = tensor(s, "running_mean"), *rv = tensor(s, "running_var");
      set_out(s, 3, rm->dtype, 1, st);
      set_out(s, 4, rv->dtype, 1, st);
    }
  }
  return 0;
}

int shape_sdpa(S *s) {
  Value *q = tensor(s, "query"), *k = tensor(s, "key"), *v = tensor(s, "value");
  if (q->rank < 2 || k->rank != q->rank || v->rank != q->rank) return fail(s, "%s", "query, key and value need the same rank >= 2");
  if (check_same(s, q->sizes[q->rank - 1], k->sizes[k->rank - 1], "query vs key head size")) return -1;
  if (check_same(s, k->sizes[k->rank - 2], v->sizes[v->rank - 2], "key vs value length")) return -1;
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, q->sizes, sizeof *sizes * (size_t)q->rank);
  sizes[q->rank - 1] = v->sizes[v->rank - 1];
  set_out(s, 0, q->dtype, q->rank, sizes);
  return 0;
}

/* _attention_train (--train's attention, kept whole for autograd): the output, and the log-sum-exp of
 * each query row's scores in the operands' opmath type (float32 for 16-bit ones). Equal heads: grouped
 * key/value heads are repeated before it. */
static int attention_operands(S *s) {
  Value *q = tensor(s, "query"), *k = tensor(s, "key"), *v = tensor(s, "value"), *m = tensor(s, "attn_mask");
  if (q->rank < 2 || k->rank != q->rank || v->rank != q->rank) return fail(s, "%s", "query, key and value need the same rank >= 2");
  if (!dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype) return fail(s, "%s", "query, key and value need one floating dtype");
  if (check_same(s, q->sizes[q->rank - 1], k->sizes[k->rank - 1], "query vs key head size")) return -1;
  if (check_same(s, k->sizes[k->rank - 2], v->sizes[v->rank - 2], "key vs value length")) return -1;
  for (int d = 0; d < q->rank - 2; d++)
    if (check_same(s, q->sizes[d], k->sizes[d], "query vs key batch dims") || check_same(s, q->sizes[d], v->sizes[d], "query vs value batch dims")) return -1;
  if (m && (m->rank > q->rank || (m->dtype != DT_BOOL && !dtype_is_float(m->dtype)))) return fail(s, "%s", "attn_mask must be bool or floating, of at most the query's rank");
  return 0;
}

static DType opmath(DType dt) { return dt == DT_F16 || dt == DT_BF16 ? DT_F32 : dt; }

int shape_attention_train(S *s) {
  if (attention_operands(s)) return -1;
  Value *q = tensor(s, "query"), *v = tensor(s, "value");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, q->sizes, sizeof *sizes * (size_t)q->rank);
  sizes[q->rank - 1] = v->sizes[v->rank - 1];
  set_out(s, 0, q->dtype, q->rank, sizes);
  set_out(s, 1, opmath(q->dtype), q->rank - 1, q->sizes);
  return 0;
}

/* _attention_train_backward: the gradients of query, key and value, from the output's gradient and
 * the forward's output and log-sum-exp */
int shape_attention_backward(S *s) {
  if (attention_operands(s)) return -1;
  Value *q = tensor(s, "query"), *k = tensor(s, "key"), *v = tensor(s, "value"), *g = tensor(s, "grad_out"), *o = tensor(s, "out"), *l = tensor(s, "logsumexp");
  if (g->dtype != q->dtype || o->dtype != q->dtype || g->rank != q->rank || o->rank != q->rank || l->rank != q->rank - 1 || l->dtype != opmath(q->dtype))
    return fail(s, "%s", "grad_out and out must be the output's shape and dtype, logsumexp the query's rows");
  for (int d = 0; d < q->rank; d++) {
    const Expr *want = d == q->rank - 1 ? v->sizes[d] : q->sizes[d];
    if (check_same(s, g->sizes[d], want, "grad_out vs the output") || check_same(s, o->sizes[d], want, "out vs the output") ||
        (d < q->rank - 1 && check_same(s, l->sizes[d], q->sizes[d], "logsumexp vs the query rows")))
      return -1;
  }
  like(s, 0, q, q->dtype);
  like(s, 1, k, k->dtype);
  like(s, 2, v, v->dtype);
  return 0;
}

bool loss_is_elementwise(const char *name) {
  static const char *const names[] = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", NULL};
  for (const char *const *n = names; *n; n++) if (!strcmp(*n, name)) return true;
  return false;
}

int shape_loss(S *s) {
  const char *name = s->n->op->name;
  Value *x = tensor(s, "self"), *t = tensor(s, "target");
  int64_t red;
  if (int_arg(s, "reduction", &red)) return -1;
  if (red < 0 || red > 2) return fail(s, "%s", "reduction must be 0 (none), 1 (mean) or 2 (sum)");
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  if (loss_is_elementwise(name)) {
    if (red == 0) {
      memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
      r = x->rank;
      if (broadcast_into(s, sizes, &r, t)) return -1;
    }
    set_out(s, 0, x->dtype, red == 0 ? r : 0, sizes);
    return 0;
  }
  if (!dtype_is_float(x->dtype)) return fail(s, "%s", "loss needs a floating-point input");
  bool probs = dtype_is_float(t->dtype);
  if (x->rank < 1) return fail(s, "%s", "the input needs a class dim ([C] or [N, C, ...])");
  if (probs ? t->rank != x->rank : t->rank != (x->rank > 1 ? x->rank - 1 : 0))
    return fail(s, "%s", "the target must be class indices of the input's shape without the class dim, or probabilities of the input's shape");
  if (red == 0) {
    if (probs) { for (int d = 0; d < x->rank; d++) if (d != (x->rank > 1)) sizes[r++] = x->sizes[d]; }
    else { memcpy(sizes, t->sizes, sizeof *sizes * (size_t)t->rank); r = t->rank; }
  }
  set_out(s, 0, x->dtype, r, sizes);
  if (s->n->op->nrets == 2) set_out(s, 1, x->dtype, 0, sizes);
  return 0;
}

/* ---------------------------------------------------------------- views */

/* Resolve a size list with at most one -1 against numel. */
static int infer_sizes(S *s, const Value *x, const Arg *a, const Expr **out, int *rank) {
  if (a->k != AK_INTS) return fail(s, "%s", "size must be a list");
  if (a->n > GG_MAX_RANK) return fail(s, "%s", "too many dims");
  const Expr *numel = C(s, 1), *known = C(s, 1);
  for (int d = 0; d < x->rank; d++) numel = MUL(s, numel, x->sizes[d]);
  int infer = -1;
  for (int i = 0; i < a->n; i++) {
    int64_t v;
    if (expr_is_const(a->u.is[i], &v) && v == -1) {
      if (infer >= 0) return fail(s, "%s", "only one dimension can be -1");
      infer = i;
    } else if (expr_is_const(a->u.is[i], &v) && v < 0) return fail(s, "%s", "negative size");
    else known = MUL(s, known, a->u.is[i]);
    out[i] = a->u.is[i];
  }
  int64_t kh = expr_hint(s->g, known), nh = expr_hint(s->g, numel);
  if (infer >= 0) {
    if (kh == 0 || nh % kh) return fail(s, "%s", "shape is invalid for the input's size");
    out[infer] = DIV(s, numel, known);
  } else if (kh != nh) {
    char buf[64];
    snprintf(buf, sizeof buf, "%lld vs %lld elements", (long long)kh, (long long)nh);
    return fail(s, "shape is invalid for the input's size: %s", buf);
  }
  *rank = a->n;
  return 0;
}

int shape_reshape(S *s) {
  const char *name = s->n->op->name;
  Value *x = tensor(s, "self");
  const Expr *sizes[GG_MAX_RANK * 2];
  int r = 0;
  if (!strncmp(name, "flatten", 7)) {
    int64_t a, b;
    if (int_arg(s, "start_dim", &a) || int_arg(s, "end_dim", &b) || norm_dim(s, a, x->rank, &a) || norm_dim(s, b, x->rank, &b)) return -1;
    if (a > b) return fail(s, "%s", "flatten: start_dim after end_dim");
    if (x->rank == 0) { sizes[0] = C(s, 1); set_out(s, 0, x->dtype, 1, sizes); return 0; }
    for (int d = 0; d < a; d++) sizes[r++] = x->sizes[d];
    const Expr *p = C(s, 1);
    for (int64_t d = a; d <= b; d++) p = MUL(s, p, x->sizes[d]);
    sizes[r++] = p;
    for (int d = (int)b + 1; d < x->rank; d++) sizes[r++] = x->sizes[d];
  } else if (!strncmp(name, "unflatten", 9)) {
    int64_t dim;
    if (int_arg(s, "dim", &dim) || size_dim(s, dim, x->rank, &dim)) return -1;
    Value part = {.rank = 1, .sizes = &x->sizes[dim]};
    const Expr *mid[GG_MAX_RANK];
    int mr;
    if (infer_sizes(s, &part, arg(s, "sizes"), mid, &mr)) return -1;
    if (x->rank - 1 + mr > GG_MAX_RANK) return fail(s, "%s", "too many dims");
    for (int d = 0; d < dim; d++) sizes[r++] = x->sizes[d];
    for (int i = 0; i < mr; i++) sizes[r++] = mid[i];
    for (int d = (int)dim + 1; d < x->rank; d++) sizes[r++] = x->sizes[d];
  } else {
    if (infer_sizes(s, x, arg(s, strcmp(name, "reshape") ? "size" : "shape"), sizes, &r)) return -1;
  }
  set_out(s, 0, x->dtype, r, sizes);
  return 0;
}

/* slice bounds, PyTorch's rules: None -> 0 / size, negatives wrap once, then clamp to [0, size] */
static const Expr *slice_bound(S *s, const Arg *a, const Expr *size, int64_t dflt_is_end) {
  if (!a || a->k == AK_NONE) return dflt_is_end ? size : C(s, 0);
  int64_t v, sz;
  if (expr_is_const(a->u.i, &v)) {
    if (expr_is_const(size, &sz)) {
      if (v < 0) v += sz;
      if (v < 0) v = 0;
      if (v > sz) v = sz;
      return C(s, v);
    }
    if (v >= INT64_MAX / 2) return size;
    if (v < 0) return expr_bin(s->a, E_MAX, C(s, 0), ADD(s, size, C(s, v)));
    return expr_bin(s->a, E_MIN, C(s, v), size);
  }
  return expr_bin(s->a, E_MIN, a->u.i, size);
}

/* as_strided(self, size, stride, storage_offset): self's elements, in their contiguous order, read
 * at offset + sum(i_d * stride_d). Static sizes, strides and offset, every element read inside self;
 * self a tensor of its own (not a view of another's storage, whose layout a functional graph does
 * not have). */
int shape_as_strided(S *s) {
  Value *x = tensor(s, "self");
  const Arg *sz = arg(s, "size"), *st = arg(s, "stride"), *so = arg(s, "storage_offset");
  if (sz->k != AK_INTS || st->k != AK_INTS || sz->n != st->n || sz->n > GG_MAX_RANK) return fail(s, "%s", "size and stride must be lists of one length");
  const Node *vd = x->def && x->def->op && x->def->op->view ? x->def : NULL;   /* a reshape of a tensor (decompose.c's) is one */
  if (vd && (!strcmp(vd->op->name, "reshape") || !strcmp(vd->op->name, "view")) && vd->args[0].k == AK_TENSOR && !(vd->args[0].u.t->def && vd->args[0].u.t->def->op && vd->args[0].u.t->def->op->view)) vd = NULL;
  if (vd && strcmp(vd->op->name, "alias") && strcmp(vd->op->name, "detach"))
    return fail(s, "%s", "as_strided of a view reads its base's storage, which is not represented here (take it of a contiguous tensor)");
  int64_t numel = 1, last = 0, off = 0, v, w;
  bool empty = false;
  for (int d = 0; d < x->rank; d++) {
    if (!expr_is_const(x->sizes[d], &v)) return fail(s, "%s", "as_strided needs static input sizes");
    numel *= v;
  }
  if (so && so->k == AK_INT && (!expr_is_const(so->u.i, &off) || off < 0 || off > GG_MAX_ELEMS)) return fail(s, "%s", "storage_offset must be a static number >= 0");
  for (int i = 0; i < sz->n; i++) {
    if (!expr_is_const(sz->u.is[i], &v) || !expr_is_const(st->u.is[i], &w)) return fail(s, "%s", "as_strided needs static sizes and strides");
    if (v < 0 || w < 0 || v > GG_MAX_ELEMS || w > GG_MAX_ELEMS) return fail(s, "%s", "sizes and strides must be >= 0 and in range");
    empty |= v == 0;
    int64_t step;
    if (v && (__builtin_mul_overflow(v - 1, w, &step) || __builtin_add_overflow(last, step, &last))) return fail(s, "%s", "the strides reach past the input's elements");
  }
  if (!empty && (__builtin_add_overflow(off, last, &last) || last >= numel)) return fail(s, "%s", "the strides reach past the input's elements");
  set_out(s, 0, x->dtype, sz->n, sz->u.is);
  return 0;
}

/* col2im (fold): [N,] C*kh*kw, L -> [N,] C, H, W, where L is the count of sliding blocks in H, W */
int shape_col2im(S *s) {
  Value *x = tensor(s, "self");
  int64_t os[2], k[2], dl[2], pd[2], st[2], K = 1, L = 1, CK, l;
  if (spatial_list(s, "output_size", 2, os) || spatial_list(s, "kernel_size", 2, k) || spatial_list(s, "dilation", 2, dl) ||
      spatial_list(s, "padding", 2, pd) || spatial_list(s, "stride", 2, st)) return -1;
  if (x->rank != 2 && x->rank != 3) return fail(s, "%s", "col2im needs a [N,] C*kh*kw, L input");
  for (int i = 0; i < 2; i++) {
    if (k[i] < 1 || dl[i] < 1 || st[i] < 1 || pd[i] < 0 || os[i] < 0) return fail(s, "%s", "kernel, dilation and stride must be positive, padding and output_size >= 0");
    int64_t n = os[i] + 2 * pd[i] - dl[i] * (k[i] - 1) - 1;
    if (n < 0) return fail(s, "%s", "the kernel does not fit the padded output");
    K *= k[i];
    L *= n / st[i] + 1;
  }
  if (!expr_is_const(x->sizes[x->rank - 2], &CK) || !expr_is_const(x->sizes[x->rank - 1], &l) || CK % K || l != L)
    return fail(s, "%s", "the input must have C*kh*kw channels and one column per sliding block");
  const Expr *sizes[4];
  int r = 0;
  if (x->rank == 3) sizes[r++] = x->sizes[0];
  sizes[r++] = C(s, CK / K);
  sizes[r++] = C(s, os[0]);
  sizes[r++] = C(s, os[1]);
  set_out(s, 0, x->dtype, r, sizes);
  return 0;
}

/* _cdist_forward: [..., P, M] and [..., R, M] -> [..., P, R], the batch dims broadcast */
int shape_cdist(S *s) {
  Value *a = tensor(s, "x1"), *b = tensor(s, "x2");
  const Arg *p = arg(s, "p");
  if (a->rank < 2 || b->rank < 2 || !expr_same(s->g, a->sizes[a->rank - 1], b->sizes[b->rank - 1]) || !dtype_is_float(a->dtype) || a->dtype != b->dtype)
    return fail(s, "%s", "x1 and x2 must be float tensors of one dtype, [..., P, M] and [..., R, M]");
  if (p->k != AK_FLOAT || !(p->u.f >= 0)) return fail(s, "%s", "p must be >= 0");
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  for (int i = 0; i < 2; i++) {
    Value *t = i ? b : a;
    Value bt = *t;
    bt.rank = t->rank - 2;
    if (broadcast_into(s, sizes, &r, &bt)) return -1;
  }
  if (r + 2 > GG_MAX_RANK) return fail(s, "%s", "too many dims");
  sizes[r++] = a->sizes[a->rank - 2];
  sizes[r++] = b->sizes[b->rank - 2];
  set_out(s, 0, a->dtype, r, sizes);
  return 0;
}

/* _pdist_forward: [N, M] -> [N (N - 1) / 2], the distances of the pairs i < j in row order */
int shape_pdist(S *s) {
  Value *x = tensor(s, "self");
  const Arg *p = arg(s, "p");
  int64_t n;
  if (x->rank != 2 || !dtype_is_float(x->dtype) || !expr_is_const(x->sizes[0], &n)) return fail(s, "%s", "pdist needs a float [N, M] input, N static");
  if (p->k != AK_FLOAT || !(p->u.f >= 0)) return fail(s, "%s", "p must be >= 0");
  const Expr *sz[1] = {C(s, n * (n - 1) / 2)};
  set_out(s, 0, x->dtype, 1, sz);
  return 0;
}

/* grid_sampler_2d: input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] -> [N, C, Ho, Wo] */
int shape_grid_sampler(S *s) {
  Value *x = tensor(s, "input"), *g = tensor(s, "grid");
  int64_t im, pm, H, W;
  if (int_arg(s, "interpolation_mode", &im) || int_arg(s, "padding_mode", &pm)) return -1;
  if (x->rank != 4 || g->rank != 4 || !dtype_is_float(x->dtype) || g->dtype != x->dtype || !expr_same(s->g, g->sizes[0], x->sizes[0]) || !is_one(ADD(s, g->sizes[3], C(s, -1))))
    return fail(s, "%s", "grid_sampler_2d needs float [N, C, H, W] input and [N, Ho, Wo, 2] grid of one dtype");
  if (im < 0 || im > 2 || pm < 0 || pm > 2) return fail(s, "%s", "interpolation_mode must be 0-2 (bilinear, nearest, bicubic), padding_mode 0-2 (zeros, border, reflection)");
  if (!expr_is_const(x->sizes[2], &H) || !expr_is_const(x->sizes[3], &W)) return fail(s, "%s", "grid_sampler_2d needs a static input size");
  const Expr *sizes[4] = {x->sizes[0], x->sizes[1], g->sizes[1], g->sizes[2]};
  set_out(s, 0, x->dtype, 4, sizes);
  return 0;
}

/* _embedding_bag: weight [V, D], 1-d indices and offsets -> output [B, D], offset2bag, bag_size [B],
 * max_indices, with the sizes PyTorch's meta function gives them (offset2bag empty on the fast
 * sum path, max_indices [B, D] for max, else [B]) */
int shape_embedding_bag(S *s) {
  Value *w = tensor(s, "weight"), *ix = tensor(s, "indices"), *of = tensor(s, "offsets"), *psw = tensor(s, "per_sample_weights");
  int64_t mode, pad, nb;
  if (int_arg(s, "mode", &mode) || int_arg(s, "padding_idx", &pad)) return -1;
  bool last = bool_arg(s, "include_last_offset");
  if (w->rank != 2 || !dtype_is_float(w->dtype) || ix->rank != 1 || of->rank != 1 || dtype_is_float(ix->dtype) || ix->dtype == DT_BOOL || dtype_is_float(of->dtype) || of->dtype == DT_BOOL)
    return fail(s, "%s", "_embedding_bag needs a float [V, D] weight and 1-d integer indices and offsets");
  if (mode < 0 || mode > 2) return fail(s, "%s", "mode must be 0 (sum), 1 (mean) or 2 (max)");
  if (psw && (mode != 0 || psw->rank != 1 || !expr_same(s->g, psw->sizes[0], ix->sizes[0]) || psw->dtype != w->dtype))
    return fail(s, "%s", "per_sample_weights need mode sum and one weight per index");
  if (bool_arg(s, "scale_grad_by_freq") || bool_arg(s, "sparse")) return fail(s, "%s", "scale_grad_by_freq and sparse are training options of the sparse gradient, not supported");
  if (!expr_is_const(of->sizes[0], &nb) || nb - last < 0 || (last && nb < 1)) return fail(s, "%s", "offsets must have a static length (>= 1 with include_last_offset)");
  const Expr *B = C(s, nb - last), *o[2] = {B, w->sizes[1]};
  set_out(s, 0, w->dtype, 2, o);
  bool fast = mode == 0 && (w->dtype == DT_F32 || w->dtype == DT_F16) && pad < 0;
  const Expr *z[1] = {fast ? C(s, 0) : ix->sizes[0]};
  set_out(s, 1, of->dtype, 1, z);
  set_out(s, 2, of->dtype, 1, &B);
  set_out(s, 3, of->dtype, mode == 2 ? 2 : 1, o);
  return 0;
}

/* diagonal(self, offset, dim1, dim2): dim1 and dim2 removed, the diagonal's length appended */
int shape_diagonal(S *s) {
  Value *x = tensor(s, "self");
  int64_t off, d1, d2;
  if (int_arg(s, "offset", &off) || int_arg(s, "dim1", &d1) || int_arg(s, "dim2", &d2)) return -1;
  if (x->rank < 2) return fail(s, "%s", "diagonal needs at least two dims");
  if (norm_dim(s, d1, x->rank, &d1) || norm_dim(s, d2, x->rank, &d2)) return -1;
  if (d1 == d2) return fail(s, "%s", "diagonal dimensions cannot be identical");
  if (off < -GG_MAX_ELEMS || off > GG_MAX_ELEMS) return fail(s, "%s", "offset out of range");
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  for (int d = 0; d < x->rank; d++) if (d != d1 && d != d2) sizes[r++] = x->sizes[d];
  sizes[r++] = view_diagonal_len(s->a, x->sizes[d1], x->sizes[d2], off);
  set_out(s, 0, x->dtype, r, sizes);
  return 0;
}

int shape_view(S *s) {
  const char *name = s->n->op->name;
  Value *x = tensor(s, "self");
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  if (!strcmp(name, "alias") || !strcmp(name, "contiguous") || !strcmp(name, "detach")) { like(s, 0, x, x->dtype); return 0; }
  if (!strcmp(name, "expand_as")) {
    Value *o = tensor(s, "other");
    const Expr *want[GG_MAX_RANK];
    memcpy(want, o->sizes, sizeof *want * (size_t)o->rank);
    int r2 = x->rank;
    const Expr *got[GG_MAX_RANK];
    memcpy(got, x->sizes, sizeof *got * (size_t)x->rank);
    if (broadcast_into(s, got, &r2, o) || r2 != o->rank) return fail(s, "%s", "self does not expand to other's shape");
    set_out(s, 0, x->dtype, o->rank, want);
    return 0;
  }
  if (!strcmp(name, "movedim.int")) {
    int64_t src, dst;
    if (int_arg(s, "source", &src) || int_arg(s, "destination", &dst) || norm_dim(s, src, x->rank, &src) || norm_dim(s, dst, x->rank, &dst)) return -1;
    int k = 0;
    for (int d = 0; d < x->rank; d++) {
      if (k == dst) sizes[k++] = x->sizes[src];
      if (d != src) sizes[k++] = x->sizes[d];
    }
    if (k == dst) sizes[k++] = x->sizes[src];
    set_out(s, 0, x->dtype, x->rank, sizes);
    return 0;
  }
  if (!strcmp(name, "permute")) {
    int64_t p[GG_MAX_RANK * 2];
    int n;
    bool used[GG_MAX_RANK] = {0};
    if (ints_arg(s, "dims", p, (int)(sizeof p / sizeof *p), &n)) return -1;
    if (n != x->rank) return fail(s, "%s", "permute needs one entry per dim");
    for (int i = 0; i < n; i++) {
      int64_t d;
      if (norm_dim(s, p[i], x->rank, &d)) return -1;
      if (used[d]) return fail(s, "%s", "permute repeats a dim");
      used[d] = true;
      sizes[i] = x->sizes[d];
    }
    set_out(s, 0, x->dtype, n, sizes);
    return 0;
  }
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  r = x->rank;
  if (!strcmp(name, "transpose.int") || !strcmp(name, "t")) {
    int64_t a = 0, b = 1;
    if (!strcmp(name, "t")) { if (x->rank > 2) return fail(s, "%s", "t() needs rank <= 2"); if (x->rank < 2) { like(s, 0, x, x->dtype); return 0; } }
    else if (int_arg(s, "dim0", &a) || int_arg(s, "dim1", &b) || norm_dim(s, a, x->rank, &a) || norm_dim(s, b, x->rank, &b)) return -1;
    if (x->rank) { const Expr *t = sizes[a]; sizes[a] = sizes[b]; sizes[b] = t; }
  } else if (!strcmp(name, "unsqueeze")) {
    int64_t d;
    if (int_arg(s, "dim", &d)) return -1;
    if (d < -(x->rank + 1) || d > x->rank) return fail(s, "%s", "dim out of range");
    if (d < 0) d += x->rank + 1;
    if (x->rank + 1 > GG_MAX_RANK) return fail(s, "%s", "too many dims");
    memmove(&sizes[d + 1], &sizes[d], sizeof *sizes * (size_t)(x->rank - d));
    sizes[d] = C(s, 1);
    r++;
  } else if (!strncmp(name, "squeeze", 7)) {
    bool mask[GG_MAX_RANK] = {0};
    if (!strcmp(name, "squeeze")) for (int d = 0; d < x->rank; d++) mask[d] = true;
    else if (reduce_dims(s, x, mask)) return -1;
    r = 0;
    for (int d = 0; d < x->rank; d++)
      if (!(mask[d] && is_one(x->sizes[d]))) sizes[r++] = x->sizes[d];
  } else if (!strcmp(name, "expand")) {
    const Arg *a = arg(s, "size");
    if (a->k != AK_INTS || a->n < x->rank || a->n > GG_MAX_RANK) return fail(s, "%s", "expand: size must have at least the input's rank");
    int lead = a->n - x->rank;
    for (int i = 0; i < a->n; i++) {
      int64_t v;
      const Expr *want = a->u.is[i];
      if (expr_is_const(want, &v) && v == -1) {
        if (i < lead) return fail(s, "%s", "expand: -1 is not allowed in a new leading dim");
        sizes[i] = x->sizes[i - lead];
      } else {
        if (i >= lead && !is_one(x->sizes[i - lead]) && !expr_same(s->g, x->sizes[i - lead], want))
          return fail(s, "expand: size %s does not match the input's non-singleton dim", expr_str(s->a, s->g, want));
        sizes[i] = want;
      }
    }
    r = a->n;
  } else if (!strcmp(name, "select.int")) {
    int64_t d;
    if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
    if (x->rank == 0) return fail(s, "%s", "select on a 0-d tensor");
    const Arg *ia = arg(s, "index");
    int64_t iv, sz;
    if (expr_is_const(ia->u.i, &iv) && expr_is_const(x->sizes[d], &sz) && (iv < -sz || iv >= sz)) return fail(s, "%s", "index out of range");
    memmove(&sizes[d], &sizes[d + 1], sizeof *sizes * (size_t)(x->rank - d - 1));
    r--;
  } else if (!strcmp(name, "slice.Tensor") || !strcmp(name, "narrow")) {
    int64_t d, step = 1;
    if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
    if (x->rank == 0) return fail(s, "%s", "slice on a 0-d tensor");
    if (!strcmp(name, "narrow")) {
      const Expr *len = arg(s, "length")->u.i;
      sizes[d] = len;
    } else {
      if (int_arg(s, "step", &step)) return -1;
      if (step < 1) return fail(s, "%s", "slice step must be positive");
      const Expr *st = slice_bound(s, arg(s, "start"), x->sizes[d], 0), *en = slice_bound(s, arg(s, "end"), x->sizes[d], 1);
      const Expr *len = expr_bin(s->a, E_MAX, C(s, 0), ADD(s, en, MUL(s, C(s, -1), st)));
      sizes[d] = step == 1 ? len : DIV(s, ADD(s, len, C(s, step - 1)), C(s, step));
    }
  } else return fail(s, "%s", "no view rule");
  set_out(s, 0, x->dtype, r, sizes);
  return 0;
}

int shape_split(S *s) {
  const char *name = s->n->op->name;
  Value *x = tensor(s, "self");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (x->rank == 0) return fail(s, "%s", "split on a 0-d tensor");
  int64_t size;
  if (!expr_is_const(x->sizes[d], &size)) return fail(s, "%s", "split along a symbolic dim");
  int64_t parts[256];
  int n = 0;
  if (!strcmp(name, "split_with_sizes")) {
    if (ints_arg(s, "split_sizes", parts, (int)(sizeof parts / sizeof *parts), &n)) return -1;
    int64_t tot = 0;
    for (int i = 0; i < n; i++) tot += parts[i];
    if (tot != size) return fail(s, "%s", "split_sizes do not add up to the dim's size");
  } else if (!strcmp(name, "unbind.int")) {
    if (size > 256) return fail(s, "%s", "too many outputs");
    for (n = 0; n < size; n++) parts[n] = -1;
  } else {
    int64_t k;
    if (!strcmp(name, "chunk")) {
      int64_t chunks;
      if (int_arg(s, "chunks", &chunks)) return -1;
      if (chunks < 1) return fail(s, "%s", "chunks must be positive");
      k = (size + chunks - 1) / chunks;
    } else {
      const Arg *a = arg(s, "split_size");
      if (!expr_is_const(a->u.i, &k)) return fail(s, "%s", "split_size must be static");
    }
    if (k < 1 && size > 0) return fail(s, "%s", "split size must be positive");
    for (int64_t at = 0; at < size || (n == 0); at += k) {
      if (n == 256) return fail(s, "%s", "too many outputs");
      parts[n++] = size - at < k ? size - at : k;
      if (size == 0) break;
    }
  }
  for (int i = 0; i < n; i++) {
    const Expr *sizes[GG_MAX_RANK];
    memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
    if (parts[i] < 0) {
      memmove(&sizes[d], &sizes[d + 1], sizeof *sizes * (size_t)(x->rank - d - 1));
      set_out(s, i, x->dtype, x->rank - 1, sizes);
    } else {
      sizes[d] = C(s, parts[i]);
      set_out(s, i, x->dtype, x->rank, sizes);
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- data movement */

static bool is_empty_1d(const Value *t) {
  int64_t v;
  return t->rank == 1 && expr_is_const(t->sizes[0], &v) && v == 0;
}

/* einsum's equation, PyTorch's rules: letters a-z A-Z, at most one "..." per term, an output after
 * "->" (else "..." then the letters used once, in ASCII order); a letter at most once in the output */
const char *einsum_parse(const char *eq, int nops, const int *ranks, Einsum *es) {
  memset(es, 0, sizeof *es);
  if (nops < 1 || nops > GG_EINSUM_MAX_OPS) return "einsum takes 1 to 8 operands";
  int id[128], count[128] = {0}, ell = 0, ell_of[GG_EINSUM_MAX_OPS] = {0};
  for (int i = 0; i < 128; i++) id[i] = -1;
  const char *arrow = strstr(eq, "->"), *p = eq;
  /* first pass: the terms' lengths, for the ellipsis widths */
  for (int k = 0; k < nops; k++) {
    int nl = 0, dots = 0;
    for (; *p && *p != ',' && p != arrow; p++) {
      if (*p == ' ') continue;
      if (*p == '.') {
        if (strncmp(p, "...", 3) || dots++) return "a term has a '.' outside one '...'";
        p += 2;
        continue;
      }
      if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return "subscripts must be letters a-z, A-Z";
      nl++;
    }
    if (dots ? nl > ranks[k] : nl != ranks[k]) return "a term's subscripts do not match its operand's rank";
    if (dots) { ell_of[k] = ranks[k] - nl; if (ell_of[k] > ell) ell = ell_of[k]; }
    else ell_of[k] = -1;
    if (k < nops - 1) { if (*p != ',') return "fewer terms than operands"; p++; }
  }
  if (*p && p != arrow) return "more terms than operands";
  /* ellipsis dims first (ids 0 .. ell-1), then letters in order of appearance */
  es->nletters = ell;
  es->nops = nops;
  p = eq;
  for (int k = 0; k < nops; k++) {
    int d = 0;
    es->rank[k] = ranks[k];
    for (; *p && *p != ',' && p != arrow; p++) {
      if (*p == ' ') continue;
      if (*p == '.') {
        for (int j = 0; j < ell_of[k]; j++) es->letters[k][d++] = ell - ell_of[k] + j;
        p += 2;
        continue;
      }
      if (id[(int)*p] < 0) id[(int)*p] = es->nletters++;
      count[(int)*p]++;
      es->letters[k][d++] = id[(int)*p];
    }
    if (*p == ',') p++;
  }
  if (arrow) {
    bool seen[GG_EINSUM_MAX_LETTERS] = {0}, dots = false;
    for (p = arrow + 2; *p; p++) {
      if (*p == ' ') continue;
      if (*p == '.') {
        if (strncmp(p, "...", 3) || dots) return "the output has a '.' outside one '...'";
        dots = true;
        for (int j = 0; j < ell; j++) { if (es->nout >= GG_MAX_RANK) return "too many output dims"; es->out[es->nout++] = j; }
        p += 2;
        continue;
      }
      if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) || id[(int)*p] < 0) return "an output subscript appears in no input";
      if (seen[id[(int)*p]]) return "an output subscript appears twice";
      seen[id[(int)*p]] = true;
      if (es->nout >= GG_MAX_RANK) return "too many output dims";
      es->out[es->nout++] = id[(int)*p];
    }
    if (ell && !dots) return "the inputs have '...' and the output does not";
  } else {
    for (int j = 0; j < ell; j++) es->out[es->nout++] = j;
    for (int ch = 0; ch < 128; ch++)
      if (count[ch] == 1) { if (es->nout >= GG_MAX_RANK) return "too many output dims"; es->out[es->nout++] = id[ch]; }
  }
  return NULL;
}

/* einsum: each letter's size agreed by the operands (ellipsis dims broadcast from 1) */
int shape_einsum(S *s) {
  const Arg *a = arg(s, "tensors"), *eq = arg(s, "equation");
  if (a->k != AK_TENSORS || eq->k != AK_STR) return fail(s, "%s", "einsum needs an equation and a list of tensors");
  int ranks[GG_EINSUM_MAX_OPS];
  for (int k = 0; k < a->n && k < GG_EINSUM_MAX_OPS; k++) ranks[k] = a->u.ts[k] ? a->u.ts[k]->rank : 0;
  Einsum es;
  const char *why = einsum_parse(eq->u.s, a->n, ranks, &es);
  if (why) return fail(s, "%s", why);
  const Expr *size[GG_EINSUM_MAX_LETTERS] = {0};
  DType dt = a->u.ts[0]->dtype;
  for (int k = 0; k < es.nops; k++) {
    Value *t = a->u.ts[k];
    if (t->dtype != dt) return fail(s, "%s", "einsum's operands must have one dtype");
    for (int d = 0; d < t->rank; d++) {
      int l = es.letters[k][d];
      if (!size[l] || is_one(size[l])) size[l] = t->sizes[d];
      else if (!is_one(t->sizes[d]) && !expr_same(s->g, size[l], t->sizes[d])) return fail(s, "%s", "a subscript's dims have different sizes");
    }
  }
  const Expr *sizes[GG_MAX_RANK];
  for (int i = 0; i < es.nout; i++) sizes[i] = size[es.out[i]];
  set_out(s, 0, dt, es.nout, sizes);
  return 0;
}

/* _weight_norm(v, g, dim): v's shape */
int shape_weight_norm(S *s) {
  Value *v = tensor(s, "v"), *g = tensor(s, "g");
  int64_t d;
  if (int_arg(s, "dim", &d)) return -1;
  if (!dtype_is_float(v->dtype) || g->dtype != v->dtype || d < -1 || d >= v->rank) return fail(s, "%s", "_weight_norm needs float v and g of one dtype and a dim of v (or -1)");
  like(s, 0, v, v->dtype);
  return 0;
}

/* repeat_interleave.self_int: each element repeated along dim (flattened when dim is None) */
int shape_repeat_interleave(S *s) {
  Value *x = tensor(s, "self");
  int64_t r, d;
  if (int_arg(s, "repeats", &r)) return -1;
  if (r < 0 || r > GG_MAX_ELEMS) return fail(s, "%s", "repeats must be >= 0");
  const Expr *sizes[GG_MAX_RANK];
  if (is_none(s, "dim")) {
    const Expr *n = C(s, r);
    for (int k = 0; k < x->rank; k++) n = MUL(s, n, x->sizes[k]);
    set_out(s, 0, x->dtype, 1, &n);
    return 0;
  }
  if (int_arg(s, "dim", &d) || size_dim(s, d, x->rank, &d)) return -1;
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  sizes[d] = MUL(s, sizes[d], C(s, r));
  set_out(s, 0, x->dtype, x->rank, sizes);
  return 0;
}

/* meshgrid: n 0-d or 1-d tensors -> n tensors of their sizes together ('xy': the first two swapped) */
int shape_meshgrid(S *s) {
  const Arg *a = arg(s, "tensors"), *ix = arg(s, "indexing");
  bool xy = ix && ix->k == AK_STR && !strcmp(ix->u.s, "xy");
  if (ix && ix->k == AK_STR && !xy && strcmp(ix->u.s, "ij")) return fail(s, "%s", "indexing must be 'ij' or 'xy'");
  if (a->k != AK_TENSORS || a->n < 1 || a->n > GG_MAX_RANK || a->n != s->n->nouts) return fail(s, "%s", "meshgrid needs 1 to 16 tensors, one output each");
  const Expr *sizes[GG_MAX_RANK];
  for (int i = 0; i < a->n; i++) {
    Value *t = a->u.ts[i];
    if (!t || t->rank > 1 || t->dtype != a->u.ts[0]->dtype) return fail(s, "%s", "meshgrid's tensors must be 0-d or 1-d, of one dtype");
    sizes[i] = t->rank ? t->sizes[0] : C(s, 1);
  }
  if (xy && a->n >= 2) { const Expr *t = sizes[0]; sizes[0] = sizes[1]; sizes[1] = t; }
  for (int i = 0; i < a->n; i++) set_out(s, i, a->u.ts[0]->dtype, a->n, sizes);
  return 0;
}

/* im2col (unfold): [N,] C, H, W -> [N,] C*kh*kw, L, L the count of sliding blocks */
int shape_im2col(S *s) {
  Value *x = tensor(s, "self");
  int64_t k[2], dl[2], pd[2], st[2], L = 1, Cn, H;
  if (spatial_list(s, "kernel_size", 2, k) || spatial_list(s, "dilation", 2, dl) || spatial_list(s, "padding", 2, pd) || spatial_list(s, "stride", 2, st)) return -1;
  if (x->rank != 3 && x->rank != 4) return fail(s, "%s", "im2col needs a [N,] C, H, W input");
  for (int i = 0; i < 2; i++) {
    if (k[i] < 1 || dl[i] < 1 || st[i] < 1 || pd[i] < 0) return fail(s, "%s", "kernel, dilation and stride must be positive, padding >= 0");
    if (!expr_is_const(x->sizes[x->rank - 2 + i], &H)) return fail(s, "%s", "im2col needs static spatial sizes");
    int64_t n = H + 2 * pd[i] - dl[i] * (k[i] - 1) - 1;
    if (n < 0) return fail(s, "%s", "the kernel does not fit the padded input");
    L *= n / st[i] + 1;
  }
  if (!expr_is_const(x->sizes[x->rank - 3], &Cn)) return fail(s, "%s", "im2col needs a static channel count");
  const Expr *sizes[3];
  int r = 0;
  if (x->rank == 4) sizes[r++] = x->sizes[0];
  sizes[r++] = C(s, Cn * k[0] * k[1]);
  sizes[r++] = C(s, L);
  set_out(s, 0, x->dtype, r, sizes);
  return 0;
}

/* lstm.input: input [T, B, I] ([B, T, I] batch_first, [T, I] unbatched), hx = (h0, c0) of
 * [layers * directions, B, H], params w_ih, w_hh (b_ih, b_hh) per layer and direction ->
 * output [T, B, directions * H] (batch_first: [B, T, ...]), h_n, c_n of h0's shape */
int shape_lstm(S *s) {
  Value *x = tensor(s, "input");
  const Arg *hx = arg(s, "hx"), *pa = arg(s, "params");
  int64_t L;
  if (int_arg(s, "num_layers", &L)) return -1;
  bool bias = bool_arg(s, "has_biases"), bi = bool_arg(s, "bidirectional"), bf = bool_arg(s, "batch_first"), unb = x->rank == 2;
  int D = bi ? 2 : 1, per = bias ? 4 : 2;
  if (hx->k != AK_TENSORS || hx->n != 2 || !hx->u.ts[0] || !hx->u.ts[1] || pa->k != AK_TENSORS) return fail(s, "%s", "lstm needs hx = (h0, c0) and a list of parameters");
  if (L < 1 || L > 64 || pa->n != L * D * per) return fail(s, "%s", "params must be w_ih, w_hh (and b_ih, b_hh) per layer and direction (projections are not supported)");
  if (bool_arg(s, "train") && L > 1 && arg(s, "dropout")->k == AK_FLOAT && arg(s, "dropout")->u.f > 0) return fail(s, "%s", "dropout between LSTM layers in training is not supported");
  Value *h0 = hx->u.ts[0], *c0 = hx->u.ts[1];
  if ((x->rank != 3 && !unb) || !dtype_is_float(x->dtype) || h0->rank != x->rank || c0->rank != x->rank) return fail(s, "%s", "lstm needs a float [T, B, I] input and h0, c0 of [layers * directions, B, H]");
  const Expr *H = h0->sizes[h0->rank - 1], *B = unb ? NULL : x->sizes[bf ? 0 : 1], *Tn = x->sizes[unb || !bf ? 0 : 1];
  for (int i = 0; i < pa->n; i++) {
    Value *p = pa->u.ts[i];
    int kind = i % per;
    if (!p || p->dtype != x->dtype || p->rank != (kind < 2 ? 2 : 1) || !expr_same(s->g, p->sizes[0], MUL(s, C(s, 4), H)) || (kind == 1 && !expr_same(s->g, p->sizes[1], H)))
      return fail(s, "%s", "an LSTM parameter has the wrong shape or dtype");
    if (kind == 0 && !expr_same(s->g, p->sizes[1], i / per / D == 0 ? x->sizes[x->rank - 1] : MUL(s, C(s, D), H))) return fail(s, "%s", "w_ih does not fit the layer's input");
  }
  if (!unb && (!expr_same(s->g, h0->sizes[1], B) || !expr_same(s->g, c0->sizes[1], B))) return fail(s, "%s", "h0 and c0 must have the input's batch");
  if (!expr_same(s->g, h0->sizes[0], C(s, L * D)) || !expr_same(s->g, c0->sizes[0], C(s, L * D)) || !expr_same(s->g, c0->sizes[c0->rank - 1], H))
    return fail(s, "%s", "h0 and c0 must be [layers * directions, B, H]");
  const Expr *os[3];
  if (unb) { os[0] = Tn; os[1] = MUL(s, C(s, D), H); }
  else { os[bf ? 1 : 0] = Tn; os[bf ? 0 : 1] = B; os[2] = MUL(s, C(s, D), H); }
  set_out(s, 0, x->dtype, x->rank, os);
  /* PyTorch's decomposition of lstm, which export's fake tensors run, keeps a unit dim in h_n and c_n
   * ([layers * directions, 1, B, H]) where eager PyTorch has none: the shape the export records is
   * kept (the same elements) */
  for (int i = 1; i < 3; i++) {
    const Value *o = s->n->outs[i], *h = i == 1 ? h0 : c0;
    bool unit = o->rank == h->rank + 1 && o->sizes[1] && is_one(o->sizes[1]);
    for (int d = 0; unit && d < h->rank; d++) unit = o->sizes[d + (d > 0)] && expr_same(s->g, o->sizes[d + (d > 0)], h->sizes[d]);
    if (!unit) { like(s, i, h, h->dtype); continue; }
    const Expr *u[GG_MAX_RANK];
    for (int d = 0; d < o->rank; d++) u[d] = o->sizes[d];
    set_out(s, i, h->dtype, o->rank, u);
  }
  return 0;
}

/* Ops the loader reads as others (load.c's canonical_op): never reach a shape rule */
int shape_alias(S *s) { return fail(s, "%s", "an alias the loader should have rewritten (internal error)"); }

int shape_cat(S *s) {
  const Arg *a = arg(s, "tensors");
  if (a->k != AK_TENSORS || a->n == 0) return fail(s, "%s", "needs a non-empty list of tensors");
  bool stack = !strcmp(s->n->op->name, "stack");
  int64_t d;
  if (int_arg(s, "dim", &d)) return -1;
  /* legacy rule: 1-d tensors of static size 0 are skipped by cat */
  const Value *ref = NULL;
  DType dt = DT_UNKNOWN;
  for (int i = 0; i < a->n; i++) {
    const Value *t = a->u.ts[i];
    dt = acc(dt, t->dtype);
    if (!ref && (stack || !is_empty_1d(t))) ref = t;
  }
  if (!ref) { set_out(s, 0, dt, 1, (const Expr *[]){C(s, 0)}); return 0; }
  int rank = ref->rank + (stack ? 1 : 0);
  if (rank > GG_MAX_RANK) return fail(s, "%s", "too many dims");
  if (stack ? norm_dim(s, d, rank, &d) : size_dim(s, d, rank, &d)) return -1;
  const Expr *sizes[GG_MAX_RANK];
  const Expr *total = C(s, 0);
  for (int i = 0; i < a->n; i++) {
    const Value *t = a->u.ts[i];
    if (!stack && is_empty_1d(t) && t != ref) continue;
    if (t->rank != ref->rank) return fail(s, "%s", "tensors must have the same rank");
    for (int k = 0; k < ref->rank; k++)
      if ((stack || k != d) && check_same(s, t->sizes[k], ref->sizes[k], "tensor sizes")) return -1;
    if (!stack) total = ADD(s, total, t->sizes[d]);
  }
  if (stack) {
    for (int k = 0, j = 0; k < rank; k++) sizes[k] = k == d ? C(s, a->n) : ref->sizes[j++];
  } else {
    memcpy(sizes, ref->sizes, sizeof *sizes * (size_t)rank);
    sizes[d] = total;
  }
  set_out(s, 0, dt, rank, sizes);
  return 0;
}

int shape_index_select(S *s) {
  Value *x = tensor(s, "self"), *idx = tensor(s, "index");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (idx->rank > 1 || dtype_is_float(idx->dtype)) return fail(s, "%s", "index must be a 0-d or 1-d integer tensor");
  int64_t k;   /* a 0-d self holds one value: PyTorch takes one index (the output stays 0-d) */
  if (!x->rank && idx->rank && !(expr_is_const(idx->sizes[0], &k) && k == 1)) return fail(s, "%s", "the index of a 0-d self must hold one value");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  if (x->rank) sizes[d] = idx->rank ? idx->sizes[0] : C(s, 1);
  set_out(s, 0, x->dtype, x->rank, sizes);
  return 0;
}

/* index no larger than `t` along every dim (but skip), as PyTorch's gather and scatter require */
static int index_within(S *s, const Value *idx, const Value *t, int64_t skip, const char *what) {
  for (int i = 0; i < idx->rank && i < t->rank; i++) {
    if (i == skip) continue;
    int64_t a, b;
    if (expr_is_const(idx->sizes[i], &a) && expr_is_const(t->sizes[i], &b) && a > b) {
      char buf[160];
      snprintf(buf, sizeof buf, "index is larger than %s at dim %d (%lld > %lld)", what, i, (long long)a, (long long)b);
      return fail(s, "%s", buf);
    }
  }
  return 0;
}

int shape_gather(S *s) {
  Value *x = tensor(s, "self"), *idx = tensor(s, "index");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (dtype_is_float(idx->dtype) || (idx->rank != x->rank && !(idx->rank <= 1 && x->rank <= 1))) return fail(s, "%s", "index must be an integer tensor of the input's rank");
  if (index_within(s, idx, x, d, "self")) return -1;
  like(s, 0, idx, x->dtype);
  return 0;
}

/* scatter, scatter_add: self's shape; index no larger than src anywhere, nor than self off dim */
int shape_scatter(S *s) {
  Value *x = tensor(s, "self"), *idx = tensor(s, "index"), *src = tensor(s, "src");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (dtype_is_float(idx->dtype) || idx->dtype == DT_BOOL || (idx->rank != x->rank && !(idx->rank <= 1 && x->rank <= 1)))
    return fail(s, "%s", "index must be an integer tensor of the input's rank");
  if (src && src->rank != idx->rank && !(idx->rank <= 1 && src->rank <= 1)) return fail(s, "%s", "src must have the index's rank");
  if (index_within(s, idx, x, d, "self") || (src && index_within(s, idx, src, -1, "src"))) return -1;
  const Arg *red = arg(s, "reduce");
  if (red && (red->k != AK_STR || (strcmp(red->u.s, "sum") && strcmp(red->u.s, "prod") && strcmp(red->u.s, "mean") && strcmp(red->u.s, "amax") && strcmp(red->u.s, "amin"))))
    return fail(s, "%s", "reduce must be sum, prod, mean, amax or amin");
  if (red && src->dtype != x->dtype) return fail(s, "%s", "src must have self's dtype");
  like(s, 0, x, x->dtype);
  return 0;
}

int shape_index(S *s) {
  Value *x = tensor(s, "self");
  const Arg *a = arg(s, "indices");
  if (a->k != AK_TENSORS || a->n > x->rank) return fail(s, "%s", "too many indices");
  const Expr *bsz[GG_MAX_RANK];
  int br = 0, first = -1, last = -1, count = 0;
  for (int i = 0; i < a->n; i++) {
    const Value *t = a->u.ts[i];
    if (!t) continue;
    if (t->dtype == DT_BOOL || t->dtype == DT_U8) return fail(s, "%s", "boolean mask indexing has a data-dependent size and is not supported");
    if (dtype_is_float(t->dtype)) return fail(s, "%s", "indices must be integer tensors");
    if (broadcast_into(s, bsz, &br, t)) return -1;
    if (first < 0) first = i;
    last = i;
    count++;
  }
  if (!count) { like(s, 0, x, x->dtype); return 0; }
  bool adjacent = last - first + 1 == count;
  const Expr *sizes[GG_MAX_RANK * 2];
  int r = 0;
  if (adjacent) {
    for (int d = 0; d < first; d++) sizes[r++] = x->sizes[d];
    for (int i = 0; i < br; i++) sizes[r++] = bsz[i];
    for (int d = last + 1; d < x->rank; d++) sizes[r++] = x->sizes[d];
  } else {
    for (int i = 0; i < br; i++) sizes[r++] = bsz[i];
    for (int d = 0; d < x->rank; d++) if (d >= a->n || !a->u.ts[d]) sizes[r++] = x->sizes[d];
  }
  if (r > GG_MAX_RANK) return fail(s, "%s", "too many dims");
  set_out(s, 0, x->dtype, r, sizes);
  return 0;
}

int shape_embedding(S *s) {
  Value *w = tensor(s, "weight"), *idx = tensor(s, "indices");
  if (w->rank != 2) return fail(s, "%s", "embedding weight must be a matrix");
  if (dtype_is_float(idx->dtype)) return fail(s, "%s", "indices must be integers");
  if (idx->rank + 1 > GG_MAX_RANK) return fail(s, "%s", "too many dims");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, idx->sizes, sizeof *sizes * (size_t)idx->rank);
  sizes[idx->rank] = w->sizes[1];
  set_out(s, 0, w->dtype, idx->rank + 1, sizes);
  return 0;
}

/* embedding_dense_backward: [num_weights, embedding dim] */
int shape_embedding_backward(S *s) {
  Value *g = tensor(s, "grad_output"), *idx = tensor(s, "indices");
  const Arg *nw = arg(s, "num_weights");
  if (dtype_is_float(idx->dtype) || idx->dtype == DT_BOOL) return fail(s, "%s", "indices must be integers");
  if (g->rank != idx->rank + 1) return fail(s, "%s", "grad_output must have the indices' shape and one more dim");
  for (int d = 0; d < idx->rank; d++)
    if (!expr_same(s->g, g->sizes[d], idx->sizes[d])) return fail(s, "%s", "grad_output must have the indices' shape and one more dim");
  if (nw->k != AK_INT || expr_hint(s->g, nw->u.i) < 0) return fail(s, "%s", "num_weights must be a size");
  const Expr *sizes[2] = {nw->u.i, g->sizes[g->rank - 1]};
  set_out(s, 0, g->dtype, 2, sizes);
  return 0;
}

/* native_layer_norm_backward: the input's gradient, then the weight's and bias's (normalized_shape) */
int shape_layer_norm_backward(S *s) {
  Value *g = tensor(s, "grad_out"), *x = tensor(s, "input"), *m = tensor(s, "mean"), *r = tensor(s, "rstd");
  const Arg *ns = arg(s, "normalized_shape");
  if (ns->k != AK_INTS || ns->n < 1 || ns->n > x->rank) return fail(s, "%s", "normalized_shape must list 1 to rank sizes");
  if (!dtype_is_float(x->dtype) || g->dtype != x->dtype || g->rank != x->rank || m->rank != x->rank || r->rank != x->rank)
    return fail(s, "%s", "grad_out, input, mean and rstd must be float tensors of the input's rank");
  for (int d = 0; d < x->rank; d++) {
    int64_t one;
    bool normed = d >= x->rank - ns->n;
    if (!expr_same(s->g, g->sizes[d], x->sizes[d]) || (normed && !expr_same(s->g, ns->u.is[d - (x->rank - ns->n)], x->sizes[d])))
      return fail(s, "%s", "grad_out and normalized_shape must match the input");
    for (int k = 0; k < 2; k++) {
      const Value *v = k ? r : m;
      if (normed ? !(expr_is_const(v->sizes[d], &one) && one == 1) : !expr_same(s->g, v->sizes[d], x->sizes[d]))
        return fail(s, "%s", "mean and rstd must have the input's shape with the normalized dims 1");
    }
  }
  like(s, 0, x, x->dtype);
  set_out(s, 1, x->dtype, ns->n, ns->u.is);
  set_out(s, 2, x->dtype, ns->n, ns->u.is);
  return 0;
}

/* max_pool2d_with_indices_backward: self's shape, from a gradient and indices of the pooled shape */
int shape_max_pool_backward(S *s) {
  Value *g = tensor(s, "grad_output"), *x = tensor(s, "self"), *ix = tensor(s, "indices");
  if ((x->rank != 3 && x->rank != 4) || g->rank != x->rank || ix->rank != x->rank || ix->dtype != DT_I64 || !dtype_is_float(g->dtype))
    return fail(s, "%s", "max_pool2d_with_indices_backward needs float [N,] C, H, W tensors and int64 indices of the pooled shape");
  for (int d = 0; d < g->rank; d++)
    if (!expr_same(s->g, g->sizes[d], ix->sizes[d]) || (d < g->rank - 2 && !expr_same(s->g, g->sizes[d], x->sizes[d])))
      return fail(s, "%s", "grad_output and indices must have the pooled shape");
  like(s, 0, x, g->dtype);
  return 0;
}

/* avg_pool2d_backward, _adaptive_avg_pool2d_backward: self's shape, from a float gradient of the
 * pooled shape (avg_pool2d's output size for its arguments) */
int shape_avg_pool_backward(S *s) {
  Value *g = tensor(s, "grad_output"), *x = tensor(s, "self");
  if ((x->rank != 3 && x->rank != 4) || g->rank != x->rank || !dtype_is_float(g->dtype) || g->dtype != x->dtype)
    return fail(s, "%s", "average pooling's gradient needs float [N,] C, H, W tensors of one dtype");
  for (int d = 0; d < g->rank - 2; d++)
    if (!expr_same(s->g, g->sizes[d], x->sizes[d])) return fail(s, "%s", "grad_output must have self's batch and channel sizes");
  if (arg(s, "kernel_size")) {
    int64_t k[2], st[2], pd[2];
    int n;
    if (spatial_list(s, "kernel_size", 2, k) || ints_arg(s, "stride", st, 2, &n)) return -1;
    if (n == 0) memcpy(st, k, sizeof k);
    else if (spatial_list(s, "stride", 2, st)) return -1;
    if (spatial_list(s, "padding", 2, pd)) return -1;
    for (int i = 0; i < 2; i++) {
      if (k[i] < 1 || st[i] < 1 || pd[i] < 0 || pd[i] * 2 > k[i]) return fail(s, "%s", "kernel and stride must be positive, padding at most half the kernel");
      int d = x->rank - 2 + i;
      if (!expr_same(s->g, g->sizes[d], pool_out(s, x->sizes[d], k[i], st[i], pd[i], 1, bool_arg(s, "ceil_mode"))))
        return fail(s, "%s", "grad_output must have the pooled shape");
    }
  }
  like(s, 0, x, x->dtype);
  return 0;
}

/* native_group_norm_backward: the input's shape, and one value per channel for weight and bias */
int shape_group_norm_backward(S *s) {
  Value *g = tensor(s, "grad_out"), *x = tensor(s, "input"), *m = tensor(s, "mean"), *r = tensor(s, "rstd"), *w = tensor(s, "weight");
  int64_t G, Cn;
  if (int_arg(s, "group", &G) || int_arg(s, "C", &Cn)) return -1;
  if (x->rank < 2 || !dtype_is_float(x->dtype) || g->dtype != x->dtype || g->rank != x->rank || m->rank != 2 || r->rank != 2)
    return fail(s, "%s", "grad_out and input must be float tensors of one shape, mean and rstd [N, group]");
  for (int d = 0; d < x->rank; d++)
    if (!expr_same(s->g, g->sizes[d], x->sizes[d])) return fail(s, "%s", "grad_out must have the input's shape");
  if (G < 1 || !expr_same(s->g, x->sizes[1], C(s, Cn)) || Cn % G) return fail(s, "%s", "C must be the input's channels, a multiple of group");
  for (int k = 0; k < 2; k++) {
    const Value *v = k ? r : m;
    if (!expr_same(s->g, v->sizes[0], x->sizes[0]) || !expr_same(s->g, v->sizes[1], C(s, G))) return fail(s, "%s", "mean and rstd must be [N, group]");
  }
  if (w && (w->rank != 1 || !expr_same(s->g, w->sizes[0], x->sizes[1]))) return fail(s, "%s", "weight must have one value per channel");
  like(s, 0, x, x->dtype);
  const Expr *c1[1] = {x->sizes[1]};
  set_out(s, 1, x->dtype, 1, c1);
  set_out(s, 2, x->dtype, 1, c1);
  return 0;
}

/* masked_scatter: self's shape; the mask a bool that broadcasts to it */
int shape_masked_scatter(S *s) {
  Value *x = tensor(s, "self"), *m = tensor(s, "mask"), *src = tensor(s, "source");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  int rank = x->rank;
  if (m->dtype != DT_BOOL) return fail(s, "%s", "the mask must be bool");
  if (broadcast_into(s, sizes, &rank, m)) return -1;
  if (rank != x->rank) return fail(s, "%s", "the mask does not broadcast to self");
  if (src->dtype != x->dtype) return fail(s, "%s", "source must have self's dtype");
  like(s, 0, x, x->dtype);
  return 0;
}

/* select_scatter, slice_scatter: self's shape; src must have the shape of the view it replaces */
int shape_view_scatter(S *s) {
  Value *x = tensor(s, "self"), *src = tensor(s, "src");
  int64_t d;
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (x->rank == 0) return fail(s, "%s", "a view scatter into a 0-d tensor");
  const Expr *want[GG_MAX_RANK];
  int r = x->rank;
  memcpy(want, x->sizes, sizeof *want * (size_t)r);
  if (!strcmp(s->n->op->name, "select_scatter")) {
    int64_t iv, sz;
    if (expr_is_const(arg(s, "index")->u.i, &iv) && expr_is_const(x->sizes[d], &sz) && (iv < -sz || iv >= sz)) return fail(s, "%s", "index out of range");
    memmove(&want[d], &want[d + 1], sizeof *want * (size_t)(r - d - 1));
    r--;
  } else {
    int64_t step;
    if (int_arg(s, "step", &step)) return -1;
    if (step < 1) return fail(s, "%s", "slice step must be positive");
    const Expr *st = slice_bound(s, arg(s, "start"), x->sizes[d], 0), *en = slice_bound(s, arg(s, "end"), x->sizes[d], 1);
    const Expr *len = expr_bin(s->a, E_MAX, C(s, 0), ADD(s, en, MUL(s, C(s, -1), st)));
    want[d] = step == 1 ? len : DIV(s, ADD(s, len, C(s, step - 1)), C(s, step));
  }
  bool same = src->rank == r;
  for (int i = 0; same && i < r; i++) same = expr_same(s->g, src->sizes[i], want[i]);
  if (!same) return fail(s, "%s", "src does not have the shape of the view it replaces");
  like(s, 0, x, x->dtype);
  return 0;
}

int shape_diff(S *s) {
  Value *x = tensor(s, "self");
  int64_t n, d;
  if (int_arg(s, "n", &n) || int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (x->rank == 0) return fail(s, "%s", "diff needs rank >= 1");
  if (n < 0) return fail(s, "%s", "n must be non-negative");
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  const Expr *len = x->sizes[d];
  Value *pre = tensor(s, "prepend"), *app = tensor(s, "append");
  if ((pre && pre->rank != x->rank) || (app && app->rank != x->rank)) return fail(s, "%s", "prepend and append must have self's rank");
  /* differences beyond the length give nothing: n is bounded by it (each is a pass over the data) */
  if (n > expr_hint(s->g, ADD(s, ADD(s, len, pre ? pre->sizes[d] : C(s, 0)), app ? app->sizes[d] : C(s, 0))) + 1)
    return fail(s, "%s", "n exceeds the length along dim");
  if (pre) len = ADD(s, len, pre->sizes[d]);
  if (app) len = ADD(s, len, app->sizes[d]);
  sizes[d] = expr_bin(s->a, E_MAX, C(s, 0), ADD(s, len, C(s, -n)));
  set_out(s, 0, x->dtype, x->rank, sizes);
  return 0;
}

int shape_pad(S *s) {
  Value *x = tensor(s, "self");
  const Arg *p = arg(s, "pad") ? arg(s, "pad") : arg(s, "padding");
  if (p->k != AK_INTS || p->n % 2 || p->n / 2 > x->rank) return fail(s, "%s", "pad needs an even number of values, two per padded dim");
  int mode = pad_mode(s->n);
  if (mode < 0) return fail(s, "%s", "unknown padding mode (constant, reflect, replicate or circular)");
  for (int i = 0; mode && i < p->n / 2; i++) {   /* PyTorch's own checks */
    int64_t lo, hi, L;
    const Expr *len = x->sizes[x->rank - 1 - i];
    if (!expr_is_const(p->u.is[2 * i], &lo) || !expr_is_const(p->u.is[2 * i + 1], &hi) || !expr_is_const(len, &L)) continue;
    if (L == 0) return fail(s, "%s", "cannot pad an empty dim by reflecting, replicating or wrapping it");
    if (mode == 1 && (lo >= L || hi >= L)) return fail(s, "%s", "reflect padding must be smaller than the dim it pads");
    if (mode == 3 && (lo > L || hi > L)) return fail(s, "%s", "circular padding must be at most the dim it pads");
  }
  const Expr *sizes[GG_MAX_RANK];
  memcpy(sizes, x->sizes, sizeof *sizes * (size_t)x->rank);
  for (int i = 0; i < p->n / 2; i++) {
    int d = x->rank - 1 - i;
    sizes[d] = ADD(s, ADD(s, sizes[d], p->u.is[2 * i]), p->u.is[2 * i + 1]);
    if (expr_hint(s->g, sizes[d]) < 0) return fail(s, "%s", "negative padding removes more than the dim holds");
  }
  const Arg *val = arg(s, "value");
  if (val && val->k == AK_FLOAT && !dtype_is_float(x->dtype) && x->dtype != DT_BOOL && !gg_f64_fits_i64(val->u.f))
    return fail(s, "%s", "the pad value cannot be converted to the integer dtype (NaN, infinite or out of range)");
  set_out(s, 0, x->dtype, x->rank, sizes);
  return 0;
}

int shape_broadcast_tensors(S *s) {
  const Arg *a = arg(s, "tensors");
  const Expr *sizes[GG_MAX_RANK];
  int r = 0;
  for (int i = 0; i < a->n; i++) if (broadcast_into(s, sizes, &r, a->u.ts[i])) return -1;
  for (int i = 0; i < a->n; i++) set_out(s, i, a->u.ts[i]->dtype, r, sizes);
  return 0;
}

/* ---------------------------------------------------------------- creation and conversion */

static double num_arg(const Arg *a) {
  int64_t v;
  if (a->k == AK_FLOAT) return a->u.f;
  if (a->k == AK_BOOL) return a->u.b;
  if (a->k == AK_INT && expr_is_const(a->u.i, &v)) return (double)v;
  return NAN;
}

static DType given_dtype(S *s, DType dflt) {
  const Arg *a = arg(s, "dtype");
  return a && a->k == AK_DTYPE ? (DType)a->u.code : dflt;
}

int shape_arange(S *s) {
  const Arg *st = arg(s, "start"), *en = arg(s, "end"), *sp = arg(s, "step");
  bool fl = en->k == AK_FLOAT || (st && st->k == AK_FLOAT) || (sp && sp->k == AK_FLOAT);
  DType dt = given_dtype(s, fl ? DT_F32 : DT_I64);
  const Expr *len;
  double a = st ? num_arg(st) : 0, b = num_arg(en), c = sp ? num_arg(sp) : 1;
  if (en->k == AK_INT && !expr_is_const(en->u.i, NULL) && a == 0 && c == 1) len = en->u.i;  /* arange(s0) */
  else {
    if (isnan(a) || isnan(b) || isnan(c) || c == 0) return fail(s, "%s", "arange needs static, finite bounds and a non-zero step");
    double n = ceil((b - a) / c);
    if (n < 0) n = 0;
    if (n > (double)GG_MAX_ELEMS) return fail(s, "%s", "arange too long");
    len = C(s, (int64_t)n);
  }
  set_out(s, 0, dt, 1, &len);
  return 0;
}

int shape_full(S *s) {
  const char *name = s->n->op->name;
  Value *self = tensor(s, "self");
  const Arg *fill = arg(s, "fill_value") ? arg(s, "fill_value") : arg(s, "s") ? arg(s, "s") : arg(s, "value");
  DType dflt = DT_F32;
  if (self) dflt = self->dtype;
  else if (fill && strcmp(name, "scalar_tensor")) dflt = fill->k == AK_INT ? DT_I64 : fill->k == AK_BOOL ? DT_BOOL : DT_F32;
  DType dt = given_dtype(s, dflt);
  if (fill && fill->k == AK_FLOAT && !dtype_is_float(dt) && dt != DT_BOOL && !gg_f64_fits_i64(fill->u.f))
    return fail(s, "%s", "the fill value cannot be converted to the integer dtype (NaN, infinite or out of range)");
  const Arg *sz = arg(s, "size");
  if (sz) {
    if (sz->k != AK_INTS || sz->n > GG_MAX_RANK) return fail(s, "%s", "size must be a list of at most 16 integers");
    for (int i = 0; i < sz->n; i++) { int64_t v; if (expr_is_const(sz->u.is[i], &v) && v < 0) return fail(s, "%s", "negative size"); }
    set_out(s, 0, dt, sz->n, sz->u.is);
  } else if (self) like(s, 0, self, dt);
  else set_out(s, 0, dt, 0, NULL);
  return 0;
}

/* rand, randn and their _like forms: full's shape and dtype, which must be a float dtype */
int shape_rand(S *s) {
  if (shape_full(s)) return -1;
  if (!dtype_is_float(s->out[0].dtype)) return fail(s, "%s", "random numbers need a float dtype");
  return 0;
}

/* randperm(n): [n], int64 unless dtype says otherwise */
int shape_randperm(S *s) {
  int64_t n;
  if (int_arg(s, "n", &n)) return -1;
  if (n < 0 || n > GG_MAX_ELEMS) return fail(s, "%s", "n must be >= 0");
  DType dt = given_dtype(s, DT_I64);
  if (dt == DT_BOOL) return fail(s, "%s", "randperm needs a numeric dtype");
  const Expr *sz[1] = {C(s, n)};
  set_out(s, 0, dt, 1, sz);
  return 0;
}

int shape_repeat(S *s) {
  Value *x = tensor(s, "self");
  const Arg *rp = arg(s, "repeats");
  if (rp->k != AK_INTS || rp->n < x->rank || rp->n > GG_MAX_RANK) return fail(s, "%s", "repeats must have at least the input's rank");
  const Expr *sizes[GG_MAX_RANK];
  int lead = rp->n - x->rank;
  for (int i = 0; i < rp->n; i++) sizes[i] = i < lead ? rp->u.is[i] : MUL(s, x->sizes[i - lead], rp->u.is[i]);
  set_out(s, 0, x->dtype, rp->n, sizes);
  return 0;
}

int shape_eye(S *s) {
  const Arg *n = arg(s, "n"), *m = arg(s, "m");
  const Expr *sizes[2] = {n->u.i, m ? m->u.i : n->u.i};
  set_out(s, 0, given_dtype(s, DT_F32), 2, sizes);
  return 0;
}

int shape_linspace(S *s) {
  int64_t steps;
  if (int_arg(s, "steps", &steps)) return -1;
  if (steps < 0) return fail(s, "%s", "steps must be non-negative");
  const Expr *len = C(s, steps);
  set_out(s, 0, given_dtype(s, DT_F32), 1, &len);
  return 0;
}

int shape_sym_arith(S *s) {
  static const struct { const char *name; ExprKind k; } ops[] = {
    {"_operator.add", E_ADD}, {"_operator.mul", E_MUL}, {"_operator.floordiv", E_FLOORDIV}, {"_operator.mod", E_MOD}, {"_operator.sub", E_ADD}};
  const Arg *a = arg(s, "a"), *b = arg(s, "b");
  if (a->k != AK_INT || b->k != AK_INT) return fail(s, "%s", "symbolic arithmetic needs two integers");
  const Expr *rhs = !strcmp(s->n->op->name, "_operator.sub") ? MUL(s, C(s, -1), b->u.i) : b->u.i;
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (!strcmp(s->n->op->name, ops[i].name)) {
      s->out[0].is_sym = true;
      s->out[0].sym = expr_bin(s->a, ops[i].k, a->u.i, rhs);
      s->nouts = 1;
      return 0;
    }
  return fail(s, "%s", "unknown symbolic operator");
}

int shape_to(S *s) {
  Value *x = tensor(s, "self"), *o = tensor(s, "other");
  like(s, 0, x, o ? o->dtype : given_dtype(s, x->dtype));
  return 0;
}

int shape_assert(S *s) {
  Value *x = tensor(s, "a");
  DType dt = given_dtype(s, x->dtype);
  if (dt != x->dtype) return fail(s, "tensor metadata assertion fails: dtype %s", dtype_name(x->dtype));
  s->nouts = 0;
  return 0;
}

int shape_sym_size(S *s) {
  Value *x = tensor(s, "self");
  int64_t d;
  if (!arg(s, "dim")) {   /* sym_numel */
    const Expr *n = C(s, 1);
    for (int i = 0; i < x->rank; i++) n = MUL(s, n, x->sizes[i]);
    s->out[0].is_sym = true;
    s->out[0].sym = n;
    s->nouts = 1;
    return 0;
  }
  if (int_arg(s, "dim", &d) || norm_dim(s, d, x->rank, &d)) return -1;
  if (x->rank == 0) return fail(s, "%s", "sym_size of a 0-d tensor");
  s->out[0].is_sym = true;
  s->out[0].sym = x->sizes[d];
  s->nouts = 1;
  return 0;
}

/* Arguments that name dims of the first tensor argument (of the first tensor of a Tensor[]). */
static bool is_dim_arg(const char *name) {
  static const char *const dims[] = {"dim", "dims", "dim0", "dim1", "dim2", "start_dim", "end_dim", "source", "destination"};
  for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
    if (!strcmp(name, dims[i])) return true;
  return false;
}

/* Every dim argument in range of its operand's rank, checked once here before any rule (or the
 * interpreter and emitters after it) indexes a size array with it. unsqueeze and stack name a dim
 * of the result, one more. Tensor arguments must have shapes by now. */
static int check_dims(S *s) {
  const OpDef *op = s->n->op;
  int rank = -1;
  for (int i = 0; i < op->nargs && rank < 0; i++) {
    const Arg *a = &s->n->args[i];
    if (a->k == AK_TENSOR) rank = a->u.t->rank;
    else if (a->k == AK_TENSORS)
      for (int j = 0; j < a->n; j++)
        if (a->u.ts[j] && a->u.ts[j]->rank > rank) rank = a->u.ts[j]->rank;
  }
  FOR_TENSOR_ARGS(s->n, v, if (!v->sizes && v->rank) return fail(s, "operand '%s' has no shape", v->name));
  if (rank < 0) return 0;
  if (!strcmp(op->name, "unsqueeze") || !strcmp(op->name, "stack")) rank++;
  for (int i = 0; i < op->nargs; i++) {
    const Arg *a = &s->n->args[i];
    if (!is_dim_arg(op->args[i].name) || (a->k != AK_INT && a->k != AK_INTS)) continue;
    int cnt = a->k == AK_INT ? 1 : a->n;
    if (cnt > GG_MAX_RANK) return fail(s, "argument '%s' lists more dims than a tensor has", op->args[i].name);
    for (int j = 0; j < cnt; j++) {
      int64_t d, r = rank ? rank : 1;   /* a 0-d tensor accepts dim 0 and -1 */
      if (!expr_is_const(a->k == AK_INT ? a->u.i : a->u.is[j], &d)) return fail(s, "argument '%s' must not be symbolic", op->args[i].name);
      if (d < -r || d >= r) {
        char buf[96];
        snprintf(buf, sizeof buf, "%lld (argument '%s', rank %d)", (long long)d, op->args[i].name, rank);
        return fail(s, "dim %s out of range", buf);
      }
    }
  }
  return 0;
}

int shape_infer(Graph *g, Node *n, ShapeCtx *sc) {
  memset(sc, 0, sizeof *sc);
  sc->g = g;
  sc->n = n;
  sc->a = g->ctx->arena;
  if (check_dims(sc)) return -1;
  return n->op->shape(sc);
}
