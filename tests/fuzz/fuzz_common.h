/* fuzz_common.h: what the libFuzzer harnesses share. The library reads files (it maps them), so
 * each input is written to a file of this process's own in /dev/shm (or TMPDIR) first. */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H
#include "../../lib/gg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_file[256];
static void fuzz_cleanup(void) { if (fuzz_file[0]) remove(fuzz_file); }

static inline const char *fuzz_path(const char *ext) {
  if (!fuzz_file[0]) {   /* removed when the fuzzer exits (every run left one in /dev/shm) */
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(fuzz_file, sizeof fuzz_file, "%s/gg-fuzz-%d%s", dir, (int)getpid(), ext);
    atexit(fuzz_cleanup);
  }
  return fuzz_file;
}

static inline const char *fuzz_write(const uint8_t *data, size_t size, const char *ext) {
  const char *p = fuzz_path(ext);
  FILE *f = fopen(p, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  return p;
}

static inline FILE *fuzz_null(void) {
  static FILE *f;
  if (!f) f = fopen("/dev/null", "w");
  return f;
}

/* What explain does with a model: load, verify, print; when it verifies and every op is known,
 * the inference passes and the schedule (code generated into memory, no C compiler). */
/* for_gpu: the schedule and code of --target cuda (sm_90: the fused attention, the GPU's fusion
 * rules), else the CPU's */
static inline void fuzz_model_file_for(const char *path, bool for_gpu) {
  Ctx *c = ctx_new();
  c->file = path;
  c->cuda = for_gpu;
  c->cuda_sm = for_gpu ? 90 : 0;
  Graph *g = graph_load(c, path, NULL);
  if (g) {
    int rc = verify_graph(g);
    explain_graph(g, fuzz_null());
    if (!rc && !g->nunsupported && !graph_check_supported(g)) {
      Graph *gs = graph_load(c, path, NULL);
      if (gs && !verify_graph(gs) && !inference_graph(gs, NULL, NULL, NULL)) compile_schedule(c, gs);
      graph_release(gs);
    }
    graph_release(g);
  }
  ctx_free(c);
}
static inline void fuzz_model_file(const char *path) { fuzz_model_file_for(path, false); }
#endif
