/* load.c: read a torch.export program into the graph IR.
 * Requires: a .pt2 archive (PyTorch >= 2.9 layout) or a serialized ExportedProgram JSON, schema major 8.
 * Guarantees: every value is defined once and before its uses (so the graph is acyclic and in
 * topological order); every node of a known op has all its arguments in schema order, defaults filled
 * in and types checked; unknown ops are kept with op == NULL so that explain can list them; parameters,
 * buffers and constants are bound to their bytes when the file has them. Unknown JSON keys are ignored
 * and a missing optional field reads as null. Any fault names the file and the node or field. */
#include "gg.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct L {
  Ctx *c;
  Graph *g;
  const char *file;
  const char *prefix;     /* "" at top level; "submod_1." inside an inlined subgraph */
  cJSON *tensor_values, *sym_int_values;
  int depth;
} L;

/* ---------------------------------------------------------------- names */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void names_grow(Graph *g) {
  int cap = g->names_cap ? g->names_cap * 2 : 256;
  void *old = g->names;
  int oldcap = g->names_cap;
  g->names = arena_array(g->ctx->arena, (size_t)cap, sizeof *g->names);
  g->names_cap = cap;
  g->names_n = 0;
  for (int i = 0; i < oldcap; i++) {
    struct { const char *key; Value *v; } *e = (void *)((char *)old + (size_t)i * sizeof *g->names);
    if (e->key) graph_bind_name(g, e->key, e->v);
  }
}

int graph_bind_name(Graph *g, const char *name, Value *v) {
  if (g->names_n * 2 >= g->names_cap) names_grow(g);
  uint64_t h = hash_str(name);
  for (int i = (int)(h & (uint64_t)(g->names_cap - 1));; i = (i + 1) & (g->names_cap - 1)) {
    if (!g->names[i].key) {
      g->names[i].key = name;
      g->names[i].v = v;
      g->names_n++;
      return 0;
    }
    if (!strcmp(g->names[i].key, name)) return gg_error(g->ctx, "%s: value %s is defined twice", g->path, gg_quote(g->ctx, name));
  }
}

Value *graph_find_value(const Graph *g, const char *name) {
  if (!g->names_cap) return NULL;
  uint64_t h = hash_str(name);
  for (int i = (int)(h & (uint64_t)(g->names_cap - 1)); g->names[i].key; i = (i + 1) & (g->names_cap - 1))
    if (!strcmp(g->names[i].key, name)) return g->names[i].v;
  return NULL;
}

Value *graph_new_value(Graph *g, const char *name) {
  Value *v = arena_alloc(g->ctx->arena, sizeof *v);
  v->name = arena_strdup(g->ctx->arena, name);
  v->user_index = -1;
  if (graph_bind_name(g, v->name, v)) return NULL;
  if (g->nvalues == g->cap_values) {
    int cap = g->cap_values ? g->cap_values * 2 : 64;
    Value **n = arena_array(g->ctx->arena, (size_t)cap, sizeof *n);
    if (g->nvalues) memcpy(n, g->values, sizeof *n * (size_t)g->nvalues);
    g->values = n;
    g->cap_values = cap;
  }
  v->id = g->nvalues;
  g->values[g->nvalues++] = v;
  return v;
}

static void add_node(Graph *g, Node *n) {
  if (g->nnodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
    Node **nn = arena_array(g->ctx->arena, (size_t)cap, sizeof *nn);
    if (g->nnodes) memcpy(nn, g->nodes, sizeof *nn * (size_t)g->nnodes);
    g->nodes = nn;
    g->cap_nodes = cap;
  }
  n->id = g->nnodes;
  g->nodes[g->nnodes++] = n;
}

int graph_user_inputs(const Graph *g, Value ***out) {
  int n = 0;
  for (int i = 0; i < g->ninputs; i++) n += g->inputs[i]->input == IN_USER;
  Value **r = arena_array(g->ctx->arena, (size_t)n + 1, sizeof *r);
  for (int i = 0, k = 0; i < g->ninputs; i++)
    if (g->inputs[i]->input == IN_USER) r[k++] = g->inputs[i];
  *out = r;
  return n;
}

/* ---------------------------------------------------------------- JSON helpers */

static cJSON *get(const cJSON *o, const char *key) {
  cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
  return cJSON_IsNull(v) ? NULL : v;
}

