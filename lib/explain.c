/* explain.c: what gcc-graph sees in a model, in text.
 * Requires: a loaded graph (verified or not: explain must work on models it cannot run). Prints the
 * signature, symbols and their ranges, ops by kind, and every node gcc-graph cannot handle, with the
 * user's stack trace: what PyTorch calls a graph break. Model strings are printed escaped. */
#include "gg.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void print_value(FILE *f, const Graph *g, const Value *v) {
  fprintf(f, "%s[", dtype_name(v->dtype));
  for (int d = 0; d < v->rank; d++) {
    if (d) fputs(", ", f);
    if (v->sizes && v->sizes[d]) expr_print(f, g, v->sizes[d]);
    else fputc('?', f);
  }
  fputc(']', f);
}

int64_t value_nbytes(const Graph *g, const Value *v) {
  int64_t n = dtype_info(v->dtype) ? dtype_info(v->dtype)->size : 0;
  for (int d = 0; d < v->rank; d++) n *= expr_hint(g, v->sizes[d]);
  return n;
}

/* FLOPs of the matrix products and convolutions (at the symbols' example values): what BLAS does. */
double node_matrix_flops(const Graph *g, const Node *n) {
  if (!n->op || !n->nouts) return 0;
  const char *name = n->op->name;
  const Value *y = n->outs[0];
  double out = 1;
  for (int d = 0; d < y->rank; d++) out *= (double)expr_hint(g, y->sizes[d]);
  if (!strcmp(name, "linear") || !strcmp(name, "addmm") || !strcmp(name, "mm") || !strcmp(name, "bmm") || !strcmp(name, "matmul") ||
      !strcmp(name, "baddbmm")) {
    const Value *a = n->args[!strcmp(name, "addmm") || !strcmp(name, "baddbmm") ? 1 : 0].u.t;
    return 2 * out * (double)expr_hint(g, a->sizes[a->rank - 1]);
  }
  if (!strcmp(name, "convolution_backward")) {   /* each gradient it computes costs what the forward did */
    const Value *gy = n->args[0].u.t, *w = n->args[2].u.t;
    const Arg *mask = &n->args[ops_arg_index(n->op, "output_mask")];
    double dy = 1, k = 1;
    for (int d = 0; d < gy->rank; d++) dy *= (double)expr_hint(g, gy->sizes[d]);
    for (int d = 1; d < w->rank; d++) k *= (double)expr_hint(g, w->sizes[d]);
    return 2 * dy * k * (mask->u.bs[0] + mask->u.bs[1]);
  }
  if (!strncmp(name, "conv", 4) || !strcmp(name, "_conv_nhwc")) {
    const Value *x = n->args[0].u.t, *w = n->args[1].u.t;
    double k = 1;
    for (int d = 1; d < w->rank; d++) k *= (double)expr_hint(g, w->sizes[d]);   /* Cin/groups * kernel */
    bool tr = !strncmp(name, "conv_transpose", 14) || (ops_arg_index(n->op, "transposed") >= 0 && n->args[ops_arg_index(n->op, "transposed")].u.b);
    if (tr) {   /* each input element meets Cout/groups * kernel weights */
      double in = 1;
      for (int d = 0; d < x->rank; d++) in *= (double)expr_hint(g, x->sizes[d]);
      return 2 * in * k;
    }
    return 2 * out * k;
  }
  return 0;
}

double graph_matrix_flops(const Graph *g) {
  double f = 0;
  if (g->unverified) return 0;   /* the rules below trust shapes verify checked */
  for (int k = 0; k < g->nnodes; k++) f += node_matrix_flops(g, g->nodes[k]);
  return f;
}

typedef struct { const char *target; int count; } OpCount;

static int cmp_count(const void *a, const void *b) {
  const OpCount *x = a, *y = b;
  if (x->count != y->count) return y->count - x->count;
  return strcmp(x->target, y->target);
}

/* the graph's targets with their node counts, most used first (free the result) */
static OpCount *count_ops(const Graph *g, int *n) {
  OpCount *counts = calloc((size_t)g->nnodes + 1, sizeof *counts);
  int nk = 0;
  for (int k = 0; k < g->nnodes; k++) {
    const char *t = g->nodes[k]->target;
    int j = 0;
    while (j < nk && strcmp(counts[j].target, t)) j++;
    if (j == nk) counts[nk++].target = t;
    counts[j].count++;
  }
  qsort(counts, (size_t)nk, sizeof *counts, cmp_count);
  *n = nk;
  return counts;
}

