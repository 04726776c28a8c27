/* emit_cuda.c: the CUDA target (emit.h lists the emitter files).
 * Requires and guarantees: as emit.c. Kernels are __global__ functions launched on the run's stream:
 * a thread per element in grid-stride loops (32-bit index arithmetic where the size allows), a warp
 * per row for normalization and softmax (a norm's row in registers where it fits: norm_cuda); products go to cuBLASLt/cuBLAS, convolutions and pooling
 * to the CUDA runtime (gg_rt_cuda.cu), through host functions. Kernels that meet an index out of
 * range leave their id in gg_dev_err; the module's error table names the node. */
#include "emit.h"
#include "rewrite.h"

#include <math.h>

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the CUDA dialect */

static void cu_head(Em *e, int id, bool checks) { (void)checks; fprintf(e->k, "static __global__ void k%d(", id); }
static void cu_syms(Em *e) { fputs(", const gg_s S) {\n  const int64_t *s = S.v; (void)s;\n", e->k); }

/* the kernel's launcher in the host file (module.c's split_device): grid, block, then its arguments */
static void cu_call(Em *e, int id) { fprintf(e->r, "  k%d(%s, ", id, e->launch ? arena_printf(e->a, "gg_cu_blocks(%s), 256", e->launch) : "1, 1"); }

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

/* a thread per V consecutive elements (vloops): the index arithmetic once per task, V independent
 * loads in flight per thread, one 16-byte store */
static void cu_vloops(Em *e, int rank, const Expr *const *sizes, int V, const char *T) {
  FILE *f = e->k;
  const Expr *n = C(e, 1);
  for (int d = 0; d < rank; d++) n = MUL(e, n, sizes[d]);
  int64_t nv = 0;
  expr_is_const(n, &nv);
  const char *I = nv < INT32_MAX ? "uint32_t" : "int64_t";
  e->launch = arena_printf(e->a, "INT64_C(%lld)", (long long)(nv / V));
  fprintf(f, "  for (%s gi = blockIdx.x * (%s)blockDim.x + threadIdx.x; gi < (%s)%s; gi += gridDim.x * (%s)blockDim.x) {\n    %s gr = gi * %d;\n", I, I, I,
          e->launch, I, I, V);
  for (int d = rank - 1; d > 0; d--)
    fprintf(f, "    const int64_t i%d%s = (int64_t)(gr %% (%s)(%s)); gr /= (%s)(%s);\n", d, d == rank - 1 ? "b" : "", I, cx(e, sizes[d]), I, cx(e, sizes[d]));
  fprintf(f, "    const int64_t i0%s = (int64_t)gr;\n", rank == 1 ? "b" : "");
  if (e->vpre_text) fputs(e->vpre_text, f);   /* the operands' 16-byte loads (emit.c's vector_load) */
  fprintf(f, "    __align__(16) %s yv[%d];\n    _Pragma(\"unroll\") for (int v = 0; v < %d; v++) {\n      const int64_t i%d = i%db + v;\n", T, V, V, rank - 1, rank - 1);
}

static void cu_vstore(Em *e, int V, const char *T, const char *lin) {
  (void)V, (void)T;
  fprintf(e->k, "    }\n    *(uint4 *)(y + %s) = *(const uint4 *)yv;\n  }\n", lin);
}

const Dialect gg_dialect_cuda = {cu_head, cu_syms, cu_call, cu_call_end, cu_return_bad, cu_call_checked, cu_call_checked_end, cu_loops, cu_rows, cu_vloops, cu_vstore};

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

/* the runtime's code for float32 products and convolutions: 4 (TF32 tensor cores) under --precision tf32 */
static int rt_f32(const Em *e) { return e->g->ctx->precision == PREC_TF32 ? 4 : 0; }

/* ... and for float32 matrix products alone: 7 under --precision tf32x3 (the runtime splits each into
 * three TF32 products, gemm_x3; convolutions and attention stay rt_f32's) */
