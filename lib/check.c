/* check.c: automatic ablation (gcc-graph check) and the minifier (gcc-graph minify).
 * Requires: a model and its inputs (or random ones). Guarantees: check runs the model as loaded, then
 * after each stage (functionalized, decomposed, [--train: autograd, partitioned,] compiled) on the
 * same inputs and names the first stage whose results depart from the loaded graph's, and in an
 * interpreted stage the first value that departs. minify cuts the functional graph to the smallest
 * window of nodes whose compiled code still fails (does not compile, crashes, or departs from the
 * interpreter), by binary search on both ends, and writes it as a standalone model.json with its
 * inputs (every value flowing into the window, as computed from the real inputs) and the expected
 * outputs. */
#include "gg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------- tensors as safetensors records */

static STensor st_from(Interp *I, const char *name, Tensor *t) {
  STensor s = {name, t->dtype, t->rank, {0}, NULL, 0};
  memcpy(s.sizes, t->sizes, sizeof s.sizes);
  s.data = tensor_contiguous_bytes(I, t, &s.nbytes);
  return s;
}

/* relative L2 distance of a from b over their values (any two dtypes, compared in float64), with a
 * floor of 1e-3 per element under the norm (a gradient that is zero up to rounding has no
 * meaningful relative error); integers exactly; -1 on a shape mismatch. *maxdiff: the largest
 * absolute difference (NULL: not wanted). */
static double values_distance(const STensor *a, const STensor *b, double *maxdiff) {
  if (a->rank != b->rank) return -1;
  int64_t n = 1;
  for (int d = 0; d < a->rank; d++) { if (a->sizes[d] != b->sizes[d]) return -1; n *= a->sizes[d]; }
  double num = 0, den = 0, most = 0;
  size_t sa = (size_t)dtype_info(a->dtype)->size, sb = (size_t)dtype_info(b->dtype)->size;
  bool exact = !dtype_is_float(a->dtype) || !dtype_is_float(b->dtype);
  for (int64_t i = 0; i < n; i++) {
    double x = dtype_load_f64(a->dtype, a->data + (size_t)i * sa), y = dtype_load_f64(b->dtype, b->data + (size_t)i * sb);
    if (isnan(x) && isnan(y)) continue;
    if (!isfinite(x) || !isfinite(y) || exact) {
      if (x != y) { if (maxdiff) *maxdiff = INFINITY; return INFINITY; }
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
    if (fabs(x - y) > most) most = fabs(x - y);
  }
  if (maxdiff) *maxdiff = most;
  double floor = 1e-6 * (double)n;
  return sqrt(num / (den > floor ? den : floor > 0 ? floor : 1));
}

/* the same for two tensors of one dtype (-1 when the dtypes differ) */
static double distance(const STensor *a, const STensor *b) {
  return a->dtype != b->dtype ? -1 : values_distance(a, b, NULL);
}

/* The inputs: the file's, or random normal floats and zero integers (valid indices), seeded. */
static int make_inputs(Ctx *c, Graph *g, const char *path, const char *save_to, SafeTensors *out) {
  if (path) return st_read(c, g, path, out);
  Value **users;
  int nu = graph_user_inputs(g, &users);
  STensor *t = arena_array(c->arena, (size_t)nu + 1, sizeof *t);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < nu; i++) {
    Value *v = users[i];
    t[i].name = arena_printf(c->arena, "in.%d", i);
    t[i].dtype = v->dtype;
    t[i].rank = v->rank;
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) { t[i].sizes[d] = expr_hint(g, v->sizes[d]); n *= t[i].sizes[d]; }
    t[i].nbytes = (size_t)n * (size_t)dtype_info(v->dtype)->size;
    uint8_t *data = arena_array(c->arena, t[i].nbytes + 1, 1);
    for (int64_t k = 0; dtype_is_float(v->dtype) && k < n; k++) {
      double u1, u2;   /* Box-Muller over xorshift */
      s ^= s << 13; s ^= s >> 7; s ^= s << 17; u1 = ((double)(s >> 11) + 1) / 9007199254740993.0;
      s ^= s << 13; s ^= s >> 7; s ^= s << 17; u2 = (double)(s >> 11) / 9007199254740992.0;
      dtype_store_f64(v->dtype, data + (size_t)k * (size_t)dtype_info(v->dtype)->size, sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    }
    t[i].data = data;
  }
  out->t = t;
  out->n = nu;
  return save_to ? st_write(c, save_to, t, nu) : 0;
}