static const char *get_str(const cJSON *o, const char *key) {
  cJSON *v = get(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool get_int(const cJSON *o, int64_t *out) {
  if (!cJSON_IsNumber(o)) return false;
  double d = o->valuedouble;
  if (d != floor(d)) return false;
  /* Python writes sys.maxsize for "to the end" (slice); beyond 2^53 a double cannot say more */
  if (d >= 9.2e18) *out = INT64_MAX;
  else if (d <= -9.2e18) *out = INT64_MIN;
  else *out = (int64_t)d;
  return true;
}

/* An integer argument's value: nothing a size, dim, index or step can mean lies beyond GG_MAX_ELEMS,
 * so larger magnitudes are refused before any rule does arithmetic on them. Python's sys.maxsize
 * (what get_int reads 2^63-1 and beyond as) stays for start and end: "to the end". */
static bool int_in_range(const char *arg, int64_t v) {
  if (v >= -GG_MAX_ELEMS && v <= GG_MAX_ELEMS) return true;
  return (v == INT64_MAX || v == INT64_MIN) && (!strcmp(arg, "start") || !strcmp(arg, "end"));
}

static bool get_float(const cJSON *o, double *out) {
  if (cJSON_IsNumber(o)) { *out = o->valuedouble; return true; }
  if (cJSON_IsString(o)) {   /* json.dumps(allow_nan=False) writes these as strings */
    if (!strcmp(o->valuestring, "Infinity")) { *out = INFINITY; return true; }
    if (!strcmp(o->valuestring, "-Infinity")) { *out = -INFINITY; return true; }
    if (!strcmp(o->valuestring, "NaN")) { *out = NAN; return true; }
  }
  return false;
}

/* A union is an object with exactly one key. */
static cJSON *union_member(const cJSON *u, const char **key) {
  *key = "";
  if (!cJSON_IsObject(u) || !u->child) return NULL;
  *key = u->child->string;
  return u->child;
}

/* A name as the graph knows it: values inside an inlined subgraph carry its prefix. */
static char *scoped(L *l, const char *name) { return arena_printf(l->c->arena, "%s%s", l->prefix, name); }

/* ---------------------------------------------------------------- sizes and tensor metadata */

static const Expr *read_symint(L *l, const cJSON *si, const char *where) {
  const char *k;
  cJSON *m = union_member(si, &k);
  int64_t v;
  if (m && !strcmp(k, "as_int") && get_int(m, &v)) return expr_const(l->c->arena, v);
  if (m && !strcmp(k, "as_expr")) {
    const char *s = get_str(m, "expr_str");
    if (!s) { gg_error(l->c, "%s: %s: as_expr without expr_str", l->file, where); return NULL; }
    const Expr *e = expr_parse(l->c, l->g, s, arena_printf(l->c->arena, "%s: %s", l->file, where));
    if (!e) return NULL;
    cJSON *hint = get(m, "hint");
    const char *hk;
    cJSON *hm = union_member(hint, &hk);
    int64_t hv;
    if (e->k == E_SYM && hm && !strcmp(hk, "as_int") && get_int(hm, &hv)) l->g->syms[e->c].hint = hv;
    return e;
  }
  if (m && !strcmp(k, "as_name")) {   /* a SymIntArgument naming a value */
    const char *nm = cJSON_IsString(m) ? m->valuestring : NULL;
    Value *sv = nm ? graph_find_value(l->g, scoped(l, nm)) : NULL;
    if (!sv || sv->kind != VK_SYMINT || !sv->sym) {
      gg_error(l->c, "%s: %s: refers to undefined symbolic int %s", l->file, where, gg_quote(l->c, nm));
      return NULL;
    }
    return sv->sym;
  }
  gg_error(l->c, "%s: %s: expected a symbolic int (as_int, as_expr or as_name)", l->file, where);
  return NULL;
}

static int read_tensor_meta(L *l, const cJSON *tm, Value *v, const char *where) {
  int64_t dt;
  if (!get_int(get(tm, "dtype"), &dt)) return gg_error(l->c, "%s: %s: missing dtype", l->file, where);
  if (!dtype_info((int)dt) || dt != (int)dt)
    return gg_error(l->c, "%s: %s: unsupported dtype code %lld", l->file, where, (long long)dt);
  v->dtype = (DType)dt;
  cJSON *sizes = get(tm, "sizes"), *strides = get(tm, "strides");
  if (!cJSON_IsArray(sizes)) return gg_error(l->c, "%s: %s: missing sizes", l->file, where);
  int rank = cJSON_GetArraySize(sizes);
  if (rank > GG_MAX_RANK) return gg_error(l->c, "%s: %s: rank %d exceeds %d", l->file, where, rank, GG_MAX_RANK);
  v->rank = rank;
  v->sizes = arena_array(l->c->arena, (size_t)rank + 1, sizeof *v->sizes);
  int i = 0;
  for (cJSON *s = sizes->child; s; s = s->next, i++) {
    v->sizes[i] = read_symint(l, s, where);
    if (!v->sizes[i]) return -1;
    int64_t c;
    if (expr_is_const(v->sizes[i], &c) && c < 0) return gg_error(l->c, "%s: %s: negative size %lld", l->file, where, (long long)c);
  }
  /* the product of static sizes must stay within what can be allocated */
  int64_t numel = 1;
  for (i = 0; i < rank; i++) {
    int64_t c = expr_hint(l->g, v->sizes[i]);
    if (__builtin_mul_overflow(numel, c, &numel) || numel > GG_MAX_ELEMS)
      return gg_error(l->c, "%s: %s: sizes multiply to more than %lld elements", l->file, where, (long long)GG_MAX_ELEMS);
  }
  if (cJSON_IsArray(strides) && cJSON_GetArraySize(strides) == rank) {
    v->strides = arena_array(l->c->arena, (size_t)rank + 1, sizeof *v->strides);
    i = 0;
    for (cJSON *s = strides->child; s; s = s->next, i++)
      if (!(v->strides[i] = read_symint(l, s, where))) return -1;
  }
  cJSON *rg = get(tm, "requires_grad");
  v->requires_grad = cJSON_IsTrue(rg);
  v->declared = true;
  return 0;
}

/* Declare a value produced by a node or the graph, with its metadata when tensor_values has it. */
static Value *declare(L *l, const char *name, ValueKind kind) {
  Value *v = graph_new_value(l->g, scoped(l, name));
  if (!v) return NULL;
  v->kind = kind;
  if (kind == VK_TENSOR) {
    cJSON *tm = get(l->tensor_values, name);
    if (tm) {
      char where[600];
      snprintf(where, sizeof where, "tensor_values[%s]", gg_quote(l->c, name));
      if (read_tensor_meta(l, tm, v, where)) return NULL;
    }
  } else if (kind == VK_SYMINT) {
    cJSON *si = get(l->sym_int_values, name);
    if (si) {
      char where[600];
      snprintf(where, sizeof where, "sym_int_values[%s]", gg_quote(l->c, name));
      if (!(v->sym = read_symint(l, si, where))) return NULL;
    }
  }
  return v;
}

static Value *lookup(L *l, const char *name) {
  return graph_find_value(l->g, scoped(l, name));
}

/* ---------------------------------------------------------------- arguments */

typedef struct NodeDesc { const char *name, *target; const OpDef *op; } NodeDesc;

static int arg_err(L *l, const NodeDesc *nd, const char *arg, const char *fmt, const char *detail) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, detail);
  return gg_error(l->c, "%s: node %s (%s): argument %s: %s", l->file, gg_quote(l->c, nd->name),
                  gg_quote(l->c, nd->target), gg_quote(l->c, arg), msg);
}

static int tensor_ref(L *l, const NodeDesc *nd, const char *arg, const cJSON *ta, Value **out) {
  const char *nm = get_str(ta, "name");
  if (!nm) return arg_err(l, nd, arg, "%s", "tensor without a name");
  Value *v = lookup(l, nm);
  if (!v) return arg_err(l, nd, arg, "refers to %s, which is not defined before this node", gg_quote(l->c, nm));
  if (v->kind != VK_TENSOR) return arg_err(l, nd, arg, "%s is not a tensor", gg_quote(l->c, nm));
  *out = v;
  return 0;
}