static int rt_f32_product(const Em *e) { return e->g->ctx->precision == PREC_TF32X3 ? 7 : rt_f32(e); }

/* CUDA: gg_cu_gemm (cuBLASLt for one product, cuBLAS strided-batched over the last batch dim, host
 * loops over the others). A bias vector along the rows goes to cuBLASLt's epilogue; any other is
 * copied into the output first and the product added to it (beta). Half types accumulate in
 * float32, as PyTorch's do. */
static bool size_one(const Expr *s) {
  int64_t v;
  return expr_is_const(s, &v) && v == 1;
}

/* Batch dims 0..nb-1 of x that are one stride (each, size-1 dims left out, the next one's stride
 * times its size), so that a strided-batched call walks them all; *stride: that stride (0: no dim
 * but size-1 ones) */
static bool batch_merges(Em *e, const TV *x, int nb, const Expr **stride) {
  int prev = -1;
  for (int d = 0; d < nb; d++) {
    if (size_one(x->sizes[d])) continue;
    if (prev >= 0 && !expr_same(e->g, x->strides[prev], MUL(e, x->strides[d], x->sizes[d]))) return false;
    prev = d;
  }
  *stride = prev >= 0 ? x->strides[prev] : C(e, 0);
  return true;
}

/* x's batch dims 0..nb-1 as one of `count` matrices (x must merge: batch_merges) */
static TV batch_merged(Em *e, const TV *x, int nb, const Expr *count) {
  TV t = *x;
  const Expr *st = NULL;
  batch_merges(e, x, nb, &st);
  t.rank = 3;
  t.sizes[0] = count, t.strides[0] = st;
  for (int d = 1; d < 3; d++) t.sizes[d] = x->sizes[nb - 1 + d], t.strides[d] = x->strides[nb - 1 + d];
  return t;
}

