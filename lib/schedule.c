/* schedule.c: the fusion decisions, as data, before any code is written.
 * Requires: a verified, functional, decomposed graph. Guarantees: a Schedule saying, for every node,
 * whether it gets a kernel of its own (SN_KERNEL), is computed inside its only reader's loop
 * (SN_FUSED, pointwise into pointwise over the same shape), or is applied in the epilogue of the
 * product or convolution before it (SN_EPILOGUE: the chain of pointwise nodes after it, in order),
 * and every fusion refused with the reason; and, for every tensor value, its layout (view.c) and the
 * value whose storage it lives in. The emitters (emit.h) write what it says and decide nothing of
 * it; explain and the tests read it. The decisions are made in graph order, the order the code runs. */
#include "gg.h"
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

int emit_pointwise(struct Em *, struct Node *);
int emit_gelu(struct Em *, struct Node *);
int emit_div_mode(struct Em *, struct Node *);
int emit_matmul(struct Em *, struct Node *);
int emit_linear(struct Em *, struct Node *);
int emit_addmm(struct Em *, struct Node *);
int emit_conv(struct Em *, struct Node *);
int emit_reduce(struct Em *, struct Node *);

int emit_assert(struct Em *, struct Node *);

/* Whether node n reads its operands when the model runs: checks (_assert_tensor_metadata) are made
 * at compile time, so they are not readers (a cast they check still fuses into its reader). */
static bool runs(const Node *n) { return !n->op || n->op->emit != emit_assert; }

bool op_is_pointwise(const OpDef *op) { return op->emit == emit_pointwise || op->emit == emit_gelu || op->emit == emit_div_mode; }

/* A cast between float dtypes (_to_copy with a dtype only): the identity, rounded to the new dtype,
 * which fuses like any pointwise op (the casts of --precision and of half-type opmath cost no pass). */
bool sched_is_float_cast(const Node *n) {
  if (!n || !n->op || strcmp(n->op->name, "_to_copy") || n->nouts != 1 || n->args[0].k != AK_TENSOR) return false;
  DType x = n->args[0].u.t->dtype, y = n->outs[0]->dtype;
  for (int i = 1; i < n->op->nargs; i++)
    if (n->args[i].k != AK_NONE && strcmp(n->op->args[i].name, "dtype") && strcmp(n->op->args[i].name, "non_blocking")) return false;
  return x != y && dtype_is_float(x) && dtype_is_float(y);
}

bool sched_is_pointwise(const Node *n) { return n && n->op && n->nouts == 1 && (op_is_pointwise(n->op) || sched_is_float_cast(n)); }

/* A product or convolution: the kernels that take an epilogue. */
static bool takes_epilogue(const Node *n) {
  EmitFn f = n->op ? n->op->emit : NULL;
  return f == emit_matmul || f == emit_linear || f == emit_addmm || f == emit_conv;
}

/* A 16-bit product on the GPU, whose epilogue is only what cuBLASLt's applies (sched_lt_epilogue) */
static bool lt_only(const Graph *g, const Node *n) {
  DType dt = n->outs[0]->dtype;
  return g->ctx->cuda && (dt == DT_BF16 || dt == DT_F16) && n->op->emit != emit_conv;
}

/* ... of its output's dtype: float32 or float64; on the CPU a bfloat16 channels-last convolution's
 * too (gg_rt_conv_nhwc_bf16 runs it on each block it has rounded to bfloat16); on the GPU a 16-bit
 * product's (lt_only) */
static bool epilogue_dtype(const Graph *g, const Node *n) {
  DType dt = n->outs[0]->dtype;
  return dt == DT_F32 || dt == DT_F64 || (dt == DT_BF16 && !g->ctx->cuda && !strcmp(n->op->name, "_conv_nhwc")) || lt_only(g, n);
}

/* u is add.Tensor, alpha 1, of value y and another tensor: that tensor, else NULL */
Value *sched_added_to(const Node *u, const Value *y) {
  if (!u->op || strcmp(u->op->name, "add.Tensor") || u->nouts != 1 || !rw_arg_one(u, "alpha")) return NULL;
  Value *a = rw_targ(u, "self"), *b = rw_targ(u, "other"), *r = a == y ? b : b == y ? a : NULL;
  return r != y ? r : NULL;
}

/* u adds to value y a tensor of y's shape and dtype, alpha 1: that tensor (cuBLASLt's C), else NULL */
static Value *lt_addend(const Graph *g, const Node *u, const Value *y) {
  Value *r = sched_added_to(u, y);
  return r && u->outs[0]->dtype == y->dtype && r->dtype == y->dtype && value_same_shape(g, r, y) ? r : NULL;
}

static bool lt_relu(const Node *u, const Value *y) {
  return u->op && !strcmp(u->op->name, "relu") && u->nouts == 1 && u->args[0].k == AK_TENSOR && u->args[0].u.t == y;
}