/* Run g under the interpreter; its results as records named like `gcc-graph run` names them. */
static int interp_results(Ctx *c, Graph *g, const SafeTensors *in, STensor **res, int *nres, Interp **keep, RunResult *raw) {
  Interp *I = interp_new(c, g);
  Value **users;
  int nu = graph_user_inputs(g, &users);
  Tensor **ts = arena_array(c->arena, (size_t)nu + 1, sizeof *ts);
  for (int i = 0; i < nu; i++) {
    const STensor *s = st_find(in, arena_printf(c->arena, "in.%d", i));
    if (!s && !strncmp(users[i]->name, "tangent.", 8)) {   /* the loss's cotangent: 1 */
      int64_t one[GG_MAX_RANK];
      for (int d = 0; d < users[i]->rank; d++) one[d] = 1;
      ts[i] = tensor_new(I, users[i]->dtype, users[i]->rank, one);
      dtype_store_f64(users[i]->dtype, ts[i]->st->data, 1.0);
      continue;
    }
    if (!s) { interp_free(I); return gg_error(c, "the inputs have no in.%d (%s)", i, gg_quote(c, users[i]->name)); }
    ts[i] = tensor_from_st(I, s);
  }
  RunResult r;
  if (interp_run(I, ts, nu, in->t, in->n, &r)) { interp_free(I); return -1; }
  int n = r.nouts + r.nbuffers + r.ngrads;
  STensor *out = arena_array(c->arena, (size_t)n + 1, sizeof *out);
  int k = 0;
  for (int i = 0; i < r.nouts; i++) out[k++] = st_from(I, arena_printf(c->arena, "out.%d", i), r.outs[i]);
  for (int i = 0; i < r.nbuffers; i++) out[k++] = st_from(I, arena_printf(c->arena, "buffer_after.%s", r.buffer_names[i]), r.buffers[i]);
  for (int i = 0; i < r.ngrads; i++) out[k++] = st_from(I, arena_printf(c->arena, "grad.%s", r.grad_names[i]), r.grads[i]);
  *res = out;
  *nres = k;
  if (raw) *raw = r;   /* the saved values of a partitioned forward, which live in I */
  if (keep) *keep = I; else interp_free(I);
  return 0;
}

/* How far `got` is from `ref`, over the records both have; the worst record's name in *worst. */
static double compare_sets(const STensor *ref, int nref, const STensor *got, int ngot, const char **worst) {
  double e = 0;
  *worst = NULL;
  for (int i = 0; i < nref; i++)
    for (int j = 0; j < ngot; j++) {
      if (strcmp(ref[i].name, got[j].name)) continue;
      double d = distance(&got[j], &ref[i]);
      if (d < 0) d = INFINITY;
      if (d > e || !*worst) { e = d; *worst = ref[i].name; }
    }
  return e;
}

/* ---------------------------------------------------------------- check */

/* The stages of the pipeline's table (pipeline.c) that rewrite the graph, then the compiled code
 * (at the index of the first stage that does not: the schedule). */
#define ST_LOADED 0
static const char *stage_name(int s) { return gg_stages[s].rewrites ? gg_stages[s].after : "compiled"; }

/* the graph after stage s (loaded fresh) */
static Graph *graph_at(Ctx *c, const CheckOptions *o, int s, Graph **bwd) {
  Graph *g = graph_load(c, o->model, o->weights);
  Pipeline p = {.g = g, .tr = &o->tr, .fold = true, .precision = o->precision, .cuda = o->cuda, .nchw = o->nchw};
  if (g) c->cuda = o->cuda, c->precision = o->precision;   /* as compile_model sets them: the stages read them */
  if (!g || pipeline_run(&p, 0, s + 1, NULL, NULL)) return NULL;
  if (bwd) *bwd = p.bwd;
  return g;
}

static double default_tol(DType d);

/* The first node of g whose value departs from the reference interpreter's value of the same name
 * (values keep their names through the rewrites that replace a node). */
static void first_departing_node(Ctx *c, Graph *ref, Interp *Iref, Graph *g, Interp *I, double tol, FILE *out) {
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    for (int i = 0; i < n->nouts; i++) {
      Value *v = n->outs[i], *rv = graph_find_value(ref, v->name);
      if (!rv || v->kind != VK_TENSOR || Iref->vals[rv->id].k != RV_TENSOR || I->vals[v->id].k != RV_TENSOR) continue;
      STensor a = st_from(I, v->name, I->vals[v->id].t), b = st_from(Iref, rv->name, Iref->vals[rv->id].t);
      double d = distance(&a, &b);
      if (d >= 0 && d <= tol) continue;
      fprintf(out, "  first departing value: %s of node %s (%s)", gg_quote(c, v->name), gg_quote(c, n->name), n->op ? n->op->name : n->target);
      if (d < 0) fputs(": shape or dtype differs\n", out); else fprintf(out, ": relative error %.3g\n", d);
      if (n->stack_trace) fprintf(out, "  from the user's code: %s\n", gg_quote(c, n->stack_trace));
      return;
    }
  }
  fputs("  no intermediate value departs: only the results do\n", out);
}