static int product_cuda(Em *e, const Product *p) {
  Node *n = p->n;
  TV *out = p->out;
  const TV *Ab = &p->a, *Bb = &p->b;
  int nb = p->nb;
  /* several batch dims that are not one stride (attention's [batch, heads] of a [batch, seq, heads,
   * dim] view): the operand is copied into contiguous scratch, as PyTorch's reshape does, so that one
   * strided-batched call takes every matrix instead of a host loop of calls of one batch each */
  TV Am, Bm, Om;
  const Expr *st;
  if (nb >= 2 && batch_merges(e, out, nb, &st)) {
    const Expr *count = C(e, 1);
    for (int d = 0; d < nb; d++) count = MUL(e, count, out->sizes[d]);
    TV *ops[2] = {&Am, &Bm};
    const TV *src[2] = {Ab, Bb};
    for (int i = 0; i < 2; i++) {
      *ops[i] = *src[i];
      if (batch_merges(e, src[i], nb, &st)) continue;
      int s = new_stor(e, S_SCRATCH, 0, src[i]->dt, numel(e, src[i]));
      contiguous_tv(e, ops[i], s, src[i]->dt, src[i]->rank, src[i]->sizes);
      copy_kernel(e, n, ops[i], src[i]);
    }
    Am = batch_merged(e, &Am, nb, count), Bm = batch_merged(e, &Bm, nb, count), Om = batch_merged(e, out, nb, count);
    Ab = &Am, Bb = &Bm, nb = 1;
  }
  TV *y = nb == p->nb ? out : &Om;
  Value *bias = p->bias;
  double alpha = p->alpha, beta = p->beta;
  /* dt: the operands'; the output's is float32 where cuBLASLt's epilogue widens a 16-bit product (codes 5, 6) */
  DType dt = n->outs[0]->dtype, od = out->dt;
  int code = dt == DT_F32 ? rt_f32_product(e) : dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : -1;
  if (code < 0) return efail(e, n, "matrix products in %s are not supported with --target cuda", dtype_name(dt));
  if (od != dt) code = dt == DT_BF16 ? 5 : 6;
  /* a vector along the output's rows goes to cuBLASLt's epilogue; any other bias is copied in first */
  const TV *bt = bias ? &e->tv[bias->id] : NULL;
  int64_t unit;
  bool epi = bt && nb == 0 && beta == 1 && bt->dt == dt && bt->rank == 1 && expr_same(e->g, bt->sizes[0], out->sizes[out->rank - 1]) &&
             expr_is_const(bt->strides[0], &unit) && unit == 1;
  if (bt && !epi) {
    TV bb = broadcast_tv(e, bt, out->rank, out->sizes);
    copy_kernel(e, n, out, &bb);
  }
  /* the schedule's epilogue, when it is cuBLASLt's (sched_lt_epilogue: a widening to float32, a bias
   * vector after it, an addition of a tensor of the output's layout, a ReLU), in cuBLASLt's (the
   * runtime's pass after the product where cuBLASLt does not run it) */
  Value *res = NULL, *lb = NULL;
  bool relu = false, lt = e->s->nchain[n->id] && !(bt && !epi) &&
                         sched_lt_epilogue(e->g, n, e->s->chain[n->id], e->s->nchain[n->id], &lb, &res, &relu);
  if (od != dt && !lt) return efail(e, n, "a widened product without cuBLASLt's epilogue (internal error)");
  const TV *rt = res ? &e->tv[res->id] : NULL;
  if (lb) {   /* the float32 bias vector the widening brought (a contiguous [.., N]) */
    bt = &e->tv[lb->id];
    epi = true;
  }
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, lt ? "matrix product and its epilogue (cuBLASLt)" : "matrix product (cuBLAS)");
  if (lt) {
    fputs("/* applies:", f);
    for (int k = 0; k < e->s->nchain[n->id]; k++) { fputc(' ', f); comment(f, e->s->chain[n->id][k]->name); }
    fputs(" */\n", f);
  }
  const char *T = ctype(dt), *To = ctype(od);
  kopen(e, id, false, true);
  fprintf(f, "%s *y, const %s *a, const %s *b, const %s *bias, const %s *res", To, T, T, To, To);
  ksyms(e);
  const Expr *M = Ab->sizes[nb], *K = Ab->sizes[nb + 1], *N = Bb->sizes[nb + 1];
  fprintf(f, "  const int64_t M = %s, N = %s, K = %s;\n", cx(e, M), cx(e, N), cx(e, K));
  int outer = nb > 0 ? nb - 1 : 0;
  const char *cnt = nb > 0 ? cx(e, y->sizes[nb - 1]) : "1";
  int cl = open_loops(e, outer, y->sizes, false);
  char *ai = arena_strdup(e->a, cx(e, Ab->offset)), *bi = arena_strdup(e->a, cx(e, Bb->offset));
  for (int d = 0; d < outer; d++) {
    ai = arena_printf(e->a, "%s + i%d * %s", ai, d, cx(e, Ab->strides[d]));
    bi = arena_printf(e->a, "%s + i%d * %s", bi, d, cx(e, Bb->strides[d]));
  }
  const char *yo = arena_printf(e->a, "(%s) * %s * M * N", linear_index(e, y->sizes, outer, 0), cnt);
  fprintf(f, "    gg_cu_gemm_ep(%d, M, N, K, %.17g, a + %s, %s, %s, %s, b + %s, %s, %s, %s, %.17g, y + %s, %s, %s, %s, %d);\n", code, alpha, ai,
          cx(e, Ab->strides[nb]), cx(e, Ab->strides[nb + 1]), nb > 0 ? cx(e, Ab->strides[nb - 1]) : "0", bi, cx(e, Bb->strides[nb]),
          cx(e, Bb->strides[nb + 1]), nb > 0 ? cx(e, Bb->strides[nb - 1]) : "0", bt && !epi ? beta : 0.0, yo, cnt,
          epi ? arena_printf(e->a, "bias + %s", cx(e, bt->offset)) : "NULL", rt ? arena_printf(e->a, "res + %s + %s", cx(e, rt->offset), yo) : "NULL",
          relu);
  close_loops(e, cl);
  fputs("}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s", sname(e, out->stor), sname(e, Ab->stor), sname(e, Bb->stor), epi ? sname(e, bt->stor) : "NULL",
          rt ? sname(e, rt->stor) : "NULL");
  kcall_end(e);
  return lt ? 0 : epilogue_kernel(e, n, out);
}


