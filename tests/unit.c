/* unit.c: unit tests of the pieces below the interpreter: symbolic sizes, dtypes and promotion, the
 * op table's schema reader, safetensors round trips, shape rules on hand-built nodes, and the
 * accuracy of scalar.h's float32 functions against libm in float64.
 * Prints failures and "N passed, N failed". */
#include "../lib/gg.h"
#include "../lib/rewrite.h"
#include "../lib/scalar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int pass, fail;
#define CHECK(cond) do { if (cond) pass++; else { fail++; printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)

static Graph *empty_graph(Ctx *c) {
  Graph *g = arena_alloc(c->arena, sizeof *g);
  g->ctx = c;
  g->path = "unit";
  return g;
}

static void test_expr(void) {
  Ctx *c = ctx_new();
  Graph *g = empty_graph(c);
  const Expr *e = expr_parse(c, g, "Mul(Integer(2), Symbol('s7', positive=True, integer=True))", "t");
  CHECK(e && g->nsyms == 1 && !strcmp(g->syms[0].name, "s7"));
  int64_t env[4] = {5}, v = 0;
  CHECK(e && expr_eval(c, e, env, &v) == 0 && v == 10);
  const Expr *f = expr_parse(c, g, "s7 + s7", "t");
  CHECK(f && expr_same(g, e, f));              /* 2*s7 == s7 + s7 at every point */
  const Expr *h = expr_parse(c, g, "s7 + 1", "t");
  CHECK(h && !expr_same(g, e, h));
  const Expr *fd = expr_parse(c, g, "FloorDiv(Add(Symbol('s7'), Integer(-1)), Integer(2)) + 1", "t");
  env[0] = 8;
  CHECK(fd && expr_eval(c, fd, env, &v) == 0 && v == 4);   /* (8-1)//2 + 1 */
  const Expr *neg = expr_parse(c, g, "-7 // 2", "t");
  CHECK(neg && expr_is_const(neg, &v) && v == -4);          /* Python floors */
  const Expr *mod = expr_parse(c, g, "PythonMod(Integer(-7), Integer(3))", "t");
  CHECK(mod && expr_is_const(mod, &v) && v == 2);
  CHECK(expr_parse(c, g, "2 * 3 + 4", "t")->c == 10);
  CHECK(expr_str(c->arena, g, expr_parse(c, g, "2*s7 + 1", "t")) != NULL);
  /* refusals */
  Ctx *c2 = ctx_new();
  CHECK(!expr_parse(c2, g, "Symbol('s7'", "t") && c2->has_err);
  ctx_free(c2);
  c2 = ctx_new();
  char deep[2048];
  memset(deep, '(', 1000); deep[1000] = '1'; memset(deep + 1001, ')', 1000); deep[2001] = 0;
  CHECK(!expr_parse(c2, g, deep, "t") && strstr(c2->err, "deeply"));
  ctx_free(c2);
  c2 = ctx_new();
  CHECK(!expr_parse(c2, g, "99999999999999999999", "t") && strstr(c2->err, "too large"));
  ctx_free(c2);
  c2 = ctx_new();
  const Expr *ov = expr_parse(c2, g, "s7 * 4611686018427387904 * 4", "t");
  int64_t big[1] = {3};
  CHECK(ov && expr_eval(c2, ov, big, &v) == -1);            /* overflow is an error, not a wrap */
  ctx_free(c2);
  ctx_free(c);
}

static double roundtrip(DType d, double v) {
  uint8_t b[8];
  dtype_store_f64(d, b, v);
  return dtype_load_f64(d, b);
}

