/* emit_c.c: C/OpenMP code generation.
 * Requires: a verified, functional, decomposed graph (compile.c). Guarantees: one C file that, with
 * the runtime (lib/rt) and scalar.h, builds into a model .so: one static function per kernel with a
 * comment naming the nodes it computes, loops parallel with OpenMP over the outer dims and unit-stride
 * inner loops the C compiler can vectorize, matrix products and convolutions through BLAS, every size
 * a C expression of the symbols s[] (so symbolic sizes stay symbolic), views as strides (no copies),
 * and a guard function that checks every input before anything runs. Names from the model reach the
 * file only inside escaped string literals and sanitized comments. Output is deterministic. */
#include "gg.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define R GG_MAX_RANK

enum { S_INPUT, S_WEIGHT, S_SCRATCH, S_OUTPUT, S_MUT };

typedef struct Stor {
  int kind, index;          /* input index / weight index / scratch id */
  DType dt;
  const Expr *nelem;        /* scratch: elements */
  int first, last;          /* scratch: the kernels that write it first and read it last */
  int64_t offset;           /* scratch: its place in the arena (planned when sizes are static) */
  int inplace;              /* scratch: 1 + the storage its first kernel reads only at the index it writes
                             * (it may take that one's memory if this kernel is its last reader), or 0 */
} Stor;

typedef struct TV {          /* a value as the generated code sees it: storage + strides */
  bool ok;
  Node *deferred;           /* a pointwise node computed inside its consumer's loop (fusion), no storage */
  const char *cexpr;        /* a value already in the kernel, as a C expression (double): an epilogue's product */
  int stor;
  DType dt;
  union {                   /* its layout (view.c), as a whole (l) or by field */
    Layout l;
    struct { int rank; const Expr *sizes[R], *strides[R], *offset; };
  };
} TV;

/* A weight matrix packed at gg_open (the runtime's gg_pack_desc) */
typedef struct PackDesc { int weight, side; int64_t offset, rows, cols, srow, scol; } PackDesc;

typedef struct Em {
  Ctx *c;
  Graph *g;
  Arena *a;
  FILE *k;                  /* kernel functions */
  FILE *r;                  /* the body of run() */
  TV *tv;                   /* by value id */
  Stor *st;
  int nst, capst;
  int nk;                   /* kernels so far */
  const Schedule *s;         /* what is fused where (schedule.c) */
  int64_t scratch_naive, scratch_planned; /* bytes without and with reuse */
  bool cuda;                /* --target cuda: kernels are __global__ functions launched on the run's stream */
  bool kdev;                /* the kernel being written runs on the GPU */
  const char *launch;       /* its grid-stride loop's length in threads (NULL: one thread) */
  bool rowwarp;             /* its rows are each taken by a warp (open_rows) */
  FILE *errs;               /* CUDA: the message of each kernel that checks indices, by kernel id */
  bool pack_ok;             /* CPU inference: float32 weights of products may be packed at gg_open */
  bool *mutated;            /* by weight index: a buffer the model updates (never packed) */
  int npacks;
  PackDesc *packs;      /* the weights packed at gg_open, in the order of w[nweights + j] */
} Em;

static int efail(Em *e, Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int efail(Em *e, Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gg_error(e->c, "%s: node %s (%s): %s", e->g->path, gg_quote(e->c, n->name), gg_quote(e->c, n->target), msg);
}

/* ---------------------------------------------------------------- C text helpers */

static void pexpr(FILE *f, const Expr *x) {
  switch (x->k) {
  case E_CONST: fprintf(f, "INT64_C(%lld)", (long long)x->c); return;
  case E_SYM: fprintf(f, "s[%lld]", (long long)x->c); return;
  case E_ADD: fputc('(', f); pexpr(f, x->a); fputs(" + ", f); pexpr(f, x->b); fputc(')', f); return;
  case E_MUL: fputc('(', f); pexpr(f, x->a); fputs(" * ", f); pexpr(f, x->b); fputc(')', f); return;
  default: {
    const char *fn = x->k == E_FLOORDIV ? "gg_floordiv" : x->k == E_MOD ? "gg_mod" : x->k == E_MAX ? "gg_max" : "gg_min";
    fprintf(f, "%s(", fn);
    pexpr(f, x->a);
    fputs(", ", f);
    pexpr(f, x->b);
    fputc(')', f);
  }
  }
}

/* An Expr as C text (arena string). */
static const char *cx(Em *e, const Expr *x) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pexpr(f, x);
  fclose(f);
  char *r = arena_strdup(e->a, buf);
  free(buf);
  return r;
}

static const Expr *C(Em *e, int64_t v) { return expr_const(e->a, v); }
static const Expr *ADD(Em *e, const Expr *x, const Expr *y) { return expr_bin(e->a, E_ADD, x, y); }
static const Expr *MUL(Em *e, const Expr *x, const Expr *y) { return expr_bin(e->a, E_MUL, x, y); }

/* A comment that cannot end early or smuggle a line break: model text is made safe here. */
static void comment(FILE *f, const char *s) {
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '*' && s[1] == '/') { fputs("* /", f); s++; }
    else if (ch < 32 || ch > 126 || ch == '\\') fputc('?', f);
    else fputc(ch, f);
  }
}

/* A C string literal with every byte that is not plain printable ASCII escaped. */
void emit_c_string(FILE *f, const char *s) {
  fputc('"', f);
  int col = 0;
  for (; *s; s++, col++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch == '\n') fputs("\\n", f);
    else if (ch < 32 || ch > 126 || ch == '?') fprintf(f, "\\%03o", ch);
    else fputc(ch, f);
    if (col > 100 && ch == ',') { fputs("\"\n  \"", f); col = 0; }
  }
  fputc('"', f);
}

static const char *ctype(DType d) {
  switch (d) {
  case DT_F32: return "float";
  case DT_F64: return "double";
  case DT_F16: case DT_BF16: return "uint16_t";
  case DT_I64: return "int64_t";
  case DT_I32: return "int32_t";
  case DT_I16: return "int16_t";
  case DT_I8: return "int8_t";
  default: return "uint8_t";   /* uint8, bool */
  }
}

/* Reading an element as double / int64, and writing one back, in C. */
static void load_f(FILE *f, DType d, const char *ptr, const char *idx) {
  if (d == DT_F16) fprintf(f, "(double)gg_h2f(%s[%s])", ptr, idx);
  else if (d == DT_BF16) fprintf(f, "(double)gg_bf2f(%s[%s])", ptr, idx);
  else fprintf(f, "(double)%s[%s]", ptr, idx);
}

static void load_i(FILE *f, DType d, const char *ptr, const char *idx) {
  if (dtype_is_float(d)) { fputs("gg_d2i(", f); load_f(f, d, ptr, idx); fputc(')', f); }
  else fprintf(f, "(int64_t)%s[%s]", ptr, idx);
}

static void store(FILE *f, DType d, bool from_float, const char *ptr, const char *idx, const char *val) {
  fprintf(f, "%s[%s] = ", ptr, idx);
  if (d == DT_F16) fprintf(f, "gg_d2h((double)(%s));\n", val);
  else if (d == DT_BF16) fprintf(f, "gg_f2bf((float)(%s));\n", val);
  else if (d == DT_BOOL) fprintf(f, "(%s) != 0;\n", val);
  else if (dtype_is_float(d)) fprintf(f, "(%s)(%s);\n", ctype(d), val);
  else if (from_float) fprintf(f, "(%s)gg_d2i(%s);\n", ctype(d), val);
  else fprintf(f, "(%s)(%s);\n", ctype(d), val);
}

/* ---------------------------------------------------------------- storage and views */

static int new_stor(Em *e, int kind, int index, DType dt, const Expr *nelem) {
  if (e->nst == e->capst) {
    e->capst = e->capst ? e->capst * 2 : 64;
    Stor *n = arena_array(e->a, (size_t)e->capst, sizeof *n);
    if (e->nst) memcpy(n, e->st, sizeof *n * (size_t)e->nst);
    e->st = n;
  }
  e->st[e->nst] = (Stor){kind, index, dt, nelem, e->nk, e->nk, 0, 0};
  return e->nst++;
}

static const char *sname(Em *e, int s) {
  Stor *st = &e->st[s];
  /* every mention in the run body is a use by the kernel being emitted: it extends the lifetime */
  if (e->nk - 1 > st->last) st->last = e->nk - 1;
  static const char *prefix[] = {[S_INPUT] = "in", [S_WEIGHT] = "w", [S_SCRATCH] = "t", [S_OUTPUT] = "out", [S_MUT] = "mut"};
  return arena_printf(e->a, "%s%d", prefix[st->kind], st->kind == S_SCRATCH ? s : st->index);
}

static void contiguous_tv(Em *e, TV *t, int stor, DType dt, int rank, const Expr *const *sizes) {
  memset(t, 0, sizeof *t);
  t->ok = true;
  t->stor = stor;
  t->dt = dt;
  layout_contiguous(e->a, &t->l, rank, sizes);
}

static const Expr *numel(Em *e, const TV *t) { return layout_numel(e->a, &t->l); }

/* explain's iteration space of a tensor: its sizes at the example values, "[2, 8, 10, 10]"; *ne: its
 * elements */
static const char *hint_shape(Em *e, int rank, const Expr *const *sizes, double *ne) {
  const char *sp = "[";
  *ne = 1;
  for (int d = 0; d < rank; d++) {
    int64_t h = expr_hint(e->g, sizes[d]);
    *ne *= (double)h;
    sp = arena_printf(e->a, "%s%s%lld", sp, d ? ", " : "", (long long)h);
  }
  return arena_printf(e->a, "%s]", sp);
}

static bool is_contiguous(Em *e, const TV *t) { return layout_is_contiguous(e->g, e->a, &t->l); }

/* A fresh contiguous scratch tensor for value v. */
static TV *alloc_value(Em *e, Value *v) {
  TV *t = &e->tv[v->id];
  const Expr *n = C(e, 1);
  for (int d = 0; d < v->rank; d++) n = MUL(e, n, v->sizes[d]);
  int s = new_stor(e, S_SCRATCH, 0, v->dtype, n);
  contiguous_tv(e, t, s, v->dtype, v->rank, v->sizes);
  return t;
}

static TV *tv_of(Em *e, Node *n, Value *v) {
  TV *t = &e->tv[v->id];
  if (!t->ok) { efail(e, n, "value %s has no storage (internal error)", gg_quote(e->c, v->name)); return NULL; }
  return t;
}

/* ---------------------------------------------------------------- kernel framing */

typedef struct Operand { bool is_tensor; TV t; double f; int64_t i; bool none; } Operand;

static void kernel_begin(Em *e, Node *n, const char *what) {
  gg_log(e->c, LOG_SCHEDULE, "k%d %s: node %s (%s)", e->nk - 1, what, gg_quote(e->c, n->name), n->target);
  Ctx *c = e->c;
  if (c->record) {
    if (c->nkernels == c->cap_kernels) {
      c->cap_kernels = c->cap_kernels ? 2 * c->cap_kernels : 64;
      KernelRec *k = arena_array(c->arena, (size_t)c->cap_kernels, sizeof *k);
      if (c->nkernels) memcpy(k, c->kernels, sizeof *k * (size_t)c->nkernels);
      c->kernels = k;
    }
    c->kernels[c->nkernels++] = (KernelRec){e->nk - 1, what, n->name, n->target, NULL, 0, n->op ? n : NULL, NULL, 0, 0, 0};
  }
  fprintf(e->k, "\n/* %s: node ", what);
  comment(e->k, n->name);
  fputs(" (", e->k);
  comment(e->k, n->target);
  fputs(") */\n", e->k);
}

/* The head of kernel id up to its first parameter. CPU: a static function (returning the bad-index
 * flag when `checks`). CUDA: a __global__ function, unless `host` (one that calls the runtime:
 * cuBLAS, convolution, pooling). kcall launches it with the grid its loops asked for. */
static void kopen(Em *e, int id, bool checks, bool host) {
  e->kdev = e->cuda && !host;
  e->launch = NULL;
  e->rowwarp = false;
  if (e->kdev) fprintf(e->k, "static __global__ void k%d(", id);
  else fprintf(e->k, "static %s k%d(", checks ? "int" : "void", id);
}

/* kopen for a CPU kernel whose loops vectorize: also built for AVX-512 (GG_VEC, gg_rt.h) */
static void kopen_vec(Em *e, int id) {
  if (!e->cuda) fputs("GG_VEC ", e->k);
  kopen(e, id, false, false);
}

/* The symbols' values, the last parameter: a pointer on the CPU, a struct by value on the GPU. */
static void ksyms(Em *e) { fputs(e->kdev ? ", const gg_s S) {\n  const int64_t *s = S.v; (void)s;\n" : ", const int64_t *s) {\n  (void)s;\n", e->k); }

static void kcall(Em *e, int id) {
  if (e->kdev) fprintf(e->r, "  k%d<<<%s, 0, (cudaStream_t)gg_cu_stream()>>>(", id, e->launch ? arena_printf(e->a, "gg_cu_blocks(%s), 256", e->launch) : "1, 1");
  else fprintf(e->r, "  k%d(", id);
}

static void kcall_end(Em *e) { fputs(e->kdev ? ", S);\n" : ", s);\n", e->r); }

/* Kernels that check indices: the CPU function returns its flag and the run stops with a message
 * naming the node; a CUDA kernel sets gg_dev_err, which the runtime reads after the run. */
static void kreturn_bad(Em *e, int id) {
  if (e->kdev) fprintf(e->k, "  if (bad) gg_dev_err = %d;\n}\n", id + 1);
  else fputs("  return bad;\n}\n", e->k);
}

static void kcall_checked(Em *e, int id) {
  if (!e->kdev) fputs("  if (", e->r);
  kcall(e, id);
}

static void kcall_checked_end(Em *e, int id, Node *n) {
  const char *msg = arena_printf(e->a, "node %s: index out of range", n->name);
  if (e->kdev) {
    kcall_end(e);
    fprintf(e->errs, "  case %d: return ", id + 1);
    emit_c_string(e->errs, msg);
    fputs(";\n", e->errs);
    return;
  }
  fputs(", s)) return ", e->r);
  emit_c_string(e->r, msg);
  fputs(";\n", e->r);
}

/* Loops over a shape, with an OpenMP parallel outer loop when there is enough work: the shape's
 * elements times `inner`, the work of one iteration (a row's length for row kernels, the reduced
 * count for reductions; NULL: 1). The loop variables are i0..i{rank-1}; returns the number of braces
 * to close. */
static int open_loops_work(Em *e, int rank, const Expr *const *sizes, bool parallel, const Expr *inner) {
  FILE *f = e->k;
  if (rank == 0) { fputs("  {\n", f); return 1; }
  if (e->kdev && parallel) {   /* CUDA: one grid-stride loop over the whole shape, a thread per element */
    const Expr *n = C(e, 1);
    for (int d = 0; d < rank; d++) n = MUL(e, n, sizes[d]);
    int64_t nv;
    bool narrow = expr_is_const(n, &nv) && nv < INT32_MAX;   /* 32-bit index arithmetic is much cheaper */
    const char *T = narrow ? "uint32_t" : "int64_t";
    e->launch = cx(e, n);
    fprintf(f, "  for (%s gi = blockIdx.x * (%s)blockDim.x + threadIdx.x; gi < (%s)(%s); gi += gridDim.x * (%s)blockDim.x) {\n    %s gr = gi;\n", T, T, T,
            e->launch, T, T);
    for (int d = rank - 1; d > 0; d--)
      fprintf(f, "    const int64_t i%d = (int64_t)(gr %% (%s)(%s)); gr /= (%s)(%s);\n", d, T, cx(e, sizes[d]), T, cx(e, sizes[d]));
    fputs("    const int64_t i0 = (int64_t)gr;\n", f);
    return 1;
  }
  const Expr *n = inner ? inner : C(e, 1);
  for (int d = 0; d < rank; d++) n = MUL(e, n, sizes[d]);
  if (parallel && !e->kdev) {
    fprintf(f, "  #pragma omp parallel for schedule(static)%s if(%s > 32768)\n",
            rank > 2 ? arena_printf(e->a, " collapse(%d)", rank - 1) : "", cx(e, n));
  }
  for (int d = 0; d < rank; d++)
    fprintf(f, "%*sfor (int64_t i%d = 0; i%d < %s; i%d++)%s\n", 2 + 2 * d, "", d, d, cx(e, sizes[d]), d, d == rank - 1 ? " {" : "");
  return 1;
}

static int open_loops(Em *e, int rank, const Expr *const *sizes, bool parallel) { return open_loops_work(e, rank, sizes, parallel, NULL); }

/* Rows of `len` elements (normalization, softmax): a thread per row on the CPU; on the GPU a warp per
 * row, whose lanes stride along it (row_for) and combine their partial sums and maxima with
 * shuffles (row_combine), so that a row's loads are coalesced. */
static int open_rows(Em *e, int rank, const Expr *const *sizes, const Expr *len) {
  if (!e->kdev || rank == 0) return open_loops_work(e, rank, sizes, true, len);
  FILE *f = e->k;
  const Expr *n = C(e, 1);
  for (int d = 0; d < rank; d++) n = MUL(e, n, sizes[d]);
  e->rowwarp = true;
  e->launch = arena_printf(e->a, "(%s) * 32", cx(e, n));
  fprintf(f, "  const int64_t lane = threadIdx.x & 31;\n");
  fprintf(f, "  for (int64_t gi = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; gi < %s; gi += (gridDim.x * (int64_t)blockDim.x) >> 5) {\n    int64_t gr = gi;\n",
          cx(e, n));
  for (int d = rank - 1; d > 0; d--) fprintf(f, "    const int64_t i%d = gr %% (%s); gr /= (%s);\n", d, cx(e, sizes[d]), cx(e, sizes[d]));
  fputs("    const int64_t i0 = gr;\n", f);
  return 1;
}

static const char *row_for(Em *e) { return e->rowwarp ? "for (int64_t j = lane; j < L; j += 32)" : "for (int64_t j = 0; j < L; j++)"; }

static void row_combine(Em *e, const char *var, bool max) {
  if (e->rowwarp) fprintf(e->k, "    %s = gg_w%s(%s);\n", var, max ? "max" : "sum", var);
}

static void close_loops(Em *e, int n) { while (n--) fputs("  }\n", e->k); }

/* The element index of t at loop indices i0.. (with broadcasting: loop rank >= t's rank). */
static const char *index_of(Em *e, const TV *t, int loop_rank) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pexpr(f, t->offset);
  for (int d = 0; d < t->rank; d++) {
    int64_t v;
    if (expr_is_const(t->strides[d], &v) && v == 0) continue;
    if (expr_is_const(t->sizes[d], &v) && v == 1 && t->rank <= loop_rank) continue;
    fprintf(f, " + i%d * ", d + loop_rank - t->rank);
    pexpr(f, t->strides[d]);
  }
  fclose(f);
  char *r = arena_strdup(e->a, buf);
  free(buf);
  return r;
}

/* The row-major linear index of loop variables i<first>.. over sizes[0..n): ((i0*S1 + i1)*S2 + i2). */
static const char *linear_index(Em *e, const Expr *const *sizes, int n, int first) {
  char *s = arena_strdup(e->a, "0");
  for (int d = 0; d < n; d++) s = arena_printf(e->a, "(%s) * %s + i%d", s, cx(e, sizes[d]), d + first);
  return s;
}

/* A view of t broadcast to rank/sizes (stride 0 where t has size 1 or no dim). */
static TV broadcast_tv(Em *e, const TV *t, int rank, const Expr *const *sizes) {
  TV b = *t;
  b.l = layout_broadcast(e->a, &t->l, rank, sizes);
  return b;
}

/* ---------------------------------------------------------------- pointwise */

