/* report.c: explain --html, a page to look at.
 * Requires: explain's JSON (explain_obj) of a loaded model, and a graph to run compile's inference
 * stages on. Guarantees: one self-contained HTML file (no network, no external file): lib/report.html
 * (embedded into gcc-graph at build time) with the report as one JSON object in a script element of
 * type application/json, every '<', '>' and '&' in it escaped, so nothing from a model can close the
 * element; the page builds its tables from that object with DOM text nodes, so no string from a model
 * is ever parsed as HTML. What the report adds to explain --json: the graph after each stage (each
 * node with its module path and the user's source line), the guards the compiled model checks, the
 * memory plan (each scratch tensor's place and lifetime), and per-node times from a Chrome trace
 * (GCC_GRAPH_PROFILE=FILE.json). */
#include "gg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name, *text; } EmbeddedFile;
extern const EmbeddedFile gg_report_files[];

/* ---------------------------------------------------------------- the graph after each stage */

/* A graph as the page lists it: inputs, nodes (the line graph_print writes, the values each reads, and
 * where it came from) and outputs. */
static cJSON *graph_json(Graph *g, const char *stage) {
  Arena *a = g->ctx->arena;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "stage", stage);
  cJSON *ins = cJSON_AddArrayToObject(o, "inputs"), *nodes = cJSON_AddArrayToObject(o, "nodes"), *outs = cJSON_AddArrayToObject(o, "outputs");
  static const char *const ikind[] = {[IN_NONE] = "", [IN_USER] = "input", [IN_PARAM] = "parameter", [IN_BUFFER] = "buffer", [IN_CONST] = "constant"};
  for (int i = 0; i < g->ninputs; i++) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "name", g->inputs[i]->name);
    cJSON_AddStringToObject(v, "kind", ikind[g->inputs[i]->input]);
    cJSON_AddStringToObject(v, "dtype", dtype_name(g->inputs[i]->dtype));
    cJSON_AddItemToObject(v, "shape", shape_json(g, g->inputs[i]));
    cJSON_AddItemToArray(ins, v);
  }
  char *buf = NULL;
  size_t len = 0;
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    cJSON *j = cJSON_CreateObject(), *reads = cJSON_CreateArray(), *writes = cJSON_CreateArray();
    FILE *f = open_memstream(&buf, &len);
    if (!f) { cJSON_Delete(j); cJSON_Delete(reads); cJSON_Delete(writes); cJSON_Delete(o); return NULL; }
    node_print(g, n, f);
    fclose(f);
    cJSON_AddStringToObject(j, "name", n->name);
    cJSON_AddStringToObject(j, "op", n->op ? n->op->name : n->target);
    cJSON_AddStringToObject(j, "text", buf);
    free(buf);
    buf = NULL;
    FOR_TENSOR_ARGS(n, v, cJSON_AddItemToArray(reads, cJSON_CreateString(v->name)));
    for (int i = 0; i < n->nouts; i++) cJSON_AddItemToArray(writes, cJSON_CreateString(n->outs[i]->name));
    cJSON_AddItemToObject(j, "reads", reads);
    cJSON_AddItemToObject(j, "writes", writes);
    node_origin_json(a, n, j);
    cJSON_AddItemToArray(nodes, j);
  }
  static const char *const okind[] = {[OUT_USER] = "output", [OUT_BUFFER_MUTATION] = "buffer update", [OUT_OTHER] = "other",
                                      [OUT_GRAD] = "gradient", [OUT_SAVED] = "saved"};
  for (int i = 0; i < g->noutputs; i++) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "name", g->outputs[i].v->name);
    cJSON_AddStringToObject(v, "kind", okind[g->outputs[i].kind]);
    if (g->outputs[i].target_name) cJSON_AddStringToObject(v, "target", g->outputs[i].target_name);
    cJSON_AddItemToArray(outs, v);
  }
  return o;
}

int report_add_graph(cJSON *report, Graph *g, const char *stage) {
  cJSON *stages = cJSON_GetObjectItem(report, "stages");
  if (!stages) stages = cJSON_AddArrayToObject(report, "stages");
  cJSON *j = graph_json(g, stage);
  if (!j) return gg_error(g->ctx, "out of memory");
  cJSON_AddItemToArray(stages, j);
  return 0;
}

typedef struct Snap { Graph *g; cJSON *report; int rc; } Snap;

static void snapshot(void *arg, const Stage *s) {
  Snap *sn = arg;
  if (report_add_graph(sn->report, sn->g, s->after)) sn->rc = -1;
}

/* compile's inference stages on g (as inference_graph runs them), with g's graph after loading and
 * after each one added to report's "stages" */
int report_stage_graphs(Graph *g, const Pipeline *how, cJSON *report) {
  Snap sn = {g, report, 0};
  snapshot(&sn, &gg_stages[stage_index("verify")]);
  int rc = inference_graph(g, how, snapshot, &sn);
  return rc ? rc : sn.rc;
}

/* ---------------------------------------------------------------- the profile */

typedef struct Ev { const char *cat, *name; double dur; } Ev;
static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static int cmp_ev(const void *a, const void *b) {
  const Ev *x = a, *y = b;
  int r = strcmp(x->cat, y->cat);
  return r ? r : strcmp(x->name, y->name);
}

/* A Chrome trace's complete events ("ph": "X"), summed by category and name: each node's total time
 * how many times it ran, and its median time (a model's first runs, which make handles and tune,
 * take longer). */
