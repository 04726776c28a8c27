/* main.c: the gcc-graph driver. Parses arguments and calls the library; no compiler logic here.
 * Exit status: 0 success, 1 bad input (model, tensors, guard failure), 2 wrong usage. */
#include "../lib/gg.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../include/gcc_graph.h"

#include <cjson/cJSON.h>

static const char *prog = "gcc-graph";

static const char usage_main[] =
  "usage: gcc-graph <command> [options]\n"
  "\n"
  "An ahead-of-time compiler for PyTorch graphs saved by torch.export.\n"
  "\n"
  "commands:\n"
  "  compile MODEL -o MODEL.so [--train]\n"
  "                 compile a model into a shared object (C/OpenMP, BLAS); --train adds its backward\n"
  "  run MODEL --inputs IN.safetensors -o OUT.safetensors [--interpret] [--train]\n"
  "                 run a model (.so, .pt2 or .json) on inputs and write its outputs (and gradients)\n"
  "  explain MODEL [--json | --html FILE] [--train]\n"
  "                 show inputs, outputs, weights, symbols, ops, graph breaks and the schedule\n"
  "  ops            list the supported ATen ops with their schemas (markdown)\n"
  "  check MODEL [--inputs IN] [--train]\n"
  "                 ablation: the first stage whose results depart from the loaded graph's\n"
  "  minify MODEL -o DIR [--inputs IN]\n"
  "                 reduce a model whose compiled code fails to a small standalone repro\n"
  "  bench MODEL.so --inputs IN.safetensors [--iters N]\n"
  "                 time a compiled model; the last line is JSON (median_ms, p90_ms, p99_ms, ...)\n"
  "  compare OUT.safetensors EXPECTED.safetensors [--tol X]\n"
  "                 whether outputs agree with expected ones (PyTorch's), tensor by tensor\n"
  "\n"
  "options:\n"
  "  -h, --help     show help (gcc-graph COMMAND --help for a command)\n"
  "  --version      show the version\n"
  "  -fdiagnostics-color[=always|never|auto]\n"
  "                 color \"error:\" (auto: on a terminal, unless NO_COLOR is set)\n"
  "\n"
  "environment:\n"
  "  GCC_GRAPH_LOGS=CATEGORIES   log events on stderr, one line each: functionalize, decomp,\n"
  "                 autograd, partition, fusion, schedule, memory, guards, output_code, cache, or all\n"
  "  GCC_GRAPH_CACHE_DIR=DIR     reuse compiled models: an unchanged model rebuilds in milliseconds;\n"
  "                 the compiled runtime is kept there too (else in $XDG_CACHE_HOME/gcc-graph or\n"
  "                 ~/.cache/gcc-graph), once per compiler and flags\n"
  "  GCC_GRAPH_NO_CACHE=1        neither reuse nor keep anything compiled\n"
  "  GCC_GRAPH_SEED=N            the seed of random ops (rand, randn, randperm, dropout in training)\n"
  "                 in compiled models and the interpreter (default 0)\n"
  "  GCC_GRAPH_PROFILE=1         compiled models print the nodes that took the most time\n"
  "  GCC_GRAPH_PROFILE=FILE.json ... and write every node of every run to FILE as a Chrome trace\n"
  "                 (Perfetto, chrome://tracing; CPU models)\n"
  "  GCC_GRAPH_BLAS_ONLY=1       compiled CPU models leave their own AVX-512 float32 kernels for BLAS\n"
  "  GCC_GRAPH_NO_AMX=1          compiled CPU models run bfloat16 products in float32, not on AMX\n"
  "\n"
  "Exit status: 0 success, 1 bad input, 2 wrong usage.\n";

static const char usage_run[] =
  "usage: gcc-graph run MODEL --inputs IN.safetensors -o OUT.safetensors [options]\n"
  "\n"
  "Run MODEL (a compiled .so, a .pt2 archive or an ExportedProgram .json) on the tensors of IN and\n"
  "write the results to OUT. A .so runs its compiled code; a .pt2 or .json runs under the reference\n"
  "interpreter, the oracle the compiled code is tested against.\n"
  "\n"
  "Inputs are named in.0, in.1, ... by position among the model's user inputs\n"
  "(the input's own name is accepted too). Outputs are written as out.0, out.1, ... in output\n"
  "order, and every buffer the model mutates as buffer_after.<buffer name>. A training .so (compile\n"
  "--train), or a .pt2/.json run with --train, also writes grad.<parameter name>: the gradient of the\n"
  "loss (output 0, or --loss N) for every parameter that requires grad.\n"
  "\n"
  "options:\n"
  "  --inputs FILE     input tensors (safetensors)\n"
  "  -o FILE           where to write the outputs (safetensors)\n"
  "  --interpret       run the reference interpreter (the default for .pt2 and .json)\n"
  "  --train           (.pt2/.json) run the forward and the backward, write grad.<name>\n"
  "  --loss N          with --train: the output to differentiate (default 0)\n"
  "  --weights FILE    parameters and buffers for a bare .json (safetensors, keyed by name);\n"
  "                    for a .so compiled with --weights external, the .pt2 it was compiled from\n"
  "  -h, --help        show this help\n";

