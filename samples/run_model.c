/* run_model.c: load a model compiled by gcc-graph and run it, from C, with nothing but libc.
 *
 *   cc -I/usr/local/include samples/run_model.c -ldl -o run_model
 *   ./run_model model.so
 *
 * It reads the model's metadata, feeds every input with a ramp of values (only float32 inputs
 * here, to keep the sample short), runs it with library-allocated outputs, and prints the first
 * values of each output. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcc_graph.h"

#define LOAD(h, name) dlsym(h, #name)

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: %s MODEL.so\n", argv[0]); return 2; }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  const char *(*metadata)(void) = (const char *(*)(void))LOAD(h, gg_metadata);
  int (*num_inputs)(void) = (int (*)(void))LOAD(h, gg_num_inputs);
  int (*num_outputs)(void) = (int (*)(void))LOAD(h, gg_num_outputs);
  int (*open_model)(gg_model **, const char *, char *, size_t) = (int (*)(gg_model **, const char *, char *, size_t))LOAD(h, gg_open);
  void (*close_model)(gg_model *) = (void (*)(gg_model *))LOAD(h, gg_close);
  int (*run_alloc)(gg_model *, const DLTensor *, int, DLManagedTensor **, int, char *, size_t) =
      (int (*)(gg_model *, const DLTensor *, int, DLManagedTensor **, int, char *, size_t))LOAD(h, gg_run_alloc);
  if (!metadata || !num_inputs || !open_model || !run_alloc) { fprintf(stderr, "%s: not a gcc-graph model\n", argv[1]); return 1; }
  printf("metadata: %.200s...\n", metadata());

  char err[512];
  gg_model *m;
  if (open_model(&m, NULL, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }

  /* This sample feeds models whose inputs are float32 and static: it reads each input's shape
   * from the metadata's "inputs" list. A real program knows its model's inputs. */
  int ni = num_inputs(), no = num_outputs();
  DLTensor *in = calloc((size_t)ni, sizeof *in);
  const char *p = strstr(metadata(), "\"inputs\":[");
  for (int i = 0; i < ni; i++) {
    static int64_t shapes[16][16];
    p = strstr(p, "\"shape\":[") + 9;
    int nd = 0;
    int64_t n = 1;
    while (*p != ']') { shapes[i][nd] = strtoll(p, (char **)&p, 10); n *= shapes[i][nd++]; if (*p == ',') p++; }
    float *data = malloc((size_t)n * sizeof *data);
    for (int64_t k = 0; k < n; k++) data[k] = (float)(k % 7) * 0.1f - 0.3f;
    in[i] = (DLTensor){.data = data, .device = {kDLCPU, 0}, .ndim = nd, .dtype = {kDLFloat, 32, 1}, .shape = shapes[i]};
  }
  DLManagedTensor **out = calloc((size_t)no, sizeof *out);
  if (run_alloc(m, in, ni, out, no, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  for (int i = 0; i < no; i++) {
    DLTensor *t = &out[i]->dl_tensor;
    printf("out.%d: [", i);
    for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("]");
    if (t->dtype.code == kDLFloat && t->dtype.bits == 32)
      for (int k = 0; k < 4; k++) printf(" %.6f", ((float *)t->data)[k]);
    printf("\n");
    out[i]->deleter(out[i]);
  }
  for (int i = 0; i < ni; i++) free(in[i].data);
  free(in);
  free(out);
  close_model(m);
  dlclose(h);
  return 0;
}
