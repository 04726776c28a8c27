/* view.c: the view and index algebra over symbolic sizes (Expr).
 * Requires: a verified graph (its shape rules gave every output's sizes). Guarantees: the layout
 * (sizes, strides, storage offset, in elements) of every view op's outputs from its input's, the
 * same rule for the schedule (which needs to know what is contiguous before any code is written) and
 * the emitters (which index the storage through it). A view op is one row in ops.def with emit_view
 * and its case in view_layouts. Views never copy; where PyTorch would copy (reshape of a layout that
 * no strides describe, contiguous() of a strided tensor, a dtype change) the result is VIEW_COPY: a
 * fresh contiguous tensor of the output's sizes. */
#include "gg.h"

#include <string.h>

#define R GG_MAX_RANK

static const Expr *C(Arena *a, int64_t v) { return expr_const(a, v); }
static const Expr *ADD(Arena *a, const Expr *x, const Expr *y) { return expr_bin(a, E_ADD, x, y); }
static const Expr *MUL(Arena *a, const Expr *x, const Expr *y) { return expr_bin(a, E_MUL, x, y); }

void layout_contiguous(Arena *a, Layout *l, int rank, const Expr *const *sizes) {
  memset(l, 0, sizeof *l);
  l->rank = rank;
  l->offset = C(a, 0);
  const Expr *s = C(a, 1);
  for (int d = rank - 1; d >= 0; d--) {
    l->sizes[d] = sizes[d];
    l->strides[d] = s;
    s = MUL(a, s, sizes[d]);
  }
}

const Expr *layout_numel(Arena *a, const Layout *l) {
  const Expr *n = C(a, 1);
  for (int d = 0; d < l->rank; d++) n = MUL(a, n, l->sizes[d]);
  return n;
}

bool layout_is_contiguous(const Graph *g, Arena *a, const Layout *l) {
  const Expr *s = C(a, 1);
  int64_t one;
  for (int d = l->rank - 1; d >= 0; d--) {
    bool unit = expr_is_const(l->sizes[d], &one) && one == 1;
    if (!unit && !expr_same(g, l->strides[d], s)) return false;
    s = MUL(a, s, l->sizes[d]);
  }
  return expr_is_const(l->offset, &one) && one == 0;
}

Layout layout_broadcast(Arena *a, const Layout *l, int rank, const Expr *const *sizes) {
  Layout b = *l;
  b.rank = rank;
  for (int d = rank - 1, s = l->rank - 1; d >= 0; d--, s--) {
    int64_t v;
    b.sizes[d] = sizes[d];
    bool keep = s >= 0 && !(expr_is_const(l->sizes[s], &v) && v == 1 && !(expr_is_const(sizes[d], &v) && v == 1));
    b.strides[d] = keep ? l->strides[s] : C(a, 0);
  }
  return b;
}

bool layout_same(const Graph *g, const Layout *x, const Layout *y) {
  if (x->rank != y->rank || !expr_same(g, x->offset, y->offset)) return false;
  for (int d = 0; d < x->rank; d++) {
    int64_t v;
    if (!expr_same(g, x->sizes[d], y->sizes[d])) return false;
    if (expr_is_const(x->sizes[d], &v) && v == 1) continue;   /* a unit dim's stride is never used */
    if (!expr_same(g, x->strides[d], y->strides[d])) return false;
  }
  return true;
}

