/* emit_ops.c: the kernels of every op but pointwise ones and views (emit.c), written once for both
 * targets: reductions and scans, normalization rows, the operands of matrix products and the
 * geometry of convolutions (which the target's product and conv functions take from there:
 * emit_c.c, emit_cuda.c), pooling, data movement, creation.
 * Requires and guarantees: as emit.c. */
#include "emit.h"
#include "rewrite.h"
#include "scalar.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reductions and rows */

/* The dims of x listed in ds (outer to inner) as (size, stride) pairs at the example sizes, dims of
 * size 1 left out and neighbours that are one run of memory merged (batch norm's [H, W] is one dim of
 * H * W). Returns the count, or -1 when a size or stride is not a constant. */
static int merged_dims(const TV *x, const int *ds, int nd, int64_t *sz, int64_t *st) {
  int m = 0;
  for (int i = 0; i < nd; i++) {
    int64_t a, b;
    if (!expr_is_const(x->sizes[ds[i]], &a) || !expr_is_const(x->strides[ds[i]], &b)) return -1;
    if (a == 1) continue;
    if (m && st[m - 1] == a * b) { sz[m - 1] *= a; st[m - 1] = b; }
    else { sz[m] = a; st[m++] = b; }
  }
  return m;
}

/* The address, in x, of element `idx` of merged dims (sz, st) (the last fastest), added to `at`. */
static void add_address(FILE *f, const char *T, const char *idx, const char *at, const int64_t *sz, const int64_t *st, int m) {
  if (!m) return;
  fprintf(f, "      { %s q = %s;", T, idx);
  for (int i = m - 1; i > 0; i--) fprintf(f, " %s += (q %% (%s)%" PRId64 ") * (%s)%" PRId64 "; q /= (%s)%" PRId64 ";", at, T, sz[i], T, st[i], T, sz[i]);
  fprintf(f, " %s += q * (%s)%" PRId64 "; }\n", at, T, st[0]);
}

/* On the GPU, a sum or mean with few outputs for its length (batch norm's statistics and gradients:
 * 64-512 channels of up to 10^5 elements each; a bias or layer norm weight gradient: 768 columns of
 * batch x sequence rows), which a warp or a thread per output leaves most of the GPU idle: each
 * output's elements are split into P chunks, a warp per chunk when the reduced elements are
 * contiguous (rows: lanes along them) or a thread per chunk when the outputs are (columns: a warp
 * reads 32 neighbouring columns), and a second kernel adds each output's P partial sums in a fixed
 * order (deterministic, no atomics). Static sizes only. Returns 1 when the shape is not one of these. */
static int split_reduce(Em *e, Node *n, const TV *x, const TV *out, const int *kept, int nkept, const int *red, int nred, bool mean, Node *fused) {
  int64_t ks[R], kst[R], rs[R], rst[R], off;
  int nk = merged_dims(x, kept, nkept, ks, kst), nr = merged_dims(x, red, nred, rs, rst);
  if (fused && nr == 0) rs[nr] = rst[nr] = 1, nr++;   /* reduced dims all of size 1: one element each */
  if (nk < 0 || nr < 1 || !expr_is_const(x->offset, &off)) return 1;
  int64_t O = 1, L = 1, span = off;
  for (int i = 0; i < nk; i++) { O *= ks[i]; span += (ks[i] - 1) * kst[i]; }
  for (int i = 0; i < nr; i++) { L *= rs[i]; span += (rs[i] - 1) * rst[i]; }
  bool rows = rst[nr - 1] == 1, cols = !rows && nk && kst[nk - 1] == 1;
  if ((!rows && !cols) || O == 0 || L == 0) return 1;
  /* rows: about 8192 warps, each at least 1024 elements; columns: about 128 K threads, each at least 16 */
  int64_t P = rows ? (8192 + O - 1) / O : (131072 + O - 1) / O, most = rows ? L / 1024 : L / 16;
  if (P > most) P = most;
  if (P < 1) P = 1;
  if (rows && P < 2 && !fused) return 1;   /* the warp-per-output kernel below */
  int64_t CH = (L + P - 1) / P;
  P = (L + CH - 1) / CH;
  const char *T = span < INT32_MAX && L < INT32_MAX && O * P * 32 < INT32_MAX ? "uint32_t" : "int64_t";
  const char *rt = real_type(e, x->dt);
  DType pdt = strcmp(rt, "float") ? DT_F64 : DT_F32;
  int part = P > 1 ? new_stor(e, S_SCRATCH, 0, pdt, C(e, O * P)) : -1;
  /* a fused input (sched_takes_prologue): x is its logical, contiguous layout; each element's indices
   * come from its position `at`, and the pointwise nodes compute it there from their own operands */
  Params FP = {0};
  char *body = NULL, *kdecl = NULL;
  size_t blen = 0, klen = 0;
  const char *fv = NULL;
  if (fused) {   /* the kept dims' indices from o (once per output), the reduced ones' from j */
    FILE *kf = open_memstream(&kdecl, &klen), *bf = open_memstream(&body, &blen);
    const int *dl[2] = {kept, red};
    const int nl[2] = {nkept, nred};
    const char *from[2] = {"o", "j"};
    for (int k = 0; k < 2; k++) {
      FILE *df = k ? bf : kf;
      fprintf(df, "      { %s q = %s;", T, from[k]);
      for (int i = nl[k] - 1; i >= 0; i--) {
        int64_t sz;
        expr_is_const(x->sizes[dl[k][i]], &sz);
        fprintf(df, " i%d = (int64_t)(q %% (%s)%" PRId64 "); q /= (%s)%" PRId64 ";", dl[k][i], T, sz, T, sz);
      }
      fputs(" (void)q; }\n", df);
    }
    fclose(kf);
    e->lin_index = "at";   /* operands laid out as the reduced value itself: loaded at its position */
    e->lin_layout = &x->l;
    bool fl;
    fv = fused_value(e, bf, fused, x->rank, x->sizes, &FP, &fl, true);
    e->lin_index = NULL;
    e->lin_layout = NULL;
    fclose(bf);
    if (!fv) { free(body); free(kdecl); return -1; }
  }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, rows ? "split row reduction" : "column reduction");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y", P > 1 ? rt : ctype(out->dt));
  if (fused)
    for (int j = 0; j < FP.n; j++) fprintf(f, ", const %s *x%d", ctype(FP.tv[j].dt), j);
  else fprintf(f, ", const %s *x", ctype(x->dt));
  ksyms(e);
  fprintf(f, "  const %s O = %" PRId64 ", P = %" PRId64 ", CH = %" PRId64 ", L = %" PRId64 ";\n", T, O, P, CH, L);
  if (rows) fprintf(f, "  const %s lane = threadIdx.x & 31;\n  for (%s w = (blockIdx.x * (%s)blockDim.x + threadIdx.x) >> 5; w < O * P; w += (gridDim.x * (%s)blockDim.x) >> 5) {\n"
                    "    const %s o = w / P, p = w %% P;\n", T, T, T, T, T);
  else fprintf(f, "  for (%s w = blockIdx.x * (%s)blockDim.x + threadIdx.x; w < O * P; w += gridDim.x * (%s)blockDim.x) {\n    const %s o = w %% O, p = w / O;\n", T, T, T, T);
  fprintf(f, "    %s base = (%s)%" PRId64 ";\n", T, T, off);
  add_address(f, T, "o", "base", ks, kst, nk);
  fprintf(f, "    const %s j1 = (p + 1) * CH < L ? (p + 1) * CH : L;\n    %s acc = 0;\n", T, rt);
  if (fused) {
    fputs("    int64_t", f);
    for (int d = 0; d < x->rank; d++) fprintf(f, "%s i%d", d ? "," : "", d);
    fputs(";\n", f);
    fputs(kdecl, f);
    free(kdecl);
  }
  fprintf(f, "    _Pragma(\"unroll 4\") for (%s j = p * CH%s; j < j1; j += %s) {\n      %s at = base;\n", T, rows ? " + lane" : "", rows ? "32" : "1", T);
  add_address(f, T, "j", "at", rs, rst, nr);
  if (fused) {
    fputs(body, f);
    fprintf(f, "      acc += (%s)%s;\n    }\n", rt, fv);
  } else {
    fputs("      acc += ", f);
    load_r(f, x->dt, "x", "at", rt);
    fputs(";\n    }\n", f);
  }
  free(body);
  const char *res = mean ? arena_printf(e->a, "acc / (%s)L", rt) : "acc";
  if (rows) fputs("    acc = gg_wsum(acc);\n    if (lane == 0) ", f);
  else fputs("    ", f);
  if (P > 1) fputs("y[w] = acc;\n", f);
  else store(f, out->dt, true, "y", "o", res);
  fputs("  }\n}\n", f);
  e->launch = arena_printf(e->a, "%" PRId64, O * P * (rows ? 32 : 1));
  kcall(e, id);
  fprintf(e->r, "%s", P > 1 ? sname(e, part) : sname(e, out->stor));
  if (fused)
    for (int j = 0; j < FP.n; j++) fprintf(e->r, ", %s", sname(e, FP.tv[j].stor));
  else fprintf(e->r, ", %s", sname(e, x->stor));
  kcall_end(e);
  if (P == 1) return 0;
  id = e->nk++;
  kernel_begin(e, n, "partial sums added");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y, const %s *part", ctype(out->dt), rt);
  ksyms(e);
  fprintf(f, "  const %s O = %" PRId64 ", P = %" PRId64 ", L = %" PRId64 "; (void)L;\n", T, O, P, L);
  fprintf(f, "  for (%s o = blockIdx.x * (%s)blockDim.x + threadIdx.x; o < O; o += gridDim.x * (%s)blockDim.x) {\n    %s acc = 0;\n", T, T, T, rt);
  fprintf(f, "    for (%s p = 0; p < P; p++) acc += part[%s];\n    ", T, rows ? "o * P + p" : "p * O + o");
  store(f, out->dt, true, "y", "o", mean ? arena_printf(e->a, "acc / (%s)L", rt) : "acc");
  fputs("  }\n}\n", f);
  e->launch = arena_printf(e->a, "%" PRId64, O);
  kcall(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, part));
  kcall_end(e);
  return 0;
}