static void test_dtype(void) {
  CHECK(roundtrip(DT_F16, 1.0) == 1.0);
  CHECK(roundtrip(DT_F16, 65504.0) == 65504.0);
  CHECK(isinf(roundtrip(DT_F16, 65520.0)));
  CHECK(roundtrip(DT_F16, 2049.0) == 2048.0);               /* tie to even */
  CHECK(roundtrip(DT_F16, 2051.0) == 2052.0);
  CHECK(roundtrip(DT_F16, 5.960464477539063e-08) == 5.960464477539063e-08);  /* smallest subnormal */
  CHECK(roundtrip(DT_F16, 1e-9) == 0.0);
  CHECK(isnan(roundtrip(DT_F16, NAN)));
  CHECK(roundtrip(DT_BF16, 1.0) == 1.0);
  CHECK(roundtrip(DT_BF16, 257.0) == 256.0);                /* 8 bits of mantissa, tie to even */
  CHECK(roundtrip(DT_BF16, 259.0) == 260.0);
  CHECK(roundtrip(DT_F32, 0.1) == (double)0.1f);
  CHECK(roundtrip(DT_I8, 300) == 44);                       /* wraps like a C cast */
  CHECK(roundtrip(DT_BOOL, 0.5) == 1);
  uint8_t b[8];
  dtype_store_i64(DT_I64, b, INT64_MAX);
  CHECK(dtype_load_i64(DT_I64, b) == INT64_MAX);
  CHECK(dtype_promote(DT_U8, DT_I8) == DT_I16);
  CHECK(dtype_promote(DT_I64, DT_F16) == DT_F16);
  CHECK(dtype_promote(DT_F16, DT_BF16) == DT_F32);
  CHECK(dtype_promote(DT_BOOL, DT_BOOL) == DT_BOOL);
  CHECK(dtype_promote(DT_I32, DT_I64) == DT_I64);
  CHECK(dtype_promote(DT_BOOL, DT_U8) == DT_U8);
  CHECK(dtype_info(7)->size == 4 && !dtype_info(9) && !dtype_info(99));
  CHECK(dtype_by_st_name("BF16")->code == DT_BF16);
}

static const Arg *def_of(const OpDef *op, const char *arg) {
  int i = ops_arg_index(op, arg);
  return i >= 0 && op->args[i].has_default ? &op->args[i].def : NULL;
}

static void test_schema(void) {
  Ctx *c = ctx_new();
  CHECK(ops_init(c) == 0);
  CHECK(ops_count() > 150);
  for (int i = 0; i < ops_count(); i++) CHECK(ops_at(i)->name && ops_at(i)->nargs >= 0);
  const OpDef *add = ops_find("torch.ops.aten.add.Tensor");
  int64_t v;
  CHECK(add && add->nargs == 3 && def_of(add, "alpha") && def_of(add, "alpha")->k == AK_INT && expr_is_const(def_of(add, "alpha")->u.i, &v) && v == 1);
  CHECK(ops_find("torch.ops.aten.relu.default") == ops_find("relu"));
  CHECK(ops_find("torch.ops.aten.nonexistent.default") == NULL);
  CHECK(ops_find("torch.ops.higher_order.cond") == NULL);
  const OpDef *conv = ops_find("conv2d");
  const Arg *st = def_of(conv, "stride");
  CHECK(st && st->k == AK_INTS && st->n == 2 && expr_is_const(st->u.is[1], &v) && v == 1);
  const OpDef *mp = ops_find("max_pool2d");
  CHECK(def_of(mp, "stride") && def_of(mp, "stride")->n == 0);   /* [] means: the kernel size */
  const OpDef *ce = ops_find("cross_entropy_loss");
  CHECK(expr_is_const(def_of(ce, "reduction")->u.i, &v) && v == 1);  /* Mean */
  CHECK(expr_is_const(def_of(ce, "ignore_index")->u.i, &v) && v == -100);
  CHECK(def_of(ce, "label_smoothing")->k == AK_FLOAT && def_of(ce, "label_smoothing")->u.f == 0.0);
  const OpDef *ln = ops_find("layer_norm");
  CHECK(def_of(ln, "eps")->k == AK_FLOAT && def_of(ln, "eps")->u.f == 1e-5);
  CHECK(def_of(ln, "weight")->k == AK_NONE);
  CHECK(ops_find("native_layer_norm")->nrets == 3 && ops_find("split.Tensor")->nrets == -1 && ops_find("_assert_tensor_metadata")->nrets == 0);
  CHECK(ops_find("add_.Tensor")->inplace && !add->inplace);
  CHECK(ops_find("view")->view && !ops_find("clone")->view);
  CHECK(!strcmp(def_of(ops_find("gelu"), "approximate")->u.s, "none"));
  CHECK(!strcmp(def_of(ops_find("pad"), "mode")->u.s, "constant"));
  ctx_free(c);
}

