/* interp.c: the reference interpreter, the oracle for every later stage.
 * Requires: a verified graph. Guarantees: each node is executed as PyTorch defines its op, on strided
 * tensors with real views (so in-place ops through views behave as in PyTorch); floating-point math is
 * done in float64 and rounded to the output dtype once per op, integer math in int64 with wrap-around.
 * It is written to be obviously right, not fast: kernels read their operands into contiguous float64
 * or int64 arrays, compute, and write back. Bad indices and the like fail with a message, never a trap. */
#include "gg.h"
#include "scalar.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef EvalCtx E;

/* ---------------------------------------------------------------- tensors */

int64_t tensor_numel(const Tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->sizes[d];
  return n;
}

bool tensor_is_contiguous(const Tensor *t) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != s) return false;
    s *= t->sizes[d];
  }
  return true;
}

static void set_contiguous_strides(Tensor *t) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) { t->strides[d] = s; s *= t->sizes[d] ? t->sizes[d] : 1; }
}

static Storage *storage_new(Interp *I, size_t nbytes) {
  Storage *st = calloc(1, sizeof *st);
  st->data = calloc(1, nbytes ? nbytes : 1);
  if (!st || !st->data) { fputs("gcc-graph: out of memory\n", stderr); exit(1); }
  st->nbytes = nbytes;
  st->owned = true;
  if (I->nstorages == I->cap_storages) {
    I->cap_storages = I->cap_storages ? I->cap_storages * 2 : 64;
    I->storages = realloc(I->storages, sizeof *I->storages * (size_t)I->cap_storages);
    if (!I->storages) { fputs("gcc-graph: out of memory\n", stderr); exit(1); }
  }
  I->storages[I->nstorages++] = st;
  return st;
}

Tensor *tensor_new(Interp *I, DType dt, int rank, const int64_t *sizes) {
  Tensor *t = arena_alloc(I->c->arena, sizeof *t);
  t->dtype = dt;
  t->rank = rank;
  int64_t n = 1;
  for (int d = 0; d < rank; d++) {
    if (sizes[d] < 0 || __builtin_mul_overflow(n, sizes[d], &n) || n > GG_MAX_ELEMS) {
      gg_error(I->c, "tensor of %d dims too large or with a negative size", rank);
      return NULL;
    }
    t->sizes[d] = sizes[d];
  }
  set_contiguous_strides(t);
  t->st = storage_new(I, (size_t)n * (size_t)dtype_info(dt)->size);
  return t;
}

static Tensor *view_of(Interp *I, const Tensor *t) {
  Tensor *v = arena_alloc(I->c->arena, sizeof *v);
  *v = *t;
  return v;
}

Tensor *tensor_from_st(Interp *I, const STensor *s) {
  Tensor *t = arena_alloc(I->c->arena, sizeof *t);
  t->dtype = s->dtype;
  t->rank = s->rank;
  memcpy(t->sizes, s->sizes, sizeof t->sizes);
  set_contiguous_strides(t);
  Storage *st = arena_alloc(I->c->arena, sizeof *st);
  st->data = (uint8_t *)s->data;
  st->nbytes = s->nbytes;
  t->st = st;
  return t;
}

static Tensor *tensor_from_weight(Interp *I, const Weight *w, bool copy) {
  Tensor *t = arena_alloc(I->c->arena, sizeof *t);
  t->dtype = w->dtype;
  t->rank = w->rank;
  memcpy(t->sizes, w->sizes, sizeof t->sizes);
  memcpy(t->strides, w->strides, sizeof t->strides);
  t->offset = w->offset;
  Storage *st;
  if (copy) {   /* buffers may be mutated by the run: never through the mapping */
    st = storage_new(I, w->nbytes);
    memcpy(st->data, w->data, w->nbytes);
  } else {
    st = arena_alloc(I->c->arena, sizeof *st);
    st->data = (uint8_t *)w->data;
    st->nbytes = w->nbytes;
  }
  t->st = st;
  return t;
}

/* Byte offset of the element with linear (row-major) index i. */
static int64_t elem_offset(const Tensor *t, int64_t i) {
  int64_t off = t->offset;
  for (int d = t->rank - 1; d >= 0; d--) {
    int64_t sz = t->sizes[d];
    off += (i % sz) * t->strides[d];
    i /= sz;
  }
  return off;
}

static uint8_t *elem_ptr(const Tensor *t, int64_t i) {
  return t->st->data + elem_offset(t, i) * dtype_info(t->dtype)->size;
}

/* Contiguous float64 / int64 copies of a tensor in its logical order, and the way back. */
static double *read_f64(Interp *I, const Tensor *t) {
  int64_t n = tensor_numel(t);
  double *r = arena_array(I->c->arena, (size_t)n + 1, sizeof *r);
  for (int64_t i = 0; i < n; i++) r[i] = dtype_load_f64(t->dtype, elem_ptr(t, i));
  return r;
}

static int64_t *read_i64(Interp *I, const Tensor *t) {
  int64_t n = tensor_numel(t);
  int64_t *r = arena_array(I->c->arena, (size_t)n + 1, sizeof *r);
  for (int64_t i = 0; i < n; i++) r[i] = dtype_load_i64(t->dtype, elem_ptr(t, i));
  return r;
}

static void write_f64(Tensor *t, const double *v) {
  int64_t n = tensor_numel(t);
  for (int64_t i = 0; i < n; i++) dtype_store_f64(t->dtype, elem_ptr(t, i), v[i]);
}

static void write_i64(Tensor *t, const int64_t *v) {
  int64_t n = tensor_numel(t);
  for (int64_t i = 0; i < n; i++) dtype_store_i64(t->dtype, elem_ptr(t, i), v[i]);
}

/* Copy src into dst element by element (same shape), converting dtype exactly. */
static void copy_into(Tensor *dst, const Tensor *src) {
  int64_t n = tensor_numel(dst);
  bool ints = !dtype_is_float(dst->dtype) && !dtype_is_float(src->dtype);
  bool raw = dst->dtype == src->dtype;
  int es = dtype_info(dst->dtype)->size;
  for (int64_t i = 0; i < n; i++) {
    uint8_t *d = elem_ptr(dst, i);
    const uint8_t *s = elem_ptr(src, i);
    if (raw) memcpy(d, s, (size_t)es);
    else if (ints) dtype_store_i64(dst->dtype, d, dtype_load_i64(src->dtype, s));
    else dtype_store_f64(dst->dtype, d, dtype_load_f64(src->dtype, s));
  }
}

void *tensor_contiguous_bytes(Interp *I, Tensor *t, size_t *nbytes) {
  *nbytes = (size_t)tensor_numel(t) * (size_t)dtype_info(t->dtype)->size;
  if (tensor_is_contiguous(t)) return t->st->data + t->offset * dtype_info(t->dtype)->size;
  Tensor *c = tensor_new(I, t->dtype, t->rank, t->sizes);
  copy_into(c, t);
  return c->st->data;
}

/* A view of t broadcast to sizes (stride 0 on expanded dims). */
static Tensor *expand_to(Interp *I, const Tensor *t, int rank, const int64_t *sizes) {
  Tensor *v = view_of(I, t);
  v->rank = rank;
  for (int d = rank - 1, s = t->rank - 1; d >= 0; d--, s--) {
    v->sizes[d] = sizes[d];
    v->strides[d] = s >= 0 && t->sizes[s] == sizes[d] ? t->strides[s] : 0;
  }
  return v;
}

static void permute_view(Tensor *t, const int *perm) {
  int64_t sz[GG_MAX_RANK], st[GG_MAX_RANK];
  for (int d = 0; d < t->rank; d++) { sz[d] = t->sizes[perm[d]]; st[d] = t->strides[perm[d]]; }
  memcpy(t->sizes, sz, sizeof sz);
  memcpy(t->strides, st, sizeof st);
}

/* A view with dim moved to the end: rows of the result run along dim. */
static Tensor *dim_last(Interp *I, const Tensor *t, int dim) {
  Tensor *v = view_of(I, t);
  int perm[GG_MAX_RANK], k = 0;
  for (int d = 0; d < t->rank; d++) if (d != dim) perm[k++] = d;
  perm[k] = dim;
  if (t->rank) permute_view(v, perm);
  return v;
}

/* ---------------------------------------------------------------- arguments */

static int fail(E *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(E *e, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  Ctx *c = e->I->c;
  return gg_error(c, "node %s (%s): %s", gg_quote(c, e->n->name), gg_quote(c, e->n->target), msg);
}

static RArg *A(E *e, const char *name) {
  int i = ops_arg_index(e->n->op, name);
  return i < 0 ? NULL : &e->args[i];
}

static Tensor *T(E *e, const char *name) {
  RArg *a = A(e, name);
  return a && a->k == AK_TENSOR ? a->t : NULL;
}

static int64_t I64(E *e, const char *name, int64_t dflt) {
  RArg *a = A(e, name);
  return a && a->k == AK_INT ? a->i : dflt;
}

static double F64(E *e, const char *name, double dflt) {
  RArg *a = A(e, name);
  if (!a) return dflt;
  if (a->k == AK_FLOAT) return a->f;
  if (a->k == AK_INT) return (double)a->i;
  if (a->k == AK_BOOL) return a->b;
  return dflt;
}

static bool B(E *e, const char *name) {
  RArg *a = A(e, name);
  return a && a->k == AK_BOOL && a->b;
}


static int wrap_dim(E *e, int64_t d, int rank, int *out) {
  int r = rank ? rank : 1;
  *out = 0;
  if (d < -r || d >= r) return fail(e, "dim %lld out of range for rank %d", (long long)d, rank);
  *out = (int)(d < 0 ? d + r : d);
  return 0;
}

/* The tensor an op returns into: allocated by the interpreter, or for view ops by the op. */
static Tensor *out0(E *e) { return e->outs[0]; }


/* ---------------------------------------------------------------- pointwise */

typedef double (*PwF)(const double *);
typedef int64_t (*PwI)(const int64_t *);

static double round_to(DType dt, double v) {
  uint8_t buf[8];
  dtype_store_f64(dt, buf, v);
  return dtype_load_f64(dt, buf);
}


/* Apply f (float64) or fi (int64) to the numeric operands, broadcast to the output. A Scalar operand
 * is first cast to the computation dtype, as PyTorch casts wrapped numbers. */
static int pointwise(E *e, Tensor *out) {
  const Node *n = e->n;
  PwPlan plan;
  if (pw_plan(e->I->c, n, &plan)) return -1;
  PwF f = plan.f;
  PwI fi = plan.fi;
  bool use_float = plan.use_float;
  DType comp = dtype_is_float(plan.comp) ? plan.comp : DT_F64;
  int64_t numel = tensor_numel(out);
  enum { MAXOP = 8 };
  double fv[MAXOP], *fa[MAXOP] = {0};
  int64_t iv[MAXOP], *ia[MAXOP] = {0};
  int nops = 0;
  for (int i = 0; i < n->op->nargs && nops < MAXOP; i++) {
    ArgType ty = n->op->args[i].type;
    if (ty != T_TENSOR && ty != T_SCALAR) continue;
    RArg *a = &e->args[i];
    if (a->k == AK_TENSOR) {
      Tensor *x = expand_to(e->I, a->t, out->rank, out->sizes);
      if (use_float) fa[nops] = read_f64(e->I, x);
      else ia[nops] = read_i64(e->I, x);
    } else if (a->k == AK_NONE) {   /* clamp's missing bound: no bound */
      fv[nops] = NAN;
      iv[nops] = nops == 1 ? INT64_MIN : INT64_MAX;
    } else {
      double d = a->k == AK_FLOAT ? a->f : a->k == AK_BOOL ? a->b : (double)a->i;
      fv[nops] = round_to(comp, d);
      iv[nops] = a->k == AK_INT ? a->i : gg_f64_to_i64(d);   /* used only when computing in integers */
    }
    nops++;
  }
  if (use_float) {
    double *r = arena_array(e->I->c->arena, (size_t)numel + 1, sizeof *r);
    double x[MAXOP];
    for (int64_t k = 0; k < numel; k++) {
      for (int j = 0; j < nops; j++) x[j] = fa[j] ? fa[j][k] : fv[j];
      r[k] = f(x);
    }
    write_f64(out, r);
  } else {
    int64_t *r = arena_array(e->I->c->arena, (size_t)numel + 1, sizeof *r);
    int64_t x[MAXOP];
    for (int64_t k = 0; k < numel; k++) {
      for (int j = 0; j < nops; j++) x[j] = ia[j] ? ia[j][k] : iv[j];
      r[k] = fi(x);
    }
    write_i64(out, r);
  }
  return 0;
}

int eval_pointwise(E *e) { return pointwise(e, out0(e)); }


int eval_glu(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *out = out0(e);
  int d;
  if (wrap_dim(e, I64(e, "dim", -1), x->rank, &d)) return -1;
  Tensor *a = view_of(I, x), *b = view_of(I, x);
  a->sizes[d] = b->sizes[d] = x->sizes[d] / 2;
  b->offset += a->sizes[d] * x->strides[d];
  double *av = read_f64(I, a), *bv = read_f64(I, b);
  for (int64_t i = 0; i < tensor_numel(out); i++) av[i] = av[i] / (1 + exp(-bv[i]));
  write_f64(out, av);
  return 0;
}

int eval_gelu(E *e) { return pointwise(e, out0(e)); }

/* Random ops: scalar.h's generator, seeded as compiled models are (GCC_GRAPH_SEED), each execution
 * of a random op the process's next draw; the same bits as a compiled model's first runs. */
static uint64_t rng_seed(void) {
  const char *s = getenv("GCC_GRAPH_SEED");
  return s && *s ? strtoull(s, NULL, 0) : 0;
}
static uint64_t rng_draw(void) {
  static uint64_t n;
  return __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED);
}
static int rand_bits(DType dt) { return gg_rand_bits(8 * dtype_info(dt)->size, dt == DT_BF16); }

/* rand, randn, rand_like, randn_like: element i of the output (in its logical order) */
int eval_rand(E *e) {
  Tensor *out = out0(e);
  bool normal = strstr(e->n->op->name, "randn") != NULL;
  uint64_t seed = rng_seed(), draw = rng_draw();
  int64_t n = tensor_numel(out);
  for (int64_t i = 0; i < n; i++)
    dtype_store_f64(out->dtype, elem_ptr(out, i), normal ? gg_rand_n01(seed, draw, (uint64_t)i) : gg_rand_u01(seed, draw, (uint64_t)i, rand_bits(out->dtype)));
  return 0;
}

/* randperm: 0 .. n-1 ordered by uniform keys (53 bits; a stable sort), decompose.c's rule exactly */
int eval_randperm(E *e) {
  Tensor *out = out0(e);
  int64_t n = tensor_numel(out);
  uint64_t seed = rng_seed(), draw = rng_draw();
  double *key = arena_array(e->I->c->arena, (size_t)n + 1, sizeof *key);
  int64_t *ix = arena_array(e->I->c->arena, (size_t)n + 1, sizeof *ix), *tmp = arena_array(e->I->c->arena, (size_t)n + 1, sizeof *tmp);
  for (int64_t i = 0; i < n; i++) { key[i] = gg_rand_u01(seed, draw, (uint64_t)i, 53); ix[i] = i; }
  gg_sort_f64(key, ix, tmp, n, 0);
  write_i64(out, ix);
  return 0;
}

/* dropout: the identity in evaluation; in training each element kept with probability 1 - p (a
 * uniform draw >= p) and scaled by 1 / (1 - p), the mask native_dropout's second output */
int eval_dropout(E *e) {
  RArg *tr = A(e, "train");
  double p = F64(e, "p", 0);
  Tensor *x = T(e, "input") ? T(e, "input") : T(e, "self");
  if (tr && tr->k == AK_BOOL && tr->b && p > 0) {
    Tensor *out = out0(e);
    int64_t n = tensor_numel(out);
    uint64_t seed = rng_seed(), draw = rng_draw();
    for (int64_t i = 0; i < n; i++) {
      bool keep = p < 1 && gg_rand_u01(seed, draw, (uint64_t)i, rand_bits(x->dtype)) >= p;
      dtype_store_f64(out->dtype, elem_ptr(out, i), keep ? dtype_load_f64(x->dtype, elem_ptr(x, i)) * (1 / (1 - p)) : 0);
      if (e->n->nouts == 2) dtype_store_i64(DT_BOOL, elem_ptr(e->outs[1], i), keep);
    }
    return 0;
  }
  copy_into(out0(e), x);
  if (e->n->nouts == 2) {
    int64_t n = tensor_numel(e->outs[1]);
    for (int64_t i = 0; i < n; i++) e->outs[1]->st->data[i] = 1;
  }
  return 0;
}


int eval_div_mode(E *e) { return pointwise(e, out0(e)); }

static void copy_elem(Tensor *dst, int64_t di, const Tensor *src, int64_t si);
static void unravel(int64_t i, int rank, const int64_t *sizes, int64_t *idx);
static int64_t ravel(int rank, const int64_t *sizes, const int64_t *idx);

int eval_masked_scatter(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e), *src = T(e, "source");
  Tensor *m = expand_to(e->I, T(e, "mask"), out->rank, out->sizes);
  copy_into(out, x);
  int64_t n = tensor_numel(out), k = 0, ns = tensor_numel(src);
  for (int64_t i = 0; i < n; i++) {
    if (!dtype_load_i64(m->dtype, elem_ptr(m, i))) continue;
    if (k >= ns) return fail(e, "%s", "source has fewer elements than the mask has true values");
    copy_elem(out, i, src, k++);
  }
  return 0;
}

int eval_embedding_backward(E *e) {
  Tensor *g = T(e, "grad_output"), *ix = T(e, "indices"), *out = out0(e);
  int64_t pad = I64(e, "padding_idx", -1), rows = out->sizes[0], D = out->sizes[1], n = tensor_numel(ix);
  if (B(e, "scale_grad_by_freq")) return fail(e, "%s", "scale_grad_by_freq is not supported");
  int64_t *iv = read_i64(e->I, ix);
  double *gv = read_f64(e->I, g), *r = arena_array(e->I->c->arena, (size_t)(rows * D) + 1, sizeof *r);
  for (int64_t i = 0; i < n; i++) {
    int64_t q = iv[i] < 0 ? iv[i] + rows : iv[i];
    if (q < 0 || q >= rows) return fail(e, "%s", "index out of range");
    if (iv[i] == pad) continue;
    for (int64_t j = 0; j < D; j++) r[q * D + j] += gv[i * D + j];
  }
  write_f64(out, r);
  return 0;
}

int eval_max_pool_backward(E *e) {
  Tensor *g = T(e, "grad_output"), *ix = T(e, "indices"), *out = out0(e);
  int64_t plane = out->sizes[out->rank - 2] * out->sizes[out->rank - 1], n = tensor_numel(out), pn = tensor_numel(g);
  int64_t gplane = g->sizes[g->rank - 2] * g->sizes[g->rank - 1];
  int64_t *iv = read_i64(e->I, ix);
  double *gv = read_f64(e->I, g), *r = arena_array(e->I->c->arena, (size_t)n + 1, sizeof *r);
  for (int64_t i = 0; i < pn; i++) {
    int64_t p = i / gplane, q = iv[i];
    if (q < 0 || q >= plane) return fail(e, "%s", "index out of range");
    r[p * plane + q] += gv[i];
  }
  write_f64(out, r);
  return 0;
}

