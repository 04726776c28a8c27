/* compile.c: the pipeline, as one function (compile_model_uncached), with its reports.
 * Requires: options from the driver. Guarantees: a model .so that carries its weights (or the
 * offsets of them in the file they stay in), its metadata and its guards: the graph loaded, the
 * stages of pipeline.c's table run (each timed and dumped with --time-report and --debug-dir), the
 * code written by the emitters (module.c) from the schedule, and built by build.c. */
#include "gg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- metadata */

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

char *model_metadata(Graph *g, Graph *bwd, const TrainOptions *tr, const PartitionStats *ps, bool external, int64_t weight_bytes) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", "gcc-graph model");
  cJSON_AddNumberToObject(m, "abi_version", 1);
  cJSON_AddStringToObject(m, "compiler", "gcc-graph " GG_VERSION);
  cJSON_AddStringToObject(m, "source", base_name(g->path));
  cJSON_AddStringToObject(m, "torch_version", g->torch_version);
  cJSON_AddStringToObject(m, "ir", g->ir);
  const char *device = g->ctx->cuda ? "cuda" : "cpu";
  cJSON_AddStringToObject(m, "device", device);
  cJSON_AddStringToObject(m, "precision", precision_name(g->ctx->precision));
  cJSON *ins = cJSON_AddArrayToObject(m, "inputs"), *guards = cJSON_AddArrayToObject(m, "guards");
  Value **users;
  int nu = graph_user_inputs(g, &users);
  for (int i = 0; i < nu; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", users[i]->name);
    cJSON_AddStringToObject(o, "dtype", dtype_name(users[i]->dtype));
    cJSON_AddItemToObject(o, "shape", shape_json(g, users[i]));
    cJSON_AddItemToArray(ins, o);
    cJSON *gd = cJSON_CreateObject();
    cJSON_AddStringToObject(gd, "input", users[i]->name);
    cJSON_AddStringToObject(gd, "dtype", dtype_name(users[i]->dtype));
    cJSON_AddNumberToObject(gd, "rank", users[i]->rank);
    cJSON_AddItemToObject(gd, "sizes", shape_json(g, users[i]));
    cJSON_AddStringToObject(gd, "strides", "row-major compact");
    cJSON_AddStringToObject(gd, "device", device);
    cJSON_AddItemToArray(guards, gd);
  }
  cJSON *outs = cJSON_AddArrayToObject(m, "outputs");
  for (int i = 0; i < g->noutputs; i++) {
    if (g->outputs[i].kind != OUT_USER) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", g->outputs[i].v->name);
    cJSON_AddStringToObject(o, "dtype", dtype_name(g->outputs[i].v->dtype));
    cJSON_AddItemToObject(o, "shape", shape_json(g, g->outputs[i].v));
    cJSON_AddItemToArray(outs, o);
  }
  cJSON_AddItemToObject(m, "symbols", symbols_json(g, false));
  cJSON *w = cJSON_AddObjectToObject(m, "weights");
  cJSON_AddStringToObject(w, "storage", external ? "external" : "embedded");
  if (external) cJSON_AddStringToObject(w, "file", base_name(g->path));
  cJSON_AddNumberToObject(w, "bytes", (double)weight_bytes);
  cJSON *list = cJSON_AddArrayToObject(w, "tensors");
  cJSON *mut = cJSON_AddArrayToObject(m, "mutated_buffers");
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (v->input == IN_USER) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", v->fqn);
    cJSON_AddStringToObject(o, "kind", v->input == IN_PARAM ? "parameter" : v->input == IN_BUFFER ? "buffer" : "constant");
    cJSON_AddStringToObject(o, "dtype", dtype_name(v->dtype));
    cJSON_AddItemToObject(o, "shape", shape_json(g, v));
    if (v->tied) cJSON_AddStringToObject(o, "tied", v->tied->fqn);   /* the same storage as that parameter */
    cJSON_AddItemToArray(list, o);
  }
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].kind == OUT_BUFFER_MUTATION) cJSON_AddItemToArray(mut, cJSON_CreateString(g->outputs[i].target_name));
  if (bwd) {   /* training: what is differentiated, what the forward saves, the optimizer */
    cJSON *t = cJSON_AddObjectToObject(m, "training");
    cJSON_AddNumberToObject(t, "loss_output", tr->loss);
    cJSON *gr = cJSON_AddArrayToObject(t, "gradients");
    for (int i = 0; i < bwd->noutputs; i++) cJSON_AddItemToArray(gr, cJSON_CreateString(bwd->outputs[i].target_name));
    cJSON_AddStringToObject(t, "partition", tr->save_all ? "default" : "mincut");
    cJSON_AddNumberToObject(t, "saved_tensors", ps->saved);
    cJSON_AddNumberToObject(t, "saved_bytes", (double)ps->saved_bytes);
    cJSON_AddNumberToObject(t, "saved_tensors_default", ps->saved_default);
    cJSON_AddNumberToObject(t, "saved_bytes_default", (double)ps->default_bytes);
    cJSON_AddNumberToObject(t, "recomputed_nodes", ps->recomputed);
    static const char *const names[] = {"none", "sgd", "adam", "adamw"};
    cJSON *op = cJSON_AddObjectToObject(t, "optimizer");
    cJSON_AddStringToObject(op, "kind", names[tr->optimizer]);
    if (tr->optimizer) {
      cJSON_AddNumberToObject(op, "lr", tr->lr);
      cJSON_AddNumberToObject(op, "weight_decay", tr->weight_decay);
      if (tr->optimizer == 1) cJSON_AddNumberToObject(op, "momentum", tr->momentum);
      else {
        cJSON_AddNumberToObject(op, "beta1", tr->beta1);
        cJSON_AddNumberToObject(op, "beta2", tr->beta2);
        cJSON_AddNumberToObject(op, "eps", tr->eps);
      }
    }
  }
  char *s = cJSON_PrintUnformatted(m);
  char *r = arena_strdup(g->ctx->arena, s);
  free(s);
  cJSON_Delete(m);
  return r;
}

