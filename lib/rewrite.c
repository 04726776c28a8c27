/* rewrite.c: the node builder of rewrite.h. */
#include "rewrite.h"

#include <stdarg.h>
#include <string.h>

Arg INTS(Rw *r, int n, const int64_t *v) {
  Arg a = {.k = AK_INTS, .n = n};
  a.u.is = arena_array(r->g->ctx->arena, (size_t)n + 1, sizeof *a.u.is);
  for (int i = 0; i < n; i++) a.u.is[i] = expr_const(r->g->ctx->arena, v[i]);
  return a;
}

Arg EXPRS(Rw *r, int n, const Expr *const *v) {
  Arg a = {.k = AK_INTS, .n = n};
  a.u.is = arena_array(r->g->ctx->arena, (size_t)n + 1, sizeof *a.u.is);
  memcpy(a.u.is, v, sizeof *v * (size_t)n);
  return a;
}

void rw_push(Rw *r, Node *n) {
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 256;
    Node **nn = arena_array(r->g->ctx->arena, (size_t)r->cap, sizeof *nn);
    if (r->n) memcpy(nn, r->nodes, sizeof *nn * (size_t)r->n);
    r->nodes = nn;
  }
  r->nodes[r->n++] = n;
}

Value *rw_node(Rw *r, Value *into, const OpDef *op, const Arg *args) {
  Graph *g = r->g;
  Ctx *c = g->ctx;
  Node *n = arena_alloc(c->arena, sizeof *n);
  n->op = op;
  n->name = arena_printf(c->arena, "%s.%s%d", r->orig->name, r->tag ? r->tag : "", r->k++);
  n->target = arena_printf(c->arena, "torch.ops.aten.%s", op->name);
  n->stack_trace = r->orig->stack_trace;
  n->module_stack = r->orig->module_stack;
  n->args = arena_array(c->arena, (size_t)op->nargs + 1, sizeof *n->args);
  memcpy(n->args, args, sizeof *args * (size_t)op->nargs);
  /* a required tensor that an earlier call failed to make (T(NULL) is none): that failure stands */
  for (int i = 0; i < op->nargs; i++)
    if (op->args[i].type == T_TENSOR && !op->args[i].optional && args[i].k == AK_NONE) {
      if (!c->has_err) gg_error(c, "%s: node %s: internal error: %s's operand '%s' is missing", g->path, gg_quote(c, r->orig->name), op->name, op->args[i].name);
      return NULL;
    }
  ShapeCtx sc;
  if (shape_infer(g, n, &sc)) return NULL;
  n->nouts = sc.nouts;
  n->outs = arena_array(c->arena, (size_t)sc.nouts + 1, sizeof *n->outs);
  for (int i = 0; i < sc.nouts; i++) {
    Value *v = i == 0 && into ? into : graph_new_value(g, arena_printf(c->arena, "%s.%d", n->name, i));
    if (!v) return NULL;
    v->kind = VK_TENSOR;
    v->def = n;
    if (v != into) {
      v->dtype = sc.out[i].dtype;
      v->rank = sc.out[i].rank;
      v->sizes = arena_array(c->arena, (size_t)v->rank + 1, sizeof *v->sizes);
      memcpy(v->sizes, sc.out[i].sizes, sizeof *v->sizes * (size_t)v->rank);
      v->declared = true;
    }
    n->outs[i] = v;
  }
  rw_push(r, n);
  return n->nouts ? n->outs[0] : NULL;
}

Value *rw_call(Rw *r, Value *into, const char *opname, ...) {
  Ctx *c = r->g->ctx;
  const OpDef *op = ops_find(opname);
  if (!op) { gg_error(c, "internal error: no op %s", opname); return NULL; }
  Arg *args = arena_array(c->arena, (size_t)op->nargs + 1, sizeof *args);
  for (int i = 0; i < op->nargs; i++) args[i] = op->args[i].has_default ? op->args[i].def : NONE();
  va_list ap;
  va_start(ap, opname);
  for (const char *name; (name = va_arg(ap, const char *));) {
    Arg a = va_arg(ap, Arg);
    int i = ops_arg_index(op, name);
    if (i < 0) { va_end(ap); gg_error(c, "internal error: a rewrite gives %s an argument %s", opname, name); return NULL; }
    args[i] = a;
  }
  va_end(ap);
  return rw_node(r, into, op, args);
}

const Arg *rw_arg(const Node *n, const char *name) {
  int i = ops_arg_index(n->op, name);
  return i < 0 ? NULL : &n->args[i];
}

Value *rw_targ(const Node *n, const char *name) {
  const Arg *a = rw_arg(n, name);
  return a && a->k == AK_TENSOR ? a->u.t : NULL;
}

double rw_farg(const Node *n, const char *name, double dflt) {
  const Arg *a = rw_arg(n, name);
  int64_t v;
  if (!a) return dflt;
  if (a->k == AK_FLOAT) return a->u.f;
  if (a->k == AK_INT && expr_is_const(a->u.i, &v)) return (double)v;
  return dflt;
}

int *graph_uses(Graph *g, Node ***reader) {
  Arena *a = g->ctx->arena;
  int *uses = arena_array(a, (size_t)g->nvalues + 1, sizeof *uses);
  Node **rd = reader ? arena_array(a, (size_t)g->nvalues + 1, sizeof *rd) : NULL;
  for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i].v->id] += 2;
  for (int k = 0; k < g->nnodes; k++) FOR_TENSOR_ARGS(g->nodes[k], v, { uses[v->id]++; if (rd) rd[v->id] = g->nodes[k]; })
  if (reader) *reader = rd;
  return uses;
}

bool rw_arg_one(const Node *n, const char *name) {
  const Arg *a = rw_arg(n, name);
  int64_t i;
  return !a || a->k == AK_NONE || (a->k == AK_FLOAT ? a->u.f == 1 : a->k == AK_INT && expr_is_const(a->u.i, &i) && i == 1);
}

bool rw_pure(const Node *n) {
  return n->op && n->nouts > 0 && !n->op->inplace && n->op->outarg < 0 && strncmp(n->op->name, "rand", 4) && !strstr(n->op->name, "dropout");
}

void graph_drop_dead(Graph *g, bool (*droppable)(const Node *)) {
  Arena *a = g->ctx->arena;
  int *uses = arena_array(a, (size_t)g->nvalues + 1, sizeof *uses);
  for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i].v->id]++;
  for (int k = 0; k < g->nnodes; k++) FOR_TENSOR_ARGS(g->nodes[k], v, { uses[v->id]++; })
  bool *dead = arena_array(a, (size_t)g->nnodes + 1, sizeof *dead);
  for (int k = g->nnodes - 1; k >= 0; k--) {
    Node *n = g->nodes[k];
    if (!droppable(n)) continue;
    bool used = false;
    for (int i = 0; i < n->nouts; i++) used |= uses[n->outs[i]->id] > 0;
    if (used) continue;
    dead[k] = true;
    FOR_TENSOR_ARGS(n, v, { uses[v->id]--; })
  }
  int m = 0;
  for (int k = 0; k < g->nnodes; k++)
    if (!dead[k]) { g->nodes[k]->id = m; g->nodes[m++] = g->nodes[k]; }
  g->nnodes = m;
}