/* u widens 16-bit value y to float32 */
static bool lt_widen(const Node *u, const Value *y) {
  return sched_is_float_cast(u) && u->args[0].u.t == y && (y->dtype == DT_BF16 || y->dtype == DT_F16) && u->outs[0]->dtype == DT_F32;
}

/* u adds to value y (rank 2 or more) a float32 vector along its rows ([N] or [1, ..., 1, N]): that
 * vector, else NULL */
static Value *lt_bias(const Graph *g, const Node *u, const Value *y) {
  Value *r = sched_added_to(u, y);
  int64_t i;
  if (!r || u->outs[0]->dtype != DT_F32 || !value_same_shape(g, u->outs[0], y) || r->dtype != DT_F32 || r->rank < 1 || y->rank < 2 || r->rank > y->rank ||
      !expr_same(g, r->sizes[r->rank - 1], y->sizes[y->rank - 1]))
    return NULL;
  for (int d = 0; d < r->rank - 1; d++)
    if (!expr_is_const(r->sizes[d], &i) || i != 1) return NULL;
  return r;
}

/* Whether the chain after product output y (n nodes) is what cuBLASLt's epilogue applies on the GPU
 * (gg_cu_gemm_ep): a cast of a 16-bit y to float32 (cuBLASLt then writes float32: its D, and C, in
 * float32; not where the product has a bias of its own), after it an addition of a float32 vector
 * along the rows (*bias: cuBLASLt's bias; decompose.c's wide_product_bias puts it there), an addition
 * of a tensor of the shape, layout and dtype (its C, beta 1; *res), then a ReLU (*relu), in that
 * order, each optional; not the cast alone (the product would write twice the bytes for nothing);
 * the cast in inference only (the Llama-style model's --train --precision bf16 step measured 11.22
 * ms with it against 10.93 without, its gradient products writing float32).
 * (Layouts: epilogue_why's rule.) */
bool sched_lt_epilogue(const Graph *g, const Node *p, Node *const *chain, int n, Value **bias, Value **res, bool *relu) {
  const Value *y = p->outs[0];
  int k = 0;
  *bias = *res = NULL, *relu = false;
  bool wide = !g->ctx->train && k < n && lt_widen(chain[k], y);   /* inference: a training step measured 2.7% slower with it */
  const char *o = p->op->name;
  const Arg *pb = rw_arg(p, !strcmp(o, "linear") ? "bias" : !strcmp(o, "addmm") || !strcmp(o, "baddbmm") ? "self" : "");
  if (wide && pb && pb->k == AK_TENSOR) return false;   /* its own bias is 16-bit: cuBLASLt's must be float32 with a float32 D */
  if (wide) y = chain[k++]->outs[0];
  const Value *w = rw_targ(p, !strcmp(o, "linear") ? "weight" : !strcmp(o, "matmul") ? "other" : "");   /* a vector: N is 1, no bias vector */
  if (wide && k < n && !(w && w->rank == 1) && (*bias = lt_bias(g, chain[k], y))) y = chain[k++]->outs[0];
  if (k < n && (*res = lt_addend(g, chain[k], y))) y = chain[k++]->outs[0];
  if (k < n && lt_relu(chain[k], y)) *relu = true, k++;
  if (n > 0 && k == n && k > (wide ? 1 : 0)) return true;
  *bias = *res = NULL, *relu = false;
  return false;
}

/* On the GPU a sum or mean of a float value over at least one dim, with static sizes, computes the
 * value it reduces inside its own loop when that value is pointwise and read by nothing else (batch
 * norm's squared deviations, the products its gradients sum): the reduction kernels read each
 * element once (emit_ops.c's split_reduce), so nothing is computed twice and the tensor between the
 * two is never written. */
bool sched_takes_prologue(const Graph *g, const Node *u, const Value *v) {
  if (!g->ctx->cuda || !u || !u->op || u->op->emit != emit_reduce || (u->op->red != R_SUM && u->op->red != R_MEAN) || u->nouts != 1) return false;
  if (u->args[0].k != AK_TENSOR || u->args[0].u.t != v || v->rank < 1 || !dtype_is_float(v->dtype) || !dtype_is_float(u->outs[0]->dtype)) return false;
  int64_t k;
  for (int d = 0; d < v->rank; d++)
    if (!expr_is_const(v->sizes[d], &k) || k < 1) return false;
  return true;
}

bool sched_test_miscompiled(const Node *n) {
  const char *bug = getenv("GCC_GRAPH_TEST_MISCOMPILE");
  return bug && n->op && !strcmp(bug, n->op->name);
}