/* native_layer_norm_backward: decompose.c's formulas, in double */
int eval_layer_norm_backward(E *e) {
  Interp *I = e->I;
  Tensor *g = T(e, "grad_out"), *x = T(e, "input"), *w = T(e, "weight");
  Tensor *m = expand_to(I, T(e, "mean"), x->rank, x->sizes), *rs = expand_to(I, T(e, "rstd"), x->rank, x->sizes);
  int64_t n = tensor_numel(x), L = tensor_numel(e->outs[1]), rows = L ? n / L : 0;
  double *gv = read_f64(I, g), *xv = read_f64(I, x), *mv = read_f64(I, m), *rv = read_f64(I, rs), *wv = w ? read_f64(I, w) : NULL;
  double *dx = arena_array(I->c->arena, (size_t)n + 1, sizeof *dx), *dw = arena_array(I->c->arena, (size_t)L + 1, sizeof *dw),
         *db = arena_array(I->c->arena, (size_t)L + 1, sizeof *db);
  for (int64_t r = 0; r < rows; r++) {
    double a = 0, b = 0;
    for (int64_t j = 0; j < L; j++) {
      int64_t i = r * L + j;
      double xh = (xv[i] - mv[i]) * rv[i], gh = gv[i] * (wv ? wv[j] : 1);
      a += gh;
      b += gh * xh;
      dw[j] += gv[i] * xh;
      db[j] += gv[i];
    }
    a /= (double)L;
    b /= (double)L;
    for (int64_t j = 0; j < L; j++) {
      int64_t i = r * L + j;
      double xh = (xv[i] - mv[i]) * rv[i], gh = gv[i] * (wv ? wv[j] : 1);
      dx[i] = (gh - a - xh * b) * rv[i];
    }
  }
  write_f64(e->outs[0], dx);
  write_f64(e->outs[1], dw);
  write_f64(e->outs[2], db);
  return 0;
}

/* avg_pool2d_backward: each output's gradient over its divisor, added to every input of its window */
int eval_avg_pool_backward(E *e) {
  Interp *I = e->I;
  Tensor *g = T(e, "grad_output"), *x = T(e, "self"), *out = out0(e);
  bool adaptive = A(e, "kernel_size") == NULL;
  int64_t k[2] = {1, 1}, st[2] = {1, 1}, pd[2] = {0, 0};
  if (!adaptive) {
    RArg *ka = A(e, "kernel_size"), *sa = A(e, "stride"), *pa = A(e, "padding");
    for (int i = 0; i < 2; i++) {
      k[i] = ka->is[ka->n == 1 ? 0 : i];
      st[i] = sa->n == 0 ? k[i] : sa->is[sa->n == 1 ? 0 : i];
      pd[i] = pa->is[pa->n == 1 ? 0 : i];
    }
  }
  bool cip = adaptive || B(e, "count_include_pad");
  RArg *dov = A(e, "divisor_override");
  int64_t H = x->sizes[x->rank - 2], W = x->sizes[x->rank - 1], OH = g->sizes[g->rank - 2], OW = g->sizes[g->rank - 1];
  int64_t planes = H * W != 0 ? tensor_numel(x) / (H * W) : 0;
  double *gv = read_f64(I, g), *r = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *r);
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t h0, h1, w0, w1, pool;
        if (adaptive) {
          h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH, w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
          pool = (h1 - h0) * (w1 - w0);
        } else {
          h0 = oh * st[0] - pd[0], w0 = ow * st[1] - pd[1];
          h1 = h0 + k[0] < H + pd[0] ? h0 + k[0] : H + pd[0], w1 = w0 + k[1] < W + pd[1] ? w0 + k[1] : W + pd[1];
          pool = (h1 - h0) * (w1 - w0);
          if (h0 < 0) h0 = 0;
          if (w0 < 0) w0 = 0;
          if (h1 > H) h1 = H;
          if (w1 > W) w1 = W;
        }
        int64_t div = dov && dov->k == AK_INT ? dov->i : cip ? pool : (h1 - h0) * (w1 - w0);
        double v = gv[(p * OH + oh) * OW + ow] / (double)div;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) r[p * H * W + h * W + w] += v;
      }
  write_f64(out, r);
  return 0;
}

/* native_group_norm_backward: layer norm's formula over each (sample, group) of C/group channels */
int eval_group_norm_backward(E *e) {
  Interp *I = e->I;
  Tensor *g = T(e, "grad_out"), *x = T(e, "input"), *w = T(e, "weight");
  int64_t G = I64(e, "group", 1), N = x->sizes[0], C = x->sizes[1], n = tensor_numel(x);
  int64_t HW = N * C != 0 ? n / (N * C) : 0, L = C / G * HW;
  double *gv = read_f64(I, g), *xv = read_f64(I, x), *mv = read_f64(I, T(e, "mean")), *rv = read_f64(I, T(e, "rstd")), *wv = w ? read_f64(I, w) : NULL;
  double *dx = arena_array(I->c->arena, (size_t)n + 1, sizeof *dx), *dw = arena_array(I->c->arena, (size_t)C + 1, sizeof *dw),
         *db = arena_array(I->c->arena, (size_t)C + 1, sizeof *db);
  for (int64_t r = 0; r < N * G; r++) {
    double a = 0, b = 0, m = mv[r], rs = rv[r];
    for (int64_t j = 0; j < L; j++) {
      int64_t i = r * L + j, c = (r % G) * (C / G) + j / HW;
      double xh = (xv[i] - m) * rs, gh = gv[i] * (wv ? wv[c] : 1);
      a += gh;
      b += gh * xh;
      dw[c] += gv[i] * xh;
      db[c] += gv[i];
    }
    a /= (double)L;
    b /= (double)L;
    for (int64_t j = 0; j < L; j++) {
      int64_t i = r * L + j, c = (r % G) * (C / G) + j / HW;
      double xh = (xv[i] - m) * rs, gh = gv[i] * (wv ? wv[c] : 1);
      dx[i] = (gh - a - xh * b) * rs;
    }
  }
  write_f64(e->outs[0], dx);
  write_f64(e->outs[1], dw);
  write_f64(e->outs[2], db);
  return 0;
}

/* col2im (fold: each column's values added into the image at their block's positions) and im2col
 * (unfold: column (c, a, b) of block (bh, bw) is the image at that tap, 0 in the padding) */
static int fold_unfold(E *e, bool fold) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *out = out0(e), *img = fold ? out : x;
  RArg *ka = A(e, "kernel_size"), *da = A(e, "dilation"), *pa = A(e, "padding"), *sa = A(e, "stride");
  int64_t k[2], dl[2], pd[2], st[2], nb[2];
  for (int i = 0; i < 2; i++)
    k[i] = ka->is[ka->n == 1 ? 0 : i], dl[i] = da->is[da->n == 1 ? 0 : i], pd[i] = pa->is[pa->n == 1 ? 0 : i], st[i] = sa->is[sa->n == 1 ? 0 : i];
  int64_t H = img->sizes[img->rank - 2], W = img->sizes[img->rank - 1], C = img->sizes[img->rank - 3], N = img->rank == 4 ? img->sizes[0] : 1;
  for (int i = 0; i < 2; i++) nb[i] = ((i ? W : H) + 2 * pd[i] - dl[i] * (k[i] - 1) - 1) / st[i] + 1;
  double *xv = read_f64(I, x), *r = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *r);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t a = 0; a < k[0]; a++)
        for (int64_t b = 0; b < k[1]; b++)
          for (int64_t bh = 0; bh < nb[0]; bh++)
            for (int64_t bw = 0; bw < nb[1]; bw++) {
              int64_t h = bh * st[0] - pd[0] + a * dl[0], w = bw * st[1] - pd[1] + b * dl[1];
              int64_t col = ((n * C + c) * k[0] * k[1] + a * k[1] + b) * nb[0] * nb[1] + bh * nb[1] + bw;
              bool in = h >= 0 && h < H && w >= 0 && w < W;
              if (fold) { if (in) r[((n * C + c) * H + h) * W + w] += xv[col]; }
              else r[col] = in ? xv[((n * C + c) * H + h) * W + w] : 0;
            }
  write_f64(out, r);
  return 0;
}
int eval_col2im(E *e) { return fold_unfold(e, true); }
int eval_im2col(E *e) { return fold_unfold(e, false); }

static double pnorm_dist(const double *a, const double *b, int64_t m, double p) {
  double acc = 0;
  for (int64_t j = 0; j < m; j++) {
    double d = fabs(a[j] - b[j]);
    if (p == 0) acc += d != 0;
    else if (isinf(p)) acc = d > acc || isnan(d) ? d : acc;
    else acc += p == 1 ? d : p == 2 ? d * d : pow(d, p);
  }
  return p == 0 || p == 1 || isinf(p) ? acc : p == 2 ? sqrt(acc) : pow(acc, 1 / p);
}

/* _cdist_forward and _pdist_forward: p-norm distances of rows */
int eval_cdist(E *e) {
  Interp *I = e->I;
  Tensor *out = out0(e);
  double p = F64(e, "p", 2);
  if (!strcmp(e->n->op->name, "_pdist_forward")) {
    Tensor *x = T(e, "self");
    int64_t n = x->sizes[0], m = x->sizes[1], k = 0;
    double *xv = read_f64(I, x), *r = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *r);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = i + 1; j < n; j++) r[k++] = pnorm_dist(xv + i * m, xv + j * m, m, p);
    write_f64(out, r);
    return 0;
  }
  int rk = out->rank;
  int64_t bsz[GG_MAX_RANK];
  memcpy(bsz, out->sizes, sizeof(int64_t) * (size_t)(rk - 2));
  Tensor *a = T(e, "x1"), *b = T(e, "x2");
  int64_t P = a->sizes[a->rank - 2], R = b->sizes[b->rank - 2], M = a->sizes[a->rank - 1];
  bsz[rk - 2] = P, bsz[rk - 1] = M;
  Tensor *ae = expand_to(I, a, rk, bsz);
  bsz[rk - 2] = R;
  Tensor *be = expand_to(I, b, rk, bsz);
  double *av = read_f64(I, ae), *bv = read_f64(I, be), *r = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *r);
  int64_t nb = P * R != 0 ? tensor_numel(out) / (P * R) : 0;
  for (int64_t q = 0; q < nb; q++)
    for (int64_t i = 0; i < P; i++)
      for (int64_t j = 0; j < R; j++) r[(q * P + i) * R + j] = pnorm_dist(av + (q * P + i) * M, bv + (q * R + j) * M, M, p);
  write_f64(out, r);
  return 0;
}

/* grid_sampler_2d, as PyTorch's CPU kernel: grid coordinates in [-1, 1] mapped to pixels (corner
 * centres with align_corners), padded (border clips; reflection mirrors, then clips), then read by
 * bilinear (4 taps), nearest (round half to even) or bicubic (16 taps, A = -0.75, each tap padded)
 * interpolation; taps outside the input read 0. */
static double gs_reflect(double x, double lo2, double hi2) {
  if (lo2 == hi2) return 0;
  double mn = lo2 / 2, span = (hi2 - lo2) / 2;
  x = fabs(x - mn);
  double extra = fmod(x, span), flips = floor(x / span);
  return fmod(flips, 2) == 0 ? extra + mn : span - extra + mn;
}
static double gs_pad(double x, int64_t size, int pm, bool align) {
  if (pm == 2) x = align ? gs_reflect(x, 0, 2.0 * (double)(size - 1)) : gs_reflect(x, -1, 2.0 * (double)size - 1);
  if (pm >= 1) x = fmin((double)(size - 1), fmax(x, 0));
  return x;
}
static double gs_at(const double *p, double x, double y, int64_t H, int64_t W) {
  if (!(x >= 0 && x <= (double)(W - 1) && y >= 0 && y <= (double)(H - 1))) return 0;
  return p[(int64_t)y * W + (int64_t)x];
}
static double gs_cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static double gs_cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

int eval_grid_sampler(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "input"), *gr = T(e, "grid"), *out = out0(e);
  int im = (int)I64(e, "interpolation_mode", 0), pm = (int)I64(e, "padding_mode", 0);
  bool align = B(e, "align_corners");
  int64_t N = x->sizes[0], C = x->sizes[1], H = x->sizes[2], W = x->sizes[3], Ho = gr->sizes[1], Wo = gr->sizes[2];
  double *xv = read_f64(I, x), *gv = read_f64(I, gr), *r = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *r);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < Ho * Wo; o++) {
      double gx = gv[(n * Ho * Wo + o) * 2], gy = gv[(n * Ho * Wo + o) * 2 + 1];
      double ix = align ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
      double iy = align ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
      for (int64_t c = 0; c < C; c++) {
        const double *p = xv + (n * C + c) * H * W;
        double v = 0;
        if (im == 2) {   /* bicubic: the taps padded one by one */
          double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0, A = -0.75;
          double cx[4] = {gs_cubic2(tx + 1, A), gs_cubic1(tx, A), gs_cubic1(1 - tx, A), gs_cubic2(2 - tx, A)};
          double cy[4] = {gs_cubic2(ty + 1, A), gs_cubic1(ty, A), gs_cubic1(1 - ty, A), gs_cubic2(2 - ty, A)};
          for (int j = 0; j < 4; j++) {
            double row = 0;
            for (int i = 0; i < 4; i++)
              row += cx[i] * gs_at(p, trunc(gs_pad(x0 - 1 + i, W, pm, align)), trunc(gs_pad(y0 - 1 + j, H, pm, align)), H, W);
            v += cy[j] * row;
          }
        } else {
          double px = gs_pad(ix, W, pm, align), py = gs_pad(iy, H, pm, align);
          if (im == 1) v = gs_at(p, nearbyint(px), nearbyint(py), H, W);
          else {
            double x0 = floor(px), y0 = floor(py), x1 = x0 + 1, y1 = y0 + 1;
            double tx[4] = {x0, x1, x0, x1}, ty[4] = {y0, y0, y1, y1}, w[4] = {(x1 - px) * (y1 - py), (px - x0) * (y1 - py), (x1 - px) * (py - y0), (px - x0) * (py - y0)};
            for (int t = 0; t < 4; t++)   /* taps outside add nothing (not 0 times a weight: NaN coordinates give 0) */
              if (tx[t] >= 0 && tx[t] <= (double)(W - 1) && ty[t] >= 0 && ty[t] <= (double)(H - 1)) v += gs_at(p, tx[t], ty[t], H, W) * w[t];
          }
        }
        r[(n * C + c) * Ho * Wo + o] = v;
      }
    }
  write_f64(out, r);
  return 0;
}

/* _embedding_bag: bag b sums, averages or maxes the weight rows its indices name, positions
 * [offsets[b], offsets[b + 1]) (the last to the end, or to offsets[B] with include_last_offset),
 * rows at padding_idx left out; an empty bag gives zeros. max_indices: the first row reaching each
 * maximum (0 in an empty bag), else zeros; bag_size: the rows counted; offset2bag: each position's bag. */
int eval_embedding_bag(E *e) {
  Interp *I = e->I;
  Tensor *w = T(e, "weight"), *psw = T(e, "per_sample_weights"), *out = out0(e);
  int64_t mode = I64(e, "mode", 0), pad = I64(e, "padding_idx", -1), V = w->sizes[0], D = w->sizes[1];
  int64_t *iv = read_i64(I, T(e, "indices")), *ov = read_i64(I, T(e, "offsets")), L = tensor_numel(T(e, "indices")), B = out->sizes[0];
  int64_t nof = tensor_numel(T(e, "offsets"));
  double *wv = read_f64(I, w), *pv = psw ? read_f64(I, psw) : NULL, *r = arena_array(I->c->arena, (size_t)(B * D) + 1, sizeof *r);
  int64_t *o2b = arena_array(I->c->arena, (size_t)L + 1, sizeof *o2b), *bs = arena_array(I->c->arena, (size_t)B + 1, sizeof *bs);
  int64_t *mi = arena_array(I->c->arena, (size_t)(B * D) + 1, sizeof *mi);
  if (B > 0 && ov[0] != 0) return fail(e, "%s", "offsets must start at 0");
  for (int64_t b = 0; b < B; b++) {
    int64_t lo = ov[b], hi = b + 1 < nof ? ov[b + 1] : L;
    if (lo < 0 || hi < lo || hi > L) return fail(e, "%s", "offsets must be nondecreasing and within the indices");
    for (int64_t d = 0; d < D; d++) { r[b * D + d] = 0; mi[b * D + d] = 0; }
    for (int64_t t = lo; t < hi; t++) {
      int64_t q = iv[t];
      o2b[t] = b;
      if (q < 0 || q >= V) return fail(e, "index %lld out of range", (long long)q);
      if (q == pad) continue;
      for (int64_t d = 0; d < D; d++) {
        double v = wv[q * D + d] * (pv ? pv[t] : 1);
        if (mode != 2) r[b * D + d] += v;
        else if (!bs[b] || v > r[b * D + d] || (isnan(v) && !isnan(r[b * D + d]))) { r[b * D + d] = v; mi[b * D + d] = q; }
      }
      bs[b]++;
    }
    if (mode == 1 && bs[b])
      for (int64_t d = 0; d < D; d++) r[b * D + d] /= (double)bs[b];
  }
  write_f64(out, r);
  if (tensor_numel(e->outs[1]) == L) write_i64(e->outs[1], o2b);
  write_i64(e->outs[2], bs);
  write_i64(e->outs[3], mi);   /* [B, D] for max; else [B] of zeros */
  return 0;
}

/* einsum: the sum over every subscript not in the output of the operands' product, directly */
int eval_einsum(E *e) {
  Interp *I = e->I;
  RArg *ta = A(e, "tensors");
  Tensor *out = out0(e);
  int ranks[GG_EINSUM_MAX_OPS];
  Tensor *ops[GG_EINSUM_MAX_OPS];
  for (int k = 0; k < ta->n && k < GG_EINSUM_MAX_OPS; k++) { ops[k] = ta->ts[k]; ranks[k] = ops[k]->rank; }
  Einsum es;
  const char *why = einsum_parse(A(e, "equation")->s, ta->n, ranks, &es);
  if (why) return fail(e, "%s", why);
  int64_t size[GG_EINSUM_MAX_LETTERS], idx[GG_EINSUM_MAX_LETTERS];
  bool in_out[GG_EINSUM_MAX_LETTERS] = {0};
  for (int l = 0; l < es.nletters; l++) size[l] = 1;
  for (int k = 0; k < es.nops; k++)
    for (int d = 0; d < ranks[k]; d++) if (ops[k]->sizes[d] != 1) size[es.letters[k][d]] = ops[k]->sizes[d];
  for (int i = 0; i < es.nout; i++) in_out[es.out[i]] = true;
  int sum[GG_EINSUM_MAX_LETTERS], ns = 0;
  int64_t inner = 1, n = tensor_numel(out);
  for (int l = 0; l < es.nletters; l++)
    if (!in_out[l]) {
      sum[ns++] = l;
      if (__builtin_mul_overflow(inner, size[l], &inner) || inner > GG_MAX_ELEMS) return fail(e, "%s", "einsum sums over too many elements for the interpreter");
    }
  int64_t work;
  if (__builtin_mul_overflow(inner, n, &work) || work > ((int64_t)1 << 34)) return fail(e, "%s", "einsum too large for the interpreter (over 2^34 products)");
  double *v[GG_EINSUM_MAX_OPS], *r = arena_array(I->c->arena, (size_t)n + 1, sizeof *r);
  for (int k = 0; k < es.nops; k++) v[k] = read_f64(I, ops[k]);
  for (int64_t o = 0; o < n; o++) {
    int64_t rem = o;
    for (int i = es.nout - 1; i >= 0; i--) { idx[es.out[i]] = rem % size[es.out[i]]; rem /= size[es.out[i]]; }
    double acc = 0;
    for (int64_t q = 0; q < inner; q++) {
      int64_t rq = q;
      for (int i = ns - 1; i >= 0; i--) { idx[sum[i]] = rq % size[sum[i]]; rq /= size[sum[i]]; }
      double p = 1;
      for (int k = 0; k < es.nops; k++) {
        int64_t at = 0;
        for (int d = 0; d < ranks[k]; d++) at = at * ops[k]->sizes[d] + (ops[k]->sizes[d] == 1 ? 0 : idx[es.letters[k][d]]);
        p *= v[k][at];
      }
      acc += p;
    }
    r[o] = acc;
  }
  write_f64(out, r);
  return 0;
}