static const char usage_compile[] =
  "usage: gcc-graph compile MODEL -o OUT.so [options]\n"
  "\n"
  "Compile MODEL (a .pt2 archive or an ExportedProgram .json) into a shared object that needs only\n"
  "libc, libm, libgomp and a BLAS. Its entry points are declared in gcc_graph.h (DLPack tensors);\n"
  "it carries its metadata (gg_metadata) and checks every input before it runs.\n"
  "\n"
  "options:\n"
  "  -o FILE              the shared object to write (with -S: a folder for the C sources)\n"
  "  -S                   write the generated C sources only\n"
  "  --weights FILE       parameters and buffers for a bare .json (safetensors, keyed by name)\n"
  "  --weights external   leave the weights in the .pt2, mapped when the model is opened\n"
  "                       (gg_open and gcc-graph run --weights then take the .pt2's path)\n"
  "  --weights embedded   put the weights inside the .so (the default)\n"
  "  --cc CC              the C compiler (default: cc)\n"
  "  --cflags FLAGS       its optimization flags (default: -O3 -fno-math-errno -fno-trapping-math)\n"
  "  --keep               keep the build folder and say where it is\n"
  "  -v                   print the compiler command\n"
  "  --time-report        print the time and peak memory of each stage (like gcc -ftime-report)\n"
  "  --debug-dir DIR      write the graph after each stage (NN-stage.txt), the kernels after\n"
  "                       fusion (schedule.txt), the generated model.c and timings.txt into DIR\n"
  "  -MD                  write a make rule naming the files OUT depends on to OUT.d (as gcc -MD -MP)\n"
  "  -MF FILE             ... to FILE instead\n"
  "  -j N                 compiler processes at once (default: the processors, up to 16)\n"
  "  --target cpu|cuda    where the model runs (default cpu); cuda writes CUDA C (model.cu), builds\n"
  "                       it with nvcc (NVCC names another) and cuBLAS, and takes and gives device\n"
  "                       tensors (docs/cuda.md)\n"
  "  --cuda-arch sm_XY    the GPU architecture to build for (default: the installed GPU's, else sm_90)\n"
  "  --precision fp32|tf32|tf32x3|bf16|fp16\n"
  "                       for a float32 model: matrix products, convolutions and attention in\n"
  "                       bfloat16 or float16 (float32 accumulation, everything else in float32,\n"
  "                       like torch.autocast), or with TF32 tensor cores (--target cuda); tf32x3:\n"
  "                       matrix products as three TF32 products of split operands, about ten\n"
  "                       times TF32's accuracy (--target cuda); default fp32 (docs/cuda.md)\n"
  "  --no-channels-last   keep convolutions and the nodes after them in NCHW; by default the GPU's\n"
  "                       tensor-core ones (float16, bfloat16, TF32) run channels-last (NHWC), as\n"
  "                       cuDNN wants (docs/cuda.md), and so do the CPU's float32 and bfloat16 ones\n"
  "                       (one product over all images' positions; depthwise: a loop over channels)\n"
  "With GCC_GRAPH_CACHE_DIR set, an unchanged model with unchanged options is copied from the cache.\n"
  "The compiled runtime is kept per compiler, flags and version in GCC_GRAPH_CACHE_DIR, else in\n"
  "$XDG_CACHE_HOME/gcc-graph or ~/.cache/gcc-graph (GCC_GRAPH_NO_CACHE=1: no cache at all).\n"
  "\n"
  "training (docs/training.md):\n"
  "  --train              also build the backward of the loss and compile both halves: the .so\n"
  "                       gets gg_forward, gg_backward, gg_gradient and gg_train_step\n"
  "  --loss N             the output to differentiate (default 0; a float tensor of one element)\n"
  "  --partition mincut|default\n"
  "                       save the fewest bytes for the backward, recomputing cheap pointwise work\n"
  "                       (default), or save every forward value the backward reads\n"
  "  --optimizer sgd|adam|adamw\n"
  "                       what gg_train_step applies to the weights the model holds\n"
  "  --lr F               learning rate (default 0.001)\n"
  "  --momentum F         SGD momentum (default 0)\n"
  "  --weight-decay F     weight decay: L2 in the gradient for sgd and adam (default 0), decoupled\n"
  "                       for adamw (default 0.01), as torch.optim\n"
  "  --betas B1,B2        Adam's and AdamW's betas (default 0.9,0.999)\n"
  "  --eps F              Adam's and AdamW's epsilon (default 1e-8)\n"
  "  --bucket-mb F        gradient bucket size for data-parallel training (default 25): the\n"
  "                       backward hands each bucket to the all-reduce as soon as it is final\n"
  "                       (docs/distributed.md)\n"
  "  -h, --help           show this help\n";

static const char usage_bench[] =
  "usage: gcc-graph bench MODEL.so --inputs IN.safetensors [--iters N] [--warmup N] [--weights FILE]\n"
  "\n"
  "Run a compiled model N times (default 50) after a warm-up (default 5) and report the median,\n"
  "90th and 99th percentile (nearest rank), minimum, maximum and mean time (for a training .so, of a\n"
  "step: forward, backward, and the optimizer's update when it was compiled with one,\n"
  "gg_train_step). The last line of standard output is a JSON object with median_ms, p90_ms,\n"
  "p99_ms, min_ms, max_ms, mean_ms, iters and threads\n"
  "(OMP_NUM_THREADS, or the number of CPUs). GCC_GRAPH_PROFILE=1 adds, on stderr, the nodes that\n"
  "took the most time.\n";

static const char usage_explain[] =
  "usage: gcc-graph explain MODEL [--json | --html FILE [--profile TRACE.json]] [--train] [--weights FILE]\n"
  "                         [--target cpu|cuda [--cuda-arch sm_XY] [--no-channels-last]] [--precision P]\n"
  "\n"
  "Print what gcc-graph sees in MODEL: user inputs and outputs with dtypes and (symbolic) sizes,\n"
  "parameters and buffers, symbols and their ranges, ops by kind with counts, the FLOPs of its\n"
  "matrix products, and every node gcc-graph cannot handle with its ATen target and the user's\n"
  "stack trace; when it compiles, the schedule: every kernel of the generated code with the nodes it\n"
  "fuses, its iteration space, the bytes it reads and writes and its FLOPs, the fusions refused and\n"
  "why, and the intermediate memory with and without planning. With --train: the gradients,\n"
  "forward and backward sizes, and the tensors saved for\n"
  "the backward under the min-cut and the default partitions. For a compiled .so: what its\n"
  "embedded metadata says (inputs, outputs, symbols, weights, mutated buffers, training, guards).\n"
  "\n"
  "options:\n"
  "  --weights FILE    parameters and buffers for a bare .json (safetensors)\n"
  "  --train           also show what --train builds (--loss N: the output differentiated)\n"
  "  --json            print the same as JSON (schemas/explain.schema.json; for a .so, its metadata,\n"
  "                    schemas/metadata.schema.json)\n"
  "  --html FILE       write a report page to FILE (one self-contained HTML file): the summary, guards,\n"
  "                    kernels and what each fuses by module, the memory plan as a timeline, the graph\n"
  "                    after each stage with each node's module and source line, training\n"
  "  --profile TRACE   with --html: per-kernel times from a Chrome trace (GCC_GRAPH_PROFILE=TRACE.json)\n"
  "  --target, --cuda-arch, --no-channels-last, --precision\n"
  "                    the schedule compile builds with these (default: the CPU, float32)\n"
  "  -h, --help        show this help\n";

static const char usage_check[] =
  "usage: gcc-graph check MODEL [--inputs IN.safetensors] [--train [--loss N]] [--tol X] [--precision P]\n"
  "                       [--target cpu|cuda [--no-channels-last]] [--weights FILE]\n"
  "\n"
  "Automatic ablation: run MODEL as loaded, then after each stage (functionalized, weights folded\n"
  "(inference), decomposed; with --train the joint graph and the two partitions; compiled), on the\n"
  "same inputs (IN, or random ones),\n"
  "and report the first stage whose results depart from the loaded graph's (relative L2 error above X,\n"
  "default 1e-4, under a floor of 1e-3 per element; integers exactly), with, for an interpreted stage, the first value that departs and\n"
  "its node. Exit status 0 when every stage agrees, 1 when one departs. With --precision bf16|fp16 (as\n"
  "compile takes it) the lowered stage reports its error against the float32 model, the cost of the\n"
  "lower precision, and the later stages are checked against it (the compiled one, whose arithmetic\n"
  "rounds differently in the lower type, at that type's tolerance, 3e-2 or 1e-2, unless --tol is given).\n"
  "With --target cuda the stages are\n"
  "those compile --target cuda runs (channels-last convolutions) and the compiled code runs on the GPU.\n";