static void refuse(Schedule *s, const Node *n, const Node *reader, const char *why) {
  Ctx *c = s->g->ctx;
  gg_log(c, LOG_FUSION, "node %s not fused%s%s: %s", gg_quote(c, n->name), reader ? " with " : "", reader ? gg_quote(c, reader->name) : "", why);
  if (s->nrefused == s->cap_refused) {
    s->cap_refused = s->cap_refused ? 2 * s->cap_refused : 64;
    Refusal *r = arena_array(c->arena, (size_t)s->cap_refused, sizeof *r);
    if (s->nrefused) memcpy(r, s->refused, sizeof *r * (size_t)s->nrefused);
    s->refused = r;
  }
  s->refused[s->nrefused++] = (Refusal){n->name, reader ? reader->name : NULL, why};
}

/* Why value v is not fused with its readers because of how many read it (NULL: one node does) */
static const char *readers_why(Schedule *s, const Value *v) {
  if (s->uses[v->id] == 1) return NULL;
  for (int i = 0; i < s->g->noutputs; i++)
    if (s->g->outputs[i].v == v) return "an output of the model (it must be stored)";
  return arena_printf(s->g->ctx->arena, "read %d times, so it is stored (fused into its readers, it would be computed once per read)", s->uses[v->id]);
}

/* A pointwise node that may join a product's or convolution's epilogue: it reads, as the only reader,
 * the float output of one (epilogue() decides later whether it does). Values fused into it would
 * keep it out, so none is. */
static bool epilogue_reader(const Schedule *s, const Node *u) {
  FOR_TENSOR_ARGS(u, a, {
    if (a->def && takes_epilogue(a->def) && s->uses[a->id] == 1 && epilogue_dtype(s->g, a->def) &&
        (!lt_only(s->g, a->def) || lt_addend(s->g, u, a) || lt_relu(u, a)))
      return true;
  })
  return false;
}

/* A concatenation computed inside its only reader's loop: the reader is pointwise over the cat's
 * shape and takes each element from the input its index along the cat's dim falls in (emit.c's
 * fused_cat), so the concatenated tensor is never written. Inputs of the output's dtype and rank,
 * static nonzero sizes along that dim; at most SCHED_CAT_MAX of them. RoPE's rotate_half (cat of
 * -x2 and x1, then * sin) is the case. On the GPU only: on the CPU the branch per element keeps the
 * reader's loop from vectorizing (DenseNet-121's norms after its concatenations: 36 -> 48 ms on two
 * cores), so concatenations stay copies there. */
bool sched_fusible_cat(const Schedule *s, const Node *n) {
  if (!s->g->ctx->cuda || !n || !n->op || strcmp(n->op->name, "cat") || n->nouts != 1 || n->args[0].k != AK_TENSORS) return false;
  const Arg *ts = &n->args[0];
  Value *y = n->outs[0];
  Node *u = s->reader[y->id];
  if (s->uses[y->id] != 1 || !sched_is_pointwise(u) || !value_same_shape(s->g, y, u->outs[0]) || epilogue_reader(s, u)) return false;
  if (ts->n < 1 || ts->n > SCHED_CAT_MAX || y->rank < 1) return false;
  int d = dim_wrap(node_int_arg(n, "dim", 0), y->rank);
  for (int i = 0; i < ts->n; i++) {
    const Value *x = ts->u.ts[i];
    int64_t k;
    if (x->dtype != y->dtype || x->rank != y->rank || !expr_is_const(x->sizes[d], &k) || k < 1) return false;
  }
  return true;
}

/* Whether value v is an output of the model */
static bool is_output(const Schedule *s, const Value *v) {
  for (int i = 0; i < s->g->noutputs; i++)
    if (s->g->outputs[i].v == v) return true;
  return false;
}

/* A value read by several nodes, each of which computes it in its own loop instead of reading it
 * stored: a pointwise node of one tensor operand (a cast, a negation, a scale by a constant), read by
 * at most SCHED_MULTI_READS pointwise nodes over its shape, none of which could take a product's
 * epilogue. Each reader reads the operand instead: no tensor written, no kernel (RMSNorm's bfloat16
 * input cast to float32, read by the mean of squares and by the normalization). */
static bool recomputed(const Schedule *s, const Node *n) {
  Value *v = n->outs[0];
  int nt = 0, k = s->uses[v->id];
  if (!sched_is_pointwise(n) || k < 2 || k > SCHED_MULTI_READS || is_output(s, v)) return false;
  FOR_TENSOR_ARGS(n, a, {   /* one operand, stored: nothing fused into n */
    if (++nt > 1 || (a->def && s->role[a->def->id] == SN_FUSED)) return false;
  })
  if (nt != 1) return false;
  for (int i = s->rd_start[v->id]; i < s->rd_start[v->id + 1]; i++) {
    const Node *u = s->rd[i];
    if (!sched_is_pointwise(u) || !value_same_shape(s->g, v, u->outs[0]) || epilogue_reader(s, u)) return false;
  }
  return true;
}