int check_model(Ctx *c, const CheckOptions *o, FILE *out) {
  char dir[] = "/tmp/gcc-graph-check-XXXXXX";
  if (!mkdtemp(dir)) return gg_error(c, "cannot create a folder: %s", strerror(errno));
  char *in_path = arena_printf(c->arena, "%s/inputs.safetensors", dir), *so = arena_printf(c->arena, "%s/model.so", dir),
       *res_path = arena_printf(c->arena, "%s/out.safetensors", dir);
  int rc = -1, verdict = 0;
  Graph *g0 = graph_at(c, o, ST_LOADED, NULL);
  SafeTensors in;
  STensor *ref = NULL, *gref = NULL;
  int nref = 0, ngref = 0;
  Interp *I0 = NULL, *Ig = NULL, *Iref0 = NULL;   /* Iref0: the interpreter of the graph values are compared with */
  Graph *gref0 = g0;
  if (!g0 || make_inputs(c, g0, o->inputs, in_path, &in) || (o->inputs && st_write(c, in_path, in.t, in.n)) ||
      interp_results(c, g0, &in, &ref, &nref, &I0, NULL))
    goto done;
  fprintf(out, "check %s: %d results, tolerance %.3g (relative L2; integers exact)\n", gg_quote(c, o->model), nref, o->tol);
  fprintf(out, "  %-38s reference\n", stage_name(ST_LOADED));
  const int ST_AUTOGRAD = stage_index("autograd"), ST_COMPILED = stage_index("schedule"), ST_PRECISION = stage_index("precision");
  const Pipeline which = {.g = g0, .tr = &o->tr, .fold = true, .precision = o->precision, .cuda = o->cuda, .nchw = o->nchw};
  Iref0 = I0;   /* the loaded graph's, or with --precision the lowered graph's */
  for (int s = ST_LOADED + 1; s <= ST_COMPILED && !verdict; s++) {
    if (s < ST_COMPILED && (!gg_stages[s].rewrites || !stage_applies(&gg_stages[s], &which))) continue;
    STensor *got = NULL;
    int ngot = 0;
    Interp *I = NULL, *Jb = NULL;   /* Jb: the partitioned stage's backward run */
    Graph *g = NULL, *b = NULL;
    if (s == ST_COMPILED) {
      CompileOptions co = {.model = o->model, .output = so, .weights_file = o->weights, .tr = o->tr, .jobs = 2, .precision = o->precision, .cuda = o->cuda, .nchw = o->nchw};
      if (compile_model(c, &co)) { fprintf(out, "  %-38s FAILS to compile: %s\n", stage_name(s), c->err); verdict = s; break; }
      fflush(NULL);
      pid_t pid = fork();   /* a crash in the compiled code must not take gcc-graph with it */
      if (pid == 0) { Ctx *cc = ctx_new(); _exit(so_run(cc, so, o->weights, in_path, res_path) ? 3 : 0); }
      int st = 0;
      while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
      if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(out, "  %-38s FAILS to run (%s)\n", stage_name(s), WIFSIGNALED(st) ? "crashed" : "refused its inputs");
        verdict = s;
        break;
      }
      SafeTensors r;
      if (st_read(c, g0, res_path, &r)) goto done;
      got = r.t;
      ngot = r.n;
    } else {
      g = graph_at(c, o, s, &b);
      if (!g) { fprintf(out, "  %-38s FAILS: %s\n", stage_name(s), c->err); verdict = s; break; }
      RunResult rf;
      if (interp_results(c, g, &in, &got, &ngot, &I, &rf)) { fprintf(out, "  %-38s FAILS to run: %s\n", stage_name(s), c->err); verdict = s; break; }
      if (b) {   /* partitioned: the backward on the forward's saved values, then the cotangent */
        Interp *J = Jb = interp_new(c, b);
        Value **users;
        int nu = graph_user_inputs(b, &users);
        Tensor **ts = arena_array(c->arena, (size_t)nu + 1, sizeof *ts);
        RunResult rb;
        for (int i = 0; i < nu; i++) {
          if (i < rf.nsaved) { ts[i] = rf.saved[i]; continue; }
          int64_t one[GG_MAX_RANK];
          for (int d = 0; d < users[i]->rank; d++) one[d] = 1;
          ts[i] = tensor_new(J, users[i]->dtype, users[i]->rank, one);
          dtype_store_f64(users[i]->dtype, ts[i]->st->data, 1.0);
        }
        if (interp_run(J, ts, nu, NULL, 0, &rb)) goto done;
        STensor *all = arena_array(c->arena, (size_t)(ngot + rb.ngrads) + 1, sizeof *all);
        memcpy(all, got, sizeof *all * (size_t)ngot);
        for (int i = 0; i < rb.ngrads; i++) all[ngot++] = st_from(J, arena_printf(c->arena, "grad.%s", rb.grad_names[i]), rb.grads[i]);
        got = all;
      }
    }
    if (s == ST_AUTOGRAD) { gref = got; ngref = ngot; Ig = I; I = NULL; }   /* the gradients' reference (its interpreter holds the data) */
    const char *worst;
    double e = compare_sets(ref, nref, got, ngot, &worst);
    double eg = 0;
    const char *gworst = NULL;
    if (gref && s > ST_AUTOGRAD) eg = compare_sets(gref, ngref, got, ngot, &gworst);
    if (eg > e) { e = eg; worst = gworst; }
    if (s == ST_PRECISION && I && (o->precision == PREC_BF16 || o->precision == PREC_FP16)) {   /* what the lower precision costs; the later stages are held to its graph */
      fprintf(out, "  %-38s %s relative error %.3g against float32 (--precision %s)\n", stage_name(s), worst ? worst : "?", e, precision_name(o->precision));
      ref = got;
      nref = ngot;
      gref0 = g;
      Iref0 = I;
      continue;
    }
    /* under --precision bf16|fp16 the compiled code rounds in the lower type where the interpreter
     * rounds only what it stores (fused attention's probabilities, products' partial sums): held to
     * that type's tolerance, as compare holds its outputs, unless --tol says otherwise */
    double tol = s == ST_COMPILED && !o->tol_set && (o->precision == PREC_BF16 || o->precision == PREC_FP16)
                     ? default_tol(o->precision == PREC_BF16 ? DT_BF16 : DT_F16)
                     : o->tol;
    if (!(e <= tol)) {
      fprintf(out, "  %-38s DEPARTS: %s relative error %.3g%s\n", stage_name(s), worst ? worst : "?", e, tol != o->tol ? arena_printf(c->arena, " (above %.3g, the lower type's)", tol) : "");
      if (I) first_departing_node(c, gref0, Iref0, g, I, o->tol, out);
      else fprintf(out, "  the compiled code departs from the interpreter: gcc-graph minify %s reduces it to a small repro\n", gg_quote(c, o->model));
      verdict = s;
    } else fprintf(out, "  %-38s agrees (worst relative error %.3g%s)\n", stage_name(s), e, tol != o->tol ? arena_printf(c->arena, ", within %.3g, the lower type's", tol) : "");
    if (I) interp_free(I);
    if (Jb) interp_free(Jb);
  }
  if (!verdict) fputs(Iref0 != I0 ? "every later stage agrees with the lowered graph\n" : "every stage agrees with the loaded graph\n", out);
  rc = verdict ? 1 : 0;