/* Strides for viewing l as sizes without a copy (PyTorch's computeStride, on static sizes). */
bool layout_reshape_strides(Arena *a, const Layout *l, int rank, const Expr *const *sizes, const Expr **strides) {
  int64_t osz[R], ost[R], nsz[R];
  for (int d = 0; d < l->rank; d++)
    if (!expr_is_const(l->sizes[d], &osz[d]) || !expr_is_const(l->strides[d], &ost[d])) return false;
  for (int d = 0; d < rank; d++) if (!expr_is_const(sizes[d], &nsz[d])) return false;
  int64_t numel = 1;
  for (int d = 0; d < l->rank; d++) numel *= osz[d];
  int64_t ns[R];
  if (numel == 0 || l->rank == 0) {
    { int64_t s = 1; for (int d = rank - 1; d >= 0; d--) { ns[d] = s; s *= nsz[d] ? nsz[d] : 1; } }
  } else {
    int view_d = rank - 1;
    int64_t chunk = ost[l->rank - 1], tn = 1, vn = 1;
    for (int td = l->rank - 1; td >= 0; td--) {
      tn *= osz[td];
      if (td == 0 || (osz[td - 1] != 1 && ost[td - 1] != tn * chunk)) {
        while (view_d >= 0 && (vn < tn || nsz[view_d] == 1)) { ns[view_d] = vn * chunk; vn *= nsz[view_d]; view_d--; }
        if (vn != tn) return false;
        if (td > 0) { chunk = ost[td - 1]; tn = 1; vn = 1; }
      }
    }
    if (view_d != -1) return false;
  }
  for (int d = 0; d < rank; d++) strides[d] = C(a, ns[d]);
  return true;
}

/* The length of the diagonal at offset off of dims of sizes n1, n2 (PyTorch's diagonal) */
const Expr *view_diagonal_len(Arena *a, const Expr *n1, const Expr *n2, int64_t off) {
  const Expr *len = off >= 0 ? expr_bin(a, E_MIN, n1, ADD(a, n2, C(a, -off))) : expr_bin(a, E_MIN, ADD(a, n1, C(a, off)), n2);
  return expr_bin(a, E_MAX, len, C(a, 0));
}

int64_t node_int_arg(const Node *n, const char *name, int64_t dflt) {
  int i = ops_arg_index(n->op, name);
  int64_t v;
  if (i < 0 || n->args[i].k != AK_INT || !expr_is_const(n->args[i].u.i, &v)) return dflt;
  return v;
}

int64_t const_numel(const Value *v) {
  int64_t ne = 1, d;
  for (int i = 0; i < v->rank; i++) {
    if (!expr_is_const(v->sizes[i], &d)) return -1;
    ne *= d;
  }
  return ne;
}

int dim_wrap(int64_t d, int rank) { int r = rank ? rank : 1; return (int)(d < 0 ? d + r : d); }

bool view_perm(const Node *n, int rank, int *perm) {
  const char *name = n->op ? n->op->name : "";
  if (strcmp(name, "permute") && strcmp(name, "transpose.int") && strcmp(name, "t") && strcmp(name, "movedim.int")) return false;
  for (int d = 0; d < rank; d++) perm[d] = d;
  if (!strcmp(name, "permute")) {
    const Arg *p = &n->args[1];
    for (int i = 0; i < p->n && i < rank; i++) { int64_t d = i; expr_is_const(p->u.is[i], &d); perm[i] = dim_wrap(d, rank); }
  } else if (!strcmp(name, "movedim.int")) {
    int src = dim_wrap(node_int_arg(n, "source", 0), rank), dst = dim_wrap(node_int_arg(n, "destination", 0), rank), k = 0;
    for (int d = 0; d < rank; d++) { if (k == dst) perm[k++] = src; if (d != src) perm[k++] = d; }
    if (k == dst) perm[k++] = src;
  } else if (rank >= 2) {
    int p0 = !strcmp(name, "t") ? 0 : dim_wrap(node_int_arg(n, "dim0", 0), rank), p1 = !strcmp(name, "t") ? 1 : dim_wrap(node_int_arg(n, "dim1", 1), rank);
    perm[p0] = p1;
    perm[p1] = p0;
  }
  return true;
}

bool view_is_reshape(const OpDef *op) {
  const char *s = op->name;
  return !strcmp(s, "view") || !strcmp(s, "_unsafe_view") || !strcmp(s, "reshape") || !strncmp(s, "flatten", 7) || !strncmp(s, "unflatten", 9);
}

static int vfail(Graph *g, const Node *n, const char *msg) {
  Ctx *c = g->ctx;
  return gg_error(c, "%s: node %s (%s): %s", g->path, gg_quote(c, n->name), gg_quote(c, n->target), msg);
}