static void fmt_double(FILE *f, double v) {
  if (isnan(v)) fputs("NAN", f);
  else if (isinf(v)) fputs(v > 0 ? "INFINITY" : "-INFINITY", f);
  else fprintf(f, "%.17g", v);
}

static double round_to(DType dt, double v) {
  uint8_t buf[8];
  dtype_store_f64(dt, buf, v);
  return dtype_load_f64(dt, buf);
}

/* dst[i] = fn(operands[i]) over dst's shape, computed in double (use_float) or int64. The operands
 * broadcast to dst. dst may be any view (cat and friends write into slices). */
static void pointwise_kernel(Em *e, Node *n, const char *what, const TV *dst, Operand *ops, int nops, const char *fname,
                             bool use_float, DType comp) {
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, what);
  if (e->c->record && !n->op) {   /* a copy of an output (no node): its bytes from the tensors */
    KernelRec *r = &e->c->kernels[e->c->nkernels - 1];
    double ne;
    r->space = hint_shape(e, dst->rank, dst->sizes, &ne);
    r->written = ne * dtype_info(dst->dt)->size;
    r->read = nops && ops[0].is_tensor ? ne * dtype_info(ops[0].t.dt)->size : 0;
    r->flops = ne;
  }
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y", ctype(dst->dt));
  for (int j = 0; j < nops; j++)
    if (ops[j].is_tensor) fprintf(f, ", const %s *x%d", ctype(ops[j].t.dt), j);
  ksyms(e);
  int closers = open_loops(e, dst->rank, dst->sizes, true);
  fprintf(f, "    %s a[%d];\n", use_float ? "double" : "int64_t", nops ? nops : 1);
  for (int j = 0; j < nops; j++) {
    fprintf(f, "    a[%d] = ", j);
    if (ops[j].is_tensor) {
      TV b = broadcast_tv(e, &ops[j].t, dst->rank, dst->sizes);
      const char *p = arena_printf(e->a, "x%d", j), *ix = index_of(e, &b, dst->rank);
      if (use_float) load_f(f, b.dt, p, ix); else load_i(f, b.dt, p, ix);
    } else if (use_float) fmt_double(f, ops[j].none ? NAN : round_to(dtype_is_float(comp) ? comp : DT_F64, ops[j].f));
    else if (ops[j].none) fputs(j == 1 ? "INT64_MIN" : "INT64_MAX", f);   /* clamp's missing bound */
    else fprintf(f, "INT64_C(%lld)", (long long)ops[j].i);
    fputs(";\n", f);
  }
  fprintf(f, "    ");
  store(f, dst->dt, use_float, "y", index_of(e, dst, dst->rank), arena_printf(e->a, "%s(a)", fname));
  close_loops(e, closers);
  fputs("}\n", f);
  /* the call */
  kcall(e, id);
  fprintf(e->r, "%s", sname(e, dst->stor));
  for (int j = 0; j < nops; j++)
    if (ops[j].is_tensor) fprintf(e->r, ", %s", sname(e, ops[j].t.stor));
  kcall_end(e);
}

/* A plain copy (with dtype conversion) of src into dst. */
static void copy_kernel(Em *e, Node *n, const TV *dst, const TV *src) {
  Operand op = {.is_tensor = true, .t = *src};
  bool fl = dtype_is_float(src->dt) || dtype_is_float(dst->dt);
  pointwise_kernel(e, n, "copy", dst, &op, 1, fl ? "f_ident" : "i_ident", fl, src->dt);
}

/* The value's elements in a fresh contiguous tensor, copying only when its view is not one. */
static TV *contiguous_of(Em *e, Node *n, Value *v) {
  TV *t = tv_of(e, n, v);
  if (!t || is_contiguous(e, t)) return t;
  TV *c = arena_alloc(e->a, sizeof *c);
  const Expr *n_el = numel(e, t);
  int s = new_stor(e, S_SCRATCH, 0, t->dt, n_el);
  contiguous_tv(e, c, s, t->dt, t->rank, t->sizes);
  copy_kernel(e, n, c, t);
  return c;
}

