/* gemm_kernel.c: the runtime's own product kernels (lib/rt/gg_rt_gemm.c, included whole) timed
 * alone at the shapes of the CPU suite's models (bfloat16 linears first: gg_rt_hgemm, AMX where the CPU
 * has it; then float32), to tune it without compiling a model: the linears of
 * BERT-base and GPT-2 (A packed per call, the weight packed once, as a compiled model does) and 3x3
 * and 1x1 convolutions of ResNet-50 at batch 8 (A read in place from the padded channels-last image, as
 * gg_rt_conv_nhwc_f32 does). Each line: the shape, the rows of A's panels, GFLOP/s (best of 5, at
 * OMP_NUM_THREADS; linears also with their weight coming from memory, as in a model), the largest
 * difference from a float64 product at sampled outputs. Compare with PyTorch's torch.mm at the same
 * threads (bench/cpu_ceiling.py gives its 2048^3 rate) in the same run.
 * The runtime's tuning knobs are -D flags (PK_KC, PK_TALL_MIN, PK_TILES_PER_THREAD, PK_TILE_ROWS,
 * PK_TILE_ROWS_MANY, PK_MANY_THREADS, PK_TILE_PANELS; a compiled model takes them in
 * --cflags, which is how they were chosen: in the model, on the 16-core host):
 *   cc -O3 -fno-math-errno -fno-trapping-math -fopenmp -Ilib/rt -Iinclude bench/gemm_kernel.c -lopenblas -lm -o gemm_kernel
 *   OMP_NUM_THREADS=2 taskset -c 0,1 ./gemm_kernel
 * (no BLAS call is timed; the runtime's BLAS paths only need the symbols.) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "gg_rt.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#include "gg_rt_gemm.c"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *filled(int64_t n, int seed) {
  float *p = malloc(sizeof(float) * (size_t)n);
  if (!p) exit(1);
  for (int64_t i = 0; i < n; i++) p[i] = (float)((i * (7 + 2 * seed)) % 13) * 0.1f - 0.6f;
  return p;
}

static void *aligned(int64_t floats) {
  void *p = NULL;
  if (posix_memalign(&p, 64, sizeof(float) * (size_t)floats)) exit(1);
  return p;
}

/* C = A @ B, A (M x K) row-major packed per call, B (K x N) packed once; timed with B in cache (best of
 * 5 runs of one weight) and from memory, as in a model (copies of B over 400 MB, each used in turn:
 * three passes, the rate over the last) */
static void linear(int64_t M, int64_t N, int64_t K) {
  int copies = (int)(400e6 / (4.0 * (double)gg_rt_pack_floats(1, K, N))) + 1;
  float *A = filled(M * K, 0), *B = filled(K * N, 1), *C = aligned(M * N), *Ap = aligned(gg_rt_pack_floats(0, M, K)), **Bp = malloc(sizeof(float *) * (size_t)copies);
  if (!Bp) exit(1);
  for (int c = 0; c < copies; c++) {
    Bp[c] = aligned(gg_rt_pack_floats(1, K, N));
    gg_rt_pack(1, K, N, B, N, 1, Bp[c]);
  }
  double best = 1e9, cold = 0, err = 0;
  for (int r = 0; r < 5; r++) {
    double t = now();
    gg_rt_pack(0, M, K, A, K, 1, Ap);
    gg_rt_gemm_packed(M, N, K, Ap, Bp[0], C, N, NULL, NULL, NULL);
    t = now() - t;
    if (t < best) best = t;
  }
  for (int r = 0; r < 3; r++) {
    double t = now();
    for (int c = 0; c < copies; c++) {
      gg_rt_pack(0, M, K, A, K, 1, Ap);
      gg_rt_gemm_packed(M, N, K, Ap, Bp[c], C, N, NULL, NULL, NULL);
    }
    cold = (now() - t) / copies;
  }
  for (int64_t i = 0; i < M; i += 37)
    for (int64_t j = 0; j < N; j += 11) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
      err = fmax(err, fabs(s - C[i * N + j]));
    }
  double flop = 2.0 * (double)M * (double)N * (double)K;
  printf("linear  M %6lld N %5lld K %5lld  rows %2d  %7.1f GFLOP/s, weight from memory %7.1f  max diff %.2g\n", (long long)M, (long long)N, (long long)K,
         pk_mr(M), flop / best / 1e9, flop / cold / 1e9, err);
  for (int c = 0; c < copies; c++) free(Bp[c]);
  free(A), free(B), free(C), free(Ap), free(Bp);
}