/* ---------------------------------------------------------------- --time-report */


typedef struct Timer {
  bool on;                  /* --time-report */
  bool tty;                 /* stderr is a terminal: progress lines once a compile takes over a second */
  bool shown;               /* a progress line is on the screen */
  double t0, last;
  Ctx *c;
  const char *debug_dir;    /* --debug-dir: each stage's graph, numbered, and timings.txt */
  Pipeline *p;              /* its graphs, dumped after each stage (the schedule after the schedule stage) */
  int n;
} Timer;

static double seconds(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }

/* Debug dump of the graph as a stage left it: NN-stage.txt, one line per node (graph_print). */
static void dump_graph(Timer *t, const char *name) {
  if (!t->debug_dir || !t->p || !t->p->g) return;
  char word[32];
  size_t k = 0;
  for (const char *p = name; *p && *p != ' ' && k < sizeof word - 1; p++) word[k++] = *p;
  word[k] = 0;
  FILE *f = fopen(arena_printf(t->c->arena, "%s/%02d-%s.txt", t->debug_dir, ++t->n, word), "w");
  if (!f) return;
  if (!strcmp(name, "schedule")) {
    schedule_print(t->p->sf, f);
    if (t->p->sb) { fputs("\n# the backward\n", f); schedule_print(t->p->sb, f); }
  }
  else graph_print(!strcmp(name, "backward (partition)") ? t->p->bwd : t->p->g, f);
  fclose(f);
}

/* One line per stage: its wall time and the process's peak memory so far (and of the C compiler,
 * a child, for the build stage), on stderr with --time-report and into DIR/timings.txt with
 * --debug-dir. name NULL: the total. */