static int operands_of(Em *e, Node *n, Operand *ops, int *nops) {
  *nops = 0;
  for (int i = 0; i < n->op->nargs; i++) {
    ArgType ty = n->op->args[i].type;
    if (ty != T_TENSOR && ty != T_SCALAR) continue;
    const Arg *a = &n->args[i];
    Operand *o = &ops[(*nops)++];
    memset(o, 0, sizeof *o);
    if (a->k == AK_TENSOR) {
      TV *t = tv_of(e, n, a->u.t);
      if (!t) return -1;
      o->is_tensor = true;
      o->t = *t;
    } else if (a->k == AK_NONE) o->none = true;
    else if (a->k == AK_FLOAT) { o->f = a->u.f; o->i = (int64_t)a->u.f; }
    else if (a->k == AK_BOOL) { o->f = a->u.b; o->i = a->u.b; }
    else if (a->k == AK_INT) {
      int64_t v;
      if (!expr_is_const(a->u.i, &v)) return efail(e, n, "symbolic scalar operands are not supported in compiled code");
      o->f = (double)v;
      o->i = v;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- fusion of pointwise chains */

/* The scalar.h function a pointwise node computes with. GCC_GRAPH_TEST_MISCOMPILE=OP (tests only,
 * as Inductor's inject_relu_bug_TESTING_ONLY) makes every OP node compute wrongly, so that the
 * minifier can be shown to find it. */
static const char *scalar_fn(Em *e, Node *n, const PwPlan *plan) {
  if (plan->use_float && sched_test_miscompiled(n)) {
    gg_log(e->c, LOG_OUTPUT_CODE, "node %s: miscompiled on purpose (GCC_GRAPH_TEST_MISCOMPILE)", gg_quote(e->c, n->name));
    return "f_test_miscompile";
  }
  if (plan->use_float && plan->f32name && !e->cuda) return plan->f32name;
  return plan->use_float ? plan->fname : plan->iname;
}

int emit_pointwise(Em *e, Node *n);
int emit_gelu(Em *e, Node *n);
int emit_div_mode(Em *e, Node *n);

typedef struct Params {
  int n;
  TV tv[64];
  Layout at[64];            /* the layout each is read at (broadcast to the kernel's shape) */
  bool seen[64], several[64];  /* read at all; read at more than one layout */
} Params;

static int add_param(Params *p, const TV *t) {
  for (int i = 0; i < p->n; i++)
    if (p->tv[i].stor == t->stor && p->tv[i].dt == t->dt) return i;   /* one pointer per storage */
  if (p->n == 64) return -1;
  p->tv[p->n] = *t;
  return p->n++;
}

/* Emit the statements computing node n at the loop indices into the kernel body; returns the name of
 * the C variable holding its value, already rounded to n's dtype as a stored tensor would be. */
static const char *fused_value(Em *e, FILE *f, Node *n, int rank, const Expr *const *sizes, Params *P, bool *as_float) {
  PwPlan plan;
  if (pw_plan(e->c, n, &plan)) return NULL;
  Operand ops[8];
  int nops;
  if (operands_of(e, n, ops, &nops)) return NULL;
  const char *arg[8];
  for (int j = 0; j < nops; j++) {
    if (!ops[j].is_tensor) {
      char *buf = NULL;
      size_t len = 0;
      FILE *bf = open_memstream(&buf, &len);
      if (plan.use_float) fmt_double(bf, ops[j].none ? NAN : round_to(dtype_is_float(plan.comp) ? plan.comp : DT_F64, ops[j].f));
      else if (ops[j].none) fputs(j == 1 ? "INT64_MIN" : "INT64_MAX", bf);
      else fprintf(bf, "INT64_C(%lld)", (long long)ops[j].i);
      fclose(bf);
      arg[j] = arena_strdup(e->a, buf);
      free(buf);
      continue;
    }
    if (ops[j].t.cexpr) {   /* the product an epilogue applies to (always a float plan) */
      arg[j] = ops[j].t.cexpr;
      continue;
    }
    if (ops[j].t.deferred) {
      bool fl;
      const char *v = fused_value(e, f, ops[j].t.deferred, rank, sizes, P, &fl);
      if (!v) return NULL;
      arg[j] = plan.use_float ? arena_printf(e->a, "(double)%s", v) : fl ? arena_printf(e->a, "gg_d2i(%s)", v) : v;
      continue;
    }
    int p = add_param(P, &ops[j].t);
    if (p < 0) { efail(e, n, "too many fused operands"); return NULL; }
    TV b = broadcast_tv(e, &ops[j].t, rank, sizes);
    char *buf = NULL;
    size_t len = 0;
    FILE *bf = open_memstream(&buf, &len);
    const char *ptr = arena_printf(e->a, "x%d", p), *ix = index_of(e, &b, rank);
    if (!P->seen[p]) P->at[p] = b.l;
    else if (!layout_same(e->g, &P->at[p], &b.l)) P->several[p] = true;
    P->seen[p] = true;
    if (plan.use_float) load_f(bf, b.dt, ptr, ix); else load_i(bf, b.dt, ptr, ix);
    fclose(bf);
    arg[j] = arena_strdup(e->a, buf);
    free(buf);
  }
  int id = n->outs[0]->id;
  const char *T = plan.use_float ? "double" : "int64_t";
  fprintf(f, "    const %s a%d[%d] = {", T, id, nops ? nops : 1);
  for (int j = 0; j < nops; j++) fprintf(f, "%s%s", j ? ", " : "", arg[j]);
  fputs(nops ? "};\n" : "0};\n", f);
  const char *fn = scalar_fn(e, n, &plan);
  DType dt = n->outs[0]->dtype;
  /* round as storing and reloading a tensor of dt would */
  const char *val = arena_printf(e->a, "%s(a%d)", fn, id);
  bool out_float = dtype_is_float(dt);
  if (dt == DT_F32) fprintf(f, "    const double r%d = (double)(float)%s;\n", id, val);
  else if (dt == DT_F64) fprintf(f, "    const double r%d = %s;\n", id, val);
  else if (dt == DT_F16) fprintf(f, "    const double r%d = (double)gg_h2f(gg_d2h(%s));\n", id, val);
  else if (dt == DT_BF16) fprintf(f, "    const double r%d = (double)gg_bf2f(gg_f2bf((float)%s));\n", id, val);
  else if (dt == DT_BOOL) fprintf(f, "    const int64_t r%d = %s != 0;\n", id, val);
  else fprintf(f, "    const int64_t r%d = (int64_t)(%s)%s%s%s;\n", id, ctype(dt), plan.use_float ? "gg_d2i(" : "(", val, ")");
  *as_float = out_float;
  return arena_printf(e->a, "r%d", id);
}

int emit_pointwise(Em *e, Node *n) {
  if (e->s->role[n->id] == SN_EPILOGUE) {   /* applied in a product's or convolution's epilogue: the result is in its output */
    TV *src = tv_of(e, n, e->s->into[n->id]->outs[0]);
    if (!src) return -1;
    e->tv[n->outs[0]->id] = *src;
    return 0;
  }
  if (e->s->role[n->id] == SN_FUSED) {   /* computed where it is read */
    TV *t = &e->tv[n->outs[0]->id];
    memset(t, 0, sizeof *t);
    t->ok = true;
    t->deferred = n;
    t->dt = n->outs[0]->dtype;
    t->rank = n->outs[0]->rank;
    return 0;
  }
  if (n->nouts == 1) {
    TV *out = alloc_value(e, n->outs[0]);
    Params P = {0};
    char *body = NULL;
    size_t blen = 0;
    FILE *bf = open_memstream(&body, &blen);
    bool fl;
    const char *v = fused_value(e, bf, n, out->rank, out->sizes, &P, &fl);
    fclose(bf);
    if (!v) { free(body); return -1; }
    /* in-place reuse: a scratch tensor of the same dtype and size read only at the index written (the
     * output's layout) may give this kernel's output its memory, if it dies here (memplan.c decides);
     * y is then not restrict (reading x[i] and then writing y[i] at the same address vectorizes all
     * the same) */
    for (int j = 0; j < P.n; j++) {
      Stor *ps = &e->st[P.tv[j].stor];
      if (ps->kind == S_SCRATCH && P.tv[j].dt == out->dt && P.seen[j] && !P.several[j] && layout_same(e->g, &P.at[j], &out->l) &&
          expr_same(e->g, ps->nelem, e->st[out->stor].nelem)) {
        e->st[out->stor].inplace = P.tv[j].stor + 1;
        break;
      }
    }
    FILE *f = e->k;
    int id = e->nk++;
    kernel_begin(e, n, "pointwise");
    kopen_vec(e, id);
    fprintf(f, e->st[out->stor].inplace ? "%s *y" : "%s *restrict y", ctype(out->dt));
    for (int j = 0; j < P.n; j++) fprintf(f, ", const %s *x%d", ctype(P.tv[j].dt), j);
    ksyms(e);
    int cl = open_loops(e, out->rank, out->sizes, true);
    fputs(body, f);
    free(body);
    fputs("    ", f);
    store(f, out->dt, fl, "y", index_of(e, out, out->rank), v);
    close_loops(e, cl);
    fputs("}\n", f);
    kcall(e, id);
    fprintf(e->r, "%s", sname(e, out->stor));
    for (int j = 0; j < P.n; j++) fprintf(e->r, ", %s", sname(e, P.tv[j].stor));
    kcall_end(e);
    return 0;
  }
  PwPlan plan;
  if (pw_plan(e->c, n, &plan)) return -1;
  Operand ops[8];
  int nops;
  if (operands_of(e, n, ops, &nops)) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  pointwise_kernel(e, n, "pointwise", out, ops, nops, scalar_fn(e, n, &plan), plan.use_float, plan.comp);
  if (n->nouts == 2) {   /* native_dropout's mask: all true in evaluation */
    TV *m = alloc_value(e, n->outs[1]);
    Operand one = {.f = 1, .i = 1};
    pointwise_kernel(e, n, "mask", m, &one, 1, "i_ident", false, DT_I64);
  }
  return 0;
}

int emit_gelu(Em *e, Node *n) { return emit_pointwise(e, n); }
int emit_div_mode(Em *e, Node *n) { return emit_pointwise(e, n); }

int emit_copy(Em *e, Node *n) {   /* copy_ after functionalization: src broadcast into self's shape */
  Value *y = n->outs[0];
  TV *src = tv_of(e, n, n->args[ops_arg_index(n->op, "src")].u.t);
  if (!src) return -1;
  copy_kernel(e, n, alloc_value(e, y), src);
  return 0;
}

/* ---------------------------------------------------------------- views */

static int64_t int_arg(Node *n, const char *name, int64_t dflt) {
  int i = ops_arg_index(n->op, name);
  int64_t v;
  if (i < 0 || n->args[i].k != AK_INT || !expr_is_const(n->args[i].u.i, &v)) return dflt;
  return v;
}

static int wrap(int64_t d, int rank) { int r = rank ? rank : 1; return (int)(d < 0 ? d + r : d); }

/* Views (view.c's rules): the output indexes the input's storage; where PyTorch copies, a copy
 * kernel into a fresh contiguous tensor (reshape: the input in its own order, then viewed). */
int emit_view(Em *e, Node *n) {
  Value *x = n->args[0].u.t, *y = n->outs[0];
  TV *t = tv_of(e, n, x);
  if (!t) return -1;
  Layout outs[64];
  if (n->nouts > 64) return efail(e, n, "too many outputs");
  int r = view_layouts(e->g, n, &t->l, outs);
  if (r < 0) return -1;
  if (r == VIEW_COPY && view_is_reshape(n->op)) {
    TV *c = contiguous_of(e, n, x), v;
    contiguous_tv(e, &v, c->stor, c->dt, y->rank, y->sizes);
    e->tv[y->id] = v;
  } else if (r == VIEW_COPY) copy_kernel(e, n, alloc_value(e, y), t);
  else {
    bool mask = !strcmp(n->op->name, "native_dropout");   /* its mask has no storage */
    for (int i = 0; i < (mask ? 1 : n->nouts); i++) {
      TV v = *t;
      v.l = outs[i];
      e->tv[n->outs[i]->id] = v;
    }
  }
  return 0;
}

int emit_assert(Em *e, Node *n) { (void)e; (void)n; return 0; }   /* checked at compile time by the shape rule */
int emit_sym_size(Em *e, Node *n) { (void)e; (void)n; return 0; } /* sizes are expressions of s[] */
int emit_sym_arith(Em *e, Node *n) { (void)e; (void)n; return 0; }

/* ---------------------------------------------------------------- reductions and rows */

int emit_reduce(Em *e, Node *n) {
  const char *name = n->op->name;
  Value *xv = n->args[0].u.t;
  TV *x = tv_of(e, n, xv);
  if (!x) return -1;
  bool mask[R] = {0};
  int di = ops_arg_index(n->op, "dim"), nd = 0;
  if (di >= 0 && n->args[di].k == AK_INT) { int64_t d; expr_is_const(n->args[di].u.i, &d); if (x->rank) mask[wrap(d, x->rank)] = true; nd = 1; }
  else if (di >= 0 && n->args[di].k == AK_INTS && n->args[di].n) {
    for (int i = 0; i < n->args[di].n; i++) { int64_t d; expr_is_const(n->args[di].u.is[i], &d); if (x->rank) mask[wrap(d, x->rank)] = true; }
    nd = 1;
  }
  if (!nd) for (int d = 0; d < x->rank; d++) mask[d] = true;
  /* loop order: kept dims outside (parallel), reduced dims inside */
  int kept[R], red[R], nkept = 0, nred = 0;
  for (int d = 0; d < x->rank; d++) { if (mask[d]) red[nred++] = d; else kept[nkept++] = d; }
  TV *out = alloc_value(e, n->outs[0]);
  TV *out2 = n->nouts == 2 ? alloc_value(e, n->outs[1]) : NULL;
  bool ints = !dtype_is_float(out->dt) && !dtype_is_float(x->dt) && strncmp(name, "arg", 3) && strcmp(name, "max.dim") && strcmp(name, "min.dim");
  double correction = 1;
  if (!strcmp(name, "var.dim") || !strcmp(name, "std.dim")) { int ui = ops_arg_index(n->op, "unbiased"); correction = n->args[ui].u.b ? 1 : 0; }
  else {
    int ci = ops_arg_index(n->op, "correction");
    if (ci >= 0 && n->args[ci].k == AK_FLOAT) correction = n->args[ci].u.f;
    else if (ci >= 0 && n->args[ci].k == AK_INT) { int64_t v; expr_is_const(n->args[ci].u.i, &v); correction = (double)v; }
  }
  double ord = 2;
  int oi = ops_arg_index(n->op, "ord");
  if (oi >= 0) { const Arg *a = &n->args[oi]; int64_t v; ord = a->k == AK_FLOAT ? a->u.f : expr_is_const(a->u.i, &v) ? (double)v : 2; }
  FILE *f = e->k;
  int id = e->nk++;
  /* sums over outer dims of a contiguous inner dim (bias gradients, batch sums): blocks of columns
   * per thread, each row added with unit stride */
  int64_t one;
  bool plain = (!strncmp(name, "sum", 3) || !strncmp(name, "mean", 4)) && dtype_is_float(out->dt) && !out2;
  if (plain && !e->cuda && nkept >= 1 && nred >= 1 && expr_is_const(x->strides[kept[nkept - 1]], &one) && one == 1 && red[nred - 1] < kept[nkept - 1]) {
    kernel_begin(e, n, "column reduction");
    fprintf(f, "static void k%d(%s *restrict y, void *y2, const %s *x, const int64_t *s) {\n  (void)s; (void)y2;\n", id, ctype(out->dt), ctype(x->dt));
    const Expr *cnt = C(e, 1), *outer = C(e, 1);
    for (int i = 0; i < nred; i++) cnt = MUL(e, cnt, x->sizes[red[i]]);
    for (int i = 0; i < nkept - 1; i++) outer = MUL(e, outer, x->sizes[kept[i]]);
    const char *Cc = cx(e, x->sizes[kept[nkept - 1]]);
    fprintf(f, "  const int64_t Cn = %s, NB = (Cn + 255) / 256;\n", Cc);
    fprintf(f, "  #pragma omp parallel for schedule(static) if(%s * %s > 32768)\n", cx(e, MUL(e, outer, cnt)), Cc);
    fprintf(f, "  for (int64_t ob = 0; ob < %s * NB; ob++) {\n    int64_t o = ob / NB, cb = (ob %% NB) * 256, w = Cn - cb < 256 ? Cn - cb : 256;\n", cx(e, outer));
    /* the outer kept indices from o */
    fputs("    int64_t rest = o;\n", f);
    for (int i = nkept - 2; i >= 0; i--) fprintf(f, "    const int64_t i%d = rest %% %s; rest /= %s;\n", i, cx(e, x->sizes[kept[i]]), cx(e, x->sizes[kept[i]]));
    fputs("    (void)rest;\n    double acc[256] = {0};\n", f);
    for (int i = 0; i < nred; i++) fprintf(f, "%*sfor (int64_t r%d = 0; r%d < %s; r%d++)%s\n", 4 + 2 * i, "", i, i, cx(e, x->sizes[red[i]]), i, i == nred - 1 ? " {" : "");
    fprintf(f, "      const %s *row = x + %s", ctype(x->dt), cx(e, x->offset));
    for (int i = 0; i < nkept - 1; i++) fprintf(f, " + i%d * %s", i, cx(e, x->strides[kept[i]]));
    for (int i = 0; i < nred; i++) fprintf(f, " + r%d * %s", i, cx(e, x->strides[red[i]]));
    fputs(" + cb;\n      for (int64_t j = 0; j < w; j++) acc[j] += ", f);
    load_f(f, x->dt, "row", "j");
    fputs(";\n    }\n", f);
    const char *res = !strncmp(name, "mean", 4) ? arena_printf(e->a, "acc[j] / (double)(%s)", cx(e, cnt)) : "acc[j]";
    fputs("    for (int64_t j = 0; j < w; j++) ", f);
    store(f, out->dt, true, "y", "o * Cn + cb + j", res);
    fputs("  }\n}\n", f);
    fprintf(e->r, "  k%d(%s, NULL, %s, s);\n", id, sname(e, out->stor), sname(e, x->stor));
    return 0;
  }
  kernel_begin(e, n, "reduction");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y, %s%s *restrict y2, const %s *x", ctype(out->dt), out2 ? "" : "void", out2 ? ctype(out2->dt) : "", ctype(x->dt));
  ksyms(e);
  if (!out2) fputs("  (void)y2;\n", f);
  const Expr *ksz[R] = {0}, *rn = C(e, 1);
  for (int i = 0; i < nkept; i++) ksz[i] = x->sizes[kept[i]];
  for (int i = 0; i < nred; i++) rn = MUL(e, rn, x->sizes[red[i]]);
  int cl = open_loops_work(e, nkept, ksz, true, rn);
  /* output index: kept dims in order (keepdim only adds size-1 dims, which do not move data) */
  const char *oidx = linear_index(e, ksz, nkept, 0);
  const char *acc = ints ? "int64_t" : "double";
  bool is_max = !strncmp(name, "amax", 4) || !strcmp(name, "max") || !strcmp(name, "max.dim") || !strcmp(name, "argmax");
  bool is_min = !strncmp(name, "amin", 4) || !strcmp(name, "min") || !strcmp(name, "min.dim") || !strcmp(name, "argmin");
  bool is_var = !strncmp(name, "var", 3) || !strncmp(name, "std", 3);
  bool is_prod = !strncmp(name, "prod", 4), is_any = !strncmp(name, "any", 3), is_all = !strncmp(name, "all", 3);
  bool is_lse = !strcmp(name, "logsumexp"), is_norm = !strcmp(name, "linalg_vector_norm");
  fprintf(f, "    %s acc = %s, acc2 = 0; int64_t best = -1, cnt = 0; (void)acc2; (void)best; (void)cnt;\n", acc,
          is_prod || is_all ? "1" : is_max ? (ints ? "INT64_MIN" : "-INFINITY") : is_min ? (ints ? "INT64_MAX" : "INFINITY") : is_norm && isinf(ord) && ord < 0 ? "INFINITY" : "0");
  /* passes: logsumexp and var need two */
  int passes = is_lse || is_var ? 2 : 1;
  for (int pass = 0; pass < passes; pass++) {
    if (pass == 1) {
      if (is_lse) fputs("    double m = acc; acc = 0; if (isinf(m)) m = m > 0 ? m : 0;\n", f);
      else fputs("    double mean = acc / (double)cnt; acc = 0;\n", f);
    }
    fputs("    {\n", f);
    for (int i = 0; i < nred; i++)
      fprintf(f, "%*sfor (int64_t r%d = 0; r%d < %s; r%d++)%s\n", 4 + 2 * i, "", i, i, cx(e, x->sizes[red[i]]), i, i == nred - 1 ? " {" : "");
    if (!nred) fputs("    {\n", f);
    /* input index */
    char *xi = NULL;
    size_t xl = 0;
    FILE *xf = open_memstream(&xi, &xl);
    pexpr(xf, x->offset);
    for (int i = 0; i < nkept; i++) { fprintf(xf, " + i%d * ", i); pexpr(xf, x->strides[kept[i]]); }
    for (int i = 0; i < nred; i++) { fprintf(xf, " + r%d * ", i); pexpr(xf, x->strides[red[i]]); }
    fclose(xf);
    fprintf(f, "      %s v = ", acc);
    if (ints) load_i(f, x->dt, "x", xi); else load_f(f, x->dt, "x", xi);
    fputs(";\n", f);
    free(xi);
    if (pass == 1 && is_lse) fputs("      acc += exp(v - m);\n", f);
    else if (pass == 1) fputs("      acc += (v - mean) * (v - mean);\n", f);
    else if (is_max || is_min) {
      const char *cmp = is_max ? ">" : "<";
      if (ints) fprintf(f, "      if (best < 0 || v %s acc) { acc = v; best = cnt; }\n", cmp);
      else fprintf(f, "      if (best < 0 || (!isnan(acc) && (v %s acc || isnan(v)))) { acc = v; best = cnt; }\n", cmp);
    } else if (is_lse) fputs("      if (v > acc || isnan(v)) acc = v;\n", f);
    else if (is_prod) fputs("      acc *= v;\n", f);
    else if (is_any) fputs("      acc = acc || v != 0;\n", f);
    else if (is_all) fputs("      acc = acc && v != 0;\n", f);
    else if (is_norm) {
      if (isinf(ord)) fprintf(f, "      if (fabs(v) %s acc || isnan(v)) acc = fabs(v);\n", ord > 0 ? ">" : "<");
      else if (ord == 0) fputs("      acc += v != 0;\n", f);
      else if (ord == 1) fputs("      acc += fabs(v);\n", f);
      else if (ord == 2) fputs("      acc += v * v;\n", f);
      else { fputs("      acc += pow(fabs(v), ", f); fmt_double(f, ord); fputs(");\n", f); }
    } else fputs("      acc += v;\n", f);
    fputs("      cnt++;\n", f);
    for (int i = 0; i < (nred ? nred : 1); i++) if (i == (nred ? nred : 1) - 1) fputs("    }\n", f);
    fputs("    }\n", f);
    if (pass == 1 && !is_lse) fputs("    cnt = cnt / 2;\n", f);
  }
  /* result */
  const char *res = "acc";
  if (!strncmp(name, "mean", 4)) res = "acc / (double)cnt";
  else if (is_var) res = arena_printf(e->a, "%s(acc / ((double)cnt - %.17g))", !strncmp(name, "std", 3) ? "sqrt" : "", correction);
  else if (is_lse) res = "(cnt ? log(acc) + m : -INFINITY)";
  else if (is_norm && !isinf(ord) && ord == 2) res = "sqrt(acc)";
  else if (is_norm && !isinf(ord) && ord != 0 && ord != 1) res = arena_printf(e->a, "pow(acc, 1.0 / %.17g)", ord);
  if (!strncmp(name, "arg", 3)) res = "best";
  fputs("    ", f);
  store(f, out->dt, !ints && strncmp(name, "arg", 3), "y", oidx, res);
  if (out2 && !strcmp(name, "var_mean.correction")) { fputs("    ", f); store(f, out2->dt, true, "y2", oidx, "mean"); }
  else if (out2) { fputs("    ", f); store(f, out2->dt, false, "y2", oidx, "best"); }
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s", sname(e, out->stor), out2 ? sname(e, out2->stor) : "NULL", sname(e, x->stor));
  kcall_end(e);
  return 0;
}

int emit_scan(Em *e, Node *n) {
  const char *name = n->op->name;
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  int d = wrap(int_arg(n, "dim", 0), x->rank);
  bool ints = !dtype_is_float(out->dt), prod = !strcmp(name, "cumprod"), cum = !strncmp(name, "cum", 3);
  bool logsm = strstr(name, "log_softmax") != NULL;
  /* loops over every dim but d, then along d */
  const Expr *osz[R];
  int map[R], k = 0;
  for (int i = 0; i < x->rank; i++) if (i != d) { map[k] = i; osz[k++] = x->sizes[i]; }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, cum ? "scan" : "softmax");
  if (cum) kopen(e, id, false, false); else kopen_vec(e, id);
  fprintf(f, "%s *restrict y, const %s *x", ctype(out->dt), ctype(x->dt));
  ksyms(e);
  int cl = cum ? open_loops_work(e, k, osz, true, x->rank ? x->sizes[d] : NULL) : open_rows(e, k, osz, x->rank ? x->sizes[d] : NULL);
  char *xb = NULL, *yb = NULL;
  size_t l1 = 0, l2 = 0;
  FILE *xf = open_memstream(&xb, &l1), *yf = open_memstream(&yb, &l2);
  pexpr(xf, x->offset);
  pexpr(yf, out->offset);
  for (int i = 0; i < k; i++) {
    fprintf(xf, " + i%d * ", i); pexpr(xf, x->strides[map[i]]);
    fprintf(yf, " + i%d * ", i); pexpr(yf, out->strides[map[i]]);
  }
  fclose(xf);
  fclose(yf);
  const char *L = x->rank ? cx(e, x->sizes[d]) : "1", *xs = x->rank ? cx(e, x->strides[d]) : "0", *ys = x->rank ? cx(e, out->strides[d]) : "0";
  fprintf(f, "    const int64_t xb = %s, yb = %s, L = %s, xs = %s, ys = %s;\n", xb, yb, L, xs, ys);
  free(xb);
  free(yb);
  const char *xi = "xb + j * xs", *yi = "yb + j * ys";
  if (cum) {
    fprintf(f, "    %s acc = %s;\n    for (int64_t j = 0; j < L; j++) {\n      acc = acc %s ", ints ? "int64_t" : "double", prod ? "1" : "0", prod ? "*" : "+");
    if (ints) load_i(f, x->dt, "x", xi); else load_f(f, x->dt, "x", xi);
    fputs(";\n      ", f);
    store(f, out->dt, !ints, "y", yi, "acc");
    fputs("    }\n", f);
  } else {
    fprintf(f, "    double m = -INFINITY, z = 0;\n    %s { double v = ", row_for(e));
    load_f(f, x->dt, "x", xi);
    fputs("; if (v > m || isnan(v)) m = v; }\n", f);
    row_combine(e, "m", true);
    fputs("    if (isinf(m) && m < 0) m = 0;\n", f);
    /* float32 on the CPU: the float32 exponential (scalar.h), which vectorizes */
    const char *ex = x->dt == DT_F32 && !e->cuda ? "gg_expf" : "exp";
    if (!logsm && !e->cuda) {   /* rows that fit: each exponential once (not on the GPU: no room) */
      if (x->dt == DT_F32)   /* m is one of the floats, so x - m rounds as in float64 */
        fprintf(f, "    if (L <= 1024) {\n      float ex[1024];\n      const float mf = (float)m;\n"
                   "      for (int64_t j = 0; j < L; j++) ex[j] = gg_expf(x[%s] - mf);\n", xi);
      else {
        fputs("    if (L <= 1024) {\n      double ex[1024];\n      for (int64_t j = 0; j < L; j++) ex[j] = exp(", f);
        load_f(f, x->dt, "x", xi);
        fputs(" - m);\n", f);
      }
      fputs("      for (int64_t j = 0; j < L; j++) z += ex[j];\n      const double rz = 1.0 / z;\n      for (int64_t j = 0; j < L; j++) ", f);
      store(f, out->dt, true, "y", yi, "ex[j] * rz");
      fputs("      continue;\n    }\n", f);
    }
    fprintf(f, "    %s z += %s(", row_for(e), ex);
    load_f(f, x->dt, "x", xi);
    fputs(" - m);\n", f);
    row_combine(e, "z", false);
    fprintf(f, logsm ? "    const double lz = log(z);\n    %s {\n      double v = " : "    %s {\n      double v = ", row_for(e));
    load_f(f, x->dt, "x", xi);
    fputs(";\n      ", f);
    store(f, out->dt, true, "y", yi, logsm ? "v - m - lz" : arena_printf(e->a, "%s(v - m) / z", ex));
    fputs("    }\n", f);
  }
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, x->stor));
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- matrix products */

/* ---------------------------------------------------------------- packed weights and epilogues */

/* The matrix of weight t read as rows x cols with strides (srow, scol), packed at gg_open for the
 * runtime's own float32 kernel (gg_rt_gemm_packed, side 0: left operand, 1: right): the name of the
 * packed copy in the run body, or NULL when it cannot be (not a weight as stored, a buffer the model
 * updates, training, --target cuda, sizes not known at compile time). */
static const char *weight_pack(Em *e, const TV *t, int side, const Expr *rows, const Expr *cols, const Expr *srow, const Expr *scol) {
  if (!e->pack_ok || t->dt != DT_F32 || e->st[t->stor].kind != S_WEIGHT || e->mutated[e->st[t->stor].index]) return NULL;
  PackDesc d = {e->st[t->stor].index, side, 0, 0, 0, 0, 0};
  if (!expr_is_const(t->offset, &d.offset) || !expr_is_const(rows, &d.rows) || !expr_is_const(cols, &d.cols) || !expr_is_const(srow, &d.srow) ||
      !expr_is_const(scol, &d.scol) || d.rows <= 0 || d.cols <= 0)
    return NULL;
  for (int j = 0; j < e->npacks; j++)
    if (!memcmp(&e->packs[j], &d, sizeof d)) return arena_printf(e->a, "pk%d", j);
  PackDesc *n = arena_array(e->a, (size_t)e->npacks + 1, sizeof *n);
  if (e->npacks) memcpy(n, e->packs, sizeof *n * (size_t)e->npacks);
  n[e->npacks] = d;
  e->packs = n;
  return arena_printf(e->a, "pk%d", e->npacks++);
}

/* The epilogue of product or convolution n: the chain of pointwise nodes after it, each the only
 * reader of the one before (n's output first), over the same shape and dtype (float32 or float64, on
 * the CPU), each other operand a scalar, a single element, or a tensor of that shape, contiguous and
 * already computed (a residual): the runtime applies them to each finished tile or span of n's
 * output while it is in cache (gg_epi, gg_rt.h), with the same scalar.h functions and rounding as
 * their own kernel, and their nodes only name n's output. It saves writing and reading the output
 * once per node, and the fork and join of a kernel. fn: the function written for it, x: the tensors
 * it reads (GG_EPI_MAX at most). */
#define EPI_MAX 8   /* gg_rt.h's GG_EPI_MAX */
typedef struct Epi {
  int n;
  Node *chain[8];
  const char *fn;
  Params P;
} Epi;

static int64_t const_numel(const Value *v) {
  int64_t ne = 1, d;
  for (int i = 0; i < v->rank; i++) {
    if (!expr_is_const(v->sizes[i], &d)) return -1;
    ne *= d;
  }
  return ne;
}

/* Write the function of n's epilogue, the chain the schedule gave it (out: n's output storage); ep->n
 * is 0 when it has none. -1 on error. */
static int epilogue(Em *e, Node *n, const TV *out, Epi *ep) {
  ep->n = e->s->nchain[n->id];
  ep->P.n = 0;
  if (!ep->n) return 0;
  memcpy(ep->chain, e->s->chain[n->id], sizeof *ep->chain * (size_t)ep->n);
  Value *v = ep->chain[ep->n - 1]->outs[0];
  /* the kernel sees the output as a run of elements: the product's element is the seed, the chain's
   * values before the last are computed inline, the operands are read at the same linear index */
  Value *seed = n->outs[0];
  const Expr *ne = numel(e, out);
  int nsave = 0;
  Value *saved_v[8 + 8 * 8 + 1];
  TV saved[8 + 8 * 8 + 1];
  saved_v[nsave] = seed;
  saved[nsave++] = e->tv[seed->id];
  char *ld = NULL;
  size_t ldlen = 0;
  FILE *lf = open_memstream(&ld, &ldlen);
  load_f(lf, v->dtype, "yr", "j");
  fclose(lf);
  e->tv[seed->id] = (TV){.ok = true, .cexpr = arena_strdup(e->a, ld), .dt = seed->dtype, .rank = 1, .sizes = {ne}, .strides = {C(e, 1)}, .offset = C(e, 0)};
  free(ld);
  for (int k = 0; k < ep->n; k++) {
    Node *u = ep->chain[k];
    FOR_TENSOR_ARGS(u, a, {
      if (a == seed || (k > 0 && a == ep->chain[k - 1]->outs[0])) continue;
      saved_v[nsave] = a;
      saved[nsave++] = e->tv[a->id];
      TV *o = &e->tv[a->id];
      bool one = const_numel(a) == 1;
      o->rank = 1;
      o->sizes[0] = one ? C(e, 1) : ne;
      o->strides[0] = C(e, 1);
    })
    if (k < ep->n - 1) {
      Value *w = u->outs[0];
      saved_v[nsave] = w;
      saved[nsave++] = e->tv[w->id];
      e->tv[w->id] = (TV){.ok = true, .deferred = u, .dt = w->dtype, .rank = 1};
    }
  }
  char *body = NULL;
  size_t blen = 0;
  FILE *bf = open_memstream(&body, &blen);
  bool fl;
  Params P = {0};
  const char *val = fused_value(e, bf, ep->chain[ep->n - 1], 1, &ne, &P, &fl);
  fclose(bf);
  while (nsave--) e->tv[saved_v[nsave]->id] = saved[nsave];
  if (!val || P.n > EPI_MAX) {
    free(body);
    return val ? GG_INTERNAL(e->c) : -1;
  }
  ep->P = P;
  FILE *f = e->k;
  const char *T = ctype(v->dtype);
  ep->fn = arena_printf(e->a, "ep%d", e->nk);
  fprintf(f, "\n/* the epilogue of node ");
  comment(f, n->name);
  fputs(":", f);
  for (int k = 0; k < ep->n; k++) {
    fputc(' ', f);
    comment(f, ep->chain[k]->name);
  }
  fprintf(f, " */\nstatic GG_VEC void %s(const gg_epi *ep, void *yv, int64_t ld, int64_t rows, int64_t cols) {\n", ep->fn);
  fputs("  const int64_t *s = ep->s;\n  (void)s;\n", f);
  for (int j = 0; j < P.n; j++) fprintf(f, "  const %s *x%d = (const %s *)ep->x[%d];\n", ctype(P.tv[j].dt), j, ctype(P.tv[j].dt), j);
  fprintf(f, "  for (int64_t r = 0; r < rows; r++) {\n    %s *restrict yr = (%s *)yv + r * ld;\n", T, T);
  if (P.n) fprintf(f, "    const int64_t at = yr - (%s *)ep->y0;\n", T);   /* the operands' index */
  fputs(P.n ? "    for (int64_t j = 0; j < cols; j++) {\n      const int64_t i0 = at + j;\n" : "    for (int64_t j = 0; j < cols; j++) {\n", f);
  fputs(body, f);
  free(body);
  fputs("    ", f);
  store(f, v->dtype, fl, "yr", "j", val);
  fputs("    }\n  }\n}\n", f);
  return 0;
}

/* The epilogue in a kernel that calls the runtime: its tensors as parameters, the gg_epi built in the
 * body (y: the output), and their storages in the call. epi_ref: what the runtime is given. */
static void epi_params(Em *e, const Epi *ep) {
  for (int j = 0; j < ep->P.n; j++) fprintf(e->k, ", const void *e%d", j);
}
static void epi_decl(Em *e, const Epi *ep) {
  if (!ep->n) return;
  fprintf(e->k, "  const gg_epi ep = {%s, y, {", ep->fn);
  for (int j = 0; j < ep->P.n; j++) fprintf(e->k, "%se%d", j ? ", " : "", j);
  fputs(ep->P.n ? "}, s};\n" : "NULL}, s};\n", e->k);
}
static void epi_args(Em *e, const Epi *ep) {
  for (int j = 0; j < ep->P.n; j++) fprintf(e->r, ", %s", sname(e, ep->P.tv[j].stor));
}
static const char *epi_ref(const Epi *ep) { return ep->n ? "&ep" : "NULL"; }

/* A view usable as a BLAS matrix: one of its two last strides is 1. */
static bool blas_ok(Em *e, const TV *t) {
  if (t->rank < 2) return false;
  int64_t a, b;
  bool ka = expr_is_const(t->strides[t->rank - 1], &a), kb = expr_is_const(t->strides[t->rank - 2], &b);
  (void)e;
  return (ka && a == 1) || (kb && b == 1);
}

/* x @ w with x [..., M, K] whose batch dims step over whole matrices (a linear layer on a sequence):
 * one product with prod(batch) * M rows instead of a batch of small ones sharing w. BLAS blocks and
 * threads a tall product far better; the output, fresh and contiguous, is the same memory. */
static bool fold_batch_rows(Em *e, TV *A, const TV *B, const Value *bias, const TV *out, TV *flat) {
  int r = A->rank;
  int64_t one;
  if (r <= 2 || B->rank != 2 || (bias && bias->rank > 1) || !expr_is_const(A->strides[r - 1], &one) || one != 1) return false;
  const Expr *rows = A->sizes[r - 2];
  for (int d = r - 3; d >= 0; d--) {
    if (!expr_same(e->g, A->strides[d], MUL(e, A->sizes[d + 1], A->strides[d + 1]))) return false;
    rows = MUL(e, rows, A->sizes[d]);
  }
  const Expr *sizes[2] = {rows, out->sizes[out->rank - 1]};
  contiguous_tv(e, flat, out->stor, out->dt, 2, sizes);
  A->sizes[0] = rows;
  A->strides[0] = A->strides[r - 2];
  A->sizes[1] = A->sizes[r - 1];
  A->strides[1] = A->strides[r - 1];
  A->rank = 2;
  return true;
}

/* CUDA: gg_cu_gemm (cuBLASLt for one product, cuBLAS strided-batched over the last batch dim, host
 * loops over the others). A bias vector along the rows goes to cuBLASLt's epilogue; any other is
 * copied into the output first and the product added to it (beta). Half types accumulate in
 * float32, as PyTorch's do. */
static void copy_kernel(Em *e, Node *n, const TV *dst, const TV *src);
static int matmul_cuda(Em *e, Node *n, TV *out, const TV *Ab, const TV *Bb, int nb, Value *bias, double alpha, double beta) {
  DType dt = out->dt;
  int code = dt == DT_F32 ? 0 : dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : -1;
  if (code < 0) return efail(e, n, "matrix products in %s are not supported with --target cuda", dtype_name(dt));
  /* a vector along the output's rows goes to cuBLASLt's epilogue; any other bias is copied in first */
  const TV *bt = bias ? &e->tv[bias->id] : NULL;
  int64_t unit;
  bool epi = bt && nb == 0 && beta == 1 && bt->dt == dt && bt->rank == 1 && expr_same(e->g, bt->sizes[0], out->sizes[out->rank - 1]) &&
             expr_is_const(bt->strides[0], &unit) && unit == 1;
  if (bt && !epi) {
    TV bb = broadcast_tv(e, bt, out->rank, out->sizes);
    copy_kernel(e, n, out, &bb);
  }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "matrix product (cuBLAS)");
  const char *T = ctype(dt);
  kopen(e, id, false, true);
  fprintf(f, "%s *y, const %s *a, const %s *b, const %s *bias", T, T, T, T);
  ksyms(e);
  const Expr *M = Ab->sizes[nb], *K = Ab->sizes[nb + 1], *N = Bb->sizes[nb + 1];
  fprintf(f, "  const int64_t M = %s, N = %s, K = %s;\n", cx(e, M), cx(e, N), cx(e, K));
  int outer = nb > 0 ? nb - 1 : 0;
  const char *cnt = nb > 0 ? cx(e, out->sizes[nb - 1]) : "1";
  int cl = open_loops(e, outer, out->sizes, false);
  char *ai = arena_strdup(e->a, cx(e, Ab->offset)), *bi = arena_strdup(e->a, cx(e, Bb->offset));
  for (int d = 0; d < outer; d++) {
    ai = arena_printf(e->a, "%s + i%d * %s", ai, d, cx(e, Ab->strides[d]));
    bi = arena_printf(e->a, "%s + i%d * %s", bi, d, cx(e, Bb->strides[d]));
  }
  fprintf(f, "    gg_cu_gemm(%d, M, N, K, %.17g, a + %s, %s, %s, %s, b + %s, %s, %s, %s, %.17g, y + (%s) * %s * M * N, %s, %s);\n", code, alpha, ai,
          cx(e, Ab->strides[nb]), cx(e, Ab->strides[nb + 1]), nb > 0 ? cx(e, Ab->strides[nb - 1]) : "0", bi, cx(e, Bb->strides[nb]),
          cx(e, Bb->strides[nb + 1]), nb > 0 ? cx(e, Bb->strides[nb - 1]) : "0", bt && !epi ? beta : 0.0, linear_index(e, out->sizes, outer, 0), cnt,
          cnt, epi ? arena_printf(e->a, "bias + %s", cx(e, bt->offset)) : "NULL");
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s", sname(e, out->stor), sname(e, Ab->stor), sname(e, Bb->stor), epi ? sname(e, bt->stor) : "NULL");
  kcall_end(e);
  return 0;
}