int emit_reduce(Em *e, Node *n) {
  Value *xv = n->args[0].u.t;
  TV *x = tv_of(e, n, xv);
  if (!x) return -1;
  bool mask[R] = {0};
  int di = ops_arg_index(n->op, "dim"), nd = 0;
  if (di >= 0 && n->args[di].k == AK_INT) { int64_t d; expr_is_const(n->args[di].u.i, &d); if (x->rank) mask[dim_wrap(d, x->rank)] = true; nd = 1; }
  else if (di >= 0 && n->args[di].k == AK_INTS && n->args[di].n) {
    for (int i = 0; i < n->args[di].n; i++) { int64_t d; expr_is_const(n->args[di].u.is[i], &d); if (x->rank) mask[dim_wrap(d, x->rank)] = true; }
    nd = 1;
  }
  if (!nd) for (int d = 0; d < x->rank; d++) mask[d] = true;
  /* loop order: kept dims outside (parallel), reduced dims inside */
  int kept[R], red[R], nkept = 0, nred = 0;
  for (int d = 0; d < x->rank; d++) { if (mask[d]) red[nred++] = d; else kept[nkept++] = d; }
  TV *out = alloc_value(e, n->outs[0]);
  if (x->deferred) {   /* its input computed in its loop (sched_takes_prologue): the split kernels */
    TV lx;
    contiguous_tv(e, &lx, 0, xv->dtype, xv->rank, xv->sizes);
    int r = split_reduce(e, n, &lx, out, kept, nkept, red, nred, n->op->red == R_MEAN, x->deferred);
    return r > 0 ? efail(e, n, "a reduction of a fused value has no kernel (internal error)") : r;
  }
  TV *out2 = n->nouts == 2 ? alloc_value(e, n->outs[1]) : NULL;
  const int rk = n->op->red;
  bool is_arg = rk == R_ARGMAX || rk == R_ARGMIN;
  bool ints = !dtype_is_float(out->dt) && !dtype_is_float(x->dt) && !is_arg && rk != R_MAX_DIM && rk != R_MIN_DIM;
  double correction = 1;
  int ui = ops_arg_index(n->op, "unbiased");   /* var.dim, std.dim */
  if (ui >= 0) correction = n->args[ui].u.b ? 1 : 0;
  else {
    int ci = ops_arg_index(n->op, "correction");
    if (ci >= 0 && n->args[ci].k == AK_FLOAT) correction = n->args[ci].u.f;
    else if (ci >= 0 && n->args[ci].k == AK_INT) { int64_t v; expr_is_const(n->args[ci].u.i, &v); correction = (double)v; }
  }
  double ord = 2;
  int oi = ops_arg_index(n->op, "ord");
  if (oi >= 0) { const Arg *a = &n->args[oi]; int64_t v; ord = a->k == AK_FLOAT ? a->u.f : expr_is_const(a->u.i, &v) ? (double)v : 2; }
  int64_t one;
  bool plain = (rk == R_SUM || rk == R_MEAN) && dtype_is_float(out->dt) && !out2;
  if (plain && e->cuda && nred >= 1) {   /* before this kernel's id: it writes kernels of its own */
    int r = split_reduce(e, n, x, out, kept, nkept, red, nred, rk == R_MEAN, NULL);
    if (r <= 0) return r;
  }
  FILE *f = e->k;
  int id = e->nk++;
  /* sums over outer dims of a contiguous inner dim (bias gradients, batch sums): blocks of columns
   * per thread, each row added with unit stride */
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
    const char *res = rk == R_MEAN ? arena_printf(e->a, "acc[j] / (double)(%s)", cx(e, cnt)) : "acc[j]";
    fputs("    for (int64_t j = 0; j < w; j++) ", f);
    store(f, out->dt, true, "y", "o * Cn + cb + j", res);
    fputs("  }\n}\n", f);
    fprintf(e->r, "  k%d(%s, NULL, %s, s);\n", id, sname(e, out->stor), sname(e, x->stor));
    return 0;
  }
  /* on the GPU, a sum or mean whose last reduced dim is contiguous: a warp per output, its lanes
   * striding along the reduced elements (coalesced) and combining with shuffles. A run of the last dims
   * (RMSNorm's mean, a row sum) is one row; others (batch norm's statistics over [N, H, W], a sum of
   * everything) are walked through their reduced dims. */
  bool rows = plain && e->cuda && nred >= 1 && expr_is_const(x->strides[red[nred - 1]], &one) && one == 1;
  bool run = rows && nkept >= 1 && red[0] == x->rank - nred;
  for (int i = 0; run && i < nred - 1; i++) run = expr_same(e->g, x->strides[red[i]], MUL(e, x->strides[red[i + 1]], x->sizes[red[i + 1]]));
  if (rows) {
    const Expr *ksz[R], *len = C(e, 1);
    for (int i = 0; i < nkept; i++) ksz[i] = x->sizes[kept[i]];
    int nk = nkept;
    if (!nk) ksz[nk++] = C(e, 1);   /* a sum of everything: one row */
    for (int i = 0; i < nred; i++) len = MUL(e, len, x->sizes[red[i]]);
    kernel_begin(e, n, "row reduction");
    kopen(e, id, false, false);
    fprintf(f, "%s *restrict y, void *y2, const %s *x", ctype(out->dt), ctype(x->dt));
    ksyms(e);
    fputs("  (void)y2;\n", f);
    int cl = open_rows(e, nk, ksz, len);
    fprintf(f, "    const int64_t L = %s;\n    const %s *row = x + %s", cx(e, len), ctype(x->dt), cx(e, x->offset));
    for (int i = 0; i < nkept; i++) fprintf(f, " + i%d * %s", i, cx(e, x->strides[kept[i]]));
    const char *rt = real_type(e, x->dt);   /* float32 and half types in float, as PyTorch accumulates */
    fprintf(f, ";\n    %s acc = 0;\n    %s ", rt, row_for(e));
    if (run) fputs("acc += ", f);
    else {   /* element j of the reduced dims, the last fastest (32-bit arithmetic where the sizes allow) */
      int64_t nx;
      const char *T = expr_is_const(numel(e, x), &nx) && nx < INT32_MAX ? "uint32_t" : "int64_t";
      fprintf(f, "{\n      %s q = (%s)j, at = 0;\n", T, T);
      for (int i = nred - 1; i >= 0; i--)
        fprintf(f, "      at += (q %% (%s)(%s)) * (%s)(%s); q /= (%s)(%s);\n", T, cx(e, x->sizes[red[i]]), T, cx(e, x->strides[red[i]]), T, cx(e, x->sizes[red[i]]));
      fputs("      acc += ", f);
    }
    load_r(f, x->dt, "row", run ? "j" : "at", rt);
    fputs(run ? ";\n" : ";\n    }\n", f);
    row_combine(e, "acc", false);
    fputs(e->rowwarp ? "    if (lane == 0) " : "    ", f);
    store(f, out->dt, true, "y", linear_index(e, ksz, nk, 0), rk == R_MEAN ? arena_printf(e->a, "acc / (%s)L", rt) : "acc");
    close_loops(e, cl);
    fputs("}\n", f);
    kcall(e, id);
    fprintf(e->r, "%s, NULL, %s", sname(e, out->stor), sname(e, x->stor));
    kcall_end(e);
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
  bool is_max = red_is_max(rk), is_min = red_is_min(rk), is_var = red_is_var(rk);
  bool is_prod = rk == R_PROD, is_any = rk == R_ANY, is_all = rk == R_ALL;
  bool is_lse = rk == R_LSE, is_norm = rk == R_NORM;
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
  if (rk == R_MEAN) res = "acc / (double)cnt";
  else if (is_var) res = arena_printf(e->a, "%s(acc / ((double)cnt - %.17g))", rk == R_STD ? "sqrt" : "", correction);
  else if (is_lse) res = "(cnt ? log(acc) + m : -INFINITY)";
  else if (is_norm && !isinf(ord) && ord == 2) res = "sqrt(acc)";
  else if (is_norm && !isinf(ord) && ord != 0 && ord != 1) res = arena_printf(e->a, "pow(acc, 1.0 / %.17g)", ord);
  if (is_arg) res = "best";
  fputs("    ", f);
  store(f, out->dt, !ints && !is_arg, "y", oidx, res);
  if (out2 && rk == R_VAR_MEAN) { fputs("    ", f); store(f, out2->dt, true, "y2", oidx, "mean"); }
  else if (out2) { fputs("    ", f); store(f, out2->dt, false, "y2", oidx, "best"); }
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s", sname(e, out->stor), out2 ? sname(e, out2->stor) : "NULL", sname(e, x->stor));
  kcall_end(e);
  return 0;
}