/* Convolutions: cuDNN in the CUDA runtime (float32, float64, float16, bfloat16), else im2col +
 * cuBLAS per image and direct kernels for grouped and transposed ones. */
static int conv_cuda(Em *e, const Conv *cv) {
  Epi none = {0};
  const char *what = cv->tr ? "transposed convolution (GEMM + col2im)" : "convolution (im2col + GEMM)";
  DType dt = cv->n->outs[0]->dtype;   /* the runtime's dtype codes: float32, float64, float16, bfloat16 */
  const char *body = arena_printf(e->a, "  gg_cu_conv(%d, &c, x, w, b, y, col);\n}\n", dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : rt_f32(e));
  return conv_kernel(e, cv, what, MUL(e, MUL(e, cv->cg, cv->ksp), cv->sp), NULL, &none, body) || epilogue_kernel(e, cv->n, cv->out) ? -1 : 0;
}

static void pool_cuda(Em *e, DType dt) { fprintf(e->k, "  gg_cu_pool(%d, &p, x, y, idx);\n}\n", dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : 0); }

/* a convolution's weight and bias gradients: cuDNN's backward-filter, else im2col + cuBLAS */
static void conv_wgrad_cuda(Em *e, DType dt) {
  fprintf(e->k, "  gg_cu_conv_wgrad(%d, &c, x, dy, dw, db, col, tmp);\n}\n", dt == DT_F64 ? 1 : dt == DT_F16 ? 2 : dt == DT_BF16 ? 3 : rt_f32(e));
}

/* ---------------------------------------------------------------- attention */

/* Whether gg_cu_attention_backward has a kernel for this dtype and head size: 16-bit ones on tensor
 * cores, float32 on the FMA units; the head sizes the GPU tests run (tests/extra/train_attention*:
 * 32 and 64; float32 64). The kernels' templates take 96 and 128 (16-bit) and 128 (float32) once a
 * case exercises them. */
bool cuda_attention_backward_fits(DType dt, int64_t D) {
  if (dt == DT_F16 || dt == DT_BF16) return D == 32 || D == 64;
  return dt == DT_F32 && D == 64;
}

/* Whether the runtime's fused attention (gg_cu_attention) takes this scaled_dot_product_attention,
 * which decompose() then keeps whole: float16, bfloat16 or float32 on sm_80 or later, a head size the
 * kernel is built for (32, 64, 96, 128), and attention_shape_fits's shapes. */
bool cuda_attention_fits(const Graph *g, const Node *n) {
  Value *q = rw_targ(n, "query");
  /* --train's pair (_attention_train, _attention_train_backward): where the backward has a kernel */
  bool train = n->op && strcmp(n->op->name, "scaled_dot_product_attention");
  int64_t D;
  if (g->ctx->cuda_sm < 80 || !q || (q->dtype != DT_F16 && q->dtype != DT_BF16 && q->dtype != DT_F32) || !attention_shape_fits(g, n, &D)) return false;
  return (D == 32 || D == 64 || D == 96 || D == 128) && (!train || cuda_attention_backward_fits(q->dtype, D));
}

/* --train's attention backward (_attention_train_backward): gg_cu_attention_backward with the
 * forward's output and the output's gradient (last dim contiguous) and a float32 scratch for the
 * row sums and dQ's accumulator; dq, dk and dv contiguous. */
