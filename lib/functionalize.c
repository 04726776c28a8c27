/* functionalize.c: in-place ops and buffer mutations become a functional graph.
 * Requires: a verified graph. Guarantees: no node writes into one of its inputs; every later use of
 * a mutated value reads the new value; every buffer whose value changed is a BUFFER_MUTATION output
 * (so the compiled model writes it back into the buffers it holds and reports it). aten.batch_norm
 * in training mode, which updates running statistics in place, becomes
 * _native_batch_norm_legit_functional. In-place writes through a view are refused for now. */
#include "gg.h"

#include <string.h>

typedef struct F { Graph *g; Value **cur; } F;

static Value *now(F *f, Value *v) { return v ? f->cur[v->id] : NULL; }

/* The tensor whose storage v views (v itself when it is not a view). */
static Value *root_of(Value *v) {
  while (v->def && v->def->op && v->def->op->view && v->def->nouts == 1 && v->def->args[0].k == AK_TENSOR) v = v->def->args[0].u.t;
  return v;
}

/* The functional twin of an in-place op: add_.Tensor -> add.Tensor, relu_ -> relu. */
static const OpDef *functional_twin(const OpDef *op) {
  char name[128];
  const char *dot = strchr(op->name, '.');
  size_t stem = dot ? (size_t)(dot - op->name) : strlen(op->name);
  if (stem < 2 || op->name[stem - 1] != '_' || stem >= sizeof name) return NULL;
  memcpy(name, op->name, stem - 1);
  snprintf(name + stem - 1, sizeof name - (stem - 1), "%s", dot ? dot : "");
  if (!strcmp(name, "fill.Scalar")) return ops_find("full_like");
  if (!strcmp(name, "zero")) return ops_find("zeros_like");
  if (!strcmp(name, "detach")) return ops_find("alias");
  if (!strcmp(name, "copy")) return ops_find("copy_");   /* copy_ reads only src: out-of-place by construction below */
  return ops_find(name);
}

/* Re-home args by name from the in-place op's schema to the twin's. */
static Arg *remap_args(Graph *g, const OpDef *from, const Arg *args, const OpDef *to) {
  Arg *r = arena_array(g->ctx->arena, (size_t)to->nargs + 1, sizeof *r);
  for (int i = 0; i < to->nargs; i++) {
    const char *nm = to->args[i].name;
    if (!strcmp(nm, "fill_value")) nm = "value";
    int j = ops_arg_index(from, nm);
    if (j < 0 && i == 0) j = 0;   /* dropout_(self) -> dropout(input) */
    if (j >= 0) r[i] = args[j];
    else if (to->args[i].has_default) r[i] = to->args[i].def;
    else r[i].k = AK_NONE;
  }
  return r;
}

int functionalize(Graph *g) {
  Ctx *c = g->ctx;
  F f = {g, arena_array(c->arena, (size_t)g->nvalues + 64, sizeof(Value *))};
  int nvalues0 = g->nvalues;
  for (int i = 0; i < g->nvalues; i++) f.cur[i] = g->values[i];
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (!n->op) continue;
    for (int i = 0; i < n->op->nargs; i++) {
      Arg *a = &n->args[i];
      if (a->k == AK_TENSOR) a->u.t = now(&f, a->u.t);
      else if (a->k == AK_TENSORS) {
        Value **ts = arena_array(c->arena, (size_t)a->n + 1, sizeof *ts);
        for (int j = 0; j < a->n; j++) ts[j] = now(&f, a->u.ts[j]);
        a->u.ts = ts;
      }
    }
    if (n->op->inplace) {
      Value *self = n->args[0].u.t, *root = root_of(self);
      if (root != self)
        return gg_error(c, "%s: node %s (%s) writes through a view of %s; compiled code does not support that yet (it runs under --interpret)",
                        g->path, gg_quote(c, n->name), gg_quote(c, n->target), gg_quote(c, root->name));
      const OpDef *twin = functional_twin(n->op);
      if (!twin) return gg_error(c, "%s: node %s: no functional form of %s", g->path, gg_quote(c, n->name), gg_quote(c, n->op->name));
      if (twin != n->op) {
        n->args = remap_args(g, n->op, n->args, twin);
        n->op = twin;
      }
      f.cur[self->id] = n->outs[0];
      continue;
    }
    /* aten.batch_norm in training mode updates the running statistics in place */
    if (!strcmp(n->op->name, "batch_norm") && n->args[ops_arg_index(n->op, "training")].u.b &&
        n->args[ops_arg_index(n->op, "running_mean")].k == AK_TENSOR) {
      const OpDef *fn = ops_find("_native_batch_norm_legit_functional");
      Arg *args = remap_args(g, n->op, n->args, fn);
      Value *rm = args[ops_arg_index(fn, "running_mean")].u.t, *rv = args[ops_arg_index(fn, "running_var")].u.t;
      Value **outs = arena_array(c->arena, 6, sizeof *outs);
      outs[0] = n->outs[0];
      const char *suffix[] = {"", "_save_mean", "_save_invstd", "_running_mean", "_running_var"};
      for (int i = 1; i < 5; i++) {
        outs[i] = graph_new_value(g, arena_printf(c->arena, "%s%s", n->name, suffix[i]));
        if (!outs[i]) return -1;
        outs[i]->kind = VK_TENSOR;
        outs[i]->def = n;
      }
      n->op = fn;
      n->args = args;
      n->outs = outs;
      n->nouts = 5;
      f.cur[root_of(rm)->id] = outs[3];
      f.cur[root_of(rv)->id] = outs[4];
    }
  }
  (void)nvalues0;
  /* outputs read the latest values; buffers that changed are written back */
  int extra = 0;
  for (int i = 0; i < g->ninputs; i++) extra += g->inputs[i]->input == IN_BUFFER;
  OutputSpec *outs = arena_array(c->arena, (size_t)(g->noutputs + extra) + 1, sizeof *outs);
  int n = 0;
  for (int i = 0; i < g->noutputs; i++) {
    outs[n] = g->outputs[i];
    outs[n].v = now(&f, g->outputs[i].v);
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