static int profile_json(Graph *g, const char *path, cJSON *report) {
  Ctx *c = g->ctx;
  size_t len;
  const uint8_t *text = map_file(c, g, path, &len);   /* kept mapped until g is released */
  if (!text) return -1;
  if (len > ((size_t)256 << 20)) return gg_error(c, "%s: a trace over 256 MiB (profile fewer runs: the page uses medians)", path);
  cJSON *t = cJSON_ParseWithLength((const char *)text, len);
  const cJSON *evs = cJSON_GetObjectItemCaseSensitive(t, "traceEvents");
  if (!cJSON_IsArray(evs)) { cJSON_Delete(t); return gg_error(c, "%s: not a Chrome trace (no traceEvents list): write one with GCC_GRAPH_PROFILE=FILE.json", path); }
  cJSON *prof = cJSON_AddObjectToObject(report, "profile"), *nodes = cJSON_AddArrayToObject(prof, "nodes");
  const char *base = strrchr(path, '/');
  cJSON_AddStringToObject(prof, "file", base ? base + 1 : path);
  const cJSON *od = cJSON_GetObjectItemCaseSensitive(t, "otherData"), *dev = cJSON_GetObjectItemCaseSensitive(od, "device");
  if (cJSON_IsString(dev)) cJSON_AddStringToObject(prof, "device", dev->valuestring);
  int nev = 0, nall = cJSON_GetArraySize(evs);
  Ev *list = calloc((size_t)nall + 1, sizeof *list);
  if (!list) { cJSON_Delete(t); return gg_error(c, "%s: out of memory", path); }
  const cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"), *name = cJSON_GetObjectItemCaseSensitive(e, "name"),
                *cat = cJSON_GetObjectItemCaseSensitive(e, "cat"), *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") || !cJSON_IsString(name) || !cJSON_IsNumber(dur) || nev >= nall) continue;
    list[nev++] = (Ev){cJSON_IsString(cat) ? cat->valuestring : "", name->valuestring, dur->valuedouble};
  }
  qsort(list, (size_t)nev, sizeof *list, cmp_ev);
  double *durs = calloc((size_t)nev + 1, sizeof *durs);
  if (!durs) { free(list); cJSON_Delete(t); return gg_error(c, "%s: out of memory", path); }
  for (int i = 0, j; i < nev; i = j) {   /* a run of equal (category, name): one node */
    double us = 0;
    for (j = i; j < nev && !cmp_ev(&list[i], &list[j]); j++) us += durs[j - i] = list[j].dur;
    qsort(durs, (size_t)(j - i), sizeof *durs, cmp_double);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", list[i].name);
    cJSON_AddStringToObject(x, "cat", list[i].cat);
    cJSON_AddNumberToObject(x, "us", us);
    cJSON_AddNumberToObject(x, "count", j - i);
    cJSON_AddNumberToObject(x, "median_us", (j - i) % 2 ? durs[(j - i) / 2] : (durs[(j - i) / 2 - 1] + durs[(j - i) / 2]) / 2);
    cJSON_AddItemToArray(nodes, x);
  }
  free(list);
  free(durs);
  cJSON_AddNumberToObject(prof, "events", nev);
  cJSON_Delete(t);
  if (!nev) return gg_error(c, "%s: the trace has no complete (\"X\") events", path);
  return 0;
}

/* ---------------------------------------------------------------- the page */

int report_write(Graph *g, cJSON *report, const char *profile, const char *path) {
  Ctx *c = g->ctx;
  cJSON_AddStringToObject(report, "compiler", "gcc-graph " GG_VERSION);
  cJSON_AddStringToObject(report, "target", c->cuda ? arena_printf(c->arena, "cuda (sm_%d)", c->cuda_sm) : "cpu");
  cJSON_AddStringToObject(report, "precision", precision_name(c->precision));
  if (c->membufs) {
    cJSON_AddBoolToObject(report, "memory_at_examples", c->membufs_symbolic);
    cJSON *m = cJSON_AddArrayToObject(report, "memory");
    for (int i = 0; i < c->nmembufs; i++) {
      const MemBufRec *b = &c->membufs[i];
      cJSON *x = cJSON_CreateArray();
      cJSON_AddItemToArray(x, cJSON_CreateNumber((double)b->offset));
      cJSON_AddItemToArray(x, cJSON_CreateNumber((double)b->bytes));
      cJSON_AddItemToArray(x, cJSON_CreateNumber(b->first));
      cJSON_AddItemToArray(x, cJSON_CreateNumber(b->last));
      cJSON_AddItemToArray(m, x);
    }
  }
  if (profile && profile_json(g, profile, report)) return -1;
  const char *page = NULL;
  for (const EmbeddedFile *e = gg_report_files; e->name; e++)
    if (!strcmp(e->name, "report.html")) page = e->text;
  const char *mark = page ? strstr(page, "<!--DATA-->") : NULL;
  if (!mark) return GG_INTERNAL(c);
  char *json = cJSON_PrintUnformatted(report);
  if (!json) return gg_error(c, "out of memory");
  FILE *f = fopen(path, "w");
  if (!f) { free(json); return gg_error(c, "%s: cannot write: %s", path, strerror(errno)); }
  fwrite(page, 1, (size_t)(mark - page), f);
  fputs("<script type=\"application/json\" id=\"gg-data\">", f);
  for (const char *s = json; *s; s++) {   /* only inside strings can these be: \u escapes there */
    if (*s == '<') fputs("\\u003c", f);
    else if (*s == '>') fputs("\\u003e", f);
    else if (*s == '&') fputs("\\u0026", f);
    else fputc(*s, f);
  }
  fputs("</script>", f);
  fputs(mark + strlen("<!--DATA-->"), f);
  free(json);
  if (fclose(f)) return gg_error(c, "%s: write failed", path);
  return 0;
}