/* How the compiler treats an op: compiled as a kernel, a view, or rewritten first; differentiated by
 * its own rule, through what it is rewritten into (or its functional twin), or not at all. */
const char *op_compiled_as(const OpDef *op) {
  return decompose_has_rule(op) ? "rewritten" : op->view || !strcmp(op->name, "_unsafe_view") ? "view" : "kernel";
}

const char *op_gradient(const OpDef *op) {
  return autograd_has_rule(op) ? "rule" : op->inplace || decompose_has_rule(op) || decompose_has_training_rule(op) ? "rewritten" : "none";
}

/* ---------------------------------------------------------------- where a node came from */

/* The module a node was made in: the innermost entry of its nn_module_stack ("key,path,class;..." as
 * torch.export writes it): its path ("encoder.layer.0.attention"; "" for the model itself) and its
 * class's last name ("BertSelfAttention"). false when the export carries none. */
bool node_module(Arena *a, const Node *n, const char **path, const char **cls) {
  const char *s = n->module_stack;
  if (!s || !*s) return false;
  const char *e = strrchr(s, ';');
  e = e ? e + 1 : s;
  const char *c1 = strchr(e, ','), *c2 = strrchr(e, ',');
  if (!c1 || c2 == c1) return false;
  const char *p = c1 + 1;
  size_t len = (size_t)(c2 - p);
  if (len >= 9 && !strncmp(p, "L['self']", 9)) { p += 9; len -= 9; if (len && *p == '.') { p++; len--; } }   /* older exports */
  char *q = arena_alloc(a, len + 1);
  memcpy(q, p, len);
  *path = q;
  const char *dot = strrchr(c2 + 1, '.');
  *cls = arena_strdup(a, dot ? dot + 1 : c2 + 1);
  return true;
}

/* The user's line a node came from: the innermost frame of its stack trace outside PyTorch's own
 * files (an installed torch package, or torch/nn, torch/_*, ... of a checkout; the last frame when
 * every one is PyTorch's): its file, line and code. false when none. */
bool node_source(Arena *a, const Node *n, const char **file, int *line, const char **code) {
  const char *t = n->stack_trace, *user = NULL, *any = NULL;
  if (!t) return false;
  for (const char *p = t; (p = strstr(p, "File \"")); p++) {
    const char *q = strchr(p + 6, '"');
    if (!q || strncmp(q, "\", line ", 8)) continue;   /* all 8: q + 8 is at most the string's end */
    static const char *const pytorch[] = {"-packages/torch/", "/torch/nn/", "/torch/_", "/torch/fx/", "/torch/utils/", "/torch/autograd/", "/torch/functional.py"};
    bool torch = false;
    for (const char *x = p + 6; x < q && !torch; x++)
      for (size_t k = 0; k < sizeof pytorch / sizeof *pytorch && !torch; k++) torch = (size_t)(q - x) >= strlen(pytorch[k]) && !strncmp(x, pytorch[k], strlen(pytorch[k]));
    any = p;
    if (!torch) user = p;
  }
  const char *best = user ? user : any;
  if (!best) return false;
  const char *q = strchr(best + 6, '"');
  *file = arena_printf(a, "%.*s", (int)(q - best - 6), best + 6);
  long ln = strtol(q + 8, NULL, 10);   /* saturates: no overflow */
  *line = ln > 0 && ln < INT_MAX ? (int)ln : 0;
  const char *nl = strchr(q, '\n');
  const char *cs = nl ? nl + 1 : "";
  while (*cs == ' ') cs++;
  const char *ce = cs;
  while (*ce && *ce != '\n') ce++;
  *code = strncmp(cs, "File \"", 6) ? arena_printf(a, "%.*s", (int)(ce - cs), cs) : "";
  return true;
}