/* out[batch] = alpha * a[batch] @ b[batch] (+ beta * bias broadcast), a: [..., M, K], b: [..., K, N]. */
static int matmul_kernel(Em *e, Node *n, Value *av, Value *bv, bool b_transposed, Value *bias, double alpha, double beta) {
  TV *a0 = tv_of(e, n, av), *b0 = tv_of(e, n, bv);
  if (!a0 || !b0) return -1;
  TV A = *a0, B = *b0;
  if (b_transposed && B.rank == 2) {   /* linear: weight [N, K] is read as [K, N] */
    const Expr *t = B.sizes[0]; B.sizes[0] = B.sizes[1]; B.sizes[1] = t;
    t = B.strides[0]; B.strides[0] = B.strides[1]; B.strides[1] = t;
  }
  /* vectors become matrices, as numpy's matmul does */
  bool a_vec = A.rank == 1, b_vec = B.rank == 1;
  if (a_vec) { A.rank = 2; A.sizes[1] = A.sizes[0]; A.strides[1] = A.strides[0]; A.sizes[0] = C(e, 1); A.strides[0] = C(e, 0); }
  if (b_vec) { B.rank = 2; B.sizes[1] = C(e, 1); B.strides[1] = C(e, 1); }
  Value *y = n->outs[0];
  DType dt = y->dtype;
  if (A.dt != dt || B.dt != dt) return efail(e, n, "mixed dtypes in a matrix product");
  bool blas = dt == DT_F32 || dt == DT_F64;
  if (blas && !blas_ok(e, &A)) { TV *c = contiguous_of(e, n, av); A.stor = c->stor; A.offset = c->offset; memcpy(A.strides + A.rank - c->rank, c->strides, sizeof(Expr *) * (size_t)c->rank); }
  if (blas && !blas_ok(e, &B)) {
    TV *c = contiguous_of(e, n, bv);
    if (b_transposed) { B.stor = c->stor; B.offset = c->offset; B.strides[0] = C(e, 1); B.strides[1] = c->strides[0]; }
    else { B.stor = c->stor; B.offset = c->offset; memcpy(B.strides + B.rank - c->rank, c->strides, sizeof(Expr *) * (size_t)c->rank); }
  }
  TV *out = alloc_value(e, y), flat;
  if (!b_vec && fold_batch_rows(e, &A, &B, bias, out, &flat)) out = &flat;
  /* batch dims of the output: all but the matrix dims (or the vector dim) */
  int orank = out->rank, nb = orank - (a_vec ? 0 : 1) - (b_vec ? 0 : 1);
  if (nb < 0) nb = 0;
  const Expr *M = A.sizes[A.rank - 2], *K = A.sizes[A.rank - 1], *N = B.sizes[B.rank - 1];
  TV Ab, Bb;
  {
    const Expr *bs[R + 2];
    for (int d = 0; d < nb; d++) bs[d] = out->sizes[d];
    bs[nb] = M; bs[nb + 1] = K;
    Ab = broadcast_tv(e, &A, nb + 2, bs);
    bs[nb] = K; bs[nb + 1] = N;
    Bb = broadcast_tv(e, &B, nb + 2, bs);
  }
  if (e->cuda) return matmul_cuda(e, n, out, &Ab, &Bb, nb, bias, alpha, beta);
  Epi ep;
  if (epilogue(e, n, out, &ep)) return -1;
  /* a weight on the right of one float32 product: packed at gg_open; the left operand is packed per
   * call (8 rows per panel: (M + 8) * K floats of scratch), the bias and the epilogue go to each tile */
  const TV *bt = bias ? &e->tv[bias->id] : NULL;
  int64_t unit;
  bool col_bias = bt && beta == 1 && bt->dt == dt && bt->rank == 1 && expr_same(e->g, bt->sizes[0], N) && expr_is_const(bt->strides[0], &unit) &&
                  unit == 1;
  const char *pk = dt == DT_F32 && nb == 0 && !a_vec && !b_vec && alpha == 1 && (!bt || col_bias)
                       ? weight_pack(e, &Bb, 1, K, N, Bb.strides[0], Bb.strides[1])
                       : NULL;
  int apk = pk ? new_stor(e, S_SCRATCH, 0, DT_F32, MUL(e, ADD(e, M, C(e, 8)), K)) : -1;
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, pk ? "matrix product (packed weight)" : "matrix product");
  const char *T = ctype(dt);
  kopen(e, id, false, true);
  fprintf(f, "%s *restrict y, const %s *a, const %s *b, const %s *bias", T, T, T, bias ? ctype(e->tv[bias->id].dt) : T);
  if (pk) fputs(", float *ap, const float *pk", f);
  epi_params(e, &ep);
  ksyms(e);
  fputs("  (void)bias;\n", f);
  epi_decl(e, &ep);
  fprintf(f, "  const int64_t M = %s, N = %s, K = %s;\n", cx(e, M), cx(e, N), cx(e, K));
  if (pk) {
    fprintf(f, "  if (pk) {\n    gg_rt_pack(0, M, K, a + %s, %s, %s, ap);\n", cx(e, Ab.offset), cx(e, Ab.strides[0]), cx(e, Ab.strides[1]));
    fprintf(f, "    gg_rt_gemm_packed(M, N, K, ap, pk, y, N, NULL, %s, %s);\n    return;\n  }\n",
            bt ? arena_printf(e->a, "bias + %s", cx(e, bt->offset)) : "NULL", epi_ref(&ep));
  }
  /* a batch of small float32 products (attention heads): one product per thread, on the runtime's own
   * kernel; where BLAS runs them, one after another (concurrent calls into OpenBLAS serialize, and
   * even an inactive parallel region around them made OpenBLAS 10x slower) */
  bool par = nb > 0 && dt == DT_F32;
  char *lbuf = NULL;
  size_t llen = 0;
  FILE *kf = f;
  if (par) e->k = f = open_memstream(&lbuf, &llen);
  int cl = open_loops(e, nb, out->sizes, false);
  char *ai = NULL, *bi = NULL;
  size_t l1 = 0, l2 = 0;
  FILE *af = open_memstream(&ai, &l1), *bf = open_memstream(&bi, &l2);
  pexpr(af, Ab.offset);
  pexpr(bf, Bb.offset);
  for (int d = 0; d < nb; d++) {
    fprintf(af, " + i%d * ", d); pexpr(af, Ab.strides[d]);
    fprintf(bf, " + i%d * ", d); pexpr(bf, Bb.strides[d]);
  }
  fclose(af);
  fclose(bf);
  fprintf(f, "    const int64_t yo = %s;\n", linear_index(e, out->sizes, nb, 0));
  fprintf(f, "    %s *yy = y + yo * M * N;\n", T);
  const char *sam = cx(e, Ab.strides[nb]), *sak = cx(e, Ab.strides[nb + 1]), *sbk = cx(e, Bb.strides[nb]), *sbn = cx(e, Bb.strides[nb + 1]);
  /* the epilogue on each product as it finishes, unless a bias or alpha comes first */
  bool epi_late = ep.n && (bias || alpha != 1);
  if (blas)
    fprintf(f, "    gg_rt_%cgemm(M, N, K, a + %s, %s, %s, b + %s, %s, %s, yy, %s);\n", dt == DT_F32 ? 's' : 'd', ai, sam, sak, bi, sbk, sbn,
            epi_late ? "NULL" : epi_ref(&ep));
  else {
    fprintf(f, "    for (int64_t m = 0; m < M; m++)\n      for (int64_t j = 0; j < N; j++) {\n        double acc = 0;\n");
    fprintf(f, "        for (int64_t q = 0; q < K; q++) acc += ");
    load_f(f, dt, "a", arena_printf(e->a, "%s + m * %s + q * %s", ai, sam, sak));
    fputs(" * ", f);
    load_f(f, dt, "b", arena_printf(e->a, "%s + q * %s + j * %s", bi, sbk, sbn));
    fputs(";\n        ", f);
    store(f, dt, true, "yy", "m * N + j", "acc");
    fputs("      }\n", f);
  }
  free(ai);
  free(bi);
  close_loops(e, cl);
  if (par) {
    fclose(f);
    e->k = f = kf;
    fprintf(f, "  if (gg_rt_packed_ok() && (double)M * N * K < 8e6) {\n  #pragma omp parallel for schedule(static)%s\n%s  } else {\n%s  }\n",
            nb > 1 ? arena_printf(e->a, " collapse(%d)", nb) : "", lbuf, lbuf);
    free(lbuf);
  }
  if (bias || alpha != 1) {
    /* while the product is hot in cache: y = alpha * y + beta * bias, then the epilogue */
    TV bb = bt ? broadcast_tv(e, bt, out->rank, out->sizes) : *out;
    int c2 = open_loops(e, out->rank, out->sizes, true);
    const char *yi = index_of(e, out, out->rank);
    fprintf(f, "    double v = %.17g * ", alpha);
    load_f(f, dt, "y", yi);
    if (bt) {
      fprintf(f, " + %.17g * ", beta);
      load_f(f, bt->dt, "bias", index_of(e, &bb, out->rank));
    }
    fputs(";\n    ", f);
    store(f, dt, true, "y", yi, "v");
    close_loops(e, c2);
    if (epi_late) fprintf(f, "  gg_rt_epi_pass(&ep, y, sizeof(%s), %s);\n", T, cx(e, numel(e, out)));
  }
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s", sname(e, out->stor), sname(e, A.stor), sname(e, B.stor), bias ? sname(e, e->tv[bias->id].stor) : "NULL");
  if (pk) fprintf(e->r, ", %s, %s", sname(e, apk), pk);
  epi_args(e, &ep);
  kcall_end(e);
  (void)cl;
  return 0;
}

int emit_matmul(Em *e, Node *n) {
  Value *b = n->args[1].u.t;
  return matmul_kernel(e, n, n->args[0].u.t, b, false, NULL, 1, 0);
}

int emit_linear(Em *e, Node *n) {
  Value *w = n->args[1].u.t, *bias = n->args[2].k == AK_TENSOR ? n->args[2].u.t : NULL;
  return matmul_kernel(e, n, n->args[0].u.t, w, w->rank == 2, bias, 1, 1);
}

int emit_addmm(Em *e, Node *n) {
  bool batched = !strcmp(n->op->name, "baddbmm");
  const Arg *al = &n->args[ops_arg_index(n->op, "alpha")], *be = &n->args[ops_arg_index(n->op, "beta")];
  int64_t iv;
  double alpha = al->k == AK_FLOAT ? al->u.f : expr_is_const(al->u.i, &iv) ? (double)iv : 1;
  double beta = be->k == AK_FLOAT ? be->u.f : expr_is_const(be->u.i, &iv) ? (double)iv : 1;
  return matmul_kernel(e, n, n->args[ops_arg_index(n->op, batched ? "batch1" : "mat1")].u.t, n->args[ops_arg_index(n->op, batched ? "batch2" : "mat2")].u.t,
                       false, n->args[0].u.t, alpha, beta);
}

/* ---------------------------------------------------------------- normalization rows */

/* layer_norm, native_layer_norm and rms_norm over the last dims, one row per task: the mean (and
 * variance) in double over the row while it is in cache, then the normalized, scaled row. The same
 * arithmetic as the interpreter, rounded once. (group, instance and batch norms are rewritten.) */
int emit_norm(Em *e, Node *n) {
  const char *name = n->op->name;
  bool rms = !strcmp(name, "rms_norm");
  if (strcmp(name, "layer_norm") && strcmp(name, "native_layer_norm") && !rms)
    return efail(e, n, "reached the code generator undecomposed (internal error)");
  Value *xv = n->args[0].u.t;
  TV *x = contiguous_of(e, n, xv);
  if (!x) return -1;
  const Arg *ns = &n->args[ops_arg_index(n->op, "normalized_shape")];
  int wi = ops_arg_index(n->op, "weight"), bi = ops_arg_index(n->op, "bias"), ei = ops_arg_index(n->op, "eps");
  TV *w = n->args[wi].k == AK_TENSOR ? contiguous_of(e, n, n->args[wi].u.t) : NULL;
  TV *b = bi >= 0 && n->args[bi].k == AK_TENSOR ? contiguous_of(e, n, n->args[bi].u.t) : NULL;
  double eps = n->args[ei].k == AK_FLOAT ? n->args[ei].u.f
             : xv->dtype == DT_F64 ? 2.220446049250313e-16 : xv->dtype == DT_F16 ? 0.0009765625 : xv->dtype == DT_BF16 ? 0.0078125 : 1.1920928955078125e-07;
  const Expr *len = C(e, 1), *rows = C(e, 1);
  for (int i = 0; i < ns->n; i++) len = MUL(e, len, ns->u.is[i]);
  for (int d = 0; d < x->rank - ns->n; d++) rows = MUL(e, rows, x->sizes[d]);
  TV *out = alloc_value(e, n->outs[0]);
  TV *mo = n->nouts == 3 ? alloc_value(e, n->outs[1]) : NULL, *ro = n->nouts == 3 ? alloc_value(e, n->outs[2]) : NULL;
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, rms ? "rms norm rows" : "layer norm rows");
  const char *T = ctype(out->dt);
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y, %s *restrict mo, %s *restrict ro, const %s *x, const %s *w, const %s *b", T, mo ? T : "void", ro ? T : "void",
          ctype(x->dt), w ? ctype(w->dt) : "void", b ? ctype(b->dt) : "void");
  ksyms(e);
  fprintf(f, "  (void)mo; (void)ro; (void)w; (void)b;\n  const int64_t L = %s;\n", cx(e, len));
  int cl = open_rows(e, 1, &rows, len);
  fputs("    const int64_t r = i0;\n", f);
  fputs("    double m = 0, v = 0;\n", f);
  if (!rms) {
    fprintf(f, "    %s m += ", row_for(e));
    load_f(f, x->dt, "x", "r * L + j");
    fputs(";\n", f);
    row_combine(e, "m", false);
    fputs("    m /= (double)L;\n", f);
  }
  fprintf(f, "    %s { double d = ", row_for(e));
  load_f(f, x->dt, "x", "r * L + j");
  fputs(" - m; v += d * d; }\n", f);
  row_combine(e, "v", false);
  fprintf(f, "    const double rs = 1.0 / sqrt(v / (double)L + %.17g);\n", eps);
  fprintf(f, "    %s {\n      double o = (", row_for(e));
  load_f(f, x->dt, "x", "r * L + j");
  fputs(" - m) * rs", f);
  if (w) { fputs(" * ", f); load_f(f, w->dt, "w", "j"); }
  if (b) { fputs(" + ", f); load_f(f, b->dt, "b", "j"); }
  fputs(";\n      ", f);
  store(f, out->dt, true, "y", "r * L + j", "o");
  fputs("    }\n", f);
  if (mo) {
    fputs(e->rowwarp ? "    if (lane == 0) {\n    " : "    {\n    ", f);
    store(f, mo->dt, true, "mo", "r", "m");
    fputs("    ", f);
    store(f, ro->dt, true, "ro", "r", "rs");
    fputs("    }\n", f);
  }
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s, %s", sname(e, out->stor), mo ? sname(e, mo->stor) : "NULL", ro ? sname(e, ro->stor) : "NULL", sname(e, x->stor),
          w ? sname(e, w->stor) : "NULL", b ? sname(e, b->stor) : "NULL");
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- convolution and pooling */