static const char usage_minify[] =
  "usage: gcc-graph minify MODEL -o DIR [--inputs IN.safetensors] [--tol X] [--weights FILE]\n"
  "\n"
  "Reduce MODEL to the smallest window of its nodes whose compiled code still fails: does not compile,\n"
  "crashes, or departs from the interpreter (relative L2 error above X, default 1e-4). Writes a\n"
  "standalone DIR/model.json, its inputs (the values flowing into the window, from IN or random\n"
  "inputs) as DIR/inputs.safetensors, and the interpreter's answers as DIR/expected.safetensors.\n"
  "Exit status 1 when it found and wrote a failing repro, 0 when nothing fails.\n";

static const char usage_compare[] =
  "usage: gcc-graph compare OUT.safetensors EXPECTED.safetensors [--tol X]\n"
  "\n"
  "Compare every tensor of EXPECTED (PyTorch's outputs, saved with samples/export.py or\n"
  "safetensors.torch.save_file) with the tensor of the same name in OUT (gcc-graph run's -o), by the\n"
  "rule gcc-graph check uses: the relative L2 error, under a floor of 1e-3 per element, at most X\n"
  "(by default 1e-4 for float32 and float64, 1e-2 for float16, 3e-2 for bfloat16); integers and bools\n"
  "exactly; NaN agrees with NaN. Tensors of different float dtypes compare by value. Prints a line per\n"
  "tensor with its error and largest difference. Exit status 0 when every tensor agrees, 1 when one\n"
  "departs, is missing or has another shape (or a file cannot be read), 2 on wrong usage.\n";

/* Edit distance (insertions, deletions, substitutions) of a and b, for "did you mean" */
static int distance(const char *a, const char *b) {
  size_t n = strlen(b);
  if (strlen(a) > 64 || n > 64) return 99;
  int row[65];
  for (size_t j = 0; j <= n; j++) row[j] = (int)j;
  for (size_t i = 1; *a; a++, i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= n; j++) {
      int up = row[j], best = diag + (*a != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[n];
}

/* The word of `text` (options: "--x-y" tokens of a usage text; else the commands) closest to `word`,
 * if it is close: at most a third of its letters off. */
static const char *closest(const char *word, const char *text) {
  static char best[64];
  static const char *const commands[] = {"compile", "run", "bench", "explain", "ops", "check", "minify", "compare", NULL};
  int bd = 99;
  best[0] = 0;
  if (text) {
    for (const char *p = strstr(text, "--"); p; p = strstr(p + 2, "--")) {
      char tok[64];
      size_t k = 0;
      while (k < sizeof tok - 1 && (p[k] == '-' || (p[k] >= 'a' && p[k] <= 'z') || (p[k] >= '0' && p[k] <= '9'))) { tok[k] = p[k]; k++; }
      tok[k] = 0;
      int d = k > 2 ? distance(word, tok) : 99;
      if (d < bd) { bd = d; memcpy(best, tok, k + 1); }
    }
  } else
    for (int i = 0; commands[i]; i++) {
      int d = distance(word, commands[i]);
      if (d < bd) { bd = d; snprintf(best, sizeof best, "%s", commands[i]); }
    }
  return bd > 0 && bd <= (int)(strlen(word) + 2) / 3 ? best : NULL;
}

/* A usage error: what is wrong (with "did you mean" for an unknown option or command), the usage line,
 * and where the rest is; exit status 2. */
static int usage_error(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "%s: ", prog);
  fprintf(stderr, fmt, arg);
  const char *near = NULL;
  if (strstr(fmt, "unknown option")) near = closest(arg, usage);
  else if (strstr(fmt, "unknown command")) near = closest(arg, NULL);
  if (near) fprintf(stderr, " (did you mean '%s'?)", near);
  const char *eol = strchr(usage, '\n');
  fprintf(stderr, "\n%.*s\n", (int)(eol ? eol - usage : (ptrdiff_t)strlen(usage)), usage);
  const char *cmd = usage + 17;   /* "usage: gcc-graph " */
  size_t cl = strcspn(cmd, " \n");
  if (usage == usage_main || !strncmp(cmd, "<command>", 9)) fprintf(stderr, "Run '%s --help' for the commands, 'man gcc-graph' for everything.\n", prog);
  else fprintf(stderr, "Run '%s %.*s --help' for its options.\n", prog, (int)cl, cmd);
  return 2;
}

/* -fdiagnostics-color=always|never|auto (as in gcc): "error:" in bold red on a terminal */
static int diag_color = -1;   /* -1: auto */
static bool use_color(void) {
  if (diag_color >= 0) return diag_color;
  const char *term = getenv("TERM");
  return isatty(2) && term && strcmp(term, "dumb") && !getenv("NO_COLOR");
}

static int report(Ctx *c) {
  bool col = use_color();
  fprintf(stderr, "%s: %serror:%s %s\n", prog, col ? "\033[1;31m" : "", col ? "\033[0m" : "", c->has_err ? c->err : "unknown failure");
  return 1;
}

typedef struct Opts {
  const char *model, *inputs, *output, *weights, *cc, *cflags, *debug_dir, *deps_file, *target, *cuda_arch, *precision;
  bool interpret, help, sources_only, keep, verbose, time_report, deps, nchw;
  long jobs;
  long iters, warmup;
  double tol;
  bool tol_set;
  TrainOptions tr;
} Opts;

/* a number option's value: 0 and *out on success */
static int parse_double(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || v != v || v < 0 || v > 1e9) return -1;
  *out = v;
  return 0;
}

/* --train and the options that go with it (compile and run). Returns 1 if argv[*i] was one, -1 on a
 * usage error (with its message printed), 0 if it is not a training option. */
