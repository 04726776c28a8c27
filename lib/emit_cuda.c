/* emit_cuda.c: the CUDA target (emit.h lists the emitter files).
 * Requires and guarantees: as emit.c. Kernels are __global__ functions launched on the run's stream:
 * a thread per element in grid-stride loops (32-bit index arithmetic where the size allows), a warp
 * per row for normalization and softmax; products go to cuBLASLt/cuBLAS, convolutions and pooling
 * to the CUDA runtime (gg_rt_cuda.cu), through host functions. Kernels that meet an index out of
 * range leave their id in gg_dev_err; the module's error table names the node. */
#include "emit.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the CUDA dialect */

static void cu_head(Em *e, int id, bool checks) { (void)checks; fprintf(e->k, "static __global__ void k%d(", id); }
static void cu_syms(Em *e) { fputs(", const gg_s S) {\n  const int64_t *s = S.v; (void)s;\n", e->k); }

static void cu_call(Em *e, int id) {
  fprintf(e->r, "  k%d<<<%s, 0, (cudaStream_t)gg_cu_stream()>>>(", id, e->launch ? arena_printf(e->a, "gg_cu_blocks(%s), 256", e->launch) : "1, 1");
}

static void cu_call_end(Em *e) { fputs(", S);\n", e->r); }
static void cu_return_bad(Em *e, int id) { fprintf(e->k, "  if (bad) gg_dev_err = %d;\n}\n", id + 1); }
static void cu_call_checked(Em *e, int id) { cu_call(e, id); }

static void cu_call_checked_end(Em *e, int id, Node *n) {
  cu_call_end(e);
  fprintf(e->errs, "  case %d: return ", id + 1);
  emit_c_string(e->errs, arena_printf(e->a, "node %s: index out of range", n->name));
  fputs(";\n", e->errs);
}