/* Whether pointwise node n computes a transcendental function (exp, log, trigonometric, erf and the
 * activations made of them): a special-function unit's work and more, worth a kernel of its own over
 * a small tensor rather than being repeated for each element a broadcast reader reads it at (the
 * sigmoid of a squeeze-excite block: EfficientNet-B0 2.4% slower on the H200 when repeated over
 * H x W). rsqrt, sqrt and reciprocal are single instructions and do not count. */
static bool transcendental(const Node *n) {
  static const char *const fns[] = {"exp", "log", "sin", "cos", "tan", "erf", "elu", "sigmoid", "silu", "mish", "softplus", "pow", "gelu"};
  const char *f = n->op->pwf_name ? n->op->pwf_name : n->op->name;
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++)
    if (strstr(f, fns[i])) return true;
  return false;
}

/* What repeating n for every element of a broadcast reader costs: the nodes computed in its loop,
 * more than SCHED_BCAST_NODES where one of them is transcendental */
static int bcast_cost(const Schedule *s, const Node *n) {
  if (!sched_is_pointwise(n) || transcendental(n)) return SCHED_BCAST_NODES + 1;
  int k = 1;
  FOR_TENSOR_ARGS(n, a, {
    if (a->def && s->role[a->def->id] == SN_FUSED) k += bcast_cost(s, a->def);
  })
  return k;
}

/* Fusion legality: n is computed inside its only reader's loop, and its value is not an output, when
 * - both are pointwise over the same shape (so no element is computed twice);
 * - n is pointwise and reads over a smaller shape that broadcasts to its reader's, and costs little:
 *   at most SCHED_BCAST_NODES nodes computed per element of the reader, none transcendental
 *   (RMSNorm's rsqrt of the mean square per row, recomputed for each element of the row, costs less
 *   than a kernel and a tensor);
 * - n is a concatenation (sched_fusible_cat), or n is pointwise and feeds one;
 * - n is pointwise and its reader is a sum that computes its input (sched_takes_prologue);
 * - or, read several times, each reader recomputes it (recomputed).
 * The broadcast, concatenation and recomputation rules are the GPU's: there recomputing costs float
 * instructions in a memory-bound kernel; the CPU computes in double in loops that must vectorize
 * (DenseNet-121's per-channel rsqrt moved into its norms' loops: 36 -> 41 ms on two cores).
 * It saves writing and reading the intermediate tensor: two passes over its bytes, and a launch. */
static bool fusible(Schedule *s, const Node *n) {
  Value *v = n->outs[0];
  Node *u = s->reader[v->id];
  bool gpu = s->g->ctx->cuda;
  if (s->uses[v->id] != 1) return gpu && recomputed(s, n);
  if (sched_fusible_cat(s, n)) return true;
  if (!sched_is_pointwise(n)) return false;
  if (sched_is_pointwise(u) && value_same_shape(s->g, v, u->outs[0])) return true;
  if (gpu && sched_is_pointwise(u) && !epilogue_reader(s, u) && bcast_cost(s, n) <= SCHED_BCAST_NODES) return true;
  return sched_fusible_cat(s, u) || sched_takes_prologue(s->g, u, v);
}

/* Why u (v's last reader) cannot join the epilogue after value v, or NULL when it can: then the
 * storages of u's other operands join the chain's (*roots, *nroots: the epilogue's tensors, one
 * per storage, SCHED_EPI_MAX at most). */
static const char *epilogue_why(Schedule *s, Value *v, Node *u, bool wide, int *roots, int *nroots) {
  Ctx *c = s->g->ctx;
  PwPlan plan;
  const char *why = readers_why(s, v);
  if (why) return why;
  if (!sched_is_pointwise(u)) return "its reader is not pointwise";
  if (sched_test_miscompiled(u)) return "GCC_GRAPH_TEST_MISCOMPILE names its reader's op";
  if (wide && lt_widen(u, v)) return NULL;   /* a 16-bit product's widening: cuBLASLt writes float32 */
  if (u->outs[0]->dtype != v->dtype) return "its reader changes the dtype";
  if (!value_same_shape(s->g, v, u->outs[0])) return "its reader's output has another shape";
  if (pw_plan(c, u, &plan) || !plan.use_float) return "its reader computes in integers";
  int q[SCHED_EPI_MAX + 1], nq = *nroots, nt = 0;
  memcpy(q, roots, sizeof *q * (size_t)nq);
  FOR_TENSOR_ARGS(u, a, {
    if (++nt > 4) return "its reader has more than four tensor operands";
    if (a == v) continue;
    if (!s->has_layout[a->id]) return arena_printf(c->arena, "operand %s is computed after the product", gg_quote(c, a->name));
    if (a->def && s->role[a->def->id] == SN_FUSED) return arena_printf(c->arena, "operand %s is computed inside its reader's loop", gg_quote(c, a->name));
    bool row = wide && lt_bias(s->g, u, v) == a && layout_is_contiguous(s->g, c->arena, &s->layout[a->id]);   /* cuBLASLt's bias */
    if (!row && !(const_numel(a) == 1 || (value_same_shape(s->g, a, v) && layout_is_contiguous(s->g, c->arena, &s->layout[a->id]))))
      return arena_printf(c->arena, "operand %s broadcasts or is a strided view (the epilogue reads operands at the output's index)", gg_quote(c, a->name));
    int r = s->storage[a->id];   /* one pointer per storage */
    int k = 0;
    while (k < nq && q[k] != r) k++;
    if (k == nq) {
      if (nq == SCHED_EPI_MAX) return "more than eight tensors read by the epilogue";
      q[nq++] = r;
    }
  })
  memcpy(roots, q, sizeof *q * (size_t)nq);
  *nroots = nq;
  return NULL;
}