/* A trace from the export: print its last frame (the user's line) indented, escaped. */
static void print_trace(FILE *f, Ctx *c, const char *trace) {
  if (!trace || !*trace) { fputs("      (no stack trace in the export)\n", f); return; }
  const char *last = trace, *p = trace;
  while ((p = strstr(p, "File \""))) { last = p; p++; }
  char buf[1024];
  size_t n = strlen(last);
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, last, n);
  buf[n] = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    while (*line == ' ') line++;
    const char *q = gg_quote(c, line);
    fprintf(f, "      %.*s\n", (int)strlen(q) - 2, q + 1);
  }
}

int explain_graph(Graph *g, FILE *f) {
  Ctx *c = g->ctx;
  fprintf(f, "model: %s\n", gg_quote(c, g->path));
  fprintf(f, "exported by torch %s, schema %d.%d, IR %s\n", gg_quote(c, g->torch_version), g->schema_major, g->schema_minor, g->ir);
  int np = 0, nb = 0, nc = 0;
  int64_t pbytes = 0, bbytes = 0;
  fputs("\ninputs:\n", f);
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (v->input == IN_USER) {
      fprintf(f, "  in.%d  %-24s ", v->user_index, gg_quote(c, v->name));
      print_value(f, g, v);
      fputc('\n', f);
    } else if (v->input == IN_PARAM) { np++; pbytes += v->tied ? 0 : value_nbytes(g, v); }
    else if (v->input == IN_BUFFER) { nb++; bbytes += value_nbytes(g, v); }
    else nc++;
  }
  fputs("outputs:\n", f);
  for (int i = 0, k = 0; i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    if (o->kind == OUT_USER) fprintf(f, "  out.%d %-24s ", k++, gg_quote(c, o->v->name));
    else if (o->kind == OUT_BUFFER_MUTATION) fprintf(f, "  buffer %s <- %-14s ", gg_quote(c, o->target_name), gg_quote(c, o->v->name));
    else fprintf(f, "  (other) %-22s ", gg_quote(c, o->v->name));
    print_value(f, g, o->v);
    fputc('\n', f);
  }
  fprintf(f, "\nparameters: %d (%.1f KiB)   buffers: %d (%.1f KiB)   constants: %d\n", np, (double)pbytes / 1024, nb, (double)bbytes / 1024, nc);
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (v->input == IN_USER) continue;
    fprintf(f, "  %-9s %-40s ", v->input == IN_PARAM ? "parameter" : v->input == IN_BUFFER ? "buffer" : "constant", gg_quote(c, v->fqn));
    print_value(f, g, v);
    if (v->tied) fprintf(f, "  tied to %s (one storage, one gradient)", gg_quote(c, v->tied->fqn));
    fputs(v->weight ? "\n" : "  (no data in the file)\n", f);
  }
  if (g->nsyms) {
    fputs("\nsymbols:\n", f);
    for (int i = 0; i < g->nsyms; i++) {
      const Sym *s = &g->syms[i];
      fprintf(f, "  %s in [%lld, ", s->name, (long long)s->min);
      if (s->max == INT64_MAX) fputs("inf", f); else fprintf(f, "%lld", (long long)s->max);
      fprintf(f, "], example %lld\n", (long long)s->hint);
    }
  }
  int nk;
  OpCount *counts = count_ops(g, &nk);
  fprintf(f, "\nops: %d nodes, %d kinds\n", g->nnodes, nk);
  for (int j = 0; j < nk; j++) {
    const OpDef *op = ops_find(counts[j].target);
    fprintf(f, "  %5d  %-50s %s\n", counts[j].count, gg_quote(c, counts[j].target), op ? op->doc : "UNSUPPORTED");
  }
  free(counts);
  if (!g->unverified) fprintf(f, "\nmatrix FLOPs: %.4g (matrix products and convolutions, at the example sizes)\n", graph_matrix_flops(g));
  else fputs("\nmatrix FLOPs: unknown (the graph did not verify)\n", f);
  fprintf(f, "\nunsupported nodes (graph breaks): %d\n", g->nunsupported);
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (n->op) continue;
    fprintf(f, "  node %s: %s\n", gg_quote(c, n->name), gg_quote(c, n->target));
    print_trace(f, c, n->stack_trace);
  }
  return 0;
}