static int train_opt(int argc, char **argv, int *i, Opts *o, const char *usage, bool compile) {
  const char *a = argv[*i];
  if (!strcmp(a, "--train")) { o->tr.on = true; return 1; }
  static const char *const with_value[] = {"--loss", "--partition", "--optimizer", "--lr", "--momentum", "--weight-decay", "--betas", "--eps", "--bucket-mb", NULL};
  int k = 0;
  while (with_value[k] && strcmp(with_value[k], a)) k++;
  if (!with_value[k] || (!compile && k > 0)) return 0;
  if (*i + 1 >= argc) { usage_error(usage, "option '%s' needs a value", a); return -1; }
  const char *v = argv[++*i];
  double d = 0, d2 = 0;
  bool bad = false;
  switch (k) {
  case 0: bad = parse_double(v, &d) || d != (int)d || d > 1000; o->tr.loss = (int)d; break;
  case 1: bad = strcmp(v, "mincut") && strcmp(v, "default"); o->tr.save_all = !strcmp(v, "default"); break;
  case 2: bad = strcmp(v, "sgd") && strcmp(v, "adam") && strcmp(v, "adamw"); o->tr.optimizer = !strcmp(v, "sgd") ? 1 : !strcmp(v, "adam") ? 2 : 3; break;
  case 6: {
    char b1[64];
    bad = strlen(v) >= sizeof b1 || !strchr(v, ',');
    if (!bad) {
      memcpy(b1, v, strchr(v, ',') - v);
      b1[strchr(v, ',') - v] = 0;
      bad = parse_double(b1, &d) || parse_double(strchr(v, ',') + 1, &d2) || d >= 1 || d2 >= 1;
      o->tr.beta1 = d;
      o->tr.beta2 = d2;
    }
    break;
  }
  default:
    bad = parse_double(v, &d);
    if (k == 3) o->tr.lr = d; else if (k == 4) o->tr.momentum = d; else if (k == 5) o->tr.weight_decay = d; else if (k == 8) { o->tr.bucket_mb = d; bad = bad || !(d > 0 && d <= 65536); } else o->tr.eps = d;
  }
  if (bad) { usage_error(usage, "bad value '%s'", v); return -1; }
  return 1;
}

/* Parse "--flag VALUE" style options shared by the subcommands. Returns 2 on a usage error. */
static int parse_opts(int argc, char **argv, Opts *o, const char *usage, bool run) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { o->help = true; continue; }
    if (run && !strcmp(a, "--interpret")) { o->interpret = true; continue; }
    if (!strcmp(a, "-S") && usage == usage_compile) { o->sources_only = true; continue; }
    if (!strcmp(a, "--keep") && usage == usage_compile) { o->keep = true; continue; }
    if (!strcmp(a, "-v") && usage == usage_compile) { o->verbose = true; continue; }
    if (!strcmp(a, "--time-report") && usage == usage_compile) { o->time_report = true; continue; }
    if (!strcmp(a, "-MD") && usage == usage_compile) { o->deps = true; continue; }
    if (!strcmp(a, "--no-channels-last") && (usage == usage_compile || usage == usage_check || usage == usage_explain)) { o->nchw = true; continue; }
    if (usage == usage_compile && !strncmp(a, "-j", 2)) {   /* -j N or -jN */
      const char *v = a[2] ? a + 2 : i + 1 < argc ? argv[++i] : NULL;
      char *end;
      long j = v ? strtol(v, &end, 10) : 0;
      if (!v || *end || j < 1 || j > 256) return usage_error(usage, "bad job count in '%s'", a);
      o->jobs = j;
      continue;
    }
    if (run || usage == usage_explain) {
      int t = train_opt(argc, argv, &i, o, usage, usage == usage_compile);
      if (t < 0) return 2;
      if (t) continue;
    }
    const char *num = NULL;
    if (usage == usage_bench && (!strcmp(a, "--iters") || !strcmp(a, "--warmup"))) {
      if (i + 1 >= argc) return usage_error(usage, "option '%s' needs a value", a);
      num = argv[++i];
      char *end;
      long v = strtol(num, &end, 10);
      if (*end || v < 0 || v > 1000000 || (a[2] == 'i' && v < 1)) return usage_error(usage, "bad count '%s'", num);
      if (a[2] == 'i') o->iters = v; else o->warmup = v;
      continue;
    }
    if ((usage == usage_check || usage == usage_minify) && !strcmp(a, "--tol")) {
      if (i + 1 >= argc || parse_double(argv[i + 1], &o->tol) || o->tol <= 0) return usage_error(usage, "%s", "--tol needs a positive number");
      o->tol_set = true;
      i++;
      continue;
    }
    if (run && !strcmp(a, "--inputs")) slot = &o->inputs;
    else if (run && !strcmp(a, "-o")) slot = &o->output;
    else if (usage == usage_compile && !strcmp(a, "--cc")) slot = &o->cc;
    else if (usage == usage_compile && !strcmp(a, "--cflags")) slot = &o->cflags;
    else if (usage == usage_compile && !strcmp(a, "--debug-dir")) slot = &o->debug_dir;
    else if (usage == usage_compile && !strcmp(a, "-MF")) slot = &o->deps_file;
    else if ((usage == usage_compile || usage == usage_check || usage == usage_explain) && !strcmp(a, "--target")) slot = &o->target;
    else if ((usage == usage_compile || usage == usage_explain) && !strcmp(a, "--cuda-arch")) slot = &o->cuda_arch;
    else if ((usage == usage_compile || usage == usage_check || usage == usage_explain) && !strcmp(a, "--precision")) slot = &o->precision;
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

static int explain_so(Ctx *c, const char *path);

/* explain --json of a compiled model: its embedded metadata (schemas/metadata.schema.json) */
static int explain_so_json(Ctx *c, const char *path) {
  Lib l;
  if (load_lib(c, path, &l)) return -1;
  cJSON *m = cJSON_Parse(l.metadata());
  if (!m) return gg_error(c, "%s: its metadata is not JSON", path);
  char *text = cJSON_Print(m);
  puts(text);
  free(text);
  cJSON_Delete(m);
  return 0;
}

/* --cuda-arch: sm_ and two or more digits, a letter after them at most */
static bool bad_cuda_arch(const char *a) {
  size_t d = strspn(a + (strncmp(a, "sm_", 3) ? 0 : 3), "0123456789");
  return strncmp(a, "sm_", 3) || d < 2 || strlen(a + 3 + d) > 1;
}