/* n's epilogue: the chain of pointwise nodes after it, each the only reader of the one before (n's
 * output first), over the same shape and dtype (epilogue_dtype), each other operand
 * a scalar, a single element, or a tensor of that shape, contiguous and already computed (a
 * residual). On the CPU the runtime applies them to each finished tile while it is in cache (gg_epi,
 * gg_rt.h); on the GPU a kernel applies them in place right after the product (emit_cuda.c). */
static void epilogue(Schedule *s, Node *n) {
  Value *v = n->outs[0];
  if (!epilogue_dtype(s->g, n)) return;
  Node *chain[SCHED_CHAIN_MAX];
  int nc = 0, roots[SCHED_EPI_MAX + 1], nroots = 0;
  while (nc < SCHED_CHAIN_MAX) {
    Node *u = s->reader[v->id];
    if (!u) break;
    const char *why = epilogue_why(s, v, u, !s->g->ctx->train && lt_only(s->g, n) && (nc == 0 || (nc == 1 && lt_widen(chain[0], n->outs[0]))), roots, &nroots);
    if (why) {   /* noted where a pointwise node could have come next */
      if (s->pw_read[v->id]) refuse(s, nc ? chain[nc - 1] : n, s->uses[v->id] == 1 ? u : NULL, why);
      break;
    }
    chain[nc++] = u;
    v = u->outs[0];
  }
  Value *bias, *res;
  bool relu;
  if (lt_only(s->g, n))   /* the longest start of the chain cuBLASLt applies */
    while (nc > 0 && !sched_lt_epilogue(s->g, n, chain, nc, &bias, &res, &relu)) nc--;
  if (!nc) return;
  Ctx *c = s->g->ctx;
  s->chain[n->id] = arena_array(c->arena, (size_t)nc, sizeof *chain);
  memcpy(s->chain[n->id], chain, sizeof *chain * (size_t)nc);
  s->nchain[n->id] = nc;
  for (int k = 0; k < nc; k++) {
    s->role[chain[k]->id] = SN_EPILOGUE;
    s->into[chain[k]->id] = n;
    gg_log(c, LOG_FUSION, "node %s (%s) applied in the epilogue of %s (%s)", gg_quote(c, chain[k]->name), chain[k]->op->name, gg_quote(c, n->name), n->op->name);
  }
}

/* A fused attention (kept whole for the target's kernel) of rank 4 and static sizes whose only reader
 * permutes it keeping D last (view_perm): transpose(1, 2), as every transformer does before merging
 * the heads, nn.MultiheadAttention's permute(2, 0, 1, 3), any other; both targets' kernels store
 * through the output's strides (row, head, batch), D contiguous. Its output is laid out in the
 * reader's order (*perm: dim i of the reader's output is dim perm[i] of the attention's), so that the
 * permuted value is contiguous and the reshape after it a view, not a copy. */
bool sched_attention_order(const Schedule *s, const Node *n, int perm[4]) {
  if (!n->op || strcmp(n->op->name, "scaled_dot_product_attention") || n->nouts != 1 || n->outs[0]->rank != 4) return false;
  Value *y = n->outs[0];
  const Node *u = s->reader[y->id];
  int64_t k;
  for (int d = 0; d < 4; d++)
    if (!expr_is_const(y->sizes[d], &k)) return false;
  if (s->uses[y->id] != 1 || !u || !view_perm(u, 4, perm)) return false;
  bool moved = false;
  for (int i = 0; i < 4; i++) moved |= perm[i] != i;
  return perm[3] == 3 && moved;
}

