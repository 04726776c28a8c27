/* explain.c: what gcc-graph sees in a model, in text.
 * Requires: a loaded graph (verified or not: explain must work on models it cannot run). Prints the
 * signature, symbols and their ranges, ops by kind, and every node gcc-graph cannot handle, with the
 * user's stack trace: what PyTorch calls a graph break. Model strings are printed escaped. */
#include "gg.h"

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

static int64_t value_bytes(const Graph *g, const Value *v) {
  int64_t n = dtype_info(v->dtype) ? dtype_info(v->dtype)->size : 0;
  for (int d = 0; d < v->rank; d++) n *= expr_hint(g, v->sizes[d]);
  return n;
}

/* FLOPs of the matrix products and convolutions (at the symbols' example values): what BLAS does. */
static double matrix_flops(const Graph *g, const Node *n) {
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
  if (!strncmp(name, "conv", 4)) {
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
  for (int k = 0; k < g->nnodes; k++) f += matrix_flops(g, g->nodes[k]);
  return f;
}

typedef struct { const char *target; int count; } OpCount;

static int cmp_count(const void *a, const void *b) {
  const OpCount *x = a, *y = b;
  if (x->count != y->count) return y->count - x->count;
  return strcmp(x->target, y->target);
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
    } else if (v->input == IN_PARAM) { np++; pbytes += value_bytes(g, v); }
    else if (v->input == IN_BUFFER) { nb++; bbytes += value_bytes(g, v); }
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
  fprintf(f, "\nops: %d nodes, %d kinds\n", g->nnodes, nk);
  for (int j = 0; j < nk; j++) {
    const OpDef *op = ops_find(counts[j].target);
    fprintf(f, "  %5d  %-50s %s\n", counts[j].count, gg_quote(c, counts[j].target), op ? op->doc : "UNSUPPORTED");
  }
  free(counts);
  fprintf(f, "\nmatrix FLOPs: %.4g (matrix products and convolutions, at the example sizes)\n", graph_matrix_flops(g));
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
    Node *n = g->nodes[k];
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
    fputs(")\n", f);
  }
  for (int i = 0; i < g->noutputs; i++) {
    OutputSpec *o = &g->outputs[i];
    static const char *kind[] = {[OUT_USER] = "output", [OUT_BUFFER_MUTATION] = "buffer", [OUT_OTHER] = "other", [OUT_GRAD] = "gradient", [OUT_SAVED] = "saved"};
    fprintf(f, "%-9s %s", kind[o->kind], gg_quote(c, o->v->name));
    if (o->target_name) fprintf(f, " -> %s", gg_quote(c, o->target_name));
    fputc('\n', f);
  }
}