/* sort and topk: a row per thread (loops over the other dims), its indices stably merge-sorted by
 * their values (gg_sort_*, scalar.h) in scratch (the keys and two index buffers, per row), then the
 * first k written out */
int emit_sort(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *vals = alloc_value(e, n->outs[0]), *idx = alloc_value(e, n->outs[1]);
  int d = dim_wrap(node_int_arg(n, "dim", -1), x->rank);
  int ki = ops_arg_index(n->op, "k"), bi = ops_arg_index(n->op, ki >= 0 ? "largest" : "descending");
  bool desc = bi >= 0 && n->args[bi].k == AK_BOOL && n->args[bi].u.b, ints = !dtype_is_float(x->dt);
  const Expr *osz[R];
  int map[R], k = 0;
  for (int i = 0; i < x->rank; i++) if (i != d) { map[k] = i; osz[k++] = x->sizes[i]; }
  int scr = new_stor(e, S_SCRATCH, 0, DT_I64, MUL(e, C(e, 3), numel(e, x)));
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "sort");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict v, int64_t *restrict ix, const %s *x, int64_t *scr", ctype(vals->dt), ctype(x->dt));
  ksyms(e);
  const Expr *L = x->rank ? x->sizes[d] : C(e, 1);
  int cl = open_loops_work(e, k, osz, true, L);
  fprintf(f, "    const int64_t L = %s, K = %s, row = %s;\n", cx(e, L), x->rank ? cx(e, vals->sizes[d]) : "1", linear_index(e, osz, k, 0));
  fprintf(f, "    const int64_t xb = %s", cx(e, x->offset));
  for (int i = 0; i < k; i++) fprintf(f, " + i%d * %s", i, cx(e, x->strides[map[i]]));
  fprintf(f, ", vb = %s", cx(e, vals->offset));
  for (int i = 0; i < k; i++) fprintf(f, " + i%d * %s", i, cx(e, vals->strides[map[i]]));
  fprintf(f, ", xs = %s, vs = %s;\n", x->rank ? cx(e, x->strides[d]) : "0", x->rank ? cx(e, vals->strides[d]) : "0");
  const char *kt = ints ? "int64_t" : "double";
  fprintf(f, "    %s *key = (%s *)(scr + row * 3 * L);\n    int64_t *ord = scr + row * 3 * L + L;\n", kt, kt);
  fputs("    for (int64_t j = 0; j < L; j++) {\n      ord[j] = j;\n      key[j] = ", f);
  if (ints) load_i(f, x->dt, "x", "xb + j * xs"); else load_f(f, x->dt, "x", "xb + j * xs");
  fprintf(f, ";\n    }\n    gg_sort_%s(key, ord, ord + L, L, %d);\n", ints ? "i64" : "f64", desc);
  fputs("    for (int64_t j = 0; j < K; j++) {\n      ", f);
  store(f, vals->dt, !ints, "v", "vb + j * vs", "key[ord[j]]");
  fputs("      ix[vb + j * vs] = ord[j];\n    }\n", f);
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s", sname(e, vals->stor), sname(e, idx->stor), sname(e, x->stor), sname(e, scr));
  kcall_end(e);
  return 0;
}

