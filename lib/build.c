/* build.c: from generated source to the .so, and what surrounds it: the build folder and the
 * weights blob, the C compiler (cc) or the CUDA compiler (nvcc) run without a shell in that folder
 * with relative names only (so the same model and flags give the same bytes wherever they are built),
 * the model cache (GCC_GRAPH_CACHE_DIR) and the compiled-runtime cache, and make's dependency files.
 * Requires: options from the driver and the pipeline's graph. Guarantees: a .so at o->output, or an
 * error naming what failed (the compiler's output when it rejects the code). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* fallocate (FALLOC_FL_COLLAPSE_RANGE), also where the build's CFLAGS are replaced */
#endif
#include "gg.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { const char *name, *text; } EmbeddedFile;
extern const EmbeddedFile gg_embedded_files[];

/* ---------------------------------------------------------------- files and tools */

int write_file(Ctx *c, const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return gg_error(c, "%s: cannot write: %s", path, strerror(errno));
  if (n && fwrite(data, 1, n, f) != n) { fclose(f); return gg_error(c, "%s: write failed", path); }
  if (fclose(f)) return gg_error(c, "%s: write failed", path);
  return 0;
}

static int write_sources(Ctx *c, const char *dir) {
  for (const EmbeddedFile *e = gg_embedded_files; e->name; e++)
    if (write_file(c, arena_printf(c->arena, "%s/%s", dir, e->name), e->text, strlen(e->text))) return -1;
  return 0;
}

/* Start argv (no shell: model names never reach a command line) in dir, its output into dir/log. */
static pid_t start_tool(Ctx *c, const char *dir, char **argv, const char *log, bool verbose) {
  if (verbose) {
    fputs("gcc-graph:", stderr);
    for (char **a = argv; *a; a++) fprintf(stderr, " %s", *a);
    fputc('\n', stderr);
  }
  fflush(NULL);   /* the child must not write out what the parent has buffered */
  pid_t pid = fork();
  if (pid < 0) { gg_error(c, "cannot start %s: %s", argv[0], strerror(errno)); return -1; }
  if (pid == 0) {
    if (chdir(dir)) _exit(127);
    FILE *lf = freopen(log, "w", stdout);
    if (!lf || dup2(fileno(stdout), 2) < 0) _exit(127);
    execvp(argv[0], argv);
    _exit(127);
  }
  return pid;
}

/* A finished tool's exit status st; -1 with its output on failure. */
static int tool_status(Ctx *c, const char *dir, int st, const char *tool, const char *log) {
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  char buf[3000] = "";
  FILE *f = fopen(arena_printf(c->arena, "%s/%s", dir, log), "r");
  if (f) { size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = 0; fclose(f); }
  bool nv = strstr(tool, "nvcc") != NULL;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && !buf[0])
    return gg_error(c, nv ? "cannot run the CUDA compiler '%s' (install the CUDA toolkit, or name it with NVCC=...)" : "cannot run the C compiler '%s' (give another with --cc)", tool);
  return gg_error(c, "the %s compiler failed on the generated code (internal error; please report it):\n%s", nv ? "CUDA" : "C", buf);
}

/* Wait for a started tool; -1 with its output on failure. */
static int wait_tool(Ctx *c, const char *dir, pid_t pid, const char *tool, const char *log) {
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return tool_status(c, dir, st, tool, log);
}

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }

/* --time-report: a line per translation unit of the build (what it writes, the tool, its seconds) */
static void unit_time(const CompileOptions *o, char **argv, double sec, bool cached) {
  if (!o->time_report) return;
  const char *out = "?", *tool = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  for (char **a = argv; *a; a++) if (!strcmp(*a, "-o") && a[1]) out = a[1];
  if (cached) fprintf(stderr, "gcc-graph:   %-18s from the cache\n", out);
  else fprintf(stderr, "gcc-graph:   %-18s %-5s %8.3f s\n", out, tool, sec);
}

/* Split flags on spaces (no shell quoting: --cflags "-O3 -march=native"). */
static int split_flags(Ctx *c, const char *s, char **out, int max) {
  int n = 0;
  char *copy = arena_strdup(c->arena, s ? s : "");
  for (char *t = strtok(copy, " \t"); t && n < max; t = strtok(NULL, " \t")) out[n++] = t;
  return n;
}

static bool write_zeros(FILE *f, uint64_t n) {
  static const char zeros[4096];
  while (n) {
    size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
    if (fwrite(zeros, 1, k, f) != k) return false;
    n -= k;
  }
  return true;
}

/* from copied to `to` through a temporary file renamed at the end; with b (b->appended), g's weights
 * after it as gg_rt.h's GG_BLOB_MAGIC describes, written from where they were loaded (no weights.bin,
 * no pass through the assembler and the linker: those were most of a large model's build). */