/* an R x R (1 or 3) stride-1 convolution of B images [H+R-1, H+R-1, C] (padded channels-last) to Co channels */
static void conv(int64_t Bn, int64_t H, int64_t C, int64_t Co, int64_t R) {
  int64_t Hp = H + R - 1, M = Bn * H * H, K = R * R * C;
  float *x = filled(Bn * Hp * Hp * C, 0), *W = filled(K * Co, 1), *y = aligned(M * Co), *Wp = aligned(gg_rt_pack_floats(1, K, Co));
  int64_t *ro = malloc(sizeof(int64_t) * (size_t)K), *po = malloc(sizeof(int64_t) * (size_t)(M + PK_MR));
  if (!ro || !po) exit(1);
  gg_rt_pack(1, K, Co, W, Co, 1, Wp);
  for (int64_t r = 0, i = 0; r < R; r++)
    for (int64_t s = 0; s < R; s++)
      for (int64_t c = 0; c < C; c++) ro[i++] = (r * Hp + s) * C + c;
  for (int64_t o = 0; o < M + PK_MR; o++) po[o] = o < M ? ((o / (H * H) * Hp + o / H % H) * Hp + o % H) * C : 0;
  rows_src a = {x, ro, po};
  double best = 1e9, err = 0;
  for (int r = 0; r < 5; r++) {
    double t = now();
    gemm_run(M, Co, K, NULL, &a, Wp, NULL, y, Co, NULL, NULL, NULL, NULL, 0);
    t = now() - t;
    if (t < best) best = t;
  }
  for (int64_t o = 0; o < M; o += 97)
    for (int64_t j = 0; j < Co; j += 7) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)x[ro[k] + po[o]] * W[k * Co + j];
      err = fmax(err, fabs(s - y[o * Co + j]));
    }
  printf("conv%lldx%lld M %6lld N %5lld K %5lld  rows %2d  %7.1f GFLOP/s  max diff %.2g\n", (long long)R, (long long)R, (long long)M, (long long)Co, (long long)K, pk_mr(M),
         2.0 * (double)M * (double)Co * (double)K / best / 1e9, err);
  free(x), free(W), free(y), free(Wp), free(ro), free(po);
}

/* a bfloat16 linear: Y = X @ W^T with W [N, K] as PyTorch stores it, packed once (gg_rt_pack_weight: AMX
 * panels where the CPU has AMX, else float32 panels), X packed per call, the result rounded to bfloat16 */
static void hlinear(int64_t M, int64_t N, int64_t K) {
  float *xf = filled(M * K, 0), *wf = filled(N * K, 1);
  uint16_t *X = malloc(2 * (size_t)(M * K)), *W = malloc(2 * (size_t)(N * K)), *Y = malloc(2 * (size_t)(M * N));
  if (!X || !W || !Y) exit(1);
  for (int64_t i = 0; i < M * K; i++) X[i] = gg_f2bf(xf[i]);
  for (int64_t i = 0; i < N * K; i++) W[i] = gg_f2bf(wf[i]);
  void *pk = NULL;
  if (gg_rt_pack_weight(2, K, N, W, 1, K, &pk)) exit(1);
  double best = 1e9, err = 0;
  for (int r = 0; r < 5; r++) {
    double t = now();
    gg_rt_hgemm(3, M, N, K, X, K, 1, W, 1, K, pk, Y, N, 1, 0, NULL, 0, 0, 0);
    t = now() - t;
    if (t < best) best = t;
  }
  for (int64_t i = 0; i < M; i += 37)
    for (int64_t j = 0; j < N; j += 11) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)gg_bf2f(X[i * K + k]) * gg_bf2f(W[j * K + k]);
      err = fmax(err, fabs(s - gg_bf2f(Y[i * N + j])) / (fabs(s) + 1e-3));
    }
  printf("bf16 linear M %6lld N %5lld K %5lld  %s  %7.1f GFLOP/s  max rel diff %.2g\n", (long long)M, (long long)N, (long long)K,
         gg_rt_amx_ok() ? "AMX   " : "no AMX", 2.0 * (double)M * (double)N * (double)K / best / 1e9, err);
  free(xf), free(wf), free(X), free(W), free(Y), free(pk);
}

int main(void) {
  (void)amx_rows_gemm;   /* the convolutions' AMX path, for gg_rt_conv.c (not included here) */
  /* bfloat16 (gg_rt_hgemm; any x86-64): BERT-base at batch 4, sequence 128, and GPT-2 at 4 x 256 */
  hlinear(512, 768, 768);
  hlinear(512, 3072, 768);
  hlinear(512, 768, 3072);
  hlinear(1024, 2304, 768);
  hlinear(2048, 2048, 2048);
  if (!gg_rt_packed_ok()) {
    puts("no AVX-512 here (or GCC_GRAPH_BLAS_ONLY is set): the runtime's kernel does not run");
    return 0;
  }
  printf("threads %d, PK_KC %d, PK_TALL_MIN %d, PK_TILES_PER_THREAD %d, PK_TILE_ROWS %d (%d at %d threads or more)\n", omp_get_max_threads(), PK_KC,
         PK_TALL_MIN, PK_TILES_PER_THREAD, PK_TILE_ROWS, PK_TILE_ROWS_MANY, PK_MANY_THREADS);
  /* BERT-base at batch 4, sequence 128: the QKV / out projections, FFN up, FFN down; GPT-2 at batch 4, 256: c_attn */
  linear(512, 768, 768);
  linear(512, 3072, 768);
  linear(512, 768, 3072);
  linear(1024, 2304, 768);
  linear(2048, 2048, 2048);
  /* ResNet-50 at batch 8: the 3x3 convolutions of its four stages */
  conv(8, 56, 64, 64, 3);
  conv(8, 28, 128, 128, 3);
  conv(8, 14, 256, 256, 3);
  conv(8, 7, 512, 512, 3);
  /* ... and its 1x1 convolutions, one of each shape */
  conv(8, 56, 64, 64, 1), conv(8, 56, 64, 256, 1), conv(8, 56, 256, 64, 1), conv(8, 56, 256, 128, 1);
  conv(8, 28, 128, 512, 1), conv(8, 28, 512, 128, 1), conv(8, 14, 256, 1024, 1), conv(8, 14, 1024, 256, 1);
  conv(8, 7, 512, 2048, 1), conv(8, 7, 2048, 512, 1);
  return 0;
}