static int cmd_explain(int argc, char **argv) {
  Opts o = {0};
  bool json = false;
  const char *html = NULL, *profile = NULL;
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if ((!strcmp(argv[i], "--html") || !strcmp(argv[i], "--profile")) && i + 1 < argc) {
      if (argv[i + 1][0] == '-' && argv[i + 1][1]) return usage_error(usage_explain, strcmp(argv[i], "--html") ? "--profile needs a file name, not '%s'" : "--html needs a file name, not '%s'", argv[i + 1]);
      *(argv[i][2] == 'h' ? &html : &profile) = argv[i + 1];
      i++;
    }
    else argv[n++] = argv[i];
  }
  if (parse_opts(n, argv, &o, usage_explain, false)) return 2;
  if (o.help) { fputs(usage_explain, stdout); return 0; }
  if (!o.model) return usage_error(usage_explain, "%s", "missing MODEL");
  if (profile && !html) return usage_error(usage_explain, "%s", "--profile goes with --html (the page shows the trace's times)");
  if (html && json) return usage_error(usage_explain, "%s", "--html and --json: one at a time");
  /* the schedule shown: the one compile builds for this target and precision */
  CompileOptions how = {.model = o.model, .cuda_arch = o.cuda_arch, .nchw = o.nchw};
  if (o.target && strcmp(o.target, "cpu") && strcmp(o.target, "cuda")) return usage_error(usage_explain, "unknown target '%s' (cpu or cuda)", o.target);
  how.cuda = o.target && !strcmp(o.target, "cuda");
  if (o.cuda_arch && (!how.cuda || bad_cuda_arch(o.cuda_arch)))
    return usage_error(usage_explain, "%s", "--cuda-arch takes sm_XY (sm_90, sm_90a, sm_80, ...) and goes with --target cuda");
  if (o.precision && ((how.precision = precision_parse(o.precision)) < 0 || (PREC_CUDA_ONLY(how.precision) && !how.cuda)))
    return usage_error(usage_explain, "bad precision '%s' (fp32, bf16 or fp16; tf32 and tf32x3 with --target cuda)", o.precision);
  if (html) json = true;   /* the page is drawn from the JSON; nothing on stdout */
  Ctx *c = ctx_new();
  c->file = o.model;
  c->cuda = how.cuda;
  c->precision = how.precision;
  c->cuda_sm = how.cuda ? build_cuda_sm(c, &how) : 0;
  size_t ml = strlen(o.model);
  if (ml > 3 && !strcmp(o.model + ml - 3, ".so")) {
    if (html) { ctx_free(c); return usage_error(usage_explain, "%s", "--html takes the exported model (.pt2 or .json), not a compiled .so"); }
    int rc = (json ? explain_so_json(c, o.model) : explain_so(c, o.model)) ? report(c) : 0;
    ctx_free(c);
    return rc;
  }
  Graph *g = graph_load(c, o.model, o.weights);
  if (!g) { int rc = report(c); ctx_free(c); return rc; }
  int rc = verify_graph(g);
  if (!json) explain_graph(g, stdout);
  if (rc) {
    if (!json) fprintf(stdout, "\nverification failed: %s\n", c->err);
    rc = report(c);
  }
  /* the schedule of the compiled code, when the model compiles: a quiet second pass on a copy */
  bool scheduled = false;
  cJSON *page = NULL;   /* --html: the graphs of the stages */
  if (!rc && !g->nunsupported) {
    Ctx *sc = c;
    Graph *gs = graph_load(sc, o.model, o.weights);
    if (html) page = cJSON_CreateObject();
    Pipeline pl = {.fold = true, .precision = how.precision, .cuda = how.cuda, .nchw = how.nchw};
    scheduled = gs && !verify_graph(gs) && !(html ? report_stage_graphs(gs, &pl, page) : inference_graph(gs, &pl, NULL, NULL)) && !compile_schedule(sc, gs);
    if (!scheduled) { c->has_err = false; c->err[0] = 0; c->nkernels = 0; }
    else if (!json) explain_schedule(c, stdout);
    graph_release(gs);
  }
  Graph *g0 = g, *bwd = NULL, *g2 = NULL, *b2 = NULL;
  PartitionStats ps, pd;
  bool trained = false;
  if (!rc && o.tr.on) {   /* the backward and both partitions */
    g = graph_load(c, o.model, o.weights);
    g2 = graph_load(c, o.model, o.weights);
    if (!g || !g2 || verify_graph(g) || verify_graph(g2) || training_graph(g, &o.tr) || partition(g, false, &bwd, &ps) || training_graph(g2, &o.tr) || partition(g2, true, &b2, &pd)) rc = report(c);
    else trained = true;
    if (trained && !json) explain_training(g, bwd, &ps, stdout);
  }
  if (html && !rc) {   /* the page: explain --json's object, with the stages' graphs, the guards and the memory plan */
    cJSON *r = explain_obj(g0, trained ? g : NULL, trained ? bwd : NULL, trained ? &ps : NULL, scheduled);
    cJSON *st = page ? cJSON_DetachItemFromObject(page, "stages") : NULL;
    if (st) cJSON_AddItemToObject(r, "stages", st);
    if (trained && (report_add_graph(r, g, "--train: the forward (min-cut partition)") || report_add_graph(r, bwd, "--train: the backward"))) rc = report(c);
    cJSON *meta = cJSON_Parse(model_metadata(g0, NULL, &o.tr, NULL, false, 0));
    cJSON *guards = meta ? cJSON_DetachItemFromObject(meta, "guards") : NULL;
    if (guards) cJSON_AddItemToObject(r, "guards", guards);
    cJSON_Delete(meta);
    if (!rc && report_write(g0, r, profile, html)) rc = report(c);
    else if (!rc) fprintf(stderr, "gcc-graph: wrote %s (open it in a browser)\n", html);
    cJSON_Delete(r);
  } else if (json && !rc) {
    char *text = explain_json(g0, trained ? g : NULL, trained ? bwd : NULL, trained ? &ps : NULL, scheduled);
    puts(text);
    free(text);
  }
  cJSON_Delete(page);
  if (g != g0) graph_release(g);
  graph_release(g2);
  graph_release(g0);
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
    if (!s && !strncmp(users[i]->name, "tangent.", 8)) {   /* run --train: the loss's cotangent, 1 */
      int64_t sz[GG_MAX_RANK];
      for (int d = 0; d < users[i]->rank; d++) if (!expr_is_const(users[i]->sizes[d], &sz[d])) sz[d] = 1;
      if (!(ts[i] = tensor_new(I, users[i]->dtype, users[i]->rank, sz))) return -1;
      for (int64_t k = 0; k < tensor_numel(ts[i]); k++) dtype_store_f64(ts[i]->dtype, ts[i]->st->data + k * dtype_info(ts[i]->dtype)->size, 1.0);
      continue;
    }
    if (!s) return gg_error(c, "%s: no tensor for input %d (%s): name it %s or %s", path, i, gg_quote(c, users[i]->name), key, gg_quote(c, users[i]->name));
    ts[i] = tensor_from_st(I, s);
  }
  if (st_check_input_names(c, st, nu)) return -1;
  *out = ts;
  *n = nu;
  return 0;
}

static int write_results(Ctx *c, Interp *I, const char *path, const RunResult *r) {
  int n = r->nouts + r->nbuffers + r->ngrads;
  STensor *st = arena_array(c->arena, (size_t)n + 1, sizeof *st);
  for (int i = 0; i < n; i++) {
    Tensor *t;
    if (i < r->nouts) { t = r->outs[i]; st[i].name = arena_printf(c->arena, "out.%d", i); }
    else if (i < r->nouts + r->nbuffers) { t = r->buffers[i - r->nouts]; st[i].name = arena_printf(c->arena, "buffer_after.%s", r->buffer_names[i - r->nouts]); }
    else { t = r->grads[i - r->nouts - r->nbuffers]; st[i].name = arena_printf(c->arena, "grad.%s", r->grad_names[i - r->nouts - r->nbuffers]); }
    st[i].dtype = t->dtype;
    st[i].rank = t->rank;
    memcpy(st[i].sizes, t->sizes, sizeof st[i].sizes);
    st[i].data = tensor_contiguous_bytes(I, t, &st[i].nbytes);
  }
  return st_write(c, path, st, n);
}