/* parallel: one grid-stride loop over the whole shape, a thread per element; else plain loops */
static int cu_loops(Em *e, int rank, const Expr *const *sizes, bool parallel, const Expr *inner) {
  FILE *f = e->k;
  if (rank == 0) { fputs("  {\n", f); return 1; }
  if (!parallel) return gg_dialect_c.loops(e, rank, sizes, parallel, inner);
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

/* a warp per row (open_rows) */
static int cu_rows(Em *e, int rank, const Expr *const *sizes, const Expr *len) {
  if (rank == 0) return cu_loops(e, rank, sizes, true, len);
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

const Dialect gg_dialect_cuda = {cu_head, cu_syms, cu_call, cu_call_end, cu_return_bad, cu_call_checked, cu_call_checked_end, cu_loops, cu_rows};

/* ---------------------------------------------------------------- products, convolutions, pooling */

/* The schedule's epilogue of product or convolution n, as a kernel over its output right after it,
 * a thread per element, in place: the same statements as the CPU's epilogue function (emit.c's
 * epilogue_body). It saves what the CPU's saves but the pass over the output: a kernel and a
 * tensor per node of the chain. */
static int epilogue_kernel(Em *e, Node *n, const TV *out) {
  Epi ep;
  char *body;
  const char *val;
  bool fl;
  int r = epilogue_body(e, n, out, &ep, &body, &val, &fl);
  if (r <= 0) return r;
  DType dt = ep.chain[ep.n - 1]->outs[0]->dtype;
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, "epilogue");
  fputs("/* applies:", f);
  for (int k = 0; k < ep.n; k++) { fputc(' ', f); comment(f, ep.chain[k]->name); }
  fputs(" */\n", f);
  kopen(e, id, false, false);
  fprintf(f, "%s *y", ctype(dt));
  for (int j = 0; j < ep.P.n; j++) fprintf(f, ", const %s *x%d", ctype(ep.P.tv[j].dt), j);
  ksyms(e);
  const Expr *ne = numel(e, out);
  int cl = open_loops(e, 1, &ne, true);
  fprintf(f, "    %s *const yr = y;\n    const int64_t j = i0;\n", ctype(dt));
  fputs(body, f);
  free(body);
  fputs("    ", f);
  store(f, dt, fl, "yr", "j", val);
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fputs(sname(e, out->stor), e->r);
  for (int j = 0; j < ep.P.n; j++) fprintf(e->r, ", %s", sname(e, ep.P.tv[j].stor));
  kcall_end(e);
  return 0;
}

/* CUDA: gg_cu_gemm (cuBLASLt for one product, cuBLAS strided-batched over the last batch dim, host
 * loops over the others). A bias vector along the rows goes to cuBLASLt's epilogue; any other is
 * copied into the output first and the product added to it (beta). Half types accumulate in
 * float32, as PyTorch's do. */
static int product_cuda(Em *e, const Product *p) {
  Node *n = p->n;
  TV *out = p->out;
  const TV *Ab = &p->a, *Bb = &p->b;
  int nb = p->nb;
  Value *bias = p->bias;
  double alpha = p->alpha, beta = p->beta;
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
  return epilogue_kernel(e, n, out);
}


/* Convolutions: cuDNN in the CUDA runtime (float32, float64, float16, bfloat16), else im2col +
 * cuBLAS per image and direct kernels for grouped and transposed ones. */
static int conv_cuda(Em *e, const Conv *cv) {
  Epi none = {0};
  const char *what = cv->tr ? "transposed convolution (GEMM + col2im)" : "convolution (im2col + GEMM)";
  DType dt = cv->n->outs[0]->dtype;   /* the runtime's dtype codes: float32, float64, float16, bfloat16 */
  const char *body = arena_printf(e->a, "  gg_cu_conv(%d, &c, x, w, b, y, col);\n}\n", dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : 0);
  return conv_kernel(e, cv, what, MUL(e, MUL(e, cv->cg, cv->ksp), cv->sp), NULL, &none, body) || epilogue_kernel(e, cv->n, cv->out) ? -1 : 0;
}

static void pool_cuda(Em *e, DType dt) { fprintf(e->k, "  gg_cu_pool(%d, &p, x, y, idx);\n}\n", dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : 0); }

/* ---------------------------------------------------------------- the module */

static void prelude_cuda(Graph *g, FILE *out) {
  fputs("#include <cuda_runtime.h>\n", out);
  fputs("#include \"gg_rt.h\"\n#include \"scalar.h\"\n\n#include <math.h>\n\n", out);
  fputs("#define restrict __restrict__\n#undef GG_TICK\n#define GG_TICK(slot) ((void)0)   /* GCC_GRAPH_PROFILE times CPU models only */\n", out);
  fprintf(out, "typedef struct { int64_t v[%d]; } gg_s;   /* the symbols' values, passed to kernels by value */\n", g->nsyms > 0 ? g->nsyms : 1);
  fputs("static __device__ int gg_dev_err;   /* 1 + the id of a kernel that met an index out of range */\n", out);
  fputs("/* a warp's partial sums and maxima (NaN wins, as in the sequential loops) combined with shuffles */\n", out);
  fputs("static __device__ double gg_wsum(double v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }\n", out);
  fputs("static __device__ double gg_wmax(double v) {\n  for (int o = 16; o; o >>= 1) { double u = __shfl_xor_sync(0xffffffffu, v, o); if (u > v || isnan(u)) v = u; }\n  return v;\n}\n", out);
}

/* Kernels cannot return: the table from the id a kernel left in gg_dev_err to its message. */
static void finish_cuda(FILE *out, const char *errs) {
  fputs("\n/* Kernels cannot return: one that met an index out of range left its id in gg_dev_err. */\n", out);
  fputs("static int *gg_m_error_flag(void) {\n  void *p = NULL;\n  return cudaGetSymbolAddress(&p, gg_dev_err) == cudaSuccess ? (int *)p : NULL;\n}\n", out);
  fputs("static const char *gg_m_error(int v) {\n  switch (v) {\n", out);
  fputs(errs, out);
  fputs("  }\n  return \"index out of range\";\n}\n", out);
}

const Target gg_target_cuda = {&gg_dialect_cuda, "", false, true, product_cuda, conv_cuda, pool_cuda,
                               "  gg_s S;\n  for (int i = 0; i < (int)(sizeof S.v / sizeof S.v[0]); i++) S.v[i] = s[i];\n  (void)S;\n", "kDLCUDA",
                               prelude_cuda, finish_cuda};
