/* cuda_abi.cu MODEL.so: the CUDA ABI of a model compiled with --target cuda from
 * tests/corpus/models/mlp (one input x float32[8, 64]), on a machine with a GPU (make test-cuda):
 * host tensors are refused by the guards; repeated runs replay the captured graph and read the
 * inputs' current values; new addresses are captured again; a caller's stream is honoured. And the
 * runtime's half and bfloat16 conversions (gg_rt.h) give on the device what they give on the host. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "gcc_graph.h"
#include "gg_rt.h"

static int pass, fail;
#define CHECK(cond, what) do { if (cond) pass++; else { fail++; printf("FAIL %s\n", what); } } while (0)

/* every 127th float bit pattern (all exponents, signs and NaNs among them) and every half */
#define CONV_STEP 127u
#define CONV_N (0xffffffffu / CONV_STEP + 1)
__global__ void conversions(uint16_t *bf, uint16_t *h, float *hf) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < CONV_N; i += gridDim.x * blockDim.x) {
    uint32_t b = i * CONV_STEP;
    float f;
    memcpy(&f, &b, 4);
    bf[i] = gg_f2bf(f);
    h[i] = gg_f2h(f);
    if (i < 65536) hf[i] = gg_h2f((uint16_t)i);
  }
}

static void check_conversions(void) {
  uint16_t *bf, *h;
  float *hf;
  if (cudaMallocManaged(&bf, CONV_N * 2) || cudaMallocManaged(&h, CONV_N * 2) || cudaMallocManaged(&hf, 65536 * 4)) {
    CHECK(0, "half and bfloat16 conversions: cudaMallocManaged");
    return;
  }
  conversions<<<1024, 256>>>(bf, h, hf);
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    printf("  conversions: %s\n", cudaGetErrorString(err));
    CHECK(0, "half and bfloat16 conversions: the kernel ran");
    return;
  }
  long bad_bf = 0, bad_h = 0, bad_hf = 0;
  for (uint32_t i = 0; i < CONV_N; i++) {
    uint32_t b = i * CONV_STEP;
    float f;
    memcpy(&f, &b, 4);
    if (isnan(f)) { bad_bf += !isnan(gg_bf2f(bf[i])); bad_h += !isnan(gg_h2f(h[i])); continue; }   /* any NaN */
    bad_bf += bf[i] != gg_f2bf(f);
    bad_h += h[i] != gg_f2h(f);
  }
  for (uint32_t i = 0; i < 65536; i++) {
    float a = gg_h2f((uint16_t)i);
    bad_hf += isnan(a) ? !isnan(hf[i]) : memcmp(&a, &hf[i], 4) != 0;
  }
  if (bad_bf || bad_h || bad_hf) printf("  conversions: %ld bfloat16, %ld half, %ld half -> float differ\n", bad_bf, bad_h, bad_hf);
  CHECK(bad_bf == 0 && bad_h == 0 && bad_hf == 0, "half and bfloat16 conversions: the device's equal the host's");
  cudaFree(bf), cudaFree(h), cudaFree(hf);
}