static bool const_is(const Expr *x, int64_t v) {
  int64_t c;
  return expr_is_const(x, &c) && c == v;
}

static const Expr *list_at(const Arg *a, int i) { return a->u.is[a->n == 1 ? 0 : i]; }

int emit_conv(Em *e, Node *n) {
  Value *xv = n->args[0].u.t, *wv = n->args[1].u.t, *y = n->outs[0];
  const Arg *ba = &n->args[2];
  Value *bv = ba->k == AK_TENSOR ? ba->u.t : NULL;
  if (y->dtype != DT_F32 && y->dtype != DT_F64) return efail(e, n, "convolution in %s is not supported in compiled code", dtype_name(y->dtype));
  TV *x = contiguous_of(e, n, xv), *w = contiguous_of(e, n, wv), *b = bv ? contiguous_of(e, n, bv) : NULL;
  if (!x || !w || (bv && !b)) return -1;
  TV *out = alloc_value(e, y);
  int nsp = w->rank - 2;
  bool batched = x->rank == nsp + 2;
  bool tr = (ops_arg_index(n->op, "transposed") >= 0 && n->args[ops_arg_index(n->op, "transposed")].u.b) || !strncmp(n->op->name, "conv_transpose", 14);
  const Arg *sa = &n->args[ops_arg_index(n->op, "stride")], *pa = &n->args[ops_arg_index(n->op, "padding")], *da = &n->args[ops_arg_index(n->op, "dilation")];
  const Expr *one = C(e, 1), *zero = C(e, 0);
  const Expr *in[3] = {one, one, one}, *k[3] = {one, one, one}, *os[3] = {one, one, one}, *st[3] = {one, one, one}, *pd[3] = {zero, zero, zero}, *dl[3] = {one, one, one};
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    in[j] = x->sizes[x->rank - nsp + i];
    k[j] = w->sizes[2 + i];
    os[j] = out->sizes[out->rank - nsp + i];
    st[j] = list_at(sa, i);
    pd[j] = list_at(pa, i);
    dl[j] = list_at(da, i);
  }
  const Expr *groups = n->args[ops_arg_index(n->op, "groups")].u.i;
  const Expr *cin = x->sizes[batched ? 1 : 0], *cout = out->sizes[batched ? 1 : 0];
  const Expr *ksp = MUL(e, MUL(e, k[0], k[1]), k[2]);
  const Expr *cg = expr_bin(e->a, E_FLOORDIV, tr ? cout : cin, groups);
  const Expr *sp = tr ? MUL(e, MUL(e, in[0], in[1]), in[2]) : MUL(e, MUL(e, os[0], os[1]), os[2]);
  Epi ep;
  if (epilogue(e, n, out, &ep)) return -1;
  /* one group, float32: the weight packed at gg_open. 2-D: the product reads the padded image's rows
   * (of its phases, when strided) in place of im2col (gg_rt_conv_packed_f32's modes 1 and 2), with the
   * weight as A (Cout x Cin*kernel, the image over the padded width as B) or, where its tiles waste
   * less (no padded columns, Cout a multiple of the panel width), as B (Cin*kernel x Cout, the output
   * positions as A, the output transposed back). Its scratch holds the row and position offsets, the
   * phase images and the wide or transposed output; im2col's fits too (without AVX-512 the same code
   * goes to BLAS). */
  int64_t g1, sh = 1, sw = 1, cv[5];
  bool one_group = !tr && expr_is_const(groups, &g1) && g1 == 1 && !e->cuda && e->pack_ok;
  bool rows = one_group && const_is(in[0], 1) && const_is(k[0], 1) && const_is(pd[0], 0) && const_is(st[0], 1) && expr_is_const(st[1], &sh) &&
              expr_is_const(st[2], &sw) && sh >= 1 && sw >= 1;
  int mode = rows ? 1 : 0;
  const Expr *hq = NULL, *wq = NULL, *kk = MUL(e, cin, ksp);
  if (rows) {
    hq = expr_bin(e->a, E_FLOORDIV, ADD(e, ADD(e, in[1], MUL(e, C(e, 2), pd[1])), C(e, sh - 1)), st[1]);
    wq = expr_bin(e->a, E_FLOORDIV, ADD(e, ADD(e, in[2], MUL(e, C(e, 2), pd[2])), C(e, sw - 1)), st[2]);
    /* the multiply-adds each way computes, padding included (panels of 8 rows; of 32 columns, or 16
     * for a last one of at most 16), in lanes of a vector FMA, plus storing the output: transposed
     * element by element (~32 lanes' time each, measured on mobilenet_v3_small's 27-deep first
     * convolution, which mode 2 had made 35% slower) or copied out of the wide grid (~4) */
    if (expr_is_const(cout, &cv[0]) && expr_is_const(os[1], &cv[1]) && expr_is_const(os[2], &cv[2]) && expr_is_const(wq, &cv[3]) &&
        expr_is_const(kk, &cv[4])) {
      int64_t nw = (cv[1] - 1) * cv[3] + cv[2], osp = cv[1] * cv[2];
      #define PAD8(v) (((v) + 7) / 8 * 8)
      #define PAD32(v) ((v) / 32 * 32 + ((v) % 32 == 0 ? 0 : (v) % 32 <= 16 ? 16 : 32))
      double m2 = (double)PAD8(osp) * (double)PAD32(cv[0]) * (double)cv[4] + 32.0 * (double)osp * (double)cv[0];
      double m1 = (double)PAD8(cv[0]) * (double)PAD32(nw) * (double)cv[4] + (cv[3] != cv[2] ? 4.0 * (double)osp * (double)cv[0] : 0);
      if (m2 < m1) mode = 2;
      #undef PAD8
      #undef PAD32
    }
  }
  const char *pk = one_group ? mode == 2 ? weight_pack(e, w, 1, kk, cout, C(e, 1), kk) : weight_pack(e, w, 0, cout, kk, kk, C(e, 1)) : NULL;
  if (!pk) mode = 0;
  const Expr *scratch = MUL(e, MUL(e, cg, ksp), pk ? ADD(e, sp, C(e, 32)) : sp);
  if (mode)
    scratch = expr_bin(e->a, E_MAX, scratch, ADD(e, ADD(e, MUL(e, C(e, 2), ADD(e, kk, C(e, 8))), MUL(e, C(e, 2), ADD(e, sp, C(e, 16)))),
                                                 ADD(e, MUL(e, MUL(e, C(e, sh * sw), cin), MUL(e, hq, wq)), MUL(e, MUL(e, cout, os[1]), wq))));
  int col = new_stor(e, S_SCRATCH, 0, y->dtype, scratch);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, tr ? "transposed convolution (GEMM + col2im)" : mode == 1 ? "convolution (packed weight x image rows in place)" :
                     mode == 2 ? "convolution (image rows in place x packed weight, transposed)" :
                     pk ? "convolution (im2col + GEMM, packed weight)" : "convolution (im2col + GEMM)");
  const char *T = ctype(y->dtype);
  kopen(e, id, false, true);
  fprintf(f, "%s *y, const %s *x, const %s *w, const %s *b, %s *col", T, T, T, T, T);
  if (pk) fputs(", const float *pk", f);
  epi_params(e, &ep);
  ksyms(e);
  epi_decl(e, &ep);
  fprintf(f, "  const gg_conv c = {%s, %s, %s, %s, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, %s};\n",
          batched ? cx(e, x->sizes[0]) : "1", cx(e, cin), cx(e, cout), cx(e, groups), cx(e, in[0]), cx(e, in[1]), cx(e, in[2]), cx(e, k[0]),
          cx(e, k[1]), cx(e, k[2]), cx(e, os[0]), cx(e, os[1]), cx(e, os[2]), cx(e, st[0]), cx(e, st[1]), cx(e, st[2]), cx(e, pd[0]), cx(e, pd[1]),
          cx(e, pd[2]), cx(e, dl[0]), cx(e, dl[1]), cx(e, dl[2]), tr ? "true" : "false");
  if (e->cuda) fprintf(f, "  gg_cu_conv(%d, &c, x, w, b, y, col);\n}\n", y->dtype == DT_F64);
  else {
    if (pk) fprintf(f, "  if (pk) gg_rt_conv_packed_f32(&c, x, pk, b, y, col, %s, %d);\n  else", epi_ref(&ep), mode);
    fprintf(f, "  gg_rt_conv_%s(&c, x, w, b, y, col, %s);\n}\n", y->dtype == DT_F32 ? "f32" : "f64", epi_ref(&ep));
  }
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s", sname(e, out->stor), sname(e, x->stor), sname(e, w->stor), b ? sname(e, b->stor) : "NULL", sname(e, col));
  if (pk) fprintf(e->r, ", %s", pk);
  epi_args(e, &ep);
  kcall_end(e);
  return 0;
}

/* convolution_backward: the weight's and bias's gradients through the runtime (the input's gradient
 * is a transposed convolution, which autograd writes as one) */
int emit_conv_backward(Em *e, Node *n) {
  const Arg *mask = &n->args[ops_arg_index(n->op, "output_mask")];
  if (mask->u.bs[0]) return efail(e, n, "compiled code takes input gradients from transposed convolutions, not convolution_backward");
  if (e->cuda) return efail(e, n, "convolution gradients are not supported with --target cuda yet");
  Value *gv = n->args[0].u.t, *xv = n->args[1].u.t, *wv = n->args[2].u.t;
  if (gv->dtype != DT_F32 && gv->dtype != DT_F64) return efail(e, n, "convolution gradients in %s are not supported in compiled code", dtype_name(gv->dtype));
  TV *gy = contiguous_of(e, n, gv), *x = contiguous_of(e, n, xv), *w = tv_of(e, n, wv);
  if (!gy || !x || !w) return -1;
  TV *dw = mask->u.bs[1] ? alloc_value(e, n->outs[1]) : NULL, *db = mask->u.bs[2] ? alloc_value(e, n->outs[2]) : NULL;
  int nsp = x->rank - 2;
  const Arg *sa = &n->args[ops_arg_index(n->op, "stride")], *pa = &n->args[ops_arg_index(n->op, "padding")], *da = &n->args[ops_arg_index(n->op, "dilation")];
  const Expr *one = C(e, 1), *zero = C(e, 0);
  const Expr *in[3] = {one, one, one}, *k[3] = {one, one, one}, *os[3] = {one, one, one}, *st[3] = {one, one, one}, *pd[3] = {zero, zero, zero}, *dl[3] = {one, one, one};
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    in[j] = x->sizes[2 + i];
    k[j] = w->sizes[2 + i];
    os[j] = gy->sizes[2 + i];
    st[j] = list_at(sa, i);
    pd[j] = list_at(pa, i);
    dl[j] = list_at(da, i);
  }
  const Expr *groups = n->args[ops_arg_index(n->op, "groups")].u.i;
  const Expr *icg = expr_bin(e->a, E_FLOORDIV, x->sizes[1], groups), *ocg = expr_bin(e->a, E_FLOORDIV, w->sizes[0], groups);
  const Expr *ksp = MUL(e, MUL(e, k[0], k[1]), k[2]), *osp = MUL(e, MUL(e, os[0], os[1]), os[2]);
  int col = new_stor(e, S_SCRATCH, 0, gy->dt, MUL(e, MUL(e, icg, ksp), osp));
  int tmp = new_stor(e, S_SCRATCH, 0, gy->dt, MUL(e, MUL(e, icg, ksp), ocg));
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "convolution weight gradient (im2col + GEMM)");
  const char *T = ctype(gy->dt);
  kopen(e, id, false, true);
  fprintf(f, "%s *dw, %s *db, const %s *x, const %s *dy, %s *col, %s *tmp", T, T, T, T, T, T);
  ksyms(e);
  fprintf(f, "  const gg_conv c = {%s, %s, %s, %s, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, false};\n",
          cx(e, x->sizes[0]), cx(e, x->sizes[1]), cx(e, w->sizes[0]), cx(e, groups), cx(e, in[0]), cx(e, in[1]), cx(e, in[2]), cx(e, k[0]),
          cx(e, k[1]), cx(e, k[2]), cx(e, os[0]), cx(e, os[1]), cx(e, os[2]), cx(e, st[0]), cx(e, st[1]), cx(e, st[2]), cx(e, pd[0]), cx(e, pd[1]),
          cx(e, pd[2]), cx(e, dl[0]), cx(e, dl[1]), cx(e, dl[2]));
  fprintf(f, "  gg_rt_conv_wgrad_%s(&c, x, dy, dw, db, col, tmp);\n}\n", gy->dt == DT_F32 ? "f32" : "f64");
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s, %s", dw ? sname(e, dw->stor) : "NULL", db ? sname(e, db->stor) : "NULL", sname(e, x->stor), sname(e, gy->stor),
          sname(e, col), sname(e, tmp));
  kcall_end(e);
  return 0;
}

static int pool_call(Em *e, Node *n, int kind, int nsp, const Expr *k[2], const Expr *st[2], const Expr *pd[2], const Expr *dl[2], bool cip, int64_t divisor) {
  Value *xv = n->args[0].u.t, *y = n->outs[0];
  if (y->dtype != DT_F32 && y->dtype != DT_F64) return efail(e, n, "pooling in %s is not supported in compiled code", dtype_name(y->dtype));
  TV *x = contiguous_of(e, n, xv);
  if (!x) return -1;
  TV *out = alloc_value(e, y), *idx = n->nouts == 2 ? alloc_value(e, n->outs[1]) : NULL;
  const Expr *H = nsp == 2 ? x->sizes[x->rank - 2] : C(e, 1), *W = x->sizes[x->rank - 1];
  const Expr *OH = nsp == 2 ? out->sizes[out->rank - 2] : C(e, 1), *OW = out->sizes[out->rank - 1];
  const Expr *planes = C(e, 1);
  for (int d = 0; d < x->rank - nsp; d++) planes = MUL(e, planes, x->sizes[d]);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "pooling");
  const char *T = ctype(y->dtype);
  kopen(e, id, false, true);
  fprintf(f, "%s *y, int64_t *idx, const %s *x", T, T);
  ksyms(e);
  fprintf(f, "  const gg_pool p = {%s, %s, %s, %s, %s, {%s, %s}, {%s, %s}, {%s, %s}, {%s, %s}, %d, %s, INT64_C(%lld)};\n", cx(e, planes), cx(e, H), cx(e, W),
          cx(e, OH), cx(e, OW), cx(e, k[0]), cx(e, k[1]), cx(e, st[0]), cx(e, st[1]), cx(e, pd[0]), cx(e, pd[1]), cx(e, dl[0]), cx(e, dl[1]), kind,
          cip ? "true" : "false", (long long)divisor);
  if (e->cuda) fprintf(f, "  gg_cu_pool(%d, &p, x, y, idx);\n}\n", y->dtype == DT_F64);
  else fprintf(f, "  gg_rt_pool_%s(&p, x, y, idx);\n}\n", y->dtype == DT_F32 ? "f32" : "f64");
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s", sname(e, out->stor), idx ? sname(e, idx->stor) : "NULL", sname(e, x->stor));
  kcall_end(e);
  return 0;
}

int emit_pool(Em *e, Node *n) {
  int nsp = n->op->args[ops_arg_index(n->op, "kernel_size")].fixed_len;
  const Arg *ka = &n->args[ops_arg_index(n->op, "kernel_size")], *sa = &n->args[ops_arg_index(n->op, "stride")], *pa = &n->args[ops_arg_index(n->op, "padding")];
  int di = ops_arg_index(n->op, "dilation");
  const Expr *one = C(e, 1), *zero = C(e, 0);
  const Expr *k[2] = {one, one}, *st[2] = {one, one}, *pd[2] = {zero, zero}, *dl[2] = {one, one};
  for (int i = 0; i < nsp; i++) {
    int j = 2 - nsp + i;
    k[j] = list_at(ka, i);
    st[j] = sa->n ? list_at(sa, i) : k[j];
    pd[j] = list_at(pa, i);
    if (di >= 0) dl[j] = list_at(&n->args[di], i);
  }
  bool is_max = !strncmp(n->op->name, "max", 3);
  int ci = ops_arg_index(n->op, "count_include_pad"), dv = ops_arg_index(n->op, "divisor_override");
  int64_t divisor = 0;
  if (dv >= 0 && n->args[dv].k == AK_INT) expr_is_const(n->args[dv].u.i, &divisor);
  return pool_call(e, n, is_max ? 0 : 1, nsp, k, st, pd, dl, ci < 0 || n->args[ci].u.b, divisor);
}

int emit_adaptive_pool(Em *e, Node *n) {
  int nsp = n->op->args[ops_arg_index(n->op, "output_size")].fixed_len;
  const Expr *one = C(e, 1), *zero = C(e, 0);
  const Expr *k[2] = {one, one}, *st[2] = {one, one}, *pd[2] = {zero, zero}, *dl[2] = {one, one};
  return pool_call(e, n, strstr(n->op->name, "max") ? 3 : 2, nsp, k, st, pd, dl, true, 0);
}

/* ---------------------------------------------------------------- data movement */

int emit_cat(Em *e, Node *n) {
  const Arg *ts = &n->args[0];
  Value *y = n->outs[0];
  TV *out = alloc_value(e, y);
  bool stack = !strcmp(n->op->name, "stack");
  int d = wrap(int_arg(n, "dim", 0), y->rank);
  const Expr *at = C(e, 0);
  for (int i = 0; i < ts->n; i++) {
    TV *src = tv_of(e, n, ts->u.ts[i]);
    if (!src) return -1;
    int64_t z;
    if (!stack && src->rank == 1 && expr_is_const(src->sizes[0], &z) && z == 0 && y->rank != 1) continue;
    TV dst = *out;
    dst.offset = ADD(e, out->offset, MUL(e, at, out->strides[d]));
    if (stack) {
      for (int k = d; k < out->rank - 1; k++) { dst.sizes[k] = out->sizes[k + 1]; dst.strides[k] = out->strides[k + 1]; }
      dst.rank--;
      at = ADD(e, at, C(e, 1));
    } else {
      dst.sizes[d] = src->sizes[d];
      at = ADD(e, at, src->sizes[d]);
    }
    copy_kernel(e, n, &dst, src);
  }
  return 0;
}