int emit_scan(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  int d = dim_wrap(node_int_arg(n, "dim", 0), x->rank);
  bool ints = !dtype_is_float(out->dt), prod = n->op->red == R_CUMPROD, cum = prod || n->op->red == R_CUMSUM;
  bool logsm = n->op->red == R_LOG_SOFTMAX;
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
    const char *rt = real_type(e, x->dt);   /* float32 and half types in float on the GPU */
    if (!e->cuda && (x->dt == DT_F32 || x->dt == DT_F16 || x->dt == DT_BF16)) {   /* the row's maximum in a loop that vectorizes */
      fprintf(f, "    float mx = -INFINITY;\n    int nan = 0;\n    _Pragma(\"omp simd reduction(max:mx) reduction(|:nan)\") for (int64_t j = 0; j < L; j++) { float v = ");
      load_r(f, x->dt, "x", xi, "float");
      fprintf(f, "; nan |= v != v; mx = v > mx ? v : mx; }\n    %s m = nan ? NAN : mx, z = 0;\n", rt);
    } else {
      fprintf(f, "    %s m = -INFINITY, z = 0;\n    %s { %s v = ", rt, row_for(e), rt);
      load_r(f, x->dt, "x", xi, rt);
      fputs("; if (v > m || isnan(v)) m = v; }\n", f);
    }
    row_combine(e, "m", true);
    fputs("    if (isinf(m) && m < 0) m = 0;\n", f);
    /* float32, float16 and bfloat16 on the CPU: the float32 exponential (scalar.h), which vectorizes
     * (PyTorch's CPU kernels compute half types in float32 too) */
    bool f32ex = (x->dt == DT_F32 || x->dt == DT_F16 || x->dt == DT_BF16) && !e->cuda;
    const char *ex = x->dt == DT_F32 && !e->cuda ? "gg_expf" : "exp";
    if (!logsm && !e->cuda) {   /* rows that fit: each exponential once (not on the GPU: no room) */
      if (f32ex) {   /* m is one of the values, so x - m rounds as in float64 */
        fputs("    if (L <= 1024) {\n      float ex[1024];\n      const float mf = (float)m;\n      for (int64_t j = 0; j < L; j++) ex[j] = gg_expf(", f);
        load_r(f, x->dt, "x", xi, "float");
        fputs(" - mf);\n", f);
      } else {
        fputs("    if (L <= 1024) {\n      double ex[1024];\n      for (int64_t j = 0; j < L; j++) ex[j] = exp(", f);
        load_f(f, x->dt, "x", xi);
        fputs(" - m);\n", f);
      }
      fputs("      _Pragma(\"omp simd reduction(+:z)\") for (int64_t j = 0; j < L; j++) z += ex[j];\n      const double rz = 1.0 / z;\n      for (int64_t j = 0; j < L; j++) ", f);
      store(f, out->dt, true, "y", yi, "ex[j] * rz");
      fputs("      continue;\n    }\n", f);
    }
    fprintf(f, "    %s z += %s(", row_for(e), ex);
    load_r(f, x->dt, "x", xi, rt);
    fputs(" - m);\n", f);
    row_combine(e, "z", false);
    if (logsm) fprintf(f, "    const %s lz = log(z);\n", rt);
    fprintf(f, "    %s {\n      %s v = ", row_for(e), rt);
    load_r(f, x->dt, "x", xi, rt);
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

/* The epilogue in a kernel that calls the runtime: its tensors as parameters, the gg_epi built in the
 * body (y: the output), and their storages in the call. epi_ref: what the runtime is given. */
void epi_params(Em *e, const Epi *ep) {
  for (int j = 0; j < ep->P.n; j++) fprintf(e->k, ", const void *e%d", j);
}
void epi_decl(Em *e, const Epi *ep) {
  if (!ep->n) return;
  fprintf(e->k, "  const gg_epi ep = {%s, y, {", ep->fn);
  for (int j = 0; j < ep->P.n; j++) fprintf(e->k, "%se%d", j ? ", " : "", j);
  fputs(ep->P.n ? "}, s};\n" : "NULL}, s};\n", e->k);
}
void epi_args(Em *e, const Epi *ep) {
  for (int j = 0; j < ep->P.n; j++) fprintf(e->r, ", %s", sname(e, ep->P.tv[j].stor));
}
const char *epi_ref(const Epi *ep) { return ep->n ? "&ep" : "NULL"; }


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

/* out[batch] = alpha * a[batch] @ b[batch] (+ beta * bias broadcast), a: [..., M, K], b: [..., K, N]:
 * the operands as the target's product takes them (copied where no BLAS layout reads them). */
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
  bool blas = dt == DT_F32 || dt == DT_F64 || e->cuda;   /* cuBLAS takes every dtype: one of the last two strides 1 */
  if (blas && !blas_ok(e, &A)) { TV *c = contiguous_of(e, n, av); A.stor = c->stor; A.offset = c->offset; memcpy(A.strides + A.rank - c->rank, c->strides, sizeof(Expr *) * (size_t)c->rank); }
  if (blas && !blas_ok(e, &B)) {
    TV *c = contiguous_of(e, n, bv);
    if (b_transposed) { B.stor = c->stor; B.offset = c->offset; B.strides[0] = C(e, 1); B.strides[1] = c->strides[0]; }
    else { B.stor = c->stor; B.offset = c->offset; memcpy(B.strides + B.rank - c->rank, c->strides, sizeof(Expr *) * (size_t)c->rank); }
  }
  TV *out = alloc_value(e, sched_stored(e->s, n)), flat;   /* float32 where cuBLASLt's epilogue widens it */
  e->tv[y->id] = *out;
  const Expr *ost[R];
  if (!b_vec && e->s->rows_permuted[n->id] && (!e->saved_slot || e->saved_slot[y->id] < 0) && A.rank == y->rank && sched_rows_permuted(n, &A.l, bv, y, ost, e->a)) {
    /* one product over A's rows in memory order, the output laid out in the same order */
    const Expr *rows = C(e, 1), *sizes[2];
    for (int d = 0; d < A.rank - 1; d++) rows = MUL(e, rows, A.sizes[d]);
    memcpy(out->strides, ost, sizeof *ost * (size_t)y->rank);
    sizes[0] = rows;
    sizes[1] = y->sizes[y->rank - 1];
    contiguous_tv(e, &flat, out->stor, out->dt, 2, sizes);
    out = &flat;
    A.sizes[0] = rows;
    A.strides[0] = A.sizes[A.rank - 1];
    A.sizes[1] = A.sizes[A.rank - 1];
    A.strides[1] = C(e, 1);
    A.rank = 2;
  } else if (!b_vec && fold_batch_rows(e, &A, &B, bias, out, &flat)) out = &flat;
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
  const Product p = {n, out, Ab, Bb, nb, M, K, N, a_vec, b_vec, blas, bias, alpha, beta};
  return e->t->product(e, &p);
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
  /* the schedule's epilogue of a norm is a cast it stores (norm_cast): the output in its type, or
   * the output and the cast's value beside it (sched_norm_second: the output has other readers) */
  TV *out = alloc_value(e, sched_stored(e->s, n));
  e->tv[n->outs[0]->id] = *out;
  Value *second = sched_norm_second(e->s, n);
  TV *out2 = second ? alloc_value(e, second) : NULL;
  TV *mo = n->nouts == 3 ? alloc_value(e, n->outs[1]) : NULL, *ro = n->nouts == 3 ? alloc_value(e, n->outs[2]) : NULL;
  if (e->t->norm) {   /* the target's own kernel where the rows suit it */
    const Norm nm = {n, rms, x, w, b, out, mo, ro, out2, len, rows, eps};
    int r = e->t->norm(e, &nm);
    if (r != 1) return r;
  }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, rms ? "rms norm rows" : "layer norm rows");
  const char *T = ctype(out->dt);
  kopen_vec(e, id);
  fprintf(f, "%s *restrict y, %s *restrict mo, %s *restrict ro, const %s *x, const %s *w, const %s *b, %s *restrict y2", T, mo ? ctype(mo->dt) : "void",
          ro ? ctype(ro->dt) : "void", ctype(x->dt), w ? ctype(w->dt) : "void", b ? ctype(b->dt) : "void", out2 ? ctype(out2->dt) : "void");
  ksyms(e);
  fprintf(f, "  (void)mo; (void)ro; (void)w; (void)b; (void)y2;\n  const int64_t L = %s;\n", cx(e, len));
  int cl = open_rows(e, 1, &rows, len);
  fputs("    const int64_t r = i0;\n", f);
  const char *rt = real_type(e, x->dt);   /* float32 and half types in float on the GPU, as PyTorch's */
  fprintf(f, "    %s m = 0, v = 0;\n", rt);
  if (!rms) {
    fprintf(f, "    %s m += ", row_sum_for(e, "m"));
    load_r(f, x->dt, "x", "r * L + j", rt);
    fputs(";\n", f);
    row_combine(e, "m", false);
    fprintf(f, "    m /= (%s)L;\n", rt);
  }
  fprintf(f, "    %s { %s d = ", row_sum_for(e, "v"), rt);
  load_r(f, x->dt, "x", "r * L + j", rt);
  fputs(" - m; v += d * d; }\n", f);
  row_combine(e, "v", false);
  if (strcmp(rt, "float")) fprintf(f, "    const double rs = 1.0 / sqrt(v / (double)L + %.17g);\n", eps);
  else fprintf(f, "    const float rs = 1.0f / sqrt(v / (float)L + (float)%.17g);\n", eps);
  fprintf(f, "    %s {\n      %s o = (", row_for(e), rt);
  load_r(f, x->dt, "x", "r * L + j", rt);
  fputs(" - m) * rs", f);
  if (w) { fputs(" * ", f); load_r(f, w->dt, "w", "j", rt); }
  if (b) { fputs(" + ", f); load_r(f, b->dt, "b", "j", rt); }
  fputs(";\n      ", f);
  store(f, out->dt, true, "y", "r * L + j", "o");
  if (out2) { fputs("      ", f); store(f, out2->dt, true, "y2", "r * L + j", "o"); }
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
  fprintf(e->r, "%s, %s, %s, %s, %s, %s, %s", sname(e, out->stor), mo ? sname(e, mo->stor) : "NULL", ro ? sname(e, ro->stor) : "NULL", sname(e, x->stor),
          w ? sname(e, w->stor) : "NULL", b ? sname(e, b->stor) : "NULL", out2 ? sname(e, out2->stor) : "NULL");
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- convolution and pooling */

bool const_is(const Expr *x, int64_t v) {
  int64_t c;
  return expr_is_const(x, &c) && c == v;
}

static const Expr *list_at(const Arg *a, int i) { return a->u.is[a->n == 1 ? 0 : i]; }

int emit_conv(Em *e, Node *n) {
  Value *xv = n->args[0].u.t, *wv = n->args[1].u.t, *y = n->outs[0];
  const Arg *ba = &n->args[2];
  Value *bv = ba->k == AK_TENSOR ? ba->u.t : NULL;
  bool half = y->dtype == DT_F16 || y->dtype == DT_BF16;
  bool nhwc = !strcmp(n->op->name, "_conv_nhwc");   /* channels-last: input [N, H, W, C], weight [K, R, S, C/g] */
  if (nhwc && !e->t->half_convs && y->dtype != DT_F32 && y->dtype != DT_BF16)
    return efail(e, n, "%s", "channels-last convolutions run in float32 or bfloat16 on the CPU (internal error: the stage makes no others)");
  if (y->dtype != DT_F32 && y->dtype != DT_F64 && !(half && e->t->half_convs) && !(nhwc && y->dtype == DT_BF16))
    return efail(e, n, "convolution in %s is not supported in compiled code%s", dtype_name(y->dtype), half ? " for the CPU (--target cuda runs it)" : "");
  TV *x = contiguous_of(e, n, xv), *w = contiguous_of(e, n, wv), *b = bv ? contiguous_of(e, n, bv) : NULL;
  if (!x || !w || (bv && !b)) return -1;
  TV *out = alloc_value(e, y);
  int nsp = w->rank - 2, sp0 = nhwc ? 1 : 2;   /* where the spatial dims start in x and w */
  bool batched = x->rank == nsp + 2;
  bool tr = (ops_arg_index(n->op, "transposed") >= 0 && n->args[ops_arg_index(n->op, "transposed")].u.b) || !strncmp(n->op->name, "conv_transpose", 14);
  const Arg *sa = &n->args[ops_arg_index(n->op, "stride")], *pa = &n->args[ops_arg_index(n->op, "padding")], *da = &n->args[ops_arg_index(n->op, "dilation")];
  const Expr *one = C(e, 1), *zero = C(e, 0);
  const Expr *in[3] = {one, one, one}, *k[3] = {one, one, one}, *os[3] = {one, one, one}, *st[3] = {one, one, one}, *pd[3] = {zero, zero, zero}, *dl[3] = {one, one, one};
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    in[j] = x->sizes[nhwc ? sp0 + i : x->rank - nsp + i];
    k[j] = w->sizes[sp0 + i];
    os[j] = out->sizes[nhwc ? sp0 + i : out->rank - nsp + i];
    st[j] = list_at(sa, i);
    pd[j] = list_at(pa, i);
    dl[j] = list_at(da, i);
  }
  const Expr *groups = n->args[ops_arg_index(n->op, "groups")].u.i;
  const Expr *cin = x->sizes[nhwc ? 3 : batched ? 1 : 0], *cout = out->sizes[nhwc ? 3 : batched ? 1 : 0];
  const Expr *ksp = MUL(e, MUL(e, k[0], k[1]), k[2]);
  const Expr *cg = expr_bin(e->a, E_FLOORDIV, tr ? cout : cin, groups);
  const Expr *sp = tr ? MUL(e, MUL(e, in[0], in[1]), in[2]) : MUL(e, MUL(e, os[0], os[1]), os[2]);
  const Conv cv = {n, x, w, b, out, batched, tr, {in[0], in[1], in[2]}, {k[0], k[1], k[2]}, {os[0], os[1], os[2]}, {st[0], st[1], st[2]},
                   {pd[0], pd[1], pd[2]}, {dl[0], dl[1], dl[2]}, groups, cin, cout, ksp, cg, sp, nhwc};
  return e->t->conv(e, &cv);
}