static int cmd_compile(int argc, char **argv) {
  Opts o = {.tr = {.lr = 1e-3, .weight_decay = -1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .bucket_mb = 25}};   /* PyTorch's defaults (weight decay: below) */
  if (parse_opts(argc, argv, &o, usage_compile, true)) return 2;
  if (o.help) { fputs(usage_compile, stdout); return 0; }
  if (!o.model) return usage_error(usage_compile, "%s", "missing MODEL");
  if (!o.output) return usage_error(usage_compile, "%s", "missing -o FILE");
  if (o.inputs) return usage_error(usage_compile, "%s", "compile takes no --inputs");
  if (o.tr.weight_decay < 0) o.tr.weight_decay = o.tr.optimizer == 3 ? 1e-2 : 0;   /* torch.optim.AdamW's default is 0.01, the others' 0 */
  CompileOptions co = {o.model, o.output, NULL, false, o.cc, o.cflags, o.sources_only, o.keep, o.verbose, o.time_report, o.debug_dir, o.tr, NULL, 0,
                       false, o.cuda_arch, getenv("NVCC"), PREC_FP32, o.nchw};
  if (o.target && strcmp(o.target, "cpu") && strcmp(o.target, "cuda")) return usage_error(usage_compile, "unknown target '%s' (cpu or cuda)", o.target);
  co.cuda = o.target && !strcmp(o.target, "cuda");
  if (o.cuda_arch && (!co.cuda || bad_cuda_arch(o.cuda_arch)))
    return usage_error(usage_compile, "%s", "--cuda-arch takes sm_XY (sm_90, sm_90a, sm_80, ...) and goes with --target cuda");
  if (o.precision && (co.precision = precision_parse(o.precision)) < 0) return usage_error(usage_compile, "unknown precision '%s' (fp32, tf32, tf32x3, bf16 or fp16)", o.precision);
  /* -MD: OUT.d beside the output (OUT's extension replaced, as gcc does); -MF names the file */
  if (o.deps_file) co.deps_file = o.deps_file;
  else if (o.deps) {
    size_t len = strlen(o.output);
    const char *dot = strrchr(o.output, '.'), *slash = strrchr(o.output, '/');
    if (dot && (!slash || dot > slash)) len = (size_t)(dot - o.output);
    static char dbuf[4096];
    snprintf(dbuf, sizeof dbuf, "%.*s.d", (int)len, o.output);
    co.deps_file = dbuf;
  }
  /* -j: the build's translation units (the model's and the runtime's; CUDA: the kernels' parts too)
   * compiled at once, as many as there are processors */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  co.jobs = o.jobs ? (int)o.jobs : ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
  if (!o.tr.on && (o.tr.optimizer || o.tr.loss || o.tr.save_all)) return usage_error(usage_compile, "%s", "--loss, --partition and --optimizer go with --train");
  if (o.weights && !strcmp(o.weights, "external")) co.external_weights = true;
  else if (o.weights && strcmp(o.weights, "embedded")) co.weights_file = o.weights;
  Ctx *c = ctx_new();
  int rc = compile_model(c, &co) ? report(c) : 0;
  ctx_free(c);
  return rc;
}

/* ---------------------------------------------------------------- compiled models */

/* explain a compiled model from the metadata it carries */
static int explain_so(Ctx *c, const char *path) {
  Lib l;
  if (load_lib(c, path, &l)) return -1;
  cJSON *m = cJSON_Parse(l.metadata());
  if (!m) return gg_error(c, "%s: its metadata is not JSON", path);
#define S(o, k) (cJSON_IsString(cJSON_GetObjectItem(o, k)) ? cJSON_GetObjectItem(o, k)->valuestring : "?")
  printf("compiled model: %s\nfrom %s (torch %s, IR %s) by %s, ABI %d, device %s\n", gg_quote(c, path), gg_quote(c, S(m, "source")),
         gg_quote(c, S(m, "torch_version")), S(m, "ir"), S(m, "compiler"), cJSON_GetObjectItem(m, "abi_version") ? cJSON_GetObjectItem(m, "abi_version")->valueint : 0,
         S(m, "device"));
  if (strcmp(S(m, "precision"), "fp32") && strcmp(S(m, "precision"), "?")) printf("compiled with --precision %s\n", S(m, "precision"));
  const char *sections[] = {"inputs", "outputs"};
  for (int s = 0; s < 2; s++) {
    printf("\n%s:\n", sections[s]);
    int i = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(m, sections[s])) {
      printf("  %s.%d  %-24s %s[", s ? "out" : "in", i++, gg_quote(c, S(t, "name")), S(t, "dtype"));
      int d = 0;
      cJSON *x;
      cJSON_ArrayForEach(x, cJSON_GetObjectItem(t, "shape")) {
        if (cJSON_IsNumber(x)) printf("%s%lld", d++ ? ", " : "", (long long)x->valuedouble);
        else printf("%s%s", d++ ? ", " : "", cJSON_IsString(x) ? x->valuestring : "?");
      }
      puts("]");
    }
  }
  cJSON *sy, *syms = cJSON_GetObjectItem(m, "symbols");
  if (cJSON_GetArraySize(syms)) puts("\nsymbols:");
  cJSON_ArrayForEach(sy, syms) {
    cJSON *mx = cJSON_GetObjectItem(sy, "max");
    printf("  %s in [%lld, ", S(sy, "name"), (long long)cJSON_GetObjectItem(sy, "min")->valuedouble);
    if (cJSON_IsNumber(mx)) printf("%lld]\n", (long long)mx->valuedouble); else puts("inf]");
  }
  cJSON *w = cJSON_GetObjectItem(m, "weights");
  printf("\nweights: %d tensors, %.1f KiB, %s%s%s\n", cJSON_GetArraySize(cJSON_GetObjectItem(w, "tensors")),
         cJSON_GetObjectItem(w, "bytes") ? cJSON_GetObjectItem(w, "bytes")->valuedouble / 1024 : 0.0, S(w, "storage"),
         cJSON_GetObjectItem(w, "file") ? " in " : "", cJSON_GetObjectItem(w, "file") ? gg_quote(c, S(w, "file")) : "");
  cJSON *b, *mut = cJSON_GetObjectItem(m, "mutated_buffers");
  if (cJSON_GetArraySize(mut)) puts("mutated buffers (written back after each run):");
  cJSON_ArrayForEach(b, mut) printf("  %s\n", gg_quote(c, cJSON_IsString(b) ? b->valuestring : "?"));
  cJSON *tr = cJSON_GetObjectItem(m, "training");
  if (tr) {
    cJSON *gr, *op = cJSON_GetObjectItem(tr, "optimizer");
#define N(o, k) (cJSON_IsNumber(cJSON_GetObjectItem(o, k)) ? cJSON_GetObjectItem(o, k)->valuedouble : 0.0)
    printf("\ntraining model (compile --train): loss = output %d, %d gradients\n", (int)N(tr, "loss_output"), cJSON_GetArraySize(cJSON_GetObjectItem(tr, "gradients")));
    cJSON_ArrayForEach(gr, cJSON_GetObjectItem(tr, "gradients")) printf("  grad.%s\n", gg_quote(c, cJSON_IsString(gr) ? gr->valuestring : "?"));
    printf("partition %s: saves %d tensors (%.1f KiB) for the backward; saving everything would be %d tensors (%.1f KiB); %d nodes recomputed\n",
           S(tr, "partition"), (int)N(tr, "saved_tensors"), N(tr, "saved_bytes") / 1024, (int)N(tr, "saved_tensors_default"), N(tr, "saved_bytes_default") / 1024,
           (int)N(tr, "recomputed_nodes"));
    printf("optimizer: %s", S(op, "kind"));
    if (strcmp(S(op, "kind"), "none")) {
      printf(", lr %g, weight decay %g", N(op, "lr"), N(op, "weight_decay"));
      if (!strcmp(S(op, "kind"), "sgd")) printf(", momentum %g", N(op, "momentum"));
      else printf(", betas (%g, %g), eps %g", N(op, "beta1"), N(op, "beta2"), N(op, "eps"));
    }
    putchar('\n');
#undef N
  }
  puts("\nguards (checked before every run):");
  cJSON *g;
  cJSON_ArrayForEach(g, cJSON_GetObjectItem(m, "guards")) {
    printf("  %s: dtype %s, rank %d, sizes [", gg_quote(c, S(g, "input")), S(g, "dtype"), cJSON_GetObjectItem(g, "rank") ? cJSON_GetObjectItem(g, "rank")->valueint : 0);
    int d = 0;
    cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(g, "sizes")) {
      if (cJSON_IsNumber(x)) printf("%s%lld", d++ ? ", " : "", (long long)x->valuedouble);
      else printf("%s%s", d++ ? ", " : "", cJSON_IsString(x) ? x->valuestring : "?");
    }
    printf("], strides %s, device %s\n", S(g, "strides"), S(g, "device"));
  }