/* Convert an exported Argument into an Arg of the kind the schema's type expects. */
static int read_arg(L *l, const NodeDesc *nd, const ArgSpec *as, const cJSON *ja, Arg *out) {
  const char *k;
  cJSON *m = union_member(ja, &k);
  Arena *a = l->c->arena;
  if (!m) return arg_err(l, nd, as->name, "%s", "not an Argument union");
  memset(out, 0, sizeof *out);
  if (!strcmp(k, "as_none")) {
    if (!as->optional && as->type != T_ANY) return arg_err(l, nd, as->name, "%s", "None for a required argument");
    out->k = AK_NONE;
    return 0;
  }
  switch (as->type) {
  case T_TENSOR:
    if (!strcmp(k, "as_tensor") || !strcmp(k, "as_optional_tensor")) {
      if (!strcmp(k, "as_optional_tensor")) {
        const char *k2;
        cJSON *m2 = union_member(m, &k2);
        if (m2 && !strcmp(k2, "as_none")) {
          if (!as->optional) return arg_err(l, nd, as->name, "%s", "None for a required tensor");
          out->k = AK_NONE;
          return 0;
        }
        if (!m2 || strcmp(k2, "as_tensor")) return arg_err(l, nd, as->name, "%s", "bad optional tensor");
        m = m2;
      }
      out->k = AK_TENSOR;
      return tensor_ref(l, nd, as->name, m, &out->u.t);
    }
    /* a number for a Tensor: a wrapped scalar, read below; only pointwise ops take one */
    if (!nd->op || !op_is_pointwise(nd->op)) return arg_err(l, nd, as->name, "expected a tensor, got %s", k);
    break;
  case T_TENSOR_LIST:
    if (!strcmp(k, "as_tensors") || !strcmp(k, "as_optional_tensors")) {
      if (!cJSON_IsArray(m)) return arg_err(l, nd, as->name, "%s", "expected a list");
      int n = cJSON_GetArraySize(m), i = 0;
      out->k = AK_TENSORS;
      out->n = n;
      out->u.ts = arena_array(a, (size_t)n + 1, sizeof *out->u.ts);
      for (cJSON *e = m->child; e; e = e->next, i++) {
        if (!strcmp(k, "as_optional_tensors")) {
          const char *k2;
          cJSON *m2 = union_member(e, &k2);
          if (m2 && !strcmp(k2, "as_none")) {
            if (!as->none_elems) return arg_err(l, nd, as->name, "%s", "None in a list of tensors that cannot hold one");
            continue;
          }
          if (!m2 || strcmp(k2, "as_tensor")) return arg_err(l, nd, as->name, "%s", "bad optional tensor");
          if (tensor_ref(l, nd, as->name, m2, &out->u.ts[i])) return -1;
        } else if (tensor_ref(l, nd, as->name, e, &out->u.ts[i])) return -1;
      }
      return 0;
    }
    return arg_err(l, nd, as->name, "expected tensors, got %s", k);
  case T_INT_LIST:
    if (!strcmp(k, "as_ints") || !strcmp(k, "as_sym_ints")) {
      if (!cJSON_IsArray(m)) return arg_err(l, nd, as->name, "%s", "expected a list");
      int n = cJSON_GetArraySize(m), i = 0;
      if (n > 1024) return arg_err(l, nd, as->name, "%s", "list too long");
      out->k = AK_INTS;
      out->n = n;
      out->u.is = arena_array(a, (size_t)n + 1, sizeof *out->u.is);
      for (cJSON *e = m->child; e; e = e->next, i++) {
        int64_t v;
        if (!strcmp(k, "as_ints")) {
          if (!get_int(e, &v)) return arg_err(l, nd, as->name, "%s", "expected integers");
          out->u.is[i] = expr_const(a, v);
        } else if (!(out->u.is[i] = read_symint(l, e, as->name))) return -1;
      }
      /* int[2]: two values, one (meaning it twice) or none (the default: stride=[] is the kernel);
       * int[1] is PyTorch's "an int or a list of any length" (dim=) */
      if (as->fixed_len > 1 && n > 1 && n != as->fixed_len) {
        char want[32];
        snprintf(want, sizeof want, "%d", as->fixed_len);
        return arg_err(l, nd, as->name, "expected a list of %s integers", want);
      }
      for (int j = 0; j < n; j++) {
        int64_t v;
        if (expr_is_const(out->u.is[j], &v) && !int_in_range(as->name, v)) return arg_err(l, nd, as->name, "%s", "integer out of range");
      }
      if (as->fixed_len && n == 1) {   /* int[2] given one value means it twice */
        const Expr *one = out->u.is[0];
        out->n = as->fixed_len;
        out->u.is = arena_array(a, (size_t)as->fixed_len, sizeof *out->u.is);
        for (int j = 0; j < as->fixed_len; j++) out->u.is[j] = one;
      }
      return 0;
    }
    if (!strcmp(k, "as_int") || !strcmp(k, "as_sym_int")) {
      const Expr *one;
      int64_t v;
      if (!strcmp(k, "as_int")) { if (!get_int(m, &v)) return arg_err(l, nd, as->name, "%s", "expected an integer"); one = expr_const(a, v); }
      else if (!(one = read_symint(l, m, as->name))) return -1;
      if (expr_is_const(one, &v) && !int_in_range(as->name, v)) return arg_err(l, nd, as->name, "%s", "integer out of range");
      int n = as->fixed_len ? as->fixed_len : 1;
      out->k = AK_INTS;
      out->n = n;
      out->u.is = arena_array(a, (size_t)n, sizeof *out->u.is);
      for (int j = 0; j < n; j++) out->u.is[j] = one;
      return 0;
    }
    return arg_err(l, nd, as->name, "expected integers, got %s", k);
  case T_FLOAT_LIST:
    if (!strcmp(k, "as_floats") || !strcmp(k, "as_ints")) {
      if (!cJSON_IsArray(m)) return arg_err(l, nd, as->name, "%s", "expected a list");
      int n = cJSON_GetArraySize(m), i = 0;
      if (n > 1024) return arg_err(l, nd, as->name, "%s", "list too long");
      out->k = AK_FLOATS;
      out->n = n;
      out->u.fs = arena_array(a, (size_t)n + 1, sizeof *out->u.fs);
      for (cJSON *e = m->child; e; e = e->next, i++)
        if (!get_float(e, &out->u.fs[i])) return arg_err(l, nd, as->name, "%s", "expected numbers");
      return 0;
    }
    return arg_err(l, nd, as->name, "expected floats, got %s", k);
  case T_BOOL_LIST:
    if (!strcmp(k, "as_bools") && cJSON_IsArray(m)) {
      int n = cJSON_GetArraySize(m), i = 0;
      out->k = AK_BOOLS;
      out->n = n;
      out->u.bs = arena_array(a, (size_t)n + 1, sizeof *out->u.bs);
      for (cJSON *e = m->child; e; e = e->next, i++) out->u.bs[i] = cJSON_IsTrue(e);
      return 0;
    }
    return arg_err(l, nd, as->name, "expected bools, got %s", k);
  case T_DTYPE: {
    int64_t v;
    if (strcmp(k, "as_scalar_type") || !get_int(m, &v)) return arg_err(l, nd, as->name, "expected a dtype, got %s", k);
    if (!dtype_info((int)v) || v != (int)v) return arg_err(l, nd, as->name, "%s", "unsupported dtype code");
    out->k = AK_DTYPE;
    out->u.code = (int)v;
    return 0;
  }
  case T_LAYOUT: case T_MEMFMT: {
    int64_t v;
    if (!get_int(m, &v)) return arg_err(l, nd, as->name, "expected an enum, got %s", k);
    out->k = as->type == T_LAYOUT ? AK_LAYOUT : AK_MEMFMT;
    out->u.code = (int)v;
    return 0;
  }
  case T_DEVICE: {
    const char *t = get_str(m, "type");
    if (strcmp(k, "as_device") || !t) return arg_err(l, nd, as->name, "expected a device, got %s", k);
    out->k = AK_DEVICE;
    out->u.s = arena_strdup(a, t);
    return 0;
  }
  case T_STR:
    if (strcmp(k, "as_string") || !cJSON_IsString(m)) return arg_err(l, nd, as->name, "expected a string, got %s", k);
    out->k = AK_STR;
    out->u.s = arena_strdup(a, m->valuestring);
    return 0;
  case T_GRAPH: case T_ANY:
    return arg_err(l, nd, as->name, "%s", "unsupported argument type");
  default:
    break;
  }
  /* numbers: int, float, bool, scalar, and wrapped numbers given for a Tensor */
  int64_t iv;
  double fv;
  if ((!strcmp(k, "as_int") && get_int(m, &iv))) {
    if (as->type == T_FLOAT) { out->k = AK_FLOAT; out->u.f = (double)iv; }
    else if (as->type == T_BOOL) { out->k = AK_BOOL; out->u.b = iv != 0; }
    else {
      if (as->type == T_INT && !int_in_range(as->name, iv)) return arg_err(l, nd, as->name, "%s", "integer out of range");
      out->k = AK_INT;
      out->u.i = expr_const(a, iv);
    }
    return 0;
  }
  if (!strcmp(k, "as_sym_int") && as->type != T_FLOAT && as->type != T_BOOL) {
    out->k = AK_INT;
    if (!(out->u.i = read_symint(l, m, as->name))) return -1;
    if (as->type == T_INT && expr_is_const(out->u.i, &iv) && !int_in_range(as->name, iv))
      return arg_err(l, nd, as->name, "%s", "integer out of range");
    return 0;
  }
  if ((!strcmp(k, "as_float") || !strcmp(k, "as_sym_float")) && as->type != T_INT && as->type != T_BOOL) {
    const char *k2;
    cJSON *m2 = !strcmp(k, "as_sym_float") ? union_member(m, &k2) : m;
    if (!m2 || !get_float(m2, &fv)) return arg_err(l, nd, as->name, "%s", "expected a number");
    out->k = AK_FLOAT;
    out->u.f = fv;
    return 0;
  }
  if ((!strcmp(k, "as_bool") || !strcmp(k, "as_sym_bool")) && as->type != T_INT && as->type != T_FLOAT) {
    const char *k2;
    cJSON *m2 = !strcmp(k, "as_sym_bool") ? union_member(m, &k2) : m;
    if (!m2 || !cJSON_IsBool(m2)) return arg_err(l, nd, as->name, "%s", "expected a bool");
    out->k = AK_BOOL;
    out->u.b = cJSON_IsTrue(m2);
    /* a bool Scalar is a value of a tensor (fill values, pointwise operands: they keep the bool's
     * dtype); anywhere else (a norm's order, a correction, alpha) it is the number 0 or 1 */
    if (as->type == T_SCALAR && !(nd->op && op_is_pointwise(nd->op)) && strcmp(as->name, "fill_value") && strcmp(as->name, "value") &&
        strcmp(as->name, "s") && strcmp(as->name, "other")) {
      out->k = AK_INT;
      out->u.i = expr_const(a, out->u.b);
    }
    return 0;
  }
  return arg_err(l, nd, as->name, "unexpected %s", k);
}