/* On a terminal, for compiles over a second: one line that says what runs now, rewritten in place. */
static void progress(Timer *t, const char *what) {
  if (!t->tty || t->on) return;
  double now = seconds();
  if (!what) { if (t->shown) fputs("\r\033[K", stderr); t->shown = false; return; }
  bool cc = !strncmp(what, "building", 8);   /* the C compiler alone takes a second or more */
  if (now - t->t0 < 1.0 && !cc) return;
  fprintf(stderr, "\r\033[Kgcc-graph: %s (%.1f s)", what, now - t->t0);
  t->shown = true;
}

static void stage(Timer *t, const char *name) {
  if (name && !strcmp(name, "emit C")) progress(t, "building the .so with the C compiler");
  else if (name && strncmp(name, "cc", 2) && strncmp(name, "nvcc", 4)) progress(t, arena_printf(t->c->arena, "%s done", name));
  else if (!name) progress(t, NULL);
  if (!t->on && !t->debug_dir) return;
  double now = seconds();
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  char line[256], extra[64] = "";
  if (!name) snprintf(line, sizeof line, "gcc-graph: %-22s %9.3f s\n", "total", now - t->t0);
  else {
    if (!strcmp(name, "cc (build the .so)")) snprintf(extra, sizeof extra, "   (cc: %.1f MiB)", (double)kids.ru_maxrss / 1024);
    snprintf(line, sizeof line, "gcc-graph: %-22s %9.3f s   peak memory %7.1f MiB%s\n", name, now - t->last, (double)self.ru_maxrss / 1024, extra);
    if (strncmp(name, "cc", 2) && strncmp(name, "nvcc", 4) && strncmp(name, "emit", 4) && strncmp(name, "write", 5)) dump_graph(t, name);
  }
  if (t->on) fputs(line, stderr);
  if (t->debug_dir) {
    FILE *f = fopen(arena_printf(t->c->arena, "%s/timings.txt", t->debug_dir), t->n <= 1 && name && !strcmp(name, "load") ? "w" : "a");
    if (f) { fputs(line + 11, f); fclose(f); }
  }
  t->last = now;
}

/* --debug-dir: the generated code and the schedule; GCC_GRAPH_LOGS=output_code: the code on stderr */
static int write_debug(Ctx *c, const CompileOptions *o, const char *src, size_t len, const char *dsrc, size_t dlen) {
  const char *name = "model.c";
  if (o->debug_dir) {
    if (write_file(c, arena_printf(c->arena, "%s/%s", o->debug_dir, name), src, len)) return -1;
    if (dsrc && write_file(c, arena_printf(c->arena, "%s/model.cu", o->debug_dir), dsrc, dlen)) return -1;
    FILE *sf = fopen(arena_printf(c->arena, "%s/schedule.txt", o->debug_dir), "w");
    if (sf) { explain_schedule(c, sf); fclose(sf); }
  }
  if (GG_LOG_ON(c, LOG_OUTPUT_CODE)) {
    gg_log(c, LOG_OUTPUT_CODE, "%s, %zu bytes:", name, len);
    fwrite(src, 1, len, stderr);
    if (dsrc) {
      gg_log(c, LOG_OUTPUT_CODE, "model.cu, %zu bytes:", dlen);
      fwrite(dsrc, 1, dlen, stderr);
    }
  }
  return 0;
}

/* after each stage of the table: its time, and its graph in --debug-dir (partition: the backward, then
 * the forward) */
static void stage_done(void *arg, const Stage *s) {
  Timer *t = arg;
  stage(t, s->name);
  if (!strcmp(s->name, "backward (partition)")) dump_graph(t, "forward (partition)");
}

/* The schedule of a functional, decomposed graph, recorded in c for explain: its code is generated
 * (no cc) and the kernels it writes are recorded. */