typedef int (*open_fn)(gg_model **, const char *, char *, size_t);
typedef int (*run_fn)(gg_model *, const DLTensor *, int, DLTensor *, int, char *, size_t);
typedef int (*stream_fn)(gg_model *, void *);

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: cuda_abi MODEL.so\n"); return 2; }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("FAIL dlopen: %s\n0 passed, 1 failed\n", dlerror()); return 1; }
  open_fn op = (open_fn)dlsym(h, "gg_open");
  run_fn run = (run_fn)dlsym(h, "gg_run");
  stream_fn set_stream = (stream_fn)dlsym(h, "gg_set_stream");
  int (*device_type)(void) = (int (*)(void))dlsym(h, "gg_device_type");
  void (*cl)(gg_model *) = (void (*)(gg_model *))dlsym(h, "gg_close");
  CHECK(op && run && set_stream && device_type && cl, "entry points");
  CHECK(device_type() == kDLCUDA, "gg_device_type is kDLCUDA");
  char err[512] = "";
  gg_model *m = NULL;
  CHECK(op(&m, NULL, err, sizeof err) == 0, err);
  float hx[8 * 64], hy[3][80];
  for (int i = 0; i < 8 * 64; i++) hx[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  int64_t xs[2] = {8, 64}, ys[2] = {8, 10};
  float *dx, *dx2, *dy;
  cudaMalloc(&dx, sizeof hx);
  cudaMalloc(&dx2, sizeof hx);
  cudaMalloc(&dy, sizeof hy[0]);
  cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice);
  DLTensor x = {dx, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, xs, NULL, 0}, y = {dy, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, ys, NULL, 0};
  /* a host tensor is refused */
  DLTensor hostx = x;
  hostx.data = hx;
  hostx.device.device_type = kDLCPU;
  CHECK(run(m, &hostx, 1, &y, 1, err, sizeof err) == 1 && strstr(err, "device mismatch. expected cuda, actual cpu"), "host input refused");
  /* two runs (capture, replay) agree */
  CHECK(run(m, &x, 1, &y, 1, err, sizeof err) == 0, err);
  cudaMemcpy(hy[0], dy, sizeof hy[0], cudaMemcpyDeviceToHost);
  cudaMemset(dy, 0, sizeof hy[0]);
  CHECK(run(m, &x, 1, &y, 1, err, sizeof err) == 0, err);
  cudaMemcpy(hy[1], dy, sizeof hy[1], cudaMemcpyDeviceToHost);
  CHECK(!memcmp(hy[0], hy[1], sizeof hy[0]), "replay gives the captured run's result");
  /* the replay reads the input's current values */
  for (int i = 0; i < 64; i++) hx[i] += 1.0f;
  cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice);
  CHECK(run(m, &x, 1, &y, 1, err, sizeof err) == 0, err);
  cudaMemcpy(hy[2], dy, sizeof hy[2], cudaMemcpyDeviceToHost);
  CHECK(memcmp(hy[0], hy[2], sizeof hy[0]) != 0, "replay reads new input values");
  /* a new input address: captured again, same answer as the same values at the old address */
  cudaMemcpy(dx2, hx, sizeof hx, cudaMemcpyHostToDevice);
  x.data = dx2;
  cudaMemset(dy, 0, sizeof hy[0]);
  CHECK(run(m, &x, 1, &y, 1, err, sizeof err) == 0, err);
  cudaMemcpy(hy[1], dy, sizeof hy[1], cudaMemcpyDeviceToHost);
  CHECK(!memcmp(hy[1], hy[2], sizeof hy[1]), "new input address gives the same answer");
  /* the caller's stream: the run waits for work queued before it on that stream */
  cudaStream_t st;
  cudaStreamCreate(&st);
  CHECK(set_stream(m, st) == 0, "gg_set_stream");
  for (int i = 0; i < 64; i++) hx[i] -= 1.0f;
  cudaMemcpyAsync(dx2, hx, sizeof hx, cudaMemcpyHostToDevice, st);   /* ordered before the run on st */
  CHECK(run(m, &x, 1, &y, 1, err, sizeof err) == 0, err);
  cudaMemcpy(hy[1], dy, sizeof hy[1], cudaMemcpyDeviceToHost);
  CHECK(!memcmp(hy[0], hy[1], sizeof hy[0]), "run on the caller's stream sees the copy queued before it");
  CHECK(set_stream(m, NULL) == 0, "gg_set_stream back to the model's stream");
  CHECK(run(m, &x, 1, &y, 1, err, sizeof err) == 0, err);
  cl(m);
  cudaStreamDestroy(st);
  check_conversions();
  printf("%d passed, %d failed\n", pass, fail);
  return fail != 0;
}
