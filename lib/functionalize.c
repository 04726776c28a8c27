/* functionalize.c: in-place ops, views that alias, and buffer mutations become a functional graph.
 * Requires: a verified graph. Guarantees: no node writes into one of its inputs; every later use of
 * a mutated tensor, or of any view of it, reads the new values; every buffer whose value changed is
 * a BUFFER_MUTATION output (the compiled model writes it back into the buffers it holds and reports
 * it). A write into a view becomes a write into its base: the new view value is scattered back
 * through the chain of views (select_scatter, slice_scatter, or the inverse permutation or reshape),
 * and views taken before the write are taken again from the new base when they are next used.
 * aten.batch_norm in training mode becomes _native_batch_norm_legit_functional. */
#include "rewrite.h"

#include <string.h>

typedef struct F {
  Rw r;
  Value **cur;      /* by value id: what a use of the value reads now */
  int *gen;         /* by value id: the base's version cur[] was made at */
  int *ver;         /* by value id of a base: how many writes it has had */
  int nvalues;      /* values of the original graph (later ones are the pass's own) */
  Node **view;      /* by value id: a copy of the view node that made it, as it was before the pass */
} F;

/* A single-output view node, whose output aliases its first argument. */
static bool is_view_node(const Node *n) { return n && n->op && n->op->view && n->nouts == 1 && n->args[0].k == AK_TENSOR; }

/* The tensor whose storage v views (v itself when it is not a view), in the original graph. */
static Value *root_of(const F *f, Value *v) {
  while (v->id < f->nvalues && f->view[v->id]) v = f->view[v->id]->args[0].u.t;
  return v;
}

static Value *resolve(F *f, Value *v);

/* Take the view node vn again, on x. */
static Value *replay(F *f, Node *vn, Value *x) {
  Arg *args = arena_array(f->r.g->ctx->arena, (size_t)vn->op->nargs + 1, sizeof *args);
  memcpy(args, vn->args, sizeof *args * (size_t)vn->op->nargs);
  args[0].u.t = x;
  for (int i = 1; i < vn->op->nargs; i++) if (args[i].k == AK_TENSOR) args[i].u.t = resolve(f, args[i].u.t);
  return rw_node(&f->r, NULL, vn->op, args);
}

/* The value a use of the original value v reads now. */
static Value *resolve(F *f, Value *v) {
  if (!v || v->id >= f->nvalues) return v;
  Value *root = root_of(f, v);
  if (v == root || f->ver[root->id] == 0 || f->gen[v->id] == f->ver[root->id]) return f->cur[v->id];
  /* the base was written since this view was taken: take it again */
  Value *base = resolve(f, f->view[v->id]->args[0].u.t);
  Value *x = base ? replay(f, f->view[v->id], base) : NULL;
  if (!x) return NULL;
  f->cur[v->id] = x;
  f->gen[v->id] = f->ver[root->id];
  return x;
}

/* The functional twin of an in-place op: add_.Tensor -> add.Tensor, relu_ -> relu. */
static const OpDef *functional_twin(const OpDef *op) {
  char name[128];
  const char *dot = strchr(op->name, '.');
  size_t stem = dot ? (size_t)(dot - op->name) : strlen(op->name);
  if (stem < 2 || op->name[stem - 1] != '_' || stem >= sizeof name) return NULL;
  memcpy(name, op->name, stem - 1);
  snprintf(name + stem - 1, sizeof name - (stem - 1), "%s", dot ? dot : "");
  if (!strcmp(name, "zero")) return ops_find("zeros_like");
  if (!strcmp(name, "detach")) return ops_find("alias");
  return ops_find(name);
}

/* Re-home args by name from the in-place op's schema to the twin's. */
static Arg *remap_args(Graph *g, const OpDef *from, const Arg *args, const OpDef *to) {
  Arg *r = arena_array(g->ctx->arena, (size_t)to->nargs + 1, sizeof *r);
  for (int i = 0; i < to->nargs; i++) {
    const char *nm = to->args[i].name;
    int j = ops_arg_index(from, nm);
    if (j < 0 && i == 0) j = 0;   /* dropout_(self) -> dropout(input) */
    if (j >= 0) r[i] = args[j];
    else if (to->args[i].has_default) r[i] = to->args[i].def;
    else r[i].k = AK_NONE;
  }
  return r;
}