done:
  if (I0) interp_free(I0);
  if (Iref0 && Iref0 != I0) interp_free(Iref0);
  if (Ig) interp_free(Ig);
  const char *files[] = {"inputs.safetensors", "model.so", "out.safetensors", NULL};
  for (const char **f = files; *f; f++) remove(arena_printf(c->arena, "%s/%s", dir, *f));
  rmdir(dir);
  graph_release(g0);
  return rc;
}

/* ---------------------------------------------------------------- minify */

static cJSON *tensor_meta(const Value *v) {
  cJSON *m = cJSON_CreateObject(), *sz = cJSON_AddArrayToObject(m, "sizes");
  cJSON_AddNumberToObject(m, "dtype", v->dtype);
  for (int d = 0; d < v->rank; d++) {
    int64_t x;
    expr_is_const(v->sizes[d], &x);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "as_int", (double)x);
    cJSON_AddItemToArray(sz, o);
  }
  cJSON_AddBoolToObject(m, "requires_grad", false);
  cJSON *dev = cJSON_AddObjectToObject(m, "device");
  cJSON_AddStringToObject(dev, "type", "cpu");
  cJSON_AddArrayToObject(m, "strides");
  cJSON *so = cJSON_AddObjectToObject(m, "storage_offset");
  cJSON_AddNumberToObject(so, "as_int", 0);
  cJSON_AddNumberToObject(m, "layout", 7);
  return m;
}

static cJSON *name_ref(const char *key, const char *name) {
  cJSON *o = cJSON_CreateObject(), *t = cJSON_AddObjectToObject(o, key);
  cJSON_AddStringToObject(t, "name", name);
  return o;
}