/* What --train makes of the model: the backward, and what each partition saves for it. fwd and bwd
 * are the min-cut split; st_default the statistics of the split that saves everything. */
void explain_training(Graph *fwd, Graph *bwd, const PartitionStats *st, FILE *f) {
  Ctx *c = fwd->ctx;
  fprintf(f, "\ntraining (--train): the gradient of the loss for %d tensors\n", bwd->noutputs);
  for (int i = 0; i < bwd->noutputs; i++) {
    fprintf(f, "  grad.%-40s ", gg_quote(c, bwd->outputs[i].target_name));
    print_value(f, bwd, bwd->outputs[i].v);
    fputc('\n', f);
  }
  fprintf(f, "forward: %d nodes; backward: %d nodes, %d of them forward nodes recomputed from saved values\n", st->forward_nodes, st->backward_nodes, st->recomputed);
  fprintf(f, "saved for the backward: min-cut %d tensors, %.1f KiB; saving everything the backward reads (--partition default) %d tensors, %.1f KiB\n",
          st->saved, (double)st->saved_bytes / 1024, st->saved_default, (double)st->default_bytes / 1024);
  for (int i = 0; i < fwd->noutputs; i++) {
    if (fwd->outputs[i].kind != OUT_SAVED) continue;
    fprintf(f, "  saved %-40s ", gg_quote(c, fwd->outputs[i].v->name));
    print_value(f, fwd, fwd->outputs[i].v);
    fputc('\n', f);
  }
  fprintf(f, "matrix FLOPs: forward %.4g, backward %.4g\n", graph_matrix_flops(fwd), graph_matrix_flops(bwd));
}

/* ---------------------------------------------------------------- the graph, readable */

static void print_arg(FILE *f, const Graph *g, const Arg *a) {
  Ctx *c = g->ctx;
  switch (a->k) {
  case AK_NONE: fputs("None", f); break;
  case AK_TENSOR: fputs(gg_quote(c, a->u.t->name), f); break;
  case AK_TENSORS:
    fputc('[', f);
    for (int i = 0; i < a->n; i++) fprintf(f, "%s%s", i ? ", " : "", a->u.ts[i] ? gg_quote(c, a->u.ts[i]->name) : "None");
    fputc(']', f);
    break;
  case AK_INT: expr_print(f, g, a->u.i); break;
  case AK_INTS:
    fputc('[', f);
    for (int i = 0; i < a->n; i++) { if (i) fputs(", ", f); expr_print(f, g, a->u.is[i]); }
    fputc(']', f);
    break;
  case AK_FLOAT: fprintf(f, "%.17g", a->u.f); break;
  case AK_FLOATS:
    fputc('[', f);
    for (int i = 0; i < a->n; i++) fprintf(f, "%s%.17g", i ? ", " : "", a->u.fs[i]);
    fputc(']', f);
    break;
  case AK_BOOL: fputs(a->u.b ? "True" : "False", f); break;
  case AK_BOOLS:
    fputc('[', f);
    for (int i = 0; i < a->n; i++) fprintf(f, "%s%s", i ? ", " : "", a->u.bs[i] ? "True" : "False");
    fputc(']', f);
    break;
  case AK_STR: case AK_DEVICE: fputs(gg_quote(c, a->u.s), f); break;
  case AK_DTYPE: fputs(dtype_name((DType)a->u.code), f); break;
  default: fputs("...", f); break;
  }
}

/* A node as one line: "out: dtype[sizes] = op(name=arg, ...)" (no newline) */
void node_print(Graph *g, const Node *n, FILE *f) {
  Ctx *c = g->ctx;
  for (int i = 0; i < n->nouts; i++) {
    fprintf(f, "%s%s: ", i ? ", " : "", gg_quote(c, n->outs[i]->name));
    if (n->outs[i]->kind == VK_TENSOR) print_value(f, g, n->outs[i]);
    else fputs("int", f);
  }
  fprintf(f, "%s= %s(", n->nouts ? " " : "", n->op ? n->op->name : gg_quote(c, n->target));
  for (int i = 0; n->op && i < n->op->nargs; i++) {
    if (i) fputs(", ", f);
    fprintf(f, "%s=", n->op->args[i].name);
    print_arg(f, g, &n->args[i]);
  }
  fputc(')', f);
}