/* _weight_norm: v * g / ||v||, the norm over every dim but dim (every dim when dim is -1) */
int eval_weight_norm(E *e) {
  Interp *I = e->I;
  Tensor *v = T(e, "v"), *g = T(e, "g"), *out = out0(e);
  int64_t d = I64(e, "dim", 0), n = tensor_numel(v), outer = 1, len = d < 0 ? 1 : v->sizes[d], inner = 1;
  for (int k = 0; d >= 0 && k < d; k++) outer *= v->sizes[k];
  for (int k = d < 0 ? 0 : (int)d + 1; k < v->rank; k++) inner *= v->sizes[k];
  if (d < 0) outer = 1, inner = n;
  double *vv = read_f64(I, v), *gv = read_f64(I, g), *r = arena_array(I->c->arena, (size_t)n + 1, sizeof *r);
  if (tensor_numel(g) != len) return fail(e, "%s", "g must have one value per slice of v along dim");
  for (int64_t j = 0; j < len; j++) {
    double s = 0;
    for (int64_t a = 0; a < outer; a++) for (int64_t b = 0; b < inner; b++) { double x = vv[(a * len + j) * inner + b]; s += x * x; }
    double f = gv[j] / sqrt(s);
    for (int64_t a = 0; a < outer; a++) for (int64_t b = 0; b < inner; b++) r[(a * len + j) * inner + b] = vv[(a * len + j) * inner + b] * f;
  }
  write_f64(out, r);
  return 0;
}

/* repeat_interleave.self_int: element i of dim repeated `repeats` times in place */
int eval_repeat_interleave(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e);
  int64_t r = I64(e, "repeats", 1), n = tensor_numel(out), idx[GG_MAX_RANK];
  RArg *da = A(e, "dim");
  bool flat = !da || da->k != AK_INT;
  int d = 0;
  if (!flat && wrap_dim(e, da->i, x->rank, &d)) return -1;
  for (int64_t i = 0; i < n; i++) {
    int64_t si;
    if (flat) si = i / r;
    else {
      unravel(i, out->rank, out->sizes, idx);
      idx[d] /= r;
      si = ravel(x->rank, x->sizes, idx);
    }
    copy_elem(out, i, x, si);
  }
  return 0;
}

/* meshgrid: output i holds tensor i's element at its own dim's index */
int eval_meshgrid(E *e) {
  RArg *ta = A(e, "tensors"), *ix = A(e, "indexing");
  bool xy = ix && ix->k == AK_STR && !strcmp(ix->s, "xy") && ta->n >= 2;
  int64_t idx[GG_MAX_RANK];
  for (int i = 0; i < ta->n; i++) {
    Tensor *out = e->outs[i];
    int at = xy && i < 2 ? 1 - i : i;
    for (int64_t k = 0; k < tensor_numel(out); k++) {
      unravel(k, out->rank, out->sizes, idx);
      copy_elem(out, k, ta->ts[i], ta->ts[i]->rank ? idx[at] : 0);
    }
  }
  return 0;
}

/* lstm.input, as PyTorch's cell: gates = W_ih x + b_ih + W_hh h + b_hh, split i, f, g, o;
 * c = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c); the reverse direction runs from the end */
int eval_lstm(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "input");
  RArg *hx = A(e, "hx"), *pa = A(e, "params");
  int64_t L = I64(e, "num_layers", 1);
  bool bias = B(e, "has_biases"), bi = B(e, "bidirectional"), bf = B(e, "batch_first"), unb = x->rank == 2;
  int D = bi ? 2 : 1, per = bias ? 4 : 2;
  int64_t Tn = x->sizes[unb || !bf ? 0 : 1], Bn = unb ? 1 : x->sizes[bf ? 0 : 1], In = x->sizes[x->rank - 1], H = hx->ts[0]->sizes[hx->ts[0]->rank - 1];
  double *xv = read_f64(I, x), *h0 = read_f64(I, hx->ts[0]), *c0 = read_f64(I, hx->ts[1]);
  double *hn = arena_array(I->c->arena, (size_t)(L * D * Bn * H) + 1, sizeof *hn), *cn = arena_array(I->c->arena, (size_t)(L * D * Bn * H) + 1, sizeof *cn);
  double *in = arena_array(I->c->arena, (size_t)(Tn * Bn * In) + 1, sizeof *in);   /* [T, B, in] */
  for (int64_t t = 0; t < Tn; t++)
    for (int64_t b = 0; b < Bn; b++)
      for (int64_t k = 0; k < In; k++) in[(t * Bn + b) * In + k] = xv[(bf && !unb ? b * Tn + t : t * Bn + b) * In + k];
  int64_t width = In;
  double *out = NULL, *gate = arena_array(I->c->arena, (size_t)(4 * H) + 1, sizeof *gate);
  for (int64_t l = 0; l < L; l++) {
    out = arena_array(I->c->arena, (size_t)(Tn * Bn * D * H) + 1, sizeof *out);
    for (int d = 0; d < D; d++) {
      int pi = (int)((l * D + d) * per);
      double *wih = read_f64(I, pa->ts[pi]), *whh = read_f64(I, pa->ts[pi + 1]), *bih = bias ? read_f64(I, pa->ts[pi + 2]) : NULL, *bhh = bias ? read_f64(I, pa->ts[pi + 3]) : NULL;
      double *h = hn + (l * D + d) * Bn * H, *c = cn + (l * D + d) * Bn * H;
      memcpy(h, h0 + (l * D + d) * Bn * H, sizeof *h * (size_t)(Bn * H));
      memcpy(c, c0 + (l * D + d) * Bn * H, sizeof *c * (size_t)(Bn * H));
      for (int64_t s = 0; s < Tn; s++) {
        int64_t t = d ? Tn - 1 - s : s;
        for (int64_t b = 0; b < Bn; b++) {
          const double *xt = in + (t * Bn + b) * width;
          double *hb = h + b * H, *cb = c + b * H;
          for (int64_t j = 0; j < 4 * H; j++) {
            double g = bias ? bih[j] + bhh[j] : 0;
            for (int64_t k = 0; k < width; k++) g += wih[j * width + k] * xt[k];
            for (int64_t k = 0; k < H; k++) g += whh[j * H + k] * hb[k];
            gate[j] = g;
          }
          for (int64_t j = 0; j < H; j++) {
            double ig = 1 / (1 + exp(-gate[j])), fg = 1 / (1 + exp(-gate[H + j])), gg = tanh(gate[2 * H + j]), og = 1 / (1 + exp(-gate[3 * H + j]));
            cb[j] = fg * cb[j] + ig * gg;
            hb[j] = og * tanh(cb[j]);
            out[(t * Bn + b) * D * H + d * H + j] = hb[j];
          }
        }
      }
    }
    in = out;
    width = D * H;
  }
  double *r = arena_array(I->c->arena, (size_t)(Tn * Bn * D * H) + 1, sizeof *r);
  for (int64_t t = 0; t < Tn; t++)
    for (int64_t b = 0; b < Bn; b++)
      for (int64_t k = 0; k < D * H; k++) r[(bf && !unb ? b * Tn + t : t * Bn + b) * D * H + k] = out[(t * Bn + b) * D * H + k];
  write_f64(e->outs[0], r);
  write_f64(e->outs[1], hn);
  write_f64(e->outs[2], cn);
  return 0;
}

int eval_alias(E *e) { return fail(e, "%s", "an alias the loader should have rewritten (internal error)"); }

int eval_fill_tensor(E *e) {
  Tensor *out = out0(e), *v = T(e, "value");
  copy_into(out, expand_to(e->I, v, out->rank, out->sizes));
  return 0;
}

int eval_copy(E *e) {
  Tensor *out = out0(e), *src = T(e, "src");
  copy_into(out, expand_to(e->I, src, out->rank, out->sizes));
  return 0;
}

/* ---------------------------------------------------------------- reductions */

/* Rows of a reduction: the input as [outer, inner] with the reduced dims last. */
typedef struct Rows { int64_t outer, inner; Tensor *view; } Rows;

static int reduce_rows(E *e, Tensor *x, Rows *r, bool *mask) {
  RArg *da = A(e, "dim");
  memset(mask, 0, sizeof(bool) * GG_MAX_RANK);
  int nd = 0;
  if (da && da->k == AK_INT) {
    int d;
    if (wrap_dim(e, da->i, x->rank, &d)) return -1;
    if (x->rank) mask[d] = true;
    nd = 1;
  } else if (da && da->k == AK_INTS && da->n) {
    for (int i = 0; i < da->n; i++) {
      int d;
      if (wrap_dim(e, da->is[i], x->rank, &d)) return -1;
      if (x->rank) mask[d] = true;
    }
    nd = da->n;
  }
  if (!nd) for (int d = 0; d < x->rank; d++) mask[d] = true;
  int perm[GG_MAX_RANK], k = 0;
  r->outer = r->inner = 1;
  for (int d = 0; d < x->rank; d++) if (!mask[d]) { perm[k++] = d; r->outer *= x->sizes[d]; }
  for (int d = 0; d < x->rank; d++) if (mask[d]) { perm[k++] = d; r->inner *= x->sizes[d]; }
  r->view = view_of(e->I, x);
  if (x->rank) permute_view(r->view, perm);
  return 0;
}

int eval_reduce(E *e) {
  const int rk = e->n->op->red;
  Tensor *x = T(e, "self");
  Rows r;
  bool mask[GG_MAX_RANK];
  if (reduce_rows(e, x, &r, mask)) return -1;
  Interp *I = e->I;
  Tensor *out = out0(e);
  int64_t O = r.outer, N = r.inner;
  bool is_arg = rk == R_ARGMAX || rk == R_ARGMIN, with_index = rk == R_MAX_DIM || rk == R_MIN_DIM;
  bool want_max = red_is_max(rk);
  if ((want_max || red_is_min(rk)) && N == 0)
    return fail(e, "reduction over an empty dimension has no identity");
  bool ints = !dtype_is_float(out->dtype) && !dtype_is_float(x->dtype) && !is_arg && !with_index;
  if (ints && (rk == R_SUM || rk == R_PROD || rk == R_AMAX || rk == R_AMIN || rk == R_MAX || rk == R_MIN)) {
    int64_t *v = read_i64(I, r.view), *res = arena_array(I->c->arena, (size_t)O + 1, sizeof *res);
    for (int64_t o = 0; o < O; o++) {
      const int64_t *row = v + o * N;
      uint64_t acc = rk == R_PROD ? 1 : 0;
      int64_t m = N ? row[0] : 0;
      for (int64_t i = 0; i < N; i++) {
        if (rk == R_SUM) acc += (uint64_t)row[i];
        else if (rk == R_PROD) acc *= (uint64_t)row[i];
        else if (want_max ? row[i] > m : row[i] < m) m = row[i];
      }
      res[o] = rk == R_SUM || rk == R_PROD ? (int64_t)acc : m;
    }
    write_i64(out, res);
    return 0;
  }
  double *v = read_f64(I, r.view), *res = arena_array(I->c->arena, (size_t)O + 1, sizeof *res);
  int64_t *idx = arena_array(I->c->arena, (size_t)O + 1, sizeof *idx);
  double *res2 = arena_array(I->c->arena, (size_t)O + 1, sizeof *res2);
  double correction = 1;
  double ord = F64(e, "ord", 2);
  if (ops_arg_index(e->n->op, "unbiased") >= 0) correction = B(e, "unbiased") ? 1 : 0;   /* var.dim, std.dim */
  else { RArg *ca = A(e, "correction"); if (ca && ca->k != AK_NONE) correction = F64(e, "correction", 1); }
  for (int64_t o = 0; o < O; o++) {
    const double *row = v + o * N;
    double acc = 0;
    if (rk == R_SUM || rk == R_MEAN) {
      for (int64_t i = 0; i < N; i++) acc += row[i];
      res[o] = rk == R_MEAN ? acc / (double)N : acc;
    } else if (rk == R_PROD) {
      acc = 1;
      for (int64_t i = 0; i < N; i++) acc *= row[i];
      res[o] = acc;
    } else if (rk == R_ANY || rk == R_ALL) {
      bool any = false, all = true;
      for (int64_t i = 0; i < N; i++) { any |= row[i] != 0; all &= row[i] != 0; }
      res[o] = rk == R_ANY ? any : all;
    } else if (red_is_var(rk)) {
      double mean = 0, ss = 0;
      for (int64_t i = 0; i < N; i++) mean += row[i];
      mean /= (double)N;
      for (int64_t i = 0; i < N; i++) ss += (row[i] - mean) * (row[i] - mean);
      double dof = (double)N - correction;
      double var = dof > 0 ? ss / dof : (dof == 0 ? ss / 0.0 : NAN);
      res[o] = rk == R_STD ? sqrt(var) : var;
      res2[o] = mean;
    } else if (rk == R_NORM) {
      double m = isinf(ord) && ord < 0 ? INFINITY : 0;
      for (int64_t i = 0; i < N; i++) {
        double a = fabs(row[i]);
        if (isinf(ord)) m = ord > 0 ? (a > m || isnan(a) ? a : m) : (a < m || isnan(a) ? a : m);
        else if (ord == 0) acc += a != 0;
        else if (ord == 1) acc += a;
        else if (ord == 2) acc += a * a;
        else acc += pow(a, ord);
      }
      res[o] = isinf(ord) ? m : ord == 0 || ord == 1 ? acc : ord == 2 ? sqrt(acc) : pow(acc, 1.0 / ord);
    } else if (rk == R_LSE) {
      double m = -INFINITY;
      for (int64_t i = 0; i < N; i++) if (row[i] > m || isnan(row[i])) m = row[i];
      if (isinf(m) || isnan(m)) { res[o] = N ? (isnan(m) ? m : (m > 0 ? m : log(0.0))) : -INFINITY; if (m > 0 && !isnan(m)) res[o] = INFINITY; continue; }
      for (int64_t i = 0; i < N; i++) acc += exp(row[i] - m);
      res[o] = log(acc) + m;
    } else {
      /* max / min family: NaN wins, the first extreme wins ties */
      int64_t best = 0;
      for (int64_t i = 1; i < N; i++) {
        if (isnan(row[best])) break;
        if (isnan(row[i]) || (want_max ? row[i] > row[best] : row[i] < row[best])) best = i;
      }
      res[o] = row[best];
      idx[o] = best;
    }
  }
  if (is_arg) write_i64(out, idx);
  else write_f64(out, res);
  if (with_index) write_i64(e->outs[1], idx);
  if (rk == R_VAR_MEAN) write_f64(e->outs[1], res2);
  return 0;
}

/* cumsum, softmax and log_softmax run along one dim. */
/* sort and topk: each row along dim stably sorted (gg_sort_*, scalar.h), its first k kept */
int eval_sort(E *e) {
  Tensor *x = T(e, "self"), *vals = e->outs[0], *idx = e->outs[1];
  int d;
  if (wrap_dim(e, I64(e, "dim", -1), x->rank, &d)) return -1;
  Interp *I = e->I;
  Tensor *xv = dim_last(I, x, d), *vv = dim_last(I, vals, d), *iv = dim_last(I, idx, d);
  int64_t N = x->rank ? x->sizes[d] : 1, K = x->rank ? vals->sizes[d] : 1, O = N ? tensor_numel(x) / N : 0;
  bool desc = A(e, "k") ? B(e, "largest") : B(e, "descending"), ints = !dtype_is_float(x->dtype);
  int64_t *ix = arena_array(I->c->arena, (size_t)(2 * N) + 1, sizeof *ix), *ri = arena_array(I->c->arena, (size_t)(O * K) + 1, sizeof *ri);
  double *f = ints ? NULL : read_f64(I, xv), *rf = arena_array(I->c->arena, (size_t)(O * K) + 1, sizeof *rf);
  int64_t *v = ints ? read_i64(I, xv) : NULL, *rv = arena_array(I->c->arena, (size_t)(O * K) + 1, sizeof *rv);
  for (int64_t o = 0; o < O; o++) {
    for (int64_t j = 0; j < N; j++) ix[j] = j;
    if (ints) gg_sort_i64(v + o * N, ix, ix + N, N, desc);
    else gg_sort_f64(f + o * N, ix, ix + N, N, desc);
    for (int64_t j = 0; j < K; j++) {
      ri[o * K + j] = ix[j];
      if (ints) rv[o * K + j] = v[o * N + ix[j]];
      else rf[o * K + j] = f[o * N + ix[j]];
    }
  }
  if (ints) write_i64(vv, rv);
  else write_f64(vv, rf);
  write_i64(iv, ri);
  return 0;
}

int eval_scan(E *e) {
  const int rk = e->n->op->red;
  Tensor *x = T(e, "self"), *out = out0(e);
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
  Interp *I = e->I;
  Tensor *xv = dim_last(I, x, d), *ov = dim_last(I, out, d);
  int64_t N = x->rank ? x->sizes[d] : 1, O = N ? tensor_numel(x) / N : 0;
  bool prod = rk == R_CUMPROD;
  if ((rk == R_CUMSUM || rk == R_CUMPROD) && !dtype_is_float(out->dtype)) {
    int64_t *v = read_i64(I, xv);
    for (int64_t o = 0; o < O; o++) {
      uint64_t acc = prod;
      for (int64_t i = 0; i < N; i++) { acc = prod ? acc * (uint64_t)v[o * N + i] : acc + (uint64_t)v[o * N + i]; v[o * N + i] = (int64_t)acc; }
    }
    write_i64(ov, v);
    return 0;
  }
  double *v = read_f64(I, xv);
  bool log_sm = rk == R_LOG_SOFTMAX;
  for (int64_t o = 0; o < O; o++) {
    double *row = v + o * N;
    if (rk == R_CUMSUM || rk == R_CUMPROD) {
      double acc = prod;
      for (int64_t i = 0; i < N; i++) { acc = prod ? acc * row[i] : acc + row[i]; row[i] = acc; }
      continue;
    }
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < N; i++) if (row[i] > m || isnan(row[i])) m = row[i];
    if (isinf(m) && m < 0) m = 0;   /* a row of -inf: softmax gives NaN as PyTorch does */
    for (int64_t i = 0; i < N; i++) s += exp(row[i] - m);
    for (int64_t i = 0; i < N; i++) row[i] = log_sm ? row[i] - m - log(s) : exp(row[i] - m) / s;
  }
  write_f64(ov, v);
  return 0;
}

/* ---------------------------------------------------------------- matrix products */

/* C (MxN) = A (MxK) @ B (KxN), contiguous float64. Each output sums over k in ascending order; the
 * i-k-j loop order only makes the walk over B and C sequential. */
static void gemm(const double *a, const double *b, double *c, int64_t M, int64_t K, int64_t N) {
  for (int64_t i = 0; i < M; i++) {
    double *ci = c + i * N;
    for (int64_t j = 0; j < N; j++) ci[j] = 0;
    for (int64_t k = 0; k < K; k++) {
      double aik = a[i * K + k];
      const double *bk = b + k * N;
      for (int64_t j = 0; j < N; j++) ci[j] += aik * bk[j];
    }
  }
}