/* base with the view that vn takes of it replaced by src: the inverse of one view step. */
static Value *unview(F *f, Node *vn, Value *base, Value *src) {
  Rw *r = &f->r;
  Ctx *c = r->g->ctx;
  const char *name = vn->op->name;
  const Arg *a = vn->args;
  if (!strcmp(name, "select.int")) return CALL(r, NULL, "select_scatter", "self", T(base), "src", T(src), "dim", a[1], "index", a[2]);
  if (!strcmp(name, "slice.Tensor")) return CALL(r, NULL, "slice_scatter", "self", T(base), "src", T(src), "dim", a[1], "start", a[2], "end", a[3], "step", a[4]);
  if (!strcmp(name, "narrow")) {
    Arg end = {.k = AK_INT, .u.i = expr_bin(c->arena, E_ADD, a[2].u.i, a[3].u.i)};
    return CALL(r, NULL, "slice_scatter", "self", T(base), "src", T(src), "dim", a[1], "start", a[2], "end", end);
  }
  if (!strcmp(name, "alias") || !strcmp(name, "detach") || !strcmp(name, "contiguous") || !strncmp(name, "to.", 3)) return src;
  if (!strcmp(name, "transpose.int")) return CALL(r, NULL, "transpose.int", "self", T(src), "dim0", a[1], "dim1", a[2]);
  if (!strcmp(name, "t")) return CALL(r, NULL, "t", "self", T(src));
  if (!strcmp(name, "movedim.int")) return CALL(r, NULL, "movedim.int", "self", T(src), "source", a[2], "destination", a[1]);
  if (!strcmp(name, "permute")) {
    int64_t inv[GG_MAX_RANK], p;
    for (int i = 0; i < a[1].n; i++) {
      expr_is_const(a[1].u.is[i], &p);
      if (p < 0) p += a[1].n;
      inv[p] = i;
    }
    return CALL(r, NULL, "permute", "self", T(src), "dims", INTS(r, a[1].n, inv));
  }
  if (!strcmp(name, "view") || !strcmp(name, "reshape") || !strcmp(name, "_unsafe_view") || !strncmp(name, "flatten", 7) || !strncmp(name, "unflatten", 9) ||
      !strncmp(name, "squeeze", 7) || !strcmp(name, "unsqueeze"))
    return CALL(r, NULL, "reshape", "self", T(src), "shape", EXPRS(r, base->rank, base->sizes));
  gg_error(c, "%s: node %s writes through a view made by %s, which cannot be written back", r->g->path, gg_quote(c, r->orig->name), gg_quote(c, name));
  return NULL;
}

/* The mutated value `self` (an original value) now holds `val`: write it into its base. */
static int write_back(F *f, Value *self, Value *val) {
  Value *root = root_of(f, self);
  /* the outputs of split/chunk/unbind are views too, of a base this pass does not track */
  if (root->def && root->def->op && root->def->op->view)
    return gg_error(f->r.g->ctx, "%s: node %s writes through a view made by %s, which cannot be written back", f->r.g->path,
                    gg_quote(f->r.g->ctx, f->r.orig->name), gg_quote(f->r.g->ctx, root->def->op->name));
  if (self == root) {
    f->cur[root->id] = val;
    f->ver[root->id]++;
    return 0;
  }
  /* the chain of views from the base down to self, and each step's current base */
  Node *chain[64];
  int k = 0;
  for (Value *v = self; v != root; v = f->view[v->id]->args[0].u.t) {
    if (k == 64) return gg_error(f->r.g->ctx, "%s: views nested too deeply", f->r.g->path);
    chain[k++] = f->view[v->id];
  }
  Value *bases[64];
  Value *b = f->cur[root->id];
  for (int i = k - 1; i >= 0; i--) {
    bases[i] = b;
    if (i > 0 && !(b = replay(f, chain[i], b))) return -1;
  }
  Value *y = val;
  for (int i = 0; i < k; i++)
    if (!(y = unview(f, chain[i], bases[i], y))) return -1;
  f->cur[root->id] = y;
  f->ver[root->id]++;
  return 0;
}