static int copy_with_weights(Ctx *c, const char *so, const char *to, const Graph *g, const BuildFiles *b) {
  FILE *in = fopen(so, "rb");
  if (!in) return gg_error(c, "%s: cannot read: %s", so, strerror(errno));
  char *tmp = arena_printf(c->arena, "%s.tmp%ld", to, (long)getpid());
  FILE *out = fopen(tmp, "wb");
  if (!out) { fclose(in); return gg_error(c, "%s: cannot write: %s", to, strerror(errno)); }
  char buf[1 << 16];
  size_t n;
  uint64_t at = 0;
  bool ok = true;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) {
    ok = fwrite(buf, 1, n, out) == n;
    at += n;
  }
  ok = ok && !ferror(in);
  fclose(in);
  if (b && b->appended && b->blob > 0) {   /* the weights, after the file padded to a page */
    const uint64_t page = 65536;   /* gg_rt.h's GG_BLOB_PAGE (the runtime is a world of its own: no header shared) */
    uint64_t start = (at + page - 1) / page * page, pos = 0;
    ok = ok && write_zeros(out, start - at);
    for (int i = 0, k = 0; ok && i < g->ninputs; i++) {
      const Value *v = g->inputs[i];
      if (v->input == IN_USER) continue;
      uint64_t off = (uint64_t)b->offsets[k++];
      if (off < pos) continue;   /* stored once already (build_prepare: the same bytes) */
      ok = ok && write_zeros(out, off - pos) && fwrite(v->weight->data, 1, v->weight->nbytes, out) == v->weight->nbytes;
      pos = off + v->weight->nbytes;
    }
    ok = ok && write_zeros(out, (uint64_t)b->blob - pos);
    struct { char magic[8]; uint64_t offset, size; } tr = {"GGBLOB01", start, (uint64_t)b->blob};   /* GG_BLOB_MAGIC */
    ok = ok && fwrite(&tr, 1, sizeof tr, out) == sizeof tr;
  }
  ok = ok && !ferror(out);
  if (fclose(out) || !ok || chmod(tmp, 0755) || rename(tmp, to)) {
    int en = errno;
    remove(tmp);
    return gg_error(c, "%s: cannot write: %s", to, strerror(en));
  }
  return 0;
}

int copy_file(Ctx *c, const char *from, const char *to) { return copy_with_weights(c, from, to, NULL, NULL); }

/* ---------------------------------------------------------------- large weights written while cc runs */

/* Writing a large model's weights took as long as compiling its code (GPT-2 small: 498 MB, 1.2-2.2 s
 * on the 2-core machine, against cc's 1.7 s), so build_output_begin starts a thread that writes them
 * into the output's temporary file at BLOB_RESERVE while the compiler runs; build_output then writes
 * the .so in front and closes the gap between the two with FALLOC_FL_COLLAPSE_RANGE (a metadata
 * change: the blob's bytes do not move). Where the filesystem cannot collapse a range or the .so is
 * larger than the reserve, the file is written again the plain way (copy_with_weights). Either way
 * the output's bytes are the same (make test compares them). */
#define BLOB_RESERVE (UINT64_C(32) << 20)
#define BLOB_OVERLAP_MIN (INT64_C(64) << 20)   /* smaller blobs are written after cc, as before */

struct BlobWriter {
  const Graph *g;
  const BuildFiles *b;
  const char *tmp;
  int fd, err;
  pthread_t th;
};

static bool pwrite_all(int fd, const void *p, uint64_t n, uint64_t at) {
  const char *s = p;
  while (n) {
    ssize_t k = pwrite(fd, s, n > (UINT64_C(1) << 30) ? (size_t)1 << 30 : (size_t)n, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    s += k;
    n -= (uint64_t)k;
    at += (uint64_t)k;
  }
  return true;
}

static void *blob_thread(void *arg) {
  struct BlobWriter *w = arg;
  uint64_t end = 0;
  for (int i = 0, k = 0; i < w->g->ninputs; i++) {
    const Value *v = w->g->inputs[i];
    if (v->input == IN_USER) continue;
    uint64_t off = (uint64_t)w->b->offsets[k++];
    if (off < end) continue;   /* stored once already (build_prepare: the same bytes) */
    if (!pwrite_all(w->fd, v->weight->data, (uint64_t)v->weight->nbytes, BLOB_RESERVE + off)) { w->err = errno ? errno : EIO; break; }
    end = off + (uint64_t)v->weight->nbytes;
  }
  return NULL;
}

int build_output_begin(Ctx *c, const CompileOptions *o, const Graph *g, BuildFiles *b) {
  b->writer = NULL;
  int64_t least = getenv("GCC_GRAPH_TEST_BLOB_OVERLAP") ? 1 : BLOB_OVERLAP_MIN;   /* the tests take this path with small models */
  if (!b->appended || b->blob < least) return 0;
  struct BlobWriter *w = arena_alloc(c->arena, sizeof *w);
  *w = (struct BlobWriter){.g = g, .b = b, .tmp = arena_printf(c->arena, "%s.tmp%ld", o->output, (long)getpid())};
  w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (w->fd < 0) return gg_error(c, "%s: cannot write: %s", o->output, strerror(errno));
  if (ftruncate(w->fd, (off_t)(BLOB_RESERVE + (uint64_t)b->blob)) || pthread_create(&w->th, NULL, blob_thread, w)) {
    int en = errno;
    close(w->fd);
    remove(w->tmp);
    return gg_error(c, "%s: cannot write: %s", o->output, strerror(en));
  }
  b->writer = w;
  return 0;
}

/* Wait for the weights' thread; false if it failed. */
static bool writer_join(struct BlobWriter *w) {
  pthread_join(w->th, NULL);
  return w->err == 0;
}

void build_output_abort(BuildFiles *b) {
  struct BlobWriter *w = b->writer;
  if (!w) return;
  writer_join(w);
  close(w->fd);
  remove(w->tmp);
  b->writer = NULL;
}

/* The .so in front of the weights the thread wrote; 1: not possible here (the plain way instead). */
static int finish_overlapped(Ctx *c, const char *so, const char *to, struct BlobWriter *w) {
  FILE *in = writer_join(w) ? fopen(so, "rb") : NULL;
  if (!in) {
    int en = w->err ? w->err : errno;
    close(w->fd);
    remove(w->tmp);
    return w->err ? gg_error(c, "%s: cannot write: %s", to, strerror(en)) : gg_error(c, "%s: cannot read: %s", so, strerror(en));
  }
  const uint64_t page = 65536;   /* gg_rt.h's GG_BLOB_PAGE */
  char buf[1 << 16];
  size_t n;
  uint64_t at = 0;
  bool ok = true;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) {
    ok = at + n <= BLOB_RESERVE && pwrite_all(w->fd, buf, n, at);
    at += n;
  }
  ok = ok && !ferror(in);
  fclose(in);
  uint64_t start = (at + page - 1) / page * page, blob = (uint64_t)w->b->blob;
  if (!ok || (start < BLOB_RESERVE && fallocate(w->fd, FALLOC_FL_COLLAPSE_RANGE, (off_t)start, (off_t)(BLOB_RESERVE - start)))) return 1;
  struct { char magic[8]; uint64_t offset, size; } tr = {"GGBLOB01", start, blob};   /* GG_BLOB_MAGIC */
  if (!pwrite_all(w->fd, &tr, sizeof tr, start + blob) || fchmod(w->fd, 0755) || close(w->fd) || rename(w->tmp, to)) {
    int en = errno;
    remove(w->tmp);
    return gg_error(c, "%s: cannot write: %s", to, strerror(en));
  }
  return 0;
}

