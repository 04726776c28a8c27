/* main.c: the gcc-graph driver. Parses arguments and calls the library; no compiler logic here.
 * Exit status: 0 success, 1 bad input (model, tensors, guard failure), 2 wrong usage. */
#include "../lib/gg.h"

#include <stdlib.h>
#include <string.h>

static const char *prog = "gcc-graph";

static const char usage_main[] =
  "usage: gcc-graph <command> [options]\n"
  "\n"
  "An ahead-of-time compiler for PyTorch graphs saved by torch.export.\n"
  "\n"
  "commands:\n"
  "  run MODEL --inputs IN.safetensors -o OUT.safetensors [--interpret]\n"
  "                 run a model (.pt2 or .json) on inputs and write its outputs\n"
  "  explain MODEL  show inputs, outputs, weights, symbols, ops and unsupported nodes\n"
  "  ops            list the supported ATen ops with their schemas (markdown)\n"
  "\n"
  "options:\n"
  "  -h, --help     show help (gcc-graph COMMAND --help for a command)\n"
  "  --version      show the version\n"
  "\n"
  "Exit status: 0 success, 1 bad input, 2 wrong usage.\n";

static const char usage_run[] =
  "usage: gcc-graph run MODEL --inputs IN.safetensors -o OUT.safetensors [options]\n"
  "\n"
  "Run MODEL (a .pt2 archive or an ExportedProgram .json) on the tensors of IN and write the\n"
  "results to OUT. Inputs are named in.0, in.1, ... by position among the model's user inputs\n"
  "(the input's own name is accepted too). Outputs are written as out.0, out.1, ... in output\n"
  "order, and every buffer the model mutates as buffer_after.<buffer name>.\n"
  "\n"
  "options:\n"
  "  --inputs FILE     input tensors (safetensors)\n"
  "  -o FILE           where to write the outputs (safetensors)\n"
  "  --interpret       run the reference interpreter (the only engine in this version)\n"
  "  --weights FILE    parameters and buffers for a bare .json (safetensors, keyed by name)\n"
  "  -h, --help        show this help\n";

static const char usage_explain[] =
  "usage: gcc-graph explain MODEL [--weights FILE]\n"
  "\n"
  "Print what gcc-graph sees in MODEL: user inputs and outputs with dtypes and (symbolic) sizes,\n"
  "parameters and buffers, symbols and their ranges, ops by kind with counts, and every node\n"
  "gcc-graph cannot handle with its ATen target and the user's stack trace.\n"
  "\n"
  "options:\n"
  "  --weights FILE    parameters and buffers for a bare .json (safetensors)\n"
  "  -h, --help        show this help\n";

static int usage_error(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "%s: ", prog);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n\n%s", usage);
  return 2;
}

static int report(Ctx *c) {
  fprintf(stderr, "%s: error: %s\n", prog, c->has_err ? c->err : "unknown failure");
  return 1;
}

typedef struct Opts { const char *model, *inputs, *output, *weights; bool interpret, help; } Opts;

/* Parse "--flag VALUE" style options shared by the subcommands. Returns 2 on a usage error. */
static int parse_opts(int argc, char **argv, Opts *o, const char *usage, bool run) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { o->help = true; continue; }
    if (run && !strcmp(a, "--interpret")) { o->interpret = true; continue; }
    if (run && !strcmp(a, "--inputs")) slot = &o->inputs;
    else if (run && !strcmp(a, "-o")) slot = &o->output;
    else if (!strcmp(a, "--weights")) slot = &o->weights;
    else if (a[0] == '-' && a[1]) return usage_error(usage, "unknown option '%s'", a);
    else if (!o->model) { o->model = a; continue; }
    else return usage_error(usage, "unexpected argument '%s'", a);
    if (i + 1 >= argc) return usage_error(usage, "option '%s' needs a value", a);
    *slot = argv[++i];
  }
  return 0;
}

static Graph *load_verified(Ctx *c, const Opts *o) {
  Graph *g = graph_load(c, o->model, o->weights);
  if (!g) return NULL;
  if (verify_graph(g) || graph_check_supported(g)) { graph_release(g); return NULL; }
  return g;
}

static int cmd_explain(int argc, char **argv) {
  Opts o = {0};
  if (parse_opts(argc, argv, &o, usage_explain, false)) return 2;
  if (o.help) { fputs(usage_explain, stdout); return 0; }
  if (!o.model) return usage_error(usage_explain, "%s", "missing MODEL");
  Ctx *c = ctx_new();
  c->file = o.model;
  Graph *g = graph_load(c, o.model, o.weights);
  if (!g) { int rc = report(c); ctx_free(c); return rc; }
  int rc = verify_graph(g);
  explain_graph(g, stdout);
  if (rc) { fprintf(stdout, "\nverification failed: %s\n", c->err); rc = report(c); }
  graph_release(g);
  ctx_free(c);
  return rc;
}