static Tensor *transposed_view(Interp *I, const Tensor *t) {
  Tensor *v = view_of(I, t);
  if (t->rank >= 2) {
    int a = t->rank - 2, b = t->rank - 1;
    int64_t s = v->sizes[a]; v->sizes[a] = v->sizes[b]; v->sizes[b] = s;
    s = v->strides[a]; v->strides[a] = v->strides[b]; v->strides[b] = s;
  }
  return v;
}

/* out = beta*bias + alpha*(a @ b), with numpy broadcasting of the batch dims; a, b rank >= 1 */
static int matmul_into(E *e, const Tensor *a, const Tensor *b, const Tensor *bias, double alpha, double beta, Tensor *out) {
  Interp *I = e->I;
  /* promote 1-d operands to matrices, as numpy does */
  Tensor *A2 = view_of(I, a), *B2 = view_of(I, b);
  if (A2->rank == 1) { A2->rank = 2; A2->sizes[1] = A2->sizes[0]; A2->strides[1] = A2->strides[0]; A2->sizes[0] = 1; A2->strides[0] = 0; }
  if (B2->rank == 1) { B2->rank = 2; B2->sizes[1] = 1; B2->strides[1] = 0; }
  int64_t M = A2->sizes[A2->rank - 2], K = A2->sizes[A2->rank - 1], N = B2->sizes[B2->rank - 1];
  if (B2->sizes[B2->rank - 2] != K) return fail(e, "inner dimensions differ: %lld vs %lld", (long long)K, (long long)B2->sizes[B2->rank - 2]);
  int br = A2->rank > B2->rank ? A2->rank - 2 : B2->rank - 2;
  int64_t bs[GG_MAX_RANK], nb = 1;
  for (int d = 0; d < br; d++) {
    int da = d - (br - (A2->rank - 2)), db = d - (br - (B2->rank - 2));
    int64_t sa = da >= 0 ? A2->sizes[da] : 1, sb = db >= 0 ? B2->sizes[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) return fail(e, "batch dims do not broadcast");
    bs[d] = sa == 1 ? sb : sa;
    nb *= bs[d];
  }
  int64_t fa[GG_MAX_RANK + 2], fb[GG_MAX_RANK + 2];
  memcpy(fa, bs, sizeof *bs * (size_t)br); fa[br] = M; fa[br + 1] = K;
  memcpy(fb, bs, sizeof *bs * (size_t)br); fb[br] = K; fb[br + 1] = N;
  double *av = read_f64(I, expand_to(I, A2, br + 2, fa)), *bv = read_f64(I, expand_to(I, B2, br + 2, fb));
  double *cv = arena_array(I->c->arena, (size_t)(nb * M * N) + 1, sizeof *cv);
  for (int64_t i = 0; i < nb; i++) gemm(av + i * M * K, bv + i * K * N, cv + i * M * N, M, K, N);
  int64_t total = nb * M * N;
  if (tensor_numel(out) != total) return fail(e, "internal error: product has %lld elements, output %lld", (long long)total, (long long)tensor_numel(out));
  if (bias) {
    double *bb = read_f64(I, expand_to(I, bias, out->rank, out->sizes));
    for (int64_t i = 0; i < total; i++) cv[i] = (beta == 0 ? 0 : beta * bb[i]) + alpha * cv[i];
  } else if (alpha != 1) for (int64_t i = 0; i < total; i++) cv[i] *= alpha;
  write_f64(out, cv);
  return 0;
}

int eval_linear(E *e) {
  Tensor *w = T(e, "weight");
  return matmul_into(e, T(e, "input"), w->rank == 2 ? transposed_view(e->I, w) : w, T(e, "bias"), 1, 1, out0(e));
}

int eval_addmm(E *e) {
  bool batched = !strcmp(e->n->op->name, "baddbmm");
  return matmul_into(e, T(e, batched ? "batch1" : "mat1"), T(e, batched ? "batch2" : "mat2"), T(e, "self"),
                     F64(e, "alpha", 1), F64(e, "beta", 1), out0(e));
}

int eval_matmul(E *e) {
  Tensor *b = T(e, "mat2") ? T(e, "mat2") : T(e, "other");
  return matmul_into(e, T(e, "self"), b, NULL, 1, 1, out0(e));
}

/* ---------------------------------------------------------------- convolution */

/* Every convolution as a 3-d one (missing spatial dims have size 1): strides, padding, dilation,
 * and the input's, kernel's and output's spatial sizes. */
typedef struct ConvGeom { int64_t st[3], pd[3], dl[3], in[3], k[3], os[3]; } ConvGeom;
static void conv_geom(E *e, const Tensor *x, const Tensor *w, const Tensor *y, int nsp, ConvGeom *g) {
  RArg *sa = A(e, "stride"), *pa = A(e, "padding"), *da = A(e, "dilation");
  for (int j = 0; j < 3; j++) g->st[j] = g->dl[j] = g->in[j] = g->k[j] = g->os[j] = 1, g->pd[j] = 0;
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    g->st[j] = sa->is[sa->n == 1 ? 0 : i];
    g->pd[j] = pa->is[pa->n == 1 ? 0 : i];
    g->dl[j] = da->is[da->n == 1 ? 0 : i];
    g->in[j] = x->sizes[x->rank - nsp + i];
    g->k[j] = w->sizes[2 + i];
    g->os[j] = y->sizes[y->rank - nsp + i];
  }
}

/* The taps of output (o0, o1, o2) that fall inside the input: their offsets in an input plane (xi)
 * and in a kernel (wi); the count. The forward sum and its gradients walk the same taps. */
static int64_t conv_taps(const ConvGeom *g, int64_t o0, int64_t o1, int64_t o2, int64_t *xi, int64_t *wi) {
  int64_t n = 0;
  for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
    int64_t i0 = o0 * g->st[0] - g->pd[0] + k0 * g->dl[0];
    if (i0 < 0 || i0 >= g->in[0]) continue;
    for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
      int64_t i1 = o1 * g->st[1] - g->pd[1] + k1 * g->dl[1];
      if (i1 < 0 || i1 >= g->in[1]) continue;
      for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
        int64_t i2 = o2 * g->st[2] - g->pd[2] + k2 * g->dl[2];
        if (i2 < 0 || i2 >= g->in[2]) continue;
        xi[n] = (i0 * g->in[1] + i1) * g->in[2] + i2;
        wi[n++] = (k0 * g->k[1] + k1) * g->k[2] + k2;
      }
    }
  }
  return n;
}

int eval_conv(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "input"), *w = T(e, "weight"), *bias = T(e, "bias"), *out = out0(e);
  int nsp = w->rank - 2;
  bool batched = x->rank == nsp + 2, tr = B(e, "transposed") || !strncmp(e->n->op->name, "conv_transpose", 14);
  int64_t g = I64(e, "groups", 1);
  ConvGeom cg;
  conv_geom(e, x, w, out, nsp, &cg);
  int64_t *st = cg.st, *pd = cg.pd, *dl = cg.dl, *in = cg.in, *k = cg.k, *os = cg.os;
  int64_t Nb = batched ? x->sizes[0] : 1, Cin = x->sizes[batched ? 1 : 0], Cout = out->sizes[batched ? 1 : 0];
  int64_t Cin_g = Cin / g, Cout_g = Cout / g;
  double *xv = read_f64(I, x), *wv = read_f64(I, w), *ov = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *ov);
  double *bv = bias ? read_f64(I, bias) : NULL;
  int64_t isp = in[0] * in[1] * in[2], osp = os[0] * os[1] * os[2], ksp = k[0] * k[1] * k[2];
  if (!tr) {
    int64_t *xi = arena_array(I->c->arena, (size_t)ksp + 1, sizeof *xi), *wi = arena_array(I->c->arena, (size_t)ksp + 1, sizeof *wi);
    for (int64_t n = 0; n < Nb; n++)
      for (int64_t oc = 0; oc < Cout; oc++) {
        int64_t grp = oc / Cout_g;
        for (int64_t o0 = 0; o0 < os[0]; o0++)
          for (int64_t o1 = 0; o1 < os[1]; o1++)
            for (int64_t o2 = 0; o2 < os[2]; o2++) {
              double acc = bv ? bv[oc] : 0;
              int64_t nt = conv_taps(&cg, o0, o1, o2, xi, wi);
              for (int64_t ic = 0; ic < Cin_g; ic++) {
                const double *xp = xv + (n * Cin + grp * Cin_g + ic) * isp;
                const double *wp = wv + (oc * Cin_g + ic) * ksp;
                for (int64_t t = 0; t < nt; t++) acc += xp[xi[t]] * wp[wi[t]];
              }
              ov[((n * Cout + oc) * os[0] + o0) * os[1] * os[2] + o1 * os[2] + o2] = acc;
            }
      }
  } else {
    /* transposed: every input element scatters through the kernel; weight is [Cin, Cout/g, k...] */
    for (int64_t i = 0; i < Nb * Cout * osp; i++) ov[i] = bv ? bv[(i / osp) % Cout] : 0;
    for (int64_t n = 0; n < Nb; n++)
      for (int64_t ic = 0; ic < Cin; ic++) {
        int64_t grp = ic / Cin_g;
        for (int64_t oc = 0; oc < Cout_g; oc++) {
          const double *wp = wv + (ic * Cout_g + oc) * ksp;
          double *op = ov + (n * Cout + grp * Cout_g + oc) * osp;
          for (int64_t i0 = 0; i0 < in[0]; i0++)
            for (int64_t i1 = 0; i1 < in[1]; i1++)
              for (int64_t i2 = 0; i2 < in[2]; i2++) {
                double xval = xv[(n * Cin + ic) * isp + (i0 * in[1] + i1) * in[2] + i2];
                for (int64_t k0 = 0; k0 < k[0]; k0++) {
                  int64_t o0 = i0 * st[0] - pd[0] + k0 * dl[0];
                  if (o0 < 0 || o0 >= os[0]) continue;
                  for (int64_t k1 = 0; k1 < k[1]; k1++) {
                    int64_t o1 = i1 * st[1] - pd[1] + k1 * dl[1];
                    if (o1 < 0 || o1 >= os[1]) continue;
                    for (int64_t k2 = 0; k2 < k[2]; k2++) {
                      int64_t o2 = i2 * st[2] - pd[2] + k2 * dl[2];
                      if (o2 < 0 || o2 >= os[2]) continue;
                      op[(o0 * os[1] + o1) * os[2] + o2] += xval * wp[(k0 * k[1] + k1) * k[2] + k2];
                    }
                  }
                }
              }
        }
      }
  }
  write_f64(out, ov);
  return 0;
}

/* _conv_nhwc: the convolution it is, evaluated on NCHW views of its input, weight and result */
int eval_conv_nhwc(E *e) {
  static const int to_cf[4] = {0, 3, 1, 2};
  RArg *xa = A(e, "input"), *wa = A(e, "weight");
  Tensor *x = xa->t, *w = wa->t, *y = e->outs[0], xv = *x, wv = *w, yv = *y;
  for (int d = 0; d < 4; d++) {
    xv.sizes[d] = x->sizes[to_cf[d]], xv.strides[d] = x->strides[to_cf[d]];
    wv.sizes[d] = w->sizes[to_cf[d]], wv.strides[d] = w->strides[to_cf[d]];
    yv.sizes[d] = y->sizes[to_cf[d]], yv.strides[d] = y->strides[to_cf[d]];
  }
  xa->t = &xv, wa->t = &wv, e->outs[0] = &yv;
  int rc = eval_conv(e);
  xa->t = x, wa->t = w, e->outs[0] = y;
  return rc;
}

/* ---------------------------------------------------------------- pooling and resampling */

/* Pooling over the last 1, 2 or 3 dims: 1-d and 2-d pooling are 3-d pooling of depth and height 1. */
int eval_pool(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *out = out0(e);
  bool is_max = strstr(e->n->op->name, "max_pool") != NULL;
  RArg *ka = A(e, "kernel_size"), *sa = A(e, "stride"), *pa = A(e, "padding"), *da = A(e, "dilation");
  int nsp = e->n->op->args[ops_arg_index(e->n->op, "kernel_size")].fixed_len, off = 3 - nsp;
  int64_t k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pd[3] = {0, 0, 0}, dl[3] = {1, 1, 1}, in[3] = {1, 1, 1}, on[3] = {1, 1, 1};
  for (int i = 0; i < nsp; i++) {
    k[i + off] = ka->is[ka->n == 1 ? 0 : i];
    st[i + off] = sa->n == 0 ? k[i + off] : sa->is[sa->n == 1 ? 0 : i];
    pd[i + off] = pa->is[pa->n == 1 ? 0 : i];
    if (da) dl[i + off] = da->is[da->n == 1 ? 0 : i];
    in[i + off] = x->sizes[x->rank - nsp + i];
    on[i + off] = out->sizes[out->rank - nsp + i];
  }
  int64_t vol = in[0] * in[1] * in[2], ovol = on[0] * on[1] * on[2];
  int64_t planes = vol != 0 ? tensor_numel(x) / vol : 0;
  bool cip = A(e, "count_include_pad") ? B(e, "count_include_pad") : true;
  RArg *dov = A(e, "divisor_override");
  double *xv = read_f64(I, x), *ov = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *ov);
  int64_t *iv = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *iv);
  for (int64_t p = 0; p < planes; p++)
    for (int64_t o = 0; o < ovol; o++) {
      int64_t oc[3] = {o / (on[1] * on[2]), o / on[2] % on[1], o % on[2]};
      const double *xp = xv + p * vol;
      int64_t lo[3], hi[3], pool = 1, cnt = 1;
      if (is_max) {
        double m = -INFINITY;
        int64_t mi = -1;
        for (int64_t a = 0; a < k[0]; a++)
          for (int64_t b = 0; b < k[1]; b++)
            for (int64_t cc = 0; cc < k[2]; cc++) {
              int64_t q[3] = {oc[0] * st[0] - pd[0] + a * dl[0], oc[1] * st[1] - pd[1] + b * dl[1], oc[2] * st[2] - pd[2] + cc * dl[2]};
              if (q[0] < 0 || q[0] >= in[0] || q[1] < 0 || q[1] >= in[1] || q[2] < 0 || q[2] >= in[2]) continue;
              int64_t at = (q[0] * in[1] + q[1]) * in[2] + q[2];
              double v = xp[at];
              if (mi < 0 || v > m || isnan(v)) { if (!(mi >= 0 && isnan(m))) { m = v; mi = at; } }
            }
        ov[p * ovol + o] = m;
        iv[p * ovol + o] = mi;
        continue;
      }
      /* the window clipped to the padded input (count_include_pad's divisor), then to the input */
      for (int i = 0; i < 3; i++) {
        lo[i] = oc[i] * st[i] - pd[i];
        hi[i] = lo[i] + k[i] < in[i] + pd[i] ? lo[i] + k[i] : in[i] + pd[i];
        pool *= hi[i] - lo[i];
        if (lo[i] < 0) lo[i] = 0;
        if (hi[i] > in[i]) hi[i] = in[i];
        cnt *= hi[i] - lo[i];
      }
      double sum = 0;
      for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b = lo[1]; b < hi[1]; b++)
          for (int64_t cc = lo[2]; cc < hi[2]; cc++) sum += xp[(a * in[1] + b) * in[2] + cc];
      int64_t div = dov && dov->k == AK_INT ? dov->i : cip ? pool : cnt;
      ov[p * ovol + o] = sum / (double)div;
    }
  write_f64(out, ov);
  if (e->n->nouts == 2) write_i64(e->outs[1], iv);
  return 0;
}

/* _max_pool_nhwc: max_pool2d on NCHW views of its input and result */
int eval_pool_nhwc(E *e) {
  static const int to_cf[4] = {0, 3, 1, 2};
  RArg *xa = A(e, "self");
  Tensor *x = xa->t, *y = e->outs[0], xv = *x, yv = *y;
  for (int d = 0; d < 4; d++) {
    xv.sizes[d] = x->sizes[to_cf[d]], xv.strides[d] = x->strides[to_cf[d]];
    yv.sizes[d] = y->sizes[to_cf[d]], yv.strides[d] = y->strides[to_cf[d]];
  }
  xa->t = &xv, e->outs[0] = &yv;
  int rc = eval_pool(e);
  xa->t = x, e->outs[0] = y;
  return rc;
}

/* Adaptive pooling over the last 1, 2 or 3 dims: output i averages (or maxes) input
 * [floor(i in / out), ceil((i + 1) in / out)) in each. */
int eval_adaptive_pool(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *out = out0(e);
  bool is_max = strstr(e->n->op->name, "max") != NULL;
  int nsp = e->n->op->args[ops_arg_index(e->n->op, "output_size")].fixed_len, off = 3 - nsp;
  int64_t in[3] = {1, 1, 1}, on[3] = {1, 1, 1};
  for (int i = 0; i < nsp; i++) {
    in[i + off] = x->sizes[x->rank - nsp + i];
    on[i + off] = out->sizes[out->rank - nsp + i];
  }
  int64_t vol = in[0] * in[1] * in[2], ovol = on[0] * on[1] * on[2];
  int64_t planes = vol != 0 ? tensor_numel(x) / vol : 0;
  double *xv = read_f64(I, x), *ov = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *ov);
  int64_t *iv = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *iv);
  for (int64_t p = 0; p < planes; p++)
    for (int64_t o = 0; o < ovol; o++) {
      int64_t oc[3] = {o / (on[1] * on[2]), o / on[2] % on[1], o % on[2]}, lo[3], hi[3];
      for (int i = 0; i < 3; i++) {
        lo[i] = oc[i] * in[i] / on[i];
        hi[i] = ((oc[i] + 1) * in[i] + on[i] - 1) / on[i];
      }
      double sum = 0, m = -INFINITY;
      int64_t mi = -1;
      for (int64_t a = lo[0]; a < hi[0]; a++)
        for (int64_t b = lo[1]; b < hi[1]; b++)
          for (int64_t cc = lo[2]; cc < hi[2]; cc++) {
            int64_t at = (a * in[1] + b) * in[2] + cc;
            double v = xv[p * vol + at];
            sum += v;
            if (mi < 0 || v > m || (isnan(v) && !isnan(m))) { m = v; mi = at; }
          }
      ov[p * ovol + o] = is_max ? m : sum / (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
      iv[p * ovol + o] = mi;
    }
  write_f64(out, ov);
  if (e->n->nouts == 2) write_i64(e->outs[1], iv);
  return 0;
}

static int64_t nearest_src(int64_t o, int64_t in, int64_t out, double scale_factor) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  float scale = scale_factor > 0 ? (float)(1.0 / scale_factor) : (float)in / (float)out;
  int64_t s = gg_f64_to_i64(floorf((float)o * scale));
  return s < in - 1 ? s : in - 1;
}

/* PyTorch's area_pixel_compute_source_index for linear modes */
static double linear_src(int64_t o, int64_t in, int64_t out, double scale_factor, bool align) {
  if (align) return out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0;
  double scale = scale_factor > 0 ? 1.0 / scale_factor : (double)in / (double)out;
  double s = scale * ((double)o + 0.5) - 0.5;
  return s < 0 ? 0 : s;
}