/* ---------------------------------------------------------------- nodes */

static int load_graph_body(L *l, const cJSON *graph);

static const char *meta_str(L *l, const cJSON *node, const char *key) {
  const char *s = get_str(get(node, "metadata"), key);
  return s ? arena_strdup(l->c->arena, s) : NULL;
}

/* Aliases read as the op they name (the node keeps its target for messages): multiply is mul,
 * swapaxes and swapdims transpose.int, broadcast_to expand, numpy_T a permute reversing the dims,
 * reshape_as a reshape to the other tensor's sizes, convNd.padding ('valid', 'same') convNd */
static int canonical_op(L *l, Node *n) {
  const char *nm = n->op->name;
  Arena *a = l->c->arena;
  Arg *args = arena_array(a, 8, sizeof *args);
  const OpDef *to = NULL;
  if (!strncmp(nm, "conv", 4) && strstr(nm, ".padding") && n->args[1].k == AK_TENSOR && n->args[4].k == AK_STR) {
    /* padding 'valid' is 0; 'same' is dilation * (kernel - 1) / 2 on each side, which must be even */
    Value *w = n->args[1].u.t;
    int nsp = n->op->args[3].fixed_len;
    bool same = !strcmp(n->args[4].u.s, "same");
    if (!same && strcmp(n->args[4].u.s, "valid")) return gg_error(l->c, "%s: node %s: padding must be 'valid' or 'same'", l->file, gg_quote(l->c, n->name));
    if (w->rank != nsp + 2) return gg_error(l->c, "%s: node %s: the weight's rank does not fit %s", l->file, gg_quote(l->c, n->name), nm);
    memcpy(args, n->args, sizeof *args * 7);
    args[4] = (Arg){.k = AK_INTS, .n = nsp, .u.is = arena_array(a, (size_t)nsp + 1, sizeof(Expr *))};
    for (int i = 0; i < nsp; i++) {
      int64_t k = 1, d = 1;
      const Arg *dl = &n->args[5];
      if (same && (!expr_is_const(w->sizes[2 + i], &k) || !expr_is_const(dl->u.is[dl->n == 1 ? 0 : i], &d) || k < 1 || d < 1 || d > INT32_MAX || k > INT32_MAX))
        return gg_error(l->c, "%s: node %s: padding='same' needs static kernel sizes and dilations", l->file, gg_quote(l->c, n->name));
      if (same && (d * (k - 1)) % 2)
        return gg_error(l->c, "%s: node %s: padding='same' with an even kernel pads one side more, which is not supported: pad explicitly (F.pad) before a 'valid' convolution", l->file, gg_quote(l->c, n->name));
      args[4].u.is[i] = expr_const(a, same ? d * (k - 1) / 2 : 0);
    }
    to = ops_find(nsp == 1 ? "conv1d" : nsp == 2 ? "conv2d" : "conv3d");
  }
  if (!strncmp(nm, "multiply.", 9)) {
    to = ops_find(!strcmp(nm, "multiply.Tensor") ? "mul.Tensor" : "mul.Scalar");
    memcpy(args, n->args, sizeof *args * 2);
  } else if (!strcmp(nm, "swapaxes") || !strcmp(nm, "swapdims")) {
    to = ops_find("transpose.int");
    memcpy(args, n->args, sizeof *args * 3);
  } else if (!strcmp(nm, "broadcast_to")) {
    to = ops_find("expand");
    memcpy(args, n->args, sizeof *args * 2);
    args[2] = (Arg){.k = AK_BOOL, .u.b = false};
  } else if (!strcmp(nm, "numpy_T") && n->args[0].k == AK_TENSOR) {
    Value *x = n->args[0].u.t;
    to = ops_find("permute");
    args[0] = n->args[0];
    args[1] = (Arg){.k = AK_INTS, .n = x->rank, .u.is = arena_array(a, (size_t)x->rank + 1, sizeof(Expr *))};
    for (int d = 0; d < x->rank; d++) args[1].u.is[d] = expr_const(a, x->rank - 1 - d);
  } else if (!strcmp(nm, "reshape_as") && n->args[1].k == AK_TENSOR) {
    Value *o = n->args[1].u.t;
    to = ops_find("reshape");
    args[0] = n->args[0];
    args[1] = (Arg){.k = AK_INTS, .n = o->rank, .u.is = arena_array(a, (size_t)o->rank + 1, sizeof(Expr *))};
    for (int d = 0; d < o->rank; d++) args[1].u.is[d] = o->sizes[d];
  }
  if (!to) return 0;
  n->op = to;
  n->args = args;
  return 0;
}

static int declare_outputs(L *l, const NodeDesc *nd, const cJSON *outs, Node *n) {
  Value *vs[256];
  int nv = 0;
  for (const cJSON *o = outs ? outs->child : NULL; o; o = o->next) {
    const char *k;
    cJSON *m = union_member(o, &k);
    if (!m) return gg_error(l->c, "%s: node %s: output is not an Argument", l->file, gg_quote(l->c, nd->name));
    if (!strcmp(k, "as_tensor") || !strcmp(k, "as_tensors")) {
      const cJSON *list = !strcmp(k, "as_tensors") ? m : NULL;
      const cJSON *e = list ? list->child : m;
      for (; e; e = list ? e->next : NULL) {
        const char *nm = get_str(e, "name");
        if (!nm) return gg_error(l->c, "%s: node %s: output tensor without a name", l->file, gg_quote(l->c, nd->name));
        if (nv == 256) return gg_error(l->c, "%s: node %s: too many outputs", l->file, gg_quote(l->c, nd->name));
        if (!(vs[nv] = declare(l, nm, VK_TENSOR))) return -1;
        /* torch.export records every tensor it makes; one without a record would have a size only
         * the rules vouch for */
        if (!vs[nv]->declared)
          return gg_error(l->c, "%s: node %s: output %s has no entry in tensor_values", l->file, gg_quote(l->c, nd->name), gg_quote(l->c, nm));
        vs[nv++]->def = n;
      }
    } else if (!strcmp(k, "as_sym_int") || !strcmp(k, "as_sym_float") || !strcmp(k, "as_sym_bool")) {
      const char *nm = get_str(m, "as_name");
      if (!nm) return gg_error(l->c, "%s: node %s: symbolic output without a name", l->file, gg_quote(l->c, nd->name));
      if (nv == 256) return gg_error(l->c, "%s: node %s: too many outputs", l->file, gg_quote(l->c, nd->name));
      ValueKind vk = k[7] == 'i' ? VK_SYMINT : k[7] == 'f' ? VK_SYMFLOAT : VK_SYMBOOL;
      if (!(vs[nv] = declare(l, nm, vk))) return -1;
      vs[nv++]->def = n;
    } else if (!strcmp(k, "as_none")) {
      continue;
    } else return gg_error(l->c, "%s: node %s: unsupported output kind %s", l->file, gg_quote(l->c, nd->name), k);
  }
  n->nouts = nv;
  n->outs = arena_array(l->c->arena, (size_t)nv + 1, sizeof *n->outs);
  memcpy(n->outs, vs, sizeof *vs * (size_t)nv);
  return 0;
}