static int attention_backward_cuda(Em *e, Node *n, TV *const t[3], const TV *mb, const Expr *const bhls[4]) {
  Value *qv = rw_targ(n, "query"), *gv = rw_targ(n, "grad_out"), *ov = rw_targ(n, "out"), *lv = rw_targ(n, "logsumexp"), *mv = rw_targ(n, "attn_mask");
  TV *go = tv_of(e, n, gv), *o = tv_of(e, n, ov), *lse = contiguous_of(e, n, lv);
  int64_t unit, D;
  if (go && !(expr_is_const(go->strides[go->rank - 1], &unit) && unit == 1)) go = contiguous_of(e, n, gv);
  if (o && !(expr_is_const(o->strides[o->rank - 1], &unit) && unit == 1)) o = contiguous_of(e, n, ov);
  if (!go || !o || !lse) return -1;
  TV *dq = alloc_value(e, n->outs[0]), *dk = alloc_value(e, n->outs[1]), *dv = alloc_value(e, n->outs[2]);
  int r = qv->rank;
  expr_is_const(qv->sizes[r - 1], &D);
  const Expr *rows = MUL(e, MUL(e, MUL(e, bhls[0], bhls[1]), bhls[2]), C(e, D + 1));
  int work = new_stor(e, S_SCRATCH, 0, DT_F32, rows);
  FILE *f = e->k;
  int id = e->nk++;
  const bool f32 = qv->dtype == DT_F32;
  const char *et = f32 ? "float" : "uint16_t";
  kernel_begin(e, n, f32 ? "attention backward (fused, float32)" : "attention backward (fused, tensor cores)");
  kopen(e, id, false, true);
  fprintf(f, "%s *dq, %s *dk, %s *dv, const %s *q, const %s *k, const %s *v, const %s *m, const %s *y, const %s *gy, const float *lse, float *work", et, et, et, et,
          et, et, mv ? ctype(mv->dtype) : "void", et, et);
  ksyms(e);
  attn_struct(e, n, t, o, mb, bhls, D, rw_farg(n, "scale", 1), arena_printf(e->a, "(float *)lse + %s", cx(e, lse->offset)), go);
  fprintf(f, "  gg_cu_attention_backward(%d, &a, q + %s, k + %s, v + %s, %s, y + %s, gy + %s, dq, dk, dv, work);\n}\n", f32 ? rt_f32(e) : qv->dtype == DT_BF16 ? 3 : 2,
          cx(e, t[0]->offset), cx(e, t[1]->offset), cx(e, t[2]->offset), mv ? arena_printf(e->a, "m + %s", cx(e, mb->offset)) : "NULL", cx(e, o->offset),
          cx(e, go->offset));
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s", sname(e, dq->stor), sname(e, dk->stor), sname(e, dv->stor), sname(e, t[0]->stor),
          sname(e, t[1]->stor), sname(e, t[2]->stor), mv ? sname(e, mb->stor) : "NULL", sname(e, o->stor), sname(e, go->stor), sname(e, lse->stor),
          sname(e, work));
  kcall_end(e);
  return 0;
}

/* The GPU's fused attention (attn_forward), or --train's backward */
static int attention_cuda(Em *e, Node *n) {
  AttnIn in;
  if (!cuda_attention_fits(e->g, n)) return efail(e, n, "reached the code generator undecomposed (internal error)");
  if (attn_in(e, n, &in)) return -1;
  if (n->nouts == 3) return attention_backward_cuda(e, n, in.t, in.masked ? &in.mb : NULL, in.bhls);
  Value *qv = rw_targ(n, "query");
  const bool f32 = qv->dtype == DT_F32;
  return attn_forward(e, n, &in, f32 ? "attention (fused, float32)" : "attention (fused, tensor cores)", f32 ? "float" : "uint16_t",
                      arena_printf(e->a, "gg_cu_attention(%d, &a, ", f32 ? rt_f32(e) : qv->dtype == DT_BF16 ? 3 : 2));
}

/* ---------------------------------------------------------------- norms */