/* bicubic: PyTorch's source index without clamping, taps clamped into the input, A = -0.75 */
static double cubic_src(int64_t o, int64_t in, int64_t out, double scale_factor, bool align) {
  if (align) return out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0;
  double scale = scale_factor > 0 ? 1.0 / scale_factor : (double)in / (double)out;
  return scale * ((double)o + 0.5) - 0.5;
}
static void cubic_coeffs(double t, double *c) {
  double A = -0.75;
  c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

int eval_upsample(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "input") ? T(e, "input") : T(e, "self"), *out = out0(e);
  RArg *sf = A(e, "scale_factors");
  double sc[2] = {0, 0};
  if (sf && sf->k == AK_FLOATS) { sc[0] = sf->fs[0]; sc[1] = sf->fs[1]; }
  else { sc[0] = F64(e, "scales_h", 0); sc[1] = F64(e, "scales_w", 0); }
  bool bilinear = strstr(e->n->op->name, "bilinear") != NULL, align = B(e, "align_corners");
  int64_t H = x->sizes[2], W = x->sizes[3], OH = out->sizes[2], OW = out->sizes[3], planes = x->sizes[0] * x->sizes[1];
  double *xv = read_f64(I, x), *ov = arena_array(I->c->arena, (size_t)tensor_numel(out) + 1, sizeof *ov);
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        const double *xp = xv + p * H * W;
        double v;
        if (strstr(e->n->op->name, "bicubic")) {
          double sh = cubic_src(oh, H, OH, sc[0], align), sw = cubic_src(ow, W, OW, sc[1], align), ch[4], cw[4];
          double fh = floor(sh), fw = floor(sw);
          cubic_coeffs(sh - fh, ch);
          cubic_coeffs(sw - fw, cw);
          v = 0;
          for (int a = 0; a < 4; a++) {
            double row = 0, hh = fh - 1 + a;
            int64_t h = hh < 0 ? 0 : hh > (double)(H - 1) ? H - 1 : (int64_t)hh;
            for (int b = 0; b < 4; b++) {
              double ww = fw - 1 + b;
              int64_t w = ww < 0 ? 0 : ww > (double)(W - 1) ? W - 1 : (int64_t)ww;
              row += cw[b] * xp[h * W + w];
            }
            v += ch[a] * row;
          }
        } else if (!bilinear) v = xp[nearest_src(oh, H, OH, sc[0]) * W + nearest_src(ow, W, OW, sc[1])];
        else {
          double sh = linear_src(oh, H, OH, sc[0], align), sw = linear_src(ow, W, OW, sc[1], align);
          int64_t h0 = gg_f64_to_i64(sh), w0 = gg_f64_to_i64(sw), h1 = h0 + (h0 < H - 1), w1 = w0 + (w0 < W - 1);
          double lh = sh - (double)h0, lw = sw - (double)w0;
          v = (1 - lh) * ((1 - lw) * xp[h0 * W + w0] + lw * xp[h0 * W + w1]) + lh * ((1 - lw) * xp[h1 * W + w0] + lw * xp[h1 * W + w1]);
        }
        ov[(p * OH + oh) * OW + ow] = v;
      }
  write_f64(out, ov);
  return 0;
}

/* ---------------------------------------------------------------- normalization */

/* Normalize rows of x: out = (x - mean) * rstd * w[c] + b[c], with the channel of element j of row r
 * given by chan(r, j). Returns the per-row mean and rstd. */
typedef struct NormSpec { int64_t rows, len, inner; int64_t channels; int mode; } NormSpec;
enum { CH_LAST, CH_GROUP, CH_BATCH };

static void normalize(const double *x, double *out, int64_t rows, int64_t len, double eps, double *mean, double *rstd) {
  for (int64_t r = 0; r < rows; r++) {
    const double *row = x + r * len;
    double m = 0, v = 0;
    for (int64_t j = 0; j < len; j++) m += row[j];
    m /= (double)len;
    for (int64_t j = 0; j < len; j++) v += (row[j] - m) * (row[j] - m);
    v /= (double)len;
    double rs = 1.0 / sqrt(v + eps);
    for (int64_t j = 0; j < len; j++) out[r * len + j] = (row[j] - m) * rs;
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
}

static void mark_write(Interp *I, const Tensor *t);

int eval_norm(E *e) {
  Interp *I = e->I;
  const char *name = e->n->op->name;
  Tensor *x = T(e, "input"), *out = out0(e), *w = T(e, "weight"), *b = T(e, "bias");
  double eps = F64(e, "eps", 1e-5);
  int64_t numel = tensor_numel(x);
  double *xv = read_f64(I, x), *ov = arena_array(I->c->arena, (size_t)numel + 1, sizeof *ov);
  double *wv = w ? read_f64(I, w) : NULL, *bv = b ? read_f64(I, b) : NULL;
  if (strstr(name, "layer_norm")) {
    RArg *ns = A(e, "normalized_shape");
    int64_t len = 1;
    for (int i = 0; i < ns->n; i++) len *= ns->is[i];
    for (int i = 0; i < ns->n; i++)
      if (ns->is[i] != x->sizes[x->rank - ns->n + i]) return fail(e, "normalized_shape does not match the input's last dims");
    int64_t rows = len ? numel / len : 0;
    double *mean = arena_array(I->c->arena, (size_t)rows + 1, sizeof *mean), *rstd = arena_array(I->c->arena, (size_t)rows + 1, sizeof *rstd);
    normalize(xv, ov, rows, len, eps, mean, rstd);
    for (int64_t i = 0; i < numel; i++) ov[i] = ov[i] * (wv ? wv[i % len] : 1) + (bv ? bv[i % len] : 0);
    write_f64(out, ov);
    if (e->n->nouts == 3) { write_f64(e->outs[1], mean); write_f64(e->outs[2], rstd); }
    return 0;
  }
  if (!strcmp(name, "rms_norm")) {
    RArg *ns = A(e, "normalized_shape"), *ea = A(e, "eps");
    int64_t len = 1;
    for (int i = 0; i < ns->n; i++) len *= ns->is[i];
    /* eps None means the dtype's machine epsilon */
    double ep = ea && ea->k == AK_FLOAT ? ea->f : x->dtype == DT_F64 ? 2.220446049250313e-16 : x->dtype == DT_F16 ? 0.0009765625 : x->dtype == DT_BF16 ? 0.0078125 : 1.1920928955078125e-07;
    for (int64_t r = 0; len && r < numel / len; r++) {
      double ss = 0;
      for (int64_t j = 0; j < len; j++) ss += xv[r * len + j] * xv[r * len + j];
      double rs = 1.0 / sqrt(ss / (double)len + ep);
      for (int64_t j = 0; j < len; j++) ov[r * len + j] = xv[r * len + j] * rs * (wv ? wv[j] : 1);
    }
    write_f64(out, ov);
    return 0;
  }
  int64_t N = x->sizes[0], C = x->rank > 1 ? x->sizes[1] : 1, HW = (N * C) != 0 ? numel / (N * C) : 0;
  bool instance = !strcmp(name, "instance_norm") && B(e, "use_input_stats");
  if (strstr(name, "group_norm") || instance) {
    int64_t G = instance ? C : strcmp(name, "group_norm") ? I64(e, "group", 1) : I64(e, "num_groups", 1);
    if (G <= 0 || C % G) return fail(e, "channels (%lld) must divide into %lld groups", (long long)C, (long long)G);
    int64_t rows = N * G, len = C / G * HW;
    double *mean = arena_array(I->c->arena, (size_t)rows + 1, sizeof *mean), *rstd = arena_array(I->c->arena, (size_t)rows + 1, sizeof *rstd);
    normalize(xv, ov, rows, len, eps, mean, rstd);
    for (int64_t i = 0; i < numel; i++) {
      int64_t c = (i / HW) % C;
      ov[i] = ov[i] * (wv ? wv[c] : 1) + (bv ? bv[c] : 0);
    }
    write_f64(out, ov);
    if (e->n->nouts == 3) { write_f64(e->outs[1], mean); write_f64(e->outs[2], rstd); }
    return 0;
  }
  /* batch norm: per channel over (N, spatial) */
  Tensor *rm = T(e, "running_mean"), *rv = T(e, "running_var");
  bool whole = !strcmp(name, "_batch_norm_train");   /* --train's own: statistics only, and the biased variance */
  bool training = whole || !strcmp(name, "_native_batch_norm_legit.no_stats") || B(e, "training");
  if (!training && (!rm || !rv)) return fail(e, "evaluation mode needs running_mean and running_var");
  double mom = F64(e, "momentum", 0.1);
  double *mean = arena_array(I->c->arena, (size_t)C + 1, sizeof *mean), *invstd = arena_array(I->c->arena, (size_t)C + 1, sizeof *invstd);
  double *bvar = arena_array(I->c->arena, (size_t)C + 1, sizeof *bvar);
  double *rmv = rm ? read_f64(I, rm) : NULL, *rvv = rv ? read_f64(I, rv) : NULL;
  int64_t cnt = N * HW;
  for (int64_t c = 0; c < C; c++) {
    double m = 0, v = 0;
    if (training) {
      for (int64_t n = 0; n < N; n++) for (int64_t j = 0; j < HW; j++) m += xv[(n * C + c) * HW + j];
      m /= (double)cnt;
      for (int64_t n = 0; n < N; n++) for (int64_t j = 0; j < HW; j++) { double d = xv[(n * C + c) * HW + j] - m; v += d * d; }
      double biased = v / (double)cnt;
      if (rmv) rmv[c] = (1 - mom) * rmv[c] + mom * m;
      if (rvv) rvv[c] = (1 - mom) * rvv[c] + mom * (cnt > 1 ? v / (double)(cnt - 1) : biased);
      v = biased;
    } else { m = rmv[c]; v = rvv[c]; }
    bvar[c] = v;
    mean[c] = m;
    invstd[c] = 1.0 / sqrt(v + eps);
    for (int64_t n = 0; n < N; n++)
      for (int64_t j = 0; j < HW; j++) {
        int64_t i = (n * C + c) * HW + j;
        ov[i] = (xv[i] - m) * invstd[c] * (wv ? wv[c] : 1) + (bv ? bv[c] : 0);
      }
  }
  write_f64(out, ov);
  if (!strcmp(name, "batch_norm") || !strcmp(name, "_native_batch_norm_legit")) {
    if (training && rm) { write_f64(rm, rmv); mark_write(I, rm); }   /* these update the statistics in place */
    if (training && rv) { write_f64(rv, rvv); mark_write(I, rv); }
    if (!strcmp(name, "batch_norm")) return 0;
  }
  if (training) { write_f64(e->outs[1], mean); write_f64(e->outs[2], invstd); }
  if (whole) write_f64(e->outs[3], bvar);
  if (e->n->nouts == 5) {
    write_f64(e->outs[3], rmv);
    write_f64(e->outs[4], rvv);
  }
  return 0;
}

/* ---------------------------------------------------------------- attention */

/* Attention in double: scaled_dot_product_attention, and --train's attention kept whole
 * (_attention_train, _attention_train_backward). Batch-head b of the query reads batch-head bk(b) of
 * the key and value (grouped heads: hq / hk query heads share one); the scores of row i are
 * recomputed by att_scores; the log-sum-exp of a row with every key left out is -inf, its
 * probabilities zeros (a fully masked row gives zeros, as PyTorch's math path). */
typedef struct AttIn { double *q, *k, *v, *m; bool mbool, causal; double scale; int64_t nb, L, S, D, Dv, hq, hk; } AttIn;

static int64_t att_kv(const AttIn *a, int64_t b) { return b / a->hq * a->hk + b % a->hq / (a->hq / a->hk); }

static int att_in(E *e, AttIn *a) {
  Interp *I = e->I;
  Tensor *q = T(e, "query"), *k = T(e, "key"), *v = T(e, "value"), *mask = T(e, "attn_mask");
  int r = q->rank;
  a->L = q->sizes[r - 2], a->D = q->sizes[r - 1], a->S = k->sizes[r - 2], a->Dv = v->sizes[r - 1];
  a->hq = r >= 3 ? q->sizes[r - 3] : 1, a->hk = r >= 3 ? k->sizes[r - 3] : 1;
  if (a->hq != a->hk && (a->hk == 0 || a->hq % a->hk)) return fail(e, "query has %lld heads, key %lld", (long long)a->hq, (long long)a->hk);
  a->nb = a->L * a->D != 0 ? tensor_numel(q) / (a->L * a->D) : 0;
  RArg *sa = A(e, "scale");
  a->scale = sa && sa->k == AK_FLOAT ? sa->f : 1.0 / sqrt((double)a->D), a->causal = B(e, "is_causal");
  a->q = read_f64(I, q), a->k = read_f64(I, k), a->v = read_f64(I, v), a->m = NULL, a->mbool = false;
  if (mask) {
    int64_t ms[GG_MAX_RANK];
    memcpy(ms, q->sizes, sizeof ms);
    ms[r - 1] = a->S;
    if (mask->rank > r) return fail(e, "attn_mask has too many dims");
    a->m = read_f64(I, expand_to(I, mask, r, ms));
    a->mbool = mask->dtype == DT_BOOL;
  }
  return 0;
}

static void att_scores(const AttIn *a, int64_t b, int64_t i, double *sc) {
  int64_t bk = att_kv(a, b);
  for (int64_t j = 0; j < a->S; j++) {
    double s = 0;
    for (int64_t d = 0; d < a->D; d++) s += a->q[(b * a->L + i) * a->D + d] * a->k[(bk * a->S + j) * a->D + d];
    s *= a->scale;
    if (a->causal && j > i) s = -INFINITY;
    if (a->m) {
      double mk = a->m[(b * a->L + i) * a->S + j];
      if (a->mbool) { if (mk == 0) s = -INFINITY; }
      else s += mk;
    }
    sc[j] = s;
  }
}

/* The output, and with `lse` each row's log-sum-exp (outs[1]). */
static int att_forward(E *e, bool lse) {
  AttIn a;
  if (att_in(e, &a)) return -1;
  Arena *ar = e->I->c->arena;
  double *ov = arena_array(ar, (size_t)(a.nb * a.L * a.Dv) + 1, sizeof *ov), *lv = arena_array(ar, (size_t)(a.nb * a.L) + 1, sizeof *lv);
  double *sc = arena_array(ar, (size_t)a.S + 1, sizeof *sc);
  for (int64_t b = 0; b < a.nb; b++)
    for (int64_t i = 0; i < a.L; i++) {
      int64_t bk = att_kv(&a, b);
      att_scores(&a, b, i, sc);
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < a.S; j++) m = sc[j] > m ? sc[j] : m;
      for (int64_t j = 0; j < a.S; j++) z += sc[j] = m == -INFINITY ? 0 : exp(sc[j] - m);
      lv[b * a.L + i] = z > 0 ? m + log(z) : -INFINITY;
      for (int64_t d = 0; d < a.Dv; d++) {
        double acc = 0;
        for (int64_t j = 0; j < a.S; j++) acc += sc[j] * a.v[(bk * a.S + j) * a.Dv + d];
        ov[(b * a.L + i) * a.Dv + d] = z > 0 ? acc / z : 0;
      }
    }
  write_f64(e->outs[0], ov);
  if (lse) write_f64(e->outs[1], lv);
  return 0;
}

int eval_sdpa(E *e) {
  if (F64(e, "dropout_p", 0) > 0) return fail(e, "attention dropout is random; export in eval mode or with dropout_p=0");
  Tensor *q = T(e, "query"), *k = T(e, "key");
  int r = q->rank;
  if (r >= 3 && q->sizes[r - 3] != k->sizes[r - 3] && !B(e, "enable_gqa"))
    return fail(e, "query has %lld heads, key %lld", (long long)q->sizes[r - 3], (long long)k->sizes[r - 3]);
  return att_forward(e, false);
}

int eval_attention_train(E *e) { return att_forward(e, true); }

int eval_attention_backward(E *e) {
  AttIn a;
  if (att_in(e, &a)) return -1;
  Interp *I = e->I;
  Arena *ar = I->c->arena;
  double *go = read_f64(I, T(e, "grad_out")), *o = read_f64(I, T(e, "out")), *lse = read_f64(I, T(e, "logsumexp"));
  double *dq = arena_array(ar, (size_t)(a.nb * a.L * a.D) + 1, sizeof *dq), *dk = arena_array(ar, (size_t)(a.nb * a.S * a.D) + 1, sizeof *dk);
  double *dv = arena_array(ar, (size_t)(a.nb * a.S * a.Dv) + 1, sizeof *dv), *sc = arena_array(ar, (size_t)a.S + 1, sizeof *sc);
  for (int64_t b = 0; b < a.nb; b++)
    for (int64_t i = 0; i < a.L; i++) {
      const double *gi = go + (b * a.L + i) * a.Dv, *oi = o + (b * a.L + i) * a.Dv, l = lse[b * a.L + i];
      double dsum = 0;
      for (int64_t d = 0; d < a.Dv; d++) dsum += gi[d] * oi[d];
      att_scores(&a, b, i, sc);
      int64_t bk = att_kv(&a, b);
      for (int64_t j = 0; j < a.S; j++) {
        double p = l == -INFINITY || sc[j] == -INFINITY ? 0 : exp(sc[j] - l), dp = 0;
        if (p == 0) continue;
        for (int64_t d = 0; d < a.Dv; d++) {
          dp += gi[d] * a.v[(bk * a.S + j) * a.Dv + d];
          dv[(bk * a.S + j) * a.Dv + d] += p * gi[d];
        }
        double ds = p * (dp - dsum) * a.scale;
        for (int64_t d = 0; d < a.D; d++) {
          dq[(b * a.L + i) * a.D + d] += ds * a.k[(bk * a.S + j) * a.D + d];
          dk[(bk * a.S + j) * a.D + d] += ds * a.q[(b * a.L + i) * a.D + d];
        }
      }
    }
  write_f64(e->outs[0], dq);
  write_f64(e->outs[1], dk);
  write_f64(e->outs[2], dv);
  return 0;
}

/* ---------------------------------------------------------------- losses */