/* torch.ops.higher_order.wrap_with_set_grad_enabled(enabled, subgraph, *args): inference ignores the
 * grad mode, so the subgraph is inlined with its names prefixed and its outputs renamed to the node's. */
static int inline_subgraph(L *l, const NodeDesc *nd, const cJSON *node) {
  const cJSON *ins = get(node, "inputs");
  const cJSON *graph = NULL;
  const char *gname = NULL;
  Value *args[256];
  int nargs = 0;
  for (const cJSON *e = ins ? ins->child : NULL; e; e = e->next) {
    const char *k;
    cJSON *m = union_member(get(e, "arg"), &k);
    if (!m) continue;
    if (!strcmp(k, "as_graph")) { graph = get(m, "graph"); gname = get_str(m, "name"); }
    else if (!strcmp(k, "as_tensor")) {
      if (nargs == 256) return gg_error(l->c, "%s: node %s: too many inputs", l->file, gg_quote(l->c, nd->name));
      if (tensor_ref(l, nd, "args", m, &args[nargs++])) return -1;
    }
  }
  if (!graph || !gname) return gg_error(l->c, "%s: node %s: higher-order op without a subgraph", l->file, gg_quote(l->c, nd->name));
  if (l->depth > 8) return gg_error(l->c, "%s: node %s: subgraphs nested too deeply", l->file, gg_quote(l->c, nd->name));
  L sub = *l;
  sub.prefix = arena_printf(l->c->arena, "%s%s.", l->prefix, nd->name);
  sub.tensor_values = get(graph, "tensor_values");
  sub.sym_int_values = get(graph, "sym_int_values");
  sub.depth = l->depth + 1;
  const cJSON *gin = get(graph, "inputs");
  int i = 0;
  for (const cJSON *e = gin ? gin->child : NULL; e; e = e->next, i++) {
    const char *k;
    cJSON *m = union_member(e, &k);
    const char *nm = m ? get_str(m, "name") : NULL;
    if (!nm || i >= nargs) return gg_error(l->c, "%s: node %s: subgraph inputs do not match its arguments", l->file, gg_quote(l->c, nd->name));
    if (graph_bind_name(l->g, arena_printf(l->c->arena, "%s%s", sub.prefix, nm), args[i])) return -1;
  }
  if (i != nargs) return gg_error(l->c, "%s: node %s: subgraph takes %d inputs, given %d", l->file, gg_quote(l->c, nd->name), i, nargs);
  if (load_graph_body(&sub, graph)) return -1;
  /* bind the node's outputs to the subgraph's */
  const cJSON *gout = get(graph, "outputs"), *nout = get(node, "outputs");
  const cJSON *go = gout ? gout->child : NULL;
  for (const cJSON *no = nout ? nout->child : NULL; no; no = no->next) {
    const char *k1, *k2;
    cJSON *m1 = union_member(no, &k1);
    const cJSON *list = m1 && !strcmp(k1, "as_tensors") ? m1 : NULL;
    for (const cJSON *e = list ? list->child : m1; e; e = list ? e->next : NULL) {
      cJSON *m2 = go ? union_member(go, &k2) : NULL;
      const char *outer = get_str(e, "name"), *inner = m2 ? get_str(m2, "name") : NULL;
      Value *v = inner ? lookup(&sub, inner) : NULL;
      if (!outer || !v) return gg_error(l->c, "%s: node %s: outputs do not match the subgraph's", l->file, gg_quote(l->c, nd->name));
      if (graph_bind_name(l->g, arena_printf(l->c->arena, "%s%s", l->prefix, outer), v)) return -1;
      go = go->next;
    }
  }
  return 0;
}

static int load_node(L *l, const cJSON *jn) {
  NodeDesc nd = {0};
  nd.target = get_str(jn, "target");
  if (!nd.target) return gg_error(l->c, "%s: node without a target", l->file);
  const cJSON *outs = get(jn, "outputs");
  nd.name = get_str(jn, "name");
  if (!nd.name) {   /* before schema 8.16 nodes had no name: use the first output's */
    const char *k;
    cJSON *m = outs ? union_member(outs->child, &k) : NULL;
    nd.name = m ? get_str(m, "name") : NULL;
    if (m && !nd.name && cJSON_IsArray(m) && m->child) nd.name = get_str(m->child, "name");
    if (!nd.name) nd.name = nd.target;
  }
  if (!strcmp(nd.target, "torch.ops.higher_order.wrap_with_set_grad_enabled")) return inline_subgraph(l, &nd, jn);
  if (!strcmp(nd.target, "torch.ops.higher_order.wrap_with_autocast")) {
    /* (device_type, dtype, enabled, cache_enabled, subgraph, *args): a region with autocast turned
     * off computes as written, so its subgraph is inlined; one turning it on is refused */
    const cJSON *ins = get(jn, "inputs"), *e = ins ? ins->child : NULL;
    for (int i = 0; e && i < 2; i++) e = e->next;
    const char *k;
    cJSON *m = e ? union_member(get(e, "arg"), &k) : NULL;
    if (m && !strcmp(k, "as_bool") && cJSON_IsFalse(m)) return inline_subgraph(l, &nd, jn);
    return gg_error(l->c, "%s: node %s: a torch.autocast region is not supported (export without autocast; gcc-graph compile --precision bf16 is autocast for the whole model)",
                    l->file, gg_quote(l->c, nd.name));
  }
  Node *n = arena_alloc(l->c->arena, sizeof *n);
  n->name = arena_printf(l->c->arena, "%s%s", l->prefix, nd.name);
  n->target = arena_strdup(l->c->arena, nd.target);
  n->stack_trace = meta_str(l, jn, "stack_trace");
  n->module_stack = meta_str(l, jn, "nn_module_stack");
  n->op = nd.op = ops_find(nd.target);
  const cJSON *ins = get(jn, "inputs");
  if (ins && !cJSON_IsArray(ins)) return gg_error(l->c, "%s: node %s: inputs is not a list", l->file, gg_quote(l->c, nd.name));
  if (n->op) {
    const OpDef *op = n->op;
    n->args = arena_array(l->c->arena, (size_t)op->nargs + 1, sizeof *n->args);
    bool *seen = arena_array(l->c->arena, (size_t)op->nargs + 1, sizeof *seen);
    int pos = 0;
    for (const cJSON *e = ins ? ins->child : NULL; e; e = e->next, pos++) {
      const char *an = get_str(e, "name");
      int i = an && *an ? ops_arg_index(op, an) : pos;
      if (i < 0 || i >= op->nargs)
        return gg_error(l->c, "%s: node %s (%s): unknown argument %s", l->file, gg_quote(l->c, nd.name), gg_quote(l->c, nd.target), gg_quote(l->c, an));
      if (seen[i]) return gg_error(l->c, "%s: node %s: argument %s given twice", l->file, gg_quote(l->c, nd.name), gg_quote(l->c, op->args[i].name));
      seen[i] = true;
      if (read_arg(l, &nd, &op->args[i], get(e, "arg"), &n->args[i])) return -1;
    }
    for (int i = 0; i < op->nargs; i++) {
      if (seen[i]) continue;
      if (op->args[i].has_default) n->args[i] = op->args[i].def;
      else if (op->args[i].optional) n->args[i].k = AK_NONE;
      else return gg_error(l->c, "%s: node %s (%s): missing argument %s", l->file, gg_quote(l->c, nd.name), gg_quote(l->c, nd.target), gg_quote(l->c, op->args[i].name));
    }
    if (op->shape == shape_alias && canonical_op(l, n)) return -1;
  } else {
    /* unsupported: its tensor inputs must still be defined, so the graph stays well formed */
    for (const cJSON *e = ins ? ins->child : NULL; e; e = e->next) {
      const char *k;
      cJSON *m = union_member(get(e, "arg"), &k);
      Value *v;
      if (m && !strcmp(k, "as_tensor") && tensor_ref(l, &nd, get_str(e, "name") ? get_str(e, "name") : "", m, &v)) return -1;
    }
    l->g->nunsupported++;
  }
  if (outs && !cJSON_IsArray(outs)) return gg_error(l->c, "%s: node %s: outputs is not a list", l->file, gg_quote(l->c, nd.name));
  if (declare_outputs(l, &nd, outs, n)) return -1;
  add_node(l->g, n);
  return 0;
}