/* The kernel of a convolution: the gg_conv the runtime reads, the call(s) in body, the scratch col. */
int conv_kernel(Em *e, const Conv *cv, const char *what, const Expr *scratch, const char *pk, const Epi *ep, const char *body) {
  Node *n = cv->n;
  Value *y = n->outs[0];
  int col = new_stor(e, S_SCRATCH, 0, y->dtype, scratch);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, what);
  const char *T = ctype(y->dtype);
  kopen(e, id, false, true);
  fprintf(f, "%s *y, const %s *x, const %s *w, const %s *b, %s *col", T, T, T, T, T);
  if (pk) fputs(", const float *pk", f);
  epi_params(e, ep);
  ksyms(e);
  epi_decl(e, ep);
  const Expr *const *in = cv->in, *const *k = cv->k, *const *os = cv->os, *const *st = cv->st, *const *pd = cv->pd, *const *dl = cv->dl;
  fprintf(f, "  const gg_conv c = {%s, %s, %s, %s, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, %s, %s};\n",
          cv->batched ? cx(e, cv->x->sizes[0]) : "1", cx(e, cv->cin), cx(e, cv->cout), cx(e, cv->groups), cx(e, in[0]), cx(e, in[1]), cx(e, in[2]), cx(e, k[0]),
          cx(e, k[1]), cx(e, k[2]), cx(e, os[0]), cx(e, os[1]), cx(e, os[2]), cx(e, st[0]), cx(e, st[1]), cx(e, st[2]), cx(e, pd[0]), cx(e, pd[1]),
          cx(e, pd[2]), cx(e, dl[0]), cx(e, dl[1]), cx(e, dl[2]), cv->tr ? "true" : "false", cv->nhwc ? "true" : "false");
  fputs(body, f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s", sname(e, cv->out->stor), sname(e, cv->x->stor), sname(e, cv->w->stor), cv->b ? sname(e, cv->b->stor) : "NULL", sname(e, col));
  if (pk) fprintf(e->r, ", %s", pk);
  epi_args(e, ep);
  kcall_end(e);
  return 0;
}

/* convolution_backward: the weight's and bias's gradients through the runtime (the input's gradient
 * is a transposed convolution, which autograd writes as one) */
int emit_conv_backward(Em *e, Node *n) {
  const Arg *mask = &n->args[ops_arg_index(n->op, "output_mask")];
  if (mask->u.bs[0]) return efail(e, n, "compiled code takes input gradients from transposed convolutions, not convolution_backward");
  Value *gv = n->args[0].u.t, *xv = n->args[1].u.t, *wv = n->args[2].u.t;
  bool half = gv->dtype == DT_F16 || gv->dtype == DT_BF16;
  if (gv->dtype != DT_F32 && gv->dtype != DT_F64 && !(half && e->t->half_convs))
    return efail(e, n, "convolution gradients in %s are not supported in compiled code%s", dtype_name(gv->dtype), half ? " for the CPU (--target cuda runs them)" : "");
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
  kernel_begin(e, n, "convolution weight gradient");
  const char *T = ctype(gy->dt);
  kopen(e, id, false, true);
  fprintf(f, "%s *dw, %s *db, const %s *x, const %s *dy, %s *col, %s *tmp", T, T, T, T, T, T);
  ksyms(e);
  fprintf(f, "  const gg_conv c = {%s, %s, %s, %s, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, false, false};\n",
          cx(e, x->sizes[0]), cx(e, x->sizes[1]), cx(e, w->sizes[0]), cx(e, groups), cx(e, in[0]), cx(e, in[1]), cx(e, in[2]), cx(e, k[0]),
          cx(e, k[1]), cx(e, k[2]), cx(e, os[0]), cx(e, os[1]), cx(e, os[2]), cx(e, st[0]), cx(e, st[1]), cx(e, st[2]), cx(e, pd[0]), cx(e, pd[1]),
          cx(e, pd[2]), cx(e, dl[0]), cx(e, dl[1]), cx(e, dl[2]));
  e->t->conv_wgrad(e, gy->dt);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s, %s", dw ? sname(e, dw->stor) : "NULL", db ? sname(e, db->stor) : "NULL", sname(e, x->stor), sname(e, gy->stor),
          sname(e, col), sname(e, tmp));
  kcall_end(e);
  return 0;
}