/* A layer or RMS norm whose row fits in registers (float32 or 16-bit, a static length of at most 64
 * 16-byte vectors' elements a lane, in 16-byte aligned memory): G lanes a row (the fewest powers of
 * two that leave each at most 4 vectors, up to 32), 32 / G rows a warp. Each lane loads its vectors
 * of the row once, 16 bytes at a time, and the mean, the variance (two passes over the registers,
 * as the generic kernel's over memory) and the output come from there; the output is stored 16 bytes
 * at a time too (8 for a float32 row stored as bfloat16). 1 for any other row: the generic kernel,
 * a warp a row with element loads, reading the row three times. */
static int norm_cuda(Em *e, const Norm *nm) {
  const TV *x = nm->x, *out = nm->out;
  int64_t L, xoff, ooff, xs = dtype_info(x->dt)->size, os = dtype_info(out->dt)->size;
  if ((x->dt != DT_F32 && x->dt != DT_BF16 && x->dt != DT_F16) || (out->dt != DT_F32 && out->dt != DT_BF16 && out->dt != DT_F16)) return 1;
  if (!expr_is_const(nm->len, &L) || !expr_is_const(x->offset, &xoff) || !expr_is_const(out->offset, &ooff)) return 1;
  int VW = (int)(16 / xs);   /* a 16-byte vector of x */
  bool xa = e->st[x->stor].kind == S_SCRATCH || e->st[x->stor].aligned, oa = e->st[out->stor].kind == S_SCRATCH || e->st[out->stor].aligned;
  if (!xa || !oa || L <= 0 || L % VW || xoff % VW || ooff % VW) return 1;
  const TV *o2 = nm->out2;   /* a narrowed copy stored beside the output */
  int64_t o2off = 0;
  if (o2 && (!expr_is_const(o2->offset, &o2off) || o2off % VW || !(e->st[o2->stor].kind == S_SCRATCH || e->st[o2->stor].aligned) ||
             (o2->dt != DT_BF16 && o2->dt != DT_F16)))
    return 1;
  int64_t nvec = L / VW;
  int G = 1;
  while (G < 32 && (nvec + G - 1) / G > 4) G *= 2;
  int NV = (int)((nvec + G - 1) / G);
  if (NV * VW > 64) return 1;
  bool full = nvec % G == 0;   /* every lane's vectors in the row: no column test */
  int RW = 32 / G, ob = VW * (int)os;   /* rows a warp; bytes of a vector's output */
  Node *n = nm->n;
  FILE *f = e->k;
  int id = e->nk++;
  kernel_begin(e, n, nm->rms ? "rms norm rows in registers" : "layer norm rows in registers");
  kopen(e, id, false, false);
  const char *T = ctype(out->dt), *X = ctype(x->dt);
  fprintf(f, "%s *restrict y, %s *restrict mo, %s *restrict ro, const %s *x, const %s *w, const %s *b, %s *restrict y2", T, nm->mo ? ctype(nm->mo->dt) : "void",
          nm->ro ? ctype(nm->ro->dt) : "void", X, nm->w ? ctype(nm->w->dt) : "void", nm->b ? ctype(nm->b->dt) : "void", o2 ? ctype(o2->dt) : "void");
  ksyms(e);
  const char *nr = cx(e, nm->rows);
  e->launch = arena_printf(e->a, "((%s) + %d) / %d * 32", nr, RW - 1, RW);
  fprintf(f, "  (void)mo; (void)ro; (void)w; (void)b; (void)y2;\n  const int64_t L = INT64_C(%lld), R = %s;\n", (long long)L, nr);
  fprintf(f, "  const int lane = threadIdx.x & 31, q = lane & %d;   /* %d lanes a row, %d rows a warp, %d vectors a lane */\n", G - 1, G, RW, NV);
  fprintf(f, "  for (int64_t r0 = ((blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5) * %d; r0 < R; r0 += ((gridDim.x * (int64_t)blockDim.x) >> 5) * %d) {\n", RW, RW);
  fprintf(f, "    const int64_t r = r0 + (lane >> %d);\n    const bool live = r < R;\n    float xr[%d];\n", __builtin_ctz((unsigned)G), NV * VW);
  const char *col = full ? "live" : "live && c < L";
  fprintf(f, "    _Pragma(\"unroll\") for (int t = 0; t < %d; t++) {\n      const int64_t c = (q + %d * t) * %d;\n", NV, G, VW);
  fprintf(f, "      __align__(16) %s p[%d];\n      if (%s) *(uint4 *)p = *(const uint4 *)(x + r * L + c);\n      else *(uint4 *)p = make_uint4(0, 0, 0, 0);\n", X, VW, col);
  fprintf(f, "      _Pragma(\"unroll\") for (int v = 0; v < %d; v++) xr[t * %d + v] = ", VW, VW);
  load_r(f, x->dt, "p", "v", "float");
  fputs(";\n    }\n    float m = 0, v = 0;\n", f);
  const char *shfl = G > 1 ? arena_printf(e->a, "    for (int sh = %d; sh; sh >>= 1) %%s += __shfl_xor_sync(0xffffffffu, %%s, sh);\n", G / 2) : "";
  if (!nm->rms) {   /* padding is zero: it adds nothing to the sum */
    fprintf(f, "    _Pragma(\"unroll\") for (int k = 0; k < %d; k++) m += xr[k];\n", NV * VW);
    fprintf(f, shfl, "m", "m");
    fputs("    m /= (float)L;\n", f);
  }
  if (full) fprintf(f, "    _Pragma(\"unroll\") for (int k = 0; k < %d; k++) { float d = xr[k] - m; v += d * d; }\n", NV * VW);
  else fprintf(f, "    _Pragma(\"unroll\") for (int k = 0; k < %d; k++) if ((q + %d * (k / %d)) * %d < L) { float d = xr[k] - m; v += d * d; }\n", NV * VW, G, VW, VW);
  fprintf(f, shfl, "v", "v");
  fprintf(f, "    const float rs = 1.0f / sqrt(v / (float)L + (float)%.17g);\n", nm->eps);
  fprintf(f, "    _Pragma(\"unroll\") for (int t = 0; t < %d; t++) {\n      const int64_t c = (q + %d * t) * %d;\n      if (!(%s)) continue;\n", NV, G, VW, col);
  fprintf(f, "      __align__(16) %s o[%d];\n", T, VW);
  if (o2) fprintf(f, "      __align__(16) %s o2[%d];\n", ctype(o2->dt), VW);
  fprintf(f, "      _Pragma(\"unroll\") for (int u = 0; u < %d; u++) {\n        const float z = (xr[t * %d + u] - m) * rs", VW, VW);
  if (nm->w) { fputs(" * ", f); load_r(f, nm->w->dt, "w", "c + u", "float"); }
  if (nm->b) { fputs(" + ", f); load_r(f, nm->b->dt, "b", "c + u", "float"); }
  fputs(";\n        ", f);
  store(f, out->dt, true, "o", "u", "z");
  if (o2) { fputs("        ", f); store(f, o2->dt, true, "o2", "u", "z"); }   /* z is float32's value: the cast rounds it once */
  fputs("      }\n", f);
  const char *ys[2] = {"y", "y2"}, *vs[2] = {"o", "o2"};
  for (int q = 0; q < (o2 ? 2 : 1); q++) {
    int bytes = q ? VW * 2 : ob;
    if (bytes == 8) fprintf(f, "      *(uint2 *)(%s + r * L + c) = *(const uint2 *)%s;\n", ys[q], vs[q]);
    else fprintf(f, "      _Pragma(\"unroll\") for (int j = 0; j < %d; j++) ((uint4 *)(%s + r * L + c))[j] = ((const uint4 *)%s)[j];\n", bytes / 16, ys[q], vs[q]);
  }
  fputs("    }\n", f);
  if (nm->mo) {
    fputs("    if (live && q == 0) {\n      ", f);
    store(f, nm->mo->dt, true, "mo", "r", "m");
    fputs("      ", f);
    store(f, nm->ro->dt, true, "ro", "r", "rs");
    fputs("    }\n", f);
  }
  fputs("  }\n}\n", f);
  kcall(e, id);
  fprintf(e->r, "%s, %s, %s, %s, %s, %s, %s", sname(e, out->stor), nm->mo ? sname(e, nm->mo->stor) : "NULL", nm->ro ? sname(e, nm->ro->stor) : "NULL",
          sname(e, x->stor), nm->w ? sname(e, nm->w->stor) : "NULL", nm->b ? sname(e, nm->b->stor) : "NULL", o2 ? sname(e, o2->stor) : "NULL");
  kcall_end(e);
  return 0;
}

