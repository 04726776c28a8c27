/* train_ddp.c: data-parallel training of a CUDA training model from C, one process per GPU, the
 * ranks joined through NCCL with a unique id that rank 0 writes to a file (docs/distributed.md).
 *
 *   gcc-graph compile model.pt2 --train --optimizer sgd --target cuda -o train.so
 *   cc -Iinclude samples/train_ddp.c -ldl -o train_ddp
 *   for r in 0 1; do CUDA_VISIBLE_DEVICES=$r ./train_ddp train.so $r 2 /tmp/nccl.id 20 & done; wait
 *
 * Each rank feeds its own shard: float32 inputs uniform in [-1, 1) and int64 inputs in [0, INT_MAX)
 * (default 2; the classes of a classifier's labels), from a generator seeded by rank and step. A real
 * program reads its shard of the data. At the end each rank prints a checksum of the parameters
 * the optimizer updates: equal on every rank. Rank 0 removes the id file when it is done. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gcc_graph.h"

#define SYM(name) (*(void **)&gg.name = dlsym(h, "gg_" #name))

static struct {   /* the model's entry points, looked up by dlsym */
  const char *(*metadata)(void);
  int (*num_inputs)(void), (*num_gradients)(void), (*num_weights)(void), (*device_type)(void);
  int (*open)(gg_model **, const char *, char *, size_t);
  int (*nccl_unique_id)(void *, char *, size_t);
  int (*set_data_parallel_nccl)(gg_model *, int, int, const void *, char *, size_t);
  int (*train_state_new)(const gg_model *, gg_train_state **, char *, size_t);
  int (*train_step)(gg_model *, gg_train_state *, const DLTensor *, int, DLTensor *, int, char *, size_t);
  int (*output_shape)(const gg_model *, const DLTensor *, int, int, int *, int64_t *, DLDataType *, char *, size_t);
  int (*gradient)(const gg_train_state *, int, const char **, DLTensor *);
  int (*weight)(const gg_model *, int, const char **, const void **, size_t *);
  void *(*device_alloc)(size_t);
  int (*device_copy)(void *, const void *, size_t, int);
} gg;