/* compile commands of one build (the model's parts and the runtime) */
#define BUILD_MAX_UNITS 16

static void remove_dir(const char *dir) {
  static const char *names[] = {"model.c", "model.cu", "kernels.c", "model.fatbin", "weights.bin", "gg_rt.c", "gg_rt_gemm.c", "gg_rt_gemm_t.h", "gg_rt_conv.c", "gg_rt_conv_t.h", "gg_rt_attn.c", "gg_rt_common.c", "gg_rt_cuda.cu", "gg_rt_cuda_attn.cu", "gg_rt_cuda_dw.cu",
                                "gg_rt.h", "scalar.h", "gcc_graph.h", "model.so", "model.o", "gg_rt.o", "gg_rt_attn.o", "gg_rt_dw.o", "cc.log", NULL};
  char p[4096];
  for (const char **n = names; *n; n++) { snprintf(p, sizeof p, "%s/%s", dir, *n); remove(p); }
  for (int i = 0; i < BUILD_MAX_UNITS; i++) {   /* run_build's logs, the kernels' parts */
    static const char *const fmt[] = {"%s/cc_%d.log", "%s/model_%d.cu", "%s/model_%d.fatbin"};
    for (int k = 0; k < 3; k++) { snprintf(p, sizeof p, fmt[k], dir, i); remove(p); }
  }
  rmdir(dir);
}

/* ---------------------------------------------------------------- the caches and dependency files */

/* -fno-trapping-math lets GCC vectorize loops with float selects (scalar.h's float32 functions) */
#define DEFAULT_CFLAGS "-O3 -fno-math-errno -fno-trapping-math"

/* The C compiler's identity for the cache keys: the file it resolves to through PATH, its size and
 * its modification time, so that an upgraded compiler misses the cache. */
static const char *compiler_id(Ctx *c, const char *cc) {
  char *path = NULL, real[PATH_MAX];
  struct stat st;
  if (strchr(cc, '/')) path = (char *)cc;
  else
    for (const char *d = getenv("PATH"), *e; d && *d && !path; d = *e ? e + 1 : e) {
      e = strchr(d, ':');
      if (!e) e = d + strlen(d);
      char *cand = arena_printf(c->arena, "%.*s/%s", (int)(e - d), d, cc);
      if (e > d && access(cand, X_OK) == 0) path = cand;
    }
  if (!path || !realpath(path, real) || stat(real, &st)) return cc;
  return arena_printf(c->arena, "%s %lld %lld", real, (long long)st.st_size, (long long)st.st_mtime);
}

/* GCC_GRAPH_NO_CACHE=1: nothing compiled is kept or reused */
static bool caches_off(void) {
  const char *off = getenv("GCC_GRAPH_NO_CACHE");
  return off && *off && strcmp(off, "0");
}

/* Where compiled runtimes are kept (compile_model_uncached): GCC_GRAPH_CACHE_DIR, else
 * $XDG_CACHE_HOME/gcc-graph or ~/.cache/gcc-graph; none with GCC_GRAPH_NO_CACHE=1. */
static const char *runtime_cache_dir(Ctx *c) {
  const char *d = getenv("GCC_GRAPH_CACHE_DIR");
  if (caches_off()) return NULL;
  if (d && *d) return d;
  const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  if (x && *x == '/') return arena_printf(c->arena, "%s/gcc-graph", x);
  if (h && *h == '/') return arena_printf(c->arena, "%s/.cache/gcc-graph", h);
  return NULL;
}

/* mkdir -p for the cache's folder; false when it is not there afterwards */
static bool make_dirs(Ctx *c, const char *dir) {
  char *p = arena_printf(c->arena, "%s", dir);
  for (char *q = p + 1; *q; q++)
    if (*q == '/') {
      *q = 0;
      mkdir(p, 0777);
      *q = '/';
    }
  if (mkdir(p, 0777) && errno != EEXIST) {
    gg_log(c, LOG_CACHE, "cannot create %s: %s", dir, strerror(errno));
    return false;
  }
  return true;
}

/* Objects kept in the cache (runtime_cache_dir) under the SHA-256 of what they are made from:
 * `what` (the kind, which names the file), the compilers (`tools`: compiler_id), the command, the
 * runtime's sources (which every unit includes) and `source`, a file of dir, when given. The runtime
 * (gg_rt.o, what "runtime") depends on no model: it is compiled once per compiler, flags and runtime
 * source. A CUDA model's kernel parts ("kernels", model_<i>.fatbin) are the same for any model with
 * the same kernels: recompiling a model whose code did not change (new weights, another output)
 * takes no nvcc. True when dir/`output` was taken from the cache; *store is where to keep it after a
 * build (NULL: no cache). */