/* out[...] = table[index[...]] along one dim: index_select, embedding, gather. Out-of-range indices
 * stop the run with a message rather than reading outside the table. */
static int gather_kernel(Em *e, Node *n, TV *tab, TV *ix, int dim, bool per_element) {
  Value *y = n->outs[0];
  TV *out = alloc_value(e, y);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "gather");
  kopen(e, id, true, false);
  fprintf(f, "%s *restrict y, const %s *x, const %s *ix", ctype(out->dt), ctype(tab->dt), ctype(ix->dt));
  ksyms(e);
  fputs("  int bad = 0;\n", f);
  int cl = open_loops(e, out->rank, out->sizes, e->cuda);   /* on the CPU one thread: the flag is shared */
  /* which output dims index the table: embedding puts the row dim last; index_select keeps rank */
  const char *ii;
  if (per_element) ii = index_of(e, ix, out->rank);   /* gather: index has the output's shape */
  else {
    /* index_select: the index is 1-d (or 0-d) along dim; embedding: indices are the leading dims */
    char *buf = NULL;
    size_t len = 0;
    FILE *bf = open_memstream(&buf, &len);
    pexpr(bf, ix->offset);
    if (dim >= 0) { if (ix->rank) { fprintf(bf, " + i%d * ", dim); pexpr(bf, ix->strides[0]); } }
    else for (int d = 0; d < ix->rank; d++) { fprintf(bf, " + i%d * ", d); pexpr(bf, ix->strides[d]); }
    fclose(bf);
    ii = arena_strdup(e->a, buf);
    free(buf);
  }
  fprintf(f, "    int64_t q = (int64_t)ix[%s];\n", ii);
  int td = dim >= 0 ? dim : 0;
  fprintf(f, "    if (q < 0) q += %s;\n    if (q < 0 || q >= %s) { bad = 1; continue; }\n", cx(e, tab->sizes[td]), cx(e, tab->sizes[td]));
  /* table index: output loop indices, with dim replaced by q (embedding: row q, column = last loop) */
  char *buf = NULL;
  size_t len = 0;
  FILE *bf = open_memstream(&buf, &len);
  pexpr(bf, tab->offset);
  if (dim < 0) { fputs(" + q * ", bf); pexpr(bf, tab->strides[0]); fprintf(bf, " + i%d * ", out->rank - 1); pexpr(bf, tab->strides[1]); }
  else for (int d = 0; d < tab->rank; d++) { fprintf(bf, d == dim ? " + q * " : " + i%d * ", d); pexpr(bf, tab->strides[d]); }
  fclose(bf);
  fprintf(f, "    y[%s] = x[%s];\n", index_of(e, out, out->rank), buf);
  free(buf);
  close_loops(e, cl);
  kreturn_bad(e, id);
  kcall_checked(e, id);
  fprintf(e->r, "%s, %s, %s", sname(e, out->stor), sname(e, tab->stor), sname(e, ix->stor));
  kcall_checked_end(e, id, n);
  return 0;
}

int emit_embedding(Em *e, Node *n) {
  TV *w = tv_of(e, n, n->args[0].u.t), *ix = tv_of(e, n, n->args[1].u.t);
  return w && ix ? gather_kernel(e, n, w, ix, -1, false) : -1;
}

int emit_index_select(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *ix = tv_of(e, n, n->args[ops_arg_index(n->op, "index")].u.t);
  if (!x || !ix) return -1;
  return gather_kernel(e, n, x, ix, wrap(int_arg(n, "dim", 0), x->rank), false);
}

int emit_gather(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *ix = tv_of(e, n, n->args[ops_arg_index(n->op, "index")].u.t);
  if (!x || !ix) return -1;
  return gather_kernel(e, n, x, ix, wrap(int_arg(n, "dim", 0), x->rank), true);
}

/* tril/triu: keep elements on one side of a diagonal of the last two dims. */
int emit_tri(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  int64_t diag = int_arg(n, "diagonal", 0);
  bool lower = !strcmp(n->op->name, "tril");
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "triangle");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y, const %s *x", ctype(out->dt), ctype(x->dt));
  ksyms(e);
  int cl = open_loops(e, out->rank, out->sizes, true);
  int r = out->rank;
  fprintf(f, "    y[%s] = (i%d - i%d %s INT64_C(%lld)) ? x[%s] : 0;\n", index_of(e, out, r), r - 1, r - 2, lower ? "<=" : ">=", (long long)diag, index_of(e, x, r));
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, x->stor));
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- creation */

static double scalar_arg(Node *n, const char *name, double dflt) {
  int i = ops_arg_index(n->op, name);
  if (i < 0) return dflt;
  const Arg *a = &n->args[i];
  int64_t v;
  if (a->k == AK_FLOAT) return a->u.f;
  if (a->k == AK_BOOL) return a->u.b;
  if (a->k == AK_INT && expr_is_const(a->u.i, &v)) return (double)v;
  return dflt;
}

int emit_full(Em *e, Node *n) {
  const char *name = n->op->name;
  TV *out = alloc_value(e, n->outs[0]);
  const char *fill = ops_arg_index(n->op, "fill_value") >= 0 ? "fill_value" : ops_arg_index(n->op, "s") >= 0 ? "s" : "value";
  double v = strstr(name, "zero") || strstr(name, "empty") ? 0 : strstr(name, "ones") ? 1 : scalar_arg(n, fill, 0);
  int fi = ops_arg_index(n->op, fill);
  int64_t iv = (int64_t)v;
  if (fi >= 0 && n->args[fi].k == AK_INT) expr_is_const(n->args[fi].u.i, &iv);
  Operand op = {.f = v, .i = iv};
  bool fl = dtype_is_float(out->dt);
  pointwise_kernel(e, n, "fill", out, &op, 1, fl ? "f_ident" : "i_ident", fl, fl ? out->dt : DT_I64);
  return 0;
}

int emit_arange(Em *e, Node *n) {
  TV *out = alloc_value(e, n->outs[0]);
  double a = scalar_arg(n, "start", 0), step = scalar_arg(n, "step", 1);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "arange");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y", ctype(out->dt));
  ksyms(e);
  int cl = open_loops(e, 1, out->sizes, true);
  fputs("    ", f);
  if (dtype_is_float(out->dt)) store(f, out->dt, true, "y", "i0", arena_printf(e->a, "%.17g + (double)i0 * %.17g", a, step));
  else store(f, out->dt, false, "y", "i0", arena_printf(e->a, "INT64_C(%lld) + i0 * INT64_C(%lld)", (long long)a, (long long)step));
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s", sname(e, out->stor));
  kcall_end(e);
  return 0;
}

/* nearest and bilinear resampling of contiguous NCHW planes (PyTorch's index rules) */
int emit_upsample(Em *e, Node *n) {
  Value *y = n->outs[0];
  TV *x = contiguous_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, y);
  bool bilinear = strstr(n->op->name, "bilinear") != NULL;
  int ai = ops_arg_index(n->op, "align_corners");
  bool align = ai >= 0 && n->args[ai].u.b;
  double sc[2] = {0, 0};
  int si = ops_arg_index(n->op, "scale_factors");
  if (si >= 0 && n->args[si].k == AK_FLOATS) { sc[0] = n->args[si].u.fs[0]; sc[1] = n->args[si].u.fs[1]; }
  else { sc[0] = scalar_arg(n, "scales_h", 0); sc[1] = scalar_arg(n, "scales_w", 0); }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, bilinear ? "bilinear resampling" : "nearest resampling");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y, const %s *x", ctype(out->dt), ctype(x->dt));
  ksyms(e);
  const Expr *planes = MUL(e, x->sizes[0], x->sizes[1]), *space[3] = {planes, out->sizes[2], out->sizes[3]};
  fprintf(f, "  const int64_t H = %s, W = %s, OH = %s, OW = %s;\n", cx(e, x->sizes[2]), cx(e, x->sizes[3]), cx(e, out->sizes[2]), cx(e, out->sizes[3]));
  fprintf(f, "  const double sh = %.17g, sw = %.17g;\n  (void)sh; (void)sw;\n", sc[0], sc[1]);
  int cl = open_loops(e, 3, space, true);
  fputs("        const int64_t p = i0, oh = i1, ow = i2;\n", f);
  if (!bilinear) {
    fputs("        int64_t h = OH == H ? oh : OH == 2 * H ? oh >> 1 : (int64_t)floorf((float)oh * (sh > 0 ? (float)(1.0 / sh) : (float)H / (float)OH));\n", f);
    fputs("        int64_t w = OW == W ? ow : OW == 2 * W ? ow >> 1 : (int64_t)floorf((float)ow * (sw > 0 ? (float)(1.0 / sw) : (float)W / (float)OW));\n", f);
    fputs("        if (h > H - 1) h = H - 1;\n        if (w > W - 1) w = W - 1;\n        double v = ", f);
    load_f(f, x->dt, "x", "(p * H + h) * W + w");
    fputs(";\n", f);
  } else {
    if (align) fputs("        double fh = OH > 1 ? (double)oh * (double)(H - 1) / (double)(OH - 1) : 0, fw = OW > 1 ? (double)ow * (double)(W - 1) / (double)(OW - 1) : 0;\n", f);
    else fputs("        double fh = (sh > 0 ? 1.0 / sh : (double)H / (double)OH) * ((double)oh + 0.5) - 0.5, fw = (sw > 0 ? 1.0 / sw : (double)W / (double)OW) * ((double)ow + 0.5) - 0.5;\n        if (fh < 0) fh = 0;\n        if (fw < 0) fw = 0;\n", f);
    fputs("        int64_t h0 = (int64_t)fh, w0 = (int64_t)fw, h1 = h0 + (h0 < H - 1), w1 = w0 + (w0 < W - 1);\n        double lh = fh - (double)h0, lw = fw - (double)w0;\n", f);
    fputs("        const int64_t b = p * H * W;\n        double v = (1 - lh) * ((1 - lw) * ", f);
    load_f(f, x->dt, "x", "b + h0 * W + w0");
    fputs(" + lw * ", f);
    load_f(f, x->dt, "x", "b + h0 * W + w1");
    fputs(") + lh * ((1 - lw) * ", f);
    load_f(f, x->dt, "x", "b + h1 * W + w0");
    fputs(" + lw * ", f);
    load_f(f, x->dt, "x", "b + h1 * W + w1");
    fputs(");\n", f);
  }
  fputs("        ", f);
  store(f, out->dt, true, "y", "(p * OH + oh) * OW + ow", "v");
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, x->stor));
  kcall_end(e);
  return 0;
}

/* constant padding (negative pads crop): fill, then copy the input's overlap */
int emit_pad(Em *e, Node *n) {
  int mi = ops_arg_index(n->op, "mode");
  if (mi >= 0 && n->args[mi].k == AK_STR && strcmp(n->args[mi].u.s, "constant"))
    return efail(e, n, "%s padding is not supported in compiled code yet (it runs under --interpret)", n->args[mi].u.s);
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  Operand fill = {.f = scalar_arg(n, "value", 0), .i = (int64_t)scalar_arg(n, "value", 0)};
  bool fl = dtype_is_float(out->dt);
  pointwise_kernel(e, n, "pad fill", out, &fill, 1, fl ? "f_ident" : "i_ident", fl, fl ? out->dt : DT_I64);
  const Arg *p = &n->args[ops_arg_index(n->op, "pad")];
  TV src = *x, dst = *out;
  for (int i = 0; i < p->n / 2; i++) {
    int d = x->rank - 1 - i;
    int64_t lo, hi;
    if (!expr_is_const(p->u.is[2 * i], &lo) || !expr_is_const(p->u.is[2 * i + 1], &hi)) return efail(e, n, "symbolic padding is not supported");
    const Expr *len = x->sizes[d];
    if (lo >= 0) dst.offset = ADD(e, dst.offset, MUL(e, C(e, lo), out->strides[d]));
    else { src.offset = ADD(e, src.offset, MUL(e, C(e, -lo), x->strides[d])); len = ADD(e, len, C(e, lo)); }
    if (hi < 0) len = ADD(e, len, C(e, hi));
    src.sizes[d] = dst.sizes[d] = len;
  }
  for (int d = 0; d < x->rank; d++) { int64_t v; if (expr_is_const(src.sizes[d], &v) && v <= 0) return 0; }
  copy_kernel(e, n, &dst, &src);
  return 0;
}

/* select_scatter / slice_scatter: copy self, then src into the view */
int emit_view_scatter(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *src = tv_of(e, n, n->args[1].u.t);
  if (!x || !src) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  copy_kernel(e, n, out, x);
  TV dst = *out;
  int d = wrap(int_arg(n, "dim", 0), out->rank);
  if (!strcmp(n->op->name, "select_scatter")) {
    const Expr *ix = n->args[ops_arg_index(n->op, "index")].u.i;
    int64_t iv;
    if (expr_is_const(ix, &iv) && iv < 0) ix = ADD(e, out->sizes[d], ix);
    dst.offset = ADD(e, out->offset, MUL(e, ix, out->strides[d]));
    for (int k = d; k < out->rank - 1; k++) { dst.sizes[k] = out->sizes[k + 1]; dst.strides[k] = out->strides[k + 1]; }
    dst.rank--;
  } else {
    const Arg *sa = &n->args[ops_arg_index(n->op, "start")];
    int64_t start = 0, size;
    if (sa->k == AK_INT && !expr_is_const(sa->u.i, &start)) return efail(e, n, "symbolic slice start");
    if (start < 0) { if (!expr_is_const(out->sizes[d], &size)) return efail(e, n, "negative start on a symbolic dim"); start += size; }
    dst.offset = ADD(e, out->offset, MUL(e, C(e, start), out->strides[d]));
    dst.strides[d] = MUL(e, out->strides[d], C(e, int_arg(n, "step", 1)));
    dst.sizes[d] = src->sizes[d];
  }
  copy_kernel(e, n, &dst, src);
  return 0;
}

/* Advanced indexing's layout, as the shape rule and the interpreter define it: the index tensors
 * broadcast to bsz (rank br), standing where the indexed dims stood when those are adjacent, else
 * first. rs: the shape of x[indices]. */
typedef struct IndexLayout {
  int first, last, br, rr;
  bool adjacent;
  const Expr *bsz[R], *rs[R * 2];
} IndexLayout;

static int index_layout(Em *e, Node *n, const TV *x, const Arg *ia, IndexLayout *L) {
  int cnt = 0;
  L->first = L->last = -1;
  L->br = 0;
  for (int i = 0; i < ia->n; i++) {
    Value *t = ia->u.ts[i];
    if (!t) continue;
    if (t->dtype == DT_BOOL || t->dtype == DT_U8) return efail(e, n, "boolean mask indices are not supported");
    if (L->first < 0) L->first = i;
    L->last = i;
    cnt++;
    int rk = L->br > t->rank ? L->br : t->rank;
    const Expr *nb[R];
    for (int d = 0; d < rk; d++) {
      int da = d - (rk - L->br), db = d - (rk - t->rank);
      int64_t one;
      const Expr *a = da >= 0 ? L->bsz[da] : C(e, 1), *b = db >= 0 ? t->sizes[db] : C(e, 1);
      nb[d] = expr_is_const(a, &one) && one == 1 ? b : a;
    }
    memcpy(L->bsz, nb, sizeof(Expr *) * (size_t)rk);
    L->br = rk;
  }
  L->adjacent = L->last - L->first + 1 == cnt;
  L->rr = 0;
  if (L->adjacent) {
    for (int d = 0; d < L->first; d++) L->rs[L->rr++] = x->sizes[d];
    for (int d = 0; d < L->br; d++) L->rs[L->rr++] = L->bsz[d];
    for (int d = L->last + 1; d < x->rank; d++) L->rs[L->rr++] = x->sizes[d];
  } else {
    for (int d = 0; d < L->br; d++) L->rs[L->rr++] = L->bsz[d];
    for (int d = 0; d < x->rank; d++) if (d >= ia->n || !ia->u.ts[d]) L->rs[L->rr++] = x->sizes[d];
  }
  if (L->rr > R) return efail(e, n, "too many dims");
  return 0;
}

/* scatter / scatter_add: copy self, then write src (or value) at the indexed positions along dim */
int emit_scatter(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *ix = tv_of(e, n, n->args[ops_arg_index(n->op, "index")].u.t);
  int si = ops_arg_index(n->op, "src");
  TV *src = si >= 0 ? tv_of(e, n, n->args[si].u.t) : NULL;
  if (!x || !ix || (si >= 0 && !src)) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  copy_kernel(e, n, out, x);
  int d = wrap(int_arg(n, "dim", 0), x->rank);
  bool add = !strcmp(n->op->name, "scatter_add"), fl = dtype_is_float(out->dt);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "scatter");
  kopen(e, id, true, false);
  fprintf(f, "%s *y, const %s *ix, const %s *src", ctype(out->dt), ctype(ix->dt), src ? ctype(src->dt) : "void");
  ksyms(e);
  fputs("  (void)src;\n  int bad = 0;\n", f);
  int cl = open_loops(e, ix->rank, ix->sizes, false);   /* one thread, in order: repeated indices write as PyTorch's CPU does */
  fprintf(f, "    int64_t q = (int64_t)ix[%s];\n    if (q < 0) q += %s;\n    if (q < 0 || q >= %s) { bad = 1; continue; }\n", index_of(e, ix, ix->rank),
          cx(e, out->sizes[d]), cx(e, out->sizes[d]));
  char *yi = arena_strdup(e->a, cx(e, out->offset));
  for (int k = 0; k < out->rank; k++)
    yi = k == d ? arena_printf(e->a, "%s + q * %s", yi, cx(e, out->strides[k])) : arena_printf(e->a, "%s + i%d * %s", yi, k, cx(e, out->strides[k]));
  const char *v;
  if (src) {
    char *buf = NULL;
    size_t len = 0;
    FILE *bf = open_memstream(&buf, &len);
    if (fl) load_f(bf, src->dt, "src", index_of(e, src, src->rank)); else load_i(bf, src->dt, "src", index_of(e, src, src->rank));
    fclose(bf);
    v = arena_strdup(e->a, buf);
    free(buf);
  } else v = arena_printf(e->a, fl ? "%.17g" : "(int64_t)%.17g", scalar_arg(n, "value", 0));
  char *cur = NULL;
  size_t cl2 = 0;
  FILE *cf = open_memstream(&cur, &cl2);
  if (fl) load_f(cf, out->dt, "y", yi); else load_i(cf, out->dt, "y", yi);
  fclose(cf);
  fputs("    ", f);
  store(f, out->dt, fl, "y", yi, add ? arena_printf(e->a, "%s + %s", cur, v) : v);
  free(cur);
  close_loops(e, cl);
  kreturn_bad(e, id);
  kcall_checked(e, id);
  fprintf(e->r, "%s, %s, %s", sname(e, out->stor), sname(e, ix->stor), src ? sname(e, src->stor) : "NULL");
  kcall_checked_end(e, id, n);
  return 0;
}

