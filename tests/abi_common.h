/* abi_common.h: what the C tests of a compiled model's ABI share (train_abi.c, concurrency.c):
 * tensors moved to where the model wants them, and a minimal reader of a case's in.N inputs. A
 * program includes it once, after gcc_graph.h, and links against the model. */
#ifndef ABI_COMMON_H
#define ABI_COMMON_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CPU models have no device calls: weak, so that one program links against both kinds */
extern void *gg_device_alloc(size_t bytes) __attribute__((weak));
extern int gg_device_copy(void *dst, const void *src, size_t bytes, int to_device) __attribute__((weak));
extern void gg_device_free(void *p) __attribute__((weak));

static bool dev;   /* a CUDA model: its tensors live on the GPU */

/* n bytes of host memory where the model wants them (a device copy for a CUDA model) */
static void *to_model(const void *p, size_t n) {
  if (!dev) return (void *)p;
  void *d = gg_device_alloc(n);
  if (!d || gg_device_copy(d, p, n, 1)) { printf("FAIL cannot copy to the GPU\n"); exit(1); }
  return d;
}

/* n bytes of the model's at p, copied into new host memory */
static void *from_model(const void *p, size_t n) {
  void *h = malloc(n + 1);
  if (dev) {
    if (gg_device_copy(h, p, n, 0)) { printf("FAIL cannot copy from the GPU\n"); exit(1); }
  } else
    memcpy(h, p, n);
  return h;
}

/* a minimal safetensors reader: in.N tensors, F32 or I64 */
static DLTensor in[8];
static int64_t shapes[8][8];
static int nin;
static int read_inputs(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)len + 1);
  if (fread(b, 1, (size_t)len, f) != (size_t)len) { fclose(f); return -1; }
  fclose(f);
  uint64_t hl;
  memcpy(&hl, b, 8);
  char *h = b + 8, *data = b + 8 + hl;
  for (nin = 0; nin < 8; nin++) {
    char key[32];
    snprintf(key, sizeof key, "\"in.%d\"", nin);
    char *p = strstr(h, key);
    if (!p || p > data) break;
    DLTensor *t = &in[nin];
    char *dt = strstr(p, "\"dtype\":\"") + 9;
    t->dtype = !strncmp(dt, "F32", 3) ? (DLDataType){kDLFloat, 32, 1} : (DLDataType){kDLInt, 64, 1};
    char *sh = strstr(p, "\"shape\":[") + 9;
    t->ndim = 0;
    while (*sh != ']') { shapes[nin][t->ndim++] = strtoll(sh, &sh, 10); if (*sh == ',') sh++; }
    t->shape = shapes[nin];
    long long o0 = strtoll(strstr(p, "\"data_offsets\":[") + 16, NULL, 10);
    t->data = data + o0;
  }
  return nin ? 0 : -1;
}

/* the inputs, moved to the model's device */
static void inputs_to_model(void) {
  for (int i = 0; i < nin; i++) {
    int64_t ne = 1;
    for (int d = 0; d < in[i].ndim; d++) ne *= in[i].shape[d];
    in[i].data = to_model(in[i].data, (size_t)ne * (in[i].dtype.bits / 8));
    in[i].device = (DLDevice){dev ? kDLCUDA : kDLCPU, 0};
  }
}
#endif