static void test_safetensors(void) {
  Ctx *c = ctx_new();
  Graph *g = empty_graph(c);
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t idata[2] = {-1, INT64_MAX};
  STensor t[2] = {{"a.weight", DT_F32, 2, {2, 3}, (const uint8_t *)data, sizeof data},
                  {"in.0", DT_I64, 1, {2}, (const uint8_t *)idata, sizeof idata}};
  const char *path = "build/unit-roundtrip.safetensors";
  CHECK(st_write(c, path, t, 2) == 0);
  SafeTensors r;
  CHECK(st_read(c, g, path, &r) == 0 && r.n == 2);
  const STensor *a = st_find(&r, "a.weight"), *b = st_find(&r, "in.0");
  CHECK(a && a->rank == 2 && a->sizes[1] == 3 && !memcmp(a->data, data, sizeof data));
  CHECK(b && b->dtype == DT_I64 && !memcmp(b->data, idata, sizeof idata));
  /* a header that claims more bytes than the file has */
  FILE *f = fopen(path, "r+b");
  uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  fwrite(huge, 1, 8, f);
  fclose(f);
  Ctx *c2 = ctx_new();
  Graph *g2 = empty_graph(c2);
  CHECK(st_read(c2, g2, path, &r) == -1 && strstr(c2->err, "exceeds"));
  graph_release(g2);
  ctx_free(c2);
  graph_release(g);
  remove(path);
  ctx_free(c);
}

/* Shape rules on values built by hand: broadcasting, promotion with wrapped numbers, reductions. */
static Value *tval(Graph *g, const char *name, DType dt, int rank, const int64_t *sizes) {
  Value *v = graph_new_value(g, name);
  v->kind = VK_TENSOR;
  v->dtype = dt;
  v->rank = rank;
  v->sizes = arena_array(g->ctx->arena, (size_t)rank + 1, sizeof *v->sizes);
  for (int d = 0; d < rank; d++) v->sizes[d] = expr_const(g->ctx->arena, sizes[d]);
  v->declared = true;
  return v;
}

static Node *mknode(Graph *g, const char *op) {
  Node *n = arena_alloc(g->ctx->arena, sizeof *n);
  n->op = ops_find(op);
  n->name = op;
  n->target = op;
  n->args = arena_array(g->ctx->arena, (size_t)n->op->nargs + 1, sizeof *n->args);
  for (int i = 0; i < n->op->nargs; i++) if (n->op->args[i].has_default) n->args[i] = n->op->args[i].def;
  return n;
}