int eval_loss(E *e) {
  Interp *I = e->I;
  const char *name = e->n->op->name;
  Tensor *x = T(e, "self"), *t = T(e, "target"), *out = out0(e);
  int64_t red = I64(e, "reduction", 1);
  if (loss_is_elementwise(name)) {
    int64_t n = 1, sizes[GG_MAX_RANK] = {0};
    int r = x->rank > t->rank ? x->rank : t->rank;
    for (int d = 0; d < r; d++) {
      int dx = d - (r - x->rank), dt = d - (r - t->rank);
      int64_t a = dx >= 0 ? x->sizes[dx] : 1, b = dt >= 0 ? t->sizes[dt] : 1;
      sizes[d] = a == 1 ? b : a;
      n *= sizes[d];
    }
    double *xv = read_f64(I, expand_to(I, x, r, sizes)), *tv = read_f64(I, expand_to(I, t, r, sizes));
    Tensor *wt = ops_arg_index(e->n->op, "weight") >= 0 ? T(e, "weight") : NULL, *pw = ops_arg_index(e->n->op, "pos_weight") >= 0 ? T(e, "pos_weight") : NULL;
    double *wv = wt ? read_f64(I, expand_to(I, wt, r, sizes)) : NULL, *pv = pw ? read_f64(I, expand_to(I, pw, r, sizes)) : NULL;
    double beta = !strcmp(name, "smooth_l1_loss") ? F64(e, "beta", 1) : F64(e, "delta", 1);
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
      double a = xv[i], y = tv[i], d = fabs(a - y), l;
      if (!strcmp(name, "mse_loss")) l = (a - y) * (a - y);
      else if (!strcmp(name, "l1_loss")) l = d;
      else if (!strcmp(name, "smooth_l1_loss")) l = d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
      else if (!strcmp(name, "huber_loss")) l = d < beta ? 0.5 * d * d : beta * (d - 0.5 * beta);
      else if (!strcmp(name, "binary_cross_entropy")) l = -(y * fmax(log(a), -100.0) + (1 - y) * fmax(log1p(-a), -100.0));
      else l = (1 - y) * a + (1 + ((pv ? pv[i] : 1) - 1) * y) * (log1p(exp(-fabs(a))) + fmax(-a, 0.0));
      if (wv) l *= wv[i];
      xv[i] = l;
      s += l;
    }
    if (red == 0) write_f64(out, xv);
    else { double v = red == 1 ? s / (double)n : s; write_f64(out, &v); }
    return 0;
  }
  bool is_nll = !strncmp(name, "nll_loss", 8);
  Tensor *wt = T(e, "weight");
  int64_t ignore = I64(e, "ignore_index", -100);
  double eps = F64(e, "label_smoothing", 0);
  int cd = x->rank > 1 ? 1 : 0;
  int64_t Cn = x->sizes[cd], rows = (Cn) != 0 ? tensor_numel(x) / Cn : 0;
  /* rows of class scores: move the class dim last */
  double *lp = read_f64(I, dim_last(I, x, cd));
  if (!is_nll)
    for (int64_t r = 0; r < rows; r++) {
      double *row = lp + r * Cn, m = -INFINITY, s = 0;
      for (int64_t c = 0; c < Cn; c++) if (row[c] > m) m = row[c];
      for (int64_t c = 0; c < Cn; c++) s += exp(row[c] - m);
      for (int64_t c = 0; c < Cn; c++) row[c] -= m + log(s);
    }
  double *wv = wt ? read_f64(I, wt) : NULL;
  double *loss = arena_array(I->c->arena, (size_t)rows + 1, sizeof *loss);
  double total = 0, wsum = 0;
  if (dtype_is_float(t->dtype)) {   /* class probabilities */
    double *tv = read_f64(I, dim_last(I, t, cd));
    for (int64_t r = 0; r < rows; r++) {
      double l = 0;
      for (int64_t c = 0; c < Cn; c++) l -= (wv ? wv[c] : 1) * lp[r * Cn + c] * ((1 - eps) * tv[r * Cn + c] + eps / (double)Cn);
      loss[r] = l;
      total += l;
    }
    wsum = (double)rows;
  } else {
    int64_t *tv = read_i64(I, t);
    double smooth_total = 0;
    for (int64_t r = 0; r < rows; r++) {
      int64_t c = tv[r];
      if (c == ignore) { loss[r] = 0; continue; }
      if (c < 0 || c >= Cn) return fail(e, "target %lld is out of bounds for %lld classes", (long long)c, (long long)Cn);
      double w = wv ? wv[c] : 1, nll = -w * lp[r * Cn + c], smooth = 0;
      for (int64_t k = 0; k < Cn; k++) smooth -= (wv ? wv[k] : 1) * lp[r * Cn + k];
      loss[r] = (1 - eps) * nll + eps / (double)Cn * smooth;
      total += nll;
      smooth_total += smooth;
      wsum += w;
    }
    total = (1 - eps) * total + eps / (double)Cn * smooth_total;
  }
  if (red == 0) write_f64(out, loss);
  else { double v = red == 1 ? total / wsum : total; write_f64(out, &v); }
  if (e->n->nouts == 2) write_f64(e->outs[1], &wsum);
  return 0;
}

/* The gradients of a plain convolution (as output_mask asks): every output element's gradient
 * flows back along the same index arithmetic as eval_conv's sum. */
int eval_conv_backward(E *e) {
  Interp *I = e->I;
  Tensor *gy = T(e, "grad_output"), *x = T(e, "input"), *w = T(e, "weight");
  int nsp = w->rank - 2;
  int64_t g = I64(e, "groups", 1);
  RArg *ma = A(e, "output_mask");
  ConvGeom cg;
  conv_geom(e, x, w, gy, nsp, &cg);
  int64_t *in = cg.in, *k = cg.k, *os = cg.os;
  int64_t Nb = x->sizes[0], Cin = x->sizes[1], Cout = w->sizes[0], Cin_g = Cin / g, Cout_g = Cout / g;
  int64_t isp = in[0] * in[1] * in[2], ksp = k[0] * k[1] * k[2];
  double *xv = read_f64(I, x), *wv = read_f64(I, w), *gv = read_f64(I, gy);
  double *gx = arena_array(I->c->arena, (size_t)tensor_numel(x) + 1, sizeof *gx);
  double *gw = arena_array(I->c->arena, (size_t)tensor_numel(w) + 1, sizeof *gw);
  double *gb = arena_array(I->c->arena, (size_t)Cout + 1, sizeof *gb);
  int64_t *xi = arena_array(I->c->arena, (size_t)ksp + 1, sizeof *xi), *wi = arena_array(I->c->arena, (size_t)ksp + 1, sizeof *wi);
  for (int64_t n = 0; n < Nb; n++)
    for (int64_t oc = 0; oc < Cout; oc++) {
      int64_t grp = oc / Cout_g;
      for (int64_t o0 = 0; o0 < os[0]; o0++)
        for (int64_t o1 = 0; o1 < os[1]; o1++)
          for (int64_t o2 = 0; o2 < os[2]; o2++) {
            double d = gv[((n * Cout + oc) * os[0] + o0) * os[1] * os[2] + o1 * os[2] + o2];
            gb[oc] += d;
            int64_t nt = conv_taps(&cg, o0, o1, o2, xi, wi);
            for (int64_t ic = 0; ic < Cin_g; ic++) {
              int64_t xo = (n * Cin + grp * Cin_g + ic) * isp, wo = (oc * Cin_g + ic) * ksp;
              for (int64_t t = 0; t < nt; t++) {
                gx[xo + xi[t]] += d * wv[wo + wi[t]];
                gw[wo + wi[t]] += d * xv[xo + xi[t]];
              }
            }
          }
    }
  double *res[3] = {gx, gw, gb};
  for (int i = 0; i < 3; i++) if (ma->n > i && ma->bs[i]) write_f64(e->outs[i], res[i]);
  return 0;
}

/* ---------------------------------------------------------------- views */

/* PyTorch's computeStride: strides for viewing t as sizes without copying, or false. */
static bool view_strides(const Tensor *t, int rank, const int64_t *sizes, int64_t *strides) {
  int64_t numel = tensor_numel(t);
  if (numel == 0 || t->rank == 0) {
    { int64_t s = 1; for (int d = rank - 1; d >= 0; d--) { strides[d] = s; s *= sizes[d] ? sizes[d] : 1; } }
    return true;
  }
  int view_d = rank - 1;
  int64_t chunk = t->strides[t->rank - 1], tn = 1, vn = 1;
  for (int td = t->rank - 1; td >= 0; td--) {
    tn *= t->sizes[td];
    if (td == 0 || (t->sizes[td - 1] != 1 && t->strides[td - 1] != tn * chunk)) {
      while (view_d >= 0 && (vn < tn || sizes[view_d] == 1)) {
        strides[view_d] = vn * chunk;
        vn *= sizes[view_d];
        view_d--;
      }
      if (vn != tn) return false;
      if (td > 0) { chunk = t->strides[td - 1]; tn = 1; vn = 1; }
    }
  }
  return view_d == -1;
}

/* A view op without a case above: view.c's layout rule (the compiled code's) at the tensor's concrete
 * layout. Its integer arguments are plain ints, so every result is a number. */
static int view_by_rule(E *e, const Tensor *x, Tensor *v) {
  Arena *a = e->I->c->arena;
  Layout in = {.rank = x->rank, .offset = expr_const(a, x->offset)}, out;
  for (int d = 0; d < x->rank; d++) {
    in.sizes[d] = expr_const(a, x->sizes[d]);
    in.strides[d] = expr_const(a, x->strides[d]);
  }
  int r = view_layouts(e->I->g, e->n, &in, &out);
  if (r < 0) return -1;
  bool ok = r == VIEW_ALIAS && expr_is_const(out.offset, &v->offset);
  for (int d = 0; ok && d < out.rank; d++) ok = expr_is_const(out.sizes[d], &v->sizes[d]) && expr_is_const(out.strides[d], &v->strides[d]);
  if (!ok) return fail(e, "no view evaluator");
  v->rank = out.rank;
  return 0;
}

int eval_reshape(E *e) {
  Tensor *x = T(e, "self");
  Value *ov = e->n->outs[0];
  Tensor *v = view_of(e->I, x);
  v->rank = ov->rank;
  memcpy(v->sizes, e->osizes[0], sizeof v->sizes);
  if (view_strides(x, v->rank, v->sizes, v->strides)) { e->outs[0] = v; return 0; }
  if (!strcmp(e->n->op->name, "view")) return fail(e, "view size is not compatible with the input's strides; use reshape");
  Tensor *c = tensor_new(e->I, x->dtype, v->rank, v->sizes);
  Tensor *xc = tensor_new(e->I, x->dtype, x->rank, x->sizes);
  copy_into(xc, x);
  c->st = xc->st;
  e->outs[0] = c;
  return 0;
}

int eval_view(E *e) {
  const char *name = e->n->op->name;
  Tensor *x = T(e, "self");
  Tensor *v = view_of(e->I, x);
  e->outs[0] = v;
  if (!strcmp(name, "alias") || !strcmp(name, "detach")) return 0;
  if (!strcmp(name, "as_strided")) {   /* the shape rule checked the reach; storage_offset absolute, as PyTorch's */
    RArg *sz = A(e, "size"), *st = A(e, "stride"), *so = A(e, "storage_offset");
    v->rank = sz->n;
    for (int d = 0; d < sz->n; d++) { v->sizes[d] = sz->is[d]; v->strides[d] = st->is[d]; }
    if (so && so->k == AK_INT) v->offset = so->i;
    return 0;
  }
  if (!strcmp(name, "expand_as")) { e->outs[0] = expand_to(e->I, x, e->n->outs[0]->rank, e->osizes[0]); return 0; }
  if (!strcmp(name, "movedim.int")) {
    int src, dst, perm[GG_MAX_RANK], k = 0;
    if (wrap_dim(e, I64(e, "source", 0), x->rank, &src) || wrap_dim(e, I64(e, "destination", 0), x->rank, &dst)) return -1;
    for (int d = 0; d < x->rank; d++) {
      if (k == dst) perm[k++] = src;
      if (d != src) perm[k++] = d;
    }
    if (k == dst) perm[k++] = src;
    if (x->rank) permute_view(v, perm);
    return 0;
  }
  if (!strcmp(name, "contiguous")) {
    if (tensor_is_contiguous(x)) return 0;
    e->outs[0] = tensor_new(e->I, x->dtype, x->rank, x->sizes);
    copy_into(e->outs[0], x);
    return 0;
  }
  if (!strcmp(name, "permute")) {
    RArg *p = A(e, "dims");
    int perm[GG_MAX_RANK];
    for (int i = 0; i < p->n; i++) if (wrap_dim(e, p->is[i], x->rank, &perm[i])) return -1;
    permute_view(v, perm);
    return 0;
  }
  if (!strcmp(name, "transpose.int") || !strcmp(name, "t")) {
    if (x->rank < 2) return 0;
    int a = 0, b = 1;
    if (!strcmp(name, "transpose.int") && (wrap_dim(e, I64(e, "dim0", 0), x->rank, &a) || wrap_dim(e, I64(e, "dim1", 1), x->rank, &b))) return -1;
    int64_t s = v->sizes[a]; v->sizes[a] = v->sizes[b]; v->sizes[b] = s;
    s = v->strides[a]; v->strides[a] = v->strides[b]; v->strides[b] = s;
    return 0;
  }
  if (!strcmp(name, "unsqueeze")) {
    int64_t d = I64(e, "dim", 0);
    if (d < 0) d += x->rank + 1;
    memmove(&v->sizes[d + 1], &v->sizes[d], sizeof(int64_t) * (size_t)(x->rank - d));
    memmove(&v->strides[d + 1], &v->strides[d], sizeof(int64_t) * (size_t)(x->rank - d));
    v->sizes[d] = 1;
    v->strides[d] = d + 1 < x->rank + 1 && d < x->rank ? x->strides[d] * x->sizes[d] : 1;
    v->rank++;
    return 0;
  }
  if (!strncmp(name, "squeeze", 7) || !strcmp(name, "expand")) {
    /* the output's sizes are known: keep the input's strides where sizes match */
    Value *ov = e->n->outs[0];
    if (!strcmp(name, "expand")) { e->outs[0] = expand_to(e->I, x, ov->rank, e->osizes[0]); return 0; }
    int k = 0;
    RArg *da = A(e, "dim");
    bool mask[GG_MAX_RANK] = {0};
    if (!da) for (int d = 0; d < x->rank; d++) mask[d] = true;
    else if (da->k == AK_INT) { int d; if (wrap_dim(e, da->i, x->rank, &d)) return -1; if (x->rank) mask[d] = true; }
    else for (int i = 0; i < da->n; i++) { int d; if (wrap_dim(e, da->is[i], x->rank, &d)) return -1; if (x->rank) mask[d] = true; }
    for (int d = 0; d < x->rank; d++)
      if (!(mask[d] && x->sizes[d] == 1)) { v->sizes[k] = x->sizes[d]; v->strides[k] = x->strides[d]; k++; }
    v->rank = k;
    return 0;
  }
  if (!strcmp(name, "select.int")) {
    int d;
    if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
    int64_t i = I64(e, "index", 0);
    if (i < -x->sizes[d] || i >= x->sizes[d]) return fail(e, "index %lld out of range for size %lld", (long long)i, (long long)x->sizes[d]);
    if (i < 0) i += x->sizes[d];
    v->offset += i * x->strides[d];
    memmove(&v->sizes[d], &v->sizes[d + 1], sizeof(int64_t) * (size_t)(x->rank - d - 1));
    memmove(&v->strides[d], &v->strides[d + 1], sizeof(int64_t) * (size_t)(x->rank - d - 1));
    v->rank--;
    return 0;
  }
  if (!strcmp(name, "slice.Tensor") || !strcmp(name, "narrow")) {
    int d;
    if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
    int64_t size = x->sizes[d], start, step = 1;
    if (!strcmp(name, "narrow")) {
      start = I64(e, "start", 0);
      if (start < 0) start += size;
      int64_t len = I64(e, "length", 0);
      if (start < 0 || len < 0 || start + len > size) return fail(e, "narrow range out of bounds");
      v->sizes[d] = len;
    } else {
      RArg *sa = A(e, "start"), *ea = A(e, "end");
      start = sa->k == AK_INT ? sa->i : 0;
      int64_t end = ea->k == AK_INT ? ea->i : size;
      step = I64(e, "step", 1);
      if (start < 0) start += size;
      if (end < 0) end += size;
      if (start < 0) start = 0;
      if (start > size) start = size;
      if (end > size) end = size;
      if (end < start) end = start;
      v->sizes[d] = (end - start + step - 1) / step;
    }
    v->offset += start * x->strides[d];
    v->strides[d] *= step;
    return 0;
  }
  return view_by_rule(e, x, v);
}

int eval_split(E *e) {
  Tensor *x = T(e, "self");
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
  bool unbind = !strcmp(e->n->op->name, "unbind.int");
  int64_t at = 0;
  for (int i = 0; i < e->n->nouts; i++) {
    Tensor *v = view_of(e->I, x);
    v->offset += at * x->strides[d];
    if (unbind) {
      memmove(&v->sizes[d], &v->sizes[d + 1], sizeof(int64_t) * (size_t)(x->rank - d - 1));
      memmove(&v->strides[d], &v->strides[d + 1], sizeof(int64_t) * (size_t)(x->rank - d - 1));
      v->rank--;
      at++;
    } else {
      v->sizes[d] = e->osizes[i][d];
      at += v->sizes[d];
    }
    e->outs[i] = v;
  }
  return 0;
}

/* ---------------------------------------------------------------- data movement */

int eval_cat(E *e) {
  Interp *I = e->I;
  RArg *ta = A(e, "tensors");
  Tensor *out = out0(e);
  bool stack = !strcmp(e->n->op->name, "stack");
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), out->rank, &d)) return -1;
  int64_t at = 0;
  for (int i = 0; i < ta->n; i++) {
    Tensor *t = ta->ts[i];
    if (!stack && t->rank == 1 && t->sizes[0] == 0 && out->rank != 1) continue;
    Tensor *dst = view_of(I, out);
    dst->offset += at * out->strides[d];
    if (stack) {
      memmove(&dst->sizes[d], &dst->sizes[d + 1], sizeof(int64_t) * (size_t)(out->rank - d - 1));
      memmove(&dst->strides[d], &dst->strides[d + 1], sizeof(int64_t) * (size_t)(out->rank - d - 1));
      dst->rank--;
      at++;
    } else {
      dst->sizes[d] = t->sizes[d];
      at += t->sizes[d];
    }
    copy_into(dst, t);
  }
  return 0;
}

/* Raw element copy between tensors of one dtype. */
static void copy_elem(Tensor *dst, int64_t di, const Tensor *src, int64_t si) {
  int es = dtype_info(dst->dtype)->size;
  if (dst->dtype == src->dtype) memcpy(elem_ptr(dst, di), elem_ptr(src, si), (size_t)es);
  else dtype_store_f64(dst->dtype, elem_ptr(dst, di), dtype_load_f64(src->dtype, elem_ptr(src, si)));
}

static int check_index(E *e, int64_t *i, int64_t size, int dim) {
  if (*i < -size || *i >= size) return fail(e, "index %lld is out of bounds for dimension %d with size %lld", (long long)*i, dim, (long long)size);
  if (*i < 0) *i += size;
  return 0;
}

/* linear index <-> multi-index over sizes */
static void unravel(int64_t i, int rank, const int64_t *sizes, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) { idx[d] = sizes[d] ? i % sizes[d] : 0; i = sizes[d] ? i / sizes[d] : 0; }
}

static int64_t ravel(int rank, const int64_t *sizes, const int64_t *idx) {
  int64_t i = 0;
  for (int d = 0; d < rank; d++) i = i * sizes[d] + idx[d];
  return i;
}

int eval_index_select(E *e) {
  Tensor *x = T(e, "self"), *ix = T(e, "index"), *out = out0(e);
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
  int64_t *iv = read_i64(e->I, ix), n = tensor_numel(out), idx[GG_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    unravel(i, out->rank, out->sizes, idx);
    int64_t k = iv[x->rank ? idx[d] : 0];   /* a 0-d self: one index, which must be 0 or -1 */
    if (check_index(e, &k, x->rank ? x->sizes[d] : 1, d)) return -1;
    if (x->rank) idx[d] = k;
    copy_elem(out, i, x, ravel(x->rank, x->sizes, idx));
  }
  return 0;
}

int eval_gather(E *e) {
  Tensor *x = T(e, "self"), *ix = T(e, "index"), *out = out0(e);
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
  int64_t *iv = read_i64(e->I, ix), n = tensor_numel(out), idx[GG_MAX_RANK];
  for (int dd = 0; dd < x->rank; dd++)
    if (dd != d && ix->sizes[dd] > x->sizes[dd]) return fail(e, "index is larger than self at dim %d", dd);
  for (int64_t i = 0; i < n; i++) {
    unravel(i, out->rank, out->sizes, idx);
    int64_t k = iv[i];   /* a 0-d self: every index must be 0 or -1 */
    if (check_index(e, &k, x->rank ? x->sizes[d] : 1, d)) return -1;
    if (x->rank) idx[d] = k;
    copy_elem(out, i, x, ravel(x->rank, x->sizes, idx));
  }
  return 0;
}