/* one argument in the ExportedProgram schema; NULL when it cannot be written (symbolic) */
static cJSON *arg_json(const Arg *a) {
  cJSON *o = cJSON_CreateObject(), *l;
  int64_t v;
  switch (a->k) {
  case AK_NONE: cJSON_AddBoolToObject(o, "as_none", true); break;
  case AK_TENSOR: cJSON_Delete(o); return name_ref("as_tensor", a->u.t->name);
  case AK_TENSORS:
    l = cJSON_AddArrayToObject(o, "as_optional_tensors");
    for (int i = 0; i < a->n; i++) {
      if (a->u.ts[i]) cJSON_AddItemToArray(l, name_ref("as_tensor", a->u.ts[i]->name));
      else { cJSON *nn = cJSON_CreateObject(); cJSON_AddBoolToObject(nn, "as_none", true); cJSON_AddItemToArray(l, nn); }
    }
    break;
  case AK_INT: if (!expr_is_const(a->u.i, &v)) { cJSON_Delete(o); return NULL; } cJSON_AddNumberToObject(o, "as_int", (double)v); break;
  case AK_INTS:
    l = cJSON_AddArrayToObject(o, "as_ints");
    for (int i = 0; i < a->n; i++) { if (!expr_is_const(a->u.is[i], &v)) { cJSON_Delete(o); return NULL; } cJSON_AddItemToArray(l, cJSON_CreateNumber((double)v)); }
    break;
  case AK_FLOAT: cJSON_AddNumberToObject(o, "as_float", a->u.f); break;
  case AK_FLOATS: l = cJSON_AddArrayToObject(o, "as_floats"); for (int i = 0; i < a->n; i++) cJSON_AddItemToArray(l, cJSON_CreateNumber(a->u.fs[i])); break;
  case AK_BOOL: cJSON_AddBoolToObject(o, "as_bool", a->u.b); break;
  case AK_BOOLS: l = cJSON_AddArrayToObject(o, "as_bools"); for (int i = 0; i < a->n; i++) cJSON_AddItemToArray(l, cJSON_CreateBool(a->u.bs[i])); break;
  case AK_STR: cJSON_AddStringToObject(o, "as_string", a->u.s); break;
  case AK_DEVICE: { cJSON *d = cJSON_AddObjectToObject(o, "as_device"); cJSON_AddStringToObject(d, "type", a->u.s); break; }
  case AK_DTYPE: cJSON_AddNumberToObject(o, "as_scalar_type", a->u.code); break;
  case AK_LAYOUT: cJSON_AddNumberToObject(o, "as_layout", a->u.code); break;
  case AK_MEMFMT: cJSON_AddNumberToObject(o, "as_memory_format", a->u.code); break;
  default: cJSON_Delete(o); return NULL;
  }
  return o;
}

typedef struct Window { int *in; int nin; int *out; int nout; } Window;   /* value ids */

/* The window [lo, hi) of g's nodes: the values flowing in, and those flowing out (used later, or
 * results; if none, the last node's outputs). */
static void window_of(Ctx *c, Graph *g, int lo, int hi, Window *w) {
  bool *def = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *def), *seen = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *seen);
  bool *used_after = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *used_after);
  w->in = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *w->in);
  w->out = arena_array(c->arena, (size_t)g->nvalues + 1, sizeof *w->out);
  w->nin = w->nout = 0;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    FOR_TENSOR_ARGS(n, v, {
      if (k >= hi) used_after[v->id] = true;
      else if (k >= lo && !def[v->id] && !seen[v->id]) { seen[v->id] = true; w->in[w->nin++] = v->id; }
    })
    for (int i = 0; k >= lo && k < hi && i < n->nouts; i++) def[n->outs[i]->id] = true;
  }
  for (int i = 0; i < g->noutputs; i++) used_after[g->outputs[i].v->id] = true;
  for (int k = lo; k < hi; k++)
    for (int i = 0; i < g->nodes[k]->nouts; i++) {
      Value *v = g->nodes[k]->outs[i];
      if (used_after[v->id] && v->kind == VK_TENSOR) w->out[w->nout++] = v->id;
    }
  if (!w->nout && hi > lo)
    for (int i = 0; i < g->nodes[hi - 1]->nouts; i++) if (g->nodes[hi - 1]->outs[i]->kind == VK_TENSOR) w->out[w->nout++] = g->nodes[hi - 1]->outs[i]->id;
}

/* Write the window as DIR/model.json, DIR/inputs.safetensors (its inputs' values) and
 * DIR/expected.safetensors (its outputs' values), from the interpreter's run of the whole graph. */