static void test_shapes(void) {
  Ctx *c = ctx_new();
  ops_init(c);
  Graph *g = empty_graph(c);
  ShapeCtx sc;
  Value *a = tval(g, "a", DT_I64, 3, (int64_t[]){4, 1, 3}), *b = tval(g, "b", DT_F16, 2, (int64_t[]){5, 1});
  Node *n = mknode(g, "mul.Tensor");
  n->args[0] = (Arg){.k = AK_TENSOR, .u.t = a};
  n->args[1] = (Arg){.k = AK_TENSOR, .u.t = b};
  CHECK(shape_infer(g, n, &sc) == 0 && sc.out[0].rank == 3 && sc.out[0].dtype == DT_F16);
  int64_t v;
  CHECK(expr_is_const(sc.out[0].sizes[1], &v) && v == 5);
  /* int tensor * Python float -> the default float dtype; int tensor * 0-d float64 tensor -> float64 */
  n->args[1] = (Arg){.k = AK_FLOAT, .u.f = 0.5};
  CHECK(shape_infer(g, n, &sc) == 0 && sc.out[0].dtype == DT_F32);
  Value *z = tval(g, "z", DT_F64, 0, NULL);
  n->args[1] = (Arg){.k = AK_TENSOR, .u.t = z};
  CHECK(shape_infer(g, n, &sc) == 0 && sc.out[0].dtype == DT_F64);
  /* float32 tensor * 0-d float64 tensor stays float32 (same category) */
  Value *f = tval(g, "f", DT_F32, 1, (int64_t[]){2});
  n->args[0] = (Arg){.k = AK_TENSOR, .u.t = f};
  CHECK(shape_infer(g, n, &sc) == 0 && sc.out[0].dtype == DT_F32);
  /* shapes that do not broadcast are refused with the node named */
  Value *q = tval(g, "q", DT_F32, 1, (int64_t[]){3});
  n->args[1] = (Arg){.k = AK_TENSOR, .u.t = q};
  Ctx *saved = g->ctx;
  CHECK(shape_infer(g, n, &sc) == -1 && strstr(c->err, "broadcast"));
  c->has_err = false;
  g->ctx = saved;
  /* sum over dims with keepdim; sum of ints is int64 */
  Node *s = mknode(g, "sum.dim_IntList");
  s->args[0] = (Arg){.k = AK_TENSOR, .u.t = tval(g, "i", DT_I32, 3, (int64_t[]){2, 3, 4})};
  const Expr *dims[2] = {expr_const(c->arena, -1), expr_const(c->arena, 0)};
  s->args[1] = (Arg){.k = AK_INTS, .n = 2, .u.is = dims};
  s->args[2] = (Arg){.k = AK_BOOL, .u.b = true};
  CHECK(shape_infer(g, s, &sc) == 0 && sc.out[0].rank == 3 && sc.out[0].dtype == DT_I64 && expr_is_const(sc.out[0].sizes[0], &v) && v == 1);
  /* view with -1 */
  Node *vw = mknode(g, "view");
  vw->args[0] = (Arg){.k = AK_TENSOR, .u.t = a};
  const Expr *sz[2] = {expr_const(c->arena, -1), expr_const(c->arena, 2)};
  vw->args[1] = (Arg){.k = AK_INTS, .n = 2, .u.is = sz};
  CHECK(shape_infer(g, vw, &sc) == 0 && expr_is_const(sc.out[0].sizes[0], &v) && v == 6);
  ctx_free(c);
}

/* Fusion rules on graphs built by hand (schedule.c): what is fused, what goes to an epilogue, and
 * why the rest is refused, without generating code. */
static Value *input(Graph *g, const char *name, int rank, const int64_t *sizes) {
  Value *v = tval(g, name, DT_F32, rank, sizes);
  v->input = IN_USER;
  Value **in = arena_array(g->ctx->arena, (size_t)g->ninputs + 1, sizeof *in);
  if (g->ninputs) memcpy(in, g->inputs, sizeof *in * (size_t)g->ninputs);
  v->user_index = g->ninputs;
  v->input_index = g->ninputs;
  in[g->ninputs++] = v;
  g->inputs = in;
  return v;
}

/* the graph made of rw's nodes, with these outputs */
static Schedule *sched_of(Graph *g, Rw *rw, int nout, Value **outs) {
  g->nodes = rw->nodes;
  g->nnodes = rw->n;
  for (int k = 0; k < g->nnodes; k++) g->nodes[k]->id = k;
  g->outputs = arena_array(g->ctx->arena, (size_t)nout + 1, sizeof *g->outputs);
  for (int i = 0; i < nout; i++) g->outputs[i] = (OutputSpec){.kind = OUT_USER, .v = outs[i]};
  g->noutputs = nout;
  return schedule_graph(g);
}

static bool refused(const Schedule *s, const char *node, const char *why) {
  for (int k = 0; k < s->nrefused; k++)
    if (!strcmp(s->refused[k].node, node) && strstr(s->refused[k].why, why)) return true;
  return false;
}

