/* emit_c.c: the C/OpenMP target (emit.h lists the emitter files).
 * Requires and guarantees: as emit.c. Kernels are static C functions, their outer loops parallel with
 * OpenMP when the work is large enough and their inner loops unit-stride so the C compiler vectorizes
 * them; float32 products and convolutions whose one operand is a weight run on the runtime's own
 * kernel with the weight packed at gg_open, others on BLAS; the schedule's epilogues are applied to
 * each finished tile (gg_epi). */
#include "emit.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the C dialect */

static void c_head(Em *e, int id, bool checks) { fprintf(e->k, "static %s k%d(", checks ? "int" : "void", id); }
static void c_syms(Em *e) { fputs(", const int64_t *s) {\n  (void)s;\n", e->k); }
static void c_call(Em *e, int id) { fprintf(e->r, "  k%d(", id); }
static void c_call_end(Em *e) { fputs(", s);\n", e->r); }
static void c_return_bad(Em *e, int id) { (void)id; fputs("  return bad;\n}\n", e->k); }

static void c_call_checked(Em *e, int id) {
  fputs("  if (", e->r);
  c_call(e, id);
}

static void c_call_checked_end(Em *e, int id, Node *n) {
  (void)id;
  fputs(", s)) return ", e->r);
  emit_c_string(e->r, arena_printf(e->a, "node %s: index out of range", n->name));
  fputs(";\n", e->r);
}