/* The strides of a [B, H, L, D] value laid out in the order perm (sched_attention_order) */
void sched_order_strides(Arena *a, const Value *y, const int perm[4], const Expr **st) {
  int64_t z[4], inner = 1;
  for (int d = 0; d < 4; d++) expr_is_const(y->sizes[d], &z[d]);
  for (int i = 3; i >= 0; i--) {
    st[perm[i]] = expr_const(a, inner);
    inner *= z[perm[i]];
  }
}

/* A product x @ w with w a matrix (linear, matmul) whose x rows (every dim but the last, which is
 * contiguous) fill a dense block in an order other than row-major: a linear layer on a transposed
 * sequence (nn.MultiheadAttention's [L, N, E] view of a batch-first input in ViT). Computed as one
 * product over the rows in memory order, its output laid out in the same order: ostrides are x's
 * row strides divided by K, times N (else a batch of skinny products, one per row of the outer dim:
 * ViT-B/16's in-projection ran as 197 products of 16 rows). a: x's layout; static sizes. */
bool sched_rows_permuted(const Node *n, const Layout *a, const Value *w, const Value *y, const Expr **ostrides, Arena *ar) {
  EmitFn f = n->op ? n->op->emit : NULL;
  int r = a->rank;
  int64_t st[GG_MAX_RANK], sz[GG_MAX_RANK], K, N, one;
  if ((f != emit_linear && f != emit_matmul) || r < 3 || w->rank != 2 || y->rank != r || !expr_is_const(a->strides[r - 1], &one) || one != 1 ||
      !expr_is_const(a->sizes[r - 1], &K) || !expr_is_const(y->sizes[r - 1], &N))
    return false;
  int ord[GG_MAX_RANK], m = 0;
  for (int d = 0; d < r - 1; d++) {
    if (!expr_is_const(a->sizes[d], &sz[d]) || !expr_is_const(a->strides[d], &st[d])) return false;
    if (sz[d] != 1) ord[m++] = d;
  }
  for (int i = 1; i < m; i++)   /* the rows' dims by stride, outermost first */
    for (int j = i; j > 0 && st[ord[j]] > st[ord[j - 1]]; j--) { int t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t; }
  bool natural = true;
  int64_t inner = K;
  for (int i = m - 1; i >= 0; i--) {
    if (st[ord[i]] != inner) return false;
    inner *= sz[ord[i]];
    natural &= i == 0 || ord[i] > ord[i - 1];
  }
  if (natural || m < 2) return false;   /* row-major already: emit_ops.c's fold_batch_rows */
  for (int d = 0; d < r - 1; d++) ostrides[d] = expr_const(ar, sz[d] == 1 ? 0 : st[d] / K * N);
  ostrides[r - 1] = expr_const(ar, 1);
  return true;
}

int emit_norm(struct Em *, struct Node *);

/* On the GPU a norm read by a cast that narrows its float result (to bfloat16 before a product, under
 * --precision bf16) stores the narrow type itself: its epilogue is that cast (emit_norm). Read by
 * nothing else, the norm stores only the narrow type; read by others too (a post-norm block's norm is
 * also its residual: BERT's), it stores both, its own type and the cast's (sched_norm_second), in one
 * pass. The same bits: the row kernel computes the float32 (float64) value the cast would have read,
 * and rounds it once either way. On the CPU it computes float32 rows in double, where rounding twice
 * (to float32, then to the narrow type) can differ from rounding once. */
static Node *norm_cast(const Schedule *s, const Node *n) {
  if (!s->g->ctx->cuda || !n->op || n->op->emit != emit_norm || n->nouts != 1) return NULL;
  const Value *y = n->outs[0];
  if (s->uses[y->id] == 1) {
    Node *u = s->reader[y->id];
    return sched_is_float_cast(u) && dtype_info(u->outs[0]->dtype)->size < dtype_info(y->dtype)->size ? u : NULL;
  }
  for (int k = 0; k < s->g->nnodes; k++) {   /* the first narrowing cast among its readers */
    Node *u = s->g->nodes[k];
    if (u->op && sched_is_float_cast(u) && u->args[0].k == AK_TENSOR && u->args[0].u.t == y &&
        dtype_info(u->outs[0]->dtype)->size < dtype_info(y->dtype)->size && !is_output(s, u->outs[0]))
      return u;
  }
  return NULL;
}

/* The narrow copy that norm n stores beside its own value (norm_cast with other readers), or NULL */
Value *sched_norm_second(const Schedule *s, const Node *n) {
  return s->nchain[n->id] && n->op && n->op->emit == emit_norm && s->uses[n->outs[0]->id] > 1 ? s->chain[n->id][0]->outs[0] : NULL;
}

/* A fresh tensor for value v: contiguous, its own storage. */
static void fresh(Schedule *s, Value *v) {
  layout_contiguous(s->g->ctx->arena, &s->layout[v->id], v->rank, v->sizes);
  s->storage[v->id] = v->id;
  s->has_layout[v->id] = true;
}