int view_layouts(Graph *g, const Node *n, const Layout *t, Layout *outs) {
  Arena *a = g->ctx->arena;
  const char *name = n->op->name;
  Value *y = n->outs[0];
  Layout v = *t;
  if (n->op->emit != emit_view) return vfail(g, n, "not a view (internal error)");
  if (!strncmp(name, "dropout", 7) || !strcmp(name, "native_dropout")) {
    const Arg *tr = &n->args[ops_arg_index(n->op, "train")];
    const Arg *p = &n->args[ops_arg_index(n->op, "p")];
    if (tr->k == AK_BOOL && tr->u.b && p->u.f > 0) return vfail(g, n, "dropout in training mode is random; export in eval mode");
    outs[0] = *t;   /* the identity: the input's storage, not a copy (native_dropout's mask has none) */
    return VIEW_ALIAS;
  }
  if (!strncmp(name, "to.", 3) || !strcmp(name, "_to_copy") || !strcmp(name, "type_as")) {
    Value *x = n->args[ops_arg_index(n->op, "self")].u.t;
    if (n->op->view && x->dtype == y->dtype) { outs[0] = *t; return VIEW_ALIAS; }   /* to(): self when nothing changes */
    return VIEW_COPY;
  }
  if (!strncmp(name, "split", 5) || !strcmp(name, "chunk") || !strcmp(name, "unbind.int")) {
    int d = dim_wrap(node_int_arg(n, "dim", 0), t->rank);
    bool unbind = !strcmp(name, "unbind.int");
    const Expr *at = C(a, 0);
    for (int i = 0; i < n->nouts; i++) {
      Layout o = *t;
      o.offset = ADD(a, t->offset, MUL(a, at, t->strides[d]));
      if (unbind) {
        for (int k = d; k < t->rank - 1; k++) { o.sizes[k] = t->sizes[k + 1]; o.strides[k] = t->strides[k + 1]; }
        o.rank--;
        at = ADD(a, at, C(a, 1));
      } else {
        o.sizes[d] = n->outs[i]->sizes[d];
        at = ADD(a, at, o.sizes[d]);
      }
      outs[i] = o;
    }
    return VIEW_ALIAS;
  }
  if (view_is_reshape(n->op)) {
    v.rank = y->rank;
    memcpy(v.sizes, y->sizes, sizeof(Expr *) * (size_t)y->rank);
    if (layout_is_contiguous(g, a, t)) {
      layout_contiguous(a, &v, y->rank, y->sizes);
      v.offset = t->offset;
    } else if (!layout_reshape_strides(a, t, y->rank, y->sizes, v.strides)) return VIEW_COPY;
    outs[0] = v;
    return VIEW_ALIAS;
  }
  if (!strcmp(name, "contiguous") && !layout_is_contiguous(g, a, t)) return VIEW_COPY;
  int perm[R];
  if (view_perm(n, t->rank, perm)) {
    for (int d = 0; d < t->rank; d++) { v.sizes[d] = t->sizes[perm[d]]; v.strides[d] = t->strides[perm[d]]; }
  } else if (!strcmp(name, "unsqueeze")) {
    int64_t d = node_int_arg(n, "dim", 0);
    if (d < 0) d += t->rank + 1;
    for (int k = t->rank; k > d; k--) { v.sizes[k] = t->sizes[k - 1]; v.strides[k] = t->strides[k - 1]; }
    v.sizes[d] = C(a, 1);
    v.strides[d] = d < t->rank ? MUL(a, t->strides[d], t->sizes[d]) : C(a, 1);
    v.rank++;
  } else if (!strncmp(name, "squeeze", 7) || !strcmp(name, "expand") || !strcmp(name, "expand_as")) {
    /* keep each input dim the output keeps, by matching sizes from the right */
    if (!strncmp(name, "expand", 6)) v = layout_broadcast(a, t, y->rank, y->sizes);
    else {
      int k = 0;
      bool mask[R] = {0};
      int di = ops_arg_index(n->op, "dim");
      if (di < 0) for (int d = 0; d < t->rank; d++) mask[d] = true;
      else if (n->args[di].k == AK_INT) { int64_t d; expr_is_const(n->args[di].u.i, &d); if (t->rank) mask[dim_wrap(d, t->rank)] = true; }
      else for (int i = 0; i < n->args[di].n; i++) { int64_t d; expr_is_const(n->args[di].u.is[i], &d); if (t->rank) mask[dim_wrap(d, t->rank)] = true; }
      for (int d = 0; d < t->rank; d++) {
        int64_t one;
        if (mask[d] && expr_is_const(t->sizes[d], &one) && one == 1) continue;
        v.sizes[k] = t->sizes[d];
        v.strides[k++] = t->strides[d];
      }
      v.rank = k;
    }
  } else if (!strcmp(name, "select.int")) {
    int d = dim_wrap(node_int_arg(n, "dim", 0), t->rank);
    const Expr *ix = n->args[ops_arg_index(n->op, "index")].u.i;
    int64_t iv;
    if (expr_is_const(ix, &iv) && iv < 0) ix = ADD(a, t->sizes[d], ix);
    v.offset = ADD(a, t->offset, MUL(a, ix, t->strides[d]));
    for (int k = d; k < t->rank - 1; k++) { v.sizes[k] = t->sizes[k + 1]; v.strides[k] = t->strides[k + 1]; }
    v.rank--;
  } else if (!strcmp(name, "slice.Tensor") || !strcmp(name, "narrow")) {
    int d = dim_wrap(node_int_arg(n, "dim", 0), t->rank);
    /* the output size is known; the start is the slice's start, clamped as the shape rule did */
    const Arg *sa = &n->args[ops_arg_index(n->op, "start")];
    const Expr *start = sa->k == AK_INT ? sa->u.i : C(a, 0);
    int64_t sv, sz;
    if (expr_is_const(start, &sv) && sv < 0) {
      if (!expr_is_const(t->sizes[d], &sz)) return vfail(g, n, "negative slice start on a symbolic dim");
      sv += sz;
      start = C(a, sv < 0 ? 0 : sv);
    } else if (expr_is_const(start, &sv) && expr_is_const(t->sizes[d], &sz) && sv > sz) start = C(a, sz);
    int64_t step = strcmp(name, "narrow") ? node_int_arg(n, "step", 1) : 1;
    v.offset = ADD(a, t->offset, MUL(a, start, t->strides[d]));
    v.sizes[d] = y->sizes[d];
    v.strides[d] = MUL(a, t->strides[d], C(a, step));
  } else if (!strcmp(name, "diagonal")) {   /* the two dims replaced by one whose stride is their sum */
    int d1 = dim_wrap(node_int_arg(n, "dim1", 0), t->rank), d2 = dim_wrap(node_int_arg(n, "dim2", 1), t->rank), k = 0;
    int64_t off = node_int_arg(n, "offset", 0);
    v.offset = ADD(a, t->offset, MUL(a, C(a, off >= 0 ? off : -off), t->strides[off >= 0 ? d2 : d1]));
    for (int d = 0; d < t->rank; d++)
      if (d != d1 && d != d2) { v.sizes[k] = t->sizes[d]; v.strides[k++] = t->strides[d]; }
    v.sizes[k] = view_diagonal_len(a, t->sizes[d1], t->sizes[d2], off);
    v.strides[k++] = ADD(a, t->strides[d1], t->strides[d2]);
    v.rank = k;
  } else if (!strcmp(name, "as_strided")) {   /* decompose.c made self 1-d (a copy where it was not contiguous) */
    const Arg *sz = &n->args[ops_arg_index(n->op, "size")], *st = &n->args[ops_arg_index(n->op, "stride")], *so = &n->args[ops_arg_index(n->op, "storage_offset")];
    int64_t one;
    if (t->rank != 1 || !(expr_is_const(t->strides[0], &one) && one == 1)) return vfail(g, n, "as_strided of a strided tensor (internal error)");
    v.rank = sz->n;
    for (int d = 0; d < sz->n; d++) { v.sizes[d] = sz->u.is[d]; v.strides[d] = st->u.is[d]; }
    if (so->k == AK_INT) v.offset = ADD(a, t->offset, so->u.i);
  } else if (strcmp(name, "alias") && strcmp(name, "detach") && strcmp(name, "contiguous"))
    return vfail(g, n, "no view rule in the code generator");
  if (v.rank != y->rank) return vfail(g, n, arena_printf(a, "internal error: view rank %d, expected %d", v.rank, y->rank));
  outs[0] = v;
  return VIEW_ALIAS;
}