/* A batch norm that updates its running statistics in place (aten.batch_norm in training mode,
 * _native_batch_norm_legit) becomes _native_batch_norm_legit_functional, whose two extra outputs
 * are the new statistics, written back into rm and rv (the original values). */
static int stats_outputs(F *f, Node *n, Value *rm, Value *rv) {
  Graph *g = f->r.g;
  Ctx *c = g->ctx;
  const OpDef *fn = ops_find("_native_batch_norm_legit_functional");
  Arg *args = remap_args(g, n->op, n->args, fn);
  Value **outs = arena_array(c->arena, 6, sizeof *outs);
  const char *suffix[] = {"", "_save_mean", "_save_invstd", "_running_mean", "_running_var"};
  for (int i = 0; i < 5; i++) {
    if (i < n->nouts && i < 3) { outs[i] = n->outs[i]; continue; }
    outs[i] = graph_new_value(g, arena_printf(c->arena, "%s%s", n->name, suffix[i]));
    if (!outs[i]) return -1;
    outs[i]->kind = VK_TENSOR;
    outs[i]->def = n;
  }
  n->op = fn;
  n->args = args;
  n->outs = outs;
  n->nouts = 5;
  return write_back(f, rm, outs[3]) || write_back(f, rv, outs[4]) ? -1 : 0;
}