/* index_put: copy self, then write values (broadcast over the indexed shape) at the indexed positions */
int emit_index_put(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *vals = tv_of(e, n, n->args[ops_arg_index(n->op, "values")].u.t);
  const Arg *ia = &n->args[ops_arg_index(n->op, "indices")];
  if (!x || !vals) return -1;
  bool acc = n->args[ops_arg_index(n->op, "accumulate")].u.b, fl = dtype_is_float(x->dt);
  TV *out = alloc_value(e, n->outs[0]);
  copy_kernel(e, n, out, x);
  IndexLayout L;
  if (index_layout(e, n, x, ia, &L)) return -1;
  int last = L.last, br = L.br, rr = L.rr, bstart = L.adjacent ? L.first : 0;
  bool adjacent = L.adjacent;
  const Expr **bsz = L.bsz, **rs = L.rs;
  TV vb = broadcast_tv(e, vals, rr, rs);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "index_put");
  kopen(e, id, true, false);
  fprintf(f, "%s *y, const %s *v", ctype(out->dt), ctype(vals->dt));
  for (int i = 0; i < ia->n; i++) if (ia->u.ts[i]) fprintf(f, ", const %s *ix%d", ctype(e->tv[ia->u.ts[i]->id].dt), i);
  ksyms(e);
  fputs("  int bad = 0;\n", f);
  int cl = open_loops(e, rr, rs, false);   /* one thread, in order (repeated indices, accumulate) */
  char *yi = arena_strdup(e->a, cx(e, out->offset));
  int od = adjacent ? 0 : br;
  for (int d = 0; d < x->rank; d++) {
    if (d < ia->n && ia->u.ts[d]) {
      TV b = broadcast_tv(e, &e->tv[ia->u.ts[d]->id], br, bsz);
      char *ie = arena_strdup(e->a, cx(e, b.offset));
      for (int k = 0; k < br; k++) ie = arena_printf(e->a, "%s + i%d * %s", ie, bstart + k, cx(e, b.strides[k]));
      fprintf(f, "    int64_t q%d = (int64_t)ix%d[%s];\n    if (q%d < 0) q%d += %s;\n    if (q%d < 0 || q%d >= %s) { bad = 1; continue; }\n", d, d, ie, d, d,
              cx(e, x->sizes[d]), d, d, cx(e, x->sizes[d]));
      yi = arena_printf(e->a, "%s + q%d * %s", yi, d, cx(e, out->strides[d]));
    } else {
      if (adjacent && d > last && od < bstart + br) od = bstart + br;
      yi = arena_printf(e->a, "%s + i%d * %s", yi, od++, cx(e, out->strides[d]));
    }
  }
  char *vv = NULL, *cur = NULL;
  size_t l1 = 0, l2 = 0;
  FILE *vf = open_memstream(&vv, &l1), *cf = open_memstream(&cur, &l2);
  if (fl) { load_f(vf, vb.dt, "v", index_of(e, &vb, rr)); load_f(cf, out->dt, "y", yi); }
  else { load_i(vf, vb.dt, "v", index_of(e, &vb, rr)); load_i(cf, out->dt, "y", yi); }
  fclose(vf);
  fclose(cf);
  fputs("    ", f);
  store(f, out->dt, fl, "y", yi, acc ? arena_printf(e->a, "%s + %s", cur, vv) : vv);
  free(vv);
  free(cur);
  close_loops(e, cl);
  kreturn_bad(e, id);
  kcall_checked(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, vals->stor));
  for (int i = 0; i < ia->n; i++) if (ia->u.ts[i]) fprintf(e->r, ", %s", sname(e, e->tv[ia->u.ts[i]->id].stor));
  kcall_checked_end(e, id, n);
  return 0;
}

/* flip: a copy from a view that walks the flipped dims backwards */
int emit_flip(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV src = *x;
  const Arg *dims = &n->args[ops_arg_index(n->op, "dims")];
  for (int i = 0; i < dims->n; i++) {
    int64_t dv;
    expr_is_const(dims->u.is[i], &dv);
    int d = wrap(dv, x->rank);
    src.offset = ADD(e, src.offset, MUL(e, ADD(e, x->sizes[d], C(e, -1)), x->strides[d]));
    src.strides[d] = MUL(e, C(e, -1), x->strides[d]);
  }
  copy_kernel(e, n, alloc_value(e, n->outs[0]), &src);
  return 0;
}

/* advanced indexing by integer tensors (x[i], x[:, j], x[i, :, j], ...) */
int emit_index(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  const Arg *ia = &n->args[1];
  Value *y = n->outs[0];
  TV *out = alloc_value(e, y);
  IndexLayout L;
  if (index_layout(e, n, x, ia, &L)) return -1;
  int last = L.last, br = L.br, bstart = L.adjacent ? L.first : 0;
  bool adjacent = L.adjacent;
  const Expr **bsz = L.bsz;
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "index");
  kopen(e, id, true, false);
  fprintf(f, "%s *restrict y, const %s *x", ctype(out->dt), ctype(x->dt));
  for (int i = 0; i < ia->n; i++) if (ia->u.ts[i]) fprintf(f, ", const %s *ix%d", ctype(e->tv[ia->u.ts[i]->id].dt), i);
  ksyms(e);
  fputs("  int bad = 0;\n", f);
  int cl = open_loops(e, out->rank, out->sizes, e->cuda);
  char *xi = arena_strdup(e->a, cx(e, x->offset));
  int od = adjacent ? 0 : br;
  for (int d = 0; d < x->rank; d++) {
    if (d < ia->n && ia->u.ts[d]) {
      TV it = e->tv[ia->u.ts[d]->id];
      TV b = broadcast_tv(e, &it, br, bsz);
      /* loop variables of the broadcast block are i<bstart>..: shift the index expression */
      char *ie = arena_strdup(e->a, cx(e, b.offset));
      for (int k = 0; k < br; k++) ie = arena_printf(e->a, "%s + i%d * %s", ie, bstart + k, cx(e, b.strides[k]));
      fprintf(f, "    int64_t q%d = (int64_t)ix%d[%s];\n    if (q%d < 0) q%d += %s;\n    if (q%d < 0 || q%d >= %s) { bad = 1; continue; }\n", d, d, ie, d, d,
              cx(e, x->sizes[d]), d, d, cx(e, x->sizes[d]));
      xi = arena_printf(e->a, "%s + q%d * %s", xi, d, cx(e, x->strides[d]));
    } else {
      if (adjacent && d > last && od < bstart + br) od = bstart + br;
      xi = arena_printf(e->a, "%s + i%d * %s", xi, od++, cx(e, x->strides[d]));
    }
  }
  fprintf(f, "    y[%s] = x[%s];\n", index_of(e, out, out->rank), xi);
  close_loops(e, cl);
  kreturn_bad(e, id);
  kcall_checked(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, x->stor));
  for (int i = 0; i < ia->n; i++) if (ia->u.ts[i]) fprintf(e->r, ", %s", sname(e, e->tv[ia->u.ts[i]->id].stor));
  kcall_checked_end(e, id, n);
  return 0;
}

int emit_eye(Em *e, Node *n) {
  TV *out = alloc_value(e, n->outs[0]);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "eye");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y", ctype(out->dt));
  ksyms(e);
  int cl = open_loops(e, 2, out->sizes, true);
  fputs("    ", f);
  store(f, out->dt, false, "y", index_of(e, out, 2), "i0 == i1");
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s", sname(e, out->stor));
  kcall_end(e);
  return 0;
}

int emit_linspace(Em *e, Node *n) {
  TV *out = alloc_value(e, n->outs[0]);
  double a = scalar_arg(n, "start", 0), b = scalar_arg(n, "end", 0);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "linspace");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y", ctype(out->dt));
  ksyms(e);
  fprintf(f, "  const int64_t L = %s;\n", cx(e, out->sizes[0]));
  fprintf(f, "  const double a = %.17g, b = %.17g, step = L > 1 ? (b - a) / (double)(L - 1) : 0;\n", a, b);
  fputs("  for (int64_t i0 = 0; i0 < L; i0++) {\n    ", f);
  store(f, out->dt, true, "y", "i0", "i0 < L / 2 ? a + step * (double)i0 : b - step * (double)(L - 1 - i0)");
  fputs("  }\n}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s", sname(e, out->stor));
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- not yet generated */

#define NOT_YET(fn)                                                                                   \
  int fn(Em *e, Node *n) { return efail(e, n, "no C code generator for this op yet (it runs under --interpret)"); }
/* ops that decompose.c rewrites before code generation */
#define DECOMPOSED(fn) \
  int fn(Em *e, Node *n) { return efail(e, n, "reached the code generator undecomposed (internal error)"); }
DECOMPOSED(emit_sdpa)
DECOMPOSED(emit_loss)
DECOMPOSED(emit_diff)
DECOMPOSED(emit_broadcast_tensors)
DECOMPOSED(emit_glu)
DECOMPOSED(emit_repeat)
DECOMPOSED(emit_roll)

/* ---------------------------------------------------------------- the model file */

static const char *dl_dtype(DType d) {
  switch (d) {
  case DT_F32: return "{kDLFloat, 32, 1}";
  case DT_F64: return "{kDLFloat, 64, 1}";
  case DT_F16: return "{kDLFloat, 16, 1}";
  case DT_BF16: return "{kDLBfloat, 16, 1}";
  case DT_I64: return "{kDLInt, 64, 1}";
  case DT_I32: return "{kDLInt, 32, 1}";
  case DT_I16: return "{kDLInt, 16, 1}";
  case DT_I8: return "{kDLInt, 8, 1}";
  case DT_U8: return "{kDLUInt, 8, 1}";
  default: return "{6, 8, 1}";   /* bool: kDLBool */
  }
}

/* The guard: every input's dtype, rank, strides and device, then its sizes: a symbol's first
 * appearance binds it (within its range), later ones must agree. */
static void emit_guard(Em *e, Value **users, int nusers) {
  FILE *f = e->k;
  Graph *g = e->g;
  bool *bound = arena_array(e->a, (size_t)g->nsyms + 1, sizeof *bound);
  fputs("\n/* Guards: checked before every run. */\nstatic int gg_m_guard(const DLTensor *in, int64_t *s, char *err, size_t errlen) {\n  (void)s;\n", f);
  for (int i = 0; i < nusers; i++) {
    Value *v = users[i];
    fprintf(f, "  if (gg_rt_check_tensor(&in[%d], gg_input_names[%d], (DLDataType)%s, %d, %s, err, errlen)) return 1;\n", i, i, dl_dtype(v->dtype), v->rank,
          e->cuda ? "kDLCUDA" : "kDLCPU");
    if (GG_LOG_ON(e->c, LOG_GUARDS)) {
      char sz[512] = "";
      for (int d = 0; d < v->rank; d++) snprintf(sz + strlen(sz), sizeof sz - strlen(sz), "%s%s", d ? ", " : "", expr_str(e->a, g, v->sizes[d]));
      gg_log(e->c, LOG_GUARDS, "input %d %s: %s, rank %d, sizes [%s], row-major, cpu", i, gg_quote(e->c, v->name), dtype_name(v->dtype), v->rank, sz);
    }
  }
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < nusers; i++) {
      Value *v = users[i];
      for (int d = 0; d < v->rank; d++) {
        const Expr *x = v->sizes[d];
        if (pass == 0 && x->k == E_SYM && !bound[x->c]) {
          const Sym *sy = &g->syms[x->c];
          bound[x->c] = true;
          fprintf(f, "  s[%lld] = in[%d].shape[%d];\n", (long long)x->c, i, d);
          fprintf(f, "  if (s[%lld] < INT64_C(%lld) || s[%lld] > INT64_C(%lld)) return gg_rt_fail(err, errlen, \"guard failed: tensor '%%s' size mismatch at index %d. expected %s in [%lld, %lld], actual %%lld\", gg_input_names[%d], (long long)s[%lld]);\n",
                  (long long)x->c, (long long)sy->min, (long long)x->c, (long long)sy->max, d, sy->name, (long long)sy->min, (long long)sy->max, i,
                  (long long)x->c);
        } else if (pass == 1) {
          fprintf(f, "  if (in[%d].shape[%d] != %s) return gg_rt_fail(err, errlen, \"guard failed: tensor '%%s' size mismatch at index %d. expected %%lld, actual %%lld\", gg_input_names[%d], (long long)(%s), (long long)in[%d].shape[%d]);\n",
                  i, d, cx(e, x), d, i, cx(e, x), i, d);
        }
      }
    }
  fputs("  return 0;\n}\n", f);
}

static void emit_output_shape(Em *e, const char *p, Value **outs, int n) {
  FILE *f = e->k;
  fprintf(f, "\nstatic void gg_%s_output_shape(int i, const int64_t *s, int64_t *shape) {\n  (void)s; (void)shape;\n  switch (i) {\n", p);
  for (int i = 0; i < n; i++) {
    fprintf(f, "  case %d:", i);
    for (int d = 0; d < outs[i]->rank; d++) fprintf(f, " shape[%d] = %s;", d, cx(e, outs[i]->sizes[d]));
    fputs(" break;\n", f);
  }
  fputs("  }\n}\n", f);
}

/* Memory planning (memplan.c) of the program's scratch tensors: their offsets, or -1 when sizes are
 * symbolic (then tensors are laid out one after another). */
static int64_t plan_memory(Em *e) {
  MemBuf *b = arena_array(e->a, (size_t)e->nst + 1, sizeof *b);
  int *at = arena_array(e->a, (size_t)e->nst + 1, sizeof *at), n = 0;
  for (int i = 0; i < e->nst; i++) {
    const Stor *st = &e->st[i];
    if (st->kind != S_SCRATCH) continue;
    int64_t ne;
    if (!expr_is_const(st->nelem, &ne)) return -1;
    int p = st->inplace - 1;
    at[i] = n;
    b[n++] = (MemBuf){i, (ne * dtype_info(st->dt)->size + 63) & ~INT64_C(63), st->first, st->last, p >= 0 && e->st[p].kind == S_SCRATCH ? at[p] + 1 : 0, 0};
  }
  int64_t total = memplan(e->c, b, n, &e->scratch_naive);
  for (int i = 0; i < e->nst; i++)
    if (e->st[i].kind == S_SCRATCH) e->st[i].offset = b[at[i]].offset;
  e->scratch_planned = total;
  return total;
}

/* What one program (the forward, or the backward of a training model) gives the descriptor. */
typedef struct Prog {
  Value **outs; int nouts;          /* outputs in order: user outputs, then saved values or gradients */
  Value **mut_vals; int *mut_w; int *mut_of; int nmut; /* buffer updates: value, weight index, and by weight */
  int nweights, nk, nfused, nnodes;
  int64_t planned, naive;
  int nprof;                        /* nodes with a profile slot */
  char *errs;                       /* CUDA: switch cases from kernel id to index message */
  int npacks;                       /* weights packed at gg_open (CPU inference) */
  PackDesc *packs;
} Prog;

/* The weight index (among the graph's weight inputs) of the buffer a mutation output writes, or -1 */
static int mutated_weight(const Graph *g, const OutputSpec *o) {
  int w = -1;
  for (int j = 0, wi = 0; j < g->ninputs; j++) {
    if (g->inputs[j]->input == IN_USER) continue;
    if (g->inputs[j]->fqn && o->target_name && !strcmp(g->inputs[j]->fqn, o->target_name)) w = wi;
    wi++;
  }
  return w;
}

/* explain's figures for kernel r: its iteration space (the output it writes; a product's or
 * convolution's depth), the bytes of the tensors its node and the nodes fused into it read from
 * outside and of what it writes, and FLOPs (2 per multiply-add of a product or convolution, 1 per
 * output element of any other node), at the example sizes. mark: by value id, scratch. */
static void kernel_stats(Em *e, KernelRec *r, int *mark, int stamp) {
  const Node *n = r->n;
  const Graph *g = e->g;
  if (!n || !n->nouts) return;
  double rd = 0, wr = 0, fl = 0;
  for (int pass = 0; pass < 2; pass++)   /* the values made inside the kernel, then what it reads */
    for (int k = 0; k < g->nnodes; k++) {
      Node *m = g->nodes[k], *u = m;
      if (sched_kernel_of(e->s, u) != n) continue;
      if (pass == 0) {
        for (int i = 0; i < m->nouts; i++) mark[m->outs[i]->id] = stamp;
        double mf = node_matrix_flops(g, m);
        fl += mf > 0 ? mf : m->nouts ? (double)value_nbytes(g, m->outs[0]) / dtype_info(m->outs[0]->dtype)->size : 0;
      } else
        FOR_TENSOR_ARGS(m, a, {
          if (mark[a->id] == stamp || mark[a->id] == -stamp) continue;
          mark[a->id] = -stamp;
          rd += (double)value_nbytes(g, a);
        })
    }
  for (int i = 0; i < n->nouts; i++) wr += (double)value_nbytes(g, n->outs[i]);
  double ne, mf = node_matrix_flops(g, n);
  r->space = hint_shape(e, n->outs[0]->rank, n->outs[0]->sizes, &ne);
  if (mf > 0 && ne > 0) r->space = arena_printf(e->a, "%s x %.0f deep", r->space, mf / (2 * ne));
  r->read = rd;
  r->written = wr;
  r->flops = fl;
}

/* Emit one graph as a program: its kernels, guard (with_guard), output shapes, scratch layout and run
 * function, named gg_<p>_*. Kernels are numbered from kbase so that programs share one file. packs:
 * float32 weights of products may be packed at gg_open (CPU inference). */
