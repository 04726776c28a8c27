/* golden.c: run every corpus case under the reference interpreter and compare with PyTorch.
 * A case is a folder with model.pt2 and io.safetensors (in.N, out.N, ref64.out.N, buffer_after.*).
 * The rule (DESIGN.md): a float output's relative L2 error against ref64.out.N is at most
 * max(1e-5, 10 x the error of PyTorch's own float32 out.N); integer and bool outputs are exact.
 * Usage: test-golden CASE_DIR...   Prints one line per case and "N passed, N failed". */
#include "../lib/gg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double load(const STensor *t, int64_t i) { return dtype_load_f64(t->dtype, t->data + i * dtype_info(t->dtype)->size); }

static int64_t numel(const STensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->sizes[d];
  return n;
}

/* Relative L2 distance of a from r over finite entries; non-finite entries must agree exactly. */
static double rel_err(const STensor *a, const STensor *r, bool *nonfinite_mismatch) {
  double num = 0, den = 0;
  *nonfinite_mismatch = false;
  for (int64_t i = 0; i < numel(r); i++) {
    double x = load(a, i), y = load(r, i);
    if (!isfinite(y) || !isfinite(x)) {
      if (!(isnan(x) && isnan(y)) && x != y) *nonfinite_mismatch = true;
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static bool same_shape(const STensor *a, const STensor *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++) if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

static double err_factor = 10;   /* the error allowed, as a multiple of PyTorch's own against float64 */

/* Compare one result tensor. Returns NULL when it passes, else a reason. */
static const char *compare_st(Ctx *c, const char *name, STensor got, const STensor *want, const STensor *ref64, double *err_out) {
  if (got.dtype != want->dtype) return arena_printf(c->arena, "%s: dtype %s, PyTorch gives %s", name, dtype_name(got.dtype), dtype_name(want->dtype));
  if (!same_shape(&got, want)) return arena_printf(c->arena, "%s: shape differs from PyTorch's", name);
  *err_out = 0;
  if (!dtype_is_float(got.dtype)) {
    for (int64_t i = 0; i < numel(want); i++)
      if (dtype_load_i64(got.dtype, got.data + i * dtype_info(got.dtype)->size) != dtype_load_i64(want->dtype, want->data + i * dtype_info(want->dtype)->size))
        return arena_printf(c->arena, "%s: element %lld differs", name, (long long)i);
    return NULL;
  }
  bool bad1, bad2;
  /* 1e-5, or in a half type a sixteenth of its unit roundoff: two computations of one result that
   * differ by float32 rounding (a decomposition computing in float32, the interpreter in float64)
   * round a few elements of tens of thousands the other way, each a whole unit apart */
  double tol = got.dtype == DT_BF16 ? ldexp(1, -8) / 16 : got.dtype == DT_F16 ? ldexp(1, -11) / 16 : 1e-5;
  const STensor *ref = ref64 ? ref64 : want;
  if (ref64) { double pe = rel_err(want, ref64, &bad2); if (err_factor * pe > tol) tol = err_factor * pe; }
  double e = rel_err(&got, ref, &bad1);
  *err_out = e;
  if (bad1) return arena_printf(c->arena, "%s: NaN or infinity where PyTorch has none (or the reverse)", name);
  if (!(e <= tol)) return arena_printf(c->arena, "%s: relative error %.3g exceeds %.3g", name, e, tol);
  return NULL;
}

static const char *compare(Ctx *c, const char *name, Interp *I, Tensor *t, const STensor *want, const STensor *ref64, double *err_out) {
  STensor got = {name, t->dtype, t->rank, {0}, NULL, 0};
  memcpy(got.sizes, t->sizes, sizeof got.sizes);
  got.data = tensor_contiguous_bytes(I, t, &got.nbytes);
  return compare_st(c, name, got, want, ref64, err_out);
}

/* --compare OUT IO: check the out.N of a file that `gcc-graph run` wrote against the case's answers. */
static int compare_files(const char *out, const char *io, bool verbose) {
  Ctx *c = ctx_new();
  Graph g = {.ctx = c};
  SafeTensors so, si;
  int bad = 0;
  if (st_read(c, &g, out, &so) || st_read(c, &g, io, &si)) { printf("FAIL %s\n", c->err); bad = 1; }
  for (int i = 0; !bad; i++) {
    const char *on = arena_printf(c->arena, "out.%d", i);
    const STensor *want = st_find(&si, on), *got = st_find(&so, on);
    if (!want) { if (st_find(&so, on)) { printf("FAIL %s: extra output %s\n", out, on); bad = 1; } break; }
    if (!got) { printf("FAIL %s: no %s\n", out, on); bad = 1; break; }
    double e;
    const char *why = compare_st(c, on, *got, want, st_find(&si, arena_printf(c->arena, "ref64.out.%d", i)), &e);
    if (why) { printf("FAIL %s: %s\n", out, why); bad = 1; }
    else if (verbose) {
      bool nf;
      const STensor *ref = st_find(&si, arena_printf(c->arena, "ref64.out.%d", i));
      double pt = ref ? rel_err(want, ref, &nf) : 0;
      printf("%s: shape [", on);
      for (int d = 0; d < got->rank; d++) printf("%s%lld", d ? ", " : "", (long long)got->sizes[d]);
      printf("] %s, relative error %.3g (PyTorch float32's own: %.3g): matches\n", dtype_name(got->dtype), e, pt);
    }
  }
  /* training cases: every gradient and buffer PyTorch gives must be there and match */
  for (int k = 0; !bad && k < si.n; k++) {
    const char *nm = si.t[k].name;
    bool grad = !strncmp(nm, "grad.", 5);
    if (!grad && strncmp(nm, "buffer_after.", 13)) continue;
    const STensor *got = st_find(&so, nm);
    if (!got) { printf("FAIL %s: no %s\n", out, nm); bad = 1; break; }
    double e;
    const STensor *ref = grad ? st_find(&si, arena_printf(c->arena, "ref64.%s", nm)) : NULL;
    const char *why = compare_st(c, nm, *got, &si.t[k], ref, &e);
    if (why) { printf("FAIL %s: %s\n", out, why); bad = 1; }
    else if (verbose) printf("%s: relative error %.3g: matches\n", nm, e);
  }
  for (int k = 0; !bad && k < so.n; k++)
    if (!strncmp(so.t[k].name, "grad.", 5) && !st_find(&si, so.t[k].name)) { printf("FAIL %s: %s, which PyTorch does not give\n", out, so.t[k].name); bad = 1; }
  graph_release(&g);
  ctx_free(c);
  return bad;
}

static const char *run_case(Ctx *c, const char *dir, double *worst) {
  char *model = arena_printf(c->arena, "%s/model.pt2", dir), *io = arena_printf(c->arena, "%s/io.safetensors", dir);
  Graph *g = graph_load(c, model, NULL);
  if (!g || verify_graph(g)) return c->err;
  SafeTensors st;
  if (st_read(c, g, io, &st)) return c->err;
  Value **users;
  int nu = graph_user_inputs(g, &users);
  Interp *I = interp_new(c, g);
  Tensor **in = arena_array(c->arena, (size_t)nu + 1, sizeof *in);
  for (int i = 0; i < nu; i++) {
    const STensor *s = st_find(&st, arena_printf(c->arena, "in.%d", i));
    if (!s) return arena_printf(c->arena, "io.safetensors has no in.%d", i);
    in[i] = tensor_from_st(I, s);
  }
  RunResult r;
  const char *why = NULL;
  if (interp_run(I, in, nu, NULL, 0, &r)) why = c->err;
  *worst = 0;
  for (int i = 0; !why && i < r.nouts; i++) {
    const char *on = arena_printf(c->arena, "out.%d", i);
    const STensor *want = st_find(&st, on), *ref = st_find(&st, arena_printf(c->arena, "ref64.out.%d", i));
    if (!want) { why = arena_printf(c->arena, "io.safetensors has no %s", on); break; }
    double e;
    why = compare(c, on, I, r.outs[i], want, ref, &e);
    if (e > *worst) *worst = e;
  }
  for (int i = 0; !why && i < r.nbuffers; i++) {
    const char *bn = arena_printf(c->arena, "buffer_after.%s", r.buffer_names[i]);
    const STensor *want = st_find(&st, bn);
    if (!want) { why = arena_printf(c->arena, "mutates %s, which PyTorch does not", bn); break; }
    double e;
    why = compare(c, bn, I, r.buffers[i], want, NULL, &e);
  }
  /* every buffer PyTorch mutated must be mutated here too */
  for (int k = 0; !why && k < st.n; k++) {
    if (strncmp(st.t[k].name, "buffer_after.", 13)) continue;
    bool found = false;
    for (int i = 0; i < r.nbuffers; i++) found |= !strcmp(r.buffer_names[i], st.t[k].name + 13);
    if (!found) why = arena_printf(c->arena, "%s: PyTorch mutates this buffer, the interpreter did not", st.t[k].name);
  }
  interp_free(I);
  graph_release(g);
  return why;
}

/* --rewrite: the functionalized, weight-folded and decomposed graph against the original, both under the
 * interpreter, on the case's inputs and on random float inputs (integer inputs, often indices, keep
 * their stored values). Decompositions are checked op by op this way on every case using them. */
static uint64_t rng_state = 88172645463325252ull;
static double rnd(void) {
  rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
  return ((double)(rng_state >> 11) / 9007199254740992.0) * 2 - 1;
}

static const char *run_graph(Ctx *c, Graph *g, Tensor **(*make)(Interp *, Graph *, const SafeTensors *, int), const SafeTensors *st, int seed,
                             Interp **I_out, RunResult *r) {
  Interp *I = interp_new(c, g);
  Value **users;
  int nu = graph_user_inputs(g, &users);
  Tensor **in = make(I, g, st, seed);
  if (!in) return "missing input";
  *I_out = I;
  return interp_run(I, in, nu, NULL, 0, r) ? c->err : NULL;
}

static Tensor **inputs_for(Interp *I, Graph *g, const SafeTensors *st, int seed) {
  Value **users;
  int nu = graph_user_inputs(g, &users);
  Tensor **in = arena_array(I->c->arena, (size_t)nu + 1, sizeof *in);
  rng_state = 88172645463325252ull + (uint64_t)seed;
  for (int i = 0; i < nu; i++) {
    const STensor *s = st_find(st, arena_printf(I->c->arena, "in.%d", i));
    if (!s) return NULL;
    in[i] = tensor_from_st(I, s);
    if (!seed) {   /* a copy: a model that writes into its inputs (in-place ops, running statistics) must not change the file's */
      Tensor *t = tensor_new(I, s->dtype, s->rank, s->sizes);
      memcpy(t->st->data, s->data, s->nbytes);
      in[i] = t;
    }
    if (seed && dtype_is_float(s->dtype)) {
      Tensor *t = tensor_new(I, s->dtype, s->rank, s->sizes);
      for (int64_t k = 0; k < tensor_numel(t); k++) dtype_store_f64(t->dtype, t->st->data + k * dtype_info(t->dtype)->size, rnd() * 2);
      in[i] = t;
    }
  }
  return in;
}

/* A case whose case.json says "rewrite_inexact" (why; tests/extra_src/export.py): not held to the rule */
static const char *rewrite_inexact(const char *dir) {
  static char why[1000];
  char path[4096], buf[8192];
  snprintf(path, sizeof path, "%s/case.json", dir);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  const char *k = strstr(buf, "\"rewrite_inexact\": \"");
  if (!k) return NULL;
  snprintf(why, sizeof why, "%s", k + strlen("\"rewrite_inexact\": \""));
  char *q = strchr(why, '"');
  if (q) *q = 0;
  return why;
}

static const char *check_rewrite(const char *dir) {
  static char why[5000];
  Ctx *c = ctx_new();
  const char *model = arena_printf(c->arena, "%s/model.pt2", dir), *io = arena_printf(c->arena, "%s/io.safetensors", dir);
  Graph *g0 = graph_load(c, model, NULL), *g1 = NULL;
  SafeTensors st;
  const char *res = NULL;
  if (!g0 || verify_graph(g0)) { res = c->err; goto out; }
  g1 = graph_load(c, model, NULL);
  /* every rewrite but those meant to change values (a norm folded into 16-bit weights: compile_case
   * holds those to PyTorch's error against float64) */
  const Pipeline exact = {.exact = true};
  if (!g1 || verify_graph(g1) || inference_graph(g1, &exact, NULL, NULL)) {
    /* a graph the compiler refuses (in-place through a view) has nothing to compare */
    res = strstr(c->err, "through a view") ? NULL : c->err;
    goto out;
  }
  if (st_read(c, g0, io, &st)) { res = c->err; goto out; }
  for (int seed = 0; seed < 3 && !res; seed++) {
    Interp *I0 = NULL, *I1 = NULL;
    RunResult r0, r1;
    const char *e0 = run_graph(c, g0, inputs_for, &st, seed, &I0, &r0);
    const char *e1 = e0 ? NULL : run_graph(c, g1, inputs_for, &st, seed, &I1, &r1);
    if (e0 && seed) { interp_free(I0); break; }   /* random inputs the model rejects (e.g. out of a domain) */
    if (e0 || e1) res = e0 ? e0 : e1;
    for (int i = 0; !res && i < r0.nouts; i++) {
      double e;
      STensor want = {"", r0.outs[i]->dtype, r0.outs[i]->rank, {0}, NULL, 0};
      memcpy(want.sizes, r0.outs[i]->sizes, sizeof want.sizes);
      want.data = tensor_contiguous_bytes(I0, r0.outs[i], &want.nbytes);
      const char *w = compare(c, arena_printf(c->arena, "out.%d (seed %d)", i, seed), I1, r1.outs[i], &want, NULL, &e);
      if (w) { snprintf(why, sizeof why, "rewritten graph departs: %s", w); res = why; }
    }
    interp_free(I0);
    interp_free(I1);
  }
out:
  if (res && res == c->err) { snprintf(why, sizeof why, "%s", c->err); res = why; }
  graph_release(g0);
  graph_release(g1);
  ctx_free(c);
  return res;
}

/* --train: the joint graph (autograd) and both partitions (forward then backward, in two graphs)
 * under the interpreter, against PyTorch's loss, gradients and buffers. */
static Tensor *ones_like_value(Interp *I, const Value *v) {
  int64_t sz[GG_MAX_RANK];
  for (int d = 0; d < v->rank; d++) if (!expr_is_const(v->sizes[d], &sz[d])) sz[d] = 1;
  Tensor *t = tensor_new(I, v->dtype, v->rank, sz);
  for (int64_t k = 0; t && k < tensor_numel(t); k++) dtype_store_f64(t->dtype, t->st->data + k * dtype_info(t->dtype)->size, 1.0);
  return t;
}

static const char *check_results(Ctx *c, Interp *I, const RunResult *r, const SafeTensors *st, const char *what) {
  double e;
  for (int i = 0; i < r->nouts; i++) {
    const char *on = arena_printf(c->arena, "out.%d", i);
    const char *why = compare(c, on, I, r->outs[i], st_find(st, on), st_find(st, arena_printf(c->arena, "ref64.out.%d", i)), &e);
    if (why) return arena_printf(c->arena, "%s: %s", what, why);
  }
  for (int i = 0; i < r->ngrads; i++) {
    const char *gn = arena_printf(c->arena, "grad.%s", r->grad_names[i]);
    const STensor *want = st_find(st, gn);
    if (!want) return arena_printf(c->arena, "%s: %s, which PyTorch does not give", what, gn);
    const char *why = compare(c, gn, I, r->grads[i], want, st_find(st, arena_printf(c->arena, "ref64.%s", gn)), &e);
    if (why) return arena_printf(c->arena, "%s: %s", what, why);
  }
  int ng = 0;
  for (int k = 0; k < st->n; k++) ng += !strncmp(st->t[k].name, "grad.", 5);
  if (ng != r->ngrads) return arena_printf(c->arena, "%s: %d gradients, PyTorch gives %d", what, r->ngrads, ng);
  return NULL;
}

static const char *check_train(const char *dir, char *line, size_t linelen) {
  static char why[5000];
  const char *res = NULL;
  PartitionStats ps[2];
  for (int mode = 0; mode < 3 && !res; mode++) {   /* joint graph, min-cut, save everything */
    Ctx *c = ctx_new();
    Graph *g = graph_load(c, arena_printf(c->arena, "%s/model.pt2", dir), NULL), *b = NULL;
    SafeTensors st;
    TrainOptions to = {.on = true};
    const char *what = mode == 0 ? "joint graph" : mode == 1 ? "min-cut partition" : "default partition";
    if (!g || verify_graph(g) || training_graph(g, &to) || st_read(c, g, arena_printf(c->arena, "%s/io.safetensors", dir), &st) ||
        (mode && (partition(g, mode == 2, &b, &ps[mode - 1]) || verify_graph(g) || verify_graph(b)))) {
      snprintf(why, sizeof why, "%s: %s", what, c->err);
      res = why;
    }
    Interp *I = res ? NULL : interp_new(c, g), *J = NULL;
    RunResult r, rb;
    if (I) {
      Value **users;
      int nu = graph_user_inputs(g, &users);
      Tensor **in = arena_array(c->arena, (size_t)nu + 1, sizeof *in);
      for (int i = 0; i < nu; i++) {
        const STensor *s = st_find(&st, arena_printf(c->arena, "in.%d", i));
        in[i] = s ? tensor_from_st(I, s) : ones_like_value(I, users[i]);
      }
      if (interp_run(I, in, nu, NULL, 0, &r)) res = c->err;
    }
    if (I && !res && b) {   /* the backward: saved values, then the cotangent 1 */
      J = interp_new(c, b);
      Value **users;
      int nu = graph_user_inputs(b, &users);
      Tensor **in = arena_array(c->arena, (size_t)nu + 1, sizeof *in);
      for (int i = 0; i < nu; i++) in[i] = i < r.nsaved ? r.saved[i] : ones_like_value(J, users[i]);
      if (interp_run(J, in, nu, NULL, 0, &rb)) res = c->err;
      r.grads = rb.grads;
      r.grad_names = rb.grad_names;
      r.ngrads = rb.ngrads;
    }
    if (I && !res) res = check_results(c, J ? J : I, &r, &st, what);
    if (res && res != why) { snprintf(why, sizeof why, "%s", res); res = why; }
    if (J) interp_free(J);
    if (I) interp_free(I);
    graph_release(g);
    ctx_free(c);
  }
  if (!res && ps[0].saved_bytes > ps[1].saved_bytes) {
    snprintf(why, sizeof why, "min-cut saves %lld bytes, more than saving everything (%lld)", (long long)ps[0].saved_bytes, (long long)ps[1].saved_bytes);
    res = why;
  }
  if (!res)
    snprintf(line, linelen, "saved: min-cut %d tensors %lld bytes (%d nodes recomputed), default %d tensors %lld bytes", ps[0].saved,
             (long long)ps[0].saved_bytes, ps[0].recomputed, ps[1].saved, (long long)ps[1].saved_bytes);
  return res;
}

/* --gradcheck: every derivative rule against central finite differences, in float64. Each case's
 * graph (float32 only) is decomposed for training, widened to float64 (values, dtype arguments and
 * weights), and differentiated for L = sum_k <r_k, out_k> with random r_k, w.r.t. every float input
 * and parameter. For each differentiated tensor x and a random direction u, <dL/dx, u> must match
 * (L(x + hu) - L(x - hu)) / 2h. Prints the ops whose rules the passing cases exercised; --rules
 * makes an op with a rule that no case exercised a failure. */
static bool widen(Graph *g) {
  for (int v = 0; v < g->nvalues; v++)
    if (g->values[v]->kind == VK_TENSOR && (g->values[v]->dtype == DT_F16 || g->values[v]->dtype == DT_BF16)) return false;
  for (int v = 0; v < g->nvalues; v++) {
    Value *x = g->values[v];
    if (x->kind != VK_TENSOR || x->dtype != DT_F32) continue;
    x->dtype = DT_F64;
    if (x->weight) {   /* a contiguous float64 copy of the weight, in logical order */
      Weight *w = arena_alloc(g->ctx->arena, sizeof *w), *o = x->weight;
      *w = *o;
      int64_t n = 1;
      for (int d = 0; d < o->rank; d++) n *= o->sizes[d];
      double *data = arena_array(g->ctx->arena, (size_t)n + 1, sizeof *data);
      for (int64_t i = 0; i < n; i++) {
        int64_t off = o->offset, rem = i;
        for (int d = o->rank - 1; d >= 0; d--) { off += (rem % o->sizes[d]) * o->strides[d]; rem /= o->sizes[d]; }
        data[i] = dtype_load_f64(DT_F32, o->data + off * 4);
      }
      /* nudged off exact values: default-initialized models (zero biases and running means) put
       * many elements exactly on a kink (relu of 0), where finite differences see half a slope */
      for (int64_t i = 0; i < n; i++) data[i] = x->input == IN_PARAM ? data[i] + 1e-3 * rnd() : data[i] * (1 + 1e-2 * rnd());
      w->dtype = DT_F64;
      w->data = (const uint8_t *)data;
      w->nbytes = (size_t)n * 8;
      w->offset = 0;
      for (int d = o->rank - 1, st = 1; d >= 0; d--) { w->strides[d] = st; st *= (int)o->sizes[d]; }
      x->weight = w;
    }
  }
  for (int k = 0; k < g->nnodes; k++)
    for (int i = 0; g->nodes[k]->op && i < g->nodes[k]->op->nargs; i++)
      if (g->nodes[k]->args[i].k == AK_DTYPE && g->nodes[k]->args[i].u.code == DT_F32) g->nodes[k]->args[i].u.code = DT_F64;
  return true;
}

typedef struct GradCase { Ctx *c; Graph *g; SafeTensors st; Value **users; int nu; double **tan; } GradCase;

/* L at the current weights and inputs (x: the inputs, tangents given as r_k); grads when asked */
static const char *eval_loss(GradCase *gc, Tensor **fixed, double *loss, RunResult *out, Interp **keep) {
  Interp *I = interp_new(gc->c, gc->g);
  Tensor **in = arena_array(gc->c->arena, (size_t)gc->nu + 1, sizeof *in);
  int nt = 0;
  for (int i = 0; i < gc->nu; i++) {
    Value *v = gc->users[i];
    if (!strncmp(v->name, "tangent.", 8)) {
      int64_t sz[GG_MAX_RANK];
      for (int d = 0; d < v->rank; d++) { if (!expr_is_const(v->sizes[d], &sz[d])) sz[d] = expr_hint(gc->g, v->sizes[d]); }
      in[i] = tensor_new(I, DT_F64, v->rank, sz);
      memcpy(in[i]->st->data, gc->tan[nt++], (size_t)tensor_numel(in[i]) * 8);
    } else in[i] = fixed[i];
  }
  RunResult r;
  if (interp_run(I, in, gc->nu, NULL, 0, &r)) { interp_free(I); return gc->c->err; }
  double L = 0;
  nt = 0;
  for (int i = 0; i < r.nouts; i++) {
    if (r.outs[i]->dtype != DT_F64) continue;
    size_t nb;
    const double *o = tensor_contiguous_bytes(I, r.outs[i], &nb);
    for (size_t k = 0; k < nb / 8; k++) L += o[k] * gc->tan[nt][k];
    nt++;
  }
  *loss = L;
  if (out) { *out = r; *keep = I; } else interp_free(I);
  return NULL;
}

static const char *check_gradients(const char *dir, char *ops_seen, size_t ops_len) {
  static char why[5000];
  Ctx *c = ctx_new();
  GradCase gc = {c, NULL, {0}, NULL, 0, NULL};
  const char *res = NULL;
  Interp *I = NULL, *Jx = NULL;
  const char *mp = arena_printf(c->arena, "%s/model.pt2", dir);
  if (access(mp, R_OK)) mp = arena_printf(c->arena, "%s/model.json", dir);   /* one-op models of tests/gradcheck */
  Graph *g = gc.g = graph_load(c, mp, NULL);
  TrainOptions on = {.on = true};
  Pipeline p = {.g = g, .tr = &on};   /* up to autograd, which runs on the widened graph below */
  if (!g || pipeline_run(&p, 0, stage_index("autograd"), NULL, NULL) || !widen(g) || verify_graph(g)) {
    if (getenv("GG_FD_DEBUG")) fprintf(stderr, "skip: %s: %s\n", dir, c->has_err ? c->err : "half precision");
    res = "skip";
    goto out;
  }
  /* detach stops gradients on purpose, which finite differences cannot see: check the rest as if it
   * were an alias (its own rule, no gradient, is checked by the training cases) */
  for (int k = 0; k < g->nnodes; k++)
    if (!strcmp(g->nodes[k]->op->name, "detach")) g->nodes[k]->op = ops_find("alias");
  char *fwd_ops = arena_strdup(c->arena, " ");
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    bool fl = false;
    for (int i = 0; i < n->op->nargs; i++) {
      fl |= n->args[i].k == AK_TENSOR && n->args[i].u.t->dtype == DT_F64;
      for (int j = 0; n->args[i].k == AK_TENSORS && j < n->args[i].n; j++) fl |= n->args[i].u.ts[j] && n->args[i].u.ts[j]->dtype == DT_F64;
    }
    if (fl && autograd_has_rule(n->op) && !strstr(fwd_ops, arena_printf(c->arena, " %s ", n->op->name)))
      fwd_ops = arena_printf(c->arena, "%s%s ", fwd_ops, n->op->name);
  }
  if (autograd(g, -1, true) || verify_graph(g)) {
    if (strstr(c->err, "no derivative rule") || strstr(c->err, "nothing to differentiate")) { if (getenv("GG_FD_DEBUG")) fprintf(stderr, "skip: %s\n", c->err); res = "skip"; goto out; }
    res = c->err;
    goto out;
  }
  if (st_read(c, g, arena_printf(c->arena, "%s/io.safetensors", dir), &gc.st)) { res = c->err; goto out; }
  gc.nu = graph_user_inputs(g, &gc.users);
  gc.tan = arena_array(c->arena, (size_t)gc.nu + 1, sizeof *gc.tan);
  rng_state = 88172645463325252ull;
  int nt = 0;
  Tensor **fixed = arena_array(c->arena, (size_t)gc.nu + 1, sizeof *fixed);
  I = interp_new(c, g);   /* owns the fixed inputs */
  for (int i = 0; i < gc.nu; i++) {
    Value *v = gc.users[i];
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= expr_hint(g, v->sizes[d]);
    if (!strncmp(v->name, "tangent.", 8)) {
      gc.tan[nt] = arena_array(c->arena, (size_t)n + 1, sizeof **gc.tan);
      for (int64_t k = 0; k < n; k++) gc.tan[nt][k] = rnd();
      nt++;
      continue;
    }
    const STensor *s = st_find(&gc.st, arena_printf(c->arena, "in.%d", i));
    if (!s) { res = "io.safetensors lacks an input"; goto out; }
    Tensor *t = tensor_new(I, v->dtype, s->rank, s->sizes);
    for (int64_t k = 0; k < tensor_numel(t); k++) {
      double x = dtype_load_f64(s->dtype, s->data + k * dtype_info(s->dtype)->size);
      if (dtype_is_float(t->dtype)) x += 1e-3 * rnd();
      dtype_store_f64(t->dtype, t->st->data + k * dtype_info(t->dtype)->size, x);
    }
    fixed[i] = t;
  }
  /* a point where L is defined: the stored inputs, shrunk towards 0 while L is not finite (asin, erfinv) */
  double L0 = NAN;
  RunResult r;
  for (int tries = 0; tries < 4 && !res; tries++) {
    if (Jx) { interp_free(Jx); Jx = NULL; }
    if ((res = eval_loss(&gc, fixed, &L0, &r, &Jx)) || isfinite(L0)) break;
    for (int i = 0; i < gc.nu; i++)
      if (fixed[i] && fixed[i]->dtype == DT_F64)
        for (int64_t k = 0; k < tensor_numel(fixed[i]); k++) ((double *)fixed[i]->st->data)[k] *= 0.5;
  }
  if (res) goto out;
  /* each differentiated tensor: an input (by name) or a parameter (by fqn), its gradient, a direction */
  int ng = r.ngrads;
  double **X = arena_array(c->arena, (size_t)ng + 1, sizeof *X), **U = arena_array(c->arena, (size_t)ng + 1, sizeof *U);
  double **X0 = arena_array(c->arena, (size_t)ng + 1, sizeof *X0);
  const double **GR = arena_array(c->arena, (size_t)ng + 1, sizeof *GR);
  int64_t *N = arena_array(c->arena, (size_t)ng + 1, sizeof *N);
  for (int k = 0; k < ng && !res; k++) {
    for (int i = 0; i < gc.nu && !X[k]; i++)
      if (!strcmp(gc.users[i]->name, r.grad_names[k])) { X[k] = (double *)fixed[i]->st->data; N[k] = tensor_numel(fixed[i]); }
    for (int i = 0; i < g->ninputs && !X[k]; i++)
      if (g->inputs[i]->fqn && !strcmp(g->inputs[i]->fqn, r.grad_names[k]) && g->inputs[i]->weight) {
        X[k] = (double *)g->inputs[i]->weight->data;
        N[k] = (int64_t)g->inputs[i]->weight->nbytes / 8;
      }
    if (!X[k]) { snprintf(why, sizeof why, "gradient %s: no such input", r.grad_names[k]); res = why; break; }
    size_t nb;
    GR[k] = tensor_contiguous_bytes(Jx, r.grads[k], &nb);
    U[k] = arena_array(c->arena, (size_t)N[k] + 1, sizeof **U);
    X0[k] = arena_array(c->arena, (size_t)N[k] + 1, sizeof **X0);
    for (int64_t i = 0; i < N[k]; i++) { U[k][i] = rnd(); X0[k][i] = X[k][i]; }
  }
  /* all tensors along one random direction; when that fails, one tensor at a time names the culprit */
  bool combined_failed = false;
  for (int which = -1; which < ng && !res; which++) {
    double ad = 0, scale = 0;
    for (int k = 0; k < ng; k++)
      if (which < 0 || which == k)
        for (int64_t i = 0; i < N[k]; i++) { ad += GR[k][i] * U[k][i]; scale += fabs(GR[k][i] * U[k][i]); }
    /* a step that crosses a kink (relu at 0, a tie in max) spoils finite differences, and deep models
     * with many such elements meet one at 1e-6: a smaller step that agrees is accepted as well */
    static const double steps[] = {1e-6, 1e-8, 1e-9};
    double fd = 0, err = 0;
    bool ok = false;
    for (int si = 0; si < 3 && !ok && !res; si++) {
      double h = steps[si], L[2];
      for (int sign = 0; sign < 2 && !res; sign++) {
        for (int k = 0; k < ng; k++)
          if (which < 0 || which == k)
            for (int64_t i = 0; i < N[k]; i++) X[k][i] = X0[k][i] + (sign ? -h : h) * U[k][i];
        res = eval_loss(&gc, fixed, &L[sign], NULL, NULL);
        for (int k = 0; k < ng; k++) memcpy(X[k], X0[k], sizeof **X * (size_t)N[k]);
      }
      if (res) break;
      /* allowed: 1e-5 relative, plus the rounding noise of L itself divided by the step */
      fd = (L[0] - L[1]) / (2 * h);
      err = fabs(fd - ad) / fmax(fmax(fabs(fd), scale), 1e-300);
      ok = fabs(fd - ad) <= 1e-5 * fmax(fabs(fd), scale) + 1e-13 * (fabs(L[0]) + fabs(L[1]) + fabs(L0)) / h;
    }
    if (ok && which < 0) break;
    if (!ok && which < 0) combined_failed = true;
    if (!ok && !res && which >= 0) {
      snprintf(why, sizeof why, "d L / d %s along a random direction: autograd %.10g, finite differences %.10g (relative error %.2g)", r.grad_names[which], ad, fd, err);
      res = why;
    }
  }
  if (!res && combined_failed) res = "the gradients disagree with finite differences along a direction over all inputs, though each input alone agrees";
  if (!res) snprintf(ops_seen, ops_len, "%s", fwd_ops);
out:
  if (Jx) interp_free(Jx);
  if (I) interp_free(I);
  if (res && res != why && strcmp(res, "skip")) { snprintf(why, sizeof why, "%s", res); res = why; }
  graph_release(g);
  ctx_free(c);
  return res;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "--gradcheck")) {
    int pass = 0, fail = 0, skip = 0;
    static char seen[1 << 16] = " ";
    for (int i = 2; i < argc; i++) {
      char ops[8192] = "";
      const char *why = check_gradients(argv[i], ops, sizeof ops);
      if (why && !strcmp(why, "skip")) { skip++; continue; }
      if (why) { printf("FAIL %s: %s\n", argv[i], why); fail++; continue; }
      printf("ok   %s:%s\n", argv[i], ops);
      pass++;
      for (char *t = strtok(ops, " "); t; t = strtok(NULL, " ")) {
        char key[128];
        snprintf(key, sizeof key, " %s ", t);
        if (!strstr(seen, key) && strlen(seen) + strlen(key) < sizeof seen) strcat(seen, key + 1);
      }
    }
    int nr = 0, unchecked = 0;
    const char *const *rules = autograd_rules(&nr);
    for (int k = 0; k < nr; k++) {
      char key[128];
      snprintf(key, sizeof key, " %s ", rules[k]);
      if (!strcmp(rules[k], "detach")) continue;   /* a stop-gradient: finite differences cannot see it */
      if (!strstr(seen, key)) printf("%s%s", unchecked++ ? " " : "rules no case exercised: ", rules[k]);
    }
    if (unchecked) putchar('\n');
    printf("%d of %d derivative rules checked against finite differences (detach, a stop-gradient, aside; %d cases skipped: no gradient path)\n",
           nr - 1 - unchecked, nr - 1, skip);
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "--train")) {
    int pass = 0, fail = 0;
    for (int i = 2; i < argc; i++) {
      char line[256] = "";
      const char *why = check_train(argv[i], line, sizeof line);
      if (why) { printf("FAIL %s: %s\n", argv[i], why); fail++; }
      else { printf("ok   %s (%s)\n", argv[i], line); pass++; }
    }
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "--rewrite")) {
    int pass = 0, fail = 0;
    for (int i = 2; i < argc; i++) {
      const char *skip = rewrite_inexact(argv[i]);
      if (skip) { printf("skip %s: %s\n", argv[i], skip); continue; }
      const char *why = check_rewrite(argv[i]);
      if (why) { printf("FAIL %s: %s\n", argv[i], why); fail++; }
      else pass++;
    }
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
  }
  /* --compare OUT IO [-v] [--factor F]: F times PyTorch's own error allowed (default 10; a case compiled
   * with --precision is held to 3 times torch.autocast's) */
  if (argc >= 4 && !strcmp(argv[1], "--compare")) {
    bool verbose = false;
    for (int i = 4; i < argc; i++) {
      if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) verbose = true;
      else if (!strcmp(argv[i], "--factor") && i + 1 < argc && atof(argv[i + 1]) > 0) err_factor = atof(argv[++i]);
      else { fprintf(stderr, "test-golden --compare: bad argument '%s'\n", argv[i]); return 2; }
    }
    return compare_files(argv[2], argv[3], verbose);
  }
  int pass = 0, fail = 0;
  for (int i = 1; i < argc; i++) {
    Ctx *c = ctx_new();
    double worst = 0;
    const char *why = run_case(c, argv[i], &worst);
    if (why) { printf("FAIL %s: %s\n", argv[i], why); fail++; }
    else { printf("ok   %s (max rel err %.2g)\n", argv[i], worst); pass++; }
    ctx_free(c);
  }
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