int functionalize(Graph *g) {
  Ctx *c = g->ctx;
  F f = {{.g = g}, NULL, NULL, NULL, g->nvalues, NULL};
  f.view = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *f.view);
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (!is_view_node(n)) continue;
    Node *copy = arena_alloc(c->arena, sizeof *copy);
    *copy = *n;
    copy->args = arena_array(c->arena, (size_t)n->op->nargs + 1, sizeof *copy->args);
    memcpy(copy->args, n->args, sizeof *copy->args * (size_t)n->op->nargs);
    f.view[n->outs[0]->id] = copy;
  }
  f.cur = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *f.cur);
  f.gen = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *f.gen);
  f.ver = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *f.ver);
  for (int i = 0; i < g->nvalues; i++) f.cur[i] = g->values[i];
  int nnodes = g->nnodes;
  Node **nodes = g->nodes;
  for (int k = 0; k < nnodes; k++) {
    Node *n = nodes[k];
    f.r.orig = n;
    f.r.k = 0;
    if (!n->op) { rw_push(&f.r, n); continue; }
    Value *self = n->op->inplace ? n->args[0].u.t : NULL;
    /* out= variants (atan2.out) write their result into `out`; _native_batch_norm_legit writes
     * its running statistics: the original values written, before uses are resolved */
    int oa = n->op->outarg;
    Value *out_dst = oa >= 0 && n->args[oa].k == AK_TENSOR ? n->args[oa].u.t : NULL;
    bool legit = !strcmp(n->op->name, "_native_batch_norm_legit");
    Value *rm_dst = legit ? n->args[ops_arg_index(n->op, "running_mean")].u.t : NULL, *rv_dst = legit ? n->args[ops_arg_index(n->op, "running_var")].u.t : NULL;
    for (int i = 0; i < n->op->nargs; i++) {
      Arg *a = &n->args[i];
      if (a->k == AK_TENSOR && !(a->u.t = resolve(&f, a->u.t))) return -1;
      if (a->k == AK_TENSORS) {
        Value **ts = arena_array(c->arena, (size_t)a->n + 1, sizeof *ts);
        for (int j = 0; j < a->n; j++) ts[j] = resolve(&f, a->u.ts[j]);
        a->u.ts = ts;
      }
    }
    if (self) {
      const OpDef *twin = functional_twin(n->op);
      if (!twin) return gg_error(c, "%s: node %s: no functional form of %s", g->path, gg_quote(c, n->name), gg_quote(c, n->op->name));
      n->args = remap_args(g, n->op, n->args, twin);
      gg_log(c, LOG_FUNCTIONALIZE, "node %s: %s -> %s, writing %s", gg_quote(c, n->name), n->op->name, twin->name, gg_quote(c, self->name));
      n->op = twin;
      rw_push(&f.r, n);
      /* the node's output is the new value of self, and reads as a view of the same base */
      Value *out = n->outs[0];
      if (write_back(&f, self, out)) return -1;
      Value *root = root_of(&f, self);
      if (self != root) {
        /* later uses of out take the view again from the new base, like any view of it */
        f.gen[out->id] = f.ver[root->id];
      }
      continue;
    }
    if (oa >= 0) {
      char stem[128];
      const char *dot = strrchr(n->op->name, '.');
      snprintf(stem, sizeof stem, "%.*s", (int)(dot - n->op->name), n->op->name);
      const OpDef *twin = ops_find(stem);
      if (!twin || !out_dst) return gg_error(c, "%s: node %s: no functional form of %s", g->path, gg_quote(c, n->name), gg_quote(c, n->op->name));
      n->args = remap_args(g, n->op, n->args, twin);
      gg_log(c, LOG_FUNCTIONALIZE, "node %s: %s -> %s, writing %s", gg_quote(c, n->name), n->op->name, twin->name, gg_quote(c, out_dst->name));
      n->op = twin;
      rw_push(&f.r, n);
      if (write_back(&f, out_dst, n->outs[0])) return -1;
      Value *root = root_of(&f, out_dst);
      if (out_dst != root) f.gen[n->outs[0]->id] = f.ver[root->id];
      continue;
    }
    if (legit && !n->args[ops_arg_index(n->op, "training")].u.b) {   /* evaluation mode writes nothing */
      const OpDef *fn = ops_find("_native_batch_norm_legit_no_training");
      n->args = remap_args(g, n->op, n->args, fn);
      n->op = fn;
    }
    rw_push(&f.r, n);
    for (int i = 0; i < n->nouts; i++) {
      Value *v = n->outs[i];
      if (v->id < f.nvalues) f.gen[v->id] = f.ver[root_of(&f, v)->id];
    }
    if (legit && n->op != ops_find("_native_batch_norm_legit_no_training")) {
      if (rm_dst && rv_dst && stats_outputs(&f, n, rm_dst, rv_dst)) return -1;
      continue;
    }
    /* aten.batch_norm in training mode updates the running statistics in place */
    if (!strcmp(n->op->name, "batch_norm") && n->args[ops_arg_index(n->op, "training")].u.b &&
        n->args[ops_arg_index(n->op, "running_mean")].k == AK_TENSOR) {
      Value *rm0 = nodes[k]->args[ops_arg_index(n->op, "running_mean")].u.t, *rv0 = nodes[k]->args[ops_arg_index(n->op, "running_var")].u.t;
      if (stats_outputs(&f, n, rm0, rv0)) return -1;
    }
  }
  g->nodes = f.r.nodes;
  g->nnodes = f.r.n;
  g->cap_nodes = f.r.cap;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  /* outputs read the latest values; buffers that changed are written back */
  int extra = 0;
  for (int i = 0; i < g->ninputs; i++) extra += g->inputs[i]->input == IN_BUFFER;
  OutputSpec *outs = arena_array(c->arena, (size_t)(g->noutputs + extra) + 1, sizeof *outs);
  int n = 0;
  for (int i = 0; i < g->noutputs; i++) {
    outs[n] = g->outputs[i];
    if (!(outs[n].v = resolve(&f, g->outputs[i].v))) return -1;
    n++;
  }
  for (int i = 0; i < g->ninputs; i++) {
    Value *b = g->inputs[i];
    if (b->input != IN_BUFFER || f.cur[b->id] == b) continue;
    bool listed = false;
    for (int j = 0; j < n; j++) listed |= outs[j].kind == OUT_BUFFER_MUTATION && outs[j].target_name && !strcmp(outs[j].target_name, b->fqn);
    if (!listed) outs[n++] = (OutputSpec){OUT_BUFFER_MUTATION, f.cur[b->id], b->fqn};
  }
  g->outputs = outs;
  g->noutputs = n;
  return 0;
}
