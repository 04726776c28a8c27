/* schedule.c: the fusion decisions, as data, before any code is written.
 * Requires: a verified, functional, decomposed graph. Guarantees: a Schedule saying, for every node,
 * whether it gets a kernel of its own (SN_KERNEL), is computed inside its only reader's loop
 * (SN_FUSED, pointwise into pointwise over the same shape), or is applied in the epilogue of the
 * product or convolution before it (SN_EPILOGUE: the chain of pointwise nodes after it, in order),
 * and every fusion refused with the reason; and, for every tensor value, its layout (view.c) and the
 * value whose storage it lives in. The emitters (emit.h) write what it says and decide nothing of
 * it; explain and the tests read it. The decisions are made in graph order, the order the code runs. */
#include "gg.h"

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

/* Fusion legality: n is computed inside its only reader's loop when both are pointwise over the same
 * shape (so no element is computed twice) and its value is not an output. It saves writing and
 * reading the intermediate tensor: two passes over its bytes. */
static bool fusible(Schedule *s, const Node *n) {
  if (!sched_is_pointwise(n)) return false;
  Value *v = n->outs[0];
  Node *u = s->reader[v->id];
  return s->uses[v->id] == 1 && ((sched_is_pointwise(u) && value_same_shape(s->g, v, u->outs[0])) || sched_takes_prologue(s->g, u, v));
}

/* Why u (v's last reader) cannot join the epilogue after value v, or NULL when it can: then the
 * storages of u's other operands join the chain's (*roots, *nroots: the epilogue's tensors, one
 * per storage, SCHED_EPI_MAX at most). */
static const char *epilogue_why(Schedule *s, Value *v, Node *u, int *roots, int *nroots) {
  Ctx *c = s->g->ctx;
  PwPlan plan;
  const char *why = readers_why(s, v);
  if (why) return why;
  if (!sched_is_pointwise(u)) return "its reader is not pointwise";
  if (sched_test_miscompiled(u)) return "GCC_GRAPH_TEST_MISCOMPILE names its reader's op";
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
    if (!(const_numel(a) == 1 || (value_same_shape(s->g, a, v) && layout_is_contiguous(s->g, c->arena, &s->layout[a->id]))))
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
 * output first), over the same shape and dtype (float32 or float64), each other operand
 * a scalar, a single element, or a tensor of that shape, contiguous and already computed (a
 * residual). On the CPU the runtime applies them to each finished tile while it is in cache (gg_epi,
 * gg_rt.h); on the GPU a kernel applies them in place right after the product (emit_cuda.c). */
static void epilogue(Schedule *s, Node *n) {
  Value *v = n->outs[0];
  if (v->dtype != DT_F32 && v->dtype != DT_F64) return;
  Node *chain[SCHED_CHAIN_MAX];
  int nc = 0, roots[SCHED_EPI_MAX + 1], nroots = 0;
  while (nc < SCHED_CHAIN_MAX) {
    Node *u = s->reader[v->id];
    if (!u) break;
    const char *why = epilogue_why(s, v, u, roots, &nroots);
    if (why) {   /* noted where a pointwise node could have come next */
      if (s->pw_read[v->id]) refuse(s, nc ? chain[nc - 1] : n, s->uses[v->id] == 1 ? u : NULL, why);
      break;
    }
    chain[nc++] = u;
    v = u->outs[0];
  }
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
  /* who reads what: fusion needs single readers */
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    bool pw = sched_is_pointwise(n);
    FOR_TENSOR_ARGS(n, v, { s->uses[v->id]++; s->reader[v->id] = n; s->pw_read[v->id] |= pw; })
  }
  for (int i = 0; i < g->noutputs; i++) s->uses[g->outputs[i].v->id] += 2;
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
    Node *n = g->nodes[k];
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
    if (sched_is_pointwise(n)) {
      Value *ov = n->outs[0];
      Node *u = s->reader[ov->id];
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
        gg_log(c, LOG_FUSION, "node %s (%s) computed inside the loop of its only reader %s (%s)", gg_quote(c, n->name), n->op->name, gg_quote(c, u->name),
               u->op->name);
        continue;
      }
      const char *why = readers_why(s, ov);
      if (why && s->pw_read[ov->id]) refuse(s, n, NULL, why);
      else if (!why && u && sched_is_pointwise(u)) refuse(s, n, u, "its reader's output has another shape (a broadcast would compute it more than once)");
    }
    for (int i = 0; i < n->nouts; i++) if (n->outs[i]->kind == VK_TENSOR) fresh(s, n->outs[i]);
    if (takes_epilogue(n)) epilogue(s, n);
  }
  return s;
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