/* One line per input, node and output: what --debug-dir writes after each stage. */
void graph_print(Graph *g, FILE *f) {
  Ctx *c = g->ctx;
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    static const char *kind[] = {[IN_USER] = "input", [IN_PARAM] = "parameter", [IN_BUFFER] = "buffer", [IN_CONST] = "constant"};
    fprintf(f, "%-9s %s: ", kind[v->input], gg_quote(c, v->name));
    print_value(f, g, v);
    if (v->fqn) fprintf(f, "  (%s)", gg_quote(c, v->fqn));
    fputc('\n', f);
  }
  for (int k = 0; k < g->nnodes; k++) {
    node_print(g, g->nodes[k], f);
    fputc('\n', f);
  }
  for (int i = 0; i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    static const char *kind[] = {[OUT_USER] = "output", [OUT_BUFFER_MUTATION] = "buffer", [OUT_OTHER] = "other", [OUT_GRAD] = "gradient", [OUT_SAVED] = "saved"};
    fprintf(f, "%-9s %s", kind[o->kind], gg_quote(c, o->v->name));
    if (o->target_name) fprintf(f, " -> %s", gg_quote(c, o->target_name));
    fputc('\n', f);
  }
}

/* ---------------------------------------------------------------- the schedule */

void explain_schedule(Ctx *c, FILE *f) {
  int fused = 0;
  for (int k = 0; k < c->nkernels; k++) fused += c->kernels[k].nfused;
  fprintf(f, "\nschedule (the compiled code): %d kernels, %d nodes computed inside another kernel's loops\n", c->nkernels, fused);
  fprintf(f, "intermediate memory: %.1f KiB planned (lifetimes that do not overlap share), %.1f KiB one after another\n",
          (double)c->scratch_planned / 1024, (double)c->scratch_naive / 1024);
  double rd = 0, wr = 0, fl = 0;
  for (int k = 0; k < c->nkernels; k++) rd += c->kernels[k].read, wr += c->kernels[k].written, fl += c->kernels[k].flops;
  fprintf(f, "memory traffic: %.1f KiB read, %.1f KiB written; %.4g FLOPs (each kernel: its iteration space, the bytes it reads and writes, its FLOPs)\n",
          rd / 1024, wr / 1024, fl);
  for (int k = 0; k < c->nkernels && k < 400; k++) {
    KernelRec *r = &c->kernels[k];
    fprintf(f, "  k%-4d %-44s %s", r->id, r->what, gg_quote(c, r->node));
    for (int j = 0; j < r->nfused; j++) fprintf(f, "%s%s", j ? ", " : "  + ", r->fused[j]->name);
    fprintf(f, "\n        %s  read %.1f KiB  written %.1f KiB  %.4g FLOPs", r->space ? r->space : "-", r->read / 1024, r->written / 1024, r->flops);
    const char *path, *cls;
    if (r->n && node_module(c->arena, r->n, &path, &cls)) fprintf(f, "  in %s (%s)", *path ? gg_quote(c, path) : "the model", gg_quote(c, cls));
    fputc('\n', f);
  }
  if (c->nkernels > 400) fprintf(f, "  ... and %d more\n", c->nkernels - 400);
  if (c->nrefused) fprintf(f, "fusions refused: %d\n", c->nrefused);
  for (int k = 0; k < c->nrefused && k < 200; k++) {
    Refusal *r = &c->refused[k];
    fprintf(f, "  %s", gg_quote(c, r->node));
    if (r->reader) fprintf(f, " into %s", gg_quote(c, r->reader));
    fprintf(f, ": %s\n", r->why);
  }
  if (c->nrefused > 200) fprintf(f, "  ... and %d more\n", c->nrefused - 200);
}

/* ---------------------------------------------------------------- explain --json */

cJSON *shape_json(const Graph *g, const Value *v) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < v->rank; d++) {
    int64_t x;
    if (expr_is_const(v->sizes[d], &x)) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)x));
    else cJSON_AddItemToArray(a, cJSON_CreateString(expr_str(g->ctx->arena, g, v->sizes[d])));
  }
  return a;
}

