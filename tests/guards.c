/* guards.c: hostile DLTensors against a compiled model's guards, one row per case: what the caller
 * passes and the message gg_run must refuse it with (never a crash). Linked against a CPU model of
 * tests/corpus/models/mlp_dynamic_batch (input x float32[B, 64], B symbolic; output float32[B, 10]):
 *   cc tests/guards.c MODEL.so -o t && ./t        (the cases are what fuzz_run found, and their kin)
 * Prints "N passed, N failed". */
#include <gcc_graph.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static float xbuf[4 * 64], ybuf[4 * 10];
static int64_t xshape[2], yshape[2], xstrides[2];

typedef struct Case {
  const char *what, *want;   /* want: a piece of the message; NULL: the run must succeed */
  void (*mutate)(DLTensor *x, DLTensor *y, int *nin, int *nout, const DLTensor **in, DLTensor **out);
} Case;

#define MUT(name, body) static void name(DLTensor *x, DLTensor *y, int *nin, int *nout, const DLTensor **in, DLTensor **out) { \
  (void)x, (void)y, (void)nin, (void)nout, (void)in, (void)out; body; }
MUT(m_none, )
MUT(m_null_shape, x->shape = NULL)
MUT(m_null_data, x->data = NULL)
MUT(m_null_out_data, y->data = NULL)
MUT(m_null_data_offset, { x->data = NULL; x->byte_offset = 64; })
MUT(m_misaligned, x->byte_offset = 2)
MUT(m_misaligned_out, y->byte_offset = 5)
MUT(m_empty, { x->shape[0] = 0; y->shape[0] = 0; })
MUT(m_negative, x->shape[0] = -4)
MUT(m_stride_overflow, { x->shape[0] = INT64_C(1) << 40; x->shape[1] = INT64_C(1) << 40; xstrides[0] = 7; xstrides[1] = 1; x->strides = xstrides; })
MUT(m_strided, { xstrides[0] = 128; xstrides[1] = 1; x->strides = xstrides; })
MUT(m_rank, x->ndim = 3)
MUT(m_rank_negative, x->ndim = -1)
MUT(m_device, x->device.device_type = kDLCUDA)
MUT(m_dtype, x->dtype.bits = 64)
MUT(m_lanes, x->dtype.lanes = 4)
MUT(m_null_in, *in = NULL)
MUT(m_null_out, *out = NULL)
MUT(m_count, *nin = 2)
MUT(m_out_size, y->shape[0] = 5)
MUT(m_batch_huge, { x->shape[0] = INT64_C(1) << 62; y->shape[0] = INT64_C(1) << 62; })

static const Case cases[] = {
    {"a good call", NULL, m_none},
    {"a null shape", "has no shape", m_null_shape},
    {"null data", "has no data", m_null_data},
    {"a null output", "has no data", m_null_out_data},
    {"null data with a byte offset", "has no data", m_null_data_offset},
    {"a float32 input 2 bytes into an element", "not aligned", m_misaligned},
    {"a float32 output 5 bytes into an element", "not aligned", m_misaligned_out},
    {"a batch of 0 (below its range, 1 to 64)", "guard failed", m_empty},
    {"a negative size", "negative size", m_negative},
    {"strides over sizes whose product overflows", "stride mismatch", m_stride_overflow},
    {"a non-compact stride", "stride mismatch", m_strided},
    {"the wrong rank", "rank mismatch", m_rank},
    {"a negative rank", "rank mismatch", m_rank_negative},
    {"a device tensor", "device mismatch", m_device},
    {"the wrong dtype", "dtype mismatch", m_dtype},
    {"vector lanes", "dtype mismatch", m_lanes},
    {"no inputs array", "inputs are missing", m_null_in},
    {"no outputs array", "outputs are missing", m_null_out},
    {"the wrong input count", "expected 1 inputs", m_count},
    {"an output of the wrong size", "size mismatch", m_out_size},
    {"a batch beyond its range", "guard failed", m_batch_huge},
};

int main(void) {
  char err[512];
  gg_model *m;
  if (gg_open(&m, NULL, err, sizeof err)) { printf("FAIL open: %s\n0 passed, 1 failed\n", err); return 1; }
  int pass = 0, fail = 0;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const Case *c = &cases[k];
    xshape[0] = 4, xshape[1] = 64, yshape[0] = 4, yshape[1] = 10;
    DLTensor x = {xbuf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor y = {ybuf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, yshape, NULL, 0};
    int nin = 1, nout = 1;
    const DLTensor *in = &x;
    DLTensor *out = &y;
    c->mutate(&x, &y, &nin, &nout, &in, &out);
    err[0] = 0;
    int rc = gg_run(m, in, nin, out, nout, err, sizeof err);
    int good = c->want ? rc == 1 && strstr(err, c->want) != NULL : rc == 0;
    if (good) pass++;
    else { fail++; printf("FAIL %s: status %d, '%s' (wanted %s)\n", c->what, rc, err, c->want ? c->want : "success"); }
  }
  gg_close(m);
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