/* Advanced indexing's layout: the index tensors broadcast to bsz (rank br); when they stand in
 * adjacent dims the broadcast block replaces them in place, else it goes first (numpy's rule). rs:
 * the shape that x[indices] has. */
typedef struct IndexLayout {
  int first, last, br, rr;
  bool adjacent;
  int64_t bsz[GG_MAX_RANK], rs[GG_MAX_RANK * 2];
} IndexLayout;

static int index_layout(E *e, const Tensor *x, const RArg *ia, IndexLayout *L) {
  int count = 0;
  L->first = L->last = -1;
  L->br = 0;
  for (int i = 0; i < ia->n; i++) {
    const Tensor *t = ia->ts[i];
    if (!t) continue;
    if (t->dtype == DT_BOOL) return fail(e, "boolean mask indices are not supported");
    if (L->first < 0) L->first = i;
    L->last = i;
    count++;
    int r = L->br > t->rank ? L->br : t->rank;
    int64_t nb[GG_MAX_RANK];
    for (int d = 0; d < r; d++) {
      int da = d - (r - L->br), db = d - (r - t->rank);
      int64_t a = da >= 0 ? L->bsz[da] : 1, b = db >= 0 ? t->sizes[db] : 1;
      nb[d] = a == 1 ? b : a;
    }
    memcpy(L->bsz, nb, sizeof nb);
    L->br = r;
  }
  L->adjacent = L->last - L->first + 1 == count;
  L->rr = 0;
  if (L->adjacent) {
    for (int d = 0; d < L->first; d++) L->rs[L->rr++] = x->sizes[d];
    for (int d = 0; d < L->br; d++) L->rs[L->rr++] = L->bsz[d];
    for (int d = L->last + 1; d < x->rank; d++) L->rs[L->rr++] = x->sizes[d];
  } else {
    for (int d = 0; d < L->br; d++) L->rs[L->rr++] = L->bsz[d];
    for (int d = 0; d < x->rank; d++) if (d >= ia->n || !ia->ts[d]) L->rs[L->rr++] = x->sizes[d];
  }
  if (L->rr > GG_MAX_RANK) return fail(e, "too many dims");
  return 0;
}

int eval_index(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *out = out0(e);
  RArg *ia = A(e, "indices");
  IndexLayout L;
  if (index_layout(e, x, ia, &L)) return -1;
  int first = L.first, last = L.last, br = L.br;
  int64_t *bsz = L.bsz;
  int64_t *iv[GG_MAX_RANK] = {0};
  for (int i = 0; i < ia->n; i++) if (ia->ts[i]) iv[i] = read_i64(I, expand_to(I, ia->ts[i], br, bsz));
  bool adjacent = L.adjacent;
  int bstart = adjacent ? first : 0;   /* where the broadcast index dims sit in the output */
  int64_t n = tensor_numel(out), oidx[GG_MAX_RANK * 2], xidx[GG_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    unravel(i, out->rank, out->sizes, oidx);
    int64_t bl = ravel(br, bsz, oidx + bstart);
    /* output dims: adjacent indices put the broadcast block where they stand, others put it first */
    int od = adjacent ? 0 : br;
    for (int d = 0; d < x->rank; d++) {
      if (d < ia->n && ia->ts[d]) {
        int64_t k = iv[d][bl];
        if (check_index(e, &k, x->sizes[d], d)) return -1;
        xidx[d] = k;
      } else {
        if (adjacent && d > last && od < bstart + br) od = bstart + br;
        xidx[d] = oidx[od++];
      }
    }
    copy_elem(out, i, x, ravel(x->rank, x->sizes, xidx));
  }
  return 0;
}

int eval_embedding(E *e) {
  Tensor *w = T(e, "weight"), *ix = T(e, "indices"), *out = out0(e);
  int64_t *iv = read_i64(e->I, ix), n = tensor_numel(ix), D = w->sizes[1];
  for (int64_t i = 0; i < n; i++) {
    int64_t k = iv[i];
    if (k < 0 || k >= w->sizes[0]) return fail(e, "index %lld is out of range for an embedding of %lld rows", (long long)k, (long long)w->sizes[0]);
    for (int64_t j = 0; j < D; j++) copy_elem(out, i * D + j, w, k * D + j);
  }
  return 0;
}

int eval_tri(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e);
  if (x->rank < 2) return fail(e, "needs a matrix or a batch of matrices");
  bool lower = !strcmp(e->n->op->name, "tril");
  int64_t k = I64(e, "diagonal", 0), R = x->sizes[x->rank - 2], Cc = x->sizes[x->rank - 1], n = tensor_numel(x);
  int es = dtype_info(out->dtype)->size;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i % Cc, r = (i / Cc) % R;
    bool keep = lower ? c - r <= k : c - r >= k;
    if (keep) copy_elem(out, i, x, i);
    else memset(elem_ptr(out, i), 0, (size_t)es);
  }
  return 0;
}

int eval_diff(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *pre = T(e, "prepend"), *app = T(e, "append"), *out = out0(e);
  int d;
  if (wrap_dim(e, I64(e, "dim", -1), x->rank, &d)) return -1;
  int64_t nd = I64(e, "n", 1);
  /* concatenate prepend, self, append along d, then difference nd times */
  int64_t len = x->sizes[d] + (pre ? pre->sizes[d] : 0) + (app ? app->sizes[d] : 0);
  int64_t sz[GG_MAX_RANK];
  memcpy(sz, x->sizes, sizeof sz);
  sz[d] = len;
  Tensor *cat = tensor_new(I, DT_F64, x->rank, sz);
  if (!cat) return -1;
  int64_t at = 0;
  Tensor *parts[3] = {pre, x, app};
  for (int p = 0; p < 3; p++) {
    if (!parts[p]) continue;
    Tensor *dst = view_of(I, cat);
    dst->offset += at * cat->strides[d];
    dst->sizes[d] = parts[p]->sizes[d];
    copy_into(dst, parts[p]);
    at += parts[p]->sizes[d];
  }
  double *v = read_f64(I, dim_last(I, cat, d));
  int64_t rows = len ? tensor_numel(cat) / len : 0, cur = len;
  for (int64_t k = 0; k < nd && cur > 0; k++, cur--)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j + 1 < cur; j++) {
        double a = v[r * len + j + 1], b = v[r * len + j];
        v[r * len + j] = x->dtype == DT_BOOL ? (double)((a != 0) != (b != 0)) : a - b;
      }
  Tensor *ov = dim_last(I, out, d);
  int64_t olen = out->sizes[d];
  double *res = arena_array(I->c->arena, (size_t)(rows * olen) + 1, sizeof *res);
  for (int64_t r = 0; r < rows; r++) for (int64_t j = 0; j < olen; j++) res[r * olen + j] = v[r * len + j];
  write_f64(ov, res);
  return 0;
}

int eval_pad(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e);
  RArg *p = A(e, "pad") ? A(e, "pad") : A(e, "padding");
  int m = pad_mode(e->n);
  if (m < 0) return fail(e, "%s", "unknown pad mode");
  RArg *va = A(e, "value");
  double value = va && va->k != AK_NONE ? F64(e, "value", 0) : 0;
  int64_t before[GG_MAX_RANK] = {0};
  for (int i = 0; i < p->n / 2; i++) before[x->rank - 1 - i] = p->is[2 * i];
  for (int d = 0; d < x->rank; d++) {
    if (m == 1 && (before[d] >= x->sizes[d] || out->sizes[d] - x->sizes[d] - before[d] >= x->sizes[d]) && before[d] + out->sizes[d] != x->sizes[d] + before[d])
      return fail(e, "reflect padding must be smaller than the dim");
    if (m && x->sizes[d] == 0) return fail(e, "%s", "cannot pad an empty dim by reflecting, replicating or wrapping it");
  }
  int64_t n = tensor_numel(out), oi[GG_MAX_RANK], xi[GG_MAX_RANK];
  uint8_t fill[8];
  dtype_store_f64(out->dtype, fill, value);
  int es = dtype_info(out->dtype)->size;
  for (int64_t i = 0; i < n; i++) {
    unravel(i, out->rank, out->sizes, oi);
    bool inside = true;
    for (int d = 0; d < x->rank; d++) {
      int64_t s = oi[d] - before[d], L = x->sizes[d];
      if (s < 0 || s >= L) {
        if (m == 0) { inside = false; break; }
        if (m == 1) { s = s < 0 ? -s : 2 * (L - 1) - s; }
        else if (m == 2) s = s < 0 ? 0 : L - 1;
        else s = ((s % L) + L) % L;
      }
      xi[d] = s;
    }
    if (inside) copy_elem(out, i, x, ravel(x->rank, x->sizes, xi));
    else memcpy(elem_ptr(out, i), fill, (size_t)es);
  }
  return 0;
}

int eval_broadcast_tensors(E *e) {
  RArg *ta = A(e, "tensors");
  for (int i = 0; i < ta->n; i++) {
    /* a view in PyTorch; a copy here keeps outputs independent of later in-place ops, which the
       functional graphs torch.export gives never apply to these */
    e->outs[i] = tensor_new(e->I, ta->ts[i]->dtype, e->n->outs[i]->rank, e->osizes[i]);
    copy_into(e->outs[i], expand_to(e->I, ta->ts[i], e->n->outs[i]->rank, e->osizes[i]));
  }
  return 0;
}

int eval_flip(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e);
  RArg *da = A(e, "dims");
  bool flip[GG_MAX_RANK] = {0};
  for (int i = 0; i < da->n; i++) { int d; if (wrap_dim(e, da->is[i], x->rank, &d)) return -1; flip[d] = true; }
  int64_t n = tensor_numel(out), idx[GG_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    unravel(i, out->rank, out->sizes, idx);
    for (int d = 0; d < x->rank; d++) if (flip[d]) idx[d] = x->sizes[d] - 1 - idx[d];
    copy_elem(out, i, x, ravel(x->rank, x->sizes, idx));
  }
  return 0;
}

int eval_roll(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e);
  RArg *sa = A(e, "shifts"), *da = A(e, "dims");
  int64_t shift[GG_MAX_RANK] = {0}, n = tensor_numel(out), idx[GG_MAX_RANK];
  bool flat = da->n == 0;
  if (!flat && da->n != sa->n) return fail(e, "shifts and dims differ in length");
  for (int i = 0; !flat && i < da->n; i++) { int d; if (wrap_dim(e, da->is[i], x->rank, &d)) return -1; shift[d] += sa->is[i]; }
  for (int64_t i = 0; i < n; i++) {
    if (flat) { int64_t s = n ? ((i - sa->is[0]) % n + n) % n : 0; copy_elem(out, i, x, s); continue; }
    unravel(i, out->rank, out->sizes, idx);
    for (int d = 0; d < x->rank; d++) if (x->sizes[d]) idx[d] = ((idx[d] - shift[d]) % x->sizes[d] + x->sizes[d]) % x->sizes[d];
    copy_elem(out, i, x, ravel(x->rank, x->sizes, idx));
  }
  return 0;
}

int eval_repeat(E *e) {
  Tensor *x = T(e, "self"), *out = out0(e);
  int lead = out->rank - x->rank;
  int64_t n = tensor_numel(out), oi[GG_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    unravel(i, out->rank, out->sizes, oi);
    for (int d = 0; d < x->rank; d++) oi[d] = oi[d + lead] % x->sizes[d];
    copy_elem(out, i, x, ravel(x->rank, x->sizes, oi));
  }
  return 0;
}

/* out = self; out[indices] = values (broadcast over the indexed shape), or += with accumulate */
int eval_index_put(E *e) {
  Interp *I = e->I;
  Tensor *x = T(e, "self"), *vals = T(e, "values"), *out = out0(e);
  RArg *ia = A(e, "indices");
  bool acc = B(e, "accumulate");
  copy_into(out, x);
  /* the positions written are those x[indices] reads: reuse the index rule on a tensor of offsets */
  Tensor *pos = tensor_new(I, DT_I64, x->rank, x->sizes);
  for (int64_t i = 0; i < tensor_numel(pos); i++) dtype_store_i64(DT_I64, elem_ptr(pos, i), i);
  Node *n = e->n;
  const OpDef *index = ops_find("index.Tensor");
  Node sub = {.name = n->name, .target = n->target, .op = index};
  RArg args[2] = {{.k = AK_TENSOR, .t = pos}, *ia};
  IndexLayout L;
  if (index_layout(e, x, ia, &L)) return -1;
  int rr = L.rr;
  int64_t *rs = L.rs;
  Tensor *where = tensor_new(I, DT_I64, rr, rs);
  Tensor *outs[1] = {where};
  int64_t osz[1][GG_MAX_RANK];
  memcpy(osz[0], rs, sizeof(int64_t) * (size_t)rr);
  E se = {.I = I, .n = &sub, .args = args, .outs = outs, .osizes = osz};
  sub.args = n->args;
  if (eval_index(&se)) return -1;
  int64_t nw = tensor_numel(where);
  Tensor *vb = expand_to(I, vals, rr, rs);
  bool ints = !dtype_is_float(out->dtype);
  for (int64_t i = 0; i < nw; i++) {
    int64_t p = dtype_load_i64(DT_I64, elem_ptr(where, i));
    uint8_t *dst = elem_ptr(out, p);
    const uint8_t *src = elem_ptr(vb, i);
    if (ints) dtype_store_i64(out->dtype, dst, (acc ? dtype_load_i64(out->dtype, dst) : 0) + dtype_load_i64(vb->dtype, src));
    else dtype_store_f64(out->dtype, dst, (acc ? dtype_load_f64(out->dtype, dst) : 0) + dtype_load_f64(vb->dtype, src));
  }
  return 0;
}

/* select_scatter / slice_scatter: a copy of self with the view replaced by src */
int eval_view_scatter(E *e) {
  Tensor *x = T(e, "self"), *src = T(e, "src"), *out = out0(e);
  copy_into(out, x);
  Tensor *v = view_of(e->I, out);
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), out->rank, &d)) return -1;
  if (!strcmp(e->n->op->name, "select_scatter")) {
    int64_t i = I64(e, "index", 0);
    if (check_index(e, &i, out->sizes[d], d)) return -1;
    v->offset += i * out->strides[d];
    memmove(&v->sizes[d], &v->sizes[d + 1], sizeof(int64_t) * (size_t)(out->rank - d - 1));
    memmove(&v->strides[d], &v->strides[d + 1], sizeof(int64_t) * (size_t)(out->rank - d - 1));
    v->rank--;
  } else {
    RArg *sa = A(e, "start");
    int64_t size = out->sizes[d], start = sa->k == AK_INT ? sa->i : 0, step = I64(e, "step", 1);
    if (start < 0) start += size;
    if (start < 0) start = 0;
    if (start > size) start = size;
    v->offset += start * out->strides[d];
    v->strides[d] *= step;
    v->sizes[d] = src->sizes[d];
  }
  if (v->rank != src->rank) return fail(e, "src does not fit the view");
  for (int k = 0; k < v->rank; k++) if (v->sizes[k] != src->sizes[k]) return fail(e, "src does not fit the view");
  copy_into(v, src);
  return 0;
}

/* scatter_reduce.two: src's values combined into self at index by sum, prod, mean, amax or amin; with
 * include_self=False the positions written start from src's values alone. In float64 / int64. */
static int scatter_reduce(E *e, Tensor *x, Tensor *ix, Tensor *src, Tensor *out, int d) {
  const char *red = A(e, "reduce")->s;
  bool self = B(e, "include_self"), fl = dtype_is_float(out->dtype);
  int64_t n = tensor_numel(ix), m = tensor_numel(x), idx[GG_MAX_RANK];
  int64_t *iv = read_i64(e->I, ix), *cnt = arena_array(e->I->c->arena, (size_t)m + 1, sizeof *cnt);
  double *acc = read_f64(e->I, x);
  int64_t *iacc = read_i64(e->I, x);
  for (int64_t i = 0; i < n; i++) {
    unravel(i, ix->rank, ix->sizes, idx);
    int64_t si = ravel(src->rank, src->sizes, idx);
    if (x->rank) {
      int64_t k = iv[i];
      if (check_index(e, &k, x->sizes[d], d)) return -1;
      idx[d] = k;
    }
    int64_t o = ravel(x->rank, x->sizes, idx);
    double v = dtype_load_f64(src->dtype, elem_ptr(src, si));
    int64_t w = dtype_load_i64(src->dtype, elem_ptr(src, si));
    bool first = !self && cnt[o] == 0;
    cnt[o]++;
    if (!strcmp(red, "sum") || !strcmp(red, "mean")) { acc[o] = first ? v : acc[o] + v; iacc[o] = first ? w : iacc[o] + w; }
    else if (!strcmp(red, "prod")) { acc[o] = first ? v : acc[o] * v; iacc[o] = first ? w : iacc[o] * w; }
    else if (!strcmp(red, "amax")) { acc[o] = first || v > acc[o] || isnan(v) ? (isnan(acc[o]) && !first ? acc[o] : v) : acc[o]; iacc[o] = first || w > iacc[o] ? w : iacc[o]; }
    else { acc[o] = first || v < acc[o] || isnan(v) ? (isnan(acc[o]) && !first ? acc[o] : v) : acc[o]; iacc[o] = first || w < iacc[o] ? w : iacc[o]; }
  }
  if (!strcmp(red, "mean"))
    for (int64_t o = 0; o < m; o++) {
      int64_t c = cnt[o] + (self ? 1 : 0);
      if (!cnt[o] || !c) continue;
      acc[o] /= (double)c;
      iacc[o] = (int64_t)floor((double)iacc[o] / (double)c);
    }
  if (fl) write_f64(out, acc); else write_i64(out, iacc);
  return 0;
}

int eval_scatter(E *e) {
  Tensor *x = T(e, "self"), *ix = T(e, "index"), *src = T(e, "src"), *out = out0(e);
  bool add = !strcmp(e->n->op->name, "scatter_add");
  double value = F64(e, "value", 0);
  int d;
  if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
  if (A(e, "reduce")) return scatter_reduce(e, x, ix, src, out, d);
  copy_into(out, x);
  int64_t *iv = read_i64(e->I, ix), n = tensor_numel(ix), idx[GG_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    unravel(i, ix->rank, ix->sizes, idx);
    int64_t si = src ? ravel(src->rank, src->sizes, idx) : 0;
    if (x->rank) {
      int64_t k = iv[i];
      if (check_index(e, &k, x->sizes[d], d)) return -1;
      idx[d] = k;
    }
    uint8_t *dst = elem_ptr(out, ravel(x->rank, x->sizes, idx));
    double v = src ? dtype_load_f64(src->dtype, elem_ptr(src, si)) : value;
    if (!dtype_is_float(out->dtype)) {
      RArg *va = src ? NULL : A(e, "value");
      int64_t w = src ? dtype_load_i64(src->dtype, elem_ptr(src, si)) : va && va->k == AK_INT ? va->i : gg_f64_to_i64(value);   /* integers exact */
      dtype_store_i64(out->dtype, dst, add ? dtype_load_i64(out->dtype, dst) + w : w);
    } else dtype_store_f64(out->dtype, dst, add ? dtype_load_f64(out->dtype, dst) + v : v);
  }
  return 0;
}

/* ---------------------------------------------------------------- creation and conversion */

int eval_eye(E *e) {
  Tensor *out = out0(e);
  int64_t n = tensor_numel(out), cols = out->sizes[1];
  for (int64_t i = 0; i < n; i++) dtype_store_f64(out->dtype, elem_ptr(out, i), i / cols == i % cols);
  return 0;
}