static int load_graph_body(L *l, const cJSON *graph) {
  const cJSON *nodes = get(graph, "nodes");
  if (!cJSON_IsArray(nodes)) return gg_error(l->c, "%s: graph has no node list", l->file);
  for (const cJSON *n = nodes->child; n; n = n->next)
    if (load_node(l, n)) return -1;
  return 0;
}

/* ---------------------------------------------------------------- signature */

static int load_inputs(L *l, const cJSON *graph, const cJSON *sig) {
  const cJSON *ins = get(graph, "inputs"), *specs = get(sig, "input_specs");
  if (!cJSON_IsArray(ins) || !cJSON_IsArray(specs)) return gg_error(l->c, "%s: graph inputs or input_specs missing", l->file);
  int n = cJSON_GetArraySize(ins);
  if (n != cJSON_GetArraySize(specs)) return gg_error(l->c, "%s: %d graph inputs but %d input_specs", l->file, n, cJSON_GetArraySize(specs));
  Graph *g = l->g;
  g->inputs = arena_array(l->c->arena, (size_t)n + 1, sizeof *g->inputs);
  const cJSON *spec = specs->child;
  int users = 0;
  for (const cJSON *in = ins->child; in; in = in->next, spec = spec->next) {
    const char *k, *sk;
    cJSON *m = union_member(in, &k), *sm = union_member(spec, &sk);
    if (!m || !sm) return gg_error(l->c, "%s: graph input %d is malformed", l->file, g->ninputs);
    const char *nm = get_str(m, "name");
    if (strcmp(k, "as_tensor") || !nm) {
      const char *an = get_str(m, "as_name");
      return gg_error(l->c, "%s: graph input %d (%s): only tensor inputs are supported, got %s", l->file, g->ninputs, gg_quote(l->c, an ? an : "?"), k);
    }
    Value *v = declare(l, nm, VK_TENSOR);
    if (!v) return -1;
    if (!v->declared) return gg_error(l->c, "%s: graph input %s has no entry in tensor_values", l->file, gg_quote(l->c, nm));
    v->input_index = g->ninputs;
    if (!strcmp(sk, "user_input")) { v->input = IN_USER; v->user_index = users++; }
    else if (!strcmp(sk, "parameter")) { v->input = IN_PARAM; v->fqn = get_str(sm, "parameter_name"); }
    else if (!strcmp(sk, "buffer")) { v->input = IN_BUFFER; v->fqn = get_str(sm, "buffer_name"); }
    else if (!strcmp(sk, "tensor_constant")) { v->input = IN_CONST; v->fqn = get_str(sm, "tensor_constant_name"); }
    else return gg_error(l->c, "%s: graph input %s: unsupported input kind %s", l->file, gg_quote(l->c, nm), sk);
    if (v->input != IN_USER && !v->fqn) return gg_error(l->c, "%s: graph input %s: %s without a name", l->file, gg_quote(l->c, nm), sk);
    if (v->fqn) v->fqn = arena_strdup(l->c->arena, v->fqn);
    g->inputs[g->ninputs++] = v;
  }
  return 0;
}

static int load_outputs(L *l, const cJSON *sig) {
  const cJSON *specs = get(sig, "output_specs");
  if (!cJSON_IsArray(specs)) return gg_error(l->c, "%s: output_specs missing", l->file);
  Graph *g = l->g;
  int n = cJSON_GetArraySize(specs);
  g->outputs = arena_array(l->c->arena, (size_t)n + 1, sizeof *g->outputs);
  for (const cJSON *s = specs->child; s; s = s->next) {
    const char *k, *ak;
    cJSON *m = union_member(s, &k);
    cJSON *a = m ? get(m, "arg") : NULL;
    cJSON *am = union_member(a, &ak);
    const char *nm = am && !strcmp(ak, "as_tensor") ? get_str(am, "name") : get_str(a, "name");
    if (!m || !nm) return gg_error(l->c, "%s: output_specs[%d]: only tensor outputs are supported", l->file, g->noutputs);
    Value *v = lookup(l, nm);
    if (!v) return gg_error(l->c, "%s: output %s is not defined by the graph", l->file, gg_quote(l->c, nm));
    OutputSpec *o = &g->outputs[g->noutputs++];
    o->v = v;
    if (!strcmp(k, "user_output") || !strcmp(k, "loss_output")) o->kind = OUT_USER;
    else if (!strcmp(k, "buffer_mutation")) {
      o->kind = OUT_BUFFER_MUTATION;
      const char *bn = get_str(m, "buffer_name");
      o->target_name = bn ? arena_strdup(l->c->arena, bn) : NULL;
    } else o->kind = OUT_OTHER;
  }
  return 0;
}

/* ---------------------------------------------------------------- weights */