Schedule *schedule_graph(Graph *g) {
  Ctx *c = g->ctx;
  Arena *a = c->arena;
  Schedule *s = arena_alloc(a, sizeof *s);
  size_t nv = (size_t)g->nvalues + 1, nn = (size_t)(g->nvalues + g->nnodes) + 1;
  s->g = g;
  s->uses = arena_array(a, nv, sizeof *s->uses);
  s->reader = arena_array(a, nv, sizeof *s->reader);
  s->pw_read = arena_array(a, nv, sizeof *s->pw_read);
  s->layout = arena_array(a, nv, sizeof *s->layout);
  s->has_layout = arena_array(a, nv, sizeof *s->has_layout);
  s->storage = arena_array(a, nv, sizeof *s->storage);
  s->role = arena_array(a, nn, sizeof *s->role);
  s->into = arena_array(a, nn, sizeof *s->into);
  s->chain = arena_array(a, nn, sizeof *s->chain);
  s->nchain = arena_array(a, nn, sizeof *s->nchain);
  s->rows_permuted = arena_array(a, nn, sizeof *s->rows_permuted);
  /* who reads what: fusion needs single readers */
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    bool pw = sched_is_pointwise(n);
    if (runs(n)) FOR_TENSOR_ARGS(n, v, { s->uses[v->id]++; s->reader[v->id] = n; s->pw_read[v->id] |= pw; })
  }
  for (int i = 0; i < g->noutputs; i++) s->uses[g->outputs[i].v->id] += 2;
  s->rd_start = arena_array(a, nv + 1, sizeof *s->rd_start);   /* every reader, by value: rd[rd_start[v] .. rd_start[v + 1]) */
  for (int k = 0; k < g->nnodes; k++)
    if (runs(g->nodes[k])) FOR_TENSOR_ARGS(g->nodes[k], v, { s->rd_start[v->id + 1]++; })
  for (size_t i = 1; i <= nv; i++) s->rd_start[i] += s->rd_start[i - 1];
  s->rd = arena_array(a, (size_t)s->rd_start[nv] + 1, sizeof *s->rd);
  int *fill = arena_array(a, nv + 1, sizeof *fill);
  for (int k = 0; k < g->nnodes; k++)
    if (runs(g->nodes[k])) FOR_TENSOR_ARGS(g->nodes[k], v, { s->rd[s->rd_start[v->id] + fill[v->id]++] = g->nodes[k]; })
  /* graph inputs: user inputs contiguous, a stored weight as its storage has it */
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    fresh(s, v);
    if (v->weight && v->input != IN_USER) {
      Layout *l = &s->layout[v->id];
      l->offset = expr_const(a, v->weight->offset);
      for (int d = 0; d < v->rank; d++) l->strides[d] = expr_const(a, v->weight->strides[d]);
    }
  }
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k], *cast;
    if (!n->op) continue;   /* the emitter names it */
    if (n->op->emit == emit_view && !sched_is_float_cast(n)) {
      Value *x = n->args[0].u.t;
      if (!x || !s->has_layout[x->id]) continue;   /* the emitter says it has no storage */
      Layout outs[64];
      int r = n->nouts <= 64 ? view_layouts(g, n, &s->layout[x->id], outs) : VIEW_COPY;
      if (r < 0) return NULL;
      if (r == VIEW_COPY) { fresh(s, n->outs[0]); continue; }
      bool mask = !strcmp(n->op->name, "native_dropout");   /* its mask has no storage */
      for (int i = 0; i < (mask ? 1 : n->nouts); i++) {
        Value *y = n->outs[i];
        s->layout[y->id] = outs[i];
        s->storage[y->id] = s->storage[x->id];
        s->has_layout[y->id] = true;
      }
      continue;
    }
    if (sched_is_pointwise(n) || sched_fusible_cat(s, n)) {
      Value *ov = n->outs[0];
      Node *u = s->reader[ov->id];
      if (s->role[n->id] == SN_EPILOGUE && sched_norm_second(s, s->into[n->id])) { fresh(s, ov); continue; }   /* a norm's second output */
      if (s->role[n->id] == SN_EPILOGUE) {   /* its result is in the product's output */
        Value *p = s->into[n->id]->outs[0];
        s->layout[ov->id] = s->layout[p->id];
        s->storage[ov->id] = s->storage[p->id];
        s->has_layout[ov->id] = true;
        continue;
      }
      if (fusible(s, n)) {   /* computed where it is read: no storage */
        s->role[n->id] = SN_FUSED;
        s->into[n->id] = u;
        s->nfused++;
        s->has_layout[ov->id] = true;
        if (s->uses[ov->id] > 1)
          gg_log(c, LOG_FUSION, "node %s (%s) computed again inside the loop of each of its %d readers (the last %s)", gg_quote(c, n->name), n->op->name,
                 s->uses[ov->id], gg_quote(c, u->name));
        else
          gg_log(c, LOG_FUSION, "node %s (%s) computed inside the loop of its only reader %s (%s)", gg_quote(c, n->name), n->op->name, gg_quote(c, u->name),
                 u->op->name);
        continue;
      }
      const char *why = readers_why(s, ov);
      if (why && s->pw_read[ov->id]) refuse(s, n, NULL, why);
      else if (!why && u && sched_is_pointwise(u))
        refuse(s, n, u, !c->cuda ? "its reader's output has another shape (a broadcast would compute it more than once)"
                        : epilogue_reader(s, u) ? "its reader's output has another shape, and the reader may join a product's epilogue"
                                                : "its reader's output has another shape, and a broadcast would repeat it for every element of it (more than "
                                                  "4 nodes, or a transcendental function)");
    }
    for (int i = 0; i < n->nouts; i++) if (n->outs[i]->kind == VK_TENSOR) fresh(s, n->outs[i]);
    int perm[4];
    if (sched_attention_order(s, n, perm)) sched_order_strides(a, n->outs[0], perm, s->layout[n->outs[0]->id].strides);
    if (takes_epilogue(n) && n->args[0].k == AK_TENSOR && n->args[1].k == AK_TENSOR && s->has_layout[n->args[0].u.t->id] && !is_output(s, n->outs[0]) &&
        sched_rows_permuted(n, &s->layout[n->args[0].u.t->id], n->args[1].u.t, n->outs[0], s->layout[n->outs[0]->id].strides, a)) {
      s->rows_permuted[n->id] = true;   /* its output is not contiguous: no epilogue reads it at its index */
      Node *u = s->reader[n->outs[0]->id];
      if (s->pw_read[n->outs[0]->id]) refuse(s, n, s->uses[n->outs[0]->id] == 1 ? u : NULL, "the product's output is laid out in its input's row order (no epilogue)");
    } else if (takes_epilogue(n)) epilogue(s, n);
    else if ((cast = norm_cast(s, n))) {
      s->chain[n->id] = arena_array(a, 1, sizeof *s->chain[n->id]);
      s->chain[n->id][0] = cast;
      s->nchain[n->id] = 1;
      s->role[cast->id] = SN_EPILOGUE;
      s->into[cast->id] = n;
      gg_log(c, LOG_FUSION, "node %s (%s) applied in the store of %s (%s)", gg_quote(c, cast->name), cast->op->name, gg_quote(c, n->name), n->op->name);
    }
  }
  return s;
}

