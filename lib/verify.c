/* verify.c: the checks run between passes.
 * Requires: a graph from the loader or any pass. Guarantees on success: nodes are in topological order,
 * every value is defined once (by a graph input or one node) before it is used, every supported node's
 * outputs agree with its op's shape rule, and values whose shape was not recorded get the rule's.
 * A disagreement with what torch.export recorded is an error naming the node: it means the op table
 * is wrong about that op, and running it would give wrong answers. */
#include "gg.h"

#include <string.h>

static int check_output(Graph *g, Node *n, int i, ShapeCtx *sc) {
  Ctx *c = g->ctx;
  Value *v = n->outs[i];
  /* the kind of each output against the op's return type: a SymInt op's result is no tensor */
  if (sc->out[i].is_sym != (v->kind != VK_TENSOR))
    return gg_error(c, "%s: node %s (%s): output %s: the op returns %s, the export gives %s", g->path, gg_quote(c, n->name),
                    gg_quote(c, n->target), gg_quote(c, v->name), sc->out[i].is_sym ? "a symbolic int" : "a tensor",
                    v->kind == VK_TENSOR ? "a tensor" : "a symbolic value");
  if (sc->out[i].is_sym) {
    if (!v->sym) v->sym = sc->out[i].sym;
    else if (!expr_same(g, v->sym, sc->out[i].sym))
      return gg_error(c, "%s: node %s (%s): symbolic value disagrees with the export", g->path, gg_quote(c, n->name), gg_quote(c, n->target));
    return 0;
  }
  /* sizes a rule derives are bounded like declared ones: static elements, and the cost of the expression */
  int64_t numel = 1;
  for (int d = 0; d < sc->out[i].rank; d++) {
    const Expr *e = sc->out[i].sizes[d];
    int64_t h = expr_hint(g, e);
    if (e->nodes > GG_MAX_EXPR_NODES)
      return gg_error(c, "%s: node %s (%s): output %s: size expression too large", g->path, gg_quote(c, n->name), gg_quote(c, n->target), gg_quote(c, v->name));
    if (h < 0 || __builtin_mul_overflow(numel, h, &numel) || numel > GG_MAX_ELEMS)
      return gg_error(c, "%s: node %s (%s): output %s: sizes negative or multiplying to more than %lld elements", g->path, gg_quote(c, n->name),
                      gg_quote(c, n->target), gg_quote(c, v->name), (long long)GG_MAX_ELEMS);
  }
  if (!v->declared) {
    v->dtype = sc->out[i].dtype;
    v->rank = sc->out[i].rank;
    v->sizes = arena_array(c->arena, (size_t)v->rank + 1, sizeof *v->sizes);
    memcpy(v->sizes, sc->out[i].sizes, sizeof *v->sizes * (size_t)v->rank);
    return 0;
  }
  if (v->dtype != sc->out[i].dtype)
    return gg_error(c, "%s: node %s (%s): output %s: shape rule gives %s, the export says %s", g->path, gg_quote(c, n->name),
                    gg_quote(c, n->target), gg_quote(c, v->name), dtype_name(sc->out[i].dtype), dtype_name(v->dtype));
  bool same = v->rank == sc->out[i].rank;
  for (int d = 0; same && d < v->rank; d++) same = expr_same(g, v->sizes[d], sc->out[i].sizes[d]);
  if (!same) {
    char want[512] = "", got[512] = "";
    for (int d = 0; d < v->rank; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", d ? ", " : "", expr_str(c->arena, g, v->sizes[d]));
    for (int d = 0; d < sc->out[i].rank; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", d ? ", " : "", expr_str(c->arena, g, sc->out[i].sizes[d]));
    return gg_error(c, "%s: node %s (%s): output %s: shape rule gives [%s], the export says [%s]", g->path, gg_quote(c, n->name),
                    gg_quote(c, n->target), gg_quote(c, v->name), got, want);
  }
  return 0;
}

int verify_graph(Graph *g) {
  Ctx *c = g->ctx;
  g->unverified = true;
  bool *defined = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *defined);
  /* values downstream of an unsupported node may have no known shape: their nodes are skipped */
  bool *shapeless = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *shapeless);
  for (int i = 0; i < g->ninputs; i++) defined[g->inputs[i]->id] = true;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    bool skip = !n->op;
    if (n->op) {
      for (int a = 0; a < n->op->nargs; a++) {
        const Arg *arg = &n->args[a];
        int cnt = arg->k == AK_TENSOR ? 1 : arg->k == AK_TENSORS ? arg->n : 0;
        for (int j = 0; j < cnt; j++) {
          Value *v = arg->k == AK_TENSOR ? arg->u.t : arg->u.ts[j];
          if (v && !defined[v->id])
            return gg_error(c, "%s: node %s uses %s before it is defined", g->path, gg_quote(c, n->name), gg_quote(c, v->name));
          if (v && shapeless[v->id]) skip = true;
        }
      }
    }
    for (int i = 0; i < n->nouts; i++) {
      if (defined[n->outs[i]->id]) return gg_error(c, "%s: value %s is defined twice", g->path, gg_quote(c, n->outs[i]->name));
      defined[n->outs[i]->id] = true;
    }
    if (skip) {
      for (int i = 0; i < n->nouts; i++) shapeless[n->outs[i]->id] = !n->outs[i]->declared;
      continue;
    }
    ShapeCtx sc;
    if (shape_infer(g, n, &sc)) return -1;
    if (sc.nouts != n->nouts)
      return gg_error(c, "%s: node %s (%s): the op gives %d outputs, the export lists %d", g->path, gg_quote(c, n->name), gg_quote(c, n->target), sc.nouts, n->nouts);
    for (int i = 0; i < n->nouts; i++)
      if (check_output(g, n, i, &sc)) return -1;
  }
  for (int i = 0; i < g->noutputs; i++)
    if (!defined[g->outputs[i].v->id]) return gg_error(c, "%s: output %s is never defined", g->path, gg_quote(c, g->outputs[i].v->name));
  g->unverified = false;
  return 0;
}