static bool unit_cached(Ctx *c, const char *what, const char *tools, char **argv, const char *dir, const char *source, const char *output, char **store) {
  const char *cache = runtime_cache_dir(c);
  *store = NULL;
  if (!cache) return false;
  Sha256 h;
  char hex[65];
  sha256_init(&h);
  const char *id = arena_printf(c->arena, "gcc-graph %s %s|%s|", GG_VERSION, what, tools);
  sha256_update(&h, id, strlen(id) + 1);
  for (char **a = argv + 1; *a; a++) sha256_update(&h, *a, strlen(*a) + 1);
  for (const EmbeddedFile *e = gg_embedded_files; e->name; e++) {
    sha256_update(&h, e->name, strlen(e->name) + 1);
    sha256_update(&h, e->text, strlen(e->text) + 1);
  }
  if (source) {
    FILE *f = fopen(arena_printf(c->arena, "%s/%s", dir, source), "rb");
    if (!f) return false;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(&h, buf, n);
    fclose(f);
  }
  sha256_hex(&h, hex);
  const char *ext = strrchr(output, '.');
  *store = arena_printf(c->arena, "%s/%s-%s%s", cache, what, hex, ext ? ext : "");
  Ctx *quiet = ctx_new();
  bool hit = access(*store, R_OK) == 0 && !copy_file(quiet, *store, arena_printf(c->arena, "%s/%s", dir, output));
  ctx_free(quiet);
  gg_log(c, LOG_CACHE, "%s %s %s", what, hit ? "hit" : "miss", *store);
  return hit;
}

/* best effort: a cache that cannot be written is no error */
static void unit_store(Ctx *c, const char *dir, const char *output, const char *store) {
  const char *slash = store ? strrchr(store, '/') : NULL;
  if (!slash || !make_dirs(c, arena_printf(c->arena, "%.*s", (int)(slash - store), store))) return;
  Ctx *quiet = ctx_new();
  if (copy_file(quiet, arena_printf(c->arena, "%s/%s", dir, output), store)) gg_log(c, LOG_CACHE, "cannot store %s: %s", store, quiet->err);
  ctx_free(quiet);
}

/* The cache key: everything the output depends on. The compiler and every option that changes the
 * generated code, then the model's bytes and the weights file's. */
static int cache_key(Ctx *c, const CompileOptions *o, char hex[65]) {
  Sha256 h;
  sha256_init(&h);
  char opts[2048];
  snprintf(opts, sizeof opts, "gcc-graph %s|cc %s|cflags %s|external %d|train %d loss %d all %d opt %d %.17g %.17g %.17g %.17g %.17g %.17g bucket %.17g|cuda %d %s %s|precision %d|nchw %d",
           GG_VERSION, compiler_id(c, o->cc ? o->cc : "cc"), o->cflags ? o->cflags : DEFAULT_CFLAGS, o->external_weights, o->tr.on, o->tr.loss,
           o->tr.save_all, o->tr.optimizer, o->tr.lr, o->tr.momentum, o->tr.weight_decay, o->tr.beta1, o->tr.beta2, o->tr.eps, o->tr.bucket_mb, o->cuda,
           o->cuda_arch ? o->cuda_arch : "-", o->nvcc ? o->nvcc : "-", o->precision, o->nchw);
  sha256_update(&h, opts, strlen(opts) + 1);
  const char *bug = getenv("GCC_GRAPH_TEST_MISCOMPILE");   /* a test-only switch that changes the code */
  if (bug) sha256_update(&h, bug, strlen(bug) + 1);
  const char *files[2] = {o->model, o->weights_file};
  for (int i = 0; i < 2; i++) {
    if (!files[i]) continue;
    FILE *f = fopen(files[i], "rb");
    if (!f) return gg_error(c, "%s: cannot open: %s", files[i], strerror(errno));
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(&h, buf, n);
    fclose(f);
    sha256_update(&h, "|", 1);
  }
  sha256_hex(&h, hex);
  return 0;
}

/* A make rule: OUT: MODEL [WEIGHTS], and an empty rule per dependency (as gcc -MP), so that a deleted
 * model does not stop make. Spaces in names are escaped as make wants. */