/* nested loops, the outer ones one OpenMP loop (collapsed) when the work exceeds 32768 */
static int c_loops(Em *e, int rank, const Expr *const *sizes, bool parallel, const Expr *inner) {
  FILE *f = e->k;
  if (rank == 0) { fputs("  {\n", f); return 1; }
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

static int c_rows(Em *e, int rank, const Expr *const *sizes, const Expr *len) { return c_loops(e, rank, sizes, true, len); }

const Dialect gg_dialect_c = {c_head, c_syms, c_call, c_call_end, c_return_bad, c_call_checked, c_call_checked_end, c_loops, c_rows, NULL, NULL};

/* ---------------------------------------------------------------- packed weights and epilogues */

/* The matrix of weight t read as rows x cols with strides (srow, scol), packed at gg_open for the
 * runtime's own float32 kernel (gg_rt_gemm_packed, side 0: left operand, 1: right) or as the right
 * operand of a bfloat16 or float16 product or channels-last convolution (gg_rt_hgemm, gg_rt_conv_nhwc_bf16:
 * side 2 or 3, gg_rt_pack_weight): the name of the
 * packed copy in the run body, or NULL when it cannot be (not a weight as stored, a buffer the model
 * updates, training, --target cuda, sizes not known at compile time). */
static const char *weight_pack(Em *e, const TV *t, int side, const Expr *rows, const Expr *cols, const Expr *srow, const Expr *scol) {
  if (!e->pack_ok || t->dt != (side == 2 ? DT_BF16 : side == 3 ? DT_F16 : DT_F32) || e->st[t->stor].kind != S_WEIGHT || e->mutated[e->st[t->stor].index]) return NULL;
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
/* Write the function of n's epilogue, the chain the schedule gave it (out: n's output storage); ep->n
 * is 0 when it has none. -1 on error. */
int epilogue(Em *e, Node *n, const TV *out, Epi *ep) {
  char *body;
  const char *val;
  bool fl;
  int r = epilogue_body(e, n, out, ep, &body, &val, &fl);
  if (r <= 0) return r;
  Value *v = ep->chain[ep->n - 1]->outs[0];
  const Params *P = &ep->P;
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
  for (int j = 0; j < P->n; j++) fprintf(f, "  const %s *x%d = (const %s *)ep->x[%d];\n", ctype(P->tv[j].dt), j, ctype(P->tv[j].dt), j);
  fprintf(f, "  for (int64_t r = 0; r < rows; r++) {\n    %s *restrict yr = (%s *)yv + r * ld;\n", T, T);
  if (P->n) fprintf(f, "    const int64_t at = yr - (%s *)ep->y0;\n", T);   /* the operands' index */
  fputs(P->n ? "    for (int64_t j = 0; j < cols; j++) {\n      const int64_t i0 = at + j;\n" : "    for (int64_t j = 0; j < cols; j++) {\n", f);
  fputs(body, f);
  free(body);
  fputs("    ", f);
  store(f, v->dtype, fl, "yr", "j", val);
  fputs("    }\n  }\n}\n", f);
  return 0;
}

/* ---------------------------------------------------------------- products and convolutions */

/* A product on the CPU: the runtime's own float32 kernel with a packed weight, BLAS (one product, or
 * a batch of small ones a thread each), or loops for other dtypes; then the bias and alpha, and the
 * epilogue on each finished tile. */
static int product_c(Em *e, const Product *p) {
  Node *n = p->n;
  TV *out = p->out;
  TV Ab = p->a, Bb = p->b;
  const TV A = Ab, B = Bb;
  int nb = p->nb;
  const Expr *M = p->M, *K = p->K, *N = p->N;
  bool a_vec = p->a_vec, b_vec = p->b_vec, blas = p->blas;
  Value *bias = p->bias;
  double alpha = p->alpha, beta = p->beta;
  DType dt = out->dt;
  Epi ep;
  if (epilogue(e, n, out, &ep)) return -1;
  /* a weight on the right of one float32 product: packed at gg_open; the left operand is packed per
   * call (8 or 14 rows per panel: at most (M + 14) * K floats of scratch), the bias and the epilogue go to each tile */
  const TV *bt = bias ? &e->tv[bias->id] : NULL;
  int64_t unit;
  bool col_bias = bt && beta == 1 && bt->dt == dt && bt->rank == 1 && expr_same(e->g, bt->sizes[0], N) && expr_is_const(bt->strides[0], &unit) &&
                  unit == 1;
  const char *pk = dt == DT_F32 && nb == 0 && !a_vec && !b_vec && alpha == 1 && (!bt || col_bias)
                       ? weight_pack(e, &Bb, 1, K, N, Bb.strides[0], Bb.strides[1])
                       : NULL;
  int apk = pk ? new_stor(e, S_SCRATCH, 0, DT_F32, MUL(e, ADD(e, M, C(e, 14)), K)) : -1;
  /* float16 and bfloat16 on the runtime's gg_rt_hgemm (a bias of a float type with them; a weight on
   * the right packed at gg_open); integers in loops */
  bool hgemm = (dt == DT_F16 || dt == DT_BF16) && (!bt || bt->dt == DT_F32 || bt->dt == DT_F16 || bt->dt == DT_BF16);
  const char *hpk = hgemm && nb == 0 && !a_vec && !b_vec ? weight_pack(e, &Bb, dt == DT_BF16 ? 2 : 3, K, N, Bb.strides[0], Bb.strides[1]) : NULL;
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, pk ? "matrix product (packed weight)" : "matrix product");
  const char *T = ctype(dt);
  kopen(e, id, false, true);
  fprintf(f, "%s *restrict y, const %s *a, const %s *b, const %s *bias", T, T, T, bias ? ctype(e->tv[bias->id].dt) : T);
  if (pk) fputs(", float *ap, const float *pk", f);
  if (hpk) fputs(", const float *pk", f);
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
  /* a batch of small float32 or half-type products (attention heads): one product per thread, on the
   * runtime's own kernels; where BLAS runs them, one after another (concurrent calls into OpenBLAS
   * serialize, and even an inactive parallel region around them made OpenBLAS 10x slower) */
  bool par = nb > 0 && (dt == DT_F32 || hgemm);
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
  else if (hgemm) {   /* half types: float32 sums (AMX for bfloat16 where the CPU has it), scaled, with the bias, rounded once */
    const char *bx = "NULL", *sbm = "0", *sbj = "0";
    if (bt) {
      TV bb = broadcast_tv(e, bt, out->rank, out->sizes);
      bx = arena_printf(e->a, "bias + %s", cx(e, bb.offset));
      for (int d = 0; d < nb; d++) bx = arena_printf(e->a, "%s + i%d * %s", bx, d, cx(e, bb.strides[d]));
      sbm = cx(e, bb.strides[nb]);
      sbj = cx(e, bb.strides[nb + 1]);
    }
    fprintf(f, "    gg_rt_hgemm(%d, M, N, K, a + %s, %s, %s, b + %s, %s, %s, %s, yy, N, %.17g, %.17g, %s, %d, %s, %s);\n", dt == DT_BF16 ? 3 : 2, ai, sam,
            sak, bi, sbk, sbn, hpk ? "pk" : "NULL", alpha, beta, bx, bt ? (bt->dt == DT_F32 ? 0 : bt->dt == DT_F16 ? 2 : 3) : 0, sbm, sbj);
  } else {   /* the product, scaled and with its bias, rounded once (as cuBLAS does) */
    fprintf(f, "    for (int64_t m = 0; m < M; m++)\n      for (int64_t j = 0; j < N; j++) {\n        double acc = 0;\n");
    fprintf(f, "        for (int64_t q = 0; q < K; q++) acc += ");
    load_f(f, dt, "a", arena_printf(e->a, "%s + m * %s + q * %s", ai, sam, sak));
    fputs(" * ", f);
    load_f(f, dt, "b", arena_printf(e->a, "%s + q * %s + j * %s", bi, sbk, sbn));
    fputs(";\n        ", f);
    if (alpha != 1) fprintf(f, "acc *= %.17g;\n        ", alpha);
    if (bt) {
      TV bb = broadcast_tv(e, bt, out->rank, out->sizes);
      char *bx = arena_strdup(e->a, cx(e, bb.offset));
      for (int d = 0; d < nb; d++) bx = arena_printf(e->a, "%s + i%d * %s", bx, d, cx(e, bb.strides[d]));
      bx = arena_printf(e->a, "%s + m * %s + j * %s", bx, cx(e, bb.strides[nb]), cx(e, bb.strides[nb + 1]));
      fprintf(f, "acc += %.17g * ", beta);
      load_f(f, bt->dt, "bias", bx);
      fputs(";\n        ", f);
    }
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
  if (blas && (bias || alpha != 1)) {
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
  if (hpk) fprintf(e->r, ", %s", hpk);
  epi_args(e, &ep);
  kcall_end(e);
  (void)cl;
  return 0;
}


/* A convolution on the CPU. */
static int conv_c(Em *e, const Conv *cv) {
  Node *n = cv->n;
  Value *y = n->outs[0];
  TV *w = cv->w, *out = cv->out;
  bool tr = cv->tr;
  const Expr *const *in = cv->in, *const *k = cv->k, *const *os = cv->os, *const *st = cv->st, *const *pd = cv->pd;
  const Expr *groups = cv->groups, *cin = cv->cin, *cout = cv->cout, *ksp = cv->ksp, *cg = cv->cg, *sp = cv->sp;
  Epi ep;
  if (epilogue(e, n, out, &ep)) return -1;
  /* one group, float32: the weight packed at gg_open. 2-D: the product reads the padded image's rows
   * (of its phases, when strided) in place of im2col (gg_rt_conv_packed_f32's modes 1 and 2), with the
   * weight as A (Cout x Cin*kernel, the image over the padded width as B) or, where its tiles waste
   * less (no padded columns, Cout a multiple of the panel width), as B (Cin*kernel x Cout, the output
   * positions as A, the output transposed back). Its scratch holds the row and position offsets, the
   * phase images and the wide or transposed output; im2col's fits too (without AVX-512 the same code
   * goes to BLAS). */
  int64_t g1, sh = 1, sw = 1, dims[5];
  bool one_group = !tr && expr_is_const(groups, &g1) && g1 == 1 && e->pack_ok;
  if (cv->nhwc) {   /* channels-last (the layout stage's: float32, one group or depthwise; bfloat16, one group): one product over all positions */
    const Expr *kk = MUL(e, cin, ksp), *m = MUL(e, MUL(e, cv->batched ? cv->x->sizes[0] : C(e, 1), os[1]), os[2]);
    const Expr *hp = ADD(e, in[1], MUL(e, C(e, 2), pd[1])), *wp = ADD(e, in[2], MUL(e, C(e, 2), pd[2]));
    /* bfloat16 (one group): its weight packed for AMX where the machine has it, else float32 panels */
    bool bf = y->dtype == DT_BF16;
    const char *pk = one_group ? weight_pack(e, w, bf ? 2 : 1, kk, cout, C(e, 1), kk) : NULL;
    int64_t g2;
    bool dw = !(expr_is_const(groups, &g2) && g2 == 1);
    /* gg_rt_conv_nhwc_f32's col: the offset tables, the padded image (counted even without padding), an im2col block;
     * a depthwise convolution's: its transposed weight (kk = C x R x S) and bias; bfloat16's: the same floats, in 16-bit elements */
    const Expr *scratch = dw ? ADD(e, kk, cin) : ADD(e, ADD(e, MUL(e, C(e, 2), ADD(e, kk, C(e, 8))), MUL(e, C(e, 2), ADD(e, m, C(e, 16)))),
                                        ADD(e, MUL(e, MUL(e, cv->batched ? cv->x->sizes[0] : C(e, 1), MUL(e, hp, wp)), cin), MUL(e, C(e, 256), kk)));
    if (bf) scratch = MUL(e, C(e, 2), scratch);
    const char *body = arena_printf(e->a, "  gg_rt_conv_nhwc_%s(&c, x, w, %s, b, y, col, %s);\n}\n", bf ? "bf16" : "f32", pk ? "pk" : "NULL", epi_ref(&ep));
    return conv_kernel(e, cv, dw ? "depthwise convolution, channels-last" : pk ? "convolution, channels-last (one product over all positions, packed weight)" :
                       "convolution, channels-last (one product over all positions)", scratch, pk, &ep, body);
  }
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
    if (expr_is_const(cout, &dims[0]) && expr_is_const(os[1], &dims[1]) && expr_is_const(os[2], &dims[2]) && expr_is_const(wq, &dims[3]) &&
        expr_is_const(kk, &dims[4])) {
      int64_t nw = (dims[1] - 1) * dims[3] + dims[2], osp = dims[1] * dims[2];
      #define PAD8(v) (((v) + 7) / 8 * 8)
      #define PAD32(v) ((v) / 32 * 32 + ((v) % 32 == 0 ? 0 : (v) % 32 <= 16 ? 16 : 32))
      double m2 = (double)PAD8(osp) * (double)PAD32(dims[0]) * (double)dims[4] + 32.0 * (double)osp * (double)dims[0];
      double m1 = (double)PAD8(dims[0]) * (double)PAD32(nw) * (double)dims[4] + (dims[3] != dims[2] ? 4.0 * (double)osp * (double)dims[0] : 0);
      if (m2 < m1) mode = 2;
      #undef PAD8
      #undef PAD32
    }
  }
  const char *pk = one_group ? mode == 2 ? weight_pack(e, w, 1, kk, cout, C(e, 1), kk) : weight_pack(e, w, 0, cout, kk, kk, C(e, 1)) : NULL;
  if (!pk) mode = 0;
  const Expr *scratch = MUL(e, MUL(e, cg, ksp), pk ? ADD(e, sp, C(e, 32)) : sp);
  if (mode)
    scratch = expr_bin(e->a, E_MAX, scratch, ADD(e, ADD(e, MUL(e, C(e, 2), ADD(e, kk, C(e, 8))), MUL(e, C(e, 2), ADD(e, sp, C(e, 24)))),
                                                 ADD(e, MUL(e, MUL(e, C(e, sh * sw), cin), MUL(e, hq, wq)), MUL(e, MUL(e, cout, os[1]), wq))));
  const char *what = tr ? "transposed convolution (GEMM + col2im)" : mode == 1 ? "convolution (packed weight x image rows in place)" :
                     mode == 2 ? "convolution (image rows in place x packed weight, transposed)" :
                     pk ? "convolution (im2col + GEMM, packed weight)" : "convolution (im2col + GEMM)";
  const char *body = arena_printf(e->a, "%s  gg_rt_conv_%s(&c, x, w, b, y, col, %s);\n}\n",
                                  pk ? arena_printf(e->a, "  if (pk) gg_rt_conv_packed_f32(&c, x, pk, b, y, col, %s, %d);\n  else", epi_ref(&ep), mode) : "",
                                  y->dtype == DT_F32 ? "f32" : "f64", epi_ref(&ep));
  return conv_kernel(e, cv, what, scratch, pk, &ep, body);
}

static void pool_c(Em *e, DType dt) {
  fprintf(e->k, "  gg_rt_pool_%s(&p, x, y, idx);\n}\n", dt == DT_F32 ? "f32" : dt == DT_BF16 ? "bf16" : dt == DT_F16 ? "f16" : "f64");
}
static void conv_wgrad_c(Em *e, DType dt) { fprintf(e->k, "  gg_rt_conv_wgrad_%s(&c, x, dy, dw, db, col, tmp);\n}\n", dt == DT_F32 ? "f32" : "f64"); }

static void prelude_c(Graph *g, FILE *out) {
  (void)g;
  fputs("#include \"gg_rt.h\"\n#include \"scalar.h\"\n\n#include <math.h>\n\n", out);
}

static void finish_c(FILE *out, const char *errs) { (void)out; (void)errs; }

/* scaled_dot_product_attention kept whole (cpu_attention_fits): the runtime's fused kernel */
static int attention_c(Em *e, Node *n) {
  AttnIn in;
  if (!cpu_attention_fits(e->g, n)) return efail(e, n, "reached the code generator undecomposed (internal error)");
  DType dt = n->outs[0]->dtype;   /* the operands' (cpu_attention_fits) */
  return attn_in(e, n, &in) ? -1
                            : attn_forward(e, n, &in, dt == DT_F32 ? "attention (fused, float32)" : "attention (fused, in float)", dt == DT_F32 ? "float" : "uint16_t",
                                           arena_printf(e->a, "gg_rt_attention(%d, &a, ", dt == DT_F32 ? 0 : dt == DT_BF16 ? 3 : 2));
}

const Target gg_target_c = {&gg_dialect_c, "GG_VEC ", true, false, false, product_c, conv_c, pool_c, conv_wgrad_c, attention_c, NULL, "", "kDLCPU", prelude_c, NULL, finish_c};
