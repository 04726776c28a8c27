/* partition.c: split the joint graph of --train into a forward and a backward graph.
 * Requires: the verified joint graph autograd() made. Guarantees: g becomes the forward (the nodes
 * its outputs and buffer updates need, plus an OUT_SAVED output per value the backward reads), and
 * *bwd a new graph whose inputs are the same weights (same order), the saved values, then the
 * cotangents, whose nodes are the backward plus any forward nodes it recomputes, and whose outputs
 * are the gradients (OUT_GRAD). Parameters and buffers the forward does not change are read by the
 * backward directly, never saved.
 *
 * Which values to save is a minimum cut, as in AOTAutograd's min_cut_rematerialization_partition:
 * each value the forward makes is an edge whose capacity is its size in bytes; the backward's reads
 * are tied to the sink; values that cannot be recomputed (user inputs, buffers the forward updates,
 * outputs of matrix products, convolutions, reductions and anything not in the cheap set below) are
 * tied to the source. The cut is the cheapest set of values from which the backward can recompute
 * everything else it reads with cheap ops (pointwise ops, views, casts, fills). With save_all
 * (--partition default) every forward value the backward reads is saved and nothing is recomputed. */
#include "gg.h"

#include <string.h>

/* Ops the backward may recompute: pointwise work, views and fills (never matrix products,
 * convolutions, pooling or reductions). */
static bool recomputable(const Node *n) {
  if (!n->op) return false;
  if (n->op->pwf || n->op->view) return true;
  static const char *const cheap[] = {"reshape", "_unsafe_view", "clone", "alias", "contiguous", "_to_copy", "to.dtype", "expand",
                                      "zeros", "ones", "full", "scalar_tensor", "zeros_like", "ones_like", "full_like", "gelu",
                                      "where.self", "where.ScalarOther", "where.ScalarSelf", "masked_fill.Scalar", "lift_fresh_copy", NULL};
  for (const char *const *c = cheap; *c; c++)
    if (!strcmp(*c, n->op->name)) return true;
  return false;
}

static int64_t bytes_of(const Graph *g, const Value *v) {
  int64_t n = dtype_info(v->dtype) ? dtype_info(v->dtype)->size : 8;
  for (int d = 0; d < v->rank; d++) n *= expr_hint(g, v->sizes[d]);
  return n;
}

/* ---------------------------------------------------------------- max flow (Dinic) */

typedef struct Edge { int to, next; int64_t cap; } Edge;
typedef struct Net { Edge *e; int ne, cap; int *head, *level, *it; int n; Arena *a; } Net;
static const int64_t INF = INT64_MAX / 4;

static void add_edge(Net *f, int u, int v, int64_t c) {
  if (f->ne + 2 > f->cap) {
    int cap = f->cap ? f->cap * 2 : 1024;
    Edge *e = arena_array(f->a, (size_t)cap, sizeof *e);
    if (f->ne) memcpy(e, f->e, sizeof *e * (size_t)f->ne);
    f->e = e;
    f->cap = cap;
  }
  f->e[f->ne] = (Edge){v, f->head[u], c};
  f->head[u] = f->ne++;
  f->e[f->ne] = (Edge){u, f->head[v], 0};
  f->head[v] = f->ne++;
}

static bool bfs(Net *f, int s, int t, int *queue) {
  for (int i = 0; i < f->n; i++) f->level[i] = -1;
  int qh = 0, qt = 0;
  queue[qt++] = s;
  f->level[s] = 0;
  while (qh < qt) {
    int u = queue[qh++];
    for (int k = f->head[u]; k >= 0; k = f->e[k].next)
      if (f->e[k].cap > 0 && f->level[f->e[k].to] < 0) { f->level[f->e[k].to] = f->level[u] + 1; queue[qt++] = f->e[k].to; }
  }
  return f->level[t] >= 0;
}