Value *sched_stored(const Schedule *s, const Node *n) {
  if (sched_norm_second(s, n)) return n->outs[0];   /* its own type, and the cast's beside it */
  Value *last = s->nchain[n->id] ? s->chain[n->id][s->nchain[n->id] - 1]->outs[0] : NULL;
  return last && last->dtype != n->outs[0]->dtype ? last : n->outs[0];
}

/* The kernel that computes node n: n itself, or the node it is fused or applied in. */
const Node *sched_kernel_of(const Schedule *s, const Node *n) {
  while (s->role[n->id] != SN_KERNEL && s->into[n->id]) n = s->into[n->id];
  return n;
}

/* The schedule as text (--debug-dir's NN-schedule.txt): a line per node that runs code, saying where
 * it is computed, then the fusions refused. */
void schedule_print(const Schedule *s, FILE *f) {
  Ctx *c = s->g->ctx;
  for (int k = 0; k < s->g->nnodes; k++) {
    const Node *n = s->g->nodes[k];
    if (!n->op) continue;
    fprintf(f, "%s (%s): ", gg_quote(c, n->name), n->op->name);
    if (s->role[n->id] == SN_FUSED) fprintf(f, "computed inside the loop of %s\n", gg_quote(c, s->into[n->id]->name));
    else if (s->role[n->id] == SN_EPILOGUE) fprintf(f, "in the epilogue of %s\n", gg_quote(c, s->into[n->id]->name));
    else if (n->op->emit == emit_view && !sched_is_float_cast(n)) fputs("a view, or a copy where no strides describe it\n", f);
    else {
      fputs("its own kernel", f);
      for (int j = 0; j < s->nchain[n->id]; j++) fprintf(f, "%s%s", j ? ", " : ", epilogue: ", gg_quote(c, s->chain[n->id][j]->name));
      fputc('\n', f);
    }
  }
  for (int k = 0; k < s->nrefused; k++) {
    const Refusal *r = &s->refused[k];
    fprintf(f, "refused: %s%s%s: %s\n", gg_quote(c, r->node), r->reader ? " into " : "", r->reader ? gg_quote(c, r->reader) : "", r->why);
  }
}