cJSON *symbols_json(const Graph *g, bool examples) {
  cJSON *syms = cJSON_CreateArray();
  for (int i = 0; i < g->nsyms; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", g->syms[i].name);
    cJSON_AddNumberToObject(o, "min", (double)g->syms[i].min);
    if (g->syms[i].max == INT64_MAX) cJSON_AddNullToObject(o, "max"); else cJSON_AddNumberToObject(o, "max", (double)g->syms[i].max);
    if (examples) cJSON_AddNumberToObject(o, "example", (double)g->syms[i].hint);
    cJSON_AddItemToArray(syms, o);
  }
  return syms;
}

static cJSON *value_json(const Graph *g, const Value *v) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", v->name);
  cJSON_AddStringToObject(o, "dtype", dtype_name(v->dtype));
  cJSON_AddItemToObject(o, "shape", shape_json(g, v));
  return o;
}

/* A node's module path and class, and the user's line, as fields of o (where the export has them) */
void node_origin_json(Arena *a, const Node *n, cJSON *o) {
  const char *path, *cls, *file, *code;
  int line;
  if (node_module(a, n, &path, &cls)) {
    cJSON_AddStringToObject(o, "module", path);
    cJSON_AddStringToObject(o, "module_class", cls);
  }
  if (node_source(a, n, &file, &line, &code)) {
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddNumberToObject(o, "line", line);
    cJSON_AddStringToObject(o, "code", code);
  }
}