static int pool_call(Em *e, Node *n, int kind, int nsp, const Expr *k[2], const Expr *st[2], const Expr *pd[2], const Expr *dl[2], bool cip, int64_t divisor) {
  Value *xv = n->args[0].u.t, *y = n->outs[0];
  if (y->dtype != DT_F32 && y->dtype != DT_F64 && y->dtype != DT_F16 && y->dtype != DT_BF16)
    return efail(e, n, "pooling in %s is not supported in compiled code", dtype_name(y->dtype));
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
  e->t->pool(e, y->dtype);
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

/* 16 bytes of channels a GPU thread of channels-last max pooling takes (8 16-bit or 4 float32 values),
 * where both tensors' storage is aligned (scratch, or an output the runtime aligns) and the channels
 * fill whole vectors; else 1 */
static int64_t pool_nhwc_width(Em *e, const TV *x, const TV *out) {
  int64_t V = 16 / dtype_info(x->dt)->size, c;
  bool aligned = (e->st[x->stor].kind == S_SCRATCH || e->st[x->stor].aligned) && (e->st[out->stor].kind == S_SCRATCH || e->st[out->stor].aligned);
  return aligned && expr_is_const(x->sizes[3], &c) && c % V == 0 ? V : 1;
}

/* _max_pool_nhwc (the channels-last stage; float32 and 16-bit types), the maximum over the window's
 * pixels inside the image (NaN wins, as in PyTorch's max pooling). On the CPU one task per output
 * row, each output pixel's channels 64 at a time in vectors; on the GPU a thread per output pixel and
 * 16 bytes of its channels (pool_nhwc_width), one 16-byte load per window pixel, channels fastest
 * across the threads so that a warp's loads are coalesced. */
int emit_pool_nhwc(Em *e, Node *n) {
  Value *y = n->outs[0];
  if (y->dtype != DT_F32 && y->dtype != DT_BF16 && y->dtype != DT_F16)
    return efail(e, n, "%s", "channels-last max pooling runs in float32, bfloat16 or float16 (internal error: the stage makes no others)");
  /* 16-bit values compared as float32 (exact), the largest stored back unchanged */
  const char *T = ctype(y->dtype), *ldf = y->dtype == DT_BF16 ? "gg_bf2f" : y->dtype == DT_F16 ? "gg_h2f" : "",
             *stf = y->dtype == DT_BF16 ? "gg_f2bf" : y->dtype == DT_F16 ? "gg_f2h" : "";
  TV *x = contiguous_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, y);
  const Arg *ka = &n->args[ops_arg_index(n->op, "kernel_size")], *sa = &n->args[ops_arg_index(n->op, "stride")];
  const Arg *pa = &n->args[ops_arg_index(n->op, "padding")], *da = &n->args[ops_arg_index(n->op, "dilation")];
  const Expr *k[2], *st[2], *pd[2], *dl[2];
  for (int i = 0; i < 2; i++) {
    k[i] = list_at(ka, i);
    st[i] = sa->n ? list_at(sa, i) : k[i];
    pd[i] = list_at(pa, i);
    dl[i] = list_at(da, i);
  }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "max pooling, channels-last");
  if (e->cuda) kopen(e, id, false, false);
  else kopen_vec(e, id);
  fprintf(f, "%s *restrict y, const %s *restrict x", T, T);
  ksyms(e);
  fprintf(f, "  const int64_t N = %s, H = %s, W = %s, C = %s, OH = %s, OW = %s;\n", cx(e, x->sizes[0]), cx(e, x->sizes[1]), cx(e, x->sizes[2]),
          cx(e, x->sizes[3]), cx(e, out->sizes[1]), cx(e, out->sizes[2]));
  fprintf(f, "  const int64_t KH = %s, KW = %s, SH = %s, SW = %s, PH = %s, PW = %s, DH = %s, DW = %s;\n", cx(e, k[0]), cx(e, k[1]), cx(e, st[0]),
          cx(e, st[1]), cx(e, pd[0]), cx(e, pd[1]), cx(e, dl[0]), cx(e, dl[1]));
  if (e->cuda) {
    int64_t V = pool_nhwc_width(e, x, out), cc = 0;
    if (V > 1) expr_is_const(x->sizes[3], &cc);
    const Expr *sz[4] = {out->sizes[0], out->sizes[1], out->sizes[2], V > 1 ? C(e, cc / V) : out->sizes[3]};
    fputs("  (void)N;\n", f);
    int cl = open_loops(e, 4, sz, true);
    fprintf(f, "    const int64_t c0 = i3 * %" PRId64 ";\n"
               "    float m[%" PRId64 "];\n    int nan[%" PRId64 "];\n"
               "    _Pragma(\"unroll\") for (int j = 0; j < %" PRId64 "; j++) m[j] = -INFINITY, nan[j] = 0;\n"
               "    for (int64_t a = 0; a < KH; a++) {\n"
               "      const int64_t ih = i1 * SH - PH + a * DH;\n"
               "      if (ih < 0 || ih >= H) continue;\n"
               "      for (int64_t b = 0; b < KW; b++) {\n"
               "        const int64_t iw = i2 * SW - PW + b * DW;\n"
               "        if (iw < 0 || iw >= W) continue;\n"
               "        __align__(16) %s v[%" PRId64 "];\n", V, V, V, V, T, V);
    if (V > 1) fprintf(f, "        *(uint4 *)v = *(const uint4 *)(x + ((i0 * H + ih) * W + iw) * C + c0);\n");
    else fprintf(f, "        v[0] = x[((i0 * H + ih) * W + iw) * C + c0];\n");
    fprintf(f, "        _Pragma(\"unroll\") for (int j = 0; j < %" PRId64 "; j++) { const float t = %s(v[j]); nan[j] |= t != t; m[j] = t > m[j] ? t : m[j]; }\n"
               "      }\n    }\n"
               "    __align__(16) %s o[%" PRId64 "];\n"
               "    _Pragma(\"unroll\") for (int j = 0; j < %" PRId64 "; j++) o[j] = %s(nan[j] ? NAN : m[j]);\n", V, ldf, T, V, V, stf);
    if (V > 1) fprintf(f, "    *(uint4 *)(y + ((i0 * OH + i1) * OW + i2) * C + c0) = *(const uint4 *)o;\n");
    else fprintf(f, "    y[((i0 * OH + i1) * OW + i2) * C + c0] = o[0];\n");
    close_loops(e, cl);
  } else
    fprintf(f, "  #pragma omp parallel for collapse(2) schedule(static) if(N * OH * OW * C > 32768)\n"
          "  for (int64_t nb = 0; nb < N; nb++)\n"
          "    for (int64_t oh = 0; oh < OH; oh++)\n"
          "      for (int64_t ow = 0; ow < OW; ow++)\n"
          "        for (int64_t c0 = 0; c0 < C; c0 += 64) {\n"
          "          const int64_t cn = C - c0 < 64 ? C - c0 : 64;\n"
          "          float m[64];\n"
          "          int nan[64];\n"
          "          for (int64_t j = 0; j < cn; j++) m[j] = -INFINITY, nan[j] = 0;\n"
          "          for (int64_t a = 0; a < KH; a++) {\n"
          "            const int64_t ih = oh * SH - PH + a * DH;\n"
          "            if (ih < 0 || ih >= H) continue;\n"
          "            for (int64_t b = 0; b < KW; b++) {\n"
          "              const int64_t iw = ow * SW - PW + b * DW;\n"
          "              if (iw < 0 || iw >= W) continue;\n"
          "              const %s *xp = x + ((nb * H + ih) * W + iw) * C + c0;\n"
          "              for (int64_t j = 0; j < cn; j++) { const float v = %s(xp[j]); nan[j] |= v != v; m[j] = v > m[j] ? v : m[j]; }\n"
          "            }\n"
          "          }\n"
          "          %s *yp = y + ((nb * OH + oh) * OW + ow) * C + c0;\n"
          "          for (int64_t j = 0; j < cn; j++) yp[j] = %s(nan[j] ? NAN : m[j]);\n"
          "        }\n", T, ldf, T, stf);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s", sname(e, out->stor), sname(e, x->stor));
  kcall_end(e);
  return 0;
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
  if (e->s->role[n->id] == SN_FUSED) {   /* computed where it is read (emit.c's fused_cat) */
    e->tv[y->id] = (TV){.ok = true, .deferred = n, .dt = y->dtype, .rank = y->rank};
    return 0;
  }
  TV *out = alloc_value(e, y);
  bool stack = !strcmp(n->op->name, "stack");
  int d = dim_wrap(node_int_arg(n, "dim", 0), y->rank);
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

/* open_loops for a kernel whose body may `continue` (an index out of range): a 0-d shape (a 0-d table
 * or target, found by fuzz_model) loops once, over i0 = 0 */
static int open_loops_once(Em *e, int rank, const Expr *const *sizes, bool parallel) {
  const Expr *one = C(e, 1);
  return rank ? open_loops(e, rank, sizes, parallel) : open_loops(e, 1, &one, parallel);
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
  int cl = open_loops_once(e, out->rank, out->sizes, e->cuda);   /* on the CPU one thread: the flag is shared */
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
  /* the bound along dim: a 0-d table (index_select or gather of a 0-d self) holds one value */
  const char *bound = tab->rank ? cx(e, tab->sizes[dim >= 0 ? dim : 0]) : "INT64_C(1)";
  fprintf(f, "    if (q < 0) q += %s;\n    if (q < 0 || q >= %s) { bad = 1; continue; }\n", bound, bound);
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
  return gather_kernel(e, n, x, ix, dim_wrap(node_int_arg(n, "dim", 0), x->rank), false);
}

int emit_gather(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *ix = tv_of(e, n, n->args[ops_arg_index(n->op, "index")].u.t);
  if (!x || !ix) return -1;
  return gather_kernel(e, n, x, ix, dim_wrap(node_int_arg(n, "dim", 0), x->rank), true);
}

/* tril/triu: keep elements on one side of a diagonal of the last two dims. */
int emit_tri(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t);
  if (!x) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  int64_t diag = node_int_arg(n, "diagonal", 0);
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
  int64_t iv = gg_f64_to_i64(v);
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

/* rand, randn, rand_like, randn_like: scalar.h's counter-based generator over the element index, with
 * the process's seed and the run's draw (gg_rt_rng_*) as arguments, so every thread computes its own */