/* Match the input file's tensors to the model's user inputs: in.N, or the input's own name. */
static int bind_inputs(Ctx *c, Interp *I, Graph *g, const SafeTensors *st, const char *path, Tensor ***out, int *n) {
  Value **users;
  int nu = graph_user_inputs(g, &users);
  Tensor **ts = arena_array(c->arena, (size_t)nu + 1, sizeof *ts);
  for (int i = 0; i < nu; i++) {
    char key[32];
    snprintf(key, sizeof key, "in.%d", i);
    const STensor *s = st_find(st, key);
    if (!s) s = st_find(st, users[i]->name);
    if (!s) return gg_error(c, "%s: no tensor for input %d (%s): name it %s or %s", path, i, gg_quote(c, users[i]->name), key, gg_quote(c, users[i]->name));
    ts[i] = tensor_from_st(I, s);
  }
  /* a tensor named in.N beyond the model's inputs is a mistake worth reporting */
  for (int k = 0; k < st->n; k++) {
    int idx;
    char tail;
    if (sscanf(st->t[k].name, "in.%d%c", &idx, &tail) == 1 && (idx < 0 || idx >= nu))
      return gg_error(c, "guard failed: expected %d inputs, got a tensor named %s", nu, gg_quote(c, st->t[k].name));
  }
  *out = ts;
  *n = nu;
  return 0;
}

static int write_results(Ctx *c, Interp *I, const char *path, const RunResult *r) {
  int n = r->nouts + r->nbuffers;
  STensor *st = arena_array(c->arena, (size_t)n + 1, sizeof *st);
  for (int i = 0; i < n; i++) {
    Tensor *t = i < r->nouts ? r->outs[i] : r->buffers[i - r->nouts];
    st[i].name = i < r->nouts ? arena_printf(c->arena, "out.%d", i) : arena_printf(c->arena, "buffer_after.%s", r->buffer_names[i - r->nouts]);
    st[i].dtype = t->dtype;
    st[i].rank = t->rank;
    memcpy(st[i].sizes, t->sizes, sizeof st[i].sizes);
    st[i].data = tensor_contiguous_bytes(I, t, &st[i].nbytes);
  }
  return st_write(c, path, st, n);
}

static int cmd_run(int argc, char **argv) {
  Opts o = {0};
  if (parse_opts(argc, argv, &o, usage_run, true)) return 2;
  if (o.help) { fputs(usage_run, stdout); return 0; }
  if (!o.model) return usage_error(usage_run, "%s", "missing MODEL");
  if (!o.inputs) return usage_error(usage_run, "%s", "missing --inputs FILE");
  if (!o.output) return usage_error(usage_run, "%s", "missing -o FILE");
  size_t ml = strlen(o.model);
  if (ml > 3 && !strcmp(o.model + ml - 3, ".so")) {
    fprintf(stderr, "%s: error: %s: running compiled models is not available in this version; use the .pt2 with --interpret\n", prog, o.model);
    return 1;
  }
  Ctx *c = ctx_new();
  Graph *g = load_verified(c, &o);
  int rc = 1;
  if (g) {
    SafeTensors in;
    Interp *I = interp_new(c, g);
    Tensor **ts = NULL;
    int n = 0;
    RunResult r;
    if (!st_read(c, g, o.inputs, &in) && !bind_inputs(c, I, g, &in, o.inputs, &ts, &n) &&
        !interp_run(I, ts, n, in.t, in.n, &r) && !write_results(c, I, o.output, &r))
      rc = 0;
    interp_free(I);
    graph_release(g);
  }
  if (rc) report(c);
  ctx_free(c);
  return rc;
}

static int list_ops(FILE *f) {
  fprintf(f, "# Supported ops\n\nGenerated by `gcc-graph ops` from the op table (`lib/ops.def`): %d ATen overloads.\n"
             "Each row is PyTorch's own schema, which gives argument names, order and defaults.\n\n"
             "| op | what it computes | schema |\n|---|---|---|\n", ops_count());
  for (int i = 0; i < ops_count(); i++) {
    const OpDef *op = ops_at(i);
    fprintf(f, "| `aten.%s` | %s | `%s` |\n", op->name, op->doc, op->schema);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) { fputs(usage_main, stderr); return 2; }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-v") || !strcmp(cmd, "version")) {
    printf("gcc-graph %s\n", GG_VERSION);
    return 0;
  }
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    if (argc > 2 && !strcmp(argv[2], "run")) fputs(usage_run, stdout);
    else if (argc > 2 && !strcmp(argv[2], "explain")) fputs(usage_explain, stdout);
    else fputs(usage_main, stdout);
    return 0;
  }
  Ctx *probe = ctx_new();
  int ok = ops_init(probe);
  if (ok) { report(probe); ctx_free(probe); return 1; }
  ctx_free(probe);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "explain")) return cmd_explain(argc - 2, argv + 2);
  if (!strcmp(cmd, "ops")) {
    if (argc > 2) return usage_error(usage_main, "unexpected argument '%s'", argv[2]);
    return list_ops(stdout);
  }
  return usage_error(usage_main, "unknown command '%s'", cmd);
}