/* ---------------------------------------------------------------- the module */

/* the host file (model.c): plain C, no CUDA header */
static void prelude_cuda(Graph *g, FILE *out) {
  fputs("#include \"gg_rt.h\"\n#include \"scalar.h\"\n\n#include <math.h>\n\n", out);
  fprintf(out, "typedef struct { int64_t v[%d]; } gg_s;   /* the symbols' values, passed to kernels by value */\n", g->nsyms > 0 ? g->nsyms : 1);
}

/* the kernel file (model.cu), compiled by nvcc -fatbin */
static void device_prelude_cuda(Graph *g, FILE *out) {
  fputs("#include \"gg_rt.h\"\n#include \"scalar.h\"\n\n#include <math.h>\n\n", out);
  fputs("#define restrict __restrict__\n", out);
  fprintf(out, "typedef struct { int64_t v[%d]; } gg_s;   /* the symbols' values, passed to kernels by value */\n", g->nsyms > 0 ? g->nsyms : 1);
  fputs("extern \"C\" { __device__ int *gg_dev_errp; }   /* the model's error flag (gg_open sets it in every part) */\n", out);
  fputs("#define gg_dev_err (*gg_dev_errp)   /* 1 + the id of a kernel that met an index out of range */\n", out);
  fputs("/* a warp's partial sums and maxima (NaN wins, as in the sequential loops) combined with shuffles */\n", out);
  fputs("static __device__ double gg_wsum(double v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }\n", out);
  fputs("static __device__ double gg_wmax(double v) {\n  for (int o = 16; o; o >>= 1) { double u = __shfl_xor_sync(0xffffffffu, v, o); if (u > v || isnan(u)) v = u; }\n  return v;\n}\n", out);
  fputs("static __device__ float gg_wsum(float v) { for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }\n", out);
  fputs("static __device__ float gg_wmax(float v) {\n  for (int o = 16; o; o >>= 1) { float u = __shfl_xor_sync(0xffffffffu, v, o); if (u > v || isnan(u)) v = u; }\n  return v;\n}\n", out);
}

/* Kernels cannot return: the table from the id a kernel left in gg_dev_err to its message. */
static void finish_cuda(FILE *out, const char *errs) {
  fputs("\n/* Kernels cannot return: one that met an index out of range left its id in gg_dev_err. */\n", out);
  fputs("static const char *gg_m_error(int v) {\n  switch (v) {\n", out);
  fputs(errs, out);
  fputs("  }\n  return \"index out of range\";\n}\n", out);
}

const Target gg_target_cuda = {&gg_dialect_cuda, "", false, true, true, product_cuda, conv_cuda, pool_cuda, conv_wgrad_cuda, attention_cuda, norm_cuda,
                               "  gg_s S;\n  for (int i = 0; i < (int)(sizeof S.v / sizeof S.v[0]); i++) S.v[i] = s[i];\n  (void)S;\n", "kDLCUDA",
                               prelude_cuda, device_prelude_cuda, finish_cuda};