int emit_rand(Em *e, Node *n) {
  TV *out = alloc_value(e, n->outs[0]);
  bool normal = strstr(n->op->name, "randn") != NULL;
  const DTypeInfo *di = dtype_info(out->dt);
  const Expr *nel = C(e, 1);
  for (int d = 0; d < out->rank; d++) nel = MUL(e, nel, out->sizes[d]);
  FILE *f = e->k;
  int id = e->nk++;
  e->random = true;
  kernel_begin(e, n, normal ? "normal random numbers" : "uniform random numbers");
  kopen(e, id, false, false);
  fprintf(f, "%s *restrict y, uint64_t seed, uint64_t draw", ctype(out->dt));
  ksyms(e);
  int cl = open_loops(e, 1, &nel, true);
  fputs("    ", f);
  store(f, out->dt, true, "y", "i0", normal ? "gg_rand_n01(seed, draw, (uint64_t)i0)"
                                             : arena_printf(e->a, "gg_rand_u01(seed, draw, (uint64_t)i0, %d)", gg_rand_bits(8 * di->size, out->dt == DT_BF16)));
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, gg_rt_rng_seed(), gg_rt_rng_draw()", sname(e, out->stor));
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
  Operand fill = {.f = scalar_arg(n, "value", 0), .i = gg_f64_to_i64(scalar_arg(n, "value", 0))};
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
  int d = dim_wrap(node_int_arg(n, "dim", 0), out->rank);
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
    dst.strides[d] = MUL(e, out->strides[d], C(e, node_int_arg(n, "step", 1)));
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

/* Sums into repeated indices (scatter_add, index_put with accumulate: embedding and max-pool gradients)
 * as parallel atomic adds where the target has them for the dtype (float32, float64 on the GPU): the
 * sum's order, so its last bits, then vary from run to run, as PyTorch's CUDA kernels' do. */
static bool atomic_dtype(const Em *e, DType dt) { return e->t->atomic_add && (dt == DT_F32 || dt == DT_F64); }

/* scatter / scatter_add: copy self, then write src (or value) at the indexed positions along dim */
int emit_scatter(Em *e, Node *n) {
  TV *x = tv_of(e, n, n->args[0].u.t), *ix = tv_of(e, n, n->args[ops_arg_index(n->op, "index")].u.t);
  int si = ops_arg_index(n->op, "src");
  TV *src = si >= 0 ? tv_of(e, n, n->args[si].u.t) : NULL;
  if (!x || !ix || (si >= 0 && !src)) return -1;
  TV *out = alloc_value(e, n->outs[0]);
  copy_kernel(e, n, out, x);
  int d = dim_wrap(node_int_arg(n, "dim", 0), x->rank);
  /* scatter_reduce.two reaches here with include_self (decompose.c): sum, prod, amax or amin */
  int ri = ops_arg_index(n->op, "reduce");
  const char *red = ri >= 0 ? n->args[ri].u.s : NULL;
  if (red && (!strcmp(red, "mean") || !n->args[ops_arg_index(n->op, "include_self")].u.b)) return efail(e, n, "scatter_reduce reached the code generator undecomposed (internal error)");
  bool add = !strcmp(n->op->name, "scatter_add") || (red && !strcmp(red, "sum")), fl = dtype_is_float(out->dt), atomic = add && atomic_dtype(e, out->dt);
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, atomic ? "scatter (atomic adds)" : "scatter");
  kopen(e, id, true, false);
  fprintf(f, "%s *y, const %s *ix, const %s *src", ctype(out->dt), ctype(ix->dt), src ? ctype(src->dt) : "void");
  ksyms(e);
  fputs("  (void)src;\n  int bad = 0;\n", f);
  /* one thread, in order: repeated indices write as PyTorch's CPU does; sums in parallel on the GPU */
  int cl = open_loops_once(e, ix->rank, ix->sizes, atomic);
  const char *bound = out->rank ? cx(e, out->sizes[d]) : "INT64_C(1)";   /* a 0-d target holds one value */
  fprintf(f, "    int64_t q = (int64_t)ix[%s];\n    if (q < 0) q += %s;\n    if (q < 0 || q >= %s) { bad = 1; continue; }\n", index_of(e, ix, ix->rank),
          bound, bound);
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
  } else {
    const Arg *va = &n->args[ops_arg_index(n->op, "value")];
    int64_t iv;
    char *buf = NULL;
    size_t len = 0;
    FILE *bf = open_memstream(&buf, &len);
    if (va->k == AK_INT && expr_is_const(va->u.i, &iv)) fprintf(bf, iv == INT64_MIN ? "INT64_MIN" : "INT64_C(%lld)", (long long)iv);   /* exact, the identities of integer amax/amin included */
    else if (fl) fmt_double(bf, scalar_arg(n, "value", 0));
    else fprintf(bf, "(int64_t)%.17g", scalar_arg(n, "value", 0));
    fclose(bf);
    v = arena_strdup(e->a, buf);
    free(buf);
  }
  char *cur = NULL;
  size_t cl2 = 0;
  FILE *cf = open_memstream(&cur, &cl2);
  if (fl) load_f(cf, out->dt, "y", yi); else load_i(cf, out->dt, "y", yi);
  fclose(cf);
  fputs("    ", f);
  if (atomic) fprintf(f, "atomicAdd(&y[%s], (%s)(%s));\n", yi, ctype(out->dt), v);
  else if (red && !add) {   /* in order, one thread: NaN wins amax and amin, as PyTorch's */
    const char *c2 = arena_printf(e->a, "(%s)", cur), *v2 = arena_printf(e->a, "(%s)", v);
    const char *comb = !strcmp(red, "prod") ? arena_printf(e->a, "%s * %s", c2, v2)
                       : fl ? arena_printf(e->a, "(%s != %s || %s %s %s) ? %s : %s", c2, c2, c2, !strcmp(red, "amax") ? ">=" : "<=", v2, c2, v2)
                            : arena_printf(e->a, "%s %s %s ? %s : %s", c2, !strcmp(red, "amax") ? ">=" : "<=", v2, c2, v2);
    store(f, out->dt, fl, "y", yi, comb);
  } else store(f, out->dt, fl, "y", yi, add ? arena_printf(e->a, "%s + %s", cur, v) : v);
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
  bool acc = n->args[ops_arg_index(n->op, "accumulate")].u.b, fl = dtype_is_float(x->dt), atomic = acc && atomic_dtype(e, x->dt);
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
  kernel_begin(e, n, atomic ? "index_put (atomic adds)" : "index_put");
  kopen(e, id, true, false);
  fprintf(f, "%s *y, const %s *v", ctype(out->dt), ctype(vals->dt));
  for (int i = 0; i < ia->n; i++) if (ia->u.ts[i]) fprintf(f, ", const %s *ix%d", ctype(e->tv[ia->u.ts[i]->id].dt), i);
  ksyms(e);
  fputs("  int bad = 0;\n", f);
  int cl = open_loops_once(e, rr, rs, atomic);   /* one thread, in order (repeated indices), or sums as parallel atomic adds */
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
  if (atomic) fprintf(f, "atomicAdd(&y[%s], (%s)(%s));\n", yi, ctype(out->dt), vv);
  else store(f, out->dt, fl, "y", yi, acc ? arena_printf(e->a, "%s + %s", cur, vv) : vv);
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
    int d = dim_wrap(dv, x->rank);
    if (!x->rank) break;   /* a 0-d value flips to itself */
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
  int cl = open_loops_once(e, out->rank, out->sizes, e->cuda);
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

/* ---------------------------------------------------------------- attention kept whole */

/* The shapes a fused attention kernel (the GPU's gg_cu_attention, the CPU's gg_rt_attention)
 * takes: q, k and v of one dtype, rank 3 or 4, a static head size *D shared by the values, no
 * dropout, the key/value heads dividing the query heads (grouped-query attention), equal batch sizes,
 * and a mask that is bool or of the operands' dtype and broadcasts to [batch, heads, L, S]. */
bool attention_shape_fits(const Graph *g, const Node *n, int64_t *D_) {
  Value *q = rw_targ(n, "query"), *k = rw_targ(n, "key"), *v = rw_targ(n, "value"), *m = rw_targ(n, "attn_mask");
  const Arg *dp = rw_arg(n, "dropout_p"), *sc = rw_arg(n, "scale"), *gq = rw_arg(n, "enable_gqa"), *ca = rw_arg(n, "is_causal");
  bool train = n->op && strcmp(n->op->name, "scaled_dot_product_attention");
  if (!q || !k || !v || n->nouts != (train ? (int)n->op->nrets : 1)) return false;
  if (q->dtype != k->dtype || q->dtype != v->dtype) return false;
  int r = q->rank;
  if ((r != 3 && r != 4) || k->rank != r || v->rank != r) return false;
  int64_t D, Dk, Dv, hq, hk, hv, zero;
  if (!expr_is_const(q->sizes[r - 1], &D) || !expr_is_const(k->sizes[r - 1], &Dk) || !expr_is_const(v->sizes[r - 1], &Dv) || D != Dk || D != Dv) return false;
  if (dp && !(dp->k == AK_FLOAT ? dp->u.f == 0 : dp->k == AK_INT ? expr_is_const(dp->u.i, &zero) && zero == 0 : dp->k == AK_NONE)) return false;
  if (sc && sc->k != AK_FLOAT && sc->k != AK_NONE) return false;
  if ((gq && gq->k != AK_BOOL && gq->k != AK_NONE) || (ca && ca->k != AK_BOOL && ca->k != AK_NONE)) return false;
  if (!expr_is_const(q->sizes[r - 3], &hq) || !expr_is_const(k->sizes[r - 3], &hk) || !expr_is_const(v->sizes[r - 3], &hv) || hk != hv || hk <= 0 ||
      hq % hk || (hq != hk && !(gq && gq->k == AK_BOOL && gq->u.b)))
    return false;
  if (r == 4 && (!expr_same(g, q->sizes[0], k->sizes[0]) || !expr_same(g, q->sizes[0], v->sizes[0]))) return false;
  if (!expr_same(g, k->sizes[r - 2], v->sizes[r - 2])) return false;
  if (m) {
    if ((m->dtype != DT_BOOL && m->dtype != q->dtype) || m->rank > r) return false;
    for (int d = 0; d < m->rank; d++) {   /* right-aligned against [batch..., heads, L, S] */
      int qd = d + r - m->rank;
      const Expr *want = qd == r - 1 ? k->sizes[r - 2] : q->sizes[qd];
      int64_t one;
      if (!(expr_is_const(m->sizes[d], &one) && one == 1) && !expr_same(g, m->sizes[d], want)) return false;
    }
  }
  *D_ = D;
  return true;
}