static int emit_program(Ctx *c, Graph *g, const Schedule *S, const char *p, int kbase, bool with_guard, bool packs, FILE *out, Prog *P) {
  Em E = {0}, *e = &E;
  int krec0 = c->nkernels;   /* this program's first kernel record */
  e->c = c;
  e->g = g;
  e->a = c->arena;
  e->s = S;
  e->nk = kbase;
  e->tv = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *e->tv);
  e->cuda = c->cuda;
  char *kbuf = NULL, *rbuf = NULL, *ebuf = NULL;
  size_t klen = 0, rlen = 0, elen = 0;
  e->errs = open_memstream(&ebuf, &elen);
  e->k = open_memstream(&kbuf, &klen);
  e->r = open_memstream(&rbuf, &rlen);
  Value **users;
  int nusers = graph_user_inputs(g, &users);
  /* graph inputs: user inputs and weights have storage already */
  int nweights = 0, nmut = 0;
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    const Expr *one = C(e, 1);
    int s = v->input == IN_USER ? new_stor(e, S_INPUT, v->user_index, v->dtype, one) : new_stor(e, S_WEIGHT, nweights++, v->dtype, one);
    contiguous_tv(e, &e->tv[v->id], s, v->dtype, v->rank, v->sizes);
    if (v->weight && v->input != IN_USER) {
      /* a stored weight may itself be a strided view of its storage */
      TV *t = &e->tv[v->id];
      t->offset = C(e, v->weight->offset);
      for (int d = 0; d < v->rank; d++) t->strides[d] = C(e, v->weight->strides[d]);
    }
  }
  e->pack_ok = packs && !c->cuda;
  e->mutated = arena_array(c->arena, (size_t)nweights + 1, sizeof *e->mutated);
  for (int i = 0; i < g->noutputs; i++) {
    int w = g->outputs[i].kind == OUT_BUFFER_MUTATION ? mutated_weight(g, &g->outputs[i]) : -1;
    if (w >= 0) e->mutated[w] = true;
  }
  int rc = 0;
  /* GCC_GRAPH_PROFILE: a clock tick after each node that ran code gives that node's time */
  const char **prof = arena_array(c->arena, (size_t)g->nnodes + 2, sizeof *prof);
  int nprof = 0;
  fputs("  GG_TICK(NULL);\n", e->r);
  for (int k = 0; k < g->nnodes && !rc; k++) {
    Node *n = g->nodes[k];
    fflush(e->r);
    long before = ftell(e->r);
    if (!n->op) rc = gg_error(c, "%s: node %s: op %s is not supported", g->path, gg_quote(c, n->name), gg_quote(c, n->target));
    else rc = n->op->emit(e, n);
    fflush(e->r);
    if (!rc && ftell(e->r) != before) {
      fprintf(e->r, "  GG_TICK(&gg_%s_prof[%d]);\n", p, nprof);
      prof[nprof++] = arena_printf(c->arena, "%s (%s)", n->name, n->op->name);
    }
  }
  /* outputs (user outputs, then saved values or gradients) are copied out of their views at the end */
  Value **outs = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *outs);
  int nouts = 0;
  for (int i = 0; !rc && i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (o->kind != OUT_USER && o->kind != OUT_SAVED && o->kind != OUT_GRAD) continue;
    TV *src = &e->tv[o->v->id];
    if (!src->ok) { rc = gg_error(c, "%s: output %s has no storage (internal error)", g->path, gg_quote(c, o->v->name)); break; }
    int sd = new_stor(e, S_OUTPUT, nouts, o->v->dtype, C(e, 1));
    TV dst;
    contiguous_tv(e, &dst, sd, o->v->dtype, o->v->rank, o->v->sizes);
    Node fake = {.name = o->v->name, .target = "output"};
    copy_kernel(e, &fake, &dst, src);
    outs[nouts++] = o->v;
  }
  /* mutated buffers: their new values go back into the model's copies */
  int *mut_of = arena_array(c->arena, (size_t)nweights + 1, sizeof *mut_of);
  for (int i = 0; i < nweights; i++) mut_of[i] = -1;
  Value **mut_vals = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *mut_vals);
  int *mut_w = arena_array(c->arena, (size_t)g->noutputs + 1, sizeof *mut_w);
  for (int i = 0; !rc && i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (o->kind != OUT_BUFFER_MUTATION) continue;
    int w = mutated_weight(g, o);
    if (w < 0) { rc = gg_error(c, "%s: mutated buffer %s is not an input", g->path, gg_quote(c, o->target_name)); break; }
    mut_of[w] = nmut;
    mut_w[nmut] = w;
    mut_vals[nmut] = o->v;
    TV dst;
    int sd = new_stor(e, S_MUT, nmut, o->v->dtype, C(e, 1));
    contiguous_tv(e, &dst, sd, o->v->dtype, o->v->rank, o->v->sizes);
    Node fake = {.name = o->target_name, .target = "buffer update"};
    copy_kernel(e, &fake, &dst, &e->tv[o->v->id]);
    nmut++;
  }
  fprintf(e->r, "  GG_TICK(&gg_%s_prof[%d]);\n", p, nprof);
  prof[nprof++] = "outputs and buffer updates (copies)";
  fclose(e->k);
  fclose(e->r);
  fclose(e->errs);
  char *errs = arena_strdup(c->arena, ebuf);
  free(ebuf);
  if (rc) { free(kbuf); free(rbuf); return -1; }
  int64_t planned = plan_memory(e);
  if (c->record) {   /* the schedule: each fused node under the kernel of the node it feeds (transitively) */
    c->scratch_naive += e->scratch_naive;
    c->scratch_planned += e->scratch_planned;
    for (int k = 0; k < g->nnodes; k++) {
      Node *n = g->nodes[k];
      if (S->role[n->id] == SN_KERNEL) continue;
      const Node *u = sched_kernel_of(S, n);
      for (int r = krec0; r < c->nkernels; r++)
        if (c->kernels[r].node == u->name) {
          KernelRec *kr = &c->kernels[r];
          const Node **f = arena_array(c->arena, (size_t)kr->nfused + 1, sizeof *f);
          if (kr->nfused) memcpy(f, kr->fused, sizeof *f * (size_t)kr->nfused);
          f[kr->nfused++] = n;
          kr->fused = f;
          break;
        }
    }
    for (int k = 0; k < S->nrefused; k++) {
      if (c->nrefused == c->cap_refused) {
        c->cap_refused = c->cap_refused ? 2 * c->cap_refused : 64;
        Refusal *r = arena_array(c->arena, (size_t)c->cap_refused, sizeof *r);
        if (c->nrefused) memcpy(r, c->refused, sizeof *r * (size_t)c->nrefused);
        c->refused = r;
      }
      c->refused[c->nrefused++] = S->refused[k];
    }
    int *mark = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *mark);
    for (int r = krec0; r < c->nkernels; r++) kernel_stats(e, &c->kernels[r], mark, r - krec0 + 1);
  }
  fprintf(out, "\n/* GCC_GRAPH_PROFILE: the time of each node's kernels. */\nstatic double gg_%s_prof[%d];\nstatic const char *const gg_%s_prof_names[] = {\n", p, nprof, p);
  for (int i = 0; i < nprof; i++) { fputs("  ", out); emit_c_string(out, prof[i]); fputs(",\n", out); }
  fputs("};\n", out);
  P->nprof = nprof;
  *P = (Prog){outs, nouts, mut_vals, mut_w, mut_of, nmut, nweights, e->nk, S->nfused, g->nnodes, e->scratch_planned, e->scratch_naive, nprof, errs,
              e->npacks, e->packs};
  fputs(kbuf, out);
  /* guard, shapes, scratch, run */
  FILE *save = e->k;
  e->k = out;
  if (with_guard) emit_guard(e, users, nusers);
  emit_output_shape(e, p, outs, nouts);
  e->k = save;
  int nscratch = 0;
  if (planned >= 0) {
    fprintf(out, "\n/* Scratch: %lld bytes; intermediates whose lifetimes do not overlap share memory. */\n", (long long)planned);
    fprintf(out, "static int64_t gg_%s_scratch_layout(const int64_t *s, int64_t *off) {\n  (void)s; (void)off;\n", p);
    for (int i = 0; i < e->nst; i++) {
      if (e->st[i].kind != S_SCRATCH) continue;
      fprintf(out, "  off[%d] = INT64_C(%lld);\n", nscratch, (long long)e->st[i].offset);
      e->st[i].index = nscratch++;
    }
    fprintf(out, "  return INT64_C(%lld);\n}\n", (long long)planned);
  } else {
    fputs("\n/* Scratch: every intermediate tensor at its offset, 64-byte aligned (symbolic sizes: no reuse). */\n", out);
    fputs("#ifndef GG_A\n#define GG_A(n) (((n) + INT64_C(63)) & ~INT64_C(63))\n#endif\n", out);
    fprintf(out, "static int64_t gg_%s_scratch_layout(const int64_t *s, int64_t *off) {\n  (void)s;\n  int64_t at = 0;\n", p);
    for (int i = 0; i < e->nst; i++) {
      if (e->st[i].kind != S_SCRATCH) continue;
      fprintf(out, "  off[%d] = at; at += GG_A(%s * %d);\n", nscratch, cx(e, e->st[i].nelem), dtype_info(e->st[i].dt)->size);
      e->st[i].index = nscratch++;
    }
    fputs("  return at;\n}\n", out);
  }
  fprintf(out, "\nstatic int64_t gg_%s_scratch_bytes(const int64_t *s) { int64_t off[%d]; return gg_%s_scratch_layout(s, off); }\n", p, nscratch + 1, p);
  fprintf(out, "\nstatic const char *gg_%s_run(void *const *w, void *const *mut, const DLTensor *in, void *const *out, unsigned char *scratch, const int64_t *s) {\n", p);
  fputs("  (void)w; (void)mut; (void)in; (void)out; (void)scratch;\n", out);
  if (e->cuda) fputs("  gg_s S;\n  for (int i = 0; i < (int)(sizeof S.v / sizeof S.v[0]); i++) S.v[i] = s[i];\n  (void)S;\n", out);
  fprintf(out, "  int64_t off[%d];\n  gg_%s_scratch_layout(s, off);\n", nscratch + 1, p);
  for (int i = 0; i < e->nst; i++) {
    const Stor *st = &e->st[i];
    const char *T = ctype(st->dt);
    if (st->kind == S_SCRATCH) fprintf(out, "  %s *t%d = (%s *)(scratch + off[%d]);\n", T, i, T, st->index);
    else if (st->kind == S_WEIGHT) fprintf(out, "  %s *w%d = (%s *)w[%d]; (void)w%d;\n", T, st->index, T, st->index, st->index);
    else if (st->kind == S_INPUT) fprintf(out, "  const %s *in%d = (const %s *)((const char *)in[%d].data + in[%d].byte_offset);\n", T, st->index, T, st->index, st->index);
    else if (st->kind == S_OUTPUT) fprintf(out, "  %s *out%d = (%s *)out[%d];\n", T, st->index, T, st->index);
    else fprintf(out, "  %s *mut%d = (%s *)mut[%d];\n", T, st->index, T, st->index);
  }
  for (int j = 0; j < e->npacks; j++) fprintf(out, "  const float *pk%d = (const float *)w[%d];\n", j, nweights + j);
  fputs(rbuf, out);
  fputs("  return NULL;\n}\n", out);
  free(kbuf);
  free(rbuf);
  return 0;
}

static void dtype_list(FILE *out, const char *name, Value **v, int n) {
  fprintf(out, "static const DLDataType %s[] = {", name);
  for (int i = 0; i < n; i++) fprintf(out, "%s%s", i ? ", " : "", dl_dtype(v[i]->dtype));
  fputs(n ? "};\n" : "{0, 0, 0}};\n", out);
}

static void ndim_list(FILE *out, const char *name, Value **v, int n) {
  fprintf(out, "static const int %s[] = {", name);
  for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", v[i]->rank);
  fputs(n ? "};\n" : "0};\n", out);
}

/* Write the model's C file: the forward program (the model itself), and for a training model (bwd
 * not NULL) the backward program, then the descriptors the runtime reads. weight_offsets[i]: where
 * weight i's bytes are (in the blob or the file). */
int emit_model(Ctx *c, Graph *g, const Schedule *sf, Graph *bwd, const Schedule *sb, const TrainOptions *tr, FILE *out, const char *metadata, const int64_t *weight_offsets,
               int64_t blob_size, bool external, int64_t external_size) {
  char *fbuf = NULL, *bbuf = NULL;
  size_t flen = 0, blen = 0;
  FILE *ff = open_memstream(&fbuf, &flen);
  Prog F, B = {0};
  int rc = emit_program(c, g, sf, "m", 0, true, !bwd, ff, &F);
  fclose(ff);
  if (!rc && bwd) {
    FILE *bf = open_memstream(&bbuf, &blen);
    rc = emit_program(c, bwd, sb, "b", F.nk, false, false, bf, &B);
    fclose(bf);
  }
  if (rc) { free(fbuf); free(bbuf); return -1; }
  Value **users;
  int nusers = graph_user_inputs(g, &users), nuser_out = 0;
  for (int i = 0; i < g->noutputs; i++) nuser_out += g->outputs[i].kind == OUT_USER;
  fprintf(out, "/* Generated by gcc-graph %s. Do not edit: recompile the model instead.\n", GG_VERSION);
  fprintf(out, " * %d nodes, %d kernels; %d pointwise nodes computed inside another kernel's loop.\n", F.nnodes, F.nk, F.nfused);
  if (F.planned > 0) fprintf(out, " * Scratch: %lld bytes with reuse, %lld without.\n", (long long)F.planned, (long long)F.naive);
  if (bwd) {
    fprintf(out, " * Backward: %d nodes, %d kernels; %d pointwise nodes fused; %d values saved by the forward.\n", B.nnodes, B.nk - F.nk, B.nfused, F.nouts - nuser_out);
    if (B.planned > 0) fprintf(out, " * Backward scratch: %lld bytes with reuse, %lld without.\n", (long long)B.planned, (long long)B.naive);
  }
  fputs(" */\n", out);
  if (c->cuda) {
    fputs("#include <cuda_runtime.h>\n", out);
    fputs("#include \"gg_rt.h\"\n#include \"scalar.h\"\n\n#include <math.h>\n\n", out);
    fputs("#define restrict __restrict__\n#undef GG_TICK\n#define GG_TICK(slot) ((void)0)   /* GCC_GRAPH_PROFILE times CPU models only */\n", out);
    fprintf(out, "typedef struct { int64_t v[%d]; } gg_s;   /* the symbols' values, passed to kernels by value */\n", g->nsyms > 0 ? g->nsyms : 1);
    fputs("static __device__ int gg_dev_err;   /* 1 + the id of a kernel that met an index out of range */\n", out);
    fputs("/* a warp's partial sums and maxima (NaN wins, as in the sequential loops) combined with shuffles */\n", out);
    fputs("static __device__ double gg_wsum(double v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }\n", out);
    fputs("static __device__ double gg_wmax(double v) {\n  for (int o = 16; o; o >>= 1) { double u = __shfl_xor_sync(0xffffffffu, v, o); if (u > v || isnan(u)) v = u; }\n  return v;\n}\n", out);
  } else fputs("#include \"gg_rt.h\"\n#include \"scalar.h\"\n\n#include <math.h>\n\n", out);
  fputs("GG_HD int64_t gg_d2i(double v) { return v > -9.2e18 && v < 9.2e18 ? (int64_t)v : INT64_MIN; }\n", out);
  fputs("GG_HD uint16_t gg_d2h(double v) { return gg_f2h((float)v); }\n", out);
  fputs("\nconst char gg__metadata[] =\n  ", out);
  emit_c_string(out, metadata);
  fputs(";\n", out);
  fputs("\nstatic const char *const gg_input_names[] = {", out);
  for (int i = 0; i < nusers; i++) { fputs(i ? ", " : "", out); emit_c_string(out, users[i]->name); }
  fputs(nusers ? "};\n" : "NULL};\n", out);
  if (!external && blob_size > 0) {
    fputs("\n/* The weights, from weights.bin, aligned for vector loads. */\n", out);
    fputs("__asm__(\".section .rodata\\n.balign 64\\n.type gg_blob, @object\\ngg_blob:\\n.incbin \\\"weights.bin\\\"\\n.byte 0\\n.previous\\n\");\n", out);
    fputs("extern const unsigned char gg_blob[];\n", out);
  }
  fputs(fbuf, out);
  if (bbuf) { fputs("\n/* ================================================================ the backward */\n", out); fputs(bbuf, out); }
  free(fbuf);
  free(bbuf);
  if (c->cuda) {
    fputs("\n/* Kernels cannot return: one that met an index out of range left its id in gg_dev_err. */\n", out);
    fputs("static int *gg_m_error_flag(void) {\n  void *p = NULL;\n  return cudaGetSymbolAddress(&p, gg_dev_err) == cudaSuccess ? (int *)p : NULL;\n}\n", out);
    fputs("static const char *gg_m_error(int v) {\n  switch (v) {\n", out);
    fputs(F.errs, out);
    fputs("  }\n  return \"index out of range\";\n}\n", out);
  }
  /* the descriptor */
  int nweights = F.nweights, nmut = F.nmut;
  Value **wv = arena_array(c->arena, (size_t)nweights + 1, sizeof *wv);
  for (int i = 0, k = 0; i < g->ninputs; i++) if (g->inputs[i]->input != IN_USER) wv[k++] = g->inputs[i];
  fputs("\nstatic const gg_weight_desc gg_weights[] = {\n", out);
  for (int i = 0; i < nweights; i++) {
    Value *v = wv[i];
    int64_t nb = v->weight ? (int64_t)v->weight->nbytes : 0;
    fputs("  {", out);
    emit_c_string(out, v->fqn ? v->fqn : v->name);
    fprintf(out, ", INT64_C(%lld), INT64_C(%lld), %d},\n", (long long)weight_offsets[i], (long long)nb, F.mut_of[i]);
  }
  fputs(nweights ? "};\n" : "  {NULL, 0, 0, -1}};\n", out);
  dtype_list(out, "gg_out_dtypes", F.outs, F.nouts);
  ndim_list(out, "gg_out_ndims", F.outs, F.nouts);
  fputs("static const int gg_mut_weight[] = {", out);
  for (int i = 0; i < nmut; i++) fprintf(out, "%s%d", i ? ", " : "", F.mut_w[i]);
  fputs(nmut ? "};\n" : "-1};\n", out);
  dtype_list(out, "gg_mut_dtypes", F.mut_vals, nmut);
  ndim_list(out, "gg_mut_ndims", F.mut_vals, nmut);
  fputs("static const int64_t gg_mut_shapes[] = {", out);
  for (int i = 0; i < nmut; i++)
    for (int d = 0; d < GG_MAX_RANK; d++) {
      int64_t v = 0;
      if (d < F.mut_vals[i]->rank) expr_is_const(F.mut_vals[i]->sizes[d], &v);
      fprintf(out, "%s%lld", i || d ? ", " : "", (long long)v);
    }
  fputs(nmut ? "};\n" : "0};\n", out);
  if (F.npacks) {
    fputs("\n/* Weights packed at gg_open for the runtime's float32 kernel: weight, side, offset, rows, cols, strides. */\n", out);
    fputs("static const gg_pack_desc gg_packs[] = {\n", out);
    for (int j = 0; j < F.npacks; j++) {
      const PackDesc *d = &F.packs[j];
      fprintf(out, "  {%d, %d, INT64_C(%lld), INT64_C(%lld), INT64_C(%lld), INT64_C(%lld), INT64_C(%lld)},\n", d->weight, d->side, (long long)d->offset,
              (long long)d->rows, (long long)d->cols, (long long)d->srow, (long long)d->scol);
    }
    fputs("};\n", out);
  }
  fprintf(out, "\nconst gg_model_desc gg__desc = {\n  %d, %d, %d, %d, %d,\n  gg_input_names, gg_out_dtypes, gg_out_ndims, gg_weights,\n", nusers, nuser_out, g->nsyms,
          nweights, nmut);
  fprintf(out, "  %s, INT64_C(%lld), INT64_C(%lld),\n", !external && blob_size > 0 ? "gg_blob" : "NULL", (long long)blob_size, (long long)external_size);
  fputs("  gg_mut_weight, gg_mut_dtypes, gg_mut_ndims, gg_mut_shapes,\n  gg_m_guard, gg_m_output_shape, gg_m_scratch_bytes, gg_m_run,\n", out);
  fprintf(out, "  %d, gg_m_prof, gg_m_prof_names,\n  %s, %s,\n  %d, %s,\n};\n", F.nprof, c->cuda ? "kDLCUDA" : "kDLCPU",
          c->cuda ? "gg_m_error_flag, gg_m_error" : "NULL, NULL", F.npacks, F.npacks ? "gg_packs" : "NULL");
  /* training: the backward's gradients (by weight index; -1 for a user input's) and the optimizer */
  fputs("\n/* Training: the backward program and the optimizer (none for an inference model). */\n", out);
  if (!bwd) {
    fputs("const gg_train_desc gg__train = {0};\n", out);
    return 0;
  }
  fputs("static const int gg_grad_weight[] = {", out);
  for (int i = 0; i < B.nouts; i++) {
    int w = -1;
    for (int k = 0; k < nweights; k++) if (wv[k]->fqn && bwd->outputs[i].target_name && !strcmp(wv[k]->fqn, bwd->outputs[i].target_name)) w = k;
    fprintf(out, "%s%d", i ? ", " : "", w);
  }
  fputs(B.nouts ? "};\n" : "-1};\n", out);
  fputs("static const char *const gg_grad_names[] = {", out);
  for (int i = 0; i < B.nouts; i++) { fputs(i ? ", " : "", out); emit_c_string(out, bwd->outputs[i].target_name); }
  fputs(B.nouts ? "};\n" : "NULL};\n", out);
  dtype_list(out, "gg_grad_dtypes", B.outs, B.nouts);
  ndim_list(out, "gg_grad_ndims", B.outs, B.nouts);
  Value *tan = bwd->inputs[bwd->ninputs - 1];
  fprintf(out, "const gg_train_desc gg__train = {\n  %d, %d, gg_grad_weight, gg_grad_names, gg_grad_dtypes, gg_grad_ndims,\n", F.nouts - nuser_out, B.nouts);
  fprintf(out, "  %s, %d, gg_b_output_shape, gg_b_scratch_bytes, gg_b_run,\n", dl_dtype(tan->dtype), tan->rank);
  fprintf(out, "  %d, %.17g, %.17g, %.17g, %.17g, %.17g, %.17g,\n", tr->optimizer, tr->lr, tr->momentum, tr->weight_decay, tr->beta1, tr->beta2, tr->eps);
  fprintf(out, "  %d, gg_b_prof, gg_b_prof_names,\n};\n", B.nprof);
  return 0;
}