int eval_linspace(E *e) {
  Tensor *out = out0(e);
  double a = F64(e, "start", 0), b = F64(e, "end", 0);
  int64_t n = tensor_numel(out);
  double step = n > 1 ? (b - a) / (double)(n - 1) : 0;
  /* as PyTorch: the first half counts up from start, the second down from end */
  for (int64_t i = 0; i < n; i++) dtype_store_f64(out->dtype, elem_ptr(out, i), i < n / 2 ? a + step * (double)i : b - step * (double)(n - 1 - i));
  return 0;
}

int eval_sym_arith(E *e) {
  /* the value is known symbolically (verify set it): evaluate it with this run's symbols */
  return expr_eval(e->I->c, e->n->outs[0]->sym, e->I->env, &e->symout->i) ? -1 : (e->symout->k = RV_INT, 0);
}


int eval_arange(E *e) {
  Tensor *out = out0(e);
  RArg *st = A(e, "start"), *sp = A(e, "step");
  double a = st ? F64(e, "start", 0) : 0, c = sp ? F64(e, "step", 1) : 1;
  int64_t n = tensor_numel(out);
  bool ints = !dtype_is_float(out->dtype) && (!st || st->k == AK_INT) && (!sp || sp->k == AK_INT);
  for (int64_t i = 0; i < n; i++) {
    if (ints) dtype_store_i64(out->dtype, elem_ptr(out, i), (st ? st->i : 0) + i * (sp ? sp->i : 1));
    else dtype_store_f64(out->dtype, elem_ptr(out, i), a + (double)i * c);
  }
  return 0;
}

int eval_full(E *e) {
  const char *name = e->n->op->name;
  Tensor *out = out0(e);
  RArg *fill = A(e, "fill_value") ? A(e, "fill_value") : A(e, "s") ? A(e, "s") : A(e, "value");
  double v = strstr(name, "zero") || strstr(name, "empty") ? 0 : strstr(name, "ones") ? 1
           : fill ? (fill->k == AK_FLOAT ? fill->f : fill->k == AK_BOOL ? fill->b : (double)fill->i) : 0;
  int64_t n = tensor_numel(out);
  for (int64_t i = 0; i < n; i++) {
    if (fill && fill->k == AK_INT && !dtype_is_float(out->dtype)) dtype_store_i64(out->dtype, elem_ptr(out, i), fill->i);
    else dtype_store_f64(out->dtype, elem_ptr(out, i), v);
  }
  return 0;
}

int eval_to(E *e) {
  Tensor *x = T(e, "self");
  Value *ov = e->n->outs[0];
  if (!e->outs[0]) {   /* to.*: self when nothing changes and no copy is asked for */
    if (ov->dtype == x->dtype && !B(e, "copy")) { e->outs[0] = view_of(e->I, x); return 0; }
    e->outs[0] = tensor_new(e->I, ov->dtype, x->rank, x->sizes);
  }
  copy_into(e->outs[0], x);
  return 0;
}

int eval_assert(E *e) {
  Tensor *a = T(e, "a");
  RArg *dt = A(e, "dtype");
  if (dt && dt->k == AK_DTYPE && dt->code != (int)a->dtype) return fail(e, "dtype is %s, expected %s", dtype_name(a->dtype), dtype_name((DType)dt->code));
  RArg *sz = A(e, "size");
  if (sz && sz->k == AK_INTS) {
    if (sz->n != a->rank) return fail(e, "rank is %d, expected %d", a->rank, sz->n);
    for (int d = 0; d < a->rank; d++) if (sz->is[d] != a->sizes[d]) return fail(e, "size at dim %d is %lld, expected %lld", d, (long long)a->sizes[d], (long long)sz->is[d]);
  }
  return 0;
}

int eval_sym_size(E *e) {
  Tensor *x = T(e, "self");
  int d;
  if (!A(e, "dim")) {   /* sym_numel */
    e->symout->k = RV_INT;
    e->symout->i = tensor_numel(x);
    return 0;
  }
  if (wrap_dim(e, I64(e, "dim", 0), x->rank, &d)) return -1;
  e->symout->k = RV_INT;
  e->symout->i = x->sizes[d];
  return 0;
}

/* ---------------------------------------------------------------- the run */

Interp *interp_new(Ctx *c, Graph *g) {
  Interp *I = arena_alloc(c->arena, sizeof *I);
  I->c = c;
  I->g = g;
  I->vals = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *I->vals);
  I->env = arena_array(c->arena, (size_t)g->nsyms + 1, sizeof *I->env);
  I->mutated = arena_array(c->arena, (size_t)g->ninputs + 1, sizeof *I->mutated);
  return I;
}

void interp_free(Interp *I) {
  if (!I) return;
  for (int i = 0; i < I->nstorages; i++) { free(I->storages[i]->data); free(I->storages[i]); }
  free(I->storages);
  I->storages = NULL;
  I->nstorages = 0;
}

static void mark_write(Interp *I, const Tensor *t) {
  for (int i = 0; i < I->g->ninputs; i++) {
    RVal *rv = &I->vals[I->g->inputs[i]->id];
    if (rv->k == RV_TENSOR && rv->t->st == t->st) I->mutated[i] = true;
  }
}

/* Guards: count, dtype, rank, static sizes, symbols bound consistently and within range. */
static int bind_input(Interp *I, Value *v, Tensor *t) {
  Ctx *c = I->c;
  Graph *g = I->g;
  const char *nm = gg_quote(c, v->name);
  if (t->dtype != v->dtype)
    return gg_error(c, "guard failed: tensor %s dtype mismatch. expected %s, actual %s; convert it (PyTorch: x.to(torch.%s)) or export the model with %s inputs", nm,
                    dtype_name(v->dtype), dtype_name(t->dtype), dtype_name(v->dtype), dtype_name(t->dtype));
  if (t->rank != v->rank) return gg_error(c, "guard failed: tensor %s rank mismatch. expected %d, actual %d" GG_HINT_RANK, nm, v->rank, t->rank);
  for (int d = 0; d < v->rank; d++) {
    const Expr *e = v->sizes[d];
    if (e->k != E_SYM) continue;
    int64_t *slot = &I->env[e->c];
    const Sym *s = &g->syms[e->c];
    if (t->sizes[d] < s->min || t->sizes[d] > s->max)
      return gg_error(c, "guard failed: tensor %s size mismatch at index %d. expected %s in [%lld, %lld], actual %lld" GG_HINT_RANGE, nm, d, s->name,
                      (long long)s->min, (long long)s->max, (long long)t->sizes[d]);
    *slot = t->sizes[d];
  }
  return 0;
}

static int check_sizes(Interp *I, Value *v, Tensor *t) {
  Ctx *c = I->c;
  for (int d = 0; d < v->rank; d++) {
    int64_t want;
    if (expr_eval(c, v->sizes[d], I->env, &want)) return -1;
    if (want != t->sizes[d])
      return gg_error(c, "guard failed: tensor %s size mismatch at index %d. expected %lld, actual %lld%s", gg_quote(c, v->name), d, (long long)want, (long long)t->sizes[d],
                      v->sizes[d]->k == E_CONST ? GG_HINT_STATIC_SIZE : GG_HINT_SHARED);
  }
  return 0;
}

static int eval_args(Interp *I, Node *n, RArg *ra) {
  Ctx *c = I->c;
  for (int i = 0; i < n->op->nargs; i++) {
    const Arg *a = &n->args[i];
    RArg *r = &ra[i];
    r->k = a->k;
    r->n = a->n;
    switch (a->k) {
    case AK_TENSOR:
      if (I->vals[a->u.t->id].k != RV_TENSOR) return gg_error(c, "internal error: value %s has not been computed", gg_quote(c, a->u.t->name));
      r->t = I->vals[a->u.t->id].t;
      break;
    case AK_TENSORS:
      r->ts = arena_array(c->arena, (size_t)a->n + 1, sizeof *r->ts);
      for (int j = 0; j < a->n; j++) r->ts[j] = a->u.ts[j] ? I->vals[a->u.ts[j]->id].t : NULL;
      break;
    case AK_INT: if (expr_eval(c, a->u.i, I->env, &r->i)) return -1; break;
    case AK_INTS:
      r->is = arena_array(c->arena, (size_t)a->n + 1, sizeof *r->is);
      for (int j = 0; j < a->n; j++) if (expr_eval(c, a->u.is[j], I->env, &r->is[j])) return -1;
      break;
    case AK_FLOAT: r->f = a->u.f; break;
    case AK_FLOATS: r->fs = a->u.fs; break;
    case AK_BOOL: r->b = a->u.b; break;
    case AK_BOOLS: r->bs = a->u.bs; break;
    case AK_STR: case AK_DEVICE: r->s = a->u.s; break;
    default: r->code = a->u.code; break;
    }
  }
  return 0;
}

/* Lay an output out as PyTorch did when the export recorded a dense permuted layout: later views in
 * the graph may depend on it (scaled_dot_product_attention returns a transposed layout, and exported
 * graphs view its output accordingly). */
static int use_exported_strides(Interp *I, const Value *v, Tensor *t) {
  if (!v->strides || v->rank < 2) return 0;
  int64_t st[GG_MAX_RANK];
  for (int d = 0; d < v->rank; d++) if (expr_eval(I->c, v->strides[d], I->env, &st[d])) return -1;
  /* dense: visiting dims by decreasing stride must give the contiguous strides of that order */
  int order[GG_MAX_RANK];
  for (int d = 0; d < v->rank; d++) order[d] = d;
  for (int a = 1; a < v->rank; a++)
    for (int b = a; b > 0 && st[order[b]] > st[order[b - 1]]; b--) { int x = order[b]; order[b] = order[b - 1]; order[b - 1] = x; }
  int64_t expect = 1;
  for (int k = v->rank - 1; k >= 0; k--) {
    int d = order[k];
    if (t->sizes[d] != 1 && st[d] != expect) return 0;
    expect *= t->sizes[d];
  }
  for (int d = 0; d < v->rank; d++) t->strides[d] = t->sizes[d] == 1 ? t->strides[d] : st[d];
  return 0;
}

static int run_node(Interp *I, Node *n) {
  Ctx *c = I->c;
  E e = {0};
  e.I = I;
  e.n = n;
  e.args = arena_array(c->arena, (size_t)n->op->nargs + 1, sizeof *e.args);
  e.outs = arena_array(c->arena, (size_t)n->nouts + 1, sizeof *e.outs);
  e.osizes = arena_array(c->arena, (size_t)n->nouts + 1, sizeof *e.osizes);
  RVal sym = {0};
  e.symout = &sym;
  if (eval_args(I, n, e.args)) return -1;
  for (int i = 0; i < n->nouts; i++) {
    Value *v = n->outs[i];
    if (v->kind != VK_TENSOR) continue;
    for (int d = 0; d < v->rank; d++) if (expr_eval(c, v->sizes[d], I->env, &e.osizes[i][d])) return -1;
    if (!n->op->view && !(e.outs[i] = tensor_new(I, v->dtype, v->rank, e.osizes[i]))) return -1;
    if (!n->op->view && use_exported_strides(I, v, e.outs[i])) return -1;
  }
  if (n->op->eval(&e)) return -1;
  if (n->op->inplace || n->op->outarg >= 0) {
    /* the op computed its result out of place; write it into self (or out=), which the output aliases */
    Tensor *self = e.args[n->op->inplace ? 0 : n->op->outarg].t;
    copy_into(self, e.outs[0]);
    mark_write(I, self);
    e.outs[0] = self;
  }
  for (int i = 0; i < n->nouts; i++) {
    Value *v = n->outs[i];
    if (v->kind == VK_SYMINT) { I->vals[v->id] = sym; continue; }
    Tensor *t = e.outs[i];
    if (!t || t->rank != v->rank) return gg_error(c, "internal error: node %s produced no output %d", gg_quote(c, n->name), i);
    for (int d = 0; d < v->rank; d++)
      if (t->sizes[d] != e.osizes[i][d])
        return gg_error(c, "internal error: node %s output %d has size %lld at dim %d, expected %lld", gg_quote(c, n->name), i,
                        (long long)t->sizes[d], d, (long long)e.osizes[i][d]);
    I->vals[v->id].k = RV_TENSOR;
    I->vals[v->id].t = t;
  }
  return 0;
}

int graph_check_supported(Graph *g) {
  for (int k = 0; k < g->nnodes; k++)
    if (!g->nodes[k]->op) {
      const char *why = ops_refusal(g->nodes[k]->target);
      if (why) return gg_error(g->ctx, "%s: node %s: op %s is not supported: %s", g->path, gg_quote(g->ctx, g->nodes[k]->name), gg_quote(g->ctx, g->nodes[k]->target), why);
      return gg_error(g->ctx, "%s: node %s: op %s is not supported (gcc-graph explain lists every such node)", g->path,
                      gg_quote(g->ctx, g->nodes[k]->name), gg_quote(g->ctx, g->nodes[k]->target));
    }
  return 0;
}

/* Whether node n can run now: an op with an evaluator, not random, writing nothing, its sizes and
 * integer arguments static, its outputs at most *budget elements in all (taken from it) */
static bool runs_now(const Node *n, int64_t *budget) {
  if (!n->op || n->op->inplace || n->op->outarg >= 0 || !strncmp(n->op->name, "rand", 4) || strstr(n->op->name, "dropout") || strstr(n->op->name, "bernoulli"))
    return false;
  for (int i = 0; i < n->op->nargs; i++) {
    const Arg *a = &n->args[i];
    int64_t v;
    if (a->k == AK_INT && !expr_is_const(a->u.i, &v)) return false;
    if (a->k == AK_INTS)
      for (int j = 0; j < a->n; j++)
        if (!expr_is_const(a->u.is[j], &v)) return false;
  }
  for (int i = 0; i < n->nouts; i++) {
    const Value *y = n->outs[i];
    if (y->kind != VK_TENSOR) return false;
    int64_t ne = 1, k;
    for (int d = 0; d < y->rank; d++) {
      if (!expr_is_const(y->sizes[d], &k) || (k > 0 && ne > *budget / k)) return false;
      ne *= k;
    }
    if (ne > *budget) return false;
    *budget -= ne;
  }
  return true;
}

/* The value of v computed at compile time, when nothing it depends on is a user input, a weight
 * without data, a random draw or a symbolic size, and the nodes on the way make at most max_elems
 * elements in all: the nodes it depends on are run, in graph order, over the weights' data. NULL
 * when it cannot be (no message: the caller compiles v as it is). The tensor lives until interp_free;
 * values an earlier call on I computed are not computed again (every layer's attention reads one mask). */
Tensor *interp_constant(Interp *I, Value *v, int64_t max_elems) {
  Ctx *c = I->c;
  Graph *g = I->g;
  bool *need = arena_array(c->arena, (size_t)g->nnodes + 1, sizeof *need);
  Value **stack = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *stack);
  bool *seen = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *seen);
  int sp = 0;
  if (I->vals[v->id].k == RV_TENSOR) return I->vals[v->id].t;   /* an earlier call computed it (a mask every layer reads) */
  stack[sp++] = v;
  seen[v->id] = true;
  while (sp) {
    Value *x = stack[--sp];
    if (I->vals[x->id].k == RV_TENSOR) continue;   /* computed by an earlier call */
    if (!x->def) {   /* a graph input: a weight with its bytes */
      if (x->input == IN_USER || x->input == IN_NONE || !x->weight || x->kind != VK_TENSOR || graph_mutates(g, x)) return NULL;
      I->vals[x->id].k = RV_TENSOR;
      I->vals[x->id].t = tensor_from_weight(I, x->weight, false);   /* read only: no node here writes */
      continue;
    }
    Node *n = x->def;
    if (need[n->id]) continue;
    if (!runs_now(n, &max_elems)) return NULL;
    need[n->id] = true;
    FOR_TENSOR_ARGS(n, a, {
      if (!seen[a->id]) { seen[a->id] = true; stack[sp++] = a; }
    })
  }
  for (int k = 0; k < g->nnodes; k++)
    if (need[k] && run_node(I, g->nodes[k])) {
      c->has_err = false;   /* what it would have said is said again at run time */
      return NULL;
    }
  return I->vals[v->id].k == RV_TENSOR ? I->vals[v->id].t : NULL;
}

double tensor_f64_at(const Tensor *t, int64_t i) { return dtype_load_f64(t->dtype, elem_ptr(t, i)); }

int interp_run(Interp *I, Tensor **inputs, int ninputs, const STensor *extra, int nextra, RunResult *res) {
  Ctx *c = I->c;
  Graph *g = I->g;
  memset(res, 0, sizeof *res);
  Value **users;
  int nusers = graph_user_inputs(g, &users);
  if (ninputs != nusers) return gg_error(c, "guard failed: expected %d inputs, got %d (gcc-graph explain MODEL lists them)", nusers, ninputs);
  if (graph_check_supported(g)) return -1;
  for (int i = 0; i < nusers; i++) if (bind_input(I, users[i], inputs[i])) return -1;
  for (int i = 0; i < nusers; i++) {
    if (check_sizes(I, users[i], inputs[i])) return -1;
    I->vals[users[i]->id].k = RV_TENSOR;
    I->vals[users[i]->id].t = inputs[i];
  }
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (v->input == IN_USER) continue;
    Tensor *t = NULL;
    if (v->weight) t = tensor_from_weight(I, v->weight, v->input == IN_BUFFER);
    else {
      for (int k = 0; k < nextra && !t; k++)
        if (!strcmp(extra[k].name, v->fqn)) {
          t = tensor_from_st(I, &extra[k]);
          if (v->input == IN_BUFFER) { Tensor *cp = tensor_new(I, t->dtype, t->rank, t->sizes); copy_into(cp, t); t = cp; }
        }
      if (!t) return gg_error(c, "%s %s has no data: the file carries no weights; give --weights FILE.safetensors",
                              v->input == IN_PARAM ? "parameter" : v->input == IN_BUFFER ? "buffer" : "constant", gg_quote(c, v->fqn));
      if (t->dtype != v->dtype || t->rank != v->rank) return gg_error(c, "%s: dtype or rank differs from the graph's", gg_quote(c, v->fqn));
    }
    if (check_sizes(I, v, t)) return -1;
    I->vals[v->id].k = RV_TENSOR;
    I->vals[v->id].t = t;
  }
  for (int k = 0; k < g->nnodes; k++)
    if (run_node(I, g->nodes[k])) return -1;
  res->outs = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *res->outs);
  res->buffers = arena_array(c->arena, (size_t)(g->noutputs + g->ninputs) + 1, sizeof *res->buffers);
  res->buffer_names = arena_array(c->arena, (size_t)(g->noutputs + g->ninputs) + 1, sizeof *res->buffer_names);
  res->grads = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *res->grads);
  res->grad_names = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *res->grad_names);
  res->saved = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *res->saved);
  for (int i = 0; i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    Tensor *t = I->vals[o->v->id].t;
    if (o->kind == OUT_USER) res->outs[res->nouts++] = t;
    else if (o->kind == OUT_GRAD) { res->grads[res->ngrads] = t; res->grad_names[res->ngrads++] = o->target_name; }
    else if (o->kind == OUT_SAVED) res->saved[res->nsaved++] = t;
    else if (o->kind == OUT_BUFFER_MUTATION && o->target_name) {
      res->buffers[res->nbuffers] = t;
      res->buffer_names[res->nbuffers++] = o->target_name;
    }
  }
  for (int i = 0; i < g->ninputs; i++)
    if (I->mutated[i] && g->inputs[i]->input == IN_BUFFER) {
      res->buffers[res->nbuffers] = I->vals[g->inputs[i]->id].t;
      res->buffer_names[res->nbuffers++] = g->inputs[i]->fqn;
    }
  return 0;
}