/* Whether the CPU's fused attention (gg_rt_attention) takes this scaled_dot_product_attention
 * (inference): float32, float16 or bfloat16, a head size of at most 256, and attention_shape_fits's shapes. */
bool cpu_attention_fits(const Graph *g, const Node *n) {
  Value *q = rw_targ(n, "query");
  int64_t D;
  return n->op && !strcmp(n->op->name, "scaled_dot_product_attention") && q && (q->dtype == DT_F32 || q->dtype == DT_F16 || q->dtype == DT_BF16) &&
         attention_shape_fits(g, n, &D) && D >= 1 && D <= 256;
}

/* Whether this target runs this attention whole */
bool attention_fits(const Graph *g, const Node *n) { return g->ctx->cuda ? cuda_attention_fits(g, n) : cpu_attention_fits(g, n); }

static const char *strides3(Em *e, const TV *t, int r, int j) { return r == 3 && j == 0 ? "0" : cx(e, t->strides[j - (4 - r)]); }

/* The host function's gg_attn: the sizes, the strides of q, k and v (t) and of the output (y: the
 * forward's; in the backward, the forward output's), the mask's (mb, or NULL), causal, the scale,
 * the log-sum-exp (a pointer expression, or "NULL") and grad_out's strides (gy, or NULL). */
void attn_struct(Em *e, Node *n, TV *const t[3], const TV *y, const TV *mb, const Expr *const bhls[4], int64_t D, double scale, const char *lse,
                 const TV *gy) {
  Value *qv = rw_targ(n, "query"), *kv = rw_targ(n, "key"), *mv = rw_targ(n, "attn_mask");
  const Arg *ca = rw_arg(n, "is_causal");
  int r = qv->rank;
  const TV *ops[5] = {t[0], t[1], t[2], y, gy};
  const char *st[5][3];
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++) st[i][j] = ops[i] ? strides3(e, ops[i], r, j) : "0";
  FILE *f = e->k;
  fprintf(f, "  const gg_attn a = {%s, %s, %s, %s, %s, INT64_C(%lld), {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, {%s, %s, %s}, ", cx(e, bhls[0]), cx(e, bhls[1]),
          cx(e, kv->sizes[r - 3]), cx(e, bhls[2]), cx(e, bhls[3]), (long long)D, st[0][0], st[0][1], st[0][2], st[1][0], st[1][1], st[1][2], st[2][0],
          st[2][1], st[2][2], st[3][0], st[3][1], st[3][2]);
  if (mv) fprintf(f, "{%s, %s, %s, %s}, %d, ", cx(e, mb->strides[0]), cx(e, mb->strides[1]), cx(e, mb->strides[2]), cx(e, mb->strides[3]), mv->dtype == DT_BOOL ? 1 : 2);
  else fputs("{0, 0, 0, 0}, 0, ", f);
  fprintf(f, "%d, %.17g, %s, {%s, %s, %s}};\n", ca && ca->k == AK_BOOL && ca->u.b, scale, lse, st[4][0], st[4][1], st[4][2]);
}

/* A fused attention's operands: q, k and v (a strided last dim copied contiguous first), the sizes
 * [B, H, L, S], the mask read through its broadcast strides, the head size and the scale. */
int attn_in(Em *e, Node *n, AttnIn *in) {
  Value *qv = rw_targ(n, "query"), *kv = rw_targ(n, "key"), *vv = rw_targ(n, "value"), *mv = rw_targ(n, "attn_mask");
  Value *ins[3] = {qv, kv, vv};
  for (int i = 0; i < 3; i++) {
    int64_t unit;
    in->t[i] = tv_of(e, n, ins[i]);
    if (in->t[i] && !(expr_is_const(in->t[i]->strides[in->t[i]->rank - 1], &unit) && unit == 1)) in->t[i] = contiguous_of(e, n, ins[i]);
    if (!in->t[i]) return -1;
  }
  int r = qv->rank;
  in->bhls[0] = r == 4 ? qv->sizes[0] : C(e, 1), in->bhls[1] = qv->sizes[r - 3], in->bhls[2] = qv->sizes[r - 2], in->bhls[3] = kv->sizes[r - 2];
  in->mb = (TV){0};
  in->masked = mv != NULL;
  if (mv) {
    TV *m = tv_of(e, n, mv);
    if (!m) return -1;
    in->mb = broadcast_tv(e, m, 4, in->bhls);
  }
  const Arg *sc = rw_arg(n, "scale");
  expr_is_const(qv->sizes[r - 1], &in->D);
  in->scale = sc && sc->k == AK_FLOAT ? sc->u.f : 1.0 / sqrt((double)in->D);
  return 0;
}

/* A fused attention's forward: a host function filling gg_attn and calling the runtime (call: the
 * call up to its operands, "gg_cu_attention(3, &a, "); its output laid out in its reader's order
 * where only a transpose or permute reads it (sched_attention_order); with two outputs (--train's),
 * the log-sum-exp too. */
int attn_forward(Em *e, Node *n, const AttnIn *in, const char *what, const char *et, const char *call) {
  Value *mv = rw_targ(n, "attn_mask");
  TV *out = alloc_value(e, n->outs[0]), *lse = n->nouts == 2 ? alloc_value(e, n->outs[1]) : NULL;
  if (!out || (n->nouts == 2 && !lse)) return -1;
  int perm[4];
  if (sched_attention_order(e->s, n, perm)) sched_order_strides(e->a, n->outs[0], perm, out->strides);   /* the transpose or permute after it: a view */
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, what);
  kopen(e, id, false, true);
  fprintf(f, "%s *y, const %s *q, const %s *k, const %s *v, const %s *m%s", et, et, et, et, mv ? ctype(mv->dtype) : "void", lse ? ", float *lse" : "");
  ksyms(e);
  attn_struct(e, n, in->t, out, mv ? &in->mb : NULL, in->bhls, in->D, in->scale, lse ? "lse" : "NULL", NULL);
  fprintf(f, "  %sq + %s, k + %s, v + %s, %s, y);\n}\n", call, cx(e, in->t[0]->offset), cx(e, in->t[1]->offset), cx(e, in->t[2]->offset),
          mv ? arena_printf(e->a, "m + %s", cx(e, in->mb.offset)) : "NULL");
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s", sname(e, out->stor), sname(e, in->t[0]->stor), sname(e, in->t[1]->stor), sname(e, in->t[2]->stor), mv ? sname(e, in->mb.stor) : "NULL");
  if (lse) fprintf(e->r, ", %s", sname(e, lse->stor));
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- not yet generated */

#define NOT_YET(fn)                                                                                   \
  int fn(Em *e, Node *n) { return efail(e, n, "no C code generator for this op yet (it runs under --interpret)"); }
/* ops that decompose.c rewrites before code generation */
/* attention reaches the code generator whole where the target has a kernel for it (decompose.c) */
int emit_sdpa(Em *e, Node *n) { return e->t->attention ? e->t->attention(e, n) : efail(e, n, "reached the code generator undecomposed (internal error)"); }

#define DECOMPOSED(fn) \
  int fn(Em *e, Node *n) { return efail(e, n, "reached the code generator undecomposed (internal error)"); }
DECOMPOSED(emit_loss)
DECOMPOSED(emit_diff)
DECOMPOSED(emit_broadcast_tensors)
DECOMPOSED(emit_glu)
DECOMPOSED(emit_repeat)
DECOMPOSED(emit_roll)
DECOMPOSED(emit_fill_tensor)
DECOMPOSED(emit_masked_scatter)
DECOMPOSED(emit_embedding_backward)
DECOMPOSED(emit_max_pool_backward)
DECOMPOSED(emit_layer_norm_backward)
DECOMPOSED(emit_bn_train)
DECOMPOSED(emit_avg_pool_backward)
DECOMPOSED(emit_group_norm_backward)
DECOMPOSED(emit_col2im)
DECOMPOSED(emit_cdist)
DECOMPOSED(emit_grid_sampler)
DECOMPOSED(emit_embedding_bag)
DECOMPOSED(emit_randperm)
DECOMPOSED(emit_einsum)
DECOMPOSED(emit_im2col)
DECOMPOSED(emit_lstm)