static int64_t dfs(Net *f, int u, int t, int64_t pushed, int depth) {
  if (u == t || !pushed || depth > f->n) return pushed;
  for (; f->it[u] >= 0; f->it[u] = f->e[f->it[u]].next) {
    Edge *e = &f->e[f->it[u]];
    if (e->cap <= 0 || f->level[e->to] != f->level[u] + 1) continue;
    int64_t got = dfs(f, e->to, t, pushed < e->cap ? pushed : e->cap, depth + 1);
    if (got) { e->cap -= got; f->e[f->it[u] ^ 1].cap += got; return got; }
  }
  return 0;
}

static void max_flow(Net *f, int s, int t) {
  int *queue = arena_array(f->a, (size_t)f->n + 1, sizeof *queue);
  while (bfs(f, s, t, queue)) {
    for (int i = 0; i < f->n; i++) f->it[i] = f->head[i];
    while (dfs(f, s, t, INF, 0)) {}
  }
  bfs(f, s, t, queue);   /* level >= 0: reachable from the source in the residual network */
}

/* ---------------------------------------------------------------- the split */

static Value *clone_value(Graph *b, const Value *v) {
  Value *n = graph_new_value(b, v->name);
  if (!n) return NULL;
  n->kind = v->kind;
  n->dtype = v->dtype;
  n->rank = v->rank;
  n->sizes = v->sizes;
  n->strides = v->strides;
  n->requires_grad = v->requires_grad;
  n->declared = v->declared;
  n->sym = v->sym;
  return n;
}

/* The backward's recomputed forward nodes each run right before the first node that reads what they
 * make (as AOTAutograd reorders its backward to mimic the autograd engine). In the joint graph's order
 * they all come first, and each value they make would stay alive across the whole backward: GPT-2
 * small's backward held 0.8 GB of recomputed activations that way. The other nodes keep their order. */
static void sink_recomputed(Graph *b, const bool *rec) {
  Arena *ar = b->ctx->arena;
  int n = b->nnodes, m = 0, *stack = arena_array(ar, 2 * (size_t)n + 1, sizeof *stack), *arg = arena_array(ar, 2 * (size_t)n + 1, sizeof *arg);
  Node **order = arena_array(ar, (size_t)n + 1, sizeof *order);
  bool *done = arena_array(ar, (size_t)n + 1, sizeof *done);
  for (int k = 0; k <= n; k++) {
    if (k < n && rec[k]) continue;
    /* node k (or, past the end, whatever recomputed node nothing read: none in a pruned graph),
     * after the recomputed nodes it reads, depth first without recursion */
    int top = 0;
    if (k < n) stack[top++] = k, arg[0] = 0;
    else for (int j = 0; j < n; j++) if (!done[j]) stack[top++] = j, arg[top - 1] = 0;
    while (top) {
      int at = stack[top - 1];
      Node *x = b->nodes[at];
      int next = -1, seen = 0;
      FOR_TENSOR_ARGS(x, v, {
        if (next < 0 && seen++ >= arg[top - 1] && v->def && rec[v->def->id] && !done[v->def->id]) next = v->def->id;
      })
      if (next >= 0) { arg[top - 1] = seen; stack[top] = next; arg[top++] = 0; continue; }
      top--;
      if (!done[at]) { done[at] = true; order[m++] = x; }
    }
  }
  for (int k = 0; k < n; k++) { b->nodes[k] = order[k]; b->nodes[k]->id = k; }
}