int write_deps(Ctx *c, const CompileOptions *o) {
  if (!o->deps_file) return 0;
  char *tmp = arena_printf(c->arena, "%s.tmp%ld", o->deps_file, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return gg_error(c, "%s: cannot write: %s", o->deps_file, strerror(errno));
  const char *names[3] = {o->output, o->model, o->weights_file};
  for (int i = 0; i < 3; i++) {
    if (!names[i]) continue;
    if (i == 1) fputs(":", f);
    if (i) fputc(' ', f);
    for (const char *p = names[i]; *p; p++) { if (*p == ' ' || *p == '#') fputc('\\', f); if (*p == '$') fputc('$', f); fputc(*p, f); }
  }
  fputs("\n", f);
  for (int i = 1; i < 3; i++) {
    if (!names[i]) continue;
    fputc('\n', f);
    for (const char *p = names[i]; *p; p++) { if (*p == ' ' || *p == '#') fputc('\\', f); if (*p == '$') fputc('$', f); fputc(*p, f); }
    fputs(":\n", f);
  }
  if (fclose(f) || rename(tmp, o->deps_file)) { remove(tmp); return gg_error(c, "%s: cannot write: %s", o->deps_file, strerror(errno)); }
  return 0;
}

/* The build's commands: cmds[0..n-1] compile to objects, at most o->jobs at once (each into its own
 * log, cc_<i>.log); then `link`; skip[i] marks one already done (a cached runtime). -1 on failure. */
static int run_build(Ctx *c, const CompileOptions *o, const char *dir, char ***cmds, const bool *skip, int n, char **link) {
  pid_t pid[BUILD_MAX_UNITS];
  double t0[BUILD_MAX_UNITS];
  const char *logs[BUILD_MAX_UNITS];
  int running = 0, err = 0, jobs = o->jobs < 1 ? 1 : o->jobs;
  n = n < BUILD_MAX_UNITS ? n : BUILD_MAX_UNITS;
  for (int i = 0; i < n; i++) {
    pid[i] = -1;
    logs[i] = arena_printf(c->arena, "cc_%d.log", i);
  }
  for (int i = 0; i <= n && !err; i++) {
    while (running && (running >= jobs || i == n) && !err) {   /* the next of ours to finish (polled: other children are not ours to reap) */
      bool any = false;
      for (int k = 0; k < n && !err; k++) {
        int st;
        pid_t got = pid[k] >= 0 ? waitpid(pid[k], &st, WNOHANG) : 0;
        if (got == 0 || (got < 0 && errno == EINTR)) continue;
        if (got < 0) { err = gg_error(c, "waiting for the compiler: %s", strerror(errno)); break; }
        pid[k] = -1;
        running--;
        any = true;
        unit_time(o, cmds[k], now_s() - t0[k], false);
        err |= tool_status(c, dir, st, cmds[k][0], logs[k]);
      }
      if (!any && !err) nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    if (i == n || err) break;
    if (skip && skip[i]) { unit_time(o, cmds[i], 0, true); continue; }
    t0[i] = now_s();
    if ((pid[i] = start_tool(c, dir, cmds[i], logs[i], o->verbose)) < 0) { err = -1; break; }
    running++;
  }
  for (int k = 0; k < n; k++)   /* after a failure: the others' ends */
    if (pid[k] >= 0) wait_tool(c, dir, pid[k], cmds[k][0], logs[k]);
  if (err) return -1;
  double tl = now_s();
  pid_t p = start_tool(c, dir, link, "cc.log", o->verbose);
  if (p < 0 || wait_tool(c, dir, p, link[0], "cc.log")) return -1;
  unit_time(o, link, now_s() - tl, false);
  return 0;
}

/* ---------------------------------------------------------------- the CUDA build */

/* The GPU's architecture when one is installed (nvidia-smi), else sm_90 (Hopper). */
static const char *default_cuda_arch(Ctx *c) {
  FILE *p = popen("nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null", "r");
  int major = 0, minor = 0;
  if (p) {
    if (fscanf(p, "%d.%d", &major, &minor) != 2) major = 0;
    pclose(p);
  }
  return major > 0 ? arena_printf(c->arena, "sm_%d%d", major, minor) : "sm_90";
}

/* --cuda-arch, else the installed GPU's (asked once per compile), and as a number: 90 for sm_90,
 * sm_90a or compute_90 */
static const char *cuda_arch(Ctx *c, const CompileOptions *o) {
  if (o->cuda_arch) return o->cuda_arch;
  if (!c->cuda_arch) c->cuda_arch = default_cuda_arch(c);
  return c->cuda_arch;
}

int build_cuda_sm(Ctx *c, const CompileOptions *o) {
  const char *a = cuda_arch(c, o);
  while (*a && (*a < '0' || *a > '9')) a++;
  return atoi(a);
}

/* A CUDA model builds in parts at once (-j): nvcc compiles the kernels (model.cu) to a fatbinary,
 * device code only; the C compiler the host code (model.c: launches, library calls, descriptors; no
 * CUDA header, so it builds in a fraction of nvcc's time for the same code); nvcc the CUDA runtime,
 * in three units (RT_UNITS: the attention and depthwise kernels apart), whose objects are taken
 * from the cache when they are there, as for C. nvcc then links them, kernels.c putting the
 * fatbinary in, with cuBLAS; the .so finds the toolkit's libraries through its rpath. Directories in
 * CPATH are searched for headers as gcc does (nvcc itself does not read CPATH). */
static const char *const RT_UNITS[][2] = {{"gg_rt_cuda.cu", "gg_rt.o"}, {"gg_rt_cuda_attn.cu", "gg_rt_attn.o"}, {"gg_rt_cuda_dw.cu", "gg_rt_dw.o"}};
#define NRT ((int)(sizeof RT_UNITS / sizeof *RT_UNITS))
static int build_cuda(Ctx *c, const CompileOptions *o, const char *dir) {
  const char *nvcc = o->nvcc ? o->nvcc : "nvcc", *cc = o->cc ? o->cc : "cc";
  const char *arch = cuda_arch(c, o);
  char *common[64], *inc[24];
  int nc = 0, ni = 0;
  common[nc++] = (char *)nvcc;
  common[nc++] = arena_printf(c->arena, "-arch=%s", arch);
  char *flags[24];
  int nf = split_flags(c, o->cflags ? o->cflags : "-O3", flags, 20);
  for (int i = 0; i < nf; i++) common[nc++] = flags[i][0] == '-' && flags[i][1] == 'O' ? flags[i] : arena_printf(c->arena, "-Xcompiler=%s", flags[i]);
  common[nc++] = "-Xcompiler=-fPIC,-fvisibility=hidden";
  common[nc++] = "-diag-suppress=177,550";   /* unused helpers and symbol values in generated code */
  inc[ni++] = "-I/usr/include/x86_64-linux-gnu";
  const char *cpath = getenv("CPATH");
  char *cp = arena_strdup(c->arena, cpath ? cpath : "");
  for (char *t = strtok(cp, ":"); t && ni < 20; t = strtok(NULL, ":")) if (*t) inc[ni++] = arena_printf(c->arena, "-I%s", t);
  for (int i = 0; i < ni; i++) common[nc++] = inc[i];
  /* the toolkit's libraries, next to nvcc */
  char *lib = NULL;
  char *nvpath = NULL;
  if (strchr(nvcc, '/')) nvpath = realpath(nvcc, NULL);
  else {
    const char *path = getenv("PATH");
    char *pc = arena_strdup(c->arena, path ? path : "");
    for (char *t = strtok(pc, ":"); t && !nvpath; t = strtok(NULL, ":")) {
      char *cand = arena_printf(c->arena, "%s/%s", t, nvcc);
      if (access(cand, X_OK) == 0) nvpath = realpath(cand, NULL);
    }
  }
  if (nvpath) {
    char *slash = strrchr(nvpath, '/');
    if (slash) *slash = 0;
    lib = arena_printf(c->arena, "%s/../lib64", nvpath);
    free(nvpath);
  }
  /* the kernels' parts (build_sources), each a command */
  int nparts = 1;
  while (nparts < BUILD_MAX_UNITS - 1 - NRT && access(arena_printf(c->arena, "%s/model_%d.cu", dir, nparts), R_OK) == 0) nparts++;
  /* argv[0]: the host code; argv[1]: the link; argv[2 ... 1 + NRT]: the runtime's units; then the
   * kernels' parts */
  enum { HOST, LINK, RT };
  const int KP = RT + NRT;   /* the first kernel part's */
  char *argv[BUILD_MAX_UNITS + 1][80];
  for (int k = 0; k < KP + nparts; k++) {
    char **a = argv[k];
    int n = 0;
    if (k == HOST) {   /* the host code: -O1 unless --cflags says otherwise (launches and calls: -O3 buys nothing) */
      char *hf[24];
      int nh = split_flags(c, o->cflags ? o->cflags : "-O1", hf, 20);
      a[n++] = (char *)cc;
      for (int i = 0; i < nh; i++) a[n++] = hf[i];
      static const char *const host[] = {"-std=gnu11", "-fPIC", "-fvisibility=hidden", "-c", "model.c", "-o", "model.o"};
      for (size_t i = 0; i < sizeof host / sizeof *host; i++) a[n++] = (char *)host[i];
      for (int i = 0; i < ni; i++) a[n++] = inc[i];
      a[n] = NULL;
      continue;
    }
    for (int i = 0; i < nc; i++) a[n++] = common[i];
    if (k >= KP) {
      const char *part = k == KP ? "model" : arena_printf(c->arena, "model_%d", k - KP);
      a[n++] = "-fatbin";
      a[n++] = arena_printf(c->arena, "%s.cu", part);
      a[n++] = "-o";
      a[n++] = arena_printf(c->arena, "%s.fatbin", part);
    } else if (k >= RT) { a[n++] = "-c"; a[n++] = (char *)RT_UNITS[k - RT][0]; a[n++] = "-o"; a[n++] = (char *)RT_UNITS[k - RT][1]; }
    else {
      a[n++] = "-shared";
      a[n++] = "-Xlinker=--build-id=none,-z,nodelete";
      if (lib) a[n++] = arena_printf(c->arena, "-Xlinker=-rpath,%s", lib);
      a[n++] = "-o";
      a[n++] = "model.so";
      a[n++] = "model.o";
      for (int u = 0; u < NRT; u++) a[n++] = (char *)RT_UNITS[u][1];
      a[n++] = "kernels.c";
      a[n++] = "-lcublas";
      a[n++] = "-lcublasLt";
    }
    a[n] = NULL;
  }
  /* the runtime's units first (when not cached: the longest), then the kernels' parts, then the host
   * code; nvcc drives the host compiler (gcc unless the flags say otherwise): both name the cached
   * runtime */
  const char *tools = arena_printf(c->arena, "%s|%s", compiler_id(c, nvcc), compiler_id(c, "gcc"));
  char *store[BUILD_MAX_UNITS], **cmds[BUILD_MAX_UNITS];
  const char *outs[BUILD_MAX_UNITS];
  bool skip[BUILD_MAX_UNITS] = {false};
  for (int u = 0; u < NRT; u++) {
    cmds[u] = argv[RT + u];
    outs[u] = RT_UNITS[u][1];
    skip[u] = unit_cached(c, "runtime", tools, argv[RT + u], dir, NULL, outs[u], &store[u]);
  }
  for (int i = 0; i < nparts; i++) {
    cmds[NRT + i] = argv[KP + i];
    outs[NRT + i] = argv[KP + i][nc + 3];   /* -fatbin PART.cu -o PART.fatbin */
    skip[NRT + i] = unit_cached(c, "kernels", tools, argv[KP + i], dir, argv[KP + i][nc + 1], outs[NRT + i], &store[NRT + i]);
  }
  cmds[NRT + nparts] = argv[HOST];
  store[NRT + nparts] = NULL;
  if (run_build(c, o, dir, cmds, skip, NRT + 1 + nparts, argv[LINK])) return -1;
  for (int i = 0; i < NRT + nparts; i++) if (!skip[i]) unit_store(c, dir, outs[i], store[i]);
  return 0;
}

/* ---------------------------------------------------------------- the build folder */

/* The weights laid out (one 64-byte aligned blob appended to the .so, or offsets into the file they
 * stay in) and the folder the .so is built in (-S: the output folder, with weights.bin, which the
 * code then includes: a hand build of those sources needs no other step). */
int build_prepare(Ctx *c, const CompileOptions *o, Graph *g, BuildFiles *out) {
  /* weights: one 64-byte aligned blob, or offsets into the file they stay in */
  int nw = 0;
  for (int i = 0; i < g->ninputs; i++) nw += g->inputs[i]->input != IN_USER;
  int64_t *offsets = arena_array(c->arena, (size_t)nw + 1, sizeof *offsets), blob = 0, file_size = 0, bytes = 0;
  bool external = o->external_weights;
  char *dir = NULL;
  if (external && o->weights_file) { gg_error(c, "--weights external keeps weights in the .pt2; it does not apply to a .json with --weights FILE"); return -1; }
  for (int i = 0, k = 0; i < g->ninputs; i++) {
    Value *v = g->inputs[i];
    if (v->input == IN_USER) continue;
    if (!v->weight) { gg_error(c, "%s %s has no data: give --weights FILE.safetensors", v->input == IN_PARAM ? "parameter" : "buffer", gg_quote(c, v->fqn)); return -1; }
    /* weights over the same bytes of the file (tied parameters, views of one storage) are stored
     * once: the runtimes share a storage between weights at the same offset with the same size */
    int same = -1;
    for (int j = 0, q = 0; j < i && same < 0; j++) {
      const Value *u = g->inputs[j];
      if (u->input == IN_USER) continue;
      if (u->weight->data == v->weight->data && u->weight->nbytes == v->weight->nbytes) same = q;
      q++;
    }
    if (same >= 0) { offsets[k++] = offsets[same]; continue; }
    bytes += (int64_t)v->weight->nbytes;
    if (external) {
      /* the archive is mapped once for reading its directory: find the mapping that holds the bytes */
      const Mapping *hold = NULL;
      for (const Mapping *m = g->mappings; m; m = m->next)
        if (v->weight->data >= (const uint8_t *)m->base && v->weight->data < (const uint8_t *)m->base + m->len) hold = m;
      if (!hold) { gg_error(c, "%s: weights of %s are not in the model file", g->path, gg_quote(c, v->fqn)); return -1; }
      offsets[k++] = (int64_t)(v->weight->data - (const uint8_t *)hold->base);
      file_size = (int64_t)hold->len;
    }
    else { offsets[k++] = blob; blob += ((int64_t)v->weight->nbytes + 63) & ~INT64_C(63); }
  }
  /* the build folder */
  char tmpl[] = "/tmp/gcc-graph-XXXXXX";
  const char *tmpdir = getenv("TMPDIR");
  char *pattern = tmpdir && *tmpdir ? arena_printf(c->arena, "%s/gcc-graph-XXXXXX", tmpdir) : arena_strdup(c->arena, tmpl);
  if (o->sources_only) {
    if (mkdir(o->output, 0777) && errno != EEXIST) { gg_error(c, "%s: cannot create: %s", o->output, strerror(errno)); return -1; }
    dir = arena_strdup(c->arena, o->output);
  } else if (!(dir = mkdtemp(pattern))) { gg_error(c, "cannot create a build folder: %s", strerror(errno)); return -1; }
  if (!external && o->sources_only) {
    uint8_t *b = calloc(1, (size_t)blob + 1);
    if (!b) { gg_error(c, "out of memory for %lld bytes of weights", (long long)blob); return -1; }
    for (int i = 0, k = 0; i < g->ninputs; i++) {
      Value *v = g->inputs[i];
      if (v->input == IN_USER) continue;
      memcpy(b + offsets[k++], v->weight->data, v->weight->nbytes);
    }
    int rc = write_file(c, arena_printf(c->arena, "%s/weights.bin", dir), b, (size_t)blob);
    free(b);
    if (rc) return -1;
  }
  *out = (BuildFiles){dir, offsets, blob, file_size, bytes, external, !external && !o->sources_only, NULL};
  return 0;
}

/* The generated source and the runtime's sources into the folder. */
int build_sources(Ctx *c, const CompileOptions *o, const char *dir, const char *src, size_t len, const char *dsrc, size_t dlen) {
  if (write_file(c, arena_printf(c->arena, "%s/model.c", dir), src, len) || write_sources(c, dir)) return -1;
  if (!o->cuda) return 0;
  /* the kernels' parts: model.cu, model_1.cu, ...; kernels.c puts each part's fatbinary (nvcc -fatbin)
   * into the .so as gg_kernels<i> (model.c) */
  char *kbuf = NULL;
  size_t klen = 0;
  FILE *kc = open_memstream(&kbuf, &klen);
  fputs("/* The kernels of model.cu (model_<i>.cu), compiled by nvcc -fatbin into model.fatbin (model_<i>.fatbin), as gg_kernels<i> (model.c). */\n", kc);
  int part = 0;
  const char *at = dsrc ? dsrc : "", *end = at + (dsrc ? dlen : 0);
  for (;; part++) {
    const char *mark = strstr(at, GG_PART_MARK "\n"), *stop = mark ? mark : end;
    const char *name = part ? arena_printf(c->arena, "model_%d", part) : "model";
    if (write_file(c, arena_printf(c->arena, "%s/%s.cu", dir, name), at, (size_t)(stop - at))) { fclose(kc); free(kbuf); return -1; }
    fprintf(kc, "__asm__(\".section .rodata\\n.balign 64\\n.globl gg_kernels%d\\n.hidden gg_kernels%d\\n.type gg_kernels%d, @object\\n"
                "gg_kernels%d:\\n.incbin \\\"%s.fatbin\\\"\\n.byte 0\\n.previous\\n\");\n", part, part, part, part, name);
    if (!mark) break;
    at = mark + strlen(GG_PART_MARK "\n");
  }
  fclose(kc);
  int rc = write_file(c, arena_printf(c->arena, "%s/kernels.c", dir), kbuf, klen);
  free(kbuf);
  return rc ? -1 : 0;
}

/* The folder removed, unless --keep (-S writes into the output folder, which stays). */
void build_finish(const CompileOptions *o, const char *dir) {
  if (dir && !o->sources_only && !o->keep) remove_dir(dir);
  else if (dir && o->keep && !o->sources_only) fprintf(stderr, "gcc-graph: sources kept in %s\n", dir);
}

/* A model built before from the same inputs and options (GCC_GRAPH_CACHE_DIR): 1 when copied to the
 * output; 0 on a miss, with *store the path to keep this build at (or NULL); -1 on error. */
int build_cache_lookup(Ctx *c, const CompileOptions *o, const char **store) {
  const char *cache = caches_off() ? NULL : getenv("GCC_GRAPH_CACHE_DIR");
  char key[65] = "";
  *store = NULL;
  if (!cache || !*cache || o->sources_only || o->keep || o->debug_dir) return 0;
  if (cache_key(c, o, key)) return -1;
  char *cached = arena_printf(c->arena, "%s/%s.so", cache, key);
  if (access(cached, R_OK) == 0) {
    gg_log(c, LOG_CACHE, "hit %s for %s", key, o->model);
    if (o->verbose) fprintf(stderr, "gcc-graph: cache hit %s\n", cached);
    return copy_file(c, cached, o->output) ? -1 : 1;
  }
  gg_log(c, LOG_CACHE, "miss %s for %s", key, o->model);
  *store = cached;
  return 0;
}

/* best effort: a cache that cannot be written is no error */
void build_cache_store(Ctx *c, const CompileOptions *o, const char *store) {
  if (!store || !make_dirs(c, getenv("GCC_GRAPH_CACHE_DIR"))) return;
  Ctx *quiet = ctx_new();
  if (copy_file(quiet, o->output, store)) gg_log(c, LOG_CACHE, "cannot store %s: %s", store, quiet->err);
  ctx_free(quiet);
}

/* ---------------------------------------------------------------- the C build */

static int build_c(Ctx *c, const CompileOptions *o, const char *dir) {
  /* cc: relative names only, so the output does not depend on the folder. The model and the runtime
   * compile to objects (at once with -j 2 or more), then link; without a cache and with -j 1, one cc
   * does all. The runtime's object depends only on the compiler, the flags and the runtime's
   * source: it is taken from the cache when it is there (runtime_cache_dir, under the SHA-256 of
   * those), and stored there after a build, so that it is compiled once, not for every model (2.5 s
   * of a model's 3 on two cores). */
  char *cflags[48];
  int nf = split_flags(c, o->cflags ? o->cflags : DEFAULT_CFLAGS, cflags, 40);
  const char *compile_flags[] = {"-std=gnu11", "-fPIC", "-fopenmp", "-fvisibility=hidden", "-I/usr/include/x86_64-linux-gnu", NULL};
  /* -z nodelete: dlclose must not unload the model (and libgomp) under OpenMP's idle worker threads */
  const char *link_flags[] = {"-shared", "-Wl,--build-id=none", "-Wl,-z,nodelete", "-o", "model.so", NULL};
  char *libs[8];
  int nl = 0;
  /* OpenBLAS built on OpenMP shares the kernels' thread pool: link it by path when it is installed */
  static const char omp_blas[] = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
  if (access(arena_printf(c->arena, "%s/libopenblas.so.0", omp_blas), R_OK) == 0) {
    libs[nl++] = arena_printf(c->arena, "-L%s", omp_blas);
    libs[nl++] = arena_printf(c->arena, "-Wl,-rpath,%s", omp_blas);
  }
  libs[nl++] = "-lopenblas";
  libs[nl++] = "-lm";
  libs[nl++] = "-ldl";   /* dladdr (in libc itself since glibc 2.34) */
  const char *cc = o->cc ? o->cc : "cc", *rt_dir = runtime_cache_dir(c);
  char *argv[3][96];
  bool split = o->jobs >= 2 || rt_dir;
  /* argv[0]: the model (or everything); argv[1]: the runtime; argv[2]: the link */
  for (int k = 0; k < (split ? 3 : 1); k++) {
    char **a = argv[k];
    int n = 0;
    a[n++] = (char *)cc;
    for (int i = 0; i < nf; i++) a[n++] = cflags[i];
    if (k < 2) for (const char **f = compile_flags; *f; f++) a[n++] = (char *)*f;
    if (split && k < 2) { a[n++] = "-c"; a[n++] = k ? "gg_rt.c" : "model.c"; a[n++] = "-o"; a[n++] = k ? "gg_rt.o" : "model.o"; }
    else {
      for (const char **f = link_flags; *f; f++) a[n++] = (char *)*f;
      if (split) { a[n++] = "-fopenmp"; a[n++] = "model.o"; a[n++] = "gg_rt.o"; }
      else { a[n++] = "model.c"; a[n++] = "gg_rt.c"; }
      for (int i = 0; i < nl; i++) a[n++] = libs[i];
    }
    a[n] = NULL;
  }
  if (!split) return run_build(c, o, dir, NULL, NULL, 0, argv[0]);
  /* the model's object is cached too, by the SHA-256 of model.c: a model whose code did not change
   * (new weights of the same shapes, another output) links without compiling it again */
  const char *id = compiler_id(c, cc);
  char *store[2], **cmds[2] = {argv[0], argv[1]};
  bool skip[2] = {unit_cached(c, "model", id, argv[0], dir, "model.c", "model.o", &store[0]), unit_cached(c, "runtime", id, argv[1], dir, NULL, "gg_rt.o", &store[1])};
  if (run_build(c, o, dir, cmds, skip, 2, argv[2])) return -1;
  for (int i = 0; i < 2; i++) if (!skip[i]) unit_store(c, dir, i ? "gg_rt.o" : "model.o", store[i]);
  return 0;
}

/* cc or nvcc builds dir/model.so from the sources */
int build_so(Ctx *c, const CompileOptions *o, const BuildFiles *b) { return o->cuda ? build_cuda(c, o, b->dir) : build_c(c, o, b->dir); }

/* dir/model.so written to the output with its weights */
int build_output(Ctx *c, const CompileOptions *o, const Graph *g, BuildFiles *b) {
  const char *so = arena_printf(c->arena, "%s/model.so", b->dir);
  struct BlobWriter *w = b->writer;
  b->writer = NULL;
  if (w) {
    int r = finish_overlapped(c, so, o->output, w);
    if (o->verbose && r >= 0) fputs(r ? "gcc-graph: weights written again after the compiler (a .so above the reserve, or a filesystem that cannot collapse a range)\n"
                                      : "gcc-graph: weights written while the compiler ran\n", stderr);
    if (r <= 0) return r;
    close(w->fd);   /* the plain way */
    remove(w->tmp);
  }
  return copy_with_weights(c, so, o->output, g, b);
}