static int write_window(Ctx *c, Graph *g, Interp *I, int lo, int hi, const char *dir) {
  Window w;
  window_of(c, g, lo, hi, &w);
  cJSON *root = cJSON_CreateObject(), *gm = cJSON_AddObjectToObject(root, "graph_module"), *gr = cJSON_AddObjectToObject(gm, "graph");
  cJSON *ins = cJSON_AddArrayToObject(gr, "inputs"), *outs = cJSON_AddArrayToObject(gr, "outputs"), *nodes = cJSON_AddArrayToObject(gr, "nodes");
  cJSON *tv = cJSON_AddObjectToObject(gr, "tensor_values");
  cJSON_AddObjectToObject(gr, "sym_int_values");
  cJSON *sig = cJSON_AddObjectToObject(gm, "signature"), *ispec = cJSON_AddArrayToObject(sig, "input_specs"), *ospec = cJSON_AddArrayToObject(sig, "output_specs");
  STensor *inv = arena_array(c->arena, (size_t)w.nin + 1, sizeof *inv), *outv = arena_array(c->arena, (size_t)w.nout + 1, sizeof *outv);
  int rc = 0;
  for (int i = 0; i < w.nin; i++) {
    Value *v = g->values[w.in[i]];
    if (v->kind != VK_TENSOR || I->vals[v->id].k != RV_TENSOR) { rc = gg_error(c, "minify: the window reads %s, which is not a tensor", gg_quote(c, v->name)); break; }
    cJSON_AddItemToArray(ins, name_ref("as_tensor", v->name));
    cJSON *spec = cJSON_CreateObject(), *ui = cJSON_AddObjectToObject(spec, "user_input");
    cJSON_AddItemToObject(ui, "arg", name_ref("as_tensor", v->name));
    cJSON_AddItemToArray(ispec, spec);
    cJSON_AddItemToObject(tv, v->name, tensor_meta(v));
    inv[i] = st_from(I, arena_printf(c->arena, "in.%d", i), I->vals[v->id].t);
  }
  for (int k = lo; k < hi && !rc; k++) {
    Node *n = g->nodes[k];
    cJSON *nj = cJSON_CreateObject(), *ia = cJSON_AddArrayToObject(nj, "inputs"), *oa = cJSON_AddArrayToObject(nj, "outputs");
    cJSON_AddStringToObject(nj, "target", n->target);
    cJSON_AddStringToObject(nj, "name", n->name);
    for (int i = 0; i < n->op->nargs; i++) {
      if (n->args[i].k == AK_NONE && n->op->args[i].has_default) continue;
      cJSON *aj = arg_json(&n->args[i]);
      if (!aj) { rc = gg_error(c, "minify: node %s has a symbolic argument %s (minify needs static sizes)", gg_quote(c, n->name), n->op->args[i].name); break; }
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "name", n->op->args[i].name);
      cJSON_AddItemToObject(e, "arg", aj);
      cJSON_AddItemToArray(ia, e);
    }
    for (int i = 0; i < n->nouts; i++) {
      cJSON_AddItemToArray(oa, name_ref("as_tensor", n->outs[i]->name));
      if (n->outs[i]->kind == VK_TENSOR) cJSON_AddItemToObject(tv, n->outs[i]->name, tensor_meta(n->outs[i]));
    }
    cJSON_AddItemToArray(nodes, nj);
  }
  for (int i = 0; i < w.nout && !rc; i++) {
    Value *v = g->values[w.out[i]];
    cJSON_AddItemToArray(outs, name_ref("as_tensor", v->name));
    cJSON *spec = cJSON_CreateObject(), *uo = cJSON_AddObjectToObject(spec, "user_output");
    cJSON_AddItemToObject(uo, "arg", name_ref("as_tensor", v->name));
    cJSON_AddItemToArray(ospec, spec);
    outv[i] = st_from(I, arena_printf(c->arena, "out.%d", i), I->vals[v->id].t);
  }
  cJSON *sv = cJSON_AddObjectToObject(root, "schema_version");
  cJSON_AddNumberToObject(sv, "major", 8);
  cJSON_AddNumberToObject(sv, "minor", 0);
  cJSON *ver = cJSON_AddArrayToObject(root, "verifiers");
  cJSON_AddItemToArray(ver, cJSON_CreateString(g->ir ? g->ir : "ATEN"));
  cJSON_AddStringToObject(root, "torch_version", g->torch_version ? g->torch_version : "");
  cJSON_AddObjectToObject(root, "range_constraints");
  char *text = rc ? NULL : cJSON_Print(root);
  cJSON_Delete(root);
  if (rc) return -1;
  char *path = arena_printf(c->arena, "%s/model.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) { free(text); return gg_error(c, "%s: cannot write: %s", path, strerror(errno)); }
  fputs(text, f);
  free(text);
  if (fclose(f)) return gg_error(c, "%s: cannot write", path);
  return st_write(c, arena_printf(c->arena, "%s/inputs.safetensors", dir), inv, w.nin) ||
         st_write(c, arena_printf(c->arena, "%s/expected.safetensors", dir), outv, w.nout) ? -1 : 0;
}