static int bind_payload(L *l, const Zip *z, const char *top, const char *dir, const cJSON *config, Value *v) {
  const cJSON *e = get(get(config, "config"), v->fqn);
  if (!e) return 0;
  const char *path = get_str(e, "path_name");
  if (!path) return gg_error(l->c, "%s: payload config for %s has no path_name", l->file, gg_quote(l->c, v->fqn));
  if (cJSON_IsTrue(get(e, "use_pickle")))
    return gg_error(l->c, "%s: %s is stored as a pickle (a tensor subclass); gcc-graph reads plain tensors only", l->file, gg_quote(l->c, v->fqn));
  char full[1024];
  snprintf(full, sizeof full, "%s/%s/%s", top, dir, path);
  const ZipEntry *ze = zip_find(z, full);
  if (!ze) return gg_error(l->c, "%s: %s: archive entry %s is missing", l->file, gg_quote(l->c, v->fqn), gg_quote(l->c, full));
  Value meta = {0};
  char where[600];
  snprintf(where, sizeof where, "weights config[%s]", gg_quote(l->c, v->fqn));
  if (read_tensor_meta(l, get(e, "tensor_meta"), &meta, where)) return -1;
  if (meta.dtype != v->dtype || meta.rank != v->rank)
    return gg_error(l->c, "%s: %s: stored as %s rank %d, the graph expects %s rank %d", l->file, gg_quote(l->c, v->fqn),
                    dtype_name(meta.dtype), meta.rank, dtype_name(v->dtype), v->rank);
  Weight *w = arena_alloc(l->c->arena, sizeof *w);
  w->fqn = v->fqn;
  w->dtype = meta.dtype;
  w->rank = meta.rank;
  int64_t last = 0, numel = 1;
  for (int i = 0; i < meta.rank; i++) {
    if (!expr_is_const(meta.sizes[i], &w->sizes[i]) || !meta.strides || !expr_is_const(meta.strides[i], &w->strides[i]))
      return gg_error(l->c, "%s: %s: weights must have static sizes and strides", l->file, gg_quote(l->c, v->fqn));
    if (!expr_same(l->g, meta.sizes[i], v->sizes[i]))
      return gg_error(l->c, "%s: %s: stored size at dim %d differs from the graph's", l->file, gg_quote(l->c, v->fqn), i);
    if (w->strides[i] < 0) return gg_error(l->c, "%s: %s: negative stride", l->file, gg_quote(l->c, v->fqn));
    int64_t span;
    if (__builtin_mul_overflow(numel, w->sizes[i], &numel) ||
        (w->sizes[i] > 0 && (__builtin_mul_overflow(w->sizes[i] - 1, w->strides[i], &span) || __builtin_add_overflow(last, span, &last))))
      return gg_error(l->c, "%s: %s: strides overflow", l->file, gg_quote(l->c, v->fqn));
  }
  cJSON *so = get(get(e, "tensor_meta"), "storage_offset");
  const char *sok;
  cJSON *som = union_member(so, &sok);
  if (som && !get_int(som, &w->offset)) w->offset = -1;
  if (w->offset < 0) return gg_error(l->c, "%s: %s: bad storage_offset", l->file, gg_quote(l->c, v->fqn));
  size_t es = (size_t)dtype_info(w->dtype)->size;
  if (numel > 0 && ze->size == 0) {
    /* a zero-length file is a fake tensor: PyTorch loads zeros (bounded: the file is nothing) */
    size_t nb = (size_t)numel * es;
    if (nb > GG_MAX_FAKE_BYTES)
      return gg_error(l->c, "%s: %s: a fake (zero-length) weight of %llu bytes exceeds %llu", l->file, gg_quote(l->c, v->fqn),
                      (unsigned long long)nb, (unsigned long long)GG_MAX_FAKE_BYTES);
    w->data = arena_alloc(l->c->arena, nb);
    w->nbytes = nb;
    w->offset = 0;
    for (int64_t i = w->rank - 1, s = 1; i >= 0; s *= w->sizes[i], i--) w->strides[i] = s;
  } else {
    /* offset + last + 1 elements of es bytes, each step checked: a huge offset must not wrap */
    uint64_t need = 0;
    if (numel != 0 && (__builtin_add_overflow((uint64_t)w->offset, (uint64_t)last + 1, &need) || __builtin_mul_overflow(need, (uint64_t)es, &need)))
      need = UINT64_MAX;
    if (need > ze->size)
      return gg_error(l->c, "%s: %s: needs %llu bytes but its file %s holds %llu (truncated weights?)", l->file, gg_quote(l->c, v->fqn),
                      (unsigned long long)need, gg_quote(l->c, full), (unsigned long long)ze->size);
    w->data = ze->data;
    w->nbytes = (size_t)ze->size;
  }
  v->weight = w;
  return 0;
}

static cJSON *parse_json_entry(L *l, const uint8_t *data, size_t len, const char *name) {
  cJSON *j = cJSON_ParseWithLength((const char *)data, len);
  if (!j) gg_error(l->c, "%s: %s is not valid JSON (truncated or corrupted)", l->file, name);
  return j;
}

static int bind_archive_weights(L *l, const Zip *z, const char *top) {
  char p1[512], p2[512];
  snprintf(p1, sizeof p1, "%s/data/weights/model_weights_config.json", top);
  snprintf(p2, sizeof p2, "%s/data/constants/model_constants_config.json", top);
  const ZipEntry *w = zip_find(z, p1), *c = zip_find(z, p2);
  char legacy[512];
  snprintf(legacy, sizeof legacy, "%s/data/weights/model.pt", top);
  if (!w && zip_find(z, legacy))
    return gg_error(l->c, "%s: weights are pickled (written by PyTorch 2.8); re-save with PyTorch >= 2.9: torch.export.save(torch.export.load(path), path)", l->file);
  cJSON *wc = w ? parse_json_entry(l, w->data, w->size, p1) : NULL;
  cJSON *cc = c ? parse_json_entry(l, c->data, c->size, p2) : NULL;
  int rc = (w && !wc) || (c && !cc) ? -1 : 0;
  for (int i = 0; !rc && i < l->g->ninputs; i++) {
    Value *v = l->g->inputs[i];
    if (v->input == IN_USER) continue;
    rc = bind_payload(l, z, top, "data/weights", wc, v);
    if (!rc && !v->weight) rc = bind_payload(l, z, top, "data/constants", cc, v);
  }
  cJSON_Delete(wc);
  cJSON_Delete(cc);
  return rc;
}

/* Tied parameters: PyTorch's one Parameter registered under two names (a language model's output
 * projection sharing the token embedding's weight) is exported as two placeholders over the same
 * storage. Where two parameters are the same view (dtype, sizes, strides, offset) of the same bytes,
 * the later one's uses become the earlier one's, so that autograd sums the gradient of both uses
 * into one parameter and the optimizer updates it once, as PyTorch does; the later name stays a
 * weight of the .so (the same storage: build_prepare, the runtimes). */
static void tie_parameters(L *l) {
  Graph *g = l->g;
  int ntied = 0;
  for (int j = 0; j < g->ninputs; j++) {
    Value *v = g->inputs[j];
    const Weight *w = v->weight;
    if (v->input != IN_PARAM || !w) continue;
    for (int i = 0; i < j && !v->tied; i++) {
      Value *u = g->inputs[i];
      const Weight *x = u->weight;
      if (u->input != IN_PARAM || !x || u->tied || x->data != w->data || x->nbytes != w->nbytes || x->dtype != w->dtype || x->rank != w->rank ||
          x->offset != w->offset || u->requires_grad != v->requires_grad)
        continue;
      bool same = true;
      for (int d = 0; d < w->rank; d++) same = same && x->sizes[d] == w->sizes[d] && x->strides[d] == w->strides[d];
      if (same) v->tied = u;
    }
    ntied += v->tied != NULL;
  }
  if (!ntied) return;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    for (int a = 0; n->op && a < n->op->nargs; a++) {
      Arg *arg = &n->args[a];
      if (arg->k == AK_TENSOR && arg->u.t && arg->u.t->tied) arg->u.t = arg->u.t->tied;
      for (int e = 0; arg->k == AK_TENSORS && e < arg->n; e++)
        if (arg->u.ts[e] && arg->u.ts[e]->tied) arg->u.ts[e] = arg->u.ts[e]->tied;
    }
  }
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].v->tied) g->outputs[i].v = g->outputs[i].v->tied;
  for (int j = 0; j < g->ninputs; j++)
    if (g->inputs[j]->tied)
      gg_log(l->c, LOG_AUTOGRAD, "parameter %s is tied to %s (the same storage): one parameter", gg_quote(l->c, g->inputs[j]->fqn),
             gg_quote(l->c, g->inputs[j]->tied->fqn));
}