#undef S
  cJSON_Delete(m);
  return 0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static int cmd_bench(int argc, char **argv) {
  Opts o = {.iters = 50, .warmup = 5};
  gg_train_state *state = NULL;
  if (parse_opts(argc, argv, &o, usage_bench, true)) return 2;
  if (o.help) { fputs(usage_bench, stdout); return 0; }
  if (!o.model) return usage_error(usage_bench, "%s", "missing MODEL.so");
  if (!o.inputs) return usage_error(usage_bench, "%s", "missing --inputs FILE");
  Ctx *c = ctx_new();
  Lib l;
  Graph dummy = {.ctx = c};
  SafeTensors in;
  DLTensor *ts;
  int ni, rc = 1;
  gg_model *m = NULL;
  char err[1024] = "";
  if (load_lib(c, o.model, &l) || st_read(c, &dummy, o.inputs, &in)) goto out;
  if (l.open(&m, o.weights, err, sizeof err)) { gg_error(c, "%s", err); goto out; }
  if (so_inputs(c, &l, &in, o.inputs, &ts, &ni)) goto out;
  int no = l.num_outputs();
  bool train = so_is_training(&l);
  DLTensor *ot = NULL;   /* outputs allocated once: a CUDA model replays its graph for the same addresses */
  if (so_alloc_outputs(c, &l, m, ts, ni, &ot) || (train && l.state_new(m, &state, err, sizeof err))) { if (!c->has_err) gg_error(c, "%s", err); goto out; }
  double *t = arena_array(c->arena, (size_t)o.iters + 1, sizeof *t);
  for (long i = 0; i < o.warmup + o.iters; i++) {
    double t0 = now_ms();
    if (train && l.has_optimizer) {   /* a whole training step: forward, backward, update */
      if (l.train_step(m, state, ts, ni, ot, no, err, sizeof err)) { gg_error(c, "%s", err); goto out; }
    } else if (train) {   /* a training step without an optimizer: forward, backward */
      if (l.forward(m, state, ts, ni, ot, no, err, sizeof err) || l.backward(m, state, NULL, err, sizeof err)) { gg_error(c, "%s", err); goto out; }
    } else if (l.run(m, ts, ni, ot, no, err, sizeof err)) { gg_error(c, "%s", err); goto out; }
    double dt = now_ms() - t0;
    if (i >= o.warmup) t[i - o.warmup] = dt;
  }
  double sum = 0;
  for (long i = 0; i < o.iters; i++) sum += t[i];
  qsort(t, (size_t)o.iters, sizeof *t, cmp_double);
  double med = o.iters % 2 ? t[o.iters / 2] : (t[o.iters / 2 - 1] + t[o.iters / 2]) / 2;
  /* tail latencies, nearest rank: the smallest time that at least p of the runs took no longer than */
  double p90 = t[(long)ceil(0.90 * (double)o.iters) - 1], p99 = t[(long)ceil(0.99 * (double)o.iters) - 1], max = t[o.iters - 1];
  const char *env = getenv("OMP_NUM_THREADS");
  long threads = env && atol(env) > 0 ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
  printf("%s: %ld %s after %ld warm-up, %ld threads: median %.3f ms, p90 %.3f ms, p99 %.3f ms, min %.3f ms, max %.3f ms, mean %.3f ms\n", o.model,
         o.iters, train && l.has_optimizer ? "training steps (forward, backward, update)" : train ? "training steps (forward + backward)" : "iterations", o.warmup,
         threads, med, p90, p99, t[0], max, sum / (double)o.iters);
  printf("{\"median_ms\": %.4f, \"p90_ms\": %.4f, \"p99_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f, \"mean_ms\": %.4f, \"iters\": %ld, \"threads\": %ld}\n",
         med, p90, p99, t[0], max, sum / (double)o.iters, o.iters, threads);
  rc = 0;
out:
  if (state) l.state_free(state);
  so_release(&l);
  if (m) l.close(m);
  graph_release(&dummy);
  if (rc) report(c);
  ctx_free(c);
  return rc;
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
    if (o.interpret) return usage_error(usage_run, "%s", "--interpret needs the .pt2 or .json, not a compiled .so");
    Ctx *c = ctx_new();
    int rc = so_run(c, o.model, o.weights, o.inputs, o.output) ? report(c) : 0;
    ctx_free(c);
    return rc;
  }
  Ctx *c = ctx_new();
  Graph *g = load_verified(c, &o);
  int rc = 1;
  if (g && o.tr.on && training_graph(g, &o.tr)) { graph_release(g); g = NULL; }
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