/* Does the window's compiled code fail? 1: yes (why in *why), 0: no, -1: the window cannot be made. */
static int window_fails(Ctx *c, Graph *g, Interp *I, int lo, int hi, const char *dir, double tol, const char **why) {
  Ctx *wc = ctx_new();
  int r = -1;
  if (write_window(wc, g, I, lo, hi, dir)) { *why = arena_strdup(c->arena, wc->err); goto out; }
  char *model = arena_printf(wc->arena, "%s/model.json", dir), *so = arena_printf(wc->arena, "%s/model.so", dir);
  char *res = arena_printf(wc->arena, "%s/got.safetensors", dir), *inp = arena_printf(wc->arena, "%s/inputs.safetensors", dir);
  CompileOptions co = {.model = model, .output = so, .jobs = 2};
  if (compile_model(wc, &co)) { *why = arena_printf(c->arena, "does not compile: %s", wc->err); r = strstr(wc->err, "cannot") && strstr(wc->err, "read") ? -1 : 1; goto out; }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) { Ctx *cc = ctx_new(); _exit(so_run(cc, so, NULL, inp, res) ? 3 : 0); }
  int st = 0;
  while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) { *why = WIFSIGNALED(st) ? "crashes" : "its run fails"; r = 1; goto out; }
  SafeTensors got, want;
  Graph dummy = {.ctx = wc};
  if (st_read(wc, &dummy, res, &got) || st_read(wc, &dummy, arena_printf(wc->arena, "%s/expected.safetensors", dir), &want)) { *why = "no results"; r = 1; goto out; }
  const char *worst;
  double e = compare_sets(want.t, want.n, got.t, got.n, &worst);
  r = !(e <= tol);
  if (r) *why = arena_printf(c->arena, "departs from the interpreter: %s relative error %.3g", worst ? worst : "?", e);
out:
  ctx_free(wc);
  return r;
}

int minify_model(Ctx *c, const CheckOptions *o, const char *outdir, FILE *out) {
  Graph *g = graph_load(c, o->model, o->weights);
  Pipeline p = {.g = g, .tr = &o->tr};
  if (!g || pipeline_run(&p, 0, stage_index("functionalize") + 1, NULL, NULL)) return -1;
  for (int i = 0; i < g->nsyms; i++)
    if (g->syms[i].min != g->syms[i].max) { graph_release(g); return gg_error(c, "%s: minify needs static sizes (symbol %s has a range)", g->path, g->syms[i].name); }
  SafeTensors in;
  STensor *ref;
  int nref;
  Interp *I = NULL;
  if (make_inputs(c, g, o->inputs, NULL, &in) || interp_results(c, g, &in, &ref, &nref, &I, NULL)) { graph_release(g); return -1; }
  if (mkdir(outdir, 0777) && errno != EEXIST) { interp_free(I); graph_release(g); return gg_error(c, "%s: cannot create: %s", outdir, strerror(errno)); }
  char work[] = "/tmp/gcc-graph-minify-XXXXXX";
  if (!mkdtemp(work)) { interp_free(I); graph_release(g); return gg_error(c, "cannot create a folder: %s", strerror(errno)); }
  const char *why = NULL;
  int n = g->nnodes, tries = 1, rc = -1;
  int f = window_fails(c, g, I, 0, n, work, o->tol, &why);
  fprintf(out, "minify %s: %d nodes (functional graph)\n", gg_quote(c, o->model), n);
  if (f <= 0) {
    fprintf(out, f < 0 ? "the whole graph cannot be written as a window: %s\n" : "nothing to minify: the compiled graph agrees with the interpreter\n", why ? why : "");
    rc = f < 0 ? gg_error(c, "minify: %s", why ? why : "cannot write the graph") : 0;
    goto done;
  }
  fprintf(out, "  all %d nodes: %s\n", n, why);
  /* the shortest failing prefix [0, hi), then the latest start lo with [lo, hi) still failing */
  int a = 1, b = n;
  while (a < b) {
    int m = (a + b) / 2;
    tries++;
    if (window_fails(c, g, I, 0, m, work, o->tol, &why) == 1) b = m; else a = m + 1;
  }
  int hi = b;
  a = 0, b = hi - 1;
  while (a < b) {
    int m = (a + b + 1) / 2;
    tries++;
    if (window_fails(c, g, I, m, hi, work, o->tol, &why) == 1) a = m; else b = m - 1;
  }
  int lo = a;
  window_fails(c, g, I, lo, hi, work, o->tol, &why);
  if (write_window(c, g, I, lo, hi, outdir)) goto done;
  fprintf(out, "reduced to %d node%s (nodes %d..%d of %d, %d compiles): %s\n", hi - lo, hi - lo == 1 ? "" : "s", lo, hi - 1, n, tries + 1, why);
  for (int k = lo; k < hi; k++) fprintf(out, "  %s = %s\n", gg_quote(c, g->nodes[k]->name), g->nodes[k]->op->name);
  fprintf(out, "repro: %s/model.json, inputs %s/inputs.safetensors, the interpreter's answers %s/expected.safetensors\n", outdir, outdir, outdir);
  fprintf(out, "  gcc-graph compile %s/model.json -o repro.so && gcc-graph run repro.so --inputs %s/inputs.safetensors -o got.safetensors\n", outdir, outdir);
  rc = 1;
done:
  {
    const char *files[] = {"model.json", "inputs.safetensors", "expected.safetensors", "model.so", "got.safetensors", NULL};
    for (const char **fl = files; *fl; fl++) remove(arena_printf(c->arena, "%s/%s", work, *fl));
    rmdir(work);
  }
  interp_free(I);
  graph_release(g);
  return rc;
}

