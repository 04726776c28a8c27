/* run_model.c: load a model compiled by gcc-graph and run it, from C, with nothing but libc.
 *
 *   cc $(pkg-config --cflags gcc-graph) samples/run_model.c -ldl -o run_model
 *   ./run_model model.so
 *
 * It reads the model's metadata, makes every input in its dtype (floats, bfloat16 and float16 as a
 * ramp of values, integers and bools as small values, valid as indices), symbolic sizes at 2, runs
 * the model with library-allocated outputs, and prints the first values of each output. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcc_graph.h"

#define LOAD(h, name) dlsym(h, #name)
enum { DL_BOOL = 6 };   /* kDLBool: DLPack 0.8 names it; older dlpack.h (Debian 12) lacks the name */

/* DLPack's type of a metadata dtype name ("float32", ...) */
static int dtype_of(const char *name, DLDataType *t) {
  static const struct { const char *name; uint8_t code, bits; } table[] = {
    {"float32", kDLFloat, 32}, {"float64", kDLFloat, 64}, {"float16", kDLFloat, 16}, {"bfloat16", kDLBfloat, 16},
    {"int64", kDLInt, 64}, {"int32", kDLInt, 32}, {"int16", kDLInt, 16}, {"int8", kDLInt, 8}, {"uint8", kDLUInt, 8},
    {"bool", DL_BOOL, 8}};
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (!strncmp(name, table[i].name, strlen(table[i].name)) && name[strlen(table[i].name)] == '"') {
      *t = (DLDataType){table[i].code, table[i].bits, 1};
      return 0;
    }
  return -1;
}

static uint16_t half_bits(float f, int bfloat) {   /* rounding toward zero is enough for sample data */
  uint32_t u;
  memcpy(&u, &f, 4);
  if (bfloat) return (uint16_t)(u >> 16);
  uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xff, m = u & 0x7fffffu;
  if (e < 113) return (uint16_t)sign;   /* zero (the ramp has no subnormal halves) */
  return (uint16_t)(sign | ((e - 112) << 10) | (m >> 13));
}

/* element k of a ramp, stored in dtype t at p */
static void store(void *p, int64_t k, DLDataType t) {
  float f = (float)(k % 7) * 0.1f - 0.3f;
  int64_t v = k % 7;
  if (t.code == kDLFloat && t.bits == 32) ((float *)p)[k] = f;
  else if (t.code == kDLFloat && t.bits == 64) ((double *)p)[k] = f;
  else if (t.bits == 16 && (t.code == kDLFloat || t.code == kDLBfloat)) ((uint16_t *)p)[k] = half_bits(f, t.code == kDLBfloat);
  else if (t.code == DL_BOOL) ((uint8_t *)p)[k] = (uint8_t)(k & 1);
  else if (t.bits == 64) ((int64_t *)p)[k] = v;
  else if (t.bits == 32) ((int32_t *)p)[k] = (int32_t)v;
  else if (t.bits == 16) ((int16_t *)p)[k] = (int16_t)v;
  else ((uint8_t *)p)[k] = (uint8_t)v;
}

/* element k of a tensor in dtype t, as a double */
static double load(const void *p, int64_t k, DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) return ((const float *)p)[k];
  if (t.code == kDLFloat && t.bits == 64) return ((const double *)p)[k];
  if (t.bits == 16 && (t.code == kDLFloat || t.code == kDLBfloat)) {
    uint16_t h = ((const uint16_t *)p)[k];
    uint32_t u;
    if (t.code == kDLBfloat) u = (uint32_t)h << 16;
    else {
      uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu;
      u = ((uint32_t)(h & 0x8000u) << 16) | (e ? ((e + 112) << 23 | m << 13) : 0);   /* subnormal halves read as 0 */
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  if (t.code == DL_BOOL || t.code == kDLUInt) return ((const uint8_t *)p)[k];
  if (t.bits == 64) return (double)((const int64_t *)p)[k];
  if (t.bits == 32) return ((const int32_t *)p)[k];
  if (t.bits == 16) return ((const int16_t *)p)[k];
  return ((const int8_t *)p)[k];
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: %s MODEL.so\n", argv[0]); return 2; }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  const char *(*metadata)(void) = (const char *(*)(void))LOAD(h, gg_metadata);
  int (*num_inputs)(void) = (int (*)(void))LOAD(h, gg_num_inputs);
  int (*num_outputs)(void) = (int (*)(void))LOAD(h, gg_num_outputs);
  int (*device_type)(void) = (int (*)(void))LOAD(h, gg_device_type);
  int (*open_model)(gg_model **, const char *, char *, size_t) = (int (*)(gg_model **, const char *, char *, size_t))LOAD(h, gg_open);
  void (*close_model)(gg_model *) = (void (*)(gg_model *))LOAD(h, gg_close);
  int (*run_alloc)(gg_model *, const DLTensor *, int, DLManagedTensor **, int, char *, size_t) =
      (int (*)(gg_model *, const DLTensor *, int, DLManagedTensor **, int, char *, size_t))LOAD(h, gg_run_alloc);
  if (!metadata || !num_inputs || !open_model || !run_alloc || !device_type) { fprintf(stderr, "%s: not a gcc-graph model\n", argv[1]); return 1; }
  if (device_type() != kDLCPU) { fprintf(stderr, "%s: a CUDA model (this sample feeds host tensors; see tests/cuda_abi.cu)\n", argv[1]); return 1; }
  printf("metadata: %.200s...\n", metadata());

  char err[512];
  gg_model *m;
  if (open_model(&m, NULL, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }

  /* Each input's dtype and shape, from the metadata's "inputs" list (compact JSON: its objects are
   * {"name":...,"dtype":"float32","shape":[8,"s77",...]}). A real program knows its model's inputs. */
  int ni = num_inputs(), no = num_outputs();
  if (ni > 16) { fprintf(stderr, "this sample feeds at most 16 inputs\n"); return 1; }
  DLTensor *in = calloc((size_t)ni + 1, sizeof *in);
  static int64_t shapes[16][16];
  const char *p = strstr(metadata(), "\"inputs\":[");
  for (int i = 0; i < ni; i++) {
    DLDataType t;
    p = strstr(p, "\"dtype\":\"") + 9;
    if (dtype_of(p, &t)) { fprintf(stderr, "input %d: a dtype this sample does not know\n", i); return 1; }
    p = strstr(p, "\"shape\":[") + 9;
    int nd = 0;
    int64_t n = 1;
    while (*p != ']' && nd < 16) {
      if (*p == '"') { shapes[i][nd] = 2; p = strchr(p + 1, '"') + 1; }   /* a symbolic size ("s77"): 2 */
      else shapes[i][nd] = strtoll(p, (char **)&p, 10);
      n *= shapes[i][nd++];
      if (*p == ',') p++;
    }
    void *data = malloc((size_t)(n ? n : 1) * (t.bits / 8));
    for (int64_t k = 0; k < n; k++) store(data, k, t);
    in[i] = (DLTensor){.data = data, .device = {kDLCPU, 0}, .ndim = nd, .dtype = t, .shape = shapes[i]};
  }
  DLManagedTensor **out = calloc((size_t)no + 1, sizeof *out);
  if (run_alloc(m, in, ni, out, no, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  for (int i = 0; i < no; i++) {
    DLTensor *t = &out[i]->dl_tensor;
    int64_t n = 1;
    printf("out.%d: [", i);
    for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]), n *= t->shape[d];
    printf("]");
    for (int64_t k = 0; k < 4 && k < n; k++) printf(" %g", load(t->data, k, t->dtype));
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