int compile_schedule(Ctx *c, Graph *g) {
  int nw = 0;
  for (int i = 0; i < g->ninputs; i++) nw += g->inputs[i]->input != IN_USER;
  int64_t *offsets = arena_array(c->arena, (size_t)nw + 1, sizeof *offsets);
  char *src = NULL, *dsrc = NULL;
  size_t len = 0, dlen = 0;
  FILE *f = open_memstream(&src, &len), *df = c->cuda ? open_memstream(&dsrc, &dlen) : NULL;
  TrainOptions none = {0};
  c->record = true;
  Schedule *s = schedule_graph(g);
  int rc = s ? emit_model(c, g, s, NULL, NULL, &none, f, df, "{}", offsets, 0, false, false, 0) : -1;
  c->record = false;
  fclose(f);
  if (df) fclose(df);
  free(src);
  free(dsrc);
  return rc;
}

int compile_model_uncached(Ctx *c, const CompileOptions *o);

int compile_model(Ctx *c, const CompileOptions *o) {
  const char *store;
  int hit = build_cache_lookup(c, o, &store);   /* an unchanged model with unchanged options: a copy */
  if (hit < 0 || (!hit && compile_model_uncached(c, o))) return -1;
  if (!hit) build_cache_store(c, o, store);
  return write_deps(c, o);
}

/* The whole pipeline. */
int compile_model_uncached(Ctx *c, const CompileOptions *o) {
  Timer tm = {o->time_report, isatty(2), false, seconds(), seconds(), c, o->debug_dir, NULL, 0};
  if (tm.on) fprintf(stderr, "gcc-graph: time report for %s\n", o->model);
  if (o->debug_dir && mkdir(o->debug_dir, 0777) && errno != EEXIST) return gg_error(c, "%s: cannot create: %s", o->debug_dir, strerror(errno));
  if (PREC_CUDA_ONLY(o->precision) && !o->cuda)
    return gg_error(c, "--precision %s goes with --target cuda (CPUs have no TF32 arithmetic)", precision_name(o->precision));
  Graph *g = graph_load(c, o->model, o->weights_file);
  if (!g) return -1;
  Pipeline p = {.g = g, .tr = &o->tr, .fold = !o->tr.on && !o->external_weights, .precision = o->precision, .cuda = o->cuda, .nchw = o->nchw};
  tm.p = &p;
  stage(&tm, "load");
  c->cuda = o->cuda;
  c->precision = o->precision;
  c->cuda_sm = o->cuda ? build_cuda_sm(c, o) : 0;
  c->jobs = o->jobs;
  int rc = -1;
  BuildFiles b = {0};
  char *src = NULL, *dsrc = NULL;
  size_t len = 0, dlen = 0;
  if (pipeline_run(&p, 0, INT_MAX, stage_done, &tm) || build_prepare(c, o, g, &b)) goto done;
  /* the code (CUDA: the host's in C, the kernels' in dsrc); --debug-dir records the schedule (the
   * kernels after fusion) too */
  FILE *f = open_memstream(&src, &len), *df = o->cuda ? open_memstream(&dsrc, &dlen) : NULL;
  c->record = o->debug_dir != NULL;
  int erc = emit_model(c, g, p.sf, p.bwd, p.sb, &o->tr, f, df, model_metadata(g, p.bwd, &o->tr, &p.ps, b.external, b.bytes), b.offsets, b.blob,
                       b.appended, b.external, b.file_size);
  c->record = false;
  fclose(f);
  if (df) fclose(df);
  if (erc || build_sources(c, o, b.dir, src, len, dsrc, dlen) || write_debug(c, o, src, len, dsrc, dlen)) goto done;
  stage(&tm, o->cuda ? "emit CUDA C" : "emit C");
  if (!o->sources_only) {
    if (build_output_begin(c, o, g, &b)) goto done;
    if (build_so(c, o, &b)) { build_output_abort(&b); goto done; }
    stage(&tm, o->cuda ? "nvcc (build the .so)" : "cc (build the .so)");
    if (build_output(c, o, g, &b)) goto done;
    stage(&tm, "write .so + weights");
  }
  stage(&tm, NULL);
  rc = 0;
done:
  free(src);
  free(dsrc);
  progress(&tm, NULL);
  build_finish(o, b.dir);
  graph_release(g);
  return rc;
}