static int bind_safetensors_weights(L *l, const char *path) {
  SafeTensors st;
  if (st_read(l->c, l->g, path, &st)) return -1;
  for (int i = 0; i < l->g->ninputs; i++) {
    Value *v = l->g->inputs[i];
    if (v->input == IN_USER) continue;
    const STensor *t = st_find(&st, v->fqn);
    if (!t) continue;
    if (t->dtype != v->dtype || t->rank != v->rank)
      return gg_error(l->c, "%s: %s is %s rank %d, the graph expects %s rank %d", path, gg_quote(l->c, v->fqn), dtype_name(t->dtype), t->rank, dtype_name(v->dtype), v->rank);
    Weight *w = arena_alloc(l->c->arena, sizeof *w);
    w->fqn = v->fqn;
    w->dtype = t->dtype;
    w->rank = t->rank;
    for (int64_t d = t->rank - 1, s = 1; d >= 0; d--) {
      w->sizes[d] = t->sizes[d];
      if (!expr_same(l->g, expr_const(l->c->arena, t->sizes[d]), v->sizes[d]))
        return gg_error(l->c, "%s: %s: size %lld at dim %d differs from the graph's", path, gg_quote(l->c, v->fqn), (long long)t->sizes[d], (int)d);
      w->strides[d] = s;
      s *= t->sizes[d];
    }
    w->data = t->data;
    w->nbytes = t->nbytes;
    v->weight = w;
  }
  return 0;
}

/* ---------------------------------------------------------------- entry */

static int load_program(L *l, cJSON *root) {
  Graph *g = l->g;
  if (!cJSON_IsObject(root)) return gg_error(l->c, "%s: not an ExportedProgram (expected a JSON object)", l->file);
  const cJSON *sv = get(root, "schema_version");
  int64_t major = -1, minor = 0;
  if (!sv || !get_int(get(sv, "major"), &major))
    return gg_error(l->c, "%s: no schema_version: not a serialized ExportedProgram", l->file);
  get_int(get(sv, "minor"), &minor);
  if (major != 8) return gg_error(l->c, "%s: schema version %lld.%lld is not supported (gcc-graph reads major 8)", l->file, (long long)major, (long long)minor);
  g->schema_major = (int)major;
  g->schema_minor = (int)minor;
  const cJSON *ver = get(root, "verifiers");
  g->ir = cJSON_IsArray(ver) && cJSON_IsString(ver->child) ? arena_strdup(l->c->arena, ver->child->valuestring) : "ATEN";
  const char *tv = get_str(root, "torch_version");
  g->torch_version = tv ? arena_strdup(l->c->arena, tv) : "unknown";
  const cJSON *gm = get(root, "graph_module"), *graph = get(gm, "graph"), *sig = get(gm, "signature");
  if (!graph || !sig) return gg_error(l->c, "%s: graph_module.graph or its signature is missing", l->file);
  /* symbols named in range_constraints, with their bounds */
  const cJSON *rc = get(root, "range_constraints");
  if (rc && !cJSON_IsObject(rc)) return gg_error(l->c, "%s: range_constraints is not an object", l->file);
  for (const cJSON *r = rc ? rc->child : NULL; r; r = r->next) {
    const Expr *e = expr_parse(l->c, g, r->string, arena_printf(l->c->arena, "%s: range_constraints", l->file));
    if (!e) return -1;
    if (e->k != E_SYM) continue;   /* constraints on expressions follow from those on symbols */
    if (!cJSON_IsObject(r)) return gg_error(l->c, "%s: range_constraints[%s] is not an object", l->file, gg_quote(l->c, r->string));
    int64_t lo, hi;
    if (get_int(get(r, "min_val"), &lo)) g->syms[e->c].min = lo;
    if (get_int(get(r, "max_val"), &hi)) g->syms[e->c].max = hi;
    if (g->syms[e->c].min > g->syms[e->c].max)
      return gg_error(l->c, "%s: range_constraints[%s]: min exceeds max", l->file, gg_quote(l->c, r->string));
  }
  l->tensor_values = get(graph, "tensor_values");
  l->sym_int_values = get(graph, "sym_int_values");
  if (load_inputs(l, graph, sig) || load_graph_body(l, graph) || load_outputs(l, sig)) return -1;
  for (int i = 0; i < g->nsyms; i++) {   /* a hint outside the range would make shape checks lie */
    Sym *s = &g->syms[i];
    if (s->hint < s->min) s->hint = s->min;
    if (s->hint > s->max) s->hint = s->max;
  }
  return 0;
}

/* The file at path (a .pt2 archive or its JSON) into g: nonzero after an error. */
static int load_file(Ctx *c, Graph *g, const char *path, const char *weights) {
  L l = {c, g, path, "", NULL, NULL, 0};
  size_t len;
  const uint8_t *p = map_file(c, g, path, &len);
  if (!p) return 1;
  cJSON *root = NULL;
  int rc = 0;
  if (len >= 4 && p[0] == 'P' && p[1] == 'K') {
    Zip z;
    if (zip_open(c, g, path, &z)) return 1;
    if (z.n == 0) { gg_error(c, "%s: empty archive", path); return 1; }
    const char *first = z.entries[0].name, *slash = strchr(first, '/');
    char top[512] = "";
    if (slash && (size_t)(slash - first) < sizeof top) { memcpy(top, first, (size_t)(slash - first)); top[slash - first] = 0; }
    char mj[600];
    snprintf(mj, sizeof mj, "%s/models/model.json", top);
    const ZipEntry *e = zip_find(&z, mj);
    if (!e) {   /* another model name: the first JSON under models/ */
      char pre[600];
      snprintf(pre, sizeof pre, "%s/models/", top);
      for (int i = 0; i < z.n && !e; i++)
        if (!strncmp(z.entries[i].name, pre, strlen(pre)) && strstr(z.entries[i].name, ".json")) e = &z.entries[i];
    }
    if (!e) {
      bool legacy = zip_find(&z, "serialized_exported_program.json") != NULL;
      for (int i = 0; i < z.n && !legacy; i++) legacy = strstr(z.entries[i].name, "serialized_exported_program.json") != NULL;
      if (legacy) gg_error(c, "%s: archive written by PyTorch <= 2.8 (pickled weights); re-save it with PyTorch >= 2.9: torch.export.save(torch.export.load(path), path)", path);
      else gg_error(c, "%s: no models/*.json in the archive: not a torch.export .pt2", path);
      return 1;
    }
    root = parse_json_entry(&l, e->data, e->size, e->name);
    if (!root) return 1;
    rc = load_program(&l, root);
    if (!rc) rc = bind_archive_weights(&l, &z, top);
  } else {
    size_t i = 0;
    while (i < len && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
    if (i == len || p[i] != '{') { gg_error(c, "%s: neither a .pt2 archive nor an ExportedProgram JSON", path); return 1; }
    root = cJSON_ParseWithLength((const char *)p, len);
    if (!root) {
      const char *at = cJSON_GetErrorPtr();
      long off = at && at >= (const char *)p && at <= (const char *)p + len ? (long)(at - (const char *)p) : -1;
      gg_error(c, "%s: invalid JSON (truncated, or nested too deeply) near byte %ld", path, off);
      return 1;
    }
    rc = load_program(&l, root);
  }
  cJSON_Delete(root);
  if (!rc && weights) rc = bind_safetensors_weights(&l, weights);
  if (!rc) tie_parameters(&l);
  return rc;
}

Graph *graph_load(Ctx *c, const char *path, const char *weights) {
  if (ops_init(c)) return NULL;
  Graph *g = arena_alloc(c->arena, sizeof *g);
  g->ctx = c;
  g->path = arena_strdup(c->arena, path);
  if (load_file(c, g, path, weights)) {   /* the files it mapped unmapped (a process that loads many models, the fuzzers, kept them) */
    graph_release(g);
    return NULL;
  }
  return g;
}
