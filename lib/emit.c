/* emit.c: the dialect-free core of code generation (emit.h lists the emitter files).
 * Requires: a verified, functional, decomposed graph and its schedule (schedule.c). Guarantees: every
 * value as the generated code sees it (a storage and a layout; fused values as C expressions), kernels
 * framed in the dialect of where they run, pointwise kernels with the chains fused into them, and
 * views as strides (view.c). Every size is a C expression of the symbols s[], so symbolic sizes stay
 * symbolic. Names from the model reach the code only inside escaped string literals and sanitized
 * comments. Output is deterministic. */
#include "emit.h"
#include "rewrite.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int efail(Em *e, Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gg_error(e->c, "%s: node %s (%s): %s", e->g->path, gg_quote(e->c, n->name), gg_quote(e->c, n->target), msg);
}

/* ---------------------------------------------------------------- C text helpers */

void pexpr(FILE *f, const Expr *x) {
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
const char *cx(Em *e, const Expr *x) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pexpr(f, x);
  fclose(f);
  char *r = arena_strdup(e->a, buf);
  free(buf);
  return r;
}


/* A comment that cannot end early or smuggle a line break: model text is made safe here. */
void comment(FILE *f, const char *s) {
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

const char *ctype(DType d) {
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
void load_f(FILE *f, DType d, const char *ptr, const char *idx) {
  if (d == DT_F16) fprintf(f, "(double)gg_h2f(%s[%s])", ptr, idx);
  else if (d == DT_BF16) fprintf(f, "(double)gg_bf2f(%s[%s])", ptr, idx);
  else fprintf(f, "(double)%s[%s]", ptr, idx);
}

/* The type reductions, norms and softmax accumulate in for a computation in dtype comp: on the GPU
 * float for float32, float16 and bfloat16 (PyTorch's opmath), else double. */
const char *real_type(const Em *e, DType comp) {
  return e->cuda && (comp == DT_F32 || comp == DT_F16 || comp == DT_BF16) ? "float" : "double";
}

/* The type pointwise arithmetic runs in: float for float32, float16 and bfloat16 on both targets (as
 * PyTorch's kernels compute them; scalar.h's templates on the GPU, its float pass on the CPU, whose
 * loops then vectorize twice as wide with no conversions), else double. */
const char *pw_type(const Em *e, DType comp) {
  (void)e;
  return comp == DT_F32 || comp == DT_F16 || comp == DT_BF16 ? "float" : "double";
}

/* scalar.h's function fname for arithmetic in rt: in C, float's are the float pass's (f_add_f) */
static const char *fn_in(const Em *e, const char *fname, const char *rt) {
  return !e->cuda && !strcmp(rt, "float") && fname[0] == 'f' ? arena_printf(e->a, "%s_f", fname) : fname;
}

/* Reading an element as real_type rt */
void load_r(FILE *f, DType d, const char *ptr, const char *idx, const char *rt) {
  if (strcmp(rt, "float")) load_f(f, d, ptr, idx);
  else if (d == DT_F16) fprintf(f, "gg_h2f(%s[%s])", ptr, idx);
  else if (d == DT_BF16) fprintf(f, "gg_bf2f(%s[%s])", ptr, idx);
  else if (d == DT_F32) fprintf(f, "%s[%s]", ptr, idx);
  else fprintf(f, "(float)%s[%s]", ptr, idx);
}

void load_i(FILE *f, DType d, const char *ptr, const char *idx) {
  if (dtype_is_float(d)) { fputs("gg_d2i(", f); load_f(f, d, ptr, idx); fputc(')', f); }
  else fprintf(f, "(int64_t)%s[%s]", ptr, idx);
}

void store(FILE *f, DType d, bool from_float, const char *ptr, const char *idx, const char *val) {
  fprintf(f, "%s[%s] = ", ptr, idx);
  if (d == DT_F16) fprintf(f, "gg_d2h((double)(%s));\n", val);
  else if (d == DT_BF16) fprintf(f, "gg_f2bf((float)(%s));\n", val);
  else if (d == DT_BOOL) fprintf(f, "(%s) != 0;\n", val);
  else if (dtype_is_float(d)) fprintf(f, "(%s)(%s);\n", ctype(d), val);
  else if (from_float) fprintf(f, "(%s)gg_d2i(%s);\n", ctype(d), val);
  else fprintf(f, "(%s)(%s);\n", ctype(d), val);
}

/* ---------------------------------------------------------------- storage and views */

int new_stor(Em *e, int kind, int index, DType dt, const Expr *nelem) {
  if (e->nst == e->capst) {
    e->capst = e->capst ? e->capst * 2 : 64;
    Stor *n = arena_array(e->a, (size_t)e->capst, sizeof *n);
    if (e->nst) memcpy(n, e->st, sizeof *n * (size_t)e->nst);
    e->st = n;
  }
  e->st[e->nst] = (Stor){kind, index, dt, nelem, e->nk, e->nk, 0, 0, false};
  return e->nst++;
}

const char *sname(Em *e, int s) {
  Stor *st = &e->st[s];
  /* every mention in the run body is a use by the kernel being emitted: it extends the lifetime */
  if (e->nk - 1 > st->last) st->last = e->nk - 1;
  static const char *prefix[] = {[S_INPUT] = "in", [S_WEIGHT] = "w", [S_SCRATCH] = "t", [S_OUTPUT] = "out", [S_MUT] = "mut"};
  return arena_printf(e->a, "%s%d", prefix[st->kind], st->kind == S_SCRATCH ? s : st->index);
}

void contiguous_tv(Em *e, TV *t, int stor, DType dt, int rank, const Expr *const *sizes) {
  memset(t, 0, sizeof *t);
  t->ok = true;
  t->stor = stor;
  t->dt = dt;
  layout_contiguous(e->a, &t->l, rank, sizes);
}

const Expr *numel(Em *e, const TV *t) { return layout_numel(e->a, &t->l); }

/* explain's iteration space of a tensor: its sizes at the example values, "[2, 8, 10, 10]"; *ne: its
 * elements */
const char *hint_shape(Em *e, int rank, const Expr *const *sizes, double *ne) {
  const char *sp = "[";
  *ne = 1;
  for (int d = 0; d < rank; d++) {
    int64_t h = expr_hint(e->g, sizes[d]);
    *ne *= (double)h;
    sp = arena_printf(e->a, "%s%s%lld", sp, d ? ", " : "", (long long)h);
  }
  return arena_printf(e->a, "%s]", sp);
}

bool is_contiguous(Em *e, const TV *t) { return layout_is_contiguous(e->g, e->a, &t->l); }

/* A fresh contiguous scratch tensor for value v. */
TV *alloc_value(Em *e, Value *v) {
  TV *t = &e->tv[v->id];
  const Expr *n = C(e, 1);
  for (int d = 0; d < v->rank; d++) n = MUL(e, n, v->sizes[d]);
  int slot = e->saved_slot ? e->saved_slot[v->id] : -1;
  int s = slot >= 0 ? new_stor(e, S_OUTPUT, slot, v->dtype, n) : new_stor(e, S_SCRATCH, 0, v->dtype, n);
  if (slot >= 0) e->st[s].aligned = true;
  contiguous_tv(e, t, s, v->dtype, v->rank, v->sizes);
  return t;
}

TV *tv_of(Em *e, Node *n, Value *v) {
  TV *t = &e->tv[v->id];
  if (!t->ok) { efail(e, n, "value %s has no storage (internal error)", gg_quote(e->c, v->name)); return NULL; }
  return t;
}

/* ---------------------------------------------------------------- kernel framing */

void kernel_begin(Em *e, Node *n, const char *what) {
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

/* The head of kernel id up to its first parameter, in the dialect of where it runs: on the device,
 * unless `host` (a kernel that calls the runtime: cuBLAS, convolution, pooling, which on the GPU is a
 * host function). The other framing functions write in the dialect kopen chose. */
void kopen(Em *e, int id, bool checks, bool host) {
  e->kdev = e->cuda && !host;
  e->d = host ? &gg_dialect_c : e->t->device;
  e->launch = NULL;
  e->rowwarp = false;
  e->d->head(e, id, checks);
}

/* kopen for a kernel whose loops vectorize: on the CPU also built for AVX-512 (GG_VEC, gg_rt.h) */
void kopen_vec(Em *e, int id) {
  fputs(e->t->vec, e->k);
  kopen(e, id, false, false);
}

/* The symbols' values, the last parameter (a pointer on the CPU, a struct by value on the GPU). */
void ksyms(Em *e) { e->d->syms(e); }
void kcall(Em *e, int id) { e->d->call(e, id); }
void kcall_end(Em *e) { e->d->call_end(e); }

/* Kernels that check indices: the CPU function returns its flag and the run stops with a message
 * naming the node; a CUDA kernel sets gg_dev_err, which the runtime reads after the run. */
void kreturn_bad(Em *e, int id) { e->d->return_bad(e, id); }
void kcall_checked(Em *e, int id) { e->d->call_checked(e, id); }
void kcall_checked_end(Em *e, int id, Node *n) { e->d->call_checked_end(e, id, n); }

/* Loops over a shape, parallel when there is enough work: the shape's elements times `inner`, the
 * work of one iteration (a row's length for row kernels, the reduced count for reductions; NULL: 1).
 * The loop variables are i0..i{rank-1}; returns the number of braces to close. */
int open_loops_work(Em *e, int rank, const Expr *const *sizes, bool parallel, const Expr *inner) { return e->d->loops(e, rank, sizes, parallel, inner); }
int open_loops(Em *e, int rank, const Expr *const *sizes, bool parallel) { return open_loops_work(e, rank, sizes, parallel, NULL); }

/* Rows of `len` elements (normalization, softmax): a thread per row on the CPU; on the GPU a warp per
 * row, whose lanes stride along it (row_for) and combine their partial sums and maxima with
 * shuffles (row_combine), so that a row's loads are coalesced. */
int open_rows(Em *e, int rank, const Expr *const *sizes, const Expr *len) {
  const Expr *one = expr_const(e->a, 1);   /* one row of a 0-d value: still a loop, which its body may `continue` */
  return rank ? e->d->rows(e, rank, sizes, len) : e->d->rows(e, 1, &one, len);
}

/* (unrolled on the GPU, so that a lane has several loads of its row in flight) */
const char *row_for(Em *e) { return e->rowwarp ? "_Pragma(\"unroll 4\") for (int64_t j = lane; j < L; j += 32)" : "for (int64_t j = 0; j < L; j++)"; }

/* row_for for a loop that sums into var: on the CPU its lanes' partial sums may be added in any order
 * (OpenMP's simd reduction), so that it vectorizes */
const char *row_sum_for(Em *e, const char *var) {
  return e->rowwarp || e->cuda ? row_for(e) : arena_printf(e->a, "_Pragma(\"omp simd reduction(+:%s)\") for (int64_t j = 0; j < L; j++)", var);
}

void row_combine(Em *e, const char *var, bool max) {
  if (e->rowwarp) fprintf(e->k, "    %s = gg_w%s(%s);\n", var, max ? "max" : "sum", var);
}

void close_loops(Em *e, int n) { while (n--) fputs("  }\n", e->k); }

/* The element index of t at loop indices i0.. (with broadcasting: loop rank >= t's rank). */
const char *index_of(Em *e, const TV *t, int loop_rank) {
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
const char *linear_index(Em *e, const Expr *const *sizes, int n, int first) {
  char *s = arena_strdup(e->a, "0");
  for (int d = 0; d < n; d++) s = arena_printf(e->a, "(%s) * %s + i%d", s, cx(e, sizes[d]), d + first);
  return s;
}

/* A view of t broadcast to rank/sizes (stride 0 where t has size 1 or no dim). */
TV broadcast_tv(Em *e, const TV *t, int rank, const Expr *const *sizes) {
  TV b = *t;
  b.l = layout_broadcast(e->a, &t->l, rank, sizes);
  return b;
}

/* ---------------------------------------------------------------- pointwise */

void fmt_double(FILE *f, double v) {
  if (isnan(v)) fputs("NAN", f);
  else if (isinf(v)) fputs(v > 0 ? "INFINITY" : "-INFINITY", f);
  else fprintf(f, "%.17g", v);
}

double round_to(DType dt, double v) {
  uint8_t buf[8];
  dtype_store_f64(dt, buf, v);
  return dtype_load_f64(dt, buf);
}

/* dst[i] = fn(operands[i]) over dst's shape, computed in double (use_float) or int64. The operands
 * broadcast to dst. dst may be any view (cat and friends write into slices). */
void pointwise_kernel(Em *e, Node *n, const char *what, const TV *dst, Operand *ops, int nops, const char *fname,
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
  const char *rt = pw_type(e, comp);
  fprintf(f, "    %s a[%d];\n", use_float ? rt : "int64_t", nops ? nops : 1);
  for (int j = 0; j < nops; j++) {
    fprintf(f, "    a[%d] = ", j);
    if (ops[j].is_tensor) {
      TV b = broadcast_tv(e, &ops[j].t, dst->rank, dst->sizes);
      const char *p = arena_printf(e->a, "x%d", j), *ix = index_of(e, &b, dst->rank);
      if (use_float) load_r(f, b.dt, p, ix, rt); else load_i(f, b.dt, p, ix);
    } else if (use_float) fmt_double(f, ops[j].none ? NAN : round_to(dtype_is_float(comp) ? comp : DT_F64, ops[j].f));
    else if (ops[j].none) fputs(j == 1 ? "INT64_MIN" : "INT64_MAX", f);   /* clamp's missing bound */
    else fprintf(f, "INT64_C(%lld)", (long long)ops[j].i);
    fputs(";\n", f);
  }
  fprintf(f, "    ");
  store(f, dst->dt, use_float, "y", index_of(e, dst, dst->rank), arena_printf(e->a, "%s(a)", use_float ? fn_in(e, fname, rt) : fname));
  close_loops(e, closers);
  fputs("}\n", f);
  /* the call */
  kcall(e, id);
  fprintf(e->r, "%s", sname(e, dst->stor));
  for (int j = 0; j < nops; j++)
    if (ops[j].is_tensor) fprintf(e->r, ", %s", sname(e, ops[j].t.stor));
  kcall_end(e);
}

/* A plain copy (with dtype conversion) of src into dst. A scratch tensor copied into a fresh one of
 * the same dtype, size and layout (what a scatter, index_put or slice_scatter starts from: often a fill
 * of zeros read by nothing else) may give the copy its memory where this is its last reader
 * (memplan.c decides, as for pointwise kernels); the copy is then skipped at run time (the two
 * addresses equal). */
void copy_kernel(Em *e, Node *n, const TV *dst, const TV *src) {
  Operand op = {.is_tensor = true, .t = *src};
  bool fl = dtype_is_float(src->dt) || dtype_is_float(dst->dt);
  Stor *ss = &e->st[src->stor], *ds = &e->st[dst->stor];
  bool same = ss->kind == S_SCRATCH && ds->kind == S_SCRATCH && src->stor != dst->stor && !ds->inplace && ds->first == e->nk && src->dt == dst->dt &&
              layout_same(e->g, &src->l, &dst->l) && expr_same(e->g, ss->nelem, ds->nelem);
  if (same) {
    ds->inplace = src->stor + 1;
    fprintf(e->r, "  if (%s != %s)", sname(e, dst->stor), sname(e, src->stor));
  }
  pointwise_kernel(e, n, "copy", dst, &op, 1, fl ? "f_ident" : "i_ident", fl, src->dt);
}

/* The value's elements in a fresh contiguous tensor, copying only when its view is not one. */
TV *contiguous_of(Em *e, Node *n, Value *v) {
  TV *t = tv_of(e, n, v);
  if (!t || is_contiguous(e, t)) return t;
  TV *c = arena_alloc(e->a, sizeof *c);
  const Expr *n_el = numel(e, t);
  int s = new_stor(e, S_SCRATCH, 0, t->dt, n_el);
  contiguous_tv(e, c, s, t->dt, t->rank, t->sizes);
  copy_kernel(e, n, c, t);
  /* an operand's copy before the node's own kernel: recorded as a copy of no node (as the outputs'
   * copies are), so that explain gives the node's fused nodes and figures to its own kernel */
  if (e->c->record && e->c->nkernels) {
    KernelRec *r = &e->c->kernels[e->c->nkernels - 1];
    double ne;
    r->n = NULL;
    r->space = hint_shape(e, c->rank, c->sizes, &ne);
    r->read = r->written = ne * dtype_info(c->dt)->size;
    r->flops = ne;
  }
  return c;
}

int operands_of(Em *e, Node *n, Operand *ops, int *nops) {
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
    else if (a->k == AK_FLOAT) { o->f = a->u.f; o->i = gg_f64_to_i64(a->u.f); }
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
  if (plan->use_float && plan->f32name && e->t->float32_functions) return plan->f32name;
  return plan->use_float ? plan->fname : plan->iname;
}

static int add_param(Params *p, const TV *t) {
  for (int i = 0; i < p->n; i++)
    if (p->tv[i].stor == t->stor && p->tv[i].dt == t->dt) return i;   /* one pointer per storage */
  if (p->n == 64) return -1;
  p->tv[p->n] = *t;
  return p->n++;
}

/* The offset of layout l (of loop rank) with the loop indices moved by e->shift */
static const Expr *shifted_offset(Em *e, const Layout *l, int rank) {
  const Expr *off = l->offset;
  if (!e->shift) return off;
  for (int d = 0; d < rank; d++) off = ADD(e, off, MUL(e, e->shift[d], l->strides[d]));
  return off;
}

int emit_cat(Em *, Node *);
static const char *load_operand(Em *e, Node *n, const TV *t, int rank, const Expr *const *sizes, Params *P, bool as_float, const char *rt, bool several);

/* A concatenation in its reader's loop (schedule.c's sched_fusible_cat): the element of the input
 * whose range along the cat's dim holds the loop index there, each input's statements in a branch of
 * their own (nothing outside an input's range is read), evaluated at the index shifted back by the
 * input's start (e->shift: loads move their offset by shift times their stride). */
static const char *fused_cat(Em *e, FILE *f, Node *n, int rank, const Expr *const *sizes, Params *P, bool *as_float) {
  const Arg *ts = &n->args[0];
  Value *y = n->outs[0];
  int d = dim_wrap(node_int_arg(n, "dim", 0), y->rank) + rank - y->rank;
  bool fl = dtype_is_float(y->dtype);
  const char *T = fl ? pw_type(e, y->dtype) : "int64_t";
  const Expr *const *saved = e->shift, *sh[R];
  const char *lin = e->lin_index;
  e->lin_index = NULL;   /* inputs are not laid out as the reduced value */
  int id = e->nfv++;
  fprintf(f, "    %s r%d;\n", T, id);
  int64_t at = 0;
  for (int i = 0; i < ts->n; i++) {
    Value *x = ts->u.ts[i];
    int64_t k;
    expr_is_const(x->sizes[d - (rank - y->rank)], &k);
    if (i == ts->n - 1) fputs(i ? "    else {\n" : "    {\n", f);
    else fprintf(f, "    %sif (i%d < %" PRId64 ") {\n", i ? "else " : "", d, at + k);
    for (int j = 0; j < rank; j++) sh[j] = saved ? saved[j] : C(e, 0);
    sh[d] = ADD(e, sh[d], C(e, -at));
    e->shift = sh;
    TV *t = tv_of(e, n, x);
    const char *v = NULL;
    bool xf = fl;
    if (!t) v = NULL;
    else if (t->deferred) v = fused_value(e, f, t->deferred, rank, sizes, P, &xf, true);
    else v = load_operand(e, n, t, rank, sizes, P, fl, T, true);
    e->shift = saved;
    if (!v) { e->lin_index = lin; return NULL; }
    fprintf(f, "      r%d = (%s)(%s);\n    }\n", id, T, v);
    at += k;
  }
  e->lin_index = lin;
  *as_float = fl;
  return arena_printf(e->a, "r%d", id);
}

/* Whether operand b of a kernel with V elements a thread (e->vec) is loaded 16 bytes at a time: its V
 * elements consecutive (last stride 1) from an index that is a multiple of V (the offset and the other
 * strides are; the task's first last index is), in scratch (64-byte aligned), V of them a multiple of
 * 16 bytes; not inside a concatenation's branch (its other inputs' ranges are not its own). */
static bool vector_load(Em *e, const TV *b, int rank) {
  int64_t k;
  if (!e->vec || e->shift || e->lin_index || rank < 1 || b->rank != rank || e->st[b->stor].kind != S_SCRATCH || (e->vec * dtype_info(b->dt)->size) % 16) return false;
  if (!expr_is_const(b->strides[rank - 1], &k) || k != 1 || !expr_is_const(b->offset, &k) || k % e->vec) return false;
  for (int d = 0; d < rank - 1; d++)
    if (!expr_is_const(b->strides[d], &k) || k % e->vec) return false;
  return true;
}

/* The expression loading stored operand t of node n at the loop indices (broadcast to the loop's
 * sizes, moved by e->shift) as rt (as_float) or int64_t: its pointer a kernel parameter (P), read
 * through the linear index where its layout is the loop's, or from the thread's 16-byte preload
 * (vector_load). several: the parameter is read at more than one layout (a concatenation's branches).
 * NULL after an error. */
static const char *load_operand(Em *e, Node *n, const TV *t, int rank, const Expr *const *sizes, Params *P, bool as_float, const char *rt, bool several) {
  int p = add_param(P, t);
  if (p < 0) { efail(e, n, "too many fused operands"); return NULL; }
  TV b = broadcast_tv(e, t, rank, sizes);
  b.l.offset = shifted_offset(e, &b.l, rank);
  char *buf = NULL;
  size_t len = 0;
  FILE *bf = open_memstream(&buf, &len);
  const char *ptr = arena_printf(e->a, "x%d", p);
  const char *ix = e->lin_index && layout_same(e->g, &b.l, e->lin_layout) ? e->lin_index : index_of(e, &b, rank);
  if (vector_load(e, &b, rank)) {   /* the thread's V elements in 16-byte loads, before its loop over them */
    int id = e->nfv++;
    const char *T = ctype(b.dt);
    fprintf(e->vpre, "    __align__(16) %s p%d[%d];\n    { const int64_t i%d = i%db; _Pragma(\"unroll\") for (int j = 0; j < %d; j++) ((uint4 *)p%d)[j] = ((const uint4 *)(%s + %s))[j]; }\n",
            T, id, e->vec, rank - 1, rank - 1, e->vec * dtype_info(b.dt)->size / 16, id, ptr, ix);
    ptr = arena_printf(e->a, "p%d", id);
    ix = "v";
  }
  if (several || (P->seen[p] && !layout_same(e->g, &P->at[p], &b.l))) P->several[p] = true;
  else if (!P->seen[p]) P->at[p] = b.l;
  P->seen[p] = true;
  if (as_float) load_r(bf, b.dt, ptr, ix, rt); else load_i(bf, b.dt, ptr, ix);
  fclose(bf);
  const char *v = arena_strdup(e->a, buf);
  free(buf);
  return v;
}

/* n's value is one of its inputs' values, or zero (or NaN), and every input has n's dtype: it needs
 * no rounding to that dtype (a 16-bit ReLU after a residual add: a third of the epilogue's work) */
static bool picks_input(const Node *n) {
  static const char *const ops[] = {"relu", "neg", "abs", "maximum", "minimum", NULL};
  int i = 0;
  while (ops[i] && strcmp(ops[i], n->op->name)) i++;
  if (!ops[i] || n->nouts != 1) return false;
  int nt = 0;
  for (int a = 0; a < n->op->nargs; a++) {
    if (n->args[a].k == AK_TENSOR) {
      if (n->args[a].u.t->dtype != n->outs[0]->dtype) return false;
      nt++;
    } else if (n->args[a].k != AK_NONE) return false;
  }
  return nt >= 1;
}

/* A float16/bfloat16 value computed inside the kernel of a reader whose result is a smooth function of
 * it (arithmetic, powers, exponentials, the activations: no comparison, rounding to an integer, cast
 * or choice by it) is read unrounded, as Inductor's kernels do: the result then differs from
 * PyTorch's op-by-op roundings by less than one of them, and lies closer to float64's (the corpus
 * rule). Where the reader is not smooth (floor(x * 3) in bfloat16, a comparison, a cast) the value
 * is rounded as a stored tensor would be; so is the input of a node that passes it on (picks_input:
 * ReLU, neg, abs, max, min leave their result unrounded, taking their input as rounded). GPT-2's
 * bfloat16 GELU (eight nodes in one kernel): docs/BENCHMARKS.md, session 58. */
static bool smooth_reader(const Node *n, const PwPlan *plan) {
  static const char *const ops[] = {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "rsub.Scalar", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
                                    "tanh", "exp", "exp2", "expm1", "log", "log1p", "log2", "sigmoid", "erf", "gelu", "silu", "mish", "softplus",
                                    "sqrt", "rsqrt", "reciprocal", "sin", "cos", "square", "elu", "hardswish", "hardsigmoid", NULL};
  const Arg *m = rw_arg(n, "rounding_mode");
  if (!plan->use_float || n->nouts != 1 || !dtype_is_float(n->outs[0]->dtype) || (m && m->k != AK_NONE)) return false;
  for (int i = 0; ops[i]; i++)
    if (!strcmp(ops[i], n->op->name)) return true;
  return false;
}

/* Emit the statements computing node n at the loop indices into the kernel body; returns the name of
 * the C variable holding its value, rounded to n's dtype as a stored tensor would be where exact (a
 * float16/bfloat16 value its reader is smooth in, or one the caller stores next, whose store rounds
 * it, is left in float) */
const char *fused_value(Em *e, FILE *f, Node *n, int rank, const Expr *const *sizes, Params *P, bool *as_float, bool exact) {
  if (n->op && n->op->emit == emit_cat) return fused_cat(e, f, n, rank, sizes, P, as_float);
  PwPlan plan;
  if (pw_plan(e->c, n, &plan)) return NULL;
  Operand ops[8];
  int nops;
  if (operands_of(e, n, ops, &nops)) return NULL;
  const char *rt = pw_type(e, plan.comp);
  bool real_float = plan.use_float && !strcmp(rt, "float");
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
      arg[j] = real_float ? arena_printf(e->a, "(float)(%s)", ops[j].t.cexpr) : ops[j].t.cexpr;
      continue;
    }
    if (ops[j].t.deferred) {
      bool fl;
      const char *v = fused_value(e, f, ops[j].t.deferred, rank, sizes, P, &fl, !real_float || !smooth_reader(n, &plan));
      if (!v) return NULL;
      arg[j] = plan.use_float ? arena_printf(e->a, "(%s)%s", rt, v) : fl ? arena_printf(e->a, "gg_d2i(%s)", v) : v;
      continue;
    }
    if (!(arg[j] = load_operand(e, n, &ops[j].t, rank, sizes, P, plan.use_float, rt, false))) return NULL;
  }
  int id = e->nfv++;   /* each evaluation its own names: a value recomputed by two readers of one kernel */
  const char *T = plan.use_float ? rt : "int64_t";
  fprintf(f, "    const %s a%d[%d] = {", T, id, nops ? nops : 1);
  for (int j = 0; j < nops; j++) fprintf(f, "%s%s", j ? ", " : "", arg[j]);
  fputs(nops ? "};\n" : "0};\n", f);
  const char *fn = scalar_fn(e, n, &plan);
  if (plan.use_float) fn = fn_in(e, fn, rt);
  DType dt = n->outs[0]->dtype;
  /* round as storing and reloading a tensor of dt would */
  const char *val = arena_printf(e->a, "%s(a%d)", fn, id);
  bool out_float = dtype_is_float(dt);
  if (real_float && (dt == DT_F32 || ((dt == DT_F16 || dt == DT_BF16) && (picks_input(n) || !exact)))) fprintf(f, "    const float r%d = %s;\n", id, val);   /* already of dt, or read unrounded */
  else if (real_float && dt == DT_F16) fprintf(f, "    const float r%d = gg_h2f(gg_f2h(%s));\n", id, val);
  else if (real_float && dt == DT_BF16) fprintf(f, "    const float r%d = gg_bf2f(gg_f2bf(%s));\n", id, val);
  else if (dt == DT_F32) fprintf(f, "    const double r%d = (double)(float)%s;\n", id, val);
  else if (dt == DT_F64) fprintf(f, "    const double r%d = %s;\n", id, val);
  else if ((dt == DT_F16 || dt == DT_BF16) && picks_input(n)) fprintf(f, "    const double r%d = %s;\n", id, val);   /* already of dt: no rounding */
  else if (dt == DT_F16) fprintf(f, "    const double r%d = (double)gg_h2f(gg_d2h(%s));\n", id, val);
  else if (dt == DT_BF16) fprintf(f, "    const double r%d = (double)gg_bf2f(gg_f2bf((float)%s));\n", id, val);
  else if (dt == DT_BOOL) fprintf(f, "    const int64_t r%d = %s != 0;\n", id, val);
  else fprintf(f, "    const int64_t r%d = (int64_t)(%s)%s%s%s;\n", id, ctype(dt), plan.use_float ? "gg_d2i(" : "(", val, ")");
  *as_float = out_float;
  return arena_printf(e->a, "r%d", id);
}

/* How many consecutive elements a GPU thread of a pointwise kernel computes (0: one, the plain
 * loops): 16 bytes of output, where the target has vector loops and the output is scratch (64-byte
 * aligned), contiguous, of static shape, its offset and last size multiples of V. */
static int vector_width(Em *e, const TV *out) {
  int64_t sz = dtype_info(out->dt) ? dtype_info(out->dt)->size : 0, V = sz == 2 || sz == 4 ? 16 / sz : 0, last, off;
  bool aligned = e->st[out->stor].kind == S_SCRATCH || e->st[out->stor].aligned;
  if (!V || !e->t->device->vloops || out->rank == 0 || !aligned || !is_contiguous(e, out) || !expr_is_const(out->offset, &off) ||
      off % V || !expr_is_const(out->sizes[out->rank - 1], &last) || last % V)
    return 0;
  for (int d = 0; d < out->rank; d++)
    if (!expr_is_const(out->sizes[d], &last)) return 0;
  return (int)V;
}

int emit_pointwise(Em *e, Node *n) {
  if (e->s->role[n->id] == SN_EPILOGUE && sched_norm_second(e->s, e->s->into[n->id])) return 0;   /* the norm stored it (emit_norm) */
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
    char *body = NULL, *pre = NULL;
    size_t blen = 0, plen = 0;
    FILE *bf = open_memstream(&body, &blen);
    bool fl;
    int V = vector_width(e, out);
    e->vec = V;
    if (V) e->vpre = open_memstream(&pre, &plen);
    const char *v = fused_value(e, bf, n, out->rank, out->sizes, &P, &fl, false);   /* the store rounds it */
    if (V) fclose(e->vpre);
    e->vec = 0;
    e->vpre = NULL;
    e->vpre_text = pre;
    fclose(bf);
    if (!v) { free(body); free(pre); return -1; }
    /* in-place reuse: a scratch tensor of the same dtype and size read only at the index written (the
     * output's layout) may give this kernel's output its memory, if it dies here (memplan.c decides);
     * y is then not restrict (reading x[i] and then writing y[i] at the same address vectorizes all
     * the same) */
    for (int j = 0; j < P.n; j++) {
      Stor *ps = &e->st[P.tv[j].stor];
      if (ps->kind == S_SCRATCH && e->st[out->stor].kind == S_SCRATCH && P.tv[j].dt == out->dt && P.seen[j] && !P.several[j] && layout_same(e->g, &P.at[j], &out->l) &&
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
    if (V) {   /* a thread per V elements, one 16-byte store; scratch operands are 64-byte aligned: those
                * read along the last dim from an aligned index are loaded 16 bytes at a time (vector_load) */
      for (int j = 0; j < P.n; j++)
        if (e->st[P.tv[j].stor].kind == S_SCRATCH) fprintf(f, "  x%d = (const %s *)__builtin_assume_aligned(x%d, 16);\n", j, ctype(P.tv[j].dt), j);
      e->d->vloops(e, out->rank, out->sizes, V, ctype(out->dt));
      fputs(body, f);
      fputs("    ", f);
      store(f, out->dt, fl, "yv", "v", v);
      e->d->vstore(e, V, ctype(out->dt), arena_printf(e->a, "%s + (int64_t)gi * %d", cx(e, out->offset), V));
      free(pre);
      e->vpre_text = NULL;
    } else {
      int cl = open_loops(e, out->rank, out->sizes, true);
      fputs(body, f);
      fputs("    ", f);
      store(f, out->dt, fl, "y", index_of(e, out, out->rank), v);
      close_loops(e, cl);
    }
    free(body);
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



/* Views (view.c's rules): the output indexes the input's storage; where PyTorch copies, a copy
 * kernel into a fresh contiguous tensor (reshape: the input in its own order, then viewed). */
int emit_view(Em *e, Node *n) {
  if (sched_is_float_cast(n)) return emit_pointwise(e, n);   /* fused like pointwise ops (schedule.c) */
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



/* The statements of n's epilogue (the schedule's chain after it) over a run of its output's elements:
 * the product's element, yr[j], is the seed; the chain's values before the last are computed inline;
 * the operands are read at the linear index i0. *val: the last value (*fl: as float); ep gets the
 * chain and the tensors it reads. 0 when n has no epilogue, 1 when it has, -1 on error. */
int epilogue_body(Em *e, Node *n, const TV *out, Epi *ep, char **body_out, const char **val_out, bool *fl_out) {
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
  load_r(lf, v->dtype, "yr", "j", pw_type(e, v->dtype));   /* float for float32 and half types */
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
  const char *val = fused_value(e, bf, ep->chain[ep->n - 1], 1, &ne, &P, &fl, false);   /* stored: the store rounds it */
  fclose(bf);
  while (nsave--) e->tv[saved_v[nsave]->id] = saved[nsave];
  if (!val || P.n > EPI_MAX) {
    free(body);
    return val ? GG_INTERNAL(e->c) : -1;
  }
  ep->P = P;
  *body_out = body;
  *val_out = val;
  *fl_out = fl;
  return 1;
}