static uint64_t rng;
static double uniform(void) {   /* xorshift64*, in [0, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static int fail(const char *what, const char *err) {
  fprintf(stderr, "train_ddp: %s: %s\n", what, err);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: %s TRAIN.so RANK WORLD IDFILE [STEPS] [INT_MAX]\n", argv[0]); return 2; }
  int rank = atoi(argv[2]), world = atoi(argv[3]), steps = argc > 5 ? atoi(argv[5]) : 20, imax = argc > 6 ? atoi(argv[6]) : 2;
  const char *idfile = argv[4];
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) return fail("dlopen", dlerror());
  if (!SYM(device_type) || !SYM(num_gradients) || gg.device_type() != kDLCUDA || !gg.num_gradients())
    return fail(argv[1], "not a CUDA training model: compile it with --train --optimizer ... --target cuda");
  if (!SYM(metadata) || !SYM(num_inputs) || !SYM(num_gradients) || !SYM(num_weights) || !SYM(device_type) || !SYM(open) ||
      !SYM(nccl_unique_id) || !SYM(set_data_parallel_nccl) || !SYM(train_state_new) || !SYM(train_step) || !SYM(output_shape) ||
      !SYM(gradient) || !SYM(weight) || !SYM(device_alloc) || !SYM(device_copy))
    return fail(argv[1], "not a gcc-graph model of this version");
  char err[512], id[128];

  /* the unique id: rank 0 makes it and writes it (to a temporary name, then renamed: the others
   * never read half of it); the others wait for the file */
  if (rank == 0) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", idfile);
    FILE *f = NULL;
    if (gg.nccl_unique_id(id, err, sizeof err)) return fail("unique id", err);
    if (!(f = fopen(tmp, "wb")) || fwrite(id, 1, sizeof id, f) != sizeof id || fclose(f) || rename(tmp, idfile)) return fail(idfile, "cannot write");
  } else {
    FILE *f = NULL;
    for (int tries = 0; !f && tries < 600; tries++)
      if (!(f = fopen(idfile, "rb"))) usleep(100000);
    if (!f || fread(id, 1, sizeof id, f) != sizeof id) return fail(idfile, "no unique id from rank 0 after 60 s");
    fclose(f);
  }
  gg_model *m;
  gg_train_state *st;
  if (gg.open(&m, NULL, err, sizeof err)) return fail("open", err);
  if (gg.set_data_parallel_nccl(m, world, rank, id, err, sizeof err)) return fail("join", err);   /* blocks until all have joined */
  if (rank == 0) unlink(idfile);
  if (gg.train_state_new(m, &st, err, sizeof err)) return fail("state", err);

  /* the inputs' dtypes and shapes, from the metadata (float32 and int64 inputs in this sample) */
  int ni = gg.num_inputs();
  DLTensor in[16];
  static int64_t shapes[16][16];
  size_t bytes[16];
  const char *p = strstr(gg.metadata(), "\"inputs\":[");
  for (int i = 0; i < ni && i < 16; i++) {
    p = strstr(p, "\"dtype\":\"") + 9;
    bool f32 = !strncmp(p, "float32", 7);
    if (!f32 && strncmp(p, "int64", 5)) return fail("inputs", "this sample feeds float32 and int64 inputs only");
    p = strstr(p, "\"shape\":[") + 9;
    int nd = 0;
    int64_t n = 1;
    while (*p != ']') { shapes[i][nd] = strtoll(p, (char **)&p, 10); n *= shapes[i][nd++]; if (*p == ',') p++; }
    bytes[i] = (size_t)n * (f32 ? 4 : 8);
    in[i] = (DLTensor){.data = gg.device_alloc(bytes[i]), .device = {kDLCUDA, 0}, .ndim = nd, .dtype = {f32 ? kDLFloat : kDLInt, f32 ? 32 : 64, 1}, .shape = shapes[i]};
    if (!in[i].data) return fail("inputs", "out of GPU memory");
  }
  int64_t lshape[16];
  int lnd;
  DLDataType ldt;
  if (gg.output_shape(m, in, ni, 0, &lnd, lshape, &ldt, err, sizeof err)) return fail("loss", err);
  DLTensor loss = {.data = gg.device_alloc(8), .device = {kDLCUDA, 0}, .ndim = lnd, .dtype = ldt, .shape = lshape};

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < ni; i++) {   /* this rank's shard of step s */
      rng = 0x9E3779B97F4A7C15ull * (uint64_t)(1 + rank + 1000 * s + 7 * i);
      size_t n = bytes[i] / (in[i].dtype.bits / 8);
      void *host = malloc(bytes[i]);
      for (size_t k = 0; k < n; k++)
        if (in[i].dtype.code == kDLFloat) ((float *)host)[k] = (float)(2 * uniform() - 1);
        else ((int64_t *)host)[k] = (int64_t)(uniform() * imax);
      gg.device_copy(in[i].data, host, bytes[i], 1);
      free(host);
    }
    if (gg.train_step(m, st, in, ni, &loss, 1, err, sizeof err)) return fail("step", err);
    float l = 0;
    if (ldt.bits == 32) gg.device_copy(&l, loss.data, 4, 0);
    else { double d; gg.device_copy(&d, loss.data, 8, 0); l = (float)d; }
    if (s == 0 || s == steps - 1) printf("rank %d step %d loss %.6f\n", rank, s, l);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);

  /* a checksum (FNV-1a) of the parameters the optimizer updates: the same on every rank */
  uint64_t sum = 1469598103934665603ull;
  for (int k = 0; k < gg.num_gradients(); k++) {
    const char *gname, *wname;
    const void *data;
    size_t nb;
    DLTensor g;
    if (gg.gradient(st, k, &gname, &g)) continue;
    for (int i = 0; i < gg.num_weights(); i++) {
      if (gg.weight(m, i, &wname, &data, &nb) || strcmp(wname, gname)) continue;
      unsigned char *hb = malloc(nb + 1);
      gg.device_copy(hb, data, nb, 0);
      for (size_t b = 0; b < nb; b++) sum = (sum ^ hb[b]) * 1099511628211ull;
      free(hb);
    }
  }
  printf("rank %d: %d steps in %.3f s, parameters checksum %016llx\n", rank, steps,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), (unsigned long long)sum);
  return 0;
}