/* ---------------------------------------------------------------- compare */

/* The tolerance for an expected tensor of dtype d: 1e-4 for float32 and float64 (check's), 1e-2 for
 * float16 and 3e-2 for bfloat16 (their rounding), 0 (exact) for integers and bools. */
static double default_tol(DType d) {
  if (!dtype_is_float(d)) return 0;
  return d == DT_BF16 ? 3e-2 : d == DT_F16 ? 1e-2 : 1e-4;
}

/* "float32[8, 10]" into buf */
static const char *st_shape(char *buf, size_t size, const STensor *t) {
  int k = snprintf(buf, size, "%s[", dtype_info(t->dtype)->name);
  for (int d = 0; d < t->rank && k < (int)size - 24; d++) k += snprintf(buf + k, size - (size_t)k, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
  snprintf(buf + k, size - (size_t)k, "]");
  return buf;
}

int compare_outputs(Ctx *c, const char *got_path, const char *want_path, double tol, FILE *out) {
  Graph g = {.ctx = c};
  SafeTensors got, want;
  int rc = -1;
  if (st_read(c, &g, got_path, &got) || st_read(c, &g, want_path, &want)) goto done;
  if (!want.n) { gg_error(c, "%s: no tensors to compare with", want_path); goto done; }
  fprintf(out, "compare %s with %s: %d tensor%s, relative L2 error (a floor of 1e-3 per element; integers exact)\n",
          gg_quote(c, got_path), gg_quote(c, want_path), want.n, want.n == 1 ? "" : "s");
  int bad = 0;
  for (int i = 0; i < want.n; i++) {
    const STensor *w = &want.t[i], *a = NULL;
    for (int j = 0; j < got.n && !a; j++)
      if (!strcmp(got.t[j].name, w->name)) a = &got.t[j];
    char shape[256];
    fprintf(out, "  %-24s %-22s ", gg_quote(c, w->name), st_shape(shape, sizeof shape, w));
    if (!a) { fprintf(out, "MISSING from %s\n", gg_quote(c, got_path)); bad++; continue; }
    double maxdiff = 0, e = values_distance(a, w, &maxdiff), t = tol >= 0 ? tol : default_tol(w->dtype);
    if (tol < 0 && dtype_is_float(a->dtype) && default_tol(a->dtype) > t) t = default_tol(a->dtype);
    if (e < 0) {
      fprintf(out, "DEPARTS: %s has %s\n", gg_quote(c, got_path), st_shape(shape, sizeof shape, a));
      bad++;
    } else if (!(e <= t)) {
      fprintf(out, "DEPARTS: relative error %.3g > %.3g, largest difference %.3g\n", e, t, maxdiff);
      bad++;
    } else if (t == 0) {
      fprintf(out, "agrees (equal)\n");
    } else {
      fprintf(out, "agrees (relative error %.3g <= %.3g, largest difference %.3g)\n", e, t, maxdiff);
    }
  }
  for (int j = 0; j < got.n; j++) {
    bool known = false;
    for (int i = 0; i < want.n && !known; i++) known = !strcmp(got.t[j].name, want.t[i].name);
    if (!known) fprintf(out, "  %-24s (not in %s: not compared)\n", gg_quote(c, got.t[j].name), gg_quote(c, want_path));
  }
  if (bad) fprintf(out, "%d of %d depart\n", bad, want.n);
  else fprintf(out, "all %d agree\n", want.n);
  rc = bad ? 1 : 0;
done:
  graph_release(&g);
  return rc;
}
