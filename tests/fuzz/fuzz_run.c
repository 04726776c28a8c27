/* fuzz_run.c: libFuzzer harness for a compiled model's entry points on hostile DLTensors: gg_check,
 * gg_output_shape, gg_run and gg_run_alloc with the input and output tensors decoded from the fuzz
 * input (counts, ndim, shapes, strides, dtypes, devices, byte offsets, null data), built with the
 * model's generated sources (a model with a symbolic batch, `make fuzz-build` makes them). Every
 * tensor whose data is not null gets a buffer as large as its shape, strides and offset say (so
 * that what the guards let through may be read); where the guards let a run through, it must run
 * cleanly. The oracle is the sanitizers: no crash, no report, no hang. */
#include <gcc_graph.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct Rd { const uint8_t *p; size_t n; } Rd;
static uint8_t u8(Rd *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}
/* mostly small numbers, sometimes any 64-bit value */
static int64_t num(Rd *r) {
  uint8_t b = u8(r);
  if (b < 0xf0) return b % 40 - 2;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | u8(r);
  return (int64_t)v;
}

#define MAXT 6
typedef struct T {
  DLTensor t;
  int64_t shape[20], strides[20];
  void *buf;
} T;

/* a tensor from the input: its buffer covers every element the shape and strides reach */
static void decode(Rd *r, T *x, DLDataType want) {
  memset(x, 0, sizeof *x);
  uint8_t flags = u8(r);
  int nd = (int)(u8(r) % 20) - (flags & 0x80 ? 3 : 0);
  x->t.ndim = nd;
  x->t.dtype = want;
  if (flags & 1) x->t.dtype = (DLDataType){u8(r), u8(r), (uint16_t)(u8(r) % 3)};
  x->t.device = (DLDevice){flags & 2 ? (DLDeviceType)(u8(r) % 16) : kDLCPU, flags & 4 ? (int32_t)u8(r) : 0};
  for (int d = 0; d < nd && d < 20; d++) x->shape[d] = num(r);
  x->t.shape = flags & 8 ? NULL : x->shape;
  if (flags & 16) {
    for (int d = 0; d < nd && d < 20; d++) x->strides[d] = num(r);
    x->t.strides = x->strides;
  }
  x->t.byte_offset = flags & 32 ? (uint64_t)num(r) : 0;
  if (flags & 64) return;   /* data NULL */
  /* the extent: 1 + sum (size - 1) * |stride| elements (compact when no strides), bounded */
  uint64_t ext = 1, elem = (uint64_t)(x->t.dtype.bits + 7) / 8 * (x->t.dtype.lanes ? x->t.dtype.lanes : 1);
  int64_t compact = 1;
  for (int d = nd - 1; d >= 0 && d < 20 && ext; d--) {
    int64_t s = x->shape[d], st = x->t.strides ? x->strides[d] : compact;
    if (s <= 0) { ext = 0; break; }
    if (s > (1 << 20) || st > (1 << 20) || st < -(1 << 20)) { ext = UINT64_MAX; break; }
    ext += (uint64_t)(s - 1) * (uint64_t)(st < 0 ? -st : st);
    if (compact > (1 << 20)) { ext = UINT64_MAX; break; }
    compact *= s;
    if (ext > (1u << 20)) { ext = UINT64_MAX; break; }
  }
  if (ext == UINT64_MAX || x->t.byte_offset > (1u << 20) || elem > 64 || ext * elem > (4u << 20)) return;   /* too large to back: data NULL */
  size_t bytes = (size_t)(x->t.byte_offset + ext * elem);
  x->buf = malloc(bytes ? bytes : 1);
  memset(x->buf, 0x3c, bytes);   /* finite floats, small integers */
  x->t.data = x->buf;
}

static gg_model *model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  if (!model && gg_open(&model, NULL, err, sizeof err)) abort();
  Rd r = {data, size};
  int ni = u8(&r) % (MAXT / 2 + 1), no = u8(&r) % (MAXT / 2 + 1);
  T in[MAXT], out[MAXT];
  DLTensor tin[MAXT], tout[MAXT];
  for (int i = 0; i < ni; i++) { decode(&r, &in[i], (DLDataType){kDLFloat, 32, 1}); tin[i] = in[i].t; }
  for (int i = 0; i < no; i++) { decode(&r, &out[i], (DLDataType){kDLFloat, 32, 1}); tout[i] = out[i].t; }
  uint8_t what = u8(&r);
  if (!gg_check(model, tin, ni, err, sizeof err)) {
    int nd;
    int64_t shape[16];
    DLDataType dt;
    for (int i = -1; i <= gg_num_outputs(); i++) gg_output_shape(model, tin, ni, i, &nd, shape, &dt, err, sizeof err);
  }
  if (what & 1) {
    DLManagedTensor *mo[MAXT] = {0};
    if (!gg_run_alloc(model, tin, ni, mo, no, err, sizeof err))
      for (int i = 0; i < no; i++) if (mo[i]) mo[i]->deleter(mo[i]);
  } else {
    gg_run(model, tin, ni, tout, no, err, sizeof err);
  }
  for (int i = 0; i < ni; i++) free(in[i].buf);
  for (int i = 0; i < no; i++) free(out[i].buf);
  return 0;
}
