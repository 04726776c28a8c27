/* golden.c: run every corpus case under the reference interpreter and compare with PyTorch.
 * A case is a folder with model.pt2 and io.safetensors (in.N, out.N, ref64.out.N, buffer_after.*).
 * The rule (DESIGN.md): a float output's relative L2 error against ref64.out.N is at most
 * max(1e-5, 10 x the error of PyTorch's own float32 out.N); integer and bool outputs are exact.
 * Usage: test-golden CASE_DIR...   Prints one line per case and "N passed, N failed". */
#include "../lib/gg.h"

#include <math.h>
#include <string.h>

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
  double tol = 1e-5;
  const STensor *ref = ref64 ? ref64 : want;
  if (ref64) { double pe = rel_err(want, ref64, &bad2); if (10 * pe > tol) tol = 10 * pe; }
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

/* --rewrite: the functionalized and decomposed graph against the original, both under the
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
    if (seed && dtype_is_float(s->dtype)) {
      Tensor *t = tensor_new(I, s->dtype, s->rank, s->sizes);
      for (int64_t k = 0; k < tensor_numel(t); k++) dtype_store_f64(t->dtype, t->st->data + k * dtype_info(t->dtype)->size, rnd() * 2);
      in[i] = t;
    }
  }
  return in;
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
  if (!g1 || verify_graph(g1) || functionalize(g1) || verify_graph(g1) || decompose(g1, false) || verify_graph(g1)) {
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

int main(int argc, char **argv) {
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
      const char *why = check_rewrite(argv[i]);
      if (why) { printf("FAIL %s: %s\n", argv[i], why); fail++; }
      else pass++;
    }
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
  }
  if ((argc == 4 || argc == 5) && !strcmp(argv[1], "--compare")) return compare_files(argv[2], argv[3], argc == 5);
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