static void test_schedule(void) {
  Ctx *c = ctx_new();
  ops_init(c);
  Node orig = {.name = "n"};
  /* relu -> add: relu computed in add's loop; add, an output, is a kernel */
  {
    Graph *g = empty_graph(c);
    Rw rw = {.g = g, .orig = &orig};
    Value *x = input(g, "x", 2, (int64_t[]){4, 5});
    Value *r = CALL(&rw, NULL, "relu", "self", T(x)), *y = CALL(&rw, NULL, "add.Scalar", "self", T(r), "other", FL(1));
    Schedule *s = sched_of(g, &rw, 1, &y);
    CHECK(s && s->role[r->def->id] == SN_FUSED && s->into[r->def->id] == y->def && s->role[y->def->id] == SN_KERNEL && s->nfused == 1);
    CHECK(s && sched_kernel_of(s, r->def) == y->def && s->nrefused == 0);
  }
  /* read by a reduction too, an output, a broadcast reader: each stored, each with its reason; a value
   * of one operand read twice by pointwise nodes is recomputed by both (the GPU's rules) */
  {
    c->cuda = true;
    Graph *g = empty_graph(c);
    Rw rw = {.g = g, .orig = &orig};
    Value *x = input(g, "x", 2, (int64_t[]){4, 1}), *b = input(g, "b", 2, (int64_t[]){4, 5});
    Value *r = CALL(&rw, NULL, "relu", "self", T(x)), *r2 = CALL(&rw, NULL, "sigmoid", "self", T(x));
    Value *p = CALL(&rw, NULL, "add.Tensor", "self", T(r), "other", T(r2));
    Value *q = CALL(&rw, NULL, "neg", "self", T(p));                         /* p is also an output */
    Value *sum = CALL(&rw, NULL, "sum.dim_IntList", "self", T(r), "dim", INTS(&rw, 1, (int64_t[]){0}));
    Value *rr = CALL(&rw, NULL, "mul.Tensor", "self", T(r2), "other", T(r2));
    Value *outs2 = CALL(&rw, NULL, "add.Tensor", "self", T(sum), "other", T(rr));
    Value *e = CALL(&rw, NULL, "exp", "self", T(x));
    for (int k = 0; k < SCHED_BCAST_NODES; k++) e = CALL(&rw, NULL, k % 2 ? "exp" : "neg", "self", T(e));   /* too costly to repeat per element */
    Value *w = CALL(&rw, NULL, "mul.Tensor", "self", T(e), "other", T(b));   /* e broadcasts to [4, 5] */
    Value *outs[4] = {p, q, w, outs2};
    Schedule *s = sched_of(g, &rw, 4, outs);
    CHECK(s && s->role[r->def->id] == SN_KERNEL && refused(s, r->def->name, "read 2 times"));
    CHECK(s && s->role[r2->def->id] == SN_FUSED);   /* read 3 times, by pointwise nodes only */
    CHECK(s && s->role[p->def->id] == SN_KERNEL && refused(s, p->def->name, "an output of the model"));
    CHECK(s && s->role[e->def->id] == SN_KERNEL && refused(s, e->def->name, "another shape"));
    CHECK(s && s->role[rr->def->id] == SN_FUSED && s->into[rr->def->id] == outs2->def);
    CHECK(s && s->nfused == SCHED_BCAST_NODES + 2);   /* the chain before e, over e's own shape; r2; rr */
    c->cuda = false;
  }
  /* a cheap value read broadcast (RMSNorm's rsqrt per row) is computed in its reader's loop; a cat
   * and its pointwise input in the cat's pointwise reader's loop, not when the cat is read twice */
  {
    Graph *g = empty_graph(c);
    Rw rw = {.g = g, .orig = &orig};
    Value *x = input(g, "x", 2, (int64_t[]){4, 1}), *b = input(g, "b", 2, (int64_t[]){4, 6}), *h = input(g, "h", 2, (int64_t[]){4, 3});
    Value *e = CALL(&rw, NULL, "rsqrt", "self", T(x));
    Value *w = CALL(&rw, NULL, "mul.Tensor", "self", T(e), "other", T(b));
    Value *n = CALL(&rw, NULL, "neg", "self", T(h));
    Value *nh[2] = {n, h}, *hh[2] = {h, h};
    Value *k = CALL(&rw, NULL, "cat", "tensors", (Arg){.k = AK_TENSORS, .n = 2, .u.ts = nh}, "dim", INT(&rw, 1));
    Value *y = CALL(&rw, NULL, "mul.Tensor", "self", T(k), "other", T(w));
    Value *k2 = CALL(&rw, NULL, "cat", "tensors", (Arg){.k = AK_TENSORS, .n = 2, .u.ts = hh}, "dim", INT(&rw, -1));
    Value *outs[2] = {y, CALL(&rw, NULL, "add.Tensor", "self", T(k2), "other", T(k2))};
    Schedule *s = sched_of(g, &rw, 2, outs);   /* the CPU: neither rule; w (same shape) fuses into y */
    CHECK(s && s->role[e->def->id] == SN_KERNEL && refused(s, e->def->name, "another shape") && s->role[w->def->id] == SN_FUSED);
    CHECK(s && s->role[k->def->id] == SN_KERNEL && s->role[n->def->id] == SN_KERNEL && s->nfused == 1);
    c->cuda = true;   /* the GPU: they are computed in their readers' loops */
    s = sched_of(g, &rw, 2, outs);
    c->cuda = false;
    CHECK(s && s->role[e->def->id] == SN_FUSED && s->into[e->def->id] == w->def && s->role[w->def->id] == SN_FUSED);
    CHECK(s && s->role[k->def->id] == SN_FUSED && s->into[k->def->id] == y->def && s->role[n->def->id] == SN_FUSED && s->into[n->def->id] == k->def);
    CHECK(s && s->role[k2->def->id] == SN_KERNEL && s->role[y->def->id] == SN_KERNEL && s->nfused == 4);
  }
  /* linear -> add(residual) -> relu: both in the linear's epilogue (on every target) */
  {
    Graph *g = empty_graph(c);
    Rw rw = {.g = g, .orig = &orig};
    Value *x = input(g, "x", 2, (int64_t[]){8, 16}), *w = input(g, "w", 2, (int64_t[]){32, 16}), *res = input(g, "res", 2, (int64_t[]){8, 32});
    Value *l = CALL(&rw, NULL, "linear", "input", T(x), "weight", T(w));
    Value *a = CALL(&rw, NULL, "add.Tensor", "self", T(l), "other", T(res));
    Value *y = CALL(&rw, NULL, "relu", "self", T(a));
    Schedule *s = sched_of(g, &rw, 1, &y);
    CHECK(s && s->nchain[l->def->id] == 2 && s->chain[l->def->id][0] == a->def && s->chain[l->def->id][1] == y->def);
    CHECK(s && s->role[a->def->id] == SN_EPILOGUE && s->into[y->def->id] == l->def && sched_kernel_of(s, y->def) == l->def);
    CHECK(s && s->storage[y->id] == l->id);   /* the result is in the product's output */
  }
  /* refused epilogues: a transposed (strided) residual, an operand computed after the product */
  {
    Graph *g = empty_graph(c);
    Rw rw = {.g = g, .orig = &orig};
    Value *x = input(g, "x", 2, (int64_t[]){8, 8}), *w = input(g, "w", 2, (int64_t[]){8, 8}), *z = input(g, "z", 2, (int64_t[]){8, 8});
    Value *rt = CALL(&rw, NULL, "t", "self", T(z));
    Value *l = CALL(&rw, NULL, "linear", "input", T(x), "weight", T(w));
    Value *a = CALL(&rw, NULL, "add.Tensor", "self", T(l), "other", T(rt));
    Value *l2 = CALL(&rw, NULL, "linear", "input", T(a), "weight", T(w));
    Value *later = CALL(&rw, NULL, "sigmoid", "self", T(z));
    Value *m = CALL(&rw, NULL, "mul.Tensor", "self", T(l2), "other", T(later));
    Schedule *s = sched_of(g, &rw, 1, &m);
    CHECK(s && !layout_is_contiguous(g, c->arena, &s->layout[rt->id]) && s->storage[rt->id] == z->id);
    CHECK(s && s->nchain[l->def->id] == 0 && refused(s, l->def->name, "strided view"));
    CHECK(s && s->nchain[l2->def->id] == 0 && refused(s, l2->def->name, "computed after the product"));
    CHECK(s && s->role[later->def->id] == SN_FUSED);   /* sigmoid still goes into mul's loop */
  }
  ctx_free(c);
}