cJSON *explain_obj(Graph *g, Graph *fwd, Graph *bwd, const PartitionStats *st, bool scheduled) {
  Ctx *c = g->ctx;
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", "gcc-graph explain");
  cJSON_AddStringToObject(m, "model", g->path);
  cJSON_AddStringToObject(m, "torch_version", g->torch_version ? g->torch_version : "");
  cJSON_AddStringToObject(m, "ir", g->ir ? g->ir : "");
  cJSON *ins = cJSON_AddArrayToObject(m, "inputs"), *outs = cJSON_AddArrayToObject(m, "outputs"), *ws = cJSON_AddArrayToObject(m, "weights");
  for (int i = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    cJSON *o = value_json(g, v);
    if (v->input == IN_USER) { cJSON_AddItemToArray(ins, o); continue; }
    cJSON_AddStringToObject(o, "kind", v->input == IN_PARAM ? "parameter" : v->input == IN_BUFFER ? "buffer" : "constant");
    if (v->fqn) cJSON_AddStringToObject(o, "fqn", v->fqn);
    if (v->tied) cJSON_AddStringToObject(o, "tied", v->tied->fqn);
    cJSON_AddNumberToObject(o, "bytes", (double)value_nbytes(g, v));
    cJSON_AddItemToArray(ws, o);
  }
  for (int i = 0; i < g->noutputs; i++) {
    OutputSpec *os = &g->outputs[i];
    if (os->kind != OUT_USER && os->kind != OUT_BUFFER_MUTATION) continue;
    cJSON *o = value_json(g, os->v);
    cJSON_AddStringToObject(o, "kind", os->kind == OUT_USER ? "output" : "buffer update");
    if (os->target_name) cJSON_AddStringToObject(o, "target", os->target_name);
    cJSON_AddItemToArray(outs, o);
  }
  cJSON_AddItemToObject(m, "symbols", symbols_json(g, true));
  cJSON *ops = cJSON_AddArrayToObject(m, "ops"), *unsup = cJSON_AddArrayToObject(m, "unsupported"), *dec = cJSON_AddArrayToObject(m, "decompositions");
  int nk;
  OpCount *counts = count_ops(g, &nk);
  for (int j = 0; j < nk; j++) {
    const OpDef *op = ops_find(counts[j].target);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "target", counts[j].target);
    cJSON_AddNumberToObject(o, "count", counts[j].count);
    cJSON_AddBoolToObject(o, "supported", op != NULL);
    if (op) {
      cJSON_AddStringToObject(o, "compiled_as", op_compiled_as(op));
      cJSON_AddStringToObject(o, "gradient", op_gradient(op));
      if (decompose_has_rule(op)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "op", op->name);
        cJSON_AddNumberToObject(d, "count", counts[j].count);
        cJSON_AddItemToArray(dec, d);
      }
    }
    cJSON_AddItemToArray(ops, o);
  }
  free(counts);
  for (int k = 0; k < g->nnodes; k++) {
    Node *n = g->nodes[k];
    if (n->op) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "node", n->name);
    cJSON_AddStringToObject(o, "target", n->target);
    if (n->stack_trace) cJSON_AddStringToObject(o, "stack_trace", n->stack_trace); else cJSON_AddNullToObject(o, "stack_trace");
    cJSON_AddItemToArray(unsup, o);
  }
  cJSON_AddNumberToObject(m, "matrix_flops", graph_matrix_flops(g));
  if (scheduled) {
    cJSON *s = cJSON_AddObjectToObject(m, "schedule"), *ks = cJSON_AddArrayToObject(s, "kernels");
    cJSON_AddNumberToObject(s, "scratch_bytes_planned", (double)c->scratch_planned);
    cJSON_AddNumberToObject(s, "scratch_bytes_unplanned", (double)c->scratch_naive);
    for (int k = 0; k < c->nkernels; k++) {
      KernelRec *r = &c->kernels[k];
      cJSON *o = cJSON_CreateObject(), *fl = cJSON_AddArrayToObject(o, "fused");
      cJSON_AddNumberToObject(o, "id", r->id);
      cJSON_AddStringToObject(o, "kind", r->what);
      cJSON_AddStringToObject(o, "node", r->node);
      cJSON_AddStringToObject(o, "target", r->target);
      cJSON_AddStringToObject(o, "space", r->space ? r->space : "");
      cJSON_AddNumberToObject(o, "bytes_read", r->read);
      cJSON_AddNumberToObject(o, "bytes_written", r->written);
      cJSON_AddNumberToObject(o, "flops", r->flops);
      for (int j = 0; j < r->nfused; j++) cJSON_AddItemToArray(fl, cJSON_CreateString(r->fused[j]->name));
      if (r->n) node_origin_json(c->arena, r->n, o);
      cJSON_AddItemToArray(ks, o);
    }
    cJSON *rf = cJSON_AddArrayToObject(s, "refused");
    for (int k = 0; k < c->nrefused; k++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "node", c->refused[k].node);
      if (c->refused[k].reader) cJSON_AddStringToObject(o, "reader", c->refused[k].reader);
      else cJSON_AddNullToObject(o, "reader");
      cJSON_AddStringToObject(o, "why", c->refused[k].why);
      cJSON_AddItemToArray(rf, o);
    }
  }
  if (fwd && bwd && st) {
    cJSON *t = cJSON_AddObjectToObject(m, "training"), *gr = cJSON_AddArrayToObject(t, "gradients"), *sv = cJSON_AddArrayToObject(t, "saved");
    for (int i = 0; i < bwd->noutputs; i++) cJSON_AddItemToArray(gr, cJSON_CreateString(bwd->outputs[i].target_name));
    for (int i = 0; i < fwd->noutputs; i++) if (fwd->outputs[i].kind == OUT_SAVED) cJSON_AddItemToArray(sv, value_json(fwd, fwd->outputs[i].v));
    cJSON_AddNumberToObject(t, "forward_nodes", st->forward_nodes);
    cJSON_AddNumberToObject(t, "backward_nodes", st->backward_nodes);
    cJSON_AddNumberToObject(t, "recomputed_nodes", st->recomputed);
    cJSON_AddNumberToObject(t, "saved_tensors", st->saved);
    cJSON_AddNumberToObject(t, "saved_bytes", (double)st->saved_bytes);
    cJSON_AddNumberToObject(t, "saved_tensors_default", st->saved_default);
    cJSON_AddNumberToObject(t, "saved_bytes_default", (double)st->default_bytes);
    cJSON_AddNumberToObject(t, "matrix_flops_forward", graph_matrix_flops(fwd));
    cJSON_AddNumberToObject(t, "matrix_flops_backward", graph_matrix_flops(bwd));
  }
  return m;
}

char *explain_json(Graph *g, Graph *fwd, Graph *bwd, const PartitionStats *st, bool scheduled) {
  cJSON *m = explain_obj(g, fwd, bwd, st, scheduled);
  char *text = cJSON_Print(m);
  cJSON_Delete(m);
  return text;
}