static int cmd_check(int argc, char **argv, bool minify) {
  const char *usage = minify ? usage_minify : usage_check;
  Opts o = {.tol = 1e-4};
  if (parse_opts(argc, argv, &o, usage, true)) return 2;
  if (o.help) { fputs(usage, stdout); return 0; }
  if (!o.model) return usage_error(usage, "%s", "missing MODEL");
  if (minify && !o.output) return usage_error(usage, "%s", "missing -o DIR");
  if (minify && o.tr.on) return usage_error(usage, "%s", "minify works on inference graphs (leave out --train)");
  if (!minify && o.output) return usage_error(usage, "%s", "check writes no files (leave out -o)");
  CheckOptions co = {o.model, o.weights, o.inputs, o.tol, o.tr, PREC_FP32, false, o.nchw, o.tol_set};
  if (o.target && strcmp(o.target, "cpu") && strcmp(o.target, "cuda")) return usage_error(usage, "unknown target '%s' (cpu or cuda)", o.target);
  co.cuda = o.target && !strcmp(o.target, "cuda");
  if (o.precision && ((co.precision = precision_parse(o.precision)) < 0 || (PREC_CUDA_ONLY(co.precision) && !co.cuda)))
    return usage_error(usage, "bad precision '%s' (check takes fp32, bf16 or fp16; tf32 and tf32x3 with --target cuda)", o.precision);
  Ctx *c = ctx_new();
  c->file = o.model;
  int r = minify ? minify_model(c, &co, o.output, stdout) : check_model(c, &co, stdout);
  if (r < 0) report(c);
  ctx_free(c);
  return r < 0 ? 1 : r;
}

static int cmd_compare(int argc, char **argv) {
  const char *files[2] = {NULL, NULL};
  int nf = 0;
  double tol = -1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_compare, stdout); return 0; }
    if (!strcmp(a, "--tol")) {
      if (i + 1 >= argc || parse_double(argv[i + 1], &tol)) return usage_error(usage_compare, "%s", "--tol needs a number >= 0");
      i++;
    } else if (a[0] == '-' && a[1]) {
      return usage_error(usage_compare, "unknown option '%s'", a);
    } else if (nf < 2) {
      files[nf++] = a;
    } else {
      return usage_error(usage_compare, "unexpected argument '%s' (compare takes two files)", a);
    }
  }
  if (nf < 2) return usage_error(usage_compare, "%s", nf ? "missing EXPECTED.safetensors" : "missing OUT.safetensors and EXPECTED.safetensors");
  Ctx *c = ctx_new();
  int r = compare_outputs(c, files[0], files[1], tol, stdout);
  if (r < 0) report(c);
  ctx_free(c);
  return r < 0 ? 1 : r;
}

static int list_ops(FILE *f) {
  fprintf(f, "# Supported ops\n\nGenerated by `gcc-graph ops` from the op table (`lib/ops.def`): %d ATen overloads.\n"
             "Each row is PyTorch's own schema, which gives argument names, order and defaults. Every op runs\n"
             "under the interpreter (`gcc-graph run --interpret`). *Compiled as* says what `gcc-graph compile` does\n"
             "with it: a **kernel** of the core set (C/OpenMP, or BLAS), a **view** (strides only, no copy), or\n"
             "**rewritten** into core-set ops first (`docs/decompositions.md`). *Gradient* says how `--train`\n"
             "differentiates it (`docs/training.md`): by its own **rule** (checked against finite differences), as the\n"
             "ops it is **rewritten** into, or **none** (no gradient flows through it: integer results, or no rule yet).\n\n"
             "| op | what it computes | compiled as | gradient | schema |\n|---|---|---|---|---|\n", ops_count());
  for (int i = 0; i < ops_count(); i++) {
    const OpDef *op = ops_at(i);
    fprintf(f, "| `aten.%s` | %s | %s | %s | `%s` |\n", op->name, op->doc, op_compiled_as(op), op_gradient(op), op->schema);
  }
  fputs("\n## Refused on purpose\n\nOps of PyTorch's Core ATen opset that a model is refused for, with the message's reason:\n\n| op | why |\n|---|---|\n", f);
  for (int i = 0; i < ops_refused_count(); i++) {
    const char *why, *name = ops_refused_at(i, &why);
    fprintf(f, "| `aten.%s` | %s |\n", name, why);
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
    else if (argc > 2 && !strcmp(argv[2], "compile")) fputs(usage_compile, stdout);
    else if (argc > 2 && !strcmp(argv[2], "bench")) fputs(usage_bench, stdout);
    else if (argc > 2 && !strcmp(argv[2], "explain")) fputs(usage_explain, stdout);
    else if (argc > 2 && !strcmp(argv[2], "check")) fputs(usage_check, stdout);
    else if (argc > 2 && !strcmp(argv[2], "minify")) fputs(usage_minify, stdout);
    else if (argc > 2 && !strcmp(argv[2], "compare")) fputs(usage_compare, stdout);
    else fputs(usage_main, stdout);
    return 0;
  }
  /* options every command takes: colored diagnostics */
  int n = 2;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-fdiagnostics-color") || !strcmp(a, "-fdiagnostics-color=always")) diag_color = 1;
    else if (!strcmp(a, "-fno-diagnostics-color") || !strcmp(a, "-fdiagnostics-color=never")) diag_color = 0;
    else if (!strcmp(a, "-fdiagnostics-color=auto")) diag_color = -1;
    else if (!strncmp(a, "-fdiagnostics-color=", 20)) return usage_error(usage_main, "bad value in '%s' (always, never or auto)", a);
    else argv[n++] = argv[i];
  }
  argc = n;
  Ctx *probe = ctx_new();
  const char *logs = getenv("GCC_GRAPH_LOGS");
  if (logs && gg_logs_parse(probe, logs)) { report(probe); ctx_free(probe); return 2; }
  int ok = ops_init(probe);
  if (ok) { report(probe); ctx_free(probe); return 1; }
  ctx_free(probe);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
  if (!strcmp(cmd, "explain")) return cmd_explain(argc - 2, argv + 2);
  if (!strcmp(cmd, "check")) return cmd_check(argc - 2, argv + 2, false);
  if (!strcmp(cmd, "minify")) return cmd_check(argc - 2, argv + 2, true);
  if (!strcmp(cmd, "compare")) return cmd_compare(argc - 2, argv + 2);
  if (!strcmp(cmd, "ops")) {
    if (argc > 2 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
      puts("usage: gcc-graph ops\n\nPrint the op table as markdown (docs/ops.md): every supported ATen overload, what it computes,\n"
           "how it compiles and how it is differentiated, and its PyTorch schema.");
      return 0;
    }
    if (argc > 2) return usage_error(usage_main, "unexpected argument '%s'", argv[2]);
    return list_ops(stdout);
  }
  return usage_error(usage_main, "unknown command '%s'", cmd);
}