int partition(Graph *g, bool save_all, Graph **bwd_out, PartitionStats *stats) {
  Ctx *c = g->ctx;
  Arena *ar = c->arena;
  int nv = g->nvalues;
  /* which nodes the forward needs (its outputs and buffer updates), and which the gradients need */
  bool *fwd = arena_array(ar, (size_t)g->nnodes + 1, sizeof *fwd), *bw = arena_array(ar, (size_t)g->nnodes + 1, sizeof *bw);
  bool *need = arena_array(ar, (size_t)nv + 1, sizeof *need);
  for (int pass = 0; pass < 2; pass++) {
    memset(need, 0, sizeof *need * (size_t)nv);
    for (int i = 0; i < g->noutputs; i++)
      if ((g->outputs[i].kind == OUT_GRAD) == (pass == 1)) need[g->outputs[i].v->id] = true;
    for (int k = g->nnodes - 1; k >= 0; k--) {
      Node *n = g->nodes[k];
      bool used = false;
      for (int i = 0; i < n->nouts; i++) used |= need[n->outs[i]->id];
      if (!used || (pass == 1 && fwd[k])) continue;
      (pass ? bw : fwd)[k] = true;
      FOR_TENSOR_ARGS(n, v, need[v->id] = true)
    }
  }
  bool *mutated = arena_array(ar, (size_t)nv + 1, sizeof *mutated), *tangent = arena_array(ar, (size_t)nv + 1, sizeof *tangent);
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].kind == OUT_BUFFER_MUTATION)
      for (int j = 0; j < g->ninputs; j++)
        if (g->inputs[j]->fqn && g->outputs[i].target_name && !strcmp(g->inputs[j]->fqn, g->outputs[i].target_name)) mutated[g->inputs[j]->id] = true;
  for (int i = 0; i < g->ninputs; i++) tangent[g->inputs[i]->id] = g->inputs[i]->input == IN_USER && !strncmp(g->inputs[i]->name, "tangent.", 8);
  /* values the backward may take from the forward: what forward nodes define, and user inputs and
   * updated buffers; weights the forward leaves alone are free */
  Node **def = arena_array(ar, (size_t)nv + 1, sizeof *def);
  bool *avail = arena_array(ar, (size_t)nv + 1, sizeof *avail);
  for (int k = 0; k < g->nnodes; k++)
    for (int i = 0; i < g->nodes[k]->nouts; i++) if (fwd[k]) { def[g->nodes[k]->outs[i]->id] = g->nodes[k]; avail[g->nodes[k]->outs[i]->id] = true; }
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if ((v->input == IN_USER && !tangent[v->id]) || mutated[v->id]) avail[v->id] = true;
  }
  bool *saved = arena_array(ar, (size_t)nv + 1, sizeof *saved), *recompute = arena_array(ar, (size_t)g->nnodes + 1, sizeof *recompute);
  bool *read = arena_array(ar, (size_t)nv + 1, sizeof *read);   /* read by a backward node */
  for (int k = 0; k < g->nnodes; k++)
    if (bw[k]) FOR_TENSOR_ARGS(g->nodes[k], v, if (avail[v->id]) read[v->id] = true)
  for (int i = 0; i < g->noutputs; i++)   /* a gradient that is a forward value itself */
    if (g->outputs[i].kind == OUT_GRAD && avail[g->outputs[i].v->id]) read[g->outputs[i].v->id] = true;
  int64_t default_bytes = 0;
  int default_count = 0;
  for (int v = 0; v < nv; v++) if (read[v] && g->values[v]->kind == VK_TENSOR) { default_bytes += bytes_of(g, g->values[v]); default_count++; }
  if (save_all) {
    for (int v = 0; v < nv; v++) saved[v] = read[v] && g->values[v]->kind == VK_TENSOR;
  } else {
    /* network: value v is nodes 2v (in) and 2v+1 (out); source 2nv, sink 2nv+1 */
    Net f = {.n = 2 * nv + 2, .a = ar};
    f.head = arena_array(ar, (size_t)f.n, sizeof *f.head);
    f.level = arena_array(ar, (size_t)f.n, sizeof *f.level);
    f.it = arena_array(ar, (size_t)f.n, sizeof *f.it);
    for (int i = 0; i < f.n; i++) f.head[i] = -1;
    int S = 2 * nv, Tk = 2 * nv + 1;
    for (int v = 0; v < nv; v++) {
      if (!avail[v] || g->values[v]->kind != VK_TENSOR) continue;
      add_edge(&f, 2 * v, 2 * v + 1, bytes_of(g, g->values[v]) + 1);   /* +1: of equal sizes, save fewer */
      if (!def[v] || !recomputable(def[v])) add_edge(&f, S, 2 * v, INF);
      if (read[v]) add_edge(&f, 2 * v + 1, Tk, INF);
      if (def[v]) FOR_TENSOR_ARGS(def[v], u, if (avail[u->id] && u->kind == VK_TENSOR) add_edge(&f, 2 * u->id + 1, 2 * v, INF))
    }
    max_flow(&f, S, Tk);
    for (int v = 0; v < nv; v++) saved[v] = avail[v] && g->values[v]->kind == VK_TENSOR && f.level[2 * v] >= 0 && f.level[2 * v + 1] < 0;
  }
  /* forward nodes the backward recomputes: those defining values it reads that are not saved */
  bool *want = arena_array(ar, (size_t)nv + 1, sizeof *want);
  for (int v = 0; v < nv; v++) want[v] = read[v];
  for (int k = g->nnodes - 1; k >= 0; k--) {
    Node *n = g->nodes[k];
    if (!fwd[k]) continue;
    bool w = false;
    for (int i = 0; i < n->nouts; i++) w |= want[n->outs[i]->id] && !saved[n->outs[i]->id];
    if (!w) continue;
    if (!recomputable(n)) return gg_error(c, "%s: node %s: the partition would recompute %s (internal error)", g->path, gg_quote(c, n->name), n->op->name);
    recompute[k] = true;
    FOR_TENSOR_ARGS(n, v, if (avail[v->id]) want[v->id] = true)
  }
  /* the backward graph */
  Graph *b = arena_alloc(ar, sizeof *b);
  b->ctx = c;
  b->path = g->path;
  b->schema_major = g->schema_major;
  b->schema_minor = g->schema_minor;
  b->ir = g->ir;
  b->torch_version = g->torch_version;
  b->syms = g->syms;
  b->nsyms = g->nsyms;
  b->cap_syms = g->cap_syms;
  Value **map = arena_array(ar, (size_t)nv + 1, sizeof *map);
  int nsaved = 0;
  for (int v = 0; v < nv; v++) nsaved += saved[v];
  b->inputs = arena_array(ar, (size_t)(g->ninputs + nsaved) + 1, sizeof *b->inputs);
  int user = 0;
  for (int i = 0; i < g->ninputs; i++) {   /* the weights, in the forward's order */
    Value *v = g->inputs[i];
    if (v->input == IN_USER) continue;
    Value *n = clone_value(b, v);
    if (!n) return -1;
    n->input = v->input;
    n->fqn = v->fqn;
    n->weight = v->weight;
    n->input_index = b->ninputs;
    b->inputs[b->ninputs++] = map[v->id] = n;
  }
  OutputSpec *fo = arena_array(ar, (size_t)(g->noutputs + nsaved) + 1, sizeof *fo);
  int nfo = 0;
  for (int i = 0; i < g->noutputs; i++) if (g->outputs[i].kind != OUT_GRAD) fo[nfo++] = g->outputs[i];
  int64_t saved_bytes = 0;
  for (int v = 0; v < nv; v++) {
    if (!saved[v]) continue;
    Value *n = clone_value(b, g->values[v]);
    if (!n) return -1;
    n->input = IN_USER;
    n->user_index = user++;
    n->input_index = b->ninputs;
    n->declared = true;
    b->inputs[b->ninputs++] = map[v] = n;
    fo[nfo++] = (OutputSpec){OUT_SAVED, g->values[v], g->values[v]->name};
    saved_bytes += bytes_of(g, g->values[v]);
  }
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (!tangent[v->id]) continue;
    Value *n = clone_value(b, v);
    if (!n) return -1;
    n->input = IN_USER;
    n->user_index = user++;
    n->input_index = b->ninputs;
    b->inputs[b->ninputs++] = map[v->id] = n;
  }
  b->nodes = arena_array(ar, (size_t)g->nnodes + 1, sizeof *b->nodes);
  bool *rec = arena_array(ar, (size_t)g->nnodes + 1, sizeof *rec);   /* by backward node id: a recomputed forward node */
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (!recompute[k] && !bw[k]) continue;
    rec[b->nnodes] = recompute[k];
    Node *m = arena_alloc(ar, sizeof *m);
    *m = *n;
    m->args = arena_array(ar, (size_t)n->op->nargs + 1, sizeof *m->args);
    memcpy(m->args, n->args, sizeof *m->args * (size_t)n->op->nargs);
    for (int i = 0; i < n->op->nargs; i++) {
      Arg *a = &m->args[i];
      if (a->k == AK_TENSOR && !(a->u.t = map[a->u.t->id])) return gg_error(c, "%s: node %s: the backward reads %s, which it has no way to get (internal error)", g->path, gg_quote(c, n->name), gg_quote(c, n->args[i].u.t->name));
      if (a->k == AK_TENSORS) {
        Value **ts = arena_array(ar, (size_t)a->n + 1, sizeof *ts);
        for (int j = 0; j < a->n; j++)
          if (a->u.ts[j] && !(ts[j] = map[a->u.ts[j]->id])) return gg_error(c, "%s: node %s: the backward reads a value it has no way to get (internal error)", g->path, gg_quote(c, n->name));
        a->u.ts = ts;
      }
    }
    m->outs = arena_array(ar, (size_t)n->nouts + 1, sizeof *m->outs);
    for (int i = 0; i < n->nouts; i++) {
      if (!(m->outs[i] = clone_value(b, n->outs[i]))) return -1;
      m->outs[i]->def = m;
      map[n->outs[i]->id] = m->outs[i];
    }
    m->id = b->nnodes;
    b->nodes[b->nnodes++] = m;
  }
  b->cap_nodes = g->nnodes + 1;
  sink_recomputed(b, rec);
  b->outputs = arena_array(ar, (size_t)g->noutputs + 1, sizeof *b->outputs);
  for (int i = 0; i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (o->kind != OUT_GRAD) continue;
    Value *v = map[o->v->id];
    if (!v) return gg_error(c, "%s: gradient of %s has no value in the backward (internal error)", g->path, gg_quote(c, o->target_name));
    b->outputs[b->noutputs++] = (OutputSpec){OUT_GRAD, v, o->target_name};
  }
  int nrecompute = 0;
  for (int k = 0; k < g->nnodes; k++) nrecompute += recompute[k];
  /* the forward: its own nodes, no cotangent inputs, its outputs then the saved values */
  int nf = 0;
  for (int k = 0; k < g->nnodes; k++) if (fwd[k]) { g->nodes[nf] = g->nodes[k]; g->nodes[nf]->id = nf; nf++; }
  g->nnodes = nf;
  int ni = 0;
  for (int i = 0; i < g->ninputs; i++) if (!tangent[g->inputs[i]->id]) g->inputs[ni++] = g->inputs[i];
  g->ninputs = ni;
  g->outputs = fo;
  g->noutputs = nfo;
  if (stats) *stats = (PartitionStats){nsaved, saved_bytes, default_count, default_bytes, nrecompute, b->nnodes, nf};
  if (GG_LOG_ON(c, LOG_PARTITION)) {
    for (int i = 0; i < g->noutputs; i++)
      if (g->outputs[i].kind == OUT_SAVED) gg_log(c, LOG_PARTITION, "save %s (%lld bytes)", gg_quote(c, g->outputs[i].v->name), (long long)bytes_of(g, g->outputs[i].v));
    for (int k = 0; k < b->nnodes; k++)
      if (b->nodes[k]->name && !strstr(b->nodes[k]->name, ".grad")) gg_log(c, LOG_PARTITION, "recompute %s (%s) in the backward", gg_quote(c, b->nodes[k]->name), b->nodes[k]->op->name);
    gg_log(c, LOG_PARTITION, "%s: forward %d nodes, backward %d nodes; saved %d tensors, %lld bytes (saving everything read: %d, %lld)", save_all ? "default" : "min-cut",
           nf, b->nnodes, nsaved, (long long)saved_bytes, default_count, (long long)default_bytes);
  }
  *bwd_out = b;
  return 0;
}