/* the float32 exp and erf that compiled float32 kernels use, swept against libm's float64 */
static void test_float32_functions(void) {
  double worst_exp = 0, worst_erf = 0, worst_erf_rel = 0;
  for (double x = -87.5; x < 88.72; x += 3e-4) {
    float f = (float)x;
    worst_exp = fmax(worst_exp, fabs(gg_expf(f) - exp((double)f)) / exp((double)f));
  }
  for (double x = -6; x < 6; x += 1e-5) {
    float f = (float)x;
    double r = erf((double)f), d = fabs(gg_erff(f) - r);
    worst_erf = fmax(worst_erf, d);
    if (fabs(f) < 0.5f && f != 0) worst_erf_rel = fmax(worst_erf_rel, d / fabs(r));
  }
  double worst_tanh = 0;
  for (double x = -12; x < 12; x += 1e-5) {
    float f = (float)x;
    double r = tanh((double)f);
    if (r != 0) worst_tanh = fmax(worst_tanh, fabs(gg_tanhf(f) - r) / fabs(r));
  }
  CHECK(worst_tanh < 2.4e-7);       /* four float32 ulps at most */
  CHECK(gg_tanhf(0) == 0 && gg_tanhf(INFINITY) == 1 && gg_tanhf(-INFINITY) == -1 && isnan(gg_tanhf(NAN)) && gg_tanhf(20) == 1);
  double c3[] = {-3, 1.5};
  CHECK(f32_pow3(&c3[0]) == -27 && f32_pow2(&c3[1]) == 2.25);
  CHECK(worst_exp < 1.2e-7);        /* two float32 ulps */
  CHECK(worst_erf < 4e-7);          /* Abramowitz-Stegun 7.1.26 and rounding */
  CHECK(worst_erf_rel < 2.4e-7);    /* the series keeps small values' relative accuracy */
  CHECK(gg_expf(-INFINITY) == 0 && gg_expf(-100) == 0 && isinf(gg_expf(INFINITY)) && isinf(gg_expf(88.73f)) && isnan(gg_expf(NAN)));
  CHECK(gg_expf(0) == 1 && gg_expf(88.72f) > 3.3e38f && gg_expf(-87.3f) > 1e-38f);
  CHECK(gg_erff(INFINITY) == 1 && gg_erff(-INFINITY) == -1 && isnan(gg_erff(NAN)) && gg_erff(0) == 0);
  double v[] = {-INFINITY, -100, 0, 100, INFINITY};
  CHECK(f32_sigmoid(&v[0]) == 0 && f32_sigmoid(&v[2]) == 0.5 && f32_sigmoid(&v[4]) == 1);
  CHECK(f32_gelu_erf(&v[1]) == 0 && f32_gelu_erf(&v[3]) == 100 && f32_silu(&v[3]) == 100 && isinf(f32_gelu_erf(&v[4])));
}

static int mapping_count(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  int n = 0, ch;
  if (!f) return -1;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

/* A load that fails unmaps what it mapped: a process that loads many models (the fuzzers did, and
 * collected thousands of mappings of their input file) keeps none. */
static void test_failed_load_unmaps(void) {
  const char *bad[] = {"tests/bad/array.json", "tests/bad/rc_array.json", "tests/bad/corrupt_directory.pt2"};
  int before = -1;
  for (int round = 0; round < 20; round++) {
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      Ctx *c = ctx_new();
      CHECK(graph_load(c, bad[i], NULL) == NULL && c->err[0]);
      ctx_free(c);
    }
    if (round == 0) before = mapping_count();
  }
  CHECK(before > 0 && mapping_count() <= before);
}

int main(void) {
  test_expr();
  test_dtype();
  test_schema();
  test_safetensors();
  test_shapes();
  test_schedule();
  test_float32_functions();
  test_failed_load_unmaps();
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
